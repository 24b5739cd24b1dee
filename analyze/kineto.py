"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON, ``.json`` or ``.json.gz``.

``torch.profiler.profile(...).export_chrome_trace(path)`` writes one file per
rank (Chrome trace JSON, as Perfetto and Holistic Trace Analysis read it). Only
this module knows that format: microsecond ``ts``/``dur``, event categories,
``args`` keys. It returns the same normalized tables as the
nsys reader, so the taxonomy, projection and reports treat both sources alike.

Format facts this reader relies on, checked against traces from PyTorch 1.8
(tb_plugin sample) to 2.x (HTA, TraceLens) and a CPU trace from torch 2.13:

- Layout: the Trace Event Format allows the whole file to be a JSON array of
  events (its closing ``]`` optional) or an object with ``traceEvents``. The
  legacy autograd profiler (``torch.autograd.profiler``, ``use_kineto=False``)
  writes the array, with no ``cat``: ``pid`` "CPU functions" and, before torch
  1.8, "CUDA functions" (kernels; ``tid`` = device). Kineto writes the object.
- Categories (CATEGORY_ROLES, spellings from pytorch/kineto's history):
  ``kernel`` (before 2022-04, PyTorch <= 1.11: ``Kernel``), ``cuda_runtime`` /
  ``cuda_driver`` (``Runtime``), ``gpu_memcpy`` / ``gpu_memset`` (``Memcpy`` /
  ``Memset``), ``cpu_op`` (before 2021-06: ``Operator``), ``user_annotation``
  (``record_function`` ranges), ``gpu_user_annotation`` (2021-06 to 2022-05:
  ``gpu_user_Annotation``; before: ``User``).
- ROCm builds use the same categories and HIP names (``hipLaunchKernel``...).
  Before rocprofiler-sdk, Kineto's roctracer path logged every HIP op as
  ``kernel``: copies (``CopyHostToDevice``...), fills and barrier packets
  (``Marker``) too; HIP_OPS sends them to memops or drops them.
- CUDA graphs: their kernels are ordinary kernel events carrying the
  ``correlation`` of the ``cudaGraphLaunch`` (``hipGraphLaunch``) that ran them,
  and since 2026-02 (CUDA >= 12 builds) a ``graph id`` arg (0: no graph).
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
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.intervals import nesting_depth
from profiler_kit.analyze.tables import Trace

# Event category -> the table it feeds. Categories not named here (python_function, cuda_sync, flows...) are
# only counted in meta["event_counts"].
CATEGORY_ROLES = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "Runtime": "runtime",
    "hip_runtime": "runtime",  # not a Kineto spelling: kept for ROCm tools' Chrome traces that use it
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
    "cpu_op": "cpu_op",
    "Operator": "cpu_op",
    "user_annotation": "range",
    "gpu_user_annotation": "gpu_range",
    "gpu_user_Annotation": "gpu_range",
    "User": "gpu_range",
}
# The legacy autograd profiler's array trace has no cat; its pid says what an event is.
LEGACY_PID_ROLES = {"CPU functions": "cpu_op", "CUDA functions": "kernel"}
# HIP ops that roctracer-era Kineto logged as "kernel": role (None: not GPU work to count) and nsys wording.
HIP_OPS = {
    "CopyHostToDevice": ("memcpy", "[CUDA memcpy Host-to-Device]"),
    "CopyDeviceToHost": ("memcpy", "[CUDA memcpy Device-to-Host]"),
    "CopyDeviceToDevice": ("memcpy", "[CUDA memcpy Device-to-Device]"),
    "FillBuffer": ("memset", "[CUDA memset]"),
    "Marker": (None, ""),
    "Barrier": (None, ""),
    "BarrierAnd": (None, ""),
    "BarrierOr": (None, ""),
}
# Runtime/driver calls that launch a CUDA (HIP) graph: cudaGraphLaunch, cudaGraphLaunch_ptsz, cuGraphLaunch, hipGraphLaunch.
GRAPH_LAUNCH = re.compile(r"^(cuda|cu|hip)GraphLaunch(_v\d+)?(_ptsz|_spt)?$")
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
# The start of an array-layout trace: "[", then an event object (every event has a "ph").
ARRAY_HEAD = re.compile(rb"^\[\s*\{")


