"""Where documents come from, as streams of (key, text): the running Python's stdlib, the
installed packages' sources, local .txt/.jsonl files, Hugging Face datasets (batched, or
streamed). Nothing here holds a corpus in memory: a document at a time, files read in blocks.

A document's key (file path, `file:part`, `file:line`, row index) decides its train/val side.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import importlib.metadata
import io
import json
import os
import platform
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from training.config import ConfigError, DataConfig

STDLIB_EXCLUDED_DIRS = {
    "test",
    "tests",
    "idle_test",
    "site-packages",
    "dist-packages",
    "__pycache__",
}
SITEPACKAGES_MAX_FILE_BYTES = 1 << 20  # larger .py files are generated tables, not code
TEXT_SUFFIXES = (".txt", ".jsonl")
READ_BLOCK_CHARS = 4 << 20  # .txt files are read and split in blocks of this many characters
HF_BATCH_ROWS = 1000


def _sha(parts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


# ---------------------------------------------------------------- file lists
def stdlib_files() -> list[tuple[str, Path]]:
    """The running Python's stdlib .py files (no test suites, no site-packages), sorted.
    Excluded folders are pruned from the walk (every plan fingerprints the stdlib)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in STDLIB_EXCLUDED_DIRS]
        for name in names:
            if name.endswith(".py"):
                p = Path(folder, name)
                files.append((p.relative_to(root).as_posix(), p))
    return sorted(files)


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
            d
            for d in subdirs
            if d not in STDLIB_EXCLUDED_DIRS and not d.endswith((".dist-info", ".egg-info"))
        ]
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
    root = site_packages_root()
    names = {
        f"{d.metadata['Name']}=={d.version}"
        for d in importlib.metadata.distributions(path=[str(root)])
        if d.metadata["Name"]
    }
    return sorted(names, key=str.lower)


def text_files(cfg: DataConfig) -> tuple[Path, list[tuple[str, Path]]]:
    """(root, [(name, file)]) of a text corpus, sorted: the file itself, or every .txt/.jsonl
    file under the folder. The names (the file's name, paths relative to the folder) key the
    documents, so they decide the train/val split."""
    root = Path(cfg.path).expanduser().resolve()
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.suffix in TEXT_SUFFIXES)
    else:
        raise ConfigError(f"data.path: {cfg.path} does not exist (a .txt/.jsonl file or a folder)")
    if root.is_dir() and not os.access(root, os.R_OK | os.X_OK):  # else rglob finds nothing
        raise ConfigError(f"data.path: cannot read the folder {root} (permission denied)")
    if not files or any(p.suffix not in TEXT_SUFFIXES for p in files):
        raise ConfigError(f"data.path: {cfg.path} holds no .txt or .jsonl files")
    _check_readable(files)
    return root, [(p.name if root.is_file() else p.relative_to(root).as_posix(), p) for p in files]


def _check_readable(files: list[Path]) -> None:
    """Every corpus file is a regular file this process can read: a FIFO blocks the reader
    forever, a symlink loop or an unreadable file fails with a traceback once tokenizing."""
    for p in files:
        if p.is_symlink() and not p.exists():
            raise ConfigError(
                f"data.path: {p} is a symbolic link to nothing (a loop or a missing target)"
            )
        if not p.is_file():
            raise ConfigError(f"data.path: {p} is not a regular file (a FIFO, socket or device)")
        if not os.access(p, os.R_OK):
            raise ConfigError(f"data.path: cannot read {p} (permission denied)")


def local_files(spec: str) -> list[tuple[str, Path]]:
    """Files named by `spec` (a file, a folder, or a glob) on this machine, sorted; [] if none."""
    path = Path(spec).expanduser()
    if path.is_file():
        return [(path.name, path)]
    if path.is_dir():
        return sorted((p.relative_to(path).as_posix(), p) for p in path.rglob("*") if p.is_file())
    return sorted((Path(m).name, Path(m)) for m in glob.glob(str(path)) if Path(m).is_file())


