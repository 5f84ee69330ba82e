"""One training run: `python -m training.train [overrides]` or `train(cfg)` from Python.

A run is a pure function of its resolved config (see training/config.py): the config fixes the
run key, the data, the model, the optimizer and the schedule. The run writes an MLflow run
(schema in docs/contracts.md) and checkpoints under `<runs_dir>/<run_key>/`; rerunning the same
config in the same experiment resumes from the last checkpoint into the same MLflow run, or
returns at once if that run already FINISHED (in another experiment it trains in full). Sweeps
call `train()` many times in one process, so all state (the Accelerator, the MLflow client) is
created inside it.

Order of work: validate everything (config, model shape, batch geometry, tracking server) ->
data -> MLflow store and run key decision -> model -> loop. A user error fails in the first phase with one line naming the field.
The parts live next to this file: `step` (one optimizer step, evaluation), `run_record` (the
MLflow run), `train_state` (what a checkpoint holds), `signals`, `ranks` (the processes).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import signal
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from training import checkpoint, hostmem, run_record, tracking, train_state
from training.config import ConfigError, RunSpec
from training.paths import default_cache_dir, default_runs_dir, resolve_dir
from training.ranks import broadcast, end_process_group, reset_accelerate_state, wait_for_all_ranks
from training.signals import Interrupted, Signals
from training.spec import build_model_config, resolve_config
from training.step import (
    Geometry,
    batch_geometry,
    make_optimizer,
    mixed_precision,
    optimizer_step,
    set_lr,
    step_and_clip,
    use_compile,
    use_keep_host_memory,
)

log = logging.getLogger("training.train")


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


def train(cfg: Any) -> TrainResult:
    """Train one model from a composed config (Hydra DictConfig or a plain nested dict).

    Returns a TrainResult; a diverged run returns status FAILED (the CLI exits non-zero).
    Raises ConfigError / TrackingUnavailable before any work for bad input, and `Interrupted`
    (a KeyboardInterrupt) on SIGTERM or Ctrl-C, after marking the MLflow run KILLED.
    """
    signals = Signals()
    with contextlib.ExitStack() as stack:
        signals.install(stack)
        result = _train(cfg, stack, signals)
    if signals.received is not None:  # came after the loop: the run finished; pass it on
        signal.raise_signal(signals.received)
    return result


def _train(cfg: Any, stack: contextlib.ExitStack, signals: Signals) -> TrainResult:
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
    precision = mixed_precision(tr, torch.cuda.is_available())
    if tr.init_from and not Path(tr.init_from).is_file():
        raise ConfigError(f"train.init_from: {tr.init_from} is not a checkpoint file")
    runs_dir = resolve_dir(spec.paths.runs_dir, default_runs_dir())
    cache_dir = resolve_dir(spec.paths.cache_dir, default_cache_dir())
    rdir = checkpoint.run_dir(runs_dir, spec.run_key)

    reset_accelerate_state()
    accelerator = Accelerator(
        cpu=on_cpu, mixed_precision=precision, gradient_accumulation_steps=geo.grad_accum
    )
    main = accelerator.is_main_process
    if use_keep_host_memory(tr.keep_host_memory, accelerator.device):
        hostmem.keep_freed_memory()  # False off glibc: nothing to tune there

    # An unreachable server fails here, in seconds, before any data work; then the data (its
    # errors, found only once tokenized, come before the store exists), then the store.
    # The main process opens the run's one MLflow client; the others record nothing.
    uri = tracking.resolve_tracking_uri(spec.tracking.uri)
    if main and tracking.sqlite_path(uri) is None:
        tracking.check_reachable(uri)
    data, model_cfg, windows = _prepare_data(spec, cache_dir, accelerator)
    client, experiment_id, decision = None, None, None
    if main:
        experiment_id = tracking.ensure_experiment(uri, spec.tracking.experiment)
        client = tracking.client(uri)
        # One process per run key at a time (held until train returns); a second one waits.
        stack.enter_context(checkpoint.run_lock(rdir, spec.run_key))
        for tmp in checkpoint.remove_stale_temporaries(rdir):
            log.info("removed %s (left by an interrupted write)", tmp)
        decision = run_record.decide(client, spec, experiment_id, rdir)
    decision = broadcast(decision, accelerator)
    if decision["action"] == "reuse":
        return _reused_result(spec, client, decision["run_id"], rdir, main)
    _use_recorded_threads(decision.get("torch_threads"), spec.run_key, stack)

    from models import build_model
    from training import objective as objectives
    from training.data import BatchSampler
    from training.monitor import Progress, measured_peak_flops
    from training.schedules import Schedule, wsd_decay_start

    objective = objectives.build(model_cfg, data.vocab_size, tr.seq_len, spec.data)  # by family
    windows = objective.val_batches(windows)  # the family's fixed validation inputs
    step_objective = None if model_cfg.family == "decoder" else objective
    torch.manual_seed(tr.seed)
    raw_model = build_model(model_cfg).to(accelerator.device)
    optimizer = make_optimizer(raw_model, tr)
    if spec.data.kind == "pairs":
        sampler = objective.sampler(
            data.train, geo.micro_batch, tr.seed, accelerator.process_index, world
        )
    else:
        sampler = BatchSampler(
            data.train, tr.seq_len, geo.micro_batch, tr.seed, accelerator.process_index, world
        )
        sampler = objective.wrap(sampler)  # the decoder's: the sampler itself
    start = _starting_point(spec, geo, decision, rdir, client, raw_model, optimizer, sampler)
    decay_start = None
    if tr.schedule == "wsd":
        decay_start = wsd_decay_start(
            geo.total_steps, tr.decay_fraction, tr.batch_tokens, tr.decay_start_tokens,
            start.branch_step,
        )  # fmt: skip
    schedule = Schedule(tr.schedule, geo.total_steps, start.warmup_steps, tr.min_lr_ratio, decay_start)

    model = _compiled(raw_model) if use_compile(tr.compile, accelerator.device) else raw_model
    model, optimizer = accelerator.prepare(model, optimizer)
    step_opt, clip = step_and_clip(accelerator, optimizer)
    params = list(model.parameters())

    fl_token = objective.accounting(tr.batch_tokens).flops_per_token_exact
    train_tokens = data.split_tokens(data.train, tr.seq_len)  # pairs: pairs x seq_len
    epochs_planned = geo.total_steps * tr.batch_tokens / train_tokens
    if epochs_planned > 1 and main:
        warnings.warn(
            f"train.tokens={tr.tokens} is {epochs_planned:.2f} epochs of the {train_tokens}-token "
            "training split: repeated data bends scaling curves",
            stacklevel=2,
        )
    peak = tr.peak_flops or measured_peak_flops(accelerator.device)
    progress = Progress(
        tr.progress if main else "none",
        geo.total_steps,
        start.step,
        f"{model_cfg.arch} {spec.run_key} | N={raw_model_params(raw_model)} | {geo.total_steps} steps",
    )
    save_steps = {math.ceil(t / tr.batch_tokens): t for t in tr.save_at_tokens}

    def save(path: Path, step: int, train_time: float, pending=()) -> None:
        if main:
            state = train_state.capture(
                raw_model, optimizer.optimizer, sampler, step, tr, start, spec.run_key, run_id,
                experiment_id, train_time, pending,
            )  # fmt: skip
            checkpoint.save_checkpoint(path, state)

    pending = [torch.tensor(v, device=accelerator.device) for v in start.pending_losses]
    last_train_loss, val_loss = float("nan"), None

    # MLflow run: created or reopened by the main process only. From here a SIGTERM or Ctrl-C
    # is deferred to the loop's next step, which checkpoints and marks the run KILLED.
    signals.deferred = True
    run_id, metrics = decision["run_id"], None
    if main:
        run_id = run_record.open_run(
            client, spec, experiment_id, run_id, model_cfg, geo, data, start.branched_from, rdir
        )
        # A resumed run re-trains the steps between its checkpoint and the interruption: the
        # points the interrupted process logged for them are kept, not logged a second time.
        resumed = decision["action"] == "resume"
        logged = tracking.logged_steps(client, run_id) if resumed else None
        metrics = tracking.MetricBuffer(client, run_id, logged=logged)
        if resumed:
            log.info("resuming run %s from step %d", spec.run_key, start.step)
    run_id = broadcast(run_id, accelerator)

    t_run = time.perf_counter()
    t_log, step_log, overhead = t_run, start.step, 0.0
    try:
        for step in range(start.step, geo.total_steps):
            if world == 1 and signals.received is not None:  # ranks > 1: at boundaries below
                save(rdir / checkpoint.LAST, step, time.perf_counter() - t_run, pending)
                raise Interrupted(signals.name, step)
            lr = tr.lr * schedule.multiplier(step)
            set_lr(optimizer, lr)
            pending.append(
                optimizer_step(
                    model, sampler, accelerator, step_opt, clip, params, tr, geo.grad_accum,
                    step_objective,
                )  # fmt: skip
            )

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
                if main:  # at its own step (tokens seen after step k), with that step's lr
                    lr_k = tr.lr * schedule.multiplier(k - 1)
                    metrics.add(k * tr.batch_tokens, train_loss=losses[bad], lr=lr_k)
                return _diverged(spec, client, run_id, metrics, progress, rdir, k, t_start)
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
                val_loss = objective.evaluate(raw_model, windows, geo.micro_batch, accelerator)
                if main:
                    metrics.add(tokens, val_loss=val_loss)
            if done in save_steps:
                save(rdir / checkpoint.branch_name(save_steps[done]), done, time.perf_counter() - t_run)
            if is_ckpt and done != geo.total_steps:
                save(rdir / checkpoint.LAST, done, time.perf_counter() - t_run)
            overhead += time.perf_counter() - t0
            if world > 1 and stop_all and done != geo.total_steps:
                save(rdir / checkpoint.LAST, done, time.perf_counter() - t_run)
                raise Interrupted(signals.name or "a signal to another rank", done)

        val_loss = objective.evaluate(raw_model, windows, geo.micro_batch, accelerator)
        wall = start.wall_time_s + time.perf_counter() - t_run
        save(rdir / checkpoint.LAST, geo.total_steps, time.perf_counter() - t_run)
        result = TrainResult(
            run_key=spec.run_key,
            run_id=run_id,
            status="FINISHED",
            final_val_loss=val_loss,
            final_train_loss=last_train_loss,
            tokens_consumed=geo.total_steps * tr.batch_tokens,
            steps=geo.total_steps,
            wall_time_s=wall,
            run_dir=str(rdir),
        )
        if main:
            _record_finished(spec, client, metrics, result, train_tokens, rdir)
        progress.close()
        progress.message(
            f"done: final_val_loss {val_loss:.4f} | {result.tokens_consumed} tokens | "
            f"{wall:.1f}s | run {run_id}"
        )
        return result
    except BaseException as e:
        signals.deferred = False  # a second signal now interrupts the clean-up
        progress.close()
        if main:
            metrics.flush()
            status = "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED"
            reason = e.reason if isinstance(e, Interrupted) else f"{type(e).__name__}: {e}"
            run_record.end_run(client, run_id, status, reason[:1000])
        if isinstance(e, Interrupted) and main:
            log.warning("run %s %s (MLflow run %s KILLED)", spec.run_key, e.reason, run_id)
        raise


# ---------------------------------------------------------------- the parts of _train
def _prepare_data(spec: RunSpec, cache_dir: Path, accelerator):
    """(tokenized data, the model config for its vocabulary, the validation windows)."""
    from training.data import prepare_data, val_pairs, val_windows

    with accelerator.main_process_first():
        data = prepare_data(spec.data, cache_dir)
    model_cfg = spec.model
    if data.vocab_size != model_cfg.vocab_size:  # BPE may stop short of data.vocab_size
        model_cfg = build_model_config(
            {**model_cfg.to_dict(), "size": None}, data.vocab_size, spec.train.seq_len, spec.data
        )
    if spec.data.kind == "pairs":  # the first pairs of the val split
        windows = val_pairs(data.val, spec.train.seq_len, spec.data.eval_tokens)
    else:
        windows = val_windows(data.val, spec.train.seq_len, spec.data.eval_tokens)  # (n, T + 1)
    return data, model_cfg, windows


def _starting_point(
    spec: RunSpec, geo: Geometry, decision: dict, rdir: Path, client, model, optimizer, sampler
) -> train_state.Start:
    """Where to start: a resume checkpoint of this run, a branch point of another, or step 0;
    a checkpoint's state is restored into `model`, `optimizer` and `sampler`. `client`: None
    on processes that record nothing."""
    from training.schedules import warmup_steps

    tr = spec.train
    start = train_state.Start(warmup_steps(tr.warmup, geo.total_steps))
    if decision["action"] == "resume":
        try:
            state = checkpoint.load_checkpoint(rdir / checkpoint.LAST)
        except Exception as e:  # readable enough to name its run, not to load
            run_of_file = decision["run_id"] if client is not None else None
            raise run_record.unreadable(client, run_of_file, rdir / checkpoint.LAST, e) from None
        start.branched_from, start.branch_step = state.get("branched_from"), state.get("branch_step")
        start.wall_time_s = state["wall_time_s"]
        start.pending_losses = list(state.get("pending_losses", []))
    elif tr.init_from:
        state = checkpoint.load_checkpoint(Path(tr.init_from))
        start.branched_from, start.branch_step = state["run_key"], state["step"]
    else:
        return start
    train_state.restore(state, model, optimizer, sampler, tr)
    start.step, start.warmup_steps = state["step"], state["warmup_steps"]  # branches keep it
    if start.step > geo.total_steps:
        raise ConfigError(
            f"train.tokens={tr.tokens}: the checkpoint is already at {state['tokens']} tokens"
        )
    return start


def _use_recorded_threads(recorded: str | None, run_key: str, stack: contextlib.ExitStack) -> None:
    """Resume with the intra-op thread count the run started with (its `torch_threads` param):
    reductions split differently across threads, so 1 and 2 threads differ in about the 9th
    digit of the loss (docs/contracts.md). Restored when the run returns (sweeps train many)."""
    import torch

    now = torch.get_num_threads()
    if recorded is None or int(recorded) == now:
        return
    log.warning(
        "run %s started with %s threads: resuming with %s (this process had %d)",
        run_key, recorded, recorded, now,
    )  # fmt: skip
    stack.callback(torch.set_num_threads, now)
    torch.set_num_threads(int(recorded))


def _compiled(raw_model):
    """torch.compile of the model. A sweep trains many shapes in one process: each compiles
    once (a shape seen before reuses its code, a new model object of that shape too), but past
    Dynamo's recompile_limit (8) new shapes would silently run eager."""
    import torch
    import torch._dynamo

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
    return torch.compile(raw_model)


