"""The NVTX range tables of an export read in time windows (``analyze.windows``): ranges, range groups, the
kernels inside each range group, and the phase tables, to the bit as ``breakdown.analyze_trace`` makes them.

Each window's ranges join the ranges carried from earlier windows, and the window's GPU ops are projected onto
them (``projection.project_nvtx``: own thread; any thread for phases). A range is carried while a launch still
to come could lie inside it: a launch of a later window starts in it or after, a carried launch call (one whose
op may come later) at its own start, so a range that ends before the earliest of those is done. Every op
belongs to one window, so a (range name, op) pair is deduplicated within its window, as the in-memory tables
count each kernel once per name; per range instance the GPU span (first and last op) and kernel sums are
carried with the range and added to its name's sums when it is done. The distinct ranges per (name, kernel)
are counted against the (pair, range) keys already seen of ranges still carried. Ties in the range-kernel
tables are broken as in memory: by each pair's first (thread, range row, launch start, kernel row).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from profiler_kit.analyze.arrays import first_appearance_codes, positions
from profiler_kit.analyze.breakdown import (
    NOT_PHASE_PATTERN,
    PHASE_COLUMNS,
    PHASE_PATTERN,
    PROJECTED_COLUMNS,
    base_range_names,
    phase_means,
    range_kernel_frame,
    ranges_frame,
    same_name_overlaps,
    with_extra_kernels,
)
from profiler_kit.analyze.projection import pack, project_nvtx, range_label_codes
from profiler_kit.analyze.stats import ValueCounts, sorted_distinct
from profiler_kit.analyze.taxonomy import CATEGORIES

BIG, SMALL = np.iinfo(np.int64).max, np.iinfo(np.int64).min
# What a window task sends back of each range still open at its edge (``RangeWindows.shipped``).
ALIVE_SUMS = ("label_id", "is_phase", "duration_ns", "end_ns", *(
    f"{p}_{c}" for p in ("own", "win") for c in ("first", "last", "kernels", "ns")
))  # fmt: skip


class Ids:
    """Integer ids of texts in order of arrival, each with the smallest key seen (a first row)."""

    def __init__(self):
        self.ids: dict[str, int] = {}
        self.key: list[int] = []
        self.names: list[str] = []

    def of(self, texts: list[str], keys: list[int] | None = None) -> np.ndarray:
        out = np.empty(len(texts), dtype=np.int64)
        for i, t in enumerate(texts):
            j = self.ids.setdefault(t, len(self.ids))
            if j == len(self.key):
                self.key.append(BIG)
                self.names.append(t)
            if keys is not None:
                self.key[j] = min(self.key[j], keys[i])
            out[i] = j
        return out

    def texts(self) -> list[str]:
        return self.names

    def ordered(self) -> np.ndarray:
        """Ids by smallest key (then arrival)."""
        return np.array(sorted(range(len(self.key)), key=lambda i: (self.key[i], i)), dtype=np.int64)


@dataclass
class Sums:
    """Per name id: the integer sums of ``breakdown.summarize_ranges`` (projected instances, their GPU span, kernels
    counted once per name, kernel time in all and per category)."""

    table: np.ndarray = field(default_factory=lambda: np.zeros((0, 4 + len(CATEGORIES)), dtype=np.int64))
    seen: np.ndarray = field(default_factory=lambda: np.zeros(len(CATEGORIES), dtype=bool))  # categories of a kernel

    def grow(self, n: int) -> None:
        if n > len(self.table):
            self.table = np.vstack([self.table, np.zeros((n - len(self.table), self.table.shape[1]), np.int64)])

    def add_spans(self, ids: np.ndarray, spans: np.ndarray) -> None:
        self.grow(int(ids.max()) + 1 if len(ids) else 0)
        np.add.at(self.table[:, 0], ids, 1)
        np.add.at(self.table[:, 1], ids, spans)

    def add_kernels(self, ids: np.ndarray, category: np.ndarray, duration: np.ndarray) -> None:
        """Kernels (already one per (name, op)) of names ``ids``, with their category codes and durations."""
        self.grow(int(ids.max()) + 1 if len(ids) else 0)
        np.add.at(self.table[:, 2], ids, 1)
        np.add.at(self.table[:, 3], ids, duration)
        known = category >= 0
        np.add.at(self.table, (ids[known], 4 + category[known]), duration[known])
        self.seen[np.bincount(category[known], minlength=len(CATEGORIES)) > 0] = True

    def absorb(self, other: Sums, ids: np.ndarray) -> None:
        """Add ``other``'s sums, its name i being this one's ``ids[i]`` (``RangeWindows.absorb``)."""
        n = len(other.table)
        if n:
            self.grow(int(ids[:n].max()) + 1)
            np.add.at(self.table, ids[:n], other.table)
        self.seen |= other.seen

    def columns(self, order: np.ndarray, n: int) -> tuple:
        """projected, span, kernels, kernel time and the ``<category>_ns`` columns of names ``order``."""
        self.grow(n)
        t = self.table[order]
        cats = {f"{CATEGORIES[c]}_ns": t[:, 4 + c] for c in np.flatnonzero(self.seen)}
        return t[:, 0], t[:, 1], t[:, 2], t[:, 3], cats


@dataclass
class Pairs:
    """Per (range name, kernel name) pair: ``summarize_range_kernels``' sums, merged over windows."""

    pair_ids: dict = field(default_factory=dict)  # name id << 32 | kernel id -> pair id
    kernel_ids: Ids = field(default_factory=Ids)  # kernel names
    name: list[int] = field(default_factory=list)
    kernel: list[str] = field(default_factory=list)
    category: list[str] = field(default_factory=list)
    sums: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int64))  # instances, count, total
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # pair << 32 | range rowid
    first: dict = field(default_factory=dict)  # (pair, thread) -> smallest (range rowid, launch start, kernel row)
    names_with_pairs: set = field(default_factory=set)

    def add(self, name, kernel: pd.Categorical, category, rowid, op_key, thread_of, once, is_kernel):
        """One window's (range, op) pairs: range name ids, kernel names, category codes, range rowids, op keys
        (launch start, kernel row, duration); ``thread_of(rowids)`` gives ranges' threads. ``once`` (rows) are
        those that count, one per (name, op); None when every row does (no name nests in itself)."""
        self.names_with_pairs.update(np.flatnonzero(np.bincount(name)).tolist())
        k = np.flatnonzero(is_kernel)
        if not len(k):
            return
        kernel_ids = self.kernel_ids.of([str(c) for c in kernel.categories])[kernel.codes]
        width = len(self.kernel_ids.ids) + 1
        codes, first = first_appearance_codes(name[k] * width + kernel_ids[k], (int(name.max()) + 1) * width)
        ids_of_code = np.empty(len(first), dtype=np.int64)
        for c, row in enumerate(first.tolist()):
            i = k[row]
            key = (int(name[i]), int(kernel_ids[i]))
            if key not in self.pair_ids:
                self.pair_ids[key] = len(self.pair_ids)
                self.name.append(key[0])
                self.kernel.append(self.kernel_ids.texts()[key[1]])
                self.category.append(CATEGORIES[category[i]] if category[i] >= 0 else "")
            ids_of_code[c] = self.pair_ids[key]
        if len(self.pair_ids) > len(self.sums):
            self.sums = np.vstack([self.sums, np.zeros((len(self.pair_ids) - len(self.sums), 3), np.int64)])
        ids = np.full(len(name), -1, dtype=np.int64)
        ids[k] = ids_of_code[codes]
        counted = k if once is None else once
        np.add.at(self.sums[:, 1], ids[counted], 1)
        np.add.at(self.sums[:, 2], ids[counted], op_key[counted, 2])
        row_keys = (ids[k] << 32) | rowid[k]
        keys = sorted_distinct(row_keys)  # the distinct (pair, range) of this window
        new = keys[~np.isin(keys, self.seen)]
        np.add.at(self.sums[:, 0], new >> 32, 1)
        self.seen = np.sort(np.concatenate([self.seen, new]))  # new keys are not among the seen ones
        self._first_keys(keys, row_keys, k, thread_of, op_key)

    def _first_keys(self, keys, row_keys, k, thread_of, op_key) -> None:
        """Each (pair, thread)'s smallest (range rowid, launch start, kernel row) so far: the pair's place in the
        in-memory order of (range, op) pairs, ties broken as there (``frame``)."""
        key_thread = thread_of(keys & 0xFFFFFFFF)
        t_codes, threads = pd.factorize(key_thread)
        size = (int(keys.max() >> 32) + 1) * len(threads)
        _, firsts = first_appearance_codes((keys >> 32) * len(threads) + t_codes, size)
        wanted = []
        for i in firsts.tolist():  # the smallest rowid of each (pair, thread) here (keys are sorted by pair, rowid)
            slot = (int(keys[i] >> 32), int(key_thread[i]))
            stored = self.first.get(slot)
            if stored is None or int(keys[i] & 0xFFFFFFFF) <= stored[0]:
                wanted.append(keys[i])
        if not wanted:
            return
        rows = np.flatnonzero(np.isin(row_keys, np.array(wanted, dtype=np.int64)))
        order = rows[np.lexsort((op_key[k[rows], 1], op_key[k[rows], 0], row_keys[rows]))]
        heads = order[np.r_[True, row_keys[order][1:] != row_keys[order][:-1]]]
        for r in heads.tolist():
            here = (int(row_keys[r] & 0xFFFFFFFF), int(op_key[k[r], 0]), int(op_key[k[r], 1]))
            slot = (int(row_keys[r] >> 32), int(thread_of(row_keys[r : r + 1] & 0xFFFFFFFF)[0]))
            self.first[slot] = min(here, self.first.get(slot, here))

    def absorb(self, other: Pairs, names: np.ndarray) -> None:
        """Merge the pairs of a later window's task, its name i being this one's ``names[i]``: sums added, each
        (pair, range) key that both count (a range over both windows: their ``seen``) taken once."""
        kernels = self.kernel_ids.of(other.kernel_ids.texts())
        ids = np.empty(len(other.name), dtype=np.int64)
        for i, (name, kernel) in enumerate(zip(other.name, other.kernel, strict=True)):
            key = (int(names[name]), int(kernels[other.kernel_ids.ids[kernel]]))
            if key not in self.pair_ids:
                self.pair_ids[key] = len(self.pair_ids)
                self.name.append(key[0])
                self.kernel.append(kernel)
                self.category.append(other.category[i])
            ids[i] = self.pair_ids[key]
        if len(self.pair_ids) > len(self.sums):
            self.sums = np.vstack([self.sums, np.zeros((len(self.pair_ids) - len(self.sums), 3), np.int64)])
        np.add.at(self.sums, ids[: len(other.sums)], other.sums)
        theirs = (ids[other.seen >> 32] << 32) | (other.seen & 0xFFFFFFFF)
        np.add.at(self.sums[:, 0], theirs[np.isin(theirs, self.seen)] >> 32, -1)
        self.seen = np.union1d(self.seen, theirs)
        for (pair, thread), at in other.first.items():
            slot = (int(ids[pair]), thread)
            self.first[slot] = min(at, self.first.get(slot, at))
        self.names_with_pairs.update(int(names[n]) for n in other.names_with_pairs)

    def forget(self, alive_rowids: np.ndarray) -> None:
        """Drop the (pair, range) keys of ranges no longer carried."""
        self.seen = self.seen[np.isin(self.seen & 0xFFFFFFFF, alive_rowids)]

    def frame(self, names: list[str], name_order: list[int], thread_rank: dict, extra: pd.DataFrame | None):
        """``summarize_range_kernels``' table: pairs in first-appearance order, range names categorical in
        ``name_order`` (the in-memory categories), then ``extra`` (outside kernels)."""
        n = len(self.name)
        first = {}
        for (pair, thread), at in self.first.items():
            key = (thread_rank[thread], *at)
            first[pair] = min(key, first.get(pair, key))
        order = sorted(range(n), key=lambda i: first[i])
        categories = [names[i] for i in name_order]
        out = pd.DataFrame(
            {
                "range": pd.Categorical([names[self.name[i]] for i in order], categories=categories),
                "kernel": pd.Categorical([self.kernel[i] for i in order]),
                "category": np.array([self.category[i] for i in order], dtype=object).astype(str),
                "range_instances": self.sums[order, 0],
                "count": self.sums[order, 1],
                "total_ns": self.sums[order, 2],
            }
        )
        return range_kernel_frame(with_extra_kernels(out, extra) if extra is not None and len(extra) else out)


