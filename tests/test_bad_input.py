"""Bad input through the public entry points (issue 15): exit code 2, ONE stderr line
`error: <field>: ...`, and nothing written (no MLflow store, no runs or cache folder, no output
file), before any data work; plus token caches that no longer match their metadata."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from input_helpers import ROOT, assert_nothing_written, compose, free_port, one_error_line

# ---------------------------------------------------------------- training.train
TRAIN_ROWS = [
    # non-finite floats: NaN and inf passed every `<=`/`<` range check and trained
    ("train.lr=nan", "train.lr:"),
    ("train.lr=inf", "train.lr:"),
    ("train.warmup=nan", "train.warmup:"),
    ("train.min_lr_ratio=nan", "train.min_lr_ratio:"),
    ("train.decay_fraction=inf", "train.decay_fraction:"),
    ("train.label_smoothing=nan", "train.label_smoothing:"),
    ("train.grad_clip=inf", "train.grad_clip:"),
    ("train.peak_flops=nan", "train.peak_flops:"),
    ("data.val_fraction=nan", "data.val_fraction:"),
    # ranges of the optimizer settings
    ("train.beta1=1.5", "train.beta1: must be in [0, 1)"),
    ("train.beta1=-0.1", "train.beta1: must be in [0, 1)"),
    ("train.beta2=1", "train.beta2: must be in [0, 1)"),
    ("train.eps=-1", "train.eps: must be > 0"),
    ("train.eps=0", "train.eps: must be > 0"),
    ("train.weight_decay=-1", "train.weight_decay: must be in [0, inf)"),
    ("train.grad_clip=-1", "train.grad_clip: must be in [0, inf)"),
    ("train.lr=-1e-3", "train.lr: must be > 0"),
    # checks that already held (kept so they stay one line)
    ("train.tokens=2.5", "train.tokens:"),
    ("train.schedule=linear", "train.schedule:"),
    ("train.batch_tokens=100", "train.batch_tokens:"),
    ("model.n_heads=3", "model: n_heads"),
    # model fields: non-finite (inf passed every `> 0` check) and out of range
    ("model.norm_eps=inf", "model.norm_eps: expected a finite number"),
    ("model.rope_base=nan", "model.rope_base: expected a finite number"),
    ("model.init_std=inf", "model.init_std: expected a finite number"),
    ("model.dropout=nan", "model.dropout: expected a finite number"),
    ("model.size=inf", "model.size: expected a finite number"),
    ("model.norm_eps=-1", "model: norm_eps must be a positive number"),
    ("model.init_std=0", "model: init_std must be a positive number"),
    ("model.dropout=1.5", "model: dropout must be in [0, 1)"),
    ("model.size=-1", "model: size must be a positive number"),
    ("model.d_model=0", "model: d_model must be a positive integer"),
    ("data.eval_tokens=100", "data.eval_tokens:"),  # < train.seq_len: was found after tokenizing
    # trained silently (seed -1, warmup clamped to the run, decay from a negative step) or a
    # traceback (seed 1e30 in torch.manual_seed, an empty separator in str.split)
    ("train.seed=-1", "train.seed: must be in [0, 2**63 - 1]"),
    ("train.seed=1e30", "train.seed: must be in [0, 2**63 - 1]"),
    ("train.warmup=1e6", "train.warmup: 1000000 steps is more than the run's 123 steps"),
    ("train.warmup=2.5", "train.warmup: 2.5 is neither a fraction (< 1) of the run's steps"),
    ("train.decay_start_tokens=-4096", "train.decay_start_tokens: must be >= 0"),
    ("data.doc_separator=''", "data.doc_separator: must not be empty"),
    # tracking URIs MLflow cannot open (a 41-line traceback before)
    ("tracking.uri=garbage://x", "tracking.uri: unknown scheme 'garbage://'"),
    ("tracking.uri=sqlite://relative.db", "tracking.uri:"),
    ("tracking.uri=localhost:5000", "tracking.uri:"),
    ("tracking.uri=http://", "tracking.uri:"),
    ("tracking.experiment=' '", "tracking.experiment:"),
    # data errors: before the store or any cache is created
    ("data.path={corpus}/missing", "data.path:"),
    ("data.path={corpus}/empty.txt", "data.path:"),
    ("data.path={corpus}/blank.txt", "data.path:"),
    ("data.path={corpus}/blank.jsonl", "data.path:"),
    ("data.path={corpus}/binary.txt", "data.path: {corpus}/binary.txt is not a text file"),
    # tracebacks, or errors after the store was written: now checked before any work
    (
        "train.init_from={corpus}/not_a_checkpoint.pt",
        "train.init_from: {corpus}/not_a_checkpoint.pt is not a checkpoint file",
    ),
    (
        "tracking.uri=sqlite:///{corpus}/not_sqlite.db",
        "tracking.uri: {corpus}/not_sqlite.db exists and is not a SQLite database",
    ),
    ("tracking.uri=sqlite:///{corpus}", "tracking.uri: {corpus} is a folder"),
    ("paths.runs_dir={corpus}/a_file", "paths.runs_dir: {corpus}/a_file is a file, not a folder"),
    (
        "paths.cache_dir={corpus}/a_file/cache",
        "paths.cache_dir: {corpus}/a_file is a file, not a folder",
    ),
    ("train.resume=true", "train.resume=true: no checkpoint at "),  # true requires one
    ("tracking.parent_run_id=deadbeef", "tracking.parent_run_id: no run deadbeef"),
    # huge counts: 64-bit steps in MLflow and numpy (a 1e30-token run started)
    ("train.tokens=1e30", "train.tokens: must be at most 2**63 - 1, got 1e+30"),
    ("train.batch_tokens=1e30", "train.batch_tokens: must be at most 2**63 - 1"),
    ("data.eval_tokens=1e30", "data.eval_tokens: must be at most 2**63 - 1"),
    ("train.save_at_tokens=[1e30]", "train.save_at_tokens[0]: must be at most 2**63 - 1"),
    # ignored silently before: a field the schedule or the corpus never reads
    ("train.decay_start_tokens=1024", "train.decay_start_tokens: applies to train.schedule=wsd"),
    ("data.eot_id=5", "data.eot_id: applies to data.source=tokens only, got data.source=stdlib"),
    ("data.max_bytes=10", "data.max_bytes: applies to data.source=sitepackages only"),
    ("data.name=foo", "data.name: applies to data.source=hf or data.source=tokens only"),
    # AdamW multiplies the weights by 1 - lr x weight_decay <= 0 each step
    ("train.weight_decay=1e30", "train.weight_decay: lr x weight_decay = 1e+27 >= 1"),
    # fields training sets itself, given a value that is no size at all
    ("model.max_seq_len=abc", "model.max_seq_len: expected a positive integer, got 'abc'"),
    ("model.vocab_size=-1", "model.vocab_size: expected a positive integer, got -1"),
    # a model whose fp32 weights cannot fit: a traceback after the store and cache were made
    ("model.n_layers=1e30", "model: 1.8e+35 parameters need 6.72e+26 GiB for their fp32"),
    (
        "tracking.uri=sqlite:///{corpus}/a_file/mlruns.db",
        "tracking.uri: {corpus}/a_file is a file, not a folder",
    ),
    # MLflow 3 refuses a file store: a traceback after the data cache was built
    ("tracking.uri={corpus}", "tracking.uri: {corpus} is an MLflow file store"),
]
# several overrides each (the data.path rows above choose data=text themselves)
TRAIN_MULTI_ROWS = [
    (
        ("data.path={corpus}/doc.txt",),  # the stdlib corpus would train, not doc.txt
        "data.path: applies to data.source=text or data.source=tokens only, got data.source=stdlib",
    ),
    (  # larger than any tokenization of the corpus could give: before the cache is built
        ("data=text", "data.tokenizer=byte", "data.path={corpus}/doc.txt", "data.eval_tokens=1e6"),
        "data.eval_tokens=1000000: the whole corpus is 5200 bytes (at most 20800 tokens)",
    ),
]


@pytest.mark.parametrize("override, field", TRAIN_ROWS)
def test_train_bad_input_is_one_line_exit_2_and_writes_nothing(place, capsys, override, field):
    from training.train import _main

    override = override.format(corpus=place["corpus"])
    extra = ["data=text", "data.tokenizer=byte"] if override.startswith("data.path") else []
    cfg = compose(*place["overrides"], *extra, override)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith(field.format(corpus=place["corpus"])), message
    assert_nothing_written(place)


@pytest.mark.parametrize("overrides, field", TRAIN_MULTI_ROWS)
def test_train_bad_combinations_are_one_line_exit_2_and_write_nothing(
    place, capsys, overrides, field
):
    from training.train import _main

    cfg = compose(*place["overrides"], *(o.format(corpus=place["corpus"]) for o in overrides))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith(field.format(corpus=place["corpus"])), message
    assert_nothing_written(place)


TRAIN_WARNING_ROWS = [  # legal, but not what they seem: one `warning:` line, then the run
    (
        ("train.schedule=wsd", "train.decay_start_tokens=1e9"),
        "train.decay_start_tokens=1000000000 is not before the end of the run "
        "(train.tokens=2000000): the lr never decays",
    ),
    (
        ("train.tokens=1000",),
        "train.batch_tokens=16384 is more than train.tokens=1000: the run trains one batch, "
        "16384 tokens",
    ),
    (
        ("model.vocab_size=10",),
        "model.vocab_size=10 is replaced by the tokenizer's 4096 (data.tokenizer=bpe)",
    ),
    (
        ("model.max_seq_len=1e3",),
        "model.max_seq_len=1000 is replaced by train.seq_len=256 (the context length)",
    ),
]


@pytest.mark.parametrize("overrides, warning", TRAIN_WARNING_ROWS)
def test_train_surprising_values_are_one_warning_line(
    place, capsys, monkeypatch, overrides, warning
):
    """The run goes on after the warning (here to the resume error, before any work)."""
    import training.spec as spec
    from training.train import _main

    monkeypatch.setattr(spec, "_WARNED", set())  # once per process: this test's process
    cfg = compose(*place["overrides"], *overrides, "train.resume=true")
    capsys.readouterr()
    with pytest.raises(SystemExit):
        _main(cfg)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == f"warning: {warning}", lines
    assert lines[1].startswith("error: train.resume=true: no checkpoint at "), lines
    assert len(lines) == 2
    assert_nothing_written(place)


def test_a_tuning_segment_ending_before_its_decay_does_not_warn(place, capsys, monkeypatch):
    """Successive halving's segments stop before the decay on purpose."""
    import training.spec as spec
    from training.train import _main

    monkeypatch.setattr(spec, "_WARNED", set())
    cfg = compose(
        *place["overrides"],
        "train.schedule=wsd",
        "train.decay_start_tokens=1e9",
        "++tracking.tags.tune_role=candidate",
        "train.resume=true",
    )
    capsys.readouterr()
    with pytest.raises(SystemExit):
        _main(cfg)
    assert one_error_line(capsys.readouterr().err).startswith("train.resume=true: no checkpoint")


