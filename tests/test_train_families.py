"""The encoder (masked LM) and encoder_decoder (span corruption) families through the training
loop: tiny models on the byte tokenizer, seconds each, checked through MLflow."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from train_helpers import compose, history, runs_df, uri_of, value_of

from models import build_model, count_params, flops_per_sequence, flops_per_token
from training import objectives
from training.config import ConfigError
from training.spec import resolve_config

pytestmark = pytest.mark.usefixtures("one_thread")
FAMILIES = {
    "encoder": ["model=vanilla", "model.family=encoder"],
    "encoder_decoder": ["model=vanilla_seq2seq"],
}


def t5_lengths(seq_len: int) -> tuple[int, int, int]:
    """(spans, source, target) lengths by T5's formulas (Raffel et al. 2020): round(15%) noise
    tokens in round(noise / 3) spans; the source keeps the rest plus a sentinel per span, the
    target holds a sentinel per span and the noise."""
    noise = round(seq_len * 0.15)
    spans = max(round(noise / 3), 1)
    return spans, seq_len - noise + spans, noise + spans


def test_span_lengths_follow_t5s_formulas():
    for seq_len in (8, 32, 100, 256, 512):
        assert objectives.span_lengths(seq_len) == t5_lengths(seq_len)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_trains_its_loss_falls_and_records_its_accounting(lab, family):
    from training.train import train

    result = train(compose(*lab, *FAMILIES[family]))
    assert result.status == "FINISHED"
    row = runs_df(lab).iloc[0]
    assert row["params.model.family"] == family
    losses = [v for _, v in history(uri_of(lab), result.run_id, "train_loss")]
    assert losses[-1] < losses[0] - 0.3, losses
    assert result.final_val_loss < 5.3  # uniform over 257+ ids: ln 257 = 5.55

    spec = resolve_config(compose(*lab, *FAMILIES[family]))
    cfg, seq_len, trained = spec.model, 32, 8192
    assert int(row["params.tokens_trained"]) == trained
    pc = count_params(cfg)
    assert (
        int(row["params.n_params"])
        == pc.total
        == sum(p.numel() for p in build_model(cfg).parameters())
    )
    if family == "encoder":
        assert cfg.vocab_size == 256 + 1  # bytes + [MASK]
        assert row["params.objective.tokens_counted"] == "input"
        assert float(row["params.flops_6nd"]) == 6 * pc.non_embedding * trained
        assert float(row["params.flops_exact"]) == flops_per_token(cfg, seq_len).exact * trained
    else:
        spans, src, tgt = t5_lengths(seq_len)
        assert cfg.vocab_size == 256 + spans + 1  # bytes + sentinels + start
        assert row["params.objective.tokens_counted"] == "text"
        assert (int(row["params.objective.src_len"]), int(row["params.objective.tgt_len"])) == (
            src,
            tgt,
        )
        sequences = trained // seq_len
        fl = flops_per_sequence(cfg, tgt, src_len=src)
        # both stacks: 6 (N_enc S + N_dec T) per sequence, not 6 N D
        assert (
            float(row["params.flops_6nd"]) == 6 * (pc.encoder * src + pc.decoder * tgt) * sequences
        )
        assert float(row["params.flops_exact"]) == fl.exact * sequences


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_resumed_run_is_bit_identical(lab, tmp_path, monkeypatch, family):
    """Interrupted after step 13 (last checkpoint at step 8), the rerun resumes from the
    checkpoint and ends with the uninterrupted run's losses, bit for bit."""
    import training.train as loop
    import training.trainer as trainer
    from training.checkpoint import load_checkpoint

    overrides = [*lab, *FAMILIES[family], "train.checkpoint_every=8"]
    real_step, calls = trainer.Trainer.take_step, []

    def interrupted_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 14:
            raise KeyboardInterrupt
        return real_step(*args, **kwargs)

    monkeypatch.setattr(trainer.Trainer, "take_step", staticmethod(interrupted_step))
    with pytest.raises(KeyboardInterrupt):
        loop.train(compose(*overrides))
    monkeypatch.setattr(trainer.Trainer, "take_step", staticmethod(real_step))
    assert list(runs_df(lab)["status"]) == ["KILLED"]
    saved = load_checkpoint(next((tmp_path / "runs").glob("*/last.pt")))
    # the windows drawn, which seed the masks: what a checkpoint without them resumes from
    assert saved["sampler"]["drawn"] == saved["step"] * 8 > 0  # 256 / 32 windows per step
    resumed = loop.train(compose(*overrides))
    clean = [*overrides, "tracking.experiment=clean", f"paths.runs_dir={tmp_path / 'clean'}"]
    uninterrupted = loop.train(compose(*clean))
    assert resumed.run_id == runs_df(lab).iloc[0]["run_id"] and not resumed.reused
    assert resumed.final_train_loss == uninterrupted.final_train_loss
    assert resumed.final_val_loss == uninterrupted.final_val_loss


