"""Per-group statistics of integer samples (durations, sizes), as ``nsys stats`` computes them.

nsys 2022.4's summaries (gpukernsum, nvtxsum, cudaapisum, gpumemtimesum, gpumemsizesum) use SQLite
aggregate functions of its own: ``median`` is the middle value, the mean of the two middle ones for an
even count; ``stdev`` is the sample standard deviation (n - 1), 0 for a single value. Checked against
nsys's bundled sqlite3: ``stdev`` of 1, 2, 3, 10 is 4.0825 (the population one would be 3.5355),
``median`` of 1, 2, 3, 10 is 2.5.

The standard deviation is computed from exact integer moments (count, sum, sum of squares as Python
ints), the one division correctly rounded: the same float whichever way the values were summed, so a
report made a time window at a time (``analyze.windows``, which merges ``ValueCounts``) equals the
in-memory one to the last bit.
"""

from __future__ import annotations

import math

import numpy as np
from profiler_kit.analyze.arrays import expand_slices, smallest_int

STAT_COLUMNS = ("count", "total", "avg", "med", "min", "max", "std")


SMALL_GROUP = 64  # groups of at most this many values get their medians from one sort of all their keys


def group_stats(codes: np.ndarray, values: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """count, total, avg, med, min, max, std of ``values`` per group code 0..n-1 (int64 values >= 0).

    Empty groups get count 0, total 0, min/max -1 and NaN elsewhere. The values are put in group
    order once (``grouped``); every statistic is then a ``reduceat`` over each group's stretch, and the
    medians a partial sort of it (``middles``).
    """
    codes = np.asarray(codes)
    values = np.asarray(values, dtype=np.int64)
    count = np.bincount(codes, minlength=n) if len(codes) else np.zeros(n, dtype=np.int64)
    total, low, high = np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    avg, med, std = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    has = np.flatnonzero(count)
    if len(has):
        ordered = grouped(codes, values, count, has)
        c = count[has]
        start = np.concatenate(([0], np.cumsum(c)[:-1]))
        total[has] = np.add.reduceat(ordered, start)
        low[has] = np.minimum.reduceat(ordered, start)
        high[has] = np.maximum.reduceat(ordered, start)
        avg[has] = total[has] / c
        std[has] = exact_std(c, total[has], square_sums(ordered, start))
        med[has] = middles(ordered, start, c, has)
    return {"count": count, "total": total, "avg": avg, "med": med, "min": low, "max": high, "std": std}


def grouped(codes: np.ndarray, values: np.ndarray, count: np.ndarray, has: np.ndarray) -> np.ndarray:
    """``values`` in the order of their group codes (the groups ``has``, rising), a fresh array.

    A stable argsort of the codes in their smallest integer type: a radix sort for up to 32767 groups.
    (A mask per group was slower even for 18 groups of 1.4M runtime calls: 0.22 s against 0.15.)
    """
    if len(has) == 1:
        return values.copy()
    return values[np.argsort(codes.astype(smallest_int(len(count))), kind="stable")]


def middles(ordered: np.ndarray, start: np.ndarray, count: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The median of each stretch ``ordered[start:start + count]`` (groups ``codes``): mean of the two middle values
    when the count is even. ``ordered`` is partly sorted in place.

    Each large stretch is partitioned around its middle; the small ones (many NVTX names of a few
    instances) are sorted together as ``code << shift | value`` keys.
    """
    out = np.empty(len(count))
    lo, hi = (count - 1) // 2, count // 2
    for i in np.flatnonzero(count > SMALL_GROUP).tolist():
        stretch = ordered[start[i] : start[i] + count[i]]
        stretch.partition([lo[i], hi[i]])  # in place: a view of ``ordered``
        out[i] = (stretch[lo[i]] + stretch[hi[i]]) / 2
    small = np.flatnonzero(count <= SMALL_GROUP)
    if len(small) == 0:
        return out
    rows, _ = expand_slices(start[small], start[small] + count[small])
    part, part_codes = ordered[rows], np.repeat(codes[small].astype(np.int64), count[small])
    shift = max(int(part.max()).bit_length(), 1)
    if int(codes.max()).bit_length() + shift <= 62 and part.min() >= 0:
        keys = part_codes << shift
        keys |= part
        keys.sort()
        part = keys & ((1 << shift) - 1)
    else:
        part = part[np.lexsort((part, part_codes))]
    first = np.concatenate(([0], np.cumsum(count[small])[:-1]))
    out[small] = (part[first + lo[small]] + part[first + hi[small]]) / 2
    return out


LIMB = 21  # bits of a limb: a product of two limbs has 42, and 2**21 of them still fit an unsigned 64-bit sum
LIMB_MASK = np.uint64((1 << LIMB) - 1)
SMALL_BITS = 26  # values below 2**26 (67 ms in ns) square below 2**52: 2**11 such squares sum within an int64
SMALL_CHUNK = 1 << (63 - 2 * SMALL_BITS)


def square_sums(ordered: np.ndarray, start: np.ndarray) -> list[int]:
    """The exact sum of squares of each stretch ``ordered[start[i]:start[i + 1]]``, as Python ints.

    Durations are mostly small (``small_square_sums``); otherwise each magnitude is split into three 21-bit limbs,
    so every product of two limbs and every sum of 2**21 of them fits a uint64; the sums of each piece of at most
    2**21 rows are combined as Python ints.
    """
    if not len(ordered):
        return [0] * len(start)
    small = small_square_sums(ordered, start)
    if small is not None:
        return small
    a = np.abs(ordered).astype(np.uint64)
    cuts = np.union1d(start, np.arange(0, len(a), 1 << LIMB))
    low, mid = a & LIMB_MASK, (a >> np.uint64(LIMB)) & LIMB_MASK
    terms = [(low * low, 1, 0), (mid * low, 2, LIMB), (mid * mid, 1, 2 * LIMB)]
    if int(a.max()) >> (2 * LIMB):
        high = a >> np.uint64(2 * LIMB)
        terms += [(high * low, 2, 2 * LIMB), (high * mid, 2, 3 * LIMB), (high * high, 1, 4 * LIMB)]
    pieces = [0] * len(cuts)
    for product, factor, shift in terms:
        for i, piece in enumerate(np.add.reduceat(product, cuts).tolist()):
            pieces[i] += (factor * piece) << shift
    return _by_stretch(start, cuts, pieces)


def small_square_sums(ordered: np.ndarray, start: np.ndarray) -> list[int] | None:
    """``square_sums`` where at most 1/64 of the values reach 2**SMALL_BITS and none is negative, else None.

    Why: one int64 product and one sum per value (the limbs take six passes and three sums): on 1.4M runtime
    calls 0.015 s of CPU against 0.057. The squares of small values are summed SMALL_CHUNK rows at a time; each
    large value (a long synchronize call) is squared as a Python int.
    """
    if ordered.min() < 0:
        return None
    large = np.flatnonzero(ordered >> SMALL_BITS) if ordered.max() >> SMALL_BITS else ordered[:0]
    if len(large) > len(ordered) >> 6:
        return None
    if len(large):
        ordered = ordered.copy()
        large_values = ordered[large].tolist()
        ordered[large] = 0
    cuts = np.union1d(start, np.arange(0, len(ordered), SMALL_CHUNK))
    out = _by_stretch(start, cuts, np.add.reduceat(ordered * ordered, cuts).tolist())
    if len(large):
        for group, value in zip((np.searchsorted(start, large, side="right") - 1).tolist(), large_values, strict=True):
            out[group] += value * value
    return out


def _by_stretch(start: np.ndarray, cuts: np.ndarray, pieces: list[int]) -> list[int]:
    """The sums of ``pieces`` (one per cut, each cut inside one stretch) per stretch beginning at ``start``."""
    out = [0] * len(start)
    for group, piece in zip((np.searchsorted(start, cuts, side="right") - 1).tolist(), pieces, strict=True):
        out[group] += piece
    return out


def exact_std(count: np.ndarray, total: np.ndarray, squares: list[int]) -> np.ndarray:
    """Sample standard deviations sqrt((n S2 - S1^2) / (n (n - 1))) from exact moments; 0 for one value, NaN for none."""
    out = np.full(len(count), np.nan)
    for i, (n, s1, s2) in enumerate(zip(count.tolist(), total.tolist(), squares, strict=True)):
        if n == 1:
            out[i] = 0.0
        elif n > 1:
            out[i] = math.sqrt((n * s2 - s1 * s1) / (n * (n - 1)))
    return out


class ValueCounts:
    """How often each (group, value) pair occurred, merged from parts: ``group_stats`` of values seen a part at a time.

    Why: durations repeat (the same kernel takes the same few microseconds), so the distinct pairs of a long
    trace are few, and from them every statistic is exact: counts, sums, extremes, medians (the middle
    values by rank) and the moments of the standard deviation. ``analyze.windows`` adds a time window at a
    time. Groups are integers 0..n-1 given by the caller; values int64.
    """

    def __init__(self):
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.pending = 0
        self.groups = self.values = self.counts = np.zeros(0, dtype=np.int64)

    def add(self, groups: np.ndarray, values: np.ndarray, counts: np.ndarray | None = None) -> None:
        """Count the pairs (groups[i], values[i]) (``counts[i]`` times each, default once)."""
        if len(groups):
            groups, values = np.asarray(groups, np.int64), np.asarray(values, np.int64)
            if counts is None:
                self.parts.append(_counted_pairs(groups, values))
            else:
                self.parts.append(_distinct_pairs(groups, values, np.asarray(counts, dtype=np.int64)))
            self.pending += len(self.parts[-1][0])
            if self.pending > 4 * len(self.groups) + (1 << 20):
                self.compact()

    def compact(self) -> None:
        """Merge the parts added so far into one sorted table of distinct pairs."""
        if self.parts:
            pieces = [(self.groups, self.values, self.counts), *self.parts]
            self.groups, self.values, self.counts = _distinct_pairs(
                *(np.concatenate([p[i] for p in pieces]) for i in range(3))
            )
            self.parts, self.pending = [], 0

    def regrouped(self, new_group: np.ndarray) -> ValueCounts:
        """These counts with group g renamed ``new_group[g]`` (several groups may merge into one)."""
        self.compact()
        out = ValueCounts()
        out.add(new_group[self.groups], self.values, self.counts)
        out.compact()
        return out

    def stats(self, n: int) -> dict[str, np.ndarray]:
        """``group_stats`` of every value counted, per group 0..n-1: the same numbers to the bit."""
        self.compact()
        g, v, c = self.groups, self.values, self.counts
        count = np.zeros(n, dtype=np.int64)
        np.add.at(count, g, c)
        total, low, high = np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
        avg, med, std = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        has = np.flatnonzero(count)
        if len(has):
            np.add.at(total, g, v * c)
            first = np.searchsorted(g, has, side="left")
            last = np.searchsorted(g, has, side="right") - 1
            low[has], high[has] = v[first], v[last]
            n_has = count[has]
            avg[has] = total[has] / n_has
            ends = np.cumsum(c)
            before = ends[first] - c[first]  # values counted before each group's first pair
            lo = v[np.searchsorted(ends, before + (n_has - 1) // 2, side="right")]
            hi = v[np.searchsorted(ends, before + n_has // 2, side="right")]
            med[has] = (lo + hi) / 2
            squares = v.astype(object) ** 2 * c.astype(object)
            sums = np.add.reduceat(squares, first) if len(squares) else []
            std[has] = exact_std(n_has, total[has], [int(x) for x in sums])
        return {"count": count, "total": total, "avg": avg, "med": med, "min": low, "max": high, "std": std}


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted, by one sort (numpy 2's ``np.unique`` hashes integers: several times slower)."""
    ordered = np.sort(values)
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered


PACKED_VALUE_BITS = 40  # a (group, value) pair packs into one int64 when values are below 2**40 (18 minutes in ns)


def _counted_pairs(groups: np.ndarray, values: np.ndarray):
    """The distinct (group, value) pairs of single rows, sorted, and how many times each occurs: one plain sort
    of packed keys where they pack (no argsort)."""
    packs = len(values) and values.min() >= 0 and values.max() >> PACKED_VALUE_BITS == 0 and groups.min() >= 0
    if not packs or groups.max() >> 22:
        return _distinct_pairs(groups, values, np.ones(len(groups), dtype=np.int64))
    keys = np.sort((groups << PACKED_VALUE_BITS) | values)
    heads = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    counts = np.diff(np.r_[heads, len(keys)])
    keys = keys[heads]
    return keys >> PACKED_VALUE_BITS, keys & ((1 << PACKED_VALUE_BITS) - 1), counts


def _distinct_pairs(groups: np.ndarray, values: np.ndarray, counts: np.ndarray):
    """The distinct (group, value) pairs, sorted, with their summed counts."""
    if not len(groups):
        return groups, values, counts
    if values.min() >= 0 and values.max() >> PACKED_VALUE_BITS == 0 and groups.max() >> 22 == 0 and groups.min() >= 0:
        keys = (groups << PACKED_VALUE_BITS) | values  # one sort of one key, not a lexsort of two
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        heads = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        return (
            keys[heads] >> PACKED_VALUE_BITS,
            keys[heads] & ((1 << PACKED_VALUE_BITS) - 1),
            np.add.reduceat(counts[order], heads),
        )
    order = np.lexsort((values, groups))
    g, v, c = groups[order], values[order], counts[order]
    new = np.empty(len(g), dtype=bool)
    new[0] = True
    new[1:] = (g[1:] != g[:-1]) | (v[1:] != v[:-1])
    heads = np.flatnonzero(new)
    return g[heads], v[heads], np.add.reduceat(c, heads)
