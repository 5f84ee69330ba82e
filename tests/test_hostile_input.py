"""Hostile paths, Hydra command lines, and machines that cannot hold a run: exit 2 with one
`error:` line before anything is written (the contract of tests/test_bad_input.py, whose
fixtures this module shares)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile

import pytest
from input_helpers import ROOT, assert_nothing_written, compose, free_port, one_error_line

LONG = "a" * 300  # over the 255 bytes a filesystem allows in one name (errno 36)


def train_error(place, capsys, *overrides: str) -> str:
    """The one `error:` line of `training.train` with `overrides`, after checking exit 2 and
    that nothing was written."""
    from training.train import _main

    cfg = compose(*place["overrides"], *overrides)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    message = one_error_line(capsys.readouterr().err)
    assert_nothing_written(place)
    return message


@pytest.mark.parametrize(
    "override, message",
    [
        (f"paths.runs_dir={{out}}/{LONG}", "paths.runs_dir: a name in the path is 300 bytes"),
        (f"paths.cache_dir={{out}}/{LONG}", "paths.cache_dir: a name in the path is 300 bytes"),
        (f"tracking.uri=sqlite:///{{out}}/{LONG}/m.db", "tracking.uri: a name in the path is 300"),
        ("paths.runs_dir=/proc/x", "paths.runs_dir: cannot create a folder in /proc"),
        ("paths.cache_dir=/proc/self/x", "paths.cache_dir: cannot create a folder in /proc/"),
    ],
)
def test_paths_no_folder_can_be_made_at_are_one_line(place, capsys, override, message):
    """Long names and /proc were an OSError traceback after the store and cache were built."""
    line = train_error(place, capsys, override.format(out=place["out"]))
    assert line.startswith(message), line


@pytest.mark.parametrize("field", ["paths.runs_dir", "paths.cache_dir", "tracking.uri"])
def test_a_read_only_folder_is_found_before_any_work(place, capsys, monkeypatch, field):
    """A read-only store, runs or cache folder was found after the cache or the store was
    made. Root writes through chmod 000, so the read-only disk is simulated: no folder can be
    made in the place the field names."""
    blocked = place["corpus"] / "readonly"
    blocked.mkdir()
    make = tempfile.mkdtemp

    def mkdtemp(*args, dir=None, **kwargs):
        if dir is not None and str(dir) == str(blocked):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dir))
        return make(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    value = f"sqlite:///{blocked}/x/m.db" if field == "tracking.uri" else f"{blocked}/x"
    line = train_error(place, capsys, f"{field}={value}")
    assert line == f"{field}: cannot create a folder in {blocked} (Read-only file system)"


@pytest.mark.parametrize("tool", ["fit", "report", "compare_laws"])
def test_analysis_out_with_a_name_too_long_is_one_line(tmp_path, capsys, tool):
    from analysis.fits import cli as fit_cli
    from analysis.fits import compare_laws
    from analysis.report import cli as report

    main = {"fit": fit_cli.main, "report": report.main, "compare_laws": compare_laws.main}[tool]
    csv = ROOT / "results" / "ref_ladder" / "runs.csv"
    assert main(["--csv", str(csv), "--out", str(tmp_path / LONG / "x")]) == 2
    assert one_error_line(capsys.readouterr().err).startswith("--out: a name in the path is 300")


def _prepare(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cache = f"paths.cache_dir={tmp_path / 'out' / 'cache'}"
    return subprocess.run(
        [sys.executable, "-m", "training.data", "prepare", cache, *overrides],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        (("train.tokens=abc",), "train.tokens: expected an integer, got 'abc'"),
        ((f"paths.cache_dir=/tmp/{LONG}",), "paths.cache_dir: a name in the path is 300 bytes"),
    ],
)
def test_prepare_checks_the_whole_command_line(tmp_path, overrides, message):
    """`prepare train.tokens=abc` prepared the corpus and exited 0."""
    out = _prepare(tmp_path, *overrides)
    assert out.returncode == 2, out.stderr[-2000:]
    assert one_error_line(out.stderr).startswith(message), out.stderr
    assert not (tmp_path / "out").exists()


def _cli(place, module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("NOPE", None)
    return subprocess.run(
        [sys.executable, "-m", module, *args, *_without(place["overrides"], args)],
        cwd=place["cwd"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _without(overrides: list[str], args) -> list[str]:
    """`overrides` less the keys `args` sets (a sweep refuses a key given twice)."""
    keys = {a.split("=", 1)[0] for a in args}
    return [o for o in overrides if o.split("=", 1)[0] not in keys]


HYDRA_CASES = [
    (("-cn", "nope"), "-cn nope: no config 'nope'; available: config, run"),
    (("--config-dir", "/nonexistent"), "--config-dir: /nonexistent is not a folder"),
    (
        ("tracking.experiment=${oc.env:NOPE}",),
        'tracking.experiment: KeyError raised while resolving interpolation: "Environment '
        "variable 'NOPE' not found\"",
    ),
    ((f"+tracking.tags.{'t' * 260}=v",), f"tracking.tags.{'t' * 46}...: File name too long"),
]


@pytest.mark.parametrize(
    "module, args, message",
    [("training.train", *case) for case in HYDRA_CASES]
    + [("sweeps.run", *HYDRA_CASES[0]), ("sweeps.run", *HYDRA_CASES[2])],
)
def test_hydra_tracebacks_are_one_line(place, module, args, message):
    """Each was Hydra's traceback (exit 1): a config name or folder that does not exist, an
    environment variable that is not set, a key Hydra looks up as a file (errno 36)."""
    out = _cli(place, module, *args)
    assert out.returncode == 2, out.stderr[-2000:]
    assert one_error_line(out.stderr) == message
    assert_nothing_written(place)


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "tracking.experiment=" + "e" * 600,
            "tracking.experiment: 600 characters, over MLflow's 500",
        ),
        (
            "tracking.run_name=" + "r" * 8001,
            "tracking.run_name: 8001 characters, over MLflow's 8000",
        ),
    ],
)
def test_names_over_mlflow_limits_are_refused_before_any_work(place, capsys, override, message):
    """MLflow refused them with a traceback once the cache and the store were made."""
    assert train_error(place, capsys, override).startswith(message)


def test_a_tag_key_over_mlflow_limit_is_refused():
    """On the command line Hydra refuses such a key first (a file name over 255 bytes)."""
    from training.config import ConfigError, TrackingConfig

    with pytest.raises(ConfigError, match="tracking.tags: a key of 251 characters"):
        TrackingConfig.from_dict({"tags": {"k" * 251: "v"}})


@pytest.mark.parametrize("uri", ["postgresql://u@127.0.0.1:9/db", "mysql://u@127.0.0.1:9/db"])
def test_a_database_uri_without_its_driver_is_one_line(place, capsys, uri):
    """The missing driver was found after the token cache was built (68 lines)."""
    from sqlalchemy.engine import make_url

    try:
        make_url(uri).get_dialect().import_dbapi()
        pytest.skip("the driver is installed here")
    except ImportError:
        pass
    line = train_error(place, capsys, f"tracking.uri={uri}")
    assert line.startswith(f"tracking.uri: {uri}: cannot open this database (ModuleNotFoundError")


@pytest.mark.parametrize(
    "override, message",
    [
        ("tracking.uri=http://127.0.0.1:{port}", "tracking.uri=http://127.0.0.1:{port}: MLflow"),
        ("paths.runs_dir=/proc/x", "paths.runs_dir: cannot create a folder in /proc"),
    ],
)
def test_a_sweep_checks_its_store_and_folders_before_building_caches(place, override, message):
    """An unreachable server was found after the sweep built its token cache (22 MB)."""

    port = free_port()
    out = _cli(place, "sweeps.run", "sweep=tiny", override.format(port=port))
    assert out.returncode == 2, out.stderr[-2000:]
    assert one_error_line(out.stderr).startswith(message.format(port=port)), out.stderr
    assert_nothing_written(place)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (  # weights fit this machine, AdamW's 16 bytes per parameter do not
            ("model.size=5e9",),
            "model: a training step of 4.97e+09 parameters on a micro-batch of 64 x 256 tokens",
        ),
        (  # 65,536 sequences in one micro-batch: was OOM-killed after the run was created
            ("train.batch_tokens=16777216", "train.tokens=33554432"),
            "train.micro_batch: a training step of 1.77e+06 parameters on a micro-batch of "
            "65536 x 256 tokens",
        ),
    ],
)
def test_a_step_that_cannot_fit_in_memory_is_refused_before_any_work(
    place, capsys, monkeypatch, overrides, message
):
    """The memory guard counts optimizer state and activations (models.accounting's
    memory_estimate), against a machine of 32 GiB whatever this one has."""
    import training.spec

    monkeypatch.setattr(training.spec, "_host_memory", lambda: 32 * 2**30)
    line = train_error(place, capsys, *overrides)
    assert line.startswith(message), line
    assert "more than this machine's 32 GiB" in line


HPARAMS = ROOT / "results" / "ref_hparams"


def test_curves_in_any_row_order_are_the_same_curves():
    """curves.csv in reverse row order changed the 25% median error from 24% to 1.8%: each
    run's points are taken in step order."""
    import pandas as pd

    from analysis.tuning.curves import curves_of

    runs, points = pd.read_csv(HPARAMS / "runs.csv"), pd.read_csv(HPARAMS / "curves.csv")
    forward = curves_of(runs, points, "train_loss")
    backward = curves_of(runs, points.iloc[::-1], "train_loss")
    assert forward.keys() == backward.keys() and len(forward) > 100
    for run_id, c in forward.items():
        assert (c.steps == backward[run_id].steps).all() and (c.loss == backward[run_id].loss).all()
        assert (c.steps[1:] > c.steps[:-1]).all()


