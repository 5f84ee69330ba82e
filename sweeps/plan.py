"""Sweep plans: a sweep config becomes a list of points (Hydra overrides + metadata), and each
point is resolved into a planned run (exact N, D, C, run key, estimated time) before anything
trains. Everything here is a pure function of the sweep config and a `Resolver`, so plans can be
tested, printed (`sweep.dry_run=true`) and diffed without starting a process.

One sweep config describes every kind of grid by combining four optional parts:
  axes       override key -> list of values, crossed (grid; IsoFLOP sizes; seeds)
  variants   name -> overrides, one factor at a time against `base` (ablation)
  budgets    compute budgets C; each point gets D = C / (6 N) from the factory's N (IsoFLOP),
             or D = C / (exact FLOPs per token) with `budget_flops: exact`
  wsd        token budgets reached by decay branches off one stable WSD run per point
and optional hyperparameter parts (`TuneSpec`, executed by `sweeps.tuning`; rules, `sweeps.rules`):
  tune       override key -> candidate values, tried at every arm (or where `tune_at` says),
             by successive halving (`tune_halving`), from partial curves (`tune_curve`,
             `sweeps.curve_tuning`) or as a full grid
  lr_rule    train.lr per point from its N, D, C: constant | {scale, exponent, variable} |
             {scale, exponents: {N: a, D: b}} | {fitted: fit.json}
  batch_rule train.batch_tokens per point, the same forms (sweeps.rules)
and `seeds`: S seeds (0..S-1, through `train.seed`) of every final cell: each point of an
untuned sweep; the chosen runs and transfers of a tuned one (its candidates train seed 0).

Compute convention. A budget C is in the FLOPs that `budget_flops` names: `6nd` (default, the
Kaplan/Chinchilla approximation C = 6 N_nonembed D, so D = C / (6 N)) or `exact` (the exact
training FLOPs of `models.accounting.flops_per_token(...).exact` at the config's seq_len, F per
token, so D = C / F). At the small reference sizes F is 1.45-4.6 x 6N (the LM head is 12-63% of
the forward count at V 1024), so a `6nd` budget buys 1.45-4.6x more machine FLOPs than C says
and a `6nd`-optimal size is optimal for a cost the machine does not pay. Every C the plan shows
or records carries its convention: `PlannedRun.c` is 6 N D, `PlannedRun.c_exact` is F D, and
`budget_flops` says which of the two the budget fixed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sweeps.config import SweepConfig, TuneSpec, is_number
from sweeps.errors import PlanError
from sweeps.points import (
    BUDGET_FLOPS,
    LADDER_KEYS,
    SEED_KEY,
    SIZE_KEY,
    TOKENS_KEY,
    CheckpointPath,
    PlannedRun,
    Point,
    Resolver,
    RunFacts,
    format_value,
    seed_override,
)
from sweeps.rules import Rule

# ValueErrors of a point's model that no shape or size explains (a bad value in an axis or a
# variant): the sweep fails; other model errors (a size the ladder cannot reach, heads that do
# not divide d_model) skip the point.
NOT_A_VALUE = (
    "must be a positive number",
    "must be a positive integer",
    "expected a finite number",
    "must be one of",
    "must be true or false",
    "must be a number in",
    "must be in [0, 1)",
)


@dataclass(frozen=True)
class SweepSpec:
    """What to cross. `fixed` holds overrides shared by every point (e.g. data.vocab_size)."""

    name: str
    axes: dict[str, list[Any]] = field(default_factory=dict)
    variants: dict[str, dict[str, Any]] = field(default_factory=lambda: {"base": {}})
    budgets: list[float] = field(default_factory=list)
    # what a budget counts: "6nd" (D = C / 6N) or "exact" (D = C / exact FLOPs per token)
    budget_flops: str = "6nd"
    # IsoFLOP only: run the points whose D/N lies in [lo, hi] (the neighbourhood of the optimum
    # a parabola needs); the far wings are listed as skipped. None: every point runs.
    tokens_per_param: tuple[float, float] | None = None
    wsd_tokens: list[float] = field(default_factory=list)
    wsd_decay: float = 0.2
    fixed: dict[str, Any] = field(default_factory=dict)
    tune: TuneSpec | None = None
    lr_rule: Rule | None = None  # train.lr per point from its N, D, C (sweeps.rules)
    batch_rule: Rule | None = None  # train.batch_tokens per point, the same way
    seeds: int = 1  # seeds 0..seeds-1 of every final cell (not of tuning candidates)

    @property
    def kind(self) -> str:
        parts = ["isoflop" if self.budgets else "wsd" if self.wsd_tokens else "grid"]
        if set(self.variants) != {"base"}:
            parts.append("ablation")
        if self.tune:
            parts.append("tuned")
        return "+".join(parts)

    def __post_init__(self) -> None:
        for key, values in self.axes.items():
            if not isinstance(values, (list, tuple)) or not values:
                raise PlanError(
                    f"sweep.axes.{key}: expected a non-empty list of values, got {values!r}"
                )
        if len(set(self.wsd_tokens)) != len(self.wsd_tokens):  # a branch as long as its stable run
            raise PlanError(f"sweep.wsd.tokens: a value is listed twice in {self.wsd_tokens}")
        if any(t <= 0 for t in self.wsd_tokens):
            raise PlanError(
                f"sweep.wsd.tokens: token budgets must be positive, got {self.wsd_tokens}"
            )
        if any(c <= 0 for c in self.budgets):
            raise PlanError(
                f"sweep.budgets: compute budgets must be positive FLOPs, got {self.budgets}"
            )
        if not isinstance(self.budget_flops, str) or self.budget_flops not in BUDGET_FLOPS:
            raise PlanError(
                f"sweep.budget_flops: expected one of {', '.join(BUDGET_FLOPS)} (the FLOPs a "
                f"budget C counts), got {self.budget_flops!r}"
            )
        if self.budget_flops != "6nd" and not self.budgets:
            raise PlanError("sweep.budget_flops only applies to IsoFLOP sweeps (budgets)")
        if self.tokens_per_param is not None:
            self._check_tokens_per_param()
        if not 0.0 < self.wsd_decay < 1.0:
            raise PlanError(f"sweep.wsd.decay: expected a fraction in (0, 1), got {self.wsd_decay}")
        object.__setattr__(self, "axes", {k: list(v) for k, v in self.axes.items()})

    def _check_tokens_per_param(self) -> None:
        tpp = self.tokens_per_param
        if (
            not isinstance(tpp, (list, tuple))
            or len(tpp) != 2
            or not all(is_number(v) for v in tpp)
            or not 0 < tpp[0] < tpp[1]
        ):
            raise PlanError(
                f"sweep.tokens_per_param: expected [lo, hi] with 0 < lo < hi, got {tpp!r}"
            )
        if not self.budgets:
            raise PlanError("sweep.tokens_per_param only applies to IsoFLOP sweeps (budgets)")
        object.__setattr__(self, "tokens_per_param", (float(tpp[0]), float(tpp[1])))

    @classmethod
    def from_config(
        cls, config: SweepConfig, cli_axes: Mapping[str, list] | None = None
    ) -> SweepSpec:
        """The plan of a checked sweep section, with the axes the command line sweeps
        (`model=a,b`) added to the file's."""
        for key in cli_axes or {}:
            if key in config.axes:
                raise PlanError(f"{key} is swept on the command line and in sweep.axes; drop one")
        spec = cls(
            name=config.name,
            axes={**config.axes, **(cli_axes or {})},
            variants=config.variants,
            budgets=config.budgets,
            budget_flops=config.budget_flops,
            tokens_per_param=config.tokens_per_param,
            wsd_tokens=config.wsd_tokens,
            wsd_decay=config.wsd_decay,
            fixed=config.fixed,
            tune=config.tune,
            lr_rule=config.lr_rule,
            batch_rule=config.batch_rule,
            seeds=config.seeds,
        )
        if not (
            spec.axes
            or set(spec.variants) != {"base"}
            or spec.budgets
            or spec.wsd_tokens
            or spec.tune
        ):
            raise PlanError(
                "sweep.axes: nothing to sweep (no axes, variants, budgets, wsd.tokens or tune): the "
                "sweep would train one default point; add an axis such as model.size: [1e6, 3e6]"
            )
        return spec

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> SweepSpec:
        """From the plan fields of a sweep section (a plain dict), checked as the sweeper does."""
        return cls.from_config(SweepConfig.from_dict({**d, "name": name}))

    def check_conflicts(self, cli_keys: Sequence[str] = ()) -> None:
        """Fail before anything starts when two sources set the same knob ambiguously."""
        swept = list(self.axes)
        sources: dict[str, str] = {}
        for key in swept:
            sources[key] = "sweep.axes"
        for key in self.fixed:
            if key in sources:
                raise PlanError(f"{key} is both swept (sweep.axes) and fixed (sweep.fixed)")
            sources[key] = "sweep.fixed"
        for key in cli_keys:
            if key in sources:
                raise PlanError(
                    f"{key} is set on the command line but {sources[key]} of sweep '{self.name}' "
                    "already sets it; drop one of them"
                )
            sources[key] = "the command line"
        for vname, over in self.variants.items():
            for key in over:
                if key in sources:
                    raise PlanError(
                        f"ablation variant '{vname}' overrides {key}, which {sources[key]} "
                        "already sets; a variant must change an axis nobody else sweeps"
                    )
        all_keys = set(sources) | {k for over in self.variants.values() for k in over}
        swept_keys = set(self.axes) | {k for over in self.variants.values() for k in over}
        for key in sorted(swept_keys):
            if key.startswith(("tracking.", "paths.")):
                raise PlanError(
                    f"{key}: where a sweep records and checkpoints is one place for all its "
                    "points; set it in sweep.fixed or on the command line, not per point"
                )
        if SIZE_KEY in all_keys:
            clash = sorted(k for k in LADDER_KEYS if k in all_keys)
            if clash:
                raise PlanError(
                    f"{SIZE_KEY} and {', '.join(clash)} are both set: the size ladder chooses "
                    "the shape from model.size; sweep either sizes or explicit shapes"
                )
        if self.budgets and self.wsd_tokens:
            raise PlanError("sweep.budgets (IsoFLOP) and sweep.wsd (branches) cannot be combined")
        if (self.budgets or self.wsd_tokens) and TOKENS_KEY in all_keys:
            what = "sweep.budgets" if self.budgets else "sweep.wsd.tokens"
            raise PlanError(
                f"{TOKENS_KEY} is set by {sources.get(TOKENS_KEY, 'a variant')} but {what} "
                "already determines every point's token budget"
            )
        if self.wsd_tokens and any("train.schedule" in o for o in [self.fixed, self.axes]):
            raise PlanError("sweep.wsd sets train.schedule=wsd itself; remove train.schedule")
        self._check_rules(sources, all_keys)
        tuned = set(self.tune.grid) if self.tune else set()
        if self.seeds > 1 and SEED_KEY in all_keys | tuned:
            where = "sweep.tune" if SEED_KEY in tuned else sources.get(SEED_KEY, "a variant")
            raise PlanError(
                f"{SEED_KEY} is set by {where} but sweep.seeds={self.seeds} already sets it "
                "(seeds 0..S-1 of every final cell); drop one of them"
            )
        if self.tune:
            self._check_tune(sources)

    def _check_rules(self, sources: Mapping[str, str], all_keys: set[str]) -> None:
        """A rule sets its key at every point: nothing else may; and a WSD branch continues its
        stable run, so it cannot get a value of its own from its D or C."""
        tuned = set(self.tune.grid) if self.tune else set()
        for rule in (self.lr_rule, self.batch_rule):
            if rule is None:
                continue
            if rule.key in all_keys | tuned:
                where = "sweep.tune" if rule.key in tuned else sources.get(rule.key, "a variant")
                raise PlanError(
                    f"{rule.key} is set by {where} but sweep.{rule.field} already sets it"
                )
            if self.wsd_tokens and set(rule.exponents) - {"N"}:
                raise PlanError(
                    f"sweep.{rule.field}: a rule in D or C gives each WSD branch its own "
                    f"{rule.key}, but a branch continues its stable run; use a rule in N"
                )

    def _check_tune(self, sources: Mapping[str, str]) -> None:
        for key in self.tune.grid:
            if key in sources or any(key in over for over in self.variants.values()):
                where = sources.get(key, "an ablation variant")
                raise PlanError(
                    f"sweep.tune.{key}: {where} already sets it; a tuned key is chosen per arm"
                )
        if self.wsd_tokens:
            raise PlanError(
                "sweep.tune and sweep.wsd cannot be combined: tuning makes its own WSD runs"
            )
        if self.tune.halving:
            for key in ("train.schedule", "train.decay_fraction", "train.decay_start_tokens"):
                if key in sources or key in self.tune.grid:
                    raise PlanError(
                        f"{key}: successive halving trains WSD runs itself (sweep.tune_halving "
                        "sets the decay); remove it or set sweep.tune_halving: false"
                    )