def test_mlm_loss_counts_only_the_selected_tokens():
    from models import ModelConfig

    torch.manual_seed(0)
    cfg = ModelConfig(
        family="encoder", vocab_size=257, max_seq_len=32, n_layers=1, d_model=16, n_heads=2
    )
    model = build_model(cfg)
    mlm = objectives.build(cfg, 256, 32)

    class Windows:  # a sampler of fixed windows (the wrapper reads its batch geometry)
        rank, world_size, micro_batch = 0, 1, 4

        def next(self):
            x = torch.randint(256, (4, 33), generator=torch.Generator().manual_seed(1))
            return x[:, :-1], x[:, 1:]

    inputs, labels = mlm.wrap(Windows(), seed=0).next()
    selected = labels != -100
    assert selected.sum(1).tolist() == [5] * 4  # round(15% of 32) in every row
    assert (inputs[~selected] == Windows().next()[0][~selected]).all()  # unselected untouched
    assert (inputs == 256).any()  # [MASK] is the id after the tokenizer's
    logits, _ = model(inputs)
    by_hand = F.cross_entropy(logits[selected], labels[selected])
    torch.testing.assert_close(mlm.loss(model, inputs, labels), by_hand)
    # the loss ignores every unselected position's prediction: all-position CE differs
    assert not torch.isclose(
        by_hand, F.cross_entropy(logits.flatten(0, 1), Windows().next()[0].flatten())
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_validation_batches_are_fixed_per_corpus_and_objective(family):
    import numpy as np

    from models import ModelConfig

    cfg = ModelConfig(family=family, vocab_size=256 + objectives.extra_ids(family, 32))
    windows = np.random.default_rng(0).integers(0, 256, (6, 33))
    first = objectives.build(cfg, 256, 32).val_batches(windows)
    again = objectives.build(cfg, 256, 32).val_batches(windows)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], torch.from_numpy(windows[:, :-1])[:, : first[0].shape[1]])


def test_run_keys_take_the_objective_for_non_decoder_families_only(corpus):
    base = {
        "data": {"source": "text", "path": str(corpus), "tokenizer": "byte"},
        "train": {"seq_len": 32, "batch_tokens": 256, "tokens": 8192},
    }
    keys = {
        family: resolve_config({**base, "model": {"family": family}}).run_key
        for family in ("decoder", "encoder", "encoder_decoder")
    }
    assert len(set(keys.values())) == 3
    assert keys["decoder"] == resolve_config({**base, "model": {}}).run_key


def test_label_smoothing_is_refused_for_non_decoder_families(corpus):
    cfg = {
        "model": {"family": "encoder"},
        "data": {"source": "text", "path": str(corpus), "tokenizer": "byte"},
        "train": {"seq_len": 32, "batch_tokens": 256, "label_smoothing": 0.1},
    }
    with pytest.raises(ConfigError, match=r"^train\.label_smoothing: .*model\.family=encoder"):
        resolve_config(cfg)


def test_a_masked_batch_always_selects_a_token():
    """round(15%) of a one-token window is 0: without selecting at least one, every batch of
    such windows would have no label and a 0/0 loss."""
    from models import ModelConfig

    mlm = objectives.build(ModelConfig(family="encoder", vocab_size=257), 256, 1)
    for i in range(50):
        _, labels = mlm.corrupt(torch.tensor([[7], [8]]), [objectives.sample_generator(0, i)] * 2)
        assert labels.tolist() == [[7], [8]]


