"""Integer columns of an SQLite table read straight from the file's pages with numpy.

Why: SQLite hands rows out one value at a time; through the ADBC driver that costs ~70 ns
a value, 0.9 s of CPU for the 12M values of a big export's kernel and runtime tables. The
file format (https://www.sqlite.org/fileformat2.html) is stable and documented, and an nsys
activity table is a rowid table of small integer records, so the same values can be cut
out of the pages with numpy, a few hundred pages a step: half the CPU (0.24 s for 1.1M kernels).

Only the plain case is taken: a rollback-journal file, a rowid table whose records fit in
their pages (no overflow) with headers of one-byte serial types, integer or NULL values.
Anything else, and any sign of damage (a page of the wrong type, a cell outside its page,
a record longer than its cell, rowids out of order), returns None: the caller then reads
through SQLite, which handles every case and reports damage in its own words.
"""

from __future__ import annotations

import contextlib
import mmap
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

MISSING = -1  # what a NULL reads as (nsys ids, times and sizes are never negative)
LEAF, INTERIOR = 0x0D, 0x05  # table b-tree page types
MAX_DEPTH = 20  # a b-tree of 4 KiB pages holds ~2^60 rows in fewer levels
RELEASE_PAGES = 1 << 14  # pages looked at between releases when planning a read piece by piece (64 MiB of 4 KiB)
CHUNK_PAGES = 256  # leaf pages decoded per step (measured best of 64..4096 on a 1.1M-row table)
ONES = np.uint64(0x0101010101010101)  # one in each byte (SWAR: eight serial types in one uint64)
HIGH = np.uint64(0x8080808080808080)
LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)


