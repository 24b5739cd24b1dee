"""ZeRO-1 style optimizer-state sharding: each rank keeps optimizer state for its shard only.

Every rank holds all parameters and (averaged) gradients, as in plain data
parallelism. Parameters are assigned to ranks greedily by size (largest first,
to the least loaded rank), so each rank's optimizer state is about
1/world_size of the whole. ``step()`` updates the local shard with the wrapped
optimizer, then each parameter is broadcast from the rank that owns it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from profiler_kit.workloads.common import nvtx_range


def shard_owners(sizes: list[int], world_size: int) -> list[int]:
    """Owner rank of each parameter: largest first to the least loaded rank (ties to the lower rank)."""
    load = [0] * world_size
    owners = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda j: (-sizes[j], j)):
        r = min(range(world_size), key=lambda k: (load[k], k))
        owners[i] = r
        load[r] += sizes[i]
    return owners


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes held in tensors of an optimizer's state (moments, step counters)."""
    if isinstance(optimizer, ShardedOptimizer):
        optimizer = optimizer.local
    total = 0
    for state in optimizer.state.values():
        for v in state.values():
            if torch.is_tensor(v):
                total += v.numel() * v.element_size()
    return total


class ShardedOptimizer(torch.optim.Optimizer):
    """Wraps ``optimizer_cls`` so each rank steps only the parameters it owns, then broadcasts them."""

    def __init__(self, params: Iterable, optimizer_cls: type[torch.optim.Optimizer], process_group=None, **kwargs: Any):
        self.group_pg = process_group
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        self.optimizer_cls = optimizer_cls
        self.kwargs = kwargs
        self.owner: dict[int, int] = {}
        self.local: torch.optim.Optimizer | None = None
        super().__init__(params, defaults=dict(kwargs))

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Register a group everywhere; the wrapped optimizer sees only this rank's shard of it."""
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        params = []
        for p in param_group["params"]:
            if id(p) not in seen:  # tied weights: one Parameter, one owner
                seen.add(id(p))
                params.append(p)
        param_group = {**param_group, "params": params}
        super().add_param_group(param_group)
        owners = shard_owners([p.numel() for p in params], self.world_size)
        for p, r in zip(params, owners, strict=True):
            self.owner[id(p)] = r
        mine = {**{k: v for k, v in param_group.items() if k != "params"}}
        mine["params"] = [p for p, r in zip(params, owners, strict=True) if r == self.rank]
        if self.local is None:
            self.local = self.optimizer_cls([mine], **self.kwargs)
        else:
            self.local.add_param_group(mine)

    @torch.no_grad()
    def step(self, closure=None, **kwargs: Any):
        """Step this rank's shard, then broadcast every parameter from its owner."""
        loss = self.local.step(closure, **kwargs) if closure is not None else self.local.step(**kwargs)
        with nvtx_range("param_broadcast"):
            works = []
            for group in self.param_groups:
                for p in group["params"]:
                    src = self.owner[id(p)]
                    if self.group_pg is not None:
                        src = dist.get_global_rank(self.group_pg, src)
                    works.append(dist.broadcast(p.data, src=src, group=self.group_pg, async_op=True))
            for w in works:
                w.wait()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of all parameters, owned or not (every rank computes all of them)."""
        super().zero_grad(set_to_none=set_to_none)
