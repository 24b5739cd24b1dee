"""The SQL side of the nsys reader, without pandas: opening an export, its catalogue, the reads.

``analyze.nsys_sqlite`` turns what these reads return into the Trace's tables. Integer columns
of a whole table (``IntegerRead``) come from the file's pages (``analyze.sqlite_pages``), else
through the ADBC driver, else (None) the reader's sqlite3 path. The split lets a report start
the biggest reads early (``analyze.nsys_prefetch``; on Linux in a forked process, ``analyze.early_read``),
while pandas is still being imported.
"""

from __future__ import annotations

import functools
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.sqlite_pages import (
    MISSING,
    read_integer_columns,
)  # NULL or absent column: MISSING (numpy with it)

SQLITE_MAGIC = b"SQLite format 3\x00"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
# Tables whose presence marks a file as an nsys export (any one suffices).
NSYS_MARKERS = ("StringIds", "TARGET_INFO_SESSION_START_TIME", *META_TABLES)
KERNEL_TABLE, RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"

# Column sets per table: (required, optional). Output names are given in the SQL below.
KERNEL_COLUMNS = (
    ("start", "end"),
    ("shortName", "demangledName", "deviceId", "streamId", "correlationId", "globalPid", "gridX", "gridY", "gridZ",
     "blockX", "blockY", "blockZ", "registersPerThread", "staticSharedMemory", "dynamicSharedMemory"),
)  # fmt: skip
RUNTIME_COLUMNS = (("start", "end"), ("nameId", "globalTid", "correlationId"))
# What the breakdowns use (details=False): no launch shapes, registers, shared memory or streams, and one
# kernel name (KERNEL_NAME). Each column of a million kernels costs ~0.05 s. The runtime calls' API
# names (nameId) are read for the report's CUDA API summary.
KERNEL_LEAN_COLUMNS = (("start", "end"), ("deviceId", "correlationId", "globalPid"))
KERNEL_NAME = {"nameId": ("demangledName", "shortName")}  # the demangled name where recorded, else the short one
RUNTIME_LEAN_COLUMNS = (("start", "end"), ("nameId", "globalTid", "correlationId"))
MEMCPY_COLUMNS = (("start", "end"), ("bytes", "copyKind", "deviceId", "streamId", "correlationId", "globalPid"))
MEMSET_COLUMNS = (("start", "end"), ("bytes", "deviceId", "streamId", "correlationId", "globalPid"))
MEMOP_TABLES = {"CUPTI_ACTIVITY_KIND_MEMCPY": MEMCPY_COLUMNS, "CUPTI_ACTIVITY_KIND_MEMSET": MEMSET_COLUMNS}
NVTX_TABLE = "NVTX_EVENTS"
NVTX_COLUMNS = (("start", "eventType"), ("end", "textId", "globalTid", "endGlobalTid", "domainId"))  # and text
# CUDA graphs. nsys's default (--cuda-graph-trace=graph where the driver allows) records a graph launch as one row
# of GRAPH_TRACE_TABLE (graphId and graphExecId NOT NULL; 2022.4's schema 3.0.0 has no such table) and none of the
# kernels inside it. With --cuda-graph-trace=node those kernels are rows of the kernel table carrying graphNodeId
# (schema 3.0 on) and graphId (3.27; not yet in 3.17, which names no graph). CUPTI gives 0 for a kernel launched
# on its own, nsys writes NULL there.
GRAPH_TRACE_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
GRAPH_TRACE_COLUMNS = (
    ("start", "end"),
    ("deviceId", "streamId", "correlationId", "globalPid", "graphId", "graphExecId"),
)
KERNEL_GRAPH_COLUMNS = (
    "graphId",
    "graphNodeId",
)  # the first one the kernel table has is read (``Catalog.graph_column``)
GRAPH_LAUNCH_APIS = ("cudaGraphLaunch", "cuGraphLaunch")  # StringIds names start so ("cudaGraphLaunch_v10000")
GRAPH_EVENT_TABLES = (GRAPH_TRACE_TABLE, "CUDA_GRAPH_NODE_EVENTS", "CUDA_GRAPH_EVENTS")  # rows here: graphs were used

