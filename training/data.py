"""Offline corpora, tokenizers, cached token memmaps and batch sampling.

Pipeline: documents (stdlib / sitepackages / text / hf) -> train/val split by a deterministic hash of each
document's key -> tokenizer (byte-level BPE trained on the train split, or raw bytes) -> two
flat token streams (documents joined by an end-of-text id) saved as uint16/uint32 files.

A paired corpus (`data.kind=pairs`, for encoder_decoder): (source, target) records, split by a
hash of each pair's text, each side tokenized with one tokenizer (BPE trained on both sides of
the train split) and stored untruncated as one token stream with pair offsets; the objective
(training/objective.py, PairedSeq2Seq) truncates and pads them per batch.

The cache folder is keyed by the corpus fingerprint and every setting that changes the token
streams, and is built in a temporary folder that is renamed into place: two processes racing
to build it both succeed, one rename wins, nobody reads a half-written cache.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import sysconfig
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.config import ConfigError, DataConfig

log = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when the cache layout or the tokenization changes
EOT = "<|endoftext|>"
BYTE_EOT_ID = 0  # byte tokenizer: NUL separates documents (absent from text corpora)
STDLIB_EXCLUDED_DIRS = {
    "test",
    "tests",
    "idle_test",
    "site-packages",
    "dist-packages",
    "__pycache__",
}
SITEPACKAGES_MAX_FILE_BYTES = 1 << 20  # larger .py files are generated tables, not code
MIN_DOCS_FOR_FILE_SPLIT = 50  # fewer documents than this: split by ~CHUNK_CHARS chunks instead
CHUNK_CHARS = 4096


# ---------------------------------------------------------------- documents and fingerprints
@dataclass
class Corpus:
    """Documents as (key, text) pairs in a fixed order, and a fingerprint of their content."""

    fingerprint: str
    description: str
    documents: list[tuple[str, str]]


def _sha(parts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


def stdlib_files() -> list[tuple[str, Path]]:
    """The running Python's stdlib .py files (no test suites, no site-packages), sorted.

    Excluded folders are pruned from the walk, not filtered after it: every run fingerprints
    the corpus, and walking site-packages took ~0.5 s per run (10 ms pruned), same files."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in STDLIB_EXCLUDED_DIRS]
        for name in names:
            if name.endswith(".py"):
                p = Path(folder, name)
                files.append((p.relative_to(root).as_posix(), p))
    return sorted(files)


def load_stdlib() -> Corpus:
    docs = [(rel, p.read_text(encoding="utf-8", errors="replace")) for rel, p in stdlib_files()]
    digest = _sha(s for doc in docs for s in doc)[:12]
    return Corpus(
        f"stdlib-py{platform.python_version()}-{digest}",
        f"Python {platform.python_version()} stdlib, {len(docs)} files",
        docs,
    )


def site_packages_root() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def sitepackages_files(max_bytes: int | None = None) -> list[tuple[str, Path]]:
    """The installed packages' .py files (no test suites, caches or metadata folders, none over
    SITEPACKAGES_MAX_FILE_BYTES), sorted by path relative to site-packages; with `max_bytes`,
    the longest prefix of that order within max_bytes bytes. Editable installs (this project)
    live outside site-packages and are not included."""
    root = site_packages_root()
    files = []
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = [
            d for d in subdirs
            if d not in STDLIB_EXCLUDED_DIRS and not d.endswith((".dist-info", ".egg-info"))
        ]  # fmt: skip
        for name in names:
            if name.endswith(".py"):
                p = Path(folder, name)
                files.append((p.relative_to(root).as_posix(), p))
    chosen, total = [], 0
    for rel, p in sorted(files):
        size = p.stat().st_size
        if size > SITEPACKAGES_MAX_FILE_BYTES:
            continue
        if max_bytes is not None and total + size > max_bytes:
            break
        chosen.append((rel, p))
        total += size
    return chosen


@functools.cache  # ~0.5 s; a sweep resolves every point's fingerprint in one process
def installed_packages() -> list[str]:
    """`name==version` of every distribution installed in site-packages, sorted."""
    import importlib.metadata

    root = site_packages_root()
    names = {
        f"{d.metadata['Name']}=={d.version}"
        for d in importlib.metadata.distributions(path=[str(root)])
        if d.metadata["Name"]
    }
    return sorted(names, key=str.lower)


