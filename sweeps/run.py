"""`python -m sweeps.run sweep=NAME [overrides]`: plan, launch and record a sweep of training runs.

    python -m sweeps.run                                  # the demo sweep (about 6 min on 2 CPU cores)
    python -m sweeps.run sweep=isoflop sweep.dry_run=true # print the plan, train nothing
    python -m sweeps.run sweep=ablation sweep.jobs=2      # two runs at a time (joblib processes)
    python -m sweeps.run sweep=grid train.seed=0,1        # a comma list adds an axis
    python -m sweeps.run sweep=isoflop hydra/launcher=slurm_gpu hydra.launcher.partition=gpu
    python -m sweeps.run --config-dir my_sweeps sweep=mine   # my_sweeps/sweep/mine.yaml

The app composes `conf/run.yaml` (the training config plus `sweep: NAME`) in multirun mode; the
`plan` sweeper (hydra_plugins/scaling_lab_sweeper) expands the sweep and hands each point to the
selected Hydra launcher, which calls `sweeps.job.run_point` with that point's config.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra

from sweeps.job import run_point
from training.cli import check_composes
from training.paths import PROJECT_ROOT

CONF_DIR = PROJECT_ROOT / "conf"


def available_sweeps(extra_dirs: list[str] = ()) -> list[str]:
    """conf/sweep/*.yaml plus sweep/*.yaml under any `--config-dir` (your own sweeps)."""
    dirs = [CONF_DIR, *map(Path, extra_dirs)]
    return sorted({p.stem for d in dirs for p in (d / "sweep").glob("*.yaml")})


def check_sweep_name(argv: list[str]) -> None:
    """One clear line for an unknown sweep name, before Hydra starts."""
    extra = [b for a, b in zip(argv, argv[1:]) if a in ("--config-dir", "-cd")]
    extra += [a.split("=", 1)[1] for a in argv if a.startswith("--config-dir=")]
    for arg in argv:
        if arg.startswith("sweep="):
            name, names = arg.split("=", 1)[1], available_sweeps(extra)
            if name not in names:
                print(
                    f"error: sweep={name}: unknown sweep; available: {', '.join(names)}",
                    file=sys.stderr,
                )
                sys.exit(2)
            # Hydra searches conf/ before a --config-dir, so a file of yours named like one of
            # ours would silently run ours: refuse the clash instead
            clash = [Path(d) / "sweep" / f"{name}.yaml" for d in extra]
            clash = [p for p in clash if p.is_file()]
            if clash and (CONF_DIR / "sweep" / f"{name}.yaml").is_file():
                print(
                    f"error: sweep={name}: {clash[0]} has the name of the project's "
                    f"conf/sweep/{name}.yaml, which Hydra would run instead; rename yours",
                    file=sys.stderr,
                )
                sys.exit(2)


# sweep file sections whose keys are override keys with dots (model.size, train.lr)
DOTTED = ("sweep.axes", "sweep.fixed", "sweep.tune")


def check_dotted_keys(argv: list[str]) -> None:
    """One line, before Hydra, for a sweep-file key spelled as a Hydra path: Hydra's keys cannot
    hold `model.size` as one name (`sweep.axes.model\\.size=...` is a lexer error,
    `sweep.axes.model.size=...` a path into `model`). The supported spelling merges a dict into
    the section, keeping its other keys: `sweep.axes={model.size:[1e5,3e5]}`."""
    for arg in argv:
        key, eq, value = arg.partition("=")
        bare = key.lstrip("+~")
        section = next((d for d in DOTTED if bare.startswith(d + ".")), None)
        if section is None or not eq:
            continue
        name = bare[len(section) + 1 :].replace("\\", "")
        if "." not in name:
            continue  # a plain key (`sweep.axes.model=[llama]`) is a Hydra path that works
        plus = key[: len(key) - len(bare)]  # + or ++: a section the sweep file lacks
        print(
            f"error: {arg}: Hydra reads {name} as a path, not as the key '{name}' of {section}; "
            f"write '{plus}{section}={{{name}:{value}}}' (merged: the section's other keys "
            "stay; docs/sweeps.md)",
            file=sys.stderr,
        )
        sys.exit(2)


def main() -> None:
    check_sweep_name(sys.argv[1:])
    check_dotted_keys(sys.argv[1:])
    check_composes(CONF_DIR, "run", sys.argv[1:])  # Hydra's errors: one line, exit 2
    app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="run")(run_point)
    app()


if __name__ == "__main__":
    main()
