"""One training run: `python -m sweeps.train [overrides]` or `train(cfg)` from Python.

A run is a pure function of its resolved config (see sweeps/config.py): the config fixes the
run key, the data, the model, the optimizer and the schedule. The run writes an MLflow run
(schema in docs/contracts.md) and checkpoints under `<runs_dir>/<run_key>/`; rerunning the same
config in the same experiment resumes from the last checkpoint into the same MLflow run, or
returns at once if that run already FINISHED (in another experiment it trains in full). Sweeps
call `train()` many times in one process, so all state (the Accelerator, MLflow clients) is
created inside it.

Order of work: validate everything (config, model shape, batch geometry, tracking server) ->
data -> model -> loop. A user error fails in the first phase with one line naming the field.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sweeps import checkpoint as ckpt
from sweeps import hostmem
from sweeps import tracking as trk
from sweeps.config import ConfigError, RunSpec, TrainConfig, build_model_config, resolve_config
from sweeps.paths import default_cache_dir, default_runs_dir, resolve_dir

log = logging.getLogger("sweeps.train")


@dataclass
class TrainResult:
    run_key: str
    run_id: str | None  # MLflow run id (None on non-main processes)
    status: str  # FINISHED | FAILED
    final_val_loss: float | None = None
    final_train_loss: float | None = None
    tokens_consumed: int = 0
    steps: int = 0
    wall_time_s: float = 0.0
    failure_reason: str | None = None
    run_dir: str = ""
    reused: bool = False  # a FINISHED run with this key existed; nothing was trained


@dataclass
class Geometry:
    world_size: int
    micro_batch: int  # sequences per forward per process
    grad_accum: int  # micro-steps per optimizer step
    total_steps: int  # ceil(tokens / batch_tokens)


def batch_geometry(train: TrainConfig, world_size: int) -> Geometry:
    seqs = train.batch_tokens // train.seq_len  # sequences per optimizer step, all ranks
    if seqs % world_size:
        raise ConfigError(
            f"train.batch_tokens: {train.batch_tokens} tokens = {seqs} sequences cannot be "
            f"split over {world_size} processes"
        )
    per_rank = seqs // world_size
    micro = train.micro_batch or per_rank
    if per_rank % micro:
        raise ConfigError(
            f"train.micro_batch: {micro} must divide the {per_rank} sequences per process "
            f"(batch_tokens / seq_len / processes)"
        )
    return Geometry(
        world_size, micro, per_rank // micro, math.ceil(train.tokens / train.batch_tokens)
    )


def _reset_accelerate_state() -> None:
    """Forget the previous run's Accelerator: its state is a process-wide singleton, and a
    sweep calls train() repeatedly in one process (mixed precision may differ between runs).
    The process group (PartialState) is kept: it belongs to the process, not the run."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()


def _group():
    """``torch.distributed`` when this process belongs to a process group, else None."""
    if "torch" not in sys.modules:  # failed before anything imported torch: no group
        return None
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def wait_for_all_ranks() -> None:
    """A barrier, where there is a group: only where every rank gets (a run that returned),
    else a rank that failed alone would leave the others waiting in it.

    Why a run ends with one: a gloo worker thread lets go of a finished collective (and of its
    tensors) a moment after ``wait()`` returns, and freeing a tensor that Python has seen needs
    the GIL. If the process is finalizing by then, Python ends that thread inside a noexcept
    destructor: ``std::terminate`` ("terminate called without an active exception"), SIGABRT
    after a successful run. Rank 1 exits right after its last all-reduce: it aborted in 3 of 45
    runs on the loaded 2-core VM, 6 of 12 with its core busy and a 1 s GIL switch interval. The
    barrier waits with the GIL released, which lets the threads finish: 0 of 24 under that load."""
    if (dist := _group()) is not None:
        dist.barrier()


def end_process_group() -> None:
    """Destroy the process group, if there is one: the documented teardown, run at exit
    (registered by ``train``; a sweep keeps the group from run to run). It joins gloo's threads
    only once nothing else holds the group: a DistributedDataParallel wrapper, even freed,
    keeps it alive in torch 2.13, so a clean exit also needs ``wait_for_all_ranks`` first."""
    if (dist := _group()) is not None:
        dist.destroy_process_group()


