"""Helpers of the bad-input tests (test_bad_input.py, test_hostile_input.py, test_train_pairs.py):
compose the training config, a free port, and the one-`error:`-line contract. The fixture of where
a run would write (`place`) is in conftest.py."""

from __future__ import annotations

import socket
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


def free_port() -> int:
    """A local port with nothing listening on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_nothing_written(place: dict) -> None:
    assert not place["out"].exists(), sorted(p.name for p in place["out"].rglob("*"))
    assert list(place["cwd"].iterdir()) == []


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0].removeprefix("error: ")
