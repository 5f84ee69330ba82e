"""Corpus preparation at scale, ours side by side with a baseline revision's training/data.py
(loaded from git) and the bare `tokenizers` batch encode loop, in one command. Each measurement
runs in its own forked process, so each peak RSS is its own.

    python -m benchmarks.data_prepare --sizes-mb 250 500 --baseline-mb 25 --tokens 1e9
    python -m benchmarks.data_prepare --sizes-mb --baseline-mb 0 --tokens 0 --paired-mb 8
    python -m benchmarks.data_prepare --sizes-mb --baseline-mb 0 --tokens 0 --rehash CORPUS_DIR
    python -m benchmarks.data_prepare --sizes-mb --baseline-mb 0 --tokens 0 --real code prose \
        --real-mb 100

Measures, on a generated text corpus (a folder of .txt files, documents joined by
<|endoftext|>, words drawn from a Zipf-distributed vocabulary):
- prepare: wall time, MB/s and tokens/s, peak RSS, for each size (flat RSS = out-of-core)
- the bare encode loop: the same documents through the same trained tokenizer's
  `encode_batch_fast`, nothing written
- start-up: what a run on the prepared corpus spends on data (fingerprint + cache load)
- the baseline's prepare (and its start-up) at --baseline-mb
- paired (--paired-mb): ours and the bare loop alternating on one corpus in one process with
  one trained tokenizer, --paired-reps times: the ratio of their rates (wall and CPU), whose
  median is steadier than separate runs on a shared machine
- re-hash (--rehash FOLDER): a text corpus's fingerprint with nothing remembered, sequential and
  per-file (Merkle), and the per-file one after one file's stats changed (what an edit costs),
  its files read once beforehand (page cache)
- pre-tokenized shards: --tokens uint16 tokens as llm.c .bin shards in a temporary folder
  (deleted afterwards): first check (hash + largest id), then start-up, and RSS for 100 batches.
- real corpora (--real code prose, --real-mb MB), built offline from this machine's files:
  code, the .py/.md/.txt/.rst files (up to 1 MB) of the running Python's site-packages; prose,
  the English man pages (groff requests and escapes stripped) and the text under /usr/share/doc
  (READMEs, changelogs, copyright and license texts, decompressed; HTML tags stripped). Each
  copied as .txt files until the size is reached (copy k > 0 under `copy<k>/`, its first line
  replaced, so every document is new). The whole command, `python -m training.data prepare
  data=text data.path=CORPUS` with the default settings (BPE on 50M characters), in a process
  of its own: wall and CPU seconds (its tree's, from wait4), the summed PSS of its process tree
  sampled every 0.5 s from /proc/*/smaps_rollup; then the bare loop (the same documents
  through its trained tokenizer's `encode_batch_fast`, nothing written) in a process of its
  own, and the ratio of their times; then the last file edited (outside the BPE's sample) and
  the command again: its time, whether it trained the BPE, and the caches left.
Prints a markdown table; `--json` writes the raw numbers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from benchmarks.real_corpora import real_corpus, tree_pss_parts_mb
from training.config import DataConfig
from training.data import (
    BatchSampler,
    build,
    encode,
    filehash,
    plan,
    prepare_data,
    source_fingerprint,
    sources,
    val_windows,
    write_bin,
)
from training.data.tokenizer import BPETokenizer

ROOT = Path(__file__).resolve().parents[1]
FILE_MB = 25  # the generated corpus is files of this size
SHARD_TOKENS = 100_000_000


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_parts_mb() -> dict:
    """RssAnon (the process's own memory) and RssFile (mapped file pages: the page cache,
    shared and reclaimable), MB."""
    with open("/proc/self/status") as f:
        lines = [line.split() for line in f if line.startswith(("RssAnon", "RssFile"))]
    return {name.rstrip(":"): int(kb) / 1024 for name, kb, _ in lines}


def _in_child(fn, *args) -> dict:
    """fn(*args) in a forked process; its result dict plus its own peak RSS (MB)."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()

    def run():
        try:
            out = fn(*args)
        except BaseException as e:  # say so, or the parent waits on the queue forever
            queue.put({"error": repr(e)})
            raise
        out["peak_rss_mb"] = round(_rss_mb())
        workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        out["worker_peak_rss_mb"] = round(workers)  # the largest of its worker processes
        queue.put(out)

    p = ctx.Process(target=run)
    p.start()
    out = queue.get()
    p.join()
    if "error" in out:
        raise SystemExit(f"error: {fn.__name__}: {out['error']}")
    return out


