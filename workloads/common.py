"""Shared workload plumbing: named ranges both profilers see, and device sync.

NVTX ranges are what nsys records; ``record_function`` ranges are what the
PyTorch profiler records (it does not see NVTX). ``nvtx_range`` emits both, so
a report can refer to the same names whichever backend made the trace.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
from collections.abc import Iterator

import torch

# Fixed phase names: reports and tests look ranges up by these.
PHASES = ("warmup", "step", "forward", "backward", "optimizer")


@functools.cache
def _nvtx_c_library():
    """A C NVTX library through ctypes, or None.

    Debian's nsys 2022.4 records push/pop ranges from ``nvtxRangePushA`` in
    libnvtx3interop / libnvToolsExt but none from the ``nvtx`` PyPI package
    (0.2.17: only its domain creation shows up), so CPU runs prefer the C library.
    """
    names = ["libnvtx3interop.so.1", "libnvToolsExt.so.1", "libnvToolsExt.so"]
    names += sorted(glob.glob("/usr/local/cuda*/lib*/libnvtx3interop.so*"))
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if hasattr(lib, "nvtxRangePushA") and hasattr(lib, "nvtxRangePop"):
            return lib
    return None


def _nvtx_push(name: str) -> bool:
    if torch.cuda.is_available():
        torch.cuda.nvtx.range_push(name)
        return True
    lib = _nvtx_c_library()
    if lib is not None:
        lib.nvtxRangePushA(name.encode())
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
    lib = _nvtx_c_library()
    if lib is not None:
        lib.nvtxRangePop()
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


def emit_json(result, out: str | None) -> None:
    """Write a workload's JSON result to ``out``, or print it when no path is given."""
    import json
    from pathlib import Path

    text = json.dumps(result, indent=1)
    if out:
        Path(out).write_text(text)
    else:
        print(text)
