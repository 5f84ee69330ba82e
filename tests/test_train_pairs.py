"""Paired seq2seq corpora (`data.kind=pairs`) trained by the encoder_decoder family: the pairs'
round trip through the token cache, the loss on target tokens only, accounting, run keys,
resume and bad input. Tiny models on the byte tokenizer, seconds each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from input_helpers import assert_nothing_written, one_error_line
from train_helpers import compose, history, runs_df, uri_of

from models import ModelConfig, build_model, count_params, flops_per_sequence
from training import objectives
from training.config import ConfigError, DataConfig
from training.data import PairSplit, load_pairs, load_tokenizer, prepare_data
from training.spec import resolve_config

ROOT = Path(__file__).resolve().parents[1]
N_EXAMPLE_PAIRS = 1500
pytestmark = pytest.mark.usefixtures("one_thread")
TINY_PAIRS = [
    "model=vanilla_seq2seq",
    "data=pairs",
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=2",
    "train.seq_len=64",  # source 32 + target 32 positions per pair
    "train.batch_tokens=512",  # 8 pairs per step
    "train.tokens=16384",  # 32 steps
    "train.warmup=4",
    "train.log_every=4",
    "train.eval_every=8",
    "train.progress=none",
    "data.eval_tokens=1024",  # 16 validation pairs
    "data.tokenizer=byte",
]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return path


@pytest.fixture(scope="session")
def example_jsonl(tmp_path_factory) -> Path:
    """The first N_EXAMPLE_PAIRS pairs of the stdlib example corpus, written by its CLI."""
    from training.example_pairs import main

    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    main([str(path), "--limit", str(N_EXAMPLE_PAIRS)])
    return path


@pytest.fixture(scope="session")
def odd_records() -> list[dict]:
    """Pairs a tokenizer or a JSON reader could mangle: non-ASCII, quotes, tabs, newlines,
    leading and trailing spaces."""
    return [
        {
            "source": f'  Zeile {i}: "ü" ✓ {"x" * (i % 7)}\n\tnext line ',
            "target": f"def f{i}(x='é') ",
        }
        for i in range(80)
    ]


@pytest.fixture
def lab(tmp_path, example_jsonl, cache_dir, store) -> list[str]:
    return [
        f"tracking.uri={store}",
        f"tracking.experiment={tmp_path.name}",
        f"paths.runs_dir={tmp_path / 'runs'}",
        f"paths.cache_dir={cache_dir}",
        *TINY_PAIRS,
        f"data.path={example_jsonl}",
    ]


def pairs_config(path: Path, **fields) -> DataConfig:
    return DataConfig.from_dict({"source": "text", "kind": "pairs", "path": str(path), **fields})


def seq2seq(vocab: int, **fields) -> ModelConfig:
    shape = {"n_layers": 1, "d_model": 16, "n_heads": 2, "max_seq_len": 64, **fields}
    return ModelConfig(family="encoder_decoder", vocab_size=vocab + 1, **shape)


# ---------------------------------------------------------------- the pairs, through the cache
@pytest.mark.parametrize("tokenizer", ["byte", "bpe"])
def test_decoded_inputs_and_targets_are_the_files_pairs(tmp_path, odd_records, tokenizer):
    cfg = pairs_config(
        write_jsonl(tmp_path / "odd.jsonl", odd_records), tokenizer=tokenizer, vocab_size=300
    )
    data = prepare_data(cfg, tmp_path / "cache")
    tok = load_tokenizer(data.cache_dir)
    seq_len = 512  # no truncation: every side is shorter than 255 tokens
    objective = objectives.build(seq2seq(data.vocab_size), data.vocab_size, seq_len, cfg)
    decoded = []
    for split in (data.train, data.val):
        src, mask, decoder_inputs, targets = objective.val_batches(split)
        assert src.shape == mask.shape == (len(split), 256)
        assert decoder_inputs.shape == targets.shape == (len(split), 256)
        for row in range(len(split)):
            source = src[row][mask[row]].tolist()
            target = targets[row][targets[row] != -100].tolist()
            assert source[-1] == target[-1] == data.eot_id  # each side ends in end-of-text
            # teacher forcing: the start id, then the target shifted right
            assert decoder_inputs[row, 0] == objective.start_id == data.vocab_size
            assert decoder_inputs[row, 1 : len(target)].tolist() == target[:-1]
            decoded.append({"source": tok.decode(source[:-1]), "target": tok.decode(target[:-1])})
    key = lambda r: (r["source"], r["target"])  # noqa: E731
    assert sorted(decoded, key=key) == sorted(odd_records, key=key)
    assert 0 < len(data.val) < len(data.train)


def test_the_validation_pairs_do_not_depend_on_the_files_order(tmp_path, odd_records):
    forward = prepare_data(
        pairs_config(write_jsonl(tmp_path / "a.jsonl", odd_records), tokenizer="byte"),
        tmp_path / "c1",
    )
    backward = prepare_data(
        pairs_config(write_jsonl(tmp_path / "b.jsonl", odd_records[::-1]), tokenizer="byte"),
        tmp_path / "c2",
    )

    def pairs(split: PairSplit) -> set[tuple[bytes, bytes]]:
        return {tuple(bytes(side.tolist()) for side in split.pair(i)) for i in range(len(split))}

    assert pairs(forward.val) == pairs(backward.val) != set()
    assert pairs(forward.train) == pairs(backward.train)


def test_long_sides_are_truncated_to_their_lengths_and_end_in_end_of_text():
    split = PairSplit(np.arange(1, 31, dtype=np.uint16), np.array([0, 3, 5, 25, 30]), eot_id=0)
    data = DataConfig.from_dict({"source": "stdlib", "kind": "pairs", "src_len": 6})
    objective = objectives.build(seq2seq(256), 256, 16, data)  # source 6, target 10
    src, mask, _, targets = objective.collate(split, [0, 1])
    assert src.tolist() == [[1, 2, 3, 0, 0, 0], [6, 7, 8, 9, 10, 0]]
    assert mask.sum(1).tolist() == [4, 6]
    assert targets.tolist() == [
        [4, 5, 0] + [-100] * 7,
        [26, 27, 28, 29, 30, 0] + [-100] * 4,
    ]
    with pytest.raises(ValueError):  # a split of pairs: the stream lengths come from offsets
        objective.collate(split, [2])


# ---------------------------------------------------------------- the loss
def test_the_loss_reads_target_tokens_only_and_ignores_padding():
    torch.manual_seed(0)
    # init_std 0.5: an untrained model at 0.02 is ~uniform whatever its source says
    cfg = seq2seq(256, pos_encoding="sinusoidal", init_std=0.5)
    model = build_model(cfg).eval()
    rng = np.random.default_rng(0)
    lengths = [(3, 2), (7, 5), (5, 7)]  # (source, target) tokens per pair
    offsets = np.cumsum([0] + [n for pair in lengths for n in pair])
    split = PairSplit(rng.integers(1, 256, offsets[-1]).astype(np.uint16), offsets, eot_id=0)
    pairs = DataConfig.from_dict({"source": "stdlib", "kind": "pairs"})
    short = objectives.build(cfg, 256, 16, pairs)  # 8 + 8 positions per pair
    long = objectives.build(cfg, 256, 48, pairs)  # 24 + 24: more padding, same pairs
    batch = short.collate(split, range(3))
    src, mask, decoder_inputs, targets = batch
    loss = short.loss(model, *batch)

    logits, _ = model(src, decoder_inputs, src_mask=mask)  # (B, T, V)
    real = targets != -100
    assert real.sum() == sum(t + 1 for _, t in lengths)  # each target and its end-of-text
    torch.testing.assert_close(loss, F.cross_entropy(logits[real], targets[real]))
    torch.testing.assert_close(loss, long.loss(model, *long.collate(split, range(3))))

    noise = torch.randint(1, 256, src.shape, generator=torch.Generator().manual_seed(1))
    padded_src = torch.where(mask, src, noise)  # other ids where the source is padding
    padded_dec = torch.where(
        real | (decoder_inputs == short.start_id), decoder_inputs, noise[:, :8]
    )
    torch.testing.assert_close(loss, short.loss(model, padded_src, mask, padded_dec, targets))
    # the mask is what hides the padding (unmasked, the noise would enter the loss)
    unmasked = short.loss(model, padded_src, torch.ones_like(mask), decoder_inputs, targets)
    assert abs(unmasked - loss) > 1e-3
    one_token = src.clone()
    one_token[1, 2] = (one_token[1, 2] + 1) % 256
    assert abs(short.loss(model, one_token, mask, decoder_inputs, targets) - loss) > 1e-3


# ---------------------------------------------------------------- training runs
@pytest.mark.slow
def test_pairs_train_and_record_their_accounting(lab):
    from training.train import train

    result = train(compose(*lab))
    assert result.status == "FINISHED"
    row = runs_df(lab).iloc[0]
    losses = [v for _, v in history(uri_of(lab), result.run_id, "train_loss")]
    assert losses[-1] < losses[0] - 0.3, losses
    assert result.final_val_loss < 5.3  # uniform over 257 ids: ln 257 = 5.55

    spec = resolve_config(compose(*lab))
    cfg, trained, pairs = spec.model, 16384, 16384 // 64
    assert cfg.vocab_size == 256 + 1  # bytes + the decoder's start id
    assert row["params.objective.name"] == "seq2seq_pairs"
    assert row["params.objective.tokens_counted"] == "source+target"
    assert (row["params.objective.src_len"], row["params.objective.tgt_len"]) == ("32", "32")
    assert int(row["params.tokens_trained"]) == trained
    pc = count_params(cfg)
    # both stacks, per pair: 6 (N_enc S + N_dec T), D = S + T = seq_len positions per pair
    assert float(row["params.flops_6nd"]) == 6 * (pc.encoder * 32 + pc.decoder * 32) * pairs
    fl = flops_per_sequence(cfg, 32, src_len=32)
    assert float(row["params.flops_exact"]) == fl.exact * pairs
    assert float(row["params.flops_per_token_exact"]) == fl.exact / 64
    n_train, n_val = int(row["params.data_train_pairs"]), int(row["params.data_val_pairs"])
    assert n_train + n_val == N_EXAMPLE_PAIRS
    assert int(row["params.data_train_tokens"]) == n_train * 64  # D's units: pairs x seq_len
    assert row["metrics.epochs"] == pytest.approx(trained / (n_train * 64))
    assert 0 < float(row["params.data_truncated_sources"]) < 1  # byte sides over 31 tokens


@pytest.mark.slow
def test_a_resumed_pairs_run_is_bit_identical(lab, tmp_path, monkeypatch):
    """Interrupted after step 13 (last checkpoint at step 8), the rerun resumes from the
    checkpoint and ends with the uninterrupted run's losses, bit for bit."""
    import training.train as loop
    import training.trainer as trainer

    overrides = [*lab, "train.checkpoint_every=8", "train.tokens=8192"]
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
    resumed = loop.train(compose(*overrides))
    clean = [*overrides, "tracking.experiment=clean", f"paths.runs_dir={tmp_path / 'clean'}"]
    uninterrupted = loop.train(compose(*clean))
    assert resumed.run_id == runs_df(lab).iloc[0]["run_id"] and not resumed.reused
    assert resumed.final_train_loss == uninterrupted.final_train_loss
    assert resumed.final_val_loss == uninterrupted.final_val_loss


