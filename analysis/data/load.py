"""Runs into a DataFrame: from MLflow (schema in docs/contracts.md) or from a CSV.

One row per FINISHED run with columns run_id, run_key, arch, variant, sweep, seed, N
(non-embedding parameters a token passes through: a MoE run's active ones, its every-expert
count in N_nonembed_total), N_total, D (tokens trained), C (= k 6 N D), C_exact, loss (final
validation loss), where a run's C is not 6 N D its factor k (encoder_decoder: `analysis.
compute_factor`; no column, or an empty value: k = 1), plus the `model.*` axes and `train.*` hyperparameters, and where a run
has them the tags `arm`, `tune_role` and its `epochs`; from MLflow, one run per run key (`run_of_key`).
Several sources (CSVs, or experiments and sweeps) are concatenated by `combine`. Everything a user can get wrong raises `InputError` with one line naming it.
"""

from __future__ import annotations

import csv
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.verdicts import wallclock

AXES = ("N", "D", "C")
# config params that become columns: the model's shape, and the training hyperparameters a
# tuned sweep varies (train.lr, train.warmup, ...); --tune names one of these columns
CONFIG_COLUMNS = ("model.", "train.", "objective.")  # objective.*: non-decoder families only
TUNING_TAGS = ("arm", "tune_role", "tune_budget")  # tune_budget: a curve-tuned prefix
PARAMETRIC_PARAMS = 5  # E, A, B, alpha, beta
K_COLUMN = "k"  # C / (6 N D) of a run whose C is not 6 N D (analysis.data.compute_factor)
# MLflow's tracking store schemes (its store registry), for a one-line error on any other
URI_SCHEMES = {
    "file",
    "sqlite",
    "http",
    "https",
    "postgresql",
    "mysql",
    "mssql",
    "databricks",
    "databricks-uc",
    "uc",
}


class InputError(ValueError):
    """A problem with the user's data or arguments; the CLIs print it and exit with code 2."""


@dataclass
class Runs:
    frame: pd.DataFrame  # one row per usable run
    excluded: pd.DataFrame = field(default_factory=pd.DataFrame)  # run_id, status, reason
    source: str = ""
    ids_generated: bool = False  # a CSV without run_id: its rows are told apart by value only


# ---------------------------------------------------------------- validation


def complete_axes(df: pd.DataFrame) -> pd.DataFrame:
    """Require `loss` and two of N, D, C; derive the third from C = k 6 N D (k: column `k`,
    1 where it is empty or missing)."""
    missing_loss = "loss" not in df.columns
    present = [c for c in AXES if c in df.columns]
    if missing_loss or len(present) < 2:
        raise InputError(
            "missing column(s): need 'loss' and at least two of 'N', 'D', 'C'; "
            f"got {sorted(map(str, df.columns))}"
        )
    df = df.copy()
    for col in ["loss", *present]:
        # as float: int64 N * D overflows past 9.2e18 (6 N D of a 400M model on 13B tokens)
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
        # NaN, non-numeric, zero, negative and inf (an inf loss "fits" with alpha = beta = 0)
        bad = ~((df[col] > 0) & np.isfinite(df[col]))
        if bad.any():
            rows = ", ".join(str(i) for i in df.index[bad][:5])
            raise InputError(
                f"column '{col}' has {int(bad.sum())} missing, non-numeric, non-positive or "
                f"infinite value(s) (rows {rows}); every N, D, C and loss must be a finite "
                "positive number"
            )
    six = 6
    if K_COLUMN in df.columns:  # empty for runs of another family: 1, the decoder convention
        k = pd.to_numeric(df[K_COLUMN], errors="coerce").astype(float)
        bad = ~((k > 0) & np.isfinite(k)) & ~df[K_COLUMN].isna()
        if bad.any():
            rows = ", ".join(str(i) for i in df.index[bad][:5])
            raise InputError(
                f"column '{K_COLUMN}' (C / 6 N D) has {int(bad.sum())} non-numeric, non-positive "
                f"or infinite value(s) (rows {rows}); leave it empty where C = 6 N D"
            )
        df[K_COLUMN] = k.fillna(1.0)
        six = 6 * df[K_COLUMN]
    if len(present) == 3:
        _check_compute(df, six)
    if "N" not in df.columns:
        df["N"] = df["C"] / (six * df["D"])
    if "D" not in df.columns:
        df["D"] = df["C"] / (six * df["N"])
    if "C" not in df.columns:
        df["C"] = six * df["N"] * df["D"]
    for col in AXES:  # derived from the other two: may overflow to inf or underflow to 0
        bad = ~((df[col] > 0) & np.isfinite(df[col]))
        if bad.any():
            rows = ", ".join(str(i) for i in df.index[bad][:5])
            raise InputError(
                f"column '{col}' computed from C = k 6 N D is zero or infinite in "
                f"{int(bad.sum())} row(s) (rows {rows}); the other two columns are out of range"
            )
    return df