def _mixed_precision(train: TrainConfig, cuda: bool) -> str:
    precision = train.precision
    if precision == "auto":
        precision = "bf16" if cuda else "fp32"
    if precision == "fp16" and not cuda:
        raise ConfigError("train.precision: fp16 needs a GPU; use fp32 or bf16 on CPU")
    return {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[precision]


def _make_optimizer(model, train: TrainConfig):
    """AdamW; weight decay on tensors with dim >= 2 (matrices, embeddings), not biases/gains."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": train.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    kwargs = dict(lr=train.lr, betas=(train.beta1, train.beta2), eps=train.eps)
    try:
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError):  # fused unsupported for this device/dtype
        return torch.optim.AdamW(groups, foreach=True, **kwargs)


def _on_for(setting: bool | str, device, auto_device_type: str) -> bool:
    """A true | false | auto knob: ``auto`` = on exactly when training on ``auto_device_type``."""
    return device.type == auto_device_type if setting == "auto" else bool(setting)


def use_compile(setting: bool | str, device) -> bool:
    """``train.compile``: true/false, or ``auto`` = on for CUDA, off on CPU and anything else.
    On CPU compiling was no clear win in fp32 (llama 1.02-1.13x, gpt2 0.95-0.96x per step) and
    costs ~40 s per new shape, ~8 s per later process (conf/train/default.yaml)."""
    return _on_for(setting, device, "cuda")


def use_keep_host_memory(setting: bool | str, device) -> bool:
    """``train.keep_host_memory``: true/false, or ``auto`` = on when training on the CPU, where
    activations and gradients live in malloc's memory (on CUDA the host only holds batches)."""
    return _on_for(setting, device, "cpu")


def _step_and_clip(accelerator, optimizer):
    """(optimizer to step, gradient clipping function) for the training loop.

    Accelerate's optimizer and clipping wrappers do work only for fp16 loss scaling and for
    XLA/FSDP/DeepSpeed; otherwise they are per-step Python overhead (``AcceleratedOptimizer.step``
    looks up an optional package's metadata twice per call): ~1.08x per step of a tiny CPU model
    (docs/performance.md). Then step the torch optimizer and clip with torch directly: the same
    updates, bit for bit (the wrappers are no-ops here)."""
    import functools

    import torch
    from accelerate.utils import DistributedType

    plain = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)
    if accelerator.scaler is None and accelerator.distributed_type in plain:
        return optimizer.optimizer, functools.partial(torch.nn.utils.clip_grad_norm_, foreach=True)
    return optimizer, accelerator.clip_grad_norm_


def _loss(model, x, y, label_smoothing: float):
    import torch.nn.functional as F

    if label_smoothing == 0.0:
        return model(x, y, return_logits=False)[1]  # chunked loss, no (B, T, V) logits
    logits, _ = model(x)  # (B, T, V)
    return F.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), label_smoothing=label_smoothing
    )


def evaluate(model, windows, micro_batch: int, accelerator) -> float:
    """Mean next-token loss over the fixed validation windows (split across processes).

    ``model`` is the plain module, not the compiled or data-parallel wrapper: a compiled model
    would compile again for eval mode and again for the last, smaller batch (two more graphs per
    run, ~5-7 s each on CPU even for a tiny model). The training precision is applied here."""
    import torch

    mine = windows[accelerator.process_index :: accelerator.num_processes]  # (n_rank, T + 1)
    total = torch.zeros(2, device=accelerator.device, dtype=torch.float64)
    model.eval()
    with torch.no_grad(), accelerator.autocast():
        for i in range(0, len(mine), micro_batch):
            batch = torch.from_numpy(mine[i : i + micro_batch]).to(accelerator.device)
            _, loss = model(batch[:, :-1], batch[:, 1:], return_logits=False)
            total[0] += loss.double() * len(batch)
            total[1] += len(batch)
    model.train()
    total = accelerator.reduce(total, "sum")
    return (total[0] / total[1]).item()


