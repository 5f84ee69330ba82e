"""What a sweep's plan can decide, before anything trains: the report's rules applied to the
planned cells alone (the dry run's block after the plan table).

The report (`analysis.report`) decides from finished runs; several of its rules need only the
design, so a plan that cannot give a verdict can be told so, with what to add:

- matched cells (`analysis.verdicts.matched`): a variant and the baseline at the same nominal
  size (`model.size`, else the k-th smallest N) and token budget (D within BUDGET_RTOL) give
  a cell-by-cell verdict; without one there is none.
- multipliers at measured budgets (`analysis.verdicts.ablation`): a variant's budget C that lies
  within the baseline's measured compute can get a measured multiplier (when its cell is on
  both frontiers, which only the losses say); extrapolated multipliers need each arm's
  frontier law, which needs MIN_LAW_POINTS budgets C.
- seed noise (`analysis.verdicts.noise`): measured where MIN_SEEDED_CELLS or more cells have 2+
  seeds, else every verdict uses DEFAULT_NOISE.
- L(N, D), Chinchilla's approach 3 (`analysis.data.load.check_fittable`,
  `analysis.fits.identification`): 2+ distinct N and D and more runs than its 5 parameters;
  identified only where MIN_CONVERGED of the bootstrap resamples draw 5 distinct runs (a
  resample with fewer never converges), which `min_runs` turns into a number of runs.
- IsoFLOP profiles, approach 2 (`analysis.fits.isoflop`): a budget with MIN_PROFILE_SIZES sizes
  is a profile; the allocation exponents need 2 budgets whose optimum lies inside their sizes.

sweeps may not import analysis (analysis never imports training, which sweeps does), so the
thresholds are restated here; tests/test_sweep_decide.py checks they equal analysis's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sweeps.points import SEED_KEY, SIZE_KEY, TOKENS_KEY, PlannedRun

BUDGET_RTOL = 0.1  # analysis.fits.isoflop.budget_groups: budgets within 10% are one budget
MIN_SEEDED_CELLS = 3  # analysis.verdicts.noise: fewer seeded cells, the default noise scale
DEFAULT_NOISE = 0.059  # analysis.verdicts.noise.DEFAULT_NOISE (nats)
MIN_LAW_POINTS = 3  # analysis.verdicts.ablation: frontier points a frontier law needs
PARAMETRIC_PARAMS = 5  # analysis.data.load: E, A, B, alpha, beta of approach 3
MIN_CONVERGED = 0.8  # analysis.fits.identification: share of bootstrap refits that must converge
MIN_PROFILE_SIZES = 3  # analysis.fits.isoflop: distinct N an IsoFLOP profile needs
LLAMA = "pre-rmsnorm-rope-gqa2-swiglu"  # analysis.report.analyse.LLAMA: the default baseline


@dataclass(frozen=True)
class Cell:
    """One (arm, size, token budget) of the plan as the report will see it: its seeds."""

    arm: str
    size: float  # model.size where every point sets it, else N
    n: float  # non-embedding N (a MoE's active count)
    d: float
    c: float  # 6 N D
    seeds: int  # distinct seeds (sweep.seeds, or a train.seed axis)
    runs: int  # every run of the cell (another swept key, e.g. train.lr, adds runs too)


def groups(values: Sequence[float], rtol: float = BUDGET_RTOL) -> list[int]:
    """Labels of `values`, sorted values within `rtol` of their neighbour sharing one (as
    `analysis.fits.isoflop.budget_groups` labels budgets)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    labels, label = [0] * len(values), 0
    for prev, i in zip([None, *order], order):
        if prev is not None and math.log(values[i]) - math.log(values[prev]) > math.log1p(rtol):
            label += 1
        labels[i] = label
    return labels


def min_runs(params: int = PARAMETRIC_PARAMS, share: float = MIN_CONVERGED) -> int:
    """The fewest runs n for which `share` of bootstrap resamples (n draws with replacement)
    draw at least `params` distinct runs: 8 for approach 3's 5 parameters at 80%."""
    n = params
    while _p_distinct_at_least(n, params) < share:
        n += 1
    return n


def _p_distinct_at_least(n: int, k: int) -> float:
    """P(n draws with replacement from n runs hit at least k distinct ones), exactly."""
    p = [1.0] + [0.0] * n  # p[j]: j distinct after the draws so far
    for _ in range(n):
        p = [(p[j] * j + (p[j - 1] * (n - j + 1) if j else 0.0)) / n for j in range(n + 1)]
    return sum(p[k:])


