"""The MLflow side of one training run (main process only): decide what to do with a run key
(reuse, resume or start fresh), open the MLflow run with its params, tags and resolved config,
and end it (FINISHED, FAILED or KILLED, with a `failure_reason`). Every function takes the one
`MlflowClient` the run opened (`tracking.client`)."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from models import count_params
from training import checkpoint, tracking
from training.config import ConfigError, RunSpec
from training.step import Geometry

log = logging.getLogger("training.train")


def decide(client, spec: RunSpec, experiment_id: str, rdir: Path, owner) -> dict[str, Any]:
    """Reuse a FINISHED run, resume a checkpoint, or start fresh (and in which MLflow run).
    `train.resume`: auto = resume when a checkpoint of this run exists; true = require one;
    false = start over in a new MLflow run. First the key is claimed in the store
    (`owner`, a `training.ownership.Ownership`): another live process training it raises
    `RunKeyTaken`.

    The run of the key in this experiment (`tracking.find_run_by_key`) decides. The folder
    `<runs_dir>/<run_key>/` is shared by every experiment (and store) that trains the key, so
    `last.pt` is resumed only when it records that MLflow run's id: another experiment's final
    checkpoint is not this run's progress, and resuming it would train nothing."""
    owner.acquire()
    existing = tracking.find_run_by_key(client, experiment_id, spec.run_key)
    last = rdir / checkpoint.LAST
    resume = spec.train.resume
    if existing is not None and existing.info.status == "FINISHED" and resume is not False:
        return {"action": "reuse", "run_id": existing.info.run_id}
    if resume is False:
        last.unlink(missing_ok=True)
        return {"action": "fresh", "run_id": None}
    run_id = existing.info.run_id if existing is not None else None
    try:
        owner = checkpoint.owner(last) if last.exists() else None
    except Exception as e:  # truncated, empty or not a checkpoint
        raise unreadable(client, run_id, last, e) from None
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
            last,
            owner,
            spec.run_key,
            spec.tracking.experiment,
        )
    # The thread count the run started with: a resume uses it (float sums differ across counts).
    threads = existing.data.params.get("torch_threads") if mine else None
    return {"action": "resume" if mine else "fresh", "run_id": run_id, "torch_threads": threads}


def unreadable(client, run_id: str | None, path: Path, e: Exception) -> ConfigError:
    """A `last.pt` that cannot be read (a truncated copy, a full disk): the error to raise, one
    line naming the file; the run it would have resumed is marked FAILED with that reason (a
    rerun fails the same way until the file is replaced or `train.resume=false` is given).
    `client` may be None where `run_id` is (a process that records nothing)."""
    detail = (str(e).strip().splitlines() or [""])[0][:200]
    reason = (
        f"{path}: unreadable checkpoint ({type(e).__name__}: {detail}); rerun with "
        "train.resume=false to start over"
    )
    if run_id is not None:
        end_run(client, run_id, "FAILED", reason)
    return ConfigError(reason)


@dataclass
class RunDescription:
    """What an MLflow run records of its config: name, tags, params and the resolved config."""

    name: str
    tags: dict[str, Any]
    params: dict[str, Any]
    config_yaml: str  # written next to the checkpoints and logged as an artifact


def describe(
    spec: RunSpec, model_cfg, geo: Geometry, data, objective, branched_from: str | None
) -> RunDescription:
    """The run's record: `model_cfg` as built for the data's vocabulary, `data` the prepared
    corpus, `objective` the family's (training.objectives), `branched_from` the run key of a
    branch's checkpoint."""
    resolved = spec.to_dict()
    resolved["model"].update(model_cfg.to_dict())
    tags = {
        "arch": model_cfg.arch,
        "run_key": spec.run_key,
        "data_fingerprint": data.fingerprint,
        "data_source": spec.data_source,
        "git_commit": tracking.git_commit(),
        "branched_from": branched_from,
        **spec.tracking.tags,
    }
    if spec.tracking.parent_run_id:
        tags["mlflow.parentRunId"] = spec.tracking.parent_run_id
    params = tracking.flatten(resolved)
    params.update(derived_params(spec, model_cfg, geo, objective))
    params["data.cache"] = str(data.cache_dir)
    # tokens in the training split: epochs = tokens_trained / data_train_tokens (pairs: in D's
    # units, pairs x seq_len; their real token counts and how many sides get truncated follow)
    params["data_train_tokens"] = data.split_tokens(data.train, spec.train.seq_len)
    params["data_val_tokens"] = data.split_tokens(data.val, spec.train.seq_len)
    if data.unigram_entropy is not None:  # nats/token: the loss of token frequencies alone
        params["data_unigram_entropy"] = data.unigram_entropy
    if spec.data.kind == "pairs":
        params.update(pair_params(data, objective))
    return RunDescription(
        name=spec.tracking.run_name or f"{model_cfg.arch}-{spec.run_key[:8]}",
        tags=tags,
        params=params,
        config_yaml=yaml.safe_dump(resolved, sort_keys=False),
    )


