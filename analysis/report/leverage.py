"""The efficiency-leverage section of a report: each MoE configuration's EL at every measured
budget (the ablation's multiplier of a MoE variant) grouped by activation ratio A and
granularity G, and the law of EL in A and C with its identification (`analysis.verdicts.leverage`).
Present only when the runs hold a MoE variant.
"""

from __future__ import annotations

from analysis.fits.estimate import est
from analysis.report.section import Context, Quiet
from analysis.verdicts import leverage as el


def of(an) -> dict | None:
    """The leverage of one analysis (cheap: read from the ablation's multipliers)."""
    return el.leverage(an.runs, an.ablation)


class Leverage(Quiet):
    """fit.json's `leverage` (absent without MoE variants)."""

    def fit_json(self, an) -> dict:
        result = of(an)
        return {"leverage": result} if result else {}

    def sentences(self, an) -> list[str]:
        result = of(an)
        if not result:
            return []
        return [f"Efficiency leverage of the MoE configurations: {el.law_sentence(result['law'])}"]

    def blocks(self, an, ctx: Context) -> list[tuple]:
        result = of(an)
        if not result:
            return []
        b: list[tuple] = [
            ("h2", "Efficiency leverage of the MoE configurations"),
            (
                "p",
                f"EL(C): the compute the dense baseline '{result['baseline']}' needs to reach a "
                "MoE configuration's loss at active compute C, divided by C (the multiplier of "
                "the ablation above, at measured budgets). A = (top_k + n_shared) / (n_experts + "
                "n_shared): the share of the expert parameters a token uses; G: the granularity "
                "(expert width = dense MLP width / G).",
            ),
        ]
        rows = []
        configs = result["configurations"]
        order = sorted(result["points"], key=lambda p: (p["A"], p["G"], p["variant"], p["C"]))
        for p in order:
            cfg = configs[p["variant"]]
            shape = (
                f"{cfg['n_experts']:g} experts, top-{cfg['top_k']:g}, {cfg['n_shared']:g} shared"
            )
            estimate = (
                est(p["EL"], p["ci95"], ".3g")
                if p["EL"] is not None
                else f"not identified ({p['why_not_identified']})"
            )
            rows.append(
                [
                    f"{p['A']:.3g}",
                    f"{p['G']:g}",
                    p["variant"],
                    shape,
                    f"{p['C']:.3g}",
                    estimate,
                    p["verdict"] or "",
                ]
            )
        header = ["A", "G", "variant", "experts", "C (active)", "EL [95% CI]", "verdict"]
        b.append(("table", header, rows))
        b.append(("p", "Law: " + el.law_sentence(result["law"])))
        return b
