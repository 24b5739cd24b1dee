"""One nsys export larger than memory, analysed a time window at a time.

Why: the in-memory reader holds every kernel, runtime call and NVTX range at once (a 1 GB export took 2.5 GB).
Here the export is read twice, a piece at a time (``sqlite_pages.integer_chunks``, else SQLite by rowid):

1. ``split``: each row of the kernel, runtime, memcpy, memset and NVTX tables goes to the time window of its
   start, into a spill file per table (rows of a window in table order). Rows need not come in time order
   (nsys writes a buffer per thread, and ranks one after another): any order gives the same windows.
2. ``analyze_windows``: one window at a time, the next one loaded on a thread meanwhile, the window's rows
   become the same frames the in-memory reader makes (``nsys_sqlite.lean_kernels``, ``runtime_calls``,
   ``read_memops``), reduced to partial tables that merge exactly:

- per kernel name, memop name and API function: ``stats.ValueCounts`` of (name, duration) pairs. Durations
  repeat, so the distinct pairs are few; from them count, total, min, max, the median (middle values by rank)
  and the standard deviation (exact integer moments) are the in-memory figures to the bit. Names are ordered
  as the in-memory tables order them (first kernel row; smallest string id of an API name).
- categories, op counts and times: integer sums. GPU busy time: each window's union per device, the last piece
  carried into the next window (every later op starts in a later window, so the earlier pieces are final).
- launches: an op's launching call starts before the op does, so it lies in the op's window or an earlier one.
  Calls of earlier windows are carried while some op of a later window of their process could still have their
  correlation id (ids at or above the smallest such op's, known from the split).
- NVTX ranges (``analyze.window_ranges``): ranges are carried from window to window while a launch still to come
  could lie inside them; per range name the CPU statistics are ValueCounts, the rest integer sums.

What needs the whole trace at once is left out of a windowed report, which names it (``windowing.LEFT_OUT``):
the diagnosis ("Why is it slow": launch gaps, sequences, idle time need every op in order) and the per-rank table.

Memory: a window's rows and frames (about WINDOW_ROWS kernels with their calls and ranges), the carried calls and
ranges, and the partial tables (distinct (name, duration) pairs, per-name sums). Windows are equal stretches of
time, so a burst of kernels makes a fuller window. Exactness rests on one fact of CUDA: a kernel or copy starts
after the call that launched it started; a trace where a clock runs backwards may match fewer launches here.
The spill files (about 50 bytes a row) go to a temporary folder, removed at the end.

The carries chain each window to the one before; ``analyze.window_tasks`` works them out beforehand so that the
windows are independent tasks (``report --window --workers N`` or ``--scheduler``), merged into the same tables.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from profiler_kit.analyze.api import API_COLUMNS, VERSION_SUFFIX
from profiler_kit.analyze.arrays import distinct_values
from profiler_kit.analyze.breakdown import KERNEL_STAT_COLUMNS, InPlace, gpu_ops, kernel_table, op_ids
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.intervals import interval_union
from profiler_kit.analyze.memops import MEMOP_COLUMNS, memop_table
from profiler_kit.analyze.nsys_schema import (
    GRAPH_TRACE_TABLE,
    KERNEL_LEAN_COLUMNS,
    KERNEL_NAME,
    KERNEL_TABLE,
    MEMOP_TABLES,
    MISSING,
    NVTX_COLUMNS,
    NVTX_TABLE,
    RUNTIME_LEAN_COLUMNS,
    RUNTIME_TABLE,
    adbc_sqlite,
    fetch_arrow,
    output_columns,
)
from profiler_kit.analyze.nsys_sqlite import (
    Export,
    check_schema_version,
    lean_kernels,
    nvtx_ranges,
    read_gpus,
    read_memops,
    read_metadata,
    runtime_calls,
)
from profiler_kit.analyze.projection import launches
from profiler_kit.analyze.sqlite_pages import PagesDeclined, integer_chunks
from profiler_kit.analyze.stats import ValueCounts
from profiler_kit.analyze.tables import NVTX_RANGES, Trace, validate
from profiler_kit.analyze.taxonomy import CATEGORIES
from profiler_kit.analyze.window_ranges import RangeWindows
from profiler_kit.analyze.windowing import WINDOW_ROWS

MIN_PIECE_ROWS = 1 << 16  # rows read at a time in the first pass, at least (tiny windows need no tiny reads)
NVTX_EVENTS = (59, 60, 70, 71)  # push/pop and start/end ranges (nsys_sqlite.NVTX_RANGE_STYLE)
# What each table's read takes: (spec, coalesced columns), as the in-memory reader's lean reads.
READS = {
    KERNEL_TABLE: (KERNEL_LEAN_COLUMNS, KERNEL_NAME),
    RUNTIME_TABLE: (RUNTIME_LEAN_COLUMNS, None),
    **{table: (spec, None) for table, spec in MEMOP_TABLES.items()},
    NVTX_TABLE: (NVTX_COLUMNS, None),  # and the text, read apart (``_text_codes``)
}


def table_pieces(exp: Export, table: str, rows: int) -> Iterator[pd.DataFrame]:
    """``table``'s read (READS) a piece of about ``rows`` rows at a time, with each row's "rowid".

    From the file's pages where they are plain (``sqlite_pages.integer_chunks``), else, and from where
    the pages stop being plain, through SQLite in rowid order.
    """
    spec, coalesced = READS[table]
    read = exp.integer_read(table, spec, coalesced)
    last = -(1 << 63)
    chunks = integer_chunks(Path(read.path), read.root, dict(read.positions), read.ncols, rows) if read.root else None
    if chunks is not None:
        try:
            for piece in chunks:
                yield pd.DataFrame(output_columns(read, piece) | {"rowid": piece["rowid"]}, copy=False)
            return
        except PagesDeclined as declined:
            last = declined.last_rowid
    while True:
        where = f"WHERE rowid > {last} ORDER BY rowid LIMIT {rows}"
        piece = exp.read(exp.integer_read(table, spec, coalesced, where=where, raw={"rowid": "rowid"}))
        if not len(piece):
            return
        piece["rowid"] = piece["rowid"].astype(np.int64)
        yield piece
        last = int(piece["rowid"].iloc[-1])


@dataclass
class Spill:
    """One table's rows sorted into time windows, in a file: each piece of a window as its int64 columns one after
    another (column-major: no row-major copy made on write nor on read), a window's rows in table order."""

    path: Path
    columns: list[str]
    pieces: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # window -> (byte offset, rows)
    size: int = 0

    def add(self, frame: pd.DataFrame, window: np.ndarray) -> None:
        """Append the rows of ``frame``, row i going to ``window[i]``."""
        in_order = len(window) < 2 or bool((window[1:] >= window[:-1]).all())  # rows mostly come in time order
        order = None if in_order else np.argsort(window, kind="stable")
        ordered = window if order is None else window[order]
        columns = [frame[c].to_numpy() for c in self.columns]
        heads = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else []
        with open(self.path, "ab") as fh:
            for head, end in zip(heads, [*heads[1:], len(ordered)], strict=True):
                rows = slice(int(head), int(end)) if order is None else order[head:end]
                self.pieces.setdefault(int(ordered[head]), []).append((self.size, int(end - head)))
                for values in columns:
                    np.ascontiguousarray(values[rows], dtype=np.int64).tofile(fh)
                self.size += int(end - head) * len(columns) * 8

    def take(self, window: int) -> pd.DataFrame:
        """The rows of ``window``, in table order."""
        return read_pieces(self.path, self.columns, self.pieces.get(window, []))


