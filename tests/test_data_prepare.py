"""Preparing a corpus at scale (issue 44): workers that start without the builder's memory and
die with it, the BPE reused when its training sample is unchanged, one cache left after an
edit, progress lines in a log with a steady ETA, and the streaming warning."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from corpus_helpers import WORDS, text_config, write_corpus

import training.data.build as build_mod
import training.data.progress as progress_mod
from training.data import prepare_data
from training.data.progress import Progress

ROOT = Path(__file__).resolve().parents[1]


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def _caches(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "meta.json").exists())


def test_workers_do_not_start_with_the_builders_memory():
    """The encoding workers are fresh interpreters: 300 MB the builder holds (touched, so a
    forked copy would have it resident) are not in their memory."""
    held = np.ones(300 << 20, dtype=np.uint8)  # the builder's BPE sample, say
    with build_mod._worker_pool(2, None) as pool:
        pool.map(int, range(8), chunksize=1)  # both workers up and idle
        pids = [w.pid for w in pool._pool]
        rss = [_rss_mb(pid) for pid in pids]
    assert len(pids) == 2 and os.getpid() not in pids
    assert _rss_mb(os.getpid()) > 300 and max(rss) < 200, rss
    del held


CHILD = """
import sys, time
import training.data.build as build
pool = build._worker_pool(2, None)
pool.apply(int)  # the workers are up
for _ in range(2):  # and busy, as with a unit (an idle one would see its queue close)
    pool.apply_async(time.sleep, (30,))
