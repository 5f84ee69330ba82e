"""Hyperparameter tuning inside a sweep: `sweep.tune`, `sweep.tune_at`, `sweep.tune_halving`.

An arm is one point of the untuned plan (variant x size x token budget); its id is the run key
it would have untuned. A tuned arm tries every candidate of the grid (the product of the
`tune` lists); an arm under `tune_at: smallest_budget` that is not its variant x size's smallest
budget trains the values chosen there instead (`transfer`).

Successive halving (the default) keeps the bill near two runs per arm. Every candidate trains
the stable phase of one WSD schedule (warmup, then the peak lr) in segments that end at rungs,
fractions of the arm's stable length S = (1 - decay) D; each segment is a run that starts from
the previous segment's checkpoint (`train.init_from`) and saves its own. At every rung the
candidates are ranked by their final val_loss in MLflow (the same tokens for all), the better
half goes on, and after the last rung the best one continues from its checkpoint to D with the
decay starting at S (`train.decay_start_tokens`): that run is the arm's result, the same
trajectory a full WSD run of the winner to D trains. With rungs 1/8, 1/4, 1/2 an 8-candidate
grid costs 8 S/8 + 4 S/8 + 2 S/4 + (D - S/2) = 2.2 D at decay 0.2, against 8 D for the full
grid. `tune_halving: false` trains every candidate to D instead (the full grid), tagging the
best one chosen. A fractional `train.warmup` is a fraction of the arm's steps, so a segment gets
it as a step count (what a run to D would compute); the first rung must end after warmup.

The choice is read from MLflow, never kept in memory only: a rerun resolves the same segments
to the same run keys, skips the FINISHED ones and re-derives the same winners.

`sweep.seeds: S` trains every arm's result with S seeds: seed 0 is the run above (the halving
winner's decay, the best full-grid run, a transfer); seeds 1..S-1 of a chosen arm are full WSD
runs of the winning values with `train.seed=k`, trained with the winner's decay (the same
stage), those of a transfer next to it. Candidates train seed 0 only.

Every tuning run is tagged `arm` (the arm id), `tune_role` (candidate | chosen | transfer),
`tune_values` (the candidate as written in the sweep, `train.lr=0.002,train.warmup=0.1`),
candidates also `tune_rung` (tokens at which the segment is compared), transfers `tuned_at`
(the arm whose choice they train).

What a plan costs (seconds per stage, the dry run's tuning table, the early-rung warning) is
`sweeps.tuning_view`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from omegaconf import OmegaConf

from analysis.tuning import curve_tuning as analysis_curve
from sweeps import curve_tuning, plan
from sweeps.plan import PlanError, PlannedRun, Point, TuneSpec, format_value
from sweeps.points import BATCH_KEY
from training import tracking
from training.schedules import warmup_steps

WARMUP_KEY = "train.warmup"
# Keys the tuning runs set themselves; an arm's own value for them is dropped.
SET_HERE = (
    plan.TOKENS_KEY,
    "train.schedule",
    "train.decay_fraction",
    "train.decay_start_tokens",
    "train.save_at_tokens",
    "train.init_from",
)

ConfigOf = Callable[[Sequence[str]], Any]  # overrides -> composed DictConfig
ResolvePoints = Callable[[Sequence[Point]], list[PlannedRun]]  # resolved, MLflow state applied
# run keys -> {run key: (MLflow status, final val_loss or None, failure reason)}
LossesOf = Callable[[Sequence[str]], dict[str, tuple[str, float | None, str]]]


@dataclass(frozen=True)
class Candidate:
    index: int
    values: dict[str, Any]  # as written in sweep.tune
    overrides: tuple[str, ...]  # what the runs get (a fractional warmup as steps when halving)
    batch_tokens: int = 0  # its batch (a tuned train.batch_tokens, else the arm's)
    warmup_steps: int = 0  # halving: its warmup in steps of its batch

    @property
    def label(self) -> str:
        return ",".join(f"{k}={format_value(v)}" for k, v in self.values.items())


@dataclass
class Arm:
    run: PlannedRun  # the untuned point
    group: tuple  # variant x size: the point's overrides without its token budget
    tuned_at: int | None = None  # transfer: index (in TuningPlan.arms) of the arm tuned for it
    candidates: list[Candidate] = field(default_factory=list)
    rungs: tuple[int, ...] = ()  # halving: tokens where candidates are compared
    stable: int = 0  # halving: tokens of the stable phase (the decay starts here)
    warmup_steps: int = 0  # halving: the longest warmup among its candidates (steps)
    # execution state, rebuilt from MLflow on every invocation
    alive: list[int] = field(default_factory=list)
    last_key: dict[int, str] = field(default_factory=dict)
    losses: dict[int, dict[int, float]] = field(default_factory=dict)  # cand -> {tokens: loss}
    chosen: int | None = None
    decided_at: int | None = None  # staged: the rung (index) its choice was made at
    why: str = ""  # staged: what the rule saw at that rung

    @property
    def id(self) -> str:
        return self.run.run_key

    @property
    def tokens(self) -> int:
        return int(self.run.d)

    @property
    def tuned(self) -> bool:
        return self.tuned_at is None


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+")


def _tags(**tags: Any) -> tuple[str, ...]:
    # quoted: tune_values holds '=' and ','
    return tuple(f"++tracking.tags.{k}='{v}'" for k, v in tags.items() if v is not None)


@dataclass
class TuningPlan:
    spec: TuneSpec
    arms: list[Arm]
    skipped: list[PlannedRun]  # untuned points that cannot run at all (shown, never tuned)
    resolve_points: ResolvePoints
    flops_per_sec: float
    overhead_s: float
    checkpoint_path: plan.CheckpointPath
    next_index: int = 0
    stage: int = 0  # halving: rung being trained (len(rungs): the winners' decay)
    current: list[tuple[PlannedRun, int, int]] = field(default_factory=list)  # (run, arm, cand)
    transferred: bool = False
    seeds: int = 1  # sweep.seeds: the chosen runs and transfers train seeds 0..seeds-1

    @property
    def staged(self) -> bool:
        """`sweep.tune_curve` with the staged rule (`analysis.tuning.curve_tuning.decide`)."""
        return bool(self.spec.curve) and self.spec.curve.rule == "staged"

    @property
    def finalists(self) -> int:
        """Decays to the budget per tuned arm at worst: the staged rule decays two where every
        survivor is on the plateau, the others one winner."""
        return 2 if self.staged else 1

    # ---- points -------------------------------------------------------------------------
    def _base(self, arm: Arm, tuned: tuple[str, ...]) -> tuple[str, ...]:
        """The arm's overrides without those the tuning sets, then `tuned` and the schedule."""
        keep = [o for o in arm.run.overrides if _key(o) not in (*SET_HERE, *self.spec.grid)]
        wsd = ("train.schedule=wsd", f"train.decay_fraction={format_value(self.spec.decay)}")
        return (*keep, *tuned, *wsd, f"train.decay_start_tokens={arm.stable}")

    def segment(self, a: int, cand: Candidate, k: int) -> Point:
        """Candidate `cand` of arm `a` trained from rung k-1 to rung k, constant lr."""
        arm = self.arms[a]
        end = arm.rungs[k]
        over = self._base(arm, cand.overrides)
        over += (f"{plan.TOKENS_KEY}={end}", f"train.save_at_tokens=[{end}]")
        if k:
            over += (
                f"train.init_from={self.checkpoint_path(arm.last_key[cand.index], arm.rungs[k - 1])}",
            )
        if self.spec.curve:  # a point per step, for the curve law (sweeps.curve_tuning)
            over += curve_tuning.segment_overrides(arm.tokens)
            if k:  # the prefix's earlier points are in the segment it continues
                over += curve_tuning.previous_overrides(arm.last_key[cand.index])
        tags = _tags(arm=arm.id, tune_role="candidate", tune_rung=end, tune_values=cand.label)
        return Point(over + tags, arm.run.variant, phase="candidate")

    def decayed(self, a: int, cand: Candidate, k: int = -1, role: str = "chosen") -> Point:
        """The winner from rung k (default the last) to the arm's budget, decaying from the
        stable end (`role` finalist: one of the staged rule's decays on the plateau)."""
        arm = self.arms[a]
        over = self._base(arm, cand.overrides) + (f"{plan.TOKENS_KEY}={arm.tokens}",)
        over += (f"train.init_from={self.checkpoint_path(arm.last_key[cand.index], arm.rungs[k])}",)
        tags = _tags(arm=arm.id, tune_role=role, tune_values=cand.label)
        return Point(over + tags, arm.run.variant, phase=role)

    def full(
        self, a: int, cand: Candidate, role: str, tuned_at: str | None = None, seed: int = 0
    ) -> Point:
        """One WSD run of the arm with the candidate's values as written (the full grid, a
        transfer of a choice made at another arm, or seed `seed` of a chosen arm's result)."""
        arm = self.arms[a]
        values = tuple(f"{k}={format_value(v)}" for k, v in cand.values.items())
        over = self._base(arm, values) + (f"{plan.TOKENS_KEY}={arm.tokens}",)
        over += plan.seed_override(seed)
        rung = arm.tokens if role == "candidate" else None
        tags = _tags(
            arm=arm.id, tune_role=role, tune_rung=rung, tune_values=cand.label, tuned_at=tuned_at
        )
        return Point(over + tags, arm.run.variant, phase=role, seed=seed)

    def other_seeds(self, a: int, cand: Candidate, role: str, tuned_at: str | None = None):
        """Seeds 1..seeds-1 of an arm's result: (point, arm, candidate) each, trained from 0."""
        return [
            (self.full(a, cand, role, tuned_at, seed=k), a, cand.index)
            for k in range(1, self.seeds)
        ]

    def _resolve(self, points: list[tuple[Point, int, int]], trained_from: list[int]):
        runs = self.resolve_points([p for p, _, _ in points])
        out = []
        for (_, a, c), run, start in zip(points, runs, trained_from):
            trained = run.d - start
            est = 0.0  # skipped (done before, or cannot run)
            if run.facts and not run.skip:
                est = run.facts.flops_per_token * trained / self.flops_per_sec + self.overhead_s
            run = replace(run, index=self.next_index, tokens_trained=trained, est_s=est)
            self.next_index += 1
            out.append((run, a, c))
        return out

    # ---- stages ---------------------------------------------------------------------------
    def first_stage(self) -> list[PlannedRun]:
        points, starts = [], []
        for a, arm in enumerate(self.arms):
            if not arm.tuned:
                continue
            arm.alive = [c.index for c in arm.candidates]
            for cand in arm.candidates:
                if self.spec.halving:
                    points.append((self.segment(a, cand, 0), a, cand.index))
                else:
                    points.append((self.full(a, cand, "candidate"), a, cand.index))
                starts.append(0)
        self.current = self._resolve(points, starts)
        self._check_arms_apart()
        return [*self.skipped, *(r for r, _, _ in self.current)]

    def _check_arms_apart(self) -> None:
        owner: dict[str, tuple[int, int]] = {}
        for run, a, c in self.current:
            if not run.facts:
                continue
            cand = self.arms[a].candidates[c]
            b, d = owner.setdefault(run.run_key, (a, c))
            if b == a and d != c:
                other = self.arms[a].candidates[d]
                key = next(k for k in self.spec.grid if other.values[k] != cand.values[k])
                raise PlanError(
                    f"sweep.tune.{key}: candidates "
                    f"{other.label} and {cand.label} are the same run at arm "
                    f"{self.arms[a].id} (e.g. two warmup fractions that round to one step count)"
                )
            if b != a:
                key = next(iter(self.spec.grid))
                raise PlanError(
                    f"sweep.tune.{key}: candidate {cand.label} makes arm {self.arms[b].id} "
                    f"({self.arms[b].run.variant}) and arm {self.arms[a].id} "
                    f"({self.arms[a].run.variant}) the same run (run key {run.run_key}); "
                    "a tuned key must not override what tells the arms apart"
                )

    def next_stage(
        self, outcomes: dict[int, Any], losses_of: LossesOf, tag_chosen: Callable[..., None]
    ) -> list[PlannedRun]:
        """Rank the stage just trained (losses from MLflow), return the next stage's runs."""
        if not self.current:
            return []
        results = losses_of([r.run_key for r, _, _ in self.current if r.run_key])
        points, starts = [], []
        stage_arms: dict[int, list[tuple[PlannedRun, int]]] = {}
        for run, a, c in self.current:
            if run.seed == 0:  # other seeds of a result rank nothing and continue nothing
                stage_arms.setdefault(a, []).append((run, c))
        for a, members in stage_arms.items():
            arm = self.arms[a]
            phase = members[0][0].phase
            scored, preds = [], {}
            for run, c in members:
                status, value, _ = results.get(run.run_key, ("", None, ""))
                loss = math.inf
                if status == "FINISHED" and value is not None:
                    if isinstance(value, analysis_curve.Prediction):
                        preds[c] = value
                        value = value.score
                    loss = value if math.isfinite(value) else math.inf
                arm.losses.setdefault(c, {})[int(run.d)] = loss
                arm.last_key[c] = run.run_key
                scored.append((loss, c))
            if phase == "transfer":
                continue
            if phase == "chosen":
                arm.chosen = members[0][1] if math.isfinite(scored[0][0]) else None
                continue
            if phase == "finalist":  # staged, on the plateau: the measured final loss chooses
                scored.sort()
                if math.isfinite(scored[0][0]):
                    arm.chosen = scored[0][1]
                    tag_chosen(members, arm.chosen)
                    extra = self.other_seeds(a, arm.candidates[arm.chosen], "chosen")
                    points += extra
                    starts += [0] * len(extra)
                continue
            scored.sort()
            if not math.isfinite(scored[0][0]):
                continue  # every candidate failed: the arm has no result (its runs say why)
            self._stop_failed(outcomes, members, results)
            last = not self.spec.halving or self.stage == len(arm.rungs) - 1
            keep = 1 if last else math.ceil(len(scored) / 2)
            arm.alive = [c for _, c in scored[:keep]]
            if self.staged and preds:
                decision = analysis_curve.decide(preds, last)
                arm.alive, arm.why = list(decision.keep), decision.why
                last = decision.chosen is not None
                arm.decided_at = self.stage if last or decision.finalists else None
                if decision.finalists:
                    for c in decision.finalists:
                        cand = arm.candidates[c]
                        points.append((self.decayed(a, cand, self.stage, "finalist"), a, c))
                        starts.append(arm.rungs[self.stage])
                    continue
            if not self.spec.halving:
                arm.chosen = arm.alive[0]
                tag_chosen(members, arm.chosen)
                extra = self.other_seeds(a, arm.candidates[arm.chosen], "chosen")
                points += extra
                starts += [0] * len(extra)
            elif last:
                cand = arm.candidates[arm.alive[0]]
                points.append((self.decayed(a, cand, self.stage), a, arm.alive[0]))
                starts.append(arm.rungs[self.stage])
                extra = self.other_seeds(a, arm.candidates[arm.alive[0]], "chosen")
                points += extra
                starts += [0] * len(extra)
            else:
                for c in arm.alive:
                    points.append((self.segment(a, arm.candidates[c], self.stage + 1), a, c))
                    starts.append(arm.rungs[self.stage])
        self.stage += 1
        if not points and not self.transferred:
            self.transferred = True
            for a, arm in enumerate(self.arms):
                src = self.arms[arm.tuned_at] if arm.tuned_at is not None else None
                if src is not None and src.chosen is not None:
                    cand = src.candidates[src.chosen]
                    points.append((self.full(a, cand, "transfer", tuned_at=src.id), a, cand.index))
                    points += self.other_seeds(a, cand, "transfer", tuned_at=src.id)
                    starts += [0] * self.seeds
        self.current = self._resolve(points, starts) if points else []
        return [r for r, _, _ in self.current]

    def _stop_failed(self, outcomes, members, results) -> None:
        """A candidate that diverged (or failed) lost its rung; while another candidate of its
        arm has a loss, that is a tuning result ("stopped"), not a failed sweep."""
        for run, _ in members:
            o = outcomes.get(run.index)
            if o is not None and o.state in ("failed", "skipped") and run.run_key in results:
                reason = results[run.run_key][2] or o.reason
                outcomes[run.index] = replace(o, state="stopped", reason=f"lost its rung: {reason}")

    # ---- what the dry run shows -----------------------------------------------------------
    def cost(self, arm: Arm) -> tuple[float, float, float, int]:
        """(exact FLOPs this plan spends on the arm, the full grid's, the untuned run's, runs),
        each with the arm's result at every seed (sweep.seeds)."""
        f = arm.run.facts.flops_per_token
        untuned = f * arm.tokens
        n, more = len(self.spec.candidates), self.seeds - 1  # candidates; other seeds
        grid = (n + more) * untuned
        if not arm.tuned:
            return self.seeds * untuned, grid, self.seeds * untuned, self.seeds
        if not self.spec.halving:
            return grid, grid, self.seeds * untuned, n + more
        tokens, runs, alive, prev = 0.0, 0, n, 0
        for k, rung in enumerate(arm.rungs):
            tokens += alive * (rung - prev)
            runs += alive
            alive = 1 if k == len(arm.rungs) - 1 else math.ceil(alive / 2)
            prev = rung
        tokens += self.finalists * (arm.tokens - prev) + more * arm.tokens
        return f * tokens, grid, self.seeds * untuned, runs + self.finalists + more


