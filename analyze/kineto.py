"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON, ``.json`` or ``.json.gz``.

``torch.profiler.profile(...).export_chrome_trace(path)`` writes one file per
rank (FACTS.md §4). Only this module knows that format: microsecond ``ts``/``dur``,
event categories, ``args`` keys. It returns the same normalized tables as the
nsys reader, so the taxonomy, projection and reports treat both sources alike.

Format facts this reader relies on, checked against traces from PyTorch 1.8
(tb_plugin sample) to 2.x (HTA, TraceLens) and a CPU trace from torch 2.13:

- Categories: ``kernel`` (old traces: ``Kernel``), ``cuda_runtime`` / ``cuda_driver``
  (old: ``Runtime``), ``gpu_memcpy`` / ``gpu_memset`` (old: ``Memcpy`` / ``Memset``),
  ``user_annotation`` (``record_function`` ranges), ``gpu_user_annotation``,
  ``cpu_op`` (old: ``Operator``). ROCm builds of Kineto use the same names.
- ``ts`` is microseconds with up to three decimals. Traces without
  ``baseTimeNanoseconds`` hold epoch-based ``ts`` (~1.7e15 us) whose nanosecond
  digits a float64 cannot keep, so floats are parsed as decimal text and
  converted once, exactly: ``start_ns = round(ts * 1000)``.
- GPU events carry ``pid`` = device index; the launching process is the pid of
  the runtime call with the same ``args.correlation``.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections import Counter, defaultdict
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path

import numpy as np
import pandas as pd

from analyze.errors import InputError
from analyze.intervals import nesting_depth
from analyze.tables import Trace

KERNEL_CATS = ("kernel", "Kernel")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "Runtime")
MEMCPY_CATS = ("gpu_memcpy", "Memcpy")
MEMSET_CATS = ("gpu_memset", "Memset")
RANGE_CATS = ("user_annotation",)
GPU_RANGE_CATS = ("gpu_user_annotation",)
CPU_OP_CATS = ("cpu_op", "Operator")
# Categories that mark the profiler's own bookkeeping, not profiled work.
BOOKKEEPING_CATS = {None, "Trace"}

# Old traces (no user_annotation category) log ProfilerStep#N as an operator.
STEP_NAME = re.compile(r"^ProfilerStep#\d+$")

# CUPTI memcpy kind abbreviations in Kineto names ("Memcpy HtoD (Pageable -> Device)")
# -> nsys wording ("[CUDA memcpy Host-to-Device]").
_MEMCPY_ENDS = {"H": "Host", "D": "Device", "A": "Array", "P": "Peer"}
_MEMCPY_KIND = re.compile(r"\b([HDAP])to([HDAP])\b")

# Top-level tool versions ("cuda_runtime_version": 12040, "cupti_version": 22, ROCm's equivalents).
VERSION_KEY = re.compile(r"^(cuda|cupti|hip|rocm|roctracer|rocprofiler)\w*_version$")

GZIP_MAGIC = b"\x1f\x8b"
SNIFF_BYTES = 1 << 20


def looks_like_kineto(path: str | Path) -> bool:
    """Cheap check: does ``path`` start like a Kineto Chrome trace? Never raises.

    Reads at most 1 MiB (decompressed): a JSON object naming ``traceEvents`` or
    ``schemaVersion`` (Kineto writes one of them first, after optional metadata).
    """
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
            f.seek(0)
            stream = gzip.GzipFile(fileobj=f) if magic == GZIP_MAGIC else f
            head = stream.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    head = head.lstrip()
    return head.startswith(b"{") and (b'"traceEvents"' in head or b'"schemaVersion"' in head)