def test_train_range_messages_name_the_allowed_values(place, capsys):
    from training.train import _main

    with pytest.raises(SystemExit):
        _main(compose(*place["overrides"], "train.lr=nan"))
    assert "finite" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _main(compose(*place["overrides"], "tracking.uri=garbage://x"))
    err = capsys.readouterr().err
    assert "sqlite:///" in err and "http(s)://host:port" in err


def test_tracking_uri_from_the_environment_is_checked_too(place, capsys, monkeypatch):
    from training.train import _main

    cfg = compose(*place["overrides"][1:])  # tracking.uri null: $MLFLOW_TRACKING_URI decides
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "garbage://x")
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    assert one_error_line(capsys.readouterr().err).startswith("tracking.uri (null, so $MLFLOW")
    assert_nothing_written(place)


@pytest.mark.parametrize(
    "override, field",
    [("train.lr=nan", "train.lr:"), ("tracking.uri=garbage://x", "tracking.uri:")],
)
def test_train_cli_fails_in_seconds(place, override, field):
    """The real command line: exit 2, one stderr line, nothing in the cwd or the store's place,
    in seconds (mostly Python and Hydra start-up; no data work)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "training.train", *place["overrides"], override],
        cwd=place["cwd"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - t0
    assert out.returncode == 2, out.stderr[-2000:]
    assert one_error_line(out.stderr).startswith(field)
    assert elapsed < 30, elapsed  # ~2.5 s measured on the 2-core CPU
    assert_nothing_written(place)


# ---------------------------------------------------------------- analysis.fit / report
GOOD_CSV = "N,D,loss\n" + "".join(
    f"{n:.0f},{d:.0f},{2 + 400 / n**0.34 + 400 / d**0.28:.4f}\n"
    for n in (1e6, 3e6, 1e7)
    for d in (1e8, 3e8, 1e9)
)


def _csv(tmp_path: Path, col: str, value: str) -> Path:
    lines = GOOD_CSV.splitlines()
    header = lines[0].split(",")
    if col not in header:  # C instead of D
        header[header.index("D")] = col
    i = header.index(col)
    row = lines[3].split(",")
    row[i] = value
    lines[0], lines[3] = ",".join(header), ",".join(row)
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "col, value",
    [("loss", "inf"), ("loss", "-inf"), ("N", "inf"), ("D", "inf"), ("C", "inf"), ("loss", "nan")],
)
@pytest.mark.parametrize("tool", ["fit", "report"])
def test_analysis_rejects_non_finite_csv_values(tmp_path, capsys, tool, col, value):
    from analysis.fits import cli as fit_cli
    from analysis.report import cli as report

    out = tmp_path / "result" / ("fit.json" if tool == "fit" else "report")
    main = fit_cli.main if tool == "fit" else report.main
    code = main(["--csv", str(_csv(tmp_path, col, value)), "--out", str(out), "--bootstrap", "10"])
    assert code == 2
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith(f"column '{col}'") and "finite" in message
    assert not out.parent.exists()


def test_the_good_csv_is_valid(tmp_path):
    """The table's CSV is accepted before one value is spoiled."""
    from analysis.data.load import read_csv

    (tmp_path / "runs.csv").write_text(GOOD_CSV)
    assert len(read_csv(tmp_path / "runs.csv").frame) == 9


