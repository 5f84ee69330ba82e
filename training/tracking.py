"""MLflow plumbing for training runs: URI, store/experiment creation, run lookup, batched logs.

Everything goes through `MlflowClient` with an explicit tracking URI (no fluent global state),
so many runs in one process (a Hydra sweep) never leak an active run into each other.

- `resolve_tracking_uri`: `tracking.uri`, else `$MLFLOW_TRACKING_URI`, else an absolute SQLite
  file under the project root. Relative sqlite paths are made absolute at call time.
- `check_reachable`: fails in seconds with a clear message when an http(s) server is down
  (MLflow's own client would retry with backoff for minutes).
- `ensure_experiment`: creates the store and experiment once, under a file lock for SQLite (two
  processes migrating a fresh SQLite store at once is a known MLflow race). A new SQLite store
  is migrated in a temporary file next to it and renamed into place (`_create_sqlite_store`):
  an interrupt during MLflow's ~1.5 s of migrations leaves no store, never a half-migrated one. Sweeps call it
  before launching jobs; `train()` calls it again, which is then a cheap lookup. It tags the
  experiment `mlflow.experimentKind=custom_model_development` (also an existing one without the
  tag), which marks it as model training; MLflow 3.17's UI still picks its view from the URL
  (`workflowType=machine_learning`), which `python -m sweeps.ui` prints.
- `run_of_key` / `latest_runs_by_key` / `find_run_by_key`: THE run of a run key in an
  experiment (rule below), shared by `training.train` (reuse or resume) and
  `sweeps.sweep_records` (skip or relaunch); `analysis.load` keeps its own copy of the rule
  (analysis never imports training or sweeps).
- The logging functions take an `MlflowClient` (`client(uri)`): a run opens one and passes it
  to everything it logs, instead of one client per call. `client(uri, timeout_s)` on a server
  is a `BoundedClient`: MLflow's own retries are off (`MLFLOW_HTTP_REQUEST_MAX_RETRIES=0`,
  `MLFLOW_HTTP_REQUEST_TIMEOUT=10` unless set), and a call that cannot reach the server is
  retried for `timeout_s`, then raises `TrackingLost` (one line, no traceback in the CLI).
  Metrics go through `training.metric_log.MetricLog` (each (key, step) once).

mlflow (~2.5 s to import) is imported where it is first used: the CLI and the sweep planner
import this module long before, or without, recording anything.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from training.config import ConfigError
from training.paths import PROJECT_ROOT, default_tracking_uri, open_lock

MAX_PARAMS_PER_BATCH = 100  # MLflow log_batch limits
MAX_PARAM_VALUE_CHARS = 6000
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"  # MLflow 3's UI: which view an experiment opens on
EXPERIMENT_KIND = "custom_model_development"  # "Training runs" (not "genai_development")


class TrackingUnavailable(RuntimeError):
    """The tracking server or store cannot be used; raised before any training starts."""


class TrackingLost(TrackingUnavailable):
    """The tracking server stopped answering during a run for longer than `tracking.timeout_s`.
    Nothing after the last checkpoint is recorded as done, so rerunning the command resumes."""

    def __init__(self, uri: str, step: int | None):
        since = f" since step {step}" if step is not None else ""
        super().__init__(
            f"tracking server unreachable at {uri}{since}; the checkpoint is kept and rerunning "
            "the same command resumes"
        )
        self.uri, self.step = uri, step


class StoreUnwritable(TrackingUnavailable):
    """The store refused a write: its disk is full (or over quota) or read-only. Raised by a
    run that was writing to it (`training.trainer`), after marking its MLflow run FAILED where
    the store still takes that; the message says which, and that a rerun resumes."""


# What a database says when its disk is full or read-only (SQLite's SQLITE_FULL and
# SQLITE_READONLY messages; the OS's for a file store and other databases).
_STORE_WRITE_PHRASES = (
    "database or disk is full",
    "attempt to write a readonly database",
    "No space left on device",
    "Disk quota exceeded",
    "Read-only file system",
)
_STORE_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
_STORE_MODULES = {"mlflow", "sqlalchemy", "sqlite3", "psycopg", "psycopg2", "pymysql", "MySQLdb"}


def store_write_error(e: BaseException) -> str | None:
    """Why the store could not be written, when `e` or an exception it was raised from says its
    disk is full or read-only (e.g. MLflow's `MlflowException` over SQLAlchemy's
    `OperationalError` over sqlite3's "database or disk is full"); None otherwise."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _STORE_WRITE_ERRNOS:
            return os.strerror(e.errno)
        # the phrases only from the store's own layers: a ConfigError may quote the OS's words
        if type(e).__module__.split(".")[0] in _STORE_MODULES:
            text = str(e).lower()
            for phrase in _STORE_WRITE_PHRASES:
                if phrase.lower() in text:
                    return phrase
        e = e.__cause__ or e.__context__
    return None


def unreachable(e: BaseException) -> bool:
    """Whether `e` (an MlflowException from a REST call) means the server did not answer:
    refused or reset connection, timeout, or retries exhausted on 5xx answers."""
    import requests  # comes with mlflow; loaded only once a call has failed

    lost = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)
    lost += (requests.exceptions.RetryError, ConnectionError, TimeoutError)
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, lost):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def is_remote(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def with_deadline(uri: str, timeout_s: float, call, step: int | None = None):
    """`call()`, retried with backoff while the server at `uri` does not answer, for at most
    `timeout_s` after the first failure; then `TrackingLost`. Other errors pass through.
    Only for calls that may run twice (not `create_run`; metrics: `MetricLog`)."""
    first, delay = None, 0.5
    while True:
        try:
            return call()
        except Exception as e:
            if not is_remote(uri) or not unreachable(e):
                raise
            now = time.monotonic()
            first = now if first is None else first
            if now - first + delay > timeout_s:
                raise TrackingLost(uri, step) from None
            time.sleep(delay)
            delay = min(2 * delay, 5.0)


class BoundedClient:
    """An `MlflowClient` whose calls wait at most `timeout_s` for a server that stopped
    answering (`with_deadline`); `create_run` is tried once (a retry could make two runs)."""

    ONCE = frozenset({"create_run"})

    def __init__(self, inner, uri: str, timeout_s: float):
        self.inner, self.uri, self.timeout_s = inner, uri, timeout_s

    def __getattr__(self, name: str):
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr
        timeout_s = 0.0 if name in self.ONCE else self.timeout_s  # 0: no retry, one line if lost
        return lambda *a, **k: with_deadline(self.uri, timeout_s, lambda: attr(*a, **k))


def resolve_tracking_uri(uri: str | None = None) -> str:
    uri = uri or default_tracking_uri()
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = f"sqlite:///{Path(uri[len('sqlite:///') :]).resolve()}"
    return uri


def sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None


def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """Raise TrackingUnavailable with one clear line if `uri` cannot be used."""
    if uri.startswith(("http://", "https://")):
        url = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                if resp.status != 200:
                    raise TrackingUnavailable(f"tracking.uri={uri}: /health answered {resp.status}")
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise TrackingUnavailable(
                f"tracking.uri={uri}: MLflow server not reachable ({reason}); start it or set "
                "tracking.uri / MLFLOW_TRACKING_URI to a reachable server or a sqlite:/// path"
            ) from None
    elif (db := sqlite_path(uri)) is not None:
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TrackingUnavailable(
                f"tracking.uri={uri}: cannot create {db.parent}: {e}"
            ) from None


SQLITE_HEADER = b"SQLite format 3\x00"


def check_store(uri: str, parent_run_id: str | None = None) -> None:
    """Before any work, reading only: a SQLite store that exists is a SQLite file (an empty
    one is a new store), a file store is a folder, and `parent_run_id` names a run of the
    store. Raises ConfigError naming tracking.uri or tracking.parent_run_id."""
    db = sqlite_path(uri)
    if db is not None and db.is_dir():
        raise ConfigError(
            f"tracking.uri: {db} is a folder; name a SQLite file in it, {uri}/mlruns.db"
        )
    if db is not None and db.is_file() and db.stat().st_size:
        with open(db, "rb") as f:
            if f.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                raise ConfigError(f"tracking.uri: {db} exists and is not a SQLite database")
    folder = (
        Path(uri.removeprefix("file://")) if "://" not in uri or uri.startswith("file://") else None
    )
    if folder is not None and folder.is_file():
        raise ConfigError(f"tracking.uri: {folder} is a file; an MLflow file store is a folder")
    _check_driver(uri)
    if parent_run_id:
        _check_parent_run(uri, db, parent_run_id)


def _check_driver(uri: str) -> None:
    """A database URI (postgresql://, mysql://, mssql://) needs its driver installed: MLflow
    finds it missing only when it opens the store, after the data is built."""
    scheme = uri.partition("://")[0].lower()
    if "://" not in uri or scheme.split("+")[0] in ("sqlite", "http", "https", "file"):
        return
    from sqlalchemy.engine import make_url  # comes with mlflow
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        make_url(uri).get_dialect().import_dbapi()
    except (ArgumentError, NoSuchModuleError, ImportError) as e:
        raise ConfigError(
            f"tracking.uri: {uri}: cannot open this database ({type(e).__name__}: {e}); "
            "install its driver (e.g. psycopg for postgresql://, mysqlclient for mysql://)"
        ) from None


def _check_parent_run(uri: str, db: Path | None, run_id: str) -> None:
    if db is not None and (not db.exists() or not db.stat().st_size):
        raise ConfigError(
            f"tracking.parent_run_id: no run {run_id}: the store {db} does not exist yet"
        )
    from mlflow.exceptions import MlflowException

    check_reachable(uri)  # a server that is down fails in seconds, not in MLflow's retries
    try:
        client(uri).get_run(run_id)
    except MlflowException:
        raise ConfigError(f"tracking.parent_run_id: no run {run_id} in {uri}") from None


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """An exclusive file lock next to a SQLite store (no-op for servers)."""
    db = sqlite_path(uri)
    if db is None:
        yield
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    with open_lock(db.with_name(db.name + ".lock")) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _create_sqlite_store(db: Path) -> None:
    """Create the SQLite store `db` (all MLflow migrations) atomically: migrate a temporary file
    in the same folder, close every connection to it, rename it to `db`. Call under
    `_store_lock`; temporaries of earlier interrupted creations are removed first."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    for stale in db.parent.glob(db.name + ".tmp-*"):
        stale.unlink(missing_ok=True)
    fd, name = tempfile.mkstemp(dir=db.parent, prefix=db.name + ".tmp-")
    os.close(fd)
    tmp = Path(name)
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o666 & ~umask)  # the mode SQLite would give a new file (mkstemp's is 0600)
    tmp_uri = f"sqlite:///{tmp}"
    try:
        SqlAlchemyStore(tmp_uri, (db.parent / "mlartifacts").as_uri())  # runs the migrations
        # MLflow caches one engine per URI (class-level): close its pooled connections so no
        # handle outlives the rename, and forget the temporary URI.
        engine = SqlAlchemyStore._engine_map.pop(tmp_uri, None)
        if engine is not None:
            engine.dispose()
        os.replace(tmp, db)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def _store_error_logged_again(record: logging.LogRecord) -> bool:
    """False for MLflow's ERROR log, with a traceback, of a SQL error it raises right after as
    an `MlflowException`: the caller says it once (a full store: one `error:` line)."""
    return not record.getMessage().startswith("SQLAlchemy database error.")


def client(uri: str, timeout_s: float | None = None):
    """An `MlflowClient` on `uri`; make it after `ensure_experiment` (which creates the store).
    With `timeout_s` and a server: a `BoundedClient`, and MLflow's own retries off unless the
    environment sets them (ours re-check what a failed `log_batch` wrote before re-sending)."""
    from mlflow.tracking import MlflowClient

    db_log = logging.getLogger("mlflow.store.db.utils")
    if _store_error_logged_again not in db_log.filters:
        db_log.addFilter(_store_error_logged_again)
    db_log.setLevel(logging.WARNING)  # not INFO's "Creating initial MLflow database tables..."

    inner = MlflowClient(tracking_uri=uri)
    if timeout_s is None or not is_remote(uri):
        return inner
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    return BoundedClient(inner, uri, timeout_s)


def ensure_experiment(uri: str, name: str) -> str:
    """Create the store (SQLite) and the experiment if needed; return the experiment id."""
    check_reachable(uri)
    with _store_lock(uri):
        db = sqlite_path(uri)
        if db is not None and (not db.exists() or db.stat().st_size == 0):  # 0 B: an old stub
            _create_sqlite_store(db)
        c = client(uri)
        exp = c.get_experiment_by_name(name)
        if exp is not None:
            if EXPERIMENT_KIND_TAG not in exp.tags:  # a kind chosen in the UI is kept
                c.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return exp.experiment_id
        # Fix artifacts next to the database (absolute), not relative to some job's cwd.
        location = (db.parent / "mlartifacts").as_uri() if db is not None else None
        return c.create_experiment(
            name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}
        )


def _rank(run) -> tuple:
    return (run.info.status == "FINISHED", run.info.start_time or 0, run.info.run_id)


def run_of_key(runs) -> Any:
    """The run of a run key among `runs` (all tagged with that key, in one experiment): its
    latest FINISHED run; if none FINISHED, its latest run of any status. Latest = the largest
    start_time, ties broken by the larger run_id. None for no runs.

    One rule for every reader (docs/contracts.md, "The run of a run key"): `training.train`
    returns that FINISHED run instead of training (or resumes the unfinished one),
    `sweeps.run` skips the point as done, and `analysis.load` reports that run, so the three
    name the same MLflow run. A later rerun that did not finish (`train.resume=false`, then
    FAILED or interrupted) does not hide a FINISHED result."""
    return max(runs, key=_rank, default=None)


def latest_runs_by_key(client, experiment_id: str, filter_string: str = "") -> dict[str, Any]:
    """{run key: the run of that key (`run_of_key`)} over the experiment's runs that carry a
    `run_key` tag, optionally filtered (an MLflow filter string). The one query behind
    `find_run_by_key` (train: reuse or resume) and `sweeps.sweep_records.latest_by_key`
    (sweeps.run: skip or relaunch)."""
    by_key: dict[str, list] = {}
    token = None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string=filter_string, max_results=1000, page_token=token
        )
        for run in page:
            key = run.data.tags.get("run_key")
            if key:
                by_key.setdefault(key, []).append(run)
        token = page.token
        if not token:
            return {key: run_of_key(runs) for key, runs in by_key.items()}


def find_run_by_key(client, experiment_id: str, run_key: str):
    """The run of `run_key` in the experiment (`run_of_key`), or None."""
    found = latest_runs_by_key(client, experiment_id, f"tags.run_key = '{run_key}'")
    return found.get(run_key)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'model': {'d_model': 64}} -> {'model.d_model': 64}; lists stay values."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def log_params(client, run_id: str, params: dict[str, Any]) -> None:
    """Log params in chunks; skips keys already logged (a resumed run keeps its params)."""
    from mlflow.entities import Param

    existing = client.get_run(run_id).data.params
    items = [
        Param(k, "None" if v is None else str(v)[:MAX_PARAM_VALUE_CHARS])
        for k, v in sorted(params.items())
        if k not in existing
    ]
    for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
        client.log_batch(run_id, params=items[i : i + MAX_PARAMS_PER_BATCH])


def set_tags(client, run_id: str, tags: dict[str, Any]) -> None:
    from mlflow.entities import RunTag

    items = [RunTag(k, str(v)) for k, v in tags.items() if v is not None]
    for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
        client.log_batch(run_id, tags=items[i : i + MAX_PARAMS_PER_BATCH])


def git_commit() -> str:
    """The project's HEAD commit, with `-dirty` when tracked files differ; 'unknown' outside git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "diff", "--quiet", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, timeout=5
        ).returncode
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha + ("-dirty" if dirty == 1 else "")) if sha else "unknown"