@pytest.mark.parametrize(
    "spoil, message",
    [
        (
            lambda p: p.assign(tokens=p["tokens"].where(p.index != 5, p["tokens"][4])),
            "has 2 points at tokens 32000 (rows 4, 5)",
        ),
        (
            lambda p: p.assign(tokens=p["tokens"].where(p.index != 5, float("nan"))),
            "column 'tokens' has 1 missing, non-numeric, negative",
        ),
        (
            lambda p: p.assign(tokens=p["tokens"].where(p.index != 5, -5)),
            "column 'tokens' has 1 missing, non-numeric, negative",
        ),
        (lambda p: p.assign(run_id="x" + p["run_id"]), "no run_id in common with --csv"),
    ],
    ids=["repeated step", "nan tokens", "negative tokens", "no common run_id"],
)
def test_bad_curve_points_are_one_line(tmp_path, capsys, spoil, message):
    """Repeated steps and NaN tokens were fitted, negative tokens gave RuntimeWarnings, no
    common run_id an empty table, all with exit 0."""
    import pandas as pd

    from analysis.tuning import curves

    bad = tmp_path / "curves.csv"
    spoil(pd.read_csv(HPARAMS / "curves.csv")).to_csv(bad, index=False)
    out = tmp_path / "errors.md"
    argv = ["--csv", str(HPARAMS / "runs.csv"), "--curves", str(bad), "--out", str(out)]
    assert curves.main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"--curves {bad}: ") and message in line, line
    assert not out.exists()


