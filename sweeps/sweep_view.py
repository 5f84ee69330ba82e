"""What a sweep shows a person: the plan table (dry run), a progress bar, the summary table.

Progress is read from MLflow (the children of the sweep's parent run), not from the launcher, so
it is the same for local processes and SLURM jobs: a point counts as done when its run reaches
FINISHED or FAILED. The bar advances by each point's estimated seconds, so the ETA weighs a big
model more than a small one.
"""

from __future__ import annotations

import os
import shlex
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn
from rich.table import Table

from models.values import format_duration
from sweeps import plan
from sweeps.points import C_LABEL
from sweeps.sweep_records import children_by_key, name_order

TERMINAL = ("FINISHED", "FAILED")


# The main job's console lines (progress, summary, the report's output) fit 80 columns.
WIDTH = 80


def console(wide: bool = False) -> Console:
    """A terminal's own width; not a terminal (logs, CI): $COLUMNS where set, else 80 columns,
    or (`wide`: the dry run's plan table, which 80 columns would cut) 180."""
    if sys.stdout.isatty():
        return Console()
    columns = os.environ.get("COLUMNS", "")
    default = 180 if wide else WIDTH
    width = int(columns) if columns.isdigit() and int(columns) > 0 else default
    return Console(width=width, force_terminal=False)


def fit_width(line: str, width: int = WIDTH) -> str:
    """`line` in lines of at most `width` columns, continued 4 spaces deeper than it starts;
    a word longer than the width (a path) stays whole on its own line."""
    if len(line) <= width:
        return line
    indent = " " * (len(line) - len(line.lstrip(" ")))
    return textwrap.fill(
        line.strip(),
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "    ",
        break_on_hyphens=False,
        break_long_words=False,
    )


def command_lines(label: str, cmd: Sequence[str], width: int = WIDTH) -> str:
    """`label` and a shell command in lines of at most `width` columns, continued with ` \\`
    (copied whole, it still runs)."""
    words = [shlex.quote(str(w)) for w in cmd]
    units = []  # an option stays on one line with its value
    for word in words:
        if units and units[-1].startswith("-") and " " not in units[-1] and word[0] != "-":
            units[-1] += " " + word
        else:
            units.append(word)
    lines, line = [], label
    for unit in units:
        if len(line) + 1 + len(unit) > width - 2 and line != label:
            lines.append(line + " \\")
            line = "   "
        line += " " + unit
    return "\n".join([*lines, line])


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
                "seed": r.seed,
                "arch": f.arch if f else "",
                "n_layers": f.n_layers if f else None,
                "d_model": f.d_model if f else None,
                "N": r.n,  # non-embedding, a MoE's active count (C = 6 N_active D)
                "N_nonembed_total": f.n_params_nonembed if f else None,  # every expert
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
    if notes := [f"point {r.index} {r.facts.memory_note}" for r in over if r.facts.memory_note]:
        return "warning: " + "; ".join(notes)  # training.memory_plan: what would fit
    points = ", ".join(str(r.index) for r in over)
    device = over[0].facts.device_memory_gb
    return (
        f"warning: point(s) {points} are estimated to need more than the {device:.3g} GB of "
        "device memory (train.device_memory_gb, or the GPU's): lower train.micro_batch or "
        "set it to auto"
    )


WIDE = 150  # from this many columns the plan shows every column in full


def _c(x: float, wide: bool) -> str:
    return f"{x:.2e}" if wide else f"{x:.1e}".replace("e+0", "e").replace("e+", "e")


PHASE_SHORT = {"candidate": "cand", "transfer": "xfer"}


def seed_of(run: plan.PlannedRun) -> str:
    """The point's training seed: its `train.seed` override (an axis, or `sweep.seeds`), else
    its seed index (0: the config's own seed)."""
    for o in run.overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+") == plan.SEED_KEY:
            return value.strip("'\"")
    return str(run.seed)