def _reused_result(spec: RunSpec, client, run_id: str, rdir: Path, main: bool) -> TrainResult:
    if not main:
        return TrainResult(spec.run_key, None, "FINISHED", run_dir=str(rdir), reused=True)
    m = client.get_run(run_id).data.metrics
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


def _record_finished(spec, client, metrics, result: TrainResult, train_tokens: int, rdir) -> None:
    """The final metrics, the checkpoint artifact (train.save_final_checkpoint), FINISHED."""
    consumed = result.tokens_consumed
    final = {
        "final_val_loss": result.final_val_loss,
        "final_train_loss": result.final_train_loss,
        "wall_time_s": result.wall_time_s,
        "tokens_consumed": consumed,
        "epochs": consumed / train_tokens,
    }
    metrics.add(consumed, val_loss=result.final_val_loss, **final)
    metrics.flush()
    if spec.train.save_final_checkpoint:
        client.log_artifact(result.run_id, str(rdir / checkpoint.LAST), "checkpoint")
    run_record.end_run(client, result.run_id, "FINISHED")


def _diverged(spec, client, run_id, metrics, progress, rdir, step, t_start) -> TrainResult:
    """A non-finite loss at `step`: keep everything logged so far, mark the MLflow run FAILED."""
    reason = f"diverged at step {step}"
    progress.close()
    log.error("run %s %s", spec.run_key, reason)
    if metrics is not None:
        metrics.flush()
        run_record.end_run(client, run_id, "FAILED", reason)
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


def raw_model_params(model) -> str:
    from training.monitor import format_si

    return format_si(sum(p.numel() for p in model.parameters()))


# ---------------------------------------------------------------- CLI
def _main(cfg) -> None:
    from training.tracking import TrackingUnavailable

    try:
        result = train(cfg)
    except (ConfigError, TrackingUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a read-only or full disk: the path and why (a run is FAILED already)
        from training.cli import environment_error

        if (line := environment_error(e)) is None:
            raise
        print(f"error: {line}", file=sys.stderr)
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

    from training.cli import check_composes
    from training.paths import PROJECT_ROOT

    check_composes(PROJECT_ROOT / "conf", "config", sys.argv[1:])  # Hydra's errors: one line
    hydra.main(config_path="../conf", config_name="config", version_base="1.3")(_main)()


if __name__ == "__main__":
    main()
