"""Size ladder: a pure function from a target non-embedding parameter count to a model shape.

The count is the active one (``count_params(...).non_embedding_active``): for a dense model
every non-embedding parameter, for a MoE model what one token passes through (router, top_k
routed experts, shared experts), so that a dense and a MoE model of one size cost the same
compute per token (C = 6 N_active D) and differ in total parameters.

Rule (documented once, tested):

1. Widths: d_model from 16 to 8192, in steps of 4 below 256 and of 8 above. Its head count is
   the one whose head_dim is closest (in log) to a preferred head_dim that grows slowly with
   width - 16 below d_model 128, 32 below 512, 64 from 512 on - among head counts that keep
   head_dim within a factor 2 of it and a multiple of 4 (of 8 from d_model 256 on: GPU kernel
   friendly), and that keep the base's attention kind: MHA stays MHA, MQA stays MQA (one KV
   head, >= 2 query heads), GQA keeps its query-heads-per-KV-head group (>= 2 KV heads). Widths
   with no such head count are skipped.
2. Depths: n_layers from 1 to 96 with the aspect ratio d_model / n_layers inside
   [ASPECT / 4, 4 * ASPECT] = [8, 128]; Kaplan et al. 2020 (fig. 5) found loss within a few
   percent over such a range at fixed N.
3. Every candidate is counted exactly (the ``count_params`` arithmetic: norms, biases, SwiGLU
   width, KV heads all included). Among candidates within ``TOLERANCE`` = 2% of the target,
   take the aspect ratio closest (in log) to ``ASPECT`` = 32; ties go to the nearer count. If
   none is within 2%, take the nearest count (the grid is coarse for tiny models); more than
   50% away (outside the ladder's range) raises ValueError.

Error bound of the achieved non-embedding N against the target (measured and tested over
GELU/SwiGLU x bias x pre/post): for MHA, MQA and GQA with 2 query heads per KV head, <= 2% for
targets in [1e7, 1e8], <= 3% in [1e6, 1e7], <= 8% in [2e5, 1e6], <= 12% in [5e4, 2e5]. GQA with
4 query heads per KV head needs >= 8 query heads, so its grid is coarser: <= 2%, 6%, 12% on
the first three ranges (about 40% near 5e4). Scaling fits use the exact N from
``count_params``, never the target. ``size_ladder`` gives distinct shapes at 5 sizes per decade
over [5e4, 1e8].

Only ``n_layers``, ``d_model``, ``n_heads`` and ``n_kv_heads`` change; every other field of the
base config (family, norm, positions, MLP, bias, vocabulary, ...) is kept. ``d_ff`` must be None
so the MLP width follows d_model.

Families: the same rules, with N the family's exact non-embedding count (``count_params``: the
MLM head's transform for ``encoder``; both stacks and cross-attention for ``encoder_decoder``).
An encoder-decoder's ``n_layers`` is the depth of each stack (``n_encoder_layers`` and
``n_decoder_layers`` must be None), and the aspect ratio is d_model over that depth. Measured
over the same grid: ``encoder`` within 10%, 8%, 3%, 2% on the four ranges above;
``encoder_decoder`` (one more layer adds a block to each stack, so a coarser grid) within 16%,
8%, 4%, 2%.

MoE (``mlp: moe``): N is the active count, and a layer adds top_k (+ shared) experts' worth,
so the grid is coarser: measured within 20%, 8%, 5%, 2% on the four ranges (8 experts top-2
with one shared, 4 top-1 every 2nd layer, 4 top-2 GELU every 3rd layer). With ``moe_every`` = k
the shape has at least k layers.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.accounting import count_params
from models.config import ModelConfig

ASPECT = 32.0  # preferred d_model / n_layers
ASPECT_BAND = 4.0  # allowed aspect ratios: [ASPECT / 4, ASPECT * 4] = [8, 128]
TOLERANCE = 0.02  # prefer shapes within 2% of the target N
MAX_LAYERS = 96
MIN_D_MODEL, SMALL_D_MODEL, MAX_D_MODEL = 16, 256, 8192  # width step 4 below 256, then 8


@dataclass(frozen=True)
class Shape:
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int


@dataclass(frozen=True)
class Rung:
    target: float  # requested non-embedding params
    n_params: int  # achieved non-embedding params (exact)
    shape: Shape


def head_dim_multiple(d_model: int) -> int:
    return 4 if d_model < SMALL_D_MODEL else 8


def preferred_head_dim(d_model: int) -> int:
    return 16 if d_model < 128 else 32 if d_model < 512 else 64


def _heads_for_width(d_model: int, base: ModelConfig) -> tuple[int, int] | None:
    """(n_heads, n_kv_heads) for d_model under rule 1, or None if no head count fits."""
    mha, mqa = base.kv_heads == base.n_heads, base.kv_heads == 1 and base.n_heads > 1
    group = 1 if mha or mqa else base.n_heads // base.kv_heads
    # keep the signature: MQA needs > 1 query head (else it is MHA), GQA >= 2 KV heads (else MQA)
    min_heads = 2 if mqa else group if mha else 2 * group
    want = preferred_head_dim(d_model)
    options = [
        h
        for h in range(group, d_model // 4 + 1, group)
        if h >= min_heads
        and d_model % h == 0
        and (d_model // h) % head_dim_multiple(d_model) == 0
        and want / 2 <= d_model // h <= 2 * want
    ]
    if not options:
        return None
    n_heads = min(options, key=lambda h: (abs(math.log(d_model / h / want)), h))
    return n_heads, (n_heads if mha else 1 if mqa else n_heads // group)


@functools.cache
def _candidates(
    base: ModelConfig, granularity: int = 1
) -> tuple[tuple[int, ...], tuple[Shape, ...]]:
    """All (non-embedding N, shape) pairs of rules 1-2, sorted by N. ``base`` is normalised
    by the caller so that configs differing only in shape share one cache entry. A MoE
    ``granularity`` G > 1 keeps only the widths whose MLP width G divides (expert width
    ffn_dim / G), each counted with its G."""
    rows = []
    min_layers = _min_layers(base)
    widths = [*range(MIN_D_MODEL, SMALL_D_MODEL, 4), *range(SMALL_D_MODEL, MAX_D_MODEL + 1, 8)]
    for d in widths:
        heads = _heads_for_width(d, base)
        if heads is None:
            continue
        width = dataclasses.replace(
            base, n_layers=min_layers, d_model=d, n_heads=heads[0], n_kv_heads=heads[1]
        )
        if granularity != 1:
            if width.ffn_dim % granularity:
                continue
            width = dataclasses.replace(width, moe_granularity=granularity)
        count = _layer_count(width)
        lo = max(min_layers, math.ceil(d / (ASPECT * ASPECT_BAND)))
        hi = min(MAX_LAYERS, math.floor(d / (ASPECT / ASPECT_BAND)))
        for n_layers in range(lo, hi + 1):
            rows.append((count(n_layers), Shape(n_layers, d, *heads)))
    rows.sort(key=lambda r: (r[0], r[1].n_layers))
    return tuple(r[0] for r in rows), tuple(r[1] for r in rows)


def _min_layers(base: ModelConfig) -> int:
    """The fewest layers of a shape: one, or ``moe_every`` so that a MoE model has a MoE layer."""
    return base.moe_every if base.mlp == "moe" else 1


def _active(cfg: ModelConfig, **changes) -> int:
    return count_params(dataclasses.replace(cfg, **changes)).non_embedding_active


def _layer_count(width: ModelConfig):
    """N(n_layers) at ``width``'s shape, exact. N is affine in n_layers for every family (an
    encoder-decoder's stacks both follow n_layers here): fixed + L * per_layer, from the exact
    counts at 1 and 2 layers. A MoE model with ``moe_every`` = k > 1 alternates: L // k MoE
    layers and the rest dense, each kind counted from its own exact difference."""
    k = width.moe_every if width.mlp == "moe" else 1
    one, two = _active(width, n_layers=1, moe_every=1), _active(width, n_layers=2, moe_every=1)
    per_layer, fixed = two - one, 2 * one - two
    dense = _active(width, n_layers=2, moe_every=2) - fixed - per_layer if k > 1 else per_layer
    return lambda n_layers: fixed + (n_layers // k) * per_layer + (n_layers - n_layers // k) * dense


def _candidates_for(
    base: ModelConfig, granularity: int | None = None
) -> tuple[tuple[int, ...], tuple[Shape, ...]]:
    if base.d_ff is not None:
        raise ValueError(
            f"d_ff must be null when size is set (got {base.d_ff}): the ladder scales the MLP "
            "width with d_model"
        )
    for name in ("n_encoder_layers", "n_decoder_layers"):
        if getattr(base, name) is not None:
            raise ValueError(
                f"{name} must be null when size is set (got {getattr(base, name)}): the ladder "
                "gives both stacks n_layers blocks"
            )
    # only the attention kind of the base shape matters: normalise the rest for the cache
    kind = base.attention_kind
    if kind == "mha":
        n_heads, n_kv = 1, None
    elif kind == "mqa":
        n_heads, n_kv = 2, 1
    else:
        n_heads, n_kv = 2 * (base.n_heads // base.kv_heads), 2
    norm = dataclasses.replace(
        base,
        n_layers=_min_layers(base),
        d_model=8 * n_heads,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        moe_granularity=1,  # G is applied per width (it must divide that width's MLP)
    )
    g = base.moe_granularity if granularity is None else granularity
    counts, shapes = _candidates(norm, g)
    if not counts:
        raise ValueError(
            f"moe_granularity ({g}) divides the MLP width of no ladder shape; use 1, 2 or a "
            "divisor of the widths the ladder gives"
        )
    return counts, shapes


def _aspect_error(shape: Shape) -> float:
    return abs(math.log(shape.d_model / shape.n_layers / ASPECT))


def _choose(target: float, counts: tuple[int, ...], shapes: tuple[Shape, ...]) -> int:
    """Index of the chosen candidate (rule 3)."""
    lo = bisect.bisect_left(counts, target * (1 - TOLERANCE))
    hi = bisect.bisect_right(counts, target * (1 + TOLERANCE))
    if lo < hi:
        return min(range(lo, hi), key=lambda i: (_aspect_error(shapes[i]), abs(counts[i] - target)))
    i = bisect.bisect_left(counts, target)
    near = [j for j in (i - 1, i) if 0 <= j < len(counts)]
    best = min(near, key=lambda j: abs(math.log(counts[j] / target)))
    if abs(counts[best] / target - 1) > 0.5:
        raise ValueError(
            f"size {target:.3g} is outside the ladder's range: non-embedding params between "
            f"{counts[0]:.3g} and {counts[-1]:.3g} for this architecture"
        )
    return best


def _check_size(size: float) -> None:
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0:
        raise ValueError(f"size must be a positive number of non-embedding params, got {size!r}")


def shape_for_size(size: float, base: ModelConfig) -> Shape:
    """The ladder's shape for a target non-embedding parameter count (see module docstring)."""
    _check_size(size)
    return _shape(float(size), _candidates_for(base))


