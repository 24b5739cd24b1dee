"""Four data-parallel wrappers with one interface, to compare how gradient all-reduce is scheduled.

Each wraps an ``nn.Module``, broadcasts rank 0's parameters and buffers at
construction, averages the gradients of the parameters that require grad, and
reduces a parameter that appears twice (tied weights) once. Use::

    model = wrap(net, "bucketed", bucket_size_mb=25)
    loss = loss_fn(model(x)); loss.backward()
    model.finish_gradient_synchronization()   # waits for (or runs) the all-reduces
    optimizer.step()

- ``naive``: after backward, one all-reduce per parameter gradient.
- ``flat``: after backward, one all-reduce of all gradients flattened into one buffer.
- ``overlap``: each gradient's all-reduce starts (async) as soon as autograd has
  accumulated it (``register_post_accumulate_grad_hook``), overlapping backward.
- ``bucketed``: gradients grouped into buckets of at most ``bucket_size_mb`` MiB in
  reverse parameter order (the order backward produces them); a bucket's
  all-reduce starts when its last gradient is ready. Gradients are copied into
  the bucket once and then left as views of it, so no copy back is needed.

NVTX / record_function ranges: ``allreduce`` around per-parameter and flat
all-reduces, ``bucket_{i}`` around a bucket's launch, ``allreduce_wait`` around
waiting for outstanding work.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from profiler_kit.workloads.common import nvtx_range
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

MIB = 2**20
VARIANTS = ("naive", "flat", "overlap", "bucketed")


def unique_params(module: nn.Module) -> list[nn.Parameter]:
    """Parameters that require grad, each once (a tied weight is one Parameter), in definition order."""
    seen: set[int] = set()
    out = []
    for p in module.parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


class _DataParallel(nn.Module):
    """Shared plumbing: broadcast at start, averaging, the forward pass-through."""

    def __init__(self, module: nn.Module, process_group=None):
        super().__init__()
        self.module = module
        self.group = process_group
        self.world_size = dist.get_world_size(process_group)
        # NCCL averages in the collective; gloo has no AVG, so sum and divide
        self._avg_op = dist.ReduceOp.AVG if dist.get_backend(process_group) == "nccl" else None
        self.params = unique_params(module)
        with torch.no_grad():
            tensors = {id(t): t for t in [*module.parameters(), *module.buffers()]}
            for t in tensors.values():
                dist.broadcast(
                    t.data, src=dist.get_global_rank(process_group, 0) if process_group else 0, group=process_group
                )

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _all_reduce(self, t: torch.Tensor, async_op: bool = False):
        op = self._avg_op if self._avg_op is not None else dist.ReduceOp.SUM
        return dist.all_reduce(t, op=op, group=self.group, async_op=async_op)

    def _finish_average(self, t: torch.Tensor) -> None:
        if self._avg_op is None:
            t.div_(self.world_size)

    def finish_gradient_synchronization(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Remove autograd hooks (for wrappers that register them)."""


class NaiveDDP(_DataParallel):
    """One blocking all-reduce per gradient, after backward."""

    def finish_gradient_synchronization(self) -> None:
        with nvtx_range("allreduce"):
            for p in self.params:
                if p.grad is not None:
                    self._all_reduce(p.grad)
                    self._finish_average(p.grad)


class FlatDDP(_DataParallel):
    """All gradients flattened into one buffer, one all-reduce, copied back."""

    def finish_gradient_synchronization(self) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return
        with nvtx_range("allreduce"):
            flat = _flatten_dense_tensors(grads)
            self._all_reduce(flat)
            self._finish_average(flat)
            torch._foreach_copy_(grads, list(_unflatten_dense_tensors(flat, grads)))


class OverlapDDP(_DataParallel):
    """Async all-reduce of each gradient as soon as it is accumulated; wait before the step."""

    def __init__(self, module: nn.Module, process_group=None):
        super().__init__(module, process_group)
        self._pending: list[tuple[torch.Tensor, object]] = []
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]

    def _on_grad(self, p: torch.Tensor) -> None:
        with nvtx_range("allreduce"):
            self._pending.append((p.grad, self._all_reduce(p.grad, async_op=True)))

    def finish_gradient_synchronization(self) -> None:
        with nvtx_range("allreduce_wait"):
            for grad, work in self._pending:
                work.wait()
                self._finish_average(grad)
        self._pending.clear()

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []


class BucketedDDP(_DataParallel):
    """Gradients in buckets of at most ``bucket_size_mb`` MiB, reverse parameter order, async per bucket."""

    def __init__(self, module: nn.Module, bucket_size_mb: float = 25.0, process_group=None):
        super().__init__(module, process_group)
        self.bucket_size_mb = bucket_size_mb
        limit = bucket_size_mb * MIB
        self.buckets: list[list[nn.Parameter]] = []
        size = 0
        for p in reversed(self.params):
            nbytes = p.numel() * p.element_size()
            # a new bucket when the dtype/device changes or this gradient would overflow a non-empty bucket
            if not self.buckets or size + nbytes > limit or self.buckets[-1][0].dtype != p.dtype:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += nbytes
        self._buffers = [
            torch.zeros(sum(p.numel() for p in b), dtype=b[0].dtype, device=b[0].device) for b in self.buckets
        ]
        self._views: dict[int, torch.Tensor] = {}
        self._where: dict[int, int] = {}
        for i, (bucket, buf) in enumerate(zip(self.buckets, self._buffers, strict=True)):
            offset = 0
            for p in bucket:
                self._views[id(p)] = buf[offset : offset + p.numel()].view_as(p)
                self._where[id(p)] = i
                offset += p.numel()
        self._ready = [0] * len(self.buckets)
        self._works: dict[int, object] = {}
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]

    def _on_grad(self, p: torch.Tensor) -> None:
        view = self._views[id(p)]
        if p.grad is not view:  # first backward, or the optimizer set grads to None: move it into the bucket
            view.copy_(p.grad)
            p.grad = view
        i = self._where[id(p)]
        self._ready[i] += 1
        if self._ready[i] == len(self.buckets[i]):
            self._launch(i)

    def _launch(self, i: int) -> None:
        with nvtx_range(f"bucket_{i}"):
            self._works[i] = self._all_reduce(self._buffers[i], async_op=True)

    def finish_gradient_synchronization(self) -> None:
        with nvtx_range("allreduce_wait"):
            for i, bucket in enumerate(self.buckets):
                if i not in self._works and self._ready[i]:
                    # some parameter got no gradient this step: its slot holds zeros
                    for p in bucket:
                        if p.grad is None:
                            self._views[id(p)].zero_()
                            p.grad = self._views[id(p)]
                    self._launch(i)
            for i in sorted(self._works):
                self._works[i].wait()
                self._finish_average(self._buffers[i])
        self._works.clear()
        self._ready = [0] * len(self.buckets)

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []


def wrap(module: nn.Module, variant: str, bucket_size_mb: float = 25.0, process_group=None) -> _DataParallel:
    """The data-parallel wrapper named ``variant`` (one of VARIANTS) around ``module``."""
    if variant == "naive":
        return NaiveDDP(module, process_group)
    if variant == "flat":
        return FlatDDP(module, process_group)
    if variant == "overlap":
        return OverlapDDP(module, process_group)
    if variant == "bucketed":
        return BucketedDDP(module, bucket_size_mb, process_group)
    raise ValueError(f"unknown DDP variant {variant!r}; choose from {VARIANTS}")