def looks_like_kineto(path: str | Path) -> bool:
    """Cheap check: does ``path`` start like a PyTorch profiler / Chrome trace? Never raises.

    Reads at most 1 MiB (decompressed): a JSON object naming ``traceEvents`` or ``schemaVersion``
    (Kineto writes one of them first, after optional metadata), or a JSON array of event objects
    with a ``"ph"`` (the Trace Event Format's other layout, the legacy autograd profiler's).
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
    if head.startswith(b"{"):
        return b'"traceEvents"' in head or b'"schemaVersion"' in head
    return bool(ARRAY_HEAD.match(head)) and b'"ph"' in head


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

    ``graph_id`` of a kernel: Kineto's ``graph id`` arg where it is non-zero; else,
    for a kernel whose launching call (same correlation id) is a graph launch,
    that call's correlation id (one id per launch: older Kineto records no graph
    identity); else -1. ``meta["graph_id_source"]`` says which one a trace used.

    Raises InputError for a missing file, bad gzip, truncated or invalid JSON,
    JSON that is neither an event array nor an object with ``traceEvents``, and
    a trace with no profiled events at all. A trace with CPU events and no
    kernels is valid (empty kernel table).
    """
    path = Path(path)
    doc, events, layout = _load(path)
    by_cat = _bucket(path, events)
    roles = _roles(by_cat)
    if not any(roles.values()) and all(cat in BOOKKEEPING_CATS for cat in by_cat):
        _no_profiled_events(path, by_cat)
    main_pid = _main_pid(roles)
    launch_pid, graph_launches = {}, set()
    for e in roles["runtime"]:
        corr, pid = _int(_args(e).get("correlation")), _int(e.get("pid"))
        if corr >= 0 and pid >= 0:
            launch_pid[corr] = pid
        if corr >= 0 and GRAPH_LAUNCH.match(str(e.get("name", ""))):
            graph_launches.add(corr)
    kernels, graph_id_source = _kernels(path, roles["kernel"], launch_pid, main_pid, graph_launches)
    trace = Trace(
        kernels=kernels,
        runtime=_runtime(path, roles["runtime"]),
        memops=_memops(path, roles["memcpy"], roles["memset"], launch_pid, main_pid),
        nvtx=_ranges(path, roles),
        meta=_meta(path, doc, by_cat, roles, main_pid) | {"layout": layout},
    )
    trace.meta["graph_id_source"] = graph_id_source
    trace.memory_counters = _memory_counters(path, events)
    gpus, threads = _gpus(doc.get("deviceProperties")), _threads(by_cat.get(None, []))
    if gpus is not None:
        trace.gpus = gpus
    if threads is not None:
        trace.threads = threads
    shapes = _cpu_ops_with_shapes(path, roles["cpu_op"])  # record_shapes traces only: for analyze/roofline.py
    if shapes is not None:
        trace.meta["cpu_ops"] = shapes
    trace.meta["cpu_op_ranges"] = _cpu_op_ranges(path, roles["cpu_op"])  # the ops that launched kernels
    comm = _collective_args(roles["kernel"])  # message sizes of NCCL kernels: for analyze/collectives.py
    if comm is not None:
        trace.meta["collective_args"] = comm
    return trace.validated()


MEMORY_EVENT = "[memory]"  # profile_memory=True: an instant event per allocation and free, any category
CPU_DEVICE_TYPE = 0  # c10::DeviceType::CPU; GPU allocations carry CUDA's (1) on NVIDIA and ROCm builds


def _memory_counters(path: Path, events: list[dict]) -> pd.DataFrame:
    """GPU allocator totals after each ``[memory]`` event, in time order (CPU allocations left out)."""
    rows = []
    for e in events:
        if e.get("name") != MEMORY_EVENT:
            continue
        a = _args(e)
        if _int(a.get("Device Type"), CPU_DEVICE_TYPE) == CPU_DEVICE_TYPE:
            continue
        time = us_to_ns(e.get("ts", 0))
        rows.append((time, _int(a.get("Device Id")), _int(a.get("Total Allocated")), _int(a.get("Total Reserved")),
                     _int(a.get("Bytes"), 0)))  # fmt: skip
    df = pd.DataFrame(rows, columns=["time_ns", "device_id", "allocated_bytes", "reserved_bytes", "delta_bytes"])
    return df.sort_values("time_ns", kind="stable")


