"""MLflow helpers, run keys, and a real `mlflow server` round trip."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from training import tracking
from training.keys import run_key
from training.metric_log import MetricLog, logged_pairs
from training.ownership import Claim

ROOT = Path(__file__).resolve().parents[1]


def test_uri_defaults_are_absolute(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = tracking.resolve_tracking_uri(None)
    assert uri.startswith("sqlite:////") and uri.endswith("/mlruns.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://example:5000")
    assert tracking.resolve_tracking_uri(None) == "http://example:5000"
    monkeypatch.chdir(tmp_path)
    assert tracking.resolve_tracking_uri("sqlite:///rel.db") == f"sqlite:///{tmp_path / 'rel.db'}"


def test_run_key_ignores_tracking_and_cadence_only():
    cfg = {"model": {"d_model": 64}, "train": {"tokens": 2e6, "lr": 1e-3, "log_every": 10}}
    same = {
        "model": {"d_model": 64},
        "train": {"tokens": 2000000, "lr": 1e-3, "log_every": 50},
        "tracking": {"uri": "x"},
        "paths": {"runs_dir": "/y"},
    }
    assert run_key(cfg) == run_key(same) and len(run_key(cfg)) == 16
    assert run_key(cfg) != run_key({**cfg, "train": {**cfg["train"], "lr": 2e-3}})


def _create(uri: str) -> str:
    return tracking.ensure_experiment(uri, "race")


def test_fresh_sqlite_store_created_concurrently(tmp_path):
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    with mp.get_context("spawn").Pool(3) as pool:
        ids = pool.map(_create, [uri] * 3)
    assert len(set(ids)) == 1


def test_metric_buffer_batches_and_run_lookup(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    exp = tracking.ensure_experiment(uri, "buffer")
    c = tracking.client(uri)
    run_id = c.create_run(exp).info.run_id
    tracking.set_tags(c, run_id, {"run_key": "abc", "skipped": None})
    tracking.log_params(c, run_id, tracking.flatten({"model": {"d_model": 64, "size": None}}))
    tracking.log_params(c, run_id, {"model.d_model": 64, "train.lr": 0.1})  # re-log: no error
    buf = MetricLog(c, run_id, uri, background=False)
    for step in range(1500):
        buf.add(step * 256, train_loss=1.0 / (step + 1))
    buf.commit()
    hist = c.get_metric_history(run_id, "train_loss")
    assert len(hist) == 1500 and hist[-1].step == 1499 * 256
    assert tracking.find_run_by_key(c, exp, "abc").info.run_id == run_id
    assert tracking.find_run_by_key(c, exp, "nope") is None
    run = c.get_run(run_id)
    assert run.data.params == {"model.d_model": "64", "model.size": "None", "train.lr": "0.1"}
    assert "skipped" not in run.data.tags


def test_metric_log_writes_each_key_and_step_once_and_only_what_the_store_lacks(tmp_path):
    """A reopened run skips the (key, step) pairs the store holds (a gap is filled, not
    skipped past); a pair added twice is written once; `commit` waits for the writer thread."""
    uri = f"sqlite:///{tmp_path / 'once.db'}"
    c = tracking.client(uri)
    run_id = c.create_run(tracking.ensure_experiment(uri, "once")).info.run_id
    first = MetricLog(c, run_id, uri)
    for step in (256, 512, 1024):  # 768 never reached the store (a killed process)
        first.add(step, train_loss=float(step), lr=1.0)
    first.add(512, val_loss=2.0)
    first.close()
    stored = logged_pairs(c, run_id)
    assert ("val_loss", 512) in stored and ("train_loss", 768) not in stored
    again = MetricLog(c, run_id, uri, stored)
    for step in (256, 512, 768, 1024, 1280):
        again.add(step, train_loss=float(step), lr=1.0)
        again.add(step, train_loss=-1.0)  # the same pair again in one process: dropped
        again.send()
    again.close()
    for key in ("train_loss", "lr"):
        points = [(m.step, m.value) for m in c.get_metric_history(run_id, key)]
        assert sorted(s for s, _ in points) == [256, 512, 768, 1024, 1280], points
    assert all(m.value == m.step for m in c.get_metric_history(run_id, "train_loss"))


def test_a_metric_writer_failure_is_raised_on_the_main_thread(tmp_path):
    class Broken:
        def log_batch(self, run_id, metrics):
            raise OSError(28, "no space left on device")

    log = MetricLog(Broken(), "r", f"sqlite:///{tmp_path / 'x.db'}")
    log.add(256, train_loss=1.0)
    log.send()  # the writer fails in its thread
    with pytest.raises(OSError, match="no space left"):
        log.commit()


def _claim_of(run_key: str, pid: int, start, host: str | None = None) -> Claim:
    now = int(time.time() * 1000) - 1000
    return Claim(run_key, f"t{pid}", host or socket.gethostname(), pid, start, now, now)


def test_a_run_key_claimed_by_a_live_process_is_refused_and_a_dead_ones_claim_is_cleared(
    tmp_path,
):
    """The claim is the store's: a live process's claim on the key (same host: its pid runs
    with the recorded start time) refuses a second claimant with one line naming it; the claim
    of a process that is gone (kill -9) is removed and the key claimed."""
    from training.ownership import Ownership, RunKeyTaken, _start_ticks

    uri = f"sqlite:///{tmp_path / 'claims.db'}"
    exp = tracking.ensure_experiment(uri, "claims")
    c = tracking.client(uri)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        live = _claim_of("k1", sleeper.pid, _start_ticks(sleeper.pid))
        c.set_experiment_tag(exp, live.tag, live.value())
        owner = Ownership(c, exp, "claims", "k1")
        with pytest.raises(RunKeyTaken, match=f"k1 is already being trained .* pid {sleeper.pid}"):
            owner.acquire()
        tags = c.get_experiment(exp).tags
        assert [t for t in tags if t.startswith("trainer.")] == [live.tag]  # its own: deleted
    finally:
        sleeper.kill()
        sleeper.wait()
    other = Ownership(c, exp, "claims", "k1")
    other.acquire()  # the sleeper is gone: its claim is stale
    other.started("run-1")
    tags = c.get_experiment(exp).tags
    (held,) = [t for t in tags if t.startswith("trainer.")]
    assert held == other.claim.tag and '"run_id": "run-1"' in tags[held]
    far = _claim_of("k2", 1, None, host="elsewhere")  # another host: live while it beats
    c.set_experiment_tag(exp, far.tag, far.value())
    with pytest.raises(RunKeyTaken, match="pid 1 on elsewhere"):
        Ownership(c, exp, "claims", "k2").acquire()
    other.release()
    assert not [t for t in c.get_experiment(exp).tags if t.startswith("trainer.k1")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_real_mlflow_server_round_trip(tmp_path):
    port = _free_port()
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    server = subprocess.Popen(
        [
            str(mlflow_bin),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination",
            str(tmp_path / "artifacts"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                tracking.check_reachable(uri, timeout_s=1)
                break
            except tracking.TrackingUnavailable:
                assert server.poll() is None and time.time() < deadline, "server did not start"
                time.sleep(0.5)
        exp = tracking.ensure_experiment(uri, "remote")
        c = tracking.client(uri)
        run_id = c.create_run(exp).info.run_id
        tracking.set_tags(c, run_id, {"run_key": "k1"})
        buf = MetricLog(c, run_id, uri)
        buf.add(512, val_loss=2.5)
        buf.close()
        c.set_terminated(run_id, "FINISHED")
        req = urllib.request.Request(
            f"{uri}/api/2.0/mlflow/runs/search",
            data=json.dumps({"experiment_ids": [exp], "filter": "tags.run_key = 'k1'"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            runs = json.load(resp)["runs"]
        assert [r["info"]["run_id"] for r in runs] == [run_id]
        assert runs[0]["info"]["status"] == "FINISHED"
        (metric,) = runs[0]["data"]["metrics"]
        assert (metric["key"], metric["value"], int(metric["step"])) == ("val_loss", 2.5, 512)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    with pytest.raises(tracking.TrackingUnavailable, match="not reachable"):
        tracking.check_reachable(uri, timeout_s=1)


def test_experiments_open_on_training_runs_in_the_mlflow_ui(tmp_path):
    uri = f"sqlite:///{tmp_path / 'kind.db'}"
    c = tracking.client(uri)
    new = tracking.ensure_experiment(uri, "new")
    assert c.get_experiment(new).tags["mlflow.experimentKind"] == "custom_model_development"
    older = c.create_experiment("older")  # made before the suite tagged its experiments
    assert "mlflow.experimentKind" not in c.get_experiment(older).tags
    assert tracking.ensure_experiment(uri, "older") == older
    assert c.get_experiment(older).tags["mlflow.experimentKind"] == "custom_model_development"
    chosen = c.create_experiment("chosen", tags={"mlflow.experimentKind": "genai_development"})
    tracking.ensure_experiment(uri, "chosen")  # a kind the user chose in the UI is kept
    assert c.get_experiment(chosen).tags["mlflow.experimentKind"] == "genai_development"


def _attempts_store(tmp_path) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """A store with every case of the rule: (uri, experiment id, {key: the run of the key},
    {name: run id} of the runs the assertions name)."""
    uri = f"sqlite:///{tmp_path / 'rule.db'}"
    exp = tracking.ensure_experiment(uri, "rule")
    c = tracking.client(uri)

    def run(key: str, status: str, start: int, loss: float = 2.0) -> str:
        run_id = c.create_run(exp, start_time=start, tags={"run_key": key}).info.run_id
        tracking.log_params(c, run_id, {"n_params_nonembed": 1000, "tokens": 4096})
        if status == "FINISHED":
            c.log_metric(run_id, "final_val_loss", loss, step=4096)
        if status != "RUNNING":
            c.set_terminated(run_id, status)
        return run_id

    run("rerun", "FINISHED", 1000, 2.5)
    rerun = run("rerun", "FINISHED", 2000, 2.4)  # train.resume=false: counted once, the latest
    kept = run("kept", "FINISHED", 1000)
    run("kept", "FAILED", 3000)  # a later rerun that failed does not hide the result
    run("kept", "RUNNING", 4000)
    run("open", "FAILED", 1000)
    killed = run("open", "KILLED", 2000)  # no FINISHED run: the latest attempt
    tied = sorted([run("tie", "FINISHED", 5000), run("tie", "FINISHED", 5000)])
    expected = {"rerun": rerun, "kept": kept, "open": killed, "tie": tied[-1]}
    return uri, exp, expected, {"rerun": rerun, "kept": kept, "killed": killed, "tie": tied[-1]}


def test_one_rule_names_the_run_of_a_key_for_train_sweeps_and_analysis(tmp_path):
    """The latest FINISHED run of a key, else its latest run (ties: the larger run id), in
    training.tracking (train), sweeps.sweep_records (sweeps.run) and analysis.load (reports)."""
    from analysis.data.load import load_mlflow
    from sweeps import sweep_records

    uri, exp, expected, named = _attempts_store(tmp_path)
    rerun, kept, killed, tie = named["rerun"], named["kept"], named["killed"], named["tie"]
    c = tracking.client(uri)
    assert {k: tracking.find_run_by_key(c, exp, k).info.run_id for k in expected} == expected
    records = sweep_records.latest_by_key(uri, exp)
    assert {k: r.run_id for k, r in records.items()} == expected
    assert records["open"].status == "KILLED" and records["kept"].status == "FINISHED"
    loaded = load_mlflow("rule", tracking_uri=uri)
    assert sorted(loaded.frame["run_id"]) == sorted([rerun, kept, tie])
    assert loaded.frame.set_index("run_id").loc[rerun, "loss"] == 2.4
    assert list(loaded.excluded["run_id"]) == [killed]


def _runs_of_keys_by_training(uri: str, exp: str) -> dict[str, str]:
    runs = tracking.latest_runs_by_key(tracking.client(uri), exp)
    return {key: run.info.run_id for key, run in runs.items()}


def _runs_of_keys_by_analysis(uri: str, exp: str) -> dict[str, str]:
    """analysis.load's copy of the rule, through its public loader: the FINISHED runs it
    reports plus the unfinished ones it names as excluded, one per key."""
    from analysis.data.load import load_mlflow

    loaded = load_mlflow("rule", tracking_uri=uri)
    ids = [*loaded.frame["run_id"], *loaded.excluded["run_id"]]
    c = tracking.client(uri)
    return {c.get_run(run_id).data.tags["run_key"]: run_id for run_id in ids}


@pytest.mark.parametrize(
    "runs_of_keys",
    [_runs_of_keys_by_training, _runs_of_keys_by_analysis],
    ids=["training.tracking", "analysis.load"],
)
def test_both_copies_of_the_rule_name_the_same_run_of_each_key(tmp_path, runs_of_keys):
    """analysis keeps its own copy of `run_of_key` (it never imports training code): on one
    store, with reruns, ties, FAILED-after-FINISHED and KILLED-only keys, both copies name the
    same run of every key (docs/contracts.md, "The run of a run key")."""
    uri, exp, expected, _ = _attempts_store(tmp_path)
    assert runs_of_keys(uri, exp) == expected


STORE_CREATION = """
import sys
from training import tracking
import mlflow.store.tracking.sqlalchemy_store  # imported before 'ready': the kill lands in migrations
print("ready", flush=True)
tracking.ensure_experiment(sys.argv[1], "created")
print("done", flush=True)
"""


def _start_store_creation(uri: str) -> tuple[subprocess.Popen, float]:
    proc = subprocess.Popen(
        [sys.executable, "-c", STORE_CREATION, uri],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc, time.monotonic()


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, fractions",
    [(signal.SIGKILL, [0.1, 0.25, 0.4, 0.55, 0.7, 0.85]), (signal.SIGINT, [0.15, 0.45, 0.75])],
)
def test_an_interrupt_during_store_creation_leaves_no_store_or_a_complete_one(
    tmp_path, sig, fractions
):
    """MLflow migrates a new SQLite store for ~1-2.5 s; a store killed inside that (kill -9 or
    Ctrl-C) and left half-migrated would fail every later command with a sqlalchemy error
    ("duplicate column name: step"). The offsets are fractions of this machine's own creation
    time, measured first. At every offset the store is absent or complete, and the next
    command uses it."""
    from training import tracking

    proc, t0 = _start_store_creation(f"sqlite:///{tmp_path / 'timed' / 'mlruns.db'}")
    assert "done" in proc.communicate(timeout=120)[0]
    creation_s = time.monotonic() - t0
    interrupted = 0
    for i, fraction in enumerate(fractions):
        db = tmp_path / f"s{i}" / "mlruns.db"
        uri = f"sqlite:///{db}"
        proc, _ = _start_store_creation(uri)
        time.sleep(fraction * creation_s)
        proc.send_signal(sig)
        rest = proc.communicate(timeout=60)[0]
        interrupted += "done" not in rest
        assert not db.exists() or db.stat().st_size > 0
        exp = tracking.ensure_experiment(uri, "after")  # raised on a half-migrated store
        client = tracking.client(uri)
        run = client.create_run(exp)
        client.log_metric(run.info.run_id, "loss", 1.0, step=3)
        assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [3]
        assert sorted(p.name for p in db.parent.iterdir()) == ["mlruns.db", "mlruns.db.lock"]
    # timing varies from run to run: at least one kill -9 must land inside the migrations.
    # Python runs a Ctrl-C handler only between bytecodes, after a long sqlite call returns, so
    # on a fast machine every SIGINT may come too late; the store must be valid either way.
    if sig == signal.SIGKILL:
        assert interrupted >= 1, "no offset landed before the store was complete"


def test_a_symlink_planted_as_the_store_lock_is_refused_and_its_target_kept(tmp_path):
    import errno

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    (tmp_path / "mlruns.db.lock").symlink_to(precious)
    with pytest.raises(OSError) as err:
        tracking.ensure_experiment(f"sqlite:///{tmp_path / 'mlruns.db'}", "x")
    assert err.value.errno == errno.ELOOP and err.value.filename == str(tmp_path / "mlruns.db.lock")
    assert precious.read_text() == "keep me\n" and not (tmp_path / "mlruns.db").exists()


def test_store_write_error_reads_the_store_layers_only():
    """A full or read-only store is told from the exceptions MLflow raises over the database's
    (issue 45); a ConfigError that quotes the OS's words about a folder is not the store's."""
    import errno
    import sqlite3

    from mlflow.exceptions import MlflowException

    from training.config import ConfigError
    from training.tracking import store_write_error

    def raised(make):
        try:
            make()
        except Exception as e:
            return e

    def full():
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as e:
            raise MlflowException("(sqlite3.OperationalError) database or disk is full") from e

    assert store_write_error(raised(full)) == "database or disk is full"
    readonly = sqlite3.OperationalError("attempt to write a readonly database")
    assert store_write_error(readonly) == "attempt to write a readonly database"
    assert store_write_error(OSError(errno.ENOSPC, "x")) == "No space left on device"
    folder = ConfigError("paths.runs_dir: cannot create a folder in /x (Read-only file system)")
    assert store_write_error(folder) is None
    assert store_write_error(MlflowException("RESOURCE_DOES_NOT_EXIST: no run")) is None
