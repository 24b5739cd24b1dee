"""Reads of a big export's tables started before the report needs them: one ``Prefetch`` object, made by the CLI.

It is made and started before the report imports pandas (``start``), handed down to the reader
(``read_trace(..., prefetched=)``), which takes each read's result once (``take``). A process
that never makes one reads every table when it needs it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.nsys_schema import KERNEL_TABLE, LEAN_READS, Catalog, IntegerRead, adbc_sqlite, fetch_sql

if TYPE_CHECKING:  # imported where used: a report imports this module before the fork in ``start``
    from concurrent.futures import Future, ThreadPoolExecutor

    from profiler_kit.analyze.early_memory import PagesAhead


class Prefetch:
    """The reads started early, by ``IntegerRead``: futures, or ``early_read.EarlyRead`` (anything with result()).

    ``pages``: the early read's memory file, its pages being allocated already (``analyze.early_memory``); the
    first ``start`` takes it (and closes it where it forks no reader).
    """

    def __init__(self, pages: PagesAhead | None = None) -> None:
        self.started: dict[IntegerRead, Future] = {}
        self.pool: ThreadPoolExecutor | None = None
        self.pages = pages

    def start(self, path: Path) -> None:
        """Start reading an export's kernel, NVTX and runtime tables as a report will, while it imports pandas.

        Before pandas is imported, on Linux, a forked process reads them from the pages (``analyze.early_read``):
        it has the second core while the imports hold this one, and the page reader needs half the CPU of the
        ADBC driver (150-copy export, whole report without cache, medians of 15 alternating runs on a 2-core VM:
        1.18 s; 1.38 s before, with the kernel table through the driver on a thread). Elsewhere, or where pandas
        is imported already, the kernel table is read on a thread through the ADBC driver, whose read is one call
        that releases the GIL (the page reader on a thread takes the GIL between its steps, and beside the imports
        it lost: 1.64 s against 1.47 s), and the runtime table is left to the reader. ``take`` hands a result to
        the reader when it asks for the same read; anything that goes wrong here is left for the reader to find
        and report.
        """
        pages, self.pages = self.pages, None
        try:
            catalog = Catalog(path)
            try:
                reads = [read(catalog) for table, read in LEAN_READS.items() if catalog.has(table)]
            finally:
                catalog.close()
        except (OSError, InputError):
            reads = []  # left for the reader to report
        if reads and "pandas" not in sys.modules:  # a process with pandas (a test, a notebook) has no imports left
            from profiler_kit.analyze.early_read import start

            self.started.update(start([read for read in reads if read.root], pages))  # it takes the pages
        elif pages is not None:
            pages.close()
        kernels = [read for read in reads if read.table == KERNEL_TABLE and read not in self.started]
        if not kernels or adbc_sqlite() is None:
            return
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsys-prefetch")
        self.started[kernels[0]] = self.pool.submit(fetch_sql, kernels[0])

    def take(self, read: IntegerRead) -> Future | None:
        """The prefetched result of ``read``, once (None when there is none)."""
        return self.started.pop(read, None) if self.started else None
