"""Curve-aware tuning: each candidate trains a short prefix of the shared WSD stable phase, a
loss-curve law fitted to its prefix predicts its final loss, the predicted best trains on.

    python -m analysis.tuning_check --grid results/demo/runs.csv --curves DENSE/curves.csv \
        --strategy curve --tune train.lr --tune train.warmup [--out FILE]

The budget: n candidates share the stable phase up to t tokens, the chosen one continues to
the arm's budget D (its decay from the stable end, the same trajectory as a full WSD run), so
n t + (D - t) <= R D gives t = (R - 1) D / (n - 1) in whole batches (`prefix_tokens`; R =
`runs`, 2 by default: 27 steps of 245 at the demo's 10 candidates of 250,880 tokens).

The rule (`predict_final`): the candidate's train loss at every logged step of its prefix
from step 2 on, warmup included (a train loss logged after step s is of the model after s - 1
updates), the Tissue et al. law L = L0 + A S1^-alpha fitted to it (S2 = 0 in a stable phase, so
the annealing term is neither fitted nor used), extrapolated in S1 to the candidate's decay
start at its own lr. The warmup's points belong in the fit: the law counts the warmup's lr in
S1, and at two runs' compute they are most of a candidate's prefix (20 of 27 steps at the
demo's 8% warmup). The loss after the first update is left out: its S1 is one warmup step's
lr, where A S1^-alpha is near its pole and the real loss still near ln(vocab), so that one
point sets alpha. The first step fitted moves the result (docs/curve-laws.md has the counts
for steps 1, 2, 3 and 5 on three seeds' grids); 2 was chosen on seeds 0 and 1. Every
candidate decays the same way, so the rank at the decay start is the rank the rule uses.
`sweeps.run` calls the same function on the runs it trains (`sweep.tune_curve`);
`analysis.tuning_check --strategy curve` calls it on full-grid runs cut where the sweep would
stop them (the same steps and losses: the candidates' prefixes are the grid runs' first steps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from analysis.laws.base import fit, one_thread
from analysis.laws.curve import TISSUE, features
from analysis.schedule_replay import lrs_of, total_steps, warmup_steps

# Fewer post-warmup points than this in a prefix and the candidate gets no prediction (a
# 3-parameter fit needs a few more points than parameters to say anything).
MIN_POINTS = 6
RUNS = 2.0  # the issue's budget: two full runs' compute per arm
FIRST_STEP = 2  # the first point fitted (module docstring: why not the first update's)
FREE = np.array([True, True, True, False])  # L0, A, alpha; C is 0-weighted (S2 = 0)


def prefix_tokens(n_candidates: int, budget_tokens: int, batch_tokens: int, runs=RUNS) -> int:
    """Tokens each candidate trains: n t + (D - t) <= runs x D, t in whole batches."""
    t = (runs - 1.0) * budget_tokens / max(n_candidates - 1, 1)
    return int(t // batch_tokens) * batch_tokens


def cost_tokens(n_candidates: int, budget_tokens: int, prefix: int) -> int:
    """Tokens an arm trains: every candidate's prefix, then the chosen one to the budget."""
    return n_candidates * prefix + budget_tokens - prefix


def decay_start(row: Mapping) -> int:
    """The first step whose lr is below the peak after warmup (the run's total steps when it
    never decays)."""
    lrs, peak = lrs_of(row), float(row["train.lr"])
    warm = warmup_steps(float(row.get("train.warmup", 0.0)), total_steps(row))
    below = np.flatnonzero(lrs[warm:] < peak * (1 - 1e-9))
    return warm + int(below[0]) if below.size else lrs.size


def prefix_points(row: Mapping, tokens, train_loss, upto_tokens: float, first: int = FIRST_STEP):
    """(steps, losses) of a candidate's train loss logged at or before `upto_tokens`, from step
    `first` on: steps as curve-law points (a loss logged at step s is after s - 1 updates; the
    loss before any update has S1 = 0, where the law is infinite)."""
    bt = float(row["train.batch_tokens"])
    tokens = np.asarray(tokens, float)
    loss = np.asarray(train_loss, float)
    steps = np.round(tokens / bt).astype(int) - 1
    keep = (tokens <= upto_tokens) & (steps >= first) & np.isfinite(loss)
    return steps[keep], loss[keep]


def predict_final(
    row: Mapping, tokens, train_loss, upto_tokens: float, first: int = FIRST_STEP
) -> float:
    """The candidate's loss at its decay start, predicted from its prefix (nan: too few
    points, or no fit). `row`: the candidate's run as it would train to the arm's budget
    (runs.csv columns `train.lr`, `train.tokens`, `train.batch_tokens`, `train.schedule`,
    `train.warmup`, ...); `first`: the first step fitted."""
    steps, loss = prefix_points(row, tokens, train_loss, upto_tokens, first)
    if steps.size < MIN_POINTS:
        return math.nan
    lrs = lrs_of(row)
    warm = warmup_steps(float(row.get("train.warmup", 0.0)), lrs.size)
    cols = features(TISSUE.name, lrs, steps, warm)
    with one_thread():
        got = fit(TISSUE, cols, loss, free=FREE)
    if not np.all(np.isfinite(got.theta)):
        return math.nan
    end = features(TISSUE.name, lrs, [decay_start(row)], warm)
    end["S2"] = np.zeros(1)  # the loss the stable phase reaches, before any annealing
    return float(TISSUE.predict(got.theta, end)[0, 0])


def last_loss(row: Mapping, tokens, train_loss, upto_tokens: float, window: int = 5) -> float:
    """The baseline rule: the mean train loss of the prefix's last `window` logged steps (what
    halving would rank with one rung at the prefix, less the eval's noise)."""
    _, loss = prefix_points(row, tokens, train_loss, upto_tokens)
    return float(loss[-window:].mean()) if loss.size else math.nan


RULES = {"tissue": predict_final, "last": last_loss}