def _no_profiled_events(path: Path, by_cat: dict) -> None:
    """Raise the InputError for a trace with no event this reader knows: an empty profile, or another tool's."""
    metadata_only = all(e.get("ph") == "M" for e in by_cat.get(None, ())) or "Trace" in by_cat
    if metadata_only:
        raise InputError(
            f"{path}: trace has no profiled events, only profiler metadata "
            "(a torch.profiler schedule whose cycle already ended exports such an empty trace)"
        )
    raise InputError(
        f"{path}: a Chrome trace without PyTorch profiler events (no cat such as kernel, cuda_runtime or cpu_op, "
        "no legacy 'CPU functions' pid); not a PyTorch profiler trace"
    )


def _load(path: Path) -> tuple[dict, list, str]:
    """Decompress if gzipped (by magic bytes, not suffix) and parse, floats kept as text.

    Returns the top-level object (``{}`` for the array layout), the events, and the layout:
    "object" (Kineto), "array" (legacy autograd profiler), "array without its closing ]".
    """
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
    layout = "array"
    try:
        doc = json.loads(raw, parse_float=str)
    except json.JSONDecodeError as err:
        doc, layout = _unclosed_array(raw), "array without its closing ]"
        if doc is None:
            where = "ends early (truncated)" if err.pos >= len(raw.rstrip()) else f"invalid at line {err.lineno}"
            raise InputError(f"{path}: not valid JSON: {where} ({err.msg})") from None
    except ValueError:
        raise InputError(f"{path}: not a JSON text file (binary or unknown encoding)") from None
    if isinstance(doc, list):
        return {}, doc, layout
    if not isinstance(doc, dict):
        raise InputError(
            f"{path}: JSON top level is a {type(doc).__name__}, expected an array of trace events "
            "or an object with traceEvents"
        )
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise InputError(f"{path}: JSON has no traceEvents list; not a PyTorch profiler (Kineto) trace")
    return doc, events, "object"


def _unclosed_array(raw: bytes) -> list | None:
    """The Trace Event Format's array whose closing "]" was left off (allowed there), parsed; else None."""
    text = raw.rstrip()
    if not text.lstrip().startswith(b"[") or text.endswith(b"]"):
        return None
    try:
        return json.loads(text.rstrip(b",").rstrip() + b"]", parse_float=str)
    except ValueError:
        return None


def _bucket(path: Path, events: list) -> dict:
    """Group events by category (metadata events, which have none, under None)."""
    by_cat: dict = defaultdict(list)
    try:
        for e in events:
            by_cat[e.get("cat")].append(e)
    except AttributeError:
        raise InputError(f"{path}: the trace holds a non-object event; not a Chrome trace") from None
    except TypeError:
        raise InputError(f"{path}: an event has a non-string cat; not a Chrome trace") from None
    return by_cat


def _roles(by_cat: dict) -> dict[str, list[dict]]:
    """Complete ("X") events per table role (CATEGORY_ROLES), legacy and ROCm quirks resolved.

    ``roles["not_kernels"]`` holds the HIP barrier packets taken out of ``kernel``.
    """
    roles: dict[str, list[dict]] = {r: [] for r in (*set(CATEGORY_ROLES.values()), "not_kernels")}
    for cat, events in by_cat.items():
        role = CATEGORY_ROLES.get(cat)
        if role == "cpu_op":  # only counted per pid, and searched for ProfilerStep#N: no pass here
            roles[role] = roles[role] + events if roles[role] else events
        elif role is not None:
            roles[role] += [e for e in events if e.get("ph") == "X"]
    legacy: dict[str, list[dict]] = defaultdict(list)
    for e in by_cat.get(None, ()):
        pid = e.get("pid")
        role = LEGACY_PID_ROLES.get(pid) if isinstance(pid, str) and e.get("ph") == "X" else None
        if role == "kernel":  # tid is the device; no stream recorded
            e = {**e, "args": {"device": e.get("tid"), "stream": -1}}
        if role is not None:
            legacy[role].append(e)
    for role, events in legacy.items():  # new lists: those above may be by_cat's own
        roles[role] = roles[role] + events
    kernels = roles["kernel"]
    if _has_hip_ops(kernels):
        roles["kernel"] = []
        for e in kernels:
            op = _hip_op(e)
            roles[(op[0] or "not_kernels") if op else "kernel"].append(e)
    return roles


def _has_hip_ops(kernels: list[dict]) -> bool:
    try:
        return not HIP_OPS.keys().isdisjoint({e.get("name") for e in kernels})
    except TypeError:  # an unhashable name: look event by event
        return any(_hip_op(e) for e in kernels)


