"""Process tuning of the ``profiler-kit`` command, one sentence each (measured: benchmarks/README.md, "Report speed").

Imports nothing heavy: the CLI calls ``tune_environment`` before numpy, pandas or pyarrow is imported.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import sys
import threading

from profiler_kit.analyze.heap import gc_paused

REPORT_KEPT_BYTES = 1 << 30  # freed memory a report keeps for its next arrays (analyze/heap.py), not faulted in afresh

ENVIRONMENT = {
    # numpy's 2 MB page requests made each first touch wait for the kernel to compact memory.
    "NUMPY_MADVISE_HUGEPAGE": "0",
    # pyarrow's mimalloc pool zeroed whole 2 MB pages at first touch; the system allocator does not.
    "ARROW_DEFAULT_MEMORY_POOL": "system",
}


def tune_environment() -> None:
    """Set ``ENVIRONMENT`` where the user has not; must run before numpy and pyarrow are imported."""
    for name, value in ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def tune_report() -> None:
    """Settings of a report, before it imports numpy.

    One OpenBLAS thread: a report does no matrix products, and a thread per core spinning after import took 2%
    of a big report's CPU from the early reader. Freed arrays kept for the next ones (analyze/heap.py): 7% fewer
    page faults, about 0.03 s less on 1.1M kernels, 13 MiB more peak memory; and shared by the analysis threads
    (one malloc arena: ``heap.share_one_arena``).
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from profiler_kit.analyze.heap import LARGEST_HEAP_BLOCK, keep_freed_memory, share_one_arena

    keep_freed_memory(REPORT_KEPT_BYTES, LARGEST_HEAP_BLOCK)
    share_one_arena()


WINDOWED_KEPT_BYTES = 256 << 20  # freed memory kept by a report read in time windows (analyze/windows.py)


def tune_windows() -> None:
    """Settings of a report that reads an export in time windows: keep less freed memory (``tune_report`` keeps
    up to 1 GiB), so that its peak is the window's. The 1 GB export's report peaked at 1.30 GB with 1 GiB kept."""
    from profiler_kit.analyze.heap import LARGEST_HEAP_BLOCK, keep_freed_memory

    keep_freed_memory(WINDOWED_KEPT_BYTES, LARGEST_HEAP_BLOCK)


@functools.cache
def prepare_worker() -> None:
    """Once per Dask worker process (its first task): ``tune_report``, and what it has imported (Dask's objects
    and ours) frozen out of the cyclic collector's passes, as ``importing`` does for the command line."""
    tune_report()
    gc.freeze()


def importing():
    """Import without the cyclic garbage collector (passes over long-lived imports are wasted), then freeze them."""
    return gc_paused(freeze=True)


def run_and_exit(command) -> None:
    """Run ``command()``, then leave by ``os._exit`` after the exit handlers, skipping the interpreter's teardown.

    First, as the usual exit does, the threads still running (a cache write, a local Dask cluster closing) are
    waited for and idle pools' threads ended (``threading._shutdown``). Leaving the usual way once Dask had run
    took 1.0-1.5 s more (its teardown, measured under load ~8).
    """
    try:
        command()
        code = 0
    except SystemExit as done:
        code = done.code
    shutdown = getattr(threading, "_shutdown", None)  # CPython's own exit step; absent elsewhere: exit the usual way
    if shutdown is None or not isinstance(code, int | None):
        sys.exit(code)
    shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that closed the pipe, a stream closed already
            stream.flush()
    os._exit(code or 0)
