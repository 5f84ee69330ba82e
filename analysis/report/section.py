"""What a report section is: the protocol every part of a report follows.

A section reads one `Analysis` (what `analysis.report.analyse` computed) and returns its entries
of fit.json, the blocks of its detail (after the summary), the blocks and sentences it adds to
the summary, and its figures. Blocks are tuples: ('h1'|'h2', text), ('p', text),
('list', [text]), ('table', header, rows), ('fig', stem, caption). `analysis.report.compose`
is the loop over the registered sections.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pandas as pd

    from analysis.report.analyse import Analysis

SUMMARY = "Summary"  # the first h2 of every report; HTML highlights it, every later h2 folds


@dataclass(frozen=True)
class Context:
    """What a section needs besides the analysis."""

    fig_dir: Path  # where figures are written (figures/, or figures/<family>/)
    compute: str = "6nd"  # what C counts: "6nd" or "exact"
    excluded: pd.DataFrame | None = None  # runs left out, with status and reason
    source: str = ""  # where the runs came from (one source: its name)


@dataclass(frozen=True)
class Figure:
    """A figure a section draws: saved as figures/<stem>.png/.svg/.pdf, placed at the end of
    the section whose h2 starts with `heading` (a summary figure is taken by `summary`)."""

    stem: str
    caption: str
    heading: str
    draw: Callable  # (plots) -> matplotlib figure; plots is `analysis.report.plots`


class Section(Protocol):
    """One part of a report."""

    def fit_json(self, an: Analysis) -> dict:
        """Its entries of fit.json ({} for none)."""
        ...

    def summary(self, an: Analysis, figs: dict[str, str]) -> list[tuple]:
        """Its blocks in the summary; it may take (pop) its figures from `figs` {stem: caption}."""
        ...

    def sentences(self, an: Analysis) -> list[str]:
        """Its notes, listed at the end of the summary."""
        ...

    def blocks(self, an: Analysis, ctx: Context) -> list[tuple]:
        """Its detail blocks, headings included ([] where it does not apply)."""
        ...

    def figures(self, an: Analysis, ctx: Context) -> list[Figure]:
        """Its figures, drawn and saved by the report before any block is built."""
        ...


class Quiet:
    """Defaults for a section that has nothing to say in one of the protocol's parts."""

    def fit_json(self, an: Analysis) -> dict:
        return {}

    def summary(self, an: Analysis, figs: dict[str, str]) -> list[tuple]:
        return []

    def sentences(self, an: Analysis) -> list[str]:
        return []

    def blocks(self, an: Analysis, ctx: Context) -> list[tuple]:
        return []

    def figures(self, an: Analysis, ctx: Context) -> list[Figure]:
        return []


def not_identified_block(section: dict, what: str) -> list[tuple]:
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


def place(blocks: list[tuple], heading: str, block: tuple) -> None:
    """Insert `block` at the end of the section whose h2 starts with `heading`."""
    start = next(i for i, x in enumerate(blocks) if x[0] == "h2" and x[1].startswith(heading))
    end = next((i for i in range(start + 1, len(blocks)) if blocks[i][0] == "h2"), len(blocks))
    blocks.insert(end, block)
