"""Is a fitted quantity identified by the runs? Reasons for every one that is not.

A fit always returns numbers; whether the data determine them is a separate question. Every
section of fit.json lists the names it cannot vouch for under `not_identified`, with the reason
under `why_not_identified`, and the report shows them as such instead of as a law. The rules:

- the estimate is not finite (the optimiser ran off to a boundary);
- it sits on a bound: E below E_ZERO_FRACTION of the lowest loss is E -> 0, i.e. the runs do
  not show the loss levelling off, and E cannot be told from a slower power law; so is an E
  whose interval reaches down there; the allocation built on such an E says so;
- an impossible asymptote: E at or above the lowest measured loss (within the runs' noise)
  is no floor of these runs, so nothing built on it (every quantity of the fit) is identified;
- an exponent outside PLAUSIBLE_EXPONENT (e.g. alpha = 34 fits a plateau, not a law);
- a scale parameter or derived quantity whose ingredients are not identified (A goes with
  alpha, B with beta, a and b and the allocation with both);
- no interval (fewer than 10 finite replicates) or an interval collapsed to the point;
- too few bootstrap refits converged (MIN_CONVERGED of them); a resample that drew fewer
  distinct runs than the law's free parameters never counts as converged.

Each rule returns `{name: reason}`; an empty dict means everything has a real interval.
"""

from __future__ import annotations

import numpy as np

from analysis.fits.bootstrap import distinct

PLAUSIBLE_EXPONENT = (0.0, 2.5)  # alpha, beta, gamma of a loss law; published ones are 0.05-0.8
E_ZERO_FRACTION = 1e-3  # E below this fraction of the lowest measured loss is "E -> 0"
ZERO_EFFECT = 1e-6  # an effect below this fraction of its interval's high end is "no effect"
MIN_CONVERGED = 0.8  # fraction of bootstrap refits that must converge
NOISE_CAP = 0.01  # a run's seed-to-seed spread is well under 1% in published sweeps
COLLAPSE_RTOL = 1e-9  # an interval narrower than this (relative) has collapsed to its point

E_ADVICE = (
    "more decades of compute, up to where the loss visibly levels off, would identify it; "
    "or fix it to a value you trust (--fix E=VALUE)"
)


def _interval(value: float, ci) -> str | None:
    """Reason the estimate or its interval is unusable, or None."""
    if value is None or not np.isfinite(value):
        return "the estimate is not finite (the fit ran off to a boundary)"
    if ci is None:
        return "no interval: fewer than 10 bootstrap replicates gave a finite value"
    lo, hi = ci
    if hi - lo <= COLLAPSE_RTOL * max(abs(value), 1e-300):
        return (
            "its interval collapsed to the point: every usable bootstrap replicate gives "
            "the same value (too few distinct points, or none could leave the estimate)"
        )
    return None


def effect_problem(name: str, value: float, ci) -> str | None:
    """Why an effect size that may be 0 (a law's `effects`) is not identified, or None: the
    estimate or the low end of its interval below ZERO_EFFECT of the interval's high end."""
    if ci is None or not np.isfinite(value) or ci[1] <= 0:
        return None
    if value < ZERO_EFFECT * ci[1]:
        return f"{name} = {value:.2g} sits on its lower bound 0: the data cannot tell it from none"
    if ci[0] < ZERO_EFFECT * ci[1]:
        return (
            f"its 95% interval [{ci[0]:.2g}, {ci[1]:.3g}] reaches down to 0: the data cannot "
            "tell it from none"
        )
    return None


def exponent_problem(name: str, value: float) -> str | None:
    """Why a finite exponent of a loss law is implausible, or None (nan is left to others)."""
    lo, hi = PLAUSIBLE_EXPONENT
    if np.isfinite(value) and not lo < value <= hi:
        return f"{name} = {value:.3g} is outside the plausible range ({lo:g}, {hi:g}]"
    return None