def _check_compute(df: pd.DataFrame, six, rtol: float = 1e-3) -> None:
    """C given next to N and D must be k 6 N D (up to rounding): the fits and summaries read it so."""
    ratio = df["C"] / (six * df["N"] * df["D"])
    bad = ~(np.abs(ratio - 1.0) <= rtol)
    if bad.any():
        row = df.index[bad][0]
        raise InputError(
            f"column 'C' is not k 6 N D in {int(bad.sum())} row(s) (first: row {row}, "
            f"C = {ratio[row]:.4g} x k 6 N D); fix C, or give the factor k in column '{K_COLUMN}'"
        )


def check_fittable(
    df: pd.DataFrame,
    what: str = "the data",
    n_params: int = PARAMETRIC_PARAMS,
    form: str = "the fit L(N, D) = E + A/N^alpha + B/D^beta",
) -> None:
    """A parametric fit (approach 3 unless `form` and `n_params` name another law) needs more
    points than parameters and spread in both N and D."""
    if len(df) <= n_params:
        raise InputError(
            f"{what} has {len(df)} run(s); {form} has "
            f"{n_params} parameters and needs at least {n_params + 1} runs"
        )
    for col in ("N", "D"):
        if df[col].nunique() < 2:
            raise InputError(
                f"all {len(df)} runs in {what} have the same {col} = {df[col].iloc[0]:.4g}; "
                f"the fit L(N, D) needs at least two distinct values of both N and D"
            )


def with_total_params(df: pd.DataFrame) -> pd.DataFrame:
    """Count every parameter (embeddings and head too): N = N_total, C = 6 N_total D.

    Why: Kaplan et al. (2020) fit non-embedding N, Hoffmann et al. (2022) total N; at small
    scale the two give different exponents (Pearce & Song 2024), so a comparison needs both.
    A run with a factor k (encoder_decoder) keeps it: C = k 6 N_total D.
    """
    if "N_total" not in df.columns or df["N_total"].isna().any():
        raise InputError("--params total: column 'N_total' is missing or empty for some runs")
    six = 6.0 * df[K_COLUMN] if K_COLUMN in df.columns else 6.0
    return df.assign(N=df["N_total"], C=six * df["N_total"] * df["D"])


def read_csv(path: str | Path, id_prefix: str = "") -> Runs:
    """Runs from a CSV; rows without a `run_id` column get ids `{id_prefix}row{i}`."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"--csv: {path} is a folder, not a CSV file")
    if not path.is_file():
        raise InputError(f"--csv: no such file: {path}")
    check_text(path, "--csv")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise InputError(f"--csv: cannot read {path} as CSV: {err}".splitlines()[0]) from None
    _check_header(path, df)
    if df.empty:  # a header alone: every check below passes on no rows
        raise InputError(f"--csv: {path} has a header but no rows")
    df = complete_axes(df)
    generated = "run_id" not in df.columns
    if generated:
        df.insert(0, "run_id", [f"{id_prefix}row{i}" for i in range(len(df))])
    elif (blank := df["run_id"].isna() | (df["run_id"].astype(str).str.strip() == "")).any():
        rows = ", ".join(str(i) for i in df.index[blank][:5])
        raise InputError(
            f"--csv: {path}: column 'run_id' is empty in {int(blank.sum())} row(s) (rows "
            f"{rows}); give every run an id, or drop the column"
        )
    return Runs(frame=df, source=str(path), ids_generated=generated)


def check_text(path: Path, flag: str) -> None:
    """UTF-8 text, else one line naming `path:line` (pandas names a byte of its buffer)."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as err:
                byte = line[err.start]
                raise InputError(
                    f"{flag}: cannot read {path}:{lineno}: not UTF-8 text (byte "
                    f"0x{byte:02x} at column {err.start + 1})"
                ) from None