def read_kineto(path: str | Path) -> Trace:
    """Read one PyTorch profiler trace into normalized tables.

    Tables: kernels, runtime (CUDA/HIP runtime and driver calls), memops
    (memcpy/memset, named in nsys wording), nvtx (``record_function`` ranges as
    push/pop ranges, ``ProfilerStep#N`` included), gpus (``deviceProperties``),
    threads (``process_name``/``thread_name`` metadata events).

    Kineto names are already demangled and have no short form like nsys'
    ``shortName``, so ``name`` and ``demangled_name`` both hold the full name.
    ``gpu_user_annotation`` events (Kineto's own GPU projection of the ranges)
    are not ranges of the CPU thread; they go to ``meta["gpu_user_annotations"]``
    for cross-checks. Old traces log ``record_function`` ranges as plain
    operators; only their ``ProfilerStep#N`` ranges can be told apart and are kept.

    Raises InputError for a missing file, bad gzip, truncated or invalid JSON,
    JSON without ``traceEvents``, and a trace with no profiled events at all.
    A trace with CPU events and no kernels is valid (empty kernel table).
    """
    path = Path(path)
    doc = _load(path)
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise InputError(f"{path}: JSON has no traceEvents list; not a PyTorch profiler (Kineto) trace")
    by_cat = _bucket(path, events)
    if all(cat in BOOKKEEPING_CATS for cat in by_cat):
        raise InputError(
            f"{path}: trace has no profiled events, only profiler metadata "
            "(a torch.profiler schedule whose cycle already ended exports such an empty trace)"
        )
    runtime_events = _pick(by_cat, RUNTIME_CATS)
    main_pid = _main_pid(by_cat)
    launch_pid = {}
    for e in runtime_events:
        corr, pid = _int(_args(e).get("correlation")), _int(e.get("pid"))
        if corr >= 0 and pid >= 0:
            launch_pid[corr] = pid
    trace = Trace(
        kernels=_kernels(path, _pick(by_cat, KERNEL_CATS), launch_pid, main_pid),
        runtime=_runtime(path, runtime_events),
        memops=_memops(path, _pick(by_cat, MEMCPY_CATS), _pick(by_cat, MEMSET_CATS), launch_pid, main_pid),
        nvtx=_ranges(path, by_cat),
        meta=_meta(path, doc, by_cat, main_pid),
    )
    gpus, threads = _gpus(doc.get("deviceProperties")), _threads(by_cat.get(None, []))
    if gpus is not None:
        trace.gpus = gpus
    if threads is not None:
        trace.threads = threads
    shapes = _cpu_ops_with_shapes(path, by_cat)  # record_shapes traces only: for analyze/roofline.py
    if shapes is not None:
        trace.meta["cpu_ops"] = shapes
    return trace.validated()


