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
point sets alpha. The first step fitted moves the result (docs/results.md has the counts
for steps 1, 2, 3 and 5 on three seeds' grids); 2 was chosen on seeds 0 and 1. Every
candidate decays the same way, so the rank at the decay start is the rank the rule uses.
`sweeps.run` calls the same function on the runs it trains (`sweep.tune_curve`);
`analysis.tuning.tuning_check --strategy curve` calls it on full-grid runs cut where the sweep would
stop them (the same steps and losses: the candidates' prefixes are the grid runs' first steps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from analysis.fits.laws.base import fit, one_thread
from analysis.fits.laws.curve import TISSUE, features
from analysis.tuning.schedule_replay import lrs_of, total_steps, warmup_steps

# Fewer post-warmup points than this in a prefix and the candidate gets no prediction (a
# 3-parameter fit needs a few more points than parameters to say anything).
MIN_POINTS = 6
RUNS = 2.0  # the one-rung rule's budget: two full runs' compute per arm
STAGED_RUNS = 3.0  # the staged rule's worst case per arm (issue 43's target: at most 3)
RUNGS = 3  # the staged rule's rungs: t, 2t, 4t
FIRST_STEP = 2  # the first point fitted (module docstring: why not the first update's)
FREE = np.array([True, True, True, False])  # L0, A, alpha; C is 0-weighted (S2 = 0)
LAST_WINDOW = 5  # a prefix's last train losses averaged (one batch's loss is noisy)
ALPHA_MAX = 3.0  # a fitted exponent above this is the law bending to noise, not a curve
PLATEAU_NATS = 0.1  # a last loss this close to the unigram entropy: still on the plateau


def prefix_tokens(n_candidates: int, budget_tokens: int, batch_tokens: int, runs=RUNS) -> int:
    """Tokens each candidate trains: n t + (D - t) <= runs x D, t in whole batches."""
    t = (runs - 1.0) * budget_tokens / max(n_candidates - 1, 1)
    return int(t // batch_tokens) * batch_tokens


def staged_rungs(
    n_candidates: int,
    budget_tokens: int,
    batch_tokens: int,
    runs=STAGED_RUNS,
    rungs=RUNGS,
    stable: int | None = None,
) -> tuple[int, ...]:
    """The staged rule's rungs (tokens): t, 2t, 4t, ... with at most ceil(k/2) of k candidates
    going on from a rung, t the largest whole number of batches whose worst case (no arm
    decided early) costs at most `runs` runs: sum_k alive_k (t_k - t_(k-1)) + D - t_K <= runs D.
    With `stable` (tokens of the stable phase) the rungs past it are dropped, the first kept
    (the sweep refuses a first rung past it)."""
    alive = [n_candidates]
    for _ in range(rungs - 1):
        alive.append(math.ceil(alive[-1] / 2))
    widths = [1] + [2 ** (k - 1) for k in range(1, rungs)]  # (t_k - t_(k-1)) / t
    coef = sum(a * w for a, w in zip(alive, widths)) - 2 ** (rungs - 1)
    t = (runs - 1.0) * budget_tokens / max(coef, 1)
    t = int(t // batch_tokens) * batch_tokens
    out = tuple(t * 2**k for k in range(rungs))
    if stable is None:
        return out
    return tuple(r for r in out if r <= stable) or out[:1]


def staged_cost(n_candidates: int, budget_tokens: int, rungs, alive, finalists: int = 1) -> int:
    """Tokens an arm trains under the staged rule: `alive[k]` candidates to rung k, then
    `finalists` (the chosen one, or two decayed where every survivor was on the plateau) from
    the last rung reached (len(alive) rungs trained) to the budget."""
    prev, tokens = 0, 0
    for k, a in enumerate(alive):
        tokens += a * (rungs[k] - prev)
        prev = rungs[k]
    return tokens + finalists * (budget_tokens - prev)


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


def _fit_prefix(row: Mapping, steps, loss):
    """(theta, lrs, warmup) of the Tissue law fitted to a prefix's points (theta nan: no fit).
    C is held (S2 = 0 in a stable phase), so starts that differ only in C are one start."""
    lrs = lrs_of(row)
    warm = warmup_steps(float(row.get("train.warmup", 0.0)), lrs.size)
    cols = features(TISSUE.name, lrs, steps, warm)
    starts, free = TISSUE.hold(TISSUE.starts(), {"C": 1.0})
    with one_thread():
        got = fit(TISSUE, cols, loss, starts=starts, free=free)
    return got.theta, lrs, warm, cols


def _at_decay_start(theta, row: Mapping, lrs, warm) -> float:
    end = features(TISSUE.name, lrs, [decay_start(row)], warm)
    end["S2"] = np.zeros(1)  # the loss the stable phase reaches, before any annealing
    return float(TISSUE.predict(theta, end)[0, 0])


def predict_final(
    row: Mapping, tokens, train_loss, upto_tokens: float, first: int = FIRST_STEP
) -> float:
    """The candidate's loss at its decay start, predicted from its prefix (nan: too few
    points, or no fit). `row`: the candidate's run as it would train to the arm's budget
    (runs.csv columns `train.lr`, `train.tokens`, `train.batch_tokens`, `train.schedule`,
    `train.warmup`, ...); `first`: the first step fitted."""
    return predict(row, tokens, train_loss, upto_tokens, first).final


@dataclass(frozen=True)
class Prediction:
    """A candidate's predicted final loss from its prefix, with the fit's own standard error
    (inf: the law is not identified on this prefix, or the curve is still on the plateau),
    and its last train losses' mean (what it ranks by where no prediction exists)."""

    final: float
    se: float
    last: float
    why: str = ""  # why se is inf, in a few words

    @property
    def score(self) -> float:
        return self.final if math.isfinite(self.final) else self.last


def _delta_se(theta, cols, loss, row, lrs, warm) -> float:
    """The prediction's standard error by the delta method: the residual variance of the
    prefix's log losses times g (J^T J)^-1 g^T, J the log prediction's gradient over the free
    parameters at the points, g at the decay start (central differences; theta is in log
    scale where the law's parameters are)."""
    idx = np.flatnonzero(FREE)
    y = np.log(np.asarray(loss, float))

    def at_points(t):
        return np.log(TISSUE.predict(t, cols)[0])

    def at_end(t):
        return math.log(_at_decay_start(t, row, lrs, warm))

    J, g = np.zeros((y.size, idx.size)), np.zeros(idx.size)
    for j, i in enumerate(idx):
        h = 1e-5 * max(1.0, abs(theta[i]))
        up, down = theta.copy(), theta.copy()
        up[i] += h
        down[i] -= h
        J[:, j] = (at_points(up) - at_points(down)) / (2 * h)
        g[j] = (at_end(up) - at_end(down)) / (2 * h)
    resid = y - at_points(theta)
    dof = max(y.size - idx.size, 1)
    var = float(resid @ resid) / dof
    jtj = J.T @ J
    if not (np.all(np.isfinite(jtj)) and np.all(np.isfinite(g))):
        return math.inf
    # a parameter run off to a boundary in its log scale (L0 -> 0 on a short prefix) has no
    # gradient left, and neither has the prediction along it: left out, as held there
    se_log = math.sqrt(max(var * float(g @ np.linalg.pinv(jtj, rcond=1e-10) @ g), 0.0))
    return math.exp(at_end(theta)) * se_log


def predict(
    row: Mapping, tokens, train_loss, upto_tokens: float, first: int = FIRST_STEP
) -> Prediction:
    """The candidate's `Prediction` from its prefix (module docstring: the rule). Not
    identified (se inf): too few points, no fit, alpha outside (0, ALPHA_MAX], or a last loss
    within PLATEAU_NATS of the corpus's unigram entropy (`unigram_entropy` in `row`, where
    known): a curve still on the plateau says nothing about where it will go."""
    steps, loss = prefix_points(row, tokens, train_loss, upto_tokens, first)
    last = float(loss[-LAST_WINDOW:].mean()) if loss.size else math.nan
    if steps.size < MIN_POINTS:
        return Prediction(math.nan, math.inf, last, "too few points")
    theta, lrs, warm, cols = _fit_prefix(row, steps, loss)
    if not np.all(np.isfinite(theta)):
        return Prediction(math.nan, math.inf, last, "no fit")
    final = _at_decay_start(theta, row, lrs, warm)
    entropy = float(row.get("unigram_entropy", math.nan) or math.nan)
    if math.isfinite(entropy) and last > entropy - PLATEAU_NATS:
        return Prediction(final, math.inf, last, "on the plateau")
    alpha = float(theta[TISSUE.order.index("alpha")])
    if not 0.0 < alpha <= ALPHA_MAX:
        return Prediction(final, math.inf, last, f"alpha {alpha:.2g}")
    return Prediction(final, _delta_se(theta, cols, loss, row, lrs, warm), last)


def last_loss(
    row: Mapping, tokens, train_loss, upto_tokens: float, window: int = LAST_WINDOW
) -> float:
    """The baseline rule: the mean train loss of the prefix's last `window` logged steps (what
    halving would rank with one rung at the prefix, less the eval's noise)."""
    _, loss = prefix_points(row, tokens, train_loss, upto_tokens)
    return float(loss[-window:].mean()) if loss.size else math.nan


RULES = {"tissue": predict_final, "last": last_loss}


Z = 2.0  # the staged rule's separation: predicted finals apart by more than Z combined se


@dataclass(frozen=True)
class Decision:
    """What the staged rule does at a rung: `keep` (ids, best first) go on to the next rung;
    or `chosen` decays to the budget; or, where every survivor is still on the plateau at the
    last rung, each of `finalists` decays and the lowest final loss is the choice. `why` in
    words, for the dry run and the report."""

    keep: tuple[str, ...]
    chosen: str | None
    why: str
    finalists: tuple[str, ...] = ()


def separated(a: Prediction, b: Prediction, z: float = Z) -> bool:
    """b's predicted final is above a's by more than z combined standard errors (never where
    either is not identified)."""
    if not (math.isfinite(a.se) and math.isfinite(b.se)):
        return False
    return b.score - a.score > z * math.hypot(a.se, b.se)


def _ranked(preds: Mapping[str, Prediction], by) -> list[str]:
    return sorted(preds, key=lambda k: (not math.isfinite(by(preds[k])), by(preds[k])))


def decide(preds: Mapping[str, Prediction], last_rung: bool, z: float = Z) -> Decision:
    """The staged rule at one rung (module docstring). Before the last rung: the leader (the
    lowest predicted final; a candidate without one ranks by its last train losses) is chosen
    when every other is separated from it; otherwise half of the candidates go on, the best
    by the prediction and the best by the current train loss alike (h // 2 + 1 of each, at
    most h = ceil(k / 2) of k; the two rankings disagree early: the law sees where a curve
    goes, the loss where it is). At the last rung (4t, near half the run): the lowest train
    loss, unless every survivor is still on the plateau, where no prefix ranks: the two
    lowest decay and the measured final loss chooses."""
    by_pred = _ranked(preds, lambda p: p.score)
    by_last = _ranked(preds, lambda p: p.last)
    if last_rung:
        if all(p.why == "on the plateau" for p in preds.values()) and len(preds) > 1:
            two = tuple(by_last[:2])
            return Decision(two, None, "every survivor on the plateau: 2 decay", two)
        return Decision((by_last[0],), by_last[0], f"last rung: lowest of {len(preds)} losses")
    lead = by_pred[0]
    close = [k for k in by_pred[1:] if not separated(preds[lead], preds[k], z)]
    if not close:
        why = (
            f"{len(by_pred) - 1} other(s) separated by > {z:g} se" if len(by_pred) > 1 else "alone"
        )
        return Decision((lead,), lead, why)
    h = math.ceil(len(preds) / 2)
    m = h // 2 + 1
    keep = tuple(dict.fromkeys(by_pred[:m] + by_last[:m]))[:h]
    if len(keep) == 1:
        return Decision(keep, keep[0], "half of 2 is 1")
    reasons = sorted({preds[k].why or f"within {z:g} se" for k in close})
    return Decision(keep, None, f"{len(close)} not separated ({', '.join(reasons)})")
