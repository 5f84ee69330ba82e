"""Run a planned sweep through a Hydra launcher: plan, dry run, MLflow parent, waves, summary.

The Hydra plugin (`hydra_plugins/scaling_lab_sweeper`) supplies two callables, `compose`
(overrides -> the job's composed config) and `launch` (override lists -> JobReturns, through
whatever `hydra/launcher` is selected); everything else lives here so it reads without Hydra's
plugin machinery.

Order of work (all before the first job starts): parse the sweep and command line, fail on
conflicting axes, resolve every point (exact N, D, C, run key), read the state of every run key
from MLflow, then create the store, experiment and parent run. Only then are jobs launched:
first every point without a dependency, then the WSD branches whose stable run finished.
Launching the waves and each point's outcome are `sweeps.waves`; the optional report step
(`sweep.report`) is `sweeps.sweep_report`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from models import count_params
from models.accounting import GB
from sweeps import (
    batch_axis,
    curve_tuning,
    decide,
    plan,
    rules,
    slurm,
    sweep_records,
    tuning,
    tuning_view,
    ui,
)
from sweeps.config import SweepConfig
from sweeps.job import ENV_GPU_LOCKS, ENV_GPU_POOL, training_config
from sweeps.names import RunNames
from sweeps.stopping import SweepStopped, stop_on_sigterm
from sweeps.sweep_report import answer, arch_labels, run_report
from sweeps.sweep_view import (
    Closing,
    Planned,
    fit_width,
    plan_rows,
    print_decide,
    print_plan,
    print_summary,
)
from sweeps.waves import (
    FAILED_BEFORE,
    Launch,
    Outcome,
    Parent,
    WorkerLost,
    exit_if_failed,
    failed_points,
    run_waves,
    skipped,
)
from training import objectives, tracking
from training.checkpoint import branch_checkpoint_path, run_dir
from training.cli import explain
from training.config import ConfigError, DataConfig
from training.data import prepare_data
from training.paths import default_cache_dir, default_runs_dir, resolve_dir, unusable_folder
from training.spec import resolve_config
from training.step import planned_verdict

Compose = Callable[[Sequence[str]], DictConfig]


def parse_cli(arguments: Sequence[str]) -> tuple[list[str], dict[str, list[str]], list[str]]:
    """Split command-line overrides into (passed to every job, extra axes from `k=a,b`, keys set)."""
    fixed, axes, keys = [], {}, []
    for o in OverridesParser.create().parse_overrides(list(arguments)):
        key = o.key_or_group
        if o.is_sweep_override():
            if not o.is_discrete_sweep():
                raise plan.PlanError(
                    f"{key}: only comma lists (a,b,c) can be swept on the command line"
                )
            axes[key] = list(o.sweep_string_iterator())
            continue
        fixed.append(o.input_line)
        if not key.startswith(("sweep", "hydra")):
            keys.append(key)
    return fixed, axes, keys


def sweep_config(cfg: DictConfig) -> SweepConfig:
    """The app config's `sweep` section, checked (`sweeps.config`: the one check of it)."""
    return SweepConfig.from_dict(OmegaConf.to_container(cfg.sweep, resolve=True))


def spec_from_config(cfg: DictConfig, cli_axes: dict[str, list[str]]) -> plan.SweepSpec:
    return plan.SweepSpec.from_config(sweep_config(cfg), cli_axes)


