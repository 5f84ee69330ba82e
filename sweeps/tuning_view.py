"""What a tuning plan will cost, for the dry run and the progress bar: `stage_estimates` (the
seconds of every run, stage by stage), `print_tuning` (the dry run's tuning table and totals)
and `early_rungs` (the warning when halving ranks candidates too soon after warmup). The plan
itself is `sweeps.tuning`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rich import box
from rich.table import Table

from models.values import format_duration
from sweeps import plan
from sweeps.plan import PlannedRun
from sweeps.sweep_view import WIDE, console
from sweeps.tuning import TuningPlan


def stage_estimates(tp: TuningPlan) -> list[list[float]]:
    """Estimated seconds of every run, stage by stage, if every candidate finishes (the plan
    waits for a stage before ranking it, so stages do not overlap)."""
    stages: dict[int, list[float]] = {}
    for arm in tp.arms:
        f = arm.run.facts.flops_per_token

        def est(tokens: float, f: float = f) -> float:
            return f * tokens / tp.flops_per_sec + tp.overhead_s

        if not arm.tuned:
            stages.setdefault(10**6, []).extend([est(arm.tokens)] * tp.seeds)  # after every choice
            continue
        n = len(arm.candidates)
        if not tp.spec.halving:
            stages.setdefault(0, []).extend([est(arm.tokens)] * n)
            stages.setdefault(1, []).extend([est(arm.tokens)] * (tp.seeds - 1))
            continue
        alive, prev = n, 0
        for k, rung in enumerate(arm.rungs):
            stages.setdefault(k, []).extend([est(rung - prev)] * alive)
            alive = 1 if k == len(arm.rungs) - 1 else math.ceil(alive / 2)
            prev = rung
        stages.setdefault(len(arm.rungs), []).extend([est(arm.tokens - prev)] * tp.finalists)
        stages[len(arm.rungs)] += [est(arm.tokens)] * (tp.seeds - 1)  # with the winner's decay
    return [stages[k] for k in sorted(stages)]


def _packed(seconds: list[float], jobs: int) -> float:
    slots = [0.0] * max(1, jobs)
    for s in sorted(seconds, reverse=True):
        slots[slots.index(min(slots))] += s
    return max(slots)


def print_tuning(tp: TuningPlan, jobs: int, block_of: Callable[[PlannedRun], str]) -> None:
    """The dry run's tuning table: per arm its block (model preset, variant), role,
    candidates, rungs, runs and compute against the untuned run and the full grid; then the
    sweep's totals. Below WIDE columns: arms by number, without id and arch, one C column."""
    spec = tp.spec
    wide = console(wide=True).width >= WIDE
    how = "successive halving" if spec.halving else "full grid"
    if spec.curve and spec.curve.rule == "staged":
        how = (
            f"staged curve law: rungs t, 2t, 4t, at most {spec.curve.runs:g} runs per arm, "
            "fewer where the prefixes separate early"
        )
    elif spec.curve:
        how = f"curve law from a prefix, {spec.curve.runs:g} runs per arm"
    title = (
        f"tuning ({how}, tune_at {spec.at}): {len(spec.candidates)} candidates of "
        f"{', '.join(spec.grid)}; decay {spec.decay:g}"
    )
    if tp.seeds > 1:
        title += (
            f"; each arm's result at seeds 0..{tp.seeds - 1} (seed 0 the tuned run, the others "
            "full runs of its values; candidates at seed 0)"
        )
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    if wide:
        cols = ["#", "arm", "block", "arch", "N", "D", "role", "rungs (tokens)", "runs"]
        cols += ["C tuned", "C full grid", "C untuned", "tuned/untuned"]
    else:  # 80 columns: no arm id or arch (the plan lists them), one compute column
        cols = ["#", "block", "N", "D", "role", "rungs", "runs", "C tuned", "/untuned"]
    for col in cols:
        left = col in ("arm", "block", "arch", "role", "rungs", "rungs (tokens)")
        t.add_column(col, justify="left" if left else "right", no_wrap=col != "rungs")
    tot = [0.0, 0.0, 0.0, 0]
    for i, arm in enumerate(tp.arms):
        spent, grid, untuned, runs = tp.cost(arm)
        tot = [tot[0] + spent, tot[1] + grid, tot[2] + untuned, tot[3] + runs]
        role = "tuned" if arm.tuned else f"from #{arm.tuned_at}"
        if wide and not arm.tuned:  # the arm id column is there: name the source by it
            role = f"transfer from {tp.arms[arm.tuned_at].id[:8]}"
        rungs = " ".join(plan.format_count(r) for r in arm.rungs) if arm.tuned else ""
        n, d = plan.format_count(arm.run.n), plan.format_count(arm.tokens)
        ratio = f"{spent / untuned:.2f}x"
        if wide:
            arch = arm.run.facts.arch if arm.run.facts else ""
            row = [str(i), arm.id, block_of(arm.run), arch, n, d, role, rungs, str(runs)]
            row += [f"{spent:.2e}", f"{grid:.2e}", f"{untuned:.2e}", ratio]
        else:
            row = [str(i), block_of(arm.run), n, d, role, rungs, str(runs)]
            row += [f"{spent:.1e}".replace("e+", "e"), ratio]
        t.add_row(*row)
    out = console(wide=True)
    out.print(t)
    wall = sum(_packed(s, jobs) for s in stage_estimates(tp))
    tuned_arms = [a for a in tp.arms if a.tuned]
    # runs' compute per tuned arm at seed 0 (the other seeds of its result are plain runs)
    per_arm = sum(
        tp.cost(a)[0] / (tp.cost(a)[2] / tp.seeds) - (tp.seeds - 1) for a in tuned_arms
    ) / max(1, len(tuned_arms))
    out.print(
        f"tuned sweep: {tot[3]} runs at most, {tot[0]:.3g} FLOPs (exact), estimated wall time "
        f"{format_duration(wall)} with sweep.jobs={jobs} (stages wait for each other); "
        f"a tuned arm costs {per_arm:.2f} runs for {len(spec.candidates)} candidates"
        + (f", then {tp.seeds - 1} more seed(s) of its result" if tp.seeds > 1 else "")
    )
    out.print(
        f"against: the untuned sweep {tot[2]:.3g} FLOPs (tuned = {tot[0] / tot[2]:.2f}x), the "
        f"full grid at every arm {tot[1]:.3g} FLOPs (tuned = {tot[0] / tot[1]:.2f}x of it)"
    )
    warning = early_rungs(tp)
    if warning:
        out.print(warning)


