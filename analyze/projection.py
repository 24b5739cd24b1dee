"""NVTX (or record_function) ranges projected onto GPU work, as NVIDIA defines it.

A GPU operation (kernel, memcpy, memset) belongs to a range when the CPU call
that launched it (the runtime row with the same correlation id in the same
process) starts and ends inside the range, on the thread that opened it. It
counts under every enclosing range, not only the innermost. A range's projected
GPU span runs from the first to the last operation it encloses. Ranges closed on
another thread (start/end ranges with an end thread) are not projected, as in
nsys's ``nvtxkernsum`` and ``nvtxgpuproj`` reports.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profiler_kit.analyze.arrays import (
    count_distinct,
    distinct_values,
    expand_slices,
    first_appearance_codes,
    gather,
    positions,
    search_in_order,
    sum_by,
    take_rows,
)
from profiler_kit.analyze.frame_memo import FrameMemo
from profiler_kit.analyze.intervals import interval_union
from profiler_kit.analyze.tables import one_value, one_value_view

# The (pid, correlation id) join looks ids up in a table when it would hold at most this many
# slots per runtime row (16 int32 slots: 64 bytes, about a runtime row's own size); else it sorts.
DENSE_SLOTS_PER_KEY = 16


def launches(ops: pd.DataFrame, runtime: pd.DataFrame, runtime_rows: bool = False) -> pd.DataFrame:
    """Each GPU op with its launching call: columns op_row, pid, tid, launch_start_ns, launch_end_ns.

    Ops without a matching runtime row (no correlation id, API not traced) are left out.
    The match is on (pid, correlation id), first runtime row wins; exports without a
    process id on GPU rows match on the correlation id alone. Rows keep the ops' order.
    ``runtime_rows`` adds the matched row's position in ``runtime`` (runtime_row), so the
    diagnosis (``analyze.launches.launch_table``) reads the call's name without matching again.
    """
    rt_cid = runtime["correlation_id"].to_numpy()
    with_cid = rt_cid >= 0
    if ops.empty or not with_cid.any():
        columns = ["op_row", "pid", "tid", "launch_start_ns", "launch_end_ns"] + ["runtime_row"] * runtime_rows
        return pd.DataFrame({c: [] for c in columns}, dtype="int64")
    rt_pid = runtime["pid"].to_numpy()
    kept = None if with_cid.all() else np.flatnonzero(with_cid)  # runtime rows with an id (None: all)
    if kept is not None:
        rt_cid, rt_pid = rt_cid[kept], rt_pid[kept]
    op_cid, op_pid = ops["correlation_id"].to_numpy(), ops["pid"].to_numpy()
    if (op_pid < 0).all():
        rt_pid, op_pid = np.zeros_like(rt_pid), np.zeros_like(op_pid)
    # One integer key per (pid, correlation id) pair, so the join is a lookup instead of a merge.
    pids = pd.Index(distinct_values(rt_pid))
    if int(rt_cid.max()) >= 2**31:  # ids too large to pack with a pid (a damaged export): number them densely
        ids = np.unique(np.concatenate([rt_cid, op_cid[op_cid >= 0]]))
        rt_cid, op_cid = np.searchsorted(ids, rt_cid), np.where(op_cid >= 0, np.searchsorted(ids, op_cid), -1)
    stride = int(rt_cid.max()) + 1
    valid = op_cid >= 0
    valid &= op_cid < stride
    if len(pids) == 1:  # one process: the correlation id is the key (and no per-op pid codes to fault in)
        rt_key = rt_cid
        valid &= op_pid == pids[0]
        op_key = op_cid if valid.all() else np.where(valid, op_cid, 0)
    else:
        rt_key, op_pid_code = pids.get_indexer(rt_pid) * stride + rt_cid, pids.get_indexer(op_pid)
        valid &= op_pid_code >= 0
        op_key = np.where(valid, op_pid_code * stride + op_cid, 0)
    rt_row = first_row_of_key(rt_key, op_key)  # first runtime row per key, as drop_duplicates keeps
    valid &= rt_row >= 0
    if valid.all():  # every op found its launch (the usual case): no gather of the runtime rows
        op_rows, rt_rows = np.arange(len(valid)), rt_row
    else:
        op_rows = np.flatnonzero(valid)
        rt_rows = rt_row[op_rows]
    if kept is not None:
        rt_rows = kept[rt_rows]
    return pd.DataFrame(
        {
            "op_row": op_rows.astype(np.int64, copy=False),
            "pid": gather(runtime["pid"].to_numpy(), rt_rows),
            "tid": gather(runtime["tid"].to_numpy(), rt_rows),
            "launch_start_ns": runtime["start_ns"].to_numpy()[rt_rows],
            "launch_end_ns": runtime["end_ns"].to_numpy()[rt_rows],
        }
        | ({"runtime_row": rt_rows.astype(np.int64, copy=False)} if runtime_rows else {}),
        copy=False,  # fresh arrays (or views of one value): skip pandas' copy into one 2-D block
    )


def first_row_of_key(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each of ``wanted``, the first row of ``keys`` holding it, or -1 (keys and wanted are >= 0).

    Keys in rising order are searched. Otherwise correlation ids are mostly dense, so a lookup
    table indexed by key is the fast way (linear time); keys too sparse for a table of
    DENSE_SLOTS_PER_KEY slots per key are sorted.
    """
    if len(keys) == 0:
        return np.full(len(wanted), -1, dtype=np.int64)
    if (keys[1:] >= keys[:-1]).all():  # runtime rows in id order (one thread's calls, in time order)
        return first_row_by_search(keys, wanted)
    size = int(keys.max()) + 1
    if size <= DENSE_SLOTS_PER_KEY * len(keys):
        return first_row_by_table(keys, wanted, size)
    return first_row_by_sort(keys, wanted)


