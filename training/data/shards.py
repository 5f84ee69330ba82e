"""Pre-tokenized corpora (data.source=tokens), read through memory maps, never loaded whole.

Shard formats: the llm.c / modded-nanogpt `.bin` (a 256 x int32 header: magic 20240520,
version 1, token count; then uint16 tokens) and `.npy` arrays of uint16/uint32 tokens. data.path
is one file, a folder (its .bin/.npy files, sorted) or a glob. Each shard's header, length and
largest id are checked once (remembered by the file's stats, like fingerprints) against
data.vocab_size and data.eot_id, at config time.
"""

from __future__ import annotations

import glob
import hashlib
from bisect import bisect_right
from pathlib import Path

import numpy as np

from training.config import ConfigError, DataConfig
from training.data.filehash import recall, remember, signature_of
from training.data.sources import _sha

LLMC_MAGIC = 20240520
LLMC_VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
TOKEN_SUFFIXES = (".bin", ".npy")
SCAN_TOKENS = 1 << 26  # the largest-id scan reads this many tokens at a time


def write_bin(path: Path, tokens: np.ndarray) -> None:
    """Write `tokens` (ids < 2**16) as an llm.c .bin shard."""
    tokens = np.asarray(tokens)
    if tokens.size and int(tokens.max()) >= 2**16:
        raise ValueError(f"{path}: token ids >= 65536 do not fit the .bin format's uint16")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = LLMC_MAGIC, LLMC_VERSION, tokens.size
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())


def open_shard(path: Path) -> np.ndarray:
    """A read-only memmap of one shard's tokens; ConfigError naming the file for a bad header,
    a length that disagrees with it, or an array that is not 1-D uint16/uint32."""
    if path.suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r")
        except (ValueError, OSError) as e:
            raise ConfigError(f"data.path: {path} is not a .npy array ({e})") from None
        if arr.ndim != 1 or arr.dtype not in (np.uint16, np.uint32):
            raise ConfigError(
                f"data.path: {path} holds a {arr.dtype} array of shape {arr.shape}; "
                "token shards are 1-D uint16 or uint32"
            )
        return arr
    size = path.stat().st_size
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    if header.size < HEADER_INTS or header[0] != LLMC_MAGIC:
        found = header[0] if header.size else "nothing"
        raise ConfigError(
            f"data.path: {path} is not an llm.c token shard (magic {found}, expected {LLMC_MAGIC})"
        )
    if header[1] != LLMC_VERSION:
        raise ConfigError(
            f"data.path: {path}: shard version {header[1]}, expected {LLMC_VERSION} (uint16 tokens)"
        )
    n = int(header[2])
    if size != HEADER_BYTES + 2 * n:
        raise ConfigError(
            f"data.path: {path}: the header promises {n} tokens ({HEADER_BYTES + 2 * n} bytes), "
            f"the file has {size} bytes"
        )
    return np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(n,))


class ShardedTokens:
    """Shards read as one token array: len() and slices (a slice across shards is copied)."""

    def __init__(self, parts: list[np.ndarray]):
        self.parts = [p for p in parts if len(p)]
        self.starts = np.cumsum([0] + [len(p) for p in self.parts]).tolist()
        self.dtype = np.result_type(*self.parts) if self.parts else np.dtype(np.uint16)

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            i = index + len(self) if index < 0 else index
            k = bisect_right(self.starts, i) - 1
            return self.parts[k][i - self.starts[k]]
        start, stop, step = index.indices(len(self))
        if step != 1:
            raise IndexError("ShardedTokens: slices with a step are not supported")
        pieces, k = [], bisect_right(self.starts, start) - 1
        while start < stop:
            offset = start - self.starts[k]
            take = min(stop, self.starts[k + 1]) - start
            pieces.append(self.parts[k][offset : offset + take])
            start, k = start + take, k + 1
        if len(pieces) == 1:
            return pieces[0]
        return np.concatenate(pieces) if pieces else np.empty(0, self.dtype)

    def __array__(self, dtype=None, copy=None):
        out = self[:] if len(self) else np.empty(0, self.dtype)
        return np.asarray(out, dtype=dtype)


def token_files(spec: str, field: str) -> list[tuple[str, Path]]:
    """(name, file) of every shard named by `spec` (a file, a folder, a glob), sorted."""
    path = Path(spec).expanduser()
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in TOKEN_SUFFIXES and p.is_file())
    else:
        files = sorted(Path(m) for m in glob.glob(str(path)) if Path(m).is_file())
    if not files:
        raise ConfigError(f"{field}: {spec} matches no .bin or .npy token shards")
    for p in files:
        if p.suffix not in TOKEN_SUFFIXES:
            raise ConfigError(f"{field}: {p} is not a .bin or .npy token shard")
    base = path if path.is_dir() else None
    return [(p.relative_to(base).as_posix() if base else p.name, p) for p in files]


def shard_stats(path: Path) -> tuple[str, int, int]:
    """(sha256 of the file, 16 hex; token count; largest id), after its header is checked;
    remembered by the file's stats."""
    sig, newest = signature_of([("shard", path.resolve())])
    if found := recall(sig):
        digest, n, largest = found.split()
        return digest, int(n), int(largest)
    tokens = open_shard(path)
    largest = 0
    for i in range(0, len(tokens), SCAN_TOKENS):
        largest = max(largest, int(tokens[i : i + SCAN_TOKENS].max()))
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    digest = h.hexdigest()[:16]
    remember(sig, f"{digest} {len(tokens)} {largest}", newest)
    return digest, len(tokens), largest


def _checked(files: list[tuple[str, Path]], cfg: DataConfig) -> list[str]:
    parts = []
    for rel, p in files:
        digest, n, largest = shard_stats(p)
        if n == 0:  # else prepared as 0 tokens with exit 0, and a run fails later
            raise ConfigError(f"data.path: {p} holds no tokens (its header says 0)")
        if largest >= cfg.vocab_size:
            raise ConfigError(
                f"data.vocab_size: {cfg.vocab_size}, but {p} holds token id {largest}; "
                f"set data.vocab_size above it"
            )
        parts.append(f"{rel}:{digest}")
    return parts


def tokens_fingerprint(cfg: DataConfig) -> str:
    """Every shard's name and bytes (train, then val), each checked against data.vocab_size."""
    train = _checked(token_files(cfg.path, "data.path"), cfg)
    val = _checked(token_files(cfg.val_path, "data.val_path"), cfg) if cfg.val_path else []
    return "tokens-" + _sha([*train, "val", *val])[:16]


def load_tokens(cfg: DataConfig) -> tuple[ShardedTokens, ShardedTokens]:
    """(train, val) token arrays: val from data.val_path; else the last data.val_fraction of
    the shards (at least one), or of the tokens of a single shard."""
    shards = [open_shard(p) for _, p in token_files(cfg.path, "data.path")]
    if cfg.val_path:
        val = [open_shard(p) for _, p in token_files(cfg.val_path, "data.val_path")]
        return ShardedTokens(shards), ShardedTokens(val)
    if len(shards) > 1:
        k = min(len(shards) - 1, max(1, round(cfg.val_fraction * len(shards))))
        return ShardedTokens(shards[:-k]), ShardedTokens(shards[-k:])
    cut = int(len(shards[0]) * (1 - cfg.val_fraction))
    return ShardedTokens([shards[0][:cut]]), ShardedTokens([shards[0][cut:]])
