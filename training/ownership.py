"""Who trains a run key, decided in the tracking store (not only in the runs folder).

The run-key lock (`training.checkpoint.run_lock`) serializes processes that share a runs folder.
Two processes with different runs folders and one store would both train the key into one
MLflow run, so a process also claims the key in the store before it decides anything:

1. write its claim, the experiment tag `trainer.<run_key>.<token>` = JSON {host, pid, start
   (the process's start time on its host), since and beat (ms), run_id};
2. read back every claim on the key; the live ones (below) are ordered by `since`, then token;
3. the first proceeds; any other deletes its own claim and raises `RunKeyTaken` (the CLI: one
   `error:` line naming the process and MLflow run that trains the key, exit 2).
Both orders of two racing processes end with one winner: a claim written after another's read
sorts after it; two claims written before either read are ordered the same way by both.
Clocks of different hosts are assumed to agree within a second or so.

A claim is live while its process is: on the same host, while that pid runs with the recorded
start time (a kill -9 frees the key at once); from another host, while its heartbeat (rewritten
every `HEARTBEAT_S` by a thread) is younger than `LEASE_S`. The owner deletes its claim when
`train()` returns; a stale claim is deleted by the next claimant.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from training.tracking import TrackingUnavailable

TAG_PREFIX = "trainer."
HEARTBEAT_S = 30.0
LEASE_S = 120.0  # a claim from another host without a heartbeat for this long is stale


class RunKeyTaken(TrackingUnavailable):
    """Another live process holds the run key's claim in this store and experiment."""


def _start_ticks(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot; None without /proc or no such process):
    tells a live claimant from a later process that reuses its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


@dataclass(frozen=True)
class Claim:
    run_key: str
    token: str
    host: str
    pid: int
    start: int | None
    since: int  # ms
    beat: int  # ms
    run_id: str | None = None

    @property
    def tag(self) -> str:
        return f"{TAG_PREFIX}{self.run_key}.{self.token}"

    def value(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if k not in ("run_key", "token")})

    @classmethod
    def parse(cls, run_key: str, tag: str, value: str) -> Claim | None:
        prefix = f"{TAG_PREFIX}{run_key}."
        if not tag.startswith(prefix):
            return None
        try:
            return cls(run_key, tag[len(prefix) :], **json.loads(value))
        except (TypeError, ValueError):
            return None

    def alive(self, now_ms: int, me: Claim) -> bool:
        if self.token == me.token:
            return True
        if self.host == me.host:
            if self.pid == me.pid:  # this process claims one key at a time: a leftover
                return False
            ticks = _start_ticks(self.pid)
            return ticks == self.start if ticks is not None else _pid_runs(self.pid)
        return now_ms - self.beat < LEASE_S * 1000

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.since / 1000, timezone.utc).strftime("%H:%M:%S UTC")
        run = f"MLflow run {self.run_id}" if self.run_id else "its MLflow run (being opened)"
        return f"pid {self.pid} on {self.host} (since {since}) into {run}"


def live_claim(client, experiment_id: str, run_key: str) -> Claim | None:
    """The first live claim on `run_key` (a process training it now), or None: a run left
    RUNNING without one was stopped without recording it (kill -9) and may be closed."""
    me = Claim(run_key, "", socket.gethostname(), os.getpid(), None, 0, 0)
    tags = client.get_experiment(experiment_id).tags
    now = int(time.time() * 1000)
    claims = [c for t, v in tags.items() if (c := Claim.parse(run_key, t, v))]
    live = sorted((c for c in claims if c.alive(now, me)), key=lambda c: (c.since, c.token))
    return live[0] if live else None


class Ownership:
    """This process's claim on a run key in one experiment (module docstring); `release` is
    safe to call at any time, also when nothing was claimed."""

    def __init__(self, client, experiment_id: str, experiment: str, run_key: str):
        self.client, self.experiment_id = client, experiment_id
        self.raw = getattr(client, "inner", client)  # no retries: heartbeat and release
        self.experiment, self.run_key = experiment, run_key
        self.claim: Claim | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # a heartbeat never rewrites a released claim

    def _write(self, claim: Claim, client=None) -> None:
        (client or self.client).set_experiment_tag(self.experiment_id, claim.tag, claim.value())

    def acquire(self) -> None:
        """Claim the key; raises `RunKeyTaken` if a live claim sorts first."""
        now = int(time.time() * 1000)
        pid, token = os.getpid(), uuid.uuid4().hex[:12]
        mine = Claim(self.run_key, token, socket.gethostname(), pid, _start_ticks(pid), now, now)
        self._write(mine)
        self.claim = mine
        tags = self.client.get_experiment(self.experiment_id).tags
        claims = [c for t, v in tags.items() if (c := Claim.parse(self.run_key, t, v))]
        now = int(time.time() * 1000)
        live = sorted((c for c in claims if c.alive(now, mine)), key=lambda c: (c.since, c.token))
        for stale in (c for c in claims if not c.alive(now, mine)):
            with contextlib.suppress(Exception):  # another claimant may have removed it
                self.client.delete_experiment_tag(self.experiment_id, stale.tag)
        if live[0].token != mine.token:
            self.release()
            raise RunKeyTaken(
                f"run key {self.run_key} is already being trained in experiment "
                f"'{self.experiment}' by {live[0].describe()}: wait for it to end (a rerun "
                "then reuses or resumes its run) or stop it"
            )

    def started(self, run_id: str) -> None:
        """Record the MLflow run in the claim and keep it alive (heartbeat thread)."""
        if self.claim is None:
            return
        self.claim = replace(self.claim, run_id=run_id)
        self._write(self.claim)
        threading.Thread(target=self._heartbeat, name="run-key-claim", daemon=True).start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock, contextlib.suppress(Exception):  # a lost server: see the metrics
                if self.claim is not None:
                    self._write(replace(self.claim, beat=int(time.time() * 1000)), self.raw)

    def release(self) -> None:
        self._stop.set()
        with self._lock:
            claim, self.claim = self.claim, None
            if claim is not None:
                with contextlib.suppress(Exception):  # a lost server: the claim goes stale
                    self.raw.delete_experiment_tag(self.experiment_id, claim.tag)
