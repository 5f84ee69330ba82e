"""Scaling-law report: figures, report.md, a self-contained report.html, fit.json and runs.csv.

    python -m analysis.report --experiment NAME [--sweep ID] [--tracking-uri URI] --out results/NAME/
    python -m analysis.report --csv results/NAME/runs.csv [--curves results/NAME/curves.csv] --out DIR

--experiment, --sweep, --csv and --curves are repeatable: the runs of every source go into one
report (IsoFLOP budgets are grouped within each sweep; approach 3 uses every run). A selection
of several model families is refused; `--group family` reports them side by side instead, a
section per family and a comparison of their compute-optimal allocations only
(`analysis.families_report`).
runs.csv (and curves.csv) are exported so the report regenerates without the MLflow database.
Re-running on the same runs rewrites byte-identical files. Bad input: exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import html
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import (
    compare_laws,
    compute_factor,
    decision,
    epochs,
    families_report,
    hparam_laws,
    hparam_report,
    law_check,
    noise,
    tuning,
    tuning_report,
    wallclock,
)
from analysis import summary as headline
from analysis.ablation import compare_variants
from analysis.curve_report import blocks as curve_blocks
from analysis.estimate import cell, est, fmt
from analysis.families import check_one_family, ordered, with_family
from analysis.fit import (
    FitOptions,
    Fits,
    add_fit_args,
    check_exact_compute,
    check_fit_args,
    convention,
    default_budgets,
    dumps,
    fit_all,
    hparam_entries,
    summary,
)
from analysis.load import (
    PARAMETRIC_PARAMS,
    ArgumentParser,
    InputError,
    Runs,
    add_selection_args,
    check_fittable,
    check_out_dir,
    check_text,
    load_curves,
    load_selected,
    val_points,
)

# ---------------------------------------------------------------- content as blocks


def _not_identified_block(section: dict, what: str) -> list[tuple]:
    """One paragraph naming every quantity of a section that the runs do not determine."""
    reasons = {k: v for k, v in section.get("why_not_identified", {}).items() if "@" not in k}
    if not reasons:
        return []
    by_reason: dict[str, list[str]] = {}
    for k, why in reasons.items():
        by_reason.setdefault(why, []).append(k)
    text = "; ".join(f"{', '.join(names)}: {why}" for why, names in by_reason.items())
    return [
        (
            "p",
            f"Not identified by these runs ({what}): {text}. Those entries are shown as "
            "'not identified', not as a law.",
        )
    ]


# Where each figure goes: after the content of the section whose heading starts with this.
FIGURE_SECTION = {
    "isoflop": "Approach 2",
    "loss_vs_params": "Approach 3",
    "contours": "Approach 3",
    "training_curves": "Training curves",
    "multipliers": "Ablations",
    "tuning": tuning_report.HEADING,
    "hparam_surface": hparam_report.HEADING,
}
SUMMARY = "Summary"


def build_blocks(an: Analysis, excluded, figures, title, source="") -> list[tuple]:
    """The report as ('h1'|'h2', text) / ('p', text) / ('list', [text]) / ('table', header, rows)
    / ('fig', stem, caption): the summary first (the answer, its figure), then one section per
    approach with its own figures; every h2 after the summary is a collapsible detail in HTML.
    A tuned sweep's section shows every arm and the baseline's lr rule; the laws compared on
    held-out runs (`compare_laws.report_blocks`) come after the fits."""
    runs, result, ablation, tuned, rule = an.runs, an.result, an.ablation, an.tuned, an.rule
    figs = dict(figures)
    b = _intro_blocks(an, excluded, title)
    b.extend(_summary_blocks(an, figs))
    b.extend(_runs_blocks(runs, excluded, source))
    if tuned:
        b.extend(tuning_report.blocks(tuned, rule))
        b.extend(hparam_report.blocks(an.hparams))
    if result is not None:
        b.extend(_fit_blocks(result))
        b.extend(an.law_comparison)
    else:
        b.append(("h2", "Baseline law"))
        b.append(
            (
                "p",
                "The baseline has one token budget, so no L(N, D) law is fitted: this is "
                "an ablation report."
                if an.base["D"].nunique() == 1
                else f"The baseline has {len(an.base)} runs, too few for the 5 parameters of "
                "L(N, D), so no law is fitted: this is an ablation report.",
            )
        )
    if ablation:
        b.extend(_ablation_blocks(ablation) + wallclock.detail_blocks(ablation))
        b.extend(decision.detail_blocks(ablation))
        b.extend(_matched_loss_blocks(ablation))
    if "training_curves" in figs:
        b.append(("h2", "Training curves"))
    # the frontier figure, when not in the summary, goes with the single-variable laws
    sections = {
        **FIGURE_SECTION,
        "loss_vs_compute": "Single-variable laws" if result else "Baseline law",
    }
    for stem, caption in figs.items():
        _place(b, sections.get(stem, SUMMARY), ("fig", stem, caption))
    return b


def _intro_blocks(an: Analysis, excluded, title) -> list[tuple]:
    """The title and one sentence on which runs went into the report."""
    runs, result, ablation, tuned = an.runs, an.result, an.ablation, an.tuned
    b: list[tuple] = [("h1", f"Scaling-law report: {title}")]
    n_boot = result["parametric"]["n_boot"] if result else (ablation or {}).get("n_boot", "")
    fitted = f" ({result['n_runs']} in the baseline fits)" if result else ""
    if tuned:
        fitted += (
            f", the best of {tuned['n_runs']} runs of a tuning grid over "
            f"{', '.join(tuned['keys'])} in each of {tuned['n_arms']} arms"
        )
    b.append(
        (
            "p",
            f"{len(runs)} finished runs{fitted}; {len(excluded)} excluded. Every estimate "
            f"carries a 95% bootstrap percentile interval over runs"
            f"{f' ({n_boot} replicates)' if n_boot else ''}.",
        )
    )
    return b


def _summary_blocks(an: Analysis, figs: dict) -> list[tuple]:
    """The summary section: the answer and its figure (popped from `figs`), then notes."""
    runs, result, ablation, tuned, rule = an.runs, an.result, an.ablation, an.tuned, an.rule
    b: list[tuple] = [("h2", SUMMARY)]
    if ablation:
        b.extend(headline.ablation_summary(ablation))
        b.extend(wallclock.summary_blocks(ablation) + decision.summary_blocks(ablation))
        if "forest" in figs:
            b.append(("fig", "forest", figs.pop("forest")))
    if result is not None:
        if ablation:
            b.append(("p", f"The baseline's own scaling law ({result['n_runs']} runs):"))
        b.extend(headline.law_summary(result))
        if not ablation and "loss_vs_compute" in figs:
            b.append(("fig", "loss_vs_compute", figs.pop("loss_vs_compute")))
    elif not ablation:
        b.append(("p", "No law could be fitted to these runs."))
    notes = (
        tuning_report.summary_sentences(tuned, rule) + hparam_report.summary_sentences(an.hparams)
        if tuned
        else []
    ) + epochs.summary_sentence(runs)
    if notes:
        b.append(("list", notes))
    return b


def _runs_blocks(runs: pd.DataFrame, excluded, source: str) -> list[tuple]:
    """The Runs section: where they came from, the excluded ones, repeated data; [] if empty."""
    sources, repeats = _source_blocks(runs, source), epochs.blocks(runs)
    if not (sources or len(excluded) or repeats):
        return []
    b = [("h2", "Runs"), *sources]
    if len(excluded):
        b.append(("table", ["excluded run", "status", "reason"], excluded.values.tolist()))
    return b + repeats


def _place(blocks: list[tuple], heading: str, block: tuple) -> None:
    """Insert `block` at the end of the section whose h2 starts with `heading`."""
    start = next(i for i, x in enumerate(blocks) if x[0] == "h2" and x[1].startswith(heading))
    end = next((i for i in range(start + 1, len(blocks)) if blocks[i][0] == "h2"), len(blocks))
    blocks.insert(end, block)


def _counts(values: pd.Series) -> dict[str, int]:
    """{value: number of runs} in order of first appearance ('' for missing)."""
    values = values.astype(object).where(values.notna(), "").astype(str)
    return {k: int(n) for k, n in values.value_counts(sort=False).items()}


def _source_blocks(runs: pd.DataFrame, source: str) -> list[tuple]:
    """Where the runs come from, when that is more than one source or sweep."""
    sources = _counts(runs["source"]) if "source" in runs.columns else {source: len(runs)}
    sweeps = _counts(runs["sweep"]) if "sweep" in runs.columns else {}
    if len(sources) < 2 and len(sweeps) < 2:
        return []
    text = "Sources: " + "; ".join(f"{k} ({n} runs)" for k, n in sources.items()) + "."
    if sweeps:
        text += " Runs per sweep: " + ", ".join(f"{k or '(none)'} {n}" for k, n in sweeps.items())
        text += "."
    return [("p", text)]


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


def _fit_blocks(result) -> list[tuple]:
    """Every fit's section: approaches 3, 2, 1, the single-variable laws, the extrapolation."""
    return [
        *_approach3_blocks(result),
        *_approach12_blocks(result),
        *_kaplan_blocks(result),
        *_extrapolation_blocks(result),
    ]


