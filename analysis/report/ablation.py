"""The ablation sections of a report: every variant's compute multiplier against the baseline
with its Holm-controlled verdict, wall-clock time, decision accuracy and the matched cells; the
answer at the top of the summary (`analysis.verdicts.summary`) and its figures.
"""

from __future__ import annotations

import numpy as np

from analysis.fits.estimate import est, fmt
from analysis.fits.fit import convention
from analysis.report.section import SUMMARY, Context, Figure, Quiet
from analysis.verdicts import decision, noise, wallclock
from analysis.verdicts import summary as headline


class Ablation(Quiet):
    """fit.json's `ablation` (null without variants)."""

    def fit_json(self, an) -> dict:
        return {"ablation": an.ablation}

    def summary(self, an, figs: dict[str, str]) -> list[tuple]:
        ablation = an.ablation
        if not ablation:
            return []
        b = headline.ablation_summary(ablation)
        b.extend(wallclock.summary_blocks(ablation) + decision.summary_blocks(ablation))
        if "forest" in figs:
            b.append(("fig", "forest", figs.pop("forest")))
        return b

    def blocks(self, an, ctx: Context) -> list[tuple]:
        ablation = an.ablation
        if not ablation:
            return []
        b = _ablation_blocks(ablation) + wallclock.detail_blocks(ablation)
        b.extend(decision.detail_blocks(ablation))
        return b + _matched_loss_blocks(ablation)

    def figures(self, an, ctx: Context) -> list[Figure]:
        """The forest plot of every cell (in the summary), each variant's multiplier against
        compute, and the decision agreement of the smaller runs."""
        ablation, compute = an.ablation, ctx.compute
        if not ablation:
            return []
        out = [
            Figure(
                "forest",
                "Forest plot of every measured cell: the multiplier with its 95% interval; right "
                "of the dashed line at 1 the variant needs less compute than the baseline. "
                "Filled markers: decided after the Holm correction; hollow: cannot tell.",
                SUMMARY,
                lambda plots: plots.forest(ablation, compute),
            ),
            Figure(
                "multipliers",
                "Effective compute multiplier of each variant over the baseline against compute "
                "(95% intervals; open markers extrapolated): above the dashed line at 1 the "
                "variant needs less compute than the baseline for the same loss.",
                "Ablations",
                lambda plots: plots.multipliers(ablation, compute),
            ),
        ]
        if ablation["decision"]["n_smaller"]:
            from analysis.verdicts import decision_plot  # lazy: seaborn ~3 s

            out.append(
                Figure(
                    "agreement",
                    decision.CAPTION,
                    SUMMARY,
                    lambda plots: decision_plot.agreement(
                        ablation["decision"], ablation["baseline"]
                    ),
                )
            )
        return out


def _ablation_blocks(ablation) -> list[tuple]:
    b: list[tuple] = []
    b.append(("h2", f"Ablations: effective compute multiplier vs '{ablation['baseline']}'"))
    n_cells = ablation.get("n_comparisons", 0)
    b.append(
        (
            "p",
            "m > 1: the baseline needs m times more compute to match the variant. "
            "Verdicts are given at measured budgets only and control the family-wise "
            f"error over all {n_cells} of them at {ablation.get('family_level', 0.05):g} "
            "(Holm): 'p' is the bootstrap p-value of m = 1 (below 0.05 exactly when the "
            "95% interval excludes 1), 'p (Holm)' the adjusted one the verdict uses. "
            "Extrapolated budgets carry an interval and no verdict.",
        )
    )
    rows, notes = [], []
    for v, res in ablation["variants"].items():
        if v == ablation["baseline"]:
            continue
        bad = res.get("why_not_identified", {}).get("multipliers")
        for m in res["multipliers"]:
            verdict = m.get("verdict") or "n/a (extrapolated)"
            p_raw = fmt(m.get("p"), ".3f") if m["measured"] else ""
            p_holm = fmt(m.get("p_holm"), ".3f") if m["measured"] else ""
            gap = m.get("loss_gap", float("nan"))
            gap_text = est(gap, m.get("loss_gap_ci95"), "+.3f") if m["measured"] else ""
            if bad or (m.get("why_not_identified") and not np.isfinite(m["multiplier"])):
                estimate = "not identified"
            else:
                estimate = headline.multiplier_text(m)
            rows.append(
                [
                    v,
                    fmt(m["C"], ".3g"),
                    METHOD.get(m.get("method"), "measured" if m["measured"] else "extrapolated"),
                    estimate,
                    gap_text if np.isfinite(gap) else ("n/a" if m["measured"] else ""),
                    p_raw,
                    p_holm,
                    verdict,
                ]
            )
            if not m["measured"] and m.get("why_not_identified"):
                notes.append(f"{v} at C {m['C']:.3g}: {m['why_not_identified']}")
            if m.get("verdict") == "not identified" and not bad and m.get("why_not_identified"):
                notes.append(f"{v} at C {m['C']:.3g}: {m['why_not_identified']}")
        if bad:
            b.append(("p", f"{v}: not identified ({bad})."))
    conv = convention(ablation)
    b.append(
        (
            "table",
            [
                "variant",
                f"C ({conv})",
                "m from",
                "multiplier [95% CI]",
                "loss gap at same C, nats",
                "p",
                "p (Holm)",
                "verdict",
            ],
            rows,
        )
    )
    if notes:
        b.append(("p", "Not identified: " + "; ".join(dict.fromkeys(notes)) + "."))
    b.append(("list", _law_check_lines(ablation)))
    spread = ablation["seed_std_median"]
    if spread:
        b.append(
            (
                "p",
                "Seed-to-seed loss std (median over configurations): "
                + ", ".join(f"{v} {s:.4f}" for v, s in spread.items()),
            )
        )
    return b


