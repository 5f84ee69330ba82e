"""Chinchilla approach 2: IsoFLOP profiles, a parabola of loss in ln N per compute budget.

Runs are grouped into budgets (C within 10% of each other, within one sweep); a group with at
least MIN_PROFILE_SIZES distinct N whose C all lie within those 10% is a profile. Runs whose
neighbour chaining spans more (a scatter of runs, not an IsoFLOP design) form no budget, and
the section says so. Per profile (`profile_optimum`), the rule:

- the budget's lowest-loss run must not sit at its smallest or largest N (an edge minimum
  says the optimum lies outside the sweep: the budget is shown, not used);
- the parabola of loss in ln N is fitted to the runs near that minimum only: the contiguous
  sizes whose lowest loss is within WINDOW_RTOL (2%) of the budget's lowest, and at least the
  size on each side of it (far points bend a parabola: the profile is not one);
- the budget is used only when that parabola is convex and its minimum lies inside the fitted
  sizes (interior). Its minimum gives N_opt(C) and D_opt = C / (6 k N_opt) (k = C / 6ND of the
  runs: 1 but for an encoder-decoder, `analysis.data.compute_factor`).

Power laws through the used budgets give the allocation exponents a and b
(`powerlaw.frontier_exponents`). Their interval comes from a bootstrap that does two things in
every replicate: it adds the runs' seed noise to every loss and finds each used budget's minimum
again by the rule above (Porian et al. 2024's noise-and-reinterpolate bootstrap: how far a
flat profile's minimum moves under the noise of one run), and it resamples the budgets (the
cases of the regression: how far the minima scatter about the line). A budget whose noised
minimum leaves its fitted sizes drops out of that replicate. Resampling the budgets alone is
too narrow where twelve minima happen to line up (OpenWebText2, cosine decay: 0.561 [0.549,
0.568] against the authors' 0.574 [0.542, 0.606]); noise alone misses where a minimum sits off
the line (5 of the 10 published sets). Not over runs within a budget: a draw without a
profile's lowest run moves the window to a neighbour, which biases the replicates to one side.
The noise is the runs' seed spread (`seed_noise`). The budget grouping is also what the
ablations and the extrapolation check use to name a budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.fits import identification
from analysis.fits.bootstrap import resample_counts
from analysis.fits.powerlaw import exponent_intervals, frontier_exponents
from analysis.verdicts import noise

MIN_PROFILE_SIZES = 3  # distinct N a budget group needs to be an IsoFLOP profile (a parabola)
WINDOW_RTOL = 0.02  # the parabola is fitted to the sizes within 2% of a budget's lowest loss
DEFAULT_SEED_NOISE = noise.DEFAULT_NOISE  # where the runs do not measure their seed spread


def sweep_labels(runs: pd.DataFrame) -> np.ndarray | None:
    """The `sweep` value of every run ('' when missing), or None for no column or one sweep."""
    if "sweep" not in runs.columns:
        return None
    sweeps = runs["sweep"].astype(object).where(runs["sweep"].notna(), "").astype(str)
    sweeps = sweeps.to_numpy()
    return sweeps if np.unique(sweeps).size > 1 else None


def budget_groups(C, rtol: float = 0.1, sweep=None) -> np.ndarray:
    """Label runs by compute budget: sorted budgets within `rtol` of their neighbour share a label.

    Why: planned budgets are met only up to rounding of N and of the token count to whole
    batches, so equal budgets differ by a few percent. With `sweep` (one value per run) groups
    are formed within each sweep: a token grid whose C happens to match a budget of an IsoFLOP
    sweep is not part of that budget. Labels follow the groups' smallest C (then sweep name).
    """
    log_c = np.log(np.asarray(C, dtype=float))
    if sweep is None:
        return _clusters(log_c, rtol)
    sweep = np.asarray(sweep).astype(str)
    groups = []
    for s in np.unique(sweep):
        members = np.flatnonzero(sweep == s)
        sub = _clusters(log_c[members], rtol)
        groups += [(log_c[members[sub == k]].min(), s, members[sub == k]) for k in np.unique(sub)]
    labels = np.empty(log_c.size, dtype=int)
    for label, (_, _, members) in enumerate(sorted(groups, key=lambda g: g[:2])):
        labels[members] = label
    return labels


def _clusters(log_c: np.ndarray, rtol: float) -> np.ndarray:
    order = np.argsort(log_c)
    new_group = np.diff(log_c[order], prepend=log_c[order][0]) > np.log1p(rtol)
    labels = np.empty(log_c.size, dtype=int)
    labels[order] = np.cumsum(new_group)
    return labels


def isoflop_groups(runs: pd.DataFrame, rtol: float = 0.1) -> np.ndarray:
    """Budget label of every run (grouped within each sweep), -1 where its group is not an
    IsoFLOP profile: fewer than MIN_PROFILE_SIZES distinct N (e.g. a fixed-size token grid), or
    C spread over more than rtol (`scattered_groups`)."""
    labels = budget_groups(runs["C"], rtol, sweep_labels(runs))
    frame = pd.DataFrame({"N": np.asarray(runs["N"], float), "C": np.asarray(runs["C"], float)})
    by = frame.groupby(labels)
    ok = (by["N"].nunique() >= MIN_PROFILE_SIZES) & (by["C"].max() <= by["C"].min() * (1 + rtol))
    return np.where(np.isin(labels, ok.index[ok].to_numpy()), labels, -1)


def scattered_groups(runs: pd.DataFrame, rtol: float = 0.1) -> pd.DataFrame:
    """Groups of MIN_PROFILE_SIZES or more sizes that neighbour chaining (`budget_groups`) made
    although their C spread over more than rtol: one row each (n_runs, C_min, C_max). Runs of
    an IsoFLOP design meet their budget up to rounding; a scatter of runs chains across decades."""
    labels = budget_groups(runs["C"], rtol, sweep_labels(runs))
    frame = pd.DataFrame({"N": np.asarray(runs["N"], float), "C": np.asarray(runs["C"], float)})
    by = frame.groupby(labels)
    out = pd.DataFrame(
        {
            "n_runs": by.size(),
            "n_sizes": by["N"].nunique(),
            "C_min": by["C"].min(),
            "C_max": by["C"].max(),
        }
    )
    return out[(out["n_sizes"] >= MIN_PROFILE_SIZES) & (out["C_max"] > out["C_min"] * (1 + rtol))]


def budget_of(C) -> float:
    """The compute budget a group of runs stands for: the geometric mean of their C."""
    return float(np.exp(np.average(np.log(np.asarray(C, dtype=float)))))


@dataclass(frozen=True)
class IsoflopProfiles:
    """The IsoFLOP profiles of a set of runs: which runs form which profile, and its name.

    Approach 2's table and its figure both come from here, so they name the same profiles.
    `sweeps` is set when the runs come from several sweeps (even if only one of them holds
    profiles, e.g. an IsoFLOP ladder next to a token grid): each profile then names its sweep.
    """

    runs: pd.DataFrame  # the runs that belong to a profile, index reset
    labels: np.ndarray  # profile of each of those runs: its budget group (`isoflop_groups`)
    sweeps: np.ndarray | None  # sweep of each of those runs; None for a single sweep

    @property
    def ids(self) -> np.ndarray:
        """Profile labels in order of budget (then sweep)."""
        return np.unique(self.labels)

    def budget(self, k) -> float:
        return budget_of(self.runs["C"][self.labels == k])

    def sweep(self, k) -> str | None:
        return None if self.sweeps is None else str(self.sweeps[self.labels == k][0])

    def name(self, k) -> str:
        """'C' or 'C (sweep)', C as the report's tables print it."""
        sweep = self.sweep(k)
        return f"{self.budget(k):.3g}" + ("" if sweep is None else f" ({sweep})")


