"""The sweep file's schema (`sweeps.config.SweepConfig`): the settings' defaults come from the
dataclass (the config `sweep_schema`), a composed sweep section is checked by one function, and
the plan fields stay a file's own (added on the command line with `+`)."""

from __future__ import annotations

import dataclasses

import pytest

from sweeps import driver
from sweeps.config import SETTINGS, SweepConfig, Throughput, schema_defaults
from sweeps.errors import PlanError


def test_the_composed_settings_are_the_dataclass_defaults(comp):
    cfg = comp(["sweep=tiny"])
    config = driver.sweep_config(cfg)
    assert config.name == "tiny"  # the file's name, through the schema's interpolation
    defaults = SweepConfig()
    for name in SETTINGS[1:]:
        assert getattr(config, name) == getattr(defaults, name), name
    assert config.throughput == Throughput(1.5e10, 10.0)
    assert set(cfg.sweep) - set(SETTINGS) == {"axes", "fixed"}  # the file's own fields only
    assert schema_defaults()["throughput"] == {"flops_per_sec": 1.5e10, "overhead_s": 10.0}


def test_a_setting_changes_without_plus_and_a_plan_field_is_added_with_it(comp):
    config = driver.sweep_config(comp(["sweep=tiny", "sweep.jobs=2", "+sweep.seeds=3"]))
    assert (config.jobs, config.seeds) == (2, 3)


@pytest.mark.parametrize(
    "d, message",
    [
        ({"jobs": "two"}, "sweep.jobs: expected an integer, got 'two'"),
        ({"jobs": 0}, "sweep.jobs: must be >= 1, got 0"),
        ({"interleave": "yes"}, "sweep.interleave: expected true or false, got 'yes'"),
        ({"dry_run": 1}, "sweep.dry_run: expected true or false, got 1"),
        ({"axis": {}}, "sweep.axis: unknown field; allowed: axes, batch_rule, budget_flops,"),
        ({"throughput": {"flops_per_sec": -1}}, "sweep.throughput.flops_per_sec: must be > 0"),
        ({"wsd": {"token": [1]}}, "sweep.wsd: unknown field(s) ['token']; allowed: tokens, decay"),
        ({"seeds": 1.5}, "sweep.seeds: expected a whole number of seeds >= 1"),
    ],
)
def test_a_wrong_key_or_type_is_one_line_naming_the_field(d, message):
    with pytest.raises(PlanError) as e:
        SweepConfig.from_dict({"axes": {"model.size": [1e4]}, **d})
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_every_field_has_a_default_and_the_settings_come_first():
    fields = dataclasses.fields(SweepConfig)
    assert [f.name for f in fields[: len(SETTINGS)]] == list(SETTINGS)
    assert all(
        f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        for f in fields
    )