def _approach3_blocks(result) -> list[tuple]:
    """Approach 3: the method, its estimates and the allocation at every budget."""
    p = result["parametric"]
    b: list[tuple] = []
    b.append(("h2", "Approach 3: parametric fit L(N, D) = E + A/N^alpha + B/D^beta"))
    b.append(
        (
            "p",
            "Hoffmann et al. / Besiroglu et al. (2024) procedure: log-sum-exp prediction, "
            f"sum of Huber losses (delta = {p['huber_delta']}) on log residuals, L-BFGS from "
            "the 4,500-point grid of starts, best kept.",
        )
    )
    if p.get("fixed"):
        b.append(
            (
                "p",
                "Held fixed, not fitted: "
                + ", ".join(f"{k} = {v:g}" for k, v in p["fixed"].items())
                + ".",
            )
        )
    b.extend(_not_identified_block(p, "approach 3"))
    b.append(
        (
            "table",
            ["quantity", "estimate [95% CI]"],
            [[k, cell(p, k)] for k in ("E", "A", "B", "alpha", "beta", "a", "b")],
        )
    )
    conv = convention(result)
    rows = []
    for r in p["allocation"]:
        t = f"@{r['C']:.3g}"
        rows.append(
            [f"{r['C']:.3g}"]
            + [cell(p, q, ".3g", q + t, r[q]) for q in ("N_opt", "D_opt", "tokens_per_param")]
        )
    b.append(("table", [f"C (FLOPs, {conv})", "N_opt", "D_opt", "tokens per parameter"], rows))
    if p.get("flops_per_token"):  # --compute exact
        f = p["flops_per_token"]
        six_n = "6N" if p.get("k", 1.0) == 1.0 else f"6 k N (k = {p['k']:.4g})"
        b.append(
            (
                "p",
                "Allocation under exact training FLOPs: L(N, C / f(N)) minimised over N, "
                f"with f(N) = {six_n} + {f['c']:.3g} N^{f['q']:.3f} fitted to the runs' exact "
                "FLOPs per token; a and b are the 6ND exponents it approaches at large N.",
            )
        )
    return b


