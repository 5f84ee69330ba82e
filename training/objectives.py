"""What each model family trains on: a registry from `model.family` to its objective.

An objective turns the sampler's token windows (the same corpus, the same `BatchSampler`, for
every family) into model inputs and a loss, fixes the validation batches, and knows its
accounting (what D counts, FLOPs per token):

- ``decoder`` -> ``NextToken``: next-token prediction on the windows as they are
  (``training.step.loss`` / ``evaluate``).
- ``encoder`` -> ``MaskedLMObjective``: BERT's masked LM (``corruption.mask_tokens``) on each
  window of ``seq_len`` tokens; the loss covers the selected tokens only. One extra id, [MASK].
  D counts input tokens (every token of the window; the loss reads about 15% of them).
- ``encoder_decoder`` -> ``SpanCorruption``: T5's span corruption (``corruption.
  span_corruption``) of each window of ``seq_len`` text tokens into a source of ``src_len``
  and a target of ``tgt_len`` tokens (fixed for a fixed ``seq_len``, so rows stack). Extra ids:
  one sentinel per span and a decoder start id. D counts the text tokens of the windows
  (``seq_len`` per sequence, what the corpus supplies); compute counts both stacks
  (``flops_per_sequence`` over ``src_len`` and ``tgt_len``), so C is not 6 x N x D here.

- ``encoder_decoder`` on a paired corpus (``data.kind=pairs``) -> ``PairedSeq2Seq``:
  teacher-forced cross-entropy on the target tokens only. Each pair fills ``seq_len``
  positions: a source of ``src_len`` (``data.src_len``, default ``seq_len // 2``) and a target
  of ``tgt_len = seq_len - src_len``; each side is truncated to its length less one and ends in
  end-of-text, sources are padded (and masked in the encoder), targets padded with -100 (no
  loss). One extra id: the decoder start. D counts the positions of the padded pairs (source +
  target, ``seq_len`` per pair, padding included: what the model computes on); compute as for
  span corruption, both stacks over ``src_len`` and ``tgt_len``. Pairs are drawn uniformly
  with replacement by the sampler's seeded generator (its state resumes them).

Masking and corruption draw each window's randomness from its own generator, seeded by the run's
``train.seed`` and the window's GLOBAL index in the data order (``sample_generator``; the
sampler draws every micro-step's windows for all ranks, so the k-th window drawn is the same on
any number of ranks). A window therefore gets the same mask whatever the world size and
whichever rank holds it: 2 ranks train on exactly one process's corrupted batch (as the
decoder's plain windows), and FSDP and DDP reproduce one process's losses. The index counts
windows drawn (``_Batches.drawn``, in the checkpointed sampler state), so a resumed run is
bit-identical. Validation batches are corrupted once with ``VAL_SEED`` (window i: index i),
independent of ``train.seed``: every run of a family on a corpus sees the same validation inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models import count_params, flops_per_sequence, flops_per_token
from training.config import ConfigError
from training.corruption import IGNORE_INDEX, mask_tokens, shift_right, span_corruption
from training.step import eval_starts, evaluate

MASK_PROB = 0.15  # BERT (Devlin et al. 2019, sec. 3.1)
NOISE_DENSITY, MEAN_SPAN = 0.15, 3.0  # T5 (Raffel et al. 2020, sec. 3.1.4)
VAL_SEED = 1234  # the validation batches' masking/corruption: the same for every run
TRAIN_STREAM, VAL_STREAM = 0, 1  # sample_generator's streams: no training window gets a val mask


def sample_generator(seed: int, index: int, stream: int = TRAIN_STREAM) -> torch.Generator:
    """The generator of the window at GLOBAL position `index` of the data order of a run seeded
    `seed`: a pure function of the three (numpy's SeedSequence mixes them into a 64-bit seed,
    so neighbouring indices get unrelated streams)."""
    mixed = np.random.SeedSequence(seed, spawn_key=(stream, index)).generate_state(1, np.uint64)
    return torch.Generator().manual_seed(int(mixed[0]))


@dataclass(frozen=True)
class Accounting:
    """Compute of training on `tokens` tokens (as the objective counts them)."""

    flops_6nd: float
    flops_exact: float
    flops_per_token_exact: float  # exact, per counted token (MFU)


class NextToken:
    """Decoder: next-token prediction."""

    family = "decoder"
    extra_ids = 0

    def __init__(self, model_cfg, tokenizer_vocab: int, seq_len: int):
        self.cfg, self.seq_len = model_cfg, seq_len

    @staticmethod
    def key_fields(seq_len: int) -> dict[str, Any]:
        return {}  # a decoder's run key holds no objective fields

    def params(self) -> dict[str, Any]:
        return {}

    def wrap(self, sampler, seed: int):
        return sampler  # (x, y) windows, used as they are

    def accounting(self, tokens: int) -> Accounting:
        fl = flops_per_token(self.cfg, self.seq_len).exact
        n = count_params(self.cfg).non_embedding_active  # MoE: C = 6 N_active D
        return Accounting(6 * n * tokens, fl * tokens, fl)

    def val_batches(self, windows: np.ndarray):
        return windows  # (n, T + 1): training.step.evaluate shifts them itself

    def evaluate(self, model, val, micro_batch: int, accelerator) -> float:
        return evaluate(model, val, micro_batch, accelerator)


class _Objective:
    """Shared by the non-decoder objectives: the seeded wrapper and the evaluation loop."""

    family = ""

    def wrap(self, sampler, seed: int) -> _Batches:
        """`sampler`'s windows corrupted, each by its own `sample_generator(seed, index)`."""
        return _Batches(sampler, self, seed)

    def evaluate(self, model, val: list[torch.Tensor], micro_batch: int, accelerator) -> float:
        """Token-weighted mean loss over the fixed validation batches (split across
        processes); ``model`` is the plain module (see ``training.step.evaluate``)."""
        mine = [t[accelerator.process_index :: accelerator.num_processes] for t in val]
        total = torch.zeros(2, device=accelerator.device, dtype=torch.float64)
        model.eval()
        with torch.no_grad(), accelerator.autocast():
            for i in eval_starts(len(mine[0]), len(val[0]), micro_batch, accelerator, model):
                if i is None:  # a forward that only matches the other ranks' (sharded model)
                    self.loss(model, *[t[:1].to(accelerator.device) for t in val])
                    continue
                batch = [t[i : i + micro_batch].to(accelerator.device) for t in mine]
                n = (batch[-1] != IGNORE_INDEX).sum()  # the labels are last
                mean = self.loss(model, *batch).double()  # 0/0 where a slice selects none
                total[0] += torch.where(n > 0, mean * n, 0.0)
                total[1] += n
        model.train()
        total = accelerator.reduce(total, "sum")
        return (total[0] / total[1]).item()

    def val_batches(self, windows: np.ndarray) -> list[torch.Tensor]:
        gens = [sample_generator(VAL_SEED, i, VAL_STREAM) for i in range(len(windows))]
        return list(self.corrupt(torch.from_numpy(windows[:, :-1]), gens))

    def params(self) -> dict[str, Any]:
        return {f"objective.{k}": v for k, v in self.key_fields(self.seq_len).items()}