def read_integer_columns(
    path: Path, root: int, cids: dict[str, int], ncols: int, allocate: Callable[[int], np.ndarray] | None = None
) -> dict[str, np.ndarray] | None:
    """Columns ``cids`` (name -> position in the table) of the rowid table rooted at page ``root``.

    ``ncols`` is the table's column count. Values come back as int64 arrays in rowid order
    (SQLite's own scan order), NULL as MISSING. None when the table is not the plain case,
    and on a big-endian machine (the byte views below read words as little-endian ones).
    ``allocate(rows)`` gives each column's int64 array (default: ``np.empty``); the early
    read (``analyze.early_read``) passes one that places them in memory its parent shares.
    """
    if sys.byteorder != "little":
        return None
    with open(path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # an empty file or one that cannot be mapped
            return None
    try:
        return _read(np.frombuffer(mm, dtype=np.uint8), root, cids, ncols, allocate or _empty)
    except (IndexError, ValueError):  # a damaged page that got past the checks; SQLite will say what is wrong
        return None
    finally:
        with contextlib.suppress(BufferError):  # a view still held (a sampling profiler's frame, as Dask workers
            mm.close()  # run): the mapping goes with the last view instead


class _Words:
    """A file's bytes, with every byte offset readable as the start of an 8-byte word.

    One gather then reads a varint, eight serial types or a whole value. The windows are
    strided views of the mapped file, no copy; the last 7 offsets, whose words would run
    past the end of the file, are read with zero padding. ``pairs`` reads the 2-byte
    big-endian numbers at even offsets: a page's cell pointers, cheaper than whole words.
    """

    def __init__(self, buf: np.ndarray):
        self.buf = buf
        windows = np.lib.stride_tricks.as_strided(buf, shape=(max(len(buf) - 7, 0), 8), strides=(1, 1))
        self.windows = windows.view("<u8")[:, 0]  # native order: a gather is the only copy
        self.pairs = buf[: len(buf) // 2 * 2].view(">u2")

    def big(self, at: np.ndarray) -> np.ndarray:
        """Big-endian uint64 words at ``at`` (as SQLite stores integers and varints)."""
        words = self.little(at)
        words.byteswap(inplace=True)
        return words

    def little(self, at: np.ndarray) -> np.ndarray:
        """Little-endian uint64 words at ``at``: the byte at ``at`` is the lowest."""
        view = self.windows
        if not len(at) or at.max() < len(view):
            return view[at]
        words = view[np.minimum(at, len(view) - 1)]
        for i in np.flatnonzero(at >= len(view)):
            words[i] = int.from_bytes(self.buf[at[i] : at[i] + 8].tobytes().ljust(8, b"\0"), "little")
        return words


def _empty(rows: int) -> np.ndarray:
    return np.empty(rows, dtype=np.int64)


def _read(buf: np.ndarray, root: int, cids: dict[str, int], ncols: int, allocate) -> dict[str, np.ndarray] | None:
    plan = _plan(buf, root)
    if plan is None:
        return None
    words, leaves, ends, page_size, usable = plan
    out = {name: allocate(int(ends[-1])) for name in cids}
    done, last_rowid = 0, -(1 << 63)
    # A few hundred pages at a time: the arrays of each step stay in cache, and the memory
    # freed by one batch serves the next (fresh pages cost a fault each on these machines).
    for first in range(0, len(leaves), CHUNK_PAGES):
        chunk = leaves[first : first + CHUNK_PAGES]
        end = int(ends[first + len(chunk) - 1])
        into = [(out[name][done:end], j) for name, j in cids.items()]
        rowid = _decode(words, chunk, page_size, usable, ncols, into)
        if rowid is None or (len(rowid) and rowid[0] <= last_rowid):  # rowids rise through the whole table
            return None
        last_rowid = rowid[-1] if len(rowid) else last_rowid
        done = end
    return out


def _plan(buf: np.ndarray, root: int, release: Callable[[], None] | None = None):
    """The table's leaf pages and rows up to each, with the file's geometry; None where not the plain case.

    ``release`` (``integer_chunks``) unmaps the pages looked at, every RELEASE_PAGES of them.
    """
    if len(buf) < 512 or buf[18] != 1 or buf[19] != 1:  # 2: WAL mode, whose last writes may live elsewhere
        return None
    page_size = int.from_bytes(buf[16:18].tobytes(), "big")
    page_size = 65536 if page_size == 1 else page_size
    usable = page_size - int(buf[20])
    words = _Words(buf)
    leaves = _leaf_pages(words, page_size, usable, len(buf) // page_size, root, release)
    if leaves is None:
        return None
    counts = (
        _in_batches(lambda at: words.big(at), _page_start(leaves, page_size) + 3, release) >> np.uint64(48)
    ).astype(np.int64)
    return words, leaves, np.cumsum(counts), page_size, usable  # rows up to and including each leaf


class PagesDeclined(Exception):
    """``integer_chunks`` met a page it does not take after ``last_rowid``: read the rest through SQLite."""

    def __init__(self, last_rowid: int):
        super().__init__(f"pages declined after rowid {last_rowid}")
        self.last_rowid = last_rowid


def integer_chunks(path: Path, root: int, cids: dict[str, int], ncols: int, rows: int) -> Iterator[dict] | None:
    """``read_integer_columns`` a piece at a time: dicts of about ``rows`` rows each, plus their "rowid".

    For a table larger than memory (``analyze.windows``): only one piece is held at once. None
    when the table is not the plain case from the start; a piece found odd later raises
    ``PagesDeclined`` with the last rowid given, so the caller goes on through SQLite from there.
    """
    if sys.byteorder != "little":
        return None
    with open(path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
    buf = np.frombuffer(mm, dtype=np.uint8)
    try:
        plan = _plan(buf, root, lambda: _release(mm))
    except (IndexError, ValueError):
        plan = None
    if plan is None:
        return None
    return _chunks(plan, cids, ncols, max(1, rows), lambda: _release(mm))


def _release(mm: mmap.mmap) -> None:
    """Unmap the file's pages read so far from this process (they stay in the page cache): a mapped page counts in
    the process's resident memory until then, so a 10 GB file read through would look like 10 GB used."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no madvise here, or the mapping is closed
        mm.madvise(mmap.MADV_DONTNEED)


def _chunks(plan, cids: dict[str, int], ncols: int, rows: int, release: Callable[[], None]) -> Iterator[dict]:
    """The pieces of ``integer_chunks``: each decoded CHUNK_PAGES leaves a step, as ``_read`` does; the mapped
    pages are released after each piece."""
    words, leaves, ends, page_size, usable = plan
    per_page = max(1, int(ends[-1]) // max(len(leaves), 1))
    step = max(1, rows // per_page)
    last_rowid, done = -(1 << 63), 0
    for first in range(0, len(leaves), step):
        given = last_rowid  # the last rowid of the pieces yielded: where SQLite takes over
        piece = leaves[first : first + step]
        end = int(ends[first + len(piece) - 1])
        out = {name: np.empty(end - done, dtype=np.int64) for name in cids}
        rowids, at = [], 0
        for sub in range(0, len(piece), CHUNK_PAGES):
            chunk = piece[sub : sub + CHUNK_PAGES]
            stop = int(ends[first + sub + len(chunk) - 1]) - done
            try:
                into = [(out[name][at:stop], j) for name, j in cids.items()]
                rowid = _decode(words, chunk, page_size, usable, ncols, into)
            except (IndexError, ValueError):
                rowid = None
            if rowid is None or (len(rowid) and rowid[0] <= last_rowid):
                raise PagesDeclined(given)
            last_rowid = int(rowid[-1]) if len(rowid) else last_rowid
            rowids.append(rowid)
            at = stop
        done = end
        release()
        yield out | {"rowid": np.concatenate(rowids)}


def _decode(words: _Words, leaves: np.ndarray, page_size: int, usable: int, ncols: int, into: list):
    """The rowids of the cells of ``leaves``, or None if anything is odd.

    ``into`` pairs an array (a row per cell) with the position of the column to write into it.
    """
    cell, cell_end = _cells(words, leaves, page_size, usable, first=8)
    if cell is None or len(cell) != len(into[0][0]):
        return None
    if not len(cell):
        return np.zeros(0, dtype=np.int64)
    payload, n1 = _varint(words, cell)
    rowid, n2 = _varint(words, cell + n1)
    if payload is None or rowid is None or (payload < 1).any() or (payload > usable - 35).any():
        return None  # a longer payload spills to overflow pages
    record = cell + n1 + n2
    record_end = record + payload
    if (record_end > cell_end).any() or (np.diff(rowid) <= 0).any():
        return None
    header = words.buf[record]  # header size: one byte when < 128
    need = max(j for _, j in into) + 1
    shortest, longest = int(header.min()), int(header.max())
    if longest >= 0x80 or shortest - 1 < need or longest - 1 > ncols:
        return None  # long headers, or records older than a column added since (SQLite reads its default)
    values = record + header  # where the values of the next eight columns start
    for first in range(0, need, 8):
        here = [(dest, j - first) for dest, j in into if first <= j < first + 8]
        layout = _value_layout(words.little(record + 1 + first), min(8, need - first), [k for _, k in here])
        if layout is None:
            return None
        kind, size, start, shift, total = layout
        for dest, k in here:
            # A value is the top ``size`` bytes of the big-endian word where it starts.
            np.right_shift(words.big(values + start[:, k]).view(np.int64), shift[:, k], out=dest)
            if size[:, k].min() == 0:  # NULL and the constants 0 and 1 take no bytes
                t = kind[:, k].astype(np.int64)
                np.copyto(dest, np.where(t == 0, MISSING, np.where(t >= 8, t - 8, dest)))
        values += total
    return None if (values > record_end).any() else rowid


def _in_batches(read: Callable[[np.ndarray], np.ndarray], at: np.ndarray, release) -> np.ndarray:
    """``read(at)``, RELEASE_PAGES offsets at a time with the pages released between (one byte of every leaf page
    is read to plan a table: all at once, a 10 GB table's pages would all be resident for a moment)."""
    if release is None or len(at) <= RELEASE_PAGES:
        return read(at)
    parts = []
    for first in range(0, len(at), RELEASE_PAGES):
        parts.append(read(at[first : first + RELEASE_PAGES]))
        release()
    return np.concatenate(parts)


def _leaf_pages(
    words: _Words, page_size: int, usable: int, pages: int, root: int, release: Callable[[], None] | None = None
) -> np.ndarray | None:
    """The table's leaf pages in key order, walking interior pages a level at a time; None if odd."""
    level = np.array([root], dtype=np.int64)
    seen = 0
    for _ in range(MAX_DEPTH):
        if level.min() < 1 or level.max() > pages:
            return None
        seen += len(level)
        if seen > pages:  # a cycle
            return None
        kind = _in_batches(lambda at: words.buf[at], _page_start(level, page_size), release)
        if (kind == LEAF).all():
            return level if len(np.unique(level)) == len(level) else None
        if not (kind == INTERIOR).all():  # b-trees are balanced: a level is all leaves or all interior
            return None
        cell, _ = _cells(words, level, page_size, usable, first=12, right_child=True)
        if cell is None:
            return None
        level = (words.big(cell) >> np.uint64(32)).astype(np.int64)  # each cell starts with its 4-byte child
    return None


def _page_start(page: np.ndarray, page_size: int) -> np.ndarray:
    """File offset of each page's b-tree header (page 1 starts after the 100-byte file header)."""
    return (page - 1) * page_size + np.where(page == 1, 100, 0)


def _cells(words: _Words, page: np.ndarray, page_size: int, usable: int, first: int, right_child: bool = False):
    """File offsets of the cells of ``page`` (b-tree header of ``first`` bytes), page by page, and
    where each page's usable bytes end.

    With ``right_child`` (interior pages) each page's right-most pointer (header bytes 8..11) comes
    last as if a cell: it holds the child that follows the page's last key. None if a cell
    pointer is outside its page.
    """
    head = _page_start(page, page_size)
    top = (page - 1) * page_size
    count = (words.big(head + 3) >> np.uint64(48)).astype(np.int64)
    if (first + 2 * count > usable).any():
        return None, None
    per_page = count + right_child
    row = np.repeat(np.arange(len(page)), per_page)
    k = np.arange(len(row)) - np.repeat(np.cumsum(per_page) - per_page, per_page)
    pointer = words.pairs[(head[row] + first) // 2 + k].astype(np.int64)  # headers start at even offsets
    cell = top[row] + pointer
    outside = (pointer < (head - top + first + 2 * count)[row]) | (pointer > usable - 4)  # a cell takes 4+ bytes
    if right_child:
        last = k == count[row]
        cell[last] = head[row[last]] + 8
        outside &= ~last
    if outside.any():
        return None, None
    return cell, top[row] + usable


def _varint(words: _Words, at: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """SQLite varints at ``at``: values and lengths; (None, None) if one is 9 bytes long (never here)."""
    first = words.buf[at]
    if len(at) and first.max() < 0x80:  # all one byte long (as a record's payload size mostly is)
        return first.astype(np.int64), np.ones(len(at), dtype=np.int64)
    word = words.big(at)
    if len(at) and (same := _same_length_varints(word)) is not None:
        return same
    stops = ~word & HIGH  # high bit clear: the varint's last byte
    if (stops == 0).any():
        return None, None
    # The first stop from the top: the highest set bit, exact through float64 (stops are 8 bits apart).
    top_bit = np.frexp(stops.astype(np.float64))[1] - 1
    length = (64 - top_bit + 7) // 8
    word >>= (64 - 8 * length).astype(np.uint64)  # the varint's bytes, right-aligned
    value = word & np.uint64(0x7F)
    for k in range(1, int(length.max()) if len(at) else 0):  # seven bits a byte
        value |= ((word >> np.uint64(8 * k)) & np.uint64(0x7F)) << np.uint64(7 * k)
    return value.astype(np.int64), length.astype(np.int64)


def _same_length_varints(word: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``_varint`` of the big-endian words ``word`` where every varint is as long as the first one, as the rowids
    of a step's pages mostly are: seven bits a byte at fixed shifts (half the time of the general path on 20k
    rowids); None otherwise."""
    first, length = int(word[0]), 1
    while length <= 8 and first >> (64 - 8 * length) & 0x80:  # the continuation bit of byte ``length``
        length += 1
    if length > 8:  # 9 bytes long: the general path declines it
        return None
    continued = sum(0x80 << (64 - 8 * k) for k in range(1, length))  # bytes 1 .. length-1
    if not ((word & np.uint64(continued | 0x80 << (64 - 8 * length))) == np.uint64(continued)).all():
        return None
    value = (word >> np.uint64(64 - 8 * length)) & np.uint64(0x7F)
    for k in range(1, length):  # byte ``length - k`` from the top holds bits 7k .. 7k+6
        value |= ((word >> np.uint64(64 - 8 * (length - k))) & np.uint64(0x7F)) << np.uint64(7 * k)
    return value.astype(np.int64), np.full(len(word), length, dtype=np.int64)


def _value_layout(types: np.ndarray, used: int, wanted: list[int]):
    """The first ``used`` serial types of each record, eight to a little-endian uint64, sized together (SWAR).

    Returns (n, 8) views: the types, their sizes, where each value starts after the
    previous words' columns, how far to shift the big-endian word read there; and the
    ``used`` columns' total size (int64). None where a header holds a type this reader
    does not take: a reserved type, a type of two bytes or more (text or a blob of 57+
    bytes), or, in the ``wanted`` columns, anything but NULL, an integer of 1-8 bytes or
    the constants 0 and 1 (a real, text, a blob).
    """
    if used < 8:  # bytes past the last column needed are other columns' types, or values
        types &= np.uint64((1 << (8 * used)) - 1)
    if (types & HIGH).any():
        return None
    ge = {t: ((types + ONES * np.uint64(128 - t)) & HIGH) >> np.uint64(7) for t in (5, 6, 7, 8, 10)}
    real = ge[7] & ~ge[8]
    wanted_bytes = np.uint64(sum(1 << (8 * i) for i in wanted))
    # sizes of types 0..9: 0 1 2 3 4 6 8 8 0 0 = (t + [t >= 5] + [t == 6]) unless t >= 8
    sizes = (types + ge[5] + ge[6] - ge[7]) & ~(ge[8] * np.uint64(0xFF))
    if ge[10].any():  # text, a blob or a reserved type somewhere (nsys's activity tables have none)
        return _long_value_layout(types, sizes, ge[10], real, wanted_bytes)
    if (real & wanted_bytes).any():
        return None
    shifts = ONES * np.uint64(64) - (sizes << np.uint64(3))  # 64 - 8 * size
    ends = sizes * ONES  # byte i: sum of sizes 0..i (each at most 8: the sums fit a byte)
    starts = (ends << np.uint64(8)).view(np.uint8).reshape(-1, 8)
    types, sizes, shifts = (w.view(np.uint8).reshape(-1, 8) for w in (types, sizes, shifts))
    return types, sizes, starts, shifts, (ends >> np.uint64(56)).view(np.int64)


def _long_value_layout(types: np.ndarray, sizes: np.ndarray, ge10: np.ndarray, real: np.ndarray, wanted_bytes):
    """``_value_layout`` where some type is 10 or more: text and blobs (their sizes may pass 8), or reserved."""
    text = ((types + ONES * np.uint64(128 - 12)) & HIGH) >> np.uint64(7)
    reserved = ge10 & ~text
    if (reserved | ((real | text) & wanted_bytes)).any():
        return None
    # the size of text or a blob of type t >= 12 is (t - 12) // 2
    text_bytes = text * np.uint64(0xFF)
    sizes = (sizes & ~text_bytes) | ((((types - text * np.uint64(12)) >> np.uint64(1)) & LOW7) & text_bytes)
    shifts = ONES * np.uint64(64) - ((sizes & ~text_bytes) << np.uint64(3))  # 64 - 8 * size, for integers
    types, sizes, shifts = (w.view(np.uint8).reshape(-1, 8) for w in (types, sizes, shifts))
    starts = np.zeros((len(types), 8), dtype=np.int64)
    for i in range(1, 8):
        starts[:, i] = starts[:, i - 1] + sizes[:, i - 1]
    return types, sizes, starts, shifts, starts[:, 7] + sizes[:, 7]
