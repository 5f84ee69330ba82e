"""The scaling-law report: `python -m analysis.report` (`analysis.report.cli`).

What it computes (`analyse`), the protocol of its sections (`section`) and the sections
themselves (`runs`, `tuning`, `laws`, `ablation`, `curves`), the loop that assembles them
(`compose`), the families report (`families`) and the rendering as Markdown and HTML (`render`).
"""

from analysis.report.analyse import (
    Analysis,
    analyse,
    choose_variants,
    fill_defaults,
    label_variants,
)
from analysis.report.cli import main

__all__ = ["Analysis", "analyse", "choose_variants", "fill_defaults", "label_variants", "main"]