def source_bytes(cfg: DataConfig) -> int | None:
    """The size of the files a document source reads (for progress and ETA); None if unknown."""
    if cfg.source == "stdlib":
        files = stdlib_files()
    elif cfg.source == "sitepackages":
        files = sitepackages_files(cfg.max_bytes)
    elif cfg.source == "text":
        files = text_files(cfg)[1]
    else:
        return None
    return sum(p.stat().st_size for _, p in files)


# ---------------------------------------------------------------- documents
def _file_documents(files: list[tuple[str, Path]]) -> Iterator[tuple[str, str]]:
    for rel, p in files:
        yield rel, p.read_text(encoding="utf-8", errors="replace")


@dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of `path` (keyed `rel`), whose first document is number `base`."""

    rel: str
    path: str
    start: int
    end: int
    base: int
    kind: str  # "txt", "jsonl" or "file" (one document, decoded whole)


class _Window(io.RawIOBase):
    """Bytes [start, end) of a file, as a raw stream."""

    def __init__(self, path: str, start: int, end: int):
        self.f = open(path, "rb")
        self.f.seek(start)
        self.left = end - start

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self.f.readinto(memoryview(b)[: max(0, min(len(b), self.left))])
        self.left -= n
        return n

    def close(self) -> None:
        self.f.close()
        super().close()


def txt_documents(piece: Piece, separator: str) -> Iterator[tuple[str, str]]:
    """(`rel:i`, part i) of the piece split at `separator`, blank parts skipped, read in blocks
    with universal newlines; non-UTF-8 bytes become U+FFFD (the text is kept, not cut)."""
    i, tail = piece.base, ""
    window = io.BufferedReader(_Window(piece.path, piece.start, piece.end), 1 << 20)
    with io.TextIOWrapper(window, encoding="utf-8", errors="replace") as f:
        while block := f.read(READ_BLOCK_CHARS):
            parts = (tail + block).split(separator)
            tail = parts.pop()  # may end in the start of a separator: completed by the next block
            for part in parts:
                if part.strip():
                    yield f"{piece.rel}:{i}", part
                i += 1
    if tail.strip():
        yield f"{piece.rel}:{i}", tail


def jsonl_documents(piece: Piece, text_field: str) -> Iterator[tuple[str, str]]:
    """(`rel:line`, record[text_field]) of every non-blank line of the piece; ConfigError naming
    file:line for a line that is not UTF-8, not JSON, not an object or without the field."""
    for lineno, raw in lines(piece):
        where = f"{piece.path}:{lineno}"
        record = json_record(raw, where)
        if record is None:
            continue
        if text_field not in record:
            raise ConfigError(
                f"data.text_field: {text_field!r} not in {where}; "
                f"fields: {', '.join(sorted(record))}"
            )
        yield f"{piece.rel}:{lineno}", str(record[text_field])


def lines(piece: Piece) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every line of the piece, universal newlines, read in blocks."""
    lineno, carry = piece.base, b""
    with _Window(piece.path, piece.start, piece.end) as f:
        while block := f.read(READ_BLOCK_CHARS):
            buf = carry + block
            cut = buf.rfind(b"\n") + 1  # a \r\n never straddles two blocks
            carry = buf[cut:]
            for raw in buf[:cut].splitlines():
                lineno += 1
                yield lineno, raw
    for raw in carry.splitlines():
        lineno += 1
        yield lineno, raw


