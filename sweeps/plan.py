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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from models.values import int_if_integral
from sweeps.errors import PlanError
from sweeps.rules import Rule, rule_from_sweep

# Keys the size ladder chooses itself: sweeping them next to `model.size` is ambiguous.
LADDER_KEYS = ("model.n_layers", "model.d_model")
TOKENS_KEY = "train.tokens"
SIZE_KEY = "model.size"
SPEC_FIELDS = {
    "axes",
    "variants",
    "budgets",
    "budget_flops",
    "tokens_per_param",
    "wsd",
    "fixed",
    "tune",
    "tune_at",
    "tune_halving",
    "tune_curve",
    "lr_rule",
    "batch_rule",
    "seeds",
}
# Where a tuning grid is tried: at every arm, or at the smallest token budget of each
# variant x size (the chosen values then train that size's other budgets).
TUNE_AT = ("every_arm", "smallest_budget")
CURVE_RULES = ("staged", "predicted")  # sweep.tune_curve.rule
# Successive halving: rungs as fractions of an arm's stable (pre-decay) phase.
DEFAULT_RUNGS = (0.125, 0.25, 0.5)
LR_KEY = "train.lr"
SEED_KEY = "train.seed"
BATCH_KEY = "train.batch_tokens"
# The FLOP count an IsoFLOP budget C is measured in (see the module docstring).
BUDGET_FLOPS = ("6nd", "exact")
# How the dry-run table and the summary name each convention next to a C.
C_LABEL = {"6nd": "6ND", "exact": "exact"}


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