def irreducible(
    name: str, value: float, ci, loss_min: float, noise: float
) -> tuple[str | None, bool]:
    """Why an irreducible loss is not identified, or None; and whether the whole fit goes with
    it. At or above the lowest measured loss (within the runs' noise, `noise_of`) it is no
    asymptote: runs already went below it, so every quantity of the law is
    built on an impossible floor. Near 0, or with an interval reaching down to 0, the runs do not
    show the loss levelling off."""
    if value is None or not np.isfinite(value):
        return _interval(value, ci), False
    if value >= loss_min * np.exp(-noise):
        return (
            f"{name} = {value:.4g} is at or above the lowest measured loss {loss_min:.4g} "
            f"(within the runs' noise, {100 * noise:.2g}%): runs already went below this "
            "asymptote, so it is not one"
        ), True
    if value < E_ZERO_FRACTION * loss_min:
        return (
            f"{name} = {value:.2g} sits on its lower bound 0 (the runs do not show the "
            f"loss levelling off); {E_ADVICE}"
        ), False
    if ci is not None and ci[0] < E_ZERO_FRACTION * loss_min:
        return (
            f"its 95% interval [{ci[0]:.2g}, {ci[1]:.4g}] reaches down to 0: the runs cannot "
            f"tell it from no floor at all; {E_ADVICE}"
        ), False
    return _interval(value, ci), False


def built_on(name: str, why: str, point: dict, fixed: dict) -> dict[str, str]:
    """Every quantity of a fit whose irreducible loss is no asymptote (`irreducible`)."""
    rest = f"it is built on {name}, which is at or above the lowest measured loss"
    return {k: (why if k == name else rest) for k in point if k not in fixed}


def allocation_on(name: str, reasons: dict, point: dict) -> dict[str, str]:
    """The allocation quantities (`q@C`) not yet flagged, when the irreducible loss is not."""
    if name not in reasons:
        return {}
    why = f"it is built on {name}, which is not identified"
    return {k: why for k in point if "@" in k and k not in reasons}


