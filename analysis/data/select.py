"""The selection every analysis command shares: --experiment / --sweep / --tracking-uri / --csv
(`add_selection_args`, `load_selected`), the output checks (`check_out_dir`, `check_out_file`)
and an argument parser whose errors are one line (`ArgumentParser`); `InputError` before any
work starts.
"""

from __future__ import annotations

import argparse
import os
import urllib.error
import urllib.request
from pathlib import Path

from analysis.data.load import (
    URI_SCHEMES,
    InputError,
    Runs,
    _experiment,
    combine,
    load_mlflow,
    read_csv,
)


def add_selection_args(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("runs (MLflow or CSV; several sources are concatenated)")
    src.add_argument("--experiment", action="append", help="MLflow experiment name; repeatable")
    src.add_argument(
        "--sweep",
        action="append",
        help="sweep parent run id: use only the runs of its plan (its children "
        "without a plan artifact); repeatable, each looked "
        "up in the selected experiment that holds it (an experiment holding "
        "none of them contributes all its runs)",
    )
    src.add_argument("--tracking-uri", help="MLflow tracking URI, e.g. sqlite:////abs/mlruns.db")
    src.add_argument(
        "--csv",
        action="append",
        help="CSV with 'loss' and two of 'N', 'D', 'C' (e.g. runs.csv); repeatable",
    )


def resolve_tracking_uri(uri: str | None) -> str:
    """The store the training side writes by default: $MLFLOW_TRACKING_URI, else
    sqlite:///<project root>/mlruns.db (never MLflow's cwd-relative default). A SQLite store
    that does not exist is an error: reading would silently create an empty one."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        uri = f"sqlite:///{Path(__file__).resolve().parents[1] / 'mlruns.db'}"
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        if not path.is_file():
            raise InputError(f"--tracking-uri: no MLflow store at {path} (run a sweep first)")
        with open(path, "rb") as f:  # MLflow would write its tables into any other file
            if f.read(16) != b"SQLite format 3\0":
                raise InputError(f"--tracking-uri: {path} is not a SQLite database")
    elif uri.startswith(("http://", "https://")):
        check_server(uri)
    elif "://" in uri and uri.split("://", 1)[0].lower().split("+", 1)[0] not in URI_SCHEMES:
        raise InputError(
            f"--tracking-uri: unknown scheme in {uri!r}; use sqlite:///path/to/mlruns.db, "
            "http(s)://host:port, a database URI (postgresql://, mysql://, mssql://), "
            "databricks, or a file:// URI or folder (MLflow file store)"
        )
    return uri


def check_out_dir(folder: str | Path, flag: str = "--out") -> None:
    """InputError unless `folder` exists as a writable folder or can be made (its nearest
    existing ancestor is one), so a read-only or misnamed output fails before any fitting."""
    if not str(folder).strip():  # Path("") is the current folder
        raise InputError(f"{flag}: empty; give the folder to write")
    probe = Path(folder).resolve()
    _check_name_lengths(probe, flag)
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise InputError(f"{flag}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"{flag}: {probe} is not writable (read-only or no permission)")


def _check_name_lengths(path: Path, flag: str) -> None:
    """A name longer than filesystems allow fails every stat with errno 36: say so first."""
    if long := next((p for p in path.parts if len(os.fsencode(p)) > 255), None):
        raise InputError(
            f"{flag}: a name in the path is {len(os.fsencode(long))} bytes ({long[:20]}...), "
            "over the 255 allowed"
        )


def check_out_file(path: str | Path, flag: str = "--out") -> None:
    """InputError unless `path` can be written as a file: not an existing folder, and its folder
    exists or can be made (`check_out_dir`), so a misnamed output fails before any fitting."""
    _check_name_lengths(Path(path), flag)
    if Path(path).is_dir():
        raise InputError(f"{flag}: {path} is a folder, not a file")
    check_out_dir(Path(path).parent, flag)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a bad flag reported as one `error:` line (exit 2), like every other input."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def check_server(uri: str, timeout_s: float = 5.0) -> None:
    """An InputError in seconds if the MLflow server at `uri` does not answer `/health`
    (MLflow's client retries with backoff for minutes, then raises a traceback). Its own copy
    of `training.tracking.check_reachable`: analysis never imports training or sweeps."""
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            status = resp.status
    except urllib.error.HTTPError as e:
        status = e.code
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise InputError(
            f"--tracking-uri: MLflow server {uri} not reachable ({reason}); start it or pass "
            "a reachable server or a sqlite:/// store"
        ) from None
    if status != 200:
        raise InputError(f"--tracking-uri: MLflow server {uri}: {url} answered HTTP {status}")


def _once(values: list[str] | None, flag: str) -> list[str]:
    values = list(values or [])
    for v in values:
        if values.count(v) > 1:
            raise InputError(f"{flag} {v} is given more than once")
    return values


def _sweep_experiments(sweeps: list[str], experiments: list[str], tracking_uri: str) -> dict:
    """{sweep parent run id: name of the selected experiment that holds it}."""
    from mlflow import MlflowClient  # lazy: mlflow ~2.5 s
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=tracking_uri)
    ids = {}
    for name in experiments:
        ids[_experiment(client, name).experiment_id] = name
    found = {}
    for sweep in sweeps:
        try:
            exp_id = client.get_run(sweep).info.experiment_id
        except MlflowException:
            exp_id = None
        if exp_id not in ids:
            raise InputError(
                f"--sweep {sweep}: no run with this id in the selected experiment(s) {experiments}"
            )
        found[sweep] = ids[exp_id]
    return found


def load_selected(args: argparse.Namespace) -> Runs:
    """Runs of every --csv, or of every --experiment (only the --sweep children where given)."""
    csvs, experiments = _once(args.csv, "--csv"), _once(args.experiment, "--experiment")
    sweeps = _once(args.sweep, "--sweep")
    if bool(csvs) == bool(experiments):
        raise InputError(
            "choose exactly one source kind: --csv PATH or --experiment NAME (each repeatable)"
        )
    if csvs:
        if sweeps:
            raise InputError("--sweep selects MLflow runs; it cannot be used with --csv")
        prefix = len(csvs) > 1  # distinct generated ids for CSVs without a run_id column
        return combine([read_csv(p, f"csv{k}-" if prefix else "") for k, p in enumerate(csvs, 1)])
    args.tracking_uri = resolve_tracking_uri(args.tracking_uri)  # curves read the same store
    from mlflow.exceptions import MlflowException  # lazy: mlflow ~2.5 s

    try:
        return _load_experiments(experiments, sweeps, args.tracking_uri)
    except MlflowException as e:  # a store MLflow refuses (a file store it no longer writes)
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"--tracking-uri: {args.tracking_uri}: {why}") from None


def _load_experiments(experiments: list[str], sweeps: list[str], tracking_uri: str) -> Runs:
    if len(experiments) == 1 and not sweeps:
        return load_mlflow(experiments[0], None, tracking_uri)
    holder = _sweep_experiments(sweeps, experiments, tracking_uri)
    parts = []
    for name in experiments:
        mine = [s for s in sweeps if holder[s] == name]
        for sweep in mine or [None]:
            parts.append(load_mlflow(name, sweep, tracking_uri))
    return combine(parts)