def format_value(value: Any) -> str:
    """Hydra override text for a value: 3e6 -> 3000000, lists -> [a,b], None -> null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and abs(value) >= 1:  # 0.0 stays a float for Hydra
        return str(int_if_integral(value))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    return str(value)


@dataclass(frozen=True)
class CurveSpec:
    """`sweep.tune_curve`: {rule: staged | predicted, runs: R, decay: f}. Every candidate trains
    a prefix of the shared WSD stable phase, a loss-curve law predicts each one's loss from its
    prefix. `staged` (the default): rungs t, 2t, 4t; at each the candidates whose predicted
    finals are not separated from the best's go on (at most half), and the best decays to the
    budget once the others are separated or at the last rung; R (default 3) bounds the worst
    case per arm. `predicted`: one rung sized so the arm costs R runs (default 2), the
    predicted best decays (`analysis.curve_tuning`)."""

    runs: float = 3.0
    decay: float = 0.2
    rule: str = "staged"

    @classmethod
    def from_dict(cls, value: Any, halving: Any) -> CurveSpec:
        if halving is not None:
            raise PlanError(
                "sweep.tune_curve: a tuning strategy of its own; remove sweep.tune_halving"
            )
        if value is True:
            value = {}
        shape = "{rule: staged|predicted, runs: R, decay: f}, or true"
        block = _mapping(value, "sweep.tune_curve", shape)
        unknown = set(block) - {"runs", "decay", "rule"}
        if unknown:
            raise PlanError(
                f"sweep.tune_curve.{sorted(unknown)[0]}: unknown field; allowed: rule, runs, decay"
            )
        rule = block.get("rule", "staged")
        if rule not in CURVE_RULES:
            raise PlanError(
                f"sweep.tune_curve.rule: unknown rule {rule!r}; allowed: {', '.join(CURVE_RULES)}"
            )
        default_runs = 3.0 if rule == "staged" else 2.0
        runs = _number(block.get("runs", default_runs), "sweep.tune_curve.runs")
        decay = _number(block.get("decay", 0.2), "sweep.tune_curve.decay")
        if runs <= 1.0:
            raise PlanError(f"sweep.tune_curve.runs: expected more than 1 run per arm, got {runs}")
        if not 0.0 < decay < 1.0:
            raise PlanError(f"sweep.tune_curve.decay: expected a fraction in (0, 1), got {decay}")
        return cls(runs, decay, rule)


@dataclass(frozen=True)
class TuneSpec:
    """`sweep.tune` (key -> candidate values; candidates = their product), `sweep.tune_at` and
    `sweep.tune_halving` ({rungs, decay} or false: every candidate trains the full arm)."""

    grid: dict[str, list[Any]]
    at: str = "every_arm"
    halving: bool = True
    rungs: tuple[float, ...] = DEFAULT_RUNGS
    decay: float = 0.2  # the WSD decay fraction every tuned run ends with
    # `sweep.tune_curve`: halving's segments with one rung, ranked by a curve law's prediction
    curve: CurveSpec | None = None

    def __post_init__(self) -> None:
        for key, values in self.grid.items():
            if not isinstance(values, (list, tuple)) or not values:
                raise PlanError(
                    f"sweep.tune.{key}: expected a non-empty list of values, got {values!r}"
                )
            if len({format_value(v) for v in values}) != len(values):
                raise PlanError(f"sweep.tune.{key}: a value is listed twice in {list(values)}")
            if key in (TOKENS_KEY, SIZE_KEY, *LADDER_KEYS) or key.startswith(
                ("tracking.", "paths.", "sweep.")
            ):
                raise PlanError(
                    f"sweep.tune.{key}: not tunable (it defines the arm or where records go); "
                    "tune training hyperparameters such as train.lr or train.warmup"
                )
        if self.at not in TUNE_AT:
            raise PlanError(
                f"sweep.tune_at: unknown rule {self.at!r}; allowed: {', '.join(TUNE_AT)}"
            )
        rungs = self.rungs
        if not rungs or any(not 0 < r < 1 for r in rungs) or list(rungs) != sorted(set(rungs)):
            raise PlanError(
                f"sweep.tune_halving.rungs: expected increasing fractions in (0, 1) of the stable "
                f"phase, got {list(rungs)}"
            )
        if not 0.0 < self.decay < 1.0:
            raise PlanError(
                f"sweep.tune_halving.decay: expected a fraction in (0, 1), got {self.decay}"
            )
        object.__setattr__(self, "grid", {k: list(v) for k, v in self.grid.items()})

    @property
    def candidates(self) -> list[dict[str, Any]]:
        keys = list(self.grid)
        return [dict(zip(keys, c)) for c in itertools.product(*(self.grid[k] for k in keys))]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TuneSpec | None:
        """From `sweep.tune`, `sweep.tune_at` and `sweep.tune_halving`; None without a grid."""
        tune, at, halving = d.get("tune"), d.get("tune_at"), d.get("tune_halving")
        if tune is None:
            for name, value in (
                ("tune_at", at),
                ("tune_halving", halving),
                ("tune_curve", d.get("tune_curve")),
            ):
                if value is not None:
                    raise PlanError(f"sweep.{name}: only applies with sweep.tune (a grid)")
            return None
        if not isinstance(tune, Mapping) or not tune:
            raise PlanError(
                f"sweep.tune: expected a mapping of override key -> values, got {tune!r}"
            )
        grid = {str(key): values for key, values in tune.items()}
        at = "every_arm" if at is None else at
        if d.get("tune_curve") is not None:
            curve = CurveSpec.from_dict(d["tune_curve"], halving)
            return cls(grid, at, True, decay=curve.decay, curve=curve)
        if halving is False:
            return cls(grid, at, halving=False)
        if halving is None:
            halving = {}
        if not isinstance(halving, Mapping):
            raise PlanError(
                f"sweep.tune_halving: expected {{rungs: [...], decay: f}} or false, got {halving!r}"
            )
        unknown = set(halving) - {"rungs", "decay"}
        if unknown:
            raise PlanError(
                f"sweep.tune_halving.{sorted(unknown)[0]}: unknown field; allowed: rungs, decay"
            )
        rungs = tuple(
            _numbers(halving.get("rungs", list(DEFAULT_RUNGS)), "sweep.tune_halving.rungs")
        )
        return cls(
            grid, at, True, rungs, _number(halving.get("decay", 0.2), "sweep.tune_halving.decay")
        )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: Any, name: str) -> float:
    """A finite number; a numeric string ("1e12", as YAML 1.1 reads it) counts."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if not _is_number(value):
        raise PlanError(f"{name}: expected a finite number, got {value!r}")
    return float(value)


def _numbers(value: Any, name: str) -> list[float]:
    """A list of finite numbers, each named `name[i]` when it is not one."""
    if not isinstance(value, (list, tuple)):
        raise PlanError(f"{name}: expected a list of numbers, got {value!r}")
    return [_number(v, f"{name}[{i}]") for i, v in enumerate(value)]


