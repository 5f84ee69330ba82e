"""Sweeps on a live SLURM cluster, and the pieces of the SLURM launcher that need none.

The tests marked `slurm` run `python -m sweeps.run ... hydra/launcher=slurm` as a user would, on
a real cluster (`.ci/run` brings a single-node one up with `.ci/slurm-up.sh`: slurmctld, slurmd,
slurmdbd with MariaDB, munge) against a real `mlflow server` given by
SCALING_LAB_TEST_TRACKING_URI, and read the outcome back from MLflow, `squeue`/`sacct` and the
jobs' logs. Without a cluster (no `sinfo`, or slurmctld not answering) or without that server
they skip, saying which: `python -m pytest -q` runs them only where both exist, and
`python -m pytest -m slurm` runs only them. Checkpoints, caches and job folders live in the
test's tmp dir, which on one node is the "shared storage" every job sees.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACKING_ENV = "SCALING_LAB_TEST_TRACKING_URI"
TEXT = (
    "The quick brown fox jumps over the lazy dog. A scaling law relates loss to compute. "
    "Attention is all you need, said the paper, and the block became the standard. "
)


def _why_no_cluster() -> str | None:
    # the variable first: with SLURM's clients installed but no controller, sinfo takes 9 s
    if not os.environ.get(TRACKING_ENV):
        return f"no tracking server for the SLURM jobs: set {TRACKING_ENV}=http://host:port"
    if shutil.which("sinfo") is None:
        return "no SLURM cluster: `sinfo` is not on PATH (.ci/slurm-up.sh brings one up)"
    try:
        up = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return "no SLURM cluster: `sinfo` got no answer in 10 s"
    if up.returncode != 0:
        return f"no SLURM cluster: sinfo says {up.stderr.strip()[:200]}"
    return None


_NO_CLUSTER = _why_no_cluster()
needs_cluster = pytest.mark.skipif(_NO_CLUSTER is not None, reason=str(_NO_CLUSTER))


def _sweep_file(axes: str) -> str:
    return f"""
axes:
{axes}
fixed:
  data.source: text
  data.tokenizer: byte
  data.eval_tokens: 2048
  data.val_fraction: 0.3
  train.batch_tokens: 2048
  train.seq_len: 64
  train.eval_every: 100000
  train.log_every: 5
