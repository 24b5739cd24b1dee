"""Memory snapshots -> report sections: the peak, what is live at it, and how complete the trace is.

``memory_sections`` is what ``profiler-kit report`` includes when snapshots sit
beside the traces; ``build_memory_report`` is the whole ``profiler-kit memory``
report. Every figure comes from ``analyze.memory``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.memory import (
    CATEGORIES,
    CATEGORY_RULES,
    NEVER,
    OOM_VERDICTS,
    DumpState,
    MemoryAnalysis,
    allocation_bands,
    analyze_dump_state,
    analyze_snapshot,
    compare_live,
    segments_view,
    segments_view_at_dump,
    summarize_live_by,
    timeline_by,
)
from profiler_kit.analyze.memory_snapshot import (
    LAYOUTS,
    RECORD_HOW,
    SNAPSHOT_SUFFIXES,
    USER_FRAME_SKIP,
    MemorySnapshot,
    read_memory_snapshot,
    snapshot_stem,
)
from profiler_kit.report import Figure, Report, Section, Table

# Run fields from the metadata beside a snapshot (run.json or <stem>.json, at its top level or under "spec"),
# never from the file name: names like "..._bf16_False_ctx128" or "forward_and_backward_..." mislead.
SIDECAR_KEYS = {
    "size": ("size", "model_size"),
    "ctx": ("ctx", "context_length", "ctx_len", "seq_len"),
    "mode": ("mode",),
    "precision": ("precision", "dtype", "autocast"),
}
PRECISION_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
RECORD_ID_KEYS = ("run_id", "label", "name")  # a sidecar's name for the run


def run_fields(sidecar: dict | None) -> dict:
    """Model size, context length, mode and precision from run metadata; {} without any."""
    out = {}
    for scope in (sidecar or {}, (sidecar or {}).get("spec") if isinstance((sidecar or {}).get("spec"), dict) else {}):
        for fld, keys in SIDECAR_KEYS.items():
            value = next((scope[k] for k in keys if scope.get(k) not in (None, "")), None)
            if value is not None and fld not in out:
                text = str(value).lower().removeprefix("torch.")
                out[fld] = PRECISION_NAMES.get(text, text) if fld == "precision" else str(value)
    return out


GENERIC_STEMS = ("memory", "snapshot", "memory_snapshot")
MAX_BANDS = 300  # allocations drawn one by one in the allocation view; smaller ones are summed
TOP_SEGMENTS = 40  # segments drawn in the segment view at the peak


def find_snapshots(paths: list[Path]) -> list[Path]:
    """Snapshot files among ``paths``; directories are searched recursively, sorted by path."""
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(SNAPSHOT_SUFFIXES))
        else:
            found.append(p)
    return found


def load_snapshots(
    paths: list[Path], labels: list[str] | None = None, skip=None
) -> list[tuple[str, MemorySnapshot, dict]]:
    """Read snapshots: ``(label, snapshot, run fields)``.

    The label is, first found: ``labels[i]`` (``--label``), the run id in the
    metadata beside the file, the file name without suffixes (for record's
    ``<run_id>/memory.pickle``, the folder's name). Labels are made unique.
    ``skip(path, error)``, when given, takes each snapshot that cannot be read, which is left out.
    """
    from profiler_kit.analyze.errors import READ_ERRORS

    if labels and len(labels) != len(paths):
        raise InputError(f"{len(labels)} labels given for {len(paths)} snapshots; give one --label per snapshot")
    out, seen = [], set()
    for i, path in enumerate(paths):
        try:
            snap = read_memory_snapshot(path)
        except READ_ERRORS as err:
            if skip is None:
                raise
            skip(Path(path), err)
            continue
        sidecar = snap.meta.get("sidecar") or {}
        label = labels[i] if labels else next((str(sidecar[k]) for k in RECORD_ID_KEYS if sidecar.get(k)), "")
        if not label:
            label = snapshot_stem(Path(path))
            if label in GENERIC_STEMS:  # record --memory writes <run_id>/memory.pickle: the folder names the run
                label = Path(path).parent.name or label
        for candidate in (label, f"{Path(path).parent.name}/{label}", f"{label} ({Path(path).name})"):
            if candidate not in seen:
                break
        label = candidate if candidate not in seen else f"{label} #{i + 1}"
        seen.add(label)
        out.append((label, snap, run_fields(sidecar)))
    return out


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def _gib(n: float) -> str:
    return f"{n / 2**30:,.3f} GiB"


def torch_bytes(n: float) -> str:
    """A size as torch's _memory_viz prints it ("4.9GiB", "91.2MiB"), so its lines can be found in ours."""
    for unit in ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"):
        if abs(n) < 1024.0:
            return f"{n:3.1f}{unit}B"
        n /= 1024.0
    return f"{n:.1f}YiB"


def _first_time(timeline: pd.DataFrame) -> int:
    t = timeline["time_ns"]
    return int(t[t >= 0].min()) if (t >= 0).any() else -1


def _when(a: MemoryAnalysis, seq: int, time_ns: int, index: int) -> str:
    """Where event ``seq`` sits, always with a time: ms after the first event, or why there is none."""
    n = a.checks["events"]
    first = _first_time(a.timeline)
    if index < 0:
        times = "" if time_ns >= 0 and first >= 0 else "; the trace records no times"
        return f"before the first of the {n:,} recorded events (the level the trace starts from{times})"
    if time_ns >= 0 and first >= 0:
        return f"at event {seq:,} of {n:,}, {_ms(time_ns - first)} after the first event"
    return f"at event {seq:,} of {n:,} (the trace records no times: torch before 2.1 wrote none)"


def _trace_text(a: MemoryAnalysis) -> list[str]:
    c = a.checks
    pa, pr = a.peak_allocated, a.peak_reserved
    out = [
        f"Peak allocated: {_gib(pa['bytes'])} ({pa['bytes']:,} bytes) {_when(a, pa['seq'], pa['time_ns'], pa['index'])}. "
        f"Peak reserved: {_gib(pr['bytes'])} ({pr['bytes']:,} bytes) {_when(a, pr['seq'], pr['time_ns'], pr['index'])}. "
        f"Reserved but not allocated at the allocated peak (fragmentation and cache): {_gib(a.fragmentation_at_peak_bytes)}.",
    ]
    before = c["pre_trace_freed_bytes"] + c["pre_trace_live_at_dump_bytes"]
    if c["complete"]:
        out.append("No block predates the first recorded event, so the replay starts from zero allocated bytes.")
    else:
        out.append(
            f"{c['pre_trace_freed_blocks'] + c['pre_trace_live_at_dump_blocks']:,} blocks ({_gib(before)}) were allocated "
            "before the first recorded event: recording started after them, or the ring buffer (max_entries) dropped "
            f"the oldest events. The replay starts from that baseline, rebuilt from the blocks still live at dump time "
            f"({c['pre_trace_live_at_dump_blocks']:,}, {_gib(c['pre_trace_live_at_dump_bytes'])}) and from frees of "
            f"addresses the trace never allocated ({c['pre_trace_freed_blocks']:,}, {_gib(c['pre_trace_freed_bytes'])}; "
            "their sizes are rounded request sizes). Levels from the first recorded event on are absolute; anything "
            "before it is not visible, so the peak is the peak of the recorded window and the run's "
            "max_memory_allocated can be higher."
        )
    if a.start["reserved_bytes"] > 0:
        out.append(
            f"{a.start['reserved_bytes']:,} bytes ({_gib(a.start['reserved_bytes'])}) were reserved (cached segments) "
            "before the first recorded event; peaks count that level too."
        )
    agree = c["allocated_at_dump_bytes"] == c["allocated_at_dump_replayed_bytes"]
    out.append(
        f"Check against the segments at dump time: allocated blocks sum to {c['allocated_at_dump_bytes']:,} bytes, "
        f"the replay ends at {c['allocated_at_dump_replayed_bytes']:,} ({'equal' if agree else 'DIFFERENT'}); "
        f"{c['live_at_end_missing_from_segments']} replayed live blocks are missing from the segments and "
        f"{c['live_at_end_size_mismatch']} have another size there."
    )
    if not c["block_sizes_exact"]:
        out.append(
            "Block sizes are approximate: the allocator settings round or split differently from the default, or "
            f"{c['large_allocs_without_segment']} large allocations lie in no known segment."
        )
    return out


def _meta_text(peak_bytes: int, live: pd.DataFrame, sidecar: dict) -> list[str]:
    out = []
    want = next(
        (sidecar[k] for k in ("max_memory_allocated", "max_memory_allocated_bytes") if sidecar.get(k) is not None), None
    )
    if want is not None:
        verdict = "equal" if peak_bytes == int(want) else f"differs by {peak_bytes - int(want):+,} bytes"
        out.append(
            f"Run metadata ({Path(sidecar.get('sidecar_path', '')).name}) records max_memory_allocated = {int(want):,} "
            f"bytes; the replayed peak is {peak_bytes:,} ({verdict})."
        )
    for key in ("parameter_bytes", "parameters_bytes", "param_bytes"):
        if sidecar.get(key) is not None:
            frames = int(live.loc[live["category"] == "parameters", "size_bytes"].sum())
            out.append(
                f"Run metadata gives parameters = {int(sidecar[key]):,} bytes; frames classify {frames:,} bytes live at the peak as parameters."
            )
            break
    return out


def _largest(live: pd.DataFrame, top: int, first_ns: int) -> pd.DataFrame:
    live = live.nlargest(top, "size_bytes")
    when = live["time_ns"].where((live["time_ns"] >= 0) & (first_ns >= 0)) - first_ns
    return pd.DataFrame(
        {
            "size_bytes": live["size_bytes"].to_numpy(),
            "requested_bytes": live["requested_bytes"].to_numpy(),
            "top_frame": live["top_frame"].astype(str).to_numpy(),
            "category": live["category"].astype(str).to_numpy(),
            "allocated_at_ns": when.to_numpy(),
            "freed": np.where(live["free_seq"].to_numpy() == NEVER, "live at dump", "later"),
            "origin": live["origin"].to_numpy(),
        }
    )


def _live_tables(live: pd.DataFrame, where: str, key: str, top: int, first_ns: int = -1) -> list[Table]:
    """The four views of what is live at one moment: by category, by source line, by size, largest."""
    by_size = summarize_live_by(live, "size_bytes", top).rename(columns={"size_bytes": "block_bytes"})
    folded = len(by_size) > top  # the rest of the sizes summed in one last row
    return [
        Table(f"Live {where} by category", summarize_live_by(live, ["category", "rule"]), key=f"{key}_by_category",
              note="Category from the allocation's call stack by the rules in 'Category rules'."),
        Table(f"Live {where} by source line", summarize_live_by(live, "top_frame", top), key=f"{key}_by_frame",
              note="First user-code frame of the allocation; (autograd) X = allocated by the backward node X."),
        Table(f"Live {where} by size", by_size, key=f"{key}_by_size",
              note=f"The last row, without a size, sums the sizes after the first {top} by total." if folded else ""),
        Table(f"Largest {top} allocations live {where}", _largest(live, top, first_ns), key=f"{key}_largest"),
    ]  # fmt: skip


def oom_section(label: str, dev: int, oom: dict, first_ns: int, events: int, top: int) -> Section:
    """One ``oom`` entry: the failed request, free memory then, what was live, and the verdict."""
    when = (
        f"{_ms(oom['time_ns'] - first_ns)} after the first event"
        if oom["time_ns"] >= 0 and first_ns >= 0
        else "no time recorded"
    )
    where = f"event {oom['seq']:,} of {events:,}, {when}"
    sec = Section(title=f"Out of memory: {label} (cuda:{dev}, {where})")
    req, free = oom["requested_bytes"], oom["device_free_bytes"]
    free_text = (
        f"{free:,} bytes ({_gib(free)}) were free on the device" if free >= 0 else "free device memory was not recorded"
    )
    sec.text.append(
        f"A request of {req:,} bytes ({_gib(req)}; from {oom['top_frame']}) failed: {free_text}. torch's "
        f"`_memory_viz trace` prints this entry as: raise OutOfMemoryError # {torch_bytes(req)} requested, "
        f"{torch_bytes(max(free, 0))} free in CUDA."
    )
    state = (
        "then (replayed from the trace)"
        if oom["source"] == "replay"
        else "at dump time (no allocation history; an OOM observer dumps right after the failure)"
    )
    sec.text.append(
        f"Allocated {state}: {oom['allocated_bytes']:,} bytes ({_gib(oom['allocated_bytes'])}); reserved: "
        f"{oom['reserved_bytes']:,} bytes ({_gib(oom['reserved_bytes'])}); reserved but not allocated: "
        f"{oom['cached_free_bytes']:,} bytes; largest free block in a segment of the request's pool: "
        f"{oom['largest_free_block_bytes']:,} bytes."
    )
    verdict = {
        "shortage": f"Real shortage: {oom['why']}; {oom['short_bytes']:,} bytes ({_gib(oom['short_bytes'])}) more were needed "
        "than the free device memory and every cached but unallocated byte together.",
        "fragmentation": f"Fragmentation: {oom['why']} ({free:,} free on the device + {oom['cached_free_bytes']:,} cached "
        f"but unallocated >= {req:,} requested). Releasing the cache cannot help; fewer, larger segments "
        "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or a different allocation order can.",
    }.get(oom["verdict"], f"{oom['verdict'].capitalize()}: {oom['why']}.")
    sec.text.append(verdict)
    live = oom["live"]
    if live is not None:
        sec.tables += _live_tables(live, "at the OOM", f"{label}_d{dev}_oom{oom['seq']}", top, first_ns)
    else:
        sec.text.append("What was live is in the state at dump time below.")
    return sec


def _no_history_text(snap: MemorySnapshot) -> str:
    layout = snap.meta.get("layout", "segments only")
    return (
        f"No allocation history was recorded: this file is {LAYOUTS.get(layout, layout)}. It shows what was "
        "allocated and reserved when it was dumped, per segment and block, but no peak over time. To record "
        f"history, {RECORD_HOW}."
    )


def dump_state_section(label: str, snap: MemorySnapshot, d: DumpState, top: int) -> Section:
    """A device without allocation history: allocated, reserved and fragmentation at dump time."""
    t = d.totals
    sec = Section(title=f"cuda:{d.device} at dump time")
    sec.text.append(
        f"Allocated at dump: {t['allocated_bytes']:,} bytes ({_gib(t['allocated_bytes'])}) in {t['blocks']:,} blocks "
        f"({t['requested_bytes']:,} bytes requested); reserved: {t['reserved_bytes']:,} bytes "
        f"({_gib(t['reserved_bytes'])}) in {t['segments']:,} segments. Reserved but not allocated: "
        f"{t['cached_unallocated_bytes']:,} bytes ({t['free_bytes']:,} in free blocks, {t['pending_free_bytes']:,} "
        f"freed but awaiting stream uses); the largest free block is {t['largest_free_block_bytes']:,} bytes, the "
        "largest request the cache could have served without a new cudaMalloc."
    )
    if t["blocks_with_frames"] == 0 and t["blocks"]:
        sec.text.append(
            "No block carries frames (recorded with history off), so categories and source lines are unknown: "
            "every block shows as (no frames)."
        )
    key = f"{label}_d{d.device}_dump"
    sec.tables += _live_tables(d.live, "at dump", key, top)
    sec.tables += _segment_tables(d.segments_summary, d.segment_table.head(top), key, f"Largest {top} segments",
                                  "the largest request the segment could serve; reserved - allocated is what the cache "
                                  "holds unused.")  # fmt: skip
    rows, info = segments_view_at_dump(snap.on_device(d.device).segments, d.live, TOP_SEGMENTS)
    sec.figures.append(segment_figure("at dump time", rows, info, f"{key}_segments_at_dump"))
    return sec


def _segment_tables(summary: pd.DataFrame, largest: pd.DataFrame, key: str, title: str, free_note: str) -> list[Table]:
    """The segments at dump time: per pool (balanced or not), and the largest ones (``free_note``: what their
    largest free block means here)."""
    return [
        Table("Segments at dump time", summary, key=f"{key}_segments",
              note="balanced: allocated + pending free + free == reserved, per pool."),
        Table(title, largest, key=f"{key}_segment_table", note=f"largest free block: {free_note}"),
    ]  # fmt: skip


def trace_section(
    label: str,
    snap: MemorySnapshot,
    a: MemoryAnalysis,
    top: int,
    max_points: int,
    max_bands: int = MAX_BANDS,
    top_segments: int = TOP_SEGMENTS,
) -> Section:
    """A device with allocation history: the peak, what is live at it, segments, the timeline."""
    sub = Section(title=f"cuda:{a.device}")
    sub.text += _trace_text(a) + _meta_text(a.peak_allocated["bytes"], a.live_at_peak, snap.meta.get("sidecar") or {})
    live = a.live_at_peak
    key = f"{label}_d{a.device}"
    sub.tables += _live_tables(live, "at peak", key, top, _first_time(a.timeline))
    sub.tables += _segment_tables(a.segments_summary, a.segment_table.head(top), key,
                                  f"Largest {top} segments at dump time",
                                  "the largest request the segment could serve without a new cudaMalloc.")  # fmt: skip
    top_frames = summarize_live_by(live, "top_frame")["top_frame"].astype(str).head(top).tolist()
    x = "time_ns" if (a.timeline["time_ns"] >= 0).all() else "event"
    by_cat = timeline_by(a.allocations, a.timeline, "category", list(CATEGORIES), max_points)
    by_frame = timeline_by(a.allocations, a.timeline, "top_frame", top_frames, max_points)
    sub.figures += [
        Figure("Allocated memory over time by category", by_cat, "area", x, "allocated_bytes", color="category", key=f"{key}_timeline_category"),
        Figure("Allocated memory over time by source line", by_frame, "area", x, "allocated_bytes", color="top_frame", key=f"{key}_timeline_frame"),
    ]  # fmt: skip
    sub.figures += allocation_figures(snap, a, key, max_bands, max_points, top_segments)
    return sub


def allocation_figures(
    snap: MemorySnapshot, a: MemoryAnalysis, key: str, max_bands: int, max_points: int, top_segments: int
) -> list[Figure]:
    """The allocation view: every large allocation as a band over time (hover: size, frames, alloc and free
    time), and the segments at the allocated peak with the blocks live in them."""
    bands, info = allocation_bands(a.allocations, a.timeline, snap.stacks, max_bands, max_points)
    x = "time_ns" if info["has_time"] else "event"
    bands = bands.rename(columns={"time_ns": x})
    when = "time" if info["has_time"] else "event"
    one = snap.on_device(a.device)
    seg_rows, seg = segments_view(a.allocations, one.events, one.segments, a.peak_allocated["seq"], top_segments)
    return [
        Figure(
            f"Allocations over {when}: the {info['drawn']:,} largest one by one (each at least "
            f"{info['threshold_bytes'] / 2**20:,.2f} MiB), the other {info['summed']:,} summed exactly in the grey band; "
            f"{info['points']:,} sampled events, the peak and every drawn alloc and free among them (hover a band)",
            bands, "bands", x, "top_bytes", color="band", key=f"{key}_allocations",
        ),
        segment_figure("at the allocated peak", seg_rows, seg, f"{key}_segments_at_peak"),
    ]  # fmt: skip


def segment_figure(when: str, rows: pd.DataFrame, info: dict, key: str) -> Figure:
    """The segment chart (``segment_rows``): the largest segments with the blocks live in them."""
    return Figure(
        f"Segments {when}: the {info['shown']:,} largest of {info['segments']:,} ({info['shown_bytes'] / 2**20:,.1f} "
        f"of {info['reserved_bytes'] / 2**20:,.1f} MiB reserved), blocks live then (grey: the segment; gaps are free)",
        rows, "blocks", "size_bytes", "segment", color="category", key=key,
    )  # fmt: skip


def analyze_all(snap: MemorySnapshot) -> dict[int, MemoryAnalysis | DumpState]:
    """Per device: the replay where the trace holds history, else the state at dump time."""
    return {
        dev: analyze_snapshot(snap, dev) if snap.has_history(dev) else analyze_dump_state(snap, dev)
        for dev in snap.devices()
    }


def snapshot_section(
    label: str,
    snap: MemorySnapshot,
    fields: dict,
    analyses: dict[int, MemoryAnalysis | DumpState],
    top: int = 10,
    max_points: int = 3000,
) -> Section:
    """One snapshot: a sub-section per device (replay where there is history, dump state otherwise)."""
    sec = Section(title=f"Memory: {label}")
    info = ", ".join(f"{k} {v}" for k, v in fields.items())
    sec.text.append(f"File {snap.meta['path']}" + (f" ({info}, from run metadata)." if info else "."))
    layout = snap.meta.get("layout", "dict")
    if layout in ("segment list", "segments only"):
        sec.text.append(_no_history_text(snap))
    elif layout == "legacy dict":
        sec.text.append(f"Layout: {LAYOUTS[layout]}.")
    for dev, a in analyses.items():
        if isinstance(a, DumpState):
            sub = dump_state_section(label, snap, a, top)
            if layout not in ("segment list", "segments only"):
                sub.text.insert(
                    0,
                    f"cuda:{dev}'s trace holds no allocation or free events (recording ran on other devices, or its "
                    "buffer was empty): what follows is the state at dump time only.",
                )
        else:
            sub = trace_section(label, snap, a, top, max_points)
        if len(analyses) == 1 and not isinstance(a, DumpState):
            sec.text += sub.text
            sec.tables += sub.tables
            sec.figures += sub.figures
        else:
            sec.sections.append(sub)
    return sec


def rules_section() -> Section:
    """The rules behind categories and source lines, printed so readers can judge them."""
    cats = pd.DataFrame(CATEGORY_RULES, columns=["category", "rule", "site", "pattern"])
    skips = pd.DataFrame(USER_FRAME_SKIP, columns=["skipped_because", "filename_pattern"])
    verdicts = pd.DataFrame([(v, why) for v, _, why in OOM_VERDICTS], columns=["verdict", "meaning"])
    return Section(
        title="Category rules",
        text=[
            "Each allocation's call stack (every frame 'file:line function', C++ frames included when recorded) is "
            "matched against these regular expressions; the first match gives its category. Activations and "
            "temporaries cannot be told apart from frames alone, so they share a category.",
            "The source line is the first Python frame whose file is not skipped below; stacks without one are named "
            "after the autograd node (backward runs on autograd's C++ threads).",
        ],
        tables=[Table("Category rules (first match wins)", cats, key="memory_category_rules"),
                Table("Frames skipped for the source line", skips, key="memory_frame_skips"),
                Table("Out-of-memory verdicts (first that holds)", verdicts, key="memory_oom_verdicts",
                      note="free block fit: largest free block >= request; device had room: device free >= request; "
                           "fragmentation: device free + reserved-but-unallocated >= request; shortage: otherwise.")],
    )  # fmt: skip


def _peak_view(a: MemoryAnalysis | DumpState) -> tuple[int, int, pd.DataFrame, str]:
    """Peak allocated, peak reserved, what is live at the allocated peak, and where those come from."""
    if isinstance(a, DumpState):
        return a.totals["allocated_bytes"], a.totals["reserved_bytes"], a.live, "dump (no history)"
    return a.peak_allocated["bytes"], a.peak_reserved["bytes"], a.live_at_peak, "replayed peak"


def comparison_table(snapshots: list[tuple[str, MemorySnapshot, dict]], analyses: dict) -> pd.DataFrame:
    """One row per snapshot and device: run fields, peak allocated/reserved and their change from the first row."""
    rows = []
    for label, _, fields in snapshots:
        for dev, a in analyses[label].items():
            alloc, reserved, _, source = _peak_view(a)
            hist = not isinstance(a, DumpState)
            rows.append(
                {
                    "label": label,
                    "device": dev,
                    **{k: fields.get(k, "") for k in ("size", "ctx", "mode", "precision")},
                    "source": source,
                    "events": a.checks["events"] if hist else 0,
                    "peak_allocated_bytes": alloc,
                    "peak_reserved_bytes": reserved,
                    "allocated_at_dump_bytes": a.checks["allocated_at_dump_bytes"] if hist else alloc,
                    "before_trace_bytes": a.checks["pre_trace_freed_bytes"] + a.checks["pre_trace_live_at_dump_bytes"]
                    if hist
                    else -1,
                    "complete_trace": a.checks["complete"] if hist else False,
                    "ooms": len(a.ooms),
                }
            )
    out = pd.DataFrame(rows)
    out.insert(
        out.columns.get_loc("peak_reserved_bytes"),
        "delta_allocated_bytes",
        out["peak_allocated_bytes"] - out["peak_allocated_bytes"].iloc[0],
    )
    out.insert(
        out.columns.get_loc("allocated_at_dump_bytes"),
        "delta_reserved_bytes",
        out["peak_reserved_bytes"] - out["peak_reserved_bytes"].iloc[0],
    )
    return out


def comparison_section(snapshots: list[tuple[str, MemorySnapshot, dict]], analyses: dict, top: int) -> Section:
    """Peaks of every snapshot against the first, and per category and source line what changed at the peaks."""
    views = [(f"{label} cuda:{dev}", a) for label, _, _ in snapshots for dev, a in analyses[label].items()]
    base_name, base = views[0]
    sec = Section(
        title="Memory: comparison" if len(views) > 1 else "Memory: peak",
        text=[
            f"Each snapshot against the first ({base_name}): peaks replayed from each trace (the state at dump where "
            "no history was recorded); run fields from run.json / <stem>.json beside the file or --label.",
        ],
        tables=[Table("Peak memory per snapshot", comparison_table(snapshots, analyses), key="memory_comparison",
                      note="delta: against the first row. before_trace: bytes allocated before the first recorded event "
                           "(a baseline rebuilt from segments; -1 without history); where it is not zero, earlier peaks are not visible.")],
    )  # fmt: skip
    _, _, base_live, _ = _peak_view(base)
    for i, (name, a) in enumerate(views[1:], 1):
        alloc, reserved, live, _ = _peak_view(a)
        b_alloc, b_reserved, _, _ = _peak_view(base)
        sub = Section(title=f"{name} against {base_name}")
        sub.text.append(
            f"Peak allocated {alloc:,} bytes against {b_alloc:,} ({alloc - b_alloc:+,}, {_gib(alloc - b_alloc)}); "
            f"peak reserved {reserved:,} against {b_reserved:,} ({reserved - b_reserved:+,}). Tables: bytes live at each "
            "peak, largest change first."
        )
        for key, title in (("category", "category"), ("top_frame", "source line")):
            diff = compare_live(base_live, live, key).rename(
                columns={"base_bytes": "first_bytes", "other_bytes": "this_bytes"}
            )
            sub.tables.append(Table(f"Live at peak by {title}: change", diff.head(top * 2 if key == "top_frame" else None),
                                    key=f"memory_compare_{i}_{key}"))  # fmt: skip
        sec.sections.append(sub)
    return sec


def memory_sections(snapshots: list[tuple[str, MemorySnapshot, dict]], top: int = 10) -> list[Section]:
    """Sections for ``profiler-kit report``: OOMs first, a comparison (when several), one per snapshot, the rules."""
    analyses = {label: analyze_all(snap) for label, snap, _ in snapshots}
    out = []
    for label, _, _ in snapshots:
        for dev, a in analyses[label].items():
            first = _first_time(a.timeline) if isinstance(a, MemoryAnalysis) else -1
            events = a.checks["events"] if isinstance(a, MemoryAnalysis) else 0
            out += [oom_section(label, dev, oom, first, events, top) for oom in a.ooms]
    if snapshots:  # one snapshot too: scripts read its peak from this table (--format csv/json)
        out.append(comparison_section(snapshots, analyses, top))
    out += [snapshot_section(label, snap, fields, analyses[label], top) for label, snap, fields in snapshots]
    out.append(rules_section())
    return out


def build_memory_report(snapshots: list[tuple[str, MemorySnapshot, dict]], top: int = 10, skipped=()) -> Report:
    """The ``profiler-kit memory`` report for one or many snapshots (and the inputs ``skipped``, listed first)."""
    n_oom = sum(len(snap.ooms) for _, snap, _ in snapshots)
    text = [
        f"{len(snapshots)} torch.cuda.memory snapshot(s). Sizes in MiB unless stated; 'allocated' counts allocator blocks as torch.cuda.max_memory_allocated does."
    ]
    if n_oom:
        text.append(f"{n_oom} out-of-memory event(s) recorded: explained first.")
    sections = memory_sections(snapshots, top)
    if skipped:
        from profiler_kit.build import skipped_section  # imports the trace analyses: only when needed

        sections.insert(0, skipped_section(skipped))
    return Report(title="GPU memory", text=text, sections=sections)
