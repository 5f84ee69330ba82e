"""The mechanics of one optimizer step, shared by the training loop and the benchmarks.

Batch geometry (how a step's tokens split over processes and micro-batches), the mixed
precision choice, the optimizer (AdamW with its two parameter groups), the step-and-clip pair,
the loss of one micro-batch, one whole optimizer step, and the validation loss. Each is a plain
function of its arguments: `benchmarks/` times exactly what `training.train` runs.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from accelerate.utils import DistributedType

from models.accounting import GB
from models.moe import balance, regularization
from training.config import ConfigError, TrainConfig
from training.memory_plan import largest_micro_batch, step_memory


@dataclass
class Geometry:
    world_size: int
    micro_batch: int  # sequences per forward per process
    grad_accum: int  # micro-steps per optimizer step
    total_steps: int  # ceil(tokens / batch_tokens)


def sequences_per_rank(train: TrainConfig, world_size: int) -> int:
    """Sequences each process computes per optimizer step (all its micro-batches)."""
    seqs = train.batch_tokens // train.seq_len  # sequences per optimizer step, all ranks
    if seqs % world_size:
        raise ConfigError(
            f"train.batch_tokens: {train.batch_tokens} tokens = {seqs} sequences cannot be "
            f"split over {world_size} processes"
        )
    return seqs // world_size


def batch_geometry(train: TrainConfig, world_size: int, micro_batch: int | None = None) -> Geometry:
    """`micro_batch`: `train.micro_batch=auto` resolved (`auto_micro_batch`); None: the
    configured one, or no accumulation."""
    per_rank = sequences_per_rank(train, world_size)
    configured = None if train.micro_batch == "auto" else train.micro_batch
    micro = micro_batch or configured or per_rank
    if per_rank % micro:
        raise ConfigError(
            f"train.micro_batch: {micro} must divide the {per_rank} sequences per process "
            f"(batch_tokens / seq_len / processes)"
        )
    return Geometry(
        world_size, micro, per_rank // micro, math.ceil(train.tokens / train.batch_tokens)
    )


def resolved_precision(train: TrainConfig, cuda: bool) -> str:
    """fp32 | bf16 | fp16: `train.precision` with auto resolved (bf16 on CUDA, fp32 on CPU)."""
    precision = train.precision
    if precision == "auto":
        precision = "bf16" if cuda else "fp32"
    if precision == "fp16" and not cuda:
        raise ConfigError("train.precision: fp16 needs a GPU; use fp32 or bf16 on CPU")
    return precision


def mixed_precision(train: TrainConfig, cuda: bool) -> str:
    """Accelerate's `mixed_precision` for `train.precision` (auto: bf16 on CUDA, fp32 on CPU)."""
    return {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[resolved_precision(train, cuda)]


def device_memory_bytes(train: TrainConfig) -> float | None:
    """Memory of one device: `train.device_memory_gb`, else the CUDA device's, else None."""
    if train.device_memory_gb is not None:
        return train.device_memory_gb * GB
    if torch.cuda.is_available():
        return float(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    return None


def auto_micro_batch(train: TrainConfig, model_cfg, world_size: int, cuda: bool) -> int | None:
    """`train.micro_batch` resolved: as given unless `auto`; auto is None (no accumulation)
    without CUDA, as before it existed, and on CUDA the largest micro-batch whose
    `training.memory_plan.step_memory` (one rank's share under `train.parallel`) fits the
    device (`device_memory_bytes`), else 1."""
    if train.micro_batch != "auto":
        return train.micro_batch
    memory = device_memory_bytes(train)
    if not cuda or memory is None:
        return None
    per_rank = sequences_per_rank(train, world_size)
    precision = resolved_precision(train, cuda)
    how = {"parallel": train.parallel, "world": world_size}
    how["activation_checkpointing"] = train.activation_checkpointing
    micro = largest_micro_batch(model_cfg, train.seq_len, per_rank, precision, memory, **how)
    if micro is None:
        warnings.warn(
            f"train.micro_batch=auto: even 1 sequence of {train.seq_len} tokens is estimated "
            f"not to fit {memory / GB:.1f} GB; trying 1",
            stacklevel=2,
        )
    return micro or 1


def planned_verdict(train: TrainConfig, model_cfg, cuda: bool, world: int = 1):
    """(the memory estimate of one rank's step, as the run will train it on `world` ranks of
    this kind of machine: its precision, micro-batch and `train.parallel`; the device's memory,
    or None if unknown; `training.memory_plan.Verdict`: does it fit as configured, only
    sharded, or nowhere)."""
    from training.memory_plan import verdict

    micro = auto_micro_batch(train, model_cfg, world, cuda)
    micro = batch_geometry(train, world, micro).micro_batch
    precision, device = resolved_precision(train, cuda), "cuda" if cuda else "cpu"
    how = {"parallel": train.parallel, "world": world}
    how["activation_checkpointing"] = train.activation_checkpointing
    estimate = step_memory(model_cfg, train.seq_len, micro, precision, device, **how)
    device_bytes = device_memory_bytes(train)
    judged = verdict(model_cfg, train, micro, precision, world, device_bytes)
    return estimate, device_bytes, judged


def param_groups(model, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on tensors with dim >= 2 (matrices, embeddings), not on
    biases and norm gains. Each group's ``lr_scale`` multiplies the scheduled lr, its
    ``eps_scale`` (CompleteP only) the run's epsilon.

    Under muP (our model with ``cfg.parametrization == "mup"``) the hidden matrices
    (``model.hidden_weights()``) form a third group with lr_scale 1/width_mult and weight decay
    x width_mult, so that torch's decoupled decay lr * wd stays width-independent (as
    ``mup.MuAdamW``); embeddings, head, biases and gains keep the base lr (Yang et al. 2022,
    table 3). CompleteP (Dey et al. 2025, table 1) adds the depth rules with m_L =
    ``cfg.depth_mult``: the hidden matrices' lr_scale x m_L^(alpha-1), and a fourth group, the
    norm gains and biases inside the blocks, at lr_scale m_L^(alpha-1); both at eps_scale
    m_L^-alpha (the residual blocks' gradients shrink as the branch multiplier m_L^-alpha).
    Other models (the benchmarks' Hugging Face twins) get the two SP groups."""
    params = [p for p in model.parameters() if p.requires_grad]
    cfg = getattr(model, "cfg", None)
    kind = getattr(cfg, "parametrization", "sp") if cfg is not None else "sp"
    hidden = {id(p) for p in model.hidden_weights()} if kind != "sp" else set()
    in_blocks = {id(p) for p in model.blocks.parameters()} if kind == "completep" else set()
    groups = [
        {
            "params": [p for p in params if p.dim() >= 2 and id(p) not in hidden],
            "weight_decay": weight_decay,
            "lr_scale": 1.0,
        },
        {
            "params": [p for p in params if p.dim() < 2 and id(p) not in in_blocks],
            "weight_decay": 0.0,
            "lr_scale": 1.0,
        },
    ]
    if kind == "sp":
        return groups
    depth = {}  # CompleteP's depth factors; none under muP
    if kind == "completep":
        depth_lr = cfg.depth_mult ** (cfg.depth_alpha - 1)
        depth = {"lr_scale": depth_lr, "eps_scale": cfg.branch_mult}
        block_vectors = [p for p in params if p.dim() < 2 and id(p) in in_blocks]
        groups.append({"params": block_vectors, "weight_decay": 0.0, **depth})
    hidden_params = [p for p in params if id(p) in hidden]
    groups.append(
        {
            "params": hidden_params,
            "weight_decay": weight_decay * cfg.width_mult,
            **depth,
            "lr_scale": depth.get("lr_scale", 1.0) / cfg.width_mult,
        }
    )
    return groups


def adamw(groups: list[dict], lr: float, **kwargs):
    """torch's fused AdamW where the device and dtype support it, else the foreach one. A
    group's starting lr is ``lr`` times its ``lr_scale`` (``set_lr`` keeps that per step), its
    epsilon ``eps`` (torch's default 1e-8 if not given) times its ``eps_scale`` if it has one."""
    eps = kwargs.get("eps", 1e-8)
    groups = [
        {**g, "lr": lr * g.get("lr_scale", 1.0)}
        | ({"eps": eps * g["eps_scale"]} if "eps_scale" in g else {})
        for g in groups
    ]
    kwargs["lr"] = lr
    try:
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError):  # fused unsupported for this device/dtype
        return torch.optim.AdamW(groups, foreach=True, **kwargs)


def make_optimizer(model, train: TrainConfig):
    """The run's AdamW (`param_groups`, `train.lr`, betas and eps)."""
    return adamw(
        param_groups(model, train.weight_decay),
        lr=train.lr,
        betas=(train.beta1, train.beta2),
        eps=train.eps,
    )


def set_lr(optimizer, lr: float) -> None:
    """The scheduled lr for this step, times each group's ``lr_scale`` (muP's per-layer rule)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


def _on_for(setting: bool | str, device, auto_device_type: str) -> bool:
    """A true | false | auto knob: ``auto`` = on exactly when training on ``auto_device_type``."""
    return device.type == auto_device_type if setting == "auto" else bool(setting)


def use_compile(setting: bool | str, device) -> bool:
    """``train.compile``: true/false, or ``auto`` = on for CUDA, off on CPU and anything else.
    On CPU in fp32 it is no clear win per step and costs tens of seconds per new shape
    (docs/performance.md, `train.compile`)."""
    return _on_for(setting, device, "cuda")


def use_keep_host_memory(setting: bool | str, device) -> bool:
    """``train.keep_host_memory``: true/false, or ``auto`` = on when training on the CPU, where
    activations and gradients live in malloc's memory (on CUDA the host only holds batches)."""
    return _on_for(setting, device, "cpu")


def step_and_clip(accelerator, optimizer):
    """(optimizer to step, gradient clipping function) for the training loop.

    Accelerate's optimizer and clipping wrappers do work only for fp16 loss scaling and for
    XLA/FSDP/DeepSpeed; otherwise they are per-step Python overhead (``AcceleratedOptimizer.step``
    looks up an optional package's metadata twice per call; docs/performance.md, loop choices).
    Then step the torch optimizer and clip with torch directly: the same
    updates, bit for bit (the wrappers are no-ops here)."""
    plain = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)
    if accelerator.scaler is None and accelerator.distributed_type in plain:
        return optimizer.optimizer, functools.partial(torch.nn.utils.clip_grad_norm_, foreach=True)
    return optimizer, accelerator.clip_grad_norm_


def loss(model, x, y, label_smoothing: float):
    """Mean next-token cross-entropy of one micro-batch (x, y: (B, T))."""
    if label_smoothing == 0.0:
        return model(x, y, return_logits=False)[1]  # chunked loss, no (B, T, V) logits
    logits, _ = model(x)  # (B, T, V)
    return F.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), label_smoothing=label_smoothing
    )


