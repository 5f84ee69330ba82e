"""Writes docs/sweep-reference.md from the schema: `python -m sweeps.reference` (`--check`: exit 1
when the committed page differs).

Every key of a sweep file (`SweepConfig`'s fields with their `help`, and the nested keys its
parsers accept), every run-config key with a fixed set of values (read from the `Literal`
annotations the config checks against, the same source as their `error:` lines, and from the
model registries), the presets under `conf/model/` and `conf/data/`, and example sweep files
copied from `conf/sweep/`. tests/test_sweep_reference.py regenerates it and loads each example.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import sys
import types
import typing
from typing import Any, Literal, Union

import yaml

from models import registry
from models.config import ModelConfig
from sweeps.config import (
    CURVE_RULES,
    DEFAULT_RUNGS,
    FILE_FIELDS,
    SETTINGS,
    TUNE_AT,
    CurveSpec,
    SweepConfig,
    Throughput,
    TuneSpec,
)
from sweeps.points import BUDGET_FLOPS, SIZE_KEY, TOKENS_KEY
from sweeps.rules import FORMS, VARIABLES
from training.config import SECTIONS
from training.paths import PROJECT_ROOT

PAGE = PROJECT_ROOT / "docs" / "sweep-reference.md"
COMMAND = "python -m sweeps.reference"
# Sweep files shown whole as examples: a grid with variants, IsoFLOP, WSD, tuning.
EXAMPLES = ("ablation", "isoflop", "wsd", "ref_moe")
# SweepConfig fields a file writes under another key.
FILE_KEY = {"wsd_tokens": "wsd.tokens", "wsd_decay": "wsd.decay"}
# Allowed values of the sweep keys that have a fixed set.
SWEEP_CHOICES = {"budget_flops": BUDGET_FLOPS, "lr_rule": (FORMS,), "batch_rule": (FORMS,)}
# Model fields whose value picks a class: field -> registry.
REGISTRIES = {
    "norm_position": registry.BLOCKS,
    "norm": registry.NORMS,
    "pos_encoding": registry.POSITIONS,
    "mlp": registry.MLPS,
    "expert_mlp": registry.MLPS,
}


def _yaml(value: Any) -> str:
    if dataclasses.is_dataclass(value):
        return "its keys below"
    if isinstance(value, float):
        return f"{value:g}"  # 1.5e+10, not 15000000000.0
    text = yaml.safe_dump(value, default_flow_style=True, width=1000)
    return text.removesuffix("...\n").strip()


def _cell(text: str) -> str:
    return text.strip().replace("|", "\\|")


def sweep_rows() -> list[tuple[str, str, str, str, str]]:
    """(key, type, default, allowed, meaning) of every SweepConfig field, as a file writes it."""
    rows = []
    for f in dataclasses.fields(SweepConfig):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        allowed = ", ".join(SWEEP_CHOICES.get(f.name, ()))
        key = FILE_KEY.get(f.name, f.name)
        rows.append((key, str(f.type), _yaml(default), allowed, f.metadata["help"]))
    return rows


def _choices(tp: Any) -> tuple[Any, ...]:
    """The allowed values of a field type: its `Literal`s and booleans; () when open."""
    if tp is bool:
        return (True, False)
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [_choices(a) if a is not type(None) else (None,) for a in typing.get_args(tp)]
        if all(args):
            return tuple(v for a in args for v in a)
    return ()


def _comments(cls: type) -> dict[str, str]:
    """Field -> its source comment (on its line, else the comment lines just above it)."""
    lines, _ = inspect.getsourcelines(cls)
    out = {}
    for node in ast.parse("".join(lines)).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            line = lines[node.lineno - 1]
            text = line.split("  # ", 1)[1] if "  # " in line else ""
            text = "" if text.startswith("noqa") else text
            i = node.lineno - 2
            while not text and i >= 0 and lines[i].strip().startswith("#"):
                i -= 1
            if not text:  # the comment block just above the field
                text = " ".join(
                    line.strip().lstrip("# ") for line in lines[i + 1 : node.lineno - 1]
                )
            out[node.target.id] = " ".join(text.split())
    return out


def choice_rows(section: str, cls: type) -> list[tuple[str, str, str, str, str]]:
    """(key, allowed, default, maps to, meaning) of every field of `cls` with fixed values."""
    hints = typing.get_type_hints(cls)
    comments = _comments(cls)
    rows = []
    for f in dataclasses.fields(cls):
        values = _choices(hints[f.name])
        if not values:
            continue
        reg = REGISTRIES.get(f.name) if cls is ModelConfig else None
        maps = ", ".join(f"{v}: {reg[v].__name__}" for v in values) if reg else ""
        rows.append(
            (
                f"{section}.{f.name}",
                ", ".join(_yaml(v) for v in values),
                _yaml(f.default),
                maps,
                comments.get(f.name, ""),
            )
        )
    return rows


def _default(cls: type, name: str) -> str:
    return _yaml(next(f.default for f in dataclasses.fields(cls) if f.name == name))


def nested_rows() -> list[tuple[str, str, str, str]]:
    """(key, default, allowed, meaning) of the keys inside `throughput`, `report`, the tuning
    blocks and the rules, with the defaults their parsers' dataclasses declare."""
    comments = _comments(Throughput)
    rows = [
        (f"throughput.{f.name}", _yaml(f.default), "", comments[f.name])
        for f in dataclasses.fields(Throughput)
    ]
    curve_runs = f"{_default(CurveSpec, 'runs')} (predicted: 2)"
    return rows + [
        ("report.out", "", "", "the report's folder"),
        ("report.args", "[]", "", "further arguments of python -m analysis.report"),
        ("tune_at", _default(TuneSpec, "at"), ", ".join(TUNE_AT), "where the grid is tried"),
        ("tune_halving", "{}", "{rungs, decay} or false", "false: every candidate trains the arm"),
        (
            "tune_halving.rungs",
            _yaml(list(DEFAULT_RUNGS)),
            "",
            "rungs, fractions of the stable phase",
        ),
        (
            "tune_halving.decay",
            _default(TuneSpec, "decay"),
            "(0, 1)",
            "the decay fraction of every tuned run",
        ),
        (
            "tune_curve",
            "",
            "{rule, runs, decay} or true",
            "tuning from partial curves (no halving)",
        ),
        (
            "tune_curve.rule",
            _default(CurveSpec, "rule"),
            ", ".join(CURVE_RULES),
            "staged rungs, or one predicted rung",
        ),
        ("tune_curve.runs", curve_runs, "> 1", "the most runs an arm costs"),
        (
            "tune_curve.decay",
            _default(CurveSpec, "decay"),
            "(0, 1)",
            "the decay fraction of the chosen run",
        ),
        ("lr_rule.scale", "", "a number", "value = scale * N^a * D^b * C^c"),
        ("lr_rule.exponent", "", "a number", "the exponent of a one-variable rule"),
        ("lr_rule.variable", "", ", ".join(VARIABLES), "the variable of a one-variable rule"),
        ("lr_rule.exponents", "", "{N: a, D: b, C: c}", "a rule in several variables"),
        ("lr_rule.fitted", "", "a fit.json path", "the rule an analysis fitted (alone)"),
    ]


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [f"`{_cell(row[0])}`", *(_cell(c) for c in row[1:])]
        out.append("| " + " | ".join(cells) + " |")
    return [*out, ""]