def plan_columns(runs, wide: bool, block_of: Callable) -> list[tuple[str, str, Callable]]:
    """(header, justify, cell) of the plan table. Narrow (80 columns): no run key and exact C
    (plan.csv and the wide layout have them), the block (model preset, variant: no separate
    variant column) for the arch (listed below the table), the shape as L x d, and only the
    phase column where phases vary. The seed wherever seeds vary (`train.seed` as an axis or
    `sweep.seeds`): two points differing only by seed read differently."""
    f = lambda r: r.facts  # noqa: E731
    cols = [("#", "right", lambda r: str(r.index))]
    if wide:
        cols.append(("run key", "left", lambda r: r.run_key))
        cols.append(("variant", "left", lambda r: r.variant))
    if wide or {r.phase for r in runs} != {"run"}:
        cols.append(
            ("phase", "left", lambda r: r.phase if wide else PHASE_SHORT.get(r.phase, r.phase))
        )
    if len({seed_of(r) for r in runs}) > 1:
        cols.append(("seed", "right", seed_of))
    if wide:
        cols.append(("arch", "left", lambda r: f(r).arch if f(r) else ""))
        cols.append(("L", "right", lambda r: str(f(r).n_layers) if f(r) else ""))
        cols.append(("d", "right", lambda r: str(f(r).d_model) if f(r) else ""))
    else:
        cols.append(("block", "left", block_of))
        cols.append(("Lxd", "right", lambda r: f"{f(r).n_layers}x{f(r).d_model}" if f(r) else ""))
    cols += [
        ("N", "right", lambda r: plan.format_count(r.n) if f(r) else ""),
        ("D", "right", lambda r: plan.format_count(r.d) if f(r) else ""),
        ("C (6ND)" if wide else "C 6ND", "right", lambda r: _c(r.c, wide) if f(r) else ""),
    ]
    if wide:
        cols.append(("C (exact)", "right", lambda r: _c(r.c_exact, wide) if f(r) else ""))
    cols.append(("D/N", "right", lambda r: f"{r.d / r.n:.1f}" if f(r) and r.n else ""))
    if len({f(r).batch_tokens for r in runs if f(r)}) > 1:  # a tuned batch or a batch_rule
        cols.append(("B", "right", lambda r: str(f(r).batch_tokens) if f(r) else ""))
    cols.append(("est", "right", lambda r: format_duration(r.est_s) if not r.skip else ""))
    cols.append(("mem", "right", lambda r: memory_cell(r.facts)))
    return cols


def narrow_status(run: plan.PlannedRun) -> str:
    """The narrow plan's status word: run, done (finished before; its run id in the wide
    layout), or skip (its reason printed below the table)."""
    if not run.skip:
        return "run"
    return "done" if run.skip.startswith("done:") else "skip"


def print_plan(
    spec: plan.SweepSpec, runs, jobs: int, records_read: bool, plan_s: float, block_of: Callable
) -> None:
    """The dry run's table, one row per point; below 150 columns the narrow layout of
    `plan_columns`, whose last column (status, skip reason) wraps."""
    out = console(wide=True)
    wide = out.width >= WIDE
    kind = spec.kind
    if spec.budgets:
        kind += f", budgets C in {C_LABEL[spec.budget_flops]} FLOPs"
    title = f"sweep '{spec.name}' ({kind}): {len(runs)} points"
    # narrow: 2 spaces between columns (not 3), so 80 columns hold every number whole
    padding = (0, 1) if wide else (0, 1, 0, 0)
    t = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=padding
    )
    cols = plan_columns(runs, wide, block_of)
    for header, justify, _ in cols:
        t.add_column(header, justify=justify, no_wrap=True)
    if wide:
        t.add_column("status / skip reason", overflow="fold", min_width=8)
    elif any(r.skip for r in runs):  # narrow: a word; the reasons below the table
        t.add_column("status", no_wrap=True)
    for r in runs:
        cells = [cell(r) for _, _, cell in cols]
        if wide:
            cells.append(r.skip or ("will run" if records_read else "will run (no store yet)"))
        elif any(x.skip for x in runs):
            cells.append(narrow_status(r))
        t.add_row(*cells)
    out.print(t)
    if warning := memory_warning(runs):
        out.print(warning, highlight=False)
    if not wide:
        for r in runs:
            if r.skip and narrow_status(r) == "skip":
                out.print(f"#{r.index} skipped: {r.skip}", highlight=False, markup=False)
        arch = {block_of(r): r.facts.arch for r in runs if r.facts}
        out.print("blocks: " + "; ".join(f"{b} = {a}" for b, a in arch.items()), highlight=False)
        out.print(f"(run keys, exact C: {WIDE}+ columns, or plan.csv of the parent run)")
        if not records_read:
            out.print("no MLflow store yet: every point will run", highlight=False)
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