def _isoflop_no_law_blocks(s, conv) -> list[tuple]:
    """Approach 2 when fewer than two budgets have an interior minimum: the per-budget table."""
    b: list[tuple] = [
        (
            "p",
            "Fewer than two budgets have an interior minimum, so no N_opt(C) law "
            "is fitted. " + ISOFLOP_RULE + " Per budget:",
        )
    ]
    b.extend(_isoflop_warning(s))
    b.append(
        _with_sweep(
            s,
            [f"C ({conv})", "points", "N measured", "lowest loss at N", "used"],
            [
                [
                    fmt(o["C"], ".3g"),
                    o["n_points"],
                    f"{fmt(o['N_min'], '.3g')} - {fmt(o['N_max'], '.3g')}",
                    fmt(o["N_best"], ".3g"),
                    _used(o),
                ]
                for o in s["per_budget"]
            ],
        )
    )
    return b


def _isoflop_optima_blocks(s, conv) -> list[tuple]:
    """Approach 2 with a fitted law: which budgets were used and each budget's optimum."""
    b: list[tuple] = [
        (
            "p",
            f"{ISOFLOP_RULE} {s['n_budgets']} of {len(s['per_budget'])} budgets "
            "used; intervals from a bootstrap over them.",
        )
    ]
    b.extend(_isoflop_warning(s))
    b.append(
        _with_sweep(
            s,
            [
                f"C ({conv})",
                "points",
                "N fitted",
                "N_opt",
                "D_opt",
                "loss at optimum",
                "used",
            ],
            [
                [
                    fmt(o["C"], ".3g"),
                    o["n_points"],
                    f"{fmt(o.get('N_fit_min'), '.3g')} - {fmt(o.get('N_fit_max'), '.3g')}",
                    fmt(o["N_opt"], ".3g"),
                    fmt(o["D_opt"], ".3g"),
                    fmt(o["loss_opt"]),
                    _used(o),
                ]
                for o in s["per_budget"]
            ],
        )
    )
    return b


def _envelope_points_block(s) -> tuple:
    """Approach 1: which points of each run the envelope was drawn from."""
    return (
        "p",
        "Final point of each run only"
        + (
            " plus intermediate evaluations (valid only for schedules that do not depend "
            "on run length)."
            if s["uses_intermediate_points"]
            else ": a cosine run's intermediate losses are not those of a run planned that short."
        ),
    )


def _approach12_blocks(result) -> list[tuple]:
    """Approaches 2 and 1: allocation exponents, per-budget optima or why they were skipped."""
    b: list[tuple] = []
    conv = convention(result)
    for key, name in (
        ("isoflop", "Approach 2: IsoFLOP profiles"),
        ("envelope", "Approach 1: lower envelope of loss vs compute"),
    ):
        s = result.get(key)
        b.append(("h2", name))
        if key == "isoflop" and s and "a" not in s and "per_budget" in s:
            b.extend(_isoflop_no_law_blocks(s, conv))
            continue
        if s and "skipped" in s:
            b.append(("p", f"Skipped: {s['skipped']}."))
            continue
        if not s or "a" not in s:
            b.append(("p", "Not enough points per compute budget for this approach."))
            continue
        b.append(
            (
                "p",
                f"N_opt ~ C^a with a = {cell(s, 'a', '.3f')}; "
                f"D_opt ~ C^b with b = {cell(s, 'b', '.3f')}.",
            )
        )
        b.extend(_not_identified_block(s, name.split(":")[0].lower()))
        if key == "isoflop":
            b.extend(_isoflop_optima_blocks(s, conv))
        else:
            b.append(_envelope_points_block(s))
    return b


def _kaplan_blocks(result) -> list[tuple]:
    """The single-variable laws L(N), L(D) and the frontier L(C)."""
    b: list[tuple] = []
    b.append(("h2", "Single-variable laws (Kaplan style), y = E + A x^-alpha"))
    k = result["kaplan"]
    rows, notes, checks = [], [], []
    for law, label in (
        ("L_N", f"L(N) at D = {k['L_N_at_D']:.3g}"),
        ("L_D", f"L(D) at N = {k['L_D_at_N']:.3g}"),
        ("L_C", "L(C) frontier"),
    ):
        s = k[law]
        if s is None:
            rows.append([label, "too few points", "", "", ""])
            continue
        e = cell(s, "E") if s["irreducible"] else "0 (not fitted)"
        rows.append([label, cell(s, "A"), cell(s, "alpha", ".3f"), e, s["n_points"]])
        for q, why in s.get("why_not_identified", {}).items():
            notes.append(f"{label}, {q}: {why}")
        if s.get("law_check"):
            checks.append(f"{label}: {s['law_check']['sentence']}")
    b.append(("table", ["law", "A", "alpha", "E", "points"], rows))
    if checks:
        b.append(("list", checks))
    b.append(
        (
            "p",
            "L(C) is fitted to the compute frontier (runs that no cheaper run matches); "
            "its intervals resample runs and recompute the frontier in each replicate.",
        )
    )
    if notes:
        b.append(("p", "Not identified by these runs: " + "; ".join(notes) + "."))
    return b


