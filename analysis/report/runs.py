"""The report's Runs section: where the runs came from, the runs left out and why, and data
repeated past one epoch (`analysis.data.epochs`, also a note in the summary)."""

from __future__ import annotations

import pandas as pd

from analysis.data import epochs
from analysis.report.section import Context, Quiet


class Runs(Quiet):
    def sentences(self, an) -> list[str]:
        return epochs.summary_sentence(an.runs)

    def blocks(self, an, ctx: Context) -> list[tuple]:
        return _runs_blocks(an.runs, ctx.excluded, ctx.source)


def _runs_blocks(runs: pd.DataFrame, excluded, source: str) -> list[tuple]:
    """The Runs section: where they came from, the excluded ones, repeated data; [] if empty."""
    sources, repeats = _source_blocks(runs, source), epochs.blocks(runs)
    if not (sources or len(excluded) or repeats):
        return []
    b = [("h2", "Runs"), *sources]
    if len(excluded):
        b.append(("table", ["excluded run", "status", "reason"], excluded.values.tolist()))
    return b + repeats


def _counts(values: pd.Series) -> dict[str, int]:
    """{value: number of runs} in order of first appearance ('' for missing)."""
    values = values.astype(object).where(values.notna(), "").astype(str)
    return {k: int(n) for k, n in values.value_counts(sort=False).items()}


def _source_blocks(runs: pd.DataFrame, source: str) -> list[tuple]:
    """Where the runs come from, when that is more than one source or sweep."""
    sources = _counts(runs["source"]) if "source" in runs.columns else {source: len(runs)}
    sweeps = _counts(runs["sweep"]) if "sweep" in runs.columns else {}
    if len(sources) < 2 and len(sweeps) < 2:
        return []
    text = "Sources: " + "; ".join(f"{k} ({n} runs)" for k, n in sources.items()) + "."
    if sweeps:
        text += " Runs per sweep: " + ", ".join(f"{k or '(none)'} {n}" for k, n in sweeps.items())
        text += "."
    return [("p", text)]
