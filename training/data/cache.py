"""Token caches: where a corpus's tokens are kept, found and read back.

A document corpus (stdlib, site-packages, text, hf) is prepared once into a cache folder
(training.data.build: one token shard per unit of the corpus, built resumably); a paired
corpus into train.bin / val.bin with pair offsets (training.data.pairs); a dataset of token
ids into train.bin / val.bin; pre-tokenized shards are read in place (training.data.shards).

The cache folder is named by the corpus's source fingerprint (training.data.fingerprint: file
stats after the first time) and every setting that changes the token streams, so a run on a
prepared corpus stats its files and maps its shards. The decoded corpus's own fingerprint (the
`data_fingerprint` tag) is computed once, while preparing, and kept in meta.json.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path

import numpy as np

import training.data.filehash as filehash
import training.data.sources as sources
from training.config import ConfigError, DataConfig
from training.data.build import build_cache, check_split, remove_units
from training.data.encode import MIN_DOCS_FOR_FILE_SPLIT, chunked
from training.data.fingerprint import source_fingerprint
from training.data.pairs import PairSplit, build_pair_cache, load_pairs
from training.data.progress import Progress
from training.data.shards import load_tokens, token_files, tokens_fingerprint
from training.data.store import ensure_cache, publish, record_meta, temporary
from training.data.unigram import UnigramCounts, unigram_entropy

log = logging.getLogger("training.data")

CACHE_FORMAT = 2  # bump when the cache layout or the tokenization changes


@dataclass
class TokenData:
    """The two token streams (read-only memmaps), or the two PairSplits of a paired corpus, and
    what produced them."""

    train: np.ndarray | PairSplit  # (n_train,) uint16 or uint32
    val: np.ndarray | PairSplit  # (n_val,)
    vocab_size: int
    eot_id: int
    fingerprint: str  # corpus fingerprint (the `data_fingerprint` tag)
    cache_dir: Path
    meta: dict

    @property
    def unigram_entropy(self) -> float | None:
        """Nats per token of the training split's unigram distribution: the loss of a model
        that learnt only token frequencies (training.data.unigram); a paired corpus: both sides
        of its training pairs."""
        return self.meta.get("unigram_entropy")

    def split_tokens(self, split: np.ndarray | PairSplit, seq_len: int) -> int:
        """A split's size in D's units (epochs = tokens trained / this): its tokens; for pairs,
        pairs x seq_len, since D counts every position of a padded pair (PairedSeq2Seq)."""
        return len(split) * seq_len if isinstance(split, PairSplit) else len(split)


# ---------------------------------------------------------------- split
def split_stream(
    docs: Iterator[tuple[str, str]], val_fraction: float
) -> Iterator[tuple[bool, str]]:
    """(held out?, text) of every document, by a hash of its key (file path, record index). A
    corpus of fewer than MIN_DOCS_FOR_FILE_SPLIT documents (e.g. one .txt file) is first cut
    into ~4 KB chunks at line boundaries so that both splits get text."""
    head = list(islice(docs, MIN_DOCS_FOR_FILE_SPLIT))
    docs = chunked(head) if len(head) < MIN_DOCS_FOR_FILE_SPLIT else chain(head, docs)
    for key, text in docs:
        yield sources.is_val(key, val_fraction), text


def split_documents(
    docs: list[tuple[str, str]], val_fraction: float
) -> tuple[list[str], list[str]]:
    """(train texts, val texts) of a list of documents (see `split_stream`)."""
    train, val = [], []
    for held_out, text in split_stream(iter(docs), val_fraction):
        (val if held_out else train).append(text)
    check_split(len(train), len(val), val_fraction)
    return train, val


# ---------------------------------------------------------------- build
class _Corpus:
    """The documents of `cfg`, re-readable, with the decoded corpus's fingerprint and size
    counted on the last full pass."""

    def __init__(self, cfg: DataConfig):
        self.cfg = cfg
        self.hf = sources.open_hf(cfg)[0] if cfg.source == "hf" else None
        self.digest, self.n_docs, self.n_chars = hashlib.sha256(), 0, 0

    def documents(self) -> Iterator[tuple[str, str]]:
        return sources.documents(self.cfg, self.hf)

    def counted(self) -> Iterator[tuple[str, str]]:
        self.digest, self.n_docs, self.n_chars = hashlib.sha256(), 0, 0
        for key, text in self.documents():
            for s in (key, text):
                self.digest.update(s.encode("utf-8", "surrogatepass") + b"\0")
            self.n_docs += 1
            self.n_chars += len(text)
            yield key, text

    def describe(self) -> tuple[str, str]:
        """(fingerprint of the decoded documents, description), as of the last full pass."""
        digest = self.digest.hexdigest()[:12]
        return sources.describe_corpus(self.cfg, digest, self.n_docs, self.n_chars)


@dataclass
class Corpus:
    """Documents as (key, text) pairs in a fixed order, and a fingerprint of their content."""

    fingerprint: str
    description: str
    documents: list[tuple[str, str]]


def load_corpus(cfg: DataConfig) -> Corpus:
    """Every document in memory, for small corpora and tests (preparation streams them)."""
    corpus = _Corpus(cfg)
    docs = list(corpus.counted())
    _require_documents(cfg, corpus.n_docs)
    return Corpus(*corpus.describe(), docs)


def _require_documents(cfg: DataConfig, n_docs: int) -> None:
    if not n_docs:
        raise ConfigError(f"data.source={cfg.source}: the corpus is empty")


class _Streams:
    """train.bin and val.bin being written: counts, checksums, and the data.max_tokens stop."""

    def __init__(self, folder: Path, dtype, limit: int | None):
        self.dtype, self.limit = np.dtype(dtype), limit
        self.files = [open(folder / "train.bin", "wb"), open(folder / "val.bin", "wb")]
        self.sha = [hashlib.sha256(), hashlib.sha256()]
        self.tokens, self.docs, self.train_chars = [0, 0], [0, 0], 0
        self.counts = UnigramCounts()  # the train side's tokens (its unigram entropy)

    def write(self, batch: list[tuple[bool, str]], tokenizer, progress: Progress) -> bool:
        """Encode and append one batch; True once data.max_tokens tokens are written."""
        encoded = tokenizer.encode_flat([text for _, text in batch], self.dtype)
        return self.append(batch, encoded, progress)

    def append(
        self,
        batch: list[tuple[bool, str]],
        encoded: tuple[np.ndarray, list[int]],
        progress: Progress,
    ) -> bool:
        """Append one batch and its `encode_flat`; True once data.max_tokens tokens are written."""
        flat, lengths = encoded
        held_out = np.fromiter((v for v, _ in batch), dtype=bool, count=len(batch))
        done = False
        if self.limit is not None:  # keep documents up to the one that reaches the limit
            ends = np.cumsum(lengths)
            room = self.limit - sum(self.tokens)
            if ends[-1] >= room:
                keep = int(np.searchsorted(ends, room)) + 1  # the first document reaching it
                done, batch, held_out = True, batch[:keep], held_out[:keep]
                flat, lengths = flat[: ends[keep - 1]], lengths[:keep]
        mask = np.repeat(held_out, lengths)
        for side in (0, 1):
            part = flat[mask] if side else flat[~mask]
            if not side:
                self.counts.add(part)
            self.sha[side].update(part.tobytes())
            part.tofile(self.files[side])
            self.tokens[side] += part.size
            self.docs[side] += int(held_out.sum()) if side else int((~held_out).sum())
        self.train_chars += sum(len(t) for v, t in batch if not v)
        progress.advance(sum(len(t) for _, t in batch), flat.size)
        return done

    def close(self) -> None:
        for f in self.files:
            f.flush()
            os.fsync(f.fileno())
            f.close()


# ---------------------------------------------------------------- load
def cache_key(cfg: DataConfig, fingerprint: str) -> str:
    """The cache folder of a document corpus: its source fingerprint and every setting that
    shapes its documents or their tokens."""
    settings = [fingerprint, str(CACHE_FORMAT), cfg.tokenizer, str(cfg.val_fraction)]
    if cfg.tokenizer == "bpe":
        settings += [str(cfg.vocab_size), str(cfg.tokenizer_train_chars)]
    settings += [
        cfg.doc_separator,
        cfg.text_field,
        str(cfg.name),
        str(cfg.config),
        cfg.split,
        str(cfg.max_tokens),
    ]
    return sources._sha(settings)[:16]


def pair_cache_key(cfg: DataConfig, fingerprint: str) -> str:
    settings = [fingerprint, "1", cfg.tokenizer, str(cfg.val_fraction)]
    if cfg.tokenizer == "bpe":
        settings += [str(cfg.vocab_size), str(cfg.tokenizer_train_chars)]
    return sources._sha([*settings, "pairs"])[:16]


def build_ids_cache(cfg: DataConfig, final: Path, progress: Progress) -> None:
    """A Hugging Face dataset of token ids (data.text_field, `input_ids` in tokens.yaml) as a
    token cache: each row's ids followed by data.eot_id, rows held out by a hash of their index;
    ConfigError for an id >= data.vocab_size."""
    ds = sources.open_hf(cfg)[0]
    dtype = np.uint16 if cfg.vocab_size <= 2**16 else np.uint32
    tmp = temporary(final)
    try:
        streams = _Streams(tmp, dtype, cfg.max_tokens)
        try:
            for rows in ds.select_columns([cfg.text_field]).iter(batch_size=sources.HF_BATCH_ROWS):
                ids = rows[cfg.text_field]
                largest = max((max(r) for r in ids if len(r)), default=0)
                if largest >= cfg.vocab_size:
                    raise ConfigError(
                        f"data.vocab_size: {cfg.vocab_size}, but the dataset "
                        f"{cfg.from_disk or cfg.name} holds token id {largest}"
                    )
                start = streams.docs[0] + streams.docs[1]
                batch = [
                    (sources.is_val(str(start + i), cfg.val_fraction), r) for i, r in enumerate(ids)
                ]
                if streams.write(batch, _IdRows(cfg.eot_id), progress):
                    break
        finally:
            streams.close()
        check_split(streams.docs[0], streams.docs[1], cfg.val_fraction)
        meta = {
            "fingerprint": source_fingerprint(cfg),
            "tokenizer": "given",
            "vocab_size": cfg.vocab_size,
            "eot_id": cfg.eot_id,
            "dtype": np.dtype(dtype).name,
            "n_train_tokens": streams.tokens[0],
            "n_val_tokens": streams.tokens[1],
            "n_train_docs": streams.docs[0],
            "n_val_docs": streams.docs[1],
            "unigram_entropy": streams.counts.entropy(),
            "sha256": {
                "train.bin": streams.sha[0].hexdigest(),
                "val.bin": streams.sha[1].hexdigest(),
            },
        }
        publish(tmp, meta, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class _IdRows:
    """The `encode_flat` of rows that are token ids already."""

    def __init__(self, eot_id: int):
        self.eot_id = eot_id

    def encode_flat(self, rows: list[list[int]], dtype) -> tuple[np.ndarray, list[int]]:
        flat = np.fromiter(
            chain.from_iterable(chain.from_iterable((r, (self.eot_id,)) for r in rows)),
            dtype=dtype,
            count=sum(map(len, rows)) + len(rows),
        )
        return flat, [len(r) + 1 for r in rows]


def _token_data(cfg: DataConfig, cache_root: Path, progress: bool) -> TokenData:
    if cfg.from_disk or cfg.name:  # a dataset of ids: converted once into a token cache
        final = Path(cache_root) / cache_key(cfg, "ids-" + source_fingerprint(cfg))
        ensure_cache(final, lambda f: _with_progress(build_ids_cache, cfg, f, progress))
        return _load_cache(cfg, final)
    fingerprint = tokens_fingerprint(cfg)  # checks every shard (remembered by file stats)
    train, val = load_tokens(cfg)
    meta = {"source": "tokens", "n_train_tokens": len(train), "n_val_tokens": len(val)}
    meta["unigram_entropy"] = _shards_entropy(cfg, fingerprint, train)
    where = Path(cfg.path).expanduser()
    return TokenData(train, val, cfg.vocab_size, cfg.eot_id, fingerprint, where, meta)


def prepare_data(
    cfg: DataConfig, cache_root: Path, progress: bool = False, workers: int | None = None
) -> TokenData:
    """Load (or build once and cache, or finish building) the token streams (or pairs) for
    `cfg`; data=tokens maps its shards directly. `progress`: a progress bar while building (the
    prepare command); `workers`: encoding processes (None: training.data.build.default_workers)."""
    filehash.persist()
    if cfg.source == "tokens":
        return _token_data(cfg, cache_root, progress)
    if cfg.kind == "pairs":
        corpus = load_pairs(cfg)
        final = Path(cache_root) / pair_cache_key(cfg, corpus.fingerprint)
        ensure_cache(final, lambda f: build_pair_cache(cfg, corpus, f))
    else:
        final = Path(cache_root) / cache_key(cfg, source_fingerprint(cfg))
        build = functools.partial(build_cache, workers=workers)
        ensure_cache(final, lambda f: _with_progress(build, cfg, f, progress))
    return _load_cache(cfg, final)


def _shards_entropy(cfg: DataConfig, fingerprint: str, train) -> float | None:
    """The unigram entropy of pre-tokenized shards' training split: counted once, in chunks,
    and remembered by the shards' stats (their fingerprint and the split's size)."""
    sig, newest = filehash.signature_of(token_files(cfg.path, "data.path"))
    memo = ("unigram-entropy", fingerprint, len(train), sig)
    if (known := filehash.recall(memo)) is not None:
        return float(known)
    entropy = unigram_entropy(train.parts, cfg.vocab_size)
    if entropy is not None:
        filehash.remember(memo, repr(entropy), newest)
    return entropy


def _with_progress(build, cfg: DataConfig, final: Path, progress: bool) -> None:
    log.info("building token cache %s", final)
    total = sources.source_bytes(cfg) if cfg.source != "tokens" else None
    with Progress(total, enabled=progress) as bar:
        build(cfg, final, bar)


def _load_cache(cfg: DataConfig, final: Path) -> TokenData:
    meta = json.loads((final / "meta.json").read_text())
    if (final / "units").exists():  # a build killed between its publish and this clean-up
        remove_units(final)
    train = np.memmap(final / "train.bin", dtype=meta["dtype"], mode="r")
    val = np.memmap(final / "val.bin", dtype=meta["dtype"], mode="r")
    if cfg.kind == "pairs":
        train, val = (
            PairSplit(stream, np.fromfile(final / f"{split}.offsets.bin", np.int64), meta["eot_id"])
            for split, stream in (("train", train), ("val", val))
        )
    if "unigram_entropy" not in meta:  # a cache built before it was counted: once, then kept
        stream = train.tokens if isinstance(train, PairSplit) else train
        meta["unigram_entropy"] = unigram_entropy(stream, meta["vocab_size"])
        record_meta(final, meta)
    return TokenData(
        train, val, meta["vocab_size"], meta["eot_id"], meta["fingerprint"], final, meta
    )
