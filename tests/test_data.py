"""Corpora, splits, tokenizers, token caches and batch sampling."""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from pathlib import Path

import numpy as np
import pytest

from training.config import ConfigError, DataConfig, TrainConfig
from training.data import (
    BatchSampler,
    load_corpus,
    prepare_data,
    split_documents,
    stdlib_files,
    val_windows,
)


@pytest.fixture
def text_dir(tmp_path) -> Path:
    folder = tmp_path / "text"
    (folder / "sub").mkdir(parents=True)
    for i in range(40):
        (folder / f"a{i}.txt").write_text(f"document {i}\n" + "the quick brown fox\n" * (i + 5))
    with open(folder / "sub" / "b.jsonl", "w") as f:
        for i in range(30):
            f.write(json.dumps({"body": f"record {i} " + "jumps over the lazy dog " * 20}) + "\n")
    return folder


def test_stdlib_files_exclude_tests_and_site_packages():
    rels = [rel for rel, _ in stdlib_files()]
    assert len(rels) > 500 and "os.py" in rels and "json/decoder.py" in rels
    assert not any(
        p in ("test", "tests", "idle_test", "site-packages")
        for r in rels
        for p in r.split("/")[:-1]
    )


def test_split_is_deterministic_and_by_document():
    docs = [(f"f{i}.py", f"text {i}") for i in range(400)]
    train, val = split_documents(docs, 0.1)
    assert (train, val) == split_documents(list(docs), 0.1)
    assert 20 < len(val) < 60 and len(train) + len(val) == 400
    # a document's side depends only on its own key, not on the other documents
    _, val_half = split_documents(docs[:200], 0.1)
    assert set(val_half) == {t for t in val if int(t.split()[1]) < 200}


def test_text_source_reads_txt_and_jsonl(text_dir):
    cfg = DataConfig(source="text", path=str(text_dir), text_field="body")
    corpus = load_corpus(cfg)
    assert len(corpus.documents) == 70 and corpus.fingerprint.startswith("text-")
    (text_dir / "a0.txt").write_text("changed")
    assert load_corpus(cfg).fingerprint != corpus.fingerprint
    with pytest.raises(ConfigError, match="data.text_field: 'text' not in"):
        load_corpus(DataConfig(source="text", path=str(text_dir)))
    with pytest.raises(ConfigError, match="data.path"):
        load_corpus(DataConfig(source="text", path=str(text_dir / "missing")))


def test_single_text_file_is_chunked_so_both_splits_get_text(tmp_path):
    f = tmp_path / "one.txt"
    f.write_text("".join(f"line {i} of a long single document\n" for i in range(20000)))
    data = prepare_data(
        DataConfig(source="text", path=str(f), tokenizer="byte", eval_tokens=4096), tmp_path / "c"
    )
    assert len(data.train) > 10 * len(data.val) > 0


def test_hf_source_offline_json_and_save_to_disk(tmp_path, text_dir):
    import datasets

    rows = [{"text": f"story {i}: " + "once upon a time " * 10} for i in range(80)]
    jsonl = tmp_path / "stories.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    by_json = load_corpus(DataConfig(source="hf", name="json", data_files=str(jsonl)))
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    by_disk = load_corpus(DataConfig(source="hf", from_disk=str(tmp_path / "saved")))
    assert (
        [t for _, t in by_json.documents]
        == [t for _, t in by_disk.documents]
        == [r["text"] for r in rows]
    )
    assert by_json.fingerprint.startswith("hf-") and by_disk.fingerprint.startswith("hf-")
    with pytest.raises(ConfigError, match="data.text_field"):
        load_corpus(DataConfig(source="hf", from_disk=str(tmp_path / "saved"), text_field="body"))


def _build(args):
    cfg, cache = args
    return prepare_data(cfg, Path(cache)).cache_dir.name


def test_cache_build_race_is_safe_and_byte_tokens_are_utf8(text_dir, tmp_path):
    cfg = DataConfig(
        source="text", path=str(text_dir), text_field="body", tokenizer="byte", eval_tokens=256
    )
    with mp.get_context("spawn").Pool(2) as pool:
        names = pool.map(_build, [(cfg, str(tmp_path / "c"))] * 2)
    assert names[0] == names[1]
    leftovers = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert leftovers == [names[0], names[0] + ".lock"]  # the cache and its build lock, no tmp dirs
    data = prepare_data(cfg, tmp_path / "c")
    assert data.vocab_size == 256 and data.train.dtype == np.uint16
    text = bytes(data.train[:200].tolist()).decode("utf-8", "replace")
    assert "document" in text or "record" in text


def test_stdlib_bpe_is_built_once_and_cached(tmp_path):
    cfg = DataConfig(vocab_size=1024)
    t0 = time.perf_counter()
    first = prepare_data(cfg, tmp_path)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    second = prepare_data(cfg, tmp_path)
    cached_s = time.perf_counter() - t0
    assert first.fingerprint.startswith("stdlib-py3.") and second.fingerprint == first.fingerprint
    assert first.vocab_size == 1024 and first.meta["n_train_tokens"] > 2_000_000
    assert np.array_equal(first.val, second.val) and cached_s < build_s / 3, (build_s, cached_s)
    from training.data import load_tokenizer

    tok = load_tokenizer(first.cache_dir)
    ids = tok.encode_batch(["def foo(x):\n    return x"])[0]
    assert tok.decode(ids) == "def foo(x):\n    return x" and len(ids) < 20