def read_fit_json(path: str | Path, flag: str = "--fit") -> dict:
    """A fit.json (or a hand-written one) as a JSON object, else one line naming the file."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{flag}: no such file: {p}")
    check_text(p, flag)
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"{flag}: {p} is not JSON ({err})") from None
    if not isinstance(data, dict):
        raise InputError(f"{flag}: {p} holds a JSON {type(data).__name__}, not a fit.json object")
    return data


def _check_header(path: Path, df: pd.DataFrame) -> None:
    """A column named twice (pandas renames the second `N.1` and the fit reads the first)."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        header = next(csv.reader(f), [])
    seen = set()
    for name in header:
        if name in seen:
            raise InputError(f"--csv: {path}:1: column '{name}' appears twice in the header")
        seen.add(name)


def _check_identical_rows(parts: list[Runs]) -> None:
    """Rows of CSVs without run_id (or run_key) that are equal in every column they share: the
    same run given twice, within one file or across files."""
    parts = [p for p in parts if p.ids_generated and "run_key" not in p.frame.columns]
    if not parts:
        return
    shared = sorted(set.intersection(*(set(p.frame.columns) for p in parts)) - {"run_id"})
    rows = pd.concat(
        [p.frame[shared].assign(_src=p.source, _row=p.frame.index) for p in parts],
        ignore_index=True,
    )
    dup = rows.duplicated(subset=shared, keep=False)
    if not dup.any():
        return
    first = rows[dup].iloc[0]
    same = rows[(rows[shared] == first[shared]).all(axis=1)]
    where = ", ".join(f"{src} row {i}" for src, i in list(zip(same["_src"], same["_row"]))[:3])
    extra = int(rows.duplicated(subset=shared).sum())
    raise InputError(
        f"the same row appears {len(same)} times ({where}); {extra} row(s) repeat another and "
        "no run_id column tells them apart; each run may be selected only once (give distinct "
        "runs a run_id column)"
    )


def check_unique(parts: list[Runs]) -> None:
    """No run counted twice: a run_id, or a non-empty run_key, found twice within one source or
    across sources is an error (a doubled run narrows every interval); so is a row repeated in
    CSVs without run ids."""
    _check_identical_rows(parts)
    for col in ("run_id", "run_key"):
        keys = [p.frame[col] if col in p.frame.columns else pd.Series(dtype=object) for p in parts]
        labels = pd.concat([pd.Series(p.source, index=k.index) for p, k in zip(parts, keys)])
        keys = pd.concat(keys).astype(object)
        keys = keys.where(keys.notna() & (keys.astype(str).str.strip() != ""))
        dup = keys.duplicated(keep=False) & keys.notna()
        if not dup.any():
            continue
        first = keys[dup].iloc[0]
        where = list(dict.fromkeys(labels[dup.to_numpy()][(keys[dup] == first).to_numpy()]))
        count = keys[dup].nunique()
        raise InputError(
            f"{col} '{first}' appears more than once in the selected sources ({', '.join(where)}); "
            f"{count} {col}(s) are duplicated; each run may be selected only once"
        )


def combine(parts: list[Runs]) -> Runs:
    """Runs of several sources, concatenated in order; one source is returned unchanged.

    With several sources every row records where it came from: column `source` (kept where a
    row already has one, e.g. a combined report's runs.csv read back) and, where a row has no
    `sweep` value, `sweep` = its source, so IsoFLOP budgets never span two sources unless
    their runs name the same sweep. A run_id found twice is an error.
    """
    check_unique(parts)
    if len(parts) == 1:
        return parts[0]
    frames = []
    for part in parts:
        f = part.frame.copy()
        for col in ("source", "sweep"):
            values = f[col] if col in f.columns else pd.Series(np.nan, index=f.index)
            missing = values.isna() | (values.astype(str).str.strip() == "")
            f[col] = values.astype(object).where(~missing, part.source)
        front = ["run_id", "source"]
        frames.append(f[front + [c for c in f.columns if c not in front]])
    frame = pd.concat(frames, ignore_index=True)
    excluded = [p.excluded for p in parts if len(p.excluded)]
    return Runs(
        frame=frame,
        excluded=pd.concat(excluded, ignore_index=True) if excluded else pd.DataFrame(),
        source=" + ".join(p.source for p in parts),
    )


# ---------------------------------------------------------------- MLflow


def written_values(label: str) -> dict[str, Any]:
    """`tune_values` ('train.lr=0.008,train.warmup=0.02') -> {key: value}; {} for ''."""
    starts = [m.start() for m in re.finditer(r"(?:^|,)[A-Za-z_][\w.]*=", label)]
    parts = [label[a:b].lstrip(",") for a, b in zip(starts, [*starts[1:], len(label)])]
    return {k: _number(v) for k, v in (part.split("=", 1) for part in parts)}


