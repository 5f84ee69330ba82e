"""One tuned cell's (lr, batch) loss surface: its optimum and its near-optimal region.

A cell is one arm of a tuned sweep (variant x size x token budget, `analysis.tuning.arms`). Its
surface is the mean final loss (over seeds) of every full-length (lr, B) pair, the other tuned
keys held at the arm's best values. Per cell:

- the optimum: where both keys have 3+ grid values, the vertex of a quadratic in (log lr,
  log B) fitted to the best grid point and its grid neighbours (up to 3 x 3 points; the
  surface is close to a paraboloid there, as DeepSeek LLM's and Step Law's heatmaps show);
  where one key has 3+ values, the vertex of the parabola in its log through the best value
  and both neighbours; else the grid's best point. The vertex is kept inside the neighbours'
  box (a fit cannot move the optimum past points it did not see).
- the near-optimal region: every grid point whose loss is within `tolerance` (relative) of the
  best, reported as its lr and B ranges. DeepSeek LLM (sec. 3.1) fits its laws to such a band
  rather than to one point, because the optimum is broad.
- per key, whether the cell identifies its optimum: `untuned` (fewer than 3 values: no
  neighbourhood on both sides), `chosen` (fewer than 3 trained the full budget because the
  others were ranked on curve prefixes or stopped by halving) or `transferred` (the value
  chosen at another token budget; both: one full-budget value, no curvature), `edge` (the best value is the grid's lowest or highest: only a
  bound), `flat` (the near-optimal region reaches both ends of the key's grid: the grid cannot
  locate it), else `identified`. Only identified optima enter a law.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.tuning.arms import arm_labels, full_length

TOLERANCE = 0.005  # near-optimal: within 0.5% of the best loss (the reading of DeepSeek)
ROLES = ("lr", "batch")  # what the two tuned keys are, whatever their config names


def role_keys(keys: list[str]) -> dict[str, str]:
    """{'lr': key, 'batch': key} for the tuned keys whose last dotted part is `lr` and
    `batch_tokens` (either may be absent)."""
    found = {}
    for key in keys:
        last = key.rsplit(".", 1)[-1]
        if last == "lr":
            found.setdefault("lr", key)
        elif last == "batch_tokens":
            found.setdefault("batch", key)
    return found


def surface(runs: pd.DataFrame, arm: dict, roles: dict[str, str], variant: str) -> pd.DataFrame:
    """Columns lr, batch (either may be a constant column) and loss: the mean final loss of
    each full-length pair of one arm, every other tuned key at the arm's best value."""
    g = runs[arm_labels(runs, variant) == arm["arm"]]
    g = g[full_length(g, arm["D"])]
    pairs = list(roles.values())
    for key, value in arm["best"].items():
        # a key that follows from (lr, B) (e.g. a decay start in whole batches, a warmup
        # fraction in steps) is no separate axis: holding it fixed would drop other batches
        if key not in pairs and g.groupby(pairs)[key].nunique().max() > 1:
            g = g[g[key] == value]
    cols = {role: g[key].astype(float) for role, key in roles.items()}
    frame = pd.DataFrame({**cols, "loss": g["loss"].astype(float)})
    by = [r for r in ROLES if r in roles]
    return _mean(frame, by)