def test_val_windows_are_fixed_and_sampler_is_seeded():
    stream = np.arange(10_000, dtype=np.uint16)
    w = val_windows(stream, seq_len=32, eval_tokens=1024)
    assert (
        w.shape == (32, 33) and w[1, 0] == 32 and np.array_equal(w, val_windows(stream, 32, 1024))
    )
    with pytest.raises(ConfigError, match="data.eval_tokens"):
        val_windows(stream, 32, 20_000)
    a, b = BatchSampler(stream, 32, 4, seed=7), BatchSampler(stream, 32, 4, seed=7)
    xa, ya = a.next()
    assert xa.shape == (4, 32) and (ya[:, :-1] == xa[:, 1:]).all()
    state = a.state_dict()
    after = a.next()[0]
    b.load_state_dict(state)
    assert (b.next()[0] == after).all()
    # two ranks split one global draw: same seed, disjoint slices of the same starts
    r0, r1 = (
        BatchSampler(stream, 32, 2, 7, rank=0, world_size=2),
        BatchSampler(stream, 32, 2, 7, rank=1, world_size=2),
    )
    assert (np.concatenate([r0.next()[0], r1.next()[0]]) == xa.numpy()).all()


def test_token_counts_accept_2e6_and_reject_fractions():
    assert TrainConfig.from_dict({"tokens": 2e6, "save_at_tokens": ["1e6"]}).tokens == 2_000_000
    assert DataConfig.from_dict({"eval_tokens": "4e3"}).eval_tokens == 4000
    with pytest.raises(ConfigError, match=r"train.tokens: expected an integer"):
        TrainConfig.from_dict({"tokens": 2.5e0})
    with pytest.raises(ConfigError, match="data.tokenizer: 'wordpiece' is not allowed"):
        DataConfig.from_dict({"tokenizer": "wordpiece"})
    with pytest.raises(ConfigError, match="data.colour: unknown key"):
        DataConfig.from_dict({"colour": 1})


def test_stdlib_walk_lists_the_same_files_as_a_filtered_rglob():
    """The pruned walk must not change the stdlib corpus (its fingerprint keys token caches)."""
    import sysconfig

    from training.data import STDLIB_EXCLUDED_DIRS

    root = Path(sysconfig.get_paths()["stdlib"])
    filtered = sorted(
        (p.relative_to(root).as_posix(), p)
        for p in root.rglob("*.py")
        if not STDLIB_EXCLUDED_DIRS.intersection(p.relative_to(root).parts[:-1])
    )
    assert stdlib_files() == filtered


# ---------------------------------------------------------------- the site-packages corpus
SMALL = 300_000  # bytes of source files: a tiny slice of the ~250 MB


def test_sitepackages_files_are_sorted_capped_and_code_only():
    from training.data import SITEPACKAGES_MAX_FILE_BYTES, sitepackages_files

    files = sitepackages_files(SMALL)
    rels = [rel for rel, _ in files]
    assert rels == sorted(rels) and len(set(rels)) == len(rels)
    sizes = [p.stat().st_size for _, p in files]
    assert sum(sizes) <= SMALL and max(sizes) <= SITEPACKAGES_MAX_FILE_BYTES
    assert all(rel.endswith(".py") for rel in rels)
    everything = sitepackages_files()
    assert everything[: len(files)] == files  # the cap takes a prefix of one fixed order
    assert sum(p.stat().st_size for _, p in everything) > 20 * 12e6 * 0.5  # >> the stdlib
    assert not any(
        part in ("test", "tests", "__pycache__") or part.endswith(".dist-info")
        for rel, _ in everything
        for part in rel.split("/")[:-1]
    )


def test_sitepackages_fingerprint_names_the_installed_versions_and_the_cap(monkeypatch):
    import training.data as data_mod
    import training.data.sources as sources

    def fingerprint(max_bytes, packages):
        monkeypatch.setattr(sources, "installed_packages", lambda: packages)
        cfg = DataConfig.from_dict({"source": "sitepackages", "max_bytes": max_bytes})
        return data_mod.source_fingerprint(cfg)

    base = fingerprint(SMALL, ["numpy==2.0.0", "torch==2.13.0"])
    assert base.startswith("sitepackages-")
    assert fingerprint(SMALL, ["numpy==2.0.0", "torch==2.13.0"]) == base
    assert fingerprint(SMALL, ["numpy==2.0.1", "torch==2.13.0"]) != base  # an upgrade
    assert fingerprint(SMALL, ["numpy==2.0.0"]) != base  # an uninstall
    assert fingerprint(2 * SMALL, ["numpy==2.0.0", "torch==2.13.0"]) != base  # another slice
    monkeypatch.undo()
    assert any(p.startswith("torch==") for p in data_mod.installed_packages())


def test_sitepackages_corpus_tokenizes_and_the_cap_is_in_the_run_fingerprint(tmp_path):
    from training.spec import resolve_config

    cfg = DataConfig.from_dict(
        {"source": "sitepackages", "max_bytes": SMALL, "tokenizer": "byte", "val_fraction": 0.1}
    )
    data = prepare_data(cfg, tmp_path / "cache")
    n_bytes = sum(len(t.encode()) for _, t in load_corpus(cfg).documents)
    # byte tokens: every byte once, plus one end-of-text id per document in each split
    assert len(data.train) + len(data.val) >= n_bytes and len(data.val) > 0
    assert data.fingerprint.startswith("sitepackages-py3.")
    assert prepare_data(cfg, tmp_path / "cache").cache_dir == data.cache_dir  # cached

    def key(max_bytes):
        return resolve_config(
            {"data": {"source": "sitepackages", "max_bytes": max_bytes}, "model": {}}
        ).run_key

    assert key(SMALL) == key(float(SMALL)) != key(2 * SMALL)


def test_max_bytes_must_be_positive():
    with pytest.raises(ConfigError, match=r"^data.max_bytes: must be > 0"):
        DataConfig.from_dict({"source": "sitepackages", "max_bytes": 0})
