"""The normalized tables every reader returns and every analysis takes.

Times are int64 nanoseconds, sizes int64 bytes, names strings (pandas
``category``). Readers convert units and decode names once; analyses never see
a file format. ``validate()`` coerces a reader's frame to the schema so a
missing or misspelt column fails where it is made, not three analyses later.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

I64 = "int64"
F64 = "float64"
CAT = "category"
STR = "object"

KERNELS = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "name": CAT,  # short name as nsys prints it ("ampere_sgemm_128x64_tn")
    "demangled_name": CAT,  # full signature; equals name when unknown
    "device_id": I64,
    "stream_id": I64,
    "correlation_id": I64,
    "graph_id": I64,  # CUDA graph the kernel ran in (nsys graphId, Kineto "graph id"); -1 when launched on its own
    "pid": I64,  # launching process (rank in multi-process runs)
    "grid_x": I64,
    "grid_y": I64,
    "grid_z": I64,
    "block_x": I64,
    "block_y": I64,
    "block_z": I64,
    "registers_per_thread": I64,
    "shared_memory_bytes": I64,  # static + dynamic
}

# CUDA runtime/driver API calls on the CPU (cudaLaunchKernel, cudaMemcpyAsync...)
RUNTIME = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "name": CAT,
    "pid": I64,
    "tid": I64,
    "correlation_id": I64,
}

# GPU memory operations: memcpy and memset
MEMOPS = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "name": CAT,  # "[CUDA memcpy Host-to-Device]", "[CUDA memset]" (nsys wording)
    "kind": CAT,  # "memcpy" or "memset"
    "size_bytes": I64,
    "device_id": I64,
    "stream_id": I64,
    "correlation_id": I64,
    "pid": I64,
}

# CPU-side annotated ranges: NVTX push/pop and start/end, or record_function
NVTX_RANGES = {
    "start_ns": I64,
    "end_ns": I64,
    "duration_ns": I64,
    "name": CAT,
    "domain": CAT,  # "" for the default domain
    "style": CAT,  # "push_pop" or "start_end"
    "pid": I64,
    "tid": I64,  # thread that opened the range
    "end_tid": I64,  # thread that closed it (start/end ranges may differ)
    "depth": I64,  # nesting level on its thread, 0 = outermost (push/pop only)
}

GPUS = {
    "device_id": I64,
    "name": STR,
    "sm_count": I64,
    "memory_bytes": I64,
    "memory_bandwidth_bytes_per_s": I64,
    "clock_rate_hz": I64,
    "compute_capability": STR,
}

THREADS = {"pid": I64, "tid": I64, "thread_name": STR, "process_name": STR}

# The allocator's running totals on one device after each allocation or free (Kineto ``[memory]``
# events of a trace recorded with ``profile_memory=True``); delta_bytes is that event's change.
MEMORY_COUNTERS = {
    "time_ns": I64,
    "device_id": I64,
    "allocated_bytes": I64,
    "reserved_bytes": I64,
    "delta_bytes": I64,
}

SCHEMAS = {
    "kernels": KERNELS,
    "runtime": RUNTIME,
    "memops": MEMOPS,
    "nvtx": NVTX_RANGES,
    "gpus": GPUS,
    "threads": THREADS,
    "memory_counters": MEMORY_COUNTERS,
}


def one_value_view(values: np.ndarray) -> bool:
    """A read-only view of one value (``np.broadcast_to``): how a column whose rows all hold one value (one
    process's pid, one GPU, a field left unread) travels through readers and analyses, with no fresh array."""
    return len(values) > 0 and values.strides == (0,)


def one_value(values: np.ndarray) -> bool:
    """Every value the same. A view of one value needs no look at its rows, and a column whose ends differ
    (times, ids) no pass either."""
    return len(values) > 0 and values[0] == values[-1] and (one_value_view(values) or bool((values == values[0]).all()))


def with_columns(df: pd.DataFrame, columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """``df`` plus new ``columns``, the arrays taken as they are: a view of one value stays a view
    (``assign`` and ``df[name] =`` copy it into a fresh array)."""
    if not columns:
        return df
    return pd.concat([df, pd.DataFrame(columns, index=df.index, copy=False)], axis=1)


def empty(schema: dict[str, str]) -> pd.DataFrame:
    """A frame with no rows and the schema's columns and dtypes (as ``validate`` makes them of empty lists,
    a tenth of its time: a Trace starts with six of these)."""
    made = {CAT: lambda: pd.Categorical(np.empty(0)), STR: lambda: pd.Series([], dtype=object).astype(str)}
    return pd.DataFrame({c: made[t]() if t in made else np.empty(0, dtype=t) for c, t in schema.items()})


def validate(df: pd.DataFrame, schema: dict[str, str]) -> pd.DataFrame:
    """Return ``df`` with exactly the schema's columns, in order, with its dtypes.

    Raises ``KeyError`` naming the missing columns: a reader bug, not bad input.
    """
    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise KeyError(f"normalized table lacks columns {missing}")
    out = df.loc[:, list(schema)]
    casts = {c: t for c, t in schema.items() if str(out[c].dtype) != t}
    for col, dtype in casts.items():
        if dtype == I64:
            out[col] = pd.to_numeric(out[col], errors="coerce").fillna(-1).astype(I64)
        elif dtype == STR:
            out[col] = out[col].astype(str)
        else:
            out[col] = out[col].astype(dtype)
    return out.reset_index(drop=True)


@dataclass
class Trace:
    """Everything a reader extracts from one profile, as normalized tables.

    ``meta`` holds provenance: source path, format ("nsys-sqlite", "kineto"),
    schema or tool version, and any metadata sidecar found beside the file.
    """

    kernels: pd.DataFrame = field(default_factory=lambda: empty(KERNELS))
    runtime: pd.DataFrame = field(default_factory=lambda: empty(RUNTIME))
    memops: pd.DataFrame = field(default_factory=lambda: empty(MEMOPS))
    nvtx: pd.DataFrame = field(default_factory=lambda: empty(NVTX_RANGES))
    gpus: pd.DataFrame = field(default_factory=lambda: empty(GPUS))
    threads: pd.DataFrame = field(default_factory=lambda: empty(THREADS))
    memory_counters: pd.DataFrame = field(default_factory=lambda: empty(MEMORY_COUNTERS))
    meta: dict = field(default_factory=dict)

    def validated(self) -> Trace:
        """Coerce every table to its schema (readers call this before returning); tables still to come stay so."""
        for attr, schema in SCHEMAS.items():
            if not isinstance(self.__dict__.get(attr), LazyTable):
                setattr(self, attr, validate(getattr(self, attr), schema))
        return self

    def arrived(self, name: str) -> bool:
        """Whether table ``name`` is here: read already, not still arriving (``arriving``)."""
        value = self.__dict__.get(name)
        return not isinstance(value, LazyTable) or value.future.done()

    def arriving(self, **tables: Future) -> Trace:
        """Hand the Trace over while ``tables`` (name: future of its frame) are still being read.

        A report classifies the kernels while the runtime table is read on the other core. Each
        such table is a ``LazyTable`` until its first use, which waits for it and validates it.
        """
        for name, future in tables.items():
            setattr(self, name, LazyTable(future, SCHEMAS[name]))
        return self

    def pending(self, name: str) -> bool:
        """Whether table ``name`` is still a ``LazyTable`` that no one has used."""
        value = self.__dict__.get(name)
        return isinstance(value, LazyTable) and value.resolved is None


class LazyTable:
    """A table still being read on another thread (a future of its frame): validated at its first ``frame()``.

    Two threads may ask at once: one waits and validates, the other gets the same frame. A failed
    read raises its error at each use.
    """

    def __init__(self, future: Future, schema: dict[str, str]):
        self.future, self.schema = future, schema
        self.resolved: pd.DataFrame | None = None
        self._lock = threading.Lock()

    def frame(self) -> pd.DataFrame:
        with self._lock:
            if self.resolved is None:
                self.resolved = validate(self.future.result(), self.schema)
        return self.resolved


class TableAttribute:
    """A table of ``Trace``: a plain attribute, except that a ``LazyTable`` stored there is read through ``frame()``."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, trace: Trace | None, owner: type | None = None):
        if trace is None:
            return self
        try:
            value = trace.__dict__[self.name]
        except KeyError:
            raise AttributeError(f"{type(trace).__name__!r} object has no attribute {self.name!r}") from None
        return value.frame() if isinstance(value, LazyTable) else value

    def __set__(self, trace: Trace, value) -> None:
        trace.__dict__[self.name] = value


for _name in SCHEMAS:  # after @dataclass: its __init__ and defaults are made from the annotations alone
    setattr(Trace, _name, TableAttribute(_name))
del _name


# torch.cuda.memory snapshot tables (analyze/memory_snapshot.py); one row per trace event
MEMORY_EVENTS = {
    "seq": I64,  # position in its device's trace, 0 = oldest kept event
    "device": I64,
    "action": CAT,  # alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, ...
    "addr": I64,
    "size_bytes": I64,  # as recorded: the requested size for alloc/free, the mapped size for segments
    "stream": I64,
    "time_ns": I64,  # -1 when the snapshot has no time_us
    "stack_id": I64,  # row of MEMORY_STACKS; -1 when the event has no frames
    "top_frame": CAT,  # first user-code frame, "model.py:385 forward"
}

# allocator segments (cudaMalloc'd or mapped ranges) at dump time
MEMORY_SEGMENTS = {
    "device": I64,
    "address": I64,
    "total_size_bytes": I64,
    "allocated_size_bytes": I64,  # blocks in state active_allocated
    "active_size_bytes": I64,
    "requested_size_bytes": I64,
    "stream": I64,
    "segment_type": CAT,  # "large" or "small" pool
    "is_expandable": I64,  # 1, 0, or -1 when unknown
}

# blocks of those segments at dump time
MEMORY_BLOCKS = {
    "device": I64,
    "segment_address": I64,
    "address": I64,
    "size_bytes": I64,
    "requested_size_bytes": I64,
    "state": CAT,  # active_allocated, active_pending_free (older: active_awaiting_free), inactive
    "stack_id": I64,
    "top_frame": CAT,
}

# distinct call stacks, shared by events and blocks
MEMORY_STACKS = {
    "stack_id": I64,
    "top_frame": STR,
    "stack": STR,  # every frame "filename:line name", innermost first, one per line
}
