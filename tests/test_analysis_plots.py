"""analysis.report.plots: figures for a paper (PDF with embedded TrueType text, SVG with text as text),
plain log-axis tick labels, one colour per variant, and tuning panels that show a tuning."""

import re

import matplotlib

matplotlib.use("Agg")
import pandas as pd  # noqa: E402

from analysis.report import plots  # noqa: E402

ABLATION = {
    "baseline": "base",
    "variants": {
        "base": {"multipliers": []},
        "zeta": {
            "multipliers": [{"C": 1e12, "multiplier": 0.5, "ci95": [0.2, 0.9], "measured": True}]
        },
        "alpha": {
            "multipliers": [{"C": 1e12, "multiplier": 2.0, "ci95": [1.1, 3.0], "measured": True}]
        },
    },
}


def test_log_ticks_are_plain_numbers_with_few_digits():
    assert [plots.tick_text(v) for v in (0.0005, 0.002, 3.4, 1000, 1e4, 2.5e5, 4.41e10, 2e-5)] == [
        "0.0005",
        "0.002",
        "3.4",
        "1000",
        "1e4",
        "2.5e5",
        "4.4e10",
        "2e-5",
    ]


def test_every_log_axis_gets_readable_labels_and_no_minor_labels():
    plots.setup()
    fig = plots.multipliers(ABLATION)
    plots.readable_ticks(fig)
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    assert labels and not any("times" in t or "^" in t or "$" in t for t in labels)
    assert all(t.get_text() == "" for t in ax.yaxis.get_minorticklabels())


def test_figures_are_written_as_png_svg_and_pdf_with_text_kept_as_text(tmp_path):
    plots.setup()
    paths = plots.save(plots.forest(ABLATION), tmp_path, "forest")
    assert [p.suffix for p in paths] == [".png", ".svg", ".pdf"] and all(p.is_file() for p in paths)
    svg = paths[1].read_text()
    assert "<text" in svg and "compute multiplier vs base" in svg  # text, not glyph paths
    pdf = paths[2].read_bytes()
    assert b"/CIDFontType2" in pdf and b"/ToUnicode" in pdf  # embedded TrueType (fonttype 42)
    assert not re.search(rb"/Subtype\s*/Type3", pdf) and b"CreationDate" not in pdf
    again = plots.save(plots.forest(ABLATION), tmp_path / "again", "forest")
    assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in again]


def test_each_variant_has_one_colour_in_every_figure():
    palette = plots.variant_palette(ABLATION["variants"])
    assert list(palette) == ["alpha", "base", "zeta"]
    forest = plots.forest(ABLATION)
    colours = {tuple(c.get_edgecolor()[0][:3]) for c in forest.axes[0].collections[1::2]}
    assert colours == {tuple(palette["alpha"]), tuple(palette["zeta"])}
    multipliers = plots.multipliers(ABLATION)
    lines = {line.get_label(): line.get_color() for line in multipliers.axes[0].get_lines()}
    assert tuple(matplotlib.colors.to_rgb(lines["zeta"])) == tuple(palette["zeta"])


def test_tuning_panels_leave_out_budgets_that_trained_one_value():
    rows = []
    for variant in ("a", "b"):
        for lr in (1e-3, 2e-3, 4e-3):  # tuned at the smallest budget
            rows.append((variant, 1e5, 2.5e5, lr, 3 + lr, False, lr == 2e-3))
        rows.append((variant, 1e5, 1e6, 2e-3, 2.5, False, True))  # the value transferred
    points = pd.DataFrame(rows, columns=["variant", "N", "D", "value", "loss", "stopped", "chosen"])
    panels = plots.tuned_panels(points)
    assert set(panels["budget"]) == {2.5e5} and len(panels) == 6
    fig = plots.loss_vs_hyperparameter(points, "train.lr")
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 1
    assert "nats per token" in fig.axes[0].get_ylabel()
    transferred_only = points[points["D"] == 1e6]
    assert len(plots.tuned_panels(transferred_only)) == 2  # nothing tuned: every panel kept


