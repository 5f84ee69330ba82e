"""The schema of one training run: `data`, `train`, `tracking` and `paths` (the model's is
`models.config.ModelConfig`).

Each dataclass declares every field once, with its type, allowed values and default. Hydra
composes `conf/config.yaml` on top of these defaults (`hydra_plugins/scaling_lab_schema` stores
them as the config `schema`), so a YAML preset holds only what differs from them. Building a
section checks itself (`__post_init__`): every field is converted to its annotated type (token
counts written as floats, `2e6`, become ints; non-integral ones are refused), every float must be
finite (NaN and inf pass range comparisons and train, silently wrong), then `validate` checks
ranges and cross-field rules. A wrong value fails with one line naming the field (gpt-neox style),
before any data or model work. `tracking.uri` (or `$MLFLOW_TRACKING_URI` when it is null) must be
a form MLflow can open (`check_tracking_uri`; whether a server answers is checked later,
`training.tracking`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Union


class ConfigError(ValueError):
    """A user-facing configuration error; the message names the field and the allowed values."""


def as_int(value: Any, name: str) -> int:
    """An integer, accepting integral floats such as `2e6` (YAML/CLI read them as float)."""
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"{name}: expected an integer, got {value!r}") from None
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    raise ConfigError(f"{name}: expected an integer (e.g. 2e6), got {value!r}")


def _coerce(value: Any, tp: Any, name: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, name)
            except ConfigError as e:
                errors.append(str(e))
        if len(errors) == 1:
            raise ConfigError(errors[0])
        reasons = "; or ".join(e.split(": ", 1)[1] for e in errors)
        raise ConfigError(f"{name}: {value!r} is not valid: {reasons}")
    if origin is Literal:
        if value in args:
            return value
        allowed = ", ".join(repr(a) for a in args)
        raise ConfigError(f"{name}: {value!r} is not allowed; choose one of {allowed}")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        return [_coerce(v, args[0], f"{name}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping, got {value!r}")
        return {str(k): _coerce(v, args[1], f"{name}.{k}") for k, v in value.items()}
    if tp is int:
        return as_int(value, name)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"{name}: expected a number, got {value!r}") from None
        if not math.isfinite(number):  # nan/inf pass every `<`/`>` range check below
            raise ConfigError(f"{name}: expected a finite number, got {value!r}")
        return number
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if isinstance(value, (dict, list)) or value is None:
            raise ConfigError(f"{name}: expected a string, got {value!r}")
        return str(value)
    raise TypeError(f"unsupported field type {tp} for {name}")


class _Section:
    """Mixin of the sections: converts and checks its fields when built, `from_dict` rejects
    unknown keys, `to_dict` for logging."""

    _section: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for name, tp in _field_types(type(self)).items():
            setattr(self, name, _coerce(getattr(self, name), tp, f"{self._section}.{name}"))
        self.validate()

    @classmethod
    def from_dict(cls, d: dict | None) -> _Section:
        d = dict(d or {})
        names = list(_field_types(cls))
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ConfigError(
                f"{cls._section}.{unknown[0]}: unknown key; known keys: {', '.join(names)}"
            )
        return cls(**d)

    def validate(self) -> None:
        pass

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    """Field name -> annotated type, in declaration order."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _positive(section: str, obj: Any, *names: str) -> None:
    for n in names:
        if getattr(obj, n) is not None and getattr(obj, n) <= 0:
            raise ConfigError(f"{section}.{n}: must be > 0, got {getattr(obj, n)!r}")


INT64_MAX = 2**63 - 1


def _at_most_int64(section: str, obj: Any, *names: str) -> None:
    """Counts that become 64-bit integers (token steps in MLflow and numpy, step counters)."""
    for n in names:
        v = getattr(obj, n)
        for i, x in enumerate(v if isinstance(v, list) else [v]):
            if x is not None and x > INT64_MAX:
                where = f"{n}[{i}]" if isinstance(v, list) else n
                raise ConfigError(f"{section}.{where}: must be at most 2**63 - 1, got {x:.3g}")


