"""NVTX projection on tiny hand-built tables, case by case."""

from __future__ import annotations

import pandas as pd
from profiler_kit.analyze.breakdown import (
    phase_ranges,
    range_kernel_time,
    summarize_phases,
    summarize_range_kernels,
    summarize_ranges,
)
from profiler_kit.analyze.projection import launches, project_nvtx, range_label_codes, summarize_projection
from profiler_kit.analyze.tables import NVTX_RANGES, RUNTIME, validate


def _ranges(rows):
    cols = ["name", "start_ns", "end_ns", "tid", "end_tid", "style"]
    df = pd.DataFrame(rows, columns=cols).assign(pid=1, domain="", depth=0)
    df["duration_ns"] = df["end_ns"] - df["start_ns"]
    return validate(df, NVTX_RANGES)


def _runtime(rows):
    df = pd.DataFrame(rows, columns=["correlation_id", "start_ns", "end_ns", "tid"]).assign(
        pid=1, name="cudaLaunchKernel"
    )
    df["duration_ns"] = df["end_ns"] - df["start_ns"]
    return validate(df, RUNTIME)


def _ops(rows):
    df = pd.DataFrame(rows, columns=["correlation_id", "start_ns", "end_ns"]).assign(pid=1, device_id=0, stream_id=7)
    df["duration_ns"] = df["end_ns"] - df["start_ns"]
    df["name"] = "k"
    df["category"] = "gemm"
    df["is_kernel"] = True
    return df


RANGES = _ranges(
    [
        ("step", 0, 1000, 1, -1, "push_pop"),
        ("forward", 10, 400, 1, -1, "push_pop"),
        ("softmax", 100, 200, 1, -1, "push_pop"),
        ("backward", 500, 900, 1, -1, "push_pop"),
        ("handoff", 0, 1000, 1, 2, "start_end"),
    ]
)
RUNTIME_ROWS = _runtime(
    [
        (1, 20, 30, 1),  # in step > forward
        (2, 150, 160, 1),  # in step > forward > softmax
        (3, 195, 205, 1),  # straddles softmax's end: forward only
        (4, 600, 610, 2),  # other thread, during backward
        (5, 950, 960, 1),  # in step only
    ]
)
OPS = _ops([(1, 2000, 2100), (2, 2100, 2300), (3, 2300, 2400), (4, 2500, 2900), (5, 3000, 3050)])


def test_every_enclosing_range_counts_the_kernel():
    att = project_nvtx(RANGES, OPS, launches(OPS, RUNTIME_ROWS))
    by = att.groupby("range", observed=True)["correlation_id"].apply(set)
    assert by["step"] == {1, 2, 3, 5}
    assert by["forward"] == {1, 2, 3}
    assert by["softmax"] == {2}
    assert "backward" not in by  # its kernel was launched on another thread
    assert "handoff" not in by  # closed on another thread: not projected, as nsys


def test_projected_span_is_first_to_last_op():
    att = project_nvtx(RANGES, OPS, launches(OPS, RUNTIME_ROWS))
    proj = summarize_projection(RANGES, att).set_index("range")
    assert proj.loc["forward", "gpu_start_ns"] == 2000
    assert proj.loc["forward", "gpu_duration_ns"] == 400
    assert proj.loc["step", "gpu_duration_ns"] == 1050
    assert proj.loc["step", "kernel_time_ns"] == 100 + 200 + 100 + 50


