"""The time windows of one nsys export as independent tasks (on Dask: ``report --window --workers N`` or
``--scheduler``), so that a cluster shares one export larger than memory.

``analyze.windows`` chains each window to the one before: launch calls are carried while a later op could still
have their correlation id, NVTX ranges while a later launch could lie inside them, and the GPU busy time's last
piece. Here a first pass (``plan``) works out what each window receives, so every window is a task of its own:

1. ``windows.split`` (the same spill files), noting per window and device the latest end of a GPU op.
2. ``carries``: per window the smallest correlation id of the ops of later windows (``Split.later_ids``) says
   up to which window each launch call is carried; from those calls the range eviction bound of each window's
   end (its edge, or the earliest carried call's start: ``windows._second_pass``'s); from that, up to which window
   each NVTX range is carried. The carried rows (few: calls whose op runs a window later, ranges open at an edge)
   go to two more spill files, each with the last window that receives it. This pass reads the runtime and NVTX
   spills once more, a window at a time.
3. ``window_task``: one window's rows, the calls and ranges carried into it, reduced to ``windows.Partials`` and
   a ``window_ranges.RangeWindows`` state exactly as ``windows._second_pass`` would, except that a range carried
   in from an earlier window is projected onto but not finished (its sums so far are elsewhere), and the GPU busy
   time counts only what the earlier windows' ops do not cover: their union reaches past this window's start to
   the latest end among them (noted in 1), so this window adds the length of its ops' union with that stretch,
   less the stretch.
4. ``merge``: the tasks' results in window order, names matched by text, sums added; a range open at some edge
   is finished once its sums from every window it spans are in; a (range, kernel) key that two windows count
   for one range counts once. The report's tables are then those of ``windows.tables_of``, to the bit.

The tasks read the spill files: ``scratch`` (``report --tmp``) must be a folder every worker sees at the same
path (a shared filesystem on a cluster; the default, the system's temporary folder, serves a local cluster).
Each task returns small partial tables (distinct (name, duration) pairs, per-name sums, the ranges open at its
edges); the client holds them until all are in.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.nsys_schema import MISSING, NVTX_TABLE, RUNTIME_TABLE
from profiler_kit.analyze.nsys_sqlite import Export, pids_of, runtime_calls
from profiler_kit.analyze.window_ranges import RangeWindows
from profiler_kit.analyze.windowing import WINDOW_ROWS
from profiler_kit.analyze.windows import (
    Names,
    Nvtx,
    Partials,
    Spill,
    Split,
    WindowedResult,
    _window_trace,
    add_window,
    export_header,
    first_pass,
    range_frame,
    read_pieces,
    tables_of,
)

NEVER = 1 << 62  # a bound no timestamp or correlation id reaches (``windows._add_launches``' own)
CALL_COLUMNS = ["start_ns", "end_ns", "pid", "tid", "correlation_id"]  # what a carried launch call keeps
Piece = tuple[str, list[str], list[tuple[int, int]]]  # a spill's path, its columns, (byte offset, rows) to read


@dataclass
class Carries:
    """What the windows pass on (``carries``): per window w, the source windows whose carried calls and ranges
    reach w, where w's carried ranges may be finished (``before``), and per device the latest end of an op of
    the windows before w (``reach``)."""

    calls: Spill | None
    ranges: Spill | None
    calls_into: list[list[int]]
    ranges_into: list[list[int]]
    before: np.ndarray
    reach: list[dict[int, int]]


def carries(info: Split, folder: Path) -> Carries:
    """The second look at the spills (module docstring, 2)."""
    n = info.windows
    later = info.later_ids()
    pids = sorted({pid for per in later for pid in per})
    floors = {pid: np.array([per.get(pid, NEVER) for per in later], dtype=np.int64) for pid in pids}
    earliest = np.full(n + 1, NEVER, dtype=np.int64)  # per window: the earliest start of a call carried into it

    def note_earliest(u: int, carried: pd.DataFrame) -> None:
        for to, start in carried.groupby("last")["start"].min().items():
            earliest[u + 1 : int(to) + 1] = np.minimum(earliest[u + 1 : int(to) + 1], int(start))

    calls_spill, calls_last = _spill_carried(
        info.spills.get(RUNTIME_TABLE),
        n,
        lambda rows: _last_windows(rows, floors),
        folder / "carried_calls.bin",
        note_earliest,
    )
    edges = np.r_[info.edges, NEVER].astype(np.int64)
    before = np.minimum(edges, earliest[1:])  # windows._second_pass's bound at each window's end

    def last_ranges(rows: pd.DataFrame) -> np.ndarray:
        end = rows["end"].to_numpy()
        end = np.where(end != MISSING, end, info.nvtx_last)  # an unclosed range ends at the last timestamp
        # A range is still open to the launches of window w while its end is not before the bound of every window
        # from its own to w - 1; the bounds never fall, so while it is not before w - 1's.
        return np.searchsorted(before, end, side="right")

    ranges_spill, ranges_last = _spill_carried(
        info.spills.get(NVTX_TABLE), n, last_ranges, folder / "carried_ranges.bin"
    )
    return Carries(
        calls_spill,
        ranges_spill,
        [[u for u in range(w) if calls_last[u] >= w] for w in range(n)],
        [[u for u in range(w) if ranges_last[u] >= w] for w in range(n)],
        before,
        _reaches(info.reach or {}, n),
    )


def _spill_carried(source: Spill | None, n: int, last_windows, path: Path, on_carried=None):
    """The rows of each window of ``source`` that reach a later window (``last_windows(rows)``: per row, the last
    window it reaches), spilled to ``path`` tagged with their own window and that last one; and per window the
    last window any of its rows reaches (-1: none)."""
    spill, last_of = None, np.full(n, -1, dtype=np.int64)
    for u in range(n if source is not None else 0):
        rows = source.take(u)
        if not len(rows):
            continue
        last = last_windows(rows)
        kept = last > u
        if not kept.any():
            continue
        carried = rows[kept].assign(last=last[kept])
        spill = spill or Spill(path, list(carried.columns))
        spill.add(carried, np.full(len(carried), u, dtype=np.int64))
        last_of[u] = int(carried["last"].max())
        if on_carried is not None:
            on_carried(u, carried)
    return spill, last_of


def _last_windows(rows: pd.DataFrame, floors: dict[int, np.ndarray]) -> np.ndarray:
    """Per launch call of window u: the last window it is carried into (u or less: none). ``windows._add_launches``
    keeps a call at window v while its correlation id is at least v's floor for its process (the smallest id of
    an op of a later window); floors never fall from window to window, so it is kept into every window w whose
    w - 1 has a floor at or below the id."""
    cid = rows["correlationId"].to_numpy()
    pid = pids_of(rows["globalTid"].to_numpy(), missing=None)
    last = np.full(len(rows), -1, dtype=np.int64)
    for p in pd.unique(pid).tolist():
        floor = floors.get(int(p))
        if floor is not None:
            mine = pid == p
            last[mine] = np.searchsorted(floor, cid[mine], side="right")
    return np.where(cid >= 0, last, -1)


def _reaches(reach: dict[int, dict[int, int]], n: int) -> list[dict[int, int]]:
    """Per window w, per device: the latest end of an op of the windows before w."""
    out, running = [], {}
    for w in range(n):
        out.append(dict(running))
        for device, end in reach.get(w, {}).items():
            running[device] = max(end, running.get(device, end))
    return out


@dataclass
class WindowJob:
    """One window's task: where its rows are, and the little it needs from the first pass."""

    path: str  # the export
    folder: str  # the spill folder (``texts.pickle``: the NVTX texts and domain creations)
    window: int
    windows: int
    tables: dict[str, Piece]
    calls: list[Piece]  # carried launch calls of earlier windows (filtered by their last window)
    ranges: list[Piece]  # carried NVTX range rows of earlier windows
    later: dict[int, int]  # per process: the smallest correlation id of the ops of later windows
    start: int  # the window's first timestamp (its left edge; the first window: none)
    reach: dict[int, int]  # per device: the latest end of an op of earlier windows, where past ``start``
    before: int  # ranges of this window that end before it are finished here
    nvtx_last: int
    has_ranges: bool

    def __str__(self) -> str:
        return f"{self.path} (time window {self.window + 1} of {self.windows})"


