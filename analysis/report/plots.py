"""Seaborn figures: functions of a runs DataFrame and fit results, saved as PNG, SVG and PDF.

For a paper: PDF with embedded TrueType fonts (text stays editable and searchable), SVG with
text as text, loss axes in nats per token, log axes labelled with plain numbers, and one colour
per variant in every figure of a report (`variant_palette`).

Deterministic output: the Agg backend, a fixed `svg.hashsalt` (SVG element ids), no dates in
the metadata, so re-running on the same runs rewrites byte-identical files.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from analysis.fits.isoflop import isoflop_profiles  # noqa: E402
from analysis.fits.laws.chinchilla import Parametric, allocation  # noqa: E402

SVG_META = {"Date": None, "Creator": None}
PNG_META = {"Software": None}
PDF_META = {"CreationDate": None, "Creator": None, "Producer": None}
LOSS = "validation loss (nats per token)"


def setup() -> None:
    sns.set_theme(style="whitegrid", context="paper")
    plt.rcParams.update(
        {
            "svg.hashsalt": "scaling-lab",
            "svg.fonttype": "none",  # text as <text>, editable in a vector editor
            "pdf.fonttype": 42,  # TrueType embedded: editable, extractable text
            "figure.dpi": 100,
            "savefig.dpi": 150,
        }
    )


def save(fig, out_dir: Path, name: str) -> list[Path]:
    """The figure as PNG (reports), SVG (inlined in report.html) and PDF (papers)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    readable_ticks(fig)
    paths = [out_dir / f"{name}.{ext}" for ext in ("png", "svg", "pdf")]
    for path, meta in zip(paths, (PNG_META, SVG_META, PDF_META)):
        fig.savefig(path, metadata=meta, bbox_inches="tight")
    plt.close(fig)
    return paths


def variant_palette(variants) -> dict:
    """One colour per variant, the same in every figure of a report: pass every variant."""
    names = sorted({str(v) for v in variants})
    return dict(zip(names, sns.color_palette("deep", n_colors=max(len(names), 1))))


def tick_text(value: float, _pos=None) -> str:
    """A log-axis tick as a plain number with 2-3 significant digits: 0.0005, 3.4, 1000, 3e5."""
    if value == 0:
        return "0"
    if 1e-4 <= abs(value) < 1e4:
        return f"{float(f'{value:.3g}'):g}"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def readable_ticks(fig) -> None:
    """Every log axis of `fig` labelled with plain numbers at a few readable positions: over
    less than half a decade (a loss axis) evenly spaced values, else 1, 2, 5 or decades; no
    minor labels."""
    for ax in fig.axes:
        for axis, lim in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if axis.get_scale() != "log" or min(lim) <= 0:
                continue
            decades = np.log10(max(lim) / min(lim))
            if decades < 0.5:
                axis.set_major_locator(ticker.MaxNLocator(nbins=5, steps=[1, 2, 5, 10]))
                axis.set_minor_locator(ticker.NullLocator())
            else:
                subs = (1.0,) if decades > 3 else (1.0, 2.0, 5.0)
                axis.set_major_locator(ticker.LogLocator(base=10, subs=subs))
                axis.set_minor_locator(ticker.LogLocator(base=10, subs="auto"))
            axis.set_major_formatter(ticker.FuncFormatter(tick_text))
            axis.set_minor_formatter(ticker.NullFormatter())


def _loglog(ax, xlabel: str, ylabel: str = LOSS):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)


COMPUTE_LABELS = {"6nd": "compute C = 6ND (FLOPs)", "exact": "compute C = exact training FLOPs"}


def compute_label(compute: str = "6nd", k: float = 1.0) -> str:
    """The C axis: 6ND, exact FLOPs, or k 6ND for a family whose C is not 6ND."""
    if compute == "6nd" and k != 1.0:
        return f"compute C = k 6ND, k = {k:.4g} (FLOPs)"
    return COMPUTE_LABELS[compute]