def test_range_summary_and_window_view():
    att = project_nvtx(RANGES, OPS, launches(OPS, RUNTIME_ROWS))
    summ = summarize_ranges(RANGES, att).set_index("range")
    assert summ.loc["backward", "kernels"] == 0 and summ.loc["backward", "instances"] == 1
    launched = launches(OPS, RUNTIME_ROWS)
    sel = phase_ranges(RANGES)
    assert set(sel["name"].astype(str)) == {"step", "forward", "backward"}
    window = project_nvtx(sel, OPS, launched, any_thread=True)
    phases = summarize_phases(sel, att, window).set_index("range")
    backward = summarize_range_kernels(window).set_index("range").loc["backward"]
    assert backward["count"] == 1 and backward["total_ns"] == 400
    assert phases.loc["backward", "kernel_per_instance_ns"] == 0
    assert phases.loc["backward", "window_kernel_per_instance_ns"] == 400
    assert phases.loc["forward", "window_kernel_per_instance_ns"] == 400
    # the phases' rows of range_kernel_time (what analyze_trace passes) give the same table as a pass over the pairs
    shortcut = summarize_phases(sel, att, window, range_kernel_time(RANGES, att)).set_index("range")
    pd.testing.assert_frame_equal(shortcut, phases)


def test_layer_parts_named_like_phases_are_not_phases():
    ranges = _ranges(
        [
            ("forward", 0, 100, 1, -1, "push_pop"),
            ("feed forward", 10, 20, 1, -1, "push_pop"),
            ("FeedForward", 30, 40, 1, -1, "push_pop"),
            ("aten::mm, seq = 3, op_id = 7", 50, 60, 1, -1, "push_pop"),
            ("Optimizer.step#AdamW.step", 200, 300, 1, -1, "push_pop"),
        ]
    )
    assert list(phase_ranges(ranges)["name"].astype(str)) == ["forward", "Optimizer.step#AdamW.step"]


def test_range_kernels_group_emit_nvtx_names_and_share():
    ranges = _ranges(
        [
            ("aten::mm, seq = 1, op_id = 1", 10, 40, 1, -1, "push_pop"),
            ("aten::mm, seq = 2, op_id = 2", 140, 170, 1, -1, "push_pop"),
            ("other", 190, 300, 1, -1, "push_pop"),
        ]
    )
    ops = _ops([(1, 2000, 2100), (2, 2100, 2400), (3, 2500, 2600)])
    ops["name"] = ["gemm", "gemm", "copy"]
    att = project_nvtx(ranges, ops, launches(ops, RUNTIME_ROWS))
    raw = summarize_range_kernels(att)
    assert len(raw[raw["range"].astype(str).str.startswith("aten::mm")]) == 2  # one row per one-off name
    grouped = summarize_range_kernels(att, group_emit_nvtx=True).set_index(["range", "kernel"])
    mm = grouped.loc[("aten::mm", "gemm")]
    assert (mm["count"], mm["range_instances"], mm["total_ns"], mm["share_frac"]) == (2, 2, 400, 1.0)
    assert grouped.loc[("other", "copy"), "share_frac"] == 1.0  # launch 3 (195..205) lies inside "other"


def test_phase_rows_label_codes_are_those_computed_afresh():
    """``phase_ranges`` keeps its rows' label codes taken from all ranges' codes (analyze/frame_memo.py): the same
    codes and labels as computed from the rows alone, for a frame object of their own; a changed frame is new."""
    ranges = _ranges(
        [
            ("zeta", 0, 10, 1, -1, "push_pop"),
            ("forward", 0, 100, 1, -1, "push_pop"),
            (None, 5, 6, 1, -1, "push_pop"),
            ("backward", 100, 200, 1, -1, "push_pop"),
            ("alpha", 110, 120, 1, -1, "push_pop"),
            ("forward", 200, 300, 1, -1, "push_pop"),
        ]
    )
    phases = phase_ranges(ranges)
    assert phase_ranges(ranges) is phases  # once per frame
    kept_codes, kept_labels = range_label_codes(phases)
    fresh_codes, fresh_labels = range_label_codes(phases.copy())  # another frame: computed from its rows
    assert kept_codes.tolist() == fresh_codes.tolist() == [1, 0, 1]
    pd.testing.assert_index_equal(kept_labels, fresh_labels)
    assert list(kept_labels) == ["backward", "forward"]
    renamed = ranges.assign(name=ranges["name"].cat.rename_categories({"alpha": "optimizer"}))
    assert list(phase_ranges(renamed)["name"].astype(str)) == ["forward", "backward", "optimizer", "forward"]
