"""Every snapshot layout torch has written, OOM entries, peaks from before the first event, labels, comparison.

Each case reproduces a snapshot seen in the wild (issue 21) and checks our figures against torch's own
``torch.cuda._memory_viz`` on the same dict where it can read it (it runs without a GPU).
"""

from __future__ import annotations

import copy
import gzip
import pickle

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from profiler_kit.analyze.memory import analyze_dump_state, analyze_snapshot, free_blocks_at
from profiler_kit.analyze.memory_snapshot import read_memory_snapshot

from profiler_kit.build_memory import build_memory_report, load_snapshots, torch_bytes
from profiler_kit.cli import cli
from profiler_kit.render.html import figure_json
from profiler_kit.render.markdown import render_markdown
from tests.conftest import FIXTURES
from tests.memory_helpers import (
    USER,
    G,
    MiB,
    event,
    known_peak_snapshot,
    oom_snapshot,
    segment,
    segments_only_snapshot,
    write,
)

LEGACY = FIXTURES / "memory" / "legacy"
mv = pytest.importorskip("torch.cuda._memory_viz")


def _raw(path):
    """A committed fixture as the dict torch's tools read (trusted test data)."""
    with gzip.open(path, "rb") as fh:
        return pickle.load(fh)


def _md(paths, labels=None, top=10) -> str:
    return render_markdown(build_memory_report(load_snapshots(paths, labels), top=top))


def _check_dump_state_against_segsum(raw: dict, snap, devices: int = 1):
    """Reserved, requested-allocated and segment counts as torch's ``_memory_viz stats`` (segsum) prints them."""
    text = mv.segsum(raw)
    states = [analyze_dump_state(snap, d) for d in range(devices)]
    reserved = sum(s.totals["reserved_bytes"] for s in states)
    requested = sum(s.totals["requested_bytes"] for s in states)
    assert f"total_reserved: {mv.Bytes(reserved)}\n" in text
    assert f"total_allocated: {mv.Bytes(requested)}\n" in text  # segsum counts requested sizes of active blocks
    assert f"segments: {sum(s.totals['segments'] for s in states)}\n" in text
    for s in states:  # per segment: allocated as torch's calc_active, largest free block from the raw blocks
        by_addr = s.segment_table.set_index("address")
        for seg in raw["segments"]:
            if seg.get("device", 0) != s.device:
                continue
            free = [b["size"] for b in seg["blocks"] if b["state"] == "inactive"]
            assert by_addr.at[seg["address"], "allocated_bytes"] == mv.calc_active(seg)
            assert by_addr.at[seg["address"], "largest_free_block_bytes"] == max(free, default=0)
    return states


def test_segments_only_snapshot_reports_state_at_dump(tmp_path):
    """Seen: "no trace events on any device (1457 segments only)" refused; the state at dump is still there."""
    raw = segments_only_snapshot(1457)
    path = write(tmp_path / "no_history.pickle", raw)
    snap = read_memory_snapshot(path)
    assert snap.meta["layout"] == "segments only" and snap.devices() == [0] and not snap.has_history(0)
    [state] = _check_dump_state_against_segsum(raw, snap)
    blocks = [b for s in raw["segments"] for b in s["blocks"]]
    assert state.totals["allocated_bytes"] == sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    assert state.totals["reserved_bytes"] - state.totals["allocated_bytes"] == state.totals["cached_unallocated_bytes"]
    md = _md([path])
    assert "No allocation history was recorded" in md and "_record_memory_history(" in md
    assert f"in {len(raw['segments']):,} segments" in md and "Largest 10 segments" in md
    assert "(no frames)" in md  # frames were not recorded either: said, not guessed
    [fig] = build_memory_report(load_snapshots([path])).figures()  # the segment view at dump
    blocks = fig.df[fig.df["category"] != "(segment)"]
    shown = fig.df[fig.df["category"] == "(segment)"]
    assert len(shown) == 40 and shown["size_bytes"].min() == 20 * MiB  # the largest first
    by_seg = state.segment_table.assign(name=[f"@{a:#x}" for a in state.segment_table["address"]])
    want = {n: v for n, v in zip(by_seg["name"], by_seg["allocated_bytes"], strict=True)}
    got = blocks.groupby(blocks["segment"].str.split(" ").str[-1])["size_bytes"].sum()
    assert got.to_dict() == {n: want[n] for n in got.index} and len(got) == 40