def _in_range(section: str, obj: Any, name: str, lo: float, hi: float, closed: str = "[]") -> None:
    """`section.name` within lo..hi; `closed` says which ends are included ("[]", "[)", ...)."""
    v = getattr(obj, name)
    if v is None:
        return
    ok = (v >= lo if closed[0] == "[" else v > lo) and (v <= hi if closed[1] == "]" else v < hi)
    if not ok:
        ends = f"{closed[0]}{lo:g}, {'inf' if hi == math.inf else f'{hi:g}'}{closed[1]}"
        raise ConfigError(f"{section}.{name}: must be in {ends}, got {v!r}")


TRACKING_URI_FORMS = (
    "sqlite:///path/to/mlruns.db, http(s)://host:port, "
    "postgresql:// / mysql:// / mssql:// database URIs, databricks, "
    "or a file:// URI or plain folder path (MLflow file store)"
)
TRACKING_URI_SCHEMES = {
    "sqlite",
    "http",
    "https",
    "file",
    "databricks",
    "databricks-uc",
    "uc",
    "postgresql",
    "mysql",
    "mssql",
}


def check_tracking_uri(uri: str, name: str = "tracking.uri") -> None:
    """Raise ConfigError naming `name` unless `uri` is a form MLflow can open (its tracking store
    registry: http(s), SQLAlchemy databases, databricks, file paths). Syntax only, no I/O; a
    server's reachability is `training.tracking.check_reachable`."""
    if not uri.strip():
        raise ConfigError(f"{name}: empty; use {TRACKING_URI_FORMS}")
    scheme, sep, rest = uri.partition("://")
    if not sep:
        if ":" in uri.split("/", 1)[0] and not uri.startswith("databricks"):
            raise ConfigError(f"{name}: {uri!r} is not a tracking URI; use {TRACKING_URI_FORMS}")
        return  # a plain path: MLflow's file store
    base = scheme.lower().split("+", 1)[0]  # postgresql+psycopg2://, mysql+pymysql://
    if base not in TRACKING_URI_SCHEMES:
        raise ConfigError(
            f"{name}: unknown scheme {scheme + '://'!r} in {uri!r}; use {TRACKING_URI_FORMS}"
        )
    if base == "sqlite" and not rest.startswith("/"):
        raise ConfigError(
            f"{name}: {uri!r}: a SQLite URI needs three slashes and a path, sqlite:///path/to/mlruns.db"
        )
    if base in ("http", "https") and not rest.split("/", 1)[0]:
        raise ConfigError(f"{name}: {uri!r} has no host; use {scheme}://host:port")


