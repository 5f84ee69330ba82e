"""`python -m sweeps.ui`: the MLflow UI on the project's store, opened on its training runs.

    python -m sweeps.ui                                   # sqlite:///<project>/mlruns.db
    python -m sweeps.ui --tracking-uri sqlite:///other.db --experiment NAME --port 5001
    python -m sweeps.ui --tracking-uri http://login1:5000 # a server already running: the URL

MLflow 3.17's UI chooses between its GenAI and its model-training views by the URL's
`workflowType` (else the browser's last choice, first GenAI), not by the experiment's
`mlflow.experimentKind` tag: the printed URL names the experiment and
`workflowType=machine_learning`, so a fresh browser lands on the runs list, one expandable row
per sweep. A SQLite store is served by `mlflow ui` on 127.0.0.1 (Ctrl-C stops it); an http(s)
store is already a server, so only its URL is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from training import tracking
from training.config import TrackingConfig

WORKFLOW = "workflowType=machine_learning"


def runs_url(server: str, experiment_id: str) -> str:
    """The MLflow UI page of an experiment's runs, in the model-training view."""
    return f"{server.rstrip('/')}/#/experiments/{experiment_id}?{WORKFLOW}"


def command(uri: str, experiment: str) -> str:
    """The command that opens these runs, with only the options that differ from the defaults
    (for the sweep's summary)."""
    cmd = "python -m sweeps.ui"
    if uri != tracking.resolve_tracking_uri(None):
        cmd += f" --tracking-uri {uri}"
    if experiment != TrackingConfig.experiment:
        cmd += f" --experiment {experiment}"
    return cmd


def experiment_id(uri: str, experiment: str) -> str:
    """The experiment's id; SystemExit(2) with one line when the store or experiment is missing."""
    db = tracking.sqlite_path(uri)
    if db is not None and not db.exists():
        _fail(f"--tracking-uri {uri}: no store there yet (run a sweep or `training.train` first)")
    try:
        tracking.check_reachable(uri)
    except tracking.TrackingUnavailable as e:
        _fail(str(e))
    exp = tracking.client(uri).get_experiment_by_name(experiment)
    if exp is None:
        _fail(f"--experiment {experiment}: no such experiment in {uri}")
    return exp.experiment_id


def _fail(line: str) -> None:
    print(f"error: {line}", file=sys.stderr)
    sys.exit(2)


def wait_until_up(url: str, proc: subprocess.Popen, timeout_s: float = 120.0) -> bool:
    """Poll `url` until the server answers 200 (True), exits or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    return False


def serve(uri: str, host: str, port: int) -> subprocess.Popen:
    """`mlflow ui` on a SQLite store, in a process group of its own (its server workers too),
    which `stop` ends."""
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--workers", "1"]
    cmd += ["--host", host, "--port", str(port)]
    # one person browsing: one server worker, and no job runner (its ~10 queue consumers are
    # for GenAI evaluation jobs and double the start-up)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    # its log on stderr: stdout holds only the URL (scripts read it)
    return subprocess.Popen(cmd, env=env, stdout=sys.stderr, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sweeps.ui", description=__doc__.splitlines()[0])
    p.add_argument("--tracking-uri", default=None, help="default: the project's store")
    p.add_argument("--experiment", default=TrackingConfig.experiment)
    p.add_argument("--host", default="127.0.0.1", help="where `mlflow ui` listens")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--print-url", action="store_true", help="print the URL, start nothing")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    uri = tracking.resolve_tracking_uri(args.tracking_uri)
    exp_id = experiment_id(uri, args.experiment)
    if tracking.sqlite_path(uri) is None:  # a tracking server: its own UI
        print(f"MLflow UI: {runs_url(uri, exp_id)}", flush=True)
        return
    server = f"http://{args.host}:{args.port}"
    if args.print_url:
        print(f"MLflow UI: {runs_url(server, exp_id)}", flush=True)
        return
    proc = serve(uri, args.host, args.port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the server on SIGTERM too
    try:
        if not wait_until_up(server + "/", proc):
            _fail(f"mlflow ui did not answer on {server} (port {args.port} taken? --port)")
        print(f"MLflow UI: {runs_url(server, exp_id)}  (Ctrl-C stops it)", flush=True)
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
