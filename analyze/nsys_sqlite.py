"""Read Nsight Systems SQLite exports (schema 2.x to 3.27, any OS) into a Trace.

The schema drifts between nsys releases, so nothing is assumed: every table
and column is looked up first, and each table below lists the columns it needs
(required) and the ones it uses when present (optional). Names stored as ids
into ``StringIds`` are decoded here, once. Text that is not valid UTF-8 is
decoded with replacement characters rather than rejected.
"""

from __future__ import annotations

import os
import sqlite3
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.heap import gc_paused
from profiler_kit.analyze.intervals import nesting_depth
from profiler_kit.analyze.nsys_schema import (
    GRAPH_TRACE_COLUMNS,
    GRAPH_TRACE_TABLE,
    KERNEL_COLUMNS,
    KERNEL_TABLE,
    MEMOP_TABLES,
    META_TABLES,
    MISSING,
    NVTX_TABLE,
    RUNTIME_COLUMNS,
    RUNTIME_TABLE,
    Catalog,
    IntegerRead,
    adbc_sqlite,
    fetch_arrow,
    fetch_integers,
)
from profiler_kit.analyze.tables import KERNELS, Trace, one_value, with_columns

if TYPE_CHECKING:
    from profiler_kit.analyze.nsys_prefetch import Prefetch

SUPPORTED_SCHEMA_MAJOR = (2, 3)

# NVTX_EVENTS.eventType values (nsys reports' own constants).
NVTX_PUSHPOP, NVTX_STARTEND, NVTXT_PUSHPOP, NVTXT_STARTEND = 59, 60, 70, 71
NVTX_DOMAIN_CREATE = 75
NVTX_RANGE_STYLE = {
    NVTX_PUSHPOP: "push_pop",
    NVTXT_PUSHPOP: "push_pop",
    NVTX_STARTEND: "start_end",
    NVTXT_STARTEND: "start_end",
}

# Memcpy copyKind -> label, used when the export lacks ENUM_CUDA_MEMCPY_OPER.
MEMCPY_KIND_LABELS = {
    0: "Unknown",
    1: "Host-to-Device",
    2: "Device-to-Host",
    3: "Host-to-Array",
    4: "Array-to-Host",
    5: "Array-to-Array",
    6: "Array-to-Device",
    7: "Device-to-Array",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
    11: "Unified Host-to-Device",
    12: "Unified Device-to-Host",
    13: "Unified Device-to-Device",
}

PID_SHIFT, ID_MASK = 24, 0xFFFFFF
ID_COLUMNS = {"deviceId": "device_id", "streamId": "stream_id", "correlationId": "correlation_id"}  # their names here
# graph_id of a kernel that ran inside a CUDA graph the export does not name (a kernel table with graphNodeId and
# no graphId): CUPTI numbers graphs from 1 and gives 0 to a kernel launched on its own, so 0 is no graph's id.
UNNAMED_GRAPH = 0


def pid_of(global_id: pd.Series | np.ndarray) -> np.ndarray:
    """Process id from an nsys globalTid/globalPid (bits 24..47)."""
    return (np.asarray(global_id, dtype=np.int64) >> PID_SHIFT) & ID_MASK


def pids_of(global_id: np.ndarray, missing: int | None = -1) -> np.ndarray:
    """``pid_of`` for a whole column: ``missing`` where the id is MISSING (None: whatever ``pid_of`` makes of it).

    One process (the usual case) gives a read-only view of its pid, not a fresh array of a million equal
    values: the pid is the id's high bits, so the smallest and the largest id share it exactly when all do.
    """
    if len(global_id):
        low, high = global_id.min(), global_id.max()
        if (missing is None or low != MISSING) and pid_of(low) == pid_of(high):
            return np.broadcast_to(pid_of(global_id[:1]), len(global_id))
    pids = pid_of(global_id)
    return pids if missing is None else np.where(global_id != MISSING, pids, missing)


def tid_of(global_tid: pd.Series | np.ndarray) -> np.ndarray:
    """Thread id from an nsys globalTid (low 24 bits)."""
    return np.asarray(global_tid, dtype=np.int64) & ID_MASK


def tids_of(global_tid: np.ndarray) -> np.ndarray:
    """``tid_of`` for a whole column; one thread (every id the same) gives a read-only view of its tid."""
    if one_value(global_tid):
        return np.broadcast_to(tid_of(global_tid[:1]), len(global_tid))
    return tid_of(global_tid)


