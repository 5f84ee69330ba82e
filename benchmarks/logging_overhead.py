"""Step-time cost of MLflow logging against a real `mlflow server` on 127.0.0.1.

    python -m benchmarks.logging_overhead                      # starts a server in a temp dir
    python -m benchmarks.logging_overhead --commit-every 0     # no commits
    python -m benchmarks.logging_overhead --uri http://127.0.0.1:5000 --rounds 4

A simulated training step of `--step-ms` (10 ms: a small ladder point on an H100/H200) logs
what `training.trainer` logs: every `--log-every` steps `train_loss`, `lr`, `tokens_per_sec`,
`mfu`, every `--eval-every` steps `val_loss`, and commits (waits until the store holds
everything) every `--commit-every` steps, as before a checkpoint. Four modes side by side in
one process, interleaved in rounds of `--round-steps` so that load on the machine hits each
alike (the median round is reported):

- `none`: the step alone;
- `sync`: `training.metric_log.MetricLog(background=False)`: each log window written on the
  loop's thread;
- `per-window`: `MetricLog(interval_s=0)`: a writer thread, each log window handed to it and
  sent as its own request (the trainer's writer before windows were coalesced);
- `coalesced`: `MetricLog()` as the trainer uses it: windows handed to the writer at most once
  per `training.metric_log.HAND_OVER_INTERVAL_S`, one request each.

After each round, outside its timing, the round's log is committed, so that no writer works in
another mode's round; the writer's CPU column counts that last write too.

Two kinds of simulated step: `sleep` (the host waits, as it does for a GPU step) and `spin` (a
fixed amount of Python work holding the GIL, calibrated to `--step-ms`: the worst case for a
writer thread, which delays it). Prints a markdown table: the median step time and its ratio to
`none`; the time the loop's thread spends inside the logging calls and the CPU time of the
other threads (the writer's, which holds the GIL while it runs Python) per step, the two costs
that load on the machine does not blur; their sum as a share of a `--step-ms` step (what a step
that holds the GIL would lose to logging: an upper bound, since the writer releases the GIL
in its socket calls); and the requests sent per 100 steps.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlflow.entities import Metric

from training import tracking
from training.metric_log import MetricLog

MODES = ("none", "sync", "per-window", "coalesced")
LOG_ARGS = {"sync": {"background": False}, "per-window": {"interval_s": 0.0}, "coalesced": {}}


class CountingClient:
    """The client, counting its `log_batch` requests."""

    def __init__(self, client):
        self.client, self.requests = client, 0

    def log_batch(self, *args, **kwargs):
        self.requests += 1
        return self.client.log_batch(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.client, name)


def start_server(folder: Path) -> tuple[subprocess.Popen, str]:
    """`mlflow server` on a free port of 127.0.0.1 over a SQLite store in `folder`, answering."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1"]
        + ["--port", str(port), "--workers", "1"]
        + ["--backend-store-uri", f"sqlite:///{folder / 'bench.db'}"]
        + ["--artifacts-destination", str(folder / "artifacts")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            tracking.check_reachable(uri, timeout_s=1)
            return server, uri
        except tracking.TrackingUnavailable:
            if server.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def spin_iterations(seconds: float) -> int:
    """Iterations of an empty Python loop that take `seconds` of CPU time on this machine (CPU
    time: the machine's load stretches the wall time, not the work)."""
    n = 2_000_000
    t0 = time.thread_time()
    for _ in range(n):
        pass
    return max(1, int(n * seconds / (time.thread_time() - t0)))


def simulated_step(kind: str, seconds: float, spins: int) -> None:
    if kind == "sleep":
        time.sleep(seconds)
        return
    for _ in range(spins):  # a fixed amount of GIL-holding work: a writer thread delays it
        pass


def one_round(log: MetricLog | None, args, kind: str, first_step: int) -> tuple[float, ...]:
    """Per step over `args.round_steps` steps after `first_step`: (seconds, seconds inside the
    logging calls, CPU seconds of the other threads, requests)."""
    in_calls = 0.0
    requests = log._client.requests if log is not None else 0
    cpu_other = time.process_time() - time.thread_time()
    t0 = time.perf_counter()
    for step in range(first_step + 1, first_step + args.round_steps + 1):
        simulated_step(kind, args.step_ms / 1000, args.spins)
        if log is None:
            continue
        t = time.perf_counter()
        tokens = step * 65536
        if step % args.log_every == 0:
            log.add(tokens, train_loss=3.0, lr=1e-3, tokens_per_sec=6.5e6, mfu=0.4)
        if step % args.eval_every == 0:
            log.add(tokens, val_loss=3.1)
        if step % args.log_every == 0:
            log.send()
        if args.commit_every and step % args.commit_every == 0:
            log.commit()
        in_calls += time.perf_counter() - t
    seconds = time.perf_counter() - t0
    if log is not None:
        log.commit()  # untimed: the writer is idle before the next mode's round
        requests = log._client.requests - requests
    cpu_other = time.process_time() - time.thread_time() - cpu_other
    return tuple(x / args.round_steps for x in (seconds, in_calls, cpu_other, requests))


def measure(uri: str, args) -> dict[tuple[str, str], list[tuple[float, ...]]]:
    """{(kind, mode): [one_round's tuple per round]}, the modes interleaved round by round."""
    client = tracking.client(uri, timeout_s=30.0)
    exp = tracking.ensure_experiment(uri, "logging-overhead")
    times: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    for kind in args.kinds:
        logs = {}
        for mode, log_args in LOG_ARGS.items():
            run_id = client.create_run(exp, run_name=f"{kind}-{mode}").info.run_id
            logs[mode] = MetricLog(CountingClient(client.inner), run_id, uri, **log_args)
        for r in range(args.rounds):
            for mode in MODES:
                result = one_round(logs.get(mode), args, kind, r * args.round_steps)
                times.setdefault((kind, mode), []).append(result)
        for log in logs.values():
            log.close()
    return times


def request_cost(uri: str, sizes=(4, 40, 400, 1000), reps: int = 20) -> str:
    """CPU time of the calling thread per `log_batch` of each size (the GIL a writer holds per
    request, mostly MLflow's and requests' Python; the server's work is another process)."""
    client = tracking.client(uri, timeout_s=30.0).inner
    run_id = client.create_run(tracking.ensure_experiment(uri, "logging-overhead")).info.run_id
    lines = ["| metrics per request | CPU ms per request | CPU us per metric |", "|---:|---:|---:|"]
    for n in sizes:
        cpu = []
        for r in range(reps):
            points = [Metric(f"m{i % 4}", 1.0, 0, (n * reps + r) * 1000 + i) for i in range(n)]
            t = time.thread_time()
            client.log_batch(run_id, metrics=points)
            cpu.append(time.thread_time() - t)
        ms = statistics.median(cpu) * 1000
        lines.append(f"| {n} | {ms:.2f} | {ms / n * 1000:.1f} |")
    return "\n".join(lines)


def table(times: dict[tuple[str, str], list[tuple[float, ...]]], args) -> str:
    lines = [
        f"| step | mode | ms per step (median of {args.rounds} rounds) | vs none | "
        "ms per step in logging calls | writer CPU ms per step | GIL share of a "
        f"{args.step_ms:g} ms step | requests per 100 steps |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in args.kinds:
        base = statistics.median(r[0] for r in times[kind, "none"])
        for mode in MODES:
            step = statistics.median(r[0] for r in times[kind, mode])
            calls, other, requests = (
                statistics.mean(r[i] for r in times[kind, mode]) for i in (1, 2, 3)
            )
            lines.append(
                f"| {kind} | {mode} | {step * 1000:.3f} | {step / base:.4f} | "
                f"{calls * 1000:.4f} | {other * 1000:.4f} | "
                f"{(calls + other) * 1000 / args.step_ms:.2%} | {requests * 100:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--uri", help="an MLflow server to use (default: start one in a temp dir)")
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--commit-every", type=int, default=500)
    p.add_argument("--round-steps", type=int, default=500)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--cost-reps", type=int, default=20, help="requests timed per size")
    p.add_argument("--kinds", nargs="+", choices=("sleep", "spin"), default=["sleep", "spin"])
    args = p.parse_args(argv)
    args.spins = spin_iterations(args.step_ms / 1000)
    with tempfile.TemporaryDirectory() as tmp:
        server, uri = (None, args.uri) if args.uri else start_server(Path(tmp))
        try:
            times = measure(uri, args)
            cost = request_cost(uri, reps=args.cost_reps)
        finally:
            if server is not None:
                server.terminate()
                server.wait()
    print(
        f"{args.step_ms} ms steps, log every {args.log_every}, val_loss every "
        f"{args.eval_every}, commit every {args.commit_every}; server {uri}"
    )
    print(table(times, args))
    print(
        f"\nCPU time of one `log_batch` request, on the calling thread (median of "
        f"{args.cost_reps}):\n"
    )
    print(cost)


if __name__ == "__main__":
    main()
