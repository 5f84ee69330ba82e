"""The learning rate and batch size a fitted (or published) hyperparameter law gives at a budget.

    python -m analysis.predict --hparams --fit results/NAME/fit.json --C 1e21 --N 3e9
    python -m analysis.predict --hparams --fit conf/published/deepseek_llm.json --C 1e21
    python -m analysis.predict --hparams --fit conf/published/step_law.json --N 7e9 --D 1.4e12

A rule is read from fit.json's `hparam_laws` (the rule `analysis.tuning.hparam_laws` chose, then its
other identified forms), else from the top-level `lr_rule` / `batch_rule` (a hand-written file
holds a paper's constants there: {key, variable, scale, exponent} or {key, scale, exponents:
{N, D}}); the first identified one the inputs can evaluate answers. Given two of N, D and C the
third is C = 6 N D; a rule in a variable the inputs cannot give says so in its row, and when no
rule can answer (a rule in N asked at --C alone) that is the one-line error. The 95% interval re-runs the law's own bootstrap over its
cells (the points, n_boot and seed fit.json keeps); a paper's constants come without one.

Exit code 2 with one line on stderr, and nothing written, when the input cannot be used.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data.load import InputError, read_fit_json
from analysis.data.select import ArgumentParser, check_out_file
from analysis.fits.bootstrap import percentile_interval, resample_counts
from analysis.tuning.hparam_laws import fit_loglinear, form_name

ROLES = {"lr": ("lr_rule", "learning rate"), "batch": ("batch_rule", "batch size (tokens)")}


def load_rules(path: str) -> tuple[dict, dict]:
    """{role: [rule, ...]} of the identified rules in a fit.json, best first, and the file."""
    p = Path(path)
    data = read_fit_json(p)
    hparams = data.get("hparam_laws") or {}
    rules = {}
    for role, (top, _) in ROLES.items():
        laws = list(((hparams.get("laws") or {}).get(role) or {}).values())
        found = [(hparams.get("rules") or {}).get(role), *laws, data.get(top)]
        found = [r for r in found if isinstance(r, dict) and not r.get("not_identified")]
        if found := [r for r in found if _valid(r)]:
            rules[role] = found
    if not rules:
        raise InputError(
            f"--fit: {p} holds no identified lr_rule or batch_rule (hparam_laws, lr_rule, "
            "batch_rule): nothing to predict from"
        )
    return rules, data


def _valid(rule: dict) -> bool:
    def pos(v):
        return isinstance(v, int | float) and np.isfinite(v) and v > 0

    if not pos(rule.get("scale")):
        return False
    if "exponents" in rule:
        return isinstance(rule["exponents"], dict) and all(
            isinstance(e, int | float) and np.isfinite(e) for e in rule["exponents"].values()
        )
    return rule.get("variable", "N") in ("N", "D", "C") and np.isfinite(
        rule.get("exponent", np.nan)
    )


def variables(rule: dict) -> dict[str, float]:
    """{variable: exponent} of a rule in either format (a bare lr_rule is in N)."""
    if "exponents" in rule:
        return {v: float(e) for v, e in rule["exponents"].items()}
    return {rule.get("variable", "N"): float(rule["exponent"])}


def complete(N, D, C) -> dict[str, float | None]:
    """N, D and C with the third from C = 6 N D where two are given."""
    if C is None and N is not None and D is not None:
        C = 6 * N * D
    if N is None and C is not None and D is not None:
        N = C / (6 * D)
    if D is None and C is not None and N is not None:
        D = C / (6 * N)
    return {"N": N, "D": D, "C": C}


def _law_of(rule: dict, data: dict, role: str) -> dict | None:
    """The fitted law behind a rule (its points, n_boot, seed), or None (a paper's constants)."""
    forms = ((data.get("hparam_laws") or {}).get("laws") or {}).get(role) or {}
    law = forms.get(form_name(tuple(variables(rule))))
    if law and law.get("points"):
        return law
    return rule if rule.get("points") and "x" in rule["points"][0] else None


def _replicates(law: dict, names: list[str], at: dict) -> np.ndarray:
    """The rule's value at `at` in every bootstrap replicate over its cells."""
    pts = law["points"]
    if "x" in pts[0]:  # analysis.tuning.arms's lr_rule: points {x, y} in its one variable
        pts = [{names[0]: p["x"], "y": p["y"]} for p in pts]
    logx = np.log(np.array([[p[v] for v in names] for p in pts], dtype=float))
    logy = np.log(np.array([p["y"] for p in pts], dtype=float))
    counts = resample_counts(len(pts), int(law.get("n_boot", 1000)), int(law.get("seed", 0)))
    coef = fit_loglinear(logx, logy, counts)
    return np.exp(coef[:, 0] + coef[:, 1:] @ np.log([at[v] for v in names]))


def predict_row(role: str, rules: list[dict], data: dict, at: dict) -> dict:
    """One answer from the first rule the inputs can evaluate: its value at `at` with its
    interval, or (no rule can) what the best rule needs."""
    usable = [r for r in rules if all(at[v] is not None for v in variables(r))]
    rule = usable[0] if usable else rules[0]
    exps = variables(rule)
    row = {"key": rule.get("key", role), "law": _law_text(rule), "value": np.nan}
    row.update({"lo": np.nan, "hi": np.nan, "note": ""})
    if not usable:
        missing = [v for v in exps if at[v] is None]
        row["note"] = f"needs {', '.join(missing)}: give two of --N, --D, --C"
        return row
    row["value"] = float(rule["scale"] * np.prod([at[v] ** e for v, e in exps.items()]))
    law = _law_of(rule, data, role)
    ci = percentile_interval(_replicates(law, list(exps), at)) if law else None
    if ci:
        row["lo"], row["hi"] = ci
    row["note"] = "" if ci else "no interval (constants without their bootstrap)"
    return row


def unanswered(rows: list[dict], given: dict) -> str:
    """Why no rule answers: each rule with what it needs, and a question that would do."""
    asked = ", ".join(f"--{k} {v:g}" for k, v in given.items() if v is not None)
    needs = "; ".join(f"{r['key']} = {r['law']} {r['note'].split(':')[0]}" for r in rows)
    return (
        f"no rule can answer at {asked}: {needs}; give two of --N, --D, --C "
        "(e.g. --C 1e21 --N 3e9: D = C / 6N)"
    )


def _law_text(rule: dict) -> str:
    terms = " x ".join(f"{v}^{e:.4g}" for v, e in variables(rule).items())
    return f"{rule['scale']:.4g} x {terms}"


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m analysis.predict",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--hparams", action="store_true", required=True, help="this question")
    parser.add_argument("--fit", required=True, help="fit.json or a hand-written rules file")
    for name, what in (("N", "parameters"), ("D", "tokens"), ("C", "compute, FLOPs")):
        parser.add_argument(f"--{name}", type=float, help=f"{name} ({what})")
    parser.add_argument("--out", help="CSV to write the answers to")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        given = {k: getattr(args, k) for k in ("N", "D", "C")}
        for k, v in given.items():
            if v is not None and not (np.isfinite(v) and v > 0):
                raise InputError(f"--{k} must be a positive number (got {v})")
        if sum(v is not None for v in given.values()) == 0:
            raise InputError("give the budget: --C, or --N and --D (two of them fix the third)")
        if args.out:
            check_out_file(args.out)
        rules, data = load_rules(args.fit)
        at = complete(**given)
        rows = [predict_row(role, rule, data, at) for role, rule in rules.items()]
        if not any(np.isfinite(r["value"]) for r in rows):
            raise InputError(unanswered(rows, given))
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = pd.DataFrame([{**{k: at[k] for k in ("N", "D", "C")}, **r} for r in rows])
    convention = (data.get("hparam_laws") or {}).get("compute") or data.get("compute")
    if convention:
        print(f"C here: {convention}")
    print(out.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        out.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
    return 0