class DtypeProbe:
    """The dtypes `model`'s layers ran in during the forward passes until `result()`: forward
    hooks that record, per role (the last two parts of a module's name, e.g. ``attn.proj``),
    the dtype of its input and of its output ("attn.proj=bfloat16>bfloat16 ...": the input of
    the attention's output projection is what scaled_dot_product_attention computed in)."""

    def __init__(self, model: torch.nn.Module):
        self.seen: dict[str, set[str]] = {}
        self.handles = [
            module.register_forward_hook(
                functools.partial(self._record, ".".join(name.split(".")[-2:]))
            )
            for name, module in model.named_modules()
            if name and not any(True for _ in module.children())  # layers, not containers
        ]

    def _record(self, role: str, module, args, out) -> None:
        dtype_in = next((str(a.dtype)[6:] for a in args if torch.is_tensor(a)), "-")
        dtype_out = str(out.dtype)[6:] if torch.is_tensor(out) else "-"
        self.seen.setdefault(role.lstrip("0123456789."), set()).add(f"{dtype_in}>{dtype_out}")

    def result(self) -> str:
        """Stop recording; what was seen, one ``role=in>out`` per role, sorted."""
        for handle in self.handles:
            handle.remove()
        return " ".join(f"{r}={'|'.join(sorted(v))}" for r, v in sorted(self.seen.items()))


