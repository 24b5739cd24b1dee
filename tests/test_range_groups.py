"""Numbered ranges fold into one row per pattern; totals are kept, averages recomputed, members' spread shown."""

from __future__ import annotations

import pandas as pd
import pytest
from profiler_kit.analyze.range_groups import group_numbered_ranges, range_pattern


def _ranges(names, cpu, kernel_ns, gemm_frac):
    n = len(names)
    return pd.DataFrame(
        {
            "range": names,
            "instances": [2] * n,
            "cpu_total_ns": cpu,
            "cpu_avg_ns": [c / 2 for c in cpu],
            "cpu_med_ns": [c / 2 for c in cpu],
            "cpu_std_ns": [0.0] * n,
            "projected_instances": [2] * n,
            "gpu_span_total_ns": [c // 2 for c in cpu],
            "gpu_span_avg_ns": [c / 4 for c in cpu],
            "kernels": [10] * n,
            "kernel_time_ns": kernel_ns,
            "gemm_frac": gemm_frac,
        }
    )


def test_pattern_is_the_name_without_its_last_number():
    assert range_pattern("layer_12") == "layer_{n}"
    assert range_pattern("Warm-up Step 3") == "Warm-up Step {n}"
    assert range_pattern("block3.attn") == "block{n}.attn"
    assert range_pattern("fp8_layer_2_fwd") == "fp8_layer_{n}_fwd"
    assert range_pattern("forward") == "forward"


def test_layers_fold_into_one_row_with_exact_totals_and_spread():
    names = [f"layer_{i}" for i in range(48)] + ["forward", "fwd1", "fwd2"]
    cpu = [100 + i for i in range(48)] + [10_000, 5, 6]
    kern = [50] * 48 + [2_400, 1, 1]
    gemm = [0.5] * 24 + [1.0] * 24 + [0.25, 0.0, 0.0]
    out = group_numbered_ranges(_ranges(names, cpu, kern, gemm)).set_index("range")
    assert list(out.index) == ["forward", "layer_{n}", "fwd2", "fwd1"]  # two names are not a pattern
    layers = out.loc["layer_{n}"]
    assert layers["members"] == 48 and layers["instances"] == 96
    assert layers["cpu_total_ns"] == sum(cpu[:48]) and layers["kernel_time_ns"] == 48 * 50
    assert layers["cpu_avg_ns"] == pytest.approx(sum(cpu[:48]) / 96)
    assert layers["gpu_span_avg_ns"] == pytest.approx(sum(c // 2 for c in cpu[:48]) / 96)
    assert layers["gemm_frac"] == pytest.approx(0.75)  # weighted by kernel time
    assert (layers["member_cpu_min_ns"], layers["member_cpu_max_ns"]) == (100, 147)
    assert layers["member_cpu_median_ns"] == pytest.approx(123.5)
    assert out.loc["forward", "members"] == 1 and out.loc["forward", "member_cpu_max_ns"] == 10_000
    assert out["cpu_total_ns"].sum() == sum(cpu)


def test_report_shows_one_row_per_numbered_pattern():
    from profiler_kit.build import ranges_section

    names = [f"layer_{i}" for i in range(6)] + ["step"]
    ranges = _ranges(names, [100] * 6 + [1_000], [50] * 7, [1.0] * 7)
    summary = pd.DataFrame([{"kernels": 70, "launched_ops": 70}])
    empty = pd.DataFrame(columns=["range"])
    tables = {"range_groups": ranges, "range_names": ranges[["range"]], "summary": summary, "phases": empty,
              "range_group_kernels": empty}  # fmt: skip
    from profiler_kit.build import TraceResult

    sec = ranges_section(TraceResult(label="t", source="t", meta={}, tables=tables), top=10)
    table = sec.tables[0].df
    assert list(table["range"]) == ["step", "layer_{n}"] and list(table["members"]) == [1, 6]
    assert any("6 names that differ only in a number are shown as 1 row " in t for t in sec.text)


def test_kernels_of_numbered_ranges_fold_like_the_ranges():
    """The "Top kernels inside each range" rows: one set per pattern, counts and times summed, share of its time."""
    from profiler_kit.analyze.range_groups import fold_range_kernels

    names = ["layer_0", "layer_1", "layer_2", "forward"]
    ranges = _ranges(names, [10, 11, 12, 100], [40, 60, 100, 500], [0.0] * 4)
    kernels = pd.DataFrame(
        {
            "range": ["layer_0", "layer_0", "layer_1", "layer_2", "layer_2", "forward"],
            "kernel": ["gemm", "copy", "gemm", "copy", "gemm", "gemm"],
            "category": ["gemm", "memory", "gemm", "memory", "gemm", "gemm"],
            "instances": [1] * 6,
            "count": [1, 2, 1, 5, 1, 7],
            "total_ns": [30, 10, 60, 70, 30, 500],
            "share_frac": [0.75, 0.25, 1.0, 0.7, 0.3, 1.0],
        }
    )
    out = fold_range_kernels(kernels, ranges)
    assert list(out.columns) == ["range", "kernel", "category", "count", "total_ns", "share_frac"]
    layers = out[out["range"] == "layer_{n}"]
    assert layers["kernel"].tolist() == ["gemm", "copy"]  # costliest first: 120 ns against 80
    assert layers["count"].tolist() == [3, 7] and layers["total_ns"].tolist() == [120, 80]
    assert layers["share_frac"].tolist() == pytest.approx([120 / 200, 80 / 200])  # of the layers' 200 ns
    assert out[out["range"] == "forward"][["count", "total_ns"]].values.tolist() == [[7, 500]]
    unfolded = fold_range_kernels(kernels.iloc[:3], ranges.iloc[[0, 1, 3]])  # two numbered names: no pattern
    pd.testing.assert_frame_equal(unfolded, kernels.iloc[:3])


def _phases(names, instances, cpu_avg, kernel_avg):
    return pd.DataFrame(
        {
            "range": names,
            "instances": instances,
            "cpu_avg_ns": cpu_avg,
            "kernels_per_instance": [10.0] * len(names),
            "kernel_per_instance_ns": kernel_avg,
            "window_kernels_per_instance": [10.0] * len(names),
            "window_kernel_per_instance_ns": kernel_avg,
        }
    )


def test_numbered_phases_fold_with_means_weighted_by_instances():
    from profiler_kit.analyze.range_groups import fold_phase_rows

    names = ["forward", *(f"Warm-up Step {i}" for i in range(1, 6))]
    out = fold_phase_rows(_phases(names, [4, 1, 1, 1, 1, 2], [100.0, 10, 20, 30, 40, 50], [7.0, 1, 1, 1, 1, 4]))
    assert out["range"].tolist() == ["forward", "Warm-up Step {n}"] and out["members"].tolist() == [1, 5]
    warm = out.iloc[1]
    assert warm["instances"] == 6
    assert warm["cpu_avg_ns"] == pytest.approx((10 + 20 + 30 + 40 + 2 * 50) / 6)
    assert warm["kernel_per_instance_ns"] == pytest.approx((4 * 1 + 2 * 4) / 6)
    assert out.iloc[0]["cpu_avg_ns"] == 100.0


def test_report_shows_one_section_per_numbered_phase_pattern():
    """Warm-up Step 1 ... 5 flooded the report with one "Top kernels in" section each: now one for the pattern."""
    from profiler_kit.build import TraceResult, phases_section

    names = ["step", *(f"Warm-up Step {i}" for i in range(1, 6))]
    phases = _phases(names, [2, 1, 1, 1, 1, 1], [100.0] * 6, [50.0] * 6)
    cats = _ranges(names, [200] * 6, [100, 10, 20, 30, 40, 50], [0.5, 1.0, 1.0, 0.0, 0.0, 0.0])
    kernels = pd.DataFrame(
        {
            "range": names,
            "kernel": ["gemm"] * 6,
            "category": ["gemm"] * 6,
            "count": [4, 1, 1, 1, 1, 1],
            "total_ns": [50, 10, 20, 30, 40, 50],
            "share_frac": [0.5, 1.0, 1.0, 1.0, 1.0, 1.0],
        }
    )
    res = TraceResult(label="t", source="t", meta={}, tables={"phase_categories": cats, "phase_kernels": kernels})
    sec = phases_section(res, phases, top=10)
    assert [s.title for s in sec.sections] == ["Top kernels in 'step'", "Top kernels in 'Warm-up Step {n}'"]
    assert sec.tables[0].df["range"].tolist() == ["step", "Warm-up Step {n}"]
    warm = sec.sections[1].tables[0].df.iloc[0]
    assert warm["count"] == 5 and warm["total_ns"] == 150 and warm["share_frac"] == pytest.approx(1.0)
    shares = sec.tables[1].df.set_index("range")["gemm_frac"]  # weighted by kernel time: (10 + 20) / 150
    assert shares["Warm-up Step {n}"] == pytest.approx(30 / 150) and shares["step"] == 0.5
    assert any("shown as one (Warm-up Step {n})" in t for t in sec.text)


def test_members_of_numbered_ranges_expand_in_html():
    """The folded row's members: listed by number under it, folded away in the HTML (a click opens them)."""
    from profiler_kit.analyze.range_groups import numbered_members

    from profiler_kit.build import TraceResult, ranges_section
    from profiler_kit.render.html import render_html
    from profiler_kit.render.markdown import render_markdown
    from profiler_kit.report import Report

    names = ["layer_10", "layer_2", "layer_1", "step", "fwd1", "fwd2"]
    ranges = _ranges(names, [30, 20, 10, 1_000, 5, 6], [50] * 6, [1.0] * 6)
    members = numbered_members(ranges)
    assert members["range"].tolist() == ["layer_1", "layer_2", "layer_10"]
    assert members["pattern"].unique().tolist() == ["layer_{n}"] and members["cpu_total_ns"].tolist() == [10, 20, 30]
    empty = pd.DataFrame(columns=["range"])
    tables = {"range_groups": ranges, "range_names": ranges[["range"]], "summary": pd.DataFrame([{"kernels": 300, "launched_ops": 300}]),
              "phases": empty, "range_group_kernels": empty}  # fmt: skip
    sec = ranges_section(TraceResult(label="t", source="t", meta={}, tables=tables), top=10)
    detail = next(t for t in sec.tables if t.collapsed)
    assert detail.df["range"].tolist() == ["layer_1", "layer_2", "layer_10"]
    page = render_html(Report("r", sections=[sec])).decode()
    assert "<details><summary>Members of the numbered ranges (3 rows)</summary><table>" in page
    assert page.index("<details>") < page.index("<td>layer_10</td>") < page.index("</details>")
    assert "layer_10" in render_markdown(Report("r", sections=[sec]))  # markdown lists them in full