def facts(cfg: DictConfig, world: int = 1) -> plan.RunFacts:
    """Exact N, FLOPs per token and run key of one composed point, exactly as `training.train`
    resolves it (no data or model built), its memory per rank on `world` ranks. A model the
    factory cannot build (e.g. a size the ladder cannot reach) raises ValueError: the point is
    skipped with that reason. Any other config error, and a step estimated to fit the device
    neither as configured nor sharded over its ranks, fails the whole sweep before anything
    starts."""
    try:
        spec = resolve_config(training_config(cfg))
    except ConfigError as e:
        if str(e).startswith("model:"):
            raise ValueError(str(e)) from None
        raise plan.PlanError(str(e)) from None
    pc = count_params(spec.model)
    seq_len = spec.train.seq_len  # per token as the family's objective counts tokens
    per_token = objectives.for_model(spec.model, seq_len, spec.data).accounting(seq_len)
    dense_decoder = spec.model.family == "decoder" and spec.model.mlp != "moe"
    six_n = None if dense_decoder else per_token.flops_6nd / seq_len  # MoE: 6 N_active
    memory, device_memory, fit = planned_verdict(
        spec.train, spec.model, torch.cuda.is_available(), world
    )
    if fit.nowhere:
        shape = f"{spec.model.arch} n_layers={spec.model.n_layers} d_model={spec.model.d_model}"
        raise plan.PlanError(f"train.micro_batch: a point ({shape}) {fit.note()}")
    return plan.RunFacts(
        run_key=spec.run_key,
        arch=spec.model.arch,
        n_layers=spec.model.n_layers,
        d_model=spec.model.d_model,
        n_params=pc.total,
        n_params_nonembed=pc.non_embedding,
        n_params_nonembed_active=pc.non_embedding_active,
        flops_per_token=float(per_token.flops_per_token_exact),
        flops_6nd_per_token=six_n,
        tokens=float(spec.train.tokens),
        batch_tokens=spec.train.batch_tokens,
        memory_gb=memory.total / GB,
        device_memory_gb=device_memory / GB if device_memory else None,
        seq_len=spec.train.seq_len,
        memory_note=fit.note(),
    )


