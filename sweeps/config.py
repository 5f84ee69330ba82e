"""The sweep file's schema: the `sweep:` section of `python -m sweeps.run`'s config.

`conf/run.yaml` composes a sweep file (`conf/sweep/NAME.yaml`) on top of `sweep_schema`, which
`hydra_plugins/scaling_lab_schema` stores from `SweepConfig`: the settings of how a sweep runs
(`SETTINGS`, at their defaults here; a file or the command line changes them without `+`). The
fields of what a sweep crosses are a file's own (on the command line: `+sweep.FIELD=...`).

`SweepConfig.from_dict` is the one check of a composed `sweep` section, run by the sweeper
before anything launches: an unknown key or a value of the wrong type or shape is one line
naming the field (`PlanError`). What the fields mean together (a budget and a token axis, a
rule and a tuned key) is `sweeps.plan.SweepSpec`'s to check.

Plan fields (the docstring of `sweeps.plan` says what each does):
  axes, variants, budgets, budget_flops, tokens_per_param, wsd: {tokens, decay}, fixed, seeds
  tune, tune_at, tune_halving: {rungs, decay} | false, tune_curve: {rule, runs, decay}
  lr_rule, batch_rule (`sweeps.rules`)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeps.errors import PlanError
from sweeps.points import LADDER_KEYS, SIZE_KEY, TOKENS_KEY, format_value
from sweeps.rules import Rule, rule_from_sweep
from training.config import ConfigError, as_int

# Where a tuning grid is tried: at every arm, or at the smallest token budget of each
# variant x size (the chosen values then train that size's other budgets).
TUNE_AT = ("every_arm", "smallest_budget")
CURVE_RULES = ("staged", "predicted")  # sweep.tune_curve.rule
# Successive halving: rungs as fractions of an arm's stable (pre-decay) phase.
DEFAULT_RUNGS = (0.125, 0.25, 0.5)


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


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: Any, name: str) -> float:
    """A finite number; a numeric string ("1e12", as YAML 1.1 reads it) counts."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if not is_number(value):
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
class Throughput:
    """For the plan's estimated times; measured on a 2-core CPU (the demo, jobs=2)."""

    flops_per_sec: float = 1.5e10  # effective training FLOP/s per job (exact fwd+bwd / wall)
    overhead_s: float = 10.0  # per run: model build, MLflow records, evaluations, checkpoints