def plan_cells(
    runs: Sequence[PlannedRun], arm_of: Callable[[PlannedRun], str], seeds: int = 1
) -> list[Cell]:
    """The cells the finished plan gives the report: every point that runs (or ran before),
    grouped by arm, size and D; `seeds` multiplies a tuned plan's arms (each final cell trains
    seeds 0..S-1), an untuned plan's seed points count themselves."""
    kept = [r for r in runs if r.facts and (not r.skip or r.skip.startswith("done:"))]
    sized = all(_size(r) is not None for r in kept)
    found: dict[tuple, list[PlannedRun]] = {}
    for r in kept:
        size = _size(r) if sized else float(r.n)
        found.setdefault((arm_of(r), size, r.d), []).append(r)
    return [
        Cell(
            arm,
            size,
            float(rs[0].n),
            d,
            rs[0].c,
            len({_seed(r) for r in rs}) * seeds,
            len({r.run_key for r in rs}) * seeds,
        )
        for (arm, size, d), rs in found.items()
    ]


def _override(run: PlannedRun, key: str) -> str | None:
    found = [o.split("=", 1)[1] for o in run.overrides if o.split("=", 1)[0] == key]
    return found[-1] if found else None


def _size(run: PlannedRun) -> float | None:
    size = _override(run, SIZE_KEY)
    return None if size is None else float(size)


def _seed(run: PlannedRun) -> str:
    return _override(run, SEED_KEY) or str(run.seed)


def _tokens_hint(cells: Sequence[Cell]) -> str:
    ds = sorted({c.d for c in cells})
    more = [*ds, 3 * ds[-1]]
    return f"e.g. {TOKENS_KEY}: [{', '.join(_short(d) for d in more)}]"


def _sizes_hint(cells: Sequence[Cell]) -> str:
    sizes = sorted({c.size for c in cells})
    more = [*sizes, 3 * sizes[-1]]
    return f"e.g. {SIZE_KEY}: [{', '.join(_short(s) for s in more)}]"


def comparison_lines(cells: Sequence[Cell], baseline: str, steps: int | None) -> list[str]:
    """Matched cells and multipliers at measured budgets per variant (variants that read the
    same share a line), the one-token-budget caveat, and each arm's frontier law.
    `steps`: the optimizer steps of the largest cell when every cell has one token budget."""
    d_group = dict(zip(cells, groups([c.d for c in cells])))
    c_group = dict(zip(cells, groups([c.c for c in cells])))
    base = [c for c in cells if c.arm == baseline]
    base_keys = {(d_group[c], c.size) for c in base}
    lo, hi = min(c.c for c in base) / (1 + BUDGET_RTOL), max(c.c for c in base) * (1 + BUDGET_RTOL)
    said: dict[tuple[int, int], list[str]] = {}
    for arm in dict.fromkeys(c.arm for c in cells if c.arm != baseline):
        mine = [c for c in cells if c.arm == arm]
        k = len({(d_group[c], c.size) for c in mine} & base_keys)
        inside = len({c_group[c] for c in mine if lo <= c.c <= hi})
        said.setdefault((k, inside), []).append(arm)
    lines = []
    for (k, inside), arms in said.items():
        each = " each" if len(arms) > 1 else ""
        verdict = (
            "a cell-by-cell verdict"
            if k
            else f"no cell-by-cell verdict: train at {baseline}'s sizes and budgets"
        )
        lines.append(
            f"{', '.join(arms)} vs {baseline}: {k} matched (size, budget) cells{each} -> "
            f"{verdict}; multipliers at up to {inside} budgets C (where a cell is on both "
            "frontiers)"
        )
    if steps is not None:
        lines.append(
            f"1 token budget: C grows only with N, so a size that does not beat the smaller "
            f"ones at this D ({steps} steps) leaves the frontier, and its "
            f"multiplier with it; add token budgets ({_tokens_hint(cells)})"
        )
    for arm in dict.fromkeys(c.arm for c in cells):
        n_c = len({c_group[c] for c in cells if c.arm == arm})
        if n_c < MIN_LAW_POINTS:
            lines.append(
                f"frontier law of {arm}: {_n(n_c, 'budget')} C -> none (needs "
                f"{MIN_LAW_POINTS}): no extrapolated multipliers, and none for a cell beyond "
                "the baseline's compute; add sizes or token budgets"
            )
    return lines


def _n(k: int, noun: str) -> str:
    """'1 budget', '3 budgets'."""
    return f"{k} {noun}" if k == 1 else f"{k} {noun}s"


def _short(x: float) -> str:
    """A value as a sweep file writes it: 1e6, 3e5, 2.5e5."""
    mantissa, _, exponent = f"{x:.2g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def noise_line(cells: Sequence[Cell]) -> str:
    """Where the verdicts' seed noise comes from."""
    seeded = [c for c in cells if c.seeds > 1]
    if len(seeded) >= MIN_SEEDED_CELLS:
        s = min(c.seeds for c in seeded)
        return (
            f"seed noise: {s}+ seeds in {len(seeded)} cells -> measured by these runs "
            f"(needs {MIN_SEEDED_CELLS} cells with 2+ seeds)"
        )
    most = max(c.seeds for c in cells)
    return (
        f"seed noise: {_n(most, 'seed')} per cell, {len(seeded)} cells with 2+ -> the report "
        f"uses the project's default spread {DEFAULT_NOISE} nats, not one these runs "
        f"measure; add seeds: 2 (or 2+ seeds in {MIN_SEEDED_CELLS} cells)"
    )


