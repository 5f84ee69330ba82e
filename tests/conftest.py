"""Fixtures of the training-loop tests (test_train*.py): a tiny run's overrides (`lab`), sending
tracking, checkpoints and caches to temporary places, and the corpus, store and cache they share
for the session; where a bad run would write (`place`); Hydra's compose API on the sweep app
(`comp`). Their helpers are in train_helpers.py, input_helpers.py and sweep_helpers.py: no test
module imports another."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_helpers import ROOT, TINY


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """60 small stdlib files as a text corpus (real code and prose, ~300 KB)."""
    from training.data import stdlib_files

    folder = tmp_path_factory.mktemp("corpus")
    small = [(rel, p) for rel, p in stdlib_files() if 2_000 < p.stat().st_size < 8_000][:60]
    for i, (_, p) in enumerate(small):
        (folder / f"doc{i:03d}.txt").write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def one_thread():
    """Tiny models on a shared 2-core machine: intra-op threads only add contention (a module
    asks for it with `pytestmark = pytest.mark.usefixtures("one_thread")`)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> str:
    """One SQLite store for the session (creating one costs seconds); tests use their own
    experiment in it."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlruns.db'}"


@pytest.fixture
def lab(tmp_path, corpus, cache_dir, store) -> list[str]:
    """Overrides that send tracking, checkpoints and caches to temporary places."""
    return [
        f"tracking.uri={store}",
        f"tracking.experiment={tmp_path.name}",
        f"paths.runs_dir={tmp_path / 'runs'}",
        f"paths.cache_dir={cache_dir}",
        "data.source=text",
        f"data.path={corpus}",
        *TINY,
    ]


@pytest.fixture(autouse=True)
def no_inherited_columns(monkeypatch):
    """The console's width off a terminal is $COLUMNS where set (sweeps.sweep_view.console),
    and pytest's own terminal exports one into the workers: tests see a log's width (no
    COLUMNS) unless they set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture
def place(tmp_path, monkeypatch) -> dict:
    """Where a run would write (all inside tmp_path/out, which must stay absent), a text corpus
    folder, and a cwd that must stay empty (the bad-input tests)."""
    out = tmp_path / "out"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "empty.txt").write_text("")
    (corpus / "blank.txt").write_text("  \n\n<|endoftext|>\n  <|endoftext|>")
    (corpus / "blank.jsonl").write_text("\n\n")
    (corpus / "binary.txt").write_bytes(bytes(range(256)) * 8)
    (corpus / "not_a_checkpoint.pt").write_text("hello")
    (corpus / "not_sqlite.db").write_text("hello")
    (corpus / "a_file").write_text("a file, not a folder")
    (corpus / "doc.txt").write_text("hello world. " * 400)
    overrides = [
        f"tracking.uri=sqlite:///{out / 'store' / 'mlruns.db'}",
        f"paths.runs_dir={out / 'runs'}",
        f"paths.cache_dir={out / 'cache'}",
        "train.progress=none",
    ]
    return {"out": out, "cwd": cwd, "corpus": corpus, "overrides": overrides}


@pytest.fixture
def tmp_store(tmp_path, monkeypatch):
    """A sweep's store, runs and caches under tmp_path (through the environment, as a user sets
    them)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlruns.db'}")
    monkeypatch.setenv("SCALING_LAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def comp(tmp_store):
    """Hydra's compose API on conf/run.yaml: the config a job of `python -m sweeps.run` gets."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        yield lambda overrides: compose("run", overrides=list(overrides), return_hydra_config=True)