# ---------------------------------------------------------------- interrupts
class Interrupted(KeyboardInterrupt):
    """SIGTERM (what SLURM and other schedulers send) or Ctrl-C stopped the run: handled like
    Ctrl-C, i.e. the MLflow run is marked KILLED with `failure_reason` = `reason`. During the
    training loop the signal is deferred to the next step boundary, where `last.pt` is saved
    first (`step` is then that checkpoint's step; None when it came before or after the loop)."""

    def __init__(self, signame: str, step: int | None = None):
        self.signame, self.step = signame, step
        saved = f" at step {step}; checkpoint saved, rerun to resume" if step is not None else ""
        self.reason = f"interrupted by {signame}{saved}"
        super().__init__(self.reason)


class _Signals:
    """SIGTERM and SIGINT handlers for one `train()` call (main thread only; the previous
    handlers come back when it returns). Outside `deferred` mode a signal raises `Interrupted`
    at once; inside it (opening the MLflow run, the training loop) the first one is recorded
    for the loop to act on at a step boundary, and a second one raises at once."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)  # USR1: SLURM's time-limit warning

    def __init__(self):
        self.received: signal.Signals | None = None
        self.deferred = False

    def _handle(self, signum, frame) -> None:
        sig = signal.Signals(signum)
        if self.deferred and self.received is None:
            self.received = sig
            log.warning("%s received: stopping at the next step with a checkpoint", sig.name)
            return
        raise Interrupted(sig.name)

    def install(self, stack: contextlib.ExitStack) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in self.SIGNALS:
            previous = signal.signal(sig, self._handle)  # None: not set from Python
            stack.callback(signal.signal, sig, signal.SIG_DFL if previous is None else previous)

    @property
    def name(self) -> str | None:
        return self.received.name if self.received is not None else None


# ---------------------------------------------------------------- run identity / resume
def _decide(spec: RunSpec, uri: str, experiment_id: str, rdir: Path) -> dict[str, Any]:
    """Main process: reuse a FINISHED run, resume a checkpoint, or start fresh (and in which
    MLflow run). `train.resume`: auto = resume when a checkpoint of this run exists; true =
    require one; false = start over in a new MLflow run.

    The run of the key in this experiment (`tracking.find_run_by_key`) decides. The folder
    `<runs_dir>/<run_key>/` is shared by every experiment (and store) that trains the key, so
    `last.pt` is resumed only when it records that MLflow run's id: another experiment's final
    checkpoint is not this run's progress, and resuming it would train nothing."""
    existing = trk.find_run_by_key(uri, experiment_id, spec.run_key)
    last = rdir / ckpt.LAST
    resume = spec.train.resume
    if existing is not None and existing.info.status == "FINISHED" and resume is not False:
        return {"action": "reuse", "run_id": existing.info.run_id}
    if resume is False:
        last.unlink(missing_ok=True)
        return {"action": "fresh", "run_id": None}
    run_id = existing.info.run_id if existing is not None else None
    try:
        owner = ckpt.owner(last) if last.exists() else None
    except Exception as e:  # truncated, empty or not a checkpoint
        raise _unreadable(uri, run_id, last, e) from None
    mine = owner is not None and owner == run_id
    if resume is True and not last.exists():
        raise ConfigError(f"train.resume=true: no checkpoint at {last}")
    if resume is True and not mine:
        raise ConfigError(
            f"train.resume=true: {last} was written by MLflow run {owner}, not by run key "
            f"{spec.run_key}'s run in experiment '{spec.tracking.experiment}' "
            f"({run_id or 'none yet'})"
        )
    if last.exists() and not mine:
        log.warning(
            "%s was written by MLflow run %s, not by run key %s's run in experiment '%s': "
            "training from step 0",
            last, owner, spec.run_key, spec.tracking.experiment,
        )  # fmt: skip
    return {"action": "resume" if mine else "fresh", "run_id": run_id}