NESTED = {
    "nest_fixed": ("fixed:\n  train: {lr: 0.001}\n", "sweep.fixed.train: a nested mapping"),
    "nest_variant": (
        "variants:\n  base: {}\n  v: {model: {norm: rmsnorm}}\n",
        "sweep.variants.v.model: a nested mapping",
    ),
    "nest_tune": ("tune:\n  train: {lr: [0.1, 0.2]}\n", "sweep.tune.train: expected a non-empty"),
}


@pytest.mark.parametrize("name", sorted(NESTED))
def test_a_nested_mapping_in_a_sweep_file_is_one_line(place, tmp_path, name):
    """Hydra's "no viable alternative at input" traceback: a mapping is no override value."""
    text, message = NESTED[name]
    (tmp_path / "sweeps" / "sweep").mkdir(parents=True)
    (tmp_path / "sweeps" / "sweep" / f"{name}.yaml").write_text(
        "axes:\n  model.size: [2e4]\n" + text
    )
    args = ("--config-dir", str(tmp_path / "sweeps"), f"sweep={name}", "sweep.dry_run=true")
    out = _cli(place, "sweeps.run", *args)
    assert out.returncode == 2, out.stderr[-2000:]
    assert one_error_line(out.stderr).startswith(message), out.stderr
    assert_nothing_written(place)


