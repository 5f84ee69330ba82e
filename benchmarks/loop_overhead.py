"""The training loop's host cost per step, besides forward, backward and the optimizer.

    python -m benchmarks.loop_overhead                     # 64 x 1024 tokens, log_every=10
    python -m benchmarks.loop_overhead --steps 300 --reps 3 --out results/benchmarks
    python -m benchmarks.loop_overhead --profile           # where the loop's own time goes

`training.trainer.Trainer` runs exactly as `python -m training.train` does (config, data from a
token memmap, MLflow store, lr schedule, progress, signal checks, metric buffering, the boundary
syncs every `log_every` steps, the final evaluation), except that its one optimizer step
(`Trainer.take_step`) is `noop_step`: it takes the step's micro-batches from the sampler and
copies them to the device, then waits `--step-ms` (a stand-in for the accelerator's step, during
which a prefetching thread makes the next batches) and returns a zero loss. The host time per
step is the loop's wall time less the waits, over the steps. The hand-over of each log window
to MLflow (`MetricLog.send`: a queue put, the write is the writer thread's) is timed on its own
(logging's cost is measured with a real server in `benchmarks.logging_overhead`).

Variants, interleaved in one process (`benchmarks.interleave`):
- `before`: the loop as it was: batches made on demand (`train.prefetch=0`) by `reference_next`,
  the sampler's previous body (a stacked copy, then a widening copy).
- `after`: `train.prefetch` at its default (a background thread) and `BatchSampler.next`.

The sampler alone (`BatchSampler.next` and `reference_next`, one thread) is timed in tokens/s.
Writes `loop_overhead_<device>.json` to `--out`.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from hydra import compose as hydra_compose
from hydra import initialize_config_dir

from benchmarks.harness import ROOT, machine
from benchmarks.interleave import median_ratio, repetitions
from training.data import BatchSampler, write_bin
from training.signals import Signals
from training.step import next_batch
from training.trainer import Trainer

TARGET_MS, TARGET_TOKENS_PER_S = 0.3, 100e6


def reference_next(self):
    """`BatchSampler.next` as it was before the loop was tuned for GPU step rates (kept to
    measure against): the same windows, copied twice."""
    high = len(self.tokens) - self.seq_len - 1
    starts = torch.randint(
        0, high + 1, (self.world_size * self.micro_batch,), generator=self.generator
    )
    mine = starts[self.rank * self.micro_batch : (self.rank + 1) * self.micro_batch].tolist()
    windows = np.stack([self.tokens[s : s + self.seq_len + 1] for s in mine]).astype(np.int64)
    batch = torch.from_numpy(windows)  # (B, T + 1)
    return batch[:, :-1], batch[:, 1:]


class LoopTrainer(Trainer):
    """The real Trainer with a step that does nothing but take its batches (`take_step`);
    records the loop's clocks: wall and the main thread's CPU time (`time.thread_time`: the
    simulated step's sleep costs none, and other load on the machine does not count)."""

    step_s = 0.0  # the simulated device time of one step
    profile: cProfile.Profile | None = None  # of the loop alone, when given

    def __init__(self, cfg, signals, stack):
        super().__init__(cfg, signals, stack)
        self.waited = self.loop_s = self.loop_cpu_s = self.cpu_start = 0.0
        self.flushed = [0.0, 0.0]  # MLflow flushes: wall, CPU seconds
        self.loop_flushed = [0.0, 0.0]

    def take_step(self, model, sampler, accelerator, update, micro_loss):
        """One step's batches on the device, then `step_s` of simulated device time."""
        for _ in range(accelerator.gradient_accumulation_steps):
            next_batch(sampler, accelerator.device)
        t0 = time.perf_counter()
        time.sleep(self.step_s)
        self.waited += time.perf_counter() - t0
        return torch.zeros((), device=accelerator.device)

    def _open_run(self, decision: dict) -> None:
        super()._open_run(decision)
        self.cpu_start = time.thread_time()  # the loop starts here, as `t_run`
        if self.profile is not None:
            self.profile.enable()
        if self.metrics is not None:  # the loop's hand-over to MLflow at each boundary, timed apart
            send = self.metrics.send

            def timed_send():
                t0, c0 = time.perf_counter(), time.thread_time()
                send()
                self.flushed[0] += time.perf_counter() - t0
                self.flushed[1] += time.thread_time() - c0

            self.metrics.send = timed_send

    def finish(self):
        if self.profile is not None:
            self.profile.disable()
        self.loop_s = time.perf_counter() - self.t_run
        self.loop_cpu_s = time.thread_time() - self.cpu_start
        self.loop_flushed = list(self.flushed)  # the final flush is not the loop's
        return super().finish()


def overrides(args, folder: Path, shard: Path, prefetch: int | None) -> list[str]:
    """A run of `--steps` steps of `--batch` x `--seq` tokens from `shard`, every output in
    `folder`; model and evaluation as small as they go (neither is timed)."""
    tokens = args.steps * args.batch * args.seq
    out = [
        f"tracking.uri=sqlite:///{folder / 'mlruns.db'}",
        f"paths.runs_dir={folder / 'runs'}",
        f"paths.cache_dir={folder / 'cache'}",
        "data=tokens",
        f"data.path={shard}",
        "data.eot_id=0",
        f"data.vocab_size={args.vocab}",
        f"data.eval_tokens={args.seq}",
        "model=llama",
        "model.d_model=32",
        "model.n_layers=1",
        "model.n_heads=2",
        "model.n_kv_heads=1",
        f"train.seq_len={args.seq}",
        f"train.batch_tokens={args.batch * args.seq}",
        f"train.tokens={tokens}",
        f"train.log_every={args.log_every}",
        f"train.eval_every={args.steps + 1}",
        "train.checkpoint_every=0",
        "train.warmup=0.02",
        "train.progress=none",
        "train.compile=false",
    ]
    return out + ([f"train.prefetch={prefetch}"] if prefetch is not None else [])


def compose(overrides: list[str]):
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=overrides)