class RangeWindows:
    """The NVTX range tables, fed a window at a time (``add``), finished by ``tables``."""

    def __init__(self, has_ranges: bool):
        self.has_ranges = has_ranges
        self.labels = Ids()  # range labels, keyed by first rowid
        self.groups = Ids()  # emit_nvtx base names of the labels
        self.group_of: list[int] = []  # label id -> group id
        self.is_phase: list[bool] = []  # label id -> a phase range name
        self.cpu = ValueCounts()
        self.own, self.group_own, self.phase = Sums(), Sums(), Sums()
        self.group_pairs, self.phase_pairs = Pairs(), Pairs()
        self.alive: pd.DataFrame | None = None
        self.phase_rows: list[pd.DataFrame] = []
        self.outside = [0, 0, np.zeros(len(CATEGORIES), dtype=np.int64), np.zeros(len(CATEGORIES), dtype=np.int64)]
        self.outside_kernels = Ids()  # kernel names outside every range, keyed by first kernel row
        self.outside_sums: dict[int, list] = {}
        self.thread_first: dict[int, int] = {}  # own-thread key -> first eligible range rowid
        self.pid_first: dict[int, int] = {}  # process -> first phase range rowid
        self.labels_with_pairs: set[int] = set()  # labels of ranges with a (range, op) pair: the categories' order
        self.opened: list[pd.DataFrame] = []  # merged window tasks' ranges open at their edges (``absorb``)

    def _label_ids(self, ranges: pd.DataFrame) -> np.ndarray:
        codes, labels = range_label_codes(ranges)
        texts = [str(t) for t in labels]
        rowid = ranges.index.to_numpy()
        first = np.full(len(texts), BIG, dtype=np.int64)
        np.minimum.at(first, codes, rowid)
        ids = self.labels.of(texts, first.tolist())
        self._new_labels()
        return ids[codes]

    def _new_labels(self) -> None:
        """Each new label's group (emit_nvtx base name) and whether it names a phase."""
        new = pd.Series(self.labels.texts()[len(self.group_of) :], dtype=object)
        if len(new):
            self.group_of.extend(self.groups.of(base_range_names(new).tolist()).tolist())
            self.is_phase.extend((new.str.contains(PHASE_PATTERN) & ~new.str.contains(NOT_PHASE_PATTERN)).tolist())

    def add(
        self,
        ranges: pd.DataFrame | None,
        ops: pd.DataFrame,
        launched: pd.DataFrame,
        kernel_rowid: np.ndarray,
        carried: pd.DataFrame | None = None,
    ):
        """One window: its new ``ranges`` (index: NVTX rowid), its ``ops`` (``gpu_ops``) and their ``launched``
        calls (``projection.launches``), the kernels' rowids (kernels come first in ops). ``carried``: the ranges
        of earlier windows still open to its launches, when this window is a task of its own
        (``analyze.window_tasks``): projected onto, their CPU times counted where they began."""
        if carried is not None and len(carried):
            self._new_ranges(carried, counted=False)
        if ranges is not None and len(ranges):
            self._new_ranges(ranges)
        if self.alive is None or not len(self.alive):
            self._outside(ops, np.zeros(0, dtype=np.int64), kernel_rowid)
            return
        slim = ops[PROJECTED_COLUMNS]
        launch_start = np.zeros(len(ops), dtype=np.int64)
        launch_start[launched["op_row"].to_numpy()] = launched["launch_start_ns"].to_numpy()
        op_order = np.full(len(ops), BIG, dtype=np.int64)
        op_order[: len(kernel_rowid)] = kernel_rowid
        alive = self.alive
        own = project_nvtx(alive, slim, launched)
        self._project(own, ops, launch_start, op_order, phase=False)
        self._outside(ops, own["op_row"].to_numpy(), kernel_rowid)
        phases = alive[alive["is_phase"].to_numpy()]
        if len(phases):
            window = project_nvtx(phases, slim, launched, any_thread=True)
            self._project(window, ops, launch_start, op_order, phase=True)

    def _new_ranges(self, ranges: pd.DataFrame, counted: bool = True) -> None:
        label = self._label_ids(ranges)
        rowid = ranges.index.to_numpy()
        if counted:
            self.cpu.add(label, ranges["duration_ns"].to_numpy())
        eligible = ranges["end_tid"].to_numpy() < 0
        threads = pack(ranges["pid"].to_numpy(), ranges["tid"].to_numpy())
        for key, r in zip(threads[eligible].tolist(), rowid[eligible].tolist(), strict=True):
            self.thread_first[key] = min(r, self.thread_first.get(key, r))
        is_phase = np.array(self.is_phase, dtype=bool)[label] if len(label) else np.zeros(0, bool)
        for pid, r in zip(ranges["pid"].to_numpy()[is_phase].tolist(), rowid[is_phase].tolist(), strict=True):
            self.pid_first[pid] = min(r, self.pid_first.get(pid, r))
        n = len(ranges)
        extra = {
            "label_id": label,
            "is_phase": is_phase,
            **{c: np.full(n, BIG, dtype=np.int64) for c in ("own_first", "win_first")},
            **{c: np.full(n, SMALL, dtype=np.int64) for c in ("own_last", "win_last")},
            **{c: np.zeros(n, dtype=np.int64) for c in ("own_kernels", "own_ns", "win_kernels", "win_ns")},
        }
        fresh = pd.concat([ranges, pd.DataFrame(extra, index=ranges.index)], axis=1)
        self.alive = fresh if self.alive is None or not len(self.alive) else _stacked(self.alive, fresh)

    def _project(self, pairs: pd.DataFrame, ops, launch_start, op_order, phase: bool) -> None:
        """Add one projection of the window's ops (own thread, or any thread onto the phases) to the sums."""
        if not len(pairs):
            return
        alive = self.alive
        pos = positions(alive.index, pairs["range_row"].to_numpy())
        prefix = "win" if phase else "own"
        is_kernel = pairs["is_kernel"].to_numpy(dtype=bool)
        duration = pairs["duration_ns"].to_numpy()
        for column, ufunc, values, rows in (
            ("first", np.minimum, pairs["start_ns"].to_numpy(), slice(None)),
            ("last", np.maximum, pairs["end_ns"].to_numpy(), slice(None)),
            ("kernels", np.add, 1, is_kernel),
            ("ns", np.add, duration, is_kernel),
        ):
            sums = alive[f"{prefix}_{column}"].to_numpy().copy()
            ufunc.at(sums, pos[rows], values if np.isscalar(values) else values[rows])
            alive[f"{prefix}_{column}"] = sums
        label = alive["label_id"].to_numpy()[pos]
        op_row = pairs["op_row"].to_numpy()
        category = pd.Categorical(pairs["category"], categories=CATEGORIES).codes.astype(np.int64)
        width = len(ops) + 1
        pid, tid = alive["pid"].to_numpy(), alive["tid"].to_numpy()
        tid = np.zeros_like(tid) if phase else tid
        thread = pack(pid, tid)
        index = alive.index

        def thread_of(rowids: np.ndarray) -> np.ndarray:
            return thread[positions(index, rowids)]

        kernel_names = pd.Categorical(pairs["name"])
        rowid = pairs["range_row"].to_numpy()
        op_key = np.stack([launch_start[op_row], op_order[op_row], duration], axis=1)
        labels = alive["label_id"].to_numpy()
        once = None if not nests(alive, labels, phase) else _once(label * width + op_row, is_kernel)
        kernel_rows = np.flatnonzero(is_kernel) if once is None else once
        (self.phase if phase else self.own).add_kernels(
            label[kernel_rows], category[kernel_rows], duration[kernel_rows]
        )
        if phase:
            self.phase_pairs.add(label, kernel_names, category, rowid, op_key, thread_of, once, is_kernel)
            return
        group_of = np.array(self.group_of, dtype=np.int64)
        group = group_of[label]
        once = None if not nests(alive, group_of[labels], phase) else _once(group * width + op_row, is_kernel)
        kernel_rows = np.flatnonzero(is_kernel) if once is None else once
        self.group_own.add_kernels(group[kernel_rows], category[kernel_rows], duration[kernel_rows])
        self.group_pairs.add(group, kernel_names, category, rowid, op_key, thread_of, once, is_kernel)
        self.labels_with_pairs.update(np.flatnonzero(np.bincount(label)).tolist())

    def _outside(self, ops: pd.DataFrame, inside_rows: np.ndarray, kernel_rowid: np.ndarray) -> None:
        """The kernels no range encloses (own thread): the unnamed row of the range tables."""
        if not self.has_ranges:
            return
        inside = np.zeros(len(ops), dtype=bool)
        inside[inside_rows] = True
        rows = np.flatnonzero(ops["is_kernel"].to_numpy(dtype=bool) & ~inside)
        if not len(rows):
            return
        duration = ops["duration_ns"].to_numpy()[rows]
        category = pd.Categorical(ops["category"], categories=CATEGORIES).codes.astype(np.int64)[rows]
        self.outside[0] += len(rows)
        self.outside[1] += int(duration.sum())
        known = category >= 0
        np.add.at(self.outside[2], category[known], duration[known])
        np.add.at(self.outside[3], category[known], 1)
        names = pd.Categorical(ops["name"])[rows]
        texts = [str(t) for t in names.categories]
        first = np.full(len(texts), BIG, dtype=np.int64)
        np.minimum.at(first, names.codes, kernel_rowid[rows])
        ids = self.outside_kernels.of(texts, first.tolist())[names.codes]
        uniq, at, inverse = np.unique(ids, return_index=True, return_inverse=True)
        counts = np.bincount(inverse)
        totals = np.zeros(len(uniq), dtype=np.int64)
        np.add.at(totals, inverse, duration)
        for u, a, c, t in zip(uniq.tolist(), at.tolist(), counts.tolist(), totals.tolist(), strict=True):
            entry = self.outside_sums.setdefault(u, [str(CATEGORIES[category[a]]) if category[a] >= 0 else "", 0, 0])
            entry[1] += c
            entry[2] += t

    def evict(self, before: int, keep: np.ndarray | None = None) -> None:
        """Finish the ranges that end before ``before``: no launch still to come can lie inside them. Not those
        of rowids ``keep`` (a window task's carried ranges: finished once the tasks' sums of them are merged)."""
        if self.alive is None or not len(self.alive):
            return
        done = self.alive["end_ns"].to_numpy() < before
        if keep is not None and len(keep):
            done &= ~np.isin(self.alive.index.to_numpy(), keep)
        if done.any():
            self._finish(self.alive[done])
            self.alive = self.alive[~done]
            self.group_pairs.forget(self.alive.index.to_numpy())
            self.phase_pairs.forget(self.alive.index.to_numpy())

    def _finish(self, ranges: pd.DataFrame) -> None:
        label = ranges["label_id"].to_numpy()
        for prefix, sums in (("own", self.own), ("win", self.phase)):
            first, last = ranges[f"{prefix}_first"].to_numpy(), ranges[f"{prefix}_last"].to_numpy()
            projected = first != BIG
            sums.add_spans(label[projected], last[projected] - first[projected])
        phases = ranges[ranges["is_phase"].to_numpy()]
        if len(phases):
            self.phase_rows.append(
                pd.DataFrame(
                    {
                        "rowid": phases.index.to_numpy(),
                        "label_id": phases["label_id"].to_numpy(),
                        "cpu_ns": phases["duration_ns"].to_numpy(),
                        "kernels": phases["own_kernels"].to_numpy(),
                        "kernel_ns": phases["own_ns"].to_numpy(),
                        "window_kernels": phases["win_kernels"].to_numpy(),
                        "window_ns": phases["win_ns"].to_numpy(),
                    }
                )
            )

    def shipped(self) -> RangeWindows:
        """This window task's state to send back: its open ranges reduced to what ``absorb`` and ``_finish`` read."""
        if self.alive is not None:
            self.alive = self.alive[list(ALIVE_SUMS)]
        return self

    def absorb(self, other: RangeWindows) -> None:
        """Merge the state of the next window's task (``analyze.window_tasks``): names matched by text, sums
        added; the ranges open at either side's edge kept apart (``opened``) and finished at the end, once the
        sums of every window they spanned are in (``tables``)."""
        labels = self.labels.of(other.labels.texts(), other.labels.key)
        self._new_labels()
        groups = np.array([self.groups.ids[t] for t in other.groups.texts()], dtype=np.int64)
        other.cpu.compact()
        if len(other.cpu.groups):
            self.cpu.add(labels[other.cpu.groups], other.cpu.values, other.cpu.counts)
        self.own.absorb(other.own, labels)
        self.phase.absorb(other.phase, labels)
        self.group_own.absorb(other.group_own, groups)
        self.group_pairs.absorb(other.group_pairs, groups)
        self.phase_pairs.absorb(other.phase_pairs, labels)
        for i in range(2):
            self.outside[i] += other.outside[i]
            self.outside[2 + i] = self.outside[2 + i] + other.outside[2 + i]
        kernels = self.outside_kernels.of(other.outside_kernels.texts(), other.outside_kernels.key)
        for k, (category, count, total) in other.outside_sums.items():
            entry = self.outside_sums.setdefault(int(kernels[k]), [category, 0, 0])
            entry[1] += count
            entry[2] += total
        for mine, theirs in ((self.thread_first, other.thread_first), (self.pid_first, other.pid_first)):
            for key, r in theirs.items():
                mine[key] = min(r, mine.get(key, r))
        self.labels_with_pairs.update(int(labels[i]) for i in other.labels_with_pairs)
        for rows in other.phase_rows:
            self.phase_rows.append(rows.assign(label_id=labels[rows["label_id"].to_numpy()]))
        if other.alive is not None and len(other.alive):
            self.opened.append(other.alive.assign(label_id=labels[other.alive["label_id"].to_numpy()]))

    def _opened_ranges(self) -> pd.DataFrame | None:
        """The ranges open at some task's edge, each once with its sums over every window (``absorb``)."""
        if not self.opened:
            return None
        rows = pd.concat(self.opened)
        by = rows.groupby(level=0, sort=False)
        out = by[["label_id", "is_phase", "duration_ns", "end_ns"]].first()
        for prefix in ("own", "win"):
            out[f"{prefix}_first"] = by[f"{prefix}_first"].min()
            out[f"{prefix}_last"] = by[f"{prefix}_last"].max()
            for column in (f"{prefix}_kernels", f"{prefix}_ns"):
                out[column] = by[column].sum()
        return out[list(ALIVE_SUMS)]

    def tables(self) -> dict[str, pd.DataFrame]:
        """range_names, range_groups, range_group_kernels, phases, phase_kernels, phase_categories (as analyze_trace's)."""
        opened = self._opened_ranges()
        if opened is not None:
            self.alive, self.opened = opened, []
        self.evict(BIG)
        texts = self.labels.texts()
        n = len(texts)
        order = self.labels.ordered()
        stats = self.cpu.stats(n)
        outside = None
        if self.has_ranges:
            o = self.outside
            outside = (o[0], o[1], {CATEGORIES[c]: int(o[2][c]) for c in np.flatnonzero(o[3])})
        out = {"range_names": pd.DataFrame({"range": [texts[i] for i in order]}, dtype=object)}  # as the report's
        group_of = np.array(self.group_of, dtype=np.int64)
        groups = self.groups.texts()
        ng = len(groups)
        group_key = np.full(ng, BIG, dtype=np.int64)
        np.minimum.at(group_key, group_of, np.array(self.labels.key, dtype=np.int64))
        g_order = np.array(sorted(range(ng), key=lambda i: (group_key[i], i)), dtype=np.int64)
        g_stats = self.cpu.regrouped(group_of).stats(ng) if n else stats
        own = self.own.columns(np.arange(n), n)
        grouped_spans = [np.zeros(ng, dtype=np.int64) for _ in range(2)]
        for j in range(2):
            np.add.at(grouped_spans[j], group_of, own[j])
        _, _, kernels, kernel_ns, cats = self.group_own.columns(g_order, ng)
        out["range_groups"] = ranges_frame(
            [groups[i] for i in g_order], {k: v[g_order] for k, v in g_stats.items()},
            grouped_spans[0][g_order], grouped_spans[1][g_order], kernels, kernel_ns, cats, outside,
        )  # fmt: skip
        out["range_group_kernels"] = self._group_kernels(texts, groups, group_of)
        out |= self._phase_tables(texts, stats, order)
        return out

    def _group_kernels(self, texts, groups, group_of) -> pd.DataFrame:
        with_pairs = sorted(self.labels_with_pairs, key=lambda i: texts[i])
        name_order = list(dict.fromkeys(int(group_of[i]) for i in with_pairs))
        rank = {t: i for i, t in enumerate(sorted(self.thread_first, key=lambda t: self.thread_first[t]))}
        extra = None
        if self.has_ranges and self.outside_sums:
            ids = [i for i in self.outside_kernels.ordered().tolist() if i in self.outside_sums]
            names = self.outside_kernels.texts()
            extra = pd.DataFrame(
                {
                    "kernel": np.array([names[i] for i in ids], dtype=object),
                    "category": [self.outside_sums[i][0] for i in ids],
                    "range_instances": 0,
                    "count": np.array([self.outside_sums[i][1] for i in ids], dtype=np.int64),
                    "total_ns": np.array([self.outside_sums[i][2] for i in ids], dtype=np.int64),
                }
            )
        return self.group_pairs.frame(groups, name_order, rank, extra)

    def _phase_tables(self, texts, stats, order) -> dict[str, pd.DataFrame]:
        if not self.phase_rows:
            return {
                "phases": pd.DataFrame(columns=PHASE_COLUMNS),
                "phase_kernels": _empty_range_kernels(),
                "phase_categories": ranges_frame([], *_no_names()),
            }
        rows = pd.concat(self.phase_rows, ignore_index=True).sort_values("rowid", kind="stable")
        df = rows.assign(range=[texts[i] for i in rows["label_id"]])
        phases = phase_means(df[["range", "cpu_ns", "kernels", "kernel_ns", "window_kernels", "window_ns"]])
        is_phase = np.array(self.is_phase, dtype=bool)
        p_order = order[is_phase[order]]
        n = len(texts)
        categories = ranges_frame(
            [texts[i] for i in p_order], {k: v[p_order] for k, v in stats.items()}, *self.phase.columns(p_order, n)
        )
        with_pairs = sorted(self.phase_pairs.names_with_pairs, key=lambda i: texts[i])
        rank = {
            p << 32: i for i, p in enumerate(sorted(self.pid_first, key=lambda p: self.pid_first[p]))
        }  # pack(pid, 0)
        kernels = self.phase_pairs.frame(texts, with_pairs, rank, None)
        return {"phases": phases, "phase_kernels": kernels, "phase_categories": categories}