def test_a_sweep_plans_pairs_with_the_runs_accounting(comp):
    """`sweeps.run`'s plan (driver.facts) counts a pairs point as the run records it: per
    position of a pair, both stacks over the source and target lengths."""
    from sweeps import driver
    from sweeps.job import training_config

    overrides = [
        "model=vanilla_seq2seq",
        "data=stdlib_pairs",
        "model.size=3e4",
        "train.seq_len=64",
        "data.src_len=40",
    ]
    cfg = comp(overrides)
    facts = driver.facts(cfg)
    spec = resolve_config(training_config(cfg))  # what the sweep's job trains
    pc, fl = count_params(spec.model), flops_per_sequence(spec.model, 24, src_len=40)
    assert facts.run_key == spec.run_key
    assert facts.flops_per_token == fl.exact / 64
    assert facts.flops_6nd_per_token == 6 * (pc.encoder * 40 + pc.decoder * 24) / 64


# ---------------------------------------------------------------- run keys
def test_the_run_key_follows_the_pairs_not_their_path(tmp_path, odd_records):
    def key(path: Path, **data) -> str:
        cfg = {
            "model": {"family": "encoder_decoder"},
            "data": {"source": "text", "kind": "pairs", "path": str(path), **data},
            "train": {"seq_len": 32, "batch_tokens": 256},
        }
        return resolve_config(cfg).run_key

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    path = write_jsonl(tmp_path / "a" / "pairs.jsonl", odd_records)
    copy = write_jsonl(tmp_path / "b" / "pairs.jsonl", odd_records)
    base = key(path)
    assert key(copy) == base  # the same pairs elsewhere: the same run
    assert key(path, src_len=8) != base
    edited = [*odd_records[:-1], {**odd_records[-1], "target": "def g()"}]
    write_jsonl(path, edited)
    assert key(path) != base
    renamed = [{"src": r["source"], "tgt": r["target"]} for r in odd_records]
    write_jsonl(copy, renamed)
    assert key(copy, source_field="src", target_field="tgt") not in (base, key(path))