def generate(folder: Path, mb: int, seed: int = 0, file_mb: int = FILE_MB) -> Path:
    """~mb MB of text in file_mb files; documents of 200..4000 words, Zipf(1.2) over 50k words."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    vocab = ["".join(rng.choice(letters, size=int(rng.integers(2, 10)))) for _ in range(50_000)]
    for i in range((mb + file_mb - 1) // file_mb):
        path = folder / f"part_{i:04d}.txt"
        if path.exists():
            continue
        docs, size = [], 0
        while size < file_mb * 10**6:
            ids = np.minimum(rng.zipf(1.2, size=int(rng.integers(200, 4000))), len(vocab)) - 1
            doc = " ".join(vocab[j] for j in ids) + "."
            docs.append(doc)
            size += len(doc) + 13
        path.write_text("<|endoftext|>".join(docs))
    newest = max(p.stat().st_mtime for p in folder.iterdir())
    time.sleep(max(0.0, newest + filehash.RACY_S - time.time()))  # hashes of settled files are kept
    return folder


def _cfg(path: Path, tokenizer: str, train_chars: float) -> DataConfig:
    return DataConfig.from_dict(
        {
            "source": "text",
            "path": str(path),
            "tokenizer": tokenizer,
            "vocab_size": 4096,
            "tokenizer_train_chars": train_chars,
        }
    )


def _prepare(cfg: DataConfig, root: Path, module=None) -> dict:
    t0 = time.perf_counter()
    data = (module or sys.modules["training.data"]).prepare_data(cfg, root)
    dt = time.perf_counter() - t0
    n = len(data.train) + len(data.val)
    mb = sum(p.stat().st_size for p in Path(cfg.path).iterdir()) / 1e6
    encode = data.meta["build_seconds"] - data.meta["tokenizer_seconds"]  # after BPE training
    return {
        "seconds": round(dt, 1),
        "mb": round(mb),
        "tokens": n,
        "mb_s": round(mb / dt, 2),
        "tok_s": round(n / dt),
        "tokenizer_s": data.meta["tokenizer_seconds"],
        "encode_mb_s": round(mb / encode, 2),
        "encode_tok_s": round(n / encode),
        "cache": str(data.cache_dir),
    }


def _startup(cfg: DataConfig, root: Path, module=None) -> dict:
    """A fresh process's data start-up on a prepared corpus: fingerprint, then the cache."""
    filehash._hashed.clear()
    t0 = time.perf_counter()
    mod = module or sys.modules["training.data"]
    mod.source_fingerprint(cfg)
    mod.prepare_data(cfg, root)
    return {"seconds": round(time.perf_counter() - t0, 3)}


def _bare_loop(cfg: DataConfig, tok: Tokenizer) -> tuple[int, int]:
    """(characters, tokens) of the documents through `tok`'s batch encode, nothing written."""
    n, chars, batch, size = 0, 0, [], 0
    for _, text in sources.documents(cfg):
        batch.append(text)
        size += len(text)
        if size >= encode.BATCH_CHARS:
            n += sum(len(e.ids) for e in tok.encode_batch_fast(batch))
            chars, batch, size = chars + size, [], 0
    n += sum(len(e.ids) for e in tok.encode_batch_fast(batch))
    return chars + size, n


