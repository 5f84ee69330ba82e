"""The scaling-law report: `python -m analysis.report` (`analysis.report.cli`).

What it computes (`analyse`), the protocol of its sections (`section`) and the sections
themselves (`runs`, `tuning`, `laws`, `ablation`, `curves`), the loop that assembles them
(`compose`), the families report (`families`), the figures (`plots`) and the rendering as
Markdown and HTML (`render`).
"""