# Fewer steps than this between a candidate's warmup and the first rung, and halving ranks
# lrs on their early progress, where a higher lr looks better (the short-horizon bias; Wu et al.
# 2018; measured in results/ref_ladder_tuned and results/demo/halving_check.md).
EARLY_RUNG_STEPS = 100


def early_rungs(tp: TuningPlan) -> str | None:
    """One warning line when tuned arms rank their candidates within EARLY_RUNG_STEPS steps
    after the longest warmup (halving only); None when every first rung is later."""
    early = []
    for arm in tp.arms:
        if not (tp.spec.halving and not tp.spec.curve and arm.tuned and arm.rungs):
            continue
        # the largest batch takes the fewest steps to a rung (a tuned train.batch_tokens)
        after = min(arm.rungs[0] // c.batch_tokens - c.warmup_steps for c in arm.candidates)
        if after < EARLY_RUNG_STEPS:
            early.append((after, arm))
    if not early:
        return None
    after, arm = min(early, key=lambda e: e[0])
    return (
        f"warning: {len(early)} of {sum(a.tuned for a in tp.arms)} tuned arms rank their "
        f"candidates fewer than {EARLY_RUNG_STEPS} steps after the longest warmup (fewest: arm "
        f"{arm.id}, {after} steps): lrs compared this early favour the highest (short-horizon "
        "bias); later sweep.tune_halving.rungs, longer budgets or tune_halving: false choose better"
    )
