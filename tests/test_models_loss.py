"""models.loss.cross_entropy: same value and gradient as F.cross_entropy (ignore_index=-100)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from models.loss import cross_entropy


@pytest.mark.parametrize("ignore_some", [False, True])
def test_matches_torch_cross_entropy_value_and_gradient(ignore_some):
    torch.manual_seed(0)
    logits = (3 * torch.randn(40, 23, dtype=torch.float64)).requires_grad_()
    targets = torch.randint(0, 23, (40,))
    if ignore_some:
        targets[::3] = -100
    ref = F.cross_entropy(logits, targets)
    (ref_grad,) = torch.autograd.grad(2.5 * ref, logits)
    ours = cross_entropy(logits, targets)
    (grad,) = torch.autograd.grad(2.5 * ours, logits)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-12)
    if ignore_some:
        assert grad[::3].abs().max() == 0


def test_half_precision_logits_are_computed_in_float32():
    torch.manual_seed(0)
    logits = torch.randn(16, 11).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, 11, (16,))
    ours = cross_entropy(logits, targets)
    ours.backward()
    ref = F.cross_entropy(logits.detach().float(), targets)
    assert ours.dtype == torch.float32 and logits.grad.dtype == torch.bfloat16
    torch.testing.assert_close(ours, ref)


def test_model_loss_uses_it_and_trains_under_compile():
    from models import ModelConfig, build_model

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=31, max_seq_len=8, n_layers=1, d_model=16, n_heads=2)
    model = build_model(cfg)
    idx = torch.randint(0, 31, (2, 8))
    logits, loss = model(idx, idx)
    torch.testing.assert_close(loss, F.cross_entropy(logits.view(-1, 31), idx.view(-1)))
    compiled_loss = torch.compile(model)(idx, idx)[1]
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, loss)
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("rows", [7, 40, None])
@pytest.mark.parametrize("ignore_some", [False, True])
def test_linear_cross_entropy_matches_logits_path(rows, ignore_some):
    from models.loss import linear_cross_entropy

    torch.manual_seed(0)
    h = torch.randn(40, 9, dtype=torch.float64, requires_grad=True)
    w = torch.randn(23, 9, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 23, (40,))
    if ignore_some:
        targets[::3] = -100
    ref = F.cross_entropy(h @ w.t(), targets)
    ref_gh, ref_gw = torch.autograd.grad(2.5 * ref, (h, w))
    ours = linear_cross_entropy(h, w, targets, rows)
    gh, gw = torch.autograd.grad(2.5 * ours, (h, w))
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gh, ref_gh, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(gw, ref_gw, rtol=1e-10, atol=1e-12)


def test_linear_cross_entropy_without_grad_and_under_bf16_autocast():
    from models.loss import linear_cross_entropy

    torch.manual_seed(0)
    h, w = torch.randn(16, 8, requires_grad=True), torch.randn(11, 8, requires_grad=True)
    targets = torch.randint(0, 11, (16,))
    with torch.no_grad():
        loss = linear_cross_entropy(h, w, targets, 5)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, F.cross_entropy(h @ w.t(), targets))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = linear_cross_entropy(h, w, targets, 5)
        ref = F.cross_entropy((h @ w.t()).float(), targets)
    loss.backward()
    assert loss.dtype == torch.float32 and h.grad.dtype == w.grad.dtype == torch.float32
    torch.testing.assert_close(loss, ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("tie", [True, False])
def test_model_loss_only_path_equals_logits_path_and_compiles(tie):
    from models import ModelConfig, build_model

    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=31, max_seq_len=8, n_layers=1, d_model=16, n_heads=2, tie_embeddings=tie
    )
    model = build_model(cfg)
    idx = torch.randint(0, 31, (2, 8))
    _, ref = model(idx, idx)
    ref_grads = torch.autograd.grad(ref, list(model.parameters()))
    logits, loss = model(idx, idx, return_logits=False)
    assert logits is None
    grads = torch.autograd.grad(loss, list(model.parameters()))
    torch.testing.assert_close(loss, ref)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)
    compiled = torch.compile(model)(idx, idx, return_logits=False)[1]
    compiled.backward()
    torch.testing.assert_close(compiled, ref)
    assert all(p.grad is not None for p in model.parameters())


def _flops(fn):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        out = fn()
    return out, counter.get_total_flops()


def test_loss_without_grad_computes_no_gradient():
    """Under no_grad (evaluation), or for inputs that need no gradient, the chunked loss runs
    only each chunk's logits matmul, not the two gradient matmuls training runs in its forward;
    the loss is bit for bit the training call's."""
    from models.loss import linear_cross_entropy

    torch.manual_seed(0)
    n, d, v = 40, 9, 23
    h, w = torch.randn(n, d, requires_grad=True), torch.randn(v, d, requires_grad=True)
    targets = torch.randint(0, v, (n,))
    targets[::3] = -100
    logits_mm = 2 * n * d * v
    train, train_flops = _flops(lambda: linear_cross_entropy(h, w, targets, 7))
    assert train_flops == 3 * logits_mm and train.requires_grad  # logits, d/dh, d/dW
    with torch.no_grad():
        ev, eval_flops = _flops(lambda: linear_cross_entropy(h, w, targets, 7))
    assert eval_flops == logits_mm and torch.equal(ev, train)
    frozen, frozen_flops = _flops(lambda: linear_cross_entropy(h.detach(), w.detach(), targets, 7))
    assert frozen_flops == logits_mm and torch.equal(frozen, train)
    logits = (h @ w.t()).detach().requires_grad_()  # the logits path: the same rule
    with torch.no_grad():
        eval_logits_path = cross_entropy(logits, targets)
    assert torch.equal(eval_logits_path, cross_entropy(logits, targets).detach())


def test_model_evaluation_costs_one_forward():
    """The loss-only path under no_grad costs exactly the logits forward, and gives the same loss
    as in training."""
    from models import ModelConfig, build_model

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=31, max_seq_len=8, n_layers=1, d_model=16, n_heads=2)
    model = build_model(cfg).eval()
    idx = torch.randint(0, 31, (2, 8))
    train, train_flops = _flops(lambda: model(idx, idx, return_logits=False)[1])
    with torch.no_grad():
        _, forward_flops = _flops(lambda: model(idx))
        ev, eval_flops = _flops(lambda: model(idx, idx, return_logits=False)[1])
    assert eval_flops == forward_flops
    assert train_flops == forward_flops + 2 * 2 * idx.numel() * cfg.d_model * cfg.vocab_size
    assert torch.equal(ev, train.detach())