def json_record(raw: bytes, where: str) -> dict | None:
    """The JSON object on one line, None for a blank line; ConfigError naming `where` else."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"data.path: {where} is not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
        ) from None
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except ValueError as e:
        raise ConfigError(f"data.path: {where} is not JSON ({e})") from None
    if not isinstance(record, dict):
        raise ConfigError(f"data.path: {where} is not a JSON object")
    return record


def piece_documents(piece: Piece, cfg: DataConfig) -> Iterator[tuple[str, str]]:
    """The documents of one piece, with the keys reading its whole file gives them."""
    if piece.kind == "file":
        yield piece.rel, Path(piece.path).read_text(encoding="utf-8", errors="replace")
    elif piece.kind == "jsonl":
        yield from jsonl_documents(piece, cfg.text_field)
    else:
        yield from txt_documents(piece, cfg.doc_separator)


def text_documents(cfg: DataConfig) -> Iterator[tuple[str, str]]:
    for rel, p in text_files(cfg)[1]:
        kind = "jsonl" if p.suffix == ".jsonl" else "txt"
        yield from piece_documents(Piece(rel, str(p), 0, p.stat().st_size, 0, kind), cfg)


def open_hf(cfg: DataConfig):
    """(dataset, origin) of data=hf: a save_to_disk folder, or `load_dataset` (streamed with
    data.streaming). ConfigError for a dataset that cannot be loaded or lacks data.text_field."""
    import datasets  # ~1 s; only data=hf needs it

    if not sys.stderr.isatty():  # a job's log, or an error that must stay one line
        datasets.disable_progress_bars()
    try:
        if cfg.from_disk:
            ds = datasets.load_from_disk(cfg.from_disk)
            origin = f"disk:{Path(cfg.from_disk).resolve()}"
            if isinstance(ds, datasets.DatasetDict):
                if cfg.split not in ds:
                    raise ConfigError(
                        f"data.split: {cfg.split!r} not in {cfg.from_disk}; have {list(ds)}"
                    )
                ds = ds[cfg.split]
        else:
            ds = datasets.load_dataset(
                cfg.name,
                cfg.config,
                split=cfg.split,
                data_files=cfg.data_files,
                streaming=cfg.streaming,
            )
            origin = f"{cfg.name}/{cfg.config}"
    except ConfigError:
        raise
    except Exception as e:  # hub unreachable, no such dataset or split, unreadable files
        what = cfg.from_disk or cfg.name
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"data.name: cannot load dataset {what!r} ({first})") from None
    columns = ds.column_names
    if columns is None:  # a streamed json dataset knows its columns once read
        columns = list(next(iter(ds), {}))
    if cfg.text_field not in columns:
        raise ConfigError(
            f"data.text_field: {cfg.text_field!r} not in the dataset {cfg.from_disk or cfg.name}; "
            f"columns: {columns}"
        )
    return ds, origin


def hf_documents(ds, text_field: str) -> Iterator[tuple[str, str]]:
    """(row index, text) of a Dataset or IterableDataset, read HF_BATCH_ROWS rows at a time."""
    i = 0
    for batch in ds.select_columns([text_field]).iter(batch_size=HF_BATCH_ROWS):
        for text in batch[text_field]:
            yield str(i), text
            i += 1


def documents(cfg: DataConfig, hf_dataset=None) -> Iterator[tuple[str, str]]:
    """The documents of a data=stdlib/sitepackages/text/hf config, in their fixed order."""
    if cfg.source == "stdlib":
        return _file_documents(stdlib_files())
    if cfg.source == "sitepackages":
        return _file_documents(sitepackages_files(cfg.max_bytes))
    if cfg.source == "text":
        return text_documents(cfg)
    return hf_documents(hf_dataset, cfg.text_field)


def is_val(key: str, val_fraction: float) -> bool:
    """Whether the document (or pair) keyed `key` is held out: a hash of the key, not its place."""
    h = int.from_bytes(hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()[:8], "big")
    return h / 2**64 < val_fraction


def describe_corpus(cfg: DataConfig, digest: str, n_docs: int, n_chars: int) -> tuple[str, str]:
    """(fingerprint of the decoded documents, description) of a corpus whose documents hash to
    `digest`: the cache's meta.json and the run's data tags, whichever code built it."""
    py = platform.python_version()
    if cfg.source == "stdlib":
        return f"stdlib-py{py}-{digest}", f"Python {py} stdlib, {n_docs} files"
    if cfg.source == "sitepackages":
        n = len(installed_packages())
        return (
            f"sitepackages-py{py}-{digest}",
            f"site-packages sources of {n} packages, {n_docs} files, {n_chars / 1e6:.0f}M characters",
        )
    if cfg.source == "text":
        root, files = text_files(cfg)
        return f"text-{digest}", f"{root} ({len(files)} files, {n_docs} docs)"
    origin = (
        f"disk:{Path(cfg.from_disk).resolve()}" if cfg.from_disk else f"{cfg.name}/{cfg.config}"
    )
    return f"hf-{digest}", f"{origin} [{cfg.split}] ({n_docs} docs)"