def test_compare_laws_on_one_run_is_an_error(tmp_path, capsys):
    """Every law was skipped, and the table of skips written with exit 0."""
    from analysis.fits import compare_laws

    one = tmp_path / "one.csv"
    one.write_text("".join((ROOT / "results" / "ref_ladder" / "runs.csv").open().readlines()[:2]))
    assert compare_laws.main(["--csv", str(one), "--out", str(tmp_path / "out")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("no law could be fitted to 1 run(s): "), line
    assert not (tmp_path / "out").exists()


def test_a_failed_sweep_report_is_said_as_one_line(tmp_path):
    """The report's own error line is folded into the sweep's, which then exits 1."""
    from omegaconf import OmegaConf

    from sweeps.sweep_report import run_report

    out = tmp_path / "report"
    cfg = OmegaConf.create({"sweep": {"report": {"out": str(out), "args": ["--bootstrap", "10"]}}})
    path, error = run_report(cfg, f"sqlite:///{tmp_path / 'none.db'}", "x", "abc")
    assert path is None and not out.exists()
    assert error == (
        "sweep.report: analysis.report exited with 2 (--tracking-uri: no MLflow store at "
        f"{tmp_path / 'none.db'} (run a sweep first))"
    )


@pytest.mark.slow
def test_a_sweep_whose_report_fails_exits_non_zero(place, tmp_path):
    """4 runs are too few for the report's fit: the sweep trained them and exited 0."""
    report = f"+sweep.report={{out: {tmp_path / 'report'}, args: [--bootstrap, '10']}}"
    out = _cli(place, "sweeps.run", "sweep=tiny", report, timeout=600)  # trains 4 points
    assert out.returncode == 1, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out.stderr[-3000:]
    assert errors[0].startswith("error: sweep.report: analysis.report exited with 2 ("), errors


def test_fingerprints_are_remembered_under_paths_cache_dir_only(
    place, capsys, monkeypatch, tmp_path
):
    """A run that failed on its input wrote a fingerprint memo under the default cache folder
    (the project's), whatever paths.cache_dir said."""
    from training.data import filehash

    default = tmp_path / "default_cache"
    default.mkdir()
    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(default))
    monkeypatch.setattr(filehash, "_hashed", {})
    monkeypatch.setattr(filehash, "_unsaved", {})
    try:
        line = train_error(place, capsys, "train.resume=true")
    finally:
        filehash.use_cache_dir(None)
    assert line.startswith("train.resume=true: no checkpoint at ")
    assert list(default.iterdir()) == []


@pytest.mark.parametrize("kind", ["fifo", "symlink loop", "unreadable"])
def test_a_corpus_file_that_cannot_be_read_is_one_line(place, capsys, monkeypatch, kind):
    """A FIFO hung `train` and `prepare`; a symlink loop was a traceback; a chmod 000 corpus
    read as holding no .txt. Tests run as root here, who reads through chmod 000: the
    unreadable file is simulated by os.access saying no for it."""
    corpus = place["corpus"] / "folder"
    corpus.mkdir()
    (corpus / "a.txt").write_text("hello world. " * 400)
    bad = corpus / "b.txt"
    if kind == "fifo":
        os.mkfifo(bad)
        message = f"data.path: {bad} is not a regular file (a FIFO, socket or device)"
    elif kind == "symlink loop":
        bad.symlink_to(corpus / "c.txt")
        (corpus / "c.txt").symlink_to(bad)
        message = f"data.path: {bad} is a symbolic link to nothing (a loop or a missing target)"
    else:
        bad.write_text("secret")
        real = os.access
        monkeypatch.setattr(
            os, "access", lambda p, m, **k: False if str(p) == str(bad) else real(p, m, **k)
        )
        message = f"data.path: cannot read {bad} (permission denied)"
    line = train_error(place, capsys, "data=text", f"data.path={corpus}", "data.tokenizer=byte")
    assert line == message


def test_an_unreadable_corpus_folder_is_not_an_empty_one(place, capsys, monkeypatch):
    corpus = place["corpus"] / "folder"
    corpus.mkdir()
    (corpus / "a.txt").write_text("hello world. " * 400)
    real = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m, **k: False if str(p) == str(corpus) else real(p, m, **k)
    )
    line = train_error(place, capsys, "data=text", f"data.path={corpus}")
    assert line == f"data.path: cannot read the folder {corpus} (permission denied)"


