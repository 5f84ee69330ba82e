"""Hyperparameter rules: `sweep.lr_rule` and `sweep.batch_rule` set each point's `train.lr` and
`train.batch_tokens` from a power law in its N, D and C, written in the sweep file or fitted by
an analysis (`{fitted: fit.json}`).

A rule is a monomial, value = scale * N^a * D^b * C^c, in one variable
(`{scale, exponent, variable}`, as DeepSeek LLM's eta_opt = 0.3118 C^-0.125 and
B_opt = 0.2920 C^0.3271) or several (`{scale, exponents: {N: a, D: b}}`, as Step Law's lr in
N and D). A point's inputs: N its non-embedding parameters (the factory's), D its token budget
and C its compute budget. For an IsoFLOP point C is its budget, in the sweep's `budget_flops`
convention, and D = C / (6N) (or C / exact FLOPs per token) before rounding to whole batches;
for any other point D is its `train.tokens` and C = 6 N D. The lr is rounded to 3 significant
digits (a readable override and a stable run key); the batch to the nearest multiple of
`train.seq_len`, at least one sequence and at most D.

fit.json holds a rule under its name (`lr_rule`, `batch_rule`) in the same two forms, with
`key` (the override it sets), and optionally `ci95` and `not_identified` (shown by the dry run).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from sweeps.errors import PlanError
from sweeps.points import PlannedRun, Point, Resolver, RunFacts

VARIABLES = ("N", "D", "C")
KEYS = {"lr_rule": "train.lr", "batch_rule": "train.batch_tokens"}
FORMS = (
    "constant, {scale, exponent, variable}, {scale, exponents: {N: a, D: b}} or {fitted: fit.json}"
)


class RuledSpec(Protocol):
    """What the rules read of a sweep's plan (`sweeps.plan.SweepSpec`)."""

    lr_rule: Rule | None
    batch_rule: Rule | None
    budget_flops: str  # the convention a budget C is in: "6nd" | "exact"


@dataclass(frozen=True)
class Rule:
    """value = scale * prod(X^exponents[X]) over X in N, D, C; `field` is the sweep field."""

    field: str  # lr_rule | batch_rule
    scale: float
    exponents: dict[str, float]
    source: str  # where the numbers came from, for the dry run
    ci95: dict = field(default_factory=dict)  # a fitted rule's 95% intervals, when it has them
    not_identified: tuple[str, ...] = ()  # a fitted rule's reasons, when the data cannot tell

    @property
    def key(self) -> str:
        return KEYS[self.field]

    def raw(self, n: float, d: float, c: float) -> float:
        inputs = {"N": float(n), "D": float(d), "C": float(c)}
        return self.scale * math.prod(inputs[v] ** e for v, e in self.exponents.items())

    def formula(self) -> str:
        powers = " * ".join(f"{v}^{e:.4g}" for v, e in self.exponents.items())
        return f"{self.key} = {self.scale:.4g} * {powers}"


def rule_from_sweep(name: str, value: Any) -> Rule | None:
    """`sweep.lr_rule` / `sweep.batch_rule`; None for `constant` (the config's value)."""
    if value is None or value == "constant":
        return None
    if isinstance(value, Mapping) and set(value) == {"fitted"}:
        return rule_from_fit(name, str(value["fitted"]))
    if not isinstance(value, Mapping):
        raise PlanError(f"sweep.{name}: expected {FORMS}, got {value!r}")
    unknown = sorted(set(value) - {"scale", "exponent", "variable", "exponents"})
    if unknown:
        raise PlanError(
            f"sweep.{name}.{unknown[0]}: unknown field; allowed: scale, exponent, variable, "
            "exponents (or fitted alone)"
        )
    return _rule(name, value, f"sweep.{name}", f"sweep.{name}")


def rule_from_fit(name: str, path: str) -> Rule:
    """The rule an analysis wrote to fit.json under `name`."""
    where = f"sweep.{name}.fitted"
    try:
        fit = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise PlanError(f"{where}: cannot read {path}: {e}") from None
    rule = fit.get(name) if isinstance(fit, dict) else None
    if not isinstance(rule, dict) or "scale" not in rule:
        raise PlanError(f"{where}: {path} has no {name} {{scale, exponent(s)}}")
    if rule.get("key", KEYS[name]) != KEYS[name]:
        raise PlanError(f"{where}: {path}'s {name} sets {rule['key']}, not {KEYS[name]}")
    out = _rule(name, rule, f"{where}: {path}", f"fitted: {path}")
    names = rule.get("not_identified") or ()
    names = (names,) if isinstance(names, str) else tuple(str(r) for r in names)
    why = rule.get("why_not_identified") if isinstance(rule.get("why_not_identified"), dict) else {}
    reasons = tuple(f"{n}: {why[n]}" if n in why else n for n in names)
    ci95 = rule.get("ci95") if isinstance(rule.get("ci95"), dict) else {}
    return replace(out, ci95=ci95, not_identified=reasons)


