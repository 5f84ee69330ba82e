"""Paired corpora (data.kind=pairs, for encoder_decoder): (source, target) records from .jsonl
files or derived from the stdlib (training/example_pairs.py), split by a hash of each pair's
text, each side tokenized with one tokenizer (BPE trained on both sides of the train split) and
stored untruncated as one token stream with pair offsets; the objective
(training/objectives.py, PairedSeq2Seq) truncates and pads them per batch. Paired corpora are
small (records are checked at config time), so they are held in memory while built.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.config import ConfigError, DataConfig
from training.data.filehash import file_sha256, hash_files
from training.data.sources import (
    Piece,
    _sha,
    is_val,
    json_record,
    lines,
    stdlib_files,
    text_files,
)
from training.data.stdlib_pairs import EXAMPLE_FORMAT, stdlib_pairs
from training.data.store import publish, temporary
from training.data.tokenizer import BPETokenizer, ByteTokenizer


@dataclass
class PairCorpus:
    """(key, source, target) records in a fixed order, and a fingerprint of their content."""

    fingerprint: str
    description: str
    pairs: list[tuple[str, str, str]]


def _pair_files(cfg: DataConfig) -> list[tuple[str, Path]]:
    files = text_files(cfg)[1]
    for _, p in files:
        if p.suffix != ".jsonl":
            raise ConfigError(
                f"data.path: {p} is not .jsonl; data.kind=pairs reads one JSON object per line, "
                f'{{"{cfg.source_field}": ..., "{cfg.target_field}": ...}}'
            )
    return files


def read_jsonl_pairs(cfg: DataConfig) -> list[tuple[str, str, str]]:
    """(file:line, source, target) of every record under data.path, in file order. Raises
    ConfigError naming the field and file:line for a line that is not UTF-8 or not a JSON
    object, a missing field, a value that is not a string, or an empty (or whitespace) source
    or target."""
    pairs = []
    for rel, path in _pair_files(cfg):
        piece = Piece(rel, str(path), 0, path.stat().st_size, 0, "jsonl")
        for lineno, raw in lines(piece):
            where = f"{path}:{lineno}"
            record = json_record(raw, where)
            if record is None:
                continue
            pairs.append((f"{rel}:{lineno}", *_pair_sides(cfg, record, where)))
    if not pairs:
        raise ConfigError(f"data.path: {cfg.path}: no pairs (its .jsonl files hold no records)")
    return pairs


def _pair_sides(cfg: DataConfig, record: dict, where: str) -> list[str]:
    sides = []
    for name in ("source_field", "target_field"):
        field = getattr(cfg, name)
        if field not in record:
            raise ConfigError(
                f"data.{name}: {field!r} not in {where}; fields: {', '.join(sorted(record))}"
            )
        value = record[field]
        if not isinstance(value, str) or not value.strip():
            what = "empty" if isinstance(value, str) else type(value).__name__
            raise ConfigError(
                f"data.path: {where}: {field!r} is {what} (data.{name}; every pair "
                "needs a non-empty source and target string)"
            )
        sides.append(value)
    return sides


def load_pairs(cfg: DataConfig) -> PairCorpus:
    if cfg.source == "stdlib":
        pairs = list(stdlib_pairs())
        name = f"stdlib-pairs-py{platform.python_version()}"
        description = f"Python {platform.python_version()} stdlib docstring -> def pairs"
    else:
        pairs = read_jsonl_pairs(cfg)
        name, description = "pairs", f"{cfg.path} pairs"
    digest = _sha(s for _, source, target in pairs for s in (source, target))[:12]
    return PairCorpus(f"{name}-{digest}", f"{description} ({len(pairs)} pairs)", pairs)


def split_pairs(
    pairs: list[tuple[str, str, str]], val_fraction: float
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Deterministic train/val split by a hash of each pair's text (not its line): the split
    survives reordering and insertions, and a pair repeated in the files is never on both
    sides."""
    train, val = [], []
    for _, source, target in pairs:
        (val if is_val(source + "\0" + target, val_fraction) else train).append((source, target))
    if not train or not val:
        raise ConfigError(
            f"data.val_fraction={val_fraction}: the split of {len(pairs)} pairs left "
            f"{'no training' if not train else 'no validation'} pairs; use more pairs"
        )
    return train, val


_checked_pairs: set[tuple[str, str, str]] = set()  # (file digest, fields) read and valid


