"""Readable MLflow run names for a sweep's points: block, size, tokens and the swept values.

    llama-N22.6K-D16.4K                 a grid point (model preset, N, D)
    vanilla-N105K-D250K-lr1e-3-wu0.02   a tuning candidate (its values as `sweep.tune` writes
                                        them, for its short prefixes too)
    mqa-llama-N1.2M-D20M                a variant (`sweep.variants`) of the llama preset
    llama-N22.6K-D16.4K-seed1           seed 1 of a point (`sweep.seeds`)

Names are labels for people; the run key (training/keys.py) stays what identifies a run. Two
points that would read the same get their run key's first 6 characters appended.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sweeps import plan

# keys named in the size and token parts, or by the block label, not again among the values
SHOWN = {"model", "model.size", plan.TOKENS_KEY}
SHORT = {"warmup": "wu", "batch_tokens": "bt", "schedule": "", "decay_fraction": "decay"}
TUNE_VALUES = "tracking.tags.tune_values"  # sweeps.tuning: a candidate as the sweep writes it


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+")


def _value(override: str) -> str:
    return override.split("=", 1)[1].strip("'\"") if "=" in override else ""


def _short(key: str, value: str) -> str:
    leaf = key.rsplit(".", 1)[-1]
    return f"{SHORT.get(leaf, leaf)}{value}"


def _overrides(run: plan.PlannedRun) -> dict[str, str]:
    return {_key(o): _value(o) for o in run.overrides if not o.startswith("++tracking.")}


def _as_written(run: plan.PlannedRun) -> dict[str, str]:
    """A tuned run's values as the sweep file writes them (its `tune_values` tag): a prefix
    run's override holds its warmup in steps, the file and the runs after the choice a fraction
    of the run, and one name field keeps one unit."""
    tag = next((o for o in run.overrides if _key(o) == TUNE_VALUES), None)
    if tag is None:
        return {}
    pairs = re.split(r",(?=[\w.]+=)", _value(tag))  # a list value keeps its commas
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def block(run: plan.PlannedRun, default_block: str) -> str:
    """The point's `model=` preset (else `default_block`), preceded by its variant when the
    sweep names variants: `llama`, `mqa-llama`."""
    parts = [run.variant] if run.variant not in ("base", "") else []
    return "-".join([*parts, _overrides(run).get("model", default_block)])


def run_name(run: plan.PlannedRun, swept: Iterable[str], default_block: str) -> str:
    """`<block>-N<n>-D<d>[-<swept values>]` (`block` above); `swept` are the override keys
    whose values differ between points (axes, tuning grid)."""
    overrides = {**_overrides(run), **_as_written(run)}
    parts = [block(run, default_block), f"N{plan.format_count(run.n)}"]
    parts.append(f"D{plan.format_count(run.d)}")
    parts += [_short(k, overrides[k]) for k in swept if k in overrides and k not in SHOWN]
    if run.phase not in ("run", "candidate", "chosen", "full", "transfer"):
        parts.append(run.phase)  # WSD: stable | branch
    if run.seed:
        parts.append(f"seed{run.seed}")  # sweep.seeds
    return "-".join(p for p in parts if p)


class RunNames:
    """Names for every point a sweep launches, unique within the sweep (see the module doc)."""

    def __init__(self, swept: Iterable[str], default_block: str):
        self.swept, self.default_block = list(dict.fromkeys(swept)), default_block
        self._owner: dict[str, str] = {}  # name -> run key

    def block(self, run: plan.PlannedRun) -> str:
        return block(run, self.default_block)

    def __call__(self, run: plan.PlannedRun) -> str:
        name = run_name(run, self.swept, self.default_block)
        if self._owner.setdefault(name, run.run_key) != run.run_key:
            name = f"{name}-{run.run_key[:6]}"
            self._owner.setdefault(name, run.run_key)
        return name