def expand(spec: SweepSpec) -> list[Point]:
    """Cross variants x axes (x budgets) x seeds into points; WSD turns each into stable +
    branches (one stable run per seed). Token budgets for IsoFLOP points are filled in by
    `resolve`, which knows N. A tuned sweep's points are its arms, at seed 0: its other seeds
    are trained with the chosen values (`sweeps.tuning`)."""
    fixed = [f"{k}={format_value(v)}" for k, v in spec.fixed.items()]
    keys = list(spec.axes)
    combos = list(itertools.product(*(spec.axes[k] for k in keys))) if keys else [()]
    points: list[Point] = []
    for vname, vover in spec.variants.items():
        variant = [f"{k}={format_value(v)}" for k, v in vover.items()]
        for combo, seed in itertools.product(combos, range(1 if spec.tune else spec.seeds)):
            base = tuple(fixed + variant + [f"{k}={format_value(v)}" for k, v in zip(keys, combo)])
            base += seed_override(seed)
            if spec.budgets:
                points += [Point(base, vname, budget=c, seed=seed) for c in spec.budgets]
            elif spec.wsd_tokens:
                points += _wsd_points(spec, base, vname, len(points), seed)
            else:
                points.append(Point(base, vname, seed=seed))
    return points


def branch_start(tokens: float, decay: float, batch_tokens: int) -> int:
    """Token count where the decay branch for budget D leaves the stable run: (1 - decay) * D,
    rounded down to whole batches so the stable run saves exactly there (Hägele et al. 2024)."""
    return int((1.0 - decay) * tokens // batch_tokens) * batch_tokens


def _wsd_points(
    spec: SweepSpec, base: tuple[str, ...], vname: str, first_index: int, seed: int = 0
) -> list[Point]:
    """The stable run trains the largest budget (decaying at its end, so it *is* that budget's
    run) and saves checkpoints where the smaller budgets branch off (added by `resolve`, which
    knows the batch size). Each branch starts from one of them and decays to its own budget."""
    *smaller, largest = spec.wsd_tokens
    wsd = ("train.schedule=wsd", f"train.decay_fraction={format_value(spec.wsd_decay)}")
    stable = Point(
        base + wsd + (f"{TOKENS_KEY}={format_value(largest)}",),
        vname,
        phase="stable",
        branch_tokens=tuple(smaller),
        seed=seed,
    )
    branches = [
        Point(
            base + wsd + (f"{TOKENS_KEY}={format_value(d)}",),
            vname,
            phase="branch",
            branch_tokens=(d,),
            stable_index=first_index,
            seed=seed,
        )
        for d in smaller
    ]
    return [stable, *branches]


def resolve(
    spec: SweepSpec,
    points: Sequence[Point],
    facts_of: Resolver,
    checkpoint_path: CheckpointPath,
    flops_per_sec: float,
    overhead_s: float = 0.0,
) -> list[PlannedRun]:
    """Compose every point: exact N, the IsoFLOP token budget, run key, estimated time."""
    runs: list[PlannedRun] = []
    seen: dict[str, int] = {}
    for i, p in enumerate(points):
        run = _resolve_one(spec, i, p, runs, facts_of, checkpoint_path)
        if run.facts and not run.skip:
            if run.run_key in seen:
                run = replace(run, skip=f"same config as point #{seen[run.run_key]}")
            else:
                seen[run.run_key] = i
                est = run.facts.flops_per_token * run.tokens_trained / flops_per_sec + overhead_s
                run = replace(run, est_s=est)
        runs.append(run)
    return runs


def _resolve_one(
    spec: SweepSpec,
    i: int,
    p: Point,
    done: Sequence[PlannedRun],
    facts_of: Resolver,
    checkpoint_path: CheckpointPath,
) -> PlannedRun:
    run = PlannedRun(
        i,
        p.overrides,
        p.variant,
        p.phase,
        None,
        p.budget,
        stable_index=p.stable_index,
        budget_flops=spec.budget_flops,
        seed=p.seed,
    )
    overrides, start = p.overrides, 0
    try:
        if p.budget is not None:
            tokens, shape, skip = _isoflop_tokens(spec, p.budget, overrides, facts_of)
            if skip:
                return replace(run, facts=shape, skip=skip)
            overrides = overrides + (f"{TOKENS_KEY}={tokens}",)
        if p.phase == "branch":
            stable = done[p.stable_index]
            start, skip = _branch_start_of(spec, p, stable)
            if skip:
                return replace(run, skip=skip)
            overrides = overrides + (f"train.init_from={checkpoint_path(stable.run_key, start)}",)
        facts = facts_of(overrides)
    except PlanError:
        raise  # a config error that no point can avoid: stop before anything starts
    except ValueError as e:
        reason = str(e).splitlines()[0]
        if any(m in reason for m in NOT_A_VALUE):  # a value no model has, not a shape
            raise PlanError(f"{reason} (point #{i}: {' '.join(p.overrides)})") from None
        return replace(run, skip=reason)
    if p.phase == "stable" and p.branch_tokens:
        saves = [branch_start(d, spec.wsd_decay, facts.batch_tokens) for d in p.branch_tokens]
        saves = [t for t in saves if t > 0]  # a branch below one batch is skipped instead
        # not part of the run key: the stable run is the largest budget's ordinary WSD run
        overrides = overrides + (f"train.save_at_tokens={format_value(saves)}",)
    return replace(run, overrides=overrides, facts=facts, tokens_trained=facts.tokens - start)


def _isoflop_tokens(
    spec: SweepSpec, budget: float, overrides: tuple[str, ...], facts_of: Resolver
) -> tuple[int, RunFacts, str | None]:
    """(D for budget C in whole batches, the point's facts, None), or (0, the facts at the
    ideal D without a run key, why the point is skipped)."""
    shape = facts_of(overrides)  # N and FLOPs per token do not depend on D
    if spec.budget_flops == "exact":
        per_token, formula = shape.flops_per_token, "C/F_exact"
    else:
        per_token, formula = shape.six_n, "C/(6N)"
    ideal_d = budget / per_token
    # a skipped point shows the D it would have had; it has no config, hence no run key
    unplanned = replace(shape, tokens=ideal_d, run_key="")
    if ideal_d < shape.batch_tokens:
        return (
            0,
            unplanned,
            (
                f"D = {formula} = {ideal_d:.3g} tokens is below one batch "
                f"({shape.batch_tokens} tokens)"
            ),
        )
    ratio = ideal_d / shape.n_active
    if spec.tokens_per_param and not (
        spec.tokens_per_param[0] <= ratio <= spec.tokens_per_param[1]
    ):
        lo, hi = spec.tokens_per_param
        return (
            0,
            unplanned,
            (f"D/N = {ratio:.3g} is outside sweep.tokens_per_param [{lo:g}, {hi:g}]"),
        )
    # whole batches, so the run trains exactly the planned D
    return round(ideal_d / shape.batch_tokens) * shape.batch_tokens, shape, None


def _branch_start_of(spec: SweepSpec, p: Point, stable: PlannedRun) -> tuple[int, str | None]:
    """(tokens where branch `p` leaves its stable run, None), or (0, why it is skipped)."""
    if stable.skip:
        return 0, f"its stable run #{stable.index} is skipped"
    start = branch_start(p.branch_tokens[0], spec.wsd_decay, stable.facts.batch_tokens)
    if start <= 0:
        return 0, "its branch point (1 - decay) * D is below one batch"
    return start, None


def wsd_compute(runs: Sequence[PlannedRun]) -> tuple[float, float]:
    """(6ND FLOPs the WSD plan spends, FLOPs independent cosine runs of the same budgets would)."""
    spent = sum(r.c_spent for r in runs if r.phase in ("stable", "branch") and not r.skip)
    cosine = sum(r.c for r in runs if r.phase in ("stable", "branch") and not r.skip)
    return spent, cosine


def total_estimate(runs: Sequence[PlannedRun], jobs: int) -> float:
    """Wall seconds for the runnable points on `jobs` parallel slots (longest-first packing)."""
    slots = [0.0] * max(1, jobs)
    for est in sorted((r.est_s for r in runs if not r.skip), reverse=True):
        slots[slots.index(min(slots))] += est
    return max(slots)


def waves(runs: Sequence[PlannedRun]) -> list[list[PlannedRun]]:
    """Launch order: everything without a dependency first, then WSD branches."""
    first = [r for r in runs if r.phase != "branch"]
    second = [r for r in runs if r.phase == "branch"]
    return [w for w in (first, second) if w]


def format_count(x: float) -> str:
    """A count for tables, 3 significant digits with K/M/B/T (thousand .. trillion): 3.1M,
    2.4B, 20T (cf. `training.monitor.format_si`, k/M/G for progress lines)."""
    if x == 0 or not math.isfinite(x):
        return str(x)
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"
