"""Shared workload plumbing: named ranges both profilers see, and device sync.

NVTX ranges are what nsys records; ``record_function`` ranges are what the
PyTorch profiler records (it does not see NVTX). ``nvtx_range`` emits both, so
a report can refer to the same names whichever backend made the trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

# Fixed phase names: reports and tests look ranges up by these.
PHASES = ("warmup", "step", "forward", "backward", "optimizer")


def _nvtx_push(name: str) -> bool:
    if torch.cuda.is_available():
        torch.cuda.nvtx.range_push(name)
        return True
    try:  # CPU runs under nsys: the nvtx package, when installed, still emits ranges
        import nvtx  # type: ignore[import-not-found]
    except ImportError:
        return False
    nvtx.push_range(name)
    return True


def _nvtx_pop() -> None:
    if torch.cuda.is_available():
        torch.cuda.nvtx.range_pop()
        return
    import nvtx  # type: ignore[import-not-found]

    nvtx.pop_range()


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """A range named ``name`` for nsys (NVTX push/pop) and torch.profiler (record_function)."""
    pushed = _nvtx_push(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        if pushed:
            _nvtx_pop()


def sync(device: torch.device | str) -> None:
    """Wait for queued GPU work so host timers measure it (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
