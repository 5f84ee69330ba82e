"""The config schema: every default is written once, in the dataclasses (training/config.py,
models/config.py); Hydra composes conf/ against them and the presets hold only what differs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from models.config import ModelConfig
from training.config import (
    SECTIONS,
    ConfigError,
    DataConfig,
    TrackingConfig,
    TrainConfig,
    field_defaults,
)

CONF = Path(__file__).resolve().parents[1] / "conf"
PRESETS = {"model": ModelConfig, "data": DataConfig}


def composed(*overrides: str) -> dict:
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=True)


def test_the_composed_default_config_is_the_dataclass_defaults():
    cfg = composed("model=gpt2")  # gpt2: ModelConfig's defaults; data=stdlib: DataConfig's
    assert set(cfg) == {"model", *SECTIONS}
    for name, cls in SECTIONS.items():
        assert cfg[name] == field_defaults(cls), name
        assert cls.from_dict(cfg[name]) == cls(), name
    assert cfg["model"] == {**dataclasses.asdict(ModelConfig()), "size": None}
    assert ModelConfig.from_dict(cfg["model"]) == ModelConfig()


@pytest.mark.parametrize(
    "group, preset", [(g, p.stem) for g in PRESETS for p in sorted((CONF / g).glob("*.yaml"))]
)
def test_presets_hold_only_what_differs_from_the_defaults(group, preset):
    """A preset that repeats a default writes it twice: it would silently stay behind when the
    dataclass default changes."""
    raw = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{preset}.yaml"))
    defaults = field_defaults(PRESETS[group])
    assert set(raw) <= set(defaults), f"{group}/{preset}: unknown {set(raw) - set(defaults)}"
    repeated = sorted(k for k, v in raw.items() if v == defaults[k])
    assert not repeated, f"{group}/{preset}.yaml repeats the defaults of {repeated}"
    built = composed(f"{group}={preset}")[group]
    assert {k: v for k, v in built.items() if v != defaults.get(k)} == raw


def test_the_schema_is_the_only_place_of_train_tracking_and_paths():
    assert not (CONF / "train").exists()
    config = OmegaConf.load(CONF / "config.yaml")
    assert set(config) == {"defaults", "hydra"}


def test_sections_convert_and_check_themselves():
    train = TrainConfig(tokens=2e6, save_at_tokens=[1e6])  # YAML and the CLI read 2e6 as float
    assert (train.tokens, train.save_at_tokens) == (2_000_000, [1_000_000])
    assert type(train.tokens) is int
    with pytest.raises(ConfigError, match=r"^train\.tokens: expected an integer \(e\.g\. 2e6\)"):
        TrainConfig(tokens=2.5)
    with pytest.raises(ConfigError, match=r"^train\.lr: expected a finite number"):
        dataclasses.replace(train, lr=float("nan"))
    with pytest.raises(ConfigError, match=r"^data\.path: required when data\.source=text"):
        DataConfig(source="text")
    with pytest.raises(ConfigError, match=r"^train\.foo: unknown key; known keys: tokens, "):
        TrainConfig.from_dict({"foo": 1})
    assert TrackingConfig(send_interval_s=0).send_interval_s == 0  # every window at once
    with pytest.raises(ConfigError, match=r"^tracking\.send_interval_s: must be >= 0 seconds"):
        TrackingConfig(send_interval_s=-1)
    with pytest.raises(ConfigError, match=r"^tracking\.send_interval_s: expected a finite number"):
        TrackingConfig(send_interval_s=float("inf"))