@dataclass
class Sweep:
    """One invocation of a sweep: its settings (`cfg.sweep`) and spec, the command line's
    overrides, where its records and checkpoints go, and the composer of its points."""

    cfg: DictConfig  # the composed app config
    spec: plan.SweepSpec
    fixed_args: list[str]  # command-line overrides every job gets
    cli_keys: list[str]  # the keys they set
    compose: Compose  # cached_compose of the plugin's
    base: DictConfig  # the config every point starts from (paths, tracking)
    uri: str
    experiment: str
    runs_dir: Path  # where checkpoints go
    datasets: dict[str, dict] = field(default_factory=dict)  # each distinct data section
    names: RunNames | None = None  # readable run names and block labels
    name_runs: bool = True  # False: tracking.run_name is set, every point keeps it
    config: SweepConfig = field(default_factory=SweepConfig)  # cfg.sweep, checked

    @classmethod
    def from_cli(cls, cfg: DictConfig, arguments: Sequence[str], compose: Compose) -> Sweep:
        config = sweep_config(cfg)
        fixed_args, cli_axes, cli_keys = parse_cli(arguments)
        spec = plan.SweepSpec.from_config(config, cli_axes)
        spec.check_conflicts(cli_keys)
        compose = cached_compose(compose)
        # where records and checkpoints go: the command line and sweep.fixed may set them
        base = compose(
            [*fixed_args, *(f"{k}={plan.format_value(v)}" for k, v in spec.fixed.items())]
        )
        uri = tracking.resolve_tracking_uri(base.tracking.get("uri"))
        experiment = str(base.tracking.experiment)
        sweep = cls(
            cfg, spec, fixed_args, cli_keys, compose, base, uri, experiment, _runs_dir(base)
        )
        sweep.config = config
        swept = [*spec.axes, *(spec.tune.grid if spec.tune else ())]
        block = OmegaConf.select(cfg, "hydra.runtime.choices.model", default=None)
        sweep.names = RunNames(swept, str(block or "model"))
        sweep.name_runs = base.tracking.get("run_name") is None
        return sweep

    @property
    def jobs(self) -> int:
        return self.config.jobs

    def config_of(self, overrides: Sequence[str]) -> DictConfig:
        return self.compose([*self.fixed_args, *overrides])

    def facts_of(self, overrides: Sequence[str]) -> plan.RunFacts:
        cfg_point = self.config_of(overrides)
        data = OmegaConf.to_container(cfg_point.data, resolve=True)
        self.datasets.setdefault(repr(sorted(data.items())), data)
        try:
            return facts(cfg_point, self.ranks_per_point)
        except plan.PlanError:
            raise
        except ValueError as e:
            if OmegaConf.select(cfg_point, "model.size") is None:
                raise plan.PlanError(str(e)) from None  # not a size the ladder cannot reach
            raise

    def checkpoint_path(self, key: str, tokens: int) -> str:
        return str(branch_checkpoint_path(self.runs_dir, key, tokens))

    def resolve_points(self, points: Sequence[plan.Point]) -> list[plan.PlannedRun]:
        """Resolved points with their run keys' MLflow state applied (read now)."""
        throughput = self.config.throughput
        resolved = plan.resolve(
            self.spec,
            points,
            self.facts_of,
            self.checkpoint_path,
            flops_per_sec=float(throughput.flops_per_sec),
            overhead_s=float(throughput.overhead_s),
        )
        # never creates the store: a plan that fails (e.g. a tuning stage's bad input) leaves
        # nothing behind; _execute creates it
        records = _read_records(self.uri, self.experiment) or {}
        retry = self.config.retry_failed
        resolved = [_apply_record(r, records.get(r.run_key), retry) for r in resolved]
        return self._skip_active_jobs(resolved) if self.on_slurm else resolved

    @property
    def ranks_per_point(self) -> int:
        """The ranks one point trains on: a SLURM point's nodes x tasks per node, else 1."""
        if not self.on_slurm:
            return 1
        launcher = self.cfg.hydra.launcher
        return int(launcher.get("nodes") or 1) * int(launcher.get("tasks_per_node") or 1)

    @property
    def on_slurm(self) -> bool:
        return "Slurm" in str(OmegaConf.select(self.cfg, "hydra.launcher._target_", default=""))

    def _skip_active_jobs(self, runs: list[plan.PlannedRun]) -> list[plan.PlannedRun]:
        """A point whose SLURM job (from an earlier invocation) is still queued or running is
        not submitted again: it trains already, or will."""
        jobs = {r.run_key: slurm.recorded_job(run_dir(self.runs_dir, r.run_key)) for r in runs}
        active = slurm.active_jobs([j for j in jobs.values() if j])
        return [
            replace(
                r,
                skip=f"SLURM job {jobs[r.run_key]} still {active[jobs[r.run_key]]} "
                f"(scancel {jobs[r.run_key]} to submit it again)",
            )
            if not r.skip and jobs[r.run_key] in active
            else r
            for r in runs
        ]

    def record_jobs(self, batch: list[plan.PlannedRun], job_ids: Sequence[str]) -> None:
        for r, job_id in zip(batch, job_ids):
            slurm.record_job(run_dir(self.runs_dir, r.run_key), job_id)

    def make_plan(self) -> tuple[list[plan.PlannedRun], tuning.TuningPlan | None]:
        """The runs of the first wave, and a tuned sweep's plan (its points are arms; what
        trains are their tuning runs, stage by stage)."""
        points = rules.apply_rules(self.spec, plan.expand(self.spec), self.facts_of)
        points = batch_axis.with_granule(self.spec, points, self.facts_of)
        runs = self.resolve_points(points)
        if not self.spec.tune:
            return runs, None
        throughput = self.config.throughput
        tuned = tuning.plan_tuning(
            self.spec.tune,
            runs,
            self.config_of,
            self.checkpoint_path,
            self.resolve_points,
            float(throughput.flops_per_sec),
            float(throughput.overhead_s),
            seeds=self.spec.seeds,
        )
        return tuned.first_stage(), tuned

    def job_overrides(self, run: plan.PlannedRun, parent_run_id: str) -> list[str]:
        extra = [
            f"tracking.parent_run_id={parent_run_id}",
            f"++tracking.tags.sweep={self.spec.name}",
        ]
        if "train.progress" not in self.cli_keys:
            extra.append("train.progress=none")  # the sweep bar is the progress display
        if self.name_runs:
            extra.append(f"++tracking.run_name='{self.names(run)}'")
        return [*self.fixed_args, *run.overrides, *extra, f"++tracking.tags.variant={run.variant}"]