def _unreadable(uri: str, run_id: str | None, path: Path, e: Exception) -> ConfigError:
    """A `last.pt` that cannot be read (a truncated copy, a full disk): the error to raise, one
    line naming the file; the run it would have resumed is marked FAILED with that reason (a
    rerun fails the same way until the file is replaced or `train.resume=false` is given)."""
    detail = (str(e).strip().splitlines() or [""])[0][:200]
    reason = (
        f"{path}: unreadable checkpoint ({type(e).__name__}: {detail}); rerun with "
        "train.resume=false to start over"
    )
    if run_id is not None:
        trk.set_tags(uri, run_id, {"failure_reason": reason})
        trk.client(uri).set_terminated(run_id, "FAILED")
    return ConfigError(reason)


def _reused_result(spec: RunSpec, uri: str, run_id: str, rdir: Path) -> TrainResult:
    m = trk.client(uri).get_run(run_id).data.metrics
    log.info("run key %s already FINISHED as MLflow run %s: nothing to do", spec.run_key, run_id)
    return TrainResult(
        run_key=spec.run_key,
        run_id=run_id,
        status="FINISHED",
        final_val_loss=m.get("final_val_loss"),
        final_train_loss=m.get("final_train_loss"),
        tokens_consumed=int(m.get("tokens_consumed", 0)),
        steps=int(m.get("tokens_consumed", 0)) // spec.train.batch_tokens,
        wall_time_s=m.get("wall_time_s", 0.0),
        run_dir=str(rdir),
        reused=True,
    )


def _broadcast(obj: Any, accelerator) -> Any:
    if accelerator.num_processes == 1:
        return obj
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([obj])[0]


def _derived_params(spec: RunSpec, model_cfg, geo: Geometry) -> dict[str, Any]:
    from models import count_params, flops_per_token

    pc = count_params(model_cfg)
    fl = flops_per_token(model_cfg, spec.train.seq_len)
    trained = geo.total_steps * spec.train.batch_tokens  # whole batches: >= train.tokens
    return {
        "n_params": pc.total,
        "n_params_nonembed": pc.non_embedding,
        "n_params_embed": pc.embedding,
        "tokens": spec.train.tokens,  # the budget asked for
        "tokens_trained": trained,  # D: what the run trains (a branch: its stable prefix too)
        "flops_6nd": 6 * pc.non_embedding * trained,
        "flops_exact": fl.exact * trained,
        "flops_per_token_exact": fl.exact,
        "seq_len": spec.train.seq_len,
        "batch_tokens": spec.train.batch_tokens,
        "steps": geo.total_steps,
        "micro_batch": geo.micro_batch,
        "grad_accum": geo.grad_accum,
        "world_size": geo.world_size,
    }


# ---------------------------------------------------------------- the run
def train(cfg: Any) -> TrainResult:
    """Train one model from a composed config (Hydra DictConfig or a plain nested dict).

    Returns a TrainResult; a diverged run returns status FAILED (the CLI exits non-zero).
    Raises ConfigError / TrackingUnavailable before any work for bad input, and `Interrupted`
    (a KeyboardInterrupt) on SIGTERM or Ctrl-C, after marking the MLflow run KILLED.
    """
    signals = _Signals()
    with contextlib.ExitStack() as stack:
        signals.install(stack)
        result = _train(cfg, stack, signals)
    if signals.received is not None:  # came after the loop: the run finished; pass it on
        signal.raise_signal(signals.received)
    return result