def load_sitepackages(cfg: DataConfig) -> Corpus:
    files = sitepackages_files(cfg.max_bytes)
    docs = [(rel, p.read_text(encoding="utf-8", errors="replace")) for rel, p in files]
    digest = _sha(s for doc in docs for s in doc)[:12]
    size = sum(len(t) for _, t in docs)
    return Corpus(
        f"sitepackages-py{platform.python_version()}-{digest}",
        f"site-packages sources of {len(installed_packages())} packages, {len(docs)} files, "
        f"{size / 1e6:.0f}M characters",
        docs,
    )


def _jsonl_docs(path: Path, rel: str, text_field: str) -> Iterator[tuple[str, str]]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            if text_field not in record:
                raise ConfigError(
                    f"data.text_field: {text_field!r} not in {path}:{lineno}; "
                    f"fields: {', '.join(sorted(record))}"
                )
            yield f"{rel}:{lineno}", str(record[text_field])


def text_files(cfg: DataConfig) -> tuple[Path, list[tuple[str, Path]]]:
    """(root, [(name, file)]) of a text corpus, sorted: the file itself, or every .txt/.jsonl
    file under the folder. The names (the file's name, paths relative to the folder) key the
    documents, so they decide the train/val split."""
    root = Path(cfg.path).expanduser().resolve()
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.suffix in (".txt", ".jsonl"))
    else:
        raise ConfigError(f"data.path: {cfg.path} does not exist (a .txt/.jsonl file or a folder)")
    if not files or any(p.suffix not in (".txt", ".jsonl") for p in files):
        raise ConfigError(f"data.path: {cfg.path} holds no .txt or .jsonl files")
    return root, [(p.name if root.is_file() else p.relative_to(root).as_posix(), p) for p in files]


def load_text(cfg: DataConfig) -> Corpus:
    root, files = text_files(cfg)
    docs: list[tuple[str, str]] = []
    for rel, p in files:
        if p.suffix == ".jsonl":
            docs.extend(_jsonl_docs(p, rel, cfg.text_field))
        else:
            parts = p.read_text(encoding="utf-8", errors="replace").split(cfg.doc_separator)
            docs.extend((f"{rel}:{i}", t) for i, t in enumerate(parts) if t.strip())
    digest = _sha(s for doc in docs for s in doc)[:12]
    return Corpus(f"text-{digest}", f"{root} ({len(files)} files, {len(docs)} docs)", docs)


def load_hf(cfg: DataConfig) -> Corpus:
    """A Hugging Face dataset: hub name (online), a builder with local data_files, or a folder
    written by `save_to_disk` (`data.from_disk`)."""
    import datasets

    if cfg.from_disk:
        ds = datasets.load_from_disk(cfg.from_disk)
        if isinstance(ds, datasets.DatasetDict):
            if cfg.split not in ds:
                raise ConfigError(
                    f"data.split: {cfg.split!r} not in {cfg.from_disk}; have {list(ds)}"
                )
            ds = ds[cfg.split]
        origin = f"disk:{Path(cfg.from_disk).resolve()}"
    else:
        ds = datasets.load_dataset(cfg.name, cfg.config, split=cfg.split, data_files=cfg.data_files)
        origin = f"{cfg.name}/{cfg.config}"
    if cfg.text_field not in ds.column_names:
        raise ConfigError(
            f"data.text_field: {cfg.text_field!r} not in the dataset; columns: {ds.column_names}"
        )
    # datasets' own fingerprint identifies content + processing without reading every row.
    digest = _sha([origin, cfg.split, cfg.text_field, ds._fingerprint])[:12]
    docs = [(str(i), t) for i, t in enumerate(ds[cfg.text_field])]
    return Corpus(f"hf-{digest}", f"{origin} [{cfg.split}] ({len(docs)} docs)", docs)


def load_corpus(cfg: DataConfig) -> Corpus:
    loader = {
        "stdlib": lambda c: load_stdlib(),
        "sitepackages": load_sitepackages,
        "text": load_text,
        "hf": load_hf,
    }[cfg.source]
    corpus = loader(cfg)
    if not corpus.documents:
        raise ConfigError(f"data.source={cfg.source}: the corpus is empty")
    return corpus