def loss_vs_compute(
    runs: pd.DataFrame, frontier_law: dict | None, compute: str = "6nd", k: float = 1.0
):
    """Every run's final loss against C (k 6ND or exact), coloured by N, with the fitted L(C)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.scatterplot(
        data=runs,
        x="C",
        y="loss",
        hue="N",
        hue_norm=matplotlib.colors.LogNorm(),
        palette="viridis",
        ax=ax,
        legend=False,
    )
    if frontier_law:
        c = np.geomspace(runs["C"].min(), runs["C"].max(), 200)
        y = frontier_law.get("E", 0.0) + frontier_law["A"] * c ** -frontier_law["alpha"]
        ax.plot(c, y, color="black", lw=1.5, label=f"frontier, C^-{frontier_law['alpha']:.3f}")
        ax.legend()
    _loglog(ax, compute_label(compute, k))
    fig.colorbar(
        plt.cm.ScalarMappable(
            matplotlib.colors.LogNorm(runs["N"].min(), runs["N"].max()), "viridis"
        ),
        ax=ax,
        label="N (non-embedding)",
    )
    return fig


def isoflop_curves(runs: pd.DataFrame, isoflop: dict):
    """Loss against N per IsoFLOP profile; for the budgets approach 2 uses, the parabola in ln N
    over the sizes it was fitted to, and its minimum.

    The profiles and their names come from `isoflop_profiles`, as in approach 2's table: runs
    outside them (e.g. a fixed-size token grid) are not drawn, and when the runs come from
    several sweeps each budget is labelled with its sweep.
    """
    profiles = isoflop_profiles(runs)
    runs, labels = profiles.runs, profiles.labels
    names = {k: profiles.name(k) for k in profiles.ids}  # by budget, then sweep
    order = list(names.values())
    data = runs.assign(budget=[names[k] for k in labels])
    fig, ax = plt.subplots(figsize=(6, 4))
    palette = sns.color_palette("flare", n_colors=len(order))
    sns.scatterplot(
        data=data, x="N", y="loss", hue="budget", hue_order=order, palette=palette, ax=ax
    )
    rows = pd.DataFrame(isoflop["per_budget"])
    for (_, o), color in zip(rows.iterrows(), palette):
        if not o["interior"]:  # not used: its runs only
            continue
        x = np.linspace(np.log(o["N_fit_min"]), np.log(o["N_fit_max"]), 100)
        x_opt = np.log(o["N_opt"])
        ax.plot(np.exp(x), o["loss_opt"] + o["curvature"] * (x - x_opt) ** 2, color=color, lw=1)
    opt = rows[rows["interior"].astype(bool)]
    ax.scatter(
        opt["N_opt"], opt["loss_opt"], marker="*", s=120, color="black", zorder=5, label="minimum"
    )
    _loglog(ax, "N (non-embedding parameters)")
    ax.legend(title="C (FLOPs)", fontsize=7)
    return fig


def loss_vs_params(runs: pd.DataFrame, law: Parametric):
    """L(N) per token budget (D rounded to 2 significant digits) with the fitted L(N, D)."""
    data = runs.assign(tokens=runs["D"].map(lambda d: f"{d:.2g}"))
    order = sorted(data["tokens"].unique(), key=float)
    palette = sns.color_palette("crest", n_colors=len(order))
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.scatterplot(
        data=data, x="N", y="loss", hue="tokens", hue_order=order, palette=palette, ax=ax
    )
    n = np.geomspace(runs["N"].min(), runs["N"].max(), 100)
    for color, d in zip(palette, order):
        ax.plot(n, law.predict(n, float(d)), color=color, lw=1)
    _loglog(ax, "N (non-embedding parameters)")
    ax.legend(title="D (tokens)", fontsize=7)
    return fig


def contours(runs: pd.DataFrame, law: Parametric, k: float = 1.0, identified: bool = True):
    """Fitted L(N, D) contours in the (N, D) plane with the compute-optimal line (under
    C = k 6ND; the line is the same for every k, drawn over the budgets of the plotted area).

    The line only where the allocation is identified (`identified`) and passes through the
    plotted area; otherwise the figure says so in words and the legend has no line entry.
    """
    n = np.geomspace(runs["N"].min() / 3, runs["N"].max() * 3, 200)
    d = np.geomspace(runs["D"].min() / 3, runs["D"].max() * 3, 200)
    grid_n, grid_d = np.meshgrid(n, d)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    cs = ax.contourf(grid_n, grid_d, law.predict(grid_n, grid_d), levels=20, cmap="mako_r")
    fig.colorbar(cs, ax=ax, label="fitted loss (nats per token)")
    c = np.geomspace(6 * k * n[0] * d[0], 6 * k * n[-1] * d[-1], 200)
    opt = allocation(law.theta[None, :], c, k)
    n_opt, d_opt = opt["N_opt"][0], opt["D_opt"][0]
    inside = (n_opt >= n[0]) & (n_opt <= n[-1]) & (d_opt >= d[0]) & (d_opt <= d[-1])
    if identified and inside.any():
        ax.plot(n_opt, d_opt, color="orange", lw=2, label="compute-optimal")
    else:
        why = (
            "compute-optimal line outside this area"
            if identified and np.isfinite(n_opt).any()
            else "allocation not identified: no compute-optimal line"
        )
        ax.text(
            0.03,
            0.04,
            why,
            transform=ax.transAxes,
            fontsize=8,
            bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none"},
        )
    ax.scatter(runs["N"], runs["D"], s=12, color="white", edgecolor="black", label="runs")
    ax.set_xlim(n[0], n[-1])
    ax.set_ylim(d[0], d[-1])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N (non-embedding parameters)")
    ax.set_ylabel("D (tokens)")
    ax.legend(fontsize=7, loc="upper right")
    return fig


def training_curves(curves: pd.DataFrame, runs: pd.DataFrame):
    """Validation loss against tokens seen, one line per run, coloured by N."""
    data = curves.merge(runs[["run_id", "N"]], on="run_id")
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.lineplot(
        data=data,
        x="tokens",
        y="val_loss",
        hue="N",
        units="run_id",
        estimator=None,
        hue_norm=matplotlib.colors.LogNorm(),
        palette="viridis",
        ax=ax,
        legend=False,
        lw=1,
    )
    _loglog(ax, "tokens seen")
    return fig


def training_curves_by_variant(curves: pd.DataFrame, runs: pd.DataFrame):
    """Validation loss against tokens, one panel per size (k-th smallest N of each variant),
    one line per variant (its longest token budget at that size): the mean over seeds, with the
    band from the lowest to the highest seed."""
    runs = runs.assign(size=runs.groupby("variant")["N"].rank(method="dense").astype(int))
    longest = runs[runs["D"] == runs.groupby(["variant", "size"])["D"].transform("max")]
    data = curves.merge(longest[["run_id", "variant", "size", "N"]], on="run_id")
    sizes = sorted(data["size"].unique())
    fig, axes = plt.subplots(
        1, len(sizes), figsize=(4 * len(sizes), 3.6), sharey=True, squeeze=False
    )
    palette = variant_palette(runs["variant"])
    for ax, size in zip(axes[0], sizes):
        panel = data[data["size"] == size]
        for v, g in panel.groupby("variant", sort=True):
            band = g.groupby("tokens")["val_loss"].agg(["mean", "min", "max"])
            ax.plot(band.index, band["mean"], color=palette[v], lw=1.2, label=v)
            ax.fill_between(band.index, band["min"], band["max"], color=palette[v], alpha=0.2)
        ax.set_title(f"size {size} (N ~ {panel['N'].median():.3g})", fontsize=9)
        _loglog(ax, "tokens seen")
        ax.tick_params(axis="y", labelleft=True)  # shared limits, but every panel readable
    axes[0][0].legend(fontsize=7)
    return fig


def forest(ablation: dict, compute: str = "6nd"):
    """Forest plot: one row per variant x measured budget, the multiplier with its 95% interval
    on a log axis, the line at 1; filled markers where the Holm-controlled verdict decides."""
    rows = []
    for v, res in ablation["variants"].items():
        if v == ablation["baseline"]:
            continue
        for m in res["multipliers"]:
            if m["measured"]:
                lo, hi = m["ci95"] or (np.nan, np.nan)
                rows.append((v, m["C"], m["multiplier"], lo, hi, m.get("verdict")))
    palette = variant_palette(ablation["variants"])
    fig, ax = plt.subplots(figsize=(6, 0.9 + 0.22 * max(len(rows), 1)))
    for y, (v, _, m, lo, hi, verdict) in enumerate(rows):
        decided = verdict in ("better", "worse")
        ax.hlines(y, lo, hi, color=palette[v], lw=1.5)
        ax.scatter(
            [m], [y], color=palette[v] if decided else "white", edgecolor=palette[v], zorder=3, s=28
        )
    ax.axvline(1.0, color="gray", ls="--", lw=1)
    ax.set_yticks(range(len(rows)), [f"{v}, C {C:.2g}" for v, C, *_ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    unit = "6ND" if compute == "6nd" else "exact FLOPs"
    ax.set_xlabel(f"compute multiplier vs {ablation['baseline']} (C in {unit}; filled: decided)")
    return fig


def multipliers(ablation: dict, compute: str = "6nd"):
    """Effective compute multiplier of each variant over the baseline: measured budgets as
    filled points joined by a line, extrapolated budgets as open markers, not joined (an
    extrapolation is not a measurement); each with its 95% interval, its ends as markers. The
    y axis spans the estimates (and the measured intervals within a decade of them); an
    estimate beyond it is drawn at the edge as a triangle pointing out."""
    rows = []
    for v, res in ablation["variants"].items():
        if v == ablation["baseline"]:
            continue
        for m in res["multipliers"]:
            lo, hi = m["ci95"] or (np.nan, np.nan)
            rows.append(
                {
                    "variant": v,
                    "C": m["C"],
                    "m": m["multiplier"],
                    "lo": lo,
                    "hi": hi,
                    "measured": bool(m["measured"]),
                }
            )
    data = pd.DataFrame(rows, columns=["variant", "C", "m", "lo", "hi", "measured"])
    fig, ax = plt.subplots(figsize=(6, 4))
    palette = variant_palette(ablation["variants"])
    y_lo, y_hi = _multiplier_limits(data)
    for v, g in data.groupby("variant", sort=True):
        color = palette[v]
        meas, ext = g[g["measured"]].sort_values("C"), g[~g["measured"]]
        inside = meas[(meas["m"] >= y_lo) & (meas["m"] <= y_hi)]
        ax.plot(inside["C"], inside["m"], "o-", color=color, label=v)
        # The interval as drawn, not as error bars around the estimate: a bootstrap percentile
        # interval of a poorly identified fit need not contain the full-data multiplier. Cut
        # at the axis (an end beyond it runs to the edge, without its cap).
        lo, hi = g["lo"].clip(y_lo, y_hi), g["hi"].clip(y_lo, y_hi)
        ax.vlines(g["C"], lo, hi, color=color, lw=1)
        for end in ("lo", "hi"):
            capped = g[(g[end] >= y_lo) & (g[end] <= y_hi)]
            ax.scatter(capped["C"], capped[end], marker="_", color=color, s=60)
        shown = ext[(ext["m"] >= y_lo) & (ext["m"] <= y_hi)]
        ax.scatter(shown["C"], shown["m"], facecolor="white", edgecolor=color, zorder=5, s=40)
        for _, r in g[(g["m"] < y_lo) | (g["m"] > y_hi)].iterrows():
            up = r["m"] > y_hi
            ax.scatter(
                [r["C"]],
                [y_hi if up else y_lo],
                marker="^" if up else "v",
                facecolor=color if r["measured"] else "white",
                edgecolor=color,
                zorder=5,
                s=40,
                clip_on=False,
            )
    ax.axhline(1.0, color="gray", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(y_lo, y_hi)
    ax.set_xlabel(f"{COMPUTE_LABELS[compute]}; open markers extrapolated")
    ax.set_ylabel(f"compute multiplier vs {ablation['baseline']}")
    if len(data):
        ax.legend(fontsize=7)
    return fig


def _multiplier_limits(data: pd.DataFrame, reach: float = 10.0) -> tuple[float, float]:
    """The y range of `multipliers`: the measured estimates and 1 (the line of no effect), the
    measured interval ends within `reach` of them, and the extrapolated estimates within
    `reach` of those; padded by 20%. An unidentified fit's 1e-4 or 1e12 stays off the axis."""
    finite = data[np.isfinite(data["m"]) & (data["m"] > 0)]
    meas = finite[finite["measured"]]
    core = np.r_[meas["m"].to_numpy(float), 1.0] if len(meas) else np.r_[finite["m"], 1.0]
    lo, hi = core.min(), core.max()
    ends = np.r_[meas["lo"], meas["hi"], finite.loc[~finite["measured"], "m"]].astype(float)
    ends = ends[np.isfinite(ends) & (ends > 0)]
    near = ends[(ends >= lo / reach) & (ends <= hi * reach)]
    if near.size:
        lo, hi = min(lo, near.min()), max(hi, near.max())
    return lo / 1.2, hi * 1.2