def measure(cfg, step_ms: float, profile: cProfile.Profile | None = None) -> dict:
    """Train `cfg` with `LoopTrainer`: ms per step of host work besides the simulated step and
    MLflow's flush (main thread's CPU time, and wall time), and of the flush."""
    with contextlib.ExitStack() as stack:
        trainer = LoopTrainer(cfg, Signals(), stack)
        trainer.step_s, trainer.profile = step_ms / 1000, profile
        trainer.run()
    steps, (flush_s, flush_cpu_s) = trainer.geo.total_steps, trainer.loop_flushed
    return {
        "host_cpu_ms": 1000 * (trainer.loop_cpu_s - flush_cpu_s) / steps,
        "host_ms": 1000 * (trainer.loop_s - trainer.waited - flush_s) / steps,
        "flush_ms": 1000 * flush_s / steps,
    }


VARIANTS = {"before": 0, "after": None}  # train.prefetch: 0, or its default


def loop_table(args, shard: Path, work: Path) -> dict:
    """{variant: medians of `measure`'s numbers, and speedup: the median of before / variant
    host CPU ms}."""
    times: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    original = BatchSampler.next
    for rep, order in enumerate(repetitions(VARIANTS, args.reps)):
        for variant in order:
            folder = work / f"{variant}-{rep}"
            cfg = compose(overrides(args, folder, shard, VARIANTS[variant]))
            BatchSampler.next = reference_next if variant == "before" else original
            try:
                times[variant].append(measure(cfg, args.step_ms))
            finally:
                BatchSampler.next = original
    base = [t["host_cpu_ms"] for t in times["before"]]
    table = {}
    for v, ts in times.items():
        table[v] = {k: statistics.median(t[k] for t in ts) for k in ts[0]}
        table[v]["speedup"] = median_ratio(base, [t["host_cpu_ms"] for t in ts])
    return table