def law_line(cells: Sequence[Cell], arm: str, ablation: bool) -> str:
    """L(N, D) of `arm` by approach 3: fitted, not fitted, or not identified, and why."""
    mine = [c for c in cells if c.arm == arm]
    n_sizes, n_d = len({c.n for c in mine}), len({c.d for c in mine})
    runs = sum(c.runs for c in mine)
    need = min_runs()
    head = (
        f"L(N, D) of {arm} (Chinchilla approach 3, {PARAMETRIC_PARAMS} parameters): "
        f"{_n(n_sizes, 'size')} x {_n(n_d, 'token budget')}, {runs} runs -> "
    )
    if n_sizes < 2 or n_d < 2:
        add = _tokens_hint(mine) if n_d < 2 else _sizes_hint(mine)
        what = "multipliers only" if ablation else "the report refuses it"
        return f"{head}not fitted ({what}): needs 2+ sizes and 2+ token budgets; add ({add})"
    if runs <= PARAMETRIC_PARAMS:
        what = "multipliers only" if ablation else "the report refuses it"
        return f"{head}not fitted ({what}): needs {PARAMETRIC_PARAMS + 1}+ runs; add cells or seeds"
    if runs < need:
        return (
            f"{head}not identified: with under {need} runs, under {MIN_CONVERGED:.0%} of "
            f"bootstrap resamples draw the {PARAMETRIC_PARAMS} distinct runs a refit needs; "
            "add cells or seeds"
        )
    return f"{head}fitted (identified where its intervals say so)"


def isoflop_line(runs: Sequence[PlannedRun], arm_of: Callable, arm: str) -> str | None:
    """Approach 2 of `arm`: the planned budgets with enough sizes to be IsoFLOP profiles."""
    sizes: dict[float, set] = {}
    for r in runs:
        if r.budget is not None and arm_of(r) == arm and r.facts and not _cannot_run(r):
            sizes.setdefault(r.budget, set()).add(r.n)
    if not sizes:
        return None
    profiles = sum(len(s) >= MIN_PROFILE_SIZES for s in sizes.values())
    head = (
        f"IsoFLOP profiles of {arm} (approach 2): {profiles} of {len(sizes)} budgets have "
        f"{MIN_PROFILE_SIZES}+ sizes -> "
    )
    if profiles < 2:
        return f"{head}no allocation exponents (need 2 such budgets); add sizes or budgets"
    return f"{head}N_opt(C) where a budget's best size is not at its edge; a, b from 2+"


def _cannot_run(run: PlannedRun) -> bool:
    return bool(run.skip) and not run.skip.startswith("done:")


def baseline_of(arms: Sequence[str], report_args: Sequence[str], arch_of: dict[str, str]) -> str:
    """The arm the report compares against: `--baseline` of sweep.report.args (a variant, or an
    architecture when arms are blocks), else `base`, else the llama block, else the first."""
    args = [str(a) for a in report_args]
    wanted = args[args.index("--baseline") + 1] if "--baseline" in args[:-1] else None
    for name in (wanted, "base"):
        for arm in arms:
            if name is not None and name in (arm, arch_of.get(arm)):
                return arm
    return next((a for a in arms if arch_of.get(a) == LLAMA), arms[0])


def lines(
    runs: Sequence[PlannedRun],
    *,
    variants: Sequence[str],
    block_of: Callable[[PlannedRun], str],
    report_args: Sequence[str] = (),
    seeds: int = 1,
) -> list[str]:
    """The block's lines for a plan's `runs` (a tuned plan: its arms' runs, `seeds` each).
    Arms are the sweep's variants when it names several, else its blocks (`model=` presets)."""
    by_variant = len(variants) > 1
    arm_of = (lambda r: r.variant) if by_variant else block_of
    cells = plan_cells(runs, arm_of, seeds)
    if not cells:
        return []
    arms = list(dict.fromkeys(c.arm for c in cells))
    arch_of = {arm_of(r): r.facts.arch for r in runs if r.facts}
    baseline = baseline_of(arms, report_args, arch_of)
    out = ["what this plan can decide (the report's rules; nothing trained yet):"]
    if len(arms) > 1:
        one_d = len({c.d for c in cells}) == 1
        steps = max(r.d // r.facts.batch_tokens for r in runs if r.facts) if one_d else None
        out += comparison_lines(cells, baseline, int(steps) if one_d else None)
    out.append(noise_line(cells))
    out.append(law_line(cells, baseline, ablation=len(arms) > 1))
    if line := isoflop_line(runs, arm_of, baseline):
        out.append(line)
    return out