@dataclass
class WindowPart:
    """What a window task returns: its partial tables."""

    window: int
    partials: Partials
    ranges: RangeWindows


def jobs(path: Path, folder: Path, info: Split, carry: Carries) -> list[WindowJob]:
    """Every window's task."""
    out = []
    later = info.later_ids()
    for w in range(info.windows):
        start = int(info.edges[w - 1]) if w else -NEVER
        tables = {t: (str(s.path), s.columns, s.pieces.get(w, [])) for t, s in info.spills.items()}
        out.append(
            WindowJob(
                str(path),
                str(folder),
                w,
                info.windows,
                {t: piece for t, piece in tables.items() if piece[2]},
                _pieces(carry.calls, carry.calls_into[w]),
                _pieces(carry.ranges, carry.ranges_into[w]),
                later[w],
                start,
                {d: r for d, r in carry.reach[w].items() if r > start},
                int(carry.before[w]),
                info.nvtx_last,
                info.nvtx_ranges > 0,
            )
        )
    return out


def _pieces(spill: Spill | None, sources: list[int]) -> list[Piece]:
    if spill is None:
        return []
    return [(str(spill.path), spill.columns, spill.pieces[u]) for u in sources if u in spill.pieces]


def window_task(job: WindowJob) -> WindowPart:
    """One window reduced to partial tables (module docstring, 3)."""
    from profiler_kit import process

    if _on_a_worker():
        process.prepare_worker()
    process.tune_windows()
    exp, strings, nvtx = _opened(job.path, job.folder)
    rows = {t: read_pieces(*piece) for t, piece in job.tables.items()}
    trace, kernel_rowid, runtime_ids = _window_trace(exp, rows, strings, nvtx, job.nvtx_last)
    p = Partials()
    p.busy = {d: [0, job.start, r] for d, r in job.reach.items()}  # the earlier ops' union past this window's start
    calls = _carried(job.calls, job.window)
    if len(calls):
        p.launch_carry = runtime_calls(calls, strings)[CALL_COLUMNS]
    ops, launched = add_window(p, trace, kernel_rowid, runtime_ids, job.later)
    p.busy = {
        d: [done + end - start - max(0, job.reach.get(d, job.start) - job.start), 0, 0]
        for d, (done, start, end) in p.busy.items()
    }
    p.launch_carry = None
    ranges = RangeWindows(job.has_ranges)
    carried = range_frame(_carried(job.ranges, job.window), strings, nvtx, job.nvtx_last)
    ranges.add(trace.nvtx if len(trace.nvtx) else None, ops, launched, kernel_rowid, carried=carried)
    keep = carried.index.to_numpy() if carried is not None else None
    ranges.evict(job.before, keep=keep)
    return WindowPart(job.window, p, ranges.shipped())


