"""profiler_kit.analyze.heap: after keep_freed_memory, arrays freed by a report are reused without new page faults."""

import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt tuning applies to glibc only")

SCRIPT = """
import resource, sys
import numpy as np
from profiler_kit.analyze.heap import LARGEST_HEAP_BLOCK, keep_freed_memory
if sys.argv[1] == "keep":
    keep_freed_memory(1 << 30, LARGEST_HEAP_BLOCK)
def faults_of_fresh_arrays():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [np.ones(1 << 20) for _ in range(4)]  # 8 MiB each: 2048 pages of 4 KiB
    del arrays
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(*[faults_of_fresh_arrays() for _ in range(3)])
"""


def fault_counts(mode: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True, cwd=ROOT)
    return [int(x) for x in out.stdout.split()]


@glibc
def test_freed_arrays_are_reused_without_faults():
    first, *again = fault_counts("keep")
    assert first >= 1024  # the first arrays are new memory
    assert max(again) < 100  # the same arrays again: the freed memory, kept


@glibc
def test_default_malloc_faults_them_in_again():
    """What the tuning is for: by default the freed arrays go back to the system and come back as new pages."""
    assert max(fault_counts("default")[1:]) >= 1024


THREAD_SCRIPT = """
import resource, sys, threading
import numpy as np
from profiler_kit.analyze.heap import LARGEST_HEAP_BLOCK, keep_freed_memory, share_one_arena
keep_freed_memory(1 << 30, LARGEST_HEAP_BLOCK)
if sys.argv[1] == "shared":
    share_one_arena()
arrays = [np.ones(1 << 20) for _ in range(4)]  # 8 MiB each, freed by this thread
del arrays
faults = []
def other_thread():
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    arrays = [np.ones(1 << 20) for _ in range(4)]
    faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
thread = threading.Thread(target=other_thread)
thread.start()
thread.join()
print(faults[0])
"""


def thread_faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", THREAD_SCRIPT, mode], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@glibc
@pytest.mark.skipif(not hasattr(__import__("resource"), "RUSAGE_THREAD"), reason="per-thread page faults: Linux")
def test_another_thread_reuses_what_the_main_thread_freed():
    assert thread_faults("shared") < 100  # one arena: the main thread's freed arrays
    assert thread_faults("default") >= 1024  # glibc's default: the thread's own arena, fresh pages


def test_elsewhere_nothing_is_called(monkeypatch):
    """On macOS or Windows (no glibc; ctypes.CDLL(None) fails on Windows) the tuning returns quietly."""
    import ctypes

    from profiler_kit.analyze import heap

    def no_library(*args, **kwargs):
        raise AssertionError("a C library was loaded")

    monkeypatch.setattr(heap.sys, "platform", "win32")
    monkeypatch.setattr(ctypes, "CDLL", no_library)
    heap.keep_freed_memory(1 << 30, heap.LARGEST_HEAP_BLOCK)
    heap.share_one_arena()


def test_release_beside_drops_the_objects_on_another_thread():
    """The last references go on a thread of its own: what their release costs (unmapping a trace's shared
    columns) is not this thread's."""
    import threading

    from profiler_kit.analyze import heap

    released_on = []

    class Held:
        def __del__(self):
            released_on.append(threading.current_thread())

    objects = [Held(), Held()]
    heap.release_beside(objects)
    for thread in threading.enumerate():
        if thread.name == "profiler-kit-release":
            thread.join()
    assert objects == []
    assert len(released_on) == 2 and threading.main_thread() not in released_on
