"""Run keys: a short hash of what decides a run's result, from the resolved config.

The same config always gives the same key, so a rerun finds its MLflow run and checkpoint and
resumes instead of duplicating work. Knobs that change where results go, how progress is shown
or how fast it runs (tracking, paths, logging/eval/checkpoint cadence, progress bars, compile,
the host allocator, batch prefetch, device memory, `train.micro_batch`: gradient accumulation
splits the same global batch; `train.parallel` and `train.activation_checkpointing`: the same
updates, computed on other ranks) are excluded: changing them must not start a different run.

Inputs that name data by where it is are keyed by what it is (`training.spec.resolve_config`
fills both in before hashing):
- the corpus: `data.fingerprint` = `training.data.source_fingerprint`, a hash of the bytes the
  documents are read from and of their names inside `data.path` (these decide the train/val
  split). `data.path`, `data.from_disk` and `data.data_files` are not hashed. So editing the
  files behind a path gives a new key, and the same files under another folder (a moved or
  copied corpus, another machine's checkout) give the same key: the run trains on identical
  tokens there. The stdlib corpus is the running Python's: another Python, another key.
- `train.init_from`: the checkpoint's run key and step (`training.checkpoint.identity`), not its
  absolute path, so a branch planned before its stable run exists has the key it trains under,
  and the same branch from another runs folder is the same run.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Top-level sections that never affect what is trained.
EXCLUDED_SECTIONS = {"tracking", "paths", "hydra"}
# train.* fields that change cadence/presentation/resume behaviour, not the trained model.
EXCLUDED_TRAIN_KEYS = {
    "eval_every",
    "log_every",
    "checkpoint_every",
    "save_at_tokens",
    "resume",
    "progress",
    "peak_flops",
    "save_final_checkpoint",
    "compile",
    "keep_host_memory",
    "micro_batch",
    "prefetch",
    "device_memory_gb",
    "parallel",  # how the same global batch's gradients are computed: the same run
    "activation_checkpointing",
}
# data.* fields that say where the corpus is, or which part of it (`max_bytes`: the files it
# selects are hashed into `data.fingerprint`), or how it is read (`streaming`: the same tokens);
# `data.fingerprint` says what it is.
EXCLUDED_DATA_KEYS = {"path", "from_disk", "data_files", "max_bytes", "val_path", "streaming"}
KEY_LENGTH = 16


def key_payload(cfg: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config that defines a run (what the key hashes)."""
    out = {k: v for k, v in cfg.items() if k not in EXCLUDED_SECTIONS}
    if isinstance(out.get("train"), dict):
        out["train"] = {k: v for k, v in out["train"].items() if k not in EXCLUDED_TRAIN_KEYS}
    if isinstance(out.get("data"), dict):
        out["data"] = {k: v for k, v in out["data"].items() if k not in EXCLUDED_DATA_KEYS}
    return out


def _canonical(value: Any) -> Any:
    from models.values import int_if_integral  # here: the models package imports torch

    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    # Integral floats hash like ints, so `tokens: 2e6` and `tokens: 2000000` give one key.
    return int_if_integral(value)


def run_key(cfg: dict[str, Any]) -> str:
    """16 hex characters of sha256 over the canonical JSON of `key_payload(cfg)`."""
    payload = json.dumps(_canonical(key_payload(cfg)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:KEY_LENGTH]