def _mean(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Mean loss per pair; a role that is not tuned is a column of nan."""
    out = frame.groupby(by, as_index=False)["loss"].mean()
    for role in ROLES:
        if role not in out:
            out[role] = np.nan
    return out[[*ROLES, "loss"]].reset_index(drop=True)


def _status(grid: list[float], best: float, near: set[float]) -> tuple[str, str | None]:
    """Whether one key's optimum is identified by this cell, and why not."""
    if len(grid) < 3:
        return "untuned", f"{len(grid)} value(s): a grid needs 3+ to place an optimum inside it"
    if best in (grid[0], grid[-1]):
        side = "lowest" if best == grid[0] else "highest"
        return "edge", f"best at the {side} grid value {best:.4g}: the optimum may lie outside"
    if grid[0] in near and grid[-1] in near:
        return "flat", (
            f"every value from {grid[0]:.4g} to {grid[-1]:.4g} is within the near-optimal "
            "tolerance: the surface is flat over the grid, which cannot place the optimum"
        )
    return "identified", None


def _how_tuned(arm: dict, key: str, full: int) -> tuple[str, str, str] | None:
    """Why a cell with fewer than 3 full-budget values of `key` has them, where it was tuned
    all the same: `transferred` (the value chosen at another token budget of its variant and
    size, `analysis.tuning.arms`) or `chosen` (the others stopped early: curve-law prefixes or
    successive halving's losers, ranked on fewer tokens). Either way its full-budget loss has
    no curvature in `key` to place an optimum by, which keeps it out of a law. (status, why,
    what the report prints); None: untuned."""
    tried = len(arm["grid"].get(key, []))
    nothing = f"{full} value(s) trained the full budget here: no curvature to place an optimum"
    if "transferred_from" in arm:
        source = arm["transferred_from"]
        at = f"D {source:.3g}" if source is not None else "another token budget"
        return "transferred", f"the value chosen at {at}; {nothing}", f"transferred from {at}"
    if tried > full:
        curve = any(s.get("curve") for s in arm.get("stopped_early", []))
        how = "curve prefixes" if curve else "successive halving"
        return (
            "chosen",
            f"{full} of {tried} values trained the full budget ({how} ranked the others on "
            "fewer tokens): no curvature to place an optimum",
            f"chosen from {tried} by {how}",
        )
    return None


def status_text(cell: dict, role: str) -> str:
    """A cell's status of `role` as the report prints it: how it was tuned where no optimum
    can be placed (`chosen from 5 by curve prefixes`, `transferred from D 2.51e+05`), else
    the status (`identified`, `edge`, `flat`, `untuned`)."""
    return cell.get("how_tuned", {}).get(role, cell["status"][role])


def _neighbours(points: pd.DataFrame, grids: dict, best: dict, tuned: list[str]) -> pd.DataFrame:
    """The grid points within one grid step of the best along every tuned key."""
    keep = np.ones(len(points), bool)
    for role in tuned:
        i = grids[role].index(best[role])
        window = grids[role][max(i - 1, 0) : i + 2]
        keep &= points[role].isin(window).to_numpy()
    return points[keep]


def _quadratic_vertex(near: pd.DataFrame, best: dict) -> dict | None:
    """Vertex of L = c0 + c1 x + c2 y + c3 x^2 + c4 y^2 + c5 x y, x = log lr, y = log B
    (centred on the best point), when it is a bowl; clipped to the neighbours' box."""
    x = np.log(near["lr"].to_numpy()) - np.log(best["lr"])
    y = np.log(near["batch"].to_numpy()) - np.log(best["batch"])
    if len(near) < 6 or np.unique(x).size < 3 or np.unique(y).size < 3:
        return None
    A = np.column_stack([np.ones_like(x), x, y, x * x, y * y, x * y])
    c, *_ = np.linalg.lstsq(A, near["loss"].to_numpy(), rcond=None)
    H = np.array([[2 * c[3], c[5]], [c[5], 2 * c[4]]])
    if not (H[0, 0] > 0 and np.linalg.det(H) > 0):
        return None
    vx, vy = np.linalg.solve(H, -c[1:3])
    vx, vy = np.clip(vx, x.min(), x.max()), np.clip(vy, y.min(), y.max())
    return {"lr": float(best["lr"] * np.exp(vx)), "batch": float(best["batch"] * np.exp(vy))}


def _parabola_vertex(line: pd.DataFrame, role: str, best: float) -> float | None:
    """Vertex of the parabola in log value through the best value and both neighbours."""
    xs = sorted(line[role])
    i = xs.index(best)
    if not 0 < i < len(xs) - 1:
        return None
    pts = line.set_index(role).loc[xs[i - 1 : i + 2], "loss"].to_numpy()
    lx = np.log(xs[i - 1 : i + 2])
    c2, c1, _ = np.polyfit(lx, pts, 2)
    if not c2 > 0:
        return None
    return float(np.exp(np.clip(-c1 / (2 * c2), lx[0], lx[2])))


def optimum(points: pd.DataFrame, grids: dict, best: dict, tuned: list[str]) -> tuple[dict, str]:
    """The refined optimum of every tuned role and the method that gave it."""
    near = _neighbours(points, grids, best, tuned)
    if tuned == list(ROLES):
        vertex = _quadratic_vertex(near, best)
        if vertex is not None:
            return vertex, "quadratic in (log lr, log B)"
    refined, method = dict(best), "grid"
    for role in tuned:
        others = [r for r in tuned if r != role]
        line = near
        for other in others:
            line = line[line[other] == best[other]]
        vertex = _parabola_vertex(line, role, best[role]) if len(line) >= 3 else None
        if vertex is not None:
            refined[role], method = vertex, "parabola in log of each key"
    return refined, method


def cell(runs: pd.DataFrame, arm: dict, roles: dict, variant: str, tolerance: float) -> dict:
    """fit.json's entry of one cell: its surface, best point, optimum, near-optimal region."""
    points = surface(runs, arm, roles, variant)
    tuned = [r for r in ROLES if r in roles]
    grids = {r: sorted(points[r].unique().tolist()) for r in tuned}
    row = points.loc[points["loss"].idxmin()]
    best = {r: float(row[r]) for r in tuned}
    best_loss = float(row["loss"])
    near = points[points["loss"] <= best_loss * (1 + tolerance)]
    refined, method = optimum(points, grids, best, tuned)
    status, why, how_tuned = {}, {}, {}
    for r in tuned:
        status[r], reason = _status(grids[r], best[r], set(near[r]))
        how = _how_tuned(arm, roles[r], len(grids[r])) if status[r] == "untuned" else None
        if how:
            status[r], reason, how_tuned[r] = how
        if reason:
            why[r] = reason
    return {
        "arm": arm["arm"],
        "variant": arm["variant"],
        "N": arm["N"],
        "D": arm["D"],
        "grid": grids,
        "points": [[*(float(p[r]) for r in tuned), float(p["loss"])] for _, p in points.iterrows()],
        "point_columns": [*tuned, "loss"],
        "best": {**best, "loss": best_loss},
        "optimum": refined,
        "method": method,
        "status": status,
        "why": why,
        **({"how_tuned": how_tuned} if how_tuned else {}),
        "near_optimal": {
            "tolerance": tolerance,
            "n_points": int(len(near)),
            **{r: [float(near[r].min()), float(near[r].max())] for r in tuned},
        },
    }
