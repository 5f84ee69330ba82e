"""What a sweep shows a person: the plan table (dry run), a progress bar, the summary table.

Progress is read from MLflow (the children of the sweep's parent run), not from the launcher, so
it is the same for local processes and SLURM jobs: a point counts as done when its run reaches
FINISHED or FAILED. The bar advances by each point's estimated seconds, so the ETA weighs a big
model more than a small one.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TimeRemainingColumn
from rich.table import Table

from models.values import format_duration
from sweeps import plan
from sweeps.sweep_records import children_by_key

TERMINAL = ("FINISHED", "FAILED")


def console() -> Console:
    # not a terminal (logs, CI): a wide fixed width instead of 80 columns that cut the table
    return Console() if sys.stdout.isatty() else Console(width=180, force_terminal=False)


def plan_rows(runs: list[plan.PlannedRun]) -> list[dict[str, Any]]:
    """One dict per point: the plan artifact of the parent run and the dry-run table."""
    rows = []
    for r in runs:
        f = r.facts
        rows.append(
            {
                "point": r.index,
                "run_key": r.run_key,
                "variant": r.variant,
                "phase": r.phase,
                "arch": f.arch if f else "",
                "n_layers": f.n_layers if f else None,
                "d_model": f.d_model if f else None,
                "N": r.n,
                "D": int(r.d),
                "C": r.c,  # 6 N D
                "C_exact": r.c_exact,  # exact training FLOPs: flops_per_token x D
                "C_budget": r.budget,
                "budget_flops": r.budget_flops,  # what C_budget counts: 6nd | exact
                "tokens_per_param": r.d / r.n if r.n else None,
                "est_s": round(r.est_s, 1),
                "skip": r.skip or "",
                "overrides": " ".join(r.overrides),
            }
        )
    return rows


def memory_cell(facts: plan.RunFacts | None) -> str:
    """A point's estimated memory per process in GB, `!` when it exceeds the device's."""
    if facts is None or facts.memory_gb is None:
        return ""
    over = facts.device_memory_gb is not None and facts.memory_gb > facts.device_memory_gb
    return f"{facts.memory_gb:.2g}G" + ("!" if over else "")


def memory_warning(runs) -> str | None:
    """One line naming the points estimated not to fit their device, if any."""
    over = [r for r in runs if not r.skip and memory_cell(r.facts).endswith("!")]
    if not over:
        return None
    points = ", ".join(str(r.index) for r in over)
    device = over[0].facts.device_memory_gb
    return (
        f"warning: point(s) {points} are estimated to need more than the {device:.3g} GB of "
        "device memory (train.device_memory_gb, or the GPU's): lower train.micro_batch or "
        "set it to auto"
    )


def print_plan(spec: plan.SweepSpec, runs, jobs: int, records_read: bool, plan_s: float) -> None:
    kind = spec.kind
    if spec.budgets:
        kind += f", budgets C in {plan.C_LABEL[spec.budget_flops]} FLOPs"
    t = Table(title=f"sweep '{spec.name}' ({kind}): {len(runs)} points", title_justify="left")
    left = ("run key", "variant", "phase", "arch")
    cols = ("#", *left, "L", "d", "N", "D", "C (6ND)", "C (exact)", "D/N", "est", "mem")
    for col in cols:
        t.add_column(col, justify="left" if col in left else "right")
    t.add_column("status / skip reason")
    for r in runs:
        f = r.facts
        t.add_row(
            str(r.index),
            r.run_key,
            r.variant,
            r.phase,
            f.arch if f else "",
            str(f.n_layers) if f else "",
            str(f.d_model) if f else "",
            plan.format_count(r.n) if f else "",
            plan.format_count(r.d) if f else "",
            f"{r.c:.2e}" if f else "",
            f"{r.c_exact:.2e}" if f else "",
            f"{r.d / r.n:.1f}" if f and r.n else "",
            format_duration(r.est_s) if not r.skip else "",
            memory_cell(r.facts),
            r.skip or ("will run" if records_read else "will run (no store yet)"),
        )
    out = console()
    out.print(t)
    if warning := memory_warning(runs):
        out.print(warning)
    todo = [r for r in runs if not r.skip]
    spent = sum(r.c_spent for r in todo)
    spent_exact = sum(r.c_exact_spent for r in todo)
    out.print(
        f"{len(todo)} to run, {len(runs) - len(todo)} skipped; compute {spent:.3g} FLOPs (6ND), "
        f"{spent_exact:.3g} FLOPs (exact); "
        f"estimated wall time {format_duration(plan.total_estimate(todo, jobs))} with sweep.jobs={jobs} "
        f"(planned in {plan_s:.1f}s; dry run: nothing trained, no runs created)"
    )
    wsd_spent, cosine = plan.wsd_compute(runs)
    if cosine:
        out.print(
            f"WSD branches: {wsd_spent:.3g} FLOPs (6ND) instead of {cosine:.3g} for independent cosine "
            f"runs of the same budgets: {100 * (1 - wsd_spent / cosine):.0f}% compute saved"
        )


def print_summary(name: str, outcomes, uri: str, parent_run_id: str) -> None:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.state] = counts.get(o.state, 0) + 1
    out = console()
    t = Table(title=f"sweep '{name}' summary", title_justify="left")
    for col in ("state", "points"):
        t.add_column(col)
    # stopped: a tuning candidate that lost its rung by failing (e.g. an lr that diverged)
    for state in ("finished", "done-before", "stopped", "skipped", "failed", "not-run"):
        if counts.get(state):
            t.add_row(state, str(counts[state]))
    out.print(t)
    bad = [o for o in outcomes if o.state in ("failed", "skipped", "not-run")]
    if bad:
        d = Table(title="not finished in this invocation", title_justify="left")
        for col in ("#", "variant", "N", "D", "state", "reason"):
            d.add_column(col)
        for o in bad:
            r = o.run
            d.add_row(
                str(r.index),
                r.variant,
                plan.format_count(r.n),
                plan.format_count(r.d),
                o.state,
                o.reason,
            )
        out.print(d)
    out.print(f"MLflow: parent run {parent_run_id} in {uri}")


class SweepProgress:
    """A background thread polls MLflow for the sweep's children and draws done/total + ETA."""

    def __init__(self, name, todo, uri, experiment_id, parent_run_id, jobs: int, every_s=5.0):
        self.name, self.uri, self.exp, self.parent = name, uri, experiment_id, parent_run_id
        self.est = {r.run_key: max(r.est_s, 1.0) for r in todo}
        self.jobs, self.every_s = max(1, jobs), every_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._done: set[str] = set()
        self._start = time.time()
        self._tty = sys.stdout.isatty()
        self._bar = None

    def __enter__(self):
        if self._tty and self.est:
            # Like a run's bar: name (at most 20 characters), bar, percentage, runs, ETA, which
            # fit 80 columns.
            name = self.name if len(self.name) <= 20 else self.name[:19] + "…"
            self._bar = Progress(
                "[bold]{task.description}",
                BarColumn(bar_width=24),
                TaskProgressColumn(),
                "{task.fields[runs]}",
                TimeRemainingColumn(compact=True),
                console=console(),
            )
            self._task = self._bar.add_task(
                f"sweep {name}", total=sum(self.est.values()), runs=f"0/{len(self.est)} runs"
            )
            self._bar.start()
        self._print_line()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)
        self.refresh()
        if self._bar is not None:
            self._bar.stop()

    def add(self, runs) -> None:
        """More points to wait for (a tuned sweep's next stage)."""
        with self._lock:
            self.est.update({r.run_key: max(r.est_s, 1.0) for r in runs})
            if self._bar is not None:
                self._bar.update(self._task, total=sum(self.est.values()))

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.refresh()
            except Exception:  # a busy store must not kill the sweep; the next poll retries
                pass

    def refresh(self) -> None:
        recs = children_by_key(self.uri, self.exp, self.parent)
        with self._lock:
            done = {k for k, r in recs.items() if k in self.est and r.status in TERMINAL}
            if done == self._done:
                return
            self._done = done
            if self._bar is not None:
                self._bar.update(
                    self._task,
                    completed=sum(self.est[k] for k in done),
                    runs=f"{len(done)}/{len(self.est)} runs",
                )
            else:
                self._print_line()

    def _print_line(self) -> None:
        if self._bar is not None:
            return
        total = sum(self.est.values())
        done_est = sum(self.est[k] for k in self._done)
        elapsed = time.time() - self._start
        eta = (elapsed / done_est * (total - done_est)) if done_est else total / self.jobs
        print(
            f"[sweep {self.name}] {len(self._done)}/{len(self.est)} runs done, "
            f"elapsed {format_duration(elapsed)}, ETA {format_duration(eta)}",
            flush=True,
        )