def _hip_op(event: dict) -> tuple | None:
    name = event.get("name")
    return HIP_OPS.get(name) if isinstance(name, str) else None


def _args(event: dict) -> dict:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def us_to_ns(value) -> int:
    """Microseconds (int, or decimal text as parsed here) -> int ns, rounded half to even."""
    if type(value) is int:
        return value * 1000
    return int((Decimal(value) * 1000).to_integral_value(ROUND_HALF_EVEN))


def _event_times(path: Path, events: list[dict], cat: str) -> tuple[np.ndarray, np.ndarray]:
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


def _main_pid(roles: dict) -> int:
    """The profiled process: the pid with most CPU-side events (cpu_op, then runtime, then ranges)."""
    for role in ("cpu_op", "runtime", "range"):
        pids = Counter(e.get("pid") for e in roles[role] if isinstance(e.get("pid"), int))
        if pids:
            return pids.most_common(1)[0][0]
    return -1


def _frame(columns: dict, start: np.ndarray, dur: np.ndarray) -> pd.DataFrame:
    df = pd.DataFrame({"start_ns": start, "end_ns": start + dur, "duration_ns": dur, **columns})
    return df.sort_values("start_ns", kind="stable")


def _kernels(
    path: Path, events: list[dict], launch_pid: dict, main_pid: int, graph_launches: set
) -> tuple[pd.DataFrame, str | None]:
    """Kernel rows, and where their graph ids came from (``_graph_ids``)."""
    start, dur = _event_times(path, events, "kernel")
    args = [_args(e) for e in events]
    corr = _ints(a.get("correlation") for a in args)
    graph_id, source = _graph_ids(args, corr, graph_launches)
    names = [str(e.get("name", "")) for e in events]
    grids = [a.get("grid") for a in args]
    blocks = [a.get("block") for a in args]
    columns = {
        "name": names,
        "demangled_name": names,
        "device_id": [_int(a.get("device"), _int(e.get("pid"))) for a, e in zip(args, events, strict=True)],
        "stream_id": [_int(a.get("stream"), _int(e.get("tid"))) for a, e in zip(args, events, strict=True)],
        "correlation_id": corr,
        "graph_id": graph_id,
        "pid": [launch_pid.get(c, main_pid) for c in corr],
        **{f"grid_{ax}": [_dim(g, i) for g in grids] for i, ax in enumerate("xyz")},
        **{f"block_{ax}": [_dim(b, i) for b in blocks] for i, ax in enumerate("xyz")},
        "registers_per_thread": _ints(a.get("registers per thread") for a in args),
        "shared_memory_bytes": _ints(a.get("shared memory") for a in args),  # Kineto: static + dynamic
    }
    return _frame(columns, start, dur), source


def _graph_ids(args: list[dict], corr: list[int], graph_launches: set) -> tuple[np.ndarray, str | None]:
    """Per kernel: Kineto's non-zero "graph id", else the correlation id of its graph launch, else -1.

    Also says which of the two the trace used ("kineto graph id", "graph launch correlation", both
    joined by " + ", or None when no kernel ran in a graph).
    """
    if any("graph id" in a for a in args):
        ids = np.fromiter((_int(a.get("graph id"), 0) for a in args), dtype=np.int64, count=len(args))
    else:
        ids = np.zeros(len(args), dtype=np.int64)
    recorded = ids > 0
    by_launch = np.zeros(len(corr), dtype=bool)
    if graph_launches:
        corr_arr = np.asarray(corr, dtype=np.int64)
        by_launch = ~recorded & np.isin(corr_arr, np.fromiter(graph_launches, dtype=np.int64))
        ids = np.where(by_launch, corr_arr, ids)
    ids[~recorded & ~by_launch] = -1
    sources = [name for name, used in (("kineto graph id", recorded), ("graph launch correlation", by_launch))
               if used.any()]  # fmt: skip
    return ids, " + ".join(sources) or None


def _runtime(path: Path, events: list[dict]) -> pd.DataFrame:
    start, dur = _event_times(path, events, "runtime")
    columns = {
        "name": [str(e.get("name", "")) for e in events],
        "pid": _ints(e.get("pid") for e in events),
        "tid": _ints(e.get("tid") for e in events),
        "correlation_id": _ints(_args(e).get("correlation") for e in events),
    }
    return _frame(columns, start, dur)


