"""Next-token cross-entropy with its gradient computed in the forward pass.

``F.cross_entropy`` runs log_softmax forward (one exp pass over the (N, vocab) logits) and
log_softmax backward (a second exp pass). The gradient of the mean cross-entropy is known as
soon as the softmax is: (softmax - onehot) / n_counted. Computing it in the forward, in place
in the softmax buffer, leaves the backward a single scale, and the saved tensor is the same
size as log_softmax's: one exp pass instead of two (timing: docs/performance.md). Same value and
gradient as ``F.cross_entropy(logits, targets, ignore_index=-100)`` (tested).

``linear_cross_entropy`` goes one step further for training, where nobody reads the logits: it
takes the last hidden states and the head's weight, and works through the rows in chunks. Each
chunk's logits buffer is turned in place into that chunk's softmax gradient, which is folded
into the gradients of the hidden states and of the weight at once; no (N, V) tensor outlives its
chunk. Same matmuls (the FLOP count is unchanged, two of them just run in the forward), one
small buffer instead of three logit-sized ones. Where autograd does not record the call
(``torch.no_grad()``, evaluation, or inputs that need no gradient) both functions compute the
loss alone: one matmul per chunk, no gradient pass. Why it pays on CPU: a fresh logit-sized
tensor (32 MB at 2048 x 4096 fp32) is mmapped and page-faulted in on first touch, while 8 MB
chunks are reused from the heap; the full-step A/B is in docs/performance.md, model-side choices.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, grad: bool) -> torch.Tensor:
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
        if grad:
            p.div_(s).scatter_add_(1, safe, -torch.ones_like(p[:, :1]))  # softmax - onehot
            p.mul_((keep.to(p.dtype) / n)[:, None])  # mean over counted rows; ignored rows: 0
            ctx.save_for_backward(p)
        ctx.dtype = logits.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        (grad,) = ctx.saved_tensors
        return (grad * grad_loss).to(ctx.dtype), None, None


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits (N, V) against targets (N,); targets == -100 are ignored."""
    grad = torch.is_grad_enabled() and logits.requires_grad  # else no gradient pass (eval)
    return _CrossEntropy.apply(logits, targets, grad)


# Rows per chunk = CHUNK_ELEMENTS // vocab. CPU: 8 MB of fp32 logits, below glibc's mmap
# threshold, so the buffer comes back from the heap instead of fresh page-faulted memory (chunk
# sizes compared in docs/performance.md, model-side choices). Other devices have caching allocators:
# chunks only bound memory there, so they are much larger.
CHUNK_ELEMENTS = {"cpu": 1 << 21}
CHUNK_ELEMENTS_DEFAULT = 1 << 26


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, rows: int, grad: bool
    ):
        need_grad = grad  # see linear_cross_entropy: ctx.needs_input_grad ignores no_grad
        keep = targets != IGNORE_INDEX  # (N,)
        safe = torch.where(keep, targets, 0)[:, None]  # (N, 1)
        acc = torch.promote_types(h.dtype, torch.float32)  # half precision is upcast
        scale = (keep.to(acc) / keep.sum().clamp(min=1))[:, None]  # (N, 1): 1/n_counted or 0
        loss = torch.zeros((), dtype=acc, device=h.device)
        grad_h = torch.empty_like(h) if need_grad else None  # (N, d)
        grad_w = torch.zeros(weight.shape, dtype=acc, device=h.device) if need_grad else None
        for i in range(0, h.shape[0], rows):
            hc, tc, sc = h[i : i + rows], safe[i : i + rows], scale[i : i + rows]
            x = (hc @ weight.t()).to(acc)  # (c, V): this chunk's logits, our own buffer
            m = x.amax(dim=-1, keepdim=True)  # (c, 1)
            target_logit = x.gather(1, tc)  # (c, 1)
            p = x.sub_(m).exp_()  # in place: the buffer becomes exp(logits - max)
            s = p.sum(dim=-1, keepdim=True)  # (c, 1)
            loss += ((m + s.log() - target_logit) * sc).sum()
            if need_grad:  # d loss / d logits = (softmax - onehot) * scale, in place
                p.div_(s).scatter_add_(1, tc, -torch.ones_like(s)).mul_(sc)
                p = p.to(h.dtype)
                grad_h[i : i + rows] = p @ weight  # (c, d)
                grad_w += p.t() @ hc  # (V, d)
        if need_grad:
            ctx.save_for_backward(grad_h, grad_w.to(weight.dtype))
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_loss, grad_w * grad_loss, None, None, None


def linear_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, rows: int | None = None
) -> torch.Tensor:
    """``cross_entropy(h @ weight.T, targets)`` without materialising the (N, V) logits.

    h (N, d) last hidden states, weight (V, d) the output head, targets (N,) with -100 ignored;
    ``rows`` per chunk defaults to ``CHUNK_ELEMENTS // V`` for the device. Under autocast the
    matmuls run in the autocast dtype and the softmax in float32, as on the logits path.
    """
    if rows is None:
        budget = CHUNK_ELEMENTS.get(h.device.type, CHUNK_ELEMENTS_DEFAULT)
        rows = max(1, budget // weight.shape[0])
    # Whether autograd records this call. Not ctx.needs_input_grad: that reads requires_grad
    # even under no_grad, where evaluation would pay for two gradient matmuls per chunk.
    grad = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    return _LinearCrossEntropy.apply(h, weight, targets, rows, grad)