def test_legacy_segment_list(tmp_path):
    """Seen: a plain list of segment dicts (torch.cuda.memory_snapshot()) refused as "not a snapshot"."""
    raw = segments_only_snapshot(40, devices=2)["segments"]
    for seg in raw:  # memory_snapshot() of older torch: no frames, no expandable flag
        for b in seg["blocks"]:
            b.pop("frames")
        seg.pop("is_expandable")
    path = write(tmp_path / "list.pickle", raw)
    snap = read_memory_snapshot(path)
    assert snap.meta["layout"] == "segment list" and snap.devices() == [0, 1]
    _check_dump_state_against_segsum({"segments": raw, "traces": []}, snap, devices=2)  # as _memory_viz _read does
    res = CliRunner().invoke(cli, ["memory", str(path), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "out" / "memory.md").read_text()
    assert "a list of segments (torch.cuda.memory_snapshot())" in md and "### cuda:1 at dump time" in md


@pytest.mark.parametrize("payload", [[], [1, 2], [{"address": 1}]])
def test_lists_that_are_not_segment_lists_are_refused(tmp_path, payload):
    from profiler_kit.analyze.errors import InputError

    with pytest.raises(InputError, match="not a torch.cuda.memory snapshot"):
        read_memory_snapshot(write(tmp_path / "x.pickle", payload))


@pytest.mark.parametrize("name", ["flexgen_oom_snapshot", "flexgen_1.3b_snapshot"])
def test_real_legacy_dicts(tmp_path, name):
    """Seen: older dicts whose trace holds only a `snapshot` or a `free_completed` entry ended in a traceback."""
    path = LEGACY / f"{name}.pickle.gz"
    raw = _raw(path)
    snap = read_memory_snapshot(path)
    assert snap.meta["layout"] == ("segments only" if "oom" in name else "legacy dict")
    assert not snap.meta["has_time"] and snap.meta["frames_recorded"]  # frames come from block history
    _check_dump_state_against_segsum(raw, snap)
    md = _md([path])
    assert "Traceback" not in md
    if "oom" in name:
        # the trace's only entry is torch's `snapshot` record, whose size is the allocated total at dump
        [entry] = raw["device_traces"][0]
        assert f"Allocated at dump: {entry['size']:,} bytes" in md and "No allocation history" in md
    else:
        a = analyze_snapshot(snap)
        # the one event frees a block allocated before the trace: the peak is the level before it
        assert a.peak_allocated["before_first_event"] and a.peak_allocated["bytes"] == a.start["allocated_bytes"]
        freed = raw["device_traces"][0][0]
        assert a.peak_allocated["bytes"] - a.timeline["allocated_bytes"].iloc[-1] == -(-freed["size"] // 512) * 512
        assert "before the first of the 1 recorded events" in md and "records no times" in md


def test_older_dict_with_snapshot_and_free_completed_only(tmp_path):
    """The two-entry trace of the report: nothing allocated in the trace, no live block at dump: no traceback."""
    raw = known_peak_snapshot()
    raw["device_traces"] = [
        [
            {"action": "snapshot", "addr": 0, "size": 0, "stream": 0},
            {"action": "free_completed", "addr": 1 << 41, "size": 1000, "stream": 0},
        ]
    ]
    for seg in raw["segments"]:
        for b in seg["blocks"]:
            b["state"] = "inactive"
    for args in (["memory"], ["report"]):
        res = CliRunner().invoke(cli, [*args, str(write(tmp_path / "old.pickle", raw)), "-o", str(tmp_path / args[0])])
        assert res.exit_code == 0, res.output


def test_oom_fragmentation_first_in_report(tmp_path):
    """Seen: an `oom` entry the report said nothing of. It comes first, with torch's own numbers."""
    raw = oom_snapshot(device_free=500 * MiB)
    path = write(tmp_path / "oom.pickle", raw)
    snap = read_memory_snapshot(path)
    [oom] = analyze_snapshot(snap).ooms
    assert (oom["requested_bytes"], oom["device_free_bytes"]) == (800 * MiB, 500 * MiB)
    assert (oom["allocated_bytes"], oom["reserved_bytes"], oom["cached_free_bytes"]) == (300 * MiB, G, 724 * MiB)
    assert oom["largest_free_block_bytes"] == 600 * MiB and oom["verdict"] == "fragmentation"
    assert oom["live"]["size_bytes"].tolist() == [300 * MiB]
    line = f"raise OutOfMemoryError # {torch_bytes(800 * MiB)} requested, {torch_bytes(500 * MiB)} free in CUDA"
    assert line in mv.trace(raw)  # torch prints the same entry with the same numbers
    md = _md([path])
    assert md.index("## Out of memory: oom (cuda:0, event 5 of 6, 0.005 ms after the first event)") < md.index(
        "## Memory: oom"
    )
    assert line in md and "Fragmentation:" in md and "800.0MiB requested" in md
    assert "| model.py:385 forward" in md  # what was live, by source line


def test_oom_shortage(tmp_path):
    snap = read_memory_snapshot(write(tmp_path / "oom.pickle", oom_snapshot(device_free=50 * MiB)))
    [oom] = analyze_snapshot(snap).ooms
    assert oom["verdict"] == "shortage" and oom["short_bytes"] == 800 * MiB - 50 * MiB - 724 * MiB
    assert "Real shortage:" in _md([tmp_path / "oom.pickle"])


def test_oom_without_history_uses_the_state_at_dump(tmp_path):
    """An OOM observer that dumps with history off: the oom entry and segments only."""
    raw = oom_snapshot(device_free=50 * MiB)
    raw["device_traces"] = [[raw["device_traces"][0][-1]]]
    snap = read_memory_snapshot(write(tmp_path / "oom_only.pickle", raw))
    assert not snap.has_history(0)
    [oom] = analyze_dump_state(snap, 0).ooms
    assert (
        oom["source"] == "dump" and oom["allocated_bytes"] == 300 * MiB and oom["largest_free_block_bytes"] == 600 * MiB
    )
    md = _md([tmp_path / "oom_only.pickle"])
    assert md.index("## Out of memory") < md.index("No allocation history was recorded")


def test_free_blocks_at_replays_the_layout(tmp_path):
    """Gaps rebuilt from the replay equal the inactive blocks torch lists at dump (the dump follows the last event)."""
    raw = oom_snapshot(device_free=0)
    snap = read_memory_snapshot(write(tmp_path / "s.pickle", raw))
    a = analyze_snapshot(snap)
    gaps = free_blocks_at(a.allocations, snap.events, snap.segments, int(snap.events["seq"].max()))
    want = sorted(b["size"] for b in raw["segments"][0]["blocks"] if b["state"] == "inactive")
    assert sorted(gaps["gap_bytes"].tolist()) == want == [124 * MiB, 600 * MiB]


def test_peak_reserved_counts_the_level_before_the_first_event(tmp_path):
    """Seen: a trace that starts with segment_free of 14,680,064 bytes reported the reserved level after it."""
    raw = known_peak_snapshot()
    small = raw["device_traces"][0][2:4] + raw["device_traces"][0][6:]  # segment_alloc T, alloc T, alloc T+1024
    raw["device_traces"] = [[event("segment_free", 1 << 43, 14_680_064, 9), *small]]
    a = analyze_snapshot(read_memory_snapshot(write(tmp_path / "s.pickle", raw)))
    assert a.timeline["reserved_bytes"].tolist() == [20 * MiB, 22 * MiB, 22 * MiB, 22 * MiB]
    assert a.start["reserved_bytes"] == 20 * MiB + 14_680_064  # the 20 MiB segment S predates the trace
    assert a.peak_reserved == {
        "index": -1, "seq": -1, "time_ns": 9000, "bytes": 20 * MiB + 14_680_064, "before_first_event": True
    }  # fmt: skip
    md = _md([tmp_path / "s.pickle"])
    assert f"Peak reserved: 0.033 GiB ({20 * MiB + 14_680_064:,} bytes) before the first of the 4 recorded events" in md


def test_timeline_axis_is_in_the_unit_it_states(tmp_path):
    """Seen: "time (ms)" on an axis of nanoseconds (ticks 0.5B .. 3.5B for a peak at 3,545 ms)."""
    report = build_memory_report(load_snapshots([write(tmp_path / "k.pickle", known_peak_snapshot())]))
    fig = next(f for f in report.figures() if f.x == "time_ns")
    spec = figure_json(fig)
    assert spec["layout"]["xaxis"]["title"]["text"] == "time (ms)"
    xs = [x for trace in spec["data"] for x in trace["x"]]
    assert max(xs) == pytest.approx(fig.df["time_ns"].max() / 1e6) == pytest.approx(0.006)


def test_peak_sentence_always_has_its_time(tmp_path):
    """Seen: "at event 5,317 of 10,327 ." (the time lost when the trace records none)."""
    raw = known_peak_snapshot()
    timed = _md([write(tmp_path / "timed.pickle", raw)])
    assert "at event 3 of 7, 0.003 ms after the first event" in timed
    for e in raw["device_traces"][0]:
        e.pop("time_us")
    untimed = _md([write(tmp_path / "untimed.pickle", raw)])
    assert "at event 3 of 7 (the trace records no times" in untimed and " of 7 ." not in untimed


def test_label_option_and_metadata(tmp_path):
    a = write(tmp_path / "fp32_bf16_False_ctx128.pickle", known_peak_snapshot())
    res = CliRunner().invoke(cli, ["memory", str(a), "--label", "baseline", "-o", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "o" / "memory.md").read_text()
    assert "## Memory: baseline" in md and "fp32_bf16_False_ctx128.pickle.\n" in md  # no fields guessed
    res = CliRunner().invoke(cli, ["memory", str(a), "--label", "x", "--label", "y", "-o", str(tmp_path / "p")])
    assert res.exit_code == 2 and "2 labels given for 1 snapshots" in res.stderr


def test_comparison_per_category_and_source_line(tmp_path):
    """`memory A B`: peak deltas, then per category and per source line at each peak, largest change first."""
    base = known_peak_snapshot()
    bigger = copy.deepcopy(base)
    bigger["device_traces"][0][1]["size"] = 20 * MiB  # the 19.5 MiB request grows to 20 MiB (same block)
    extra = {"filename": "/home/u/proj/train.py", "line": 12, "name": "forward"}
    bigger["device_traces"][0].insert(4, event("alloc", (1 << 41) + 1024, 4096, 13, [extra]))
    bigger["device_traces"][0].insert(5, event("free_requested", (1 << 41) + 1024, 4096, 13, [extra]))
    bigger["device_traces"][0].insert(6, event("free_completed", (1 << 41) + 1024, 4096, 13, [extra]))
    pa = write(tmp_path / "a.pickle", base)
    pb = write(tmp_path / "b.pickle", bigger)
    report = build_memory_report(load_snapshots([pa, pb], ["A", "B"]))
    tables = {t.key: t.df for t in report.tables()}
    comp = tables["memory_comparison"].set_index("label")
    assert comp.at["B", "delta_allocated_bytes"] == 4096 and comp.at["A", "delta_allocated_bytes"] == 0
    frames = tables["memory_compare_1_top_frame"]
    assert frames.iloc[0].to_dict() == {
        "top_frame": "train.py:12 forward",
        "first_bytes": 0,
        "this_bytes": 4096,
        "delta_bytes": 4096,
    }
    cats = tables["memory_compare_1_category"].set_index("category")
    assert cats.at["activations/temporaries", "delta_bytes"] == 4096
    md = render_markdown(report)
    assert md.index("## Memory: comparison") < md.index("## Memory: A") and "B cuda:0 against A cuda:0" in md


def test_several_devices_with_history(tmp_path):
    raw = known_peak_snapshot()
    dev1 = copy.deepcopy(raw["device_traces"][0])
    raw["device_traces"].append(dev1)
    for seg in copy.deepcopy(raw["segments"]):
        raw["segments"].append({**seg, "device": 1})
    snap = read_memory_snapshot(write(tmp_path / "two.pickle", raw))
    peaks = {d: analyze_snapshot(snap, d).peak_allocated["bytes"] for d in snap.devices()}
    assert peaks == {0: 20 * MiB + 1024, 1: 20 * MiB + 1024}
    md = _md([tmp_path / "two.pickle"])
    assert "### cuda:0" in md and "### cuda:1" in md


def test_segment_helper_balances():
    seg = segment(1 << 40, [(MiB, "active_allocated", [USER]), (MiB, "inactive", [])])
    assert seg["total_size"] == 2 * MiB and mv.calc_active(seg) == MiB
    df = pd.DataFrame(seg["blocks"])
    assert np.array_equal(df["address"].diff().dropna().to_numpy(), df["size"].to_numpy()[:-1])


@pytest.mark.parametrize("max_bands", [3, 300])
def test_allocation_bands_stack_to_the_allocated_total(max_bands):
    """The allocation view is faithful: at every sampled event the stack's top is the replayed allocated total,
    the peak is sampled, and each drawn band keeps its own size from its alloc to its free."""
    from profiler_kit.analyze.memory import allocation_bands

    snap = read_memory_snapshot(FIXTURES / "memory" / "mlp_full_step_fp32.pickle.gz")
    a = analyze_snapshot(snap)
    rows, info = allocation_bands(a.allocations, a.timeline, snap.stacks, max_bands=max_bands, max_points=500)
    assert info["drawn"] == min(max_bands, len(a.allocations)) and info["summed"] == len(a.allocations) - info["drawn"]
    t = a.timeline["time_ns"].to_numpy()
    levels = {}  # events share microseconds: the level after any event at that time
    for time_ns, value in zip((t - t.min()).tolist(), a.timeline["allocated_bytes"].tolist(), strict=True):
        levels.setdefault(time_ns, set()).add(value)
    top = rows.groupby("time_ns")["top_bytes"].max()
    for time_ns, value in top.items():
        assert value in levels[time_ns]
    assert top.max() == a.peak_allocated["bytes"]
    drawn = rows[rows["band"] > 0]
    assert ((drawn["top_bytes"] - drawn["bottom_bytes"]) == drawn["size_bytes"]).all()
    assert drawn["size_bytes"].min() == info["threshold_bytes"] >= rows.loc[rows["band"] == 0, "size_bytes"].max()
    with_frames = drawn.loc[drawn["frames"] != "", "frames"]
    assert (len(with_frames) or max_bands < 10) and not with_frames.str.contains("site-packages").any()  # user frames


def test_allocation_view_in_the_html(tmp_path):
    report = build_memory_report(load_snapshots([FIXTURES / "memory" / "mlp_full_step_bf16.pickle.gz"]))
    figs = {f.kind: f for f in report.figures()}
    bands = figure_json(figs["bands"])
    assert bands["layout"]["xaxis"]["title"]["text"] == "time (ms)"
    hover = [tr["name"] for tr in bands["data"][1:]]
    assert all("size (MiB):" in h and "allocated (ms):" in h for h in hover)
    blocks = figs["blocks"]
    seg = blocks.df[blocks.df["category"] == "(segment)"].set_index("segment")["size_bytes"]
    inside = blocks.df[blocks.df["category"] != "(segment)"]
    assert (inside["offset_bytes"] >= 0).all() and (
        inside["offset_bytes"] + inside["size_bytes"] <= inside["segment"].map(seg)
    ).all()
    assert "Segments at the allocated peak" in blocks.title and "offset in segment (MiB)" in str(
        figure_json(blocks)["layout"]
    )


def test_device_with_segments_but_no_trace(tmp_path):
    """History recorded on cuda:0 only; cuda:1 has segments: its state at dump, said as such."""
    raw = known_peak_snapshot()
    raw["segments"].append(segment(1 << 45, [(4 * MiB, "active_allocated", [USER]), (16 * MiB, "inactive", [])], 1))
    raw["device_traces"].append([])
    snap = read_memory_snapshot(write(tmp_path / "mixed.pickle", raw))
    assert snap.devices() == [0, 1] and snap.has_history(0) and not snap.has_history(1)
    md = _md([tmp_path / "mixed.pickle"])
    assert "cuda:1's trace holds no allocation or free events" in md
    assert f"Allocated at dump: {4 * MiB:,} bytes" in md and "largest free block is 16,777,216 bytes" in md
