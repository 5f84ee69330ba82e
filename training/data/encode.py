"""One unit of a corpus into one token shard: documents -> train/val side (a hash of each
document's key) -> tokenizer, a batch at a time -> `<unit>.bin` (the unit's train tokens, then
its val tokens; documents joined by end-of-text). Memory holds a batch or two, whatever the
unit's size; tokens do not depend on the batch size, the unit or the process encoding it.

Runs in the builder's process (the tokenizers library's threads) or in worker processes (one
unit each at a time, the library's own threads off: `init_worker`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path

import numpy as np

import training.data.sources as sources
from training.config import DataConfig
from training.data.tokenizer import BPETokenizer, ByteTokenizer

MIN_DOCS_FOR_FILE_SPLIT = 50  # fewer documents than this: split by ~CHUNK_CHARS chunks instead
CHUNK_CHARS = 4096
BATCH_CHARS = 4 << 20  # characters of documents encoded together (one batch in flight)


# ---------------------------------------------------------------- split
def _chunks(key: str, text: str) -> Iterator[tuple[str, str]]:
    lines, size, j = [], 0, 0
    for line in text.splitlines(keepends=True):
        lines.append(line)
        size += len(line)
        if size >= CHUNK_CHARS:
            yield f"{key}#{j}", "".join(lines)
            lines, size, j = [], 0, j + 1
    if lines:
        yield f"{key}#{j}", "".join(lines)


def few_documents(docs: Iterable[tuple[str, str]]) -> bool:
    """Whether a corpus has fewer than MIN_DOCS_FOR_FILE_SPLIT documents (then it is cut into
    ~4 KB chunks at line boundaries so that both splits get text)."""
    return sum(1 for _ in islice(docs, MIN_DOCS_FOR_FILE_SPLIT)) < MIN_DOCS_FOR_FILE_SPLIT


def chunked(docs: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    return (piece for doc in docs for piece in _chunks(*doc))


# ---------------------------------------------------------------- a unit
@dataclass
class UnitResult:
    """A written unit shard (`path`, not yet in place) and its documents, in order."""

    path: str
    sha256: str
    lengths: np.ndarray  # (n_docs,) tokens per document, end-of-text included
    held_out: np.ndarray  # (n_docs,) bool
    chars: np.ndarray  # (n_docs,) characters per document
    digests: np.ndarray  # (n_docs,) uint64: a hash of each document's key and text
    extra: dict = field(default_factory=dict)

    @property
    def n_val(self) -> int:
        return int(self.lengths[self.held_out].sum())

    @property
    def n_train(self) -> int:
        return int(self.lengths[~self.held_out].sum())


class _Writer:
    """A unit shard being written: train tokens into it, val tokens into a side file appended
    at the end; per-document counts and hashes."""

    def __init__(self, path: Path, dtype):
        self.path, self.dtype = path, np.dtype(dtype)
        self.files = [open(path, "wb"), open(f"{path}.val", "wb")]
        self.lengths, self.held, self.chars, self.digests = [], [], [], []

    def append(self, batch: list[tuple[str, bool, str]], encoded) -> None:
        flat, lengths = encoded
        held = np.fromiter((v for _, v, _ in batch), dtype=bool, count=len(batch))
        mask = np.repeat(held, lengths)
        flat[~mask].tofile(self.files[0])
        flat[mask].tofile(self.files[1])
        self.lengths.append(np.asarray(lengths, dtype=np.int64))
        self.held.append(held)
        self.chars.append(np.fromiter((len(t) for _, _, t in batch), np.int64, len(batch)))
        self.digests.append(np.fromiter((_digest(k, t) for k, _, t in batch), np.uint64))

    def close(self) -> UnitResult:
        train, val = self.files
        val.close()
        with open(val.name, "rb") as f:
            shutil.copyfileobj(f, train, 1 << 22)
        os.unlink(val.name)
        train.flush()
        os.fsync(train.fileno())
        train.close()
        sha = hashlib.sha256()
        with open(self.path, "rb") as f:
            while block := f.read(1 << 22):
                sha.update(block)

        def cat(parts, dtype):
            return np.concatenate(parts) if parts else np.empty(0, dtype)

        return UnitResult(
            str(self.path),
            sha.hexdigest(),
            cat(self.lengths, np.int64),
            cat(self.held, bool),
            cat(self.chars, np.int64),
            cat(self.digests, np.uint64),
        )

    def abort(self) -> None:
        for f in self.files:
            f.close()
            Path(f.name).unlink(missing_ok=True)


def _digest(key: str, text: str) -> int:
    h = hashlib.blake2b(key.encode("utf-8", "surrogatepass") + b"\0", digest_size=8)
    h.update(text.encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "little")


def _batches(
    stream: Iterable[tuple[str, bool, str]], batch_chars: int
) -> Iterator[list[tuple[str, bool, str]]]:
    batch, size = [], 0
    for item in stream:
        batch.append(item)
        size += len(item[2])
        if size >= batch_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def encode_documents(
    docs: Iterable[tuple[str, str]],
    tokenizer,
    dtype,
    path: Path,
    val_fraction: float,
    batch_chars: int | None = None,
) -> UnitResult:
    """Every document through the tokenizer into the unit shard `path`, in order. A thread
    encodes batch after batch (the tokenizers library releases the GIL) while this one reads
    the next and writes the last, so the encoder never waits for either."""
    writer = _Writer(path, dtype)
    split = ((k, sources.is_val(k, val_fraction), t) for k, t in docs)
    try:
        pending = None  # (batch, its encoding in flight)
        with ThreadPoolExecutor(1) as pool:
            for batch in _batches(split, batch_chars or BATCH_CHARS):
                encoding = pool.submit(tokenizer.encode_flat, [t for *_, t in batch], dtype)
                if pending is not None:
                    writer.append(pending[0], pending[1].result())
                pending = batch, encoding
            if pending is not None:
                writer.append(pending[0], pending[1].result())
    except BaseException:
        writer.abort()
        raise
    return writer.close()


# ---------------------------------------------------------------- worker processes
_worker_tokenizer = None


def init_worker(tokenizer_file: str | None) -> None:
    """A worker process: one unit at a time on one core (spawned with the tokenizers library's
    threads off: training.data.workers)."""
    global _worker_tokenizer
    _worker_tokenizer = (
        BPETokenizer.load(Path(tokenizer_file)) if tokenizer_file else ByteTokenizer()
    )


@dataclass(frozen=True)
class UnitJob:
    """Encode the pieces of one unit into `path`."""

    pieces: tuple[sources.Piece, ...]
    cfg: DataConfig
    path: str
    dtype: str
    chunk: bool  # the whole corpus has few documents: cut them into chunks
    ident: str = ""  # what its tokens depend on (training.data.build.Build.identity)
    batch_chars: int | None = None  # None: BATCH_CHARS (set by the builder: workers are spawned)

    def documents(self) -> Iterator[tuple[str, str]]:
        docs = chain.from_iterable(sources.piece_documents(p, self.cfg) for p in self.pieces)
        return chunked(docs) if self.chunk else docs

    def run(self, tokenizer) -> UnitResult:
        return encode_documents(
            self.documents(),
            tokenizer,
            self.dtype,
            Path(self.path),
            self.cfg.val_fraction,
            self.batch_chars,
        )


def run_in_worker(job: UnitJob) -> UnitResult:
    return job.run(_worker_tokenizer)