# ---------------------------------------------------------------- paired corpora
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
    ConfigError naming the field and file:line for a line that is not a JSON object, a missing
    field, a value that is not a string, or an empty (or whitespace) source or target."""
    pairs = []
    for rel, path in _pair_files(cfg):
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    record = json.loads(line)
                except ValueError as e:
                    raise ConfigError(f"data.path: {where} is not JSON ({e})") from None
                if not isinstance(record, dict):
                    raise ConfigError(f"data.path: {where} is not a JSON object")
                sides = []
                for name in ("source_field", "target_field"):
                    field = getattr(cfg, name)
                    if field not in record:
                        raise ConfigError(
                            f"data.{name}: {field!r} not in {where}; fields: "
                            f"{', '.join(sorted(record))}"
                        )
                    value = record[field]
                    if not isinstance(value, str) or not value.strip():
                        what = "empty" if isinstance(value, str) else type(value).__name__
                        raise ConfigError(
                            f"data.path: {where}: {field!r} is {what} (data.{name}; every pair "
                            "needs a non-empty source and target string)"
                        )
                    sides.append(value)
                pairs.append((f"{rel}:{lineno}", *sides))
    if not pairs:
        raise ConfigError(f"data.path: {cfg.path}: no pairs (its .jsonl files hold no records)")
    return pairs


def load_pairs(cfg: DataConfig) -> PairCorpus:
    if cfg.source == "stdlib":
        from training.example_pairs import stdlib_pairs

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
        (val if _is_val(source + "\0" + target, val_fraction) else train).append((source, target))
    if not train or not val:
        raise ConfigError(
            f"data.val_fraction={val_fraction}: the split of {len(pairs)} pairs left "
            f"{'no training' if not train else 'no validation'} pairs; use more pairs"
        )
    return train, val


# ---------------------------------------------------------------- source fingerprints (run keys)
RACY_S = 2.0  # a file modified this recently is hashed again every time (its mtime may repeat)
_hashed: dict[tuple, str] = {}  # file signatures -> digest, for this process


def _hash_files(files: list[tuple[str, Path]]) -> str:
    """sha256 (16 hex) of every (name, bytes) pair. Remembered per process by the files' size,
    mtime and inode while no file is younger than RACY_S seconds, so a plan resolving 48 points
    on one corpus reads it once and an edit (new mtime, or a file still being written) is seen."""
    stats = [(rel, str(p), p.stat()) for rel, p in files]
    signature = tuple((rel, path, st.st_size, st.st_mtime_ns, st.st_ino) for rel, path, st in stats)
    if signature in _hashed:
        return _hashed[signature]
    h = hashlib.sha256()
    for rel, p in files:
        h.update(rel.encode("utf-8", "surrogatepass") + b"\0")
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    digest = h.hexdigest()[:16]
    newest = max((st.st_mtime_ns for _, _, st in stats), default=0) / 1e9
    if time.time() - newest > RACY_S:
        _hashed[signature] = digest
    return digest


EMPTY_PROBE_BYTES = 1 << 20


def _require_text(cfg: DataConfig, files: list[tuple[str, Path]]) -> None:
    """ConfigError naming data.path when its files hold no text at all (empty, whitespace or
    only document separators), so an empty corpus fails at config time, before the MLflow store
    or any cache is touched. Reads at most the first MiB of each file until one has text."""
    for _, p in files:
        with open(p, "rb") as f:
            head = f.read(EMPTY_PROBE_BYTES)
        if len(head) == EMPTY_PROBE_BYTES:
            return  # a MiB of anything: the loader decides
        text = head.decode("utf-8", errors="replace")
        if p.suffix == ".txt":
            text = text.replace(cfg.doc_separator, "")
        if text.strip():
            return
    raise ConfigError(f"data.path: {cfg.path}: the corpus is empty (its files hold no text)")


def _local_files(spec: str) -> list[tuple[str, Path]]:
    """Files named by `spec` (a file, a folder, or a glob) on this machine, sorted; [] if none."""
    import glob

    path = Path(spec).expanduser()
    if path.is_file():
        return [(path.name, path)]
    if path.is_dir():
        return sorted((p.relative_to(path).as_posix(), p) for p in path.rglob("*") if p.is_file())
    return sorted((Path(m).name, Path(m)) for m in glob.glob(str(path)) if Path(m).is_file())


def source_fingerprint(cfg: DataConfig) -> str:
    """The corpus as the run key sees it: a hash of the bytes the documents are read from, and
    of the names that key them (which decide the train/val split), not of the path string.

    Cheap enough for plan time (no decoding, no tokenizer; the stdlib takes ~0.06 s): editing a
    file behind `data.path` gives a new fingerprint, the same files under another folder the
    same one. stdlib: the running Python's stdlib files (another Python's stdlib differs).
    sitepackages: the Python version, `data.max_bytes` and every installed `name==version`
    (a package upgraded or added gives a new key; a file edited in place does not).
    hf: a `save_to_disk` folder by its Arrow files (of `data.split` for a DatasetDict), local
    `data_files` by their bytes; a hub dataset cannot be read without downloading it, so it is
    identified by name, config and data_files only (an upstream change keeps its fingerprint).
    Distinct from `Corpus.fingerprint`, which hashes the decoded documents and keys token caches.
    """
    if cfg.kind == "pairs":
        return _pairs_fingerprint(cfg)
    if cfg.source == "stdlib":
        return "stdlib-" + _hash_files(stdlib_files())
    if cfg.source == "sitepackages":  # by what is installed: hashing ~250 MB per plan is slow
        parts = [platform.python_version(), str(cfg.max_bytes), *installed_packages()]
        return "sitepackages-" + _sha(parts)[:16]
    if cfg.source == "text":
        files = text_files(cfg)[1]
        _require_text(cfg, files)
        return "text-" + _hash_files(files)
    if cfg.from_disk:
        root = Path(cfg.from_disk).expanduser()
        if (root / "dataset_dict.json").is_file() and (root / cfg.split).is_dir():
            root = root / cfg.split
        if not root.is_dir():
            raise ConfigError(f"data.from_disk: {cfg.from_disk} is not a save_to_disk folder")
        arrow = sorted((p.name, p) for p in root.glob("*.arrow"))
        return "hf-disk-" + _hash_files(arrow or _local_files(str(root)))
    local = _local_files(cfg.data_files) if cfg.data_files else []
    if local:
        return "hf-files-" + _hash_files(local)
    return "hf-hub-" + _sha([str(cfg.name), str(cfg.config), str(cfg.data_files)])[:16]


_checked_pairs: set[tuple[str, str, str]] = set()  # (file digest, fields) read and valid


def _pairs_fingerprint(cfg: DataConfig) -> str:
    """A paired corpus as the run key sees it. text: the .jsonl files' bytes and names and the
    two field names, after every record was checked (`read_jsonl_pairs`: bad records fail here,
    at config time; once per process and file state). stdlib: the stdlib's files and the rule
    that derives its pairs (`example_pairs.EXAMPLE_FORMAT`)."""
    if cfg.source == "stdlib":
        from training.example_pairs import EXAMPLE_FORMAT

        return "stdlib-pairs-" + _sha([_hash_files(stdlib_files()), str(EXAMPLE_FORMAT)])[:16]
    check = (_hash_files(_pair_files(cfg)), cfg.source_field, cfg.target_field)
    if check not in _checked_pairs:
        read_jsonl_pairs(cfg)
        _checked_pairs.add(check)
    return "pairs-" + _sha(check)[:16]


def _is_val(key: str, val_fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()[:8], "big")
    return h / 2**64 < val_fraction


def split_documents(
    docs: list[tuple[str, str]], val_fraction: float
) -> tuple[list[str], list[str]]:
    """Deterministic train/val split by hash of each document's key (file path, record index).

    A corpus of few documents (e.g. one .txt file) is first cut into ~4 KB chunks at line
    boundaries so that both splits get text.
    """
    if len(docs) < MIN_DOCS_FOR_FILE_SPLIT:
        docs = [piece for doc in docs for piece in _chunks(*doc)]
    train, val = [], []
    for key, text in docs:
        (val if _is_val(key, val_fraction) else train).append(text)
    if not train or not val:
        raise ConfigError(
            f"data.val_fraction={val_fraction}: the split left "
            f"{'no training' if not train else 'no validation'} documents; use a larger corpus"
        )
    return train, val


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


# ---------------------------------------------------------------- tokenizers
class ByteTokenizer:
    """UTF-8 bytes as ids 0..255; NUL (0) doubles as the end-of-text separator."""

    vocab_size = 256
    eot_id = BYTE_EOT_ID

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [list(t.encode("utf-8", "replace")) for t in texts]

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", "replace")


class BPETokenizer:
    """A byte-level BPE `tokenizers.Tokenizer` with `<|endoftext|>` as a special token."""

    def __init__(self, tok):
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()
        self.eot_id = tok.token_to_id(EOT)

    @classmethod
    def train(cls, texts: list[str], vocab_size: int, max_chars: int) -> BPETokenizer:
        from tokenizers import ByteLevelBPETokenizer

        def sample() -> Iterator[str]:
            budget = max_chars
            for t in texts:
                if budget <= 0:
                    return
                yield t[:budget]
                budget -= len(t)

        total = sum(len(t) for t in texts)
        if total > max_chars:
            log.info("BPE trained on the first %d of %d training characters", max_chars, total)
        tok = ByteLevelBPETokenizer()
        tok.train_from_iterator(
            sample(),
            vocab_size=vocab_size,
            min_frequency=2,
            special_tokens=[EOT],
            show_progress=False,
        )
        return cls(tok._tokenizer)

    @classmethod
    def load(cls, path: Path) -> BPETokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)))

    def save(self, path: Path) -> None:
        self.tok.save(str(path))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts)]

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids)


def load_tokenizer(cache: Path):
    meta = json.loads((cache / "meta.json").read_text())
    return (
        ByteTokenizer()
        if meta["tokenizer"] == "byte"
        else BPETokenizer.load(cache / "tokenizer.json")
    )


# ---------------------------------------------------------------- token cache
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

    def split_tokens(self, split: np.ndarray | PairSplit, seq_len: int) -> int:
        """A split's size in D's units (epochs = tokens trained / this): its tokens; for pairs,
        pairs x seq_len, since D counts every position of a padded pair (PairedSeq2Seq)."""
        return len(split) * seq_len if isinstance(split, PairSplit) else len(split)


def cache_key(cfg: DataConfig, fingerprint: str) -> str:
    settings = [fingerprint, str(CACHE_FORMAT), cfg.tokenizer, str(cfg.val_fraction)]
    if cfg.tokenizer == "bpe":
        settings += [str(cfg.vocab_size), str(cfg.tokenizer_train_chars)]
    if cfg.kind == "pairs":  # text caches keep their keys
        settings.append("pairs")
    return _sha(settings)[:16]


def _write_stream(path: Path, texts: list[str], tokenizer, dtype) -> tuple[int, str]:
    """Encode texts in chunks, append each document's ids + EOT to `path`; return the count and
    the sha256 of the bytes written."""
    n, h = 0, hashlib.sha256()
    with open(path, "wb") as f:
        for i in range(0, len(texts), 4096):
            for ids in tokenizer.encode_batch(texts[i : i + 4096]):
                arr = np.asarray(ids + [tokenizer.eot_id], dtype=dtype)
                h.update(arr.tobytes())
                arr.tofile(f)
                n += arr.size
        f.flush()
        os.fsync(f.fileno())
    return n, h.hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


VERIFY_MAX_BYTES = 2 << 30  # checksum caches up to 2 GiB on load (sha256 ~1.5 GB/s); sizes always
_verified: set[tuple] = set()  # caches whose checksums matched in this process, by file stats


def cache_problem(cache: Path) -> str | None:
    """Why the token cache folder `cache` does not hold what its meta.json promises, or None.

    Checks that meta.json parses, that train.bin / val.bin have exactly n_*_tokens tokens of
    its dtype (a truncated file, even to a whole number of tokens, is caught), that a BPE cache
    has its tokenizer.json, and, for caches that record sha256 checksums (built since they were
    added) and total at most VERIFY_MAX_BYTES, that every file matches its checksum (once per
    process and file state)."""
    try:
        meta = json.loads((cache / "meta.json").read_text())
        itemsize = np.dtype(meta["dtype"]).itemsize
        names = ["train.bin", "val.bin"]
        for name, n in zip(names, (meta["n_train_tokens"], meta["n_val_tokens"])):
            size = (cache / name).stat().st_size
            if size != int(n) * itemsize:
                return f"{name} has {size} bytes, meta.json promises {n} tokens ({n * itemsize} bytes)"
        if meta.get("kind") == "pairs":
            for split in ("train", "val"):
                size = (cache / f"{split}.offsets.bin").stat().st_size
                n = meta[f"n_{split}_pairs"]
                if size != (2 * int(n) + 1) * 8:
                    return f"{split}.offsets.bin has {size} bytes, meta.json promises {n} pairs"
        if meta["tokenizer"] == "bpe":
            names.append("tokenizer.json")
            if not (cache / "tokenizer.json").is_file():
                return "tokenizer.json is missing"
        sums = meta.get("sha256") or {}
        stats = [(cache / name).stat() for name in sums]
        signature = tuple((str(cache / n), st.st_size, st.st_mtime_ns, st.st_ino)
                          for n, st in zip(sums, stats))  # fmt: skip
        if sums and signature not in _verified and sum(st.st_size for st in stats) <= VERIFY_MAX_BYTES:
            for name, digest in sums.items():
                if _file_sha256(cache / name) != digest:
                    return f"{name} does not match its sha256 in meta.json"
            _verified.add(signature)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"unreadable ({type(e).__name__}: {e})".splitlines()[0]
    return None


def _discard(cache: Path) -> None:
    """Move a bad cache out of the way (readers that mapped its files keep them) and delete it."""
    trash = Path(tempfile.mkdtemp(dir=cache.parent, prefix=cache.name + ".bad-"))
    os.rename(cache, trash / cache.name)
    shutil.rmtree(trash, ignore_errors=True)


def _build_cache(cfg: DataConfig, corpus: Corpus, final: Path) -> None:
    t0 = time.perf_counter()
    train_docs, val_docs = split_documents(corpus.documents, cfg.val_fraction)
    if cfg.tokenizer == "byte":
        tokenizer = ByteTokenizer()
    else:
        tokenizer = BPETokenizer.train(train_docs, cfg.vocab_size, cfg.tokenizer_train_chars)
    t_tok = time.perf_counter() - t0
    dtype = np.uint16 if tokenizer.vocab_size <= 2**16 else np.uint32
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=final.name + ".tmp-"))
    try:
        if isinstance(tokenizer, BPETokenizer):
            tokenizer.save(tmp / "tokenizer.json")
        n_train, sha_train = _write_stream(tmp / "train.bin", train_docs, tokenizer, dtype)
        n_val, sha_val = _write_stream(tmp / "val.bin", val_docs, tokenizer, dtype)
        sha256 = {"train.bin": sha_train, "val.bin": sha_val}
        if isinstance(tokenizer, BPETokenizer):
            sha256["tokenizer.json"] = _file_sha256(tmp / "tokenizer.json")
        meta = {
            "fingerprint": corpus.fingerprint,
            "description": corpus.description,
            "tokenizer": cfg.tokenizer,
            "vocab_size": tokenizer.vocab_size,
            "eot_id": tokenizer.eot_id,
            "dtype": np.dtype(dtype).name,
            "n_train_tokens": n_train,
            "n_val_tokens": n_val,
            "n_train_docs": len(train_docs),
            "n_val_docs": len(val_docs),
            "train_chars": sum(map(len, train_docs)),
            "tokenizer_seconds": round(t_tok, 2),
            "build_seconds": round(time.perf_counter() - t0, 2),
            "sha256": sha256,  # verified on load (cache_problem)
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.rename(tmp, final)  # atomic; fails if another process got there first
        except OSError:
            if not (final / "meta.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
        "sha256": {f"{split}.bin": h.hexdigest(),
                   f"{split}.offsets.bin": _file_sha256(tmp / f"{split}.offsets.bin")},
    }  # fmt: skip


def _build_pair_cache(cfg: DataConfig, corpus: PairCorpus, final: Path) -> None:
    t0 = time.perf_counter()
    train_pairs, val_pairs = split_pairs(corpus.pairs, cfg.val_fraction)
    if cfg.tokenizer == "byte":
        tokenizer = ByteTokenizer()
    else:  # one vocabulary for both sides (a shared embedding table, as the 2017 model's)
        texts = [side for pair in train_pairs for side in pair]
        tokenizer = BPETokenizer.train(texts, cfg.vocab_size, cfg.tokenizer_train_chars)
    t_tok = time.perf_counter() - t0
    dtype = np.uint16 if tokenizer.vocab_size <= 2**16 else np.uint32
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=final.name + ".tmp-"))
    try:
        sha256 = {}
        if isinstance(tokenizer, BPETokenizer):
            tokenizer.save(tmp / "tokenizer.json")
            sha256["tokenizer.json"] = _file_sha256(tmp / "tokenizer.json")
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
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.rename(tmp, final)  # atomic; fails if another process got there first
        except OSError:
            if not (final / "meta.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def prepare_data(cfg: DataConfig, cache_root: Path) -> TokenData:
    """Load (or build once and cache) the token streams (or pairs) for `cfg`."""
    pairs = cfg.kind == "pairs"
    corpus = load_pairs(cfg) if pairs else load_corpus(cfg)
    build = _build_pair_cache if pairs else _build_cache
    final = Path(cache_root) / cache_key(cfg, corpus.fingerprint)

    def problem() -> str | None:
        return cache_problem(final) if final.exists() else "missing"

    if problem():
        # One builder per cache: others (sweep jobs starting together, SLURM array tasks on a
        # shared filesystem) wait on the lock and then find the finished cache.
        final.parent.mkdir(parents=True, exist_ok=True)
        with open(final.parent / f"{final.name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if why := problem():
                if why != "missing":  # truncated, edited or half-deleted: never train on it
                    log.warning("token cache %s is corrupt (%s); rebuilding it", final, why)
                    _discard(final)
                log.info("building token cache %s for %s", final, corpus.description)
                build(cfg, corpus, final)
            if why := cache_problem(final):
                raise RuntimeError(f"token cache {final}: {why} right after building it")
    meta = json.loads((final / "meta.json").read_text())
    train = np.memmap(final / "train.bin", dtype=meta["dtype"], mode="r")
    val = np.memmap(final / "val.bin", dtype=meta["dtype"], mode="r")
    if pairs:
        train, val = (
            PairSplit(stream, np.fromfile(final / f"{split}.offsets.bin", np.int64), meta["eot_id"])
            for split, stream in (("train", train), ("val", val))
        )
    return TokenData(
        train, val, meta["vocab_size"], meta["eot_id"], corpus.fingerprint, final, meta
    )


# ---------------------------------------------------------------- batches
def val_pairs(val: PairSplit, seq_len: int, eval_tokens: int) -> PairSplit:
    """Fixed validation pairs: the first eval_tokens // seq_len pairs of the val split (a pair
    is seq_len positions of D, as a window is); identical for every run on the same cache."""
    n = eval_tokens // seq_len
    if n > len(val):
        raise ConfigError(
            f"data.eval_tokens={eval_tokens}: {n} pairs of train.seq_len={seq_len}, but the "
            f"validation split has only {len(val)} pairs; lower data.eval_tokens or raise "
            "data.val_fraction"
        )
    return val.head(n)


def val_windows(val: np.ndarray, seq_len: int, eval_tokens: int) -> np.ndarray:
    """Fixed validation windows: the first `eval_tokens` of the val stream cut into
    non-overlapping (seq_len + 1) windows; identical for every run on the same cache."""
    n = eval_tokens // seq_len
    if n < 1:
        raise ConfigError(f"data.eval_tokens={eval_tokens}: must be >= train.seq_len={seq_len}")
    if n * seq_len + 1 > len(val):
        raise ConfigError(
            f"data.eval_tokens={eval_tokens}: the validation split has only {len(val)} tokens; "
            "lower data.eval_tokens or raise data.val_fraction"
        )
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return np.asarray(val[idx], dtype=np.int64)  # (n, seq_len + 1)


class BatchSampler:
    """Random training windows from a seeded `torch.Generator`.

    Every micro-step draws the start offsets of the GLOBAL micro-batch (all ranks) and each rank
    takes its slice, so ranks never overlap and the stream depends only on the seed. The
    generator state is the data position saved in checkpoints.
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, micro_batch: int, seed: int,
                 rank: int = 0, world_size: int = 1):  # fmt: skip
        import torch

        if len(tokens) < seq_len + 2:
            raise ConfigError(
                f"train.seq_len={seq_len}: the training split has only {len(tokens)} tokens"
            )
        self.tokens, self.seq_len, self.micro_batch = tokens, seq_len, micro_batch
        self.rank, self.world_size = rank, world_size
        self.generator = torch.Generator().manual_seed(seed)

    def next(self):
        """(x, y): int64 tensors of shape (micro_batch, seq_len); y is x shifted by one."""
        import torch

        high = len(self.tokens) - self.seq_len - 1
        starts = torch.randint(0, high + 1, (self.world_size * self.micro_batch,),
                               generator=self.generator)  # fmt: skip
        mine = starts[self.rank * self.micro_batch : (self.rank + 1) * self.micro_batch].tolist()
        windows = np.stack([self.tokens[s : s + self.seq_len + 1] for s in mine]).astype(np.int64)
        batch = torch.from_numpy(windows)  # (B, T + 1)
        return batch[:, :-1], batch[:, 1:]

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