def isoflop_profiles(runs: pd.DataFrame, rtol: float = 0.1) -> IsoflopProfiles | None:
    """The runs of `runs` that form IsoFLOP profiles (`isoflop_groups`), or None when none do."""
    labels = isoflop_groups(runs, rtol)
    if (labels < 0).all():
        return None
    keep = labels >= 0
    sweeps = sweep_labels(runs)  # of every input run: one profile sweep among several is named
    return IsoflopProfiles(
        runs=runs[keep].reset_index(drop=True),
        labels=labels[keep],
        sweeps=None if sweeps is None else sweeps[keep],
    )


def isoflop_optima(N, C, loss, labels, weights=None, k: float = 1.0) -> pd.DataFrame:
    """Per budget: the measured sizes, and by the module's rule the parabola near the lowest
    loss, its minimum N_opt, D_opt = C / (6 k N_opt), and whether the budget is used
    (`interior`; `why_not_used` says why not). Runs with weight 0 are left out."""
    N, C, loss = (np.asarray(v, dtype=float) for v in (N, C, loss))
    weights = np.ones(N.size) if weights is None else np.asarray(weights, dtype=float)
    rows = []
    for label in np.unique(labels):
        sel = (labels == label) & (weights > 0)
        budget = budget_of(C[labels == label])
        row = {
            "C": budget,
            "n_points": int(sel.sum()),
            **profile_optimum(np.log(N[sel]), loss[sel], weights[sel]),
        }
        row["D_opt"] = budget / (6 * k * row["N_opt"])
        rows.append(row)
    return pd.DataFrame(rows)


