"""Corpora at scale: streamed preparation, fingerprints checked by stats, pre-tokenized shards,
streaming datasets, the prepare command and its bad-input lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from corpus_helpers import WORDS, text_config, write_corpus

import training.data.build as build_mod
import training.data.encode as encode_mod
import training.data.plan as plan_mod
from training.config import ConfigError, DataConfig
from training.data import ShardedTokens, open_shard, prepare_data, source_fingerprint, write_bin

ROOT = Path(__file__).resolve().parents[1]


def test_tokens_do_not_depend_on_the_batch_size_units_or_workers(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "c")
    with open(corpus / "g.jsonl", "w") as f:  # a large .jsonl file is cut into pieces
        for i in range(400):
            f.write(json.dumps({"text": f"record {i} " + " ".join(WORDS[: i % 12 + 1])}) + "\n")
    cfg = text_config(corpus)
    want = prepare_data(cfg, tmp_path / "a", workers=1)
    assert len(want.meta["units"]) == 1
    for batch, unit, workers in [(997, 3000, 1), (1 << 20, 5000, 2), (4096, 1 << 20, 2)]:
        monkeypatch.setattr(encode_mod, "BATCH_CHARS", batch)
        monkeypatch.setattr(plan_mod, "UNIT_BYTES", unit)
        got = prepare_data(cfg, tmp_path / f"b{unit}", workers=workers)
        assert len(got.meta["units"]) > (1 if unit < 10000 else 0)
        np.testing.assert_array_equal(got.train, want.train)
        np.testing.assert_array_equal(got.val, want.val)
        assert got.fingerprint == want.fingerprint
        assert got.meta["n_train_docs"] == want.meta["n_train_docs"]
        assert got.meta["train_chars"] == want.meta["train_chars"]


def test_max_tokens_stops_at_the_same_document_whatever_the_batch_size(tmp_path, monkeypatch):
    cfg = text_config(write_corpus(tmp_path / "c"), tokenizer="byte", max_tokens=50000)
    want = prepare_data(cfg, tmp_path / "a")
    monkeypatch.setattr(encode_mod, "BATCH_CHARS", 997)  # the stop falls mid-stream
    monkeypatch.setattr(plan_mod, "UNIT_BYTES", 3000)  # and in a unit after others
    got = prepare_data(cfg, tmp_path / "b", workers=2)
    np.testing.assert_array_equal(got.train, want.train)
    np.testing.assert_array_equal(got.val, want.val)
    assert 50000 <= len(got.train) + len(got.val) < 50000 + 2000


def test_preparation_memory_does_not_grow_with_thewrite_corpus(tmp_path, monkeypatch):
    """Python's peak allocations (numpy's included) while preparing a corpus ~70x and ~140x the
    batch size: the same, and under half the corpus."""
    import training.data.sources as sources

    monkeypatch.setattr(encode_mod, "BATCH_CHARS", 1 << 15)
    monkeypatch.setattr(sources, "READ_BLOCK_CHARS", 1 << 14)
    monkeypatch.setattr(plan_mod, "UNIT_BYTES", 1 << 18)
    peaks = []
    for n_files in (40, 80):
        corpus = write_corpus(tmp_path / f"c{n_files}", n_files=n_files, docs=200, seed=n_files)
        cfg = text_config(corpus, tokenizer="byte")
        size = sum(p.stat().st_size for p in corpus.iterdir())
        tracemalloc.start()
        prepare_data(cfg, tmp_path / "cache", workers=1)  # in this process: traced
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert size > 30 * encode_mod.BATCH_CHARS
    assert peaks[1] < 1.2 * peaks[0] and peaks[1] < size / 2, (peaks, size)


def test_a_prepared_corpus_is_fingerprinted_by_stats_and_an_edit_is_seen(tmp_path, monkeypatch):
    import training.data.filehash as filehash

    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(filehash, "RACY_S", -1.0)  # files just written count as settled
    corpus = write_corpus(tmp_path / "c")
    cfg = text_config(corpus, tokenizer="byte")
    source_fingerprint(cfg)
    assert not (tmp_path / "cache").exists()  # no cache folder yet (a dry run): nothing written
    (tmp_path / "cache").mkdir()  # what preparing makes
    filehash._hashed.clear()
    first = source_fingerprint(cfg)
    filehash._hashed.clear()  # a new process: read back from disk, no file is read
    opened = []
    real_open = open
    monkeypatch.setattr(
        "builtins.open", lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k)
    )
    assert source_fingerprint(cfg) == first
    assert len([p for p in opened if p.startswith(str(corpus))]) <= 1  # the empty-corpus probe
    monkeypatch.undo()
    monkeypatch.setattr(filehash, "RACY_S", -1.0)
    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(tmp_path / "cache"))
    moved = tmp_path / "elsewhere"
    corpus.rename(moved)
    assert source_fingerprint(text_config(moved, tokenizer="byte")) == first  # same files, same key
    (moved / "f03.txt").write_text((moved / "f03.txt").read_text() + " omega")
    assert source_fingerprint(text_config(moved, tokenizer="byte")) != first


def test_an_interrupted_build_is_never_read_and_is_finished_next_time(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "c")
    cfg = text_config(corpus, tokenizer="byte")

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_mod, "check_split", boom)
    with pytest.raises(KeyboardInterrupt):
        prepare_data(cfg, tmp_path / "cache")
    assert sorted(p.suffix for p in (tmp_path / "cache").iterdir()) == [".lock", ".partial"]
    monkeypatch.undo()
    data = prepare_data(cfg, tmp_path / "cache")
    assert len(data.train) and len(data.val)
    assert sorted(p.suffix for p in (tmp_path / "cache").iterdir()) == ["", ".lock"]


def test_jsonl_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "fine"}\n{not json}\n')
    with pytest.raises(ConfigError, match=f"data.path: {path}:2 is not JSON"):
        prepare_data(text_config(path, tokenizer="byte"), tmp_path / "cache")


def test_non_utf8_text_becomes_replacement_characters(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(("caf\xe9\n" * 30000).encode("latin-1"))
    data = prepare_data(text_config(path, tokenizer="byte"), tmp_path / "cache")
    tokens = np.concatenate([data.train, data.val]).astype(np.uint8).tobytes()
    assert tokens.count("\ufffd".encode()) == 30000


def test_streaming_without_a_token_limit_is_one_warning(tmp_path, capsys, monkeypatch):
    """data.streaming=true without data.max_tokens is legal (a stream you want whole) but reads
    the whole dataset before the first step: one `warning:` line when the run is resolved."""
    import training.spec as spec
    from tests.train_helpers import compose

    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(50)))
    monkeypatch.setattr(spec, "_WARNED", set())  # once per process: this test's process
    hf = ["data=hf", "data.name=json", f"data.data_files={path}", "data.tokenizer=byte"]
    capsys.readouterr()
    spec.resolve_config(compose(*hf, "data.streaming=true", "data.max_tokens=1e4"))
    assert "warning:" not in capsys.readouterr().err
    spec.resolve_config(compose(*hf, "data.streaming=true"))
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "warning: data.streaming=true without data.max_tokens: the whole dataset is streamed "
        "and tokenized before training starts; set data.max_tokens to bound it"
    ]


# ---------------------------------------------------------------- hf, streaming
def test_streaming_gives_the_same_tokens_as_a_download(tmp_path):
    path = tmp_path / "docs.jsonl"
    with open(path, "w") as f:
        for i in range(300):
            f.write(json.dumps({"text": f"document {i} " + " ".join(WORDS[: i % 12 + 1])}) + "\n")
    base = {"source": "hf", "name": "json", "data_files": str(path), "tokenizer": "byte"}
    whole = prepare_data(DataConfig.from_dict(base), tmp_path / "a")
    streamed = prepare_data(DataConfig.from_dict({**base, "streaming": True}), tmp_path / "b")
    np.testing.assert_array_equal(whole.train, streamed.train)
    np.testing.assert_array_equal(whole.val, streamed.val)
    limited = prepare_data(
        DataConfig.from_dict({**base, "streaming": True, "max_tokens": 5000}), tmp_path / "c"
    )
    n = len(limited.train) + len(limited.val)
    assert 5000 <= n < 5000 + 100  # stops at the document that reaches the limit
    np.testing.assert_array_equal(limited.train, whole.train[: len(limited.train)])


def test_a_dataset_without_the_text_field_is_one_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"body": "x"}\n' * 60)
    cfg = DataConfig.from_dict({"source": "hf", "name": "json", "data_files": str(path)})
    with pytest.raises(ConfigError, match="data.text_field: 'text' not in the dataset"):
        prepare_data(cfg, tmp_path / "cache")


# ---------------------------------------------------------------- pre-tokenized shards
def _tokens(path, val_path=None, **kw) -> DataConfig:
    return DataConfig.from_dict(
        {
            "source": "tokens",
            "path": str(path),
            "val_path": val_path,
            "vocab_size": 1000,
            "eot_id": 999,
            **kw,
        }
    )


def test_bin_round_trip_and_sharded_reads(tmp_path):
    rng = np.random.default_rng(0)
    chunks = [rng.integers(0, 1000, size=n, dtype=np.uint16) for n in (5000, 3000, 7000, 4000)]
    for i, c in enumerate(chunks):
        write_bin(tmp_path / f"shard_{i:03d}.bin", c)
    np.testing.assert_array_equal(open_shard(tmp_path / "shard_001.bin"), chunks[1])
    whole = np.concatenate(chunks[:3])
    sharded = ShardedTokens([open_shard(tmp_path / f"shard_{i:03d}.bin") for i in range(3)])
    assert len(sharded) == len(whole)
    for a, b in [(0, 10), (4990, 5010), (100, 14999), (7999, 8001), (14990, 15000)]:
        np.testing.assert_array_equal(sharded[a:b], whole[a:b])
    data = prepare_data(_tokens(tmp_path, val_fraction=0.25), tmp_path / "cache")
    np.testing.assert_array_equal(np.asarray(data.train), whole)  # the last shard is held out
    np.testing.assert_array_equal(np.asarray(data.val), chunks[3])
    np.save(tmp_path / "one.npy", chunks[0].astype(np.uint32))
    one = prepare_data(_tokens(tmp_path / "one.npy"), tmp_path / "cache")
    assert len(one.train) + len(one.val) == 5000 and one.eot_id == 999
    assert source_fingerprint(_tokens(tmp_path / "one.npy")).startswith("tokens-")


def test_validation_shards_from_val_path(tmp_path):
    """data.val_path (a glob here) holds the validation tokens; every data.path shard trains,
    and the validation shards' bytes are part of the fingerprint."""
    rng = np.random.default_rng(1)
    train = [rng.integers(0, 1000, size=n, dtype=np.uint16) for n in (3000, 2000)]
    val = [rng.integers(0, 1000, size=n, dtype=np.uint16) for n in (700, 500)]
    (tmp_path / "train").mkdir()
    for i, c in enumerate(train):
        write_bin(tmp_path / "train" / f"t{i}.bin", c)
    for i, c in enumerate(val):
        write_bin(tmp_path / f"val_{i}.bin", c)
    cfg = _tokens(tmp_path / "train", val_path=str(tmp_path / "val_*.bin"))
    data = prepare_data(cfg, tmp_path / "cache")
    np.testing.assert_array_equal(np.asarray(data.train), np.concatenate(train))
    np.testing.assert_array_equal(np.asarray(data.val), np.concatenate(val))
    before = source_fingerprint(cfg)
    write_bin(tmp_path / "val_1.bin", val[1][::-1])
    assert source_fingerprint(cfg) != before