def plan_tuning(
    spec: TuneSpec,
    runs: Sequence[PlannedRun],
    config_of: ConfigOf,
    checkpoint_path: plan.CheckpointPath,
    resolve_points: ResolvePoints,
    flops_per_sec: float,
    overhead_s: float,
    seeds: int = 1,
) -> TuningPlan:
    """Arms from the untuned plan, candidates per arm; fails (PlanError naming the key) before
    anything trains on a key the config does not have or a rung inside a candidate's warmup.
    `seeds`: how many seeds of each arm's result train (sweep.seeds)."""
    runnable = [r for r in runs if r.facts and not r.skip]
    skipped = [r for r in runs if not (r.facts and not r.skip)]
    if not runnable:
        raise PlanError("sweep.tune: no point of the sweep can run, so there is nothing to tune")
    missing = object()
    composed = config_of(runnable[0].overrides)
    for key in spec.grid:
        if OmegaConf.select(composed, key, default=missing) is missing:
            raise PlanError(f"sweep.tune.{key}: not a config field (no such key to override)")
    arms = _arms(spec, runnable)
    for arm in arms:
        _plan_arm(spec, arm, config_of)
    return TuningPlan(
        spec,
        arms,
        skipped,
        resolve_points,
        flops_per_sec,
        overhead_s,
        checkpoint_path,
        next_index=max((r.index for r in runs), default=-1) + 1,
        seeds=seeds,
    )


