"""The schemas the configs compose against, every field at its default, read from the
dataclasses that declare it: `schema` for `conf/config.yaml` (`models.config.ModelConfig` plus
the size ladder's `size`, and the sections of `training.config`), `sweep_schema` for the `sweep`
section of `conf/run.yaml` (the settings of `sweeps.config.SweepConfig`). YAML presets and sweep
files hold only what differs from them.

Hydra imports every `hydra_plugins` module before it composes a config, so the schema is stored
for every entry point (`training.train`, `sweeps.run`, Hydra's compose API) without an import
of ours first.
"""

from typing import Any

from hydra.core.config_store import ConfigStore

from models.config import ModelConfig
from sweeps.config import schema_defaults
from training.config import field_defaults, section_defaults


def schema() -> dict[str, Any]:
    """The training app's config at its defaults: `model`, `data`, `train`, `tracking`, `paths`."""
    # size: a target non-embedding parameter count for the ladder (models/ladder.py); None keeps
    # the shape fields
    return {"model": {**field_defaults(ModelConfig), "size": None}, **section_defaults()}


ConfigStore.instance().store(name="schema", node=schema(), provider="scaling-lab")
ConfigStore.instance().store(
    name="sweep_schema", node={"sweep": schema_defaults()}, provider="scaling-lab"
)