def _number(value):
    if value == "None":  # MLflow stores a null param as the string "None"
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def _experiment(client, name: str):
    """The MLflow experiment called `name`; a one-line InputError listing the existing ones."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        names = sorted(e.name for e in client.search_experiments())
        raise InputError(f"--experiment: no experiment named '{name}'; existing: {names}")
    return exp


def trained_tokens(params: dict[str, str]) -> float | None:
    """D, the tokens a run trained: `tokens_trained`; in stores written before it was logged,
    `steps * batch_tokens` (training runs whole batches), else the `tokens` budget."""
    if "tokens_trained" in params:
        return float(params["tokens_trained"])
    try:
        return float(params["steps"]) * float(params["batch_tokens"])
    except (KeyError, ValueError):
        return float(params["tokens"]) if "tokens" in params else None


def compute_factor(params: dict[str, str], N: float) -> float:
    """k = flops_6nd / (6 N D) of a run, D the tokens its flops_6nd counts (`tokens_trained`;
    in older stores the `tokens` budget); 1 where it logs none or its C is 6 N D."""
    if "flops_6nd" not in params:
        return 1.0
    D = float(params.get("tokens_trained", params.get("tokens", "nan")))
    k = float(params["flops_6nd"]) / (6.0 * N * D)
    # a decoder's flops_6nd is 6 N D as an integer: its quotient is 1 up to rounding
    return 1.0 if not np.isfinite(k) or abs(k - 1.0) < 1e-9 else k


def exact_flops(params: dict[str, str], D: float) -> float:
    """C_exact over the trained tokens: `flops_exact` where `tokens_trained` is logged (both
    count what was trained); older stores computed it from the budget, so recompute it from
    `flops_per_token_exact` when that is logged."""
    if "tokens_trained" not in params and "flops_per_token_exact" in params:
        return float(params["flops_per_token_exact"]) * D
    return float(params.get("flops_exact", np.nan))


def load_mlflow(experiment: str, sweep: str | None = None, tracking_uri: str | None = None) -> Runs:
    """FINISHED runs of an experiment, one per run key (`run_of_key`), or of sweep parent run
    `sweep`'s plan: the run of each run key in its `plan.csv` artifact, also those trained by
    another sweep of the experiment (sweeps.run does not retrain them); the parent's children
    (one per run key) when it has no plan.

    Runs that are not FINISHED or have no final_val_loss are returned in `excluded`; older or
    unfinished runs of a key that has a later FINISHED run are left out (superseded).
    """
    from mlflow import MlflowClient  # lazy: ~2.5 s import

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = _experiment(client, experiment)
    names = sorted(e.name for e in client.search_experiments())
    plan_keys = _plan_run_keys(sweep, tracking_uri) if sweep else None
    # A sweep's plan names its points by run key: select those, wherever they were trained.
    # Without a plan artifact (a parent not written by sweeps.run): the parent's children.
    query = f"tags.mlflow.parentRunId = '{sweep}'" if sweep and plan_keys is None else ""
    found = _search_all(client, exp.experiment_id, query)
    if sweep is None:  # sweep parent runs and anything else that is not a training run
        found = [run for run in found if "n_params_nonembed" in run.data.params]
    found = _latest_attempts(found, plan_keys)
    # what each run's planned budget counts, from the plan of the sweep that ran it (also
    # without --sweep: every parent's plan.csv); used for budget_flops only, never to select
    budget_keys = plan_keys if sweep else _parents_plan_keys(found, tracking_uri)
    rows, excluded = [], []
    for run in found:
        reason = _exclusion(run)
        if reason:
            excluded.append(
                {"run_id": run.info.run_id, "status": run.info.status, "reason": reason}
            )
        else:
            rows.append({**_row(run, budget_keys), **_throughput(client, run)})
    where = f"experiment '{experiment}'" + (f", sweep parent run {sweep}" if sweep else "")
    if not rows:
        raise InputError(
            f"{where} has no FINISHED training runs ({len(excluded)} excluded); "
            f"experiments in this store: {names}"
        )
    frame = pd.DataFrame(rows).sort_values(["variant", "N", "D", "seed", "run_id"])
    if K_COLUMN in frame.columns:  # runs of several families: C = 6 N D for the others
        frame[K_COLUMN] = frame[K_COLUMN].fillna(1.0)
    excluded_frame = pd.DataFrame(excluded, columns=["run_id", "status", "reason"])
    return Runs(frame=frame.reset_index(drop=True), excluded=excluded_frame, source=where)


def _search_all(client, experiment_id: str, query: str) -> list:
    """Every run of the experiment matching `query`, page by page."""
    found, token = [], None
    while True:
        page = client.search_runs([experiment_id], query, max_results=1000, page_token=token)
        found.extend(page)
        token = page.token
        if not token:
            return found


def _exclusion(run) -> str | None:
    """Why a run cannot be fitted (not FINISHED, no final loss, no size or tokens), or None."""
    p, t, m = run.data.params, run.data.tags, run.data.metrics
    if run.info.status != "FINISHED":
        return t.get("failure_reason", f"status {run.info.status}")
    if "final_val_loss" not in m:
        return "no final_val_loss metric"
    if "n_params_nonembed" not in p or trained_tokens(p) is None:
        return "missing param n_params_nonembed or tokens"
    return None


def _row(run, budget_keys: dict | None) -> dict:
    """One finished run as a row of runs.csv."""
    p, t, m = run.data.params, run.data.tags, run.data.metrics
    # N: the non-embedding parameters one token passes through (a MoE run's active count, as
    # its C = 6 N_active D; a dense run's are all active); a MoE run keeps its total as well
    N_nonembed = float(p["n_params_nonembed"])
    N, D = float(p.get("n_params_nonembed_active", N_nonembed)), trained_tokens(p)
    k = compute_factor(p, N)  # C as the run logs it: both stacks of an encoder_decoder
    row = {
        "run_id": run.info.run_id,
        "run_key": t.get("run_key", ""),
        "arch": t.get("arch", ""),
        "variant": t.get("variant", "base"),
        "sweep": t.get("sweep", ""),
        "seed": _number(p.get("train.seed", np.nan)),
        "N": N,
        "N_total": float(p.get("n_params", np.nan)),
        "D": D,
        "C": k * 6.0 * N * D,  # k = 1.0 exactly for a decoder: the same float as 6 N D
        "C_exact": exact_flops(p, D),
        "loss": float(m["final_val_loss"]),
    }
    if N != N_nonembed:  # MoE: every expert's parameters (a dense runs.csv keeps its columns)
        row["N_nonembed_total"] = N_nonembed
    if k != 1.0:  # only where C is not 6 N D: decoder runs.csv files keep their columns
        row[K_COLUMN] = k
    if budget_keys and budget_keys.get(row["run_key"]):
        row["budget_flops"] = budget_keys[row["run_key"]]  # what its planned budget C counts
    # a tuned sweep: its arm and role tags (analysis.tuning.arms groups and selects by them)
    row.update({k: t[k] for k in TUNING_TAGS if k in t})
    if "epochs" in m:  # tokens consumed / training-split tokens, logged at the end
        row["epochs"] = float(m["epochs"])
    if "data_train_tokens" in p:
        row["data_train_tokens"] = float(p["data_train_tokens"])
    if "data_unigram_entropy" in p:  # nats/token of the training tokens' frequencies alone
        row["unigram_entropy"] = float(p["data_unigram_entropy"])
    row.update({k: _number(v) for k, v in sorted(p.items()) if k.startswith(CONFIG_COLUMNS)})
    # what its throughput was measured on (runs logged before these params: no columns)
    row.update({col: _number(p[k]) for k, col in wallclock.HARDWARE.items() if k in p})
    # a tuned run's tuned keys as the sweep's grid wrote them: halving hands a fractional
    # warmup to its segments as steps (train.warmup=10 for 0.02), and a grid is one scale
    row.update(written_values(t.get("tune_values", "")))
    return row


def _throughput(client, run) -> dict[str, float]:
    """A run's steady throughput: the median `tokens_per_sec` and `mfu` after warm-up
    (`wallclock.steady_median`); {} for a run that logged none. One history call per metric."""
    out = {}
    for metric in (wallclock.THROUGHPUT, "mfu"):
        if metric in run.data.metrics:
            hist = client.get_metric_history(run.info.run_id, metric)
            out[metric] = wallclock.steady_median([h.step for h in hist], [h.value for h in hist])
    return out


def _plan_run_keys(sweep: str, tracking_uri: str | None) -> dict[str, str] | None:
    """Run keys in the `plan.csv` artifact of sweep parent run `sweep` (sweeps.run rewrites it
    on every rerun, so it is the latest plan), each with the convention its IsoFLOP budget was
    planned in (`budget_flops`: 6nd | exact, '' for plans without it); None without a plan."""
    from mlflow.artifacts import download_artifacts  # lazy: mlflow ~2.5 s

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one small file
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = download_artifacts(
                run_id=sweep, artifact_path="plan.csv", dst_path=tmp, tracking_uri=tracking_uri
            )
        except Exception:  # MLflow raises several types for a missing artifact
            return None
        plan = pd.read_csv(path, dtype=str)
    conventions = plan["budget_flops"] if "budget_flops" in plan.columns else [""] * len(plan)
    return dict(zip(plan["run_key"], pd.Series(conventions).fillna("")))


def _parents_plan_keys(runs: list, tracking_uri: str | None) -> dict[str, str]:
    """`_plan_run_keys` of every sweep parent of `runs` (the `mlflow.parentRunId` tag), merged:
    run key -> the convention its budget was planned in, where a plan says one."""
    merged: dict[str, str] = {}
    parents = sorted({r.data.tags.get("mlflow.parentRunId", "") for r in runs} - {""})
    for parent in parents:
        for key, convention in (_plan_run_keys(parent, tracking_uri) or {}).items():
            if convention:
                merged.setdefault(key, convention)
    return merged


def _rank(run) -> tuple:
    return (run.info.status == "FINISHED", run.info.start_time or 0, run.info.run_id)


def run_of_key(runs: list) -> Any:
    """The run of a run key (docs/contracts.md, "The run of a run key"): its latest FINISHED
    run, else its latest run of any status; latest = largest start_time, then largest run_id.
    The same rule as `training.tracking.run_of_key` (a copy: analysis never imports training or sweeps), so
    a report uses the run that `training.train` reuses and `sweeps.run` counts as done."""
    return max(runs, key=_rank, default=None)


def _latest_attempts(found: list, plan_keys: dict[str, str] | set[str] | None = None) -> list:
    """One MLflow run per run key (`run_of_key`, the rule of docs/contracts.md "The run of a
    run key"; an unfinished one is then reported as excluded), in the order of `found`. With `plan_keys`, only the planned keys: runs of keys
    no longer in the plan (a sweep rerun after its axes changed) are left out. A run without a
    run_key tag (not written by training.train) is its own key."""
    by_key: dict[str, list] = {}
    for run in found:
        key = run.data.tags.get("run_key") or f"run:{run.info.run_id}"
        if plan_keys is None or key in plan_keys:
            by_key.setdefault(key, []).append(run)
    return [run_of_key(runs) for runs in by_key.values()]


# What curves.csv holds per logged step: the val loss at eval points (every `eval_every` steps and
# the end), the train loss and lr at log points (every `log_every` steps); a column is empty
# (NaN) at a step where that metric was not logged. Files written before the train_loss and lr
# columns hold val_loss only, and every reader accepts them.
CURVE_METRICS = ("val_loss", "train_loss", "lr")


def load_curves(run_ids, tracking_uri: str | None = None, metrics=CURVE_METRICS) -> pd.DataFrame:
    """Training curves: columns run_id, tokens (the metric step) and one per metric (NaN at a
    step where that metric was not logged), sorted by run and tokens.

    One `get_metric_history` call per run and metric (MLflow's public client has no bulk call).
    """
    from mlflow import MlflowClient  # lazy: mlflow ~2.5 s

    client = MlflowClient(tracking_uri=tracking_uri)
    parts = []
    for run_id in run_ids:
        merged = None
        for metric in metrics:
            hist = client.get_metric_history(run_id, metric)
            frame = pd.DataFrame(
                {"tokens": [h.step for h in hist], metric: [h.value for h in hist]}
            ).drop_duplicates("tokens", keep="last")
            merged = frame if merged is None else merged.merge(frame, on="tokens", how="outer")
        merged = merged.dropna(how="all", subset=list(metrics))
        parts.append(merged.assign(run_id=run_id)[["run_id", "tokens", *metrics]])
    if not parts:
        return pd.DataFrame(columns=["run_id", "tokens", *metrics])
    curves = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    curves = curves.astype({"tokens": "int64"})
    return curves.sort_values(["run_id", "tokens"], kind="stable").reset_index(drop=True)


def val_points(curves: pd.DataFrame | None) -> pd.DataFrame | None:
    """The eval points of a curves frame (run_id, tokens, val_loss): the rows where val_loss was
    logged, from a dense export or an older val-only file alike."""
    if curves is None:
        return None
    keep = curves[pd.to_numeric(curves["val_loss"], errors="coerce").notna()]
    return keep[["run_id", "tokens", "val_loss"]].reset_index(drop=True)