def _on_a_worker() -> bool:
    """Whether this runs on a Dask worker (not in the process that shares the windows with its local cluster)."""
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return False
    return True


def _carried(pieces: list[Piece], window: int) -> pd.DataFrame:
    """The carried rows of ``pieces`` that reach ``window``, in window and table order, without their last window."""
    if not pieces:
        return pd.DataFrame()
    rows = pd.concat([read_pieces(*piece) for piece in pieces], ignore_index=True)
    return rows[rows["last"].to_numpy() >= window].drop(columns="last").reset_index(drop=True)


_OPENED: dict[str, tuple] = {}  # this process's export of the tasks, its strings and NVTX texts


def _opened(path: str, folder: str) -> tuple[Export, pd.Series, Nvtx]:
    """The export, its strings and the NVTX texts of the first pass, once per process and export (a worker runs
    many windows of one export): the last one kept, an earlier one closed."""
    from profiler_kit.analyze.nsys_sqlite import _strings

    key = f"{path}\0{folder}"
    if key not in _OPENED:
        if not (Path(folder) / "texts.pickle").is_file():
            raise InputError(
                f"{path}: this worker does not see the spill folder {folder}: give report --tmp a folder that every "
                "worker sees at the same path (a shared filesystem)"
            )
        forget_opened()
        exp = Export(Path(path))
        with open(Path(folder) / "texts.pickle", "rb") as fh:
            _OPENED[key] = (exp, _strings(exp), pickle.load(fh))
    return _OPENED[key]