def _bare_encode(cfg: DataConfig, cache_dir: str) -> dict:
    """The same documents through the trained tokenizer's batch encode, nothing written."""
    tok = Tokenizer.from_file(str(Path(cache_dir) / "tokenizer.json"))
    t0 = time.perf_counter()
    chars, n = _bare_loop(cfg, tok)
    dt = time.perf_counter() - t0
    return {"seconds": round(dt, 1), "mb_s": round(chars / 1e6 / dt, 2), "tok_s": round(n / dt)}


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of every thread of this process and of its finished
    children) of fn()."""

    def cpu() -> float:
        own = time.process_time()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own + children.ru_utime + children.ru_stime

    t0, c0 = time.perf_counter(), cpu()
    fn()
    return time.perf_counter() - t0, cpu() - c0


def _ours_encode(cfg: DataConfig, tokenizer_file: Path, workdir: Path, workers: int) -> None:
    """The preparation's encode stage alone (units read, split, encoded, hashed, written and
    synced; in `workers` forked processes, or in this one on the library's threads)."""
    with tempfile.TemporaryDirectory(dir=workdir) as d:
        jobs = [
            encode.UnitJob(tuple(u), cfg, f"{d}/u{i}.bin", "uint16", False)
            for i, u in enumerate(plan.units(cfg))
        ]
        if workers <= 1 or len(jobs) == 1:
            tokenizer = BPETokenizer.load(tokenizer_file)
            for job in jobs:
                job.run(tokenizer)
            return
        with build._worker_pool(min(workers, len(jobs)), str(tokenizer_file)) as pool:
            list(pool.imap(encode.run_in_worker, jobs))