def _setting(default: Any, help: str, factory: bool = False) -> Any:
    """A SweepConfig field with its one-line meaning (`help`) for the generated reference."""
    if factory:
        return field(default_factory=default, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class SweepConfig:
    """A composed `sweep:` section, checked. The first seven fields are the settings every
    composed sweep has (`SETTINGS`); the others are what `sweeps.plan.SweepSpec` crosses, parsed
    from the file's keys (`FILE_FIELDS`: `wsd` gives wsd_tokens and wsd_decay, `tune` with
    `tune_at`, `tune_halving` and `tune_curve` gives `tune`)."""

    # Each field's `help` is its line in docs/sweep-reference.md (`python -m sweeps.reference`).
    name: str = _setting("${hydra.runtime.choices.sweep}", "the sweep file's name")
    jobs: int = _setting(1, "points trained at once (local: processes, cores split between them)")
    dry_run: bool = _setting(
        False, "print the plan table and stop: nothing trained, no runs created"
    )
    retry_failed: bool = _setting(False, "FAILED points are skipped unless true")
    interleave: bool = _setting(
        False, "start the variants' points in turn (A B, B A, ...): sweeps/order.py"
    )
    throughput: Throughput = _setting(
        Throughput, "the rate the plan's estimated times divide by", factory=True
    )
    report: dict[str, Any] | None = _setting(
        None, "{out: DIR, args: [...]}: python -m analysis.report on the sweep when it ends"
    )
    axes: dict[str, list[Any]] = _setting(
        dict, "override key -> values; every combination is a point", factory=True
    )
    variants: dict[str, dict[str, Any]] = _setting(
        lambda: {"base": {}},
        "name -> overrides; every variant runs every point (ablation, one factor at a time)",
        factory=True,
    )
    budgets: list[float] = _setting(
        list, "IsoFLOP compute budgets C: each size trains D = C / (FLOPs per token)", factory=True
    )
    budget_flops: str = _setting(
        "6nd", "the FLOPs a budget C counts: 6 N D, or the model's exact FLOPs per token"
    )
    tokens_per_param: Any = _setting(
        None, "[lo, hi]: IsoFLOP points with D / N outside are skipped (budgets only)"
    )
    wsd_tokens: list[float] = _setting(
        list, "token budgets from one stable WSD run per size and a decay branch each", factory=True
    )
    wsd_decay: float = _setting(0.2, "the fraction of each WSD budget spent decaying")
    fixed: dict[str, Any] = _setting(
        dict, "override key -> value, set on every point", factory=True
    )
    tune: TuneSpec | None = _setting(
        None, "override key -> candidate values (their product), tried at each arm (tune_at)"
    )
    lr_rule: Rule | None = _setting(None, "sets each point's train.lr from a power law in N, D, C")
    batch_rule: Rule | None = _setting(
        None, "sets each point's train.batch_tokens from a power law in N, D, C"
    )
    seeds: int = _setting(1, "seeds 0..S-1 of every final cell (train.seed)")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SweepConfig:
        """Check `d` (a composed `sweep` section as plain values) field by field."""
        d = dict(d)
        jobs = _jobs(d.get("jobs", 1))
        if not isinstance(d.get("interleave", False), bool):
            raise PlanError(f"sweep.interleave: expected true or false, got {d['interleave']!r}")
        check_settings(d)
        unknown = set(d) - set(FILE_FIELDS) - set(SETTINGS)
        if unknown:
            allowed = ", ".join(sorted({*FILE_FIELDS, *SETTINGS}))
            raise PlanError(f"sweep.{sorted(unknown)[0]}: unknown field; allowed: {allowed}")
        wsd = _mapping(d.get("wsd") or {}, "sweep.wsd", "tokens: [...], decay: f")
        unknown = set(wsd) - {"tokens", "decay"}
        if unknown:
            raise PlanError(
                f"sweep.wsd: unknown field(s) {sorted(unknown)}; allowed: tokens, decay"
            )
        variants = _mapping(
            d.get("variants") or {"base": {}}, "sweep.variants", "name -> overrides"
        )
        throughput = {k: float(v) for k, v in (d.get("throughput") or {}).items()}
        return cls(
            name=str(d.get("name", "")),
            jobs=jobs,
            dry_run=bool(d.get("dry_run", False)),
            retry_failed=bool(d.get("retry_failed", False)),
            interleave=bool(d.get("interleave", False)),
            throughput=Throughput(**throughput),
            report=d.get("report"),
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


# The settings of how a sweep runs: in every composed sweep, at SweepConfig's defaults.
SETTINGS = ("name", "jobs", "dry_run", "retry_failed", "interleave", "throughput", "report")
# The keys a sweep file may add (what it crosses).
FILE_FIELDS = (
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
)


def schema_defaults() -> dict[str, Any]:
    """The settings at their defaults: the `sweep` node of the config `sweep_schema`."""
    defaults = {f.name: f.default for f in dataclasses.fields(SweepConfig) if f.name in SETTINGS}
    return {**defaults, "throughput": dataclasses.asdict(Throughput())}


def _jobs(value: Any) -> int:
    try:
        jobs = as_int(value, "sweep.jobs")
    except ConfigError as e:
        raise PlanError(str(e)) from None
    if jobs < 1:
        raise PlanError(f"sweep.jobs: must be >= 1, got {jobs}")
    return jobs
