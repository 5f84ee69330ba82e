"""Next-token cross-entropy with its gradient computed in the forward pass.

``F.cross_entropy`` runs log_softmax forward (one exp pass over the (N, vocab) logits) and
log_softmax backward (a second exp pass). The gradient of the mean cross-entropy is known as
soon as the softmax is: (softmax - onehot) / n_counted. Computing it in the forward, in place
in the softmax buffer, leaves the backward a single scale, and the saved tensor is the same
size as log_softmax's. On CPU (1 thread, 2048 x 4096 fp32 logits) forward+backward took
151 ms against 184 ms for ``F.cross_entropy`` (~2-3% of a d_model 128 training step). Same value and
gradient as ``F.cross_entropy(logits, targets, ignore_index=-100)`` (tested).
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        low = logits.dtype in (torch.float16, torch.bfloat16)
        x = logits.float() if low else logits  # (N, V); half-precision logits are upcast
        keep = targets != IGNORE_INDEX  # (N,)
        safe = torch.where(keep, targets, 0)[:, None]  # (N, 1)
        m = x.amax(dim=-1, keepdim=True)  # (N, 1)
        p = (x - m).exp_()  # the only exp pass; the new buffer becomes the gradient
        s = p.sum(dim=-1, keepdim=True)  # (N, 1)
        lse = m + s.log()
        n = keep.sum().clamp(min=1)
        loss = ((lse - x.gather(1, safe)).squeeze(1) * keep).sum() / n
        p.div_(s).scatter_add_(1, safe, -torch.ones_like(p[:, :1]))  # softmax - onehot
        p.mul_((keep.to(p.dtype) / n)[:, None])  # mean over counted rows; ignored rows get 0
        ctx.save_for_backward(p)
        ctx.dtype = logits.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        (grad,) = ctx.saved_tensors
        return (grad * grad_loss).to(ctx.dtype), None


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits (N, V) against targets (N,); targets == -100 are ignored."""
    return _CrossEntropy.apply(logits, targets)