def drive(cfg: DictConfig, arguments: Sequence[str], compose: Compose, launch: Launch) -> list:
    sweep = Sweep.from_cli(cfg, arguments, compose)
    tracking.check_store(sweep.uri)  # reading only: the plan reads the runs' states from it
    tic = time.perf_counter()
    runs, tuned = sweep.make_plan()
    plan_s = time.perf_counter() - tic
    if sweep.config.dry_run:
        db = tracking.sqlite_path(sweep.uri)
        records_read = db is None or db.exists()
        print_plan(sweep.spec, runs, sweep.jobs, records_read, plan_s, sweep.names.block)
        for line in rules.describe(sweep.spec, runs):
            print(line)
        if tuned:
            tuning_view.print_tuning(tuned, sweep.jobs, sweep.names.block)
            if line := batch_axis.describe(tuned):
                print(line)
        print_decide(decide_lines(sweep, runs, tuned))
        return []
    if tuned and (warning := tuning_view.early_rungs(tuned)):
        print(fit_width(warning), flush=True)  # also without a dry run: before anything trains
    _check_places(sweep)
    if any(not r.skip for r in runs):
        _prepare_data(cfg, sweep.base, list(sweep.datasets.values()))
    more = None if tuned is None else _next_stages(sweep, tuned)
    return _execute(sweep, runs, launch, more, planned(runs, tuned))


def decide_lines(sweep: Sweep, runs, tuned: tuning.TuningPlan | None) -> list[str]:
    """What the plan can decide (`sweeps.decide`): a tuned plan's cells are its arms, each
    trained with every seed; an untuned plan's its points."""
    report_args = (sweep.config.report or {}).get("args") or []
    cells = runs if tuned is None else [arm.run for arm in tuned.arms]
    return decide.lines(
        cells,
        variants=list(sweep.spec.variants),
        block_of=sweep.names.block,
        report_args=report_args,
        seeds=sweep.spec.seeds if tuned else 1,
    )


def planned(runs: list[plan.PlannedRun], tuned: tuning.TuningPlan | None) -> Planned:
    """The whole plan's runs and estimated seconds for the progress bar: a tuned sweep's every
    stage as its dry run counts them (`tuning_view.stage_estimates`), less the points done before."""
    todo = [r for r in runs if not r.skip]
    known = Planned(len(todo), sum(max(r.est_s, 1.0) for r in todo))
    if tuned is None:
        return known
    every = [max(s, 1.0) for stage in tuning_view.stage_estimates(tuned) for s in stage]
    done = [r for r in runs if r.skip]
    whole = Planned(len(every) - len(done), sum(every) - sum(max(r.est_s, 1.0) for r in done))
    return Planned(max(whole.runs, known.runs), max(whole.est_s, known.est_s))


def _next_stages(sweep: Sweep, tuned: tuning.TuningPlan) -> Callable[[dict], list]:
    """A tuned sweep's next stage from the outcomes so far, ranked on MLflow's records."""
    ranked = curve_tuning.ranked_loss if tuned.spec.curve else None
    losses_of = tuning.losses_from_mlflow(sweep.uri, sweep.experiment, ranked)
    tag_chosen = tuning.tag_chosen_in_mlflow(sweep.uri, sweep.experiment)
    return lambda outcomes: tuned.next_stage(outcomes, losses_of, tag_chosen)


