"""How much freed memory this process's malloc (glibc) keeps for its next arrays instead of giving it back.

By default glibc maps each block over 128 KiB on its own and unmaps it when freed, and gives the top of
its heap back to the system once 128 KiB lie free there. A report allocates and frees arrays of a
million rows all the time, so each new one was faulted in afresh, a page at a time (1-2 us a page on
these VMs), and each freed one unmapped. Kept memory is reused with no fault; it goes back at exit.
Where there is no glibc (macOS, Windows, musl), nothing changes.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading

M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc's malloc.h)
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
LARGEST_HEAP_BLOCK = 32 << 20  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit: blocks up to 32 MiB come from the heap


def keep_freed_memory(kept_bytes: int, heap_blocks_up_to: int | None = None) -> None:
    """Let malloc keep up to ``kept_bytes`` free at its heap's top; blocks up to ``heap_blocks_up_to`` from the heap.

    Setting the second fixes glibc's threshold for mapping a block on its own (it would otherwise rise
    by itself only once a big block has been freed, after the first arrays were mapped and unmapped).
    """
    if not sys.platform.startswith("linux"):  # mallopt is glibc's (musl has a stub that ignores it)
        return
    _mallopt(M_TRIM_THRESHOLD, kept_bytes)
    if heap_blocks_up_to is not None:
        _mallopt(M_MMAP_THRESHOLD, heap_blocks_up_to)


def share_one_arena() -> None:
    """Let every thread started from now on allocate from the main thread's heap (glibc's default gives each new
    thread an arena of its own), so arrays one analysis thread freed serve the other's next ones, not fresh pages.

    Call it before other threads start. 150-copy export, 6 alternating pairs: 14k fewer page faults, 0.19 s less
    CPU, 0.10 s less wall, 56 MiB less peak (benchmarks/README.md, "Report speed").
    """
    if sys.platform.startswith("linux"):
        _mallopt(M_ARENA_MAX, 1)


def _mallopt(parameter: int, value: int) -> None:
    """glibc's mallopt; nothing where there is none."""
    import ctypes  # numpy imports it too

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(parameter, value)


def release_beside(objects: list) -> None:
    """Drop ``objects`` (the last references to them) on a thread of its own, beside the caller's next steps.

    A big export's trace ends mapped from the early reader's memory file (analyze/early_read.py): unmapping those
    columns frees their pages (118 MiB for 1.1M kernels and 1.4M runtime calls), 25-35 ms that ``munmap`` spends
    without the GIL, while this thread builds and renders the report (benchmarks/README.md, "Report speed").
    """
    threading.Thread(target=objects.clear, name="profiler-kit-release").start()


@contextlib.contextmanager
def gc_paused(freeze: bool = False):
    """Pause Python's cycle collector for a block that makes many objects holding no cycles (rows of numbers and
    strings: the collection every 700 new objects start cost 40-70 ms on a big export's NVTX rows; imports: passes
    over long-lived modules are wasted). ``freeze``: then move every object made so far out of later passes."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()