def _load(path: Path) -> dict:
    """Decompress if gzipped (by magic bytes, not suffix) and parse, floats kept as text."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a .json or .json.gz trace") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise InputError(f"{path}: truncated or corrupt gzip file ({err})") from None
    if not raw or raw.isspace():
        raise InputError(f"{path}: file is empty")
    try:
        doc = json.loads(raw, parse_float=str)
    except json.JSONDecodeError as err:
        where = "ends early (truncated)" if err.pos >= len(raw.rstrip()) else f"invalid at line {err.lineno}"
        raise InputError(f"{path}: not valid JSON: {where} ({err.msg})") from None
    except ValueError:
        raise InputError(f"{path}: not a JSON text file (binary or unknown encoding)") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: JSON top level is a {type(doc).__name__}, expected an object with traceEvents")
    return doc


def _bucket(path: Path, events: list) -> dict:
    """Group events by category (metadata events, which have none, under None)."""
    by_cat: dict = defaultdict(list)
    try:
        for e in events:
            by_cat[e.get("cat")].append(e)
    except AttributeError:
        raise InputError(f"{path}: traceEvents holds a non-object entry; not a Chrome trace") from None
    except TypeError:
        raise InputError(f"{path}: an event has a non-string cat; not a Chrome trace") from None
    return by_cat


def _pick(by_cat: dict, cats: tuple[str, ...]) -> list[dict]:
    """Complete ("X") events of the given categories."""
    return [e for c in cats for e in by_cat.get(c, ()) if e.get("ph") == "X"]


def _args(event: dict) -> dict:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def us_to_ns(value) -> int:
    """Microseconds (int, or decimal text as parsed here) -> int ns, rounded half to even."""
    if type(value) is int:
        return value * 1000
    return int((Decimal(value) * 1000).to_integral_value(ROUND_HALF_EVEN))


def _times(path: Path, events: list[dict], cat: str) -> tuple[np.ndarray, np.ndarray]:
    """start_ns and duration_ns of complete events; a missing dur counts as 0."""
    try:
        start = np.fromiter((us_to_ns(e["ts"]) for e in events), dtype=np.int64, count=len(events))
        dur = np.fromiter((us_to_ns(e.get("dur", 0)) for e in events), dtype=np.int64, count=len(events))
    except (KeyError, TypeError, ValueError, OverflowError, InvalidOperation):
        raise InputError(f"{path}: a {cat} event lacks a numeric ts or dur") from None
    return start, dur


def _int(value, default: int = -1) -> int:
    """An id as int: ints as is, digit strings ("1890023232" in old traces) parsed, else default."""
    if type(value) is int:
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return default


def _ints(values) -> list[int]:
    return [_int(v) for v in values]


def _dim(value, axis: int) -> int:
    """One axis of a grid/block list ([x, y, z]); -1 when absent."""
    return _int(value[axis]) if isinstance(value, list) and len(value) > axis else -1


def _main_pid(by_cat: dict) -> int:
    """The profiled process: the pid with most CPU-side events (cpu_op, then runtime, then ranges)."""
    for cats in (CPU_OP_CATS, RUNTIME_CATS, RANGE_CATS):
        pids = Counter(e.get("pid") for c in cats for e in by_cat.get(c, ()) if isinstance(e.get("pid"), int))
        if pids:
            return pids.most_common(1)[0][0]
    return -1


def _frame(columns: dict, start: np.ndarray, dur: np.ndarray) -> pd.DataFrame:
    df = pd.DataFrame({"start_ns": start, "end_ns": start + dur, "duration_ns": dur, **columns})
    return df.sort_values("start_ns", kind="stable")


def _kernels(path: Path, events: list[dict], launch_pid: dict, main_pid: int) -> pd.DataFrame:
    start, dur = _times(path, events, "kernel")
    args = [_args(e) for e in events]
    corr = _ints(a.get("correlation") for a in args)
    names = [str(e.get("name", "")) for e in events]
    grids = [a.get("grid") for a in args]
    blocks = [a.get("block") for a in args]
    columns = {
        "name": names,
        "demangled_name": names,
        "device_id": [_int(a.get("device"), _int(e.get("pid"))) for a, e in zip(args, events, strict=True)],
        "stream_id": [_int(a.get("stream"), _int(e.get("tid"))) for a, e in zip(args, events, strict=True)],
        "correlation_id": corr,
        "pid": [launch_pid.get(c, main_pid) for c in corr],
        **{f"grid_{ax}": [_dim(g, i) for g in grids] for i, ax in enumerate("xyz")},
        **{f"block_{ax}": [_dim(b, i) for b in blocks] for i, ax in enumerate("xyz")},
        "registers_per_thread": _ints(a.get("registers per thread") for a in args),
        "shared_memory_bytes": _ints(a.get("shared memory") for a in args),  # Kineto: static + dynamic
    }
    return _frame(columns, start, dur)


def _runtime(path: Path, events: list[dict]) -> pd.DataFrame:
    start, dur = _times(path, events, "runtime")
    columns = {
        "name": [str(e.get("name", "")) for e in events],
        "pid": _ints(e.get("pid") for e in events),
        "tid": _ints(e.get("tid") for e in events),
        "correlation_id": _ints(_args(e).get("correlation") for e in events),
    }
    return _frame(columns, start, dur)


def memop_name(kineto_name: str, kind: str) -> str:
    """nsys wording for a Kineto memcpy/memset name; the Kineto name when the kind is not recognized."""
    if kind == "memset":
        return "[CUDA memset]"
    m = _MEMCPY_KIND.search(kineto_name)
    if m is None:
        return kineto_name
    src, dst = m.groups()
    if src == dst == "P":
        return "[CUDA memcpy Peer-to-Peer]"
    return f"[CUDA memcpy {_MEMCPY_ENDS[src]}-to-{_MEMCPY_ENDS[dst]}]"


def _memops(path: Path, copies: list[dict], sets: list[dict], launch_pid: dict, main_pid: int) -> pd.DataFrame:
    events = copies + sets
    kinds = ["memcpy"] * len(copies) + ["memset"] * len(sets)
    start, dur = _times(path, events, "memcpy/memset")
    args = [_args(e) for e in events]
    corr = _ints(a.get("correlation") for a in args)
    columns = {
        "name": [memop_name(str(e.get("name", "")), k) for e, k in zip(events, kinds, strict=True)],
        "kind": kinds,
        "size_bytes": _ints(a.get("bytes") for a in args),
        "device_id": [_int(a.get("device"), _int(e.get("pid"))) for a, e in zip(args, events, strict=True)],
        "stream_id": [_int(a.get("stream"), _int(e.get("tid"))) for a, e in zip(args, events, strict=True)],
        "correlation_id": corr,
        "pid": [launch_pid.get(c, main_pid) for c in corr],
    }
    return _frame(columns, start, dur)


def _range_events(by_cat: dict) -> list[dict]:
    """user_annotation events; in old traces without them, ProfilerStep#N operators."""
    events = _pick(by_cat, RANGE_CATS)
    if not any(STEP_NAME.match(str(e.get("name", ""))) for e in events):
        events += [e for e in _pick(by_cat, CPU_OP_CATS) if STEP_NAME.match(str(e.get("name", "")))]
    return events


def _ranges(path: Path, by_cat: dict) -> pd.DataFrame:
    events = _range_events(by_cat)
    start, dur = _times(path, events, "user_annotation")
    tids = _ints(e.get("tid") for e in events)
    df = _frame(
        {
            "name": [str(e.get("name", "")) for e in events],
            "domain": "",
            "style": "push_pop",
            "pid": _ints(e.get("pid") for e in events),
            "tid": tids,
            "end_tid": -1,  # push/pop: closed on the thread that opened it (nsys: endGlobalTid NULL)
        },
        start,
        dur,
    )
    df["depth"] = nesting_depth(df)
    return df


