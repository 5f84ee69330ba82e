"""Fixtures of the training-loop tests (test_train*.py): a tiny run's overrides (`lab`), sending
tracking, checkpoints and caches to temporary places, and the corpus, store and cache they share
for the session. Their helpers are in train_helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from train_helpers import TINY


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
