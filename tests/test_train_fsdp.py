"""`train.parallel=fsdp` on 2 CPU ranks (gloo, torchrun): the same losses as one process for
every model family, sharded checkpoints that survive a kill -9 of one rank and move between
world sizes bit for bit. Each test launches real `python -m torch.distributed.run` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from train_helpers import (
    HANG_DEADLINE_S,
    LONG,
    ROOT,
    compose,
    history,
    run_launcher,
    runs_df,
    steps_once,
    uri_of,
    wait_for_file,
)

pytestmark = pytest.mark.usefixtures("one_thread")

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
FAMILIES = {
    "decoder": [],
    "encoder": ["model=vanilla", "model.family=encoder"],
    "encoder_decoder": ["model=vanilla_seq2seq"],
}
FIFTY_STEPS = ["train.tokens=12800", "train.log_every=1", "train.eval_every=25"]


def torchrun(args: list[str]) -> subprocess.CompletedProcess:
    out = run_launcher([*TORCHRUN, *args], timeout_s=HANG_DEADLINE_S, cwd=ROOT, env=ENV)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


def losses(overrides: list[str]) -> tuple[list[tuple[int, float]], float]:
    """(the train_loss history, final_val_loss) of the experiment's one run."""
    row = runs_df(overrides).iloc[0]
    assert row["status"] == "FINISHED"
    return history(uri_of(overrides), row["run_id"], "train_loss"), row["metrics.final_val_loss"]


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fsdp_and_ddp_on_two_ranks_train_the_losses_of_one_process(lab, tmp_path, family):
    """50 steps in fp32: every step's train loss and the final val loss of FSDP, and of DDP, on
    2 ranks within 1e-5 of one process's (the same global batch; only the reductions' rounding
    differs). The encoder's masks and the encoder-decoder's corrupted spans are drawn per
    window from its global index in the data order, so the 2 ranks corrupt one process's batch
    exactly; and every row weighs the same in the loss, so the mean of the ranks' means is the
    batch's mean."""
    from training.train import train

    base = [*lab, *FAMILIES[family], *FIFTY_STEPS, "train.precision=fp32"]
    plain = [*base, "tracking.experiment=plain", f"paths.runs_dir={tmp_path / 'p'}"]
    train(compose(*plain))
    ddp = [*base, "tracking.experiment=ddp", f"paths.runs_dir={tmp_path / 'd'}"]
    torchrun(["-m", "training.train", *ddp, "train.parallel=ddp"])
    sharded = [*base, "train.parallel=fsdp"]
    torchrun(["-m", "training.train", *sharded])
    row = runs_df(sharded).iloc[0]
    assert row["params.world_size"] == "2" and row["params.hardware.parallel"] == "fsdp"
    assert runs_df(ddp).iloc[0]["params.hardware.parallel"] == "ddp"
    want, want_val = losses(plain)
    for got, got_val in (losses(sharded), losses(ddp)):
        assert [s for s, _ in got] == [s for s, _ in want] and len(got) == 50
        assert max(abs(a - b) for (_, a), (_, b) in zip(got, want, strict=True)) < 1e-5
        assert abs(got_val - want_val) < 1e-5
    shards = list((tmp_path / "runs").glob("*/last.pt.shards-*"))
    assert len(shards) == 1 and len(list(shards[0].glob("*.distcp"))) == 2  # one file per rank
    if family == "decoder":  # the Hugging Face export reads the 2 ranks' shards whole
        _export_matches(shards[0].parent / "last.pt", next((tmp_path / "p").glob("*/last.pt")))