@dataclass
class DataConfig(_Section):
    _section: ClassVar[str] = "data"
    # where the corpus comes from (docs/corpora.md)
    source: Literal["stdlib", "sitepackages", "text", "hf", "tokens"] = "stdlib"
    path: str | None = None  # text: a .txt/.jsonl file or a directory of them
    text_field: str = "text"  # jsonl / hf: the field holding the document text
    doc_separator: str = "<|endoftext|>"  # text: splits a .txt file into documents
    name: str | None = None  # hf: dataset name or builder ("json", "roneneldan/TinyStories")
    config: str | None = None  # hf: dataset config name
    split: str = "train"  # hf: split, slicing allowed ("train[:10000]")
    data_files: str | None = None  # hf: local data files for builders such as "json"
    from_disk: str | None = None  # hf: a dataset saved with save_to_disk (overrides name)
    val_fraction: float = 0.05  # share of documents (files, pairs) held out for validation
    tokenizer: Literal["bpe", "byte"] = "bpe"  # byte-level BPE trained on the train split | 256 ids
    vocab_size: int = 4096  # bpe only; byte is always 256
    tokenizer_train_chars: int = 50_000_000  # BPE is trained on at most this many characters
    eval_tokens: int = 65536  # validation tokens: fixed windows from the start of val
    max_bytes: int | None = None  # sitepackages: at most this many bytes of files; None: all
    # Paired corpora (encoder_decoder): `kind: pairs` reads (source, target) records instead of
    # documents: data.source=text, .jsonl records {source_field: ..., target_field: ...}, or
    # data.source=stdlib, pairs derived from the stdlib (training/example_pairs.py).
    kind: Literal["text", "pairs"] = "text"
    source_field: str = "source"  # pairs, jsonl: the field holding a record's source text
    target_field: str = "target"  # pairs, jsonl: the field holding its target text
    src_len: int | None = None  # pairs: source positions per pair; the target gets the rest of
    # train.seq_len (each side truncated to fit, ending in end-of-text). None: seq_len // 2
    streaming: bool = False  # hf: stream the dataset instead of downloading it whole
    max_tokens: int | None = None  # stop reading documents once this many tokens are written
    val_path: str | None = None  # tokens: validation shards (a file, folder or glob)
    eot_id: int | None = None  # tokens: the end-of-text id of the shards' tokenizer

    def to_dict(self) -> dict:
        """Every field; a text corpus leaves out ``PAIR_FIELDS`` (holding their defaults), and
        ``CORPUS_FIELDS`` at their defaults are left out, so params and run keys do not depend
        on fields a corpus does not use."""
        d = dataclasses.asdict(self)
        if self.kind == "text":
            for name in PAIR_FIELDS:
                del d[name]
        for name in CORPUS_FIELDS:
            if d[name] == getattr(DataConfig, name):
                del d[name]
        return d

    def validate(self) -> None:
        self._check_source()
        if not 0.0 < self.val_fraction < 1.0:
            raise ConfigError(f"data.val_fraction: must be in (0, 1), got {self.val_fraction}")
        if self.source == "tokens" and not 1 <= self.vocab_size <= 2**32 - 1:
            raise ConfigError(f"data.vocab_size: the shards' vocabulary, got {self.vocab_size}")
        if (
            self.tokenizer == "bpe"
            and self.source != "tokens"
            and not 257 <= self.vocab_size <= 2**32 - 1
        ):
            raise ConfigError(f"data.vocab_size: must be >= 257 for bpe, got {self.vocab_size}")
        if self.eot_id is not None and not 0 <= self.eot_id < self.vocab_size:
            raise ConfigError(
                f"data.eot_id: {self.eot_id} is not an id below data.vocab_size={self.vocab_size}"
            )
        _positive("data", self, "eval_tokens", "tokenizer_train_chars", "max_bytes", "src_len")
        _positive("data", self, "max_tokens")
        _at_most_int64("data", self, "eval_tokens", "tokenizer_train_chars", "max_bytes")
        _at_most_int64("data", self, "max_tokens", "vocab_size", "src_len")
        if not self.doc_separator:
            raise ConfigError(
                "data.doc_separator: must not be empty (it splits a .txt file into documents)"
            )

    def _check_source(self) -> None:
        """The fields each source and kind needs, and those it cannot use."""
        if self.kind == "pairs" and self.source not in ("text", "stdlib"):
            raise ConfigError(
                f"data.kind: pairs are read from data.source=text (.jsonl records) or derived "
                f"from data.source=stdlib, got data.source={self.source}"
            )
        if self.kind == "text" and self.src_len is not None:
            raise ConfigError(f"data.src_len: applies to data.kind=pairs only, got {self.src_len}")
        if self.kind == "pairs" and self.source_field == self.target_field:
            raise ConfigError(f"data.target_field: {self.target_field!r} is also data.source_field")
        if self.source == "text" and not self.path:
            raise ConfigError("data.path: required when data.source=text (a file or directory)")
        if self.source == "hf" and not (self.name or self.from_disk):
            raise ConfigError("data.name: required when data.source=hf (or set data.from_disk)")
        if self.source == "tokens" and not (self.path or self.from_disk or self.name):
            raise ConfigError(
                "data.path: required when data.source=tokens (a file, folder or glob of shards; "
                "or data.from_disk / data.name for a dataset of token ids)"
            )
        if self.source == "tokens" and self.eot_id is None:
            raise ConfigError("data.eot_id: required when data.source=tokens (GPT-2's is 50256)")
        if self.streaming and (self.source not in ("hf", "tokens") or self.from_disk):
            raise ConfigError("data.streaming: applies to hub or data_files datasets (data=hf)")
        self._check_unused()

    def _check_unused(self) -> None:
        """A field set for a source that never reads it (data.path with the stdlib: the run
        would train on the stdlib, not on the files named)."""
        for name, sources in SOURCE_FIELDS.items():
            value = getattr(self, name)
            if value is not None and self.source not in sources:
                choose = " or ".join(f"data.source={s}" for s in sources)
                raise ConfigError(
                    f"data.{name}: applies to {choose} only, got data.source={self.source} "
                    f"(choose the corpus with data={sources[0]})"
                )