METHOD = {
    "interpolated": "measured (interpolated)",
    "baseline law": "measured vs baseline law",
    "<": "measured (bound)",
    ">": "measured (bound)",
    "laws": "extrapolated (laws)",
}


def _law_check_lines(ablation: dict) -> list[str]:
    """The noise scale, the plateau, and every variant's frontier law checked against its
    own frontier points."""
    lines = []
    if ablation.get("noise"):
        lines.append(f"Noise scale: {noise.describe(ablation['noise'])}.")
    lines.extend(_plateau_lines(ablation.get("plateau")))
    for v, res in ablation["variants"].items():
        check = res.get("law_check") or {}
        if check.get("sentence"):
            lines.append(f"{v}: {check['sentence']}")
    return lines


def _plateau_lines(plateau: dict | None) -> list[str]:
    if not plateau:
        return []
    h = plateau["unigram_entropy"]
    if h is None:
        return [
            "Unigram plateau: not checked (runs.csv has no unigram_entropy column: runs from "
            "before it was recorded)."
        ]
    listed = ", ".join(
        f"{r.get('variant', '')} N {r['N']:.3g} D {r['D']:.3g} ({r['loss']:.3f})"
        for r in plateau["runs"]
    )
    text = (
        f"Unigram plateau: the corpus's unigram entropy is {h:.3f} nats/token; "
        f"{plateau['n_runs']} run(s) have not left it (loss above {plateau['threshold']:.3f}) "
        "and are left out of every law"
    )
    return [text + (f": {listed}." if listed else ".")]


def _matched_loss_blocks(ablation: dict) -> list[tuple]:
    """The matched cells: each arm's mean final loss where both trained the same (size, token
    budget), their difference with its interval and the Holm-controlled verdict."""
    m = ablation.get("matched") or {}
    if not m.get("cells"):
        return []
    rows = [
        [
            c["variant"],
            f"{c['size']:.3g}",
            f"{c['D']:.3g}",
            f"{c['loss']:.3f} ({c['seeds']})",
            f"{c['loss_base']:.3f} ({c['seeds_base']})",
            f"{c['diff']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]",
            fmt(c["p_holm"], ".2g"),
            c["verdict"],
        ]
        for c in m["cells"]
    ]
    header = ["variant", "size", "D", "loss (seeds)", "baseline loss (seeds)"]
    header += ["difference, nats [95% CI]", "p (Holm)", "variant's loss"]
    return [
        ("h2", "Matched cells: final validation loss where both arms trained the same size and D"),
        (
            "p",
            f"Each arm's mean over its seeds; the difference's interval carries the "
            f"{noise.describe(m['noise'])}; Holm over all {m['n_cells']} cells at "
            f"{m['family_level']:g}. Size: the sweep's nominal model size.",
        ),
        ("table", header, rows),
    ]
