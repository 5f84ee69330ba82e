"""Step-time cost of MLflow logging against a real `mlflow server` on 127.0.0.1.

    python -m benchmarks.logging_overhead                      # starts a server in a temp dir
    python -m benchmarks.logging_overhead --uri http://127.0.0.1:5000 --steps 2000

A simulated training step of `--step-ms` (10 ms: a small ladder point on an H100/H200) logs
what `training.trainer` logs: every `--log-every` steps `train_loss`, `lr`, `tokens_per_sec`,
`mfu`, every `--eval-every` steps `val_loss`, and commits (waits until the store holds
everything) every `--commit-every` steps, as before a checkpoint. Three modes side by side in
one process, interleaved in rounds of `--round-steps` so that load on the machine hits each
alike (the median round is reported):

- `none`: the step alone;
- `sync`: `training.metric_log.MetricLog(background=False)`: each log window written on the
  loop's thread (what the trainer did before the writer thread);
- `background`: `MetricLog()` as the trainer uses it: a writer thread, the loop only queues.

Two kinds of simulated step: `sleep` (the host waits, as it does for a GPU step) and `spin` (a
fixed amount of Python work holding the GIL, calibrated to `--step-ms`: the worst case for a
writer thread, which delays it). Prints a markdown table: the median step time, its ratio to
`none`, and the time the loop's thread spends inside the logging calls per step (the cost that
load on the machine does not blur).
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

from training import tracking
from training.metric_log import MetricLog

MODES = ("none", "sync", "background")


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
    """Iterations of an empty Python loop that take `seconds` on this machine now."""
    n = 200_000
    t0 = time.perf_counter()
    for _ in range(n):
        pass
    return max(1, int(n * seconds / (time.perf_counter() - t0)))


def simulated_step(kind: str, seconds: float, spins: int) -> None:
    if kind == "sleep":
        time.sleep(seconds)
        return
    for _ in range(spins):  # a fixed amount of GIL-holding work: a writer thread delays it
        pass


def one_round(log: MetricLog | None, args, kind: str, first_step: int) -> tuple[float, float]:
    """(seconds per step, seconds per step inside the logging calls) over `args.round_steps`
    steps after `first_step`."""
    in_calls = 0.0
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
    return (time.perf_counter() - t0) / args.round_steps, in_calls / args.round_steps


def measure(uri: str, args) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """{(kind, mode): [(s per step, s per step in logging calls) per round]}, the modes
    interleaved round by round."""
    client = tracking.client(uri, timeout_s=30.0)
    exp = tracking.ensure_experiment(uri, "logging-overhead")
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for kind in args.kinds:
        logs = {}
        for mode in MODES[1:]:
            run_id = client.create_run(exp, run_name=f"{kind}-{mode}").info.run_id
            logs[mode] = MetricLog(client, run_id, uri, background=mode == "background")
        for r in range(args.rounds):
            for mode in MODES:
                result = one_round(logs.get(mode), args, kind, r * args.round_steps)
                times.setdefault((kind, mode), []).append(result)
        for log in logs.values():
            log.close()
    return times


def table(times: dict[tuple[str, str], list[tuple[float, float]]], args) -> str:
    lines = [
        f"| step | mode | ms per step (median of {args.rounds} rounds) | vs none | "
        "ms per step in logging calls | in calls / step |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for kind in args.kinds:
        base = statistics.median(t for t, _ in times[kind, "none"])
        for mode in MODES:
            step = statistics.median(t for t, _ in times[kind, mode])
            calls = statistics.mean(c for _, c in times[kind, mode])
            lines.append(
                f"| {kind} | {mode} | {step * 1000:.3f} | {step / base:.4f} | "
                f"{calls * 1000:.4f} | {calls / step:.2%} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--uri", help="an MLflow server to use (default: start one in a temp dir)")
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--commit-every", type=int, default=500)
    p.add_argument("--round-steps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--kinds", nargs="+", choices=("sleep", "spin"), default=["sleep", "spin"])
    args = p.parse_args(argv)
    args.spins = spin_iterations(args.step_ms / 1000)
    with tempfile.TemporaryDirectory() as tmp:
        server, uri = (None, args.uri) if args.uri else start_server(Path(tmp))
        try:
            times = measure(uri, args)
        finally:
            if server is not None:
                server.terminate()
                server.wait()
    print(
        f"{args.step_ms} ms steps, log every {args.log_every}, val_loss every "
        f"{args.eval_every}, commit every {args.commit_every}; server {uri}"
    )
    print(table(times, args))


if __name__ == "__main__":
    main()
