"""`sweep.tune_curve`: tuning from partial curves, on halving's machinery with one rung.

Every candidate of a tuned arm trains the shared WSD stable phase up to one rung, the prefix
`analysis.curve_tuning.prefix_tokens` sizes so the arm costs at most `runs` runs to its budget
(n t + D - t <= runs D; 27 steps of 245 for 10 candidates at two runs). Its segment logs the
train loss and lr at every step (`train.log_every=1`, not part of the run key). The rung is
then ranked not by the val loss there, as halving ranks, but by each candidate's final loss as
the curve law predicts it from the prefix (`analysis.curve_tuning.predict_final`), read back
from MLflow (`ranked_loss`); the predicted best continues from its checkpoint to the
budget with the decay, exactly as halving's winner does. Each segment carries the arm's budget
as tag `tune_budget`, so the prediction is made for the run the candidate would be.
"""

from __future__ import annotations

import math
from typing import Any

from analysis import curve_tuning
from sweeps.plan import CurveSpec, PlanError

BUDGET_TAG = "tune_budget"


def rung(spec: CurveSpec, n_candidates: int, budget_tokens: int, batch_tokens: int) -> int:
    """The one rung (tokens) where every candidate's prefix ends."""
    return curve_tuning.prefix_tokens(n_candidates, budget_tokens, batch_tokens, spec.runs)


def check_points(arm: str, rung: int, batch_tokens: int) -> None:
    """PlanError unless a candidate's prefix holds enough train losses for the curve law
    (`analysis.curve_tuning.MIN_POINTS`, counted from its first update)."""
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
    return {**row, "train.tokens": float(budget_tokens)}


def predicted_loss(client, run) -> float:
    """The candidate's final loss predicted from its logged prefix (nan when it cannot be)."""
    budget = float(run.data.tags[BUDGET_TAG])
    row = row_of(run.data.params, budget)
    hist = client.get_metric_history(run.info.run_id, "train_loss")
    tokens = [h.step for h in hist]
    return curve_tuning.predict_final(row, tokens, [h.value for h in hist], max(tokens, default=0))


def ranked_loss(client, run) -> float | None:
    """The loss `sweep.tune_curve` ranks a run by (`tuning.losses_from_mlflow`'s `loss_of`): a
    candidate segment's predicted final loss; other runs (the chosen one's decay, transfers)
    keep their final val loss."""
    if BUDGET_TAG in run.data.tags and run.info.status == "FINISHED":
        pred = predicted_loss(client, run)
        return pred if math.isfinite(pred) else None
    return run.data.metrics.get("final_val_loss")
