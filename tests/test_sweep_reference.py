"""docs/sweep-reference.md is generated from the schema (`python -m sweeps.reference`): the
committed page equals a fresh render, names every sweep key and allowed value, and every
example sweep file in it passes the sweeper's own check."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from models import registry
from models.config import ModelConfig
from sweeps import reference
from sweeps.config import FILE_FIELDS, SETTINGS, SweepConfig
from sweeps.plan import SweepSpec
from sweeps.points import BUDGET_FLOPS


def test_committed_page_is_the_generated_one():
    assert reference.PAGE.read_text() == reference.render(), (
        f"docs/sweep-reference.md is stale: run {reference.COMMAND} to regenerate"
    )


def test_every_sweep_key_and_allowed_value_is_named():
    page = reference.render()
    fields = [reference.FILE_KEY.get(f.name, f.name) for f in dataclasses.fields(SweepConfig)]
    for key in (*fields, *FILE_FIELDS, *SETTINGS, "throughput.flops_per_sec", "report.out"):
        assert f"| `{key}` |" in page or f"`{key}`" in page, key
    for value in BUDGET_FLOPS:
        assert value in page
    for field_name, table in (
        ("norm", registry.NORMS),
        ("mlp", registry.MLPS),
        ("pos_encoding", registry.POSITIONS),
        ("norm_position", registry.BLOCKS),
    ):
        row = next(line for line in page.splitlines() if line.startswith(f"| `model.{field_name}`"))
        for value, cls in table.items():
            assert f"{value}: {cls.__name__}" in row, (field_name, value)
    # the error path's allowed values (a training section's Literal) appear in the page
    assert "| `train.schedule` | cosine, wsd, constant |" in page


def test_every_sweep_field_has_its_help_line_and_check_passes():
    page = reference.render()
    for field in dataclasses.fields(SweepConfig):
        assert field.metadata.get("help"), f"SweepConfig.{field.name}: add metadata help"
        assert field.metadata["help"] in page
    assert reference.main(["--check"]) == 0


def test_every_example_passes_the_sweepers_check():
    page = reference.render()
    blocks = re.findall(r"```yaml\n(.*?)```", page, flags=re.S)
    assert len(blocks) == len(reference.EXAMPLES)
    assert any("variants:" in b for b in blocks)
    allowed = _allowed_values(page)
    for block in blocks:
        spec = SweepSpec.from_dict("example", yaml.safe_load(block))
        assert spec.axes or spec.budgets or spec.wsd_tokens
        # each value a choice key is set to is one the page allows (the run would refuse it)
        settings = [
            *spec.variants.values(),
            spec.fixed,
            *({k: v} for k, vs in spec.axes.items() for v in vs),
        ]
        for overrides in settings:
            for key, value in overrides.items():
                if key in allowed:
                    assert reference._yaml(value) in allowed[key], (key, value)


def _allowed_values(page: str) -> dict[str, list[str]]:
    """Key -> allowed values, from the page's tables of keys with a fixed set of values."""
    out = {}
    for line in page.split("## Override keys", 1)[1].split("## Example", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            out[cells[0].strip("`")] = [v.strip() for v in cells[1].split(",")]
    return out


def test_allowed_values_are_the_ones_the_config_checks_against():
    """The page's model.mlp values are exactly those ModelConfig accepts, and one outside them
    is refused with the error line naming the field."""
    allowed = _allowed_values(reference.render())
    for value in allowed["model.mlp"]:
        ModelConfig(mlp=value)
    with pytest.raises(ValueError, match="mlp must be one of"):
        ModelConfig(mlp="bogus")
    assert set(allowed["model"]) >= {"llama", "vanilla"}
