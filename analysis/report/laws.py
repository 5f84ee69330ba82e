"""The law sections of a report: approaches 3, 2 and 1, the single-variable laws, the
extrapolation check and the laws compared on held-out runs; the law's summary and figures.

With no L(N, D) law (an ablation at one token budget, or too few baseline runs) the section
says why, under "Baseline law".
"""

from __future__ import annotations

from analysis.data import compute_factor
from analysis.fits.estimate import cell, fmt
from analysis.fits.fit import convention
from analysis.fits.summary import law_summary
from analysis.report.section import Context, Figure, Quiet, not_identified_block


class Laws(Quiet):
    """fit.json's law sections (approach 3's `parametric` and the rest of `Fits.as_dict`)."""

    def fit_json(self, an) -> dict:
        return an.result or {"parametric": None}

    def summary(self, an, figs: dict[str, str]) -> list[tuple]:
        result, b = an.result, []
        if result is not None:
            if an.ablation:
                b.append(("p", f"The baseline's own scaling law ({result['n_runs']} runs):"))
            b.extend(law_summary(result))
            if not an.ablation and "loss_vs_compute" in figs:
                b.append(("fig", "loss_vs_compute", figs.pop("loss_vs_compute")))
        elif not an.ablation:
            b.append(("p", "No law could be fitted to these runs."))
        return b

    def blocks(self, an, ctx: Context) -> list[tuple]:
        result = an.result
        if result is not None:
            return [
                *_approach3_blocks(result),
                *_approach12_blocks(result),
                *_kaplan_blocks(result),
                *_extrapolation_blocks(result),
                *an.law_comparison,
            ]
        one_budget = an.base["D"].nunique() == 1
        return [
            ("h2", "Baseline law"),
            (
                "p",
                "The baseline has one token budget, so no L(N, D) law is fitted: this is "
                "an ablation report."
                if one_budget
                else f"The baseline has {len(an.base)} runs, too few for the 5 parameters of "
                "L(N, D), so no law is fitted: this is an ablation report.",
            ),
        ]

    def figures(self, an, ctx: Context) -> list[Figure]:
        """The frontier, and with fitted laws the IsoFLOP profiles, L(N) and the L(N, D)
        contours."""
        runs, fits, compute = an.base, an.fits, ctx.compute
        if fits is None:
            return [
                Figure(
                    "loss_vs_compute",
                    "Final validation loss of the baseline against compute, coloured by N.",
                    "Baseline law",
                    lambda plots: plots.loss_vs_compute(
                        runs, None, compute, compute_factor.of_runs(runs)
                    ),
                )
            ]
        out = [
            Figure(
                "loss_vs_compute",
                "Final validation loss against compute, coloured by N, with the fitted frontier "
                "L(C): its slope is -gamma, how fast the best reachable loss falls with compute.",
                "Single-variable laws",
                lambda plots: plots.loss_vs_compute(runs, fits.kaplan["L_C"], compute, fits.k),
            )
        ]
        if (fits.isoflop or {}).get("per_budget"):
            out.append(
                Figure(
                    "isoflop",
                    "IsoFLOP profiles: loss against N per budget, parabolas in log N, minima "
                    "(stars). The minima moving to larger N as the budget grows are N_opt(C).",
                    "Approach 2",
                    lambda plots: plots.isoflop_curves(runs, fits.isoflop),
                )
            )
        out.append(
            Figure(
                "loss_vs_params",
                "L(N) per token budget with the fitted L(N, D) (approach 3): where the lines "
                "miss the points, the law does not describe these runs.",
                "Approach 3",
                lambda plots: plots.loss_vs_params(runs, fits.law),
            )
        )
        identified = not {"a", "b"} & set(fits.parametric.get("not_identified", []))
        out.append(
            Figure(
                "contours",
                "Fitted L(N, D) contours with the compute-optimal allocation line (drawn from "
                "the point estimate where the allocation exponents a and b are identified)."
                if identified
                else "Fitted L(N, D) contours. The compute-optimal allocation is not identified "
                "by these runs (approach 3's a and b), so no allocation line is drawn.",
                "Approach 3",
                lambda plots: plots.contours(runs, fits.law, fits.k, identified),
            )
        )
        return out


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
    b.extend(not_identified_block(p, "approach 3"))
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
        b.extend(not_identified_block(s, name.split(":")[0].lower()))
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


SHORT_ID = 8  # a run id's first 8 characters: unique among a report's runs, found by grep


def run_name(row: dict) -> str:
    """A held-out run as people name it: its variant and seed ('llama, seed 1'; the variant
    left out where it is the unnamed `base`); fit.json keeps the full run id."""
    parts = [str(row["variant"])] if row.get("variant") not in (None, "base") else []
    if row.get("seed") is not None:
        parts.append(f"seed {row['seed']}")
    return ", ".join(parts) or "-"


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
                ["run", "N", "D", "loss", "predicted", "relative error", "run id"],
                [
                    [
                        run_name(r),
                        fmt(r["N"], ".3g"),
                        fmt(r["D"], ".3g"),
                        fmt(r["loss"]),
                        fmt(r["predicted"]),
                        f"{100 * r['rel_error']:+.2f}%",
                        str(r["run_id"])[:SHORT_ID],
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
