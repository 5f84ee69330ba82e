"""A report's blocks as report.md and as a self-contained report.html (figures inlined as SVG,
the summary highlighted, every later section a collapsible <details>)."""

from __future__ import annotations

import html
from pathlib import Path

from analysis.report.section import SUMMARY


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
