"""Resumable preparation (training.data.build): a build killed at any point continues from the
units it logged, writes the same tokens as an uninterrupted build, and never publishes or reads
anything half-written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
from corpus_helpers import write_corpus

import training.data.encode as encode_mod
import training.data.plan as plan_mod
from training.config import DataConfig
from training.data import prepare_data

ROOT = Path(__file__).resolve().parents[1]
UNIT = 4000

# Prepares with small units in one worker, printing each unit it logs and then pausing, so
# that the parent can kill it between (or while) units.
CHILD = """
import sys, time
import training.data.build as build
import training.data.plan as plan
from training.config import DataConfig
from training.data import prepare_data

plan.UNIT_BYTES = {unit}
accept = build.Partial.accept

def slow(self, result, extra):
    entry = accept(self, result, extra)
    print("logged", len(self.done), flush=True)
    time.sleep(0.05)
    return entry

build.Partial.accept = slow
cfg = DataConfig.from_dict({cfg!r})
prepare_data(cfg, __import__("pathlib").Path({cache!r}), workers=1)
print("finished", flush=True)
"""


def _cfg(corpus: Path) -> dict:
    return {
        "source": "text",
        "path": str(corpus),
        "vocab_size": 300,
        "tokenizer_train_chars": 20000,
    }


def _killed_after(cfg: dict, cache: Path, n_logged: int) -> None:
    """Run the preparation in a subprocess and kill -9 it once it has logged n_logged units."""
    code = CHILD.format(unit=UNIT, cfg=cfg, cache=str(cache))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )
    for line in child.stdout:
        if line.split() == ["logged", str(n_logged)]:
            os.kill(child.pid, signal.SIGKILL)
            break
    child.wait(timeout=120)
    assert child.returncode == -signal.SIGKILL, "the build finished before it was killed"


def test_a_build_killed_with_sigkill_resumes_and_writes_the_same_tokens(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "c", n_files=6)
    cfg = _cfg(corpus)
    monkeypatch.setattr(plan_mod, "UNIT_BYTES", UNIT)
    want = prepare_data(DataConfig.from_dict(cfg), tmp_path / "whole", workers=1)
    assert len(want.meta["units"]) > 8

    cache = tmp_path / "cache"
    _killed_after(cfg, cache, 4)
    partial = next(cache.glob("*.partial"))
    assert not [p for p in cache.iterdir() if p.suffix not in (".partial", ".lock")]  # no cache
    logged = (partial / "done.jsonl").read_text().splitlines()
    assert len(logged) >= 4

    encoded = []
    run = encode_mod.UnitJob.run
    monkeypatch.setattr(
        encode_mod.UnitJob, "run", lambda job, tok: encoded.append(job) or run(job, tok)
    )
    got = prepare_data(DataConfig.from_dict(cfg), cache, workers=1)
    np.testing.assert_array_equal(got.train, want.train)
    np.testing.assert_array_equal(got.val, want.val)
    assert got.meta["sha256"] == want.meta["sha256"] and got.fingerprint == want.fingerprint
    # the units done before the kill were kept, not encoded again
    assert len(encoded) == len(want.meta["units"]) - len(logged)
    assert not list(cache.glob("*.partial")) and not (got.cache_dir / "units").exists()


def test_a_torn_log_and_a_spoiled_shard_are_redone(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "c", n_files=6)
    cfg = DataConfig.from_dict(_cfg(corpus))
    monkeypatch.setattr(plan_mod, "UNIT_BYTES", UNIT)
    want = prepare_data(cfg, tmp_path / "whole", workers=1)
    cache = tmp_path / "cache"
    _killed_after(_cfg(corpus), cache, 5)
    partial = next(cache.glob("*.partial"))
    log = partial / "done.jsonl"
    entries = log.read_text().splitlines()
    third = partial / json.loads(entries[2])["file"]
    third.write_bytes(third.read_bytes()[:-2] + b"\0\0")  # same size, other tokens
    log.write_text("\n".join(entries) + '\n{"file": "units/u0000')  # a torn last line
    (partial / "units" / "u000099.bin.tmp-1").write_bytes(b"junk")  # a killed worker's
    got = prepare_data(cfg, cache, workers=1)
    np.testing.assert_array_equal(got.train, want.train)
    np.testing.assert_array_equal(got.val, want.val)
    assert got.meta["units"] == want.meta["units"]


def test_a_partial_build_of_another_plan_starts_over(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "c", n_files=6)
    cfg = DataConfig.from_dict(_cfg(corpus))
    cache = tmp_path / "cache"
    _killed_after(_cfg(corpus), cache, 3)
    monkeypatch.setattr(plan_mod, "UNIT_BYTES", 2 * UNIT)  # the code's units changed
    got = prepare_data(cfg, cache, workers=1)
    monkeypatch.setattr(plan_mod, "UNIT_BYTES", UNIT)
    want = prepare_data(cfg, tmp_path / "whole", workers=1)
    np.testing.assert_array_equal(got.train, want.train)
    assert len(got.meta["units"]) < len(want.meta["units"])


def test_after_an_edit_only_the_units_it_touched_are_encoded_again(tmp_path, monkeypatch):
    """The cache of the edited corpus takes the unchanged units' tokens from the cache of the
    corpus before the edit (same bytes, same tokenizer: BPE sampled from the first file), and
    holds the tokens a build from scratch writes."""
    corpus = write_corpus(tmp_path / "c", n_files=6)
    cfg = DataConfig.from_dict(_cfg(corpus))
    monkeypatch.setattr(plan_mod, "UNIT_BYTES", UNIT)
    before = prepare_data(cfg, tmp_path / "cache", workers=1)
    last = corpus / "f05.txt"
    last.write_text(last.read_text() + "<|endoftext|>omega omega omega")
    encoded = []
    run = encode_mod.UnitJob.run
    monkeypatch.setattr(
        encode_mod.UnitJob, "run", lambda job, tok: encoded.append(job) or run(job, tok)
    )
    after = prepare_data(cfg, tmp_path / "cache", workers=1)
    assert after.cache_dir != before.cache_dir
    assert 0 < len(encoded) <= 2 < len(after.meta["units"])
    assert {p.rel for job in encoded for p in job.pieces} == {"f05.txt"}
    monkeypatch.undo()
    monkeypatch.setattr(plan_mod, "UNIT_BYTES", UNIT)
    fresh = prepare_data(cfg, tmp_path / "fresh", workers=1)
    np.testing.assert_array_equal(after.train, fresh.train)
    np.testing.assert_array_equal(after.val, fresh.val)
    assert after.fingerprint == fresh.fingerprint and after.fingerprint != before.fingerprint


def test_a_rebuild_after_an_edit_reads_only_the_edited_file_to_find_its_units(
    tmp_path, monkeypatch
):
    """Which units can take the previous cache's tokens is decided by each unit's sha256,
    remembered by its files' stats: the rebuild reads no unchanged file to decide it."""
    import training.data.build as build_mod

    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(tmp_path / "memo"))
    corpus = write_corpus(tmp_path / "c", n_files=6)
    old = os.stat(corpus / "f00.txt").st_mtime - 3600  # settled files: their hashes are kept
    for p in corpus.iterdir():
        os.utime(p, (old, old))
    cfg = DataConfig.from_dict(_cfg(corpus))
    monkeypatch.setattr(plan_mod, "UNIT_BYTES", UNIT)
    before = prepare_data(cfg, tmp_path / "cache", workers=2)
    last = corpus / "f05.txt"
    last.write_text(last.read_text() + "<|endoftext|>omega omega omega")
    opened = []

    def counting_open(path, *args, **kwargs):
        opened.append(Path(path).name)
        return open(path, *args, **kwargs)

    monkeypatch.setattr(build_mod, "open", counting_open, raising=False)  # build.py's reads only
    after = prepare_data(cfg, tmp_path / "cache", workers=2)
    assert after.cache_dir != before.cache_dir
    assert {name for name in opened if name.endswith(".txt")} == {"f05.txt"}
