"""The text summary of a fit, in one place: printed (`summary`, every `python -m analysis.fit`
and `analysis.report` run; `law_lines` for a form chosen with --law) and as the report's
summary blocks (`law_summary`: the compute-optimal allocation with intervals, the other
approaches' exponents, the frontier and the held-out prediction error). Quantities that are not
identified say so: nothing the runs do not determine is stated as a result.
"""

from __future__ import annotations

from analysis.data import compute_factor
from analysis.fits import identification
from analysis.fits.estimate import cell, fmt, interval
from analysis.fits.fit import convention
from analysis.fits.laws import law_of
from analysis.tuning import hparam_report
from analysis.tuning.arms import arm_name


def summary(result: dict, title: str = "") -> str:
    p = result["parametric"]
    lines = [f"== {title or 'fit'}: {result['n_runs']} runs, 95% bootstrap intervals"]
    if p.get("law", "chinchilla") != "chinchilla":  # --law NAME: its own parameters
        return "\n".join([*lines, law_lines(p), *_approaches(result), *_extrapolation(result)])
    lines.append(
        f"approach 3: L = {cell(p, 'E', console=True)} + {cell(p, 'A', console=True)} / N^{cell(p, 'alpha', console=True)}"
        f" + {cell(p, 'B', console=True)} / D^{cell(p, 'beta', console=True)}"
    )
    lines.append(
        f"  N_opt ~ C^a, a = {cell(p, 'a', '.3f', console=True)};  D_opt ~ C^b, b = {cell(p, 'b', '.3f', console=True)}"
    )
    conv = convention(p)
    for row in p["allocation"]:
        tag = f"@{row['C']:.3g}"
        q = {**p, **{k: row[k] for k in ("N_opt", "D_opt", "tokens_per_param")}}
        cells = {
            k: cell(q, k, ".3g", f"{k}{tag}", console=True)
            for k in ("N_opt", "D_opt", "tokens_per_param")
        }
        lines.append(
            f"  C = {row['C']:.3g} ({conv}): N_opt = {cells['N_opt']}, "
            f"D_opt = {cells['D_opt']}, D/N = {cells['tokens_per_param']}"
        )
    lines += _approaches(result)
    if p.get("not_identified"):
        lines.append("not identified by these runs (approach 3):")
        lines += [f"  {k}: {why}" for k, why in p["why_not_identified"].items() if "@" not in k]
    lines += _extrapolation(result)
    if result.get("tuning"):
        lines += tuning_summary(result["tuning"], result.get("lr_rule"))
        lines += [f"  {s}" for s in hparam_report.summary_sentences(result.get("hparam_laws"))]
    return "\n".join(lines)


def _approaches(result: dict) -> list[str]:
    """Approaches 2 and 1: their exponents, or why they were skipped."""
    lines = []
    for name, key in (("approach 2 (IsoFLOP)", "isoflop"), ("approach 1 (envelope)", "envelope")):
        s = result.get(key)
        if s and "a" in s:
            lines.append(
                f"{name}: a = {cell(s, 'a', '.3f', console=True)}, b = {cell(s, 'b', '.3f', console=True)}"
            )
            if "a" in s.get("why_not_identified", {}):
                lines.append(f"  not identified: a: {s['why_not_identified']['a']}")
        elif s and "skipped" in s:
            lines.append(f"{name}: skipped: {s['skipped']}")
        if s and s.get("warning"):
            lines.append(f"  warning: {s['warning']}")
    return lines


def _extrapolation(result: dict) -> list[str]:
    ext = result["extrapolation"]
    if "mean_abs_rel_error" in ext:
        return [
            f"extrapolation: fit on C < {ext['threshold_C']:.3g} ({ext['n_train']} runs), "
            f"mean |relative error| on {ext['n_test']} held-out runs = "
            f"{100 * ext['mean_abs_rel_error']:.2f}%"
        ]
    if "skipped" in ext:
        return [f"extrapolation check skipped: {ext['skipped']}"]
    return []


def tuning_summary(section: dict, rule: dict | None) -> list[str]:
    """The tuning lines of the printed summary: arms, edges, the lr rule."""
    edge = [a for a in section["arms"] if a["at_edge"]]
    lines = [
        f"tuned {', '.join(section['keys'])}: {section['n_arms']} arms fitted at their best "
        f"value ({section['n_runs']} runs, {section['n_stopped_early']} stopped early); "
        f"{len(edge)} at the edge of the grid"
    ]
    lines += [
        f"  widen the grid: {arm_name(a)} best at the {', '.join(f'{v} {k}' for k, v in a['edge'].items())}"
        for a in edge
    ]
    if rule is not None:
        lines.append(
            f"  {rule['key']}_opt = {cell(rule, 'scale', '.3g', console=True)} * N^{cell(rule, 'exponent', '.3f', console=True)}"
            f" ({rule['n_arms']} arms)"
        )
    return lines


