"""An estimate with its 95% interval as text: the one formatter every report and summary uses.

cell(section, "alpha", ".3f")  ->  '0.336 [0.31, 0.36]', '1.7 (fixed)' or 'not identified'
"""

from __future__ import annotations

from analysis.fits import identification


def fmt(x, spec=".4g") -> str:
    """A number as reports print it; 'n/a' for None or nan."""
    return "n/a" if x is None or x != x else f"{x:{spec}}"


def interval(ci, spec=".4g") -> str:
    return f"[{fmt(ci[0], spec)}, {fmt(ci[1], spec)}]" if ci else "[no interval]"


def est(value, ci, spec=".4g") -> str:
    """'value [lo, hi]' ('[no interval]' without one)."""
    return f"{fmt(value, spec)} {interval(ci, spec)}"


def cell(
    section: dict,
    key: str,
    spec=".4g",
    name: str | None = None,
    value=None,
    *,
    console: bool = False,
) -> str:
    """An estimate of a fit.json section: 'v [lo, hi]' (with a note where the interval was cut,
    `identification.clip_note`), 'v (fixed)' or 'not identified'. `name` is its key in ci95 /
    not_identified (default `key`); `value` replaces section[key] (e.g. an allocation row's).
    `console` (the printed summary of `analysis.fits.fit`): 'v (not identified)', nan as 'nan'."""
    name = name or key
    value = section[key] if value is None else value

    def num(x) -> str:
        return ("nan" if x is None else f"{x:{spec}}") if console else fmt(x, spec)

    if key in section.get("fixed", {}):
        return f"{num(value)} (fixed)"
    if name in section.get("not_identified", []):
        return f"{num(value)} (not identified)" if console else "not identified"
    ci = section.get("ci95", {}).get(name)
    text = f"{num(value)} [{num(ci[0])}, {num(ci[1])}]" if ci else f"{num(value)} [no interval]"
    return text + identification.clip_note(section, name)