def _shape(size: float, candidates: tuple[tuple[int, ...], tuple[Shape, ...]]) -> Shape:
    counts, shapes = candidates
    return shapes[_choose(size, counts, shapes)]


def apply_shape(base: ModelConfig, shape: Shape) -> ModelConfig:
    n_kv = (
        None if base.n_kv_heads is None and shape.n_kv_heads == shape.n_heads else shape.n_kv_heads
    )
    return dataclasses.replace(
        base, n_layers=shape.n_layers, d_model=shape.d_model, n_heads=shape.n_heads, n_kv_heads=n_kv
    )


def model_config(d: Mapping[str, Any]) -> ModelConfig:
    """The config a mapping (e.g. a resolved Hydra ``model`` group) describes, with ``size``
    (a number, or None) applied: a size asks the ladder for ``n_layers``, ``d_model``,
    ``n_heads`` and ``n_kv_heads``; the given shape fields then only supply the attention
    grouping (MHA / GQA ratio / MQA) to keep. Raises ``ValueError`` naming the field."""
    d = dict(d)
    size = d.pop("size", None)
    if size is None:
        return ModelConfig.from_dict(d)
    _check_size(size)
    # A MoE granularity G must divide the MLP width of the shape the ladder chooses, not the
    # preset's own (G = 2 does not divide llama's 341-wide MLP at d_model 128, and the ladder
    # replaces that width): the base is checked at G = 1, the ladder offers only widths G
    # divides, and G is set on the chosen shape.
    g = d.get("moe_granularity", 1)
    staged = d.get("mlp") == "moe" and isinstance(g, int) and not isinstance(g, bool) and g > 1
    cfg = ModelConfig.from_dict({**d, "moe_granularity": 1} if staged else d)
    return config_for_size(float(size), cfg, granularity=g if staged else None)