def loss_vs_hyperparameter(points: pd.DataFrame, key: str):
    """Final loss against a tuned value (`tuning.curve_points`): one panel per size (k-th
    smallest N of each variant) and token budget where some variant tried several values, one
    line per variant, the chosen value a star, halving's early-stopped candidates hollow
    circles (their loss at fewer tokens)."""
    palette = variant_palette(points["variant"])
    points = tuned_panels(points)
    rows, cols, position = _panel_grid(points)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.9 * rows), squeeze=False)
    for ax in axes.ravel():
        ax.set_visible(False)
    numeric = pd.api.types.is_numeric_dtype(points["value"])
    for (size, budget), panel in points.groupby(["size", "budget"], sort=True):
        ax = axes[position[size, budget]]
        ax.set_visible(True)
        _tuning_panel(ax, panel, palette)
        if numeric and (panel["value"] > 0).all():
            ax.set_xscale("log")
        ax.set_title(f"size {size} (N ~ {panel['N'].median():.3g}), D {budget:.2g}", fontsize=8)
        ax.set_xlabel(key)
        ax.set_ylabel("final validation loss (nats per token)")
    first = next(ax for ax in axes.ravel() if ax.get_visible())
    handles, labels = first.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 1.0), fontsize=7)
    readable_ticks(fig)
    fig.tight_layout()
    return fig


