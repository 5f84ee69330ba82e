"""Superseded token caches: removed, so that disk does not grow with every edit of a corpus.

A cache is named by its corpus's fingerprint, so an edit of the corpus gives a new cache (which
takes the unchanged units' tokens, and the tokenizer if its sample is unchanged, from the old
one: training.data.build). Once the new cache is published the old one is superseded: its
corpus no longer exists where it was read. Each cache records its lineage, the corpus's place
(its folder, file or dataset) and every setting of its key except the fingerprint; a build
removes the finished caches and unfinished builds of its lineage other than itself, each
under its own lock (one being built or rebuilt right now is left alone).

Two copies of one corpus in two folders share a cache while both are unchanged (the key is the
files' content); an edit of one removes that cache, and the other copy's next run rebuilds it,
taking every unit's tokens from the edited copy's cache but the edited ones.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from training.config import DataConfig
from training.paths import open_lock

log = logging.getLogger("training.data")

LINEAGE_FILE = "lineage"  # in an unfinished build's folder (a finished one: meta.json)


def lineage(cfg: DataConfig) -> str:
    """The corpus's place and the settings of its cache key, without its fingerprint."""

    def place(p: str | None) -> str | None:
        return None if p is None else str(Path(p).expanduser().resolve())

    fields = dict(vars(cfg))
    fields.update(path=place(cfg.path), from_disk=place(cfg.from_disk))
    for unused in ("eval_tokens", "src_len", "val_path", "eot_id"):  # not in the cache's key
        fields.pop(unused, None)
    from training.data.sources import _sha

    return _sha([json.dumps(fields, sort_keys=True, default=str)])[:24]


def _lineage_of(folder: Path) -> str | None:
    try:
        if folder.name.endswith(".partial"):
            return (folder / LINEAGE_FILE).read_text()
        return json.loads((folder / "meta.json").read_text()).get("lineage")
    except (OSError, ValueError, AttributeError):
        return None


def superseded(final: Path, of: str) -> list[Path]:
    """The finished caches and unfinished builds next to `final` of lineage `of`, but `final`."""
    found = []
    for folder in sorted(final.parent.iterdir()):
        if folder.is_dir() and folder.name not in (final.name, final.name + ".partial"):
            if "." not in folder.name.removesuffix(".partial") and _lineage_of(folder) == of:
                found.append(folder)
    return found


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def remove_superseded(final: Path, of: str) -> list[tuple[Path, int]]:
    """Remove the caches `final` supersedes (see `superseded`); (folder, bytes) of each one
    removed. One whose lock another process holds is kept (it is being built or checked). Lock
    files stay (a few bytes; removing one another process waits on would let two build)."""
    removed = []
    for folder in superseded(final, of):
        key = folder.name.removesuffix(".partial")
        lock_path = folder.parent / f"{key}.lock"
        with open_lock(lock_path) as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("superseded cache %s is in use; kept", folder)
                continue
            if _lineage_of(folder) != of:  # replaced while we waited
                continue
            size = _size(folder)
            trash = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f"{key}.gone.tmp-"))
            os.rename(folder, trash / folder.name)  # readers that mapped its files keep them
            shutil.rmtree(trash, ignore_errors=True)
            removed.append((folder, size))
            log.info("removed superseded cache %s (%.0f MB)", folder, size / 1e6)
    return removed