def _export_matches(sharded: Path, plain: Path) -> None:
    """The model exported from the sharded checkpoint holds the unsharded run's weights (up to
    the losses' rounding) and gives its own logits through transformers."""
    import torch
    import transformers

    from models.export_hf import load_checkpoint_model, main

    got, want = load_checkpoint_model(sharded), load_checkpoint_model(plain)
    for (name, a), (_, b) in zip(got.state_dict().items(), want.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0, msg=name)
    out = sharded.parent / "hf"
    main(["--checkpoint", str(sharded), "--out", str(out)])
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    idx = torch.randint(0, got.cfg.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(hf(idx).logits, got(idx)[0], atol=1e-4, rtol=0)


def _rank_pid(launcher: subprocess.Popen, rank: int) -> int:
    """The pid of torchrun's worker `rank` (its child whose environment says RANK=<rank>)."""
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
    for pid in children:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in env:
            return int(pid)
    raise AssertionError(f"no rank {rank} among torchrun's children {children}")


@pytest.mark.slow
def test_kill_9_of_one_rank_then_rerun_resumes_to_the_uninterrupted_losses(lab, tmp_path):
    """kill -9 of rank 1 after the first sharded checkpoint: the job ends (no hang), the same
    command resumes the same MLflow run with every metric step once, and its losses are bit
    for bit those of an uninterrupted FSDP run."""
    from training.checkpoint import load_checkpoint

    long = [*lab, *LONG, "train.parallel=fsdp"]
    output = tmp_path / "killed.log"
    with open(output, "wb") as sink:
        launcher = subprocess.Popen(
            [*TORCHRUN, "-m", "training.train", *long],
            cwd=ROOT,
            env=ENV,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        last = wait_for_file(tmp_path / "runs", "*/last.pt", launcher, output, HANG_DEADLINE_S)
        os.kill(_rank_pid(launcher, 1), signal.SIGKILL)
        t0 = time.monotonic()
        code = launcher.wait(timeout=120)  # the other rank is stopped: no hang
    finally:
        if launcher.poll() is None:
            launcher.terminate()
            launcher.wait()
    assert code != 0 and time.monotonic() - t0 < 120
    killed_at = load_checkpoint(last)["step"]
    assert 0 < killed_at < 200, "the job must be killed mid-way for this test to mean anything"
    killed_run = runs_df(long).iloc[0]["run_id"]

    torchrun(["-m", "training.train", *long])  # the same command
    df = runs_df(long)
    assert len(df) == 1 and df.iloc[0]["run_id"] == killed_run
    steps_once(uri_of(long), killed_run)
    clean = [*long, "tracking.experiment=clean", f"paths.runs_dir={tmp_path / 'c'}"]
    torchrun(["-m", "training.train", *clean])
    assert losses(long) == losses(clean)  # every logged train loss and the final val loss


def _ranks_as_srun_starts_them(args: list[str], log: Path) -> list[subprocess.Popen]:
    """The 2 ranks of `python -m training.train *args` as SLURM's srun starts a multi-task
    point (sweeps.job: each task exports the rendezvous, submitit's TorchDistributedEnvironment):
    plain processes with RANK, WORLD_SIZE and MASTER_ADDR/PORT, and no launcher watching them,
    so a rank that outlives a dead peer must end by itself. Their output goes to `log`."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    with open(log, "ab") as sink:
        for rank in range(2):
            env = {**ENV, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"}
            env |= {"LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "training.train", *args],
                    cwd=ROOT,
                    env=env,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            )
    return procs


def _wait_all(procs: list[subprocess.Popen], timeout_s: float, log: Path) -> list[int]:
    """The ranks' exit codes; fails (after stopping them) if any still runs after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    try:
        return [p.wait(timeout=max(0.0, deadline - time.monotonic())) for p in procs]
    except subprocess.TimeoutExpired:
        pytest.fail(f"a rank still runs after {timeout_s} s:\n{log.read_text()[-3000:]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.slow
def test_kill_9_of_rank_0_ends_the_other_rank_by_itself_and_the_rerun_resumes(lab, tmp_path):
    """Rank 0 (the MLflow writer, the rendezvous' store) dies by kill -9 after the first
    sharded checkpoint, its ranks started as srun starts them (no launcher to stop the other):
    rank 1 ends by itself within 120 s, non-zero. The run is left RUNNING (no one was left to
    mark it); the same command resumes it from the checkpoint, FINISHED in the same MLflow run
    with every metric step once."""
    from training.checkpoint import load_checkpoint

    long = [*lab, *LONG, "train.parallel=fsdp"]
    log = tmp_path / "killed.log"
    ranks = _ranks_as_srun_starts_them(long, log)
    try:
        last = wait_for_file(tmp_path / "runs", "*/last.pt", ranks[1], log, HANG_DEADLINE_S)
        ranks[0].kill()  # SIGKILL
        t0 = time.monotonic()
        codes = _wait_all(ranks, 120, log)  # rank 1 on its own: no hang
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert time.monotonic() - t0 < 120 and codes[1] != 0, log.read_text()[-3000:]
    killed_at = load_checkpoint(last)["step"]
    assert 0 < killed_at < 200, "the job must be killed mid-way for this test to mean anything"
    df = runs_df(long)
    assert len(df) == 1 and df.iloc[0]["status"] == "RUNNING"
    killed_run = df.iloc[0]["run_id"]

    rerun = tmp_path / "rerun.log"
    assert _wait_all(_ranks_as_srun_starts_them(long, rerun), HANG_DEADLINE_S, rerun) == [0, 0]
    assert f"from step {killed_at}" in rerun.read_text()
    df = runs_df(long)
    assert len(df) == 1 and df.iloc[0]["run_id"] == killed_run
    assert df.iloc[0]["status"] == "FINISHED"
    steps = steps_once(uri_of(long), killed_run)
    assert steps["train_loss"] == list(range(1024, 51201, 1024))  # each log step (tokens), once


def _states(*args: str, ranks: int) -> str:
    script = str(ROOT / "tests" / "fsdp_states.py")
    if ranks == 2:
        return torchrun([script, *args]).stdout
    out = subprocess.run(
        [sys.executable, script, *args], cwd=ROOT, env=ENV, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.slow
def test_sharded_checkpoint_moves_from_two_ranks_to_one_and_back_exactly(tmp_path):
    """Shards written by 2 ranks load in one process, and one process's in 2 ranks, with every
    parameter and AdamW moment bit for bit as the writer held it (gathered: REF)."""
    a, b = tmp_path / "a", tmp_path / "b"
    out = _states("train", "3", str(a), f"{a}.pt", ranks=2)
    _held_is_one_rank_share(out, ranks=2)
    _states("check", str(a), f"{a}.pt", ranks=1)  # 2 -> 1
    _states("train", "2", str(b), f"{b}.pt", str(a), ranks=1)  # 1 process continues them
    _states("check", str(b), f"{b}.pt", ranks=2)  # 1 -> 2
    with pytest.raises(AssertionError):  # the check can fail: another state is not REF
        _states("check", str(a), f"{b}.pt", ranks=1)


def _held_is_one_rank_share(out: str, ranks: int) -> None:
    """What each rank measured it holds: its shards, within 5% of the planner's share (FSDP2
    splits a dimension unevenly when it does not divide), all ranks' together the whole."""
    from models import ModelConfig
    from models.accounting import count_params
    from training.memory_plan import step_memory

    cfg = ModelConfig.from_dict(
        {"d_model": 32, "n_layers": 2, "n_heads": 2, "vocab_size": 64, "max_seq_len": 16}
    )
    n = count_params(cfg).total
    share = step_memory(cfg, 16, 2, "fp32", "cpu", "fsdp", world=ranks).optimizer
    held = [tuple(map(int, line.split()[3:5])) for line in out.splitlines() if " holds " in line]
    assert len(held) == ranks
    assert sum(p for p, _ in held) == 4 * n and sum(o for _, o in held) == 8 * n
    assert all(abs(o - share) <= 0.05 * share for _, o in held), (held, share)


@pytest.mark.slow
def test_a_run_continues_from_two_ranks_on_one_process(lab, tmp_path):
    """The run trained on 2 ranks and killed after a checkpoint continues in one process from
    that step (the run key does not depend on the world size), FINISHED in the same MLflow run
    with every step once and losses within 1e-5 of the uninterrupted run's."""
    from training.train import train

    long = [*lab, *LONG, "train.parallel=fsdp", "train.precision=fp32"]
    output = tmp_path / "killed.log"
    with open(output, "wb") as sink:
        launcher = subprocess.Popen(
            [*TORCHRUN, "-m", "training.train", *long],
            cwd=ROOT,
            env=ENV,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_file(tmp_path / "runs", "*/last.pt", launcher, output, HANG_DEADLINE_S)
    finally:
        launcher.terminate()  # torchrun stops both ranks
        launcher.wait(timeout=120)
    killed_run = runs_df(long).iloc[0]["run_id"]
    resumed = train(compose(*long))
    assert resumed.run_id == killed_run and not resumed.reused
    steps_once(uri_of(long), killed_run)
    clean = [*long, "tracking.experiment=clean", f"paths.runs_dir={tmp_path / 'c'}"]
    uninterrupted = train(compose(*clean))
    assert abs(resumed.final_val_loss - uninterrupted.final_val_loss) < 1e-5


def test_parallel_settings_keep_the_run_key_and_fp16_is_refused_with_fsdp():
    from training.config import ConfigError, TrainConfig
    from training.keys import run_key

    plain = {"train": TrainConfig().to_dict()}
    sharded = {"train": TrainConfig(parallel="fsdp", activation_checkpointing=True).to_dict()}
    assert run_key(plain) == run_key(sharded)  # the same updates: one run, any world size
    with pytest.raises(ConfigError, match=r"^train\.precision: fp16 with train\.parallel=fsdp"):
        TrainConfig(parallel="fsdp", precision="fp16")


def test_a_shard_folder_counts_once_its_checkpoint_file_names_it(tmp_path):
    """The file is the commit: folders of saves killed before it, and those a newer save
    replaced, are removed; the named one is kept."""
    import torch

    from training import checkpoint

    committed = checkpoint.shards_name("last.pt", 20, "aa")
    for name in (committed, checkpoint.shards_name("last.pt", 40, "bb"), "tokens_8.pt.shards-2-cc"):
        (tmp_path / name).mkdir()
    checkpoint.save_checkpoint(tmp_path / "last.pt", {"shards": committed, "step": 20})
    torch.save({"model": {}, "step": 2}, tmp_path / "tokens_8.pt")  # a ddp branch checkpoint
    assert checkpoint.shards_of(tmp_path / "last.pt") == committed
    removed = checkpoint.remove_unreferenced_shards(tmp_path)
    assert sorted(p.name for p in removed) == ["last.pt.shards-40-bb", "tokens_8.pt.shards-2-cc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [committed, "last.pt", "tokens_8.pt"]
    )
    newer = checkpoint.shards_name("last.pt", 60, "dd")
    (tmp_path / newer).mkdir()
    checkpoint.remove_replaced_shards(tmp_path, "last.pt", newer)
    assert not (tmp_path / committed).exists() and (tmp_path / newer).is_dir()