class MaskedLMObjective(_Objective):
    """Encoder: BERT's masked LM; [MASK] is the id after the tokenizer's."""

    family = "encoder"
    extra_ids = 1

    def __init__(self, model_cfg, tokenizer_vocab: int, seq_len: int):
        self.cfg, self.seq_len = model_cfg, seq_len
        self.mask_id = tokenizer_vocab

    @staticmethod
    def key_fields(seq_len: int) -> dict[str, Any]:
        return {"name": "mlm", "mask_prob": MASK_PROB, "tokens_counted": "input"}

    def corrupt(self, x: torch.Tensor, gens: list[torch.Generator]) -> tuple[torch.Tensor, ...]:
        """Row i masked from `gens[i]`. Random replacements are uniform over the model's
        vocabulary, as in BERT. Every row selects the same count (>= 1: no 0/0 loss), so the
        mean over a batch's selected tokens is the mean of its rows' means."""
        rows = [
            mask_tokens(row[None], mask_id=self.mask_id, vocab_size=self.mask_id + 1, generator=g)
            for row, g in zip(x, gens, strict=True)
        ]
        return torch.cat([r[0] for r in rows]), torch.cat([r[1] for r in rows])

    def loss(self, model, inputs, labels):
        return model(inputs, labels, return_logits=False)[1]  # mean over selected tokens

    accounting = NextToken.accounting  # one stack over every input token, as the decoder