def with_unread_columns(df: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """``df`` plus columns ``names`` holding only MISSING, as read-only views of one value.

    Eight such columns on a million kernels would take 64 MiB as real arrays; views take none.
    """
    return with_columns(df, dict.fromkeys(names, np.broadcast_to(np.int64(MISSING), len(df))))


class Export(Catalog):
    """An open nsys export: its catalogue (``Catalog``) and reads of its tables into DataFrames."""

    def __init__(self, path: Path, prefetched: Prefetch | None = None):
        super().__init__(path)
        self.pool: ThreadPoolExecutor | None = None
        self.prefetched = prefetched  # reads started before pandas was imported (``analyze.nsys_prefetch``)

    def select(
        self,
        table: str,
        spec: tuple[tuple[str, ...], tuple[str, ...]],
        where: str = "",
        coalesced: dict[str, tuple[str, ...]] | None = None,
        raw: dict[str, str] | None = None,
    ) -> pd.DataFrame:
        """Read the spec's integer columns of ``table``; NULL and absent columns come back as -1.

        ``coalesced`` adds integer columns by name, each the first non-NULL of some columns;
        ``raw`` adds columns of any type from SQL expressions. A value that is not an integer
        (text, blob, real) in an integer column raises InputError: SQLite lets any column
        hold any type, nsys writes integers there.
        """
        return self.read(self.integer_read(table, spec, coalesced, where, raw))

    def read(self, read: IntegerRead) -> pd.DataFrame:
        """``read`` (prefetched, or now) as a DataFrame of its output columns, checked to be integers.

        A whole table's integers come from its pages when they are plain (``fetch_integers``:
        about half the CPU of the ADBC driver), else through the driver when installed (columnar
        Arrow batches, several times faster than building Python tuples), else through sqlite3.
        """
        try:
            early = self.prefetched.take(read) if self.prefetched is not None else None
            got = early.result() if early is not None else fetch_integers(read)
        except Exception as err:  # the driver raises its own hierarchy; any failure here is the file's
            raise self.corrupt(err) from None
        if got is None:
            df = self.query(read.sql)
        elif isinstance(got, dict):
            df = pd.DataFrame(got, copy=False)  # fresh arrays: no copy into one 2-D block
        else:
            df = got.to_pandas(split_blocks=True, self_destruct=True)  # frees Arrow buffers as columns convert
        return self._integers(df, read.table, [name for name, _ in read.sources])

    def corrupt(self, err: Exception) -> InputError:
        """The one-line error for a read the SQLite driver failed: the first line of its message."""
        return InputError(f"{self.path}: corrupt or truncated SQLite file ({str(err).splitlines()[0]})")

    def _integers(self, df: pd.DataFrame, table: str, names: list[str]) -> pd.DataFrame:
        """``df`` with columns ``names`` as int64, or InputError naming the first value that is not an integer.

        A mixed column comes from the ADBC driver as text, bytes or doubles (its integers among
        them as digits or floats), from sqlite3 as objects or doubles; either way it is refused.
        """
        for c in names:
            col = df[c]
            if col.dtype.kind in "iu":
                continue
            try:
                values = col.to_numpy(dtype=object)
            except Exception:  # noqa: BLE001 - Arrow refuses a text column with invalid UTF-8, in its own error type
                raise self._not_integer(table, c, "text that is not valid UTF-8") from None
            if len(values):
                odd = next((v for v in values if not _integer_like(v)), values[0])
                raise self._not_integer(table, c, _kind_of_value(odd))
            df[c] = col.astype(np.int64)  # no rows: the column's type is whatever the driver guessed
        return df

    def select_soon(self, table: str, spec: tuple[tuple[str, ...], tuple[str, ...]]) -> Future:
        """``select()`` on a worker thread (see ``soon``)."""
        return self.soon(self.select, table, spec)

    def soon(self, fn, *args) -> Future:
        """``fn(*args)`` on a worker thread, so the big tables are read (and decoded) side by side.

        The page reader's numpy steps and the ADBC driver's reads release the GIL, and
        neither uses this connection. Without the driver ``fn`` runs here: a table the page
        reader leaves then goes through sqlite3 and ``self.conn``, whose connections stay
        on their thread.
        """
        if adbc_sqlite() is None:
            done: Future = Future()
            done.set_result(fn(*args))
            return done
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 1)))
        return self.pool.submit(fn, *args)

    def select_any(self, table: str, spec: tuple[tuple[str, ...], tuple[str, ...]]) -> pd.DataFrame:
        """Read any columns of a small table through sqlite3; NULL and absent columns come back as None/NaN."""
        return self.query(self.select_sql(table, spec, lambda c: f'"{c}"', 'NULL AS "{c}"'))

    def _not_integer(self, table: str, column: str, what: str) -> InputError:
        return InputError(
            f"{self.path}: {table}.{column} holds {what} where nsys writes integers; not a valid nsys export"
        )

    def query(self, sql: str, params: tuple = ()) -> pd.DataFrame:
        with gc_paused():
            try:
                cur = self.conn.execute(sql, params)
                rows = cur.fetchall()
            except (sqlite3.DatabaseError, UnicodeDecodeError) as err:
                raise self.corrupt(err) from None
            return pd.DataFrame.from_records(rows, columns=[d[0] for d in cur.description])

    def close(self):
        """Close the connection; a read still running on the pool (a table ``arriving``) finishes on its own."""
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
        super().close()


