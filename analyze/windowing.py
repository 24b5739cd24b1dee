"""When a report reads an nsys export a time window at a time (``analyze.windows``): settings and checks that
import nothing heavy, so the CLI decides before it starts an early read of the whole export.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

WINDOW_ROWS = 1 << 20  # kernel rows a window holds on average (about 1M: a few hundred MB of frames)
# Report sections a windowed report leaves out: each needs the whole trace at once.
LEFT_OUT = ("Why is it slow", "Ranks")
MEMORY_SHARE = 0.2  # an export larger than this share of the memory available is read in windows


@dataclass
class Windowing:
    """When a report reads an export in windows: ``always`` (``report --window``), else when it is larger than
    a fifth of the memory available; ``rows`` per window; ``on_window(done, windows)`` after each (a progress bar);
    ``scratch``, the folder of the spill files (``report --tmp``; default the system's temporary folder): with
    the windows on Dask workers (``analyze.window_tasks``), one every worker sees at the same path."""

    always: bool = False
    rows: int = WINDOW_ROWS
    on_window: Callable[[int, int], None] | None = None
    scratch: str | None = None

    refused: dict = field(default_factory=dict)  # path -> why it was read whole though windows were wanted

    def applies(self, path: Path) -> bool:
        """Whether ``path`` is read in windows: an nsys SQLite export, as asked or too big, that can be (else
        ``refused`` says why not)."""
        path = Path(path)
        if path.suffix != ".sqlite" or not (self.always or wants_windows(path)):
            return False
        reason = supported(path)
        if reason is not None:
            self.refused[str(path)] = reason
        return reason is None


def windowed_note(windows: int) -> str:
    """The sentence a windowed report carries."""
    return (
        f"Read in {windows} time window(s), one at a time (`--window`, or an export larger than a fifth of the "
        "memory available): every table below is exact, as read whole. Left out, as they need the whole trace at "
        f"once: {', '.join(LEFT_OUT)}."
    )


def supported(path: Path) -> str | None:
    """Why ``path`` cannot be read in windows (None: it can): CUDA graphs traced in it are not windowed yet."""
    from profiler_kit.analyze.nsys_schema import GRAPH_TRACE_TABLE, Catalog

    exp = Catalog(Path(path))
    try:
        if exp.has(GRAPH_TRACE_TABLE) or exp.graph_column is not None:
            return "CUDA graphs are traced in it"
        return None
    finally:
        exp.close()


def available_memory() -> int:
    """Bytes of memory available now (Linux's MemAvailable; elsewhere the physical memory)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def wants_windows(path: Path, share: float = MEMORY_SHARE) -> bool:
    """Whether an export is larger than ``share`` of the memory available (the in-memory report takes ~2.5x its size)."""
    return path.suffix == ".sqlite" and path.stat().st_size > share * available_memory()
