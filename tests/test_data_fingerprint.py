"""The corpus fingerprint of the run key (training/data/filehash.py, docs/corpora.md
"Fingerprints"): up to SEQUENTIAL_MAX_BYTES the sha256 every key had before (so existing keys
stay), above it a Merkle list of per-file sha256s, so that after an edit only the changed file
is read. Either way: an edit gives a new key, the same files under another folder the same key.
"""

from __future__ import annotations

import csv
import hashlib
import os
import platform
import shutil
import time
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

import training.data.filehash as filehash
from sweeps.job import training_config
from training.config import DataConfig
from training.data import prepare_data, source_fingerprint, stdlib_files
from training.spec import resolve_config

ROOT = Path(__file__).resolve().parents[1]
DEMO_PYTHON = "3.11.7"  # the Python whose stdlib the committed demo trained on (its run keys)


def _text(path: Path) -> DataConfig:
    return DataConfig.from_dict({"source": "text", "path": str(path), "tokenizer": "byte"})


def _corpus(folder: Path, n: int = 5) -> Path:
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"f{i:02d}.txt").write_text(f"file {i}. " + "words of the corpus " * 500)
    (folder / "sub").mkdir()
    (folder / "sub" / "deep.txt").write_text("a nested file " * 100)
    old = time.time() - 3600  # settled files: their hashes are remembered
    for p in folder.rglob("*.txt"):
        os.utime(p, (old, old))
    return folder


def _sequential(files: list[tuple[str, Path]]) -> str:
    """The fingerprint of before, written out again: sha256 over name NUL bytes NUL, in order."""
    h = hashlib.sha256()
    for rel, p in files:
        h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _merkle(files: list[tuple[str, Path]]) -> str:
    """The per-file fingerprint written out: sha256 over the tag, then name NUL sha256 NUL."""
    h = hashlib.sha256(b"merkle-v1\0")
    for rel, p in files:
        h.update(rel.encode() + b"\0" + hashlib.sha256(p.read_bytes()).hexdigest().encode() + b"\0")
    return h.hexdigest()[:16]


def _files(folder: Path) -> list[tuple[str, Path]]:
    return sorted((p.relative_to(folder).as_posix(), p) for p in folder.rglob("*.txt"))