def test_a_dataset_of_token_ids_becomes_a_token_cache(tmp_path):
    import datasets

    rows = [{"input_ids": list(range(i % 7, i % 7 + 20 + i % 13))} for i in range(400)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ids"))
    cfg = DataConfig.from_dict(
        {
            "source": "tokens",
            "from_disk": str(tmp_path / "ids"),
            "text_field": "input_ids",
            "vocab_size": 64,
            "eot_id": 63,
        }
    )
    data = prepare_data(cfg, tmp_path / "cache")
    flat = [t for r in rows for t in (*r["input_ids"], 63)]
    assert len(data.train) + len(data.val) == len(flat) and data.vocab_size == 64
    assert sorted(np.concatenate([data.train, data.val]).tolist()) == sorted(flat)
    small = DataConfig.from_dict({**cfg.to_dict(), "vocab_size": 30, "eot_id": 29})
    with pytest.raises(ConfigError, match="data.vocab_size: 30, but the dataset .* holds token id"):
        prepare_data(small, tmp_path / "cache")


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda p: p.write_bytes(b"\0" * 2048), r"is not an llm.c token shard \(magic 0"),
        (lambda p: p.write_bytes(p.read_bytes()[:-2]), "the header promises 100 tokens"),
        (
            lambda p: p.write_bytes(p.read_bytes()[:4] + b"\x02" + p.read_bytes()[5:]),
            "shard version 2",
        ),
        (lambda p: write_bin(p, np.full(100, 1000, np.uint16)), "data.vocab_size: 1000, but"),
    ],
)
def test_a_bad_shard_is_one_line_naming_it(tmp_path, spoil, message):
    path = tmp_path / "s.bin"
    write_bin(path, np.arange(100, dtype=np.uint16))
    spoil(path)
    with pytest.raises(ConfigError, match=message) as e:
        source_fingerprint(_tokens(path))
    assert str(path) in str(e.value) or "vocab_size" in message