def sampler_rates(tokens: np.ndarray, args) -> dict:
    """Tokens per second of `BatchSampler.next` (after) and `reference_next` (before) in one
    thread, interleaved: per CPU second of the thread (robust to other load), and per wall
    second."""
    sampler = BatchSampler(tokens, args.seq, args.batch, seed=0)
    calls = {"before": lambda: reference_next(sampler), "after": sampler.next}
    cpu: dict[str, list[float]] = {k: [] for k in calls}
    wall: dict[str, list[float]] = {k: [] for k in calls}
    for order in repetitions(calls, max(args.reps, 3)):
        for k in order:
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(args.sampler_batches):
                calls[k]()
            cpu[k].append((time.thread_time() - c0) / args.sampler_batches)
            wall[k].append((time.perf_counter() - t0) / args.sampler_batches)
    per_batch = args.batch * args.seq
    rates = {
        k: {
            "tokens_per_s": per_batch / statistics.median(cpu[k]),
            "tokens_per_wall_s": per_batch / statistics.median(wall[k]),
        }
        for k in calls
    }
    return rates | {"speedup": median_ratio(cpu["before"], cpu["after"])}


def profile_after(args, shard: Path, work: Path) -> str:
    """cProfile of the `after` loop (the main thread, from the first step to the last)."""
    profile = cProfile.Profile()
    measure(compose(overrides(args, work / "profile", shard, None)), args.step_ms, profile)
    stream = io.StringIO()
    stats = pstats.Stats(profile, stream=stream).sort_stats("tottime")
    stats.print_stats(r"^(?!.*(sqlalchemy|mlflow|sqlite))", 25)  # MLflow's flush is timed apart
    return stream.getvalue()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per run")
    p.add_argument("--batch", type=int, default=64, help="sequences per micro-batch")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--step-ms", type=float, default=2.0, help="simulated device time per step")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--corpus-tokens", type=int, default=50_000_000, help="token memmap size")
    p.add_argument("--sampler-batches", type=int, default=200)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--out", default=None, help="folder for loop_overhead_<device>.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shard = work / "tokens.bin"
        rng = np.random.default_rng(0)
        write_bin(shard, rng.integers(0, args.vocab, args.corpus_tokens, dtype=np.uint16))
        tokens = np.memmap(shard, dtype=np.uint16, mode="r", offset=1024)
        result = {
            "machine": machine(device, torch.get_num_threads(), "keep_host_memory=auto"),
            "device": device.type,
            "args": vars(args),
            "command": "python -m benchmarks.loop_overhead "
            + " ".join(sys.argv[1:] if argv is None else argv),
            "sampler": sampler_rates(tokens, args),
            "loop": loop_table(args, shard, work),
        }
        if args.profile:
            result["profile"] = profile_after(args, shard, work)
    report(result)
    if args.out:
        path = Path(args.out) / f"loop_overhead_{result['device']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def report(result: dict) -> None:
    a, s = result["args"], result["sampler"]
    print(
        f"loop overhead at {a['batch']} x {a['seq']} tokens, log_every={a['log_every']}, "
        f"{a['step_ms']} ms simulated step, {result['device']}"
    )
    print(
        "| variant | host CPU ms/step | host wall ms/step | MLflow hand-over wall ms/step "
        "| speed-up (CPU) | sampler tokens/CPU s |"
    )
    print("|---|---|---|---|---|---|")
    for v, row in result["loop"].items():
        print(
            f"| {v} | {row['host_cpu_ms']:.3f} | {row['host_ms']:.3f} | {row['flush_ms']:.3f} "
            f"| {row['speedup']:.2f}x | {s[v]['tokens_per_s'] / 1e6:.0f}M |"
        )
    after, rate = result["loop"]["after"]["host_cpu_ms"], s["after"]["tokens_per_s"]
    print(
        f"target <= {TARGET_MS} ms/step: {'met' if after <= TARGET_MS else 'NOT met'} "
        f"({after:.3f}); sampler >= 100M tokens/s: "
        f"{'met' if rate >= TARGET_TOKENS_PER_S else 'NOT met'} ({rate / 1e6:.0f}M)"
    )
    if "profile" in result:
        print(result["profile"])


if __name__ == "__main__":
    main()
