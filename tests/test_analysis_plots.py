"""analysis.plots: figures for a paper (PDF with embedded TrueType text, SVG with text as text),
plain log-axis tick labels, one colour per variant, and tuning panels that show a tuning."""

import re

import matplotlib

matplotlib.use("Agg")
import pandas as pd  # noqa: E402

from analysis import plots  # noqa: E402

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