def cached_compose(compose: Compose) -> Compose:
    """Hydra-compose each distinct set of group choices (`model=llama`, `sweep=demo`...) once and
    apply plain `key=value` overrides to a copy: the same config a job gets, for a fraction of
    the cost (a 24-point IsoFLOP plan composes a few times instead of 48)."""
    parser = OverridesParser.create()
    cache: dict[tuple[str, ...], DictConfig] = {}

    def composed(overrides: Sequence[str]) -> DictConfig:
        parsed = parser.parse_overrides(list(overrides))
        values = [
            o
            for o in parsed
            if "." in o.key_or_group and "/" not in o.key_or_group and not o.is_delete()
        ]
        groups = tuple(o.input_line for o in parsed if o not in values)
        if groups not in cache:
            try:
                cache[groups] = compose(list(groups))
            except (HydraException, OmegaConfBaseException) as e:  # e.g. `model: [nope]` in axes
                raise plan.PlanError(explain(e, list(groups))) from None
        cfg = cache[groups].copy()
        for o in values:
            try:
                OmegaConf.update(
                    cfg, o.key_or_group, o.value(), force_add=o.is_force_add() or o.is_add()
                )
            except Exception as e:  # e.g. a key the config does not have (Hydra refuses it too)
                raise plan.PlanError(
                    f"{o.input_line}: cannot override ({type(e).__name__}: {e})".splitlines()[0]
                ) from None
        return cfg

    return composed


def _prepare_data(cfg: DictConfig, base: DictConfig, datasets: list[dict]) -> None:
    """Build each distinct token cache once before fan-out, so K parallel jobs do not all train
    the same BPE tokenizer at once. Skipped for SLURM (the cache is built by the first job)."""
    launcher = str(OmegaConf.select(cfg, "hydra.launcher._target_", default=""))
    if "Slurm" in launcher:
        return
    cache_dir = resolve_dir(base.get("paths", {}).get("cache_dir"), default_cache_dir())
    for d in datasets:
        prepare_data(DataConfig.from_dict(d), cache_dir)


def _check_places(sweep: Sweep) -> None:
    """The store (its server answers, its driver is installed) and the folders a sweep writes,
    checked before any token cache is built: one line instead of a traceback after it."""
    if tracking.is_remote(sweep.uri):
        tracking.check_reachable(sweep.uri)
    folders = {
        "paths.runs_dir": sweep.runs_dir,
        "paths.cache_dir": resolve_dir(sweep.base.paths.get("cache_dir"), default_cache_dir()),
    }
    if (db := tracking.sqlite_path(sweep.uri)) is not None:
        folders["tracking.uri"] = db.parent
    if report := sweep.cfg.sweep.get("report"):  # written after every point trained
        folders["sweep.report.out"] = Path(str(report.out)).expanduser().resolve()
    for name, folder in folders.items():
        if (why := unusable_folder(folder)) is not None:
            raise ConfigError(f"{name}: {why}")


def _runs_dir(cfg: DictConfig) -> Path:
    return resolve_dir(cfg.get("paths", {}).get("runs_dir"), default_runs_dir())


def _read_records(uri: str, experiment: str):
    """{run_key: RunRecord} of the experiment, never creating the store; None where it does not
    exist yet or its server is down (the plan then has no states)."""
    db = tracking.sqlite_path(uri)
    if db is not None and not db.exists():
        return None
    try:
        tracking.check_reachable(uri)
    except tracking.TrackingUnavailable:
        return None
    exp = tracking.client(uri).get_experiment_by_name(experiment)
    return {} if exp is None else sweep_records.latest_by_key(uri, exp.experiment_id)


def _apply_record(run: plan.PlannedRun, rec, retry_failed: bool) -> plan.PlannedRun:
    """Turn the MLflow state of a point's run key into this invocation's decision."""
    if run.skip or rec is None:
        return run
    if rec.status == "FINISHED":
        where = f" in sweep '{rec.sweep}'" if rec.sweep else ""
        return replace(run, skip=f"done: FINISHED run {rec.run_id[:8]}{where}")
    if rec.status == "FAILED" and not retry_failed:
        why = f" ({rec.failure_reason})" if rec.failure_reason else ""
        return replace(run, skip=f"{FAILED_BEFORE}{why}; rerun with sweep.retry_failed=true")
    return run  # RUNNING / KILLED (interrupted) or FAILED to retry: the job resumes it


