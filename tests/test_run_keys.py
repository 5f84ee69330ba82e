"""Run keys name what a run computes: the corpus by content, a branch point by its run key and
step, and nothing that only changes where files are or how a batch is split (training/keys.py)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from training.config import ConfigError
from training.spec import resolve_config

TINY = {"d_model": 32, "n_layers": 2, "n_heads": 2}


def key(path: Path, **train) -> str:
    cfg = {
        "model": TINY,
        "data": {"source": "text", "path": str(path), "tokenizer": "byte"},
        "train": {"seq_len": 32, "batch_tokens": 256, "tokens": 8192, **train},
        "paths": {"runs_dir": "/somewhere"},
    }
    return resolve_config(cfg).run_key


@pytest.fixture
def corpus(tmp_path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(3):
        (folder / f"doc{i}.txt").write_text(f"document {i}\n" + "some text to learn\n" * 50)
    return folder


def test_editing_the_corpus_behind_a_path_gives_a_new_key(corpus):
    before = key(corpus)
    doc = corpus / "doc1.txt"
    text = doc.read_text()
    doc.write_text(text.replace("document 1", "document X"))  # same size, same second
    edited = key(corpus)
    assert edited != before
    doc.write_text(text)  # the original bytes again: the original key
    assert key(corpus) == before
    (corpus / "doc3.txt").write_text("one more document\n")
    assert key(corpus) not in (before, edited)


def test_an_edit_after_the_fingerprint_was_remembered_is_seen(corpus):
    old = time.time() - 3600  # files older than the racy window: their hash is remembered
    for p in corpus.iterdir():
        os.utime(p, (old, old))
    before = key(corpus)
    assert key(corpus) == before
    doc = corpus / "doc0.txt"
    doc.write_text(doc.read_text().replace("document 0", "document Y"))  # same size
    assert key(corpus) != before


def test_the_same_corpus_in_another_folder_has_the_same_key(corpus, tmp_path):
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(corpus, copy)
    assert key(copy) == key(corpus)
    # A renamed file is another corpus: document names decide the train/val split.
    (copy / "doc2.txt").rename(copy / "renamed.txt")
    assert key(copy) != key(corpus)
    stdlib = resolve_config({"model": TINY, "data": {"tokenizer": "byte"}}).run_key
    assert stdlib != key(corpus)


def test_micro_batch_does_not_change_the_key_but_the_batch_does(corpus):
    assert key(corpus, micro_batch=2) == key(corpus) == key(corpus, micro_batch=8)
    assert key(corpus, batch_tokens=512) != key(corpus)


def test_init_from_is_keyed_by_the_checkpoint_not_its_path(corpus, tmp_path):
    import torch

    planned = tmp_path / "a" / "runs" / "0123456789abcdef" / "tokens_4096.pt"
    # Before the stable run has written it (plan time): read from the layout, 4096 / 256 = 16.
    before = key(corpus, init_from=str(planned))
    planned.parent.mkdir(parents=True)
    torch.save({"run_key": "0123456789abcdef", "step": 16, "model": {}}, planned)
    assert key(corpus, init_from=str(planned)) == before  # the same key once it exists
    moved = tmp_path / "b" / "checkpoint.pt"
    moved.parent.mkdir()
    shutil.copy(planned, moved)
    assert key(corpus, init_from=str(moved)) == before  # another absolute path, same run
    torch.save({"run_key": "0123456789abcdef", "step": 20, "model": {}}, moved)
    assert key(corpus, init_from=str(moved)) != before  # another branch point
    assert key(corpus) != before
    with pytest.raises(ConfigError, match="train.init_from: .* is not a checkpoint file"):
        key(corpus, init_from=str(tmp_path / "missing.pt"))


def test_hf_corpora_are_keyed_by_their_files(tmp_path):
    import json

    import datasets

    from training.config import DataConfig
    from training.data import source_fingerprint

    rows = [{"text": f"story {i}"} for i in range(20)]
    for name, part in (("a", rows), ("b", rows), ("c", rows[1:])):
        datasets.Dataset.from_list(part).save_to_disk(str(tmp_path / name))
    disk = {
        n: source_fingerprint(DataConfig(source="hf", from_disk=str(tmp_path / n))) for n in "abc"
    }
    assert disk["a"] == disk["b"] != disk["c"]  # saved twice (random _fingerprint): same rows
    jsonl = tmp_path / "s.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    by_files = DataConfig(source="hf", name="json", data_files=str(jsonl))
    before = source_fingerprint(by_files)
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows[:-1]))
    assert source_fingerprint(by_files) != before
    hub = DataConfig(source="hf", name="roneneldan/TinyStories")  # offline: by name only
    assert source_fingerprint(hub).startswith("hf-hub-")
