"""The encoder-decoder and encoder (masked LM) families: every axis combination builds, trains
a step and is counted exactly (parameters against the built model, FLOPs against
FlopCounterMode); bidirectional encoders, causal decoders, cross-attention over the whole
source, padding, and cached decoding equal to the full forward."""

from __future__ import annotations

import dataclasses
import itertools
import typing

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from models import (
    EncoderDecoderLM,
    MaskedLM,
    ModelConfig,
    build_model,
    count_params,
    flops_per_sequence,
    flops_per_token,
)
from models.lm import FAMILIES
from models.registry import CROSS_BLOCKS

V = 61
TINY = dict(vocab_size=V, max_seq_len=16, n_layers=2, d_model=32, n_heads=4)
AXES = {
    "norm_position": ["pre", "post"],
    "norm": ["layernorm", "rmsnorm"],
    "pos_encoding": ["sinusoidal", "learned", "rope", "alibi", "none"],
    "n_kv_heads": [None, 2, 1],  # MHA, GQA, MQA
    "mlp": ["gelu", "swiglu"],
}
COMBOS = [dict(zip(AXES, values)) for values in itertools.product(*AXES.values())]
POSITIONS = AXES["pos_encoding"]


def tiny(family: str, **overrides) -> ModelConfig:
    return ModelConfig(**{**TINY, "family": family, **overrides})


def _run(model, cfg: ModelConfig, B: int, S: int, T: int):
    """One training forward (with targets) for either family; returns (logits, loss)."""
    if cfg.family == "encoder":
        idx = torch.randint(0, V, (B, S))
        return model(idx, idx)
    src, tgt = torch.randint(0, V, (B, S)), torch.randint(0, V, (B, T))
    return model(src, tgt, tgt)


@pytest.mark.parametrize("family", ["encoder_decoder", "encoder"])
@pytest.mark.parametrize("axes", COMBOS, ids=lambda a: "-".join(map(str, a.values())))
def test_every_combination_builds_trains_and_counts(family, axes):
    torch.manual_seed(0)
    flip = COMBOS.index(axes) % 2 == 0  # tying and bias meet every other axis value
    layers = dict(n_encoder_layers=1, n_decoder_layers=2) if family == "encoder_decoder" else {}
    cfg = tiny(family, **axes, **layers, tie_embeddings=flip, bias=not flip)
    model = build_model(cfg)
    assert isinstance(model, EncoderDecoderLM if family == "encoder_decoder" else MaskedLM)
    logits, loss = _run(model, cfg, B=2, S=cfg.max_seq_len, T=cfg.max_seq_len - 5)
    T = cfg.max_seq_len if family == "encoder" else cfg.max_seq_len - 5
    assert logits.shape == (2, T, V) and torch.isfinite(loss)
    loss.backward()
    params = list(model.parameters())
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)
    pc = count_params(cfg)
    assert pc.total == sum(p.numel() for p in params)
    assert pc.total == pc.non_embedding + pc.embedding


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(n_kv_heads=2, mlp="swiglu", pos_encoding="rope", tie_embeddings=False, bias=False),
        dict(n_kv_heads=1, pos_encoding="alibi", norm_position="post", norm="rmsnorm"),
    ],
    ids=["mha-gelu", "gqa-swiglu-rope", "mqa-alibi-post"],
)
@pytest.mark.parametrize("family", ["encoder_decoder", "encoder"])
def test_exact_flops_match_flop_counter(family, overrides):
    """S != T and n_encoder_layers != n_decoder_layers, so every term's length is pinned."""
    torch.manual_seed(0)
    layers = dict(n_encoder_layers=3, n_decoder_layers=2) if family == "encoder_decoder" else {}
    cfg = tiny(family, **overrides, **layers, d_model=64, vocab_size=500, max_seq_len=24)
    model = build_model(cfg)
    B, S, T = 2, 24, 11
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        if family == "encoder":
            idx = torch.randint(0, 500, (B, S))
            _, loss = model(idx, idx)
        else:
            _, loss = model(torch.randint(0, 500, (B, S)), *[torch.randint(0, 500, (B, T))] * 2)
        loss.backward()
    per_sequence = (
        flops_per_sequence(cfg, S) if family == "encoder" else flops_per_sequence(cfg, T, src_len=S)
    )
    assert per_sequence.exact * B == counter.get_total_flops()
    parts = [v for k, v in vars(per_sequence).items() if k not in ("six_n", "exact", "forward")]
    assert per_sequence.forward == sum(parts) and per_sequence.exact == 3 * per_sequence.forward


