"""One report over the runs of several model families: `python -m analysis.report --group family`.

    python -m analysis.report --experiment reference-families --tune train.lr --group family --out DIR
    python -m analysis.report --csv DIR/runs.csv --curves DIR/curves.csv --tune train.lr --group family --out DIR

Every family is analysed alone, exactly as a single-family report (`report.analyse`): its own
law, intervals, not-identified flags and figures, in a section of its own. Losses are never
compared across families (a decoder's next-token loss, an encoder's masked-LM loss on 15% of
its tokens and an encoder-decoder's span-corruption loss measure different things, see
`analysis.data.families`): the only table across families is the compute-optimal allocation, its
exponents a and b and the tokens per parameter D_opt / N_opt at the same budgets C (each
family's C as its runs log it, `analysis.data.compute_factor`). runs.csv and curves.csv hold every
family's runs, so the report regenerates from them.
"""

from __future__ import annotations

from analysis.data import compute_factor
from analysis.fits.estimate import cell

# What D counts in each family (fit.json's compute_convention says it for k != 1 as well)
D_COUNTS = {
    "decoder": "tokens trained (every token is a next-token target)",
    "encoder": "input tokens (every token of the window; the loss reads the ~15% masked)",
    **{family: counts["D"] for family, counts in compute_factor.COUNTS.items()},
}
NOT_COMPARED = (
    "Losses are not compared across families: the decoder's next-token loss, the encoder's "
    "masked-LM loss (on 15% of its tokens) and the encoder-decoder's span-corruption loss "
    "measure different things, so no loss, irreducible loss E or loss-law coefficient (A, B, "
    "alpha, beta) appears in this table; each family's own losses and law are in its section."
)
ALLOCATION = ("N_opt", "D_opt", "tokens_per_param")


def comparison(analyses: dict) -> dict:
    """fit.json's `comparison`: per family what is comparable across families (approach 3's
    allocation exponents and its allocation at the common budgets), with intervals and flags."""
    out = {}
    for family, an in analyses.items():
        if an.fits is None:
            out[family] = {"skipped": "no law fitted (one token budget per size)"}
            continue
        p = an.fits.parametric
        names = ["a", "b"] + [f"{q}@{r['C']:.3g}" for r in p["allocation"] for q in ALLOCATION]
        out[family] = {
            "n_runs": an.fits.n_runs,
            "k": an.fits.k,
            "a": p["a"],
            "b": p["b"],
            "allocation": p["allocation"],
            "ci95": {n: p["ci95"].get(n) for n in names},
            "not_identified": [n for n in p["not_identified"] if n in names],
            **({"ci95_unclipped": p["ci95_unclipped"]} if "ci95_unclipped" in p else {}),
        }
    return out


def comparison_blocks(analyses: dict, budgets: list[float], given: bool) -> list[tuple]:
    """The summary: allocation exponents and the allocation at `budgets` (`given` by --budget,
    else the largest measured C of any family and 100x it) per family, and what C, D count."""
    conv = {
        f: an.fits.k if an.fits else compute_factor.of_runs(an.base) for f, an in analyses.items()
    }
    b: list[tuple] = [("h2", "Summary")]
    b.append(
        (
            "p",
            "One law per family, each fitted to its own runs only (approach 3, 95% "
            "bootstrap intervals). Compared across families: the compute-optimal "
            "allocation only, N_opt ~ C^a and D_opt ~ C^b, and the tokens per parameter "
            "at the same budgets C.",
        )
    )
    rows, alloc = [], []
    for family, an in analyses.items():
        if an.fits is None:
            rows.append([family, len(an.base), "no law fitted", "no law fitted"])
            continue
        p = an.fits.parametric
        rows.append([family, an.fits.n_runs, cell(p, "a", ".3f"), cell(p, "b", ".3f")])
        for r in p["allocation"]:
            tag = f"@{r['C']:.3g}"
            alloc.append(
                [family, f"{r['C']:.3g}"] + [cell(p, q, ".3g", q + tag, r[q]) for q in ALLOCATION]
            )
    b.append(("table", ["family", "runs fitted", "a (N_opt ~ C^a)", "b (D_opt ~ C^b)"], rows))
    if alloc:
        b.append(
            ("table", ["family", "C (FLOPs)", "N_opt", "D_opt", "tokens per parameter"], alloc)
        )
    b.append(("p", NOT_COMPARED))
    b.append(
        (
            "p",
            "What C and D count: C = k 6 N D, N the non-embedding parameters (of both "
            "stacks for an encoder-decoder), so a budget C is the same compute for every "
            "family. Budgets: "
            + ", ".join(f"{c:.3g}" for c in budgets)
            + " FLOPs"
            + (
                " (--budget)."
                if given
                else " (the largest measured C of any family, and "
                "100x it: beyond a family's own runs the allocation is an extrapolation)."
            ),
        )
    )
    b.append(
        (
            "table",
            ["family", "k = C / (6 N D)", "D counts"],
            [[f, f"{conv[f]:.4g}", D_COUNTS.get(f, "tokens trained")] for f in analyses],
        )
    )
    return b


def folder(family: str) -> str:
    """A family label as one folder name (``encoder_decoder/seq2seq_pairs`` has a slash)."""
    return family.replace("/", "+")


def family_blocks(family: str, blocks: list[tuple]) -> list[tuple]:
    """A single-family report's blocks as a section of the families report: no title, every
    heading named by the family, figures in figures/<family>/ (see `folder`)."""
    out: list[tuple] = []
    intro = [x for x in blocks[:2] if x[0] == "p"]
    for block in blocks:
        if block[0] == "h1" or block in intro:
            continue
        if block[0] == "h2":
            name = "summary" if block[1] == "Summary" else block[1]
            out.append(("h2", f"Family {family}: {name}"))
            if block[1] == "Summary":
                out.extend(intro)
        elif block[0] == "fig":
            out.append(("fig", f"{folder(family)}/{block[1]}", block[2]))
        else:
            out.append(block)
    return out