def read_metadata(exp: Export) -> dict:
    """Export metadata (product and schema version, platform) from whichever table holds it."""
    meta: dict = {}
    for table in META_TABLES:
        if exp.has(table) and {"name", "value"} <= exp.columns[table]:
            rows = exp.query(f'SELECT name, value FROM "{table}"')
            meta.update(dict(zip(rows["name"], rows["value"], strict=True)))
    return meta


def export_meta(path: Path, version: str, meta: dict) -> dict:
    """A trace's meta from the export's META_DATA_EXPORT rows (``read_metadata``) and checked schema version."""
    return {
        "source": str(path),
        "format": "nsys-sqlite",
        "schema_version": version,
        "nsys_version": str(meta.get("EXPORT_PRODUCT_VERSION", "unknown")),
        "platform": str(meta.get("EXPORT_PLATFORM", meta.get("EXPORT_OS", ""))),
    }


def check_schema_version(path: Path, meta: dict) -> str:
    """Return the schema version, refusing majors this reader was not written for."""
    version = str(meta.get("EXPORT_SCHEMA_VERSION", "")).strip()
    if not version:
        return "unknown"
    try:
        major = int(version.split(".")[0])
    except ValueError:
        raise InputError(f"{path}: unreadable nsys schema version {version!r}") from None
    if major not in SUPPORTED_SCHEMA_MAJOR:
        raise InputError(
            f"{path}: nsys export schema {version} is not supported (this reader knows schema 2.x and 3.x); "
            "please report it with the nsys version that made the file"
        )
    return version


def _strings(exp: Export) -> pd.Series:
    if not exp.has("StringIds"):
        return pd.Series(dtype=object)
    missing = {"id", "value"} - exp.columns["StringIds"]
    if missing:
        raise InputError(
            f"{exp.path}: table StringIds lacks column(s) {', '.join(sorted(missing))}; unknown nsys schema"
        )
    df = exp.query("SELECT id, value FROM StringIds").drop_duplicates("id")  # ids are unique unless the file is damaged
    values = df["value"].to_numpy(dtype=object)
    if pd.api.types.infer_dtype(values, skipna=True) not in ("string", "empty"):  # a blob or number, not text
        values = np.array([v if isinstance(v, str) or v is None else _text(v) for v in values], dtype=object)
    return pd.Series(values, index=df["id"].to_numpy())


def _decode(ids: pd.Series, strings: pd.Series, fallback: str = "") -> pd.Categorical:
    """Map StringIds ids to a categorical of names (unknown ids -> fallback), via codes not objects."""
    ids = np.asarray(ids, dtype=np.int64)
    high = int(ids.max()) if len(ids) else -1
    if len(ids) and high < 4 * len(ids) + (1 << 20) and ids.min() >= 0:  # string ids are small: a table, no hashing
        present = np.zeros(high + 1, dtype=bool)  # (1.4M runtime rows: 3-12 ms, against 50-100 for factorize)
        present[ids] = True
        uniq = np.flatnonzero(present)
        lookup = np.zeros(high + 1, dtype=np.int32)
        lookup[uniq] = np.arange(len(uniq), dtype=np.int32)
        inverse = lookup[ids]
    else:
        inverse, uniq = pd.factorize(ids, sort=True)  # hashing: faster than np.unique
    names = pd.Index(strings.reindex(uniq).fillna(fallback).astype(str).to_numpy())
    codes, cats = pd.factorize(names)  # two ids may carry the same text
    return pd.Categorical.from_codes(codes[inverse], categories=cats)


