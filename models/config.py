"""Typed model configuration: every architecture axis of scaling-lab in one dataclass.

``family`` picks the Transformer family (decoder-only LM, 2017 encoder-decoder, BERT-style
encoder); every other axis applies to each family's stacks alike.

A config is plain data (YAML/JSON friendly). Every field is declared once here, with its type
and default: these defaults are the `model` schema Hydra composes the presets of conf/model/
against (hydra_plugins/scaling_lab_schema), which hold only what differs. String knobs are
``Literal``-typed; the config checks itself in ``__post_init__``, so a bad value fails at
construction with one line naming the field and the allowed values. ``ModelConfig.from_dict`` additionally rejects unknown keys. A ``size`` (a target
non-embedding parameter count) is the size ladder's business: ``models.ladder.model_config``
turns a mapping with ``size`` into a shape, so this module depends on nothing else in models/.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from models.values import int_if_integral

NormPosition = Literal["pre", "post"]
Norm = Literal["layernorm", "rmsnorm"]
PosEncoding = Literal["sinusoidal", "learned", "rope", "alibi", "none"]
Mlp = Literal["gelu", "swiglu", "moe"]
ExpertMlp = Literal["gelu", "swiglu"]
MoeBalance = Literal["aux_loss", "aux_free"]
Family = Literal["decoder", "encoder_decoder", "encoder"]

# Fields the decoder family holds at their defaults (validated). ``to_dict`` leaves them out of
# a decoder config, so its dict (run key, MLflow params) does not depend on them.
FAMILY_FIELDS = ("family", "n_encoder_layers", "n_decoder_layers")

Parametrization = Literal["sp", "mup", "completep"]

# Fields an SP config holds at their defaults (validated). ``to_dict`` leaves them out of an SP
# config, so its dict (run key, MLflow params) does not depend on them.
MUP_FIELDS = ("parametrization", "mup_base_width")
# Fields every config but a CompleteP one holds at their defaults (validated); ``to_dict`` leaves
# them out of SP and muP configs, whose run keys therefore stay what they were.
DEPTH_FIELDS = ("mup_base_depth", "depth_alpha")
# Fields a config with mlp != 'moe' holds at their defaults (validated); ``to_dict`` leaves them
# out of such a config, so dense run keys do not depend on them. Likewise ``qk_norm`` when off.
MOE_FIELDS = (
    "n_experts",
    "top_k",
    "moe_granularity",
    "n_shared_experts",
    "expert_mlp",
    "moe_every",
    "moe_balance",
    "moe_aux_coef",
    "moe_z_coef",
    "moe_bias_rate",
    "moe_norm_topk",
)


@dataclass(frozen=True)
class ModelConfig:
    """A Transformer of one of three families (``family``):

    - ``decoder``: a causal LM (GPT-2, Llama), ``n_layers`` blocks.
    - ``encoder_decoder``: the 2017 model. An encoder stack (bidirectional self-attention, MLP)
      of ``n_encoder_layers`` and a decoder stack (causal self-attention, cross-attention over
      the encoder output, MLP) of ``n_decoder_layers``; both default to ``n_layers``.
    - ``encoder``: a masked LM (BERT): bidirectional self-attention, ``n_layers`` blocks, a norm
      after the embeddings, BERT's MLM head.

    Shape fields may be chosen by the size ladder instead: ``models.ladder.model_config`` with
    ``size`` in the mapping.
    """

    vocab_size: int = 4096  # training overrides this from the tokenizer
    max_seq_len: int = 256  # longest sequence; a hard limit for learned/sinusoidal positions
    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4  # query heads; head_dim = d_model // n_heads
    n_kv_heads: int | None = None  # None = n_heads (MHA); 1 = MQA; a divisor in between = GQA
    d_ff: int | None = None  # MLP hidden width; None = default for `mlp` (see `ffn_dim`)
    norm_position: NormPosition = "pre"  # pre: x + F(LN(x)), final norm; post: LN(x + F(x))
    norm: Norm = "layernorm"  # every block's norm and the final one
    pos_encoding: PosEncoding = "learned"  # how token positions enter the model
    rope_base: float = 10000.0  # RoPE theta; only used with pos_encoding=rope
    mlp: Mlp = "gelu"  # the feed-forward layer; moe: a mixture of experts (models/moe.py)
    tie_embeddings: bool = True  # output head shares the token embedding matrix
    # Multiply token embeddings by sqrt(d_model) (Vaswani et al. 2017, sec. 3.4): with a small
    # init_std this keeps the token signal comparable to the unit-amplitude sinusoidal table.
    scale_embeddings: bool = False
    bias: bool = True  # biases in every Linear and LayerNorm (never in the output head)
    dropout: float = 0.0  # embedding, attention-probability and residual dropout (train only)
    norm_eps: float = 1e-5
    init_std: float = 0.02  # std of normal init; residual output projections / sqrt(2 n_layers)
    family: Family = "decoder"  # decoder-only LM, 2017 encoder-decoder, BERT-style masked LM
    n_encoder_layers: int | None = None  # encoder_decoder only; None = n_layers
    n_decoder_layers: int | None = None  # encoder_decoder only; None = n_layers
    # sp: the standard parametrization above. mup: the maximal update parametrization (Yang et
    # al. 2022, Tensor Programs V) relative to a base model of d_model = mup_base_width, so an
    # lr tuned at the base width transfers across width (see `width_mult` and models/lm.py).
    # completep: muP's width rules plus Dey et al. 2025's depth rules relative to a base model
    # of n_layers = mup_base_depth (residual branches x (L / L0)^-depth_alpha, see `depth_mult`
    # and models/lm.py), so an lr tuned at the base depth and width transfers across both.
    parametrization: Parametrization = "sp"
    mup_base_width: int | None = None  # d_model of the muP base model; mup, completep (required)
    mup_base_depth: int | None = None  # n_layers of the base model; completep only (required)
    # CompleteP's residual exponent: 1 = CompleteP, 0.5 = depth-muP; in [0.5, 1]; completep only
    depth_alpha: float = 1.0
    # RMSNorm on each query and key head (over head_dim, one gain shared by the heads) before
    # positions are applied, in self- and cross-attention (Qwen3 / Gemma 3 form).
    qk_norm: bool = False
    # Mixture of experts (mlp='moe'; decoder family, SP only). Each MoE layer: a router
    # (d_model -> n_experts, no bias), softmax over all experts, then the top_k experts per
    # token; every token reaches its top_k experts (dropless: no capacity, nothing dropped).
    # Experts are `expert_mlp` MLPs of width ffn_dim / moe_granularity (Krajewski et al. 2024's
    # granularity G: G = 1 is an expert as wide as the dense MLP); no biases in the MoE layer.
    n_experts: int = 8  # routed experts per MoE layer
    top_k: int = 2  # routed experts per token
    moe_granularity: int = 1  # G: expert width = ffn_dim / G (must divide)
    n_shared_experts: int = 0  # always-active experts of the same width (DeepSeek), fused as one
    expert_mlp: ExpertMlp = "swiglu"  # the experts' MLP, also the dense layers' of a MoE model
    moe_every: int = 1  # layer i is MoE iff (i + 1) % moe_every == 0 (others dense); 1 = all
    # aux_loss: Switch/GShard balance loss x moe_aux_coef. aux_free: DeepSeek-V3's per-expert
    # selection bias, moved by moe_bias_rate x sign(mean load - load) after each step.
    moe_balance: MoeBalance = "aux_loss"
    moe_aux_coef: float = 0.01  # weight of the balance loss (aux_free may add one too)
    moe_z_coef: float = 0.001  # weight of the router z-loss (ST-MoE); 0 = off
    moe_bias_rate: float = 0.001  # aux_free's bias update speed (gamma); aux_free only
    moe_norm_topk: bool = False  # renormalise the top_k gate weights to sum to 1 (Mixtral)

    def __post_init__(self) -> None:
        self._check_types()
        self._check_heads()
        self._check_family()
        self._check_moe()
        if self.pos_encoding == "rope" and self.head_dim % 2 != 0:
            raise ValueError(
                f"head_dim = d_model / n_heads = {self.head_dim} must be even with "
                "pos_encoding='rope' (rotary pairs dimensions); change d_model or n_heads"
            )

    # ----- validation (one line naming the field and what it allows) --------------------------
    def _check_types(self) -> None:
        for name in _INT_FIELDS:
            v = getattr(self, name)
            if v is None and name in _OPTIONAL_INT_FIELDS:
                continue
            low = 0 if name in _NONNEGATIVE_INT_FIELDS else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                allowed = ("an integer >= 0" if low == 0 else "a positive integer") + (
                    " or null" if name in _OPTIONAL_INT_FIELDS else ""
                )
                raise ValueError(f"{name} must be {allowed}, got {v!r}")
        for name, choices in _choices().items():
            v = getattr(self, name)
            if v not in choices:
                allowed = ", ".join(repr(x) for x in choices)
                raise ValueError(f"{name} must be one of {allowed}; got {v!r}")
        for name in ("tie_embeddings", "bias", "scale_embeddings", "qk_norm", "moe_norm_topk"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("rope_base", "norm_eps", "init_std"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        for name in ("moe_aux_coef", "moe_z_coef", "moe_bias_rate"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {v!r}")
        if isinstance(self.depth_alpha, bool) or not isinstance(self.depth_alpha, (int, float)):
            raise ValueError(f"depth_alpha must be a number in [0.5, 1], got {self.depth_alpha!r}")
        if not 0.5 <= self.depth_alpha <= 1.0:
            raise ValueError(f"depth_alpha must be in [0.5, 1], got {self.depth_alpha!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)):
            raise ValueError(f"dropout must be a number in [0, 1), got {self.dropout!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")

    def _check_heads(self) -> None:
        if self.d_model % self.n_heads != 0:
            divisors = [h for h in range(1, self.d_model + 1) if self.d_model % h == 0]
            raise ValueError(
                f"n_heads ({self.n_heads}) must divide d_model ({self.d_model}); allowed n_heads: "
                f"{', '.join(map(str, divisors[:12]))}{' ...' if len(divisors) > 12 else ''}"
            )
        if self.n_heads % self.kv_heads != 0:
            divisors = [k for k in range(1, self.n_heads + 1) if self.n_heads % k == 0]
            raise ValueError(
                f"n_kv_heads ({self.kv_heads}) must divide n_heads ({self.n_heads}); allowed "
                f"n_kv_heads: {', '.join(map(str, divisors))}"
            )

    def _check_family(self) -> None:
        """Fields that apply to one family or parametrization only."""
        if self.family != "encoder_decoder":
            for name in ("n_encoder_layers", "n_decoder_layers"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name} applies to family='encoder_decoder' only "
                        f"(family={self.family!r}); use n_layers or null"
                    )
        if self.parametrization != "sp":
            self._check_mup()
        elif self.mup_base_width is not None:
            raise ValueError(
                f"mup_base_width applies to parametrization='mup' or 'completep' only, got "
                f"{self.mup_base_width!r} with parametrization='sp'; set it to null"
            )
        if self.parametrization != "completep":
            if self.mup_base_depth is not None:
                raise ValueError(
                    f"mup_base_depth applies to parametrization='completep' only, got "
                    f"{self.mup_base_depth!r} with parametrization={self.parametrization!r}; "
                    "set it to null"
                )
            if self.depth_alpha != 1.0:
                raise ValueError(
                    f"depth_alpha applies to parametrization='completep' only, got "
                    f"{self.depth_alpha!r} with parametrization={self.parametrization!r}; "
                    "leave it at 1.0"
                )

    def _check_moe(self) -> None:
        """MoE fields: only with mlp='moe', and then consistent with each other."""
        if self.mlp != "moe":
            for f in dataclasses.fields(self):
                if f.name in MOE_FIELDS and getattr(self, f.name) != f.default:
                    raise ValueError(
                        f"{f.name} applies to mlp='moe' only (mlp={self.mlp!r}); leave it at "
                        f"{f.default!r}"
                    )
            return
        if self.family != "decoder":
            raise ValueError(
                f"mlp='moe' is implemented for family='decoder' only, got family={self.family!r}"
            )
        if self.parametrization != "sp":
            raise ValueError(
                f"mlp='moe' is implemented for parametrization='sp' only, got "
                f"{self.parametrization!r} (muP's hidden-weight rules do not cover experts)"
            )
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k ({self.top_k}) must be at most n_experts ({self.n_experts})")
        if self.ffn_dim % self.moe_granularity != 0:
            divisors = [g for g in range(1, self.ffn_dim + 1) if self.ffn_dim % g == 0]
            raise ValueError(
                f"moe_granularity ({self.moe_granularity}) must divide the MLP width ffn_dim "
                f"({self.ffn_dim}); allowed moe_granularity: {', '.join(map(str, divisors[:12]))}"
                f"{' ...' if len(divisors) > 12 else ''}"
            )
        if self.moe_every > self.n_layers:
            raise ValueError(
                f"moe_every ({self.moe_every}) must be at most n_layers ({self.n_layers}), "
                "else no layer is MoE"
            )
        if self.moe_balance != "aux_free" and self.moe_bias_rate != 0.001:
            raise ValueError(
                f"moe_bias_rate applies to moe_balance='aux_free' only, got "
                f"{self.moe_bias_rate!r} with moe_balance={self.moe_balance!r}; leave it at 0.001"
            )

    def _check_mup(self) -> None:
        """muP and CompleteP: the family, norm placement and base shapes they need."""
        p = self.parametrization
        if self.family != "decoder":
            raise ValueError(
                f"parametrization={p!r} is implemented for family='decoder' only, got "
                f"family={self.family!r}; use parametrization='sp'"
            )
        if self.mup_base_width is None:
            raise ValueError(
                f"mup_base_width must be set with parametrization={p!r} (the d_model of the "
                "base model the lr was tuned on)"
            )
        if p == "completep" and self.mup_base_depth is None:
            raise ValueError(
                "mup_base_depth must be set with parametrization='completep' (the n_layers of "
                "the base model the lr was tuned on)"
            )
        if p == "completep" and self.norm_position != "pre":
            raise ValueError(
                "parametrization='completep' needs norm_position='pre' (its depth rules are "
                "derived for x + F(LN(x)); Post-LN normalises the scaled branch away)"
            )

    # ----- derived quantities ---------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """Resolved number of key/value heads (``n_kv_heads`` with None meaning ``n_heads``)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def ffn_dim(self) -> int:
        """Resolved MLP hidden width (``d_ff`` or the default for the MLP type)."""
        if self.d_ff is not None:
            return self.d_ff
        mlp = self.expert_mlp if self.mlp == "moe" else self.mlp
        return default_d_ff(self.d_model, mlp, self.bias)

    @property
    def expert_d_ff(self) -> int:
        """Hidden width of one expert (routed or shared): ffn_dim / moe_granularity."""
        return self.ffn_dim // self.moe_granularity

    def is_moe_layer(self, layer_idx: int) -> bool:
        """Whether block ``layer_idx`` (0-based) has a MoE MLP (Qwen2-MoE's decoder_sparse_step)."""
        return self.mlp == "moe" and (layer_idx + 1) % self.moe_every == 0

    def layer_mlp(self, layer_idx: int) -> str:
        """The MLP kind of block ``layer_idx``: ``moe``, or the dense ``gelu`` / ``swiglu``."""
        if self.mlp != "moe":
            return self.mlp
        return "moe" if self.is_moe_layer(layer_idx) else self.expert_mlp

    @property
    def n_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.n_layers))

    @property
    def attention_kind(self) -> str:
        """``mha``, ``mqa`` or ``gqa{q}`` where q = query heads per KV head."""
        if self.kv_heads == self.n_heads:
            return "mha"
        if self.kv_heads == 1:
            return "mqa"
        return f"gqa{self.n_heads // self.kv_heads}"

    @property
    def width_mult(self) -> float:
        """d_model / mup_base_width under muP (every hidden fan-in scales with it); 1 under SP."""
        if self.parametrization == "sp":
            return 1.0
        return self.d_model / self.mup_base_width

    @property
    def depth_mult(self) -> float:
        """n_layers / mup_base_depth under CompleteP (m_L of Dey et al. 2025); 1 otherwise."""
        if self.parametrization != "completep":
            return 1.0
        return self.n_layers / self.mup_base_depth

    @property
    def branch_mult(self) -> float:
        """The multiplier of every residual branch, m_L^-depth_alpha (exactly 1 at the base
        depth and under SP and muP)."""
        return self.depth_mult**-self.depth_alpha

    @property
    def encoder_layers(self) -> int:
        """Blocks in the encoder stack (0 for the decoder family)."""
        if self.family == "decoder":
            return 0
        if self.family == "encoder":
            return self.n_layers
        return self.n_layers if self.n_encoder_layers is None else self.n_encoder_layers

    @property
    def decoder_layers(self) -> int:
        """Blocks in the (causal) decoder stack (0 for the encoder family)."""
        if self.family == "encoder":
            return 0
        if self.family == "decoder":
            return self.n_layers
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def arch(self) -> str:
        """Size-independent architecture signature, e.g. ``pre-rmsnorm-rope-gqa2-swiglu``;
        other families than the decoder lead with theirs (``encoder_decoder-post-...``)."""
        parts = [self.norm_position, self.norm, self.pos_encoding, self.attention_kind, self.mlp]
        if self.mlp == "moe":  # e.g. moe8x2 (8 experts, top 2), +g4 +s1 +every2 where set
            parts[-1] = f"moe{self.n_experts}x{self.top_k}" + "".join(
                f"{tag}{v}"
                for tag, v, default in [
                    ("g", self.moe_granularity, 1),
                    ("s", self.n_shared_experts, 0),
                    ("every", self.moe_every, 1),
                ]
                if v != default
            )
        if self.qk_norm:
            parts.append("qknorm")
        if self.family != "decoder":
            parts.insert(0, self.family)
        return "-".join(parts)

    # ----- (de)serialisation ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every field; a decoder leaves out ``FAMILY_FIELDS``, an SP config ``MUP_FIELDS``
        and all but a CompleteP config ``DEPTH_FIELDS`` (they then hold their defaults)."""
        d = dataclasses.asdict(self)
        omit = (
            (FAMILY_FIELDS if self.family == "decoder" else ())
            + (MUP_FIELDS if self.parametrization == "sp" else ())
            + (DEPTH_FIELDS if self.parametrization != "completep" else ())
            + (MOE_FIELDS if self.mlp != "moe" else ())
            + (() if self.qk_norm else ("qk_norm",))
        )
        for name in omit:
            del d[name]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelConfig:
        """Build from a plain mapping of the fields. Unknown keys raise ``ValueError`` naming
        the key. A ``size`` of None (what a Hydra model group carries when no size is asked
        for) is ignored; a number is refused here: ``models.ladder.model_config`` applies it."""
        d = dict(d)
        if d.pop("size", None) is not None:
            raise ValueError(
                "size: a target size is applied by the size ladder; build the config with "
                "models.ladder.model_config"
            )
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ValueError(
                f"unknown model config key {unknown[0]!r}; allowed keys: {', '.join(names + ['size'])}"
            )
        for name in _INT_FIELDS:  # `1e3` from YAML/CLI is a float: accept integral floats
            if name in d:
                d[name] = int_if_integral(d[name])
        alpha = d.get("depth_alpha")
        if isinstance(alpha, int) and not isinstance(alpha, bool):  # `1` and `1.0`: one run key
            d["depth_alpha"] = float(alpha)
        return cls(**d)


def default_d_ff(d_model: int, mlp: str, bias: bool) -> int:
    """Default MLP width: 4*d for GELU; for SwiGLU the width giving the GELU twin's param count.

    GELU MLP params: 2*d*4d (+ 4d + d biases). SwiGLU has three matrices, 3*d*f (+ 2f + d), so
    f = (8d^2 + 4d*b) / (3d + 2b) with b = 1 if bias else 0, i.e. about 2/3 * 4d. We round to
    a multiple of 8 (friendlier matmul shapes) when d_model >= 192, where that rounding moves the
    MLP param count by at most 1.5/d < 0.8%; below that we round to the nearest integer.
    """
    if mlp == "gelu":
        return 4 * d_model
    if mlp == "moe":
        raise ValueError("default_d_ff: pass the experts' MLP kind (expert_mlp), not 'moe'")
    b = 1 if bias else 0
    exact = (8 * d_model * d_model + 4 * d_model * b) / (3 * d_model + 2 * b)
    multiple = 8 if d_model >= 192 else 1
    return max(multiple, multiple * round(exact / multiple))


_INT_FIELDS = (
    "vocab_size",
    "max_seq_len",
    "n_layers",
    "d_model",
    "n_heads",
    "n_kv_heads",
    "d_ff",
    "n_encoder_layers",
    "n_decoder_layers",
    "mup_base_width",
    "mup_base_depth",
    "n_experts",
    "top_k",
    "moe_granularity",
    "n_shared_experts",
    "moe_every",
)
_NONNEGATIVE_INT_FIELDS = ("n_shared_experts",)
_OPTIONAL_INT_FIELDS = (
    "n_kv_heads",
    "d_ff",
    "n_encoder_layers",
    "n_decoder_layers",
    "mup_base_width",
    "mup_base_depth",
)


@functools.cache
def _choices() -> dict[str, tuple[str, ...]]:
    """Field -> allowed values, for every ``Literal``-typed field."""
    hints = typing.get_type_hints(ModelConfig)
    return {
        f.name: typing.get_args(hints[f.name])
        for f in dataclasses.fields(ModelConfig)
        if typing.get_origin(hints[f.name]) is Literal
    }