def test_a_glob_matching_nothing_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"data.path: .*\*.bin matches no .bin or .npy"):
        source_fingerprint(_tokens(tmp_path / "*.bin"))


def _run(*args, env_extra=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=300
    )


def test_train_on_tokens_end_to_end_and_bad_input_exits_2(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(3):
        write_bin(tmp_path / f"t_{i}.bin", rng.integers(0, 1000, 20000, dtype=np.uint16))
    common = [
        f"tracking.uri=sqlite:///{tmp_path / 'out' / 'mlruns.db'}",
        f"paths.runs_dir={tmp_path / 'out' / 'runs'}",
        "train.progress=none",
        "model.d_model=32",
        "model.n_layers=1",
        "model.n_heads=2",
        "train.tokens=8192",
        "train.seq_len=64",
        "train.batch_tokens=2048",
        "data.eval_tokens=1024",
        "data.vocab_size=1000",
        "data.eot_id=999",
    ]
    out = _run("-m", "training.train", "data=tokens", f"data.path={tmp_path}/t_*.bin", *common)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "result:" in out.stdout
    bad = _run(
        "-m",
        "training.train",
        "data=tokens",
        f"data.path={tmp_path}/nothing_*.bin",
        *common[:1],
        *common[2:],
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        f"error: data.path: {tmp_path}/nothing_*.bin matches no .bin or .npy token shards"
    ]


def test_the_prepare_command_builds_the_cache_a_run_reads(tmp_path):
    corpus = write_corpus(tmp_path / "c")
    args = [
        "-m",
        "training.data",
        "prepare",
        "data=text",
        f"data.path={corpus}",
        "data.tokenizer=byte",
        f"paths.cache_dir={tmp_path / 'cache'}",
    ]
    out = _run(*args)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("prepared text-") and "train +" in out.stdout
    built = DataConfig.from_dict({"source": "text", "path": str(corpus), "tokenizer": "byte"})
    assert prepare_data(built, tmp_path / "cache").cache_dir.parent == tmp_path / "cache"
    # the cache, its lock and the fingerprint memo (kept under paths.cache_dir): no rebuild
    names = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len(names) == 3 and "fingerprints" in names
    assert sum(n.endswith(".lock") for n in names) == 1
    bad = _run("-m", "training.data", "prepare", "data=text", f"data.path={tmp_path}/missing")
    assert bad.returncode == 2 and bad.stderr.startswith("error: data.path:"), bad.stderr


def test_a_dataset_that_cannot_be_reached_is_one_line(tmp_path):
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = _run(
        "-m",
        "training.data",
        "prepare",
        "data=hf",
        "data.name=nobody/no-such-dataset",
        f"paths.cache_dir={tmp_path / 'cache'}",
        env_extra=offline,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: data.name: cannot load dataset 'nobody/no-such-dataset'"
    ), out.stderr


def test_the_first_fingerprint_is_kept_once_a_cache_is_prepared(tmp_path, monkeypatch):
    """A run's first fingerprint is computed at config time, before the cache folder exists;
    preparing writes it down, so the next process only stats the corpus's files."""
    import training.data.filehash as filehash

    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(tmp_path / "default"))
    monkeypatch.setattr(filehash, "RACY_S", -1.0)
    cfg = text_config(write_corpus(tmp_path / "c"), tokenizer="byte")
    first = source_fingerprint(cfg)
    assert not (tmp_path / "default").exists()
    prepare_data(cfg, tmp_path / "elsewhere")  # paths.cache_dir need not be the default
    filehash._hashed.clear()  # a new process
    monkeypatch.setattr(filehash, "hashlib", None)  # hashing a file would fail
    assert source_fingerprint(cfg) == first


def test_a_run_right_after_preparing_reads_neither_corpus_nor_cache(tmp_path, monkeypatch):
    """Preparing remembers the corpus's fingerprint and the new cache's checksums (verified
    under its lock right after the build), so the first run's start-up hashes nothing."""
    import training.data.filehash as filehash
    import training.data.store as store

    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(tmp_path / "memo"))
    corpus = write_corpus(tmp_path / "c")
    old = time.time() - 3600  # a corpus written before; the cache is brand new
    for p in corpus.iterdir():
        os.utime(p, (old, old))
    cfg = text_config(corpus, tokenizer="byte")
    prepared = prepare_data(cfg, tmp_path / "cache")
    filehash._hashed.clear()  # a new process
    store._verified.clear()
    monkeypatch.setattr(filehash, "hashlib", None)  # hashing a file would fail
    source_fingerprint(cfg)  # the run key's, remembered while preparing
    data = prepare_data(cfg, tmp_path / "cache")  # the cache's checksums, remembered likewise
    assert data.cache_dir == prepared.cache_dir