def test_a_text_corpus_keeps_its_config_and_key(tmp_path):
    """The pair fields are left out of a text corpus' config (params and run key)."""
    from training.config import PAIR_FIELDS

    assert not set(PAIR_FIELDS) & set(DataConfig().to_dict())
    (tmp_path / "doc.txt").write_text("some text to learn\n" * 200)
    cfg = {"data": {"source": "text", "path": str(tmp_path / "doc.txt")}}
    explicit = {"data": {**cfg["data"], "kind": "text", "source_field": "source"}}
    assert resolve_config(cfg).run_key == resolve_config(explicit).run_key


# ---------------------------------------------------------------- the example corpus
@pytest.mark.slow
def test_the_example_corpus_is_what_data_stdlib_pairs_trains_on(tmp_path):
    out = tmp_path / "all.jsonl"
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "training.example_pairs", str(out)],
        env=env,
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) > 1000
    assert all(
        r["source"].strip() and r["target"].startswith(("def ", "async def ")) for r in records
    )
    from_file = load_pairs(pairs_config(out))
    derived = load_pairs(DataConfig.from_dict({"source": "stdlib", "kind": "pairs"}))
    # the same pairs in the same order (another process, another hash seed)
    assert from_file.fingerprint.rsplit("-", 1)[1] == derived.fingerprint.rsplit("-", 1)[1]
    assert [p[1:] for p in from_file.pairs] == [p[1:] for p in derived.pairs]


