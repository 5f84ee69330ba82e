"""A run's spec: the composed config validated into typed sections (training/config.py), the
model config with the ladder and the objective's vocabulary applied, and the run key. Nothing
here decodes or tokenizes; the corpus is only fingerprinted.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from models.accounting import count_params
from models.config import ModelConfig
from models.ladder import model_config
from training import objectives as objective
from training import tracking
from training.checkpoint import LAST, identity, run_dir
from training.config import SECTIONS, ConfigError, DataConfig, RunSpec, TrainConfig, as_int
from training.data import filehash, source_fingerprint
from training.data.cache import cache_key
from training.data.sources import source_bytes, text_files
from training.keys import run_key
from training.memory_plan import step_memory
from training.paths import default_cache_dir, default_runs_dir, resolve_dir, unusable_folder


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
    except Exception as e:  # torch.load of a file that is no checkpoint: any error
        raise ConfigError(
            f"train.init_from: {train.init_from} is not a checkpoint file ({type(e).__name__})"
        ) from None


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
    lines = _replaced(model_section, planned_vocab_size(data), train.seq_len, data)
    model = build_model_config(model_section, planned_vocab_size(data), train.seq_len, data)
    objective.check(model, train, data)  # the family's objective: its fields, before any work
    size = model_section.get("size")
    filehash.use_cache_dir(resolve_dir(sections["paths"].cache_dir, default_cache_dir()))
    fingerprint = source_fingerprint(data)
    payload = {
        "model": model.to_dict(),
        "data": {**data.to_dict(), "fingerprint": fingerprint},
        "train": {**train.to_dict(), "init_from": _branch_point(train)},
    }
    if model.family != "decoder":  # the other families key their objective's fields too
        payload["objective"] = objective.key_fields(model.family, train.seq_len, data)
    _warn([*lines, *_surprises(train, sections["tracking"]), *_unbounded_stream(data)])
    return RunSpec(
        model=model,
        model_size=None if size is None else float(size),
        run_key=run_key(payload),
        data_source=fingerprint,
        **sections,
    )


_WARNED: set[str] = set()


def _warn(lines: list[str]) -> None:
    """One stderr line per surprising but legal value, once per process (a sweep resolves
    every point)."""
    for line in lines:
        if line not in _WARNED:
            _WARNED.add(line)
            print(f"warning: {line}", file=sys.stderr)


def _replaced(model_section: dict, vocab_size: int, seq_len: int, data: DataConfig) -> list[str]:
    """`model.max_seq_len` is train.seq_len's and `model.vocab_size` the tokenizer's: a value
    the user set is named (it was replaced silently); one that is no size at all is an error."""
    lines = []
    for name, value, by in (
        ("max_seq_len", seq_len, f"train.seq_len={seq_len} (the context length)"),
        (
            "vocab_size",
            vocab_size,
            f"the tokenizer's {vocab_size} (data.tokenizer={data.tokenizer})",
        ),
    ):
        asked = model_section.get(name)
        if asked in (None, value, getattr(ModelConfig, name)):
            continue
        try:
            asked = as_int(asked, f"model.{name}")
        except ConfigError:
            asked = 0
        if asked <= 0:
            raise ConfigError(
                f"model.{name}: expected a positive integer, got {model_section[name]!r}; "
                f"{by} sets it"
            )
        lines.append(f"model.{name}={asked} is replaced by {by}")
    return lines


def _surprises(train: TrainConfig, tracking_cfg: Any) -> list[str]:
    """Legal settings that do something other than they seem to."""
    lines = []
    if train.batch_tokens > train.tokens:
        lines.append(
            f"train.batch_tokens={train.batch_tokens} is more than train.tokens={train.tokens}: "
            f"the run trains one batch, {train.batch_tokens} tokens"
        )
    late = train.decay_start_tokens is not None and train.decay_start_tokens >= train.tokens
    if late and "tune_role" not in tracking_cfg.tags:  # a tuning segment stops before it
        lines.append(
            f"train.decay_start_tokens={train.decay_start_tokens} is not before the end of the "
            f"run (train.tokens={train.tokens}): the lr never decays"
        )
    return lines


def _unbounded_stream(data: DataConfig) -> list[str]:
    """Streaming exists for corpora too large to download; without a token limit the whole
    stream is read and tokenized into the cache before the first step."""
    if data.streaming and data.max_tokens is None:
        return [
            "data.streaming=true without data.max_tokens: the whole dataset is streamed and "
            "tokenized before training starts; set data.max_tokens to bound it"
        ]
    return []


# ---------------------------------------------------------------- pre-flight
def preflight(
    spec: RunSpec,
    micro_batch: int | None = None,
    precision: str = "fp32",
    device_bytes: float | None = None,
    world: int = 1,
) -> None:
    """What the filesystem and the store must hold before a run writes anything (its store,
    runs folder or data cache): one ConfigError naming the field, else nothing happens.
    `micro_batch` (sequences) and `precision` (fp32 | bf16 | fp16): the step as the run will
    take it, whose memory is checked when given; `device_bytes`: the accelerator's memory,
    None when the run trains on the host; `world`: its ranks (`train.parallel=fsdp` shares
    the step's memory among them)."""
    tr, paths = spec.train, spec.paths
    if tr.init_from and not Path(tr.init_from).is_file():
        raise ConfigError(f"train.init_from: {tr.init_from} is not a checkpoint file")
    runs_dir = resolve_dir(paths.runs_dir, default_runs_dir())
    _check_folder("paths.runs_dir", runs_dir)
    cache_dir = resolve_dir(paths.cache_dir, default_cache_dir())
    last = run_dir(runs_dir, spec.run_key) / LAST
    if tr.resume is True and not last.exists():  # true: require one (auto: resume if any)
        raise ConfigError(f"train.resume=true: no checkpoint at {last}")
    preflight_data(spec.data, cache_dir)
    _check_eval_tokens(spec, cache_dir)
    _check_memory(spec.model)
    if micro_batch is not None:
        _check_step_memory(spec, micro_batch, precision, device_bytes, world)
    uri = tracking.resolve_tracking_uri(spec.tracking.uri)
    if (db := tracking.sqlite_path(uri)) is not None:
        _check_folder("tracking.uri", db.parent)
    tracking.check_store(uri, spec.tracking.parent_run_id)
    if "://" not in uri or uri.startswith("file://"):
        _check_file_store(uri)


def preflight_data(data: DataConfig, cache_dir: Path) -> None:
    """The checks of `preflight` that preparing a corpus needs too (`python -m training.data
    prepare`): the cache folder, and the text files of data=text."""
    _check_folder("paths.cache_dir", cache_dir)
    if data.source == "text":
        _check_text_files(data)


def _check_file_store(uri: str) -> None:
    """MLflow 3 refuses its file store unless told otherwise: a traceback once data was built."""
    from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE  # lazy: mlflow ~2.5 s

    if not MLFLOW_ALLOW_FILE_STORE.get():
        raise ConfigError(
            f"tracking.uri: {uri} is an MLflow file store, which MLflow no longer opens; use "
            "sqlite:///path/to/mlruns.db (or set MLFLOW_ALLOW_FILE_STORE=true)"
        )


def _check_memory(model: ModelConfig) -> None:
    """The fp32 weights alone fit in this machine's memory (the model is built on the host):
    else building it fails with a traceback after the store and the data cache were made."""
    need = 4 * count_params(model).total
    have = _host_memory()
    if need > have:
        raise ConfigError(
            f"model: {need / 4:.3g} parameters need {need / 2**30:.3g} GiB for their fp32 "
            f"weights alone, more than this machine's {have / 2**30:.3g} GiB of memory"
        )


def _check_step_memory(
    spec: RunSpec, micro_batch: int, precision: str, device_bytes: float | None, world: int = 1
) -> None:
    """A training step fits where it runs: weights, gradients, AdamW's two moments (16 bytes
    per parameter) and the activations of one micro-batch (`models.accounting.memory_estimate`,
    an upper estimate; one rank's share under `train.parallel=fsdp`, training.memory_plan).
    Else the run is killed for memory after its store and run exist."""
    on_host = device_bytes is None
    tr = spec.train
    device = "cpu" if on_host else "cuda"
    how = {"world": world, "activation_checkpointing": tr.activation_checkpointing}
    step = step_memory(spec.model, tr.seq_len, micro_batch, precision, device, tr.parallel, **how)
    have = _host_memory() if on_host else device_bytes
    if step.total <= have:
        return
    n = step.params // 4
    where = "this machine's" if on_host else "the device's"
    sharded = step_memory(spec.model, tr.seq_len, micro_batch, precision, device, "fsdp", **how)
    if tr.parallel == "ddp" and world > 1 and sharded.total <= have:
        field = "train.parallel"
        fix = f"train.parallel=fsdp (an estimated {sharded.total / 2**30:.3g} GiB per rank)"
    elif step.total - step.activations > have:  # the parameters' state alone
        field, fix = "model", "a smaller model"
    else:
        field, fix = "train.micro_batch", "a smaller train.micro_batch (or train.batch_tokens)"
    raise ConfigError(
        f"{field}: a training step of {n:.3g} parameters on a micro-batch of {micro_batch} x "
        f"{tr.seq_len} tokens needs an estimated "
        f"{step.total / 2**30:.3g} GiB (weights, gradients and AdamW state "
        f"{(step.total - step.activations) / 2**30:.3g}, activations "
        f"{step.activations / 2**30:.3g}), more than {where} {have / 2**30:.3g} GiB; use {fix}"
    )


def _host_memory() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _check_folder(name: str, folder: Path) -> None:
    """`folder` exists as a folder or can be made (`training.paths.unusable_folder`)."""
    if (why := unusable_folder(folder)) is not None:
        raise ConfigError(f"{name}: {why}")


def _check_text_files(data: DataConfig) -> None:
    """No NUL byte in the first 8 KB of a corpus file (git's test for binary files): a binary
    file decodes with replacement characters and trains, silently wrong."""
    for _, path in text_files(data)[1]:
        with open(path, "rb") as f:
            if b"\0" in f.read(8192):
                raise ConfigError(f"data.path: {path} is not a text file (it holds NUL bytes)")


def _check_eval_tokens(spec: RunSpec, cache_dir: Path) -> None:
    """data.eval_tokens against the validation split of a token cache built before (its
    meta.json); without one the split is known only once tokenized (`val_windows`)."""
    data, seq_len = spec.data, spec.train.seq_len
    if data.source == "tokens" or data.kind != "text":
        return
    needed = (data.eval_tokens // seq_len) * seq_len + 1
    if data.source in ("stdlib", "text"):  # their files are listed already; cheap
        # a byte (or replacement character, 3 bytes) per token at most, plus one end-of-text
        # per document: the whole corpus has at most 4 tokens per byte
        size = source_bytes(data)
        if needed > 4 * size:
            raise ConfigError(
                f"data.eval_tokens={data.eval_tokens}: the whole corpus is {size} bytes (at "
                f"most {4 * size} tokens), less than the validation windows need; lower "
                "data.eval_tokens"
            )
    meta = cache_dir / cache_key(data, spec.data_source) / "meta.json"
    try:
        n_val = int(json.loads(meta.read_text())["n_val_tokens"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # no cache yet, or one the loader rebuilds
    if needed > n_val:
        raise ConfigError(
            f"data.eval_tokens={data.eval_tokens}: the validation split has only {n_val} tokens; "
            "lower data.eval_tokens or raise data.val_fraction"
        )