def _rule(name: str, d: Mapping, where: str, source: str) -> Rule:
    """A Rule from {scale, exponent, variable} or {scale, exponents}; `where` names the field."""
    if ("exponent" in d) == ("exponents" in d):
        raise PlanError(f"{where}: expected one of exponent (with variable) or exponents")
    if "exponents" in d:
        exps = d["exponents"]
        if not isinstance(exps, Mapping) or not exps:
            raise PlanError(f"{where}.exponents: expected {{N: a, D: b}}, got {exps!r}")
    else:
        if name == "batch_rule" and "variable" not in d:
            raise PlanError(f"{where}.variable: required for a batch rule (N, D or C)")
        exps = {d.get("variable", "N"): d["exponent"]}
    for var in exps:
        if var not in VARIABLES:
            what = "exponents" if "exponents" in d else "variable"
            raise PlanError(f"{where}.{what}: {var!r} is not one of {', '.join(VARIABLES)}")
    scale = _finite(d["scale"], f"{where}.scale")
    if scale <= 0:
        raise PlanError(f"{where}.scale: must be > 0, got {d['scale']!r}")
    exponents = {str(v): _finite(e, f"{where}.exponent") for v, e in exps.items()}
    return Rule(name, scale, exponents, source)


def _finite(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number):
        raise PlanError(f"{name}: expected a finite number, got {value!r}")
    return number


def inputs(budget: float | None, budget_flops: str, facts: RunFacts) -> tuple[float, float, float]:
    """(N, D, C) of a point: an IsoFLOP point's from its budget, any other's from train.tokens."""
    n = float(facts.n_active)  # a MoE's active N, as analysis fits a rule in N
    if budget is None:
        return n, facts.tokens, facts.six_n * facts.tokens
    per_token = facts.flops_per_token if budget_flops == "exact" else facts.six_n
    return n, budget / per_token, budget


def lr_value(rule: Rule, n: float, d: float, c: float) -> float:
    """Three significant digits: a readable override and a stable run key."""
    return float(f"{rule.raw(n, d, c):.3g}")


def batch_value(rule: Rule, n: float, d: float, c: float, seq_len: int) -> int:
    """The nearest multiple of seq_len, within [one sequence, D]."""
    sequences = max(1, round(rule.raw(n, d, c) / seq_len))
    return min(sequences, max(1, int(d // seq_len))) * seq_len


def apply_rules(spec: RuledSpec, points: Sequence[Point], facts_of: Resolver) -> list[Point]:
    """Every point with its rules' train.batch_tokens and train.lr appended. A point whose model
    cannot be built keeps its overrides: `plan.resolve` skips it with the reason."""
    if spec.lr_rule is None and spec.batch_rule is None:
        return list(points)
    out = []
    for p in points:
        try:
            facts = facts_of(p.overrides)
        except PlanError:
            raise
        except ValueError:
            out.append(p)
            continue
        n, d, c = inputs(p.budget, spec.budget_flops, facts)
        extra = []
        if spec.batch_rule:
            batch = batch_value(spec.batch_rule, n, d, c, facts.seq_len)
            extra.append(f"{spec.batch_rule.key}={batch}")
        if spec.lr_rule:
            extra.append(f"{spec.lr_rule.key}={lr_value(spec.lr_rule, n, d, c)}")
        out.append(replace(p, overrides=(*p.overrides, *extra)))
    return out


def _intervals(ci95: Mapping) -> str:
    """{scale: [lo, hi], exponents: {N: [lo, hi]}} as `scale [lo, hi], N [lo, hi]`."""
    parts = []
    for name, value in ci95.items():
        if isinstance(value, Mapping):
            parts.append(_intervals(value))
        elif isinstance(value, (list, tuple)) and len(value) == 2:
            lo, hi = (f"{float(v):.3g}" if v is not None else "?" for v in value)
            parts.append(f"{name} [{lo}, {hi}]")
    return ", ".join(p for p in parts if p)


def _c_label(spec: RuledSpec, run: PlannedRun) -> str:
    return "exact" if run.budget is not None and spec.budget_flops == "exact" else "6ND"


def describe(spec: RuledSpec, runs: Sequence[PlannedRun]) -> list[str]:
    """The dry run's lines: each rule, where it came from, its intervals or why it is not
    identified, then each point's N, D, C and the values the rules gave it."""
    rules = [r for r in (spec.batch_rule, spec.lr_rule) if r is not None]
    lines = []
    for rule in rules:
        line = f"{rule.field}: {rule.formula()} ({rule.source})"
        if rule.ci95:
            line += f"; 95% intervals: {_intervals(rule.ci95)}"
        if rule.key == KEYS["batch_rule"]:
            line += "; rounded to the nearest multiple of train.seq_len, within [1 sequence, D]"
        lines.append(line)
        if rule.not_identified:
            lines.append(
                f"warning: {rule.source}'s {rule.field} is not identified "
                f"({'; '.join(rule.not_identified)}): its point estimate is used"
            )
    if not rules:  # nothing a rule gave any point: no line per point
        return lines
    for r in runs:
        if not r.facts or r.skip:
            continue
        n, d, c = inputs(r.budget, spec.budget_flops, r.facts)
        values = [o for o in r.overrides if o.split("=", 1)[0] in {x.key for x in rules}]
        lines.append(
            f"  #{r.index}: N {n:.3g}, D {d:.3g}, C {c:.3g} ({_c_label(spec, r)}): "
            + ", ".join(values)
        )
    return lines