def _with_time_columns(df: pd.DataFrame) -> pd.DataFrame:
    """start_ns, end_ns (an unrecorded end: the start) and duration_ns; the read columns themselves where they serve."""
    df["start_ns"] = df["start"].astype("int64")
    end = df["end"].astype("int64")
    missing = end.to_numpy() == MISSING
    df["end_ns"] = end.where(~missing, df["start_ns"]) if missing.any() else end  # usually no copy of 10M ends
    df["duration_ns"] = df["end_ns"] - df["start_ns"]
    return df


def read_kernels(exp: Export, strings: pd.Series, details: bool = True) -> pd.DataFrame:
    """Kernels, and CUDA graph launches traced whole (``read_graph_launches``) as kernels named "[CUDA graph N]".

    Without ``details`` both names are the demangled one (else the short one), shapes and streams -1.
    """
    launches = read_graph_launches(exp, details) if exp.has(GRAPH_TRACE_TABLE) else None
    if not exp.has(KERNEL_TABLE):
        return launches
    table = KERNEL_TABLE
    no_name = InputError(f"{exp.path}: {table} has no kernel name column")
    if details:
        df = _with_time_columns(exp.select(table, exp.with_graph_column(KERNEL_COLUMNS)))
        short, demangled = df["shortName"], df["demangledName"]
        if ((short == MISSING) & (demangled == MISSING)).all():
            raise no_name
        df["demangled_name"] = _decode(demangled.where(demangled != MISSING, short), strings, "<unknown kernel>")
        df["name"] = _decode(short.where(short != MISSING, demangled), strings, "<unknown kernel>")
    else:  # the demangled name where recorded, else the short one, as one column (the read a report prefetches)
        df = exp.read(exp.lean_kernel_read())
        if (df["nameId"] == MISSING).all():
            raise no_name
        df = lean_kernels(df, strings, exp.graph_column)
        return df if launches is None else _with_launches(df, launches)
    df = with_columns(df, {"pid": pids_of(df["globalPid"].to_numpy()), "graph_id": _graph_ids(df, exp.graph_column)})
    df["shared_memory_bytes"] = df["staticSharedMemory"].clip(lower=0) + df["dynamicSharedMemory"].clip(lower=0)
    df = _renamed_kernels(df)
    return df if launches is None else _with_launches(df, launches)


def lean_kernels(df: pd.DataFrame, strings: pd.Series, graph_column: str | None = None) -> pd.DataFrame:
    """The kernels of ``read_kernels(details=False)`` from rows of its read (``Catalog.lean_kernel_read``): the
    whole table, or one time window of it (``analyze.windows``)."""
    df = _with_time_columns(df)
    df["demangled_name"] = _decode(df["nameId"], strings, "<unknown kernel>")
    df["name"] = df["demangled_name"]
    df = with_columns(df, {"pid": pids_of(df["globalPid"].to_numpy()), "graph_id": _graph_ids(df, graph_column)})
    unread = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread")
    return _renamed_kernels(with_unread_columns(df, [*unread, "shared_memory_bytes", "stream_id"]))


def _renamed_kernels(df: pd.DataFrame) -> pd.DataFrame:
    return df.rename(
        columns={
            **ID_COLUMNS,
            "gridX": "grid_x",
            "gridY": "grid_y",
            "gridZ": "grid_z",
            "blockX": "block_x",
            "blockY": "block_y",
            "blockZ": "block_z",
            "registersPerThread": "registers_per_thread",
        }
    )


def _graph_ids(df: pd.DataFrame, column: str | None) -> np.ndarray:
    """graph_id of each kernel row: its graphId, UNNAMED_GRAPH where only graphNodeId says it ran in a graph, -1
    where it ran on its own; a read-only view of -1 where the graph column was not read (``Catalog.graph_column``)."""
    if column is None:
        return np.broadcast_to(np.int64(MISSING), len(df))
    ids = df[column].to_numpy()
    in_graph = ids > 0  # NULL reads as MISSING; 0 is CUPTI's "no graph"
    return np.where(in_graph, ids if column == "graphId" else UNNAMED_GRAPH, MISSING)