def derived_params(spec: RunSpec, model_cfg, geo: Geometry, objective) -> dict[str, Any]:
    pc = count_params(model_cfg)
    trained = geo.total_steps * spec.train.batch_tokens  # whole batches: >= train.tokens
    # D as the family's objective counts it; C of both stacks for encoder_decoder
    fl = objective.accounting(trained)
    return {
        "n_params": pc.total,
        "n_params_nonembed": pc.non_embedding,
        "n_params_embed": pc.embedding,
        # what one token passes through (MoE: top_k routed + shared experts); = the above if dense
        "n_params_active": pc.total - pc.non_embedding + pc.non_embedding_active,
        "n_params_nonembed_active": pc.non_embedding_active,
        "tokens": spec.train.tokens,  # the budget asked for
        "tokens_trained": trained,  # D: what the run trains (a branch: its stable prefix too)
        "flops_6nd": fl.flops_6nd,
        "flops_exact": fl.flops_exact,
        "flops_per_token_exact": fl.flops_per_token_exact,
        **objective.params(),  # non-decoder families: objective.name, tokens_counted, ...
        "seq_len": spec.train.seq_len,
        "batch_tokens": spec.train.batch_tokens,
        "steps": geo.total_steps,
        "micro_batch": geo.micro_batch,
        "grad_accum": geo.grad_accum,
        "world_size": geo.world_size,
        # intra-op threads per process: not in the run key (the same run), but losses differ in
        # about the 9th digit between counts, so a resume uses the count recorded here
        "torch_threads": torch.get_num_threads(),
    }


def open_run(
    client, experiment_id: str, run_id: str | None, run: RunDescription, rdir: Path
) -> str:
    """Create the MLflow run (or reopen `run_id`, the one found by run key) and log its
    params, tags and resolved config; returns its id."""
    # Written before the run is created or reopened: a full or read-only disk fails here with
    # no run left RUNNING.
    checkpoint.atomic_write(rdir / "config.yaml", lambda f: f.write(run.config_yaml.encode()))
    if run_id is None:
        run_id = client.create_run(experiment_id, run_name=run.name).info.run_id
    else:
        client.update_run(run_id, status="RUNNING")
    try:
        tracking.set_tags(client, run_id, run.tags)
        tracking.log_params(client, run_id, run.params)
        client.log_artifact(run_id, str(rdir / "config.yaml"))
    except Exception as e:  # a store that is full or read-only: not left RUNNING if avoidable
        if (why := tracking.store_write_error(e)) is not None:  # said by the trainer's line
            e.run_id, e.run_status = run_id, "RUNNING"
            if end_run_if_possible(client, run_id, "FAILED", f"{type(e).__name__}: {why}"):
                e.run_status = "FAILED"
        raise
    return run_id


def pair_params(data, objective) -> dict[str, Any]:
    """A paired corpus' size and fit: pairs per split, their real source and target tokens
    (before truncation), and the share of training pairs whose side is cut to fit."""
    sources, targets = data.train.lengths()
    return {
        "data_train_pairs": len(data.train),
        "data_val_pairs": len(data.val),
        "data_train_source_tokens": int(sources.sum()),
        "data_train_target_tokens": int(targets.sum()),
        "data_truncated_sources": float((sources > objective.src_len - 1).mean()),
        "data_truncated_targets": float((targets > objective.tgt_len - 1).mean()),
    }


def end_run(client, run_id: str, status: str, failure_reason: str | None = None) -> None:
    """Mark the MLflow run `status` (FINISHED | FAILED | KILLED), tagged with why it did not
    finish; a run resumed to FINISHED loses the reason an earlier attempt left."""
    if failure_reason is not None:
        tracking.set_tags(client, run_id, {"failure_reason": failure_reason})
    elif status == "FINISHED" and "failure_reason" in client.get_run(run_id).data.tags:
        client.delete_tag(run_id, "failure_reason")
    client.set_terminated(run_id, status)


def end_run_if_possible(client, run_id: str | None, status: str, failure_reason: str) -> bool:
    """`end_run` on a store that may refuse writes (a full disk): the status first (it updates
    a row in place, which a full SQLite file often still takes), then the reason if it fits.
    Returns whether the status was recorded."""
    if run_id is None:
        return False
    try:
        client.set_terminated(run_id, status)
    except Exception:
        return False
    with contextlib.suppress(Exception):
        tracking.set_tags(client, run_id, {"failure_reason": failure_reason})
    return True
