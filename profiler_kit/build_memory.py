"""Memory snapshots -> report sections: the peak, what is live at it, and how complete the trace is.

``memory_sections`` is what ``profiler-kit report`` includes when snapshots sit
beside the traces; ``build_memory_report`` is the whole ``profiler-kit memory``
report. Every figure comes from ``analyze.memory``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyze.memory import (
    CATEGORIES,
    CATEGORY_RULES,
    NEVER,
    MemoryAnalysis,
    analyze_snapshot,
    summarize_live_by,
    timeline_by,
)
from analyze.memory_snapshot import (
    SNAPSHOT_SUFFIXES,
    USER_FRAME_SKIP,
    MemorySnapshot,
    read_memory_snapshot,
    snapshot_stem,
)
from profiler_kit.report import Figure, Report, Section, Table

# Run labels read from file names ("xl_ctx512_full_step_bf16"): field, regex on the lower-cased name, value map.
LABEL_RULES = (
    ("size", r"(?:^|[_\-.])(small|medium|large|xl|2\.7b|2_7b|2p7b)(?=$|[_\-.])", {"2_7b": "2.7B", "2p7b": "2.7B", "2.7b": "2.7B"}),
    ("ctx", r"(?:ctx|cl|context|seq|len)[_\-]?(\d+)|(?:^|[_\-.])(64|128|256|512|1024|2048|4096|8192)(?=$|[_\-.])", {}),
    ("mode", r"(?:^|[_\-.])(full[_\-]?step|train(?:ing)?|fwd[_\-]?bwd|forward[_\-]?backward|forward|fwd|backward)(?=$|[_\-.])",
     {"fwd": "forward", "train": "full_step", "training": "full_step", "fullstep": "full_step", "full-step": "full_step",
      "fwd_bwd": "forward_backward", "fwdbwd": "forward_backward", "forward-backward": "forward_backward", "backward": "forward_backward"}),
    ("precision", r"(bf16|bfloat16|fp16|float16|fp32|float32)", {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}),
)  # fmt: skip
# Sidecar keys (run.json / <stem>.json) that give the same fields, first present wins.
SIDECAR_KEYS = {
    "size": ("size", "model_size"),
    "ctx": ("ctx", "context_length", "ctx_len", "seq_len"),
    "mode": ("mode",),
    "precision": ("precision", "dtype", "autocast"),
}


def parse_run_label(name: str, sidecar: dict | None = None) -> dict:
    """Model size, context length, mode and precision from a file name, overridden by sidecar metadata."""
    low = name.lower()
    out = {}
    for fld, pattern, mapping in LABEL_RULES:
        m = re.search(pattern, low)
        if m:
            value = next(g for g in m.groups() if g)
            out[fld] = mapping.get(value, value.replace("-", "_"))
    maps = {fld: mapping for fld, _, mapping in LABEL_RULES}
    for fld, keys in SIDECAR_KEYS.items():
        for key in keys:
            if sidecar and sidecar.get(key) not in (None, ""):
                value = str(sidecar[key]).lower().removeprefix("torch.")
                out[fld] = maps[fld].get(value, value)
                break
    return out


GENERIC_STEMS = ("memory", "snapshot", "memory_snapshot")


def find_snapshots(paths: list[Path]) -> list[Path]:
    """Snapshot files among ``paths``; directories are searched recursively, sorted by path."""
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(SNAPSHOT_SUFFIXES))
        else:
            found.append(p)
    return found


def load_snapshots(paths: list[Path], skip=None) -> list[tuple[str, MemorySnapshot, dict]]:
    """Read snapshots: ``(label, snapshot, run fields)`` with the label made unique.

    ``skip(path, error)``, when given, takes each snapshot that cannot be read, which is left out.
    """
    from analyze.sources import READ_ERRORS

    out, seen = [], set()
    for path in paths:
        try:
            snap = read_memory_snapshot(path)
        except READ_ERRORS as err:
            if skip is None:
                raise
            skip(Path(path), err)
            continue
        label = snapshot_stem(Path(path))
        if label in GENERIC_STEMS:  # record --memory writes <run_id>/memory.pickle: the folder names the run
            label = Path(path).parent.name or label
        if label in seen:
            label = f"{Path(path).parent.name}/{label}"
        seen.add(label)
        out.append((label, snap, parse_run_label(label, snap.meta.get("sidecar"))))
    return out


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def _gib(n: float) -> str:
    return f"{n / 2**30:,.3f} GiB"


def _trace_text(a: MemoryAnalysis) -> list[str]:
    c = a.checks
    t0 = a.timeline["time_ns"]
    first = int(t0[t0 >= 0].min()) if (t0 >= 0).any() else -1
    when = f"at {_ms(a.peak_allocated['time_ns'] - first)} after the first event" if first >= 0 else ""
    out = [
        f"Peak allocated: {_gib(a.peak_allocated['bytes'])} ({a.peak_allocated['bytes']:,} bytes) at event "
        f"{a.peak_allocated['seq']:,} of {c['events']:,} {when}. Peak reserved: {_gib(a.peak_reserved['bytes'])} "
        f"({a.peak_reserved['bytes']:,} bytes). Reserved but not allocated at the allocated peak "
        f"(fragmentation and cache): {_gib(a.fragmentation_at_peak_bytes)}.",
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
    reserved_before = int(a.timeline["reserved_bytes"].iloc[0])
    first_action = str(a.timeline["action"].iloc[0])
    if first_action not in ("segment_alloc", "segment_map") and reserved_before > 0:
        out.append(f"{_gib(reserved_before)} was already reserved (cached segments) when the trace starts.")
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


def _meta_text(a: MemoryAnalysis, sidecar: dict) -> list[str]:
    out = []
    if sidecar.get("max_memory_allocated") is not None:
        want = int(sidecar["max_memory_allocated"])
        got = a.peak_allocated["bytes"]
        verdict = "equal" if got == want else f"differs by {got - want:+,} bytes"
        out.append(
            f"Run metadata ({Path(sidecar.get('sidecar_path', '')).name}) records max_memory_allocated = {want:,} "
            f"bytes; the replayed peak is {got:,} ({verdict})."
        )
    for key in ("parameter_bytes", "parameters_bytes", "param_bytes"):
        if sidecar.get(key) is not None:
            frames = int(a.live_at_peak.loc[a.live_at_peak["category"] == "parameters", "size_bytes"].sum())
            out.append(
                f"Run metadata gives parameters = {int(sidecar[key]):,} bytes; frames classify {frames:,} bytes live at the peak as parameters."
            )
            break
    return out


def _largest(a: MemoryAnalysis, top: int) -> pd.DataFrame:
    live = a.live_at_peak.nlargest(top, "size_bytes")
    t = a.timeline["time_ns"]
    first = t[t >= 0].min() if (t >= 0).any() else np.nan
    when = live["time_ns"].where(live["time_ns"] >= 0) - first
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


def snapshot_section(
    label: str,
    snap: MemorySnapshot,
    fields: dict,
    analyses: dict[int, MemoryAnalysis],
    top: int = 10,
    max_points: int = 3000,
) -> Section:
    """One snapshot: a sub-section per device that has trace events (``analyses`` by device)."""
    sec = Section(title=f"Memory: {label}")
    info = ", ".join(f"{k} {v}" for k, v in fields.items())
    sec.text.append(f"File {snap.meta['path']}" + (f" ({info})." if info else "."))
    devices = list(analyses)
    for dev, a in analyses.items():
        sub = sec if len(devices) == 1 else Section(title=f"cuda:{dev}")
        sub.text += _trace_text(a) + _meta_text(a, snap.meta.get("sidecar") or {})
        live = a.live_at_peak
        sub.tables += [
            Table("Live at peak by category", summarize_live_by(live, ["category", "rule"]), key=f"{label}_d{dev}_by_category",
                  note="Category from the allocation's call stack by the rules in 'Category rules'."),
            Table("Live at peak by source line", summarize_live_by(live, "top_frame", top), key=f"{label}_d{dev}_by_frame",
                  note="First user-code frame of the allocation; (autograd) X = allocated by the backward node X."),
            Table("Live at peak by size", summarize_live_by(live, "size_bytes", top).rename(columns={"size_bytes": "block_bytes"}),
                  key=f"{label}_d{dev}_by_size", note="A row with a blank size sums all smaller groups."),
            Table(f"Largest {top} allocations live at peak", _largest(a, top), key=f"{label}_d{dev}_largest"),
            Table("Segments at dump time", a.segments_summary, key=f"{label}_d{dev}_segments",
                  note="balanced: allocated + pending free + free == reserved, per pool."),
        ]  # fmt: skip
        top_frames = summarize_live_by(live, "top_frame")["top_frame"].astype(str).head(top).tolist()
        x = "time_ns" if (a.timeline["time_ns"] >= 0).all() else "event"
        by_cat = timeline_by(a.allocations, a.timeline, "category", list(CATEGORIES), max_points)
        by_frame = timeline_by(a.allocations, a.timeline, "top_frame", top_frames, max_points)
        sub.figures += [
            Figure("Allocated memory over time by category", by_cat, "area", x, "allocated_bytes", color="category", key=f"{label}_d{dev}_timeline_category"),
            Figure("Allocated memory over time by source line", by_frame, "area", x, "allocated_bytes", color="top_frame", key=f"{label}_d{dev}_timeline_frame"),
        ]  # fmt: skip
        if sub is not sec:
            sec.sections.append(sub)
    return sec


def rules_section() -> Section:
    """The rules behind categories and source lines, printed so readers can judge them."""
    cats = pd.DataFrame(CATEGORY_RULES, columns=["category", "rule", "site", "pattern"])
    skips = pd.DataFrame(USER_FRAME_SKIP, columns=["skipped_because", "filename_pattern"])
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
                Table("Frames skipped for the source line", skips, key="memory_frame_skips")],
    )  # fmt: skip


def comparison_table(snapshots: list[tuple[str, MemorySnapshot, dict]], analyses: dict) -> pd.DataFrame:
    """One row per snapshot and device: run fields and peak allocated/reserved."""
    rows = []
    for label, _, fields in snapshots:
        for dev, a in analyses[label].items():
            rows.append(
                {
                    "label": label,
                    "device": dev,
                    **{k: fields.get(k, "") for k in ("size", "ctx", "mode", "precision")},
                    "events": a.checks["events"],
                    "peak_allocated_bytes": a.peak_allocated["bytes"],
                    "peak_reserved_bytes": a.peak_reserved["bytes"],
                    "allocated_at_dump_bytes": a.checks["allocated_at_dump_bytes"],
                    "before_trace_bytes": a.checks["pre_trace_freed_bytes"] + a.checks["pre_trace_live_at_dump_bytes"],
                    "complete_trace": a.checks["complete"],
                }
            )
    return pd.DataFrame(rows)


def memory_sections(snapshots: list[tuple[str, MemorySnapshot, dict]], top: int = 10) -> list[Section]:
    """Sections for ``profiler-kit report``: the peaks (a comparison when several), one per snapshot, the rules."""
    analyses = {label: {dev: analyze_snapshot(snap, dev) for dev in snap.devices()} for label, snap, _ in snapshots}
    out = []
    if snapshots:  # one snapshot too: scripts read its peak from this table (--format csv/json)
        out.append(
            Section(
                title="Memory: comparison" if len(snapshots) > 1 else "Memory: peak",
                text=["Peaks replayed from each snapshot's trace; run fields from file names or run.json / <stem>.json beside the file."],
                tables=[Table("Peak memory per snapshot", comparison_table(snapshots, analyses), key="memory_comparison",
                              note="before_trace: bytes allocated before the first recorded event (a baseline rebuilt from segments); "
                                   "where it is not zero, earlier peaks are not visible.")],
            )
        )  # fmt: skip
    out += [snapshot_section(label, snap, fields, analyses[label], top) for label, snap, fields in snapshots]
    out.append(rules_section())
    return out


def build_memory_report(snapshots: list[tuple[str, MemorySnapshot, dict]], top: int = 10, skipped=()) -> Report:
    """The ``profiler-kit memory`` report for one or many snapshots (and the inputs ``skipped``, listed first)."""
    sections = memory_sections(snapshots, top)
    if skipped:
        from profiler_kit.build import skipped_section  # imports the trace analyses: only when needed

        sections.insert(0, skipped_section(skipped))
    return Report(
        title="GPU memory",
        text=[
            f"{len(snapshots)} torch.cuda.memory snapshot(s). Sizes in MiB unless stated; 'allocated' counts allocator blocks as torch.cuda.max_memory_allocated does."
        ],
        sections=sections,
    )