def _panel_grid(points: pd.DataFrame) -> tuple[int, int, dict]:
    """Rows, columns and each (size, budget) panel's place: budgets x sizes when most cells
    are used, else (an IsoFLOP ladder's diagonal) the panels in rows of at most 4."""
    keys = sorted(points.groupby(["size", "budget"]).groups)
    budgets = sorted({b for _, b in keys})
    sizes = sorted({s for s, _ in keys})
    if 2 * len(keys) > len(budgets) * len(sizes):
        return len(budgets), len(sizes), {k: (budgets.index(k[1]), sizes.index(k[0])) for k in keys}
    cols = min(4, len(keys))
    return -(-len(keys) // cols), cols, {k: divmod(i, cols) for i, k in enumerate(keys)}


def tuned_panels(points: pd.DataFrame) -> pd.DataFrame:
    """The points with their panel (`size`: k-th smallest N of the variant, `budget`: D to 2
    significant digits), only panels where some variant tried more than one value: a budget
    that trained the value chosen at another budget shows one star per variant and no curve
    (its losses are in the tuning table). Every panel when none tried several."""
    points = points.assign(
        size=points.groupby("variant")["N"].rank(method="dense").astype(int),
        budget=points["D"].map(lambda d: float(f"{d:.2g}")),
    )
    tried = points.groupby(["size", "budget", "variant"])["value"].transform("nunique")
    swept = tried.groupby([points["size"], points["budget"]]).transform("max") > 1
    return points[swept] if swept.any() else points


def _tuning_panel(ax, panel: pd.DataFrame, palette: dict) -> None:
    """One panel of `loss_vs_hyperparameter`: a line per variant, its stopped candidates
    hollow, its chosen value a star."""
    for v, g in panel.groupby("variant", sort=True):
        full, stopped = g[~g["stopped"]], g[g["stopped"]]
        ax.plot(full["value"], full["loss"], "o-", color=palette[v], ms=3, lw=1.2, label=v)
        ax.scatter(stopped["value"], stopped["loss"], facecolor="white", edgecolor=palette[v], s=16)
        best = full[full["chosen"]]
        ax.scatter(
            best["value"],
            best["loss"],
            marker="*",
            s=110,
            color=palette[v],
            edgecolor="black",
            zorder=5,
        )


def law_errors(result: dict):
    """Mean and worst |relative error| per law, with their intervals."""
    rows = [r for r in result["rows"] if "skipped" not in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = np.arange(len(rows))
    for offset, key, label in ((-0.2, "mean_rel_error", "mean"), (0.2, "worst_rel_error", "worst")):
        vals = np.array([100 * r[key] for r in rows])
        cis = [r["ci95"][key] for r in rows]
        lo = np.array([v - 100 * c[0] if c else 0 for v, c in zip(vals, cis)])
        hi = np.array([100 * c[1] - v if c else 0 for v, c in zip(vals, cis)])
        ax.bar(x + offset, vals, 0.4, yerr=np.clip([lo, hi], 0, None), capsize=3, label=label)
    ax.set_xticks(x, [f"{r['law']}\n({r['n_params']} params)" for r in rows])
    ax.set_ylabel("|relative error| on held-out runs (%)")
    ax.legend()
    fig.tight_layout()
    return fig