def _extrapolation_blocks(result) -> list[tuple]:
    """Approach 3 fitted below a compute threshold, checked on the larger runs."""
    b: list[tuple] = []
    conv = convention(result)
    ext = result["extrapolation"]
    b.append(("h2", "Extrapolation check"))
    if "runs" not in ext:
        b.append(("p", f"Skipped: {ext.get('skipped')}"))
    else:
        b.append(
            (
                "p",
                f"Approach 3 fitted on the {ext['n_train']} runs with C ({conv}) < "
                f"{ext['threshold_C']:.3g}, evaluated on the {ext['n_test']} larger runs: "
                f"mean |relative error| {100 * ext['mean_abs_rel_error']:.2f}%.",
            )
        )
        b.append(
            (
                "table",
                ["run", "N", "D", "loss", "predicted", "relative error"],
                [
                    [
                        r["run_id"],
                        fmt(r["N"], ".3g"),
                        fmt(r["D"], ".3g"),
                        fmt(r["loss"]),
                        fmt(r["predicted"]),
                        f"{100 * r['rel_error']:+.2f}%",
                    ]
                    for r in ext["runs"]
                ],
            )
        )
    return b


ISOFLOP_RULE = (
    "Approach 2's rule: a budget is used when its lowest loss is not at its "
    "smallest or largest size; its parabola in ln N is fitted to the sizes within "
    "2% of that loss (at least one on each side), and its minimum must lie inside "
    "them."
)


def _used(o: dict) -> str:
    return "yes" if o["interior"] else f"no: {o.get('why_not_used') or 'minimum outside'}"


def _isoflop_warning(section: dict) -> list[tuple]:
    return [("p", f"Warning: {section['warning']}.")] if section.get("warning") else []


def _with_sweep(section, header, rows) -> tuple:
    """A per-budget table; with IsoFLOP profiles from several sweeps, a first column names each."""
    per_budget = section["per_budget"]
    if per_budget and "sweep" in per_budget[0]:
        header = ["sweep", *header]
        rows = [[o["sweep"], *row] for o, row in zip(per_budget, rows)]
    return ("table", header, rows)


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


def render_md(blocks) -> str:
    out = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2"):
            out.append(("# " if kind == "h1" else "## ") + block[1])
        elif kind == "p":
            out.append(block[1])
        elif kind == "list":
            out.append("\n".join(f"- {item}" for item in block[1]))
        elif kind == "table":
            header, rows = block[1], block[2]
            lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
            out.append("\n".join(lines))
        elif kind == "fig":
            out.append(f"![{block[2]}](figures/{block[1]}.png)\n\n*{block[2]}*")
    return "\n\n".join(out) + "\n"


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:64em;margin:2em auto;padding:0 1em;"
    "line-height:1.45;color:#222}h1{font-size:1.6em}h2{font-size:1.25em;display:inline}"
    "details{margin:1em 0;border-top:1px solid #ddd;padding-top:.5em}summary{cursor:pointer}"
    "section.summary{background:#f7f9fc;border:1px solid #dde3ee;padding:.5em 1em 1em}"
    "table{border-collapse:collapse;margin:.5em 0;font-size:.92em}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
    "td{font-variant-numeric:tabular-nums}th{background:#f0f0f0}"
    "figure{margin:1em 0}svg{max-width:100%;height:auto}figcaption{font-size:.9em;color:#555}"
    # printed (how a report is shared), every section shows: the closed <details> contents
    # (::details-content where the browser has it; PRINT_SCRIPT opens them everywhere else)
    "@media print{details::details-content{content-visibility:visible}"
    "summary{list-style:none}summary::-webkit-details-marker{display:none}"
    "figure,table{break-inside:avoid}}"
)
# Browsers without ::details-content print a closed <details> as its summary alone: open
# every section before printing and restore the reader's choice after.
PRINT_SCRIPT = (
    "<script>(function(){var shut=[];"
    "addEventListener('beforeprint',function(){shut=[].filter.call("
    "document.querySelectorAll('details:not([open])'),function(d){d.open=true;return true;});});"
    "addEventListener('afterprint',function(){shut.forEach(function(d){d.open=false;});shut=[];});"
    "})();</script>"
)


