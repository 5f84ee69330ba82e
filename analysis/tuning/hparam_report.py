"""The report's hyperparameter-law section and summary sentences (blocks, see analysis.report),
from fit.json's `hparam_laws` (analysis.tuning.hparam_laws)."""

from __future__ import annotations

from analysis.fits.estimate import fmt, interval
from analysis.tuning.hparam_surface import status_text

HEADING = "Hyperparameter laws"
NAMES = {"lr": "learning rate", "batch": "batch size (tokens)"}


def law_text(law: dict, name: str) -> str:
    """One law as 'lr_opt = 0.31 [0.2, 0.4] x C^-0.125 [-0.2, -0.1]' (`name` lr_opt), or why
    it is not identified."""
    if law.get("not_identified"):
        why = next(iter(law["why_not_identified"].values()))
        return f"not identified ({why})"
    ci = law["ci95"]
    text = f"{name} = {fmt(law['scale'], '.3g')} {interval(ci['scale'], '.3g')}"
    if "variable" in law:
        v = law["variable"]
        return text + f" x {v}^{fmt(law['exponent'], '.3f')} {interval(ci['exponent'], '.3f')}"
    for v, e in law["exponents"].items():
        text += f" x {v}^{fmt(e, '.3f')} {interval(ci[v], '.3f')}"
    return text


OTHERS = {  # why a cell's optimum is not in a law, as the summary counts them
    "edge": "at an edge of its grid",
    "flat": "flat over its grid",
    "untuned": "untuned (fewer than 3 values)",
    "chosen": "chosen from shorter runs",
    "transferred": "transferred from another budget",
}


def _others(cells: list[dict], role: str) -> str:
    """'; the others: 2 chosen from shorter runs, 4 transferred from another budget (one
    full-budget value: no curvature)' for the cells whose optimum is not identified."""
    counts: dict[str, int] = {}
    for c in cells:
        status = c["status"].get(role)
        if status not in (None, "identified"):
            counts[status] = counts.get(status, 0) + 1
    if not counts:
        return ""
    text = ", ".join(f"{n} {OTHERS.get(s, s)}" for s, n in counts.items())
    if counts.keys() & {"chosen", "transferred"}:
        text += " (fewer than 3 values trained the full budget: no curvature to place an optimum)"
    return f"; the others: {text}"


def summary_sentences(hparams: dict | None) -> list[str]:
    """The identified laws (or that none is), and the critical batch law, in one line each."""
    if not hparams:
        return []
    out = []
    for role, forms in hparams["laws"].items():
        found = [
            law_text(law, f"{role}_opt") for law in forms.values() if not law.get("not_identified")
        ]
        n = len(next(iter(forms.values()))["points"])
        if found:
            out.append(f"Optimal {NAMES[role]} over {n} cells: " + "; ".join(found) + ".")
        else:
            # the first form's reason: with every cell usable it is why the law fails
            first, law = next(iter(forms.items()))
            why = next(iter(law["why_not_identified"].values()), "")
            others = _others(hparams["cells"], role)
            out.append(
                f"Optimal {NAMES[role]}: no law identified ({n} of {hparams['n_cells']} cells "
                f"place their optimum inside a grid that is not flat{others}; in {first}: "
                f"{why}; see '{HEADING}')."
            )
    crit = hparams.get("critical_batch")
    if crit and not crit["law"].get("not_identified"):
        out.append(
            f"Critical batch size (loss within {100 * crit['tolerance']:g}% of the best at a "
            f"fixed token budget): {law_text(crit['law'], 'B_crit')}."
        )
    return out


def _cells_table(hparams: dict) -> tuple:
    roles = list(hparams["keys"])
    header = ["variant", "N", "D", "best loss", *[f"optimum {r}" for r in roles]]
    header += [f"near-optimal {r}" for r in roles] + ["status", "method"]
    rows = []
    for c in hparams["cells"]:
        near = c["near_optimal"]
        rows.append(
            [
                c["variant"],
                fmt(c["N"], ".3g"),
                fmt(c["D"], ".3g"),
                fmt(c["best"]["loss"]),
                *[fmt(c["optimum"][r], ".3g") for r in roles],
                *[f"{fmt(near[r][0], '.3g')} - {fmt(near[r][1], '.3g')}" for r in roles],
                ", ".join(f"{r}: {status_text(c, r)}" for r in c["status"]),
                c["method"],
            ]
        )
    return ("table", header, rows)


def blocks(hparams: dict | None) -> list[tuple]:
    """Per cell its optimum and near-optimal region; every law with its interval or reason."""
    if not hparams:
        return []
    tol = 100 * hparams["tolerance"]
    b: list[tuple] = [
        ("h2", HEADING),
        (
            "p",
            "Per cell (arm: variant x size x token budget): the optimum (a quadratic in "
            "(log lr, log B) through the best grid point and its neighbours, or a parabola "
            f"per key), and the near-optimal region: the grid points within {tol:g}% of the "
            "best loss. A key's optimum enters a law only where 3+ values trained the cell's "
            "full budget (a value chosen from shorter runs or transferred from another budget "
            "has no curvature to place it), it lies inside the grid and the surface is not "
            f"flat over it. {hparams['compute']}.",
        ),
        _cells_table(hparams),
    ]
    rows = []
    for role, forms in hparams["laws"].items():
        for name, law in forms.items():
            rows.append(
                [NAMES[role], name, law["form"], law["n_cells"], law_text(law, f"{role}_opt")]
            )
    b.append(("table", ["key", "in", "form", "cells", "law (95% interval over cells)"], rows))
    crit = hparams.get("critical_batch")
    if crit:
        b.append(
            (
                "p",
                f"Critical batch size: the largest batch, going up from the best, whose loss "
                f"(lr re-tuned at each batch) stays within {100 * crit['tolerance']:g}% of "
                f"the best at the cell's token budget. Law in D: "
                f"{law_text(crit['law'], 'B_crit')}.",
            )
        )
    chosen = {r: x for r, x in hparams["rules"].items() if x}
    b.append(
        (
            "p",
            "Rules a sweep can read: "
            + (
                "; ".join(f"{NAMES[r]} from the {x['form']}" for r, x in chosen.items())
                if chosen
                else "none (no law is identified)"
            )
            + ". Laws from models this small say how the optimum moves across the sizes "
            "measured; they are not evidence for the exponent at scale.",
        )
    )
    return b


def figure_caption(tolerance: float) -> str:
    return (
        "Final validation loss over the (lr, batch size) grid, one panel per size and token "
        "budget (relative to the panel's best, in %). Star: the best grid point; cross: the "
        f"fitted optimum; outlined: the near-optimal region (within {100 * tolerance:g}% of "
        "the best). A star on the border of its panel sits at the edge of the grid."
    )
