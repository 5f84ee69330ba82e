"""Properties that follow from the definitions: FLOP accounting vs FlopCounterMode, sinusoidal
formula, RoPE relativity, causality, GQA grouping, Post-LN normalisation, KV-cache decoding."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from models import ModelConfig, build_model, count_params, flops_per_token
from models.positions import apply_rope

TINY = dict(vocab_size=61, max_seq_len=24, n_layers=2, d_model=32, n_heads=4)


def tiny(**overrides) -> ModelConfig:
    return ModelConfig(**{**TINY, **overrides})


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),  # MHA, GELU
        dict(n_kv_heads=2, mlp="swiglu", pos_encoding="rope", tie_embeddings=False),  # GQA
        dict(n_kv_heads=1, mlp="swiglu", bias=False),  # MQA
        dict(n_kv_heads=1, pos_encoding="alibi", norm_position="post"),  # float-bias path
    ],
    ids=["mha-gelu", "gqa-swiglu", "mqa-swiglu", "mqa-alibi"],
)
@pytest.mark.parametrize("return_logits", [True, False], ids=["logits", "chunked-loss"])
def test_exact_flops_match_flop_counter(overrides, return_logits):
    torch.manual_seed(0)
    cfg = tiny(**overrides, d_model=64, vocab_size=500)
    B, T = 2, 24
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (B, T))
    # The math backend is what our count describes (full T x T); CPU's fused kernel is invisible
    # to FlopCounterMode. The chunked loss runs the head's backward matmuls in its forward.
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        _, loss = model(idx, idx, return_logits=return_logits)
        loss.backward()
    measured = counter.get_total_flops() / (B * T)
    fl = flops_per_token(cfg, T)
    assert fl.exact == pytest.approx(measured, rel=0.01)
    parts = fl.qkv + fl.attn_scores + fl.attn_values + fl.attn_out + fl.mlp + fl.lm_head
    assert fl.forward == parts and fl.exact == 3 * fl.forward


def test_six_n_and_gqa_flops():
    mha, gqa = tiny(), tiny(n_kv_heads=1)
    assert flops_per_token(mha, 16).six_n == 6 * count_params(mha).non_embedding
    # GQA changes the K/V projections only, not attention over query heads
    assert flops_per_token(gqa, 16).attn_scores == flops_per_token(mha, 16).attn_scores
    assert flops_per_token(gqa, 16).qkv < flops_per_token(mha, 16).qkv
    with pytest.raises(ValueError, match="seq_len"):
        flops_per_token(mha, 0)


def test_sinusoidal_table_equals_the_formula():
    cfg = tiny(pos_encoding="sinusoidal", d_model=32)
    table = build_model(cfg).pos.table
    for p in range(cfg.max_seq_len):
        for i in range(cfg.d_model // 2):
            angle = p / 10000 ** (2 * i / cfg.d_model)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert not any(n.endswith("table") for n, _ in build_model(cfg).named_parameters())


def test_rope_scores_depend_only_on_relative_offset():
    torch.manual_seed(0)
    cfg = tiny(pos_encoding="rope", max_seq_len=64)
    pos = build_model(cfg).pos
    q, k = torch.randn(2, 1, 1, 1, cfg.head_dim)

    def score(m: int, n: int) -> float:
        rot_q = apply_rope(q, *pos.attention_inputs(1, m, q.device)[:2])
        rot_k = apply_rope(k, *pos.attention_inputs(1, n, k.device)[:2])
        return (rot_q * rot_k).sum().item()

    for m, n in [(5, 2), (9, 9), (3, 11)]:
        for shift in (1, 7, 40):
            assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 4), abs=1e-3)  # it does encode the offset


@pytest.mark.parametrize("pos", ["sinusoidal", "learned", "rope", "alibi", "none"])
@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_causality(pos, norm_position):
    torch.manual_seed(0)
    model = build_model(tiny(pos_encoding=pos, norm_position=norm_position, n_kv_heads=2)).eval()
    idx = torch.randint(0, 61, (1, 20))
    t = 11
    changed = idx.clone()
    changed[0, t + 1 :] = (changed[0, t + 1 :] + 1) % 61
    a, b = model(idx)[0], model(changed)[0]
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])


def test_gqa_equals_mha_with_kv_heads_repeated():
    """A GQA model equals the MHA model whose K/V heads are the GQA heads, each repeated for its
    query group (query head h uses KV head h // group)."""
    torch.manual_seed(0)
    gqa_cfg = tiny(n_heads=4, n_kv_heads=2, pos_encoding="rope")
    gqa, mha = build_model(gqa_cfg).eval(), build_model(tiny(pos_encoding="rope")).eval()
    state = gqa.state_dict()
    hd, d = gqa_cfg.head_dim, gqa_cfg.d_model
    for i in range(gqa_cfg.n_layers):
        for name in ("weight", "bias"):
            w = state[f"blocks.{i}.attn.qkv.{name}"]
            q, k, v = w.split([4 * hd, 2 * hd, 2 * hd])
            rep = [
                t.view(2, hd, *t.shape[1:]).repeat_interleave(2, 0).reshape(4 * hd, *t.shape[1:])
                for t in (k, v)
            ]
            state[f"blocks.{i}.attn.qkv.{name}"] = torch.cat([q, *rep])
    mha.load_state_dict(state)
    idx = torch.randint(0, 61, (2, 20))
    torch.testing.assert_close(mha(idx)[0], gqa(idx)[0], rtol=1e-5, atol=1e-5)
    assert state["blocks.0.attn.qkv.weight"].shape == (3 * d, d)


def test_n_kv_heads_equal_to_n_heads_is_mha():
    torch.manual_seed(0)
    a = build_model(tiny(n_kv_heads=4)).eval()
    b = build_model(tiny(n_kv_heads=None)).eval()
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 61, (2, 12))
    torch.testing.assert_close(a(idx)[0], b(idx)[0])


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_post_ln_rows_are_normalised(norm):
    torch.manual_seed(0)
    model = build_model(tiny(norm_position="post", norm=norm, d_model=64)).eval()
    hidden = {}
    model.lm_head.register_forward_hook(lambda m, inp, out: hidden.update(h=inp[0]))
    model(torch.randint(0, 61, (2, 20)))
    h = hidden["h"]  # (B, T, d): the last block's output, no final norm in Post-LN
    if norm == "layernorm":
        torch.testing.assert_close(h.mean(-1), torch.zeros(2, 20), atol=1e-5, rtol=0)
        torch.testing.assert_close(h.var(-1, unbiased=False), torch.ones(2, 20), atol=1e-3, rtol=0)
    else:
        torch.testing.assert_close(h.pow(2).mean(-1), torch.ones(2, 20), atol=1e-3, rtol=0)
    assert isinstance(model.final_norm, torch.nn.Identity)