def law_lines(section: dict) -> str:
    """One line per parameter: 'name = value [lo, hi]' or '(not identified)'."""
    lines = [f"{section['law']} ({section['reference']}), fitted {section['fitted']}:"]
    for k in law_of(section).params:
        value = section[k]
        text = "nan" if value is None else f"{value:.4g}"
        ci = section["ci95"].get(k)
        if k in section.get("fixed", {}):
            tail = " (fixed)"
        elif k in section["not_identified"]:
            tail = " (not identified)"
        else:
            tail = f" [{ci[0]:.4g}, {ci[1]:.4g}]" if ci else " [no interval]"
        lines.append(f"  {k} = {text}{tail}")
    for row in section["allocation"]:
        u = f", U = {row['U']:.3g}" if "U" in row else ""
        lines.append(
            f"  C = {row['C']:.3g} ({compute_factor.label(section.get('k', 1.0))}){u}: N_opt = {row['N_opt']:.3g}, "
            f"D_opt = {row['D_opt']:.3g}, D/N = {row['tokens_per_param']:.3g}"
        )
    for k, why in section["why_not_identified"].items():
        if "@" not in k:
            lines.append(f"  not identified: {k}: {why}")
    return "\n".join(lines)


def law_summary(result: dict) -> list[tuple]:
    """Summary of a law fit: allocation, exponents, frontier, held-out error (blocks)."""
    p = result["parametric"]
    rows = _estimate_rows(result)
    sentences = [_allocation_sentence(p, convention(result))]
    ext = result["extrapolation"]
    if "mean_abs_rel_error" in ext:
        row, sentence = _held_out(ext)
        rows.append(row)
        sentences.append(sentence)
    counts = result.get("compute_convention")
    if counts:  # a family whose C is not 6ND: say what each axis counts
        sentences.append(
            f"Here N counts {counts['N']}; D counts {counts['D']}; C counts "
            f"{counts['C']}, k = {counts['k']:.4g}."
        )
    for check in (p.get("law_check"), (result["kaplan"].get("L_C") or {}).get("law_check")):
        if check:
            sentences.append(check["sentence"])
    missing = [k for k in p.get("not_identified", []) if "@" not in k]
    if missing:
        sentences.append(
            f"Not identified by these runs: {', '.join(missing)} (reasons under "
            "'Approach 3' below); they are not stated as results."
        )
    return [("table", ["quantity", "estimate [95% CI]"], rows), ("list", sentences)]


def _estimate_rows(result: dict) -> list[list]:
    """Table rows: the allocation exponent of each approach, the optima per budget, gamma."""
    p, conv = result["parametric"], convention(result)
    rows = [["N_opt ~ C^a, approach 3 (L = E + A/N^alpha + B/D^beta)", cell(p, "a", ".3g")]]
    for key, label in (
        ("isoflop", "approach 2 (IsoFLOP minima)"),
        ("envelope", "approach 1 (lower envelope)"),
    ):
        s = result.get(key)
        if s and "a" in s:
            rows.append([f"N_opt ~ C^a, {label}", cell(s, "a", ".3g")])
    for r in p["allocation"]:
        tag = f"@{r['C']:.3g}"
        for q, label in (("N_opt", "N_opt"), ("D_opt", "D_opt"), ("tokens_per_param", "D/N")):
            rows.append([f"{label} at C = {r['C']:.3g} ({conv})", cell(p, q, ".3g", q + tag, r[q])])
    lc = result["kaplan"].get("L_C")
    if lc:
        rows.append(["frontier L(C) ~ C^-gamma: gamma", cell(lc, "alpha", ".3g")])
    return rows


def _held_out(ext: dict) -> tuple[list, str]:
    """The held-out extrapolation error as a table row and as a sentence."""
    worst = max(ext["runs"], key=lambda r: abs(r["rel_error"]))
    row = [
        f"held-out error (fit on C < {ext['threshold_C']:.3g}, {ext['n_test']} runs)",
        f"mean {100 * ext['mean_abs_rel_error']:.2f}%, worst {100 * worst['rel_error']:+.1f}%",
    ]
    sentence = (
        f"Fitted on the {ext['n_train']} runs below C = {ext['threshold_C']:.3g}, approach 3 "
        f"predicts the {ext['n_test']} larger runs within {100 * ext['mean_abs_rel_error']:.1f}% "
        f"on average (worst {100 * worst['rel_error']:+.1f}%)."
    )
    return row, sentence


def _allocation_sentence(p: dict, conv: str) -> str:
    """The headline: how N_opt grows with C and the optimum at the first budget, or why not."""
    if "a" in p.get("not_identified", []):
        return (
            f"The compute-optimal exponent is not identified by these runs: "
            f"{p['why_not_identified']['a']}."
        )
    top = p["allocation"][0]
    at = f"N_opt@{top['C']:.3g}"
    optimum = (
        f"the allocation is not identified: {p['why_not_identified'][at]}"
        if at in p.get("not_identified", [])
        else f"the optimum is N = {cell(p, 'N_opt', '.3g', at, top['N_opt'])} trained on "
        f"{fmt(top['tokens_per_param'], '.2g')} tokens per parameter"
    )
    return (
        f"Compute-optimal allocation (approach 3): N_opt grows as C^{p['a']:.2f} "
        f"(95% CI {interval(p['ci95'].get('a'), '.2f')}{identification.clip_note(p, 'a', '.2f', inside=True)}); at C = {top['C']:.3g} FLOPs "
        f"({conv}) {optimum}."
    )