def profile_optimum(x, y, w) -> dict:
    """One budget by the module's rule; x = ln N, y = loss, w > 0 the runs' weights."""
    nan = float("nan")
    row = {
        "N_min": nan,
        "N_max": nan,
        "N_best": nan,
        "n_fit": 0,
        "N_fit_min": nan,
        "N_fit_max": nan,
        "N_opt": nan,
        "loss_opt": nan,
        "curvature": nan,
        "interior": False,
        "why_not_used": None,
    }
    if x.size == 0:
        return {**row, "why_not_used": "no runs"}
    sizes = np.unique(x)
    lowest = np.array([y[x == v].min() for v in sizes])  # per size: its best run
    i = int(np.argmin(lowest))
    row.update(
        N_min=float(np.exp(sizes[0])),
        N_max=float(np.exp(sizes[-1])),
        N_best=float(np.exp(sizes[i])),
    )
    if sizes.size < MIN_PROFILE_SIZES:
        return {**row, "why_not_used": f"fewer than {MIN_PROFILE_SIZES} distinct sizes"}
    if i in (0, sizes.size - 1):
        end = "smallest" if i == 0 else "largest"
        return {**row, "why_not_used": f"lowest loss at the {end} size"}
    lo, hi = _window(lowest, i)
    fit = (x >= sizes[lo]) & (x <= sizes[hi])
    c2, c1, c0 = np.polyfit(x[fit], y[fit], 2, w=np.sqrt(w[fit]))  # polyfit weights residuals
    row.update(
        n_fit=int(fit.sum()),
        N_fit_min=float(np.exp(sizes[lo])),
        N_fit_max=float(np.exp(sizes[hi])),
        curvature=float(c2),
    )
    if not c2 > 0:
        return {**row, "why_not_used": "parabola not convex"}
    x_opt = -c1 / (2 * c2)
    if not sizes[lo] <= x_opt <= sizes[hi]:  # (a nearly flat one's would overflow exp)
        return {**row, "why_not_used": "parabola minimum outside the fitted sizes"}
    row.update(N_opt=float(np.exp(x_opt)), loss_opt=float(c0 + c1 * x_opt + c2 * x_opt**2))
    return {**row, "interior": True}


def _window(lowest: np.ndarray, i: int) -> tuple[int, int]:
    """First and last size index of the fit around the lowest size i: the contiguous sizes
    within WINDOW_RTOL of its loss, and at least one on each side."""
    threshold = lowest[i] * (1 + WINDOW_RTOL)
    lo, hi = i, i
    while lo > 0 and lowest[lo - 1] <= threshold:
        lo -= 1
    while hi < lowest.size - 1 and lowest[hi + 1] <= threshold:
        hi += 1
    return min(lo, i - 1), max(hi, i + 1)


def seed_noise(runs: pd.DataFrame, labels: np.ndarray) -> dict:
    """One run's seed spread in nats: {"sigma", "source" ("seeds" | "default"), "n_cells"},
    measured over the (budget, N) cells that hold several runs (`noise.pooled_sd`) where
    MIN_SEEDED_CELLS or more do, else the project's measured default (`noise.DEFAULT_NOISE`)."""
    cells = pd.DataFrame({"label": labels, "N": runs["N"].to_numpy(float), "loss": runs["loss"]})
    sigma, n = noise.pooled_sd(cells.groupby(["label", "N"])["loss"])
    if n < noise.MIN_SEEDED_CELLS:
        return {"sigma": DEFAULT_SEED_NOISE, "source": "default", "n_cells": n}
    return {"sigma": sigma, "source": "seeds", "n_cells": n}


def noised_optima(
    runs: pd.DataFrame, labels: np.ndarray, used: pd.DataFrame, counts, sigma, seed: int, k=1.0
) -> list[dict | None]:
    """The allocation exponents of every replicate (`frontier_exponents`, None where fewer than
    2 distinct budgets give a minimum): the losses plus sigma (nats; a scalar or one per run)
    times a standard normal, each used budget's minimum found again by the module's rule, the
    budgets drawn by counts (R, n_used)."""
    rng = np.random.default_rng([seed, 1])  # a stream of its own: the counts use `seed`
    x, loss = np.log(runs["N"].to_numpy(float)), runs["loss"].to_numpy(float)
    C = used["C"].to_numpy(float)
    members = [np.flatnonzero(labels == label) for label in used["label"]]
    reps = []
    for row in counts.astype(int):
        noised = loss + sigma * rng.standard_normal(loss.size)
        n_opt = np.array(
            [profile_optimum(x[m], noised[m], np.ones(m.size))["N_opt"] for m in members]
        )
        keep = np.repeat(np.arange(C.size), row)
        optima = pd.DataFrame({"C": C[keep], "N_opt": n_opt[keep]})
        reps.append(
            frontier_exponents(optima.assign(D_opt=optima["C"] / (6 * k * optima["N_opt"])))
        )
    return reps