def read_pieces(path: str | Path, columns: list[str], pieces: list[tuple[int, int]]) -> pd.DataFrame:
    """The rows of a spill's ``pieces`` (byte offset, rows), one after another (``Spill``)."""
    width = len(columns)
    parts = []
    with open(path, "rb") as fh:
        for offset, rows in pieces:
            fh.seek(offset)
            parts.append(np.fromfile(fh, dtype=np.int64, count=rows * width).reshape(width, rows))
    if len(parts) == 1:
        return pd.DataFrame(dict(zip(columns, parts[0], strict=True)), copy=False)
    block = np.concatenate(parts, axis=1) if parts else np.zeros((width, 0), dtype=np.int64)
    return pd.DataFrame(dict(zip(columns, block, strict=True)), copy=False)


@dataclass
class Split:
    """What the first pass learnt: the windows' time edges, the spills, and per window and process the smallest
    correlation id of a GPU op (to know which launch calls a later window may still need)."""

    edges: np.ndarray  # window w holds the rows starting in [edges[w - 1], edges[w]) (the first and last: open)
    spills: dict[str, Spill]
    first_op_id: dict[int, dict[int, int]]  # window -> pid -> smallest correlation id of its GPU ops
    nvtx_ranges: int = 0
    nvtx_last: int = -(1 << 63)
    nvtx_pids: set = field(default_factory=set)  # the processes of the ranges (a trace without GPU ops counts them)
    reach: dict[int, dict[int, int]] | None = None  # window -> device -> latest end of its GPU ops (window tasks)

    @property
    def windows(self) -> int:
        return len(self.edges) + 1

    def window_of(self, start: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.edges, start, side="right")

    def later_ids(self) -> list[dict[int, int]]:
        """Per window w: per process, the smallest correlation id of the ops of windows after w."""
        out, running = [], {}
        for w in range(self.windows - 1, -1, -1):
            out.append(dict(running))
            for pid, cid in self.first_op_id.get(w, {}).items():
                running[pid] = min(cid, running.get(pid, cid))
        return out[::-1]