def read_graph_launches(exp: Export, details: bool = True) -> pd.DataFrame | None:
    """CUDA graph launches traced whole (nsys ``--cuda-graph-trace=graph``), one kernels row each, or None if none.

    Named "[CUDA graph N]" (N: the graphId, else the graphExecId), graph_id N, launch shapes, registers
    and shared memory -1; correlation_id is the launching cudaGraphLaunch call's, so NVTX ranges claim them.
    Without ``details`` streams are -1, as for kernels.
    """
    df = exp.select(GRAPH_TRACE_TABLE, GRAPH_TRACE_COLUMNS)
    if not len(df):
        return None
    df = _with_time_columns(df)
    graph = df["graphId"].to_numpy()
    graph = np.where(graph != MISSING, graph, df["graphExecId"].to_numpy())
    graph = np.where(graph != MISSING, graph, UNNAMED_GRAPH)
    ids, codes = np.unique(graph, return_inverse=True)
    names = pd.Categorical.from_codes(codes.reshape(-1), categories=[f"[CUDA graph {g}]" for g in ids])
    unset = np.broadcast_to(np.int64(MISSING), len(df))
    shape = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread")
    columns = {
        "start_ns": df["start_ns"].to_numpy(),
        "end_ns": df["end_ns"].to_numpy(),
        "duration_ns": df["duration_ns"].to_numpy(),
        "name": names,
        "demangled_name": names,
        "device_id": df["deviceId"].to_numpy(),
        "stream_id": df["streamId"].to_numpy() if details else unset,
        "correlation_id": df["correlationId"].to_numpy(),
        "graph_id": graph,
        "pid": pids_of(df["globalPid"].to_numpy()),
        **dict.fromkeys((*shape, "shared_memory_bytes"), unset),
    }
    return pd.DataFrame({c: columns[c] for c in KERNELS}, copy=False)


def _with_launches(kernels: pd.DataFrame, launches: pd.DataFrame) -> pd.DataFrame:
    """The kernel rows, then the graph launches that no kernel row already stands for.

    A launch whose kernels were also traced one by one (a kernel with a graph id, launched by the same call of
    the same process) would count twice: that launch is left out.
    """
    in_graph = kernels["graph_id"].to_numpy() != MISSING
    if in_graph.any():
        traced = pd.MultiIndex.from_arrays(
            [kernels["pid"].to_numpy()[in_graph], kernels["correlation_id"].to_numpy()[in_graph]]
        )
        keys = pd.MultiIndex.from_arrays([launches["pid"].to_numpy(), launches["correlation_id"].to_numpy()])
        launches = launches[~keys.isin(traced)]
    if not len(launches):
        return kernels
    columns = {}
    for c, dtype in KERNELS.items():
        parts = [kernels[c], launches[c]]
        if dtype == "category":
            columns[c] = union_categoricals([pd.Categorical(p) for p in parts])
        else:
            columns[c] = np.concatenate([p.to_numpy() for p in parts])
    return pd.DataFrame(columns, copy=False)


def read_runtime(exp: Export, strings: pd.Series, details: bool = True) -> pd.DataFrame:
    """CUDA runtime and driver calls, with their API names (both reads: the CUDA API summary needs them)."""
    # without details: the read a report prefetches
    return runtime_calls(
        exp.select(RUNTIME_TABLE, RUNTIME_COLUMNS) if details else exp.read(exp.lean_runtime_read()), strings
    )


def runtime_calls(df: pd.DataFrame, strings: pd.Series) -> pd.DataFrame:
    """The RUNTIME table of rows of the runtime read: the whole table, or one time window (``analyze.windows``)."""
    df = _with_time_columns(df)
    gtid = df["globalTid"].to_numpy()
    df = df.assign(name=_decode(df["nameId"], strings, "<unknown API>"), correlation_id=df["correlationId"])
    return with_columns(df, {"pid": pids_of(gtid, missing=None), "tid": tids_of(gtid)})


def _memcpy_labels(exp: Export) -> dict[int, str]:
    table = "ENUM_CUDA_MEMCPY_OPER"
    if exp.has(table) and {"id", "label"} <= exp.columns[table]:
        rows = exp.query(f"SELECT id, label FROM {table}")
        return dict(zip(rows["id"].astype(int), rows["label"].astype(str), strict=True))
    return MEMCPY_KIND_LABELS