class _Windows:
    """A BatchSampler's geometry over a numbered stream: window k of the data order holds the
    tokens k*1000 .. k*1000+31 (k counted over all ranks, as the sampler draws)."""

    def __init__(self, rank: int, world_size: int, micro_batch: int):
        self.rank, self.world_size, self.micro_batch, self.calls = rank, world_size, micro_batch, 0

    def next(self):
        first = self.calls * self.world_size * self.micro_batch + self.rank * self.micro_batch
        self.calls += 1
        rows = torch.arange(first, first + self.micro_batch)[:, None] * 1000 + torch.arange(33)
        return rows[:, :-1] % 256, rows[:, 1:] % 256  # the byte ids; row order is the index

    def state_dict(self) -> dict:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.calls = state["calls"]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_window_gets_the_same_corruption_on_any_rank_and_world_size(family):
    """Each window's mask/corruption is a function of the seed and its global index: one
    process (micro-batch 2, 4 micro-steps) and 2 ranks (micro-batch 2, 2 micro-steps each)
    corrupt the 8 windows of a step identically; another seed corrupts them differently; and
    the wrapper's state resumes the count."""
    from models import ModelConfig

    cfg = ModelConfig(family=family, vocab_size=256 + objectives.extra_ids(family, 32))
    objective = objectives.build(cfg, 256, 32)

    def step(world: int, seed: int = 3) -> list[torch.Tensor]:
        """The step's 8 corrupted windows in global order, each part a (8, ...) tensor."""
        ranks = [objective.wrap(_Windows(r, world, 2), seed) for r in range(world)]
        calls = [[b.next() for _ in range(4 // world)] for b in ranks]  # [rank][call]
        in_order = [calls[r][c] for c in range(4 // world) for r in range(world)]
        return [torch.cat(parts) for parts in zip(*in_order, strict=True)]

    one, two = step(1), step(2)
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(one, step(1, seed=4), strict=True))
    batches = objective.wrap(_Windows(0, 1, 2), 3)
    batches.next()
    resumed = objective.wrap(_Windows(0, 1, 2), 3)
    resumed.load_state_dict(batches.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(batches.next(), resumed.next(), strict=True))


@pytest.mark.slow
def test_analysis_reads_the_k_an_encoder_decoder_run_logged(lab):
    """The analysis's C of a real run is what the run logged: flops_6nd, k = flops_6nd / 6ND
    (both stacks for encoder_decoder, recomputed here from the parameter split); a decoder-only
    store's runs keep C = 6 N D and get no column k."""
    from analysis.data import compute_factor
    from analysis.data.load import load_mlflow
    from training.train import train

    experiment = value_of(lab, "tracking.experiment")
    assert train(compose(*lab)).status == "FINISHED"  # a decoder
    decoder_only = load_mlflow(experiment, tracking_uri=uri_of(lab)).frame
    assert "k" not in decoder_only.columns and compute_factor.of_runs(decoder_only) == 1.0
    row = decoder_only.iloc[0]
    assert row["C"] == 6.0 * row["N"] * row["D"]

    result = train(compose(*lab, *FAMILIES["encoder_decoder"]))
    frame = load_mlflow(experiment, tracking_uri=uri_of(lab)).frame.set_index("run_id")
    ed = frame.loc[result.run_id]
    cfg = resolve_config(compose(*lab, *FAMILIES["encoder_decoder"])).model
    pc, (_, src, tgt) = count_params(cfg), t5_lengths(32)
    k = (pc.encoder * src + pc.decoder * tgt) / (pc.non_embedding * 32)  # per text token
    assert ed["N"] == pc.non_embedding and ed["D"] == 8192
    assert ed["k"] == pytest.approx(k, rel=1e-12) and 0.4 < k < 0.7
    logged = float(runs_df(lab).set_index("run_id").loc[result.run_id, "params.flops_6nd"])
    assert ed["C"] == pytest.approx(logged, rel=1e-12)
    assert compute_factor.of_runs(frame.loc[[result.run_id]]) == ed["k"]
    assert (frame.drop(index=result.run_id)["k"] == 1.0).all()  # the decoder next to it