def _seeds(value: Any) -> int:
    """`sweep.seeds`: a whole number >= 1 (absent: 1)."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(
            f"sweep.seeds: expected a whole number of seeds >= 1 (seeds 0..S-1 of every final "
            f"cell), got {value!r}"
        )
    return value


def seed_override(seed: int) -> tuple[str, ...]:
    """What seed k of a point adds to its overrides: nothing for seed 0 (the config's seed, so
    its run key is that of the sweep without `seeds`), else `train.seed=k`."""
    return (f"{SEED_KEY}={seed}",) if seed else ()


def _mapping(value: Any, name: str, what: str) -> dict:
    if not isinstance(value, Mapping):
        raise PlanError(f"{name}: expected a mapping ({what}), got {value!r}")
    return dict(value)


def _overrides(value: Any, name: str) -> dict:
    """Override key -> value; a nested mapping is no override Hydra can parse."""
    out = _mapping(value, name, "override key -> value")
    for key, v in out.items():
        if isinstance(v, Mapping):
            first = next(iter(v), "key")
            raise PlanError(
                f"{name}.{key}: a nested mapping ({dict(v)!r}); write each key dotted, "
                f"{key}.{first}: ..."
            )
    return out


def check_settings(sweep: Mapping[str, Any]) -> None:
    """The execution settings next to the plan fields: `dry_run` and `retry_failed` are
    booleans (any string was true), `throughput` finite numbers the estimates divide by."""
    for key in ("dry_run", "retry_failed"):
        if key in sweep and not isinstance(sweep[key], bool):
            raise PlanError(f"sweep.{key}: expected true or false, got {sweep[key]!r}")
    throughput = _mapping(
        sweep.get("throughput") or {}, "sweep.throughput", "flops_per_sec, overhead_s"
    )
    _known(throughput, "sweep.throughput", ("flops_per_sec", "overhead_s"))
    for key, low in (("flops_per_sec", "> 0"), ("overhead_s", ">= 0")):
        name = f"sweep.throughput.{key}"
        if key in throughput:
            value = _number(throughput[key], name)
            if value < 0 or (value == 0 and low == "> 0"):
                raise PlanError(f"{name}: must be {low}, got {throughput[key]!r}")
    # the plan fields the driver reads before SweepSpec checks them (it merges command-line axes)
    _mapping(sweep.get("axes") or {}, "sweep.axes", "override key -> values")
    _check_report(sweep.get("report"))


def _known(d: Mapping, name: str, allowed: Sequence[str]) -> None:
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise PlanError(f"{name}.{unknown[0]}: unknown field; allowed: {', '.join(allowed)}")


def _check_report(report: Any) -> None:
    """`sweep.report`, read only after the last point trained: its shape is checked first."""
    if report is None:
        return
    report = _mapping(report, "sweep.report", "out: FOLDER, args: [...]")
    _known(report, "sweep.report", ("out", "args"))
    out = report.get("out")
    if not isinstance(out, str) or not out.strip():
        raise PlanError(f"sweep.report.out: expected the report's folder, got {out!r}")
    if Path(out).expanduser().exists() and not Path(out).expanduser().is_dir():
        raise PlanError(f"sweep.report.out: {out} is a file, not a folder")
    args = report.get("args") or []
    if not isinstance(args, (list, tuple)) or any(isinstance(a, (list, dict)) for a in args):
        raise PlanError(
            f"sweep.report.args: expected a list of analysis.report arguments, got {args!r}"
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
            or not all(_is_number(v) for v in tpp)
            or not 0 < tpp[0] < tpp[1]
        ):
            raise PlanError(
                f"sweep.tokens_per_param: expected [lo, hi] with 0 < lo < hi, got {tpp!r}"
            )
        if not self.budgets:
            raise PlanError("sweep.tokens_per_param only applies to IsoFLOP sweeps (budgets)")
        object.__setattr__(self, "tokens_per_param", (float(tpp[0]), float(tpp[1])))

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> SweepSpec:
        """Build from the plan fields of `cfg.sweep` (a plain dict); unknown fields are ignored
        here because execution settings (jobs, dry_run...) live next to them."""
        wsd = _mapping(d.get("wsd") or {}, "sweep.wsd", "tokens: [...], decay: f")
        unknown = set(wsd) - {"tokens", "decay"}
        if unknown:
            raise PlanError(
                f"sweep.wsd: unknown field(s) {sorted(unknown)}; allowed: tokens, decay"
            )
        variants = _mapping(
            d.get("variants") or {"base": {}}, "sweep.variants", "name -> overrides"
        )
        spec = cls(
            name=name,
            axes=_mapping(d.get("axes") or {}, "sweep.axes", "override key -> values"),
            variants={
                str(k): _overrides(v or {}, f"sweep.variants.{k}") for k, v in variants.items()
            },
            budgets=_numbers(d.get("budgets") or [], "sweep.budgets"),
            budget_flops="6nd" if d.get("budget_flops") is None else d["budget_flops"],
            tokens_per_param=d.get("tokens_per_param"),
            wsd_tokens=sorted(_numbers(wsd.get("tokens") or [], "sweep.wsd.tokens")),
            wsd_decay=_number(wsd.get("decay", 0.2), "sweep.wsd.decay"),
            fixed=_overrides(d.get("fixed") or {}, "sweep.fixed"),
            tune=TuneSpec.from_dict(d),
            lr_rule=rule_from_sweep("lr_rule", d.get("lr_rule")),
            batch_rule=rule_from_sweep("batch_rule", d.get("batch_rule")),
            seeds=_seeds(d.get("seeds")),
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


@dataclass(frozen=True)
class Point:
    """One training run before resolution: overrides plus what the plan needs to know."""

    overrides: tuple[str, ...]
    variant: str = "base"
    budget: float | None = None  # IsoFLOP compute budget C (FLOPs)
    phase: str = "run"  # run | stable | branch
    # stable: the budgets branching off it; branch: its own budget
    branch_tokens: tuple[float, ...] = ()
    stable_index: int | None = None  # for branches: index of the stable point they start from
    seed: int = 0  # sweep.seeds: which seed of its cell (train.seed, overridden when not 0)


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


@dataclass(frozen=True)
class RunFacts:
    """What composing one point's config tells the plan (see `sweeps.driver.facts`)."""

    run_key: str
    arch: str
    n_layers: int
    d_model: int
    n_params: int
    n_params_nonembed: int
    flops_per_token: float  # exact fwd+bwd FLOPs per training token
    tokens: float  # the composed train.tokens
    batch_tokens: int
    # 6N FLOPs per token where that is not 6 x n_params_nonembed: encoder_decoder, whose stacks
    # see different token counts (6 (N_enc S + N_dec T) per sequence of seq_len text tokens)
    flops_6nd_per_token: float | None = None
    memory_gb: float | None = None  # models.accounting.memory_estimate of one process's step
    device_memory_gb: float | None = None  # what it must fit: train.device_memory_gb or CUDA's
    seq_len: int = 0  # train.seq_len (a tuned batch must be whole sequences); 0: not known
    memory_note: str = ""  # training.memory_plan.Verdict.note: over the device, and what fits

    @property
    def six_n(self) -> float:
        """The 6ND convention's FLOPs per token: 6 N, or a family's own count."""
        return self.flops_6nd_per_token or 6.0 * self.n_params_nonembed