def test_prepare_of_an_empty_token_shard_is_an_error(tmp_path):
    """A shard whose header says 0 tokens was prepared as 0 tokens with exit 0."""
    import numpy as np

    from training.data import write_bin

    write_bin(tmp_path / "zero.bin", np.zeros(0, np.uint16))
    out = _prepare(tmp_path, "data=tokens", f"data.path={tmp_path / 'zero.bin'}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert (
        one_error_line(out.stderr)
        == f"data.path: {tmp_path / 'zero.bin'} holds no tokens (its header says 0)"
    )


@pytest.mark.parametrize("tokenizer", ["byte", "bpe"])
def test_a_bad_jsonl_corpus_leaves_no_lock_or_partial_build(place, capsys, tokenizer):
    """A bad record is found while building the cache: its `.lock` and `.partial` stayed."""
    import json

    path = place["corpus"] / "docs.jsonl"
    good = "".join(json.dumps({"text": f"record {i} " * 30}) + "\n" for i in range(60))
    path.write_text(good + "{not json}\n" + good)
    from training.train import _main

    cfg = compose(
        *place["overrides"], "data=text", f"data.path={path}", f"data.tokenizer={tokenizer}"
    )
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    assert one_error_line(capsys.readouterr().err).startswith(f"data.path: {path}:61 is not JSON")
    left = sorted(p.name for p in (place["out"] / "cache").iterdir())
    assert not [n for n in left if n.endswith((".lock", ".partial"))], left
    assert sorted(p.name for p in place["out"].iterdir()) == ["cache"]