def test_flop_terms_scale_with_the_lengths_they_run_over():
    cfg = tiny("encoder_decoder", n_encoder_layers=3, n_decoder_layers=2)
    a, b = flops_per_sequence(cfg, 8, src_len=16), flops_per_sequence(cfg, 8, src_len=32)
    assert b.cross_kv == 2 * a.cross_kv and b.cross_scores == 2 * a.cross_scores  # over S
    assert b.cross_q == a.cross_q and b.lm_head == a.lm_head  # over T only
    pc = count_params(cfg)
    assert a.six_n == 6 * (pc.encoder * 16 + pc.decoder * 8)
    assert pc.encoder + pc.decoder == pc.non_embedding
    assert pc.cross_attention == pc.attention // 5 * 2  # 5 blocks, 2 with cross-attention
    enc = tiny("encoder")
    assert flops_per_sequence(enc, 16).exact == 16 * flops_per_token(enc, 16).exact
    with pytest.raises(ValueError, match="flops_per_sequence"):
        flops_per_token(cfg, 16)
    with pytest.raises(ValueError, match="src_len"):
        flops_per_sequence(enc, 16, src_len=8)


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("family", ["encoder_decoder", "encoder"])
def test_encoder_is_bidirectional(family, pos):
    """Changing the last source token changes the encoder output at the first position."""
    torch.manual_seed(0)
    model = build_model(tiny(family, pos_encoding=pos, n_kv_heads=2)).eval()
    encode = model.encode if family == "encoder_decoder" else model.hidden
    idx = torch.randint(0, V, (1, 12))
    changed = idx.clone()
    changed[0, -1] = (changed[0, -1] + 1) % V
    assert not torch.allclose(encode(idx)[:, 0], encode(changed)[:, 0])


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_decoder_is_causal_and_cross_attention_sees_the_whole_source(pos, norm_position):
    torch.manual_seed(0)
    cfg = tiny("encoder_decoder", pos_encoding=pos, norm_position=norm_position, n_kv_heads=1)
    model = build_model(cfg).eval()
    src, tgt = torch.randint(0, V, (1, 12)), torch.randint(0, V, (1, 10))
    t = 4
    later = tgt.clone()
    later[0, t + 1 :] = (later[0, t + 1 :] + 1) % V
    a, b = model(src, tgt)[0], model(src, later)[0]
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])
    last_source = src.clone()
    last_source[0, -1] = (last_source[0, -1] + 1) % V
    assert not torch.allclose(a[:, 0], model(last_source, tgt)[0][:, 0])  # first target row


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("family", ["encoder_decoder", "encoder"])
def test_padding_is_masked(family, pos):
    """A right-padded batch row gives the unpadded row's outputs, whatever the pad tokens."""
    torch.manual_seed(0)
    model = build_model(tiny(family, pos_encoding=pos, n_kv_heads=2)).eval()
    real, n_pad = torch.randint(0, V, (1, 9)), 5
    padded = [torch.cat([real, torch.randint(0, V, (1, n_pad))], dim=1) for _ in range(2)]
    mask = torch.cat([torch.ones(1, 9), torch.zeros(1, n_pad)], dim=1).long()
    if family == "encoder":
        ref = model(real)[0]
        outs = [model(p, attention_mask=mask)[0][:, :9] for p in padded]
    else:
        tgt = torch.randint(0, V, (1, 6))
        ref = model(real, tgt)[0]
        outs = [model(p, tgt, src_mask=mask)[0] for p in padded]
    for out in outs:
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pos", POSITIONS)
def test_kv_cache_decoding_equals_full_forward(pos):
    torch.manual_seed(0)
    cfg = tiny("encoder_decoder", pos_encoding=pos, n_kv_heads=2, mlp="swiglu")
    model = build_model(cfg).eval()
    src, tgt = torch.randint(0, V, (2, 13)), torch.randint(0, V, (2, 15))
    mask = torch.ones(2, 13, dtype=torch.long)
    mask[1, 9:] = 0
    full, _ = model(src, tgt, src_mask=mask)
    cache = model.new_cache(src, mask)
    chunks = [tgt[:, :5], tgt[:, 5:6], tgt[:, 6:10], tgt[:, 10:11], tgt[:, 11:]]
    cached = torch.cat([model.forward_cached(c, cache) for c in chunks], dim=1)
    assert cache.length == 15 and all(kv is not None for kv in cache.cross)
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-5)


