"""analyze.early_memory: the early reader's memory file, its pages allocated ahead on a thread until taken."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
from profiler_kit.analyze import early_memory

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="memory files (memfd) are Linux's")


def _allocated_bytes(fd: int) -> int:
    return os.fstat(fd).st_blocks * 512


def test_pages_are_allocated_ahead_up_to_the_limit(monkeypatch):
    monkeypatch.setattr(early_memory, "STEP", 1 << 20)
    pages = early_memory.PagesAhead(3 << 20)
    pages.thread.join(timeout=30)  # it stops by itself at the limit
    fd = pages.take()
    try:
        assert os.fstat(fd).st_size == 3 << 20
        assert _allocated_bytes(fd) >= 3 << 20  # allocated, not only sized: the reader's writes find the pages
    finally:
        os.close(fd)


def test_take_stops_the_thread_at_once(monkeypatch):
    monkeypatch.setattr(early_memory, "STEP", 1 << 16)
    pages = early_memory.PagesAhead(1 << 40)  # more than it could allocate before the take
    time.sleep(0.01)
    fd = pages.take()
    try:
        assert not pages.thread.is_alive()
        assert threading.active_count() == 1  # the fork that follows wants no other thread
        size = os.fstat(fd).st_size
        time.sleep(0.05)
        assert os.fstat(fd).st_size == size == pages.allocated  # nothing allocated after the take
    finally:
        os.close(fd)


def test_close_stops_and_closes_the_file():
    pages = early_memory.PagesAhead(1 << 20)
    pages.close()
    assert not pages.thread.is_alive()
    with pytest.raises(OSError):
        os.fstat(pages.fd)


def test_start_sizes_by_the_export_and_gives_none_for_no_file(tmp_path):
    export = tmp_path / "x.sqlite"
    export.write_bytes(b"\0" * 1000)
    pages = early_memory.PagesAhead.start(export)
    assert pages is not None and pages.limit == 1000
    pages.close()
    assert early_memory.PagesAhead.start(tmp_path / "missing.sqlite") is None