def _rehash(folder: Path, workdir: Path) -> dict:
    """The fingerprint of the text corpus in `folder` with nothing remembered (what a run pays
    after an edit with the sequential fingerprint), then the per-file (Merkle) fingerprint
    (forced at any size, in this child only): with nothing remembered, then after one file's
    stats changed (its mtime; what an edit costs it). The files are read once beforehand."""
    files = sorted(p for p in folder.iterdir() if p.is_file())
    for p in files:  # the page cache: time the hash, not this machine's disk
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    os.environ["SCALING_LAB_CACHE_DIR"] = tempfile.mkdtemp(dir=workdir)  # no memo on disk
    cfg, mb = _cfg(folder, "bpe", 1e7), sum(p.stat().st_size for p in files) / 1e6
    read: list[str] = []
    real = filehash.file_sha256
    filehash.file_sha256 = lambda p: read.append(p) or real(p)

    def fingerprint() -> dict:
        filehash._hashed.clear()
        read.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        source_fingerprint(cfg)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        return {"seconds": round(dt, 3), "cpu_s": round(cpu, 3), "files_read": len(read)}

    out = {"what": f"re-hash, {mb:.0f} MB, {len(files)} files", "sequential": fingerprint()}
    out["sequential"]["mb_s"] = round(mb / out["sequential"]["seconds"])
    filehash.SEQUENTIAL_MAX_BYTES = 0
    os.environ["SCALING_LAB_CACHE_DIR"] = tempfile.mkdtemp(dir=workdir)  # forget the above
    out["merkle_first"] = fingerprint()
    os.utime(files[len(files) // 2])  # one file's stats change (its bytes stay)
    out["merkle_after_edit"] = fingerprint()
    return out


def _paired(mb: int, reps: int, workdir: Path, workers: int) -> dict:
    """Ours and the bare loop alternating (ours first on even repetitions) on one corpus with
    one trained tokenizer; each repetition's ratio ours rate / bare rate, by wall and CPU time."""
    corpus = generate(workdir / f"paired_{mb}", mb, file_mb=max(1, mb // 4))
    cfg = _cfg(corpus, "bpe", 1e7)
    tokenizer_file = workdir / f"paired_{mb}.tokenizer.json"
    if not tokenizer_file.exists():
        docs = (t for k, t in sources.documents(cfg) if not sources.is_val(k, cfg.val_fraction))
        BPETokenizer.train(docs, cfg.vocab_size, cfg.tokenizer_train_chars).save(tokenizer_file)
    bare_tok = Tokenizer.from_file(str(tokenizer_file))
    runs = {
        "ours": lambda: _ours_encode(cfg, tokenizer_file, workdir, workers),
        "bare": lambda: _bare_loop(cfg, bare_tok),
    }
    wall, cpu = [], []
    for r in range(reps):
        order = ["ours", "bare"] if r % 2 == 0 else ["bare", "ours"]
        t = {name: _timed(runs[name]) for name in order}
        wall.append(t["bare"][0] / t["ours"][0])
        cpu.append(t["bare"][1] / t["ours"][1])
        print(
            f"paired {r}: ours {t['ours'][0]:.2f} s ({t['ours'][1]:.2f} CPU s), "
            f"bare {t['bare'][0]:.2f} s ({t['bare'][1]:.2f} CPU s)",
            flush=True,
        )

    def spread(x: list[float]) -> str:
        return f"{np.median(x):.3f} ({min(x):.3f}-{max(x):.3f})"

    return {
        "what": f"paired, {mb} MB x {reps}, {workers} workers",
        "wall_ratio": spread(wall),
        "cpu_ratio": spread(cpu),
    }


def _baseline_module(rev: str):
    """training/data.py as of `rev`, imported under another name."""
    code = subprocess.run(
        ["git", "show", f"{rev}:training/data.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_data.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location("baseline_data", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_data"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _shards(folder: Path, n_tokens: int) -> None:
    rng = np.random.default_rng(0)
    for i, start in enumerate(range(0, n_tokens, SHARD_TOKENS)):
        n = min(SHARD_TOKENS, n_tokens - start)
        write_bin(folder / f"train_{i:06d}.bin", rng.integers(0, 50257, n, dtype=np.uint16))


def _tokens_run(cfg: DataConfig) -> dict:
    """Start-up on pre-tokenized shards and the memory of sampling 100 batches from them."""
    import torch  # noqa: F401  (lazy: the trainer's baseline memory, in this child only)

    filehash._hashed.clear()
    before = _rss_parts_mb()
    t0 = time.perf_counter()
    source_fingerprint(cfg)
    data = prepare_data(cfg, Path(tempfile.mkdtemp()))
    val_windows(data.val, 1024, cfg.eval_tokens)
    startup = time.perf_counter() - t0
    sampler = BatchSampler(data.train, 1024, 16, seed=0)
    for _ in range(100):
        sampler.next()
    after = _rss_parts_mb()
    return {
        "seconds": round(startup, 3),
        "tokens": len(data.train) + len(data.val),
        "anon_growth_mb": round(after["RssAnon"] - before["RssAnon"]),
        "file_pages_mb": round(after["RssFile"] - before["RssFile"]),
    }


def _tokens_row(n_tokens: int, workdir: Path) -> dict:
    """n_tokens uint16 tokens written as .bin shards (deleted afterwards), then two runs on them."""
    folder = Path(tempfile.mkdtemp(dir=workdir, prefix="shards-"))
    try:
        t0 = time.perf_counter()
        _shards(folder, n_tokens)
        written = time.perf_counter() - t0
        cfg = DataConfig.from_dict(
            {"source": "tokens", "path": str(folder), "vocab_size": 50257, "eot_id": 50256}
        )
        first = _in_child(_tokens_run, cfg)
        again = _in_child(_tokens_run, cfg)
        return {
            "what": f"tokens, {n_tokens:,} uint16",
            "written_s": round(written, 1),
            "first": first,
            "again": again,
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _measured(cmd: list[str], log: Path) -> dict:
    """Run `cmd` (from the repository root): wall and CPU seconds (its whole tree's, as
    reaped), the peak and median of its tree's summed PSS sampled every 0.5 s, its stdout."""
    import threading

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SCALING_LAB_CACHE_DIR", None)
    t0 = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err)
        samples, stop = [], threading.Event()
        peak: dict = {"mb": 0.0}  # the sample of the largest sum: when, and each process's part

        def sample() -> None:
            while not stop.wait(0.5):
                parts = tree_pss_parts_mb(proc.pid)
                samples.append(sum(parts.values()))
                if samples[-1] > peak["mb"]:
                    peak.update(mb=samples[-1], at_s=round(time.perf_counter() - t0, 1))
                    peak["parts"] = {k: round(v) for k, v in parts.items()}

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        out = proc.stdout.read().decode()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        stop.set()
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"error: {' '.join(cmd)} exited {proc.returncode}; see {log}")
    return {
        "seconds": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_pss_mb": round(max(samples, default=0)),
        "median_pss_mb": round(float(np.median(samples)) if samples else 0),
        "peak_at_s": peak.get("at_s"),  # seconds into the command (its log's elapsed times)
        "peak_parts_mb": peak.get("parts", {}),
        "stdout": out.strip(),
    }


def _prepare_command(corpus: Path, root: Path, log: Path) -> dict:
    cmd = [sys.executable, "-m", "training.data", "prepare", "data=text"]
    cmd += [f"data.path={corpus}", f"paths.cache_dir={root}"]
    out = _measured(cmd, log)
    cache = Path(out["stdout"].split(" in ", 1)[1].rsplit(",", 1)[0])
    meta = json.loads((cache / "meta.json").read_text())
    caches = [d for d in root.iterdir() if d.is_dir() and "." not in d.name and len(d.name) == 16]
    return {
        **out,
        "cache": str(cache),
        "tokens": meta["n_train_tokens"] + meta["n_val_tokens"],
        "docs": meta["n_train_docs"] + meta["n_val_docs"],
        "tokenizer_s": meta["tokenizer_seconds"],
        "bpe_trained": meta["tokenizer_trained"],
        "caches_left": len(caches),
    }


def _bare_main(corpus: str, tokenizer_file: str) -> None:
    """--bare: the bare loop over the corpus's documents, in this process."""
    cfg = _cfg(Path(corpus), "bpe", 5e7)
    chars, n = _bare_loop(cfg, Tokenizer.from_file(tokenizer_file))
    print(json.dumps({"chars": chars, "tokens": n}))


def _real_row(kind: str, mb: int, workdir: Path) -> dict:
    corpus = real_corpus(kind, workdir / f"{kind}_{mb}", mb)
    root = workdir / f"cache_{kind}_{mb}"
    shutil.rmtree(root, ignore_errors=True)
    size = sum(p.stat().st_size for p in corpus.rglob("*.txt"))
    ours = _prepare_command(corpus, root, workdir / f"{kind}_{mb}.prepare.log")
    bare_cmd = [sys.executable, "-m", "benchmarks.data_prepare", "--bare", str(corpus)]
    bare = _measured([*bare_cmd, str(Path(ours["cache"]) / "tokenizer.json")], workdir / "bare.log")
    last = sorted(corpus.rglob("*.txt"))[-1]  # outside the BPE's sample (its first 50M chars)
    text = last.read_bytes()
    last.write_bytes(text + b"\nan edited line\n")
    try:
        edit = _prepare_command(corpus, root, workdir / f"{kind}_{mb}.edit.log")
    finally:
        last.write_bytes(text)
    shutil.rmtree(root, ignore_errors=True)
    gb = size / 1e9
    return {
        "what": f"{kind}, {size / 1e6:.0f} MB, {ours['docs']:,} documents",
        "ours": ours,
        "bare": bare,
        "cpu_s_per_gb": round(ours["cpu_s"] / gb),
        "bare_cpu_s_per_gb": round(bare["cpu_s"] / gb),
        "ratio_wall": round(bare["seconds"] / ours["seconds"], 3),
        "ratio_cpu": round(bare["cpu_s"] / ours["cpu_s"], 3),
        "edit": edit,
    }


def _real_table(rows: list[dict]) -> str:
    head = (
        "| corpus | tokens | prepare s (CPU s) | CPU s/GB | BPE s | peak / median PSS MB "
        "| bare loop s (CPU s) | bare/ours wall (CPU) | after a 1-file edit: s, BPE, caches |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        o, b, e = r["ours"], r["bare"], r["edit"]
        bpe = "retrained" if e["bpe_trained"] else "reused"
        lines.append(
            f"| {r['what']} | {o['tokens']:,} | {o['seconds']} ({o['cpu_s']}) | "
            f"{r['cpu_s_per_gb']} | {o['tokenizer_s']} | {o['peak_pss_mb']} / "
            f"{o['median_pss_mb']} | {b['seconds']} ({b['cpu_s']}) | {r['ratio_wall']} "
            f"({r['ratio_cpu']}) | {e['seconds']} s, {bpe}, {e['caches_left']} |"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-mb", type=int, nargs="*", default=[250, 500])
    p.add_argument("--baseline-mb", type=int, default=25, help="0: skip the baseline")
    p.add_argument("--baseline-rev", default="0b69d7a")
    p.add_argument("--tokenizer", default="bpe", choices=["bpe", "byte"])
    p.add_argument("--train-chars", type=float, default=1e7, help="BPE training sample")
    p.add_argument("--tokens", type=float, default=1e9, help="pre-tokenized tokens; 0: skip")
    p.add_argument("--paired-mb", type=int, default=0, help="0: skip the paired comparison")
    p.add_argument("--paired-reps", type=int, default=10)
    p.add_argument("--workers", type=int, default=build.default_workers(), help="encoders")
    p.add_argument(
        "--no-bare", action="store_true", help="skip the bare loop after each size (CPU budget)"
    )
    p.add_argument("--rehash", type=Path, help="a text corpus folder to fingerprint from scratch")
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "data_prepare")
    p.add_argument("--real", nargs="*", default=[], choices=["code", "prose"])
    p.add_argument("--real-mb", type=int, default=100, help="size of each --real corpus")
    p.add_argument("--bare", nargs=2, help=argparse.SUPPRESS)  # CORPUS TOKENIZER: one bare loop
    p.add_argument("--json", type=Path)
    return p


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.bare:
        return _bare_main(*args.bare)
    os.environ["SCALING_LAB_CACHE_DIR"] = str(args.workdir / "memo")  # fingerprints memo
    rows = []
    for mb in args.sizes_mb:
        corpus = generate(args.workdir / f"corpus_{mb}", mb)
        cfg, root = _cfg(corpus, args.tokenizer, args.train_chars), args.workdir / f"cache_{mb}"
        shutil.rmtree(root, ignore_errors=True)
        ours = _in_child(_prepare, cfg, root)
        row = {"what": f"ours, {ours['mb']} MB", **ours, "startup": _in_child(_startup, cfg, root)}
        row["startup_again"] = _in_child(_startup, cfg, root)
        if args.tokenizer == "bpe" and not args.no_bare:
            row["bare"] = _in_child(_bare_encode, cfg, ours["cache"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.baseline_mb:
        corpus = generate(args.workdir / f"corpus_{args.baseline_mb}", args.baseline_mb)
        cfg, root = _cfg(corpus, args.tokenizer, args.train_chars), args.workdir / "cache_baseline"
        shutil.rmtree(root, ignore_errors=True)
        base = _baseline_module(args.baseline_rev)
        row = {
            "what": f"baseline {args.baseline_rev}, {args.baseline_mb} MB",
            **_in_child(_prepare, cfg, root, base),
            "startup": _in_child(_startup, cfg, root, base),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
        row = {
            "what": f"ours, {args.baseline_mb} MB",
            **_in_child(_prepare, cfg, root / "ours"),
            "startup": _in_child(_startup, cfg, root / "ours"),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.rehash:
        rows.append(_in_child(_rehash, args.rehash, args.workdir))
        print(json.dumps(rows[-1]), flush=True)
    if args.paired_mb:
        rows.append(_paired(args.paired_mb, args.paired_reps, args.workdir, args.workers))
        print(json.dumps(rows[-1]), flush=True)
    if args.tokens:
        rows.append(_tokens_row(int(args.tokens), args.workdir))
        print(json.dumps(rows[-1]), flush=True)
    real = [_real_row(kind, args.real_mb, args.workdir) for kind in args.real]
    for row in real:
        print(json.dumps(row), flush=True)
    if real:
        print(_real_table(real), flush=True)
    rows += real
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