@pytest.mark.parametrize("pos", ["sinusoidal", "learned", "rope", "alibi", "none"])
def test_kv_cache_logits_equal_full_forward(pos):
    torch.manual_seed(0)
    model = build_model(tiny(pos_encoding=pos, n_kv_heads=2, mlp="swiglu")).eval()
    idx = torch.randint(0, 61, (2, 20))
    full, _ = model(idx)
    cache = model.new_cache()
    chunks = [idx[:, :7], idx[:, 7:8], idx[:, 8:12], idx[:, 12:13], idx[:, 13:]]  # mixed sizes
    cached = torch.cat([model.forward_cached(c, cache) for c in chunks], dim=1)
    assert cache.length == 20
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pos", ["learned", "rope", "alibi"])
def test_greedy_generate_equals_uncached_greedy(pos):
    torch.manual_seed(0)
    model = build_model(tiny(pos_encoding=pos, n_kv_heads=1)).eval()
    prompt = torch.randint(0, 61, (2, 5))
    out = model.generate(prompt, max_new_tokens=10, temperature=0)
    ref = prompt
    for _ in range(10):
        ref = torch.cat([ref, model(ref)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ref)


def test_sampling_is_seeded_and_respects_top_k():
    torch.manual_seed(0)
    model = build_model(tiny()).eval()
    prompt = torch.randint(0, 61, (1, 3))
    a = model.generate(prompt, 8, generator=torch.Generator().manual_seed(1))
    b = model.generate(prompt, 8, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.shape == (1, 11)
    top1 = model.generate(prompt, 8, top_k=1, generator=torch.Generator().manual_seed(2))
    assert torch.equal(top1, model.generate(prompt, 8, temperature=0))


def test_scale_embeddings_multiplies_token_embeddings_by_sqrt_d_model():
    """Vaswani et al. 2017 sec. 3.4: token embeddings are multiplied by sqrt(d_model)."""
    torch.manual_seed(0)
    base = ModelConfig(
        vocab_size=50,
        max_seq_len=16,
        n_layers=1,
        d_model=16,
        n_heads=2,
        pos_encoding="sinusoidal",
        tie_embeddings=False,
    )
    scaled = dataclasses.replace(base, scale_embeddings=True)
    plain_model, scaled_model = build_model(base), build_model(scaled)
    scaled_model.load_state_dict(plain_model.state_dict())
    with (
        torch.no_grad()
    ):  # the unscaled model with a table 4 = sqrt(16) times larger is the same map
        plain_model.tok_emb.weight.mul_(4.0)
    idx = torch.randint(0, 50, (2, 8))
    torch.testing.assert_close(scaled_model(idx)[0], plain_model(idx)[0])
    same_weights_unscaled = build_model(base)
    same_weights_unscaled.load_state_dict(scaled_model.state_dict())
    assert not torch.allclose(scaled_model(idx)[0], same_weights_unscaled(idx)[0])
    assert count_params(scaled).total == count_params(base).total
