"""Small value conversions every layer may use (models/ imports nothing of the project)."""

from __future__ import annotations

from typing import Any


def int_if_integral(value: Any) -> Any:
    """An integral float as an int (`1e3` from YAML or the command line is a float), any other
    value unchanged: one rule for model shapes, run keys and override text."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def format_duration(seconds: float) -> str:
    """A wall time to the second: '1h02m', '3m05s' or '45s'."""
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")