def _can_mount_tmpfs() -> bool:
    """A tmpfs of its own in a user and mount namespace (`unshare -rm`, no root needed where
    unprivileged user namespaces are allowed): a real disk that fills up."""
    try:
        out = subprocess.run(
            ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m none /mnt"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


# In its own namespace: a 64 MiB tmpfs at $1 holds the store (made there, as a sweep makes it
# before its runs), a filler leaves $2 KiB free, the run fills that and fails; then the filler
# is removed ("free space") and the same command reruns. Each attempt's stderr, exit code and
# a copy of the store go to $3.
FULL_DISK_SCRIPT = r"""
set -u
disk=$1; free_kb=$2; out=$3; shift 3
mount -t tmpfs -o size=64m none "$disk" || exit 99
"$PYTHON" -c "from training import tracking; tracking.ensure_experiment('sqlite:///$disk/m.db', 'scaling-lab')" || exit 98
avail_kb=$(df --output=avail -k "$disk" | tail -1)
dd if=/dev/zero of="$disk/filler" bs=1k count=$((avail_kb - free_kb)) status=none
"$PYTHON" -m training.train "tracking.uri=sqlite:///$disk/m.db" "$@" 2> "$out/full.err"
echo $? > "$out/full.rc"
cp "$disk/m.db" "$out/full.db"
rm "$disk/filler"
"$PYTHON" -m training.train "tracking.uri=sqlite:///$disk/m.db" "$@" 2> "$out/freed.err"
echo $? > "$out/freed.rc"
cp "$disk/m.db" "$out/freed.db"
"""


def _store_rows(db, sql: str) -> list:
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.skipif(not _can_mount_tmpfs(), reason="no tmpfs can be mounted (unshare -rm)")
def test_a_store_on_a_full_disk_is_one_line_and_the_run_failed(tmp_path):
    """A store whose disk filled up during a run was 117 lines of traceback and the run left
    RUNNING (issue 45): one `error:` line naming the store and the run (FAILED), exit 2,
    nothing recorded lost, and once space is freed the same command resumes the run."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    words = "the quick brown fox jumps over the lazy dog while a scaling law fits the loss "
    for i in range(40):  # ~250 KB: 100 steps of 1024 tokens are under one epoch, no warning
        (corpus / f"doc{i}.txt").write_text(f"document {i}. " + words * 80)
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    out.mkdir()
    overrides = [
        "data=text",
        f"data.path={corpus}",
        "data.tokenizer=byte",
        "data.eval_tokens=2048",
        "model.size=1e4",
        "train.seq_len=64",
        "train.batch_tokens=1024",
        "train.tokens=102400",  # 100 steps
        "train.log_every=1",  # five points a step: the 80 KiB left fill up within the run
        "train.eval_every=1000",
        "train.checkpoint_every=10",
        "train.progress=none",
        "tracking.system_metrics=false",
        f"paths.runs_dir={tmp_path / 'runs'}",
        f"paths.cache_dir={tmp_path / 'cache'}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.update(PYTHON=sys.executable)
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        ["unshare", "-rm", "bash", "-c", FULL_DISK_SCRIPT, "bash", str(disk), "80", str(out)]
        + overrides,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    err = (out / "full.err").read_text()
    assert (out / "full.rc").read_text().strip() == "2", err[-3000:]
    line = one_error_line(err)
    assert line.startswith(
        f"tracking.uri=sqlite:///{disk}/m.db: the store cannot be written (database or disk "
        "is full) at step "
    ), line
    [(run_id, status)] = _store_rows(out / "full.db", "SELECT run_uuid, status FROM runs")
    assert status == "FAILED" and f"MLflow run {run_id} is FAILED" in line, line
    assert "rerun the same command" in line
    reason = _store_rows(out / "full.db", "SELECT value FROM tags WHERE key='failure_reason'")
    assert reason == [("MlflowException: database or disk is full",)]
    points = "SELECT key, step, value FROM metrics WHERE run_uuid = ?"
    before = _store_rows(out / "full.db", points.replace("?", f"'{run_id}'"))
    assert 0 < len({s for k, s, _ in before if k == "train_loss"}) < 100  # stopped mid-run

    freed = (out / "freed.err").read_text()
    assert (out / "freed.rc").read_text().strip() == "0", freed[-3000:]
    assert _store_rows(out / "freed.db", "SELECT run_uuid, status FROM runs") == [
        (run_id, "FINISHED")
    ]  # the same MLflow run, resumed
    after = _store_rows(out / "freed.db", points.replace("?", f"'{run_id}'"))
    assert set(before) <= set(after)  # nothing recorded was lost
    steps = [s for k, s, _ in after if k == "train_loss"]
    assert sorted(steps) == [1024 * i for i in range(1, 101)]  # each step once