def forget_opened() -> None:
    """Close this process's export of the tasks (``_opened``)."""
    for exp, _, _ in _OPENED.values():
        exp.close()
    _OPENED.clear()


def merge(parts: list[WindowPart], has_ranges: bool) -> tuple[Partials, RangeWindows]:
    """The window tasks' results, in window order, as one (module docstring, 4)."""
    p, ranges = Partials(), RangeWindows(has_ranges)
    for part in sorted(parts, key=lambda part: part.window):
        absorb(p, part.partials)
        ranges.absorb(part.ranges)
    return p, ranges


def absorb(p: Partials, q: Partials) -> None:
    """Add a later window's partial tables ``q`` to ``p``."""
    kernels = _names(p.kernel_names, q.kernel_names)
    _counts(p.kernels, q.kernels, kernels)
    for i, category in q.kernel_category.items():
        p.kernel_category.setdefault(int(kernels[i]), category)
    memops = _names(p.memop_names, q.memop_names)
    _counts(p.memop_time, q.memop_time, memops)
    _counts(p.memop_bytes, q.memop_bytes, memops)
    _counts(p.api, q.api, _names(p.api_names, q.api_names))
    p.category_count += q.category_count
    p.category_ns += q.category_ns
    for name, n in q.counts.items():
        p.count(name, n)
    p.first, p.last = min(p.first, q.first), max(p.last, q.last)
    p.gpu_first, p.gpu_last = min(p.gpu_first, q.gpu_first), max(p.gpu_last, q.gpu_last)
    for device, (ns, _, _) in q.busy.items():
        p.busy[device] = [p.busy.get(device, [0])[0] + ns, 0, 0]
    p.pids |= q.pids


def _names(mine: Names, theirs: Names) -> np.ndarray:
    """``theirs``' ids as ``mine``'s (new names added, each keeping the smaller key)."""
    ids = np.empty(len(theirs.ids), dtype=np.int64)
    for name, j in theirs.ids.items():
        i = mine.ids.setdefault(name, len(mine.ids))
        if i == len(mine.key):
            mine.key.append(1 << 62)
        mine.key[i] = min(mine.key[i], theirs.key[j])
        ids[j] = i
    return ids


def _counts(mine, theirs, ids: np.ndarray) -> None:
    theirs.compact()
    if len(theirs.groups):
        mine.add(ids[theirs.groups], theirs.values, theirs.counts)


def analyze_window_tasks(
    path: str | Path,
    run: Callable,
    window_rows: int = WINDOW_ROWS,
    on_window: Callable[[int, int], None] | None = None,
    scratch: str | Path | None = None,
) -> WindowedResult:
    """The report's tables of one nsys export, its windows analysed as independent tasks: the result of
    ``windows.analyze_windows``, to the bit.

    ``run(fn, jobs, on_done)`` runs ``fn`` on every job and returns the results in job order, raising the
    first failure (``parallel.Session.map``); ``on_window(done, windows)`` is called as each task ends. The
    spill files go in a temporary folder under ``scratch`` (every worker must see it at the same path),
    removed at the end.
    """
    path = Path(path)
    exp = Export(path)
    folder = None
    try:
        meta, gpus = export_header(exp, path)
        folder = Path(tempfile.mkdtemp(prefix="profiler-kit-windows-", dir=scratch))
        info, nvtx = first_pass(exp, folder, window_rows, reach=True)
        carry = carries(info, folder)
        with open(folder / "texts.pickle", "wb") as fh:
            pickle.dump(nvtx, fh, protocol=pickle.HIGHEST_PROTOCOL)
        done = {"n": 0}

        def finished(_job) -> None:
            done["n"] += 1
            if on_window is not None:
                on_window(done["n"], info.windows)

        parts = run(window_task, jobs(path, folder, info, carry), finished)
        partials, ranges = merge(parts, info.nvtx_ranges > 0)
        return WindowedResult(meta, tables_of(partials, gpus, info, ranges), info.windows)
    finally:
        exp.close()
        forget_opened()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
