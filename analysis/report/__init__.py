"""The scaling-law report: `python -m analysis.report` (`analysis.report.cli`).

What it computes (`analyse`), the protocol of its sections (`section`) and the sections
themselves (`runs`, `tuning`, `laws`, `ablation`, `curves`), the loop that assembles them
(`compose`), the families report (`families`), the figures (`plots`) and the rendering as
Markdown and HTML (`render`).
"""


def __getattr__(name: str):
    """`analysis.report.main`, the command's entry point, imported only when asked for (the
    sections' modules import this package without pandas-heavy command-line code)."""
    if name == "main":
        from analysis.report.cli import main

        return main
    raise AttributeError(f"module 'analysis.report' has no attribute {name!r}")
