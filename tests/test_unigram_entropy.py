"""The corpus's unigram entropy (training.data.unigram): the formula, counted once where the
token cache is built and kept in its meta.json, computed once for a cache built without it,
remembered for pre-tokenized shards, and printed by `python -m training.data entropy`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import training.data.cache as cache_mod
import training.data.unigram as unigram_mod
from training.config import DataConfig
from training.data import prepare_data, write_bin
from training.data.unigram import unigram_entropy

ROOT = Path(__file__).resolve().parents[1]
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def formula(tokens) -> float:
    """H = -sum p_i ln p_i over the tokens' frequencies, written out."""
    _, counts = np.unique(np.asarray(tokens), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def _corpus(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for f in range(6):
        parts = [" ".join(rng.choice(WORDS, size=int(rng.integers(20, 200)))) for _ in range(30)]
        (folder / f"f{f}.txt").write_text("<|endoftext|>".join(parts))
    return folder


def _text(corpus: Path) -> DataConfig:
    return DataConfig.from_dict(
        {"source": "text", "path": str(corpus), "vocab_size": 300, "tokenizer_train_chars": 20000}
    )


def test_the_entropy_is_the_formula_whatever_the_chunks(monkeypatch):
    # p = (1/2, 1/4, 1/4): H = 1.5 ln 2
    assert unigram_entropy(np.array([0, 0, 1, 2], np.uint16)) == pytest.approx(1.5 * math.log(2))
    assert unigram_entropy(np.array([7, 7, 7], np.uint16)) == 0.0  # one token: no surprise
    assert unigram_entropy(np.array([], np.uint16)) is None
    tokens = np.random.default_rng(0).zipf(1.3, 50_000).clip(max=4000).astype(np.uint16)
    whole = unigram_entropy(tokens, vocab_size=4096)
    assert whole == pytest.approx(formula(tokens), rel=1e-12)
    monkeypatch.setattr(unigram_mod, "CHUNK_TOKENS", 777)  # counted in many small chunks
    assert unigram_entropy([tokens[:1000], tokens[1000:]]) == pytest.approx(whole, rel=1e-12)


def test_a_prepared_cache_keeps_its_entropy_and_an_older_one_gets_it_once(tmp_path, monkeypatch):
    cfg = _text(_corpus(tmp_path / "c"))
    data = prepare_data(cfg, tmp_path / "cache", workers=1)
    meta = json.loads((data.cache_dir / "meta.json").read_text())
    assert meta["unigram_entropy"] == pytest.approx(formula(data.train), rel=1e-12)
    assert data.unigram_entropy == meta["unigram_entropy"] and 0 < data.unigram_entropy < 300

    # a cache built before the entropy was counted: computed on its first load, then kept
    del meta["unigram_entropy"]
    (data.cache_dir / "meta.json").write_text(json.dumps(meta))
    again = prepare_data(cfg, tmp_path / "cache")
    assert again.unigram_entropy == pytest.approx(data.unigram_entropy, rel=1e-12)
    stored = json.loads((data.cache_dir / "meta.json").read_text())
    assert stored == {**meta, "unigram_entropy": again.unigram_entropy}

    def recount(*args, **kwargs):
        raise AssertionError("a prepared corpus was counted again")

    monkeypatch.setattr(cache_mod, "unigram_entropy", recount)
    assert prepare_data(cfg, tmp_path / "cache").unigram_entropy == again.unigram_entropy


def test_shards_count_their_training_split_once(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    chunks = [rng.integers(0, 50, size=n, dtype=np.uint16) for n in (3000, 2000, 1000)]
    for i, c in enumerate(chunks):
        write_bin(tmp_path / f"s{i}.bin", c)
        os.utime(tmp_path / f"s{i}.bin", (1e9, 1e9))  # settled: what is counted is remembered
    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(tmp_path / "cache"))
    cfg = DataConfig.from_dict(
        {
            "source": "tokens",
            "path": str(tmp_path / "s*.bin"),
            "vocab_size": 64,
            "eot_id": 0,
            "val_fraction": 0.3,
        }
    )
    data = prepare_data(cfg, tmp_path / "cache")
    train = np.concatenate(chunks[:2])  # the last shard is held out
    assert data.unigram_entropy == pytest.approx(formula(train), rel=1e-12)
    assert data.unigram_entropy != pytest.approx(formula(np.concatenate(chunks)), rel=1e-6)

    def recount(*args, **kwargs):
        raise AssertionError("the shards were counted again")

    monkeypatch.setattr(cache_mod, "unigram_entropy", recount)
    assert prepare_data(cfg, tmp_path / "cache").unigram_entropy == data.unigram_entropy


@pytest.mark.slow
def test_the_entropy_command_prints_what_the_cache_holds(tmp_path):
    corpus = _corpus(tmp_path / "c")
    cmd = [sys.executable, "-m", "training.data", "entropy", "data=text", f"data.path={corpus}"]
    cmd += ["data.tokenizer=byte", f"paths.cache_dir={tmp_path / 'cache'}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    cfg = DataConfig.from_dict({"source": "text", "path": str(corpus), "tokenizer": "byte"})
    data = prepare_data(cfg, tmp_path / "cache")
    assert out.stdout.startswith("unigram entropy of text-")
    assert f"{data.unigram_entropy:.6f} nats/token" in out.stdout
    assert f"{len(data.train):,} training tokens (vocab 256)" in out.stdout