class _EncoderDecoderObjective(_Objective):
    """Shared by the encoder-decoder objectives: `tokens` fill tokens / seq_len sequences of
    `src_len` source and `tgt_len` target positions, each position through one stack."""

    cfg: Any
    seq_len: int
    src_len: int
    tgt_len: int

    def accounting(self, tokens: int) -> Accounting:
        fl = flops_per_sequence(self.cfg, self.tgt_len, src_len=self.src_len)
        sequences = tokens / self.seq_len
        return Accounting(fl.six_n * sequences, fl.exact * sequences, fl.exact / self.seq_len)


class SpanCorruption(_EncoderDecoderObjective):
    """Encoder-decoder: T5's span corruption; ids after the tokenizer's: the sentinels, then
    the decoder's start id."""

    family = "encoder_decoder"

    def __init__(self, model_cfg, tokenizer_vocab: int, seq_len: int):
        self.cfg, self.seq_len = model_cfg, seq_len
        n_spans, self.src_len, self.tgt_len = span_lengths(seq_len)
        self.sentinel_ids = list(range(tokenizer_vocab, tokenizer_vocab + n_spans))
        self.start_id = tokenizer_vocab + n_spans

    @staticmethod
    def extra_ids_for(seq_len: int) -> int:
        return span_lengths(seq_len)[0] + 1  # sentinels + start

    @staticmethod
    def key_fields(seq_len: int) -> dict[str, Any]:
        _, src_len, tgt_len = span_lengths(seq_len)
        return {
            "name": "span_corruption",
            "noise_density": NOISE_DENSITY,
            "mean_span": MEAN_SPAN,
            "tokens_counted": "text",
            "src_len": src_len,
            "tgt_len": tgt_len,
        }

    def corrupt(self, x: torch.Tensor, gens: list[torch.Generator]) -> tuple[torch.Tensor, ...]:
        """Row i corrupted from `gens[i]`; every row's source and target have the same lengths
        (so the target tokens' mean is the mean of the rows' means, on any split of rows)."""
        pairs = [
            span_corruption(row, sentinel_ids=self.sentinel_ids, generator=g)
            for row, g in zip(x, gens, strict=True)
        ]
        src = torch.stack([p[0] for p in pairs])  # (B, src_len)
        tgt = torch.stack([p[1] for p in pairs])  # (B, tgt_len)
        return src, shift_right(tgt, self.start_id), tgt

    def loss(self, model, src, decoder_inputs, targets):
        return model(src, decoder_inputs, targets, return_logits=False)[1]


def span_lengths(seq_len: int) -> tuple[int, int, int]:
    """(spans, source length, target length) of span-corrupting a window of ``seq_len``
    tokens: ``span_corruption``'s lengths depend on the length alone, found by running it."""
    g = torch.Generator().manual_seed(0)
    src, tgt = span_corruption(
        torch.zeros(seq_len, dtype=torch.long), sentinel_ids=range(1, seq_len + 1), generator=g
    )
    n_spans = (len(src) + len(tgt) - seq_len) // 2
    return n_spans, len(src), len(tgt)