def _train(cfg: Any, stack: contextlib.ExitStack, signals: _Signals) -> TrainResult:
    import torch
    from accelerate import Accelerator, PartialState

    t_start = time.perf_counter()
    spec = resolve_config(cfg)
    tr = spec.train
    # Without CUDA, Accelerate only forms a multi-process (gloo) group when told it runs on CPU;
    # otherwise every rank of `accelerate launch`/torchrun would train alone.
    on_cpu = not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1
    world = PartialState(cpu=on_cpu).num_processes
    if world > 1:  # whatever way this process exits, the group goes first (once)
        atexit.unregister(end_process_group)
        atexit.register(end_process_group)
    geo = batch_geometry(tr, world)
    mixed_precision = _mixed_precision(tr, torch.cuda.is_available())
    if tr.init_from and not Path(tr.init_from).is_file():
        raise ConfigError(f"train.init_from: {tr.init_from} is not a checkpoint file")
    runs_dir = resolve_dir(spec.paths.runs_dir, default_runs_dir())
    cache_dir = resolve_dir(spec.paths.cache_dir, default_cache_dir())
    rdir = ckpt.run_dir(runs_dir, spec.run_key)

    _reset_accelerate_state()
    accelerator = Accelerator(
        cpu=on_cpu, mixed_precision=mixed_precision, gradient_accumulation_steps=geo.grad_accum
    )
    main = accelerator.is_main_process
    if use_keep_host_memory(tr.keep_host_memory, accelerator.device):
        hostmem.keep_freed_memory()  # False off glibc: nothing to tune there

    # Tracking first: an unreachable server fails here, in seconds, before any data work.
    uri, decision = trk.resolve_tracking_uri(spec.tracking.uri), None
    if main:
        experiment_id = trk.ensure_experiment(uri, spec.tracking.experiment)
        # One process per run key at a time (held until train returns); a second one waits.
        stack.enter_context(ckpt.run_lock(rdir, spec.run_key))
        for tmp in ckpt.remove_stale_temporaries(rdir):
            log.info("removed %s (left by an interrupted write)", tmp)
        decision = _decide(spec, uri, experiment_id, rdir)
    decision = _broadcast(decision, accelerator)
    if decision["action"] == "reuse":
        return (
            _reused_result(spec, uri, decision["run_id"], rdir)
            if main
            else TrainResult(spec.run_key, None, "FINISHED", run_dir=str(rdir), reused=True)
        )

    from sweeps.data import BatchSampler, prepare_data, val_windows

    with accelerator.main_process_first():
        data = prepare_data(spec.data, cache_dir)
    model_cfg = spec.model
    if data.vocab_size != model_cfg.vocab_size:  # BPE may stop short of data.vocab_size
        model_cfg = build_model_config(
            {**model_cfg.to_dict(), "size": None}, data.vocab_size, tr.seq_len
        )
    windows = val_windows(data.val, tr.seq_len, spec.data.eval_tokens)  # (n, T + 1)

    from models import build_model, flops_per_token

    torch.manual_seed(tr.seed)
    raw_model = build_model(model_cfg).to(accelerator.device)
    optimizer = _make_optimizer(raw_model, tr)
    sampler = BatchSampler(
        data.train, tr.seq_len, geo.micro_batch, tr.seed, accelerator.process_index, world
    )

    # Where to start: a resume checkpoint of this run, a branch point of another, or step 0.
    from sweeps.schedules import Schedule, warmup_steps, wsd_decay_start

    state, start_step, branched_from, branch_step = None, 0, None, None
    warmup = warmup_steps(tr.warmup, geo.total_steps)
    elapsed_before = 0.0
    if decision["action"] == "resume":
        try:
            state = ckpt.load_checkpoint(rdir / ckpt.LAST)
        except Exception as e:  # readable enough to name its run, not to load
            run_of_file = decision["run_id"] if main else None
            raise _unreadable(uri, run_of_file, rdir / ckpt.LAST, e) from None
        branched_from, branch_step = state.get("branched_from"), state.get("branch_step")
        elapsed_before = state["wall_time_s"]
    elif tr.init_from:
        state = ckpt.load_checkpoint(Path(tr.init_from))
        branched_from, branch_step = state["run_key"], state["step"]
    if state is not None:
        if state["batch_tokens"] != tr.batch_tokens or state["seq_len"] != tr.seq_len:
            raise ConfigError(
                f"train.batch_tokens/seq_len must match the checkpoint "
                f"({state['batch_tokens']}/{state['seq_len']}) to continue from it"
            )
        try:
            raw_model.load_state_dict(state["model"])
        except RuntimeError as e:
            raise ConfigError(f"model: does not match the checkpoint's model ({e})") from None
        optimizer.load_state_dict(state["optimizer"])
        sampler.load_state_dict(state["sampler"])
        torch.set_rng_state(state["torch_rng"])
        if torch.cuda.is_available() and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        start_step, warmup = state["step"], state["warmup_steps"]  # branches keep the warmup
        if start_step > geo.total_steps:
            raise ConfigError(
                f"train.tokens={tr.tokens}: the checkpoint is already at {state['tokens']} tokens"
            )
    decay_start = None
    if tr.schedule == "wsd":
        decay_start = wsd_decay_start(
            geo.total_steps, tr.decay_fraction, tr.batch_tokens, tr.decay_start_tokens, branch_step
        )
    schedule = Schedule(tr.schedule, geo.total_steps, warmup, tr.min_lr_ratio, decay_start)

    model = raw_model
    if use_compile(tr.compile, accelerator.device):
        # A sweep trains many shapes in one process: each compiles once (a shape seen before
        # reuses its code, a new model object of that shape too), but past Dynamo's
        # recompile_limit (8) new shapes would silently run eager.
        import torch._dynamo

        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
        model = torch.compile(raw_model)
    model, optimizer = accelerator.prepare(model, optimizer)
    step_opt, clip = _step_and_clip(accelerator, optimizer)
    params = list(model.parameters())

    fl_token = flops_per_token(model_cfg, tr.seq_len).exact
    epochs_planned = geo.total_steps * tr.batch_tokens / len(data.train)
    if epochs_planned > 1 and main:
        warnings.warn(
            f"train.tokens={tr.tokens} is {epochs_planned:.2f} epochs of the {len(data.train)}-token "
            "training split: repeated data bends scaling curves",
            stacklevel=2,
        )

    from sweeps.monitor import Progress, measured_peak_flops

    peak = tr.peak_flops or measured_peak_flops(accelerator.device)
    progress = Progress(
        tr.progress if main else "none",
        geo.total_steps,
        start_step,
        f"{model_cfg.arch} {spec.run_key} | N={raw_model_params(raw_model)} | {geo.total_steps} steps",
    )
    save_steps = {math.ceil(t / tr.batch_tokens): t for t in tr.save_at_tokens}

    def save(path: Path, step: int, train_time: float, pending=()) -> None:
        if not main:
            return
        state = {
            "model": raw_model.state_dict(),
            "optimizer": optimizer.optimizer.state_dict(),
            "sampler": sampler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "step": step,
            "tokens": step * tr.batch_tokens,
            "batch_tokens": tr.batch_tokens,
            "seq_len": tr.seq_len,
            "warmup_steps": warmup,
            "run_key": spec.run_key,
            "branched_from": branched_from,
            "branch_step": branch_step,
            "mlflow_run_id": run_id,  # whose progress this is: only that run resumes it
            "mlflow_experiment_id": experiment_id,
            "wall_time_s": elapsed_before + train_time,
            # an interrupt's checkpoint falls between log steps: the losses of its window
            "pending_losses": [float(v) for v in pending],
        }
        ckpt.save_checkpoint(path, state)

    pending, last_train_loss, val_loss = [], float("nan"), None
    if decision["action"] == "resume":
        pending = [
            torch.tensor(v, device=accelerator.device) for v in state.get("pending_losses", [])
        ]

    # MLflow run: created or reopened by the main process only. From here a SIGTERM or Ctrl-C
    # is deferred to the loop's next step, which checkpoints and marks the run KILLED.
    signals.deferred = True
    run_id, metrics = decision["run_id"], None
    if main:
        run_id = _open_run(
            spec, uri, experiment_id, run_id, model_cfg, geo, data, branched_from, rdir
        )
        # A resumed run re-trains the steps between its checkpoint and the interruption: the
        # points the interrupted process logged for them are kept, not logged a second time.
        metrics = trk.MetricBuffer(
            uri, run_id, logged=trk.logged_steps(uri, run_id) if decision["action"] == "resume"
            else None
        )  # fmt: skip
        if decision["action"] == "resume":
            log.info("resuming run %s from step %d", spec.run_key, start_step)
    run_id = _broadcast(run_id, accelerator)

    t_run = time.perf_counter()
    t_log, step_log, overhead = t_run, start_step, 0.0
    try:
        for step in range(start_step, geo.total_steps):
            if world == 1 and signals.received is not None:  # ranks > 1: at boundaries below
                save(rdir / ckpt.LAST, step, time.perf_counter() - t_run, pending)
                raise Interrupted(signals.name, step)
            lr = tr.lr * schedule.multiplier(step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            step_loss = torch.zeros((), device=accelerator.device)
            for _ in range(geo.grad_accum):
                x, y = sampler.next()  # (B, T) each
                x = x.to(accelerator.device, non_blocking=True)
                y = y.to(accelerator.device, non_blocking=True)
                with accelerator.accumulate(model):
                    loss = _loss(model, x, y, tr.label_smoothing)
                    accelerator.backward(loss)
                    if accelerator.sync_gradients:  # the last micro-batch of the step
                        if tr.grad_clip > 0:
                            clip(params, tr.grad_clip)
                        step_opt.step()
                        step_opt.zero_grad(set_to_none=True)
                step_loss += loss.detach().float()
            pending.append(step_loss / geo.grad_accum)

            done, tokens = step + 1, (step + 1) * tr.batch_tokens
            is_log = done % tr.log_every == 0 or done == geo.total_steps
            is_eval = done % tr.eval_every == 0 and done != geo.total_steps
            is_ckpt = tr.checkpoint_every and done % tr.checkpoint_every == 0
            if not (is_log or is_eval or is_ckpt or done in save_steps):
                continue
            # One host sync per boundary: the losses since the last one, averaged over ranks
            # (and, with several ranks, whether any of them was told to stop).
            stop = torch.tensor(float(signals.received is not None), device=accelerator.device)
            losses = accelerator.reduce(torch.stack([*pending, stop]), "mean").tolist()
            stop_all, pending = losses.pop() > 0, []
            bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
            if bad is not None:
                k = done - len(losses) + bad + 1
                reason = f"diverged at step {k}"
                if main:  # at its own step (tokens seen after step k), with that step's lr
                    lr_k = tr.lr * schedule.multiplier(k - 1)
                    metrics.add(k * tr.batch_tokens, train_loss=losses[bad], lr=lr_k)
                return _fail(spec, uri, run_id, metrics, progress, rdir, reason, k, t_start)
            last_train_loss = sum(losses) / len(losses)
            if is_log:
                now = time.perf_counter()
                tps = (done - step_log) * tr.batch_tokens / max(now - t_log - overhead, 1e-9)
                stats = {"train_loss": last_train_loss, "lr": lr, "tokens_per_sec": tps}
                stats["mfu"] = fl_token * tps / (peak * world)
                if main:
                    metrics.add(tokens, **stats)
                    metrics.flush()
                progress.update(done, tokens, stats)
                t_log, step_log, overhead = now, done, 0.0
            t0 = time.perf_counter()
            if is_eval:
                val_loss = evaluate(raw_model, windows, geo.micro_batch, accelerator)
                if main:
                    metrics.add(tokens, val_loss=val_loss)
            if done in save_steps:
                save(rdir / ckpt.branch_name(save_steps[done]), done, time.perf_counter() - t_run)
            if is_ckpt and done != geo.total_steps:
                save(rdir / ckpt.LAST, done, time.perf_counter() - t_run)
            overhead += time.perf_counter() - t0
            if world > 1 and stop_all and done != geo.total_steps:
                save(rdir / ckpt.LAST, done, time.perf_counter() - t_run)
                raise Interrupted(signals.name or "a signal to another rank", done)

        val_loss = evaluate(raw_model, windows, geo.micro_batch, accelerator)
        wall = elapsed_before + time.perf_counter() - t_run
        save(rdir / ckpt.LAST, geo.total_steps, time.perf_counter() - t_run)
        consumed = geo.total_steps * tr.batch_tokens
        result = TrainResult(
            run_key=spec.run_key,
            run_id=run_id,
            status="FINISHED",
            final_val_loss=val_loss,
            final_train_loss=last_train_loss,
            tokens_consumed=consumed,
            steps=geo.total_steps,
            wall_time_s=wall,
            run_dir=str(rdir),
        )
        if main:
            final = {
                "final_val_loss": val_loss,
                "final_train_loss": last_train_loss,
                "wall_time_s": wall,
                "tokens_consumed": consumed,
                "epochs": consumed / len(data.train),
            }
            metrics.add(consumed, val_loss=val_loss, **final)
            metrics.flush()
            if tr.save_final_checkpoint:
                trk.client(uri).log_artifact(run_id, str(rdir / ckpt.LAST), "checkpoint")
            trk.client(uri).set_terminated(run_id, "FINISHED")
        progress.close()
        progress.message(
            f"done: final_val_loss {val_loss:.4f} | {consumed} tokens | {wall:.1f}s | run {run_id}"
        )
        return result
    except BaseException as e:
        signals.deferred = False  # a second signal now interrupts the clean-up
        progress.close()
        if main:
            metrics.flush()
            status = "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED"
            reason = e.reason if isinstance(e, Interrupted) else f"{type(e).__name__}: {e}"
            trk.set_tags(uri, run_id, {"failure_reason": reason[:1000]})
            trk.client(uri).set_terminated(run_id, status)
        if isinstance(e, Interrupted) and main:
            log.warning("run %s %s (MLflow run %s KILLED)", spec.run_key, e.reason, run_id)
        raise


def raw_model_params(model) -> str:
    from sweeps.monitor import human

    return human(sum(p.numel() for p in model.parameters()))


def _open_run(spec, uri, experiment_id, run_id, model_cfg, geo, data, branched_from, rdir) -> str:
    """Create the MLflow run (or reopen the one found by run key) and log params, tags and the
    resolved config."""
    c = trk.client(uri)
    tags = {
        "arch": model_cfg.arch,
        "run_key": spec.run_key,
        "data_fingerprint": data.fingerprint,
        "data_source": spec.data_source,
        "git_commit": trk.git_commit(),
        "branched_from": branched_from,
        **spec.tracking.tags,
    }
    if spec.tracking.parent_run_id:
        tags["mlflow.parentRunId"] = spec.tracking.parent_run_id
    if run_id is None:
        name = spec.tracking.run_name or f"{model_cfg.arch}-{spec.run_key[:8]}"
        run_id = c.create_run(experiment_id, run_name=name).info.run_id
    else:
        c.update_run(run_id, status="RUNNING")
    trk.set_tags(uri, run_id, tags)
    resolved = spec.to_dict()
    resolved["model"].update(model_cfg.to_dict())
    params = trk.flatten(resolved)
    params.update(_derived_params(spec, model_cfg, geo))
    params["data.cache"] = str(data.cache_dir)
    trk.log_params(uri, run_id, params)

    import yaml

    text = yaml.safe_dump(resolved, sort_keys=False)
    ckpt.atomic_write(rdir / "config.yaml", lambda f: f.write(text.encode()))
    c.log_artifact(run_id, str(rdir / "config.yaml"))
    return run_id


def _fail(spec, uri, run_id, metrics, progress, rdir, reason, step, t_start) -> TrainResult:
    """A non-finite loss: keep everything logged so far, mark the MLflow run FAILED."""
    progress.close()
    log.error("run %s %s", spec.run_key, reason)
    if metrics is not None:
        metrics.flush()
        trk.set_tags(uri, run_id, {"failure_reason": reason})
        trk.client(uri).set_terminated(run_id, "FAILED")
    return TrainResult(
        run_key=spec.run_key,
        run_id=run_id,
        status="FAILED",
        steps=step,
        tokens_consumed=step * spec.train.batch_tokens,
        wall_time_s=time.perf_counter() - t_start,
        failure_reason=reason,
        run_dir=str(rdir),
    )


# ---------------------------------------------------------------- CLI
def _main(cfg) -> None:
    from sweeps.tracking import TrackingUnavailable

    try:
        result = train(cfg)
    except (ConfigError, TrackingUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as e:  # the MLflow run is KILLED; the shell's code for that signal
        print(f"error: {e.reason}", file=sys.stderr)
        sys.exit(128 + getattr(signal, e.signame, signal.SIGTERM))
    wait_for_all_ranks()  # every rank returned its result (FAILED ones too)
    if result.status != "FINISHED":
        print(f"error: run {result.run_key} {result.failure_reason}", file=sys.stderr)
        sys.exit(1)
    print(
        "result: " + " ".join(f"{k}={v}" for k, v in asdict(result).items() if v not in (None, "")),
        flush=True,
    )


def main() -> None:
    import hydra

    hydra.main(config_path="../conf", config_name="config", version_base="1.3")(_main)()


if __name__ == "__main__":
    main()
