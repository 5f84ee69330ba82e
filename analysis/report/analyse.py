"""What a report computes from its runs: the variants and the baseline, every law fitted to
the baseline, the laws compared on held-out runs, the tuning arms and rules, and the ablation's
verdicts (`Analysis`, `analyse`); InputError (one line) before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.data import compute_factor
from analysis.data.load import (
    PARAMETRIC_PARAMS,
    InputError,
    check_fittable,
    check_text,
    load_curves,
    val_points,
)
from analysis.fits import compare_laws, law_check
from analysis.fits.fit import FitOptions, Fits, check_exact_compute, fit_all
from analysis.tuning import arms as tuning
from analysis.tuning import hparam_laws
from analysis.verdicts import decision, noise
from analysis.verdicts.ablation import compare_variants


@dataclass(frozen=True)
class Comparison:
    """What a report compares: every run labelled by its variant, and the baseline's runs."""

    runs: pd.DataFrame  # every run; `variant` the --compare value as text, C exact if asked
    base: pd.DataFrame  # the baseline variant's runs, index reset
    variants: list[str]  # every variant, sorted
    law_fit: bool  # fit L(N, D) to the baseline (False: an ablation at one token budget)


def choose_variants(
    runs: pd.DataFrame,
    compare: str = "variant",
    baseline: str = "base",
    compute: str = "6nd",
    labels: dict[str, str] | None = None,
) -> Comparison:
    """Label every run with its value of `compare` (its display name where `labels` gives one),
    pick the `baseline` variant's runs, and decide whether they support a law fit. InputError
    (one line) for a missing column, an unknown baseline, a baseline that mixes architectures,
    or unfittable baseline runs."""
    runs = label_variants(runs, compare, baseline, labels)
    variants = sorted(runs["variant"].unique())
    if baseline not in variants:
        raise InputError(f"--baseline: no variant '{baseline}'; variants: {variants}")
    if compute == "exact":  # every C below (fits, multipliers, figures) is exact
        check_exact_compute(runs)
        runs = runs.assign(C=runs["C_exact"].astype(float))
    base = runs[runs["variant"] == baseline].reset_index(drop=True)
    if "arch" in base.columns and base["arch"].nunique() > 1:
        archs = sorted(base["arch"].astype(str).unique())
        raise InputError(
            f"baseline '{baseline}' mixes architectures {archs}: one scaling law per "
            "architecture; use --compare arch --baseline ARCH"
        )
    # An ablation at one token budget (sizes x variants) has no L(N, D) to fit, but its
    # compute multipliers only need each variant's L(C): report those alone.
    law_fit = len(variants) == 1 or (base["N"].nunique() > 1 and base["D"].nunique() > 1)
    law_fit = law_fit and (
        len(variants) == 1 or len(base) > PARAMETRIC_PARAMS
    )  # else: ablation only
    if law_fit:
        check_fittable(base, f"baseline variant '{baseline}'")
    return Comparison(runs=runs, base=base, variants=variants, law_fit=law_fit)


LLAMA = "pre-rmsnorm-rope-gqa2-swiglu"  # the suite's reference block, every ablation's base


# halving's segments; and the WSD decay start, (1 - decay) D in whole batches, which follows
# the batch size when that is tuned
STRUCTURAL = {"train.init_from", "train.save_at_tokens", "train.tokens", "train.decay_start_tokens"}


def fill_defaults(args, frame: pd.DataFrame) -> list[str]:
    """--baseline and --tune when not given, read from the runs, so a sweep's own runs.csv
    reports without flags: the baseline is `base`, else the only value of --compare, else the
    llama block's architecture; a tuned sweep's keys are the settings its candidates vary
    within an arm. Returns what it chose, one note each."""
    notes = []
    if args.baseline is None:
        col = args.compare if args.compare in frame.columns else "variant"
        complete = col in frame and frame[col].notna().all()  # else the rest join `base`
        values = sorted(frame[col].astype(str).unique()) if complete else ["base"]
        args.baseline = "base"
        if "base" not in values and (len(values) == 1 or LLAMA in values):
            args.baseline = values[0] if len(values) == 1 else LLAMA
            notes.append(f"--baseline {args.baseline} (of {values}; pass --baseline to choose)")
    if not args.tune and "tune_role" in frame and frame["tune_role"].eq("candidate").any():
        arms = frame[frame["arm"].notna()] if "arm" in frame else frame.iloc[:0]
        keys = [c for c in frame.columns if "." in c and c not in STRUCTURAL]
        varied = arms.groupby("arm")[keys].nunique(dropna=False).max() if len(arms) else None
        args.tune = [] if varied is None else [k for k in keys if varied[k] > 1]
        if args.tune:
            notes.append(" ".join(f"--tune {k}" for k in args.tune) + " (the tuned settings)")
    return notes


