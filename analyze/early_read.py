"""A big export's kernel, NVTX and runtime tables, read from its pages by a forked process while the report imports pandas.

Why a process: the page reader (``analyze.sqlite_pages``) needs half the CPU of the ADBC driver,
but it takes the GIL between its numpy steps, so on a thread beside the imports (which hold the
GIL) it crawled. A forked process has a GIL of its own and reads the tables on the second core.

The hand-over copies nothing: the child puts its arrays in an anonymous memory file
(``os.memfd_create``) and the parent maps the same pages. That file has no name in any folder,
so nothing is left behind, whichever process is killed. For each table the child writes one line
to a pipe: where its columns lie in the file, or null where the page reader did not take the table.
A table the child did not deliver (not the plain case, the child failed or died) is read by the
parent as it would have been without the child (``nsys_schema.fetch_integers``). The child never
prints (its standard streams are /dev/null) and always ends in ``os._exit``; the parent kills (if
need be) and reaps it at exit.

Linux only (memfd), and only from a process without other Python threads (a fork copies only the
calling thread; a lock another thread held would stay locked in the child). Elsewhere ``start``
starts nothing and the report reads as before.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import mmap
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, NoReturn

from profiler_kit.analyze.heap import LARGEST_HEAP_BLOCK, keep_freed_memory
from profiler_kit.analyze.nsys_schema import IntegerRead, fetch_integers, fetch_sql, output_columns, page_columns

if TYPE_CHECKING:
    from profiler_kit.analyze.early_memory import PagesAhead

ALIGN = mmap.ALLOCATIONGRANULARITY  # each column is mapped on its own, from an offset that is a multiple of this
KEPT_HEAP_BYTES = 64 << 20  # well above the few MiB of scratch arrays one step of the page reader takes


def start(reads: list[IntegerRead], pages: PagesAhead | None = None) -> dict[IntegerRead, EarlyRead]:
    """Fork a child that reads ``reads`` (whole tables, ``root`` set) from the pages; a handle per read.

    Empty when nothing was started: not Linux, other threads running, or the fork failed.
    numpy (with the page reader, which ``nsys_schema`` imports) is loaded before the fork, so that the
    child starts reading at once (importing it in both processes at once took each twice as long); the
    report imports it next anyway. ``pages``: the memory file to hand the tables over in, its first pages
    allocated already (``analyze.early_memory``); taken (and closed here if nothing starts).
    """
    memory = pages.take() if pages is not None else None
    if not reads or sys.platform != "linux" or not hasattr(os, "memfd_create") or threading.active_count() > 1:
        if memory is not None:
            os.close(memory)
        return {}
    opened: list[int] = []
    try:
        opened.append(memory if memory is not None else os.memfd_create("profiler-kit-early-read", os.MFD_CLOEXEC))
        opened.extend(os.pipe())
        pid = os.fork()
    except OSError:
        for fd in opened:
            os.close(fd)
        return {}
    memfd, pipe, to_parent = opened
    if pid == 0:
        _child(reads, memfd, to_parent)
    os.close(to_parent)
    child = Child(pid, pipe, memfd, reads)
    atexit.register(child.stop)
    return {read: EarlyRead(child, read) for read in reads}


class EarlyRead:
    """One table's early read, as ``nsys_prefetch.Prefetch.take`` hands it to the reader."""

    def __init__(self, child: Child, read: IntegerRead):
        self.child, self.read = child, read

    def result(self):
        """The read's output columns (int64 arrays): the child's, else read here as without it.

        A table the child's page reader declined goes straight to SQL: the pages would decline it again.
        """
        answered, columns = self.child.columns(self.read)
        if columns is not None:
            return output_columns(self.read, columns)
        return fetch_sql(self.read) if answered else fetch_integers(self.read)