def used_optima(optima: pd.DataFrame) -> pd.DataFrame:
    """The budgets the N_opt(C) law is fitted to: those whose minimum is interior."""
    return optima[optima["interior"].astype(bool)]


def isoflop_report(
    runs: pd.DataFrame,
    n_boot: int,
    seed: int,
    rtol: float = 0.1,
    k: float = 1.0,
    noise: float | np.ndarray | None = None,
) -> dict | None:
    """Approach 2, its interval from the noise-and-resample bootstrap (module docstring); None
    without data. `noise`: one run's seed spread in nats (a scalar, or one per row of `runs`);
    None: `seed_noise` of the profiles' runs.

    Only IsoFLOP profiles are used (`isoflop_profiles`: budgets grouped within each sweep, at
    least 3 distinct N, C within rtol); other runs are left to approaches 1 and 3. Runs that
    chain into budgets spanning more than rtol in C are no IsoFLOP design: `skipped` says so
    when they outnumber the runs of the profiles (a scatter, where a few runs meet within rtol by
    chance), `warning` when they do not.
    """
    scattered = scattered_groups(runs, rtol)
    profiles = isoflop_profiles(runs, rtol)
    if profiles is None and scattered.empty:
        return None
    if profiles is None or scattered["n_runs"].sum() >= len(profiles.runs):  # mostly a scatter
        return {"skipped": _not_a_design(scattered, rtol)}
    if noise is not None and np.ndim(noise):  # one per input run: keep the profiles' own
        noise = np.asarray(noise, dtype=float)[isoflop_groups(runs, rtol) >= 0]
    runs, labels = profiles.runs, profiles.labels
    optima = isoflop_optima(runs["N"], runs["C"], runs["loss"], labels, k=k)
    if profiles.sweeps is not None:  # several sweeps: say which one each profile comes from
        optima.insert(0, "sweep", [profiles.sweep(k) for k in profiles.ids])
    warning = {} if scattered.empty else {"warning": _not_a_design(scattered, rtol, some=True)}
    point = frontier_exponents(used_optima(optima))
    if point is None:  # profiles exist, but fewer than 2 have an interior minimum: say so
        why = (
            "fewer than two budgets have an interior minimum (lowest loss inside the "
            "measured sizes, parabola minimum inside the sizes fitted)"
        )
        section = {"per_budget": optima.to_dict(orient="records"), "n_boot": 0, **warning}
        return identification.with_reasons(section, {"a": why, "b": why})
    used = used_optima(optima.assign(label=profiles.ids))
    counts = resample_counts(len(used), n_boot, seed)
    if noise is None:
        sigma = seed_noise(runs, labels)
    else:
        sigma = {"sigma": noise if np.ndim(noise) else float(noise), "source": "given"}
    reps = noised_optima(runs, labels, used, counts, sigma["sigma"], seed, k)
    if np.ndim(sigma["sigma"]):  # fit.json holds one number: the median of the runs' own
        sigma = {**sigma, "sigma": float(np.median(sigma["sigma"]))}
    section = {
        **point,
        "per_budget": optima.to_dict(orient="records"),
        "n_boot": int(n_boot),
        "n_boot_converged": sum(rep is not None for rep in reps),
        "noise": sigma,
        "ci95": exponent_intervals(reps),
        **warning,
    }
    section = identification.clip_allocation(section)
    reasons = identification.allocation_exponents(section)
    if point["n_budgets"] == 2:  # every replicate draws the same line or none
        why = "only 2 budgets are used: a line through two points has no interval"
        reasons = {"a": why, "b": why}
    return identification.with_reasons(section, reasons)


def _not_a_design(scattered: pd.DataFrame, rtol: float, some: bool = False) -> str:
    span = float((scattered["C_max"] / scattered["C_min"]).max())
    n = int(scattered["n_runs"].sum())
    text = (
        f"{n} runs chain into {len(scattered)} budget group(s) whose compute spans more than "
        f"{100 * rtol:.0f}% (up to {span:.3g}x): not IsoFLOP profiles"
    )
    if some:
        return text + "; they are left out of approach 2"
    return f"the runs are not an IsoFLOP design: {text}"
