"""The answer first: an ablation's verdicts at the top of a report, written from the numbers.

One row per variant, its verdicts over every measured budget, then at the largest measured
compute (multiplier, interval, Holm-adjusted p, verdict), and the same in plain sentences; the
console's answer lines (`answer_lines`). A law fit's summary is `analysis.fits.summary`. Quantities
that are not identified say so here too: nothing that the runs do not determine is stated as a
result.
"""

from __future__ import annotations

import numpy as np

from analysis.fits.estimate import est, fmt
from analysis.fits.fit import convention
from analysis.verdicts import matched


def headline_cell(variant: dict) -> dict | None:
    """A variant's multiplier at its largest measured compute (the summary's cell)."""
    measured = [m for m in variant["multipliers"] if m["measured"]]
    return measured[-1] if measured else None


def multiplier_text(cell: dict, spec: str = ".3g") -> str:
    """A measured multiplier as text: 'm [lo, hi]' where interpolated or from the baseline's
    law, '< m' / '> m' where the baseline's measured range only bounds it."""
    method = cell.get("method")
    if method in ("<", ">"):
        return f"{method} {fmt(cell['multiplier'], spec)} (bound: outside the baseline's runs)"
    return est(cell["multiplier"], cell["ci95"], spec)


def _how(cell: dict, gap: bool = True) -> str:
    """Where a multiplier comes from, and the loss gap at matched compute."""
    source = {
        "interpolated": "between the baseline's measured points",
        "baseline law": "from the baseline's checked law (an extrapolation)",
        "<": "a bound: beyond the baseline's measured losses",
        ">": "a bound: beyond the baseline's measured losses",
    }.get(cell.get("method"), "")
    if gap and np.isfinite(cell.get("loss_gap", np.nan)):
        source += f"; loss {cell['loss_gap']:+.2f} nats at the same compute"
    return source


def verdict_sentence(name: str, baseline: str, cell: dict, conv: str, why: str | None) -> str:
    """One sentence, in plain words, of what the runs say about a variant."""
    where = f"at C = {cell['C']:.3g} FLOPs ({conv})"
    m = cell["multiplier"]
    verdict = cell.get("verdict")
    bound = cell.get("method") in ("<", ">")
    if why or verdict == "not identified":
        reason = why or cell.get("why_not_identified") or "see the details"
        return f"{name}: not identified {where} ({reason})."
    shown = f"multiplier {multiplier_text(cell, '.2g')}; {_how(cell)}"
    if verdict == "better":
        more = "more than " if bound else ""
        return (
            f"{name} is better than {baseline}: {baseline} needs {more}{m:.2g}x the compute "
            f"to reach its loss {where} ({shown})."
        )
    if verdict == "worse":
        more = "more than " if bound else ""
        return (
            f"{name} is worse than {baseline}: it needs {more}{1 / m:.2g}x {baseline}'s "
            f"compute to reach the same loss {where} ({shown})."
        )
    return (
        f"{name}: cannot tell from {baseline} {where} ({shown}, "
        f"adjusted p = {fmt(cell.get('p_holm'), '.2f')})."
    )


def _times(x: float) -> str:
    """A compute ratio to 2 significant digits without an exponent: 740, 20, 1.5."""
    return f"{float(f'{x:.2g}'):g}"


def _verdict_part(verdict: str, cells: list[dict], baseline: str, total: int) -> str:
    """How many measured budgets share a verdict, where, and by how much (from the cells whose
    multiplier is estimated; a bound is counted, not quoted)."""
    cs = [c["C"] for c in cells]
    where = f"C = {cs[0]:.3g}" if len(cs) == 1 else f"C = {min(cs):.3g} to {max(cs):.3g}"
    estimated = [c for c in cells if c.get("method") not in ("<", ">")]
    bounds = len(cells) - len(estimated)
    ms = sorted(c["multiplier"] for c in estimated)
    also = f", {bounds} beyond the baseline's measured losses" if bounds and ms else ""
    if verdict in ("worse", "better") and ms:
        ratios = [1 / m for m in ms[::-1]] if verdict == "worse" else ms
        span = "-".join(dict.fromkeys((_times(ratios[0]), _times(ratios[-1]))))
        who = (
            f"it needs {span}x {baseline}'s"
            if verdict == "worse"
            else f"{baseline} needs {span}x its"
        )
        how = f"; {who} compute there{also}"
    elif verdict in ("worse", "better"):
        how = "; every one beyond the baseline's measured losses (m only bounded)"
    else:
        how = ""
    return f"{verdict} at {len(cells)} of {total} ({where}{how})"


