"""Building a document corpus's token cache: incrementally, in parallel, resumably.

The cache is built in `<cache>.partial/`: the plan (the units, training.data.plan), the
tokenizer, and one token shard per unit (training.data.encode) in `units/`, each written under a
temporary name, synced, renamed into place and only then logged in `done.jsonl`. A build killed
at any point (kill -9 included) leaves shards that are either logged and whole (their sha256 is
checked again) or removed, so the next build (the next `prepare`, or the next run) continues
from the units already done, with the same tokenizer, and writes the same tokens as an
uninterrupted build. Once every unit is done, their tokens are concatenated into `train.bin`
and `val.bin`, meta.json is written and the folder renamed to `<cache>`: nothing half-written
is ever read as a cache. The unit shards are then removed.

The BPE is keyed by a sha256 of its training sample (the first data.tokenizer_train_chars
characters of the training side, training.data.tokenizer.sample_key): a finished cache next to
this one with the same sample lends its tokenizer.json, so an edit outside the sample trains
nothing. A unit whose bytes, tokenizer and settings are those of a unit of another finished
cache next to it (the same corpus before an edit) takes its tokens from there: after an edit
only the units it touched are encoded again. Once published, the build removes the caches of
the same corpus and settings it supersedes (training.data.supersede).

Units are encoded by worker processes (one per core, each encoding one unit at a time) when
there are several; a single unit, and Hugging Face datasets (read in order, a batch of rows at
a time), are encoded in this process on the tokenizers library's threads. A large BPE sample
is trained in a process of its own. Both are spawned, not forked, and die with the builder
(training.data.workers): none starts with the builder's memory or outlives it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np

import training.data.encode as encode
import training.data.plan as plan
import training.data.sources as sources
import training.data.supersede as supersede
import training.data.workers as procs
from training.config import ConfigError, DataConfig
from training.data.filehash import file_sha256, recall, remember, signature_of
from training.data.fingerprint import source_fingerprint
from training.data.progress import Progress
from training.data.store import publish
from training.data.tokenizer import BPETokenizer, ByteTokenizer, sample_key
from training.data.unigram import UnigramCounts
from training.paths import fsync_dir

HF_UNIT_ROWS = 10_000  # rows of a Hugging Face dataset per unit
WORKERS_ENV = "SCALING_LAB_PREPARE_WORKERS"
APART_MIN_CHARS = 4_000_000  # a BPE sample this large is trained in a process of its own


def default_workers() -> int:
    """$SCALING_LAB_PREPARE_WORKERS, else every core this process may run on."""
    return int(os.environ.get(WORKERS_ENV) or len(os.sched_getaffinity(0)))


def check_split(n_train: int, n_val: int, val_fraction: float) -> None:
    if not n_train or not n_val:
        raise ConfigError(
            f"data.val_fraction={val_fraction}: the split left "
            f"{'no training' if not n_train else 'no validation'} documents; use a larger corpus"
        )


class Partial:
    """`<cache>.partial/`: the plan, the tokenizer and the units done so far (see the module
    docstring). Opening it with another plan starts it over."""

    def __init__(self, final: Path, plan_record: dict):
        self.dir = final.with_name(final.name + ".partial")
        self.units = self.dir / "units"
        plan_file = self.dir / "plan.json"
        if self.dir.exists():
            try:
                same = json.loads(plan_file.read_text()) == plan_record
            except (OSError, ValueError):
                same = False
            if not same:
                shutil.rmtree(self.dir)
        self.units.mkdir(parents=True, exist_ok=True)
        if not plan_file.exists():
            _write_atomic(plan_file, json.dumps(plan_record))
        self.done = self._read_done()
        logged = {Path(e["file"]).name for e in self.done}
        for stray in self.units.iterdir():  # a shard never logged: written by a killed build
            if stray.name not in logged:
                stray.unlink()

    def _read_done(self) -> list[dict]:
        """The logged units, in order, as long as each one's shard is whole (a torn last line,
        or a shard that does not match its entry, ends the list: redone from there)."""
        done = []
        try:
            text = (self.dir / "done.jsonl").read_text()
        except OSError:
            text = ""
        for line in text.splitlines():
            try:
                entry = json.loads(line)
                if file_sha256(self.dir / entry["file"]) != entry["sha256"]:
                    break
            except (ValueError, KeyError, OSError):
                break
            done.append(entry)
        _write_atomic(self.dir / "done.jsonl", "".join(json.dumps(e) + "\n" for e in done))
        return done

    def accept(self, result: encode.UnitResult, extra: dict) -> dict:
        """Move a written shard into place and log it (after it is synced: a logged unit is
        whole)."""
        entry = {
            "train": result.n_train,
            "val": result.n_val,
            "sha256": result.sha256,
            "docs_train": int((~result.held_out).sum()),
            "docs_val": int(result.held_out.sum()),
            "chars": int(result.chars.sum()),
            "train_chars": int(result.chars[~result.held_out].sum()),
            "digest": f"{int(result.digests.sum(dtype=np.uint64)):016x}",
            **extra,
        }
        return self._log(Path(result.path), entry)

    def reuse(self, source: Reusable) -> dict | None:
        """Copy another cache's tokens of the same unit into a shard and log it; None (nothing
        logged) if they do not match their checksum."""
        tmp = self.units / f"reused.tmp-{os.getpid()}"
        if not source.copy_to(tmp):
            tmp.unlink(missing_ok=True)
            return None
        keep = {k: v for k, v in source.entry.items() if k not in ("file", "last")}
        return self._log(tmp, keep)

    def _log(self, shard: Path, entry: dict) -> dict:
        name = f"units/u{len(self.done):06d}.bin"
        os.replace(shard, self.dir / name)
        fsync_dir(self.units)
        entry = {"file": name, **entry}
        with open(self.dir / "done.jsonl", "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.done.append(entry)
        return entry

    def tokens(self) -> int:
        return sum(e["train"] + e["val"] for e in self.done)


@dataclass
class Reusable:
    """One unit's tokens in a finished cache: train.bin[train_at:], val.bin[val_at:]."""

    cache: Path
    entry: dict
    train_at: int
    val_at: int
    dtype: str

    def copy_to(self, path: Path) -> bool:
        """Write them as a unit shard; False if they do not match the entry's sha256."""
        parts = []
        for name, at, n in (
            ("train.bin", self.train_at, self.entry["train"]),
            ("val.bin", self.val_at, self.entry["val"]),
        ):
            tokens = np.fromfile(self.cache / name, self.dtype, count=n, offset=at * self.itemsize)
            parts.append(tokens.tobytes())
        if hashlib.sha256(parts[0] + parts[1]).hexdigest() != self.entry["sha256"]:
            return False
        with open(path, "wb") as f:
            f.write(parts[0] + parts[1])
            f.flush()
            os.fsync(f.fileno())
        return True

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize


