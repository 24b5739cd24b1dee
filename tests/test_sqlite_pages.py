"""The page reader (``analyze.sqlite_pages``) against SQLite itself: same values, or None (SQLite reads instead)."""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from profiler_kit.analyze.sqlite_pages import MISSING, read_integer_columns

from tests.conftest import shared_files

REAL = shared_files("nsys_sqlite", "*.sqlite")  # ../shared/data, or the subset shipped in tests/data
EDGES = [
    0,
    1,
    -1,
    2,
    127,
    128,
    -128,
    255,
    32767,
    -32768,
    2**23,
    -(2**23),
    2**31 - 1,
    -(2**31),
    2**47,
    2**63 - 1,
    -(2**63),
]


def _table(path: Path, rows: list[tuple], page_size: int = 4096, columns: str = "a INTEGER, b INTEGER, c INTEGER"):
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {page_size}")
    con.execute(f"CREATE TABLE t ({columns})")
    marks = ", ".join("?" * len(rows[0])) if rows else ""
    if rows:
        con.executemany(f"INSERT INTO t VALUES ({marks})", rows)
    con.commit()
    con.close()
    return path


def _layout(path: Path, table: str = "t"):
    con = sqlite3.connect(path)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    info = con.execute(f'PRAGMA table_info("{table}")').fetchall()
    con.close()
    return root, {row[1]: row[0] for row in info}, len(info)


def _sqlite_columns(path: Path, table: str, names) -> dict[str, np.ndarray]:
    con = sqlite3.connect(path)
    rows = con.execute(f'SELECT {", ".join(f"{chr(34)}{c}{chr(34)}" for c in names)} FROM "{table}"').fetchall()
    con.close()
    return {c: np.array([MISSING if r[i] is None else r[i] for r in rows], dtype=np.int64) for i, c in enumerate(names)}


def _read(path: Path, table: str = "t", names=None):
    root, cids, ncols = _layout(path, table)
    wanted = {c: cids[c] for c in (names or cids)}
    return read_integer_columns(path, root, wanted, ncols)


def _assert_same(path: Path, table: str = "t", names=None):
    got = _read(path, table, names)
    assert got is not None
    want = _sqlite_columns(path, table, list(got))
    for c in want:
        np.testing.assert_array_equal(got[c], want[c], err_msg=c)
    return got


@pytest.mark.parametrize("page_size", [512, 1024, 4096, 65536])
def test_every_integer_size_null_and_constants_match_sqlite(tmp_path, page_size):
    rng = random.Random(page_size)
    values = [*EDGES, None]
    rows = [tuple(rng.choice(values) if rng.random() < 0.5 else rng.randint(-(2**40), 2**40) for _ in range(3))
            for _ in range(5000)]  # fmt: skip
    got = _assert_same(_table(tmp_path / "t.sqlite", rows, page_size))
    assert len(got["a"]) == 5000
    assert {MISSING, 0, 1, 2**63 - 1, -(2**63)} <= set(got["a"].tolist()) | set(got["b"].tolist())


def test_deep_tree_and_column_subsets(tmp_path):
    rows = [(i, i * 7 - 10**6, None if i % 3 else i) for i in range(60_000)]  # four levels of 512-byte pages
    path = _table(tmp_path / "deep.sqlite", rows, page_size=512)
    assert _assert_same(path, names=["c"])["c"][:4].tolist() == [0, MISSING, MISSING, 3]
    _assert_same(path, names=["a", "c"])


def test_rows_follow_rowid_order_after_deletes_and_explicit_rowids(tmp_path):
    path = _table(tmp_path / "order.sqlite", [(i, -i, i % 5) for i in range(3000)])
    con = sqlite3.connect(path)
    con.execute("DELETE FROM t WHERE a % 7 = 0")
    con.execute("INSERT INTO t (rowid, a, b, c) VALUES (0, 1, 2, 3), (1000000000000, 4, 5, 6)")
    con.commit()
    got = _assert_same(path)
    assert got["a"][0] == 1 and got["a"][-1] == 4
    con.execute("INSERT INTO t (rowid, a, b, c) VALUES (-5, 7, 8, 9)")  # a nine-byte varint
    con.commit()
    con.close()
    assert _read(path) is None


def test_empty_table_and_one_row_at_the_end_of_the_file(tmp_path):
    empty = _read(_table(tmp_path / "empty.sqlite", []))
    assert empty is not None and all(len(v) == 0 for v in empty.values())
    one = _table(tmp_path / "one.sqlite", [(2**62, -(2**62), 7)])  # its cell ends at the file's last byte
    assert _assert_same(one)["a"].tolist() == [2**62]


def test_columns_added_later_and_text_before_the_wanted_ones(tmp_path):
    path = _table(tmp_path / "added.sqlite", [(i, i, i) for i in range(100)])
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE t ADD COLUMN d INTEGER")
    con.execute("INSERT INTO t VALUES (1, 2, 3, 4)")
    con.commit()
    con.close()
    _assert_same(path, names=["a", "c"])  # every record has these
    assert _read(path, names=["d"]) is None  # old records lack d: SQLite supplies its default
    mixed = _table(
        tmp_path / "text.sqlite", [("short", 1, 2), ("x" * 40, 3, 4)], columns="s TEXT, a INTEGER, b INTEGER"
    )
    _assert_same(mixed, names=["a", "b"])


