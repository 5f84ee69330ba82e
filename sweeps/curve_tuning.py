"""`sweep.tune_curve`: tuning from partial curves, on halving's machinery with one rung.

Every candidate of a tuned arm trains the shared WSD stable phase up to one rung, the prefix
`analysis.tuning.curve_tuning.prefix_tokens` sizes so the arm costs at most `runs` runs to its budget
(n t + D - t <= runs D; 27 steps of 245 for 10 candidates at two runs). Its segment logs the
train loss and lr at every step (`train.log_every=1`, not part of the run key). The rung is
then ranked not by the val loss there, as halving ranks, but by each candidate's final loss as
the curve law predicts it from the prefix (`analysis.tuning.curve_tuning.predict_final`), read back
from MLflow (`ranked_loss`); the predicted best continues from its checkpoint to the
budget with the decay, exactly as halving's winner does. Each segment carries the arm's budget
as tag `tune_budget`, so the prediction is made for the run the candidate would be.
"""

from __future__ import annotations

import math
from typing import Any

from analysis.tuning import curve_tuning
from sweeps.config import CurveSpec
from sweeps.errors import PlanError
from training import tracking

BUDGET_TAG = "tune_budget"
PREV_TAG = "tune_prev"  # the run key of the segment a later rung continues
ENTROPY_PARAM = "data_unigram_entropy"  # the corpus's unigram entropy (the plateau)


def rungs(
    spec: CurveSpec, n_candidates: int, budget_tokens: int, batch_tokens: int, stable: int
) -> tuple[int, ...]:
    """The rungs (tokens) where candidates are compared: `predicted`, the one rung where every
    prefix ends; `staged`, t, 2t, 4t (`analysis.tuning.curve_tuning.staged_rungs`) up to the stable
    phase's end."""
    if spec.rule == "predicted":
        return (curve_tuning.prefix_tokens(n_candidates, budget_tokens, batch_tokens, spec.runs),)
    return curve_tuning.staged_rungs(
        n_candidates, budget_tokens, batch_tokens, spec.runs, stable=stable
    )


def check_points(arm: str, rung: int, batch_tokens: int) -> None:
    """PlanError unless a candidate's prefix holds enough train losses for the curve law
    (`analysis.tuning.curve_tuning.MIN_POINTS`, counted from its first update)."""
    points = rung // batch_tokens - curve_tuning.FIRST_STEP  # FIRST_STEP .. rung / batch - 1
    if points < curve_tuning.MIN_POINTS:
        raise PlanError(
            f"sweep.tune_curve.runs: the candidates of arm {arm} see {max(points, 0)} train "
            f"loss{'' if points == 1 else 'es'} in their prefix of {rung} tokens; the curve law needs "
            f"{curve_tuning.MIN_POINTS}: raise runs"
        )


def segment_overrides(budget_tokens: int) -> tuple[str, ...]:
    """What a candidate's prefix adds to halving's segment: a point per step, and the budget
    its prediction is for."""
    return ("train.log_every=1", f"++tracking.tags.{BUDGET_TAG}={budget_tokens}")


def previous_overrides(prev_key: str) -> tuple[str, ...]:
    """A later rung's segment names the segment it continues (its prefix's earlier points)."""
    return (f"++tracking.tags.{PREV_TAG}={prev_key}",)


def _value(text: str) -> Any:
    if text in ("None", "null", ""):
        return math.nan
    try:
        return float(text)
    except ValueError:
        return text


def row_of(params: dict[str, str], budget_tokens: float) -> dict[str, Any]:
    """A candidate segment's run as a runs.csv row of the run it would be to the budget."""
    row = {k: _value(v) for k, v in params.items() if k.startswith("train.")}
    row["unigram_entropy"] = _value(params.get(ENTROPY_PARAM, ""))
    return {**row, "train.tokens": float(budget_tokens)}


def prefix_history(client, run) -> tuple[list[float], list[float]]:
    """(tokens, train losses) of the candidate's whole prefix: this segment's and those of the
    segments it continues (`tune_prev`), earliest first."""
    chain, found = [run], None
    while PREV_TAG in chain[-1].data.tags:
        if found is None:
            found = tracking.latest_runs_by_key(client, run.info.experiment_id)
        prev = found.get(chain[-1].data.tags[PREV_TAG])
        if prev is None:
            break
        chain.append(prev)
    points = {}
    for r in reversed(chain):  # a later segment's point at the same step wins
        for h in client.get_metric_history(r.info.run_id, "train_loss"):
            points[h.step] = h.value
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def prediction(client, run) -> curve_tuning.Prediction:
    """The candidate's final loss predicted from its logged prefix."""
    budget = float(run.data.tags[BUDGET_TAG])
    row = row_of(run.data.params, budget)
    tokens, loss = prefix_history(client, run)
    return curve_tuning.predict(row, tokens, loss, max(tokens, default=0))


def ranked_loss(client, run):
    """What `sweep.tune_curve` ranks a run by (`tuning.losses_from_mlflow`'s `loss_of`): a
    candidate segment's `Prediction`; other runs (the chosen one's decay, transfers) keep
    their final val loss."""
    if BUDGET_TAG in run.data.tags and run.info.status == "FINISHED":
        return prediction(client, run)
    return run.data.metrics.get("final_val_loss")