@pytest.mark.parametrize("tool", ["fit", "report"])
@pytest.mark.parametrize("uri", ["http://127.0.0.1:{port}", "garbage://x"])
def test_analysis_bad_tracking_uri_fails_in_seconds(tmp_path, capsys, tool, uri):
    """A server that is down hung ~249 s in MLflow's retries, then a traceback."""
    from analysis.fits import cli as fit_cli
    from analysis.report import cli as report

    uri = uri.format(port=free_port())
    out = tmp_path / "result" / ("fit.json" if tool == "fit" else "report")
    main = fit_cli.main if tool == "fit" else report.main
    t0 = time.monotonic()
    code = main(["--experiment", "x", "--tracking-uri", uri, "--out", str(out)])
    assert code == 2 and time.monotonic() - t0 < 10
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith("--tracking-uri:") and uri in message
    assert not out.parent.exists()


@pytest.mark.parametrize(
    "uri, message",
    [
        ("sqlite:///{t}/a_file", "--tracking-uri: {t}/a_file is not a SQLite database"),
        ("{t}/folder", "--tracking-uri: {t}/folder: The filesystem tracking backend"),
    ],
)
def test_analysis_a_store_mlflow_cannot_open_is_one_line(tmp_path, capsys, uri, message):
    """MLflow wrote its tables into the file (3 lines), or a 36-line traceback."""
    from analysis.fits import cli as fit_cli

    (tmp_path / "a_file").write_text("keep me")
    (tmp_path / "folder").mkdir()
    out = tmp_path / "result" / "fit.json"
    argv = ["--experiment", "x", "--tracking-uri", uri.format(t=tmp_path), "--out", str(out)]
    assert fit_cli.main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(message.format(t=tmp_path)), line
    assert (tmp_path / "a_file").read_text() == "keep me" and not out.parent.exists()