def test_encoder_runs_once_when_generating_and_greedy_equals_uncached():
    torch.manual_seed(0)
    model = build_model(tiny("encoder_decoder", pos_encoding="rope", n_kv_heads=1)).eval()
    calls = []
    model.encoder[0].register_forward_hook(lambda *_: calls.append(1))
    src = torch.randint(0, V, (2, 7))
    out = model.generate(src, start_id=0, max_new_tokens=9, temperature=0)
    assert len(calls) == 1 and out.shape == (2, 10)
    ref = torch.zeros(2, 1, dtype=torch.long)
    for _ in range(9):
        ref = torch.cat([ref, model(src, ref)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_post_ln_decoder_normalises_after_each_of_its_three_sublayers(norm):
    torch.manual_seed(0)
    model = build_model(tiny("encoder_decoder", norm_position="post", norm=norm, d_model=64))
    block = model.decoder[-1]  # its input is already normalised: eps does not matter
    seen = {}
    for name in ("attn_norm", "cross_norm", "mlp_norm"):
        getattr(block, name).register_forward_hook(lambda m, i, o, n=name: seen.update({n: o}))
    model.eval()(torch.randint(0, V, (2, 9)), torch.randint(0, V, (2, 7)))
    assert set(seen) == {"attn_norm", "cross_norm", "mlp_norm"}
    for out in seen.values():
        second_moment = out.pow(2).mean(-1) if norm == "rmsnorm" else out.var(-1, unbiased=False)
        torch.testing.assert_close(second_moment, torch.ones(2, 7), atol=1e-3, rtol=0)
    assert isinstance(model.decoder_norm, torch.nn.Identity)


def test_mlm_head_is_berts_transform_and_tied_decoder():
    torch.manual_seed(0)
    cfg = tiny("encoder", norm_position="post")
    model = build_model(cfg).eval()
    assert model.lm_head.weight is model.tok_emb.weight and model.lm_head.bias.shape == (V,)
    idx = torch.randint(0, V, (2, 8))
    h = model.hidden(idx)
    expected = model.mlm_norm(torch.nn.functional.gelu(model.mlm_transform(h)))
    expected = expected @ model.tok_emb.weight.T + model.lm_head.bias
    torch.testing.assert_close(model(idx)[0], expected)
    labels = torch.full_like(idx, -100)
    labels[0, 3], labels[1, 5] = 7, 11
    logits, loss = model(idx, labels)
    picked = torch.stack([logits[0, 3], logits[1, 5]])
    ref = torch.nn.functional.cross_entropy(picked, torch.tensor([7, 11]))
    torch.testing.assert_close(loss, ref)
    assert count_params(cfg).head == V  # the bias; the tied matrix is the token table


def test_layer_counts_and_defaults():
    cfg = tiny("encoder_decoder", n_layers=3)
    model = build_model(cfg)
    assert (len(model.encoder), len(model.decoder)) == (3, 3)
    split = build_model(dataclasses.replace(cfg, n_encoder_layers=4, n_decoder_layers=1))
    assert (len(split.encoder), len(split.decoder)) == (4, 1)
    assert (cfg.encoder_layers, cfg.decoder_layers) == (3, 3)
    assert (tiny("decoder").encoder_layers, tiny("encoder").decoder_layers) == (0, 0)


def test_arch_names_the_family():
    assert tiny("decoder").arch == "pre-layernorm-learned-mha-gelu"
    assert tiny("encoder").arch == "encoder-pre-layernorm-learned-mha-gelu"
    assert (
        tiny("encoder_decoder", n_kv_heads=1).arch
        == "encoder_decoder-pre-layernorm-learned-mqa-gelu"
    )


def test_family_and_cross_block_registries_cover_the_config_choices():
    hints = typing.get_type_hints(ModelConfig)
    assert set(FAMILIES) == set(typing.get_args(hints["family"]))
    assert set(CROSS_BLOCKS) == set(typing.get_args(hints["norm_position"]))