PAIR_FIELDS = ("kind", "source_field", "target_field", "src_len")  # DataConfig, pairs only
# Optional DataConfig fields -> the sources that read them; set for another source: an error.
SOURCE_FIELDS = {
    "path": ("text", "tokens"),
    "name": ("hf", "tokens"),
    "config": ("hf", "tokens"),
    "data_files": ("hf", "tokens"),
    "from_disk": ("hf", "tokens"),
    "max_bytes": ("sitepackages",),
    "val_path": ("tokens",),
    "eot_id": ("tokens",),
}
CORPUS_FIELDS = ("streaming", "max_tokens", "val_path", "eot_id")  # omitted at their defaults


@dataclass
class TrainConfig(_Section):
    """One training run. Steps = ceil(tokens / batch_tokens)."""

    _section: ClassVar[str] = "train"
    tokens: int = 2_000_000  # training budget D (tokens)
    batch_tokens: int = 16384  # tokens per optimizer step, all processes and micro-batches
    seq_len: int = 256  # context length (sets model.max_seq_len)
    # sequences per forward per process; None: no accumulation; auto: the largest that the
    # memory estimate fits in train.device_memory_gb (models.accounting; None without CUDA)
    micro_batch: Union[int, Literal["auto"], None] = None  # noqa: UP007
    lr: float = 1e-3  # peak learning rate
    min_lr_ratio: float = 0.1  # final lr = lr * min_lr_ratio
    warmup: float = 0.02  # < 1: fraction of the run's steps; >= 1: steps
    schedule: Literal["cosine", "wsd", "constant"] = "cosine"  # the lr after warmup
    decay_fraction: float = 0.2  # wsd: linear decay over the last fraction of the run (0: none)
    # wsd: explicit decay start (branches: the branch point); >= train.tokens: no decay
    decay_start_tokens: int | None = None
    weight_decay: float = 0.1  # on matrices and embeddings (dim >= 2) only
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0  # max global grad norm; 0 disables clipping
    label_smoothing: float = 0.0
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: fp32 CPU, bf16 GPU
    # torch.compile: auto is on for CUDA, off on the CPU, where it was no clear win and costs
    # tens of seconds per new shape (docs/performance.md). Validation runs the eager module.
    compile: Union[bool, Literal["auto"]] = "auto"  # noqa: UP007
    # Keep freed CPU memory in glibc's malloc instead of faulting it back in every step
    # (training/hostmem.py); process-wide and sticky. auto: on when training on the CPU.
    keep_host_memory: Union[bool, Literal["auto"]] = "auto"  # noqa: UP007
    seed: int = 0  # model init, dropout and data order
    eval_every: int = 100  # steps between validation evaluations (and one at the end)
    log_every: int = 10  # steps between metric flushes to MLflow and progress lines
    checkpoint_every: int = 200  # steps between resume checkpoints; 0: only the final one
    save_at_tokens: list[int] = field(default_factory=list)  # named branch checkpoints (WSD)
    init_from: str | None = None  # start a NEW run (branch) from a save_at_tokens checkpoint
    # auto: continue from this run key's checkpoint if any | true | false
    resume: Union[bool, Literal["auto"]] = "auto"  # noqa: UP007
    progress: Literal["auto", "bar", "plain", "none"] = "auto"  # auto: bar on a terminal
    peak_flops: float | None = None  # per device, for MFU; None: measured matmul peak
    save_final_checkpoint: bool = False  # log the final weights as an MLflow artifact
    prefetch: int = 2  # batches made ahead by a background thread while a step runs; 0: none
    # per device, for the memory estimate (dry-run warning, micro_batch=auto); None: the CUDA
    # device's total memory, unknown on the CPU
    device_memory_gb: float | None = None
    # ddp: every rank holds the whole model and AdamW state; fsdp: each rank holds 1/world of
    # them (FSDP2, training/parallel.py; docs/training.md says when to use which)
    parallel: Literal["ddp", "fsdp"] = "ddp"
    # each block recomputes its activations in the backward instead of keeping them
    activation_checkpointing: bool = False

    def validate(self) -> None:
        _positive("train", self, "tokens", "batch_tokens", "seq_len", "lr")
        _positive("train", self, "eval_every", "log_every", "peak_flops", "eps", "device_memory_gb")
        if self.micro_batch != "auto":
            _positive("train", self, "micro_batch")
            _at_most_int64("train", self, "micro_batch")
        if self.prefetch < 0:
            raise ConfigError(f"train.prefetch: must be >= 0, got {self.prefetch}")
        _at_most_int64("train", self, "tokens", "batch_tokens", "seq_len", "prefetch")
        _at_most_int64("train", self, "eval_every", "log_every", "checkpoint_every")
        _at_most_int64("train", self, "decay_start_tokens", "save_at_tokens")
        # the ranges where AdamW and the schedules mean something (a negative weight decay or
        # eps trains, silently wrong)
        _in_range("train", self, "beta1", 0.0, 1.0, "[)")
        _in_range("train", self, "beta2", 0.0, 1.0, "[)")
        _in_range("train", self, "weight_decay", 0.0, math.inf, "[)")
        _in_range("train", self, "grad_clip", 0.0, math.inf, "[)")
        if self.batch_tokens % self.seq_len:
            raise ConfigError(
                f"train.batch_tokens: {self.batch_tokens} is not a multiple of "
                f"train.seq_len={self.seq_len}"
            )
        if self.warmup < 0:
            raise ConfigError(f"train.warmup: must be >= 0, got {self.warmup}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError(f"train.min_lr_ratio: must be in [0, 1], got {self.min_lr_ratio}")
        if not 0.0 <= self.decay_fraction <= 1.0:
            raise ConfigError(f"train.decay_fraction: must be in [0, 1], got {self.decay_fraction}")
        if self.lr * self.weight_decay >= 1:  # AdamW scales weights by 1 - lr wd each step
            raise ConfigError(
                f"train.weight_decay: lr x weight_decay = {self.lr * self.weight_decay:g} >= 1 "
                "turns every weight to zero or flips its sign each step (AdamW multiplies "
                "weights by 1 - lr x weight_decay); lower train.weight_decay or train.lr"
            )
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(
                f"train.label_smoothing: must be in [0, 1), got {self.label_smoothing}"
            )
        if self.parallel == "fsdp" and self.precision == "fp16":
            raise ConfigError(
                "train.precision: fp16 with train.parallel=fsdp is not supported (it would need "
                "a sharded loss scaler); use bf16"
            )
        if self.checkpoint_every < 0:
            raise ConfigError(f"train.checkpoint_every: must be >= 0, got {self.checkpoint_every}")
        if not 0 <= self.seed <= SEED_MAX:  # torch.manual_seed's range, numpy's (>= 0)
            raise ConfigError(f"train.seed: must be in [0, 2**63 - 1], got {self.seed}")
        self._check_schedule_steps()
        for t in self.save_at_tokens:
            if not 0 < t <= self.tokens:
                raise ConfigError(f"train.save_at_tokens: {t} is outside (0, train.tokens]")

    def _check_schedule_steps(self) -> None:
        """Warmup within the run's steps; a WSD decay start at a token count >= 0."""
        total_steps = -(-self.tokens // self.batch_tokens)
        if self.warmup >= 1 and self.warmup != int(self.warmup):  # int() would cut it silently
            raise ConfigError(
                f"train.warmup: {self.warmup} is neither a fraction (< 1) of the run's steps nor "
                "a whole number of steps"
            )
        if self.warmup >= 1 and self.warmup > total_steps:
            raise ConfigError(
                f"train.warmup: {int(self.warmup)} steps is more than the run's {total_steps} steps "
                f"(train.tokens / train.batch_tokens); a value < 1 is a fraction of them"
            )
        # past train.tokens is allowed: no decay in this run (successive halving's rung runs)
        if self.decay_start_tokens is not None and self.decay_start_tokens < 0:
            raise ConfigError(
                f"train.decay_start_tokens: must be >= 0, got {self.decay_start_tokens}"
            )
        if self.decay_start_tokens is not None and self.schedule != "wsd":
            raise ConfigError(
                f"train.decay_start_tokens: applies to train.schedule=wsd only, got "
                f"train.schedule={self.schedule}"
            )


SEED_MAX = 2**63 - 1


@dataclass
class TrackingConfig(_Section):
    _section: ClassVar[str] = "tracking"
    uri: str | None = None  # None: $MLFLOW_TRACKING_URI or sqlite:///<project root>/mlruns.db
    experiment: str = "scaling-lab"
    parent_run_id: str | None = None  # the sweep's parent run (sets mlflow.parentRunId)
    run_name: str | None = None  # None: <arch>-<run key>
    # Run tags; None ones are not set. sweep: its name (sweeps.run sets it); variant: the
    # ablation variant (base for the baseline). More: +tracking.tags.NAME=value
    tags: dict[str, str | None] = field(default_factory=lambda: {"sweep": None, "variant": None})
    # how long a run waits for a tracking server that stopped answering before it ends (its
    # checkpoint kept, a rerun resumes); MLflow's system metrics (CPU, memory, GPU) per run
    timeout_s: float = 30.0
    system_metrics: bool = True
    # metrics reach the store at most this often (each request costs the loop GIL time;
    # docs/performance.md, logging cost); checkpoints and the run's end send at once; 0: every window
    send_interval_s: float = 1.0

    def validate(self) -> None:
        if not (isinstance(self.timeout_s, (int, float)) and 0 < self.timeout_s < math.inf):
            raise ConfigError(
                f"tracking.timeout_s: must be a positive number, got {self.timeout_s}"
            )
        if self.send_interval_s < 0:  # finite numbers are checked with every float field
            raise ConfigError(
                f"tracking.send_interval_s: must be >= 0 seconds, got {self.send_interval_s}"
            )
        if self.uri:  # null or "": $MLFLOW_TRACKING_URI, else the project's SQLite store
            check_tracking_uri(self.uri)
        elif env := os.environ.get("MLFLOW_TRACKING_URI"):  # what tracking.uri=null resolves to
            check_tracking_uri(env, "tracking.uri (null, so $MLFLOW_TRACKING_URI)")
        if not self.experiment.strip():
            raise ConfigError("tracking.experiment: must not be empty")
        # MLflow's limits (mlflow.utils.validation), else refused once the data is built
        if len(self.experiment) > 500:
            raise ConfigError(
                f"tracking.experiment: {len(self.experiment)} characters, over MLflow's 500"
            )
        for key, value in self.tags.items():
            if len(key) > 250:
                raise ConfigError(
                    f"tracking.tags: a key of {len(key)} characters, over MLflow's 250"
                )
            if value is not None and len(str(value)) > 8000:
                raise ConfigError(
                    f"tracking.tags.{key}: {len(str(value))} characters, over MLflow's 8000"
                )
        if self.run_name is not None and len(self.run_name) > 8000:
            raise ConfigError(
                f"tracking.run_name: {len(self.run_name)} characters, over MLflow's 8000"
            )


@dataclass
class PathsConfig(_Section):
    _section: ClassVar[str] = "paths"
    runs_dir: str | None = None  # None: $SCALING_LAB_RUNS_DIR or <project root>/runs
    cache_dir: str | None = None  # None: $SCALING_LAB_CACHE_DIR or <project root>/.cache/data


SECTIONS = {
    "data": DataConfig,
    "train": TrainConfig,
    "tracking": TrackingConfig,
    "paths": PathsConfig,
}


def section_defaults() -> dict[str, dict[str, Any]]:
    """Every section's fields at their defaults: the schema Hydra composes against (with
    `model`, see hydra_plugins/scaling_lab_schema)."""
    return {name: field_defaults(cls) for name, cls in SECTIONS.items()}


def field_defaults(cls: type) -> dict[str, Any]:
    """A dataclass's fields at their defaults, without building it (building checks
    `tracking.uri` against the environment: that is for the composed config to do)."""
    return {
        f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(cls)
    }


@dataclass
class RunSpec:
    """A fully resolved and validated training run (no data or model built yet)."""

    model: Any  # models.ModelConfig with the ladder applied, vocab/seq_len filled in
    model_size: float | None  # the `model.size` asked for, if any
    data: DataConfig
    train: TrainConfig
    tracking: TrackingConfig
    paths: PathsConfig
    run_key: str
    data_source: str = ""  # training.data.source_fingerprint: the corpus as the run key sees it

    def to_dict(self) -> dict[str, Any]:
        """The resolved config (what is logged as params and as config.yaml)."""
        model = {**self.model.to_dict(), "size": self.model_size}
        return {
            "model": model,
            "data": self.data.to_dict(),
            "train": self.train.to_dict(),
            "tracking": self.tracking.to_dict(),
            "paths": self.paths.to_dict(),
        }