def plan_edges(exp: Export, window_rows: int) -> np.ndarray:
    """Equal time windows from the earliest to the latest start (by the tables' first and last rows),
    as many as the kernel rows (else all activity rows) over ``window_rows``."""
    tables = [t for t in (KERNEL_TABLE, RUNTIME_TABLE, *MEMOP_TABLES, NVTX_TABLE) if exp.has(t)]
    firsts, lasts, rows = [], [], {}
    for t in tables:
        for order, into in (("", firsts), (" DESC", lasts)):
            row = exp.conn.execute(f'SELECT start FROM "{t}" ORDER BY rowid{order} LIMIT 1').fetchone()
            if row is not None and row[0] is not None:
                into.append(int(row[0]))
        rows[t] = exp.conn.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0] or 0
    if not firsts:
        return np.zeros(0, dtype=np.int64)
    lo, hi = min(firsts), max(lasts)
    n = max(1, math.ceil((rows.get(KERNEL_TABLE) or sum(rows.values())) / window_rows))
    return np.unique(np.array([lo + (hi - lo) * k // n for k in range(1, n)], dtype=np.int64))


NVTX_SPILL = ["rowid", "start", "end", "eventType", "textId", "globalTid", "endGlobalTid", "domainId", "text"]
DOMAIN_CREATE = 75


def split(
    exp: Export, folder: Path, window_rows: int, texts: dict[str, int], domains: list, reach: bool = False
) -> Split:
    """The first pass: every activity table's rows into the spill of their window (see the module's docstring).

    ``texts`` collects the NVTX texts (text -> code, a spilled row keeps the code), ``domains`` the NVTX domain
    creations (few, and every window's ranges need them for their names). ``reach``: note per window and device
    the latest end of a GPU op (``Split.reach``), which windows analysed apart need for the GPU busy time.
    """
    edges = plan_edges(exp, window_rows)
    out = Split(edges, {}, {}, reach={} if reach else None)
    piece_rows = max(window_rows, MIN_PIECE_ROWS)
    tables = [t for t in (KERNEL_TABLE, RUNTIME_TABLE, *MEMOP_TABLES) if exp.has(t)]
    # The big tables are split on threads (the page reader's numpy steps release the GIL) while the NVTX table,
    # whose texts come through this thread's SQLite connection, is split here. Without the ADBC driver a table
    # the page reader declines is read through that connection too: then one after another, here.
    threads = 2 if adbc_sqlite() is not None else 0
    with ThreadPoolExecutor(max_workers=threads) if threads else InPlace() as pool:
        firsts = [(t, pool.submit(_split_table, exp, t, out, folder, piece_rows)) for t in tables]
        if exp.has(NVTX_TABLE):
            _split_nvtx(exp, out, folder, piece_rows, texts, domains)
        for table, done in firsts:
            spill, first_ids, reaches = done.result()
            if spill is not None:
                out.spills[table] = spill
            _keep(out.first_op_id, _flattened(first_ids), min)
            if out.reach is not None:
                _keep(out.reach, _flattened(reaches), max)
    return out


def _split_table(exp: Export, table: str, out: Split, folder: Path, rows: int) -> tuple[Spill | None, dict, dict]:
    """One activity table into its spill, and (GPU op tables) per window and process the smallest correlation id,
    and (when ``out.reach`` is wanted) per window and device the latest end of an op."""
    spill, first_ids, reaches = None, {}, {}
    for piece in table_pieces(exp, table, rows):
        spill = spill or Spill(folder / f"{table}.bin", list(piece.columns))
        window = out.window_of(piece["start"].to_numpy())
        spill.add(piece, window)
        if table != RUNTIME_TABLE:
            _note_first_ids(first_ids, window, piece)
            if out.reach is not None:
                _note_reach(reaches, window, piece)
    return spill, first_ids, reaches


def _note_reach(reach: dict, window: np.ndarray, piece: pd.DataFrame) -> None:
    """Per window and device the latest end of an op (an unrecorded end: its start, as the frames take it)."""
    end, start = piece["end"].to_numpy(), piece["start"].to_numpy()
    frame = pd.DataFrame({"w": window, "d": piece["deviceId"].to_numpy(), "end": np.where(end != MISSING, end, start)})
    _keep(reach, frame.groupby(["w", "d"])["end"].max().items(), max)


def _note_first_ids(first: dict, window: np.ndarray, piece: pd.DataFrame) -> None:
    cid, pid = piece["correlationId"].to_numpy(), piece["globalPid"].to_numpy() >> 24 & 0xFFFFFF
    frame = pd.DataFrame({"w": window, "pid": pid, "cid": cid})[cid >= 0]
    _keep(first, frame.groupby(["w", "pid"])["cid"].min().items(), min)


def _keep(into: dict[int, dict[int, int]], found, pick) -> None:
    """``into[window][key]``: ``pick`` (min or max) of its value and each found ``((window, key), value)``."""
    for (w, k), v in found:
        here = into.setdefault(int(w), {})
        here[int(k)] = pick(int(v), here.get(int(k), int(v)))


def _flattened(nested: dict[int, dict[int, int]]):
    """``((window, key), value)`` of a ``_keep`` dict."""
    return (((w, k), v) for w, per in nested.items() for k, v in per.items())


def _split_nvtx(exp: Export, out: Split, folder: Path, rows: int, texts: dict, domains: list) -> None:
    """NVTX rows: their integer columns a piece at a time (``table_pieces``), each piece's texts through SQLite."""
    spill = Spill(folder / "nvtx.bin", NVTX_SPILL)
    has_text = "text" in exp.columns[NVTX_TABLE]
    for piece in table_pieces(exp, NVTX_TABLE, rows):
        if not len(piece):
            continue
        first, last = int(piece["rowid"].iloc[0]), int(piece["rowid"].iloc[-1])
        piece["text"] = _text_codes(exp, piece, first, last, texts) if has_text else -1
        start, end = piece["start"].to_numpy(), piece["end"].to_numpy()
        out.nvtx_last = max(out.nvtx_last, int(start.max()), int(end.max()), 0)
        event = piece["eventType"].to_numpy()
        domains.append(piece[event == DOMAIN_CREATE])
        ranges = piece[np.isin(event, NVTX_EVENTS)]
        out.nvtx_ranges += len(ranges)
        gtid = ranges["globalTid"].to_numpy()
        out.nvtx_pids.update(distinct_values(np.where(gtid != MISSING, gtid, 0) >> 24 & 0xFFFFFF).tolist())
        spill.add(ranges, out.window_of(ranges["start"].to_numpy()))
    out.spills[NVTX_TABLE] = spill


def _text_codes(exp: Export, piece: pd.DataFrame, first: int, last: int, texts: dict[str, int]) -> np.ndarray:
    """Each row's NVTX text as a code of ``texts`` (grown with new ones; -1: none), as ``nsys_sqlite._nvtx_text``
    reads them: through the ADBC driver as Arrow, dictionary-encoded (a Python string per distinct text only)."""
    from profiler_kit.analyze.nsys_sqlite import _text

    sql = (
        f'SELECT rowid AS r, CAST("text" AS BLOB) AS t FROM {NVTX_TABLE} '
        f'WHERE rowid BETWEEN {first} AND {last} AND "text" IS NOT NULL'
    )
    if adbc_sqlite() is None:
        rows = exp.query(sql)
        inverse, uniq = pd.factorize(rows["t"].to_numpy(dtype=object))
        rowid = rows["r"].to_numpy(dtype=np.int64)
    else:
        try:
            table = fetch_arrow(exp.path, sql)
        except Exception as err:  # the driver raises its own hierarchy; any failure here is the file's
            raise exp.corrupt(err) from None
        column = table.column("t").combine_chunks().dictionary_encode()
        inverse, uniq = column.indices.to_numpy(zero_copy_only=False), column.dictionary.to_pylist()
        rowid = table.column("r").to_numpy().astype(np.int64)
    codes = np.full(len(piece), -1, dtype=np.int64)
    if len(rowid):
        ids = np.array([texts.setdefault(_text(u), len(texts)) for u in uniq], dtype=np.int64)
        codes[np.searchsorted(piece["rowid"].to_numpy(), rowid)] = ids[inverse]
    return codes


class Names:
    """Global integer ids of names seen window after window, with a key that orders them as the in-memory
    tables do (the smallest seen: a first row, a string id)."""

    def __init__(self):
        self.ids: dict[str, int] = {}
        self.key: list[int] = []

    def of(self, names: pd.Categorical, keys: np.ndarray | None = None) -> np.ndarray:
        """Ids of the categories of ``names`` (their codes' lookup table), noting each row's key."""
        ids = np.array([self.ids.setdefault(str(n), len(self.ids)) for n in names.categories], dtype=np.int64)
        self.key.extend([1 << 62] * (len(self.ids) - len(self.key)))
        if keys is not None and len(names):
            codes = names.codes
            smallest = np.full(len(ids), 1 << 62, dtype=np.int64)
            np.minimum.at(smallest, codes[codes >= 0], keys[codes >= 0])
            for i, k in zip(ids.tolist(), smallest.tolist(), strict=True):
                self.key[i] = min(self.key[i], k)
        return ids

    def ordered(self) -> list[str]:
        names = list(self.ids)
        return [names[i] for i in sorted(range(len(names)), key=lambda i: (self.key[i], i))]


@dataclass
class Partials:
    """The partial tables of the windows seen so far: everything the report's tables are made of."""

    kernels: ValueCounts = field(default_factory=ValueCounts)
    kernel_names: Names = field(default_factory=Names)
    kernel_category: dict[int, str] = field(default_factory=dict)
    memop_time: ValueCounts = field(default_factory=ValueCounts)
    memop_bytes: ValueCounts = field(default_factory=ValueCounts)
    memop_names: Names = field(default_factory=Names)
    api: ValueCounts = field(default_factory=ValueCounts)
    api_names: Names = field(default_factory=Names)
    category_count: np.ndarray = field(default_factory=lambda: np.zeros(len(CATEGORIES), dtype=np.int64))
    category_ns: np.ndarray = field(default_factory=lambda: np.zeros(len(CATEGORIES), dtype=np.int64))
    counts: dict[str, int] = field(default_factory=dict)
    first: int = 1 << 63  # earliest start and latest end: of everything, and of GPU ops
    last: int = -(1 << 63)
    gpu_first: int = 1 << 63
    gpu_last: int = -(1 << 63)
    busy: dict[int, list[int]] = field(default_factory=dict)  # device -> [finished ns, open piece start, end]
    pids: set = field(default_factory=set)
    launch_carry: pd.DataFrame | None = None

    def count(self, name: str, n: int) -> None:
        self.counts[name] = self.counts.get(name, 0) + int(n)


def add_window(p: Partials, trace: Trace, kernel_rowid: np.ndarray, runtime_ids: np.ndarray, later: dict):
    """Reduce one window's frames into ``p`` (``later``: per process, the smallest op id of later windows); its ops
    (``gpu_ops``) and their launching calls (``projection.launches``) for the range tables."""
    ops = gpu_ops(trace)
    is_kernel = ops["is_kernel"].to_numpy(dtype=bool)
    duration = ops["duration_ns"].to_numpy()
    _add_kernels(p, ops, is_kernel, duration, kernel_rowid)
    codes = pd.Categorical(ops["category"], categories=CATEGORIES).codes
    known = codes >= 0
    p.category_count += np.bincount(codes[known], minlength=len(CATEGORIES))
    np.add.at(p.category_ns, codes[known], duration[known])
    memops = trace.memops
    if len(memops):
        names = pd.Categorical(memops["name"])
        ids = p.memop_names.of(names)[names.codes]
        p.memop_time.add(ids, memops["duration_ns"].to_numpy())
        p.memop_bytes.add(ids, np.maximum(memops["size_bytes"].to_numpy(), 0))
    runtime = trace.runtime
    if len(runtime):
        names = pd.Categorical(runtime["name"])
        named = names.codes >= 0
        ids = p.api_names.of(names, runtime_ids)[names.codes[named]]
        p.api.add(ids, runtime["duration_ns"].to_numpy()[named])
    _add_summary(p, trace, ops, is_kernel, duration)
    return ops, _add_launches(p, trace, later)


def _add_kernels(p: Partials, ops, is_kernel, duration, rowid) -> None:
    if not is_kernel.any():
        return
    kernel = np.flatnonzero(is_kernel)  # kernels come first in ops, in their rows' order
    names = pd.Categorical(ops["name"])[kernel].remove_unused_categories()
    ids = p.kernel_names.of(names, rowid)
    p.kernels.add(ids[names.codes], duration[kernel])
    category = pd.Categorical(ops["category"])[kernel]
    first = np.full(len(names.categories), len(names.codes), dtype=np.int64)
    np.minimum.at(first, names.codes, np.arange(len(names.codes)))
    for code, row in enumerate(first.tolist()):
        p.kernel_category.setdefault(int(ids[code]), str(category[row]))


def _add_summary(p: Partials, trace: Trace, ops: pd.DataFrame, is_kernel: np.ndarray, duration: np.ndarray) -> None:
    p.count("kernels", is_kernel.sum())
    p.count("kernel_time_ns", duration[is_kernel].sum())
    p.count("memops", (~is_kernel).sum())
    p.count("memop_time_ns", duration[~is_kernel].sum())
    for df in (ops, trace.runtime, trace.nvtx):
        if len(df):
            p.first = min(p.first, int(df["start_ns"].min()))
            p.last = max(p.last, int(df["end_ns"].max()))
    if not len(ops):
        return
    p.gpu_first = min(p.gpu_first, int(ops["start_ns"].min()))
    p.gpu_last = max(p.gpu_last, int(ops["end_ns"].max()))
    p.pids.update(distinct_values(ops["pid"].to_numpy()).tolist())
    device = ops["device_id"].to_numpy()
    starts, ends = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    for d in distinct_values(device).tolist():
        mine = device == d
        done, *carry = p.busy.get(d, [0])
        s, e = interval_union(np.r_[starts[mine], carry[:1]], np.r_[ends[mine], carry[1:]])
        p.busy[d] = [done + int((e[:-1] - s[:-1]).sum()), int(s[-1]), int(e[-1])]


def _add_launches(p: Partials, trace: Trace, later: dict) -> pd.DataFrame:
    """Count the ops whose launching call is known; carry the calls a later window's op may still match."""
    cols = ["start_ns", "end_ns", "pid", "tid", "correlation_id"]
    calls = trace.runtime[cols]
    if p.launch_carry is not None and len(p.launch_carry):
        calls = pd.concat([p.launch_carry, calls], ignore_index=True)
    matched = launches(op_ids(trace), calls)
    p.count("launched_ops", len(matched))
    cid, pid = calls["correlation_id"].to_numpy(), calls["pid"].to_numpy()
    at, pids = pd.factorize(pid)
    floor = np.array([later.get(int(x), 1 << 62) for x in pids.tolist()], dtype=np.int64)[at]
    p.launch_carry = calls[(cid >= 0) & (cid >= floor)].reset_index(drop=True)
    return matched


def tables_of(p: Partials, trace_meta: Trace, split_info: Split, ranges: RangeWindows) -> dict[str, pd.DataFrame]:
    """The report's tables from the merged partials (the windowed ``breakdown.analyze_trace``)."""
    return ranges.tables() | {
        "summary": _summary(p, trace_meta, split_info),
        "kernels": _kernel_table(p),
        "categories": _categories(p),
        "memops": _memop_table(p),
        "api": _api_table(p),
    }


def _summary(p: Partials, meta: Trace, s: Split) -> pd.DataFrame:
    first, last = p.first, p.last
    gpu_span = p.gpu_last - p.gpu_first if p.gpu_first <= p.gpu_last else 0
    busy = sum(done + end - start for done, start, end in p.busy.values())
    kernel_ns = p.counts.get("kernel_time_ns", 0)
    return pd.DataFrame(
        [
            {
                "gpus": ", ".join(sorted(set(meta.gpus["name"].astype(str)))) or "none recorded",
                "processes": len(p.pids) if p.pids else len(s.nvtx_pids),
                "trace_span_ns": int(last - first) if first <= last else 0,
                "gpu_span_ns": int(gpu_span),
                "kernels": p.counts.get("kernels", 0),
                "distinct_kernels": len(p.kernel_names.ids),
                "kernel_time_ns": kernel_ns,
                "memops": p.counts.get("memops", 0),
                "memop_time_ns": p.counts.get("memop_time_ns", 0),
                "gpu_busy_ns": busy,
                "gpu_busy_frac": busy / gpu_span if gpu_span else np.nan,
                "nvtx_ranges": s.nvtx_ranges,
                "launched_ops": p.counts.get("launched_ops", 0),
                "graph_kernels": 0,
                "graph_launches": 0,
                "graph_time_ns": 0,
                "graph_time_frac": 0.0,
            }
        ]
    )


def _ordered_stats(counts: ValueCounts, names: Names) -> tuple[list[str], dict[str, np.ndarray]]:
    """The names in their table order and the statistics of each, in that order."""
    order = names.ordered()
    stats = counts.stats(len(names.ids))
    at = np.array([names.ids[n] for n in order], dtype=np.int64)
    return order, {k: v[at] for k, v in stats.items()}


def _kernel_table(p: Partials) -> pd.DataFrame:
    order, stats = _ordered_stats(p.kernels, p.kernel_names)
    index = pd.CategoricalIndex(pd.Categorical(order, categories=sorted(order)), name="name")
    category = [p.kernel_category[p.kernel_names.ids[n]] for n in order]
    out = pd.DataFrame(
        {"category": pd.Series(category, index=index, dtype=object)}
        | {col: stats[stat] for col, stat in KERNEL_STAT_COLUMNS.items()},
        index=index,
    )
    return kernel_table(out, None)


def _categories(p: Partials) -> pd.DataFrame:
    out = pd.DataFrame({"count": p.category_count, "total_ns": p.category_ns}, index=pd.Index(CATEGORIES))
    total = out["total_ns"].sum()
    out["share_frac"] = out["total_ns"] / total if total else np.nan
    return out.reset_index(names="category")


def _memop_table(p: Partials) -> pd.DataFrame:
    if not p.memop_names.ids:
        return pd.DataFrame(columns=MEMOP_COLUMNS)
    names = sorted(p.memop_names.ids)  # the in-memory table's categories: sorted names
    at = np.array([p.memop_names.ids[n] for n in names], dtype=np.int64)
    n = len(p.memop_names.ids)
    time = {k: v[at] for k, v in p.memop_time.stats(n).items()}
    size = {k: v[at] for k, v in p.memop_bytes.stats(n).items()}
    return memop_table(pd.Index(names), time, size)


def _api_table(p: Partials) -> pd.DataFrame:
    if not p.api_names.ids:
        return pd.DataFrame(columns=API_COLUMNS)
    order, s = _ordered_stats(p.api, p.api_names)
    if order == [""]:
        return pd.DataFrame(columns=API_COLUMNS)
    out = pd.DataFrame(
        {
            "function": pd.Series(order).str.replace(VERSION_SUFFIX, "", regex=True),
            "count": s["count"],
            "total_ns": s["total"],
            "avg_ns": s["avg"],
            "med_ns": s["med"],
            "min_ns": s["min"],
            "max_ns": s["max"],
            "std_ns": s["std"],
        }
    )
    total = out["total_ns"].sum()
    out["share_frac"] = out["total_ns"] / total if total else np.nan
    return out.sort_values(["total_ns", "count"], ascending=False, kind="stable").reset_index(drop=True)


@dataclass
class WindowedResult:
    """A windowed analysis: the report's tables, the trace's metadata, and how many windows it took."""

    meta: dict
    tables: dict[str, pd.DataFrame]
    windows: int


def analyze_windows(
    path: str | Path,
    window_rows: int = WINDOW_ROWS,
    on_window: Callable[[int, int], None] | None = None,
    scratch: str | Path | None = None,
) -> WindowedResult:
    """The report's tables of one nsys export, read and analysed a time window at a time (module docstring).

    ``on_window(done, windows)`` is called after each window (for a progress bar); the spill files go in a
    temporary folder under ``scratch`` (default: the system's), removed at the end.
    """
    from profiler_kit.analyze.nsys_sqlite import _strings

    path = Path(path)
    exp = Export(path)
    try:
        meta, gpus = export_header(exp, path)
        strings = _strings(exp)
        with tempfile.TemporaryDirectory(prefix="profiler-kit-windows-", dir=scratch) as folder:
            info, nvtx = first_pass(exp, Path(folder), window_rows)
            partials, ranges = _second_pass(exp, info, strings, nvtx, on_window)
        return WindowedResult(meta, tables_of(partials, gpus, info, ranges), info.windows)
    finally:
        exp.close()


def export_header(exp: Export, path: Path) -> tuple[dict, Trace]:
    """The export's metadata and its GPUs (a Trace holding them), its schema checked and CUDA graphs refused."""
    from profiler_kit.analyze.nsys_sqlite import export_meta

    meta_rows = read_metadata(exp)
    version = check_schema_version(path, meta_rows)
    if exp.has(GRAPH_TRACE_TABLE) or exp.graph_column is not None:
        raise InputError(f"{path}: CUDA graphs are traced in it; a windowed report does not take them yet")
    gpu_rows = read_gpus(exp)
    return export_meta(path, version, meta_rows), Trace() if gpu_rows is None else Trace(gpus=gpu_rows).validated()


def first_pass(exp: Export, folder: Path, window_rows: int, reach: bool = False) -> tuple[Split, Nvtx]:
    """``split`` into ``folder``, and the NVTX texts and domain creations it collected."""
    texts: dict[str, int] = {}
    domains: list[pd.DataFrame] = []
    info = split(exp, folder, window_rows, texts, domains, reach)
    return info, Nvtx(np.array(list(texts), dtype=object), pd.concat(domains, ignore_index=True) if domains else None)


def _second_pass(exp: Export, info: Split, strings: pd.Series, nvtx: Nvtx, on_window):
    """Each window's frames reduced into Partials and RangeWindows; the next window is loaded on a thread meanwhile."""
    partials, ranges = Partials(), RangeWindows(info.nvtx_ranges > 0)
    later = info.later_ids()

    def load(w: int) -> dict[str, pd.DataFrame]:
        return {t: spill.take(w) for t, spill in info.spills.items()}

    with ThreadPoolExecutor(max_workers=1) as pool:
        coming = pool.submit(load, 0)
        for w in range(info.windows):
            rows = coming.result()
            if w + 1 < info.windows:
                coming = pool.submit(load, w + 1)
            trace, kernel_rowid, runtime_ids = _window_trace(exp, rows, strings, nvtx, info.nvtx_last)
            ops, launched = add_window(partials, trace, kernel_rowid, runtime_ids, later[w])
            ranges.add(trace.nvtx if len(trace.nvtx) else None, ops, launched, kernel_rowid)
            carried = partials.launch_carry
            before = int(info.edges[w]) if w < len(info.edges) else 1 << 62
            if carried is not None and len(carried):
                before = min(before, int(carried["start_ns"].min()))
            ranges.evict(before)
            if on_window is not None:
                on_window(w + 1, info.windows)
    return partials, ranges


@dataclass
class Nvtx:
    """What every window's NVTX rows need from the whole table: its texts by code and its domain creations."""

    texts: np.ndarray
    domains: pd.DataFrame | None


def _window_trace(exp: Export, rows: dict[str, pd.DataFrame], strings: pd.Series, nvtx: Nvtx, last: int):
    """One window's rows as the in-memory reader's frames, with each kernel's rowid and each call's name id.

    Its NVTX ranges are indexed by their rowid (an unclosed one ends at ``last``, the table's last timestamp).
    """
    trace = Trace()
    kernel_rowid = runtime_ids = np.zeros(0, dtype=np.int64)
    kernels = rows.get(KERNEL_TABLE)
    if kernels is not None and len(kernels):
        kernel_rowid = kernels["rowid"].to_numpy()
        trace.kernels = lean_kernels(kernels.drop(columns="rowid"), strings)
    memops = {t: rows[t].drop(columns="rowid") for t in MEMOP_TABLES if t in rows and len(rows[t])}
    if memops:
        trace.memops = read_memops(exp, memops)
    runtime = rows.get(RUNTIME_TABLE)
    if runtime is not None and len(runtime):
        runtime_ids = runtime["nameId"].to_numpy()
        trace.runtime = runtime_calls(runtime.drop(columns="rowid"), strings)
    trace = trace.validated()
    ranges = range_frame(rows.get(NVTX_TABLE), strings, nvtx, last)
    if ranges is not None:
        trace.nvtx = ranges
    return trace, kernel_rowid, runtime_ids


def range_frame(events: pd.DataFrame | None, strings: pd.Series, nvtx: Nvtx, last: int) -> pd.DataFrame | None:
    """The NVTX ranges of spilled rows ``events``, indexed by their rowid (None: none)."""
    if events is None or not len(events):
        return None
    if nvtx.domains is not None and len(nvtx.domains):
        events = pd.concat([nvtx.domains, events], ignore_index=True)
    ranges = nvtx_ranges(events, events["text"].to_numpy(), nvtx.texts, strings, details=False, last=last)
    if ranges is None:
        return None
    rowid = events["rowid"].to_numpy()[np.isin(events["eventType"].to_numpy(), NVTX_EVENTS)]
    return validate(ranges, NVTX_RANGES).set_axis(pd.Index(rowid), axis=0)
