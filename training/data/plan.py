"""The units of work of a corpus's preparation: its files cut into pieces of about UNIT_BYTES,
each read on its own (by a worker process, or again after an interrupted build).

A piece is a byte range of one file and the index of its first document (a .txt file's part
number, a .jsonl file's line number), so a piece yields exactly the documents, with exactly the
keys, that reading the whole file yields between its two offsets. Large .jsonl files are cut
after a line; large .txt files just after a document separator (one without line breaks that
cannot overlap itself; else the file stays whole); stdlib and site-packages files, whole.
Small files are grouped into one unit.
"""

from __future__ import annotations

from pathlib import Path

import training.data.sources as sources
from training.config import DataConfig
from training.data.sources import Piece

UNIT_BYTES = 16 << 20  # text per unit: the granularity of resuming and of parallel work
SCAN_BLOCK = 8 << 20  # a large file is scanned for its cut points this many bytes at a time


def file_pieces(cfg: DataConfig, rel: str, path: Path, unit_bytes: int) -> list[Piece]:
    """`path` as pieces of about `unit_bytes` (one piece when it is small or cannot be cut)."""
    size = path.stat().st_size
    if cfg.source != "text":
        return [Piece(rel, str(path), 0, size, 0, "file")]
    kind = "jsonl" if path.suffix == ".jsonl" else "txt"
    if size <= unit_bytes:
        return [Piece(rel, str(path), 0, size, 0, kind)]
    if kind == "jsonl":
        cuts = _cuts(path, b"\n", unit_bytes, _line_breaks)
    elif _cuttable(cfg.doc_separator):
        sep = cfg.doc_separator.encode("utf-8", "surrogatepass")
        cuts = _cuts(path, sep, unit_bytes, lambda b: b.count(sep))
    else:
        return [Piece(rel, str(path), 0, size, 0, kind)]
    ends = [c for c, _ in cuts[1:]] + [size]
    return [Piece(rel, str(path), s, e, base, kind) for (s, base), e in zip(cuts, ends)]


def _cuttable(sep: str) -> bool:
    """A separator a byte scan finds exactly where str.split does: no line break (text mode
    translates them) and no proper prefix that is also a suffix (overlapping matches)."""
    if "\n" in sep or "\r" in sep:
        return False
    return not any(sep[:k] == sep[-k:] for k in range(1, len(sep)))


def _line_breaks(data: bytes) -> int:
    """Lines ended in `data` as text mode counts them (\\n, \\r\\n and a lone \\r)."""
    return data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")


def _cuts(path: Path, sep: bytes, unit_bytes: int, count) -> list[tuple[int, int]]:
    """[(offset, documents before it)]: 0, then the end of the first `sep` at or after every
    further multiple of about `unit_bytes`. Reads the file once, a block at a time; a block is
    processed up to its last `sep`, so no separator (or \\r\\n) straddles two blocks."""
    cuts, pos, before, carry = [(0, 0)], 0, 0, b""
    with open(path, "rb") as f:
        while chunk := f.read(min(SCAN_BLOCK, unit_bytes)):
            buf = carry + chunk
            last = buf.rfind(sep)
            cut = last + len(sep) if last >= 0 else max(0, len(buf) - len(sep))
            done, carry = buf[:cut], buf[cut:]
            offset = 0
            while (due := cuts[-1][0] + unit_bytes - pos) < len(done):
                hit = done.find(sep, max(due - len(sep), offset))
                if hit < 0:
                    break
                end = hit + len(sep)
                before += count(done[offset:end])
                cuts.append((pos + end, before))
                offset = end
            before += count(done[offset:])
            pos += len(done)
    return [c for c in cuts if c[0] < path.stat().st_size]


def units(cfg: DataConfig, unit_bytes: int | None = None) -> list[list[Piece]]:
    """The corpus's pieces (files in the document order) grouped into units of about
    `unit_bytes` (UNIT_BYTES)."""
    unit_bytes = unit_bytes or UNIT_BYTES
    if cfg.source == "stdlib":
        files = sources.stdlib_files()
    elif cfg.source == "sitepackages":
        files = sources.sitepackages_files(cfg.max_bytes)
    else:
        files = sources.text_files(cfg)[1]
    groups, group, size = [], [], 0
    for rel, path in files:
        for piece in file_pieces(cfg, rel, path, unit_bytes):
            if group and size + piece.end - piece.start > unit_bytes:
                groups.append(group)
                group, size = [], 0
            group.append(piece)
            size += piece.end - piece.start
    if group:
        groups.append(group)
    return groups