def render_html(blocks, fig_dir: Path, title: str) -> str:
    """Self-contained HTML: the summary as a highlighted section, every later h2 a <details>."""
    out = [
        "<!DOCTYPE html>",
        "<html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
    ]
    open_tag = None
    for block in blocks:
        kind = block[0]
        if kind == "h1":
            out.append(f"<h1>{html.escape(block[1])}</h1>")
        elif kind == "h2":
            if open_tag:
                out.append(f"</{open_tag}>")
            if block[1] == SUMMARY:
                open_tag = "section"
                out.append(f"<section class='summary'><h2>{html.escape(block[1])}</h2>")
            else:
                open_tag = "details"
                out.append(f"<details><summary><h2>{html.escape(block[1])}</h2></summary>")
        elif kind == "p":
            out.append(f"<p>{html.escape(block[1])}</p>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{html.escape(t)}</li>" for t in block[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(str(h))}</th>" for h in block[1])
            body = "".join(
                "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                for row in block[2]
            )
            out.append(f"<table><tr>{head}</tr>{body}</table>")
        elif kind == "fig":
            svg = (fig_dir / f"{block[1]}.svg").read_text()
            svg = svg[svg.index("<svg") :]  # drop the XML prolog and DOCTYPE: inline SVG
            out.append(f"<figure>{svg}<figcaption>{html.escape(block[2])}</figcaption></figure>")
    if open_tag:
        out.append(f"</{open_tag}>")
    out.append(PRINT_SCRIPT)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- pipeline


def make_figures(an: Analysis, fig_dir: Path, compute: str = "6nd") -> list[tuple[str, str]]:
    """Figures of the baseline's runs (and, with several variants, per variant); when tuned,
    loss vs the first tuned key over every run of the grid."""
    runs, curves, fits, ablation = an.base, an.curves, an.fits, an.ablation
    all_runs, tuned, tuned_runs = an.runs, an.tuned, an.grid_runs
    from analysis import decision_plot, hparam_plot, plots  # lazy: seaborn ~3 s

    plots.setup()
    figures = []

    def add(stem, fig, caption):
        plots.save(fig, fig_dir, stem)
        figures.append((stem, caption))

    _law_figures(add, plots, runs, fits, compute)
    _curve_figures(add, plots, val_points(curves), runs, all_runs)
    if tuned:
        key = tuning.lr_key(tuned["keys"]) or tuned["keys"][0]
        add(
            "tuning",
            plots.loss_vs_hyperparameter(tuning.curve_points(tuned_runs, tuned, key), key),
            tuning_report.figure_caption(key),
        )
    if an.hparams and hparam_plot.surface_cells(an.hparams):
        add(
            "hparam_surface",
            hparam_plot.loss_surfaces(an.hparams),
            hparam_report.figure_caption(an.hparams["tolerance"]),
        )
    if ablation:
        _ablation_figures(add, plots, ablation, compute)
        if ablation["decision"]["n_smaller"]:
            add(
                "agreement",
                decision_plot.agreement(ablation["decision"], ablation["baseline"]),
                decision.CAPTION,
            )
    return figures


def _law_figures(add, plots, runs, fits, compute: str) -> None:
    """The frontier, and with fitted laws the IsoFLOP profiles, L(N) and the L(N, D) contours."""
    if fits is None:
        add(
            "loss_vs_compute",
            plots.loss_vs_compute(runs, None, compute, compute_factor.of_runs(runs)),
            "Final validation loss of the baseline against compute, coloured by N.",
        )
        return
    add(
        "loss_vs_compute",
        plots.loss_vs_compute(runs, fits.kaplan["L_C"], compute, fits.k),
        "Final validation loss against compute, coloured by N, with the fitted frontier "
        "L(C): its slope is -gamma, how fast the best reachable loss falls with compute.",
    )
    if (fits.isoflop or {}).get("per_budget"):
        add(
            "isoflop",
            plots.isoflop_curves(runs, fits.isoflop),
            "IsoFLOP profiles: loss against N per budget, parabolas in log N, minima (stars). "
            "The minima moving to larger N as the budget grows are N_opt(C).",
        )
    add(
        "loss_vs_params",
        plots.loss_vs_params(runs, fits.law),
        "L(N) per token budget with the fitted L(N, D) (approach 3): where the lines miss "
        "the points, the law does not describe these runs.",
    )
    identified = not {"a", "b"} & set(fits.parametric.get("not_identified", []))
    add(
        "contours",
        plots.contours(runs, fits.law, fits.k, identified),
        "Fitted L(N, D) contours with the compute-optimal allocation line (drawn from the "
        "point estimate where the allocation exponents a and b are identified)."
        if identified
        else "Fitted L(N, D) contours. The compute-optimal allocation is not identified by "
        "these runs (approach 3's a and b), so no allocation line is drawn.",
    )


def _curve_figures(add, plots, curves, runs, all_runs) -> None:
    """Training curves: per variant when there are several, else one line per run."""
    if curves is None or curves.empty:
        return
    if all_runs is not None and all_runs["variant"].nunique() > 1:
        add(
            "training_curves",
            plots.training_curves_by_variant(curves, all_runs),
            "Validation loss against tokens seen per variant, one panel per size (its longest "
            "token budget), mean over seeds with the range of seeds as a band: where the "
            "variants part and whether the gap exceeds the seed spread.",
        )
    else:
        add(
            "training_curves",
            plots.training_curves(curves, runs),
            "Validation loss against tokens seen, one line per run: plateaus and spikes here "
            "explain odd final losses.",
        )


def _ablation_figures(add, plots, ablation, compute: str) -> None:
    """The forest plot of every cell and each variant's multiplier against compute."""
    add(
        "forest",
        plots.forest(ablation, compute),
        "Forest plot of every measured cell: the multiplier with its 95% interval; right of "
        "the dashed line at 1 the variant needs less compute than the baseline. Filled "
        "markers: decided after the Holm correction; hollow: cannot tell.",
    )
    add(
        "multipliers",
        plots.multipliers(ablation, compute),
        "Effective compute multiplier of each variant over the baseline against compute "
        "(95% intervals; open markers extrapolated): above the dashed line at 1 the variant "
        "needs less compute than the baseline for the same loss.",
    )


@dataclass(frozen=True)
class Comparison:
    """What a report compares: every run labelled by its variant, and the baseline's runs."""

    runs: pd.DataFrame  # every run; `variant` the --compare value as text, C exact if asked
    base: pd.DataFrame  # the baseline variant's runs, index reset
    variants: list[str]  # every variant, sorted
    law_fit: bool  # fit L(N, D) to the baseline (False: an ablation at one token budget)


def choose_variants(
    runs: pd.DataFrame, compare: str = "variant", baseline: str = "base", compute: str = "6nd"
) -> Comparison:
    """Label every run with its value of `compare`, pick the `baseline` variant's runs, and
    decide whether they support a law fit. InputError (one line) for a missing column, an
    unknown baseline, a baseline that mixes architectures, or unfittable baseline runs."""
    runs = label_variants(runs, compare, baseline)
    variants = sorted(runs["variant"].unique())
    if baseline not in variants:
        raise InputError(f"--baseline: no variant '{baseline}'; variants: {variants}")
    if compute == "exact":  # every C below (fits, multipliers, figures) is exact
        check_exact_compute(runs)
        runs = runs.assign(C=runs["C_exact"].astype(float))
    base = runs[runs["variant"] == baseline].reset_index(drop=True)
    if "arch" in base.columns and base["arch"].nunique() > 1:
        archs = sorted(base["arch"].astype(str).unique())
        raise InputError(
            f"baseline '{baseline}' mixes architectures {archs}: one scaling law per "
            "architecture; use --compare arch --baseline ARCH"
        )
    # An ablation at one token budget (sizes x variants) has no L(N, D) to fit, but its
    # compute multipliers only need each variant's L(C): report those alone.
    law_fit = len(variants) == 1 or (base["N"].nunique() > 1 and base["D"].nunique() > 1)
    law_fit = law_fit and (
        len(variants) == 1 or len(base) > PARAMETRIC_PARAMS
    )  # else: ablation only
    if law_fit:
        check_fittable(base, f"baseline variant '{baseline}'")
    return Comparison(runs=runs, base=base, variants=variants, law_fit=law_fit)


LLAMA = "pre-rmsnorm-rope-gqa2-swiglu"  # the suite's reference block, every ablation's base
# halving's segments; and the WSD decay start, (1 - decay) D in whole batches, which follows
# the batch size when that is tuned
STRUCTURAL = {"train.init_from", "train.save_at_tokens", "train.tokens", "train.decay_start_tokens"}


def fill_defaults(args, frame: pd.DataFrame) -> list[str]:
    """--baseline and --tune when not given, read from the runs, so a sweep's own runs.csv
    reports without flags: the baseline is `base`, else the only value of --compare, else the
    llama block's architecture; a tuned sweep's keys are the settings its candidates vary
    within an arm. Returns what it chose, one note each."""
    notes = []
    if args.baseline is None:
        col = args.compare if args.compare in frame.columns else "variant"
        complete = col in frame and frame[col].notna().all()  # else the rest join `base`
        values = sorted(frame[col].astype(str).unique()) if complete else ["base"]
        args.baseline = "base"
        if "base" not in values and (len(values) == 1 or LLAMA in values):
            args.baseline = values[0] if len(values) == 1 else LLAMA
            notes.append(f"--baseline {args.baseline} (of {values}; pass --baseline to choose)")
    if not args.tune and "tune_role" in frame and frame["tune_role"].eq("candidate").any():
        arms = frame[frame["arm"].notna()] if "arm" in frame else frame.iloc[:0]
        keys = [c for c in frame.columns if "." in c and c not in STRUCTURAL]
        varied = arms.groupby("arm")[keys].nunique(dropna=False).max() if len(arms) else None
        args.tune = [] if varied is None else [k for k in keys if varied[k] > 1]
        if args.tune:
            notes.append(" ".join(f"--tune {k}" for k in args.tune) + " (the tuned settings)")
    return notes


def label_variants(
    runs: pd.DataFrame, compare: str = "variant", baseline: str = "base"
) -> pd.DataFrame:
    """Every run's `variant` as text: its value of `compare`; the baseline where it has none."""
    if compare != "variant":
        if compare not in runs.columns:
            raise InputError(f"--compare: no column '{compare}' in the runs")
        runs = runs.assign(variant=runs[compare])
    if "variant" not in runs.columns:
        runs = runs.assign(variant=baseline)
    elif compare == "variant" and runs["variant"].isna().any():
        # a source without the column (its rows are NaN after concatenation): baseline runs
        runs = runs.assign(variant=runs["variant"].fillna(baseline))
    return runs.assign(variant=runs["variant"].astype(str))


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m analysis.report", description=__doc__)
    add_selection_args(parser)
    add_fit_args(parser)
    parser.add_argument(
        "--curves",
        action="append",
        help="curves.csv (run_id, tokens, val_loss[, train_loss, lr]) for --csv input; repeatable",
    )
    parser.add_argument(
        "--intermediate",
        action="store_true",
        help="approach 1 also uses intermediate evaluations (constant-LR runs only)",
    )
    parser.add_argument(
        "--compare",
        default="variant",
        help="column whose values are compared, one scaling law each: variant "
        "(ablation sweeps) or arch (a grid over presets)",
    )
    parser.add_argument(
        "--baseline",
        help="baseline value of --compare (default: base; else the only value, or the llama "
        "block's architecture when it is one of them)",
    )
    parser.add_argument(
        "--group",
        choices=("family",),
        help="one report over several model families: a section per family "
        "(its own law and figures) and a table comparing only their "
        "compute-optimal allocations (losses of different objectives "
        "are not comparable)",
    )
    parser.add_argument(
        "--title", help="report title (default: experiment name(s) or CSV folder name(s))"
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--export-only",
        action="store_true",
        help="write runs.csv and curves.csv and nothing else (no fit: e.g. a dense full grid "
        "for analysis.tuning_check or analysis.tuning_validation)",
    )
    decision.add_args(parser)
    return parser


@dataclass(frozen=True)
class Analysis:
    """Everything one report (or one family's section of a families report) shows."""

    runs: pd.DataFrame  # every run labelled by its variant (C exact if asked)
    grid_runs: pd.DataFrame | None  # --tune: every run of the grid (what runs.csv holds)
    base: pd.DataFrame  # the baseline variant's runs (the law is fitted to these)
    curves: pd.DataFrame | None
    fits: Fits | None  # None: an ablation at one token budget
    law_comparison: list[tuple]
    ablation: dict | None
    tuned: dict | None  # --tune: the tuning section of every arm
    rule: dict | None  # --tune: the baseline's lr rule
    hparams: dict | None = None  # --tune: the baseline's lr and batch-size laws

    @property
    def exported(self) -> pd.DataFrame:
        """The runs runs.csv holds: the grid's every run when tuned."""
        return self.runs if self.grid_runs is None else self.grid_runs

    @property
    def result(self) -> dict | None:
        return None if self.fits is None else self.fits.as_dict()

    def fit_json(self) -> dict:
        tuned_json = {"tuning": self.tuned, "lr_rule": self.rule} if self.tuned else {}  # all arms
        if self.tuned:
            tuned_json.update(hparam_entries(self.hparams))
        return {**(self.result or {"parametric": None}), **tuned_json, "ablation": self.ablation}


def analyse(
    frame: pd.DataFrame, args, budgets: list[float] | None = None, curves_of=None
) -> Analysis:
    """Every fit of one family's runs (InputError before any file is written). `budgets`
    replaces --budget (a families report states every family's allocation at the same C);
    `curves_of(runs)` the curves of those runs (default: --curves or the store)."""
    tuned, grid_runs = None, None
    if args.tune:  # the arms' results are the report's runs; every run goes into runs.csv
        grid_runs = label_variants(frame, args.compare, args.baseline)
        frame, tuned = tuning.select(grid_runs, args.tune)
    chosen = choose_variants(frame, args.compare, args.baseline, args.compute)
    runs, base = chosen.runs, chosen.base
    curves = (curves_of or (lambda r: _curves(args, r)))(runs if grid_runs is None else grid_runs)
    fits = None
    sigma = noise.noise_scale(runs)["sigma"]
    base = base[~noise.on_plateau(base, sigma)]  # listed in the ablation's plateau section
    law_fit = chosen.law_fit and len(base) > PARAMETRIC_PARAMS  # else: too few off the plateau
    if law_fit and len(base):
        options = FitOptions.from_args(args, budgets=budgets or args.budget)
        extra = dict(intermediate=args.intermediate, tuned=tuned, grid_runs=grid_runs)
        fits = fit_all(base, options, curves=val_points(curves), **extra)
        law_check.check_baseline_fits(fits, base, sigma)
    # every law form the columns allow, judged on the runs above the hold-out threshold
    # (nothing when the runs are too few); 200 refits at most: it refits four laws
    law_comparison = (
        compare_laws.report_blocks(
            base,
            min(args.bootstrap, 200),
            args.seed,
            args.holdout_above,
        )
        if law_fit
        else []
    )
    rule, hparams = _baseline_rules(tuned, base, grid_runs, fits, args)
    ablation = None
    if len(chosen.variants) > 1:
        ablation = compare_variants(
            runs, baseline=args.baseline, n_boot=args.bootstrap, seed=args.seed
        )
        ablation["compute"] = args.compute
        ablation.update(decision.sections(runs, ablation, args))  # time, decision accuracy
    return Analysis(
        runs=runs,
        grid_runs=grid_runs,
        base=base,
        curves=curves,
        fits=fits,
        law_comparison=law_comparison,
        ablation=ablation,
        tuned=tuned,
        rule=rule,
        hparams=hparams,
    )


def _baseline_rules(tuned, base: pd.DataFrame, grid_runs, fits, args) -> tuple:
    """The baseline's lr rule and its lr / batch-size laws (its arms), also in an ablation
    without a law fit; (None, None) when untuned."""
    if not tuned:
        return None, None
    if fits:
        return fits.lr_rule, fits.hparams
    arms, k = tuning.for_runs(tuned, base["run_id"]), compute_factor.of_runs(base)
    return (
        tuning.lr_rule(arms, args.bootstrap, args.seed, k),
        hparam_laws.section(grid_runs, arms, args.bootstrap, args.seed, k),
    )


def report_blocks(
    an: Analysis, excluded, fig_dir: Path, title: str, source: str, args
) -> list[tuple]:
    """The figures (written to `fig_dir`) and the blocks of one analysis."""
    figures = make_figures(an, fig_dir, args.compute)
    blocks = build_blocks(an, excluded, figures, title, source)
    keys = an.tuned["keys"] if an.tuned else ()
    return blocks + curve_blocks(an.grid_runs, an.curves, fig_dir, keys)


def write_report(out: Path, blocks: list[tuple], title: str, fit_json: dict) -> None:
    """report.md, report.html (figures inlined from out/figures) and fit.json."""
    (out / "report.md").write_text(render_md(blocks))
    (out / "report.html").write_text(render_html(blocks, out / "figures", title))
    (out / "fit.json").write_text(dumps(fit_json))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        check_fit_args(args)
        check_out_dir(args.out)
        loaded = load_selected(args)
        for note in fill_defaults(args, loaded.frame):
            print(f"note: {note}")
        if args.export_only:
            return export_only(args, loaded.frame)
        if args.group == "family":
            return families_main(args, loaded)
        check_one_family(
            loaded.frame,
            "the selection",
            "report one family at a time, or one section per family: --group family",
        )
        an = analyse(loaded.frame, args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    title = args.title or default_title(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    an.exported.to_csv(out / "runs.csv", index=False)
    if an.curves is not None and not an.curves.empty:
        an.curves.to_csv(out / "curves.csv", index=False)
    blocks = report_blocks(an, loaded.excluded, out / "figures", title, loaded.source, args)
    write_report(out, blocks, title, an.fit_json())
    if an.result is not None:
        print(summary(an.result, title))
    else:
        print(f"== {title}: {len(an.runs)} runs, one token budget per baseline size: ablation only")
    for line in headline.answer_lines(an.ablation):
        print(textwrap.fill(line, width=80, subsequent_indent="  "))
    print(f"wrote {out}/report.md, report.html, fit.json, runs.csv, figures/")
    return 0


def families_main(args, loaded: Runs) -> int:
    """The families report (--group family, `analysis.families_report`); InputError before
    anything is written."""
    analyses, budgets = _family_analyses(args, with_family(loaded.frame))
    title = args.title or default_title(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _write_family_tables(out, analyses)
    blocks = _families_blocks(args, loaded, analyses, budgets, title, out)
    fit_json = {
        "group_by": "family",
        "budgets": budgets,
        "comparison": families_report.comparison(analyses),
        "groups": {f: an.fit_json() for f, an in analyses.items()},
    }
    write_report(out, blocks, title, fit_json)
    for f, an in analyses.items():
        if an.result is not None:
            print(summary(an.result, f"family={f}"))
    print(
        f"wrote {out}/report.md, report.html, fit.json, runs.csv, figures/ ({len(analyses)} families)"
    )
    return 0


def _family_analyses(args, frame: pd.DataFrame) -> tuple[dict[str, Analysis], list]:
    """One analysis per family, all at the same compute budgets; InputError before any fit."""
    present = ordered(frame["family"])
    frames = {f: frame[frame["family"] == f] for f in present}
    for f, g in frames.items():  # one k per family, before any fitting
        compute_factor.of_runs(g, f"family {f}")
    top = frame.assign(C=frame["C_exact"]) if args.compute == "exact" else frame
    budgets = args.budget or default_budgets(top)  # the same budgets C for every family

    def curves_of(runs: pd.DataFrame) -> pd.DataFrame | None:
        curves = _curves(args, runs)
        return None if curves is None else curves[curves["run_id"].isin(runs["run_id"])]

    return {f: analyse(g, args, budgets, curves_of) for f, g in frames.items()}, budgets


def _write_family_tables(out: Path, analyses: dict[str, Analysis]) -> None:
    """runs.csv of every family, and curves.csv when any family has training curves."""
    pd.concat([an.exported for an in analyses.values()]).to_csv(out / "runs.csv", index=False)
    curves = [
        an.curves for an in analyses.values() if an.curves is not None and not an.curves.empty
    ]
    if curves:
        pd.concat(curves).to_csv(out / "curves.csv", index=False)


def _families_blocks(args, loaded: Runs, analyses, budgets, title, out: Path) -> list[tuple]:
    """The report: runs per family, the comparison, excluded runs, one section per family
    (writing each family's figures)."""
    n_runs = sum(len(an.exported) for an in analyses.values())
    blocks: list[tuple] = [("h1", f"Scaling-law report by model family: {title}")]
    blocks.append(
        (
            "p",
            f"{n_runs} finished runs of {len(analyses)} families "
            f"({', '.join(f'{f} {len(an.exported)}' for f, an in analyses.items())}); "
            f"{len(loaded.excluded)} excluded. Every estimate carries a 95% bootstrap "
            f"percentile interval over runs ({args.bootstrap} replicates).",
        )
    )
    blocks += families_report.comparison_blocks(analyses, budgets, bool(args.budget))
    if len(loaded.excluded):
        blocks.append(("h2", "Excluded runs"))
        blocks.append(
            ("table", ["excluded run", "status", "reason"], loaded.excluded.values.tolist())
        )
    for f, an in analyses.items():
        section = report_blocks(
            an,
            loaded.excluded.iloc[0:0],
            out / "figures" / families_report.folder(f),
            f"{title}, {f}",
            loaded.source,
            args,
        )
        blocks += families_report.family_blocks(f, section)
    return blocks


def default_title(args) -> str:
    names = args.experiment or [Path(c).parent.name or Path(c).stem for c in args.csv]
    return " + ".join(names)


def export_only(args, frame: pd.DataFrame) -> int:
    """--export-only: the selection's runs (variants labelled) and their curves, no fit."""
    runs = label_variants(frame, args.compare, args.baseline or "base")
    curves = _curves(args, runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out / "runs.csv", index=False)
    wrote = "runs.csv"
    if curves is not None and not curves.empty:
        curves.to_csv(out / "curves.csv", index=False)
        wrote += ", curves.csv"
    print(f"wrote {out}/{wrote} ({len(runs)} runs; --export-only: no fit, no report)")
    return 0


def _curves(args, runs: pd.DataFrame) -> pd.DataFrame | None:
    if args.curves:
        parts = []
        for path in args.curves:
            if not Path(path).is_file():
                raise InputError(f"--curves: no such file: {path}")
            check_text(Path(path), "--curves")
            curves = pd.read_csv(path)
            missing = {"run_id", "tokens", "val_loss"} - set(curves.columns)
            if missing:
                raise InputError(f"--curves: missing column(s) {sorted(missing)} in {path}")
            parts.append(curves)
        return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    if args.experiment:
        return load_curves(runs["run_id"], args.tracking_uri)
    return None


if __name__ == "__main__":
    sys.exit(main())