def print_decide(lines: Sequence[str]) -> None:
    """The dry run's "what this plan can decide" block (`sweeps.decide`): its title, then each
    line indented, in at most 80 columns ($COLUMNS off a terminal when narrower)."""
    if not lines:
        return
    out = console()
    width = min(out.width, WIDTH)
    title, *rest = lines
    out.print(fit_width(title, width), highlight=False, markup=False)
    for line in rest:
        out.print(fit_width("  " + line, width), highlight=False, markup=False)


@dataclass(frozen=True)
class Closing:
    """What the summary says after the counts: each arm's best run, the report, the UI command."""

    arms: list  # sweep_records.RunRecord per arm, its best FINISHED run
    report: Path | None = None  # report.html, when the sweep wrote one
    ui_command: str = "python -m sweeps.ui"
    answer: tuple[str, ...] = ()  # the report's verdict lines (`analysis.summary.answer_lines`)


def print_summary(name: str, outcomes, uri: str, parent_run_id: str, closing: Closing) -> None:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.state] = counts.get(o.state, 0) + 1
    out = console()
    # stopped: a tuning candidate that lost its rung by failing (e.g. an lr that diverged)
    order = ("finished", "done-before", "stopped", "skipped", "failed", "not-run")
    states = ", ".join(f"{counts[s]} {s}" for s in order if counts.get(s))
    out.print(f"sweep '{name}' summary: {states}", highlight=False)
    _print_not_finished(out, outcomes)
    _print_arms(out, closing.arms)
    if closing.answer:  # what the sweep was run for, as the report's summary says it
        out.print("answer (the report's summary):", highlight=False)
        for line in closing.answer:
            out.print(
                textwrap.fill(
                    line,
                    width=min(out.width, WIDTH),
                    initial_indent="  ",
                    subsequent_indent="    ",
                    break_on_hyphens=False,  # a variant's name stays whole
                    break_long_words=False,
                ),
                highlight=False,
                markup=False,
            )
    out.print(f"MLflow: parent run {parent_run_id}", highlight=False)
    out.print(f"  in {uri}", highlight=False)
    if closing.report is not None:
        out.print(f"report: {closing.report}", highlight=False)
    out.print(f"browse the runs: {closing.ui_command}", highlight=False)


def _print_not_finished(out: Console, outcomes) -> None:
    """The points that did not finish, then each one's reason below the table as plain text:
    a table cell would cut a reason across its borders at 80 columns, and a log is grepped for
    it ("interrupted by SIGTERM", a rerun hint)."""
    bad = [o for o in outcomes if o.state in ("failed", "skipped", "not-run")]
    if not bad:
        return
    d = Table(title="not finished in this invocation", title_justify="left")
    for col in ("#", "variant", "N", "D", "state"):
        d.add_column(col, overflow="fold")
    for o in bad:
        r = o.run
        d.add_row(str(r.index), r.variant, plan.format_count(r.n), plan.format_count(r.d), o.state)
    out.print(d)
    for o in bad:
        # markup=False: a reason may quote "[...]" (a gloo error's source location)
        out.print(f"#{o.run.index}: {o.reason}", highlight=False, markup=False)