def label_variants(
    runs: pd.DataFrame,
    compare: str = "variant",
    baseline: str = "base",
    labels: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Every run's `variant` as text: its value of `compare` (the baseline where it has none),
    shown by its display name where `labels` ({value: name}, --label) gives one."""
    if compare != "variant":
        if compare not in runs.columns:
            raise InputError(f"--compare: no column '{compare}' in the runs")
        runs = runs.assign(variant=runs[compare])
    if "variant" not in runs.columns:
        runs = runs.assign(variant=baseline)
    elif compare == "variant" and runs["variant"].isna().any():
        # a source without the column (its rows are NaN after concatenation): baseline runs
        runs = runs.assign(variant=runs["variant"].fillna(baseline))
    variant = runs["variant"].astype(str)
    return runs.assign(variant=variant.map(lambda v: labels.get(v, v)) if labels else variant)


def parse_labels(items: list[str] | None) -> dict[str, str]:
    """--label VALUE=NAME (repeatable) as {value: name}; InputError (one line) for an item
    without '=', an empty side, a value named twice or one name for two values."""
    labels: dict[str, str] = {}
    for item in items or []:
        value, sep, name = item.partition("=")
        value, name = value.strip(), name.strip()
        if not sep or not value or not name:
            raise InputError(f"--label {item!r}: expected VALUE=NAME, e.g. --label {LLAMA}=llama")
        if labels.get(value, name) != name:
            raise InputError(f"--label {value}: given two names ({labels[value]}, {name})")
        if name in labels.values() and labels.get(value) != name:
            raise InputError(f"--label {value}={name}: '{name}' already names another value")
        labels[value] = name
    return labels


def apply_labels(args, frame: pd.DataFrame) -> None:
    """Check args.labels against the values of the --compare column (InputError, one line,
    before any fit) and name the baseline by its label: --baseline may be given as the value
    or as its label."""
    labels = args.labels
    if not labels:
        return
    inverse = {name: value for value, name in labels.items()}
    baseline = inverse.get(args.baseline, args.baseline) or "base"
    values = sorted(label_variants(frame, args.compare, baseline)["variant"].unique())
    for value, name in labels.items():
        if value not in values:
            raise InputError(
                f"--label {value}={name}: no variant '{value}' in the --compare column "
                f"'{args.compare}'; its values: {values}"
            )
        if name in values and name not in labels:  # two variants would read the same
            raise InputError(f"--label {value}={name}: '{name}' is already another variant")
    args.baseline = labels.get(baseline, baseline)


def unlabel(runs: pd.DataFrame, labels: dict[str, str] | None) -> pd.DataFrame:
    """The runs with `variant` back at its value (runs.csv keeps the data: a report from it
    takes the same --label)."""
    if not labels or "variant" not in runs.columns:
        return runs
    inverse = {name: value for value, name in labels.items()}
    return runs.assign(variant=runs["variant"].map(lambda v: inverse.get(v, v)))


@dataclass(frozen=True)
class Analysis:
    """Everything one report (or one family's section of a families report) shows."""

    runs: pd.DataFrame  # every run labelled by its variant (C exact if asked)
    grid_runs: pd.DataFrame | None  # --tune: every run of the grid (what runs.csv holds)
    base: pd.DataFrame  # the baseline variant's runs (the law is fitted to these)
    curves: pd.DataFrame | None
    fits: Fits | None  # None: an ablation at one token budget
    law_comparison: list[tuple]
    ablation: dict | None
    tuned: dict | None  # --tune: the tuning section of every arm
    rule: dict | None  # --tune: the baseline's lr rule
    hparams: dict | None = None  # --tune: the baseline's lr and batch-size laws
    labels: dict | None = None  # --label: {value of --compare: the name the report shows}

    @property
    def exported(self) -> pd.DataFrame:
        """The runs runs.csv holds: the grid's every run when tuned, `variant` at its value."""
        return unlabel(self.runs if self.grid_runs is None else self.grid_runs, self.labels)

    @property
    def result(self) -> dict | None:
        return None if self.fits is None else self.fits.as_dict()


def analyse(
    frame: pd.DataFrame, args, budgets: list[float] | None = None, curves_of=None
) -> Analysis:
    """Every fit of one family's runs (InputError before any file is written). `budgets`
    replaces --budget (a families report states every family's allocation at the same C);
    `curves_of(runs)` the curves of those runs (default: --curves or the store)."""
    tuned, grid_runs, labels = None, None, getattr(args, "labels", None) or {}
    if args.tune:  # the arms' results are the report's runs; every run goes into runs.csv
        grid_runs = label_variants(frame, args.compare, args.baseline, labels)
        frame, tuned = tuning.select(grid_runs, args.tune)
    chosen = choose_variants(frame, args.compare, args.baseline, args.compute, labels)
    runs, base = chosen.runs, chosen.base
    curves = (curves_of or (lambda r: read_curves(args, r)))(
        runs if grid_runs is None else grid_runs
    )
    fits = None
    sigma = noise.noise_scale(runs)["sigma"]
    base = base[~noise.on_plateau(base, sigma)]  # listed in the ablation's plateau section
    law_fit = chosen.law_fit and len(base) > PARAMETRIC_PARAMS  # else: too few off the plateau
    if law_fit and len(base):
        options = FitOptions.from_args(args, budgets=budgets or args.budget)
        extra = dict(intermediate=args.intermediate, tuned=tuned, grid_runs=grid_runs)
        fits = fit_all(base, options, curves=val_points(curves), **extra)
        law_check.check_baseline_fits(fits, base, sigma)
    # every law form the columns allow, judged on the runs above the hold-out threshold
    # (nothing when the runs are too few); 200 refits at most: it refits four laws
    law_comparison = (
        compare_laws.report_blocks(
            base,
            min(args.bootstrap, 200),
            args.seed,
            args.holdout_above,
        )
        if law_fit
        else []
    )
    rule, hparams = _baseline_rules(tuned, base, grid_runs, fits, args)
    ablation = None
    if len(chosen.variants) > 1:
        ablation = compare_variants(
            runs, baseline=args.baseline, n_boot=args.bootstrap, seed=args.seed
        )
        ablation["compute"] = args.compute
        ablation.update(decision.sections(runs, ablation, args))  # time, decision accuracy
    return Analysis(
        runs=runs,
        grid_runs=grid_runs,
        base=base,
        curves=curves,
        fits=fits,
        law_comparison=law_comparison,
        ablation=ablation,
        tuned=tuned,
        rule=rule,
        hparams=hparams,
        labels=labels,
    )


def _baseline_rules(tuned, base: pd.DataFrame, grid_runs, fits, args) -> tuple:
    """The baseline's lr rule and its lr / batch-size laws (its arms), also in an ablation
    without a law fit; (None, None) when untuned."""
    if not tuned:
        return None, None
    if fits:
        return fits.lr_rule, fits.hparams
    arms, k = tuning.for_runs(tuned, base["run_id"]), compute_factor.of_runs(base)
    return (
        tuning.lr_rule(arms, args.bootstrap, args.seed, k),
        hparam_laws.section(grid_runs, arms, args.bootstrap, args.seed, k),
    )


def read_curves(args, runs: pd.DataFrame) -> pd.DataFrame | None:
    if args.curves:
        parts = []
        for path in args.curves:
            if not Path(path).is_file():
                raise InputError(f"--curves: no such file: {path}")
            check_text(Path(path), "--curves")
            curves = pd.read_csv(path)
            missing = {"run_id", "tokens", "val_loss"} - set(curves.columns)
            if missing:
                raise InputError(f"--curves: missing column(s) {sorted(missing)} in {path}")
            parts.append(curves)
        return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    if args.experiment:
        return load_curves(runs["run_id"], args.tracking_uri)
    return None