@pytest.mark.parametrize(
    "rows, columns",
    [
        ([(1, 2.5, 3)], "a INTEGER, b REAL, c INTEGER"),  # a real where integers were wanted
        ([(1, "text", 3)], "a INTEGER, b, c INTEGER"),  # text
        ([(1, b"\x00\x01", 3)], "a INTEGER, b, c INTEGER"),  # a blob
        ([("y" * 100, 2, 3)], "s TEXT, b INTEGER, c INTEGER"),  # a two-byte serial type before the wanted column
        ([(1, b"z" * 5000, 3)], "a INTEGER, b, c INTEGER"),  # a record spilling to overflow pages
    ],
)
def test_what_it_does_not_take_is_left_to_sqlite(tmp_path, rows, columns):
    assert _read(_table(tmp_path / "odd.sqlite", rows, columns=columns), names=["b", "c"]) is None


def test_wal_mode_and_without_rowid_tables_are_left_to_sqlite(tmp_path):
    wal = _table(tmp_path / "wal.sqlite", [(1, 2, 3)])
    con = sqlite3.connect(wal)
    con.execute("PRAGMA journal_mode = WAL")
    con.close()
    assert _read(wal) is None
    path = tmp_path / "norowid.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER, c INTEGER) WITHOUT ROWID")
    con.execute("INSERT INTO t VALUES (1, 2, 3)")
    con.commit()
    con.close()
    assert _read(path, names=["b", "c"]) is None


def test_damaged_pages_give_sqlites_values_or_none(tmp_path):
    """Bytes overwritten anywhere in a table: the reader returns what SQLite returns, or leaves it to SQLite."""
    clean = _table(tmp_path / "clean.sqlite", [(i, i * 1000, i % 9) for i in range(20_000)], page_size=1024)
    size = clean.stat().st_size
    rng = random.Random(7)
    outcomes = {"same": 0, "none": 0}
    for trial in range(60):
        path = tmp_path / f"damaged{trial}.sqlite"
        shutil.copy(clean, path)
        with open(path, "r+b") as fh:
            for _ in range(rng.choice([1, 3, 20])):
                fh.seek(rng.randrange(1024 * 2, size))  # past sqlite_master: the table's pages
                fh.write(bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 64]))))
        got = _read(path)
        if got is None:
            outcomes["none"] += 1
            continue
        try:
            want = _sqlite_columns(path, "t", list(got))
        except sqlite3.DatabaseError:
            pytest.fail(f"trial {trial}: SQLite calls the file damaged, the page reader returned values")
        for c in want:
            np.testing.assert_array_equal(got[c], want[c])
        outcomes["same"] += 1
    assert outcomes["none"] and outcomes["same"]  # both paths were exercised


@pytest.mark.skipif(not REAL, reason="no real exports")
def test_real_exports_integer_tables_match_sqlite():
    taken = 0
    for path in REAL:
        con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        con.close()
        for table in tables:
            if not table.startswith(("CUPTI_ACTIVITY_KIND_", "ThreadNames")):
                continue
            got = _read(path, table)
            if got is not None:
                want = _sqlite_columns(path, table, list(got))
                for c in want:
                    np.testing.assert_array_equal(got[c], want[c], err_msg=f"{path.name} {table}.{c}")
                taken += 1
    assert taken >= (10 if len(REAL) >= 5 else 5)  # ../shared/data's five exports, or the two shipped


def _varint_bytes(value: int) -> bytes:
    """SQLite's varint of ``value`` (below 2**56, so at most 8 bytes): 7 bits a byte, the first byte highest."""
    groups = [value & 0x7F]
    while value := value >> 7:
        groups.append(value & 0x7F)
    return bytes([g | 0x80 for g in reversed(groups[1:])] + [groups[0]])


@pytest.mark.parametrize("lengths", ["same", "mixed"])
def test_varints_of_one_length_and_of_many(lengths):
    """``_varint`` takes a run of equally long varints (a step's rowids) by fixed shifts, others byte by byte: both
    give each value and length, checked against an encoder written from the file format's definition."""
    from profiler_kit.analyze.sqlite_pages import _varint, _Words

    rng = random.Random(7)
    for length in range(1, 9):
        low, high = (0 if length == 1 else 1 << 7 * (length - 1)), (1 << 7 * length) - 1
        values = [rng.randint(low, high) for _ in range(40)]
        if lengths == "mixed":
            values[rng.randrange(40)] = rng.randint(0, (1 << 56) - 1) >> rng.randrange(56)
        encoded = [_varint_bytes(v) for v in values]
        filler = [bytes(rng.randrange(256) for _ in range(rng.randrange(4))) for _ in encoded]
        data = b"".join(e + f for e, f in zip(encoded, filler, strict=True))
        at = np.cumsum([0] + [len(e) + len(f) for e, f in zip(encoded, filler, strict=True)][:-1])
        got, got_lengths = _varint(_Words(np.frombuffer(data, dtype=np.uint8)), at)
        assert got.tolist() == values
        assert got_lengths.tolist() == [len(e) for e in encoded]
    nine_bytes = np.frombuffer(b"\xff" * 8 + b"\x01" + b"\x00" * 8, dtype=np.uint8)
    assert _varint(_Words(nine_bytes), np.array([0])) == (None, None)
