"""`scaling-lab SUBCOMMAND [ARGS]`: one command for what users do, each subcommand the module it
names, run as `python -m MODULE ARGS` runs it (same arguments, `--help`, output and exit code).

    scaling-lab --help                                  # the subcommands, one line each
    scaling-lab sweep sweep=isoflop sweep.dry_run=true  # Hydra overrides pass through
    scaling-lab report --csv results/demo/runs.csv --out report

Nothing is imported before the subcommand is known (torch, MLflow and Hydra take seconds), so
`--help` answers at once; `runpy` then runs the module as `__main__`.
"""

from __future__ import annotations

import runpy
import sys
from typing import NamedTuple


class Command(NamedTuple):
    module: str  # run as `python -m module`
    summary: str  # the line `scaling-lab --help` shows
    args: tuple[str, ...] = ()  # put before the user's arguments (a module's own subcommand)


COMMANDS = {
    "train": Command(
        "training.train", "one training run (Hydra overrides: model=llama train.lr=1e-3)"
    ),
    "sweep": Command(
        "sweeps.run", "plan, train and record a sweep (sweep=NAME, sweep.dry_run=true)"
    ),
    "prepare": Command("training.data", "tokenize a corpus once, ahead of training", ("prepare",)),
    "report": Command("analysis.report", "the report of a sweep: fits, verdicts, figures"),
    "fit": Command("analysis.fit", "fit a scaling law to runs (runs.csv or MLflow) into fit.json"),
    "predict": Command("analysis.predict", "ask a fitted law: loss at (N, D), optimal N and D, lr"),
    "compare": Command("analysis.compare_laws", "which law predicts best, on held-out runs"),
    "curves": Command("analysis.curves", "loss-curve laws: fit, predict a run from its prefix"),
    "tune-check": Command("analysis.tuning_check", "does a tuning rule choose what the grid would"),
    "ui": Command("sweeps.ui", "the MLflow UI on the project's store, opened on its runs"),
    "export": Command("models.export_hf", "export a checkpoint to a Hugging Face model folder"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: scaling-lab SUBCOMMAND [ARGS ...]",
        "",
        "Transformer ablations and scaling laws; `SUBCOMMAND --help` for its own help.",
        "",
        "subcommands:",
        *(f"  {name:<{width}}  {cmd.summary}" for name, cmd in COMMANDS.items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        sys.exit(0 if argv else 2)
    name, rest = argv[0], argv[1:]
    command = COMMANDS.get(name)
    if command is None:
        print(
            f"error: {name}: unknown subcommand; available: {', '.join(COMMANDS)}", file=sys.stderr
        )
        sys.exit(2)
    # exactly `python -m MODULE ARGS`: sys.argv[0] becomes the module's file (alter_sys)
    sys.argv = [sys.argv[0], *command.args, *rest]
    runpy.run_module(command.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