def config_for_size(size: float, base: ModelConfig, granularity: int | None = None) -> ModelConfig:
    """``base`` with n_layers, d_model, n_heads, n_kv_heads chosen by the ladder for ``size``
    (and, given, the MoE ``granularity`` set on that shape, the ladder's widths those it
    divides)."""
    if granularity is None:
        return apply_shape(base, shape_for_size(size, base))
    shape = _shape(size, _candidates_for(base, granularity))
    return dataclasses.replace(apply_shape(base, shape), moe_granularity=granularity)


def size_ladder(lo: float, hi: float, base: ModelConfig, per_decade: int = 5) -> list[Rung]:
    """Distinct ladder shapes for log-spaced targets from ``lo`` to ``hi`` (inclusive),
    ``per_decade`` targets per factor of 10, each with its exact non-embedding count."""
    _check_size(lo)
    _check_size(hi)
    if lo > hi:
        raise ValueError(f"size range needs lo <= hi, got lo={lo!r}, hi={hi!r}")
    if isinstance(per_decade, bool) or not isinstance(per_decade, int) or per_decade <= 0:
        raise ValueError(f"per_decade must be a positive integer, got {per_decade!r}")
    counts, shapes = _candidates_for(base)
    n_steps = round(math.log10(hi / lo) * per_decade)
    targets = [lo * (hi / lo) ** (i / n_steps) for i in range(n_steps + 1)] if n_steps else [lo]
    rungs: list[Rung] = []
    for target in targets:
        shape = shapes[_choose(target, counts, shapes)]
        if rungs and rungs[-1].shape == shape:
            continue
        rungs.append(Rung(target, _active(apply_shape(base, shape)), shape))
    return rungs
