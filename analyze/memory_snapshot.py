"""Read ``torch.cuda.memory._dump_snapshot`` pickles into normalized tables, without running code.

A snapshot is a pickle of plain data (dicts, lists, tuples, strings, numbers), but ``pickle.load`` on an
untrusted file runs whatever its reduce opcodes name. ``SafeUnpickler`` refuses
every global and every persistent id, so only dicts, lists, tuples, sets,
strings, bytes, numbers, bools and None can come out of it.

Format drift handled here and nowhere else, one named function per layout (LAYOUTS):
the list of segment dicts that ``torch.cuda.memory_snapshot()`` returns, a dict
without any trace event (history never recorded, or an empty ring buffer), the
older dict whose blocks keep frames in ``history`` and whose events have no
``time_us`` (torch 1.13-2.0), and the current dict. Within them: keys present
or absent (time_us, frames, compile_context, user_metadata, block addresses),
block state names (``active_pending_free`` vs ``active_awaiting_free``), legacy
``free`` actions, ``oom`` events (``device_free`` in place of ``addr``),
expandable segments (``segment_map``/``segment_unmap``), several devices.
"""

from __future__ import annotations

import gzip
import json
import pickle
import re
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path

import numpy as np
import pandas as pd
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.results import fields_problem
from profiler_kit.analyze.tables import MEMORY_BLOCKS, MEMORY_EVENTS, MEMORY_SEGMENTS, MEMORY_STACKS, empty, validate

# Frames skipped when looking for the first user-code frame (first match wins).
USER_FRAME_SKIP = (
    # reason                          regex on the frame's filename
    ("PyTorch library", r"[/\\]torch[/\\]"),
    ("frozen Python module", r"^<frozen "),
    ("torch.compile generated code", r"^<eval_with_key>|[/\\]torchinductor"),
    ("installed package", r"[/\\](site|dist)-packages[/\\]"),
    ("Python standard library", r"[/\\]lib[/\\]python3(\.\d+)?[/\\]"),
)

# Labels for stacks without a Python frame (backward runs on autograd's C++ threads).
NATIVE_LABELS = (
    # regex on C++ frame names            label ({0} = first group)
    (r"AccumulateGrad", "(autograd) AccumulateGrad"),
    (r"autograd::generated::(\w+Backward\d*)", "(autograd) {0}"),
    (r"autograd::generated::details::(\w+_backward)", "(autograd) {0}"),
    (r"autograd::Engine", "(autograd) engine"),
)
NO_FRAMES = "(no frames)"
NATIVE_ONLY = "(C++ only)"
BEFORE_TRACE = "(allocated before the trace)"

# Older PyTorch names -> the names this project uses.
STATE_NAMES = {"active_awaiting_free": "active_pending_free"}
ACTION_NAMES = {"free": "free_completed"}

_SKIP_RE = re.compile("|".join(f"(?:{p})" for _, p in USER_FRAME_SKIP))
_NATIVE_RE = [(re.compile(p), label) for p, label in NATIVE_LABELS]
SNAPSHOT_SUFFIXES = (".pickle", ".pkl", ".pickle.gz", ".pkl.gz")
# Trace actions that change allocated or reserved bytes: a trace without any holds no history.
HISTORY_ACTIONS = ("alloc", "free_requested", "free_completed", "free", "segment_alloc", "segment_free",
                   "segment_map", "segment_unmap")  # fmt: skip
OOM_COLUMNS = ("device", "seq", "size_bytes", "device_free_bytes", "stream", "time_ns", "stack_id", "top_frame")
RECORD_HOW = (
    "call torch.cuda.memory._record_memory_history(max_entries=1000000) before the allocations of interest, "
    "then torch.cuda.memory._dump_snapshot('snapshot.pickle')"
)


class SafeUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only: every global and persistent id is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"it references code ({module}.{name}); a memory snapshot holds plain data only")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it uses persistent ids; a memory snapshot holds plain data only")