def _execute(
    sweep: Sweep,
    runs: list[plan.PlannedRun],
    launch: Launch,
    more=None,
    whole: Planned | None = None,
) -> list:
    """Launch every run that is not skipped, wave by wave (then each stage `more` derives),
    under the sweep's parent run; print the summary and raise SystemExit(1) if a point failed."""
    exp_id = tracking.ensure_experiment(sweep.uri, sweep.experiment)
    tags = {
        "git_commit": tracking.git_commit(),
        "sweep_kind": sweep.spec.kind,
    }
    parent = Parent(exp_id, sweep_records.open_parent(sweep.uri, exp_id, sweep.spec.name, tags))
    sweep_yaml = OmegaConf.to_yaml(sweep.cfg.sweep)
    sweep_records.log_plan(sweep.uri, parent.run_id, plan_rows(runs), sweep_yaml)
    _share_gpus(sweep.cfg, sweep.jobs)
    outcomes = {r.index: skipped(r) for r in runs if r.skip}
    status, reason = "FINISHED", ""
    try:
        with stop_on_sigterm():
            run_waves(sweep, runs, outcomes, launch, more, parent, whole)
        if more is not None:  # a tuned sweep's plan is every stage it derived
            sweep_records.log_plan(sweep.uri, parent.run_id, plan_rows(runs), sweep_yaml)
    except BaseException as e:  # Ctrl-C, SIGTERM: KILLED; a launcher that breaks: FAILED
        status = "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED"
        reason = e.reason if isinstance(e, (SweepStopped, WorkerLost)) else _first_line(e)
        raise
    finally:
        if status == "FINISHED" and failed_points(outcomes.values()):
            status = "FAILED"
            reason = f"{len(failed_points(outcomes.values()))} point(s) failed"
        sweep_records.close_parent(sweep.uri, parent.run_id, status, reason)
    ordered = [outcomes[r.index] if r.index in outcomes else Outcome(r, "not-run") for r in runs]
    arms = _log_outcome(sweep, parent)
    labels = arch_labels(runs, sweep.names.block) if sweep.names else {}
    report, report_error = run_report(sweep.cfg, sweep.uri, sweep.experiment, parent.run_id, labels)
    closing = Closing(arms, report, ui.command(sweep.uri, sweep.experiment), answer(report))
    print_summary(sweep.spec.name, ordered, sweep.uri, parent.run_id, closing)
    exit_if_failed(sweep.spec.name, ordered)
    if report_error:  # the points are recorded; the report is what this command still owes
        print(f"error: {report_error}", file=sys.stderr, flush=True)
        raise SystemExit(1)
    return ordered


def _first_line(e: BaseException) -> str:
    if isinstance(e, KeyboardInterrupt):  # training.signals.Interrupted names its signal
        signame = getattr(e, "signame", "SIGINT")
        return "stopped by Ctrl-C (SIGINT)" if signame == "SIGINT" else f"stopped by {signame}"
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def _log_outcome(sweep: Sweep, parent: Parent) -> list[sweep_records.RunRecord]:
    """Each arm's best run, logged on the parent (best loss overall, per block, per arm) so
    its chart view shows the sweep's result without expanding it."""
    children = sweep_records.children_by_key(sweep.uri, parent.experiment_id, parent.run_id)
    arms = sweep_records.best_per_arm(children)
    tags = {"best_run": arms and min(arms, key=lambda r: r.loss).name or None}
    sweep_records.log_outcome(sweep.uri, parent.run_id, sweep_records.outcome_metrics(arms), tags)
    return arms


def _share_gpus(cfg: DictConfig, jobs: int) -> None:
    """Local launchers: one GPU slot per concurrent job, claimed by each job process (sweeps.job)."""
    launcher = str(OmegaConf.select(cfg, "hydra.launcher._target_", default=""))
    if "Slurm" in launcher:
        return  # SLURM allocates GPUs per job
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        pool = [g for g in visible.split(",") if g]
    else:
        pool = [str(i) for i in range(torch.cuda.device_count())]
    if pool:
        # one slot per concurrent job; with more jobs than GPUs, jobs share GPUs round-robin
        slots = [pool[i % len(pool)] for i in range(max(jobs, 1))]
        os.environ[ENV_GPU_POOL] = ",".join(slots)
        os.environ[ENV_GPU_LOCKS] = str(Path(str(cfg.hydra.sweep.dir)) / ".gpu-locks")