def test_a_ladders_diagonal_of_tuned_panels_is_wrapped_not_a_sparse_matrix():
    """An IsoFLOP ladder tunes each size at one budget: 5 panels on a 5 x 5 diagonal become two
    rows of at most 4."""
    rows = [
        ("base", n, d, lr, 3.0 + lr, False, lr == 2e-3)
        for n, d in zip((1e4, 2e4, 4e4, 8e4, 1.6e5), (1e6, 8e5, 6e5, 4e5, 2e5))
        for lr in (1e-3, 2e-3)
    ]
    points = pd.DataFrame(rows, columns=["variant", "N", "D", "value", "loss", "stopped", "chosen"])
    fig = plots.loss_vs_hyperparameter(points, "train.lr")
    assert len(fig.axes) == 8 and sum(ax.get_visible() for ax in fig.axes) == 5


def _offsets(ax):
    """(x, y) of every scatter point of `ax`."""
    scatters = [c for c in ax.collections if isinstance(c, matplotlib.collections.PathCollection)]
    return [tuple(p) for c in scatters for p in c.get_offsets()]


def test_multipliers_join_measured_budgets_only_and_keep_the_y_axis_on_the_estimates():
    unidentified = {
        "baseline": "base",
        "variants": {
            "base": {"multipliers": []},
            "llama": {
                "multipliers": [
                    {"C": 1e11, "multiplier": 0.8, "ci95": [1e-4, 1e12], "measured": True},
                    {"C": 3e11, "multiplier": 0.6, "ci95": [0.5, 0.7], "measured": True},
                    {"C": 3e12, "multiplier": 0.4, "ci95": [1e-4, 1e12], "measured": False},
                    {"C": 3e13, "multiplier": 1e-5, "ci95": None, "measured": False},
                ]
            },
        },
    }
    ax = plots.multipliers(unidentified).axes[0]
    joined = [line for line in ax.get_lines() if line.get_label() == "llama"]
    assert len(joined) == 1 and list(joined[0].get_xdata()) == [1e11, 3e11]
    lo, hi = ax.get_ylim()
    assert 0.1 < lo < 0.4 and 1.0 < hi < 2.0  # the estimates and 1, not 1e-4 to 1e12
    points = _offsets(ax)
    assert (3e12, 0.4) in points  # the extrapolation, an open marker
    assert (3e13, lo) in points  # beyond the axis: at its edge
    assert all(lo <= y <= hi for _, y in points)


def _grid_runs():
    from analysis.fits.laws.chinchilla import Parametric

    law = Parametric(E=1.8, A=480.0, B=1200.0, alpha=0.36, beta=0.30)
    rows = [(n, d) for n in (1e5, 3e5, 1e6) for d in (2.5e5, 1e6, 4e6)]
    return pd.DataFrame(rows, columns=["N", "D"]), law


def test_contours_draw_the_allocation_line_only_where_it_is_identified():
    runs, law = _grid_runs()
    ax = plots.contours(runs, law, identified=True).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["compute-optimal", "runs"]
    (line,) = ax.get_lines()
    assert len(line.get_xdata()) and not [t for t in ax.texts if "identified" in t.get_text()]

    ax = plots.contours(runs, law, identified=False).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["runs"]
    assert not ax.get_lines()
    assert any("allocation not identified" in t.get_text() for t in ax.texts)


def test_contours_with_no_optimum_say_so_instead_of_an_empty_legend_entry():
    from analysis.fits.laws.chinchilla import Parametric

    runs, _ = _grid_runs()
    no_optimum = Parametric(E=1.8, A=480.0, B=1200.0, alpha=-0.1, beta=0.30)  # nan allocation
    ax = plots.contours(runs, no_optimum).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["runs"]
    assert any("allocation not identified" in t.get_text() for t in ax.texts)


def test_every_training_curve_panel_labels_its_loss_axis():
    runs, curves = [], []
    for variant, offset in (("vanilla", 0.5), ("llama", 0.0)):
        for n in (1e5, 3e5, 1e6):
            run_id = f"{variant}-{n:g}"
            runs.append((run_id, variant, n, 1e6))
            for t in (2e5, 5e5, 1e6):
                curves.append((run_id, t, 3 + offset + 1e5 / n - t / 1e6))
    runs = pd.DataFrame(runs, columns=["run_id", "variant", "N", "D"])
    curves = pd.DataFrame(curves, columns=["run_id", "tokens", "val_loss"])
    plots.setup()
    fig = plots.training_curves_by_variant(curves, runs)
    plots.readable_ticks(fig)
    fig.canvas.draw()
    assert len(fig.axes) == 3
    for ax in fig.axes:
        shown = [t.get_text() for t in ax.get_yticklabels() if t.get_visible() and t.get_text()]
        assert shown, ax.get_title()
