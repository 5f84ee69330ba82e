"""The model and AdamW state of a small run through `training.parallel`'s sharded checkpoints,
on any number of processes (tests/test_train_fsdp.py runs it under torchrun and in one process).

    python fsdp_states.py train STEPS DIR REF [FROM]
        build the model (FSDP2 over the ranks when there are several), load FROM (a sharded
        checkpoint) if given, take STEPS AdamW steps, print the bytes of parameters and AdamW
        moments each rank holds, save the shards to DIR and the whole state (every rank's
        shards gathered) to REF (rank 0)
    python fsdp_states.py check DIR REF
        load DIR into a fresh model and optimizer and assert that the whole state equals REF
        bit for bit
"""

from __future__ import annotations

import os
import sys

import torch


def build(world: int):
    from models import build_model
    from models.config import ModelConfig
    from training import parallel
    from training.config import TrainConfig
    from training.step import make_optimizer

    cfg = ModelConfig.from_dict(
        {"d_model": 32, "n_layers": 2, "n_heads": 2, "vocab_size": 64, "max_seq_len": 16}
    )
    torch.manual_seed(0)
    model = build_model(cfg)
    train = TrainConfig(parallel="fsdp", seq_len=16, batch_tokens=64)
    parallel.apply(model, train, "fp32", world)
    return model, make_optimizer(model, train)


def whole_state(model, optimizer) -> dict[str, torch.Tensor]:
    """Every parameter and AdamW moment by name, gathered from the shards (a collective; rank
    0's, empty on the others)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
    out = {f"model.{k}": v for k, v in model_sd.items()}
    for name, moments in optim_sd.get("state", {}).items():
        for k, v in moments.items():
            out[f"optimizer.{name}.{k}"] = torch.as_tensor(v)
    return out


def held_bytes(model, optimizer) -> dict[str, int]:
    """Bytes of parameters and AdamW moments this rank holds (its shards under FSDP)."""

    def local(t) -> int:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    moments = [v for s in optimizer.state.values() for k, v in s.items() if k != "step"]
    return {
        "params": sum(local(p) for p in model.parameters()),
        "optimizer": sum(local(v) for v in moments),
    }


def main(argv: list[str]) -> None:
    from training import parallel

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    rank = int(os.environ.get("RANK", "0"))
    model, optimizer = build(world)
    if argv[0] == "train":
        steps, folder, ref = int(argv[1]), argv[2], argv[3]
        if len(argv) > 4:
            parallel.load_sharded(argv[4], model, optimizer)
        g = torch.Generator().manual_seed(1 + rank)  # each rank its own data
        for _ in range(steps):
            x = torch.randint(0, 64, (2, 16), generator=g)
            model(x, x, return_logits=False)[1].backward()
            optimizer.step()
            optimizer.zero_grad()
        parallel.save_sharded(folder, model, optimizer)
        held = held_bytes(model, optimizer)
        print(f"rank {rank} holds {held['params']} {held['optimizer']} bytes", flush=True)
        state = whole_state(model, optimizer)
        if rank == 0:
            torch.save(state, ref)
    else:
        folder, ref = argv[1], argv[2]
        parallel.load_sharded(folder, model, optimizer)
        state = whole_state(model, optimizer)
        if rank > 0:
            return dist.destroy_process_group()
        expected = torch.load(ref, weights_only=True)
        assert sorted(state) == sorted(expected), sorted(set(state) ^ set(expected))
        differ = [k for k in expected if not torch.equal(state[k], expected[k])]
        assert not differ, f"differ after loading on {world} ranks: {differ}"
        print(f"rank {rank}: {len(state)} tensors equal", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