def noise_of(loss, predicted) -> float:
    """The runs' relative scatter about a fit: the median |log residual|, at most NOISE_CAP
    (beyond that the residuals measure the form's misfit, not the noise of a run)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(np.asarray(loss, dtype=float) / np.asarray(predicted, dtype=float))
    r = r[np.isfinite(r)]
    return float(min(np.median(np.abs(r)), NOISE_CAP)) if r.size else 0.0


def law_reasons(
    law,
    point: dict,
    ci: dict,
    converged: np.ndarray,
    loss_min: float,
    fixed: dict | None = None,
    noise: float = 0.0,
    counts: np.ndarray | None = None,
) -> dict[str, str]:
    """Every quantity of a fitted law (`analysis.fits.laws.base.Law`): its parameters, then derived
    ones (a, b, `name@C` allocations). In order: too few converged refits; an irreducible loss
    at or above the lowest measured loss (within `noise`, the runs' `noise_of`: then nothing
    of the fit is identified); the irreducible loss on its bound or with an interval reaching
    0, implausible exponents and unusable intervals; scales that trade off against an
    unidentified exponent; derived quantities built from an unidentified exponent (or other
    shape parameter), and allocations from an unidentified scale or irreducible loss.
    `counts` (R, n), the resamples refitted: the reason for too few converged refits then says
    how many resamples drew at least one distinct run per free parameter (fewer never count as
    converged, `analysis.fits.laws.base.bootstrap`)."""
    fixed = fixed or {}
    n_ok, n_all = int(np.sum(converged)), int(np.size(converged))
    if n_all and n_ok < MIN_CONVERGED * n_all:
        failed = f"only {n_ok} of {n_all} bootstrap refits converged"
        if counts is not None:
            n_free = law.n_params - len(fixed)
            enough = int(np.sum(distinct(counts) >= n_free))
            failed += (
                f"; {enough} of {n_all} resamples drew at least {n_free} distinct runs, one per "
                f"free parameter (of {np.shape(counts)[1]} runs; a resample with fewer has "
                "infinitely many exact fits and counts as failed)"
            )
        return {k: failed for k in point if k not in fixed}
    reasons: dict[str, str] = {}
    for name in law.params:
        if name in fixed or name in law.tradeoffs:
            continue
        why, value = _interval(point[name], ci.get(name)), point[name]
        if name == law.irreducible:
            why, whole = irreducible(name, value, ci.get(name), loss_min, noise)
            if whole:
                return built_on(name, why, point, fixed)
        elif name in law.exponents:
            shown = f"{'-' if law.exponents[name] < 0 else ''}{name}"
            why = exponent_problem(shown, law.exponents[name] * value) or why
        elif name in law.effects:
            why = why or effect_problem(name, value, ci.get(name))
        if why:
            reasons[name] = why
    for scale, exponent in law.tradeoffs.items():
        if scale in fixed:
            continue
        why = _interval(point[scale], ci.get(scale))
        if exponent in reasons:
            why = f"it trades off against {exponent}, which is not identified"
        if why:
            reasons[scale] = why
    shapes = [
        k for k in law.params if k in reasons and k not in law.tradeoffs and k != law.irreducible
    ]
    for name in [k for k in point if k not in law.params]:
        why = _interval(point[name], ci.get(name))
        if shapes:
            why = f"it depends on {' and '.join(shapes)}, not identified"
        elif "@" in name and any(k in reasons for k in law.tradeoffs):
            why = f"it depends on {' and '.join(law.tradeoffs)}, not identified"
        if why:
            reasons[name] = why
    return {**reasons, **allocation_on(law.irreducible, reasons, point)}


def power_law(section: dict, y_min: float, exponent: str = "alpha") -> dict[str, str]:
    """A single-variable law y = E + A x^-alpha (E only when fitted)."""
    reasons: dict[str, str] = {}
    ci = section.get("ci95", {})
    why = exponent_problem(exponent, section[exponent]) or _interval(
        section[exponent], ci.get(exponent)
    )
    if why:
        reasons[exponent] = why
    if section.get("irreducible"):
        E = section["E"]
        why = _interval(E, ci.get("E"))
        if np.isfinite(E) and E < E_ZERO_FRACTION * y_min:
            why = f"E = {E:.2g} sits on its lower bound 0; {E_ADVICE.split('; or')[0]}"
        if why:
            reasons["E"] = why
    why = _interval(section["A"], ci.get("A"))
    if exponent in reasons:
        why = f"it trades off against {exponent}, which is not identified"
    if why:
        reasons["A"] = why
    return reasons


def allocation_exponents(section: dict) -> dict[str, str]:
    """Approaches 1 and 2: N_opt ~ C^a, D_opt ~ C^b (a + b = 1 under C = 6ND)."""
    reasons: dict[str, str] = {}
    ci = section.get("ci95", {})
    n_all, n_ok = section.get("n_boot", 0), section.get("n_boot_converged")
    if n_all and n_ok is not None and n_ok < MIN_CONVERGED * n_all:
        noise = section.get("noise", {}).get("sigma")
        how = "resampled" if noise is None else f"resampled, {noise:.2g} nats of seed noise added"
        why = (
            f"only {n_ok} of {n_all} bootstrap replicates gave a line: in the others fewer than "
            f"2 distinct budgets kept a usable optimum ({how}), and N_opt = k C^a has 2 "
            "parameters"
        )
        return {"a": why, "b": why}
    out_of_range = range_problems(section)
    for name in ("a", "b"):
        why = _interval(section[name], ci.get(name))
        if np.isfinite(section[name]) and not 0.0 <= section[name] <= 1.0:
            why = (
                f"{name} = {section[name]:.3g} is outside [0, 1] (N_opt or D_opt would shrink "
                "as compute grows)"
            )
        why = why or out_of_range.get(name)
        if why:
            reasons[name] = why
    return reasons


ALLOCATION_RANGE = (0.0, 1.0)  # a and b of N_opt ~ C^a, D_opt ~ C^b: a + b = 1, both >= 0
CLIP_ATOL = 1e-9  # a reach this small outside the range is float rounding: cut without a note


def clip_allocation(section: dict) -> dict:
    """The section with the 95% intervals of a and b cut to ALLOCATION_RANGE.

    a > 1 would make D_opt shrink as compute grows (b < 0), and a < 0 N_opt; bootstrap
    replicates of a frontier through few budgets reach there. The interval's intersection with
    the range is still a 95% interval (a true value lies inside the range), so it is shown cut,
    and how far the replicates reached is kept under `ci95_unclipped` for `clip_note`: an
    interval cut at 1 says the runs bound a from below only."""
    ci = dict(section.get("ci95", {}))
    raw = {}
    lo_ok, hi_ok = ALLOCATION_RANGE
    for name in ("a", "b"):
        if not ci.get(name):
            continue
        lo, hi = ci[name]
        cut = [max(lo, lo_ok), min(hi, hi_ok)]
        if cut[0] > cut[1]:  # wholly outside: nothing to cut to (`range_problems` says so)
            continue
        if cut != [lo, hi]:
            ci[name] = cut
            if lo < lo_ok - CLIP_ATOL or hi > hi_ok + CLIP_ATOL:
                raw[name] = [lo, hi]
    out = {**section, "ci95": ci}
    if raw:
        out["ci95_unclipped"] = raw
    return out


def range_problems(section: dict) -> dict[str, str]:
    """a and b whose bootstrap interval lies wholly outside ALLOCATION_RANGE, or reached past
    both of its ends (cut, it would be the whole range: the runs do not determine it)."""
    lo_ok, hi_ok = ALLOCATION_RANGE
    out = {}
    for name in ("a", "b"):
        shown = section.get("ci95", {}).get(name)
        raw = section.get("ci95_unclipped", {}).get(name) or shown
        if not raw:
            continue
        lo, hi = raw
        if hi < lo_ok or lo > hi_ok:
            out[name] = f"its 95% interval [{lo:.3g}, {hi:.3g}] lies outside [{lo_ok:g}, {hi_ok:g}]"
        elif lo < lo_ok - CLIP_ATOL and hi > hi_ok + CLIP_ATOL:
            out[name] = (
                f"its bootstrap replicates reach from {lo:.3g} to {hi:.3g}, past both ends "
                f"of [{lo_ok:g}, {hi_ok:g}]: these runs do not determine it"
            )
    return out


def clip_note(section: dict, name: str, spec: str = ".3g", inside: bool = False) -> str:
    """' (bootstrap reached 2.1, cut at 1)' where `clip_allocation` cut the interval of `name`
    (only a and b ever are), else '';
    `inside`: '; bootstrap reached 2.1, cut at 1', for a sentence already in parentheses."""
    raw = section.get("ci95_unclipped", {}).get(name)
    if not raw:
        return ""
    lo_ok, hi_ok = ALLOCATION_RANGE
    reach = [
        f"{v:{spec}}" for v, out in ((raw[0], raw[0] < lo_ok), (raw[1], raw[1] > hi_ok)) if out
    ]
    bounds = [f"{b:g}" for b, out in ((lo_ok, raw[0] < lo_ok), (hi_ok, raw[1] > hi_ok)) if out]
    text = f"bootstrap reached {' and '.join(reach)}, cut at {' and '.join(bounds)}"
    return f"; {text}" if inside else f" ({text})"


def with_reasons(section: dict, reasons: dict[str, str]) -> dict:
    """The section with `not_identified` (names) and `why_not_identified` (name: reason)."""
    return {**section, "not_identified": list(reasons), "why_not_identified": reasons}


MIN_RULE_SIZES = 3  # a power law in N through 2 sizes has no spare point to check it
MAX_RULE_EXPONENT_WIDTH = 1.0  # wider: the arms cannot say whether lr falls as N^-0.3 or N^-1.3


def lr_rule(section: dict, n_sizes: int) -> dict[str, str]:
    """A hyperparameter scaling rule y = scale * x^exponent fitted over tuned arms: too few
    distinct x, or an exponent interval that is missing, collapsed or too wide to use."""
    names = ("scale", "exponent")
    if n_sizes < MIN_RULE_SIZES:
        why = (
            f"fitted from {section['n_arms']} arm(s) at {n_sizes} distinct "
            f"{section['variable']}; a rule needs tuned optima at {MIN_RULE_SIZES} or more"
        )
        return {k: why for k in names}
    reasons: dict[str, str] = {}
    ci = section.get("ci95", {})
    why = _interval(section["exponent"], ci.get("exponent"))
    if why is None and ci["exponent"][1] - ci["exponent"][0] > MAX_RULE_EXPONENT_WIDTH:
        lo, hi = ci["exponent"]
        why = (
            f"its 95% interval [{lo:.3g}, {hi:.3g}] is wider than {MAX_RULE_EXPONENT_WIDTH:g}: "
            "the tuned optima do not say how the value scales"
        )
    if why:
        reasons["exponent"] = why
    why = _interval(section["scale"], ci.get("scale"))
    if "exponent" in reasons:
        why = "it trades off against exponent, which is not identified"
    if why:
        reasons["scale"] = why
    return reasons


def compute_rule(values: dict[str, list[float]]) -> dict[str, str]:
    """A one-variable law in C = 6 N D (DeepSeek's form) over tuned optima: C must vary through
    both of its ingredients. With every optimum at one D, C varies only through N, so the "law
    in C" is the N-trend at that D and a sweep applying it at other D extrapolates a trend that
    was never measured (and likewise at one N). `values`: the optima's N and D. Names: 'scale',
    'exponent'."""
    single = {v: float(x[0]) for v, x in values.items() if len(set(x)) == 1}
    if not single:
        return {}
    if len(single) == len(values):
        where = " and ".join(f"one {v} ({x:.3g})" for v, x in single.items())
        why = f"every optimum at {where}: C does not vary"
    else:
        (fixed, at), moving = next(iter(single.items())), next(v for v in values if v not in single)
        why = (
            f"every optimum at one {fixed} ({fixed} = {at:.3g}); C varies only through "
            f"{moving}, so a law in C is the {moving}-trend at that {fixed}; optima at 2 or "
            f"more distinct {fixed} would identify it"
        )
    return {"scale": why, "exponent": why}


MAX_VARIABLE_CORRELATION = 0.95  # |corr(log N, log D)| above this: the exponents trade off


def plane_rule(section: dict, distinct: dict[str, int], correlation: float) -> dict[str, str]:
    """A rule y = scale * N^a * D^b over tuned cells (Step Law's form): too few cells for three
    parameters and a spare pair, a variable with one value, N and D moving together in log
    space, or an exponent interval that is missing, collapsed or wider than
    MAX_RULE_EXPONENT_WIDTH. Names: 'scale' and each variable."""
    names = ["scale", *section["exponents"]]
    n = section["n_cells"]
    why = None
    if n < len(names) + 2:
        why = f"fitted from {n} cell(s); {len(names)} parameters need {len(names) + 2} or more"
    elif min(distinct.values()) < 2:
        flat = [v for v, k in distinct.items() if k < 2]
        why = f"one value of {', '.join(flat)} among the cells: its exponent is not measured"
    elif not abs(correlation) <= MAX_VARIABLE_CORRELATION:
        why = (
            f"log N and log D move together across the cells (correlation {correlation:.3f}): "
            "their exponents trade off; cells at other N for the same D would separate them"
        )
    if why:
        return {k: why for k in names}
    reasons: dict[str, str] = {}
    ci = section.get("ci95", {})
    for v in section["exponents"]:
        why = _interval(section["exponents"][v], ci.get(v))
        if why is None and ci[v][1] - ci[v][0] > MAX_RULE_EXPONENT_WIDTH:
            why = (
                f"its 95% interval [{ci[v][0]:.3g}, {ci[v][1]:.3g}] is wider than "
                f"{MAX_RULE_EXPONENT_WIDTH:g}: the tuned optima do not say how it scales in {v}"
            )
        if why:
            reasons[v] = why
    why = _interval(section["scale"], ci.get("scale"))
    if reasons:
        why = "it trades off against the exponents, which are not all identified"
    if why:
        reasons["scale"] = why
    return reasons