def _print_arms(out: Console, arms) -> None:
    """Each arm's final validation loss (a tuned arm: its best candidate's), best marked, in
    order of block, N and D."""
    if not arms:
        return
    best = min(arms, key=lambda r: r.loss)
    t = Table(title="final validation loss per arm", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("run", overflow="fold")
    t.add_column("val loss", justify="right")
    t.add_column("")
    for r in sorted(arms, key=lambda r: name_order(r.name)):  # N102K after N33.9K
        t.add_row(r.name or r.run_id[:8], f"{r.loss:.4f}", "best" if r is best else "")
    out.print(t)
    out.print(f"best point: {best.name or best.run_id} (val loss {best.loss:.4f})", highlight=False)


@dataclass(frozen=True)
class Planned:
    """The whole plan's size, known before the first run: a tuned sweep's later stages
    (its chosen runs and transfers) included (`sweeps.tuning_view.stage_estimates`)."""

    runs: int
    est_s: float  # estimated seconds of every run together (the plan's FLOPs at its rate)


class SweepProgress:
    """A background thread polls MLflow for the sweep's children and draws done/total + ETA.

    The total is the whole plan's from the start (`planned`), so it does not jump when a
    tuned sweep derives its next stage. Each point weighs its estimated seconds (its FLOPs
    at the planned rate); the ETA is the weight left at the measured rate (weight done per
    elapsed second), counting down between completions; before any, the plan's estimate.
    """

    def __init__(
        self,
        name,
        todo,
        uri,
        experiment_id,
        parent_run_id,
        jobs: int,
        every_s=5.0,
        planned: Planned | None = None,
    ):
        self.name, self.uri, self.exp, self.parent = name, uri, experiment_id, parent_run_id
        self.est = {r.run_key: max(r.est_s, 1.0) for r in todo}
        self.planned = planned or Planned(len(self.est), sum(self.est.values()))
        self.jobs, self.every_s = max(1, jobs), every_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._done: set[str] = set()
        self._start = time.time()
        self._finish_at: float | None = None  # the ETA's moment, set at each completion
        self._tty = sys.stdout.isatty()
        self._bar = None

    @property
    def total_runs(self) -> int:
        return max(self.planned.runs, len(self.est))

    @property
    def total_s(self) -> float:
        return max(self.planned.est_s, sum(self.est.values()))

    def eta_s(self, now: float | None = None) -> float:
        """Seconds left: the weight left at the measured rate, from the last completion on;
        before any completion the plan's estimate on `jobs` slots."""
        now = time.time() if now is None else now
        if self._finish_at is None:
            return max(0.0, self._start + self.total_s / self.jobs - now)
        return max(0.0, self._finish_at - now)

    def _measure(self, now: float) -> None:
        done = sum(self.est[k] for k in self._done)
        if done <= 0:
            return
        rate = done / max(now - self._start, 1e-9)  # estimated seconds of work per second
        self._finish_at = now + (self.total_s - done) / rate

    def _fields(self) -> dict:
        return {
            "runs": f"{len(self._done)}/{self.total_runs} runs",
            "eta": format_duration(self.eta_s()),
        }

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
                "ETA {task.fields[eta]}",
                console=console(),
            )
            self._task = self._bar.add_task(f"sweep {name}", total=self.total_s, **self._fields())
            self._bar.start()
        self._print_line()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)
        self.refresh()
        if self._bar is not None:
            if exc[0] is None:  # every stage ran: the plan's later stages may have been fewer
                runs = f"{len(self._done)}/{len(self.est)} runs"  # those the stages launched
                self._bar.update(
                    self._task, completed=self.total_s, runs=runs, eta=format_duration(0)
                )
            self._bar.stop()

    def add(self, runs) -> None:
        """A tuned sweep's next stage: its points join those waited for; the total stays the
        plan's unless they exceed it."""
        with self._lock:
            self.est.update({r.run_key: max(r.est_s, 1.0) for r in runs})
            if self._bar is not None:
                self._bar.update(self._task, total=self.total_s, **self._fields())

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
                if self._bar is not None:  # the ETA counts down between completions
                    self._bar.update(self._task, eta=self._fields()["eta"])
                return
            new = sorted(done - self._done, key=lambda k: recs[k].name)
            self._done = done
            self._measure(time.time())
            for key in new:
                self._point_line(recs[key])
            if self._bar is not None:
                self._bar.update(
                    self._task, completed=sum(self.est[k] for k in done), **self._fields()
                )
            else:
                self._print_line()

    def _point_line(self, rec) -> None:
        """One line per finished point, above the bar (printed through its console)."""
        if rec.status == "FINISHED":
            what = f"val loss {rec.loss:.4f}" if rec.loss is not None else "finished"
        else:
            what = f"FAILED: {rec.failure_reason or 'see its MLflow run'}"
        line = f"{rec.name or rec.run_id[:8]}  {what}"
        if self._bar is not None:
            self._bar.console.print(line, highlight=False, markup=False)
        else:
            print(fit_width(f"[sweep {self.name}] {line}"), flush=True)  # a failure's reason

    def _print_line(self) -> None:
        if self._bar is not None:
            return
        elapsed = time.time() - self._start
        print(
            f"[sweep {self.name}] {len(self._done)}/{self.total_runs} runs done, "
            f"elapsed {format_duration(elapsed)}, ETA {format_duration(self.eta_s())}",
            flush=True,
        )