def read_memops(exp: Export, raw: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Memcpy and memset rows; ``raw`` holds their tables' ``select()`` when already read."""
    raw = raw if raw is not None else {t: exp.select(t, spec) for t, spec in MEMOP_TABLES.items() if exp.has(t)}
    parts = []
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in raw:
        df = _with_time_columns(raw["CUPTI_ACTIVITY_KIND_MEMCPY"])
        labels = _memcpy_labels(exp)
        kind = df["copyKind"].clip(lower=0)
        df["name"] = "[CUDA memcpy " + kind.map(labels).fillna("Unknown") + "]"
        df["kind"] = "memcpy"
        parts.append(df)
    if "CUPTI_ACTIVITY_KIND_MEMSET" in raw:
        df = _with_time_columns(raw["CUPTI_ACTIVITY_KIND_MEMSET"])
        df["name"], df["kind"] = "[CUDA memset]", "memset"
        parts.append(df)
    if not parts:
        return None
    df = pd.concat(parts, ignore_index=True)
    renamed = df.rename(columns={"bytes": "size_bytes", **ID_COLUMNS})
    return with_columns(renamed, {"pid": pids_of(df["globalPid"].to_numpy())})


def _nvtx_text(exp: Export) -> tuple[np.ndarray, np.ndarray] | None:
    """Each NVTX_EVENTS row's ``text`` as a code into the distinct texts (-1: NULL), rows in rowid order; None
    where the table has no text column.

    Through the ADBC driver Arrow dictionary-encodes the column and only the distinct values become
    Python strings (77k rows of 8 texts: 3 ms, where a Python object a row took 15); invalid UTF-8
    is replaced, as sqlite3's text factory does. The integer columns are read apart (``nvtx_read``),
    from the pages where they are plain, so this query selects the text alone.
    """
    if "text" not in exp.columns[NVTX_TABLE]:
        return None
    sql = f'SELECT CAST("text" AS BLOB) AS text FROM {NVTX_TABLE} ORDER BY rowid'
    if adbc_sqlite() is None:
        codes, uniq = pd.factorize(exp.query(sql)["text"].to_numpy(dtype=object), use_na_sentinel=True)
    else:
        try:
            column = fetch_arrow(exp.path, sql).column("text").combine_chunks().dictionary_encode()
        except Exception as err:  # the driver raises its own hierarchy; any failure here is the file's
            raise exp.corrupt(err) from None
        codes, uniq = column.indices.fill_null(-1).to_numpy().astype(np.int64), column.dictionary.to_pylist()
    return codes, np.array([_text(v) for v in uniq], dtype=object)


def _integer_like(value) -> bool:
    """An integer, or an integer as a mixed column renders it (digits, a whole float)."""
    if isinstance(value, int | np.integer):
        return True
    if isinstance(value, float):
        return value.is_integer()
    return _text(value).removeprefix("-").isdigit()


def _kind_of_value(value) -> str:
    """How an error message names a value found where an integer belongs."""
    if isinstance(value, bytes | bytearray | memoryview):
        return "a blob"
    if isinstance(value, float):
        return f"a real number ({value!r})"
    return f"text ({str(value)[:30]!r})"


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray | memoryview) else str(value)


def read_nvtx(exp: Export, strings: pd.Series, details: bool = True, text: Future | None = None) -> pd.DataFrame:
    """NVTX push/pop and start/end ranges, named as nsys names them (text, else textId).

    Names are handled as codes into the distinct labels (a few, or a few thousand with emit_nvtx),
    never as a string a row. Without ``details`` the nesting depth is not computed (left -1).
    ``text``: the text read (``_nvtx_text``) started already, on another thread.
    """
    df = exp.read(exp.nvtx_read())
    read = text.result() if text is not None else _nvtx_text(exp)
    text_codes, texts = read if read is not None else (np.full(len(df), -1, dtype=np.int64), np.empty(0, dtype=object))
    if len(text_codes) != len(df):  # the two reads saw different rows: the file changed between them
        raise InputError(f"{exp.path}: {NVTX_TABLE} changed while it was read")
    return nvtx_ranges(df, text_codes, texts, strings, details)