def test_analysis_empty_out_is_refused(tmp_path, capsys, monkeypatch):
    """`--out ''` wrote the report into the current folder."""
    (tmp_path / "runs.csv").write_text(GOOD_CSV)
    monkeypatch.chdir(tmp_path)
    argv = ["--csv", str(tmp_path / "runs.csv"), "--bootstrap", "10", "--out", ""]
    assert _run_cli("report", argv) == 2
    assert one_error_line(capsys.readouterr().err) == "--out: empty; give the folder to write"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.csv"]


def test_analysis_server_check_times_out_on_a_silent_server(tmp_path, capsys):
    """A port that accepts connections but never answers: the 5 s /health timeout, one line."""
    from analysis.data import load, select

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        uri = f"http://127.0.0.1:{server.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(load.InputError, match="not reachable"):
            select.check_server(uri, timeout_s=0.5)
        assert time.monotonic() - t0 < 5


def _run_cli(tool: str, argv: list[str]) -> int:
    """`python -m analysis.<tool>` in process; argparse's errors exit through SystemExit."""
    import importlib

    try:
        return importlib.import_module(f"analysis.{tool}").main(argv)
    except SystemExit as exit_:
        return exit_.code


LADDER = ROOT / "results" / "ref_ladder" / "runs.csv"


@pytest.mark.parametrize("how", ["one file twice", "two files"])
@pytest.mark.parametrize("tool", ["fit", "report", "compare_laws"])
def test_analysis_runs_given_twice_are_refused(tmp_path, capsys, tool, how):
    """The ladder's runs fed twice fitted "66 runs" with a narrower interval, exit 0."""
    rows = LADDER.read_text().splitlines(keepends=True)
    doubled = tmp_path / "doubled.csv"
    if how == "one file twice":
        doubled.write_text("".join(rows + rows[1:]))
        sources = ["--csv", str(doubled)]
    else:
        doubled.write_text("".join(rows))
        sources = ["--csv", str(LADDER), "--csv", str(doubled)]
    out = tmp_path / "result" / ("fit.json" if tool == "fit" else "report")
    assert _run_cli(tool, [*sources, "--out", str(out), "--bootstrap", "10"]) == 2
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith("run_id '") and "22 run_id(s) are duplicated" in message, message
    assert str(doubled) in message
    assert (
        how == "one file twice"
        or str(LADDER.relative_to(ROOT)) in message
        or str(LADDER) in message
    )
    assert not out.parent.exists()


def _rows(*extra: str) -> str:
    return GOOD_CSV + "".join(f"{line}\n" for line in extra)


GOOD_ROW = GOOD_CSV.splitlines()[1]
CSV_ROWS = [  # (file name, bytes, message after `error: `, {path} = the file)
    # a CSV without run ids holding a run twice: fitted as two runs
    ("repeat.csv", _rows(GOOD_ROW), "the same row appears 2 times ({path} row 0, {path} row 9)"),
    ("twice.csv", GOOD_CSV + GOOD_CSV.split("\n", 1)[1], "the same row appears 2 times"),
    # pandas renames the second `N` to `N.1` and the fit read the first
    (
        "dupcol.csv",
        "N,N,D,loss\n1,2,3,4\n",
        "--csv: {path}:1: column 'N' appears twice in the header",
    ),
    # pandas named a byte of its buffer, not the line
    (
        "latin1.csv",
        GOOD_CSV.encode() + b"caf\xe9,1,2\n",
        "--csv: cannot read {path}:11: not UTF-8 text (byte 0xe9 at column 4)",
    ),
    # an IndexError traceback
    (
        "blank_ids.csv",
        "run_id," + GOOD_CSV.replace("\n", "\n,", 9)[:-1],
        "--csv: {path}: column 'run_id' is empty",
    ),
    # C = 6 N D overflows to inf: fitted with RuntimeWarnings, exit 0
    (
        "overflow.csv",
        GOOD_CSV.replace("1000000,", "1e300,", 1),
        "column 'C' computed from C = k 6 N D is zero or infinite",
    ),
    ("folder", None, "--csv: {path} is a folder, not a CSV file"),
]


