"""MLflow records of a sweep: the parent run, the state of every planned run key, the plan artifact.

A sweep is one parent run (tag `sweep_parent=<name>`, one per sweep name and experiment, reused
when the sweep is rerun) and every point is a child run (`mlflow.parentRunId`, tags `sweep` and
`variant`, written by `training.train` from `tracking.parent_run_id` / `tracking.tags`). The
parent is tagged `sweep_parent`, not `sweep`, so queries on `tags.sweep` return only the points.

Resumability is read from run keys: the run of a key (`tracking.run_of_key`: its latest
FINISHED run, else its latest run) decides what the sweep does with the point (FINISHED: skip;
FAILED: skip unless retry_failed; RUNNING/KILLED: relaunch, and `training.train` resumes it from
its checkpoint into the same MLflow run).
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training import tracking

PARENT_TAG = "sweep_parent"


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    status: str  # MLflow run status: RUNNING, FINISHED, FAILED, KILLED, SCHEDULED
    failure_reason: str
    sweep: str
    parent_run_id: str
    name: str = ""  # the MLflow run name
    loss: float | None = None  # final_val_loss once FINISHED
    arm: str = ""  # a tuning run's arm (tag `arm`); else empty

    @property
    def block(self) -> str:
        """What the run's name says before its size (`llama` of `llama-N22.6K-D16.4K`)."""
        return self.name.split("-N", 1)[0] if "-N" in self.name else self.name


def latest_by_key(uri: str, experiment_id: str, filter_string: str = "") -> dict[str, RunRecord]:
    """The run of every run key in the experiment (optionally filtered):
    `tracking.latest_runs_by_key`, its latest FINISHED run, else its latest run of any status."""
    runs = tracking.latest_runs_by_key(tracking.client(uri), experiment_id, filter_string)
    out: dict[str, RunRecord] = {}
    for key, r in runs.items():
        t = r.data.tags
        out[key] = RunRecord(
            r.info.run_id,
            r.info.status,
            t.get("failure_reason", ""),
            t.get("sweep", ""),
            t.get("mlflow.parentRunId", ""),
            r.info.run_name or "",
            r.data.metrics.get("final_val_loss"),
            t.get("arm", ""),
        )
    return out


def children_by_key(uri: str, experiment_id: str, parent_run_id: str) -> dict[str, RunRecord]:
    return latest_by_key(uri, experiment_id, f"tags.`mlflow.parentRunId` = '{parent_run_id}'")


def open_parent(uri: str, experiment_id: str, name: str, tags: dict[str, Any]) -> str:
    """Reuse this sweep's parent run (a rerun continues the same sweep) or create it; RUNNING."""
    c = tracking.client(uri)
    found = c.search_runs(
        [experiment_id],
        filter_string=f"tags.{PARENT_TAG} = '{name}'",
        order_by=["attributes.start_time ASC"],
        max_results=1,
    )
    if found:
        run_id = found[0].info.run_id
        c.update_run(run_id, status="RUNNING")
    else:
        run = c.create_run(experiment_id, run_name=f"sweep:{name}", tags={PARENT_TAG: name})
        run_id = run.info.run_id
    tracking.set_tags(c, run_id, tags)
    return run_id


def close_parent(uri: str, run_id: str, status: str, reason: str = "") -> None:
    """End the parent run; a KILLED or FAILED one says why (`failure_reason`), a FINISHED one
    drops the reason an earlier invocation left."""
    c = tracking.client(uri)
    if status == "FINISHED":
        if "failure_reason" in c.get_run(run_id).data.tags:
            c.delete_tag(run_id, "failure_reason")
    elif reason:
        c.set_tag(run_id, "failure_reason", reason[:1000])
    c.set_terminated(run_id, status=status)


def log_plan(uri: str, run_id: str, rows: list[dict[str, Any]], sweep_yaml: str) -> None:
    """plan.csv / plan.json / sweep.yaml as artifacts of the parent (overwritten on rerun),
    and its ``n_points`` tag: a tuned sweep logs its plan again once every stage is derived."""
    import pandas as pd  # ~1.3 s, only once a sweep runs: a dry run never logs a plan

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        pd.DataFrame(rows).to_csv(d / "plan.csv", index=False)
        (d / "plan.json").write_text(json.dumps(rows, indent=1, default=str))
        (d / "sweep.yaml").write_text(sweep_yaml)
        client = tracking.client(uri)
        client.log_artifacts(run_id, str(d))
    tracking.set_tags(client, run_id, {"n_points": len(rows)})


