"""What a sweep plans: a point (its overrides and what the plan knows of it), the facts that
composing its config gives (exact N, FLOPs per token, run key), and the planned run the driver
launches; the override keys and the override text the plan, the rules and the tuning share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from models.values import int_if_integral

# Keys the size ladder chooses itself: sweeping them next to `model.size` is ambiguous.
LADDER_KEYS = ("model.n_layers", "model.d_model")
TOKENS_KEY = "train.tokens"
SIZE_KEY = "model.size"
LR_KEY = "train.lr"
SEED_KEY = "train.seed"
BATCH_KEY = "train.batch_tokens"
# The FLOP count an IsoFLOP budget C is measured in (see the module docstring).
BUDGET_FLOPS = ("6nd", "exact")
# How the dry-run table and the summary name each convention next to a C.
C_LABEL = {"6nd": "6ND", "exact": "exact"}


def format_value(value: Any) -> str:
    """Hydra override text for a value: 3e6 -> 3000000, lists -> [a,b], None -> null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and abs(value) >= 1:  # 0.0 stays a float for Hydra
        return str(int_if_integral(value))
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    return str(value)


def seed_override(seed: int) -> tuple[str, ...]:
    """What seed k of a point adds to its overrides: nothing for seed 0 (the config's seed, so
    its run key is that of the sweep without `seeds`), else `train.seed=k`."""
    return (f"{SEED_KEY}={seed}",) if seed else ()


@dataclass(frozen=True)
class Point:
    """One training run before resolution: overrides plus what the plan needs to know."""

    overrides: tuple[str, ...]
    variant: str = "base"
    budget: float | None = None  # IsoFLOP compute budget C (FLOPs)
    phase: str = "run"  # run | stable | branch
    # stable: the budgets branching off it; branch: its own budget
    branch_tokens: tuple[float, ...] = ()
    stable_index: int | None = None  # for branches: index of the stable point they start from
    seed: int = 0  # sweep.seeds: which seed of its cell (train.seed, overridden when not 0)


@dataclass(frozen=True)
class RunFacts:
    """What composing one point's config tells the plan (see `sweeps.driver.facts`)."""

    run_key: str
    arch: str
    n_layers: int
    d_model: int
    n_params: int
    n_params_nonembed: int
    flops_per_token: float  # exact fwd+bwd FLOPs per training token
    tokens: float  # the composed train.tokens
    batch_tokens: int
    # 6N FLOPs per token where that is not 6 x n_params_nonembed: encoder_decoder, whose stacks
    # see different token counts (6 (N_enc S + N_dec T) per sequence of seq_len text tokens)
    flops_6nd_per_token: float | None = None
    memory_gb: float | None = None  # models.accounting.memory_estimate of one process's step
    device_memory_gb: float | None = None  # what it must fit: train.device_memory_gb or CUDA's
    seq_len: int = 0  # train.seq_len (a tuned batch must be whole sequences); 0: not known
    memory_note: str = ""  # training.memory_plan.Verdict.note: over the device, and what fits
    # what one token passes through (MoE: top_k routed + shared experts); None: all of it
    n_params_nonembed_active: int | None = None

    @property
    def n_active(self) -> int:
        """N as a run's C = 6 N D counts it and `analysis` reads it: a MoE's active
        non-embedding parameters, a dense model's non-embedding ones."""
        return self.n_params_nonembed_active or self.n_params_nonembed

    @property
    def six_n(self) -> float:
        """The 6ND convention's FLOPs per token: 6 N, or a family's own count."""
        return self.flops_6nd_per_token or 6.0 * self.n_params_nonembed


# overrides -> facts; raises ValueError when the factory cannot build the config (e.g. a size
# the ladder cannot reach), which becomes the point's skip reason.
Resolver = Callable[[Sequence[str]], RunFacts]
# (stable run key, token count) -> checkpoint path a WSD branch starts from
CheckpointPath = Callable[[str, int], str]


@dataclass(frozen=True)
class PlannedRun:
    index: int
    overrides: tuple[str, ...]
    variant: str
    phase: str
    facts: RunFacts | None
    budget: float | None = None
    tokens_trained: float = 0.0  # tokens this process trains (a branch trains only its decay)
    stable_index: int | None = None
    est_s: float = 0.0
    skip: str | None = None  # why this point will not run
    budget_flops: str = "6nd"  # the convention `budget` is in (sweep.budget_flops)
    seed: int = 0  # which seed of its cell (sweep.seeds)

    @property
    def run_key(self) -> str:
        return self.facts.run_key if self.facts else ""

    @property
    def n(self) -> int:
        """Non-embedding N, a MoE's active count (`RunFacts.n_active`): the N of C = 6 N D."""
        return self.facts.n_active if self.facts else 0

    @property
    def d(self) -> float:
        return self.facts.tokens if self.facts else 0.0

    @property
    def c(self) -> float:
        """6 N D of the run as logged (a branch counts its shared stable prefix too)."""
        return self.facts.six_n * self.d if self.facts else 0.0

    @property
    def c_exact(self) -> float:
        """Exact training FLOPs of the run as logged: flops_per_token (fwd + bwd) x D."""
        return self.facts.flops_per_token * self.d if self.facts else 0.0

    @property
    def c_budgeted(self) -> float:
        """The run's C in its budget's convention: what `budget` is compared with."""
        return self.c_exact if self.budget_flops == "exact" else self.c

    @property
    def c_spent(self) -> float:
        """6 N x tokens this process actually trains: what the sweep pays for this point."""
        return self.facts.six_n * self.tokens_trained if self.facts else 0.0

    @property
    def c_exact_spent(self) -> float:
        """Exact training FLOPs of the tokens this process actually trains."""
        return self.facts.flops_per_token * self.tokens_trained if self.facts else 0.0
