"""Epochs: how many times a run went through its training split (repeated data bends scaling
curves, Muennighoff et al. 2023), from what the runs record.

- the param `data_train_tokens` (tokens in the training split, logged by training):
  epochs = D / data_train_tokens, D = tokens trained;
- else the `epochs` metric that training logs at the end (tokens consumed / training-split
  tokens; a WSD branch counts its stable prefix in both);
- else nothing: the runs do not say, and the report says nothing about repetition.
"""

from __future__ import annotations

import pandas as pd

from analysis.fits.estimate import fmt

REPEAT_TOL = 1.001  # above this many epochs a run saw some training tokens twice


def epochs(runs: pd.DataFrame) -> tuple[pd.Series | None, str]:
    """(epochs per run or None, what they were computed from)."""
    if "data_train_tokens" in runs.columns and runs["data_train_tokens"].notna().any():
        split = pd.to_numeric(runs["data_train_tokens"], errors="coerce")
        return runs["D"] / split, "tokens trained / data_train_tokens"
    if "epochs" in runs.columns and runs["epochs"].notna().any():
        values = pd.to_numeric(runs["epochs"], errors="coerce")
        return values, "the runs' epochs metric (tokens consumed / training-split tokens)"
    return None, ""


def repeating(runs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The runs that repeat data, with an `epochs` column, and what epochs were computed from."""
    values, source = epochs(runs)
    if values is None:
        return runs.iloc[:0], source
    runs = runs.assign(epochs=values)
    return runs[runs["epochs"] > REPEAT_TOL], source


def blocks(runs: pd.DataFrame) -> list[tuple]:
    """The run list of every run that repeats data (report blocks); none when none does or
    the runs do not record their training split."""
    rep, source = repeating(runs)
    if rep.empty:
        return []
    rep = rep.sort_values(["epochs", "run_id"], ascending=[False, True])
    variant = rep["variant"] if "variant" in rep.columns else pd.Series("", rep.index)
    columns = zip(rep["run_id"], variant, rep["N"], rep["D"], rep["epochs"], rep["loss"])
    rows = [
        [r, v, fmt(n, ".3g"), fmt(d, ".3g"), fmt(e, ".2f"), fmt(y)] for r, v, n, d, e, y in columns
    ]
    return [
        (
            "p",
            f"{len(rep)} of {len(runs)} runs repeat their training split (epochs from "
            f"{source}): repeated tokens are worth less than fresh ones, so these runs' "
            "losses sit above what fresh data would give.",
        ),
        ("table", ["run that repeats data", "variant", "N", "D", "epochs", "loss"], rows),
    ]


def summary_sentence(runs: pd.DataFrame) -> list[str]:
    rep, _ = repeating(runs)
    if rep.empty:
        return []
    return [
        f"{len(rep)} of {len(runs)} runs repeat their training data (up to "
        f"{rep['epochs'].max():.2f} epochs; listed under 'Runs'): their losses are not "
        "those of fresh data."
    ]
