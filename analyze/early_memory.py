"""The early reader's memory file, its pages allocated ahead on a thread while the report imports numpy.

Why: the forked reader (``analyze.early_read``) writes the big tables' columns into an anonymous memory file,
and each fresh page of it cost the reader a fault (4-5 us a page on these VMs: 118 MiB, 0.1-0.15 s of the
reader's ~1 s on the 150-copy export, benchmarks/README.md "Report speed"). Until the fork the report runs on
one core; ``posix_fallocate`` on a thread allocates the pages on the other meanwhile (~2 GB/s, without the GIL),
a step at a time, and stops when ``take`` asks, before the fork (which wants no other thread). The reader fills
the file from its start: the pages allocated ahead serve its first columns, the rest come as before.

Linux only (memfd); elsewhere ``start`` gives None and the early read makes its own file.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

STEP = 8 << 20  # bytes allocated per call: the wait in ``take`` is at most one step (~4 ms)
MOST = 256 << 20  # never more ahead than this, whatever the export's size


class PagesAhead:
    """A memory file whose pages a thread allocates from its start, up to ``limit`` bytes, until ``take``."""

    def __init__(self, limit: int):
        self.fd = os.memfd_create("profiler-kit-early-read", os.MFD_CLOEXEC)
        self.limit, self.allocated = limit, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._allocate, name="profiler-kit-pages-ahead", daemon=True)
        self.thread.start()

    @classmethod
    def start(cls, export: Path) -> PagesAhead | None:
        """Start allocating for ``export`` (the columns read take about its size); None where there are no memory
        files."""
        if sys.platform != "linux" or not hasattr(os, "memfd_create") or not hasattr(os, "posix_fallocate"):
            return None
        try:
            return cls(min(export.stat().st_size, MOST))
        except (OSError, RuntimeError):  # no such file, no memory file, or no thread to be had
            return None

    def _allocate(self) -> None:
        while not self.stop.is_set() and self.allocated < self.limit:
            try:
                os.posix_fallocate(self.fd, self.allocated, STEP)
            except OSError:  # out of memory or not supported here: the reader's own faults allocate the rest
                return
            self.allocated += STEP

    def take(self) -> int:
        """Stop allocating (after the step under way) and hand over the file's descriptor, to be closed by the
        taker."""
        self.stop.set()
        self.thread.join()
        return self.fd

    def close(self) -> None:
        """Stop and close the file (not taken): its pages go with it."""
        with contextlib.suppress(OSError):
            os.close(self.take())