class Child:
    """The parent's side of the child: its lines as they come, its columns mapped from the memory file."""

    def __init__(self, pid: int, pipe: int, memfd: int, reads: list[IntegerRead]):
        self.pid, self.pipe, self.memfd, self.reads = pid, pipe, memfd, reads
        # The reader asks for the tables on several threads. One at a time reads the pipe, without the lock:
        # a thread waiting for the runtime table must not hold up one whose NVTX table has come.
        self.arrived = threading.Condition()
        self.receiving = False
        self.received = b""
        self.delivered: dict[int, dict | None] = {}
        self.pending = set(range(len(reads)))

    def columns(self, read: IntegerRead) -> tuple[bool, dict | None]:
        """Whether the child answered for ``read`` (waiting for it), and the source columns it read (None: declined)."""
        index = self.reads.index(read)
        with self.arrived:
            while index in self.pending and self.pipe >= 0:
                if self.receiving:  # another thread reads the pipe: it tells when lines have come
                    self.arrived.wait()
                    continue
                self.receiving = True
                self.arrived.release()
                try:
                    chunk = self._read_pipe()
                finally:
                    self.arrived.acquire()
                    self.receiving = False
                self._receive(chunk)
                self.arrived.notify_all()
            self.pending.discard(index)
            if not self.pending:
                self._close_files()
            return index in self.delivered, self.delivered.pop(index, None)

    def _read_pipe(self) -> bytes:
        """What the child has written since, waiting for it; b"" at its end or on any error."""
        try:
            return os.read(self.pipe, 1 << 16)
        except OSError:
            return b""

    def _receive(self, chunk: bytes) -> None:
        """Take the lines of ``chunk``; at the child's end (empty) or anything odd no more come."""
        if not chunk:
            self._close_files()
            return
        try:
            *lines, self.received = (self.received + chunk).split(b"\n")
            for line in lines:
                index, where = json.loads(line)
                self.delivered[index] = None if where is None else {c: self._map(*at) for c, at in where.items()}
                self.pending.discard(index)
        except (OSError, ValueError, TypeError):
            self._close_files()

    def _map(self, offset: int, rows: int):
        """A column of the memory file, its pages mapped at once (one call, not a fault per page)."""
        import numpy as np

        if not rows:
            return np.empty(0, dtype=np.int64)
        if os.fstat(self.memfd).st_size < offset + 8 * rows:  # never from this module's child; no SIGBUS if so
            raise ValueError("early read: column outside the memory file")
        pages = mmap.mmap(self.memfd, 8 * rows, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, offset=offset)
        return np.frombuffer(pages, dtype=np.int64)

    def _close_files(self) -> None:
        """No more lines: close the pipe and the memory file (mapped columns stay valid)."""
        for fd in (self.pipe, self.memfd):
            if fd >= 0:
                os.close(fd)
        self.pipe = self.memfd = -1

    def stop(self) -> None:
        """Kill the child if it still runs and reap it (at exit, a child that has ended is only reaped).

        Until it is reaped its pid stays its own, so the kill cannot hit another process.
        """
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = 0
        with self.arrived:
            # A thread still in its read of the pipe has the child's end by now: let it finish with the pipe.
            self.arrived.wait_for(lambda: not self.receiving, timeout=5)
            self._close_files()


class Arena:
    """int64 arrays in a memory file, one after another, each mapped on its own; where each one lies."""

    def __init__(self, fd: int):
        self.fd, self.end = fd, 0
        self.size = os.fstat(fd).st_size  # pages allocated ahead (analyze.early_memory) are used first
        self.where: dict[int, tuple[int, int]] = {}  # id of an array -> (offset, rows)

    def allocate(self, rows: int):
        import numpy as np

        if not rows:
            return np.empty(0, dtype=np.int64)
        offset = self.end
        self.end += -(-8 * rows // ALIGN) * ALIGN
        if self.end > self.size:  # never shrinks the file: that would drop pages allocated ahead
            os.ftruncate(self.fd, self.end)
            self.size = self.end
        values = np.frombuffer(mmap.mmap(self.fd, 8 * rows, offset=offset), dtype=np.int64)
        self.where[id(values)] = (offset, rows)
        return values

    def place(self, values) -> tuple[int, int]:
        return self.where[id(values)] if len(values) else (0, 0)


def _child(reads: list[IntegerRead], memfd: int, to_parent: int) -> NoReturn:
    """Read each table from the pages into the memory file and say where on the pipe, one line a table."""
    status = 1
    try:
        quiet = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(quiet, fd)
        # Each step of the page reader frees scratch arrays the next one needs: kept, not faulted in afresh
        # (0.06 s of the child's 0.55 s on the 150-copy export). Its big arrays live in the memory file.
        keep_freed_memory(KEPT_HEAP_BYTES, LARGEST_HEAP_BLOCK)
        arena = Arena(memfd)
        for index, read in enumerate(reads):
            columns = page_columns(read, arena.allocate)
            where = None if columns is None else {c: arena.place(values) for c, values in columns.items()}
            os.write(to_parent, json.dumps([index, where]).encode() + b"\n")
        status = 0
    finally:
        os._exit(status)
