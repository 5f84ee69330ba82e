"""The report's tuning section and summary sentences (blocks, see analysis.report), from
fit.json's `tuning` and `lr_rule` sections (analysis.tuning.arms)."""

from __future__ import annotations

from analysis.fits.estimate import cell, fmt
from analysis.tuning.arms import arm_name, lr_key, value_text

HEADING = "Tuning"


def _edge_text(arm: dict) -> str:
    if all(len(values) < 2 for values in arm["grid"].values()):
        source = arm.get("transferred_from")  # a choice made at another token budget
        if source is not None:
            return f"one value (transferred from D {source:.3g})"
        return "one value (not tuned here)"
    if not arm["at_edge"]:
        return "inside the grid"
    where = "; ".join(f"best at the {side} {k}" for k, side in arm["edge"].items())
    return f"widen the grid ({where})"


def _rule_sentence(rule: dict, whose: str = "") -> str:
    """The lr rule in words: the law, or why it is not identified. `whose`: e.g. " of the
    baseline" when the report has several variants (the rule is fitted to the baseline's)."""
    key = rule["key"]
    if "exponent" in rule["not_identified"]:
        return (
            f"Scaling rule for {key}{whose}: not identified "
            f"({rule['why_not_identified']['exponent']})."
        )
    text = (
        f"Scaling rule for {key}{whose} (DeepSeek LLM 2024 style, least squares in log-log "
        f"over {rule['n_arms']} tuned arms, intervals resampling arms): {key}_opt = "
        f"{cell(rule, 'scale', '.3g')} x N^{cell(rule, 'exponent', '.3f')}"
    )
    c = rule["in_C"]
    if "exponent" not in c["not_identified"]:
        text += f"; in compute, {key}_opt ~ C^{cell(c, 'exponent', '.3f')}"
    return text + "."


def _whose(section: dict) -> str:
    return " of the baseline" if len({a["variant"] for a in section["arms"]}) > 1 else ""


def summary_sentences(section: dict, rule: dict | None) -> list[str]:
    """What the summary says about the tuning: arms, values at the edge, the lr rule."""
    keys = ", ".join(section["keys"])
    edge = [a for a in section["arms"] if a["at_edge"]]
    out = [
        f"Tuned {keys} per arm: {section['n_arms']} arms (variant x size x token budget) are "
        f"compared at their own best value, chosen from {section['n_runs']} runs by the "
        "lowest final validation loss."
    ]
    if edge:
        by_variant: dict[str, dict[str, int]] = {}
        for a in edge:
            sides = by_variant.setdefault(a["variant"], {})
            for k, side in a["edge"].items():
                sides[f"{side} {k}"] = sides.get(f"{side} {k}", 0) + 1
        names = "; ".join(
            f"{v}: " + ", ".join(f"{n} at the {where}" for where, n in sides.items())
            for v, sides in by_variant.items()
        )
        out.append(
            f"{len(edge)} of {section['n_arms']} arms have their best value at the edge of "
            f"the grid ({names}): the optimum may lie outside it; widen the grid there "
            f"(the arms are listed under '{HEADING}')."
        )
    else:
        out.append("Every arm's best value lies inside its grid.")
    if section.get("n_curve_prefixes"):
        out.append(
            f"The values were chosen from partial curves (sweep.tune_curve: "
            f"{section['n_curve_prefixes']} candidate prefixes, each ranked by the final loss "
            "a curve law predicts from it, the predicted best trained on): these runs cannot "
            "show whether the full grid would choose the same (check arms against a full "
            "grid with python -m analysis.tuning_check)."
        )
    elif section["n_stopped_early"]:
        out.append(
            f"The values were chosen by successive halving ({section['n_stopped_early']} "
            "candidate segments stopped early): candidates were compared at early rungs, "
            "where a higher lr tends to look better, and these runs cannot show whether "
            "the full grid would choose the same (check a few arms against a full grid "
            "with python -m analysis.tuning_check)."
        )
    if rule is not None:
        out.append(_rule_sentence(rule, _whose(section)))
    return out


def blocks(section: dict, rule: dict | None) -> list[tuple]:
    """The tuning section: how arms were chosen, one row per arm, the lr rule."""
    keys = section["keys"]
    b: list[tuple] = [("h2", f"{HEADING}: {', '.join(keys)} per arm")]
    b.append(
        (
            "p",
            "An arm is one variant x size x token budget. Every law and multiplier in "
            "this report uses only the run at each arm's lowest final validation loss "
            "(mean over seeds where an arm has several). "
            f"{section['n_arms']} arms, {section['n_runs']} runs, "
            f"{section['n_stopped_early']} stopped early (candidates that did not go on to "
            "the budget: halving's losers or curve-tuned prefixes; fewer tokens than the "
            "arm's budget, never an arm's result; drawn hollow at their loss at their own "
            "tokens).",
        )
    )
    b.append(_arms_table(section))
    if rule is not None:
        b.extend(_rule_blocks(rule, section))
    elif lr_key(keys) is None:
        b.append(("p", "No learning rate among the tuned keys, so no lr scaling rule."))
    return b


def _arms_table(section: dict) -> tuple:
    """One row per arm: its best values, loss there, the values tried and the refined optimum."""
    keys = section["keys"]
    header = [
        "variant",
        "N",
        "D",
        *[f"best {k}" for k in keys],
        "loss at best",
        "values tried",
        "refined optimum",
        "grid",
    ]
    rows = []
    for a in section["arms"]:
        best = [value_text(a["best"][k]) for k in keys]
        loss = a["losses"][min(a["losses"], key=a["losses"].get)]
        tried = "; ".join(
            f"{len(a['grid'][k])} ({value_text(a['grid'][k][0])} - {value_text(a['grid'][k][-1])})"
            for k in keys
        )
        optimum = "; ".join(fmt(a["optimum"][k], ".3g") for k in keys if k in a["optimum"]) or "-"
        rows.append(
            [
                a["variant"],
                fmt(a["N"], ".3g"),
                fmt(a["D"], ".3g"),
                *best,
                fmt(loss),
                tried,
                optimum,
                _edge_text(a),
            ]
        )
    return ("table", header, rows)


def _rule_blocks(rule: dict, section: dict) -> list[tuple]:
    """The lr rule fitted across arms, how each optimum was refined, and the arms left out."""
    b: list[tuple] = [
        (
            "p",
            _rule_sentence(rule, _whose(section))
            + " Each arm's optimum is the vertex of the parabola "
            f"in log {rule['key']} through its best value and both neighbours.",
        )
    ]
    if rule["left_out"]:
        names = {a["arm"]: arm_name(a) for a in section["arms"]}  # an arm id is a hash
        b.append(
            (
                "p",
                "Left out of the rule: "
                + "; ".join(
                    f"{names.get(arm, arm)}: {why}" for arm, why in rule["left_out"].items()
                )
                + ".",
            )
        )
    return b


def figure_caption(key: str) -> str:
    return (
        f"Final validation loss against {key}, one panel per size (k-th smallest N of each "
        "variant) and token budget where some variant tried several values (a budget that "
        "trained only the value chosen at another is in the tuning table), one line per "
        "variant (other tuned keys at their best values). Stars: the chosen value; hollow "
        "circles: candidates stopped early (their loss at fewer tokens). A star at the end of "
        "its line sits at the edge of the grid: the optimum may lie outside it."
    )