def memop_name(kineto_name: str, kind: str) -> str:
    """nsys wording for a Kineto memcpy/memset name; the Kineto name when the kind is not recognized."""
    hip = HIP_OPS.get(kineto_name)
    if hip is not None:
        return hip[1]
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
    start, dur = _event_times(path, events, "memcpy/memset")
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


def _range_events(roles: dict) -> list[dict]:
    """user_annotation events; in old traces without them, ProfilerStep#N operators."""
    events = roles["range"]
    if not any(STEP_NAME.match(str(e.get("name", ""))) for e in events):
        ops = roles["cpu_op"]
        events = events + [e for e in ops if e.get("ph") == "X" and STEP_NAME.match(str(e.get("name", "")))]
    return events


def _ranges(path: Path, roles: dict) -> pd.DataFrame:
    events = _range_events(roles)
    start, dur = _event_times(path, events, "user_annotation")
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


def _gpu_ranges(events: list[dict]) -> list[dict]:
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


def _meta(path: Path, doc: dict, by_cat: dict, roles: dict, main_pid: int) -> dict:
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
        "gpu_user_annotations": _gpu_ranges(roles["gpu_range"]),
        # HIP barrier and marker packets that roctracer-era Kineto logged as kernels, left out
        "not_kernels": dict(Counter(str(e.get("name")) for e in roles["not_kernels"])),
    }
    dist = doc.get("distributedInfo")
    if isinstance(dist, dict):
        meta["distributed"] = {k: dist[k] for k in ("backend", "rank", "world_size", "nccl_version") if k in dist}
        meta["rank"] = _int(dist.get("rank"))
        meta["world_size"] = _int(dist.get("world_size"))
    return meta


def _cpu_op_ranges(path: Path, cpu_ops: list[dict]) -> pd.DataFrame:
    """Complete cpu_op events as ranges (name, start_ns, end_ns, pid, tid): the operators whose runtime calls
    launched kernels (analyze/sequences.py names the ops behind a repeating kernel sequence)."""
    events = [e for e in cpu_ops if e.get("ph") == "X"]
    start, dur = _event_times(path, events, "cpu_op")
    return pd.DataFrame(
        {
            "name": [str(e.get("name", "")) for e in events],
            "start_ns": start,
            "end_ns": start + dur,
            "pid": _ints(e.get("pid") for e in events),
            "tid": _ints(e.get("tid") for e in events),
        }
    )


# --- Collective message sizes, for the bus bandwidth of each collective (analyze/collectives.py) -----------


def _collective_args(kernels: list[dict]) -> pd.DataFrame | None:
    """NCCL kernels' collective args (PyTorch >= 2.1 copies record_param_comms' args onto the kernel):
    correlation id, "Collective name", "In msg nelems", "Out msg nelems", "dtype" (c10 name, "Float"),
    "Group size" (-1 when absent). None when no kernel carries them."""
    rows = []
    for e in kernels:
        a = _args(e)
        if "In msg nelems" in a or "Collective name" in a:
            rows.append((_int(a.get("correlation")), str(a.get("Collective name", "")), _int(a.get("In msg nelems")),
                         _int(a.get("Out msg nelems")), str(a.get("dtype", "")), _int(a.get("Group size"))))  # fmt: skip
    if not rows:
        return None
    return pd.DataFrame(
        rows, columns=["correlation_id", "collective", "in_nelems", "out_nelems", "dtype", "group_size"]
    )


# --- Operator shapes (record_shapes=True), for the per-op roofline (analyze/roofline.py) --------------------


def _cpu_ops_with_shapes(path: Path, cpu_ops: list[dict]) -> pd.DataFrame | None:
    """Complete cpu_op events that carry "Input Dims": name, times, pid, tid, input_dims, input_types and
    concrete_inputs (JSON text, as recorded: one entry per argument, [] for scalars; null when absent). None when the trace was made without shapes."""
    events = [e for e in cpu_ops if e.get("ph") == "X" and "Input Dims" in _args(e)]
    if not events:
        return None
    return _cpu_op_ranges(path, events).assign(
        input_dims=[json.dumps(_args(e).get("Input Dims")) for e in events],
        input_types=[json.dumps(_args(e).get("Input type")) for e in events],
        # scalar and list arguments as text ("[2, 2]" for a stride), torch >= 2.1: convolution output sizes
        concrete_inputs=[json.dumps(_args(e).get("Concrete Inputs")) for e in events],
    )