def _presets(group: str) -> str:
    return ", ".join(sorted(p.stem for p in (PROJECT_ROOT / "conf" / group).glob("*.yaml")))


def render() -> str:
    """The page, from the schema and the committed sweep files."""
    settings = [r for r in sweep_rows() if r[0] in SETTINGS]
    crossed = [r for r in sweep_rows() if r[0] not in SETTINGS]
    lines = [
        "# Sweep-file reference",
        "",
        f"Generated by `{COMMAND}` from the schema (`sweeps/config.py`, `training/config.py`,",
        "`models/config.py`, `models/registry.py`) and the sweep files it quotes; do not edit.",
        "`tests/test_sweep_reference.py` fails when this page and the schema differ. How sweeps",
        "run, tune and record: [sweeps.md](sweeps.md).",
        "",
        "## The sweep section",
        "",
        "A sweep file (`conf/sweep/NAME.yaml`, run with `python -m sweeps.run sweep=NAME`) holds",
        f"these keys at its top level. Its keys: {', '.join(f'`{k}`' for k in FILE_FIELDS)}.",
        "",
        "### How it runs (every sweep has these; the command line sets them as `sweep.KEY=...`)",
        "",
        *_table(("key", "type", "default", "allowed", "what"), settings),
        "### What it crosses (on the command line: `+sweep.KEY=...`)",
        "",
        *_table(("key", "type", "default", "allowed", "what"), crossed),
        "### Nested keys",
        "",
        "`batch_rule` takes the same keys as `lr_rule`; a rule's forms: " + FORMS + ".",
        "",
        *_table(("key", "default", "allowed", "what"), nested_rows()),
        "## Override keys with a fixed set of values",
        "",
        "What `axes`, `variants`, `fixed` and `tune` may set. Any field of the run config is an",
        f"override key (`section.field`); `{SIZE_KEY}` (non-embedding parameters; the ladder picks",
        f"depth and width) and `{TOKENS_KEY}` are the usual axes. The values allowed below are",
        "the ones a run checks against; any other is refused with one `error:` line.",
        "",
        "### Presets",
        "",
        *_table(
            ("key", "allowed", "what"),
            [
                ("model", _presets("model"), "a model preset, conf/model/NAME.yaml"),
                ("data", _presets("data"), "a corpus preset, conf/data/NAME.yaml"),
            ],
        ),
    ]
    for section, cls in {"model": ModelConfig, **SECTIONS}.items():
        rows = choice_rows(section, cls)
        if not rows:
            continue
        header = ("key", "allowed", "default", "maps to", "what")
        if section != "model":
            header, rows = header[:3] + header[4:], [r[:3] + r[4:] for r in rows]
        lines += [f"### {section}", "", *_table(header, rows)]
    lines += [
        "## Example sweep files",
        "",
        "Committed sweep files, quoted whole. A `variants:` block maps a name to the overrides",
        "that variant adds to every point (`{}`: the baseline as configured); every variant runs",
        "every point of the axes. Check a file of your own with `sweep.dry_run=true`.",
        "",
    ]
    for name in EXAMPLES:
        text = (PROJECT_ROOT / "conf" / "sweep" / f"{name}.yaml").read_text().rstrip()
        lines += [f"`conf/sweep/{name}.yaml`:", "", "```yaml", text, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != page:
            print(f"error: {PAGE} is stale; run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