class PairedSeq2Seq(_EncoderDecoderObjective):
    """Encoder-decoder on (source, target) pairs; the decoder's start id is the id after the
    tokenizer's."""

    family = "encoder_decoder"
    extra_ids = 1

    def __init__(self, model_cfg, tokenizer_vocab: int, seq_len: int, src_len: int):
        self.cfg, self.seq_len = model_cfg, seq_len
        self.src_len, self.tgt_len = src_len, seq_len - src_len
        self.start_id = tokenizer_vocab

    @staticmethod
    def pair_key_fields(seq_len: int, src_len: int) -> dict[str, Any]:
        return {
            "name": "seq2seq_pairs",
            "tokens_counted": "source+target",
            "src_len": src_len,
            "tgt_len": seq_len - src_len,
        }

    def params(self) -> dict[str, Any]:
        fields = self.pair_key_fields(self.seq_len, self.src_len)
        return {f"objective.{k}": v for k, v in fields.items()}

    def collate(self, split, indices) -> tuple[torch.Tensor, ...]:
        """(src, src_mask, decoder_inputs, targets) of the pairs `indices` of a PairSplit:
        src, src_mask (B, src_len); decoder_inputs, targets (B, tgt_len)."""
        S, T, eot = self.src_len, self.tgt_len, split.eot_id
        src = np.full((len(indices), S), eot, dtype=np.int64)  # padding: masked, never read
        mask = np.zeros((len(indices), S), dtype=bool)
        tgt = np.full((len(indices), T), IGNORE_INDEX, dtype=np.int64)
        for row, i in enumerate(indices):
            source, target = split.pair(i)
            source, target = source[: S - 1], target[: T - 1]  # room for end-of-text
            src[row, : len(source)], src[row, len(source)] = source, eot
            mask[row, : len(source) + 1] = True
            tgt[row, : len(target)], tgt[row, len(target)] = target, eot
        targets = torch.from_numpy(tgt)
        return (
            torch.from_numpy(src),
            torch.from_numpy(mask),
            shift_right(targets, self.start_id),
            targets,
        )

    def sampler(self, split, micro_batch: int, seed: int, rank: int = 0, world_size: int = 1):
        return PairSampler(self, split, micro_batch, seed, rank, world_size)

    def val_batches(self, split) -> list[torch.Tensor]:
        return list(self.collate(split, range(len(split))))  # every pair, in order

    def loss(self, model, src, src_mask, decoder_inputs, targets):
        """Mean cross-entropy over the target tokens (padding is -100)."""
        return model(src, decoder_inputs, targets, src_mask=src_mask, return_logits=False)[1]


class PairSampler:
    """Random training pairs from a seeded `torch.Generator`, as `BatchSampler` draws windows:
    every micro-step draws the indices of the GLOBAL micro-batch and each rank takes its slice.
    The generator state is the data position saved in checkpoints."""

    def __init__(
        self,
        objective: PairedSeq2Seq,
        split,
        micro_batch: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.objective, self.split, self.micro_batch = objective, split, micro_batch
        self.rank, self.world_size = rank, world_size
        self.generator = torch.Generator().manual_seed(seed)

    def next(self) -> tuple[torch.Tensor, ...]:
        drawn = torch.randint(
            len(self.split), (self.world_size * self.micro_batch,), generator=self.generator
        )
        mine = drawn[self.rank * self.micro_batch : (self.rank + 1) * self.micro_batch]
        return self.objective.collate(self.split, mine.tolist())

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


class _Batches:
    """A `BatchSampler` whose windows come out corrupted by `objective`, each window from
    `sample_generator(seed, its global index)`. Its state (all a checkpoint needs) is the
    sampler's plus `drawn`: the windows drawn so far by all ranks."""

    def __init__(self, sampler, objective: _Objective, seed: int):
        self.sampler, self.objective, self.seed = sampler, objective, seed
        self.drawn = 0

    def next(self) -> tuple[torch.Tensor, ...]:
        x, _ = self.sampler.next()  # (B, T): this rank's slice of the global micro-batch
        first = self.drawn + self.sampler.rank * self.sampler.micro_batch  # its rows' indices
        self.drawn += self.sampler.world_size * self.sampler.micro_batch
        gens = [sample_generator(self.seed, first + i) for i in range(len(x))]
        return self.objective.corrupt(x, gens)

    def state_dict(self) -> dict:
        return {**self.sampler.state_dict(), "drawn": self.drawn}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)
        self.drawn = state["drawn"]


