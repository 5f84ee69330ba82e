"""Corpus fingerprints for run keys.

A fingerprint hashes the bytes the documents are read from and the names that key them, not
the path string: editing a file gives a new fingerprint, the same files under another folder
the same one. Computed once (training.data.filehash remembers it by the files' stats), so a run
on a prepared corpus only stats its files.
"""

from __future__ import annotations

import platform
from pathlib import Path

import training.data.sources as sources
from training.config import ConfigError, DataConfig
from training.data.filehash import hash_files
from training.data.pairs import pairs_fingerprint
from training.data.shards import tokens_fingerprint
from training.data.sources import _sha

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


def _hf_fingerprint(cfg: DataConfig) -> str:
    if cfg.from_disk:
        root = Path(cfg.from_disk).expanduser()
        if (root / "dataset_dict.json").is_file() and (root / cfg.split).is_dir():
            root = root / cfg.split
        if not root.is_dir():
            raise ConfigError(f"data.from_disk: {cfg.from_disk} is not a save_to_disk folder")
        arrow = sorted((p.name, p) for p in root.glob("*.arrow"))
        return "hf-disk-" + hash_files(arrow or sources.local_files(str(root)))
    local = sources.local_files(cfg.data_files) if cfg.data_files else []
    if local:
        return "hf-files-" + hash_files(local)
    if cfg.data_files and cfg.name in ("json", "parquet", "csv", "text", "arrow"):
        raise ConfigError(f"data.data_files: {cfg.data_files} matches no files")
    return "hf-hub-" + _sha([str(cfg.name), str(cfg.config), str(cfg.data_files)])[:16]


def source_fingerprint(cfg: DataConfig) -> str:
    """The corpus as the run key sees it. Cheap for a prepared corpus (stats only; the stdlib
    ~0.06 s): no decoding, no tokenizer. stdlib: the running Python's stdlib files.
    sitepackages: the Python version, `data.max_bytes` and every installed `name==version`
    (a package upgraded or added gives a new key; a file edited in place does not).
    text: the files' bytes and names. hf: a `save_to_disk` folder by its Arrow files (of
    `data.split` for a DatasetDict), local `data_files` by their bytes; a hub dataset cannot be
    read without downloading it, so it is identified by name, config and data_files only (an
    upstream change keeps its fingerprint). tokens: every shard's bytes and name, after its
    header and largest id were checked (training.data.shards)."""
    if cfg.kind == "pairs":
        return pairs_fingerprint(cfg)
    if cfg.source == "stdlib":
        return "stdlib-" + hash_files(sources.stdlib_files())
    if cfg.source == "sitepackages":  # by what is installed: hashing ~250 MB per plan is slow
        parts = [platform.python_version(), str(cfg.max_bytes), *sources.installed_packages()]
        return "sitepackages-" + _sha(parts)[:16]
    if cfg.source == "text":
        files = sources.text_files(cfg)[1]
        _require_text(cfg, files)
        return "text-" + hash_files(files)
    if cfg.source == "tokens" and not (cfg.from_disk or cfg.name):
        return tokens_fingerprint(cfg)
    return _hf_fingerprint(cfg)