def reusable_units(folder: Path) -> dict[str, Reusable]:
    """{unit identity: where its tokens are} over the finished caches in `folder`."""
    found = {}
    for meta_file in folder.glob("*/meta.json"):
        try:
            meta = json.loads(meta_file.read_text())
            train_at = val_at = 0
            for e in meta.get("units", []):
                if "ident" in e:
                    found[e["ident"]] = Reusable(
                        meta_file.parent, e, train_at, val_at, meta["dtype"]
                    )
                train_at, val_at = train_at + e["train"], val_at + e["val"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return found


def concatenate(partial: Partial, dtype: np.dtype, counts: UnigramCounts) -> dict[str, str]:
    """`train.bin` and `val.bin` from the units' shards, in order; their sha256s. The train
    tokens are counted into `counts` on the way (the corpus's unigram entropy)."""
    shas = {"train.bin": hashlib.sha256(), "val.bin": hashlib.sha256()}
    outs = {name: open(partial.dir / f"{name}.tmp", "wb") for name in shas}
    try:
        for e in partial.done:
            tokens = np.fromfile(partial.dir / e["file"], dtype=dtype)
            for name, part in (
                ("train.bin", tokens[: e["train"]]),
                ("val.bin", tokens[e["train"] :]),
            ):
                if name == "train.bin":
                    counts.add(part)
                data = part.tobytes()
                shas[name].update(data)
                outs[name].write(data)
    finally:
        for f in outs.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
    for name in shas:
        os.replace(partial.dir / f"{name}.tmp", partial.dir / name)
    return {name: sha.hexdigest() for name, sha in shas.items()}


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _worker_pool(n: int, tokenizer_file: str | None):
    """`n` encoding processes, spawned (none starts with this process's memory) and bound to
    this one (training.data.workers)."""
    return procs.pool(n, encode.init_worker, (tokenizer_file,))


def train_tokenizer(cfg: DataConfig, chunk: bool, path: str) -> None:
    """Train the BPE on the first data.tokenizer_train_chars characters of a file corpus's
    training side and save it to `path` (run apart from the builder: the sample and the
    trainer's memory go with the process)."""
    docs = sources.documents(cfg)
    docs = encode.chunked(docs) if chunk else docs
    train_side = (t for k, t in docs if not sources.is_val(k, cfg.val_fraction))
    BPETokenizer.train(train_side, cfg.vocab_size, cfg.tokenizer_train_chars).save(Path(path))


def reusable_tokenizer(folder: Path, key: str) -> Path | None:
    """The tokenizer.json of a finished cache in `folder` trained on the sample `key` (its
    checksum checked), or None."""
    for meta_file in folder.glob("*/meta.json"):
        try:
            meta = json.loads(meta_file.read_text())
            found = meta_file.parent / "tokenizer.json"
            if meta.get("tokenizer_sample") == key and (
                file_sha256(found) == meta["sha256"]["tokenizer.json"]
            ):
                return found
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return None


def truncated(result: encode.UnitResult, room: int) -> encode.UnitResult | None:
    """`result` cut after the document that reaches `room` tokens (rewritten in place), or None
    if it does not reach it."""
    ends = np.cumsum(result.lengths)
    if not len(ends) or ends[-1] < room:
        return None
    keep = int(np.searchsorted(ends, room)) + 1
    held = result.held_out[:keep]
    n_train, n_val = result.n_train, result.n_val
    tokens = np.fromfile(result.path, dtype=result.extra["dtype"])
    train, val = tokens[:n_train], tokens[n_train : n_train + n_val]
    kept_train = int(result.lengths[:keep][~held].sum())
    kept_val = int(result.lengths[:keep][held].sum())
    np.concatenate([train[:kept_train], val[:kept_val]]).tofile(result.path)
    return encode.UnitResult(
        result.path,
        file_sha256(Path(result.path)),
        result.lengths[:keep],
        held,
        result.chars[:keep],
        result.digests[:keep],
        result.extra,
    )


# ---------------------------------------------------------------- the build
class Build:
    """One build of the token cache `final` for a document corpus."""

    def __init__(self, cfg: DataConfig, final: Path, progress: Progress, workers: int | None):
        self.cfg, self.final, self.progress = cfg, final, progress
        self.workers = workers or default_workers()
        self.hf = sources.open_hf(cfg)[0] if cfg.source == "hf" else None
        self.chunk = encode.few_documents(sources.documents(cfg, self.hf))
        if cfg.source == "hf":
            self.plan = None
            record = {"hf_unit_rows": HF_UNIT_ROWS}
        else:
            self.plan = plan.units(cfg, unit_bytes=1 << 62 if self.chunk else None)
            record = {"units": [[list(vars(p).values()) for p in u] for u in self.plan]}
        record = json.loads(json.dumps({**record, "chunk": self.chunk}))  # as read back
        self.partial = Partial(final, record)
        _write_atomic(self.partial.dir / supersede.LINEAGE_FILE, supersede.lineage(cfg))
        self.t0 = time.perf_counter()
        self.sample_key, self.tokenizer_trained = None, cfg.tokenizer == "bpe"
        self.tokenizer, self.tokenizer_s = self._tokenizer()
        self.progress.stage("encoding")
        self.dtype = np.dtype(np.uint16 if self.tokenizer.vocab_size <= 2**16 else np.uint32)

    def _tokenizer(self):
        """The partial build's tokenizer, else that of a finished cache next to it trained on
        the same sample, else one trained on the first characters of the train side (kept with
        the units it encodes). A large sample is trained in a spawned process: its memory is
        freed before the workers start."""
        cfg, path = self.cfg, self.partial.dir / "tokenizer.json"
        if cfg.tokenizer == "byte":
            return ByteTokenizer(), 0.0
        key_file = self.partial.dir / "tokenizer_sample"
        if path.exists():  # a resumed build: its units were encoded with this one
            if not key_file.exists():
                self.sample_key = sample_key(self._train_side(), cfg.vocab_size, self._max_chars)[0]
                _write_atomic(key_file, self.sample_key)
            self.sample_key = key_file.read_text()
            return BPETokenizer.load(path), 0.0
        t0 = time.perf_counter()
        self.progress.stage("reading the BPE training sample")
        self.sample_key, chars = sample_key(self._train_side(), cfg.vocab_size, self._max_chars)
        tmp = path.with_name("tokenizer.json.tmp")
        if found := reusable_tokenizer(self.final.parent, self.sample_key):
            self.progress.stage(f"the BPE of the same sample reused from {found.parent.name}")
            shutil.copyfile(found, tmp)
            self.tokenizer_trained = False
        elif self.plan is not None and chars >= APART_MIN_CHARS:
            self.progress.stage(f"training the BPE on {chars:,} characters")
            procs.run_apart(train_tokenizer, cfg, self.chunk, str(tmp))
        else:
            self.progress.stage(f"training the BPE on {chars:,} characters")
            BPETokenizer.train(self._train_side(), cfg.vocab_size, self._max_chars).save(tmp)
        os.replace(tmp, path)
        _write_atomic(key_file, self.sample_key)
        return BPETokenizer.load(path), time.perf_counter() - t0

    @property
    def _max_chars(self) -> int:
        return self.cfg.tokenizer_train_chars

    def _train_side(self) -> Iterator[str]:
        """The training side's texts, in order (the BPE sample is their first characters)."""
        docs = sources.documents(self.cfg, self.hf)
        docs = encode.chunked(docs) if self.chunk else docs
        return (t for k, t in docs if not sources.is_val(k, self.cfg.val_fraction))

    def finished(self) -> bool:
        return bool(self.partial.done) and bool(self.partial.done[-1].get("last"))

    def offer(self, result: encode.UnitResult) -> bool:
        """Accept the next unit in order; True once data.max_tokens is reached (the unit cut
        after the document that reaches it)."""
        limit, last = self.cfg.max_tokens, False
        if limit is not None:
            cut = truncated(result, limit - self.partial.tokens())
            result, last = (cut, True) if cut is not None else (result, False)
        log = {**result.extra.get("log", {}), **({"last": True} if last else {})}
        entry = self.partial.accept(result, log)
        self.progress.advance(entry["chars"], entry["train"] + entry["val"])
        return last

    def _tmp(self, index: int) -> str:
        return str(self.partial.units / f"u{index:06d}.bin.tmp-{os.getpid()}")

    # ------------------------------------------------------------ file sources
    def jobs(self) -> Iterator[encode.UnitJob]:
        """The units not done yet (a corpus of few documents: one unit, cut into chunks)."""
        for index, pieces in enumerate(self.plan):
            if index >= len(self.partial.done):
                yield encode.UnitJob(
                    tuple(pieces),
                    self.cfg,
                    self._tmp(index),
                    self.dtype.name,
                    self.chunk,
                    self.identity(pieces),
                    encode.BATCH_CHARS,
                )

    @functools.cached_property  # the tokenizer's sha256 once, not once per unit
    def unit_settings(self) -> list:
        """The settings that shape a unit's documents, their split and their tokens."""
        cfg, tokenizer = self.cfg, self.partial.dir / "tokenizer.json"
        settings = [cfg.source, cfg.tokenizer, cfg.val_fraction, cfg.doc_separator, cfg.text_field]
        settings += [self.dtype.name, self.chunk, encode.MIN_DOCS_FOR_FILE_SPLIT]
        settings.append(file_sha256(tokenizer) if tokenizer.exists() else "byte")
        return settings

    def identity(self, pieces: list[sources.Piece]) -> str:
        """What a unit's tokens depend on: its pieces' names, places and bytes, the tokenizer
        and the settings that shape documents and their split. Remembered by the pieces' files'
        stats (training.data.filehash), so a rebuild after an edit reads only the edited files'
        units here."""
        h, settings = hashlib.sha256(), self.unit_settings
        places = [json.dumps([p.rel, p.start, p.end, p.base, p.kind]) for p in pieces]
        stats, newest = signature_of([(p.rel, Path(p.path)) for p in pieces])
        memo = ("unit", json.dumps(settings), *places, stats)
        if ident := recall(memo, in_process=False):  # asked once per build: keep none here
            return ident
        h.update(json.dumps(settings).encode())
        for p, place in zip(pieces, places):
            h.update(place.encode())
            with open(p.path, "rb") as f:
                f.seek(p.start)
                left = p.end - p.start
                while left > 0 and (block := f.read(min(left, 1 << 22))):
                    h.update(block)
                    left -= len(block)
        remember(memo, h.hexdigest()[:32], newest, in_process=False)
        return h.hexdigest()[:32]

    def run_files(self) -> None:
        """Every unit not done yet, in order: another cache's tokens of the same unit (same
        bytes, tokenizer and settings) when there are some, else encoded."""
        todo = list(self.jobs())
        found = reusable_units(self.final.parent) if self.cfg.max_tokens is None else {}
        encoded = [job for job in todo if job.ident not in found]
        results = self._encoded(encoded)
        for job in todo:
            entry = self.partial.reuse(found[job.ident]) if job.ident in found else None
            if entry is not None:
                self.progress.advance(entry["chars"], entry["train"] + entry["val"], copied=True)
                continue
            if job.ident in found:  # spoiled: encode it here after all
                result = job.run(self.tokenizer)
                result.extra = {"dtype": self.dtype.name, "log": {"ident": job.ident}}
            else:
                result = next(results)
            if self.offer(result):
                results.close()
                return

    def _encoded(self, jobs: list[encode.UnitJob]) -> Iterator[encode.UnitResult]:
        """The jobs' results in order: in worker processes, or here for one job or worker."""
        extra = {"dtype": self.dtype.name}
        if self.workers <= 1 or len(jobs) <= 1:
            for job in jobs:
                result = job.run(self.tokenizer)
                result.extra = {**extra, "log": {"ident": job.ident}}
                yield result
            return
        tok = str(self.partial.dir / "tokenizer.json") if self.cfg.tokenizer == "bpe" else None
        with _worker_pool(min(self.workers, len(jobs)), tok) as pool:
            try:
                for job, result in zip(jobs, pool.imap(encode.run_in_worker, jobs)):
                    result.extra = {**extra, "log": {"ident": job.ident}}
                    yield result
            finally:
                pool.terminate()

    # ------------------------------------------------------------ Hugging Face datasets
    def run_hf(self) -> None:
        """Units of HF_UNIT_ROWS rows, in order, from the first row not done yet."""
        start = sum(e["rows"] for e in self.partial.done)
        ds = self.hf
        if start:
            ds = ds.select(range(start, len(ds))) if hasattr(ds, "__len__") else ds.skip(start)
        docs = ((str(start + int(k)), t) for k, t in sources.hf_documents(ds, self.cfg.text_field))
        docs = encode.chunked(docs) if self.chunk else docs
        while True:
            rows = list(islice(docs, HF_UNIT_ROWS))
            if not rows:
                return
            index = len(self.partial.done)
            result = encode.encode_documents(
                rows, self.tokenizer, self.dtype, Path(self._tmp(index)), self.cfg.val_fraction
            )
            result.extra = {"dtype": self.dtype.name, "log": {"rows": len(rows)}}
            if self.offer(result):
                return

    # ------------------------------------------------------------ meta.json
    def meta(self) -> dict:
        done, cfg = self.partial.done, self.cfg
        total = sum(int(e["digest"], 16) for e in done) % 2**64
        fingerprint, description = _describe(cfg, f"{total:016x}"[:12], done)
        if cfg.max_tokens is not None:  # the documents read depend on the stop: name the source
            fingerprint = f"{source_fingerprint(cfg)}-first{cfg.max_tokens}"
        counts = UnigramCounts(self.tokenizer.vocab_size)
        sha256 = concatenate(self.partial, self.dtype, counts)
        drop = ("last", "file", "ident" if cfg.max_tokens is not None else "")  # cut: not reused
        if cfg.tokenizer == "bpe":
            sha256["tokenizer.json"] = file_sha256(self.partial.dir / "tokenizer.json")
        return {
            "fingerprint": fingerprint,
            "description": description,
            "tokenizer": cfg.tokenizer,
            "vocab_size": self.tokenizer.vocab_size,
            "eot_id": self.tokenizer.eot_id,
            "dtype": self.dtype.name,
            "n_train_tokens": sum(e["train"] for e in done),
            "n_val_tokens": sum(e["val"] for e in done),
            "n_train_docs": sum(e["docs_train"] for e in done),
            "n_val_docs": sum(e["docs_val"] for e in done),
            "train_chars": sum(e["train_chars"] for e in done),
            "unigram_entropy": counts.entropy(),  # nats per train token (training.data.unigram)
            "units": [{k: v for k, v in e.items() if k not in drop} for e in done],
            "tokenizer_sample": self.sample_key,  # its BPE is reused for the same sample
            "tokenizer_trained": self.tokenizer_trained,
            "tokenizer_seconds": round(self.tokenizer_s, 2),
            "lineage": supersede.lineage(cfg),  # a newer cache of the same lineage replaces it
            "build_seconds": round(time.perf_counter() - self.t0, 2),
            "sha256": sha256,  # verified on load (store.cache_problem)
        }


def _describe(cfg: DataConfig, digest: str, done: list[dict]) -> tuple[str, str]:
    """(fingerprint of the decoded documents, description)."""
    n_docs = sum(e["docs_train"] + e["docs_val"] for e in done)
    return sources.describe_corpus(cfg, digest, n_docs, sum(e["chars"] for e in done))


def build_cache(
    cfg: DataConfig, final: Path, progress: Progress, workers: int | None = None
) -> None:
    """Build (or finish building) the token cache `final` of a document corpus."""
    build = Build(cfg, final, progress, workers)
    if not build.finished():
        build.run_hf() if cfg.source == "hf" else build.run_files()
    done = build.partial.done
    if not done or not sum(e["docs_train"] + e["docs_val"] for e in done):
        raise ConfigError(f"data.source={cfg.source}: the corpus is empty")
    check_split(
        sum(e["docs_train"] for e in done), sum(e["docs_val"] for e in done), cfg.val_fraction
    )
    publish(build.partial.dir, build.meta(), final)
    remove_units(final)
    for folder, size in supersede.remove_superseded(final, supersede.lineage(cfg)):
        progress.note(f"removed the superseded cache {folder} ({size / 1e6:,.0f} MB)")


def remove_units(cache: Path) -> None:
    """The units' shards and log, once train.bin and val.bin hold their tokens."""
    shutil.rmtree(cache / "units", ignore_errors=True)
    for name in ("done.jsonl", "plan.json", "tokenizer_sample", supersede.LINEAGE_FILE):
        (cache / name).unlink(missing_ok=True)