@pytest.fixture
def memo(tmp_path, monkeypatch) -> Path:
    """A fresh fingerprint memo folder, as in a new process on a new machine."""
    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(tmp_path / "memo"))
    (tmp_path / "memo").mkdir()
    monkeypatch.setattr(filehash, "_hashed", {})
    monkeypatch.setattr(filehash, "_unsaved", {})
    monkeypatch.setattr(filehash, "_unsaved_tables", {})
    return tmp_path / "memo"


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The names of the files the Merkle fingerprint reads (its per-file sha256)."""
    seen: list[str] = []
    real = filehash.file_sha256
    monkeypatch.setattr(filehash, "file_sha256", lambda p: seen.append(Path(p).name) or real(p))
    return seen


def test_up_to_the_limit_the_fingerprint_is_the_one_every_key_had_before(tmp_path, memo):
    corpus = _corpus(tmp_path / "c")
    assert source_fingerprint(_text(corpus)) == "text-" + _sequential(_files(corpus))
    stdlib = DataConfig.from_dict({"source": "stdlib"})
    assert source_fingerprint(stdlib) == "stdlib-" + _sequential(stdlib_files())


@pytest.mark.skipif(
    platform.python_version() != DEMO_PYTHON,
    reason=f"the demo's run keys hash Python {DEMO_PYTHON}'s stdlib files",
)
def test_the_committed_demo_run_keys_are_computed_again(memo):
    """A candidate of the demo's full grid (stdlib corpus) keyed from scratch gives its
    committed key."""
    sweep = yaml.safe_load((ROOT / "conf/sweep/demo.yaml").read_text())
    rows = list(csv.DictReader((ROOT / "results/demo/full_grid/runs.csv").open()))
    candidates = [r for r in rows if r["tune_role"] == "candidate"][:2]
    for row in candidates:
        overrides = [f"{k}={v}" for k, v in sweep["fixed"].items()]
        overrides += ["model=" + ("vanilla" if row["arch"].startswith("post") else "llama")]
        for field in ("model.size", "train.lr", "train.warmup", "train.schedule"):
            overrides.append(f"{field}={row[field]}")
        for field in ("train.tokens", "train.decay_start_tokens"):
            overrides.append(f"{field}={int(float(row[field]))}")
        overrides.append(f"train.decay_fraction={row['train.decay_fraction']}")
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("run", overrides=overrides)
        assert resolve_config(training_config(cfg)).run_key == row["run_key"], overrides


def test_above_the_limit_a_file_set_gets_the_merkle_fingerprint(tmp_path, memo, monkeypatch):
    monkeypatch.setattr(filehash, "SEQUENTIAL_MAX_BYTES", 1000)
    corpus = _corpus(tmp_path / "c")
    assert source_fingerprint(_text(corpus)) == "text-" + _merkle(_files(corpus))
    assert _merkle(_files(corpus)) != _sequential(_files(corpus))


def test_after_an_edit_only_the_changed_file_is_read(tmp_path, memo, reads, monkeypatch):
    monkeypatch.setattr(filehash, "SEQUENTIAL_MAX_BYTES", 1000)
    corpus = _corpus(tmp_path / "c")
    cfg = _text(corpus)
    first = source_fingerprint(cfg)
    assert sorted(reads) == sorted(p.name for _, p in _files(corpus))  # a new corpus: all read
    filehash._hashed.clear()  # a new process
    reads.clear()
    assert source_fingerprint(cfg) == first and reads == []  # unchanged: stats only
    edited = corpus / "f02.txt"
    edited.write_text(edited.read_text().replace("file 2.", "file X."))  # same size
    filehash._hashed.clear()
    edit = source_fingerprint(cfg)
    assert edit != first and reads == ["f02.txt"]
    assert edit == "text-" + _merkle(_files(corpus))  # as if every file had been read


def test_the_merkle_fingerprint_keeps_its_promises(tmp_path, memo, monkeypatch):
    """Re-preparation and a folder move keep the key, a copy too; an edit changes it and
    the original bytes again give the original key."""
    monkeypatch.setattr(filehash, "SEQUENTIAL_MAX_BYTES", 1000)
    corpus = _corpus(tmp_path / "c")
    first = source_fingerprint(_text(corpus))
    data = prepare_data(_text(corpus), tmp_path / "cache")
    shutil.rmtree(data.cache_dir)
    prepare_data(_text(corpus), tmp_path / "cache")
    filehash._hashed.clear()
    assert source_fingerprint(_text(corpus)) == first  # re-prepared
    moved = tmp_path / "elsewhere" / "corpus"
    moved.parent.mkdir()
    corpus.rename(moved)
    assert source_fingerprint(_text(moved)) == first  # moved: new paths, same files
    copy = tmp_path / "copy"
    shutil.copytree(moved, copy)  # new inodes and mtimes
    assert source_fingerprint(_text(copy)) == first
    doc = copy / "sub" / "deep.txt"
    text = doc.read_text()
    doc.write_text(text + "!")
    assert source_fingerprint(_text(copy)) != first
    doc.write_text(text)
    assert source_fingerprint(_text(copy)) == first


def test_a_remembered_fingerprint_of_before_is_kept_until_the_files_change(
    tmp_path, memo, monkeypatch, reads
):
    """A corpus above the limit fingerprinted by the code of before (the sequential sha256,
    remembered by its stats) keeps that key where it is while its files are unchanged; a copy
    elsewhere gets the Merkle key (the edge case docs/corpora.md states); an edit, a Merkle one."""
    monkeypatch.setattr(filehash, "SEQUENTIAL_MAX_BYTES", 1000)
    corpus = _corpus(tmp_path / "c")
    files = _files(corpus)
    sig, newest = filehash.signature_of(files)
    filehash.remember(sig, _sequential(files), newest)  # what the code of before wrote
    filehash._hashed.clear()
    assert source_fingerprint(_text(corpus)) == "text-" + _sequential(files)
    assert reads == []
    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)
    assert source_fingerprint(_text(copy)) == "text-" + _merkle(files)
    (corpus / "f00.txt").write_text("edited")
    assert source_fingerprint(_text(corpus)) == "text-" + _merkle(_files(corpus))
