"""A run's spec: the composed config validated into typed sections (training/config.py), the
model config with the ladder and the objective's vocabulary applied, and the run key. Nothing
here decodes or tokenizes; the corpus is only fingerprinted.
"""

from __future__ import annotations

import math
from typing import Any

from omegaconf import OmegaConf

from models.config import ModelConfig
from models.ladder import model_config
from training import objectives as objective
from training.checkpoint import identity
from training.config import SECTIONS, ConfigError, DataConfig, RunSpec, TrainConfig
from training.data import source_fingerprint
from training.keys import run_key


def planned_vocab_size(data: DataConfig) -> int:
    """The model's vocab size before the tokenizer exists: 256 for bytes, else data.vocab_size."""
    return 256 if data.tokenizer == "byte" else data.vocab_size


def build_model_config(
    model_section: dict, vocab_size: int, seq_len: int, data: DataConfig | None = None
) -> ModelConfig:
    """ModelConfig from the `model` group, with vocab_size from the tokenizer and
    max_seq_len = train.seq_len. `data`: its kind picks the objective (pairs or text), whose
    special ids enter the vocabulary. Raises ConfigError naming the model field."""
    for key, value in model_section.items():  # inf passes `> 0` checks; nan fails vaguely
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"model.{key}: expected a finite number, got {value!r}")
    # the family's objective adds its special ids ([MASK]; sentinels, start) after the tokenizer's
    vocab_size += objective.extra_ids(model_section.get("family", "decoder"), seq_len, data)
    d = {**model_section, "vocab_size": vocab_size, "max_seq_len": seq_len}
    try:
        return model_config(d)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"model: {e}") from None


def _sections(cfg: dict) -> dict[str, Any]:
    """The typed data/train/tracking/paths sections; an unknown section or field fails."""
    unknown = sorted(set(cfg) - set(SECTIONS) - {"model"})
    if unknown:
        raise ConfigError(
            f"{unknown[0]}: unknown config section; known: model, {', '.join(SECTIONS)}"
        )
    sections = {name: cls.from_dict(cfg.get(name)) for name, cls in SECTIONS.items()}
    data, train = sections["data"], sections["train"]
    if data.eval_tokens < train.seq_len:  # else found only after tokenizing (val_windows)
        raise ConfigError(
            f"data.eval_tokens: {data.eval_tokens} is less than one window of "
            f"train.seq_len={train.seq_len} tokens"
        )
    return sections


def _branch_point(train: TrainConfig) -> Any:
    """The run key and step of a `train.init_from` checkpoint (what a branch's key hashes)."""
    if not train.init_from:
        return None
    try:
        return identity(train.init_from, train.batch_tokens)
    except FileNotFoundError:
        raise ConfigError(f"train.init_from: {train.init_from} is not a checkpoint file") from None


def resolve_config(cfg: Any) -> RunSpec:
    """Validate a composed config (DictConfig or dict with model/data/train/tracking/paths) and
    compute its run key. Fails with ConfigError before any data or model work: it only hashes
    the corpus files (`training.data.source_fingerprint`) and reads the run key and step of a
    `train.init_from` checkpoint (see training/keys.py), nothing is decoded or tokenized."""
    if not isinstance(cfg, dict):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    cfg = {k: v for k, v in cfg.items() if k != "hydra"}
    sections = _sections(cfg)
    data, train = sections["data"], sections["train"]
    model_section = dict(cfg.get("model") or {})
    model = build_model_config(model_section, planned_vocab_size(data), train.seq_len, data)
    objective.check(model, train, data)  # the family's objective: its fields, before any work
    size = model_section.get("size")
    fingerprint = source_fingerprint(data)
    payload = {
        "model": model.to_dict(),
        "data": {**data.to_dict(), "fingerprint": fingerprint},
        "train": {**train.to_dict(), "init_from": _branch_point(train)},
    }
    if model.family != "decoder":  # the other families key their objective's fields too
        payload["objective"] = objective.key_fields(model.family, train.seq_len, data)
    return RunSpec(
        model=model,
        model_size=None if size is None else float(size),
        run_key=run_key(payload),
        data_source=fingerprint,
        **sections,
    )