def _empty_range_kernels() -> pd.DataFrame:
    out = pd.DataFrame(
        {
            "range": pd.Categorical([]),
            "kernel": pd.Categorical([]),
            "category": np.array([], dtype=object),
            **{c: np.zeros(0, dtype=np.int64) for c in ("range_instances", "count", "total_ns")},
        }
    )
    return range_kernel_frame(out)


def _no_names():
    stats = {k: np.zeros(0) for k in ("count", "total", "avg", "med", "min", "max", "std")}
    empty = np.zeros(0, dtype=np.int64)
    return stats, empty, empty, empty, empty, {}


def nests(ranges: pd.DataFrame, codes: np.ndarray, any_thread: bool) -> bool:
    """Whether two ranges of one name (``codes``) overlap on one thread (any thread of a process: one), so that a
    launch may lie in both and the (name, op) pairs must be deduplicated (``breakdown.same_name_overlaps``)."""
    if any_thread:
        ranges = ranges.assign(tid=0)
    return same_name_overlaps(ranges, codes)


def _once(key: np.ndarray, is_kernel: np.ndarray) -> np.ndarray:
    """Rows of kernel pairs, the first of each ``key`` (one per (name, op))."""
    rows = np.flatnonzero(is_kernel)
    _, first = np.unique(key[rows], return_index=True)
    return rows[np.sort(first)]


def _stacked(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Two range frames one after the other, their categorical columns as plain text."""
    cats = [
        c
        for c in a.columns
        if isinstance(a[c].dtype, pd.CategoricalDtype) or isinstance(b[c].dtype, pd.CategoricalDtype)
    ]
    out = pd.concat([a.astype({c: object for c in cats}), b.astype({c: object for c in cats})])
    return out.astype({c: "category" for c in cats})