def _gpus(props) -> pd.DataFrame | None:
    """deviceProperties -> gpus; None (empty table) when the trace has none (CPU runs, old traces)."""
    if not isinstance(props, list):
        return None
    props = [p for p in props if isinstance(p, dict)]
    if not props:
        return None

    def capability(p: dict) -> str:
        major, minor = p.get("computeMajor"), p.get("computeMinor")
        return f"{major}.{minor}" if major is not None and minor is not None else ""

    return pd.DataFrame(
        {
            "device_id": _ints(p.get("id") for p in props),
            "name": [str(p.get("name", "")) for p in props],
            "sm_count": _ints(p.get("numSms") for p in props),
            "memory_bytes": _ints(p.get("totalGlobalMem") for p in props),
            # Kineto records neither bandwidth nor clock rate: -1 = unknown.
            "memory_bandwidth_bytes_per_s": -1,
            "clock_rate_hz": -1,
            "compute_capability": [capability(p) for p in props],
        }
    ).drop_duplicates("device_id")


def _threads(metadata: list[dict]) -> pd.DataFrame | None:
    """thread_name metadata events, with their process's process_name; GPU streams included."""
    process: dict[int, str] = {}
    thread: dict[tuple[int, int], str] = {}
    for e in metadata:
        pid, tid, name = _int(e.get("pid")), _int(e.get("tid")), _args(e).get("name")
        if e.get("ph") != "M" or pid < 0 or not isinstance(name, str):
            continue
        if e.get("name") == "process_name":
            process[pid] = name.strip()
        elif e.get("name") == "thread_name" and tid >= 0:
            thread[(pid, tid)] = name.strip()
    if not thread:
        return None
    keys = list(thread)
    return pd.DataFrame(
        {
            "pid": [k[0] for k in keys],
            "tid": [k[1] for k in keys],
            "thread_name": list(thread.values()),
            "process_name": [process.get(k[0], "") for k in keys],
        }
    )


def _gpu_ranges(by_cat: dict) -> list[dict]:
    events = _pick(by_cat, GPU_RANGE_CATS)
    out = []
    for e in events:
        start, dur = us_to_ns(e.get("ts", 0)), us_to_ns(e.get("dur", 0))
        out.append(
            {
                "name": str(e.get("name", "")),
                "start_ns": start,
                "end_ns": start + dur,
                "device_id": _int(e.get("pid")),
                "stream_id": _int(e.get("tid")),
            }
        )
    return out


def _meta(path: Path, doc: dict, by_cat: dict, main_pid: int) -> dict:
    """Provenance: versions, distributed rank, time base, event counts per category."""
    meta = {
        "source": str(path),
        "format": "kineto",
        "schema_version": doc.get("schemaVersion"),
        # ts is relative to this epoch time when present; absolute epoch us otherwise.
        "base_time_ns": _int(doc.get("baseTimeNanoseconds"), 0),
        "main_pid": main_pid,
        "versions": {k: v for k, v in doc.items() if VERSION_KEY.match(k) and isinstance(v, (int, str))},
        "event_counts": {str(c): len(v) for c, v in by_cat.items() if c is not None},
        "gpu_user_annotations": _gpu_ranges(by_cat),
    }
    dist = doc.get("distributedInfo")
    if isinstance(dist, dict):
        meta["distributed"] = {k: dist[k] for k in ("backend", "rank", "world_size", "nccl_version") if k in dist}
        meta["rank"] = _int(dist.get("rank"))
        meta["world_size"] = _int(dist.get("world_size"))
    return meta


# --- Operator shapes (record_shapes=True), for the per-op roofline (analyze/roofline.py) --------------------
SHAPE_OP_CATS = ("cpu_op",)


def _cpu_ops_with_shapes(path: Path, by_cat: dict) -> pd.DataFrame | None:
    """cpu_op events that carry "Input Dims": name, times, pid, tid, input_dims and input_types (JSON text,
    as recorded: one entry per argument, [] for scalars). None when the trace was made without shapes."""
    events = [e for e in _pick(by_cat, SHAPE_OP_CATS) if "Input Dims" in _args(e)]
    if not events:
        return None
    start, dur = _times(path, events, "cpu_op")
    return pd.DataFrame(
        {
            "name": [str(e.get("name", "")) for e in events],
            "start_ns": start,
            "end_ns": start + dur,
            "pid": _ints(e.get("pid") for e in events),
            "tid": _ints(e.get("tid") for e in events),
            "input_dims": [json.dumps(_args(e).get("Input Dims")) for e in events],
            "input_types": [json.dumps(_args(e).get("Input type")) for e in events],
        }
    )