OBJECTIVES: dict[str, type] = {
    "decoder": NextToken,
    "encoder": MaskedLMObjective,
    "encoder_decoder": SpanCorruption,
}


def pair_lengths(data, seq_len: int) -> tuple[int, int] | None:
    """(source, target) positions per pair of a paired corpus (`data.kind=pairs`), else None."""
    if data is None or data.kind != "pairs":
        return None
    src_len = seq_len // 2 if data.src_len is None else data.src_len
    return src_len, seq_len - src_len


def extra_ids(family: str, seq_len: int, data=None) -> int:
    """Ids the family's objective adds after the tokenizer's ([MASK]; sentinels and start; the
    start alone on pairs). `data`: the DataConfig (its kind picks the objective)."""
    if pair_lengths(data, seq_len) is not None:
        return PairedSeq2Seq.extra_ids
    if family == "encoder_decoder":
        return SpanCorruption.extra_ids_for(seq_len)
    return OBJECTIVES[family].extra_ids if family in OBJECTIVES else 0


def key_fields(family: str, seq_len: int, data=None) -> dict[str, Any]:
    if (lengths := pair_lengths(data, seq_len)) is not None:
        return PairedSeq2Seq.pair_key_fields(seq_len, lengths[0])
    return OBJECTIVES[family].key_fields(seq_len)


def build(model_cfg, tokenizer_vocab: int, seq_len: int, data=None):
    """The objective of `model_cfg.family` (and of `data.kind`) for a tokenizer of
    `tokenizer_vocab` ids."""
    if (lengths := pair_lengths(data, seq_len)) is not None:
        return PairedSeq2Seq(model_cfg, tokenizer_vocab, seq_len, lengths[0])
    return OBJECTIVES[model_cfg.family](model_cfg, tokenizer_vocab, seq_len)


def for_model(model_cfg, seq_len: int, data=None):
    """The objective of a resolved model config (its vocabulary holds the extra ids), for its
    accounting: what run records and sweep plans count."""
    tokenizer_vocab = model_cfg.vocab_size - extra_ids(model_cfg.family, seq_len, data)
    return build(model_cfg, tokenizer_vocab, seq_len, data)


def check(model_cfg, train, data=None) -> None:
    """Config errors of a family's objective, raised before any work (one line, the field)."""
    if model_cfg.family != "decoder" and train.label_smoothing:
        raise ConfigError(
            f"train.label_smoothing: {train.label_smoothing} applies to the decoder family "
            f"only (model.family={model_cfg.family}); use 0"
        )
    if (lengths := pair_lengths(data, train.seq_len)) is not None:
        if model_cfg.family != "encoder_decoder":
            raise ConfigError(
                f"data.kind: pairs train model.family=encoder_decoder only, got "
                f"model.family={model_cfg.family} (use model=vanilla_seq2seq, or data.kind=text)"
            )
        src_len, tgt_len = lengths
        if min(src_len, tgt_len) < 2:
            raise ConfigError(
                f"data.src_len: {src_len} source and {tgt_len} target positions of "
                f"train.seq_len={train.seq_len}; each side needs >= 2 (a token and end-of-text)"
            )
        return
    if model_cfg.family == "encoder_decoder" and train.seq_len < 4:
        raise ConfigError(f"train.seq_len: span corruption needs >= 4 tokens, got {train.seq_len}")