# ---------------------------------------------------------------- bad input
BAD_RECORDS = [
    (
        '{"source": "a", "target": "b"}\n{"source": "a", "target": \n',
        "data.path: {file}:2 is not JSON",
    ),
    ('["a", "b"]\n', "data.path: {file}:1 is not a JSON object"),
    (
        '{"source": "a", "tgt": "b"}\n',
        "data.target_field: 'target' not in {file}:1; fields: source, tgt",
    ),
    ('{"source": "", "target": "b"}\n', "data.path: {file}:1: 'source' is empty"),
    ('{"source": "a", "target": " \\n "}\n', "data.path: {file}:1: 'target' is empty"),
    ('{"source": "a", "target": 3}\n', "data.path: {file}:1: 'target' is int"),
    ("\n\n", "data.path: {file}: no pairs"),
]


@pytest.mark.parametrize("text, message", BAD_RECORDS)
def test_bad_records_are_one_line_exit_2_and_write_nothing(place, capsys, text, message):
    from training.train import _main

    path = place["corpus"] / "pairs.jsonl"
    path.write_text(text)
    cfg = compose(*place["overrides"], "model=vanilla_seq2seq", "data=pairs", f"data.path={path}")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    assert one_error_line(capsys.readouterr().err).startswith(message.format(file=path))
    assert_nothing_written(place)


BAD_SETTINGS = [
    (
        ["model=llama"],
        "data.kind: pairs train model.family=encoder_decoder only, got model.family=decoder",
    ),
    (
        ["model=vanilla", "model.family=encoder"],
        "data.kind: pairs train model.family=encoder_decoder only",
    ),
    (["train.seq_len=64", "data.src_len=63"], "data.src_len: 63 source and 1 target positions"),
    (
        ["train.seq_len=3", "train.batch_tokens=3", "data.eval_tokens=3"],
        "data.src_len: 1 source and 2 target positions",
    ),
    (["data.path={corpus}/missing.jsonl"], "data.path: {corpus}/missing.jsonl does not exist"),
    (["data.path={corpus}/empty.txt"], "data.path: {corpus}/empty.txt is not .jsonl"),
    (["data.target_field=source"], "data.target_field: 'source' is also data.source_field"),
    (["data=text", "data.src_len=8"], "data.src_len: applies to data.kind=pairs only"),
    (
        ["data=hf", "data.kind=pairs", "data.name=x"],
        "data.kind: pairs are read from data.source=text",
    ),
]


@pytest.mark.parametrize("overrides, message", BAD_SETTINGS)
def test_bad_pair_settings_are_one_line_exit_2_and_write_nothing(place, capsys, overrides, message):
    from training.train import _main

    good = write_jsonl(place["corpus"] / "good.jsonl", [{"source": "a", "target": "b"}])
    overrides = [o.format(corpus=place["corpus"]) for o in overrides]
    cfg = compose(
        *place["overrides"], "model=vanilla_seq2seq", "data=pairs", f"data.path={good}", *overrides
    )
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    assert one_error_line(capsys.readouterr().err).startswith(
        message.format(corpus=place["corpus"])
    )
    assert_nothing_written(place)


def test_too_few_validation_pairs_fail_before_the_store(place, capsys, odd_records):
    from training.train import _main

    path = write_jsonl(place["corpus"] / "odd.jsonl", odd_records)
    cfg = compose(
        *place["overrides"],
        "model=vanilla_seq2seq",
        "data=pairs",
        f"data.path={path}",
        "data.tokenizer=byte",
        "train.seq_len=64",
        "data.eval_tokens=65536",
    )
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith(
        "data.eval_tokens=65536: 1024 pairs of train.seq_len=64, but the validation split has only"
    ), message
    assert sorted(p.name for p in place["out"].iterdir()) == ["cache"]  # no store, no runs/


def test_a_split_without_validation_pairs_is_refused(tmp_path):
    cfg = pairs_config(
        write_jsonl(tmp_path / "one.jsonl", [{"source": "a", "target": "b"}]), tokenizer="byte"
    )
    with pytest.raises(
        ConfigError, match=r"^data\.val_fraction=0\.05: the split of 1 pairs left no"
    ):
        prepare_data(cfg, tmp_path / "cache")