def first_row_by_search(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``first_row_of_key`` of keys in rising order: a binary search, no table nor sort.

    The leftmost match is the first row of equal keys. Ids rise with the rows of a trace's
    runtime table wherever one thread made the calls: a table of ten slots per row faulted
    in 57 MB on a 1.4M-call export, and the search takes half the time.
    """
    rows = np.searchsorted(keys, wanted)
    found = keys[np.minimum(rows, len(keys) - 1)] == wanted
    rows[~found] = -1
    return rows


def first_row_by_table(keys: np.ndarray, wanted: np.ndarray, size: int) -> np.ndarray:
    """``first_row_of_key`` through a table of ``size`` slots (every key < size).

    Each slot holds ``n - row`` of its key's first row (np.maximum.at keeps the largest), so 0 marks a
    key with no row and the table starts as ``np.zeros``: memory the system hands over zeroed, touched
    only where keys fall. Correlation ids are sparse (a tenth of the ids below the largest are runtime
    rows on real exports), and filling a table of them first cost a 1.1M-kernel report 40-200 ms.
    """
    n = len(keys)
    dtype = np.int32 if n <= np.iinfo(np.int32).max else np.int64
    table = np.zeros(size, dtype=dtype)
    np.maximum.at(table, keys, np.arange(n, 0, -1, dtype=dtype))
    inside = wanted < size
    found = table[wanted] if inside.all() else np.where(inside, table[np.where(inside, wanted, 0)], 0)
    rows = n - found.astype(np.int64)
    rows[found == 0] = -1
    return rows


def first_row_by_sort(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``first_row_of_key`` through a sort of the keys.

    A stable sort keeps the rows of equal keys in row order, so the leftmost match
    (``searchsorted``) is the first row. Correlation ids mostly rise with the rows,
    which the stable sort (timsort) takes in near-linear time.
    """
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    pos = np.searchsorted(sorted_keys, wanted).clip(max=len(keys) - 1)
    return np.where(sorted_keys[pos] == wanted, order[pos], -1)


def attribute(ranges: pd.DataFrame, launched: pd.DataFrame) -> pd.DataFrame:
    """Pairs (range_row, op_row): the op was launched inside the range on the range's thread.

    ``ranges`` needs start_ns, end_ns, pid, tid, end_tid; ``launched`` comes from
    ``launches()``. See ``enclosed_launches`` for the order of the pairs.
    """
    pos, op_rows = enclosed_launches(ranges, launched)
    return pd.DataFrame({"range_row": ranges.index.to_numpy()[pos], "op_row": op_rows}, dtype="int64")


def enclosed_launches(
    ranges: pd.DataFrame, launched: pd.DataFrame, any_thread: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of ``attribute`` as arrays: positions in ``ranges`` and the ops' ``op_row``.

    Launches sorted by (thread, start) make the candidates of a range one contiguous
    slice (``searchsorted``), checked for the end bound. Pairs come by thread (in order
    of each thread's first range), then by range in row order, then by launch start.
    ``any_thread`` takes every thread of a process as one and keeps ranges closed elsewhere.
    """
    eligible = np.arange(len(ranges)) if any_thread else np.flatnonzero(ranges["end_tid"].to_numpy() < 0)
    if len(eligible) == 0 or len(launched) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)

    def tid(df: pd.DataFrame) -> np.ndarray:
        return np.zeros(len(df), dtype=np.int64) if any_thread else df["tid"].to_numpy()

    columns = ("pid", "launch_start_ns", "launch_end_ns", "op_row")
    launch = {c: launched[c].to_numpy() for c in columns} | {"tid": tid(launched)}
    launch = without_launches_outside(
        launch, ranges["start_ns"].to_numpy()[eligible], ranges["end_ns"].to_numpy()[eligible]
    )
    range_thread, launch_thread = thread_keys(
        (ranges["pid"].to_numpy()[eligible], tid(ranges)[eligible]), (launch["pid"], launch["tid"])
    )
    # Launches by thread, each thread's by start (both sorts are stable: equal starts keep the ops' order).
    if one_value(launch_thread):  # one thread (the usual case): the start alone is the key
        order = np.argsort(launch["launch_start_ns"], kind="stable")  # launch_thread stays as is: all equal
    else:
        order = np.lexsort((launch["launch_start_ns"], launch_thread))
        launch_thread = launch_thread[order]
    launch_start, launch_end = launch["launch_start_ns"][order], launch["launch_end_ns"][order]
    launch_op = launch["op_row"]
    # every op launched (``launches`` keeps the ops' order): op rows are 0..n-1, so the order is the rows
    n = len(launch_op)
    identity = n > 0 and launch_op[0] == 0 and launch_op[-1] == n - 1 and (launch_op[1:] > launch_op[:-1]).all()
    launch_op = order if identity else launch_op[order]
    # Ranges by thread, threads in order of their first range (as groupby(sort=False)), rows in order.
    thread, threads = pd.factorize(range_thread)
    by_thread = np.argsort(thread, kind="stable")
    rows, thread = eligible[by_thread], thread[by_thread]
    start, end = ranges["start_ns"].to_numpy()[rows], ranges["end_ns"].to_numpy()[rows]
    lo, hi = np.zeros(len(rows), dtype=np.int64), np.zeros(len(rows), dtype=np.int64)
    cut = np.searchsorted(thread, np.arange(len(threads) + 1))  # ranges of thread t: cut[t]:cut[t + 1]
    ends_sorted = True  # within every thread: then the launches that end in time are a prefix of the slice
    for t, key in enumerate(threads):
        mine = slice(cut[t], cut[t + 1])
        first, last = thread_bounds(launch_thread, key)
        by_start, by_end = np.argsort(start[mine], kind="stable"), np.argsort(end[mine], kind="stable")
        lo[mine] = first + search_in_order(launch_start[first:last], start[mine], "left", by_start)
        hi[mine] = first + search_in_order(launch_start[first:last], end[mine], "right", by_end)
        ends = launch_end[first:last]
        if (ends[1:] >= ends[:-1]).all():  # calls of one thread run one after another: the usual case
            hi[mine] = np.minimum(hi[mine], first + search_in_order(ends, end[mine], "right", by_end))
        else:
            ends_sorted = False
    candidate, counts = expand_slices(lo, hi)
    pos = np.repeat(rows, counts)
    if not ends_sorted:  # check each candidate's end
        keep = launch_end[candidate] <= np.repeat(end, counts)
        pos, candidate = pos[keep], candidate[keep]
    return pos, launch_op[candidate]


def thread_bounds(launch_thread: np.ndarray, key: int) -> tuple[int, int]:
    """Where thread ``key``'s launches lie in the sorted ``launch_thread``; a view of one key needs no search
    (searchsorted would first copy it into a fresh array)."""
    if one_value_view(launch_thread):
        n = len(launch_thread)
        return (0, n) if key == launch_thread[0] else (0, 0) if key < launch_thread[0] else (n, n)
    return np.searchsorted(launch_thread, key, "left"), np.searchsorted(launch_thread, key, "right")


def without_launches_outside(launch: dict[str, np.ndarray], starts: np.ndarray, ends: np.ndarray) -> dict:
    """``launch``'s columns without the launches that start outside every range [start, end].

    Only a launch that starts inside some range can pair with one. Phase ranges cover a small part of
    the trace: dropping the other launches before the sort makes their projection several times cheaper.
    Ranges that cover most of the trace keep most launches, and copying those would cost more than it
    saves: then ``launch`` comes back as is.
    """
    union_start, union_end = interval_union(starts, ends)
    launch_start = launch["launch_start_ns"]
    if (union_end - union_start).sum() >= (launch_start.max() - launch_start.min()) / 2:
        return launch
    inside = in_union(launch_start, union_start, union_end)
    return {c: values[inside] for c, values in launch.items()}


def in_union(points: np.ndarray, union_start: np.ndarray, union_end: np.ndarray) -> np.ndarray:
    """Which ``points`` lie in a closed interval [start, end] of a union (``interval_union``'s output)."""
    last = np.searchsorted(union_start, points, side="right") - 1  # the interval starting at or before
    return (last >= 0) & (points <= union_end[np.maximum(last, 0)])


def thread_keys(*tables: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """One int64 per (pid, tid) pair of each table's (pid, tid) arrays, equal exactly for equal pairs.

    nsys ids fit in 24 bits, so the pair is packed into one number; other ids are numbered.
    """
    ids = [x for pair in tables for x in pair if len(x)]
    if all(x.min() >= 0 and x.max() < 2**31 for x in ids):
        return [pack(pid, tid) for pid, tid in tables]
    pid_code, _ = pd.factorize(np.concatenate([pid for pid, _ in tables]))
    tid_code, tids = pd.factorize(np.concatenate([tid for _, tid in tables]))
    keys = pid_code.astype(np.int64) * len(tids) + tid_code
    return np.split(keys, np.cumsum([len(pid) for pid, _ in tables])[:-1])


def pack(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """``pid << 32 | tid`` of ids below 2**31; of views of one pid and one tid, a view of their key."""
    if one_value_view(pid) and one_value_view(tid):
        return np.broadcast_to((np.int64(pid[0]) << 32) | np.int64(tid[0]), len(pid))
    return (pid.astype(np.int64) << 32) | tid


def range_label(ranges: pd.DataFrame) -> pd.Series:
    """Range names as nsys prints them: ``domain:name`` in a named domain, else ``name``."""
    codes, labels = range_label_codes(ranges)
    # code -1: a missing name, kept missing (as the per-row formula of label_text does)
    return pd.Series(labels.take(codes, allow_fill=True, fill_value=np.nan), index=ranges.index, name="name")


def label_text(ranges: pd.DataFrame) -> pd.Series:
    """``range_label`` computed row by row (strings built per range: use it on few rows)."""
    name = ranges["name"].astype(str)
    domain = ranges["domain"].astype(str)
    return name.where(domain == "", domain + ":" + name)


def range_label_codes(ranges: pd.DataFrame) -> tuple[np.ndarray, pd.Index]:
    """Each range's ``range_label`` as a code into the sorted distinct labels, and those labels.

    Labels are built once per distinct (name, domain), not once per range; and once per frame
    (``LABEL_CODES``): the codes are read-only.
    """
    return LABEL_CODES(ranges)


def _range_label_codes(ranges: pd.DataFrame) -> tuple[np.ndarray, pd.Index]:
    name, domain = pd.Categorical(ranges["name"]), pd.Categorical(ranges["domain"])
    # one integer per (name, domain); codes are -1 for a missing value, hence the + 1s
    width = len(domain.categories) + 1
    pair = (name.codes.astype(np.int64) + 1) * width + (domain.codes + 1)
    pair_code, first = first_appearance_codes(pair, (len(name.categories) + 1) * width)  # first: a row of each
    label_code, labels = pd.factorize(label_text(ranges.iloc[first]), sort=True)
    codes = label_code[pair_code]
    codes.flags.writeable = False
    return codes, labels


LABEL_CODES = FrameMemo(_range_label_codes)


def subset_label_codes(ranges: pd.DataFrame, rows: np.ndarray, subset: pd.DataFrame) -> None:
    """Keep ``subset`` (``ranges[rows]``, a boolean mask) with its label codes, taken from those of ``ranges``:
    exactly what ``range_label_codes(subset)`` computes (the labels it uses, sorted), without the strings."""
    if not len(subset):  # computed as usual: an empty table's labels keep the dtype they would have had
        return
    codes, labels = range_label_codes(ranges)
    mine = codes[rows]
    used = np.zeros(len(labels) + 1, dtype=bool)
    used[mine] = True  # code -1 (no name) marks the spare last slot
    renumber = np.append(np.cumsum(used[:-1]) - 1, -1)
    mine = renumber[mine]
    mine.flags.writeable = False
    LABEL_CODES.put(subset, (mine, labels[used[:-1]]))


def pair_labels(codes: np.ndarray, labels: pd.Index, pos: np.ndarray) -> pd.Categorical:
    """The labels of ranges ``pos`` (``codes`` of each range into ``labels``), a categorical of the labels used.

    As ``Categorical.from_codes(codes[pos], labels).remove_unused_categories()``, but
    renumbered once per range and gathered in the categorical's own small dtype: pandas
    finds the used codes by hashing, ~0.1 s on 1.5M pairs.
    """
    in_pairs = np.zeros(len(codes), dtype=bool)
    in_pairs[pos] = True
    used = np.zeros(len(labels), dtype=bool)
    used[codes[in_pairs & (codes >= 0)]] = True
    small = np.int8 if used.sum() < 127 else np.int16 if used.sum() < 32767 else np.int32
    renumbered = np.where(codes >= 0, (np.cumsum(used) - 1)[codes], -1).astype(small)  # code -1: missing
    return pd.Categorical.from_codes(renumbered[pos], categories=labels[used])


def project_nvtx(
    ranges: pd.DataFrame, ops: pd.DataFrame, launched: pd.DataFrame, any_thread: bool = False
) -> pd.DataFrame:
    """Attribute GPU ops to every enclosing range.

    Args:
        ranges: NVTX_RANGES table (or a subset of its rows).
        ops: GPU operations (kernels and memops) with start_ns, end_ns, duration_ns,
            pid, correlation_id and any other columns to carry (name, category, is_kernel).
        launched: ``launches(ops, runtime)``, each op with its launching CPU call.
        any_thread: count ops launched by any thread of the range's process while
            the range was open (a time window), not only the range's own thread as
            nsys does. Autograd launches backward kernels from its own thread, so a
            "backward" range needs this view.

    Returns:
        One row per (range instance, op): ``range_row`` (index label in ``ranges``),
        ``range`` (label), ``op_row`` (index into ``ops``), and the op's columns.
    """
    pos, op_rows = enclosed_launches(ranges, launched, any_thread)
    # Label each pair through its range's code: strings are looked up once per range, not per pair.
    codes, labels = range_label_codes(ranges)
    index = ranges.index
    positional = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
    columns = {
        "range_row": pos if positional else index.to_numpy()[pos],  # a range's row label is its position: no gather
        "range": pair_labels(codes, labels, pos),
        "op_row": op_rows,
    }
    columns.update({c: take_rows(ops[c], op_rows) for c in ops.columns})
    return pd.DataFrame(columns, copy=False)  # fresh arrays: skip pandas' copy into one 2-D block


PROJECTION_COLUMNS = [
    "range_row",
    "range",
    "cpu_start_ns",
    "cpu_duration_ns",
    "gpu_start_ns",
    "gpu_duration_ns",
    "gpu_ops",
    "kernel_time_ns",
]


def summarize_projection(ranges: pd.DataFrame, attributed: pd.DataFrame) -> pd.DataFrame:
    """Per range instance, its projected GPU span (as nsys ``nvtxgpuproj``).

    Returns columns range_row, range, cpu_start_ns, cpu_duration_ns,
    gpu_start_ns, gpu_duration_ns (first op start to last op end), gpu_ops
    (distinct correlation ids), kernel_time_ns (summed kernel durations),
    one row per range instance in order of range_row. Ranges enclosing no GPU
    op are absent, as in nsys.
    """
    if attributed.empty:
        return pd.DataFrame({c: [] for c in PROJECTION_COLUMNS})
    # Aggregate per position of the range in ``ranges`` with numpy's unbuffered ufunc.at.
    pos = positions(ranges.index, attributed["range_row"].to_numpy())
    n = len(ranges)
    gpu_start = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(gpu_start, pos, attributed["start_ns"].to_numpy())
    gpu_end = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(gpu_end, pos, attributed["end_ns"].to_numpy())
    # Kernel time: all ops' time less the memops' (few), with no per-pair array of kernel durations.
    duration = attributed["duration_ns"].to_numpy()
    memop = np.flatnonzero(~attributed["is_kernel"].to_numpy(dtype=bool))
    kernel_time = sum_by(pos, duration, n) - sum_by(pos[memop], duration[memop], n)
    gpu_ops = count_distinct(pos, attributed["correlation_id"].to_numpy(), n)
    has_ops = np.flatnonzero(np.bincount(pos, minlength=n))
    rows = has_ops[np.argsort(ranges.index.to_numpy()[has_ops], kind="stable")]
    codes, labels = range_label_codes(ranges)
    label_or_missing = np.array([*labels, np.nan], dtype=object)  # code -1 (a missing name) picks the NaN
    return pd.DataFrame(
        {
            "range_row": ranges.index.to_numpy()[rows],
            "range": label_or_missing[codes[rows]],
            "cpu_start_ns": ranges["start_ns"].to_numpy()[rows],
            "cpu_duration_ns": ranges["duration_ns"].to_numpy()[rows],
            "gpu_start_ns": gpu_start[rows],
            "gpu_duration_ns": gpu_end[rows] - gpu_start[rows],
            "gpu_ops": gpu_ops[rows],
            "kernel_time_ns": kernel_time[rows],
        }
    )