@dataclass
class MemorySnapshot:
    """The tables of one snapshot. ``meta``: path, devices, allocator settings, sidecar metadata."""

    events: pd.DataFrame = field(default_factory=lambda: empty(MEMORY_EVENTS))
    ooms: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(OOM_COLUMNS)))
    segments: pd.DataFrame = field(default_factory=lambda: empty(MEMORY_SEGMENTS))
    blocks: pd.DataFrame = field(default_factory=lambda: empty(MEMORY_BLOCKS))
    stacks: pd.DataFrame = field(default_factory=lambda: empty(MEMORY_STACKS))
    meta: dict = field(default_factory=dict)

    def devices(self) -> list[int]:
        """Devices with trace events, most events first; then devices that only have segments, by number."""
        counts = self.events["device"].value_counts()
        traced = [int(d) for d in counts.index]
        return traced + sorted({int(d) for d in self.segments["device"]} - set(traced))

    def has_history(self, device: int) -> bool:
        """Whether the device's trace holds allocation history (not only ``snapshot`` or ``oom`` entries)."""
        ev = self.events
        return bool((ev["action"].isin(HISTORY_ACTIONS) & (ev["device"] == device)).any())

    def on_device(self, device: int) -> MemorySnapshot:
        """The same snapshot restricted to one device (stacks are shared)."""
        return MemorySnapshot(
            events=self.events[self.events["device"] == device].reset_index(drop=True),
            ooms=self.ooms[self.ooms["device"] == device].reset_index(drop=True),
            segments=self.segments[self.segments["device"] == device].reset_index(drop=True),
            blocks=self.blocks[self.blocks["device"] == device].reset_index(drop=True),
            stacks=self.stacks,
            meta={**self.meta, "device": device},
        )


def snapshot_stem(path: Path) -> str:
    """The file name without .gz / .pickle / .pkl ("xl_ctx512.pickle.gz" -> "xl_ctx512")."""
    name = path.name
    for suffix in (".gz", ".pickle", ".pkl"):
        name = name[: -len(suffix)] if name.endswith(suffix) else name
    return name


# The sidecar fields the memory report reads ("?": may be absent or null; see analyze.results.RUN_FIELDS).
SIDECAR_FIELDS = dict.fromkeys(("max_memory_allocated?", "parameter_bytes?", "parameters_bytes?", "param_bytes?"), int)