"""


@pytest.fixture
def site(tmp_path, request):
    """A corpus, a sweep folder, the environment and the common command of one test."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(20):
        (corpus / f"doc{i}.txt").write_text(f"document {i}. " + TEXT * 40)
    (tmp_path / "sweep").mkdir()
    env = {
        **os.environ,
        "SCALING_LAB_RUNS_DIR": str(tmp_path / "runs"),
        "SCALING_LAB_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    experiment = f"slurm-{request.node.name}-{uuid.uuid4().hex[:8]}"  # the server outlives tests

    def cmd(sweep: str, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "sweeps.run",
            "--config-dir",
            str(tmp_path),
            f"sweep={sweep}",
            f"data.path={corpus}",
            "hydra/launcher=slurm",
            "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.mem_gb=1",
            "hydra.launcher.timeout_min=15",
            "hydra.launcher.poll_s=1",
            f"tracking.uri={os.environ.get(TRACKING_ENV)}",
            f"tracking.experiment={experiment}",
            *extra,
        ]

    yield tmp_path, env, experiment, cmd
    # a test that failed or timed out leaves no job behind (the sweeps run in tmp_path)
    queue = subprocess.run(["squeue", "-h", "-o", "%A|%Z"], capture_output=True, text=True)
    mine = {
        j
        for j, _, d in (ln.partition("|") for ln in queue.stdout.split())
        if d.startswith(str(tmp_path))
    }
    if mine:
        subprocess.run(["scancel", *sorted(mine)])


def _client():
    from mlflow.tracking import MlflowClient

    return MlflowClient(os.environ[TRACKING_ENV])


def _runs(experiment: str) -> list:
    exp = _client().get_experiment_by_name(experiment)
    return [] if exp is None else _client().search_runs([exp.experiment_id], max_results=1000)


def _children(experiment: str) -> list:
    return [r for r in _runs(experiment) if "run_key" in r.data.tags]


def _job_logs(tmp: Path, pattern: str = "*_log.out") -> str:
    return "".join(p.read_text() for p in sorted((tmp / "runs" / "multirun").rglob(pattern)))


def _wait_for_training(experiment: str, run_key_tokens: int, timeout_s: float = 180):
    """The RUNNING child training `run_key_tokens` tokens once it has logged a train loss."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for r in _children(experiment):
            tokens = int(float(r.data.params.get("train.tokens", 0)))
            if (
                r.info.status == "RUNNING"
                and tokens == run_key_tokens
                and "train_loss" in r.data.metrics
            ):
                return r
        time.sleep(1)
    raise AssertionError(f"no child run training {run_key_tokens} tokens within {timeout_s} s")


def _squeue_state(job_id: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-r", "-o", "%T", "-j", job_id], capture_output=True, text=True
    )
    return out.stdout.strip()


# ---------------------------------------------------------------- on a live cluster
@pytest.mark.slurm
@needs_cluster
def test_tiny_sweep_one_finished_child_per_point(site):
    tmp, env, experiment, cmd = site
    (tmp / "sweep" / "slurm_grid.yaml").write_text(
        _sweep_file("  model.size: [2e4, 6e4]\n  train.tokens: [16384, 32768]")
    )
    out = subprocess.run(
        cmd("slurm_grid"), env=env, cwd=tmp, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    children = _children(experiment)
    assert len(children) == 4
    assert {r.info.status for r in children} == {"FINISHED"}
    assert len({r.data.tags["run_key"] for r in children}) == 4
    jobs = {r.data.tags.get("slurm_job_id") for r in children}
    assert None not in jobs and len(jobs) == 4  # each point trained in its own array task
    parents = [r for r in _runs(experiment) if "run_key" not in r.data.tags]
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    # torch threads from the allocation (1 CPU per task here), not from the machine's cores
    assert _job_logs(tmp).count("torch threads: 1 (1 CPUs allocated)") == 4


@pytest.mark.slurm
@needs_cluster
def test_scancel_marks_the_point_and_a_rerun_resumes_exactly_it(site):
    tmp, env, experiment, cmd = site
    (tmp / "sweep" / "slurm_two.yaml").write_text(
        _sweep_file("  train.tokens: [16384, 1000000]\n  model.size: [6e4]")
    )
    sweep = subprocess.Popen(
        cmd("slurm_two"),
        env=env,
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        victim = _wait_for_training(experiment, 1000000)
        job = victim.data.tags["slurm_job_id"]
        subprocess.run(["scancel", job], check=True)
        stdout, stderr = sweep.communicate(timeout=300)
    finally:
        sweep.kill()
    assert sweep.returncode == 1, stdout[-3000:] + stderr[-3000:]
    assert "summary" in stdout and "Traceback" not in stdout + stderr
    assert f"SLURM job {job}: interrupted by SIGTERM at step" in stdout.replace("\n", " ")
    by_tokens = {int(float(r.data.params["train.tokens"])): r for r in _children(experiment)}
    killed = by_tokens[1000000]
    assert killed.info.status == "KILLED"
    assert "interrupted by SIGTERM at step" in killed.data.tags["failure_reason"]
    step = int(killed.data.tags["failure_reason"].split("at step ")[1].split(";")[0])
    assert 0 < step < 1000000 // 2048
    assert by_tokens[16384].info.status == "FINISHED"  # the rest of the wave completed
    parents = [r for r in _runs(experiment) if "run_key" not in r.data.tags]
    assert [p.info.status for p in parents] == ["FAILED"]

    again = subprocess.run(
        cmd("slurm_two"), env=env, cwd=tmp, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "(1 jobs)" in again.stderr + again.stdout  # only the cancelled point was submitted
    after = {int(float(r.data.params["train.tokens"])): r for r in _children(experiment)}
    assert len(after) == 2 and after[1000000].info.run_id == killed.info.run_id
    assert after[1000000].info.status == "FINISHED"
    assert after[16384].info.run_id == by_tokens[16384].info.run_id
    assert f"resuming run {killed.data.tags['run_key']} from step {step}" in _job_logs(tmp)
    losses = _client().get_metric_history(killed.info.run_id, "train_loss")
    assert len({m.step for m in losses}) == len(losses)  # each step logged once


@pytest.mark.slurm
@needs_cluster
def test_preempted_point_checkpoints_requeues_and_resumes(site):
    """SIGUSR1 is what SLURM sends before the time limit (and at preemption with
    PreemptParameters=send_user_signal); `scancel --signal=USR1` sends it by hand. The test
    lifts SLURM's 2-minute hold on a requeued job (`scontrol update StartTime=now`) to save time."""
    tmp, env, experiment, cmd = site
    (tmp / "sweep" / "slurm_one.yaml").write_text(
        _sweep_file("  train.tokens: [600000]\n  model.size: [6e4]")
    )
    sweep = subprocess.Popen(
        cmd("slurm_one"),
        env=env,
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        victim = _wait_for_training(experiment, 600000)
        job = victim.data.tags["slurm_job_id"]
        subprocess.run(["scancel", "--signal=USR1", job], check=True)
        deadline = time.monotonic() + 60
        while _squeue_state(job) != "PENDING" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _squeue_state(job) == "PENDING", "the preempted job was not requeued"
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
        stdout, stderr = sweep.communicate(timeout=300)
    finally:
        sweep.kill()
    assert sweep.returncode == 0, stdout[-3000:] + stderr[-3000:]
    children = _children(experiment)
    assert len(children) == 1 and children[0].info.run_id == victim.info.run_id
    assert children[0].info.status == "FINISHED"
    logs = _job_logs(tmp)
    assert "interrupted by SIGUSR1 at step" in logs and "requeueing the job" in logs
    assert f"resuming run {victim.data.tags['run_key']} from step" in logs


@pytest.mark.slurm
@needs_cluster
def test_a_request_no_node_can_satisfy_fails_before_submitting(site):
    tmp, env, experiment, cmd = site
    (tmp / "sweep" / "slurm_grid.yaml").write_text(_sweep_file("  model.size: [2e4]"))
    jobs_before = subprocess.run(
        ["sacct", "-n", "-X", "-a", "-o", "JobID"], capture_output=True, text=True
    ).stdout
    cases = [
        ("hydra.launcher.cpus_per_task=100000", "cpus_per_task=100000"),
        ("hydra.launcher.mem_gb=100000", "mem_gb=100000"),
    ]
    gres = subprocess.run(["sinfo", "-h", "-o", "%G"], capture_output=True, text=True).stdout
    if set(gres.split()) <= {"(null)"}:  # a cluster without GPUs: the GPU preset cannot run
        cases.append(("hydra/launcher=slurm_gpu", "gpus_per_node=1"))
    for override, named in cases:
        out = subprocess.run(
            cmd("slurm_grid", override),
            env=env,
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: hydra.launcher: no node can run")
        assert named in lines[0] and "CPUs" in lines[0]
    jobs_after = subprocess.run(
        ["sacct", "-n", "-X", "-a", "-o", "JobID"], capture_output=True, text=True
    ).stdout
    assert jobs_after == jobs_before  # nothing was submitted
    assert _client().get_experiment_by_name(experiment) is None  # nor recorded


@pytest.mark.slurm
@needs_cluster
def test_ctrl_c_cancels_the_sweeps_jobs_without_a_traceback(site):
    tmp, env, experiment, cmd = site
    # long enough never to finish before the Ctrl-C (an idle node trains 1M tokens in ~10 s)
    (tmp / "sweep" / "slurm_long.yaml").write_text(
        _sweep_file("  train.tokens: [8000000]\n  model.size: [6e4]")
    )
    sweep = subprocess.Popen(
        cmd("slurm_long"),
        env=env,
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell's background job (`cmd &` without job control) ignores SIGINT, and so would
        # the sweep: give it the terminal's default, as a user's Ctrl-C finds it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        victim = _wait_for_training(experiment, 8000000)
        job = victim.data.tags["slurm_job_id"]
        sweep.send_signal(signal.SIGINT)  # what Ctrl-C sends the sweep
        stdout, stderr = sweep.communicate(timeout=120)
    finally:
        sweep.kill()
    assert sweep.returncode == 130, stdout[-3000:] + stderr[-3000:]
    assert f"cancelled the sweep's SLURM jobs: {job}" in stderr
    assert "Traceback" not in stdout + stderr
    deadline = time.monotonic() + 60
    while _squeue_state(job) and time.monotonic() < deadline:
        time.sleep(1)
    assert _squeue_state(job) == "", "the cancelled job is still queued or running"
    parents = [r for r in _runs(experiment) if "run_key" not in r.data.tags]
    assert [p.info.status for p in parents] == ["KILLED"]
    assert parents[0].data.tags["failure_reason"] == "stopped by Ctrl-C (SIGINT)"
    deadline = time.monotonic() + 60  # the job saves its checkpoint and records KILLED
    while _children(experiment)[0].info.status == "RUNNING" and time.monotonic() < deadline:
        time.sleep(1)
    assert _children(experiment)[0].info.status == "KILLED"


@pytest.mark.slurm
@needs_cluster
def test_a_rerun_never_submits_a_point_whose_job_still_runs(site):
    tmp, env, experiment, cmd = site
    # long enough to be still running at the rerun (an idle node trains 1M tokens in ~10 s)
    (tmp / "sweep" / "slurm_long.yaml").write_text(
        _sweep_file("  train.tokens: [8000000]\n  model.size: [6e4]")
    )
    sweep = subprocess.Popen(
        cmd("slurm_long"),
        env=env,
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        job = _wait_for_training(experiment, 8000000).data.tags["slurm_job_id"]
    finally:
        sweep.kill()  # kill -9: the sweep is gone, its job trains on
        sweep.communicate(timeout=30)
    try:
        assert _squeue_state(job) == "RUNNING"
        again = subprocess.run(
            cmd("slurm_long"), env=env, cwd=tmp, capture_output=True, text=True, timeout=300
        )
        out = again.stdout + again.stderr
        assert again.returncode == 0, out[-3000:]
        assert "submitted SLURM array" not in out  # nothing submitted
        assert f"SLURM job {job} still RUNNING" in out.replace("\n", " ")
        assert _squeue_state(job) == "RUNNING"  # the one job, untouched
        assert len(_children(experiment)) == 1
    finally:
        subprocess.run(["scancel", job], check=False)  # the node is free for the next test


def _task_pid(job_id: str, task: int) -> int:
    """The pid of SLURM task `task` of array job `job_id` (`<array>_<index>`, the run's
    slurm_job_id tag) on this node: the python process whose environment holds that job and
    task number (the one-node cluster runs every task)."""
    array, index = job_id.split("_")
    want = {f"SLURM_ARRAY_JOB_ID={array}", f"SLURM_ARRAY_TASK_ID={index}", f"SLURM_PROCID={task}"}
    want = {w.encode() for w in want}
    for proc in Path("/proc").iterdir():
        try:
            env = set((proc / "environ").read_bytes().split(b"\0"))
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if want <= env and b"submitit" in cmdline:
            return int(proc.name)
    raise AssertionError(f"no task {task} of job {job_id} on this node")


def _wait_for_checkpoint(tmp: Path, run) -> None:
    last = tmp / "runs" / run.data.tags["run_key"] / "last.pt"
    deadline = time.monotonic() + 120
    while not last.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert last.exists(), f"no checkpoint at {last} within 120 s"


@pytest.mark.slurm
@needs_cluster
def test_two_task_fsdp_points_train_cancel_and_lose_a_rank_cleanly_and_the_rerun_resumes(site):
    """`hydra/launcher=slurm_multinode` on 1 node x 2 tasks (gloo, train.parallel=fsdp), three
    points in turn: the first trains, one MLflow run written once (rank 0) with world_size 2;
    the second is cancelled (scancel: both ranks checkpoint, the run is KILLED); the third
    loses rank 1 to kill -9, which ends its job (no rank left waiting). The rerun submits only
    the two and resumes each from its sharded checkpoint, every step logged once."""
    tmp, env, experiment, cmd = site
    (tmp / "sweep" / "slurm_fsdp.yaml").write_text(
        _sweep_file("  train.tokens: [16384, 1000000, 1001472]\n  model.size: [6e4]")
        + "  train.parallel: fsdp\n  train.checkpoint_every: 20\n"
    )
    two_tasks = [
        "hydra/launcher=slurm_multinode",
        "hydra.launcher.nodes=1",
        "hydra.launcher.tasks_per_node=2",
        "hydra.launcher.gpus_per_node=null",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=1",
        "hydra.launcher.timeout_min=15",
        "hydra.launcher.poll_s=1",
    ]
    args = [a for a in cmd("slurm_fsdp") if not a.startswith("hydra")] + two_tasks
    sweep = subprocess.Popen(
        args, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        cancelled = _wait_for_training(experiment, 1000000)
        _wait_for_checkpoint(tmp, cancelled)
        subprocess.run(["scancel", cancelled.data.tags["slurm_job_id"]], check=True)
        dead = _wait_for_training(experiment, 1001472)
        _wait_for_checkpoint(tmp, dead)
        dead_job = dead.data.tags["slurm_job_id"]
        os.kill(_task_pid(dead_job, 1), signal.SIGKILL)
        t0 = time.monotonic()
        stdout, stderr = sweep.communicate(timeout=300)
    finally:
        sweep.kill()
    assert time.monotonic() - t0 < 120, "the job that lost a rank did not end"
    assert sweep.returncode == 1, stdout[-3000:] + stderr[-3000:]
    assert "summary" in stdout and "Traceback" not in stdout
    by_tokens = {int(float(r.data.params["train.tokens"])): r for r in _children(experiment)}
    assert len(by_tokens) == 3  # one MLflow run per point, whatever its ranks
    done = by_tokens[16384]
    assert done.info.status == "FINISHED"
    assert done.data.params["world_size"] == "2"
    assert done.data.params["hardware.parallel"] == "fsdp"
    assert by_tokens[1000000].info.status == "KILLED"
    assert "interrupted by SIGTERM at step" in by_tokens[1000000].data.tags["failure_reason"]
    lost = by_tokens[1001472]  # rank 0 saw its peer go: KILLED (resumable), not FAILED
    assert lost.info.status == "KILLED"
    assert lost.data.tags["failure_reason"].startswith("another rank was lost")
    assert _squeue_state(dead_job) == ""

    again = subprocess.run(args, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "(2 jobs)" in again.stderr + again.stdout  # only the two stopped points
    after = {int(float(r.data.params["train.tokens"])): r for r in _children(experiment)}
    logs = _job_logs(tmp)
    for tokens in (1000000, 1001472):
        run = by_tokens[tokens]
        assert after[tokens].info.run_id == run.info.run_id
        assert after[tokens].info.status == "FINISHED"
        assert f"resuming run {run.data.tags['run_key']} from step" in logs
        for key in ("train_loss", "lr"):
            history = _client().get_metric_history(run.info.run_id, key)
            assert len({m.step for m in history}) == len(history)  # each step logged once


# ---------------------------------------------------------------- without a cluster
def test_job_states_lost_or_running():
    from sweeps.slurm import JobStates

    watch = JobStates("7", state_timeout_s=3600)
    assert watch.lost("7_0", {"7_0": "RUNNING"}) is None
    assert watch.lost("7_0", {"7_0": "PENDING"}) is None  # e.g. requeued after preemption
    assert watch.lost("7_0", {}) is None  # unreadable, but not for long yet
    cancelled = watch.lost("7_0", {"7_0": "CANCELLED"})
    assert (cancelled.state, cancelled.status) == ("CANCELLED", "KILLED")
    assert "SLURM job 7_0 CANCELLED" in str(cancelled)
    assert watch.lost("7_1", {"7_1": "NODE_FAIL"}).status == "FAILED"
    assert watch.lost("7_1", {"7_1": "TIMEOUT"}).status == "KILLED"
    impatient = JobStates("7", state_timeout_s=0)
    lost = impatient.lost("7_2", {})  # neither squeue nor sacct knows it: no infinite wait
    assert (lost.state, lost.status) == ("UNKNOWN", "KILLED")
    assert "treated as timed out" in str(lost) and "accounting" in str(lost)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SEARCH = "/api/2.0/mlflow/experiments/search?max_results=1"


def _status_with_host(port: int, host: str, timeout_s: float = 180) -> int:
    """The HTTP status of GET /api/2.0/mlflow/experiments/search on 127.0.0.1:port sent with
    `Host: host`, once the server is up (/health is exempt from the host check)."""
    import http.client

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", SEARCH, headers={"Host": host})
            return conn.getresponse().status
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.parametrize("allowed", [None, "login1:{port}"])
def test_tracking_server_host_check(tmp_path, allowed):
    """The README's tracking-server recipe: compute nodes reach the server by the login node's
    name, which MLflow 3 refuses (403 Invalid Host header) unless it is in --allowed-hosts.
    Reproduced on loopback: a request to 127.0.0.1 carrying `Host: login1:PORT`."""
    port = _free_port()
    cmd = [sys.executable, "-m", "mlflow", "server", "--workers", "1", "--port", str(port)]
    cmd += ["--host", "127.0.0.1", "--backend-store-uri", f"sqlite:///{tmp_path / 'm.db'}"]
    if allowed:
        cmd += ["--allowed-hosts", allowed.format(port=port)]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        statuses = [_status_with_host(port, f"{h}:{port}") for h in ("login1", "127.0.0.1")]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    # --allowed-hosts replaces the default list (localhost, private IPs): list every name used
    assert statuses == ([200, 403] if allowed else [403, 200])
