"""The records of how a run ends, written by the main process (`training.trainer`): a finished
run's final metrics, checkpoint artifact and FINISHED status; a failed or interrupted run's
KILLED or FAILED status and reason; the result of a run key already FINISHED (nothing trained);
and the one line said when the store refuses a write.
"""

from __future__ import annotations

import logging
from pathlib import Path

from training import checkpoint, metric_log, run_record, tracking
from training.config import ConfigError
from training.ranks import lost_a_rank
from training.result import TrainResult
from training.signals import Interrupted

log = logging.getLogger("training.train")


def store_unwritable(
    spec, run_id: str | None, ended: str | None, step: int | None, why: str
) -> tracking.StoreUnwritable:
    """The error of a store that refused a write (`why`): what became of the run (`run_id`,
    the status `ended` it could record, the `step` it reached) and how to go on."""
    uri = tracking.resolve_tracking_uri(spec.tracking.uri)
    if run_id is None:
        what = "no run was opened"
    elif ended == "FAILED":
        what = f"MLflow run {run_id} is FAILED"
    else:
        what = f"MLflow run {run_id} could not be marked FAILED and shows RUNNING"
    at = f" at step {step}" if step is not None else ""
    fix = "make it writable" if "only" in why.lower() else "free space"
    return tracking.StoreUnwritable(
        f"tracking.uri={uri}: the store cannot be written ({why}){at}; {what}; {fix} and "
        f"rerun the same command: run key {spec.run_key} resumes from its last "
        "checkpoint"
    )


def record_finished(
    client,
    metrics: metric_log.MetricLog,
    system,
    result: TrainResult,
    train_tokens: int,
    rdir: Path,
    save_final_checkpoint: bool,
) -> None:
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
    metrics.close()
    metric_log.stop_system_metrics(system)
    if save_final_checkpoint:
        client.log_artifact(result.run_id, str(rdir / checkpoint.LAST), "checkpoint")
        shards = checkpoint.shards_of(rdir / checkpoint.LAST)
        if shards is not None:  # the sharded weights the file names
            folder = rdir / shards
            client.log_artifacts(result.run_id, str(folder), f"checkpoint/{shards}")
    run_record.end_run(client, result.run_id, "FINISHED")


def record_failure(
    client, metrics: metric_log.MetricLog, system, run_id: str, world: int, e: BaseException
) -> str | None:
    """The run of an exception in the loop KILLED (an interrupt) or FAILED, with the reason;
    what was logged is kept. Returns "FAILED" where a store that refused a write still took
    that status, else None."""
    if isinstance(e, tracking.TrackingLost):  # the run stays RUNNING
        metrics.abandon()
        metric_log.stop_system_metrics(system, store_lost=True)
    elif not isinstance(e, (OSError, ConfigError)) and tracking.store_write_error(e):
        # a full or read-only store: no last points; FAILED if it still takes that
        metrics.abandon()
        metric_log.stop_system_metrics(system, store_lost=True)
        reason = f"{type(e).__name__}: {tracking.store_write_error(e)}"
        if run_record.end_run_if_possible(client, run_id, "FAILED", reason):
            return "FAILED"
    else:
        metrics.close()
        metric_log.stop_system_metrics(system)
        status = "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED"
        reason = e.reason if isinstance(e, Interrupted) else f"{type(e).__name__}: {e}"
        if world > 1 and lost_a_rank(e):  # stopped from outside, like a kill: resumable
            status = "KILLED"
            reason = f"another rank was lost (killed, or its node failed); rerun to resume: {e}"
        run_record.end_run(client, run_id, status, reason[:1000])
    return None


def reused(client, spec, rdir: Path, run_id: str, main: bool) -> TrainResult:
    """The result of the run key's FINISHED run (nothing trained)."""
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