@pytest.mark.parametrize("name, content, message", CSV_ROWS, ids=[r[0] for r in CSV_ROWS])
@pytest.mark.parametrize("tool", ["fit", "report"])
def test_analysis_bad_csv_is_one_line_before_any_output(
    tmp_path, capsys, tool, name, content, message
):
    path = tmp_path / name
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    out = tmp_path / "result" / ("fit.json" if tool == "fit" else "report")
    assert _run_cli(tool, ["--csv", str(path), "--out", str(out), "--bootstrap", "10"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(message.format(path=path)), line
    assert not out.parent.exists()


def test_analysis_a_row_repeated_across_csvs_without_ids_is_refused(tmp_path, capsys):
    """A copy of a CSV without run ids (its rows get distinct generated ids) is the same runs."""
    (tmp_path / "a.csv").write_text(GOOD_CSV)
    (tmp_path / "b.csv").write_text(GOOD_CSV)
    out = tmp_path / "result" / "fit.json"
    argv = ["--csv", str(tmp_path / "a.csv"), "--csv", str(tmp_path / "b.csv"), "--out", str(out)]
    assert _run_cli("fit", argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"the same row appears 2 times ({tmp_path / 'a.csv'} row 0, "), line
    assert not out.parent.exists()


def test_analysis_run_key_given_twice_is_refused(tmp_path, capsys):
    """Two rows of one run under different run_ids (e.g. re-exported) are one run."""
    (tmp_path / "runs.csv").write_text(
        "run_id,run_key,"
        + GOOD_CSV.splitlines()[0]
        + "\n"
        + "".join(
            f"r{i},{'k0' if i < 2 else f'k{i}'},{line}\n"
            for i, line in enumerate(GOOD_CSV.splitlines()[1:])
        )
    )
    out = tmp_path / "result" / "fit.json"
    assert _run_cli("fit", ["--csv", str(tmp_path / "runs.csv"), "--out", str(out)]) == 2
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith("run_key 'k0' appears more than once"), message
    assert not out.parent.exists()


@pytest.mark.parametrize("tool", ["fit", "report", "compare_laws"])
def test_analysis_c_not_6nd_is_refused(tmp_path, capsys, tool):
    """A C 100x off k 6 N D was used as given and printed as 6ND."""
    lines = GOOD_CSV.splitlines()
    rows = [lines[0] + ",C"] + [
        f"{line},{6 * float(line.split(',')[0]) * float(line.split(',')[1]) * (100 if i == 4 else 1):.6g}"
        for i, line in enumerate(lines[1:])
    ]
    (tmp_path / "runs.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "result" / ("fit.json" if tool == "fit" else "report")
    assert (
        _run_cli(
            tool, ["--csv", str(tmp_path / "runs.csv"), "--out", str(out), "--bootstrap", "10"]
        )
        == 2
    )
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith("column 'C' is not k 6 N D in 1 row(s) (first: row 4,"), message
    assert not out.parent.exists()


@pytest.mark.parametrize(
    "tool, kind",
    [("fit", "folder"), ("predict", "folder"), ("report", "file"), ("compare_laws", "file")],
)
def test_analysis_out_of_the_wrong_kind_fails_before_fitting(tmp_path, capsys, tool, kind):
    """A folder where a file goes (or the reverse) failed only after the whole fit."""
    (tmp_path / "runs.csv").write_text(GOOD_CSV)
    out = tmp_path / "taken"
    out.mkdir() if kind == "folder" else out.write_text("keep me")
    fit_json = ROOT / "results" / "ref_ladder" / "fit.json"
    source = ["--fit", str(fit_json)] if tool == "predict" else ["--bootstrap", "10"]
    code = _run_cli(tool, [*source, "--csv", str(tmp_path / "runs.csv"), "--out", str(out)])
    assert code == 2
    message = one_error_line(capsys.readouterr().err)
    assert message == f"--out: {out} is a {kind}, not a {'file' if kind == 'folder' else 'folder'}"
    assert (list(out.iterdir()) == []) if kind == "folder" else out.read_text() == "keep me"


@pytest.mark.parametrize(
    "tool, argv, flag",
    [
        ("fit", ["--holdout-above", "-1"], "--holdout-above"),
        ("fit", ["--holdout-above", "inf"], "--holdout-above"),
        ("fit", ["--budget", "inf"], "--budget"),
        ("fit", ["--seed", "-1"], "--seed"),
        ("report", ["--holdout-above", "0"], "--holdout-above"),
        ("compare_laws", ["--holdout-above", "-1"], "--holdout-above"),
        ("compare_laws", ["--seed", "-1"], "--seed"),
        ("fit", ["--params", "foo"], "--params"),
        ("fit", ["--bootstrap", "ten"], "--bootstrap"),
        ("report", ["--compute", "bogus"], "--compute"),
        ("compare_laws", ["--law", "nope"], "--law"),
        ("fit", ["--no-such-flag"], "--no-such-flag"),
    ],
)
def test_analysis_bad_flags_are_one_line(tmp_path, capsys, tool, argv, flag):
    """argparse's choice errors printed usage + error (~10 lines); negative C was accepted."""
    (tmp_path / "runs.csv").write_text(GOOD_CSV)
    out = tmp_path / "result" / "out"
    code = _run_cli(tool, ["--csv", str(tmp_path / "runs.csv"), *argv, "--out", str(out)])
    assert code == 2
    message = one_error_line(capsys.readouterr().err)
    assert flag in message, message
    assert not out.parent.exists()


def test_analysis_help_still_works(capsys):
    assert _run_cli("fit", ["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: python -m analysis.fit")


# ---------------------------------------------------------------- token cache integrity
@pytest.fixture
def small_cache(tmp_path):
    from training.config import DataConfig
    from training.data import prepare_data

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(60):
        (corpus / f"d{i:02d}.txt").write_text(f"document {i}\n" + "some text here. " * (20 + i))
    cfg = DataConfig.from_dict({"source": "text", "path": str(corpus), "tokenizer": "byte"})
    root = tmp_path / "cache"
    data = prepare_data(cfg, root)
    return cfg, root, data


def _truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 64)  # a whole number of uint16 tokens


def _flip_byte(path: Path) -> None:
    with open(path, "r+b") as f:
        f.seek(10)
        b = f.read(1)
        f.seek(10)
        f.write(bytes([b[0] ^ 0x55]))


def _garble_meta(path: Path) -> None:
    (path.parent / "meta.json").write_text("{not json")


@pytest.mark.parametrize(
    "spoil, what",
    [
        (_truncate, "bytes, meta.json promises"),
        (_flip_byte, "does not match its sha256"),
        (_garble_meta, "unreadable"),
        (Path.unlink, "unreadable"),
    ],
)
@pytest.mark.parametrize("name", ["train.bin", "val.bin"])
def test_a_spoiled_token_cache_is_detected_and_rebuilt(small_cache, caplog, spoil, what, name):
    import training.data as data_mod

    cfg, root, data = small_cache
    want_train, want_val = np.array(data.train), np.array(data.val)
    data_mod._verified.clear()  # a new process: checksums not yet seen
    spoil(data.cache_dir / name)
    assert what in data_mod.cache_problem(data.cache_dir)
    with caplog.at_level(logging.WARNING, logger="training.data"):
        again = data_mod.prepare_data(cfg, root)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(data.cache_dir) in warnings[0] and "rebuilding" in warnings[0]
    assert again.cache_dir == data.cache_dir and data_mod.cache_problem(again.cache_dir) is None
    np.testing.assert_array_equal(again.train, want_train)
    np.testing.assert_array_equal(again.val, want_val)
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [data.cache_dir.name, data.cache_dir.name + ".lock"]
    )  # the spoiled copy is gone, no temporary folders left


def test_a_sound_cache_is_loaded_without_rebuilding(small_cache, caplog):
    import training.data as data_mod

    cfg, root, data = small_cache
    assert set(data.meta["sha256"]) == {"train.bin", "val.bin"}
    mtime = (data.cache_dir / "meta.json").stat().st_mtime_ns
    data_mod._verified.clear()
    with caplog.at_level(logging.INFO, logger="training.data"):
        again = data_mod.prepare_data(cfg, root)
    assert not caplog.records  # neither a warning nor a build
    assert (again.cache_dir / "meta.json").stat().st_mtime_ns == mtime


def test_a_cache_without_checksums_is_checked_by_size(small_cache):
    """Caches built before the checksums were recorded: the token counts still catch a
    truncation."""
    import training.data as data_mod

    _, _, data = small_cache
    meta_path = data.cache_dir / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["sha256"]
    meta_path.write_text(json.dumps(meta))
    assert data_mod.cache_problem(data.cache_dir) is None
    _truncate(data.cache_dir / "train.bin")
    assert "train.bin has" in data_mod.cache_problem(data.cache_dir)


# ---------------------------------------------------------------- Hydra's own errors
HYDRA_ROWS = [
    (["train.foo=1"], "train.foo: unknown key; to add a new key use +train.foo=1"),
    (["model=foo"], "model=foo: unknown model; available: gpt2, llama, vanilla"),
    (
        ["data=nope"],
        "data=nope: unknown data; available: hf, hf_streaming, pairs, sitepackages, stdlib, stdlib_pairs, text, tokens",
    ),
    (["train.seed=0,1", "model.fooo=3"], "model.fooo: unknown key"),  # a sweep axis next to it
]
SWEEP_ROWS = [
    (["sweep=malformed"], "{dir}/sweep/malformed.yaml, line 2: not valid YAML"),
    (["sweep=a_list"], "sweep/a_list.yaml: must be a mapping"),
    (["sweep=tiny", "sweep.jobs=two"], "sweep.jobs: expected an integer, got 'two'"),
    (["sweep=tiny", "sweep.jobs=0"], "sweep.jobs: must be >= 1"),
    (["sweep=nan"], "sweep=nan: unknown sweep; available: "),
    # Hydra would run conf/sweep/grid.yaml (12 points) instead of the user's file of that name
    (
        ["sweep=grid"],
        "sweep=grid: {dir}/sweep/grid.yaml has the name of the project's conf/sweep/grid.yaml",
    ),
    # plan fields of the wrong shape: tracebacks before (float('abc'), iterating a scalar)
    (["sweep=bad_budgets"], "sweep.budgets[0]: expected a finite number, got 'abc'"),
    (["sweep=scalar_budgets"], "sweep.budgets: expected a list of numbers, got 1"),
    (["sweep=bad_tpp"], "sweep.tokens_per_param: expected [lo, hi] with 0 < lo < hi"),
    (["sweep=scalar_wsd"], "sweep.wsd.tokens: expected a list of numbers, got 32768"),
    (["sweep=bad_wsd"], "sweep.wsd.tokens[0]: expected a finite number, got 'x'"),
    (["sweep=list_variants"], "sweep.variants: expected a mapping (name -> overrides)"),
    (["sweep=list_fixed"], "sweep.fixed: expected a mapping (override key -> value)"),
    (["sweep=no_axes"], "sweep.axes: nothing to sweep"),  # trained one default point
    (
        ["sweep=tiny", "sweep.throughput.flops_per_sec=0"],
        "sweep.throughput.flops_per_sec: must be > 0",
    ),
    (
        ["sweep=tiny", "sweep.throughput.flops_per_sec=nan"],
        "sweep.throughput.flops_per_sec: expected a finite",
    ),
    (["sweep=tiny", "sweep.dry_run=maybe"], "sweep.dry_run: expected true or false, got 'maybe'"),
    # tracebacks before (iterating or merging a value of the wrong shape)
    (["sweep=list_axes"], "sweep.axes: expected a mapping (override key -> values), got"),
    (["sweep=list_wsd"], "sweep.wsd: expected a mapping (tokens: [...], decay: f), got [1, 2]"),
    (["sweep=bad_rungs"], "sweep.tune_halving.rungs[0]: expected a finite number, got 'a'"),
    (["sweep=list_decay"], "sweep.tune_halving.decay: expected a finite number, got [0.2]"),
    (["sweep=bad_group"], "model=nope: unknown model; available: gpt2, llama"),
    # a value no model has was a skipped point (the sweep trained nothing, exit 0)
    (["sweep=bad_size"], "model: size must be a positive number of non-embedding params"),
    (["sweep=bad_variant"], "model: norm must be one of 'layernorm', 'rmsnorm'; got 'bogus'"),
    # a branch as long as its stable run, a negative budget
    (["sweep=dup_wsd"], "sweep.wsd.tokens: a value is listed twice in [32768.0, 32768.0]"),
    (["sweep=neg_wsd"], "sweep.wsd.tokens: token budgets must be positive"),
    # read only after the last point trained, or not at all
    (["sweep=scalar_report"], "sweep.report: expected a mapping (out: FOLDER, args: [...])"),
    (["sweep=report_no_out"], "sweep.report.out: expected the report's folder, got None"),
    (["sweep=typo_throughput"], "sweep.throughput.flop_per_sec: unknown field; allowed:"),
    (["sweep=tiny", "+sweep.seeds=0"], "sweep.seeds: expected a whole number of seeds >= 1"),
    (["sweep=word_seeds"], "sweep.seeds: expected a whole number of seeds >= 1 (seeds 0..S-1 of"),
    (["sweep=half_seeds"], "sweep.seeds: expected a whole number of seeds >= 1 (seeds 0..S-1 of"),
    (["sweep=tiny", "+sweep.seeds=2", "train.seed=1"], "train.seed is set by the command line"),
]
SWEEP_FILES = {  # my_sweeps/sweep/NAME.yaml
    "malformed": "grid: [1, 2\n",
    "a_list": "- a\n- b\n",
    "grid": "axes:\n  model.size: [1e4]\n",
    "bad_budgets": "axes:\n  model.size: [2e4]\nbudgets: [abc]\n",
    "scalar_budgets": "axes:\n  model.size: [2e4]\nbudgets: 1.0e12\n",
    "bad_tpp": "axes:\n  model.size: [2e4]\nbudgets: [1.0e12]\ntokens_per_param: [a, b]\n",
    "scalar_wsd": "axes:\n  model.size: [2e4]\nwsd:\n  tokens: 32768\n",
    "bad_wsd": "axes:\n  model.size: [2e4]\nwsd:\n  tokens: [x]\n",
    "list_variants": "axes:\n  model.size: [2e4]\nvariants: [a, b]\n",
    "list_fixed": "axes:\n  model.size: [2e4]\nfixed: [data.tokenizer=byte]\n",
    "no_axes": "axes: {}\nfixed:\n  data.tokenizer: byte\n",
    "list_axes": "axes: [model.size]\n",
    "list_wsd": "axes:\n  model.size: [2e4]\nwsd: [1, 2]\n",
    "bad_rungs": "axes:\n  model.size: [2e4]\ntune:\n  train.lr: [1e-3, 2e-3]\n"
    "tune_halving:\n  rungs: [a]\n",
    "list_decay": "axes:\n  model.size: [2e4]\ntune:\n  train.lr: [1e-3, 2e-3]\n"
    "tune_halving:\n  decay: [0.2]\n",
    "bad_group": "axes:\n  model: [nope]\n",
    "bad_size": "axes:\n  model.size: [abc]\n",
    "bad_variant": "axes:\n  model.size: [2e4]\nvariants:\n  base: {}\n  v: {model.norm: bogus}\n",
    "dup_wsd": "axes:\n  model.size: [2e4]\nwsd:\n  tokens: [32768, 32768]\n",
    "neg_wsd": "axes:\n  model.size: [2e4]\nwsd:\n  tokens: [-32768]\n",
    "scalar_report": "axes:\n  model.size: [2e4]\nreport: 5\n",
    "report_no_out": "axes:\n  model.size: [2e4]\nreport: {args: [--bootstrap, '10']}\n",
    "typo_throughput": "axes:\n  model.size: [2e4]\nthroughput:\n  flop_per_sec: 1.0e+9\n",
    "word_seeds": "axes:\n  model.size: [2e4]\nseeds: abc\n",
    "half_seeds": "axes:\n  model.size: [2e4]\nseeds: 1.5\n",
}


@pytest.mark.parametrize(
    "module, args, message",
    [("training.train", a, m) for a, m in HYDRA_ROWS]
    + [("sweeps.run", a, m) for a, m in HYDRA_ROWS + SWEEP_ROWS],
)
def test_hydra_level_errors_are_one_line_exit_2(place, tmp_path, module, args, message):
    """What Hydra itself rejects (6 to 95 lines, exit 1 before) and what the sweeper read
    unchecked (`int('two')`): one `error:` line naming the key, group or file, nothing written."""
    sweeps = tmp_path / "my_sweeps"
    (sweeps / "sweep").mkdir(parents=True)
    for name, text in SWEEP_FILES.items():
        (sweeps / "sweep" / f"{name}.yaml").write_text(text)
    extra = ["--config-dir", str(sweeps), "sweep.dry_run=true"] if module == "sweeps.run" else []
    if "sweep.dry_run=maybe" in args:
        extra.remove("sweep.dry_run=true")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", module, *extra, *place["overrides"], *args],
        cwd=place["cwd"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    assert one_error_line(out.stderr).startswith(message.format(dir=sweeps)), out.stderr
    assert_nothing_written(place)


def test_a_data_error_found_after_tokenizing_comes_before_the_store(place, capsys):
    """A validation split shorter than data.eval_tokens is known only once tokenized: it used
    to fail after the MLflow store and the run's folder were created. Only the token cache is
    written now."""
    from training.train import _main

    corpus = place["corpus"] / "small"
    corpus.mkdir()
    for i in range(60):
        (corpus / f"d{i:02d}.txt").write_text(f"document {i}\n" + "some text here. " * 20)
    cfg = compose(
        *place["overrides"],
        "data=text",
        f"data.path={corpus}",
        "data.tokenizer=byte",
        "data.eval_tokens=5e4",  # within the corpus size: found once tokenized
    )
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith("data.eval_tokens=50000: the validation split has only"), message
    assert sorted(p.name for p in place["out"].iterdir()) == ["cache"]  # no store, no runs/
    assert list(place["cwd"].iterdir()) == []


def test_eval_tokens_is_checked_against_a_prepared_cache_before_any_work(
    place, capsys, monkeypatch
):
    """Once the token cache exists, its meta.json knows the validation split: a too large
    data.eval_tokens fails before the data is loaded."""
    import training.trainer as trainer
    from training.train import _main

    corpus = place["corpus"] / "small"
    corpus.mkdir()
    for i in range(60):
        (corpus / f"d{i:02d}.txt").write_text(f"document {i}\n" + "some text here. " * 20)
    cfg = compose(
        *place["overrides"],
        "data=text",
        f"data.path={corpus}",
        "data.tokenizer=byte",
        "data.eval_tokens=5e4",  # within the corpus size: found once tokenized
    )
    with pytest.raises(SystemExit):
        _main(cfg)  # builds the cache, then fails
    capsys.readouterr()
    monkeypatch.setattr(trainer, "prepare_data", lambda *a: pytest.fail("data loaded"))
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith("data.eval_tokens=50000: the validation split has only"), message
    assert sorted(p.name for p in place["out"].iterdir()) == ["cache"]


def test_a_replaced_max_seq_len_is_said_in_one_line(place, capsys):
    """model.max_seq_len follows train.seq_len: a different value set by the user is named on
    stderr (it was replaced silently); the run goes on (here to a resume error, before work)."""
    from training.train import _main

    cfg = compose(
        *place["overrides"], "model.max_seq_len=16", "train.seq_len=64", "train.resume=true"
    )
    capsys.readouterr()
    with pytest.raises(SystemExit):
        _main(cfg)
    lines = capsys.readouterr().err.strip().splitlines()
    assert (
        lines[0]
        == "warning: model.max_seq_len=16 is replaced by train.seq_len=64 (the context length)"
    )
    assert lines[1].startswith("error: train.resume=true: no checkpoint at "), lines
    assert len(lines) == 2
    assert_nothing_written(place)


def _unwritable(tmp_path: Path) -> Path:
    """A folder nothing can be written under: read-only, or for root (who writes anywhere) a
    file where the folder should be."""
    blocked = tmp_path / "blocked"
    if os.geteuid() == 0:
        blocked.write_text("a file, not a folder")
    else:
        blocked.mkdir()
        blocked.chmod(0o555)
    return blocked


@pytest.mark.parametrize("tool", ["fit", "report"])
def test_analysis_unwritable_out_fails_before_fitting(tmp_path, capsys, tool):
    from analysis.fits import cli as fit_cli
    from analysis.report import cli as report

    (tmp_path / "runs.csv").write_text(GOOD_CSV)
    blocked = _unwritable(tmp_path)
    out = blocked / "result" / ("fit.json" if tool == "fit" else "report")
    main = fit_cli.main if tool == "fit" else report.main
    code = main(["--csv", str(tmp_path / "runs.csv"), "--out", str(out), "--bootstrap", "10"])
    assert code == 2
    message = one_error_line(capsys.readouterr().err)
    assert message.startswith(f"--out: {blocked} is "), message


@pytest.mark.slow
def test_sweep_with_an_unwritable_store_is_one_line(place, tmp_path):
    blocked = _unwritable(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeps.run",
            "sweep=tiny",
            *place["overrides"][1:],
            f"tracking.uri=sqlite:///{blocked / 'store' / 'mlruns.db'}",
        ],
        cwd=place["cwd"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and str(blocked) in errors[0], out.stderr[-3000:]
