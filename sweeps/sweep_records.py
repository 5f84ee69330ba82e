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
import tempfile
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


def close_parent(uri: str, run_id: str, status: str) -> None:
    tracking.client(uri).set_terminated(run_id, status=status)


def log_plan(uri: str, run_id: str, rows: list[dict[str, Any]], sweep_yaml: str) -> None:
    """plan.csv / plan.json / sweep.yaml as artifacts of the parent (overwritten on rerun)."""
    import pandas as pd  # ~1.3 s, only once a sweep runs: a dry run never logs a plan

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        pd.DataFrame(rows).to_csv(d / "plan.csv", index=False)
        (d / "plan.json").write_text(json.dumps(rows, indent=1, default=str))
        (d / "sweep.yaml").write_text(sweep_yaml)
        tracking.client(uri).log_artifacts(run_id, str(d))