def best_per_arm(records: Mapping[str, RunRecord]) -> list[RunRecord]:
    """Each arm's best FINISHED run (lowest final_val_loss), ordered by `name_order`: a tuning run's
    arm is its `arm` tag, any other run is an arm of its own."""
    best: dict[str, RunRecord] = {}
    for key, r in records.items():
        if r.status != "FINISHED" or r.loss is None or not math.isfinite(r.loss):
            continue
        arm = r.arm or key
        if arm not in best or r.loss < best[arm].loss:
            best[arm] = r
    return sorted(best.values(), key=lambda r: name_order(r.name))


UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
_SIZE = re.compile(r"^(.*?)-N([\d.]+(?:e[+-]?\d+)?)([KMBT]?)-D([\d.]+(?:e[+-]?\d+)?)([KMBT]?)(.*)$")


def name_order(name: str) -> tuple:
    """Sort key of a run name (`sweeps.names`): block, then N and D as numbers (N33.9K before
    N102K, D250K before D1M), then the rest; a name of another form after, by its text."""
    m = _SIZE.match(name)
    if not m:
        return (1, name, 0.0, 0.0, "")
    block, n, n_unit, d, d_unit, rest = m.groups()
    return (0, block, float(n) * UNITS[n_unit], float(d) * UNITS[d_unit], rest)


def outcome_metrics(arms: list[RunRecord]) -> dict[str, float]:
    """The sweep's outcome as parent-run metrics: the best loss, the best per block (variant or
    model preset) and per arm (named like its run)."""
    if not arms:
        return {}
    out = {"best_val_loss": min(r.loss for r in arms)}
    for r in arms:
        key = f"best_val_loss/{r.block}"
        out[key] = min(out.get(key, math.inf), r.loss)
    out.update({f"arm_val_loss/{r.name}": r.loss for r in arms if r.name})
    return out


def fit_metrics(fit: Mapping[str, Any]) -> dict[str, float]:
    """The fitted exponents of a report's fit.json (the laws it could fit), as metrics."""
    out = {}
    for law in ("parametric", "isoflop", "envelope"):
        for k in ("alpha", "beta", "a", "b", "E"):
            v = (fit.get(law) or {}).get(k)
            if isinstance(v, (int, float)) and math.isfinite(v):
                out[f"fit.{law}.{k}"] = float(v)
    for law, v in (fit.get("kaplan") or {}).items():
        alpha = (v or {}).get("alpha") if isinstance(v, dict) else None
        if isinstance(alpha, (int, float)) and math.isfinite(alpha):
            out[f"fit.kaplan.{law}.alpha"] = float(alpha)
    return out


def log_outcome(uri: str, run_id: str, metrics: Mapping[str, float], tags: Mapping[str, Any]):
    from mlflow.entities import Metric  # ~2.5 s: mlflow only once a sweep records something

    c = tracking.client(uri)
    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, 0) for k, v in metrics.items()]
    for i in range(0, len(batch), 1000):  # MLflow's batch limit
        c.log_batch(run_id, metrics=batch[i : i + 1000])
    tracking.set_tags(c, run_id, dict(tags))


def log_report(uri: str, run_id: str, out_dir: Path) -> dict[str, float]:
    """The report (report.html, report.md, fit.json, figures/) as the parent's artifacts under
    `report/`; returns the fitted exponents, also logged as metrics."""
    c = tracking.client(uri)
    for name in ("report.html", "report.md", "fit.json"):
        if (out_dir / name).is_file():
            c.log_artifact(run_id, str(out_dir / name), "report")
    if (out_dir / "figures").is_dir():
        c.log_artifacts(run_id, str(out_dir / "figures"), "report/figures")
    fit_json = out_dir / "fit.json"
    metrics = fit_metrics(json.loads(fit_json.read_text())) if fit_json.is_file() else {}
    log_outcome(uri, run_id, metrics, {"report": str(out_dir / "report.html")})
    return metrics