def nvtx_ranges(
    df: pd.DataFrame,
    text_codes: np.ndarray,
    texts: np.ndarray,
    strings: pd.Series,
    details: bool = True,
    last: int | None = None,
) -> pd.DataFrame | None:
    """The ranges among NVTX_EVENTS rows ``df`` (the integer read, ``Catalog.nvtx_read``) whose texts are
    ``texts[text_codes]`` (-1: none); None when none is a range. ``last`` is where an unclosed range ends
    (default: the last timestamp of ``df``): a time window of the table (``analyze.windows``) passes the
    whole table's, and its domain creations among ``df``."""
    event = df["eventType"].to_numpy()
    is_range = np.isin(event, list(NVTX_RANGE_STYLE))
    if not is_range.any():
        return None
    gtid = df["globalTid"].to_numpy()
    gtid = np.where(gtid != MISSING, gtid, 0)
    label_codes, labels = _nvtx_label_codes(df["textId"].to_numpy(), text_codes, texts, strings)
    rows = np.flatnonzero(is_range)
    ranges = pd.DataFrame({"pid": pid_of(gtid[rows]), "tid": tid_of(gtid[rows])})
    ranges["domain"] = _nvtx_domains(df, event, gtid, label_codes, labels, rows)
    # An unclosed range ends at the last NVTX timestamp, as nsys's reports take it.
    start, end = df["start"].to_numpy(), df["end"].to_numpy()
    last = max(int(start.max()), int(end.max()), 0) if last is None else last
    ranges["start"], ranges["end"] = start[rows], np.where(end[rows] != MISSING, end[rows], last)
    ranges = _with_time_columns(ranges)
    end_gtid = df["endGlobalTid"].to_numpy()[rows]
    ranges["end_tid"] = np.where(end_gtid != MISSING, tid_of(end_gtid), -1)
    style = pd.Series(event[rows]).map(NVTX_RANGE_STYLE)
    ranges["style"] = style.astype("category")
    ranges["name"] = _used_categories(label_codes[rows], labels)
    push_pop = (style == "push_pop").to_numpy()
    depth = np.full(len(ranges), -1, dtype=np.int64)  # start/end ranges need not nest
    if details:
        depth[push_pop] = nesting_depth(ranges[push_pop])
    ranges["depth"] = depth
    return ranges


