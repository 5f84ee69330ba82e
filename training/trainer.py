"""The training loop of one run: `Trainer` holds the run's state and `run()` drives it.

    setup()     config -> processes -> tracking server -> data -> MLflow store, run-key lock and
                the reuse/resume decision -> model, optimizer, sampler, `TrainState` ->
                the MLflow run (docs/contracts.md, "Order of a run")
    step()      one optimizer step at the scheduled lr
    boundary()  after a step that ends a log window, an eval or checkpoint period or a branch
                point: one host sync of the window's losses, then log, evaluate, checkpoint
    finish()    the final evaluation and checkpoint, the MLflow run FINISHED
    fail()      any exception in the loop: the run KILLED (an interrupt) or FAILED

What a resume needs is in `self.state` (`training.train_state.TrainState`); the model,
optimizer and sampler hold the rest, and `save()` checkpoints them together. A diverged run
(a non-finite loss) ends FAILED with its result, not an exception.
What `finish()` and `fail()` record, a reused run's result and the store-unwritable line are
`training.run_end`; the thread count, hardware params and torch.compile, `training.hardware`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import time
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, PartialState

from models import build_model
from models.moe import moe_layers, routing_stats
from training import (
    checkpoint,
    hostmem,
    metric_log,
    objectives,
    parallel,
    run_end,
    run_record,
    tracking,
)
from training.config import ConfigError
from training.data import BatchSampler, Prefetcher, prepare_data, val_pairs, val_windows
from training.hardware import compiled, hardware_params, use_recorded_threads
from training.monitor import Progress, format_si, measured_peak_flops
from training.ownership import Ownership
from training.paths import default_cache_dir, default_runs_dir, resolve_dir
from training.ranks import broadcast, end_process_group, reset_accelerate_state
from training.result import TrainResult
from training.schedules import Schedule, warmup_steps, wsd_decay_start
from training.signals import Interrupted, Signals
from training.spec import build_model_config, preflight, resolve_config
from training.step import (
    DtypeProbe,
    Update,
    auto_micro_batch,
    batch_geometry,
    device_memory_bytes,
    loss,
    make_optimizer,
    mixed_precision,
    optimizer_step,
    resolved_precision,
    set_lr,
    step_and_clip,
    use_compile,
    use_keep_host_memory,
)
from training.train_state import TrainState, capture, restore

log = logging.getLogger("training.train")


def every_n_steps(step: int, n: int) -> bool:
    """Whether `step` optimizer steps done end a period of `n` steps (never for n = 0)."""
    return bool(n) and step % n == 0


@dataclass(frozen=True)
class Boundary:
    """The work due after a step."""

    log: bool
    eval: bool
    checkpoint: bool  # last.pt
    branch_tokens: int | None  # the `train.save_at_tokens` checkpoint due, if any

    def any(self) -> bool:
        return self.log or self.eval or self.checkpoint or self.branch_tokens is not None


class Trainer:
    """One training run, from a composed config to its TrainResult (see the module docstring).
    `signals` defers SIGTERM/SIGINT/SIGUSR1 to the next step once the MLflow run is open;
    `stack` holds what the run gives back when `train()` returns (the run-key lock, the
    thread count)."""

    # One optimizer step (training.step.optimizer_step's arguments and result): a class
    # attribute so that benchmarks/loop_overhead.py can time the loop around a step that does
    # nothing; training never replaces it.
    take_step = staticmethod(optimizer_step)

    def __init__(self, cfg: Any, signals: Signals, stack: contextlib.ExitStack):
        self.t_start = time.perf_counter()
        self.signals, self.stack = signals, stack
        self.spec = resolve_config(cfg)
        self.client = self.experiment_id = self.metrics = self.system = None  # main process only
        self.ended: str | None = None  # the status `fail` could record on a full store
        self.lr = 0.0

    @property
    def run_id(self) -> str | None:
        return self.state.mlflow_run_id

    def run(self) -> TrainResult:
        """`setup`, then `step` and `boundary` to the last step, then `finish`; an exception
        in the loop goes through `fail` and is raised again. A store that refuses a write (a
        full or read-only disk), here or in `setup`, is raised as `StoreUnwritable`: one line
        saying so and what became of the run."""
        try:
            return self._run()
        except Exception as e:
            mine = (OSError, ConfigError, tracking.TrackingUnavailable)  # each says its own line
            if isinstance(e, mine) or (why := tracking.store_write_error(e)) is None:
                raise  # an OSError is the runs folder's (checkpoint.atomic_write names it)
            raise self._store_unwritable(why, e) from e

    def _run(self) -> TrainResult:
        if (reused := self.setup()) is not None:
            return reused
        try:
            while self.state.step < self.geo.total_steps:
                self.step()
                if (diverged := self.boundary()) is not None:
                    return diverged
            return self.finish()
        except BaseException as e:
            self.fail(e)
            raise

    def _store_unwritable(self, why: str, e: Exception) -> tracking.StoreUnwritable:
        state = getattr(self, "state", None)
        run_id = state.mlflow_run_id if state is not None else None
        if run_id is None and getattr(e, "run_id", None):  # run_record.open_run's
            run_id, self.ended = e.run_id, e.run_status
        step = state.step if state is not None and state.mlflow_run_id else None
        return run_end.store_unwritable(self.spec, run_id, self.ended, step, why)

    # ------------------------------------------------------------ setup
    def setup(self) -> TrainResult | None:
        """Everything before the first step. A FINISHED run of the key is returned as it is."""
        self._start_processes()
        decision = self._decide()
        if decision["action"] == "reuse":
            run_id = decision["run_id"]
            return run_end.reused(self.client, self.spec, self.rdir, run_id, self.main)
        use_recorded_threads(decision.get("torch_threads"), self.spec.run_key, self.stack)
        self._build(decision)
        self._start_monitor()
        self._open_run(decision)
        return None

    def _start_processes(self) -> None:
        """Batch geometry, directories, the Accelerator (fails on bad input before any work)."""
        tr = self.spec.train
        # Without CUDA, Accelerate only forms a multi-process (gloo) group when told it runs on
        # CPU; otherwise every rank of `accelerate launch`/torchrun would train alone.
        on_cpu = not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1
        self.world = PartialState(cpu=on_cpu).num_processes
        if self.world > 1:  # whatever way this process exits, the group goes first (once)
            atexit.unregister(end_process_group)
            atexit.register(end_process_group)
        cuda = torch.cuda.is_available()
        micro = auto_micro_batch(tr, self.spec.model, self.world, cuda)
        self.geo = batch_geometry(tr, self.world, micro)
        precision = mixed_precision(tr, cuda)
        # fsdp over several ranks: FSDP2's policy computes in the precision (parallel.shard);
        # Accelerate's autocast would cast the same forward a second time
        self.sharded = tr.parallel == "fsdp" and self.world > 1
        self.precision = resolved_precision(tr, cuda)
        # what the disk, the store and the memory hold: before anything is written
        device_bytes = device_memory_bytes(tr) if cuda else None
        preflight(self.spec, self.geo.micro_batch, self.precision, device_bytes, self.world)
        runs_dir = resolve_dir(self.spec.paths.runs_dir, default_runs_dir())
        self.cache_dir = resolve_dir(self.spec.paths.cache_dir, default_cache_dir())
        self.rdir = checkpoint.run_dir(runs_dir, self.spec.run_key)

        reset_accelerate_state()
        self.accelerator = Accelerator(
            cpu=on_cpu,
            mixed_precision="no" if self.sharded else precision,
            gradient_accumulation_steps=self.geo.grad_accum,
        )
        self.main = self.accelerator.is_main_process
        if use_keep_host_memory(tr.keep_host_memory, self.accelerator.device):
            hostmem.keep_freed_memory()  # False off glibc: nothing to tune there

    def _decide(self) -> dict:
        """Tracking server, data, then (main process) the store, the run-key lock and what to
        do with the key; every rank gets the decision."""
        spec = self.spec
        # An unreachable server fails here, in seconds, before any data work; then the data
        # (its errors, found only once tokenized, come before the store exists), the store.
        uri = tracking.resolve_tracking_uri(spec.tracking.uri)
        if self.main and tracking.sqlite_path(uri) is None:
            tracking.check_reachable(uri)
        self._load_data()
        decision = None
        if self.main:  # the run's one MLflow client; the other processes record nothing
            self.experiment_id = tracking.ensure_experiment(uri, spec.tracking.experiment)
            self.client = tracking.client(uri, spec.tracking.timeout_s)
            # One process per run key at a time (held until train returns); a second one waits.
            self.stack.enter_context(checkpoint.run_lock(self.rdir, spec.run_key))
            for tmp in checkpoint.remove_stale_temporaries(self.rdir):
                log.info("removed %s (left by an interrupted write)", tmp)
            for folder in checkpoint.remove_unreferenced_shards(self.rdir):
                log.info("removed %s (shards no checkpoint names)", folder)
            # ... and per experiment of the store, whatever the runs folder (released at return)
            self.owner = Ownership(
                self.client, self.experiment_id, spec.tracking.experiment, spec.run_key
            )
            self.stack.callback(self.owner.release)
            decision = run_record.decide(
                self.client, spec, self.experiment_id, self.rdir, self.owner
            )
        return broadcast(decision, self.accelerator)

    def _load_data(self) -> None:
        """The tokenized data, the model config for its vocabulary, the validation windows."""
        spec, seq_len = self.spec, self.spec.train.seq_len
        with self.accelerator.main_process_first():
            self.data = prepare_data(spec.data, self.cache_dir)
        self.model_cfg = spec.model
        if self.data.vocab_size != self.model_cfg.vocab_size:  # BPE may stop short of the size
            self.model_cfg = build_model_config(
                {**self.model_cfg.to_dict(), "size": None}, self.data.vocab_size, seq_len, spec.data
            )
        if spec.data.kind == "pairs":  # the first pairs of the val split
            self.windows = val_pairs(self.data.val, seq_len, spec.data.eval_tokens)
        else:  # (n, T + 1)
            self.windows = val_windows(self.data.val, seq_len, spec.data.eval_tokens)

    def _build(self, decision: dict) -> None:
        """Objective, model, optimizer, sampler and where they start; then Accelerate's."""
        spec, tr, device = self.spec, self.spec.train, self.accelerator.device
        self.objective = objectives.build(
            self.model_cfg, self.data.vocab_size, tr.seq_len, spec.data
        )
        self.windows = self.objective.val_batches(self.windows)  # the family's fixed inputs
        torch.manual_seed(tr.seed)
        self.raw_model = build_model(self.model_cfg).to(device)
        # activation checkpointing, FSDP2 sharding: before the optimizer sees the parameters
        parallel.apply(self.raw_model, tr, self.precision, self.world)
        optimizer = make_optimizer(self.raw_model, tr)
        rank = self.accelerator.process_index
        if spec.data.kind == "pairs":
            self.sampler = self.objective.sampler(
                self.data.train, self.geo.micro_batch, tr.seed, rank, self.world
            )
        else:  # the decoder's wrap is the sampler itself
            windows = BatchSampler(
                self.data.train, tr.seq_len, self.geo.micro_batch, tr.seed, rank, self.world
            )
            self.sampler = self.objective.wrap(windows, tr.seed)  # masks: global index
        # the next batches made while a step runs, pinned for non-blocking copies to a GPU
        self.sampler = Prefetcher(self.sampler, tr.prefetch, pin=device.type == "cuda")
        self.stack.callback(self.sampler.close)
        self.state = self._starting_point(decision, optimizer)
        self.state.pending_losses = [
            torch.tensor(v, device=device) for v in self.state.pending_losses
        ]
        self.schedule = self._schedule()

        use = use_compile(tr.compile, device)
        self.hardware = hardware_params(device, self.precision, use)
        self.hardware["hardware.parallel"] = tr.parallel if self.world > 1 else "none"
        model = compiled(self.raw_model) if use else self.raw_model
        if self.sharded:  # FSDP2 reduces the gradients itself: not wrapped again in DDP
            self.model, self.optimizer = model, self.accelerator.prepare(optimizer)
        else:
            self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        opt, clip = step_and_clip(self.accelerator, self.optimizer)
        self.update = Update(
            opt, clip, list(self.model.parameters()), tr.grad_clip, moe_layers(self.raw_model)
        )
        self.probe = None if use else DtypeProbe(self.raw_model)  # hooks would recompile
        if self.model_cfg.family == "decoder":
            self.micro_loss = partial(loss, label_smoothing=tr.label_smoothing)
        else:
            self.micro_loss = self.objective.loss

    def _starting_point(self, decision: dict, optimizer) -> TrainState:
        """Step 0, this run's `last.pt` (a resume) or another run's branch point
        (`train.init_from`); a checkpoint is restored into model, optimizer and sampler."""
        tr, last = self.spec.train, self.rdir / checkpoint.LAST
        state = TrainState(self.spec.run_key, warmup_steps(tr.warmup, self.geo.total_steps))
        state.mlflow_experiment_id = self.experiment_id
        if decision["action"] == "resume":
            try:
                saved = checkpoint.load_checkpoint(last)
            except Exception as e:  # readable enough to name its run, not to load
                run_of_file = decision["run_id"] if self.client is not None else None
                raise run_record.unreadable(self.client, run_of_file, last, e) from None
            state.branched_from, state.branch_step = (
                saved.get("branched_from"),
                saved.get("branch_step"),
            )
            state.wall_time_s = saved["wall_time_s"]
            state.last_train_loss = saved.get("last_train_loss", math.nan)
            state.pending_losses = list(saved.get("pending_losses", []))
        elif tr.init_from:
            saved = checkpoint.load_checkpoint(Path(tr.init_from))
            state.branched_from, state.branch_step = saved["run_key"], saved["step"]
        else:
            return state
        from_file = last if decision["action"] == "resume" else Path(tr.init_from)
        restore(saved, self.raw_model, optimizer, self.sampler, tr, from_file.parent)
        state.step, state.warmup_steps = saved["step"], saved["warmup_steps"]  # branches keep it
        if state.step > self.geo.total_steps:
            raise ConfigError(
                f"train.tokens={tr.tokens}: the checkpoint is already at {saved['tokens']} tokens"
            )
        return state

    def _schedule(self) -> Schedule:
        tr, total = self.spec.train, self.geo.total_steps
        decay_start = None
        if tr.schedule == "wsd":
            decay_start = wsd_decay_start(
                total,
                tr.decay_fraction,
                tr.batch_tokens,
                tr.decay_start_tokens,
                self.state.branch_step,
            )
        return Schedule(tr.schedule, total, self.state.warmup_steps, tr.min_lr_ratio, decay_start)

    def _start_monitor(self) -> None:
        """Throughput accounting, the epochs warning, the progress display, branch points."""
        spec, tr, total = self.spec, self.spec.train, self.geo.total_steps
        self.fl_token = self.objective.accounting(tr.batch_tokens).flops_per_token_exact
        self.train_tokens = self.data.split_tokens(self.data.train, tr.seq_len)  # pairs x seq_len
        epochs_planned = total * tr.batch_tokens / self.train_tokens
        if epochs_planned > 1 and self.main:
            warnings.warn(
                f"train.tokens={tr.tokens} is {epochs_planned:.2f} epochs of the "
                f"{self.train_tokens}-token training split: repeated data bends scaling curves",
                stacklevel=2,
            )
        self.peak = tr.peak_flops or measured_peak_flops(self.accelerator.device)
        n_params = format_si(sum(p.numel() for p in self.raw_model.parameters()))
        self.progress = Progress(
            tr.progress if self.main else "none",
            total,
            self.state.step,
            f"{self.model_cfg.arch} {spec.run_key} | N={n_params} | {total} steps",
        )
        self.save_steps = {math.ceil(t / tr.batch_tokens): t for t in tr.save_at_tokens}

    def _open_run(self, decision: dict) -> None:
        """The MLflow run, created or reopened by the main process; the loop's clocks."""
        # From here a SIGTERM or Ctrl-C is deferred to the loop's next step, which checkpoints
        # and marks the run KILLED.
        self.signals.deferred = True
        run_id = decision["run_id"]
        if self.main:
            branched_from = self.state.branched_from
            record = run_record.describe(
                self.spec, self.model_cfg, self.geo, self.data, self.objective, branched_from
            )
            reopened = run_id is not None
            record.params.update(self.hardware)  # where its tokens_per_sec was measured
            run_id = run_record.open_run(self.client, self.experiment_id, run_id, record, self.rdir)
            self.owner.started(run_id)
            self._open_metrics(run_id, reopened)
            if decision["action"] == "resume":
                log.info("resuming run %s from step %d", self.spec.run_key, self.state.step)
        self.state.mlflow_run_id = broadcast(run_id, self.accelerator)
        self.t_run = time.perf_counter()
        # throughput of the current log window, less the time spent evaluating and saving
        self.t_log, self.step_log, self.overhead = self.t_run, self.state.step, 0.0

    def _open_metrics(self, run_id: str, reopened: bool) -> None:
        """The run's metric log and system metrics. A reopened run trains again steps the
        killed process may have logged: the points the store holds are kept, every other one
        is logged (each (key, step) once)."""
        tracking_cfg = self.spec.tracking
        uri = tracking.resolve_tracking_uri(tracking_cfg.uri)
        logged = metric_log.logged_pairs(self.client, run_id) if reopened else ()
        self.metrics = metric_log.MetricLog(
            self.client,
            run_id,
            uri,
            logged,
            timeout_s=tracking_cfg.timeout_s,
            interval_s=tracking_cfg.send_interval_s,
        )
        if tracking_cfg.system_metrics:
            self.system = metric_log.start_system_metrics(uri, run_id, reopened)

    # ------------------------------------------------------------ the loop
    def step(self) -> None:
        """One optimizer step at the scheduled lr. A signal received before it (one process;
        ranks agree at boundaries) saves `last.pt` and raises `Interrupted` instead."""
        tr, state = self.spec.train, self.state
        if self.world == 1 and self.signals.received is not None:
            self.save(checkpoint.LAST)
            raise Interrupted(self.signals.name, state.step)
        self.lr = tr.lr * self.schedule.multiplier(state.step)
        set_lr(self.optimizer, self.lr)
        state.pending_losses.append(
            self.take_step(self.model, self.sampler, self.accelerator, self.update, self.micro_loss)
        )
        state.step += 1
        if self.probe is not None:
            self._log_dtypes()

    def _log_dtypes(self) -> None:
        """The dtypes the first step computed in (`DtypeProbe`): the run's `dtypes` tag."""
        dtypes, self.probe = self.probe.result(), None
        log.debug("run %s computed in: %s", self.spec.run_key, dtypes)  # 300+ columns
        if self.main:
            tracking.set_tags(self.client, self.run_id, {"dtypes": dtypes})

    def cadence(self, done: int) -> Boundary:
        """The work due after `done` steps (the last step logs, and evaluates in `finish`)."""
        tr, last = self.spec.train, done == self.geo.total_steps
        return Boundary(
            log=every_n_steps(done, tr.log_every) or last,
            eval=every_n_steps(done, tr.eval_every) and not last,
            checkpoint=every_n_steps(done, tr.checkpoint_every),
            branch_tokens=self.save_steps.get(done),
        )

    def boundary(self) -> TrainResult | None:
        """The work due after the step just taken (`cadence`). Returns the FAILED result of a
        diverged run, else None."""
        done, total = self.state.step, self.geo.total_steps
        due = self.cadence(done)
        if not due.any():
            return None
        losses, stop_all = self._sync_losses()
        bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
        if bad is not None:
            return self._diverged(done - len(losses) + bad + 1, losses[bad])
        self.state.last_train_loss = sum(losses) / len(losses)
        tokens = done * self.spec.train.batch_tokens
        if due.log:
            self._log(done, tokens)
        t0 = time.perf_counter()
        if due.eval:
            val_loss = self.evaluate()
            if self.main:
                self.metrics.add(tokens, val_loss=val_loss)
        if due.branch_tokens is not None:
            self.save(checkpoint.branch_name(due.branch_tokens))
        if due.checkpoint and done != total:
            self.save(checkpoint.LAST)
        self.overhead += time.perf_counter() - t0
        if self.world > 1 and stop_all and done != total:
            self.save(checkpoint.LAST)
            raise Interrupted(self.signals.name or "a signal to another rank", done)
        return None

    def _sync_losses(self) -> tuple[list[float], bool]:
        """The step losses since the last boundary, averaged over ranks, and whether any rank
        was told to stop: one host sync."""
        stop = torch.tensor(
            float(self.signals.received is not None), device=self.accelerator.device
        )
        pending = torch.stack([*self.state.pending_losses, stop])
        losses = self.accelerator.reduce(pending, "mean").tolist()
        self.state.pending_losses = []
        stop_all = losses.pop() > 0
        return losses, stop_all

    def _log(self, done: int, tokens: int) -> None:
        tr, now = self.spec.train, time.perf_counter()
        tps = (done - self.step_log) * tr.batch_tokens / max(now - self.t_log - self.overhead, 1e-9)
        stats = {"train_loss": self.state.last_train_loss, "lr": self.lr, "tokens_per_sec": tps}
        stats["mfu"] = self.fl_token * tps / (self.peak * self.world)
        routing = routing_stats(self.update.moe)  # MoE: this rank's loads, aux and z losses
        if self.main:
            self.metrics.add(tokens, **stats, **routing)
            self.metrics.send()  # to the writer thread: the step does not wait for the store
        self.progress.update(done, tokens, stats)
        self.t_log, self.step_log, self.overhead = now, done, 0.0

    def evaluate(self) -> float:
        """The validation loss (the plain model: see `training.step.evaluate`)."""
        return self.objective.evaluate(
            self.raw_model, self.windows, self.geo.micro_batch, self.accelerator
        )

    def save(self, name: str) -> None:
        """Checkpoint the run as it is now to `<run dir>/<name>` (main process). Under
        `train.parallel=fsdp` every rank first writes its shards of the model and AdamW state to
        a new folder (`parallel.save_sharded`); the file `<name>`, written by the main process
        as before, names that folder and is the save's commit: a save killed before it leaves
        the previous checkpoint whole, and its folder is removed by the next one."""
        model, optimizer, train = self.raw_model, self.optimizer.optimizer, self.spec.train
        shards = None
        if train.parallel == "fsdp":
            nonce = broadcast(parallel.nonce(), self.accelerator)
            shards = checkpoint.shards_name(name, self.state.step, nonce)
            parallel.save_sharded(self.rdir / shards, model, optimizer)
        if self.main:
            self.metrics.flush()  # written while the checkpoint is; committed before its rename
            trained = time.perf_counter() - self.t_run
            state = capture(model, optimizer, self.sampler, self.state, train, trained, shards)
            checkpoint.save_checkpoint(self.rdir / name, state, self.metrics.commit)
            checkpoint.remove_replaced_shards(self.rdir, name, shards)

    # ------------------------------------------------------------ how a run ends
    def finish(self) -> TrainResult:
        """After the last step: the final evaluation and checkpoint, the run FINISHED."""
        val_loss = self.evaluate()
        wall = self.state.wall_time_s + time.perf_counter() - self.t_run
        self.save(checkpoint.LAST)
        result = TrainResult(
            run_key=self.spec.run_key,
            run_id=self.run_id,
            status="FINISHED",
            final_val_loss=val_loss,
            final_train_loss=self.state.last_train_loss,
            tokens_consumed=self.geo.total_steps * self.spec.train.batch_tokens,
            steps=self.geo.total_steps,
            wall_time_s=wall,
            run_dir=str(self.rdir),
        )
        if self.main:
            run_end.record_finished(
                self.client,
                self.metrics,
                self.system,
                result,
                self.train_tokens,
                self.rdir,
                self.spec.train.save_final_checkpoint,
            )
        self.progress.close()
        self.progress.message(
            f"done: final_val_loss {val_loss:.4f} | {result.tokens_consumed} tokens | "
            f"{wall:.1f}s | run {self.run_id}"
        )
        return result

    def _diverged(self, step: int, train_loss: float) -> TrainResult:
        """A non-finite loss at `step`: log it at its own step (tokens seen after it, with its
        lr), keep everything logged so far, mark the MLflow run FAILED."""
        tr, reason = self.spec.train, f"diverged at step {step}"
        if self.main:
            lr = tr.lr * self.schedule.multiplier(step - 1)
            self.metrics.add(step * tr.batch_tokens, train_loss=train_loss, lr=lr)
        self.progress.close()
        log.error("run %s %s", self.spec.run_key, reason)
        if self.metrics is not None:
            self.metrics.close()
            metric_log.stop_system_metrics(self.system)
            run_record.end_run(self.client, self.run_id, "FAILED", reason)
        return TrainResult(
            run_key=self.spec.run_key,
            run_id=self.run_id,
            status="FAILED",
            steps=step,
            tokens_consumed=step * tr.batch_tokens,
            wall_time_s=time.perf_counter() - self.t_start,
            failure_reason=reason,
            run_dir=str(self.rdir),
        )

    def fail(self, e: BaseException) -> None:
        """An exception in the loop: the run KILLED (an interrupt) or FAILED, with the reason;
        what was logged is kept."""
        self.signals.deferred = False  # a second signal now interrupts the clean-up
        self.progress.close()
        if self.main:
            ended = run_end.record_failure(
                self.client, self.metrics, self.system, self.run_id, self.world, e
            )
            self.ended = ended or self.ended
        if isinstance(e, Interrupted) and self.main:
            log.warning(
                "run %s %s (MLflow run %s KILLED)", self.spec.run_key, e.reason, self.run_id
            )