def pairs_fingerprint(cfg: DataConfig) -> str:
    """A paired corpus as the run key sees it. text: the .jsonl files' bytes and names and the
    two field names, after every record was checked (`read_jsonl_pairs`: bad records fail here,
    at config time; once per process and file state). stdlib: the stdlib's files and the rule
    that derives its pairs (`example_pairs.EXAMPLE_FORMAT`)."""
    if cfg.source == "stdlib":
        return "stdlib-pairs-" + _sha([hash_files(stdlib_files()), str(EXAMPLE_FORMAT)])[:16]
    check = (hash_files(_pair_files(cfg)), cfg.source_field, cfg.target_field)
    if check not in _checked_pairs:
        read_jsonl_pairs(cfg)
        _checked_pairs.add(check)
    return "pairs-" + _sha(check)[:16]


@dataclass
class PairSplit:
    """A split of a paired corpus: pair i's source ids are tokens[o[2i]:o[2i+1]] and its target
    ids tokens[o[2i+1]:o[2i+2]] (o = offsets), untruncated and without end-of-text."""

    tokens: np.ndarray  # (n_tokens,) uint16 or uint32
    offsets: np.ndarray  # (2 n_pairs + 1,) int64
    eot_id: int  # what the objective appends to each side and pads sources with

    def __len__(self) -> int:
        return (len(self.offsets) - 1) // 2

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        a, b, c = self.offsets[2 * i : 2 * i + 3]
        return self.tokens[a:b], self.tokens[b:c]

    def head(self, n: int) -> PairSplit:
        """The first n pairs."""
        return PairSplit(self.tokens, self.offsets[: 2 * n + 1], self.eot_id)

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """(source lengths, target lengths), tokens per pair."""
        sizes = np.diff(np.asarray(self.offsets))
        return sizes[0::2], sizes[1::2]


def _write_pairs(tmp: Path, split: str, pairs: list[tuple[str, str]], tokenizer, dtype) -> dict:
    """`{split}.bin` (each pair's source ids, then its target ids) and `{split}.offsets.bin`;
    returns their counts and sha256s."""
    offsets, h = [0], hashlib.sha256()
    with open(tmp / f"{split}.bin", "wb") as f:
        for i in range(0, len(pairs), 2048):
            texts = [side for pair in pairs[i : i + 2048] for side in pair]
            for ids in tokenizer.encode_batch(texts):
                arr = np.asarray(ids, dtype=dtype)
                h.update(arr.tobytes())
                arr.tofile(f)
                offsets.append(offsets[-1] + arr.size)
        f.flush()
        os.fsync(f.fileno())
    index = np.asarray(offsets, dtype=np.int64)
    index.tofile(tmp / f"{split}.offsets.bin")
    sources, targets = np.diff(index)[0::2], np.diff(index)[1::2]
    return {
        f"n_{split}_tokens": int(index[-1]),
        f"n_{split}_pairs": len(pairs),
        f"n_{split}_source_tokens": int(sources.sum()),
        f"n_{split}_target_tokens": int(targets.sum()),
        "sha256": {
            f"{split}.bin": h.hexdigest(),
            f"{split}.offsets.bin": file_sha256(tmp / f"{split}.offsets.bin"),
        },
    }


def build_pair_cache(cfg: DataConfig, corpus: PairCorpus, final: Path) -> None:
    t0 = time.perf_counter()
    train_pairs, val_pairs = split_pairs(corpus.pairs, cfg.val_fraction)
    if cfg.tokenizer == "byte":
        tokenizer = ByteTokenizer()
    else:  # one vocabulary for both sides (a shared embedding table, as the 2017 model's)
        texts = [side for pair in train_pairs for side in pair]
        tokenizer = BPETokenizer.train(texts, cfg.vocab_size, cfg.tokenizer_train_chars)
    t_tok = time.perf_counter() - t0
    dtype = np.uint16 if tokenizer.vocab_size <= 2**16 else np.uint32
    tmp = temporary(final)
    try:
        sha256 = {}
        if isinstance(tokenizer, BPETokenizer):
            tokenizer.save(tmp / "tokenizer.json")
            sha256["tokenizer.json"] = file_sha256(tmp / "tokenizer.json")
        counts = {}
        for split, pairs in (("train", train_pairs), ("val", val_pairs)):
            written = _write_pairs(tmp, split, pairs, tokenizer, dtype)
            sha256.update(written.pop("sha256"))
            counts.update(written)
        meta = {
            "kind": "pairs",
            "fingerprint": corpus.fingerprint,
            "description": corpus.description,
            "tokenizer": cfg.tokenizer,
            "vocab_size": tokenizer.vocab_size,
            "eot_id": tokenizer.eot_id,
            "dtype": np.dtype(dtype).name,
            **counts,
            "train_chars": sum(len(s) + len(t) for s, t in train_pairs),
            "tokenizer_seconds": round(t_tok, 2),
            "build_seconds": round(time.perf_counter() - t0, 2),
            "sha256": sha256,  # verified on load (cache_problem)
        }
        publish(tmp, meta, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