# overrides -> facts; raises ValueError when the factory cannot build the config (e.g. a size
# the ladder cannot reach), which becomes the point's skip reason.
Resolver = Callable[[Sequence[str]], RunFacts]
# (stable run key, token count) -> checkpoint path a WSD branch starts from
CheckpointPath = Callable[[str, int], str]


@dataclass(frozen=True)
class PlannedRun:
    index: int
    overrides: tuple[str, ...]
    variant: str
    phase: str
    facts: RunFacts | None
    budget: float | None = None
    tokens_trained: float = 0.0  # tokens this process trains (a branch trains only its decay)
    stable_index: int | None = None
    est_s: float = 0.0
    skip: str | None = None  # why this point will not run
    budget_flops: str = "6nd"  # the convention `budget` is in (sweep.budget_flops)
    seed: int = 0  # which seed of its cell (sweep.seeds)

    @property
    def run_key(self) -> str:
        return self.facts.run_key if self.facts else ""

    @property
    def n(self) -> int:
        return self.facts.n_params_nonembed if self.facts else 0

    @property
    def d(self) -> float:
        return self.facts.tokens if self.facts else 0.0

    @property
    def c(self) -> float:
        """6 N D of the run as logged (a branch counts its shared stable prefix too)."""
        return self.facts.six_n * self.d if self.facts else 0.0

    @property
    def c_exact(self) -> float:
        """Exact training FLOPs of the run as logged: flops_per_token (fwd + bwd) x D."""
        return self.facts.flops_per_token * self.d if self.facts else 0.0

    @property
    def c_budgeted(self) -> float:
        """The run's C in its budget's convention: what `budget` is compared with."""
        return self.c_exact if self.budget_flops == "exact" else self.c

    @property
    def c_spent(self) -> float:
        """6 N x tokens this process actually trains: what the sweep pays for this point."""
        return self.facts.six_n * self.tokens_trained if self.facts else 0.0

    @property
    def c_exact_spent(self) -> float:
        """Exact training FLOPs of the tokens this process actually trains."""
        return self.facts.flops_per_token * self.tokens_trained if self.facts else 0.0


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
    ratio = ideal_d / shape.n_params_nonembed
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