time.sleep(0.5)
print(*[w.pid for w in pool._pool], flush=True)
time.sleep(60)
"""


def test_workers_exit_when_the_builder_is_killed(tmp_path):
    """kill -9 of the builder while its workers encode: they are gone within two seconds
    (without PR_SET_PDEATHSIG they would finish their unit first)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE)
    workers = [int(p) for p in child.stdout.readline().split()]
    assert len(workers) == 2 and all(Path(f"/proc/{p}").exists() for p in workers)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)

    def alive(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + 2.0
    while any(map(alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(alive, workers)), [p for p in workers if alive(p)]


def test_an_edit_outside_the_bpe_sample_reuses_the_tokenizer_and_leaves_one_cache(
    tmp_path, monkeypatch
):
    """The BPE's sample is the first 20,000 training characters (the first file): an edit of
    the last file keeps it (the tokenizer is copied, not trained), an edit of the first file
    changes it (trained again); either way the superseded cache is removed."""
    corpus, root = write_corpus(tmp_path / "c", n_files=6), tmp_path / "cache"
    trained = []
    train = build_mod.BPETokenizer.train
    monkeypatch.setattr(build_mod.BPETokenizer, "train", lambda *a: trained.append(1) or train(*a))
    cfg = text_config(corpus)
    first = prepare_data(cfg, root, workers=1)
    assert len(trained) == 1 and first.meta["tokenizer_trained"]
    bpe = (first.cache_dir / "tokenizer.json").read_bytes()

    last = corpus / "f05.txt"
    last.write_text(last.read_text() + "<|endoftext|>omega omega omega")
    after = prepare_data(cfg, root, workers=1)
    assert len(trained) == 1 and not after.meta["tokenizer_trained"]
    assert (after.cache_dir / "tokenizer.json").read_bytes() == bpe
    assert after.meta["tokenizer_sample"] == first.meta["tokenizer_sample"]
    assert _caches(root) == [after.cache_dir.name] and not first.cache_dir.exists()
    fresh = prepare_data(cfg, tmp_path / "fresh", workers=1)  # what a build from scratch writes
    np.testing.assert_array_equal(after.train, fresh.train)
    np.testing.assert_array_equal(after.val, fresh.val)

    head = corpus / "f00.txt"
    head.write_text("omega " + head.read_text())
    inside = prepare_data(cfg, root, workers=1)
    assert len(trained) == 3 and inside.meta["tokenizer_trained"]  # `fresh` trained one too
    assert inside.meta["tokenizer_sample"] != first.meta["tokenizer_sample"]
    assert _caches(root) == [inside.cache_dir.name]
    assert not [p for p in root.iterdir() if p.name.endswith(".partial")]


def test_a_bpe_trained_in_a_process_of_its_own_is_the_same(tmp_path, monkeypatch):
    """A large sample is trained in a spawned process (its memory freed before the workers
    start): the same tokenizer and tokens as one trained in the builder."""
    corpus = write_corpus(tmp_path / "c", n_files=6)
    here = prepare_data(text_config(corpus), tmp_path / "here", workers=1)
    monkeypatch.setattr(build_mod, "APART_MIN_CHARS", 0)
    monkeypatch.setattr(build_mod.BPETokenizer, "train", None)  # not in this process
    apart = prepare_data(text_config(corpus), tmp_path / "apart", workers=1)
    assert apart.meta["tokenizer_trained"]
    assert (here.cache_dir / "tokenizer.json").read_bytes() == (
        apart.cache_dir / "tokenizer.json"
    ).read_bytes()
    np.testing.assert_array_equal(here.train, apart.train)


def test_progress_in_a_log_is_plain_lines(tmp_path):
    """stderr not a terminal (here a pipe): one plain line per stage and a last `done` line,
    each with MB, tokens, rate and ETA; no bar, no terminal escapes."""
    corpus = write_corpus(tmp_path / "c", n_files=6)
    out = subprocess.run(
        [sys.executable, "-m", "training.data", "prepare", "data=text", f"data.path={corpus}"]
        + ["data.vocab_size=300", "data.tokenizer_train_chars=20000"]
        + [f"paths.cache_dir={tmp_path / 'cache'}"],
        env={**os.environ, "PYTHONPATH": str(ROOT), "SCALING_LAB_PREPARE_WORKERS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert all(line.startswith("prepare: ") and "ETA" in line for line in lines), lines
    assert lines[-1].startswith("prepare: done, ") and "M tokens" in lines[-1]
    assert any("training the BPE" in line for line in lines)
    assert "\x1b" not in out.stderr


def test_the_eta_is_steady_when_units_finish_in_bursts(monkeypatch):
    """Two workers finish 16 MB units together every 16 s (2 MB/s, 1.6 GB): after the first
    minute every ETA is within 20% of the true time left."""
    now = [100.0]
    monkeypatch.setattr(progress_mod.time, "perf_counter", lambda: now[0])
    unit, total = 16 * 10**6, 100 * 16 * 10**6
    with Progress(total, enabled=False) as bar:
        bar.stage("training the BPE")
        now[0] += 300  # BPE training: not encoding time
        bar.stage("encoding")
        errors = []
        for _ in range(50):
            now[0] += 15.99
            bar.advance(unit, 1000)
            now[0] += 0.01
            bar.advance(unit, 1000)
            left = (total - bar.chars) / 2e6
            if now[0] - bar.encoded_at > 60 and left > 0:
                errors.append(abs(bar.eta() - left) / left)
    assert errors and max(errors) < 0.2, max(errors)


def test_prepare_warns_for_streaming_without_a_token_limit(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(60)))
    args = [sys.executable, "-m", "training.data", "prepare", "data=hf", "data.name=json"]
    args += [f"data.data_files={path}", "data.tokenizer=byte", "data.streaming=true"]
    args += [f"paths.cache_dir={tmp_path / 'cache'}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: data.streaming=true without data.max_tokens: the whole dataset is streamed "
        "and tokenized before training starts; set data.max_tokens to bound it"
    ]


def test_a_long_text_in_pieces_has_the_tokens_and_the_bpe_of_the_whole(monkeypatch):
    """A text over LONG_TEXT_CHARS is encoded (and counted for training) in pieces cut after a
    newline between non-space characters: the same tokens as the whole text, and the same
    trained tokenizer."""
    import training.data.tokenizer as tok_mod

    rng = np.random.default_rng(0)
    seps = [" ", "  ", "\n", "\n\n", " \n", "\n ", "\t", "\r\n", "\u00a0", "\u3000", "\x1c\n"]
    words = WORDS + ["'s", "l'été", "42", "x=1;", "<|endoftext|>", "----", "日本語"]
    text = "".join(w + seps[int(rng.integers(len(seps)))] for w in rng.choice(words, 6000))
    monkeypatch.setattr(tok_mod, "LONG_TEXT_CHARS", 2000)
    monkeypatch.setattr(tok_mod, "PIECE_CHARS", 500)
    cut = tok_mod.pieces(text)
    assert len(cut) > 20 and "".join(cut) == text
    split = tok_mod.BPETokenizer.train([text, "short"], 400, 10**9)
    monkeypatch.setattr(tok_mod, "LONG_TEXT_CHARS", 10**9)
    whole = tok_mod.BPETokenizer.train([text, "short"], 400, 10**9)
    assert split.tok.to_str() == whole.tok.to_str()
    want = whole.encode_flat([text, "short", text], np.uint16)
    monkeypatch.setattr(tok_mod, "LONG_TEXT_CHARS", 2000)
    monkeypatch.setattr(tok_mod, "GROUP_CHARS", 1500)  # encoded a few pieces at a time
    got = whole.encode_flat([text, "short", text], np.uint16)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1] == want[1]