def _nvtx_label_codes(
    text_id: np.ndarray, text_codes: np.ndarray, texts: np.ndarray, strings: pd.Series
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's name as a code into distinct labels: the string of its textId where that is known, else its
    text, else "" (as nsys names a range)."""
    labels = np.append(texts, "")  # code len(texts): no text
    codes = np.where(text_codes >= 0, text_codes, len(texts))
    has_id = text_id != MISSING
    if has_id.any():  # the ids' strings follow as further labels
        ids = pd.Index(pd.unique(text_id[has_id]))
        named = strings.reindex(ids)
        id_codes = np.where(named.notna().to_numpy(), len(labels) + np.arange(len(ids)), -1)  # -1: no string
        by_row = np.full(len(text_id), -1, dtype=np.int64)
        by_row[has_id] = id_codes[ids.get_indexer(text_id[has_id])]
        codes = np.where(by_row >= 0, by_row, codes)
        labels = np.concatenate([labels, named.fillna("").astype(str).to_numpy(dtype=object)])
    return codes, labels


def _nvtx_domains(
    df: pd.DataFrame, event: np.ndarray, gtid: np.ndarray, label_codes: np.ndarray, labels: np.ndarray, rows
) -> pd.Categorical:
    """The domain name of each range ``rows``: its process's first DomainCreate of the range's domainId
    ("" for the default domain 0, NULL, or a domain never named). Domains are created per process."""
    created = np.flatnonzero(event == NVTX_DOMAIN_CREATE)
    if not len(created):
        return pd.Categorical.from_codes(np.zeros(len(rows), dtype=np.int8), categories=[""])
    domain_id = df["domainId"].to_numpy().clip(min=0)  # no domain (NULL) is the default domain 0
    pid = pid_of(gtid)
    first = created[np.argsort(df["start"].to_numpy()[created], kind="stable")]
    names = pd.Series(labels[label_codes[first]], index=pd.MultiIndex.from_arrays([pid[first], domain_id[first]]))
    names = names[~names.index.duplicated()]
    key = pd.MultiIndex.from_arrays([pid[rows], domain_id[rows]])
    return pd.Categorical(names.reindex(key).fillna("").to_numpy(dtype=object).astype(str))


def _used_categories(codes: np.ndarray, labels: np.ndarray) -> pd.Categorical:
    """A categorical of ``labels[codes]`` with the distinct labels used, sorted (as ``astype("category")``)."""
    used = np.zeros(len(labels), dtype=bool)
    used[codes] = True
    names, first = np.unique(labels[used].astype(str), return_inverse=True)
    renumber = np.full(len(labels), -1, dtype=np.int64)
    renumber[np.flatnonzero(used)] = first
    return pd.Categorical.from_codes(renumber[codes], categories=pd.Index(names))


def read_gpus(exp: Export) -> pd.DataFrame | None:
    table = next((t for t in ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU") if exp.has(t)), None)
    if table is None:
        return None
    spec = (
        (),
        ("id", "name", "smCount", "totalMemory", "memoryBandwidth", "clockRate", "computeMajor", "computeMinor"),
    )
    df = exp.select_any(table, spec)
    for c in ("id", *spec[1][2:]):  # descriptive numbers: an odd value is left out (as NULL), not fatal
        df[c] = pd.to_numeric(df[c], errors="coerce")
    cc = df["computeMajor"].astype(str) + "." + df["computeMinor"].astype(str)
    return pd.DataFrame(
        {
            "device_id": df["id"],
            "name": df["name"].fillna("unknown GPU"),
            "sm_count": df["smCount"],
            "memory_bytes": df["totalMemory"],
            "memory_bandwidth_bytes_per_s": df["memoryBandwidth"],
            "clock_rate_hz": df["clockRate"],
            "compute_capability": cc.where(df["computeMajor"].notna(), ""),
        }
    ).drop_duplicates("device_id")


def read_threads(exp: Export, strings: pd.Series) -> pd.DataFrame | None:
    if not exp.has("ThreadNames"):
        return None
    df = exp.select("ThreadNames", (("globalTid",), ("nameId",)))
    df["pid"], df["tid"] = pid_of(df["globalTid"]), tid_of(df["globalTid"])
    df["thread_name"] = df["nameId"].map(strings).fillna("")
    df["process_name"] = ""
    if exp.has("PROCESSES") and {"pid", "name"} <= exp.columns["PROCESSES"]:
        procs = exp.query("SELECT pid, name FROM PROCESSES").drop_duplicates("pid").set_index("pid")["name"]
        df["process_name"] = df["pid"].map(procs).fillna("")
    return df


def read_nsys_sqlite(
    path: str | Path, details: bool = True, runtime_later: bool = False, prefetched: Prefetch | None = None
) -> Trace:
    """Read one nsys SQLite export into normalized tables.

    Absent tables (no kernels ran, no GPU, no NVTX) give empty tables, not errors.
    CUDA graph launches traced whole are rows of the kernels table (``read_graph_launches``).
    Raises InputError for a missing, non-SQLite, non-nsys, truncated or corrupt
    file, or a schema major version this reader does not know.

    ``details=False`` skips what the breakdowns never use, a third of the reading
    on a big export: kernel launch shapes, registers, shared memory, streams and NVTX
    nesting depths come back as -1, kernel ``name`` as the demangled name.

    ``runtime_later=True`` returns before the runtime table (the biggest) is read when it is
    read on another thread (``Trace.arriving``): a report starts on the kernels meanwhile.
    ``prefetched`` holds reads of this export started early (``analyze.nsys_prefetch.Prefetch``).
    """
    path = Path(path)
    exp = Export(path, prefetched)
    try:
        meta = read_metadata(exp)
        version = check_schema_version(path, meta)
        strings = _strings(exp)
        # The big tables are read and decoded on worker threads while NVTX is read here. Its text column goes
        # first: the driver's scan of it (~35 ms on 77k ranges) runs beside this thread's reads of the small tables.
        nvtx_text = exp.soon(_nvtx_text, exp) if exp.has(NVTX_TABLE) and adbc_sqlite() is not None else None
        pending = {}
        if exp.has(KERNEL_TABLE) or exp.has(GRAPH_TRACE_TABLE):  # graph launches traced whole: kernels of a kind
            pending["kernels"] = exp.soon(read_kernels, exp, strings, details)
        if exp.has(RUNTIME_TABLE):
            pending["runtime"] = exp.soon(read_runtime, exp, strings, details)
        memop_tables = {t: exp.select_soon(t, spec) for t, spec in MEMOP_TABLES.items() if exp.has(t)}
        trace = Trace(meta=export_meta(path, version, meta))
        optional = {
            "nvtx": read_nvtx(exp, strings, details, nvtx_text) if exp.has(NVTX_TABLE) else None,
            "gpus": read_gpus(exp),
            "threads": read_threads(exp, strings),
        }
        optional["memops"] = read_memops(exp, {t: future.result() for t, future in memop_tables.items()})
        later = {"runtime": pending.pop("runtime")} if runtime_later and not _done(pending.get("runtime")) else {}
        optional.update({attr: future.result() for attr, future in pending.items()})
        for attr, df in optional.items():
            if df is not None:
                setattr(trace, attr, df)
        return trace.validated().arriving(**later)
    finally:
        exp.close()


def _done(future: Future | None) -> bool:
    """No future, or one already finished (nothing to hand over later)."""
    return future is None or future.done()