@dataclass(frozen=True)
class Update:
    """What ends an optimizer step: clip the gradients of `params` to `max_norm` (none when
    0), step `optimizer`, zero its gradients, update the aux-free MoE biases. `optimizer` and
    `clip` as `step_and_clip` gives; `moe` the model's MoE layers, whose balance and z losses
    join each micro-batch's objective (`optimizer_step`)."""

    optimizer: Any
    clip: Callable
    params: list
    max_norm: float
    moe: list = dataclasses.field(default_factory=list)  # the model's MoE layers (moe_layers)

    def regularization(self):
        """The MoE layers' weighted balance and z losses of the last forward (None: dense)."""
        return regularization(self.moe) if self.moe else None

    def apply(self) -> None:
        if self.max_norm > 0:
            self.clip(self.params, self.max_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        balance(self.moe)  # aux-free selection biases, from this step's loads


def next_batch(sampler, device) -> list[torch.Tensor]:
    """The sampler's next micro-batch on `device`: a copy that does not wait for the host when
    the batch is in pinned memory (`training.data.Prefetcher` pins on CUDA)."""
    return [t.to(device, non_blocking=True) for t in sampler.next()]


def optimizer_step(model, sampler, accelerator, update: Update, micro_loss: Callable):
    """One optimizer step over the accelerator's `gradient_accumulation_steps` micro-batches
    from `sampler`: backward on each, `update` on the last. `micro_loss(model, *batch)` is the
    loss of one micro-batch (next-token `loss`, or a family's objective); a MoE model's
    weighted auxiliary losses are added to what is backpropagated, not to what is returned.
    Returns the step's mean loss, a device tensor (reading it would sync the host every step)."""
    grad_accum = accelerator.gradient_accumulation_steps
    step_loss = torch.zeros((), device=accelerator.device)
    for _ in range(grad_accum):
        batch = next_batch(sampler, accelerator.device)
        with accelerator.accumulate(model):
            micro = micro_loss(model, *batch)
            reg = update.regularization()  # MoE: balance + z losses; the logged loss is micro's
            accelerator.backward(micro if reg is None else micro + reg)
            if accelerator.sync_gradients:  # the last micro-batch of the step
                update.apply()
        step_loss += micro.detach().float()
    return step_loss / grad_accum


def eval_starts(n_mine: int, n_all: int, micro_batch: int, accelerator, model) -> list[int | None]:
    """Where each of this rank's validation micro-batches starts in its `n_mine` rows (of
    `n_all`, split over the ranks). A sharded model all-gathers each block in every forward, a
    collective: then every rank runs as many forwards as the rank with the most rows, a rank
    with fewer adding ones that count nothing (None)."""
    from training.parallel import is_sharded

    starts: list[int | None] = list(range(0, n_mine, micro_batch))
    if is_sharded(model):
        most = -(-n_all // accelerator.num_processes)
        starts += [None] * (len(range(0, most, micro_batch)) - len(starts))
    return starts


def evaluate(model, windows, micro_batch: int, accelerator) -> float:
    """Mean next-token loss over the fixed validation windows (split across processes).

    ``model`` is the plain module, not the compiled or data-parallel wrapper: a compiled model
    would compile again for eval mode and again for the last, smaller batch (two more graphs per
    run). The training precision is applied here."""
    mine = windows[accelerator.process_index :: accelerator.num_processes]  # (n_rank, T + 1)
    total = torch.zeros(2, device=accelerator.device, dtype=torch.float64)
    model.eval()
    with torch.no_grad(), accelerator.autocast():
        for i in eval_starts(len(mine), len(windows), micro_batch, accelerator, model):
            rows = windows[:1] if i is None else mine[i : i + micro_batch]
            batch = torch.from_numpy(rows).to(accelerator.device)
            _, batch_loss = model(batch[:, :-1], batch[:, 1:], return_logits=False)
            if i is not None:
                total[0] += batch_loss.double() * len(batch)
                total[1] += len(batch)
    model.train()
    total = accelerator.reduce(total, "sum")
    return (total[0] / total[1]).item()