COLUMNAR_BATCH_ROWS = 1 << 24  # rows per Arrow batch of an ADBC read (buffers grow as rows come, none preallocated)


@functools.cache
def adbc_sqlite():
    """The ADBC SQLite driver (optional speed-up: columnar reads of the big tables, README Dependencies), or None.

    Imported on first use, not with this module: a report served from the Arrow cache never needs it.
    Its low-level API, not its DB-API module, which imports pyarrow.dataset and with it pandas.
    """
    try:
        import adbc_driver_manager  # noqa: F401
        import adbc_driver_sqlite
        import pyarrow  # noqa: F401

        return adbc_driver_sqlite
    except ImportError:  # pragma: no cover - exercised where the driver is absent
        return None


def connect(path: Path) -> sqlite3.Connection:
    """A read-only connection, after checks that turn a missing, non-SQLite or cut file into one InputError."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if not path.is_file():
        raise InputError(f"{path}: not a file")
    with open(path, "rb") as fh:
        head = fh.read(100)
    if not head.startswith(SQLITE_MAGIC):
        raise InputError(f"{path}: not an SQLite file (expected an nsys SQLite export)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(head[28:32], "big")
    if page_count and page_size * page_count > path.stat().st_size:
        raise InputError(
            f"{path}: truncated SQLite file ({path.stat().st_size} bytes, header says {page_size * page_count})"
        )
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error as err:
        raise InputError(f"{path}: cannot open SQLite file ({err})") from None
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    return conn


class Catalog:
    """An open nsys export's tables and columns (which are declared NOT NULL), and the SELECTs on them."""

    def __init__(self, path: Path):
        self.path = path
        self.conn = connect(path)
        try:
            roots = self.conn.execute("SELECT name, rootpage FROM sqlite_master WHERE type IN ('table', 'view')")
            self.roots = {name: root for name, root in roots.fetchall()}  # a view's is 0
            self.info = {name: self.conn.execute(f'PRAGMA table_info("{name}")').fetchall() for name in self.roots}
            self.columns = {name: {row[1] for row in rows} for name, rows in self.info.items()}
            self.not_null = {name: {row[1] for row in rows if row[3]} for name, rows in self.info.items()}
        except (sqlite3.DatabaseError, UnicodeDecodeError) as err:  # a damaged schema can yield undecodable errors
            self.conn.close()
            raise InputError(f"{path}: not a readable SQLite database ({err})") from None
        if not any(t in self.columns for t in NSYS_MARKERS):
            self.conn.close()
            raise InputError(
                f"{path}: SQLite file is not an Nsight Systems export (no StringIds or export metadata table)"
            )
        self.graph_column = self._graph_column()

    def _graph_column(self) -> str | None:
        """The kernel table's column that tells the CUDA graph a kernel ran in (KERNEL_GRAPH_COLUMNS), where the
        export shows graphs in use: a graph launch call among its strings, or a row in a graph table.

        Elsewhere (None) no kernel can carry a graph id, and the column (all NULL, near the end of each record) is
        left unread: in the kernel read it cost 0.05-0.1 s of 1.1M kernels, read apart 0.2 s. Looked up here, on the
        connection's thread, so that the reader and the early read make the same read. A damaged table found here
        counts as no sign: its own read reports it.
        """
        column = next((c for c in KERNEL_GRAPH_COLUMNS if c in self.columns.get(KERNEL_TABLE, ())), None)
        if column is None:
            return None
        launch = " OR ".join(f"value GLOB '{api}*'" for api in GRAPH_LAUNCH_APIS)
        signs = [f'SELECT 1 FROM "{table}" LIMIT 1' for table in GRAPH_EVENT_TABLES if self.has(table)]
        signs += [f"SELECT 1 FROM StringIds WHERE {launch} LIMIT 1"] if self.has("StringIds") else []
        try:
            return column if any(self.conn.execute(sql).fetchone() for sql in signs) else None
        except (sqlite3.DatabaseError, UnicodeDecodeError):
            return None

    def with_graph_column(
        self, spec: tuple[tuple[str, ...], tuple[str, ...]]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """A kernel table read ``spec`` plus the graph column, where one is read (``graph_column``)."""
        return spec if self.graph_column is None else (spec[0], (*spec[1], self.graph_column))

    def has(self, table: str) -> bool:
        return table in self.columns

    def select_sql(
        self,
        table: str,
        spec: tuple[tuple[str, ...], tuple[str, ...]],
        present,
        absent: str,
        where: str = "",
        computed: dict[str, str] | None = None,
    ) -> str:
        """SELECT of the spec's columns: ``present(c)`` for a column the table has, ``absent`` for one it lacks.

        ``computed`` adds columns by name from SQL expressions.
        """
        required, optional = spec
        have = self.columns[table]
        missing = [c for c in required if c not in have]
        if missing:
            raise InputError(
                f"{self.path}: table {table} lacks required column(s) {', '.join(missing)}; unknown nsys schema"
            )
        cols = [present(c) if c in have else absent.format(c=c) for c in (*required, *optional)]
        cols += [f'{expr} AS "{name}"' for name, expr in (computed or {}).items()]
        return f'SELECT {", ".join(cols)} FROM "{table}" {where}'

    def integer_sql(
        self, table: str, spec: tuple[tuple[str, ...], tuple[str, ...]], where: str = "", computed: dict | None = None
    ) -> str:
        """The SELECT of ``spec``'s integer columns: NULL and absent ones as MISSING.

        Columns declared NOT NULL skip the coalesce().
        """
        not_null = self.not_null[table]

        def present(c: str) -> str:
            return f'"{c}"' if c in not_null else f'coalesce("{c}", {MISSING}) AS "{c}"'

        return self.select_sql(table, spec, present, f'{MISSING} AS "{{c}}"', where, computed)

    def integer_read(
        self,
        table: str,
        spec: tuple[tuple[str, ...], tuple[str, ...]],
        coalesced: dict[str, tuple[str, ...]] | None = None,
        where: str = "",
        raw: dict[str, str] | None = None,
    ) -> IntegerRead:
        """The read of ``spec``'s integer columns of ``table``, as SQL and, for a whole table, as a page-reader plan.

        ``coalesced`` adds integer columns by name, each the first non-NULL of some columns
        (absent ones skipped; none: MISSING); ``raw`` adds columns of any type from SQL expressions.
        """
        have = self.columns[table]
        sources = {c: (c,) if c in have else () for c in (*spec[0], *spec[1])}
        for name, cols in (coalesced or {}).items():
            cols = [c for c in cols if c in have]
            never_null = [i for i, c in enumerate(cols) if c in self.not_null[table]]
            sources[name] = tuple(cols[: never_null[0] + 1] if never_null else cols)  # the rest never count
        computed = {name: _coalesce_sql(sources[name]) for name in coalesced or {}} | (raw or {})
        position = {row[1]: row[0] for row in self.info[table]}
        keys = {row[1] for row in self.info[table] if row[5]}  # an INTEGER PRIMARY KEY is stored as the rowid
        used = {c for cols in sources.values() for c in cols}
        paged = bool(used) and not used & keys and not where and not raw
        return IntegerRead(
            path=str(self.path.resolve()),
            table=table,
            sql=self.integer_sql(table, spec, where, computed),
            sources=tuple(sources.items()),
            root=self.roots[table] if paged else 0,
            positions=tuple((c, position[c]) for c in sorted(used)),
            ncols=len(self.info[table]),
        )

    def lean_kernel_read(self) -> IntegerRead:
        """The read of the kernel table that a report makes (``read_nsys_sqlite(details=False)``)."""
        return self.integer_read(KERNEL_TABLE, self.with_graph_column(KERNEL_LEAN_COLUMNS), KERNEL_NAME)

    def lean_runtime_read(self) -> IntegerRead:
        """The read of the runtime table that a report makes (``read_nsys_sqlite(details=False)``)."""
        return self.integer_read(RUNTIME_TABLE, RUNTIME_LEAN_COLUMNS)

    def nvtx_read(self) -> IntegerRead:
        """The read of the NVTX table's integer columns, every row (``read_nvtx`` filters them; the text comes apart)."""
        return self.integer_read(NVTX_TABLE, NVTX_COLUMNS)

    def close(self):
        self.conn.close()


# The reads a report makes, in the order it needs them: the kernels first, then the NVTX ranges, then the
# runtime calls (only the launch join waits for those).
LEAN_READS = {
    KERNEL_TABLE: Catalog.lean_kernel_read,
    NVTX_TABLE: Catalog.nvtx_read,
    RUNTIME_TABLE: Catalog.lean_runtime_read,
}


def _coalesce_sql(columns: tuple[str, ...]) -> str:
    quoted = [f'"{c}"' for c in columns]
    return f"coalesce({', '.join(quoted)}, {MISSING})" if columns else str(MISSING)


@dataclass(frozen=True)
class IntegerRead:
    """A read of integer columns: ``sql`` for SQLite, and for a whole table the plan for its pages.

    ``sources``: each output column and the table's columns it takes (the first non-NULL
    of them; none: MISSING). ``root``: the table's root page, 0 where the pages must not
    be read directly (a view, a key column among the sources, a WHERE clause or columns
    of other types: then only ``sql`` serves). ``positions``: where the
    source columns sit in the table's records. Hashable: it keys the prefetched reads.
    """

    path: str
    table: str
    sql: str
    sources: tuple[tuple[str, tuple[str, ...]], ...]
    root: int
    positions: tuple[tuple[str, int], ...]
    ncols: int


def fetch_integers(read: IntegerRead):
    """``read``'s columns: a dict of int64 numpy arrays from the file's pages, else an Arrow table
    through the ADBC driver, else None (the caller reads through sqlite3). NULL reads as MISSING.

    The driver's own exceptions pass through.
    """
    columns = page_columns(read) if read.root else None
    return fetch_sql(read) if columns is None else output_columns(read, columns)


def page_columns(read: IntegerRead, allocate=None) -> dict | None:
    """The source columns of ``read`` (a whole table) from the file's pages, or None where the page reader declines.

    ``allocate(rows)`` gives each column's int64 array (``sqlite_pages.read_integer_columns``).
    """

    return read_integer_columns(Path(read.path), read.root, dict(read.positions), read.ncols, allocate)


def fetch_sql(read: IntegerRead):
    """``read`` through SQL: an Arrow table from the ADBC driver, or None (the caller reads through sqlite3)."""
    return fetch_arrow(Path(read.path), read.sql) if adbc_sqlite() is not None else None


def output_columns(read: IntegerRead, columns: dict) -> dict:
    """``read``'s output columns from the table's source columns (int64 arrays, as the page reader gives them)."""
    import numpy as np

    rows = len(next(iter(columns.values())))
    out = {}
    for name, cols in read.sources:
        value = columns[cols[0]] if cols else np.full(rows, MISSING, dtype=np.int64)
        for other in cols[1:]:
            missing = value == MISSING
            if missing.any():  # else the column as it is: no fresh copy of a million names
                value = np.where(missing, columns[other], value)
        out[name] = value
    return out


def fetch_arrow(path: Path, sql: str):
    """``sql`` through the ADBC driver as one pyarrow Table; the driver's own exceptions pass through.

    Rows come in one Arrow batch (up to COLUMNAR_BATCH_ROWS): the driver's default of 1024
    rows a batch made to_pandas concatenate a thousand chunks into fresh arrays, while
    one batch converts without a copy (1.1M kernels: 0.1-0.25 s and 80 MiB less).
    """
    import adbc_driver_manager as adbc
    import pyarrow as pa

    with adbc_sqlite().connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1") as db:
        with adbc.AdbcConnection(db) as conn, adbc.AdbcStatement(conn) as stmt:
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(COLUMNAR_BATCH_ROWS)})
            stmt.set_sql_query(sql)
            stream, _ = stmt.execute_query()
            return pa.RecordBatchReader._import_from_c(stream.address).read_all()