def overall_verdicts(variant: dict, baseline: str) -> tuple[str, str]:
    """A variant's verdicts over every measured budget: the table cell and the sentence's
    parts, worse and better first ('worse at 6 of 7, cannot tell at 1')."""
    measured = [m for m in variant["multipliers"] if m["measured"]]
    if variant.get("why_not_identified", {}).get("multipliers"):
        return "not identified", ""
    by: dict[str, list[dict]] = {}
    for m in measured:
        by.setdefault(m.get("verdict") or "n/a", []).append(m)
    order = sorted(by, key=lambda v: (v not in ("worse", "better"), -len(by[v]), v))
    cell_text = ", ".join(f"{v} at {len(by[v])} of {len(measured)}" for v in order)
    parts = "; ".join(_verdict_part(v, by[v], baseline, len(measured)) for v in order)
    return cell_text, parts


def ablation_summary(ablation: dict) -> list[tuple]:
    """Summary table and sentences of an ablation (blocks, see analysis.report)."""
    base = ablation["baseline"]
    conv = convention(ablation)
    rows, sentences = [], []
    firsts = (
        [
            s
            for v in ablation["variants"]
            if v != base and (s := matched.sentence(v, base, ablation["matched"])) is not None
        ]
        if ablation.get("matched")
        else []
    )
    for v, res in ablation["variants"].items():
        cell = headline_cell(res)
        if v == base or cell is None:
            continue
        why = res.get("why_not_identified", {}).get("multipliers")
        shown = "not identified" if why else multiplier_text(cell)
        overall, parts = overall_verdicts(res, base)
        rows.append(
            [
                v,
                overall,
                f"{cell['C']:.3g}",
                shown,
                fmt(cell.get("p_holm"), ".3f"),
                cell.get("verdict") or "n/a",
            ]
        )
        if parts:
            sentences.append(f"{v} against {base} over its measured budgets ({conv}): {parts}.")
        sentences.append(verdict_sentence(v, base, cell, conv, why))
    n = ablation.get("n_comparisons", 0)
    lead = (
        "The variants' measured frontiers: m from the measured losses (between the baseline's "
        "measured points, else a bound or its checked law), the verdict from the loss at the "
        "same compute. "
    ) + (
        f"Each variant against '{base}': its verdicts over every measured budget, then at its "
        f"largest measured compute. m > 1: the baseline needs m times the compute to match the "
        f"variant. Verdicts control the family-wise error at "
        f"{ablation.get('family_level', 0.05):g} over all {n} measured variant x budget cells "
        "(Holm); the full table is under 'Ablations' below."
    )
    header = ["variant", "verdicts over the measured budgets", f"largest C ({conv})"]
    header += ["multiplier [95% CI]", "p (Holm)", "verdict there"]
    out: list[tuple] = [("list", firsts)] if firsts else []
    return out + [("p", lead), ("table", header, rows), ("list", sentences)]


def answer_lines(ablation: dict | None) -> list[str]:
    """The ablation's answer for the console: each variant's matched cells, then its verdicts
    over the measured budgets (the report's first lines)."""
    if not ablation:
        return []
    base, lines = ablation["baseline"], []
    for v, res in ablation["variants"].items():
        if v == base:
            continue
        first = matched.sentence(v, base, ablation.get("matched") or {"cells": []})
        if first:
            lines.append(first)
        _, parts = overall_verdicts(res, base)
        if parts:
            lines.append(f"{v} against {base}, its measured frontier: {parts}.")
    return lines