def read_sidecar(path: Path) -> dict:
    """Run metadata beside a snapshot: ``<stem>.json``, else ``run.json``; {} when none, unreadable or
    with SIDECAR_FIELDS of other types (the metadata is optional context, not worth refusing the snapshot)."""
    for cand in (path.with_name(snapshot_stem(path) + ".json"), path.with_name("run.json")):
        if cand.is_file():
            try:
                data = json.loads(cand.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and fields_problem(data, SIDECAR_FIELDS) is None:
                return {"sidecar_path": str(cand), **data}
    return {}


def load_snapshot_dict(path: Path) -> dict:
    """The snapshot dict from a (possibly gzipped) pickle, through SafeUnpickler.

    Raises InputError for a missing file, a non-pickle, a truncated file, a
    pickle that references code, or a pickle of something other than a snapshot.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        with open(path, "rb") as raw:
            magic = raw.read(2)
            raw.seek(0)
            fh = gzip.GzipFile(fileobj=raw) if magic == b"\x1f\x8b" else raw
            data = SafeUnpickler(fh).load()
    except pickle.UnpicklingError as err:
        if "truncated" in str(err):
            raise InputError(f"{path}: truncated (the pickle ends early)") from None
        raise InputError(f"{path}: refused or unreadable pickle: {err}") from None
    except EOFError:
        raise InputError(f"{path}: truncated (the pickle or gzip stream ends early)") from None
    except (gzip.BadGzipFile, OSError, ValueError, TypeError, IndexError, KeyError, AttributeError) as err:
        raise InputError(f"{path}: not a readable snapshot pickle ({type(err).__name__}: {err})") from None
    if _is_segment_list(data):
        return _from_segment_list(data)
    if not isinstance(data, dict) or not ({"segments", "device_traces"} & set(data)):
        what = f"dict with keys {sorted(map(str, data))[:6]}" if isinstance(data, dict) else type(data).__name__
        raise InputError(
            f"{path}: not a torch.cuda.memory snapshot (a pickle of {what}; expected 'segments' and 'device_traces')"
        )
    return data


def _is_segment_list(data) -> bool:
    """The layout of ``torch.cuda.memory_snapshot()``: a non-empty list of segment dicts with blocks."""
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(s, dict) and "blocks" in s and "total_size" in s for s in data)
    )


def _from_segment_list(data: list) -> dict:
    """Layout "segment list": the segments at dump time as a snapshot dict without any trace."""
    return {"segments": data, "device_traces": [], "layout": "segment list"}


def snapshot_layout(data: dict) -> str:
    """Which layout a loaded snapshot dict has (see LAYOUTS): the reader says it in every report."""
    if data.get("layout") == "segment list":
        return "segment list"
    traces = data.get("device_traces") or []
    if not any(isinstance(e, dict) and e.get("action") in HISTORY_ACTIONS for t in traces if t for e in t):
        return "segments only"
    blocks = (b for seg in data.get("segments") or [] for b in seg.get("blocks") or [])
    first = next((e for t in traces if t for e in t), {})
    if "time_us" not in first or any("history" in b for b in blocks):
        return "legacy dict"
    return "dict"


# What each layout holds, as the report states it.
LAYOUTS = {
    "segment list": "a list of segments (torch.cuda.memory_snapshot()): the state at dump time, no allocation history",
    "segments only": "a snapshot dict without allocation history (_record_memory_history was not running, or its "
    "buffer was empty): the state at dump time only",
    "legacy dict": "an older snapshot dict (torch 1.13-2.0: frames in block history, events without times)",
    "dict": "a torch.cuda.memory._snapshot() dict with its allocation trace",
}


class _Stacks:
    """Interns frame lists into stack ids: by list identity, then by the identities of its frames, then by content.

    Ids are only compared while ``_keep`` holds the lists (and so their frames) alive.
    """

    def __init__(self):
        self.by_obj: dict[int, int] = {}
        self.by_ids: dict[tuple, int] = {}
        self.by_content: dict[tuple, int] = {}
        self.rows: list[tuple[int, str, str]] = []
        self._keep: list = []  # keeps interned lists alive so their ids stay unique

    def intern(self, frames) -> int:
        if not frames:
            return -1
        sid = self.by_obj.get(id(frames))
        if sid is not None:
            return sid
        ids = tuple(map(id, frames))  # frame dicts are shared in real pickles: cheap first-level key
        sid = self.by_ids.get(ids)
        if sid is not None:
            self.by_obj[id(frames)] = sid
            self._keep.append(frames)
            return sid
        key = tuple((str(f.get("filename", "")), int(f.get("line", 0) or 0), str(f.get("name", ""))) for f in frames)
        sid = self.by_content.get(key)
        if sid is None:
            sid = len(self.rows)
            self.by_content[key] = sid
            self.rows.append((sid, top_frame(key), "\n".join(f"{fn}:{ln} {nm}" for fn, ln, nm in key)))
        self.by_obj[id(frames)] = sid
        self.by_ids[ids] = sid
        self._keep.append(frames)
        return sid

    def intern_all(self, frame_lists: list) -> list[int]:
        """``intern`` of each list; lists seen before (most, in real snapshots) are looked up without a call."""
        out = list(map(self.by_obj.get, map(id, frame_lists)))
        for i in [i for i, sid in enumerate(out) if sid is None]:
            out[i] = self.intern(frame_lists[i])
        return out

    def frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.rows, columns=["stack_id", "top_frame", "stack"])
        return validate(df, MEMORY_STACKS)


def top_frame(frames: tuple) -> str:
    """The first user-code frame of ``(filename, line, name)`` tuples, innermost first.

    Python frames are those whose file ends in ``.py``; USER_FRAME_SKIP drops
    library ones. Without any Python frame, NATIVE_LABELS names the C++ origin.
    """
    if not frames:
        return NO_FRAMES
    for filename, line, name in frames:
        if filename.endswith(".py") and not _SKIP_RE.search(filename):
            return f"{filename.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line} {name}"
    for filename, line, name in frames:
        if filename.endswith(".py"):
            return f"{filename.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line} {name}"
    for pattern, label in _NATIVE_RE:
        for _, _, name in frames:
            m = pattern.search(name)
            if m:
                return label.format(*m.groups())
    return NATIVE_ONLY


def _column(trace: list[dict], key: str, default) -> list:
    """One key of every event: by ``itemgetter`` (C speed) when all have it, else with ``default`` where absent."""
    try:
        return list(map(itemgetter(key), trace))
    except KeyError:
        return [e.get(key, default) for e in trace]


def _events(traces: list, stacks: _Stacks) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The events table and the ``oom`` entries with the free device memory they record (OOM_COLUMNS)."""
    cols: dict[str, list] = {
        c: [] for c in ("seq", "device", "action", "addr", "size", "stream", "time_us", "stack_id")
    }
    device_free = []
    for device, trace in enumerate(traces):
        if not trace:
            continue
        if not isinstance(trace, list) or not all(isinstance(e, dict) for e in trace):
            raise InputError(f"device_traces[{device}] is not a list of event dicts")
        n = len(trace)
        cols["seq"].append(np.arange(n, dtype=np.int64))
        cols["device"].append(np.full(n, device, dtype=np.int64))
        actions = list(map(itemgetter("action"), trace))  # an event without an action is malformed
        if any(a in ACTION_NAMES for a in set(actions)):
            actions = [ACTION_NAMES.get(a, a) for a in actions]
        cols["action"] += actions
        cols["addr"] += _column(trace, "addr", -1)  # oom entries carry device_free instead
        cols["size"] += _column(trace, "size", 0)
        cols["stream"] += _column(trace, "stream", 0)
        cols["time_us"] += _column(trace, "time_us", -1)
        cols["stack_id"] += stacks.intern_all(_column(trace, "frames", None))
        if "oom" in actions:
            device_free += [(device, i, trace[i].get("device_free", -1)) for i, a in enumerate(actions) if a == "oom"]
    if not cols["seq"]:
        return empty(MEMORY_EVENTS), pd.DataFrame(columns=list(OOM_COLUMNS))
    time_us = np.asarray(cols["time_us"], dtype=np.int64)
    df = pd.DataFrame(
        {
            "seq": np.concatenate(cols["seq"]),
            "device": np.concatenate(cols["device"]),
            "action": pd.Categorical(cols["action"]),
            "addr": np.asarray(cols["addr"], dtype=np.int64),
            "size_bytes": np.asarray(cols["size"], dtype=np.int64),
            "stream": np.asarray(cols["stream"], dtype=np.int64),
            "time_ns": np.where(time_us >= 0, time_us * 1000, -1),
            "stack_id": np.asarray(cols["stack_id"], dtype=np.int64),
        }
    )
    df["top_frame"] = _top_frames(df["stack_id"].to_numpy(), stacks)
    df = validate(df, MEMORY_EVENTS)
    return df, _ooms(df, device_free)


def _ooms(events: pd.DataFrame, device_free: list[tuple[int, int, int]]) -> pd.DataFrame:
    """``oom`` entries: size is the rounded request that failed; ``device_free`` what cudaMemGetInfo reported."""
    rows = events[events["action"] == "oom"]
    free = {(d, i): int(f if f is not None else -1) for d, i, f in device_free}
    out = pd.DataFrame(
        {c: rows[c].to_numpy() for c in ("device", "seq", "size_bytes", "stream", "time_ns", "stack_id")}
    )
    out["device_free_bytes"] = [free[(d, i)] for d, i in zip(out["device"].tolist(), out["seq"].tolist(), strict=True)]
    out["top_frame"] = rows["top_frame"].astype(str).to_numpy()
    return out[list(OOM_COLUMNS)].astype({c: "int64" for c in OOM_COLUMNS if c != "top_frame"})


def _top_frames(stack_ids: np.ndarray, stacks: _Stacks) -> pd.Categorical:
    """A categorical of top frames for stack ids (-1 -> NO_FRAMES), built from codes."""
    labels = [row[1] for row in stacks.rows]
    cats = sorted(set(labels) | {NO_FRAMES})
    index = {c: i for i, c in enumerate(cats)}
    lut = np.array([index[label] for label in labels] + [index[NO_FRAMES]], dtype=np.int64)
    return pd.Categorical.from_codes(lut[stack_ids], categories=cats)


def _block_frames_legacy(b: dict) -> tuple[list, int]:
    """Old snapshots keep frames and the requested size in ``history``."""
    hist = b.get("history") or []
    if hist and isinstance(hist[0], dict):
        return hist[0].get("frames") or [], int(hist[0].get("real_size", b.get("size", 0)))
    return [], int(b.get("requested_size", b.get("size", 0)))


def _segments_and_blocks(segments: list, stacks: _Stacks) -> tuple[pd.DataFrame, pd.DataFrame]:
    seg_rows, block_rows = [], []
    for seg in segments:
        if not isinstance(seg, dict):
            raise InputError("a segment is not a dict")
        blocks = seg.get("blocks") or []
        addr = int(seg.get("address", -1))
        allocated = sum(b.get("size", 0) for b in blocks if b.get("state") == "active_allocated")
        expandable = seg.get("is_expandable")
        seg_rows.append(
            {
                "device": seg.get("device", 0),
                "address": addr,
                "total_size_bytes": seg.get("total_size", sum(b.get("size", 0) for b in blocks)),
                "allocated_size_bytes": seg.get("allocated_size", allocated),
                "active_size_bytes": seg.get("active_size", allocated),
                "requested_size_bytes": seg.get("requested_size", -1),
                "stream": seg.get("stream", 0),
                "segment_type": seg.get("segment_type", "unknown"),
                "is_expandable": -1 if expandable is None else int(bool(expandable)),
            }
        )
        offset = addr
        for b in blocks:
            frames, requested = (
                (b["frames"], b.get("requested_size", b.get("size", 0))) if "frames" in b else _block_frames_legacy(b)
            )
            state = b.get("state", "unknown")
            baddr = b.get("address", offset)
            block_rows.append(
                {
                    "device": seg.get("device", 0),
                    "segment_address": addr,
                    "address": baddr,
                    "size_bytes": b.get("size", 0),
                    "requested_size_bytes": requested,
                    "state": STATE_NAMES.get(state, state),
                    "stack_id": stacks.intern(frames),
                }
            )
            offset = baddr + b.get("size", 0)
    segs = validate(pd.DataFrame(seg_rows, columns=list(MEMORY_SEGMENTS)), MEMORY_SEGMENTS)
    blocks_df = pd.DataFrame(block_rows, columns=[c for c in MEMORY_BLOCKS if c != "top_frame"])
    blocks_df["top_frame"] = pd.Series(dtype=object)
    return segs, blocks_df


def read_memory_snapshot(path: Path | str) -> MemorySnapshot:
    """Read one snapshot pickle (``.pickle``, ``.pkl``, optionally gzipped) of any layout (LAYOUTS) into tables.

    A snapshot without allocation history still holds the segments and blocks at
    dump time; ``meta["layout"]`` says which layout it was. Raises InputError when
    the file is missing, not a pickle, truncated, references code, or is not a snapshot.
    """
    path = Path(path)
    data = load_snapshot_dict(path)
    traces = data.get("device_traces") or []
    if not isinstance(traces, list):
        raise InputError(f"{path}: device_traces is a {type(traces).__name__}, expected a list per device")
    segments = data.get("segments") or []
    if not isinstance(segments, list):
        raise InputError(f"{path}: segments is a {type(segments).__name__}, expected a list of segment dicts")
    if not any(traces) and not segments:
        raise InputError(f"{path}: an empty snapshot (no segments and no trace events on any device)")
    stacks = _Stacks()
    try:
        events, ooms = _events(traces, stacks)
        segs, blocks = _segments_and_blocks(segments, stacks)
        layout = snapshot_layout(data)
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as err:
        raise InputError(f"{path}: malformed snapshot ({type(err).__name__}: {err})") from None
    stack_df = stacks.frame()
    if len(blocks):
        blocks["top_frame"] = _top_frames(blocks["stack_id"].to_numpy(), stacks)
    blocks = validate(blocks, MEMORY_BLOCKS)
    settings = data.get("allocator_settings") if isinstance(data.get("allocator_settings"), dict) else {}
    first = next((t[0] for t in traces if t), {})
    meta = {
        "path": str(path),
        "format": "torch-memory-snapshot",
        "layout": layout,
        "file_bytes": path.stat().st_size,
        "events_per_device": {d: len(t) for d, t in enumerate(traces) if t},
        "event_keys": sorted(first),
        "has_time": "time_us" in first,
        "frames_recorded": bool((blocks["stack_id"] >= 0).any() or (events["stack_id"] >= 0).any()),
        "allocator_settings": settings,
        "expandable_segments": bool(settings.get("expandable_segments")) or bool((segs["is_expandable"] == 1).any()),
        "external_annotations": len(data.get("external_annotations") or []),
        "user_metadata": sorted(
            {str(e.get("user_metadata")) for t in traces for e in t[:1000] if e.get("user_metadata")}
        ),
        "sidecar": read_sidecar(path),
    }
    return MemorySnapshot(events=events, ooms=ooms, segments=segs, blocks=blocks, stacks=stack_df, meta=meta)
