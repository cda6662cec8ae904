"""The learner's data-parallel group: how its ranks meet, and the few sums they share.

A learner of N ranks is N processes (Ray actors) in one torch.distributed group, gloo on CPU
and NCCL on GPUs, which DeepSpeed then uses as it finds it. Rank 0 opens the group's store on a
port the kernel chooses (`open_store`): picking a free port first and listening on it later
loses the port to another process now and then on a busy machine. Every rank then joins with
its place (`join_group`). One process with no group joins a group of its own (`join_alone`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch

__all__ = [
    "all_gather",
    "all_reduce",
    "join_alone",
    "join_group",
    "open_store",
    "rank",
    "world_size",
]

JOIN_TIMEOUT = timedelta(minutes=5)
"""How long a rank waits for the others to join, and for any collective after that."""


def _backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def open_store(host: str, world: int) -> tuple[Any, int]:
    """Rank 0's rendezvous store, listening on `host` at a port the kernel picks; the store
    (keep it until the group is joined) and its port."""
    store = torch.distributed.TCPStore(
        host, 0, world_size=world, is_master=True, timeout=JOIN_TIMEOUT, wait_for_workers=False
    )
    return store, int(store.port)


def join_group(rank: int, world: int, host: str, port: int, store: Any = None) -> None:
    """Join the learner's group as `rank` of `world`, rank 0 at `host:port` (rank 0 passes the
    store it opened). The usual variables are set for DeepSpeed and the libraries under it;
    LOCAL_RANK is 0 because Ray shows each rank only the GPU it reserved."""
    if store is None:
        store = torch.distributed.TCPStore(
            host, port, world_size=world, is_master=False, timeout=JOIN_TIMEOUT
        )
    place = {"MASTER_ADDR": host, "MASTER_PORT": str(port), "RANK": str(rank)}
    os.environ.update(place | {"WORLD_SIZE": str(world), "LOCAL_RANK": "0"})
    torch.distributed.init_process_group(
        _backend(), store=store, rank=rank, world_size=world, timeout=JOIN_TIMEOUT
    )


def join_alone() -> None:
    """A group of one for a learner in this process, unless a group is up already or a
    launcher set one up in the environment (WORLD_SIZE > 1). The port is not written into the
    environment: child processes (a CLI run started by this one) would inherit it and try to
    listen on it too."""
    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if torch.distributed.is_initialized() or launched:
        return
    store, _ = open_store("127.0.0.1", 1)
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    torch.distributed.init_process_group(_backend(), store=store, rank=0, world_size=1)


def world_size() -> int:
    """Ranks in the learner's group (1 before one is joined)."""
    initialized = torch.distributed.is_initialized()
    return torch.distributed.get_world_size() if initialized else 1


def rank() -> int:
    """This process's rank in the learner's group (0 before one is joined)."""
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def all_reduce(values: Sequence[float], device: torch.device, op: str = "sum") -> list[float]:
    """`values` summed (or maxed, `op="max"`) over every rank; the same values with one rank."""
    if world_size() == 1:
        return [float(v) for v in values]
    reduce_op = {"sum": torch.distributed.ReduceOp.SUM, "max": torch.distributed.ReduceOp.MAX}
    out = torch.tensor(list(values), dtype=torch.float64, device=device)
    torch.distributed.all_reduce(out, op=reduce_op[op])
    return [float(v) for v in out.tolist()]


def all_gather(values: torch.Tensor) -> torch.Tensor:
    """The 1-D `values` of every rank (of any lengths), one after another in rank order;
    `values` itself with one rank."""
    if world_size() == 1:
        return values
    device = values.device
    count = torch.tensor([values.numel()], dtype=torch.long, device=device)
    counts = [torch.zeros_like(count) for _ in range(world_size())]
    torch.distributed.all_gather(counts, count)
    longest = max(max(int(c) for c in counts), 1)
    padded = torch.zeros(longest, dtype=values.dtype, device=device)
    padded[: values.numel()] = values
    parts = [torch.empty_like(padded) for _ in counts]
    torch.distributed.all_gather(parts, padded)
    return torch.cat([p[: int(c)] for p, c in zip(parts, counts, strict=True)])