def _arms(spec: TuneSpec, runs: Sequence[PlannedRun]) -> list[Arm]:
    """One arm per run; under `tune_at: smallest_budget` every arm but the smallest budget of
    its variant x size transfers the choice made there."""
    groups: dict[tuple, list[int]] = {}
    arms: list[Arm] = []
    for r in runs:
        group = (r.variant, *sorted(o for o in r.overrides if _key(o) != plan.TOKENS_KEY))
        groups.setdefault(group, []).append(len(arms))
        arms.append(Arm(r, group))
    if spec.at == "smallest_budget":
        for members in groups.values():
            smallest = min(members, key=lambda i: arms[i].tokens)
            for i in members:
                if i != smallest:
                    arms[i].tuned_at = smallest
    return arms


def _plan_arm(spec: TuneSpec, arm: Arm, config_of: ConfigOf) -> None:
    """The arm's stable phase; a tuned arm's rungs (halving) and candidates."""
    bt = arm.run.facts.batch_tokens
    # every tuned run decays from here: a halving winner, a full-grid run and a transfer
    # follow the same lr schedule
    arm.stable = plan.branch_start(arm.tokens, spec.decay, bt)
    if not arm.tuned:
        return
    if spec.curve:
        n = len(spec.candidates)
        arm.rungs = curve_tuning.rungs(spec.curve, n, arm.tokens, bt, arm.stable)
        if not 0 < arm.rungs[0] <= arm.stable:
            raise PlanError(
                f"sweep.tune_curve.runs: arm {arm.id} ({arm.tokens} tokens) gives each of {n} "
                f"candidates a prefix of {arm.rungs[0]} tokens, outside its stable phase"
            )
    elif spec.halving:
        arm.rungs = tuple(sorted({int(f * arm.stable) // bt * bt for f in spec.rungs} - {0}))
        if not arm.rungs:
            raise PlanError(
                f"sweep.tune_halving.rungs: arm {arm.id} ({arm.tokens} tokens) is too short for "
                f"a rung of whole batches ({bt} tokens) at {list(spec.rungs)} of its stable phase"
            )
    default_warmup = OmegaConf.select(config_of(arm.run.overrides), WARMUP_KEY)
    for i, values in enumerate(spec.candidates):
        arm.candidates.append(_candidate(spec, arm, i, values, default_warmup))


def _candidate(spec: TuneSpec, arm: Arm, i: int, values: dict, default_warmup) -> Candidate:
    """Candidate i of a tuned arm. Halving: its warmup as steps (what a run to the arm's budget
    computes), which must end before the first rung; the arm keeps the longest."""
    over = [f"{k}={format_value(v)}" for k, v in values.items() if k != WARMUP_KEY]
    warmup = float(values.get(WARMUP_KEY, default_warmup))
    bt = int(float(values.get(BATCH_KEY, arm.run.facts.batch_tokens)))
    w_steps = 0
    if spec.halving:
        w_steps = warmup_steps(warmup, math.ceil(arm.tokens / bt))
        if w_steps * bt > arm.rungs[0]:
            where = "sweep.tune_curve.runs" if spec.curve else "sweep.tune_halving.rungs"
            raise PlanError(
                f"{where}: the first rung of arm {arm.id} "
                f"({arm.rungs[0]} tokens) ends inside the warmup of candidate "
                f"{WARMUP_KEY}={format_value(warmup)} ({w_steps} steps of {bt} tokens); "
                "raise the first rung or shorten the warmup"
            )
        if spec.curve:
            curve_tuning.check_points(arm.id, arm.rungs[0], bt)
        over.append(f"{WARMUP_KEY}={w_steps}")
        arm.warmup_steps = max(arm.warmup_steps, w_steps)
    elif WARMUP_KEY in values:
        over.append(f"{WARMUP_KEY}={format_value(warmup)}")
    return Candidate(i, values, tuple(over), bt, w_steps)


def losses_from_mlflow(uri: str, experiment: str, loss_of: Callable | None = None) -> LossesOf:
    """The MLflow reader of rung results: the run of each key (`tracking.latest_runs_by_key`),
    its status, loss and failure reason. The loss is final_val_loss, or `loss_of(client, run)`
    where a strategy ranks by another number (`sweeps.curve_tuning`: a predicted loss)."""

    def losses_of(keys: Sequence[str]) -> dict[str, tuple[str, float | None, str]]:
        client = tracking.client(uri)
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            return {}
        found = tracking.latest_runs_by_key(client, exp.experiment_id)
        out = {}
        for key in keys:
            run = found.get(key)
            if run is not None:
                loss = run.data.metrics.get("final_val_loss")
                if loss_of is not None:
                    loss = loss_of(client, run)
                reason = run.data.tags.get("failure_reason", "")
                out[key] = (run.info.status, loss, reason)
        return out

    return losses_of


def tag_chosen_in_mlflow(uri: str, experiment: str) -> Callable[..., None]:
    """Full grid: the best candidate's run is the arm's result; tag it tune_role=chosen (and
    an earlier choice back to candidate: a grid extended by a rerun may choose another)."""

    def tag(members, chosen: int) -> None:
        client = tracking.client(uri)
        exp = client.get_experiment_by_name(experiment)
        found = tracking.latest_runs_by_key(client, exp.experiment_id)
        for run, c in members:
            record = found.get(run.run_key)
            if record is None:
                continue
            if c == chosen:
                client.set_tag(record.info.run_id, "tune_role", "chosen")
            elif record.data.tags.get("tune_role") == "chosen":
                client.set_tag(record.info.run_id, "tune_role", "candidate")

    return tag
