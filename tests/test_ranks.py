"""Cross-rank analyses: interval arithmetic against brute force, hand-built tables, real multi-rank captures."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from profiler_kit.analyze.intervals import intersection_length, interval_union, union_length
from profiler_kit.analyze.ranks import (
    compare_variants,
    concat_ranks,
    ddp_scaling,
    rank_of_pid,
    slowest_rank_per_step,
    step_ranges,
    summarize_ddp_steps,
    summarize_rank_time,
    summarize_steps,
)

from tests.conftest import FIXTURES, ROOT, SHARED_DATA, requires_nsys

DDP_SQLITE = SHARED_DATA / "nsys_sqlite" / "lizhieffe__assignment2-systems__ddp53_profile.sqlite"
XL_TRACES = ROOT / "reports" / "ddp" / "trace_xl"


def kernels(rows, pid=1, device=0):
    """Tiny kernel table: rows of (start, end, category)."""
    df = pd.DataFrame(rows, columns=["start_ns", "end_ns", "category"])
    return df.assign(duration_ns=df.end_ns - df.start_ns, pid=pid, device_id=device, name="k")


def covered(intervals, n):
    """Brute-force reference: a boolean per nanosecond."""
    mask = np.zeros(n, dtype=bool)
    for s, e in intervals:
        mask[s:e] = True
    return mask


def test_union_and_intersection_match_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(0, 30))
        a_s = rng.integers(0, 500, n)
        a_e = a_s + rng.integers(0, 60, n)
        m = int(rng.integers(0, 30))
        b_s = rng.integers(0, 500, m)
        b_e = b_s + rng.integers(0, 60, m)
        ma, mb = covered(zip(a_s, a_e, strict=True), 600), covered(zip(b_s, b_e, strict=True), 600)
        assert union_length(a_s, a_e) == ma.sum()
        assert intersection_length(a_s, a_e, b_s, b_e) == (ma & mb).sum()
        us, ue = interval_union(a_s, a_e)
        assert np.all(us[1:] > ue[:-1])  # disjoint, sorted, touching ones merged


def test_summarize_rank_time_by_hand():
    # rank 0: compute 0-100, comm 50-150 (half hidden), idle 150-200, compute 200-250
    r0 = kernels([(0, 100, "gemm"), (50, 150, "communication"), (200, 250, "elementwise")], pid=7, device=0)
    # rank 1 (lower pid but higher GPU: ranks follow the GPU): comm only, two overlapping comm kernels
    r1 = kernels([(0, 40, "communication"), (20, 60, "communication")], pid=3, device=1)
    out = summarize_rank_time(pd.concat([r0, r1])).set_index("rank")
    assert out.loc[0, "pid"] == 7 and out.loc[1, "pid"] == 3
    assert out.loc[0, ["span_ns", "busy_ns", "idle_ns", "comm_ns", "compute_ns"]].tolist() == [250, 200, 50, 100, 150]
    assert out.loc[0, "overlap_ns"] == 50 and out.loc[0, "exposed_comm_ns"] == 50
    assert out.loc[0, "comm_hidden_frac"] == pytest.approx(0.5)
    assert out.loc[1, "comm_kernel_sum_ns"] == 80 and out.loc[1, "comm_ns"] == 60
    assert out.loc[1, "compute_ns"] == 0 and out.loc[1, "comm_hidden_frac"] == 0


def test_concat_ranks_uses_list_order():
    k = concat_ranks([kernels([(0, 10, "gemm")], pid=9), kernels([(0, 20, "communication")], pid=2)])
    out = summarize_rank_time(k).set_index("rank")
    assert out.loc[0, "pid"] == 9 and out.loc[1, "comm_ns"] == 20


def test_steps_and_slowest_rank():
    k = pd.concat(
        [
            kernels(
                [(0, 60, "gemm"), (60, 100, "communication"), (100, 150, "gemm"), (150, 190, "communication")], 1, 0
            ),
            kernels(
                [(0, 80, "gemm"), (70, 100, "communication"), (100, 170, "gemm"), (160, 190, "communication")], 2, 1
            ),
        ]
    )
    nvtx = pd.DataFrame(
        {
            "name": ["step", "step", "forward", "step", "step"],
            "pid": [1, 1, 1, 2, 2],
            "start_ns": [0, 100, 0, 0, 100],
            "end_ns": [100, 200, 50, 110, 200],
        }
    ).assign(duration_ns=lambda d: d.end_ns - d.start_ns)
    steps = step_ranges(nvtx, k)
    assert steps[["rank", "step", "duration_ns"]].values.tolist() == [
        [0, 0, 100],
        [0, 1, 100],
        [1, 0, 110],
        [1, 1, 100],
    ]
    slow = slowest_rank_per_step(steps).set_index("step")
    assert slow.loc[0, "slowest_rank"] == 1 and slow.loc[0, "spread_ns"] == 10
    assert slow.loc[1, "slowest_rank"] == 0  # tie goes to the lower rank
    per = summarize_steps(k, steps).set_index(["rank", "step"])
    assert per.loc[(0, 0), "comm_ns"] == 40 and per.loc[(0, 0), "exposed_comm_ns"] == 40
    assert per.loc[(1, 0), "overlap_ns"] == 10 and per.loc[(1, 1), "overlap_ns"] == 10
    assert per.loc[(0, 1), "idle_ns"] == 10  # 190-200 inside the step range, no kernel
    table = compare_variants({"a": summarize_steps(k, steps)}).set_index("variant")
    assert table.loc["a", "step_ns"] == 105  # median of per-step slowest (110, 100)
    assert table.loc["a", "comm_ns"] == 35 and table.loc["a", "comm_hidden_frac"] == pytest.approx(20 / 140)


def _sql_kernels(path: Path) -> pd.DataFrame:
    """The export's kernels read with plain SQL, classified by name prefix (independent of the project's reader)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        df = pd.read_sql_query(
            "SELECT k.start AS start_ns, k.end AS end_ns, k.deviceId AS device_id, k.globalPid AS gpid, s.value AS name "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName",
            con,
        )
    return df.assign(
        duration_ns=df.end_ns - df.start_ns,
        pid=(df.gpid.to_numpy(dtype="int64") >> 24) & 0xFFFFFF,
        category=np.where(df.name.str.startswith("nccl"), "communication", "compute"),
    )


def _sql_nccl_totals(path: Path) -> dict[int, tuple[int, int]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        rows = con.execute(
            "SELECT k.deviceId, COUNT(*), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'nccl%' GROUP BY k.deviceId"
        ).fetchall()
    return {dev: (n, total) for dev, n, total in rows}


needs_ddp_export = pytest.mark.skipif(not DDP_SQLITE.exists(), reason="../shared/data DDP export absent")


@needs_ddp_export
def test_nccl_totals_per_rank_match_sql_group_by():
    want = _sql_nccl_totals(DDP_SQLITE)
    assert len(want) == 2
    out = summarize_rank_time(_sql_kernels(DDP_SQLITE)).set_index("device_id")
    for dev, (n, total) in want.items():
        assert out.loc[dev, "comm_kernels"] == n
        assert out.loc[dev, "comm_kernel_sum_ns"] == total
        assert out.loc[dev, "comm_ns"] <= total
        assert 0 <= out.loc[dev, "overlap_ns"] <= min(out.loc[dev, "comm_ns"], out.loc[dev, "compute_ns"])
        assert out.loc[dev, "busy_ns"] + out.loc[dev, "idle_ns"] == out.loc[dev, "span_ns"]


@needs_ddp_export
def test_through_project_reader_and_taxonomy():
    reader = pytest.importorskip("profiler_kit.analyze.nsys_sqlite")
    taxonomy = pytest.importorskip("profiler_kit.analyze.taxonomy")
    trace = reader.read_nsys_sqlite(DDP_SQLITE)
    k = taxonomy.classify_kernels(trace.kernels)
    out = summarize_rank_time(k).set_index("device_id")
    for dev, (n, total) in _sql_nccl_totals(DDP_SQLITE).items():
        assert out.loc[dev, "comm_kernels"] == n
        assert out.loc[dev, "comm_kernel_sum_ns"] == total
    assert sorted(rank_of_pid(k).values()) == [0, 1]


def _check_against_nsys_reference(ref: pd.DataFrame) -> None:
    out = summarize_rank_time(_sql_kernels(DDP_SQLITE)).set_index("device_id")
    assert len(ref) == 2
    for r in ref.itertuples(index=False):
        assert out.loc[r.device_id, "comm_kernels"] == r.nccl_kernels
        assert out.loc[r.device_id, "comm_kernel_sum_ns"] == r.nccl_total_ns


@needs_ddp_export
def test_nccl_totals_per_rank_match_committed_nsys_stats():
    _check_against_nsys_reference(pd.read_csv(FIXTURES / "ddp" / "ref_nccl_per_device.csv"))


@needs_ddp_export
@requires_nsys
def test_nccl_totals_per_rank_match_nsys_stats_now():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_ref", FIXTURES / "ddp" / "make_ref.py")
    make_ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_ref)
    _check_against_nsys_reference(pd.DataFrame(make_ref.nccl_per_device(DDP_SQLITE)))


def _kineto_nccl_ns(path: Path) -> tuple[int, int]:
    """Count and total duration (ns, rounded per kernel as the reader does) of NCCL kernels, from the raw JSON."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    durs = [e["dur"] for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
    return len(durs), durs


@pytest.mark.skipif(not (XL_TRACES / "bucketed25mb_rank0.json.gz").exists(), reason="xl DDP traces absent")
def test_kineto_xl_traces_per_rank():
    kineto = pytest.importorskip("profiler_kit.analyze.kineto")
    taxonomy = pytest.importorskip("profiler_kit.analyze.taxonomy")
    paths = [XL_TRACES / f"bucketed25mb_rank{r}.json.gz" for r in range(2)]
    traces = [kineto.read_kineto(p) for p in paths]
    k = concat_ranks([taxonomy.classify_kernels(t.kernels) for t in traces])
    out = summarize_rank_time(k).set_index("rank")
    for r, p in enumerate(paths):
        n, durs = _kineto_nccl_ns(p)
        assert out.loc[r, "comm_kernels"] == n
        assert abs(out.loc[r, "comm_kernel_sum_ns"] - sum(durs) * 1000) <= n  # us floats -> int ns, 1 ns each
    assert (out["comm_hidden_frac"] > 0).all()  # bucketed DDP overlaps all-reduce with backward


def test_ddp_report_cli_bad_folder(tmp_path):
    from click.testing import CliRunner

    from profiler_kit.cli import cli

    res = CliRunner().invoke(cli, ["ddp-report", str(tmp_path)])
    assert res.exit_code == 2 and "no allreduce_" in res.output
    (tmp_path / "allreduce_x.jsonl").write_text('{"backend": "gloo"\n')
    res = CliRunner().invoke(cli, ["ddp-report", str(tmp_path)])
    assert res.exit_code == 2 and "not JSON" in res.output
    ar = {
        "backend": "gloo",
        "world_size": 2,
        "size_bytes": "1 MiB",
        "time_s_median": 0.002,
        "iters": 3,
        "device": "cpu",
    }
    (tmp_path / "allreduce_x.jsonl").write_text(json.dumps(ar) + "\n")
    res = CliRunner().invoke(cli, ["ddp-report", str(tmp_path)])
    assert res.exit_code == 2 and "allreduce_x.jsonl:1: no algbw_bytes_per_s, busbw_bytes_per_s" in res.output
    ar |= {"algbw_bytes_per_s": 1e9, "busbw_bytes_per_s": 1e9}
    (tmp_path / "allreduce_x.jsonl").write_text(json.dumps(ar) + "\n")
    res = CliRunner().invoke(cli, ["ddp-report", str(tmp_path)])
    assert res.exit_code == 2 and "size_bytes should be an integer, found '1 MiB'" in res.output


def test_ddp_report_from_jsonl(tmp_path):
    from click.testing import CliRunner

    from profiler_kit.cli import cli

    ar = {"backend": "gloo", "world_size": 4, "size_bytes": 2**20, "time_s_median": 0.002, "iters": 3, "device": "cpu"}
    ar |= {"algbw_bytes_per_s": 2**20 / 0.002, "busbw_bytes_per_s": 1.5 * 2**20 / 0.002}
    (tmp_path / "allreduce_gloo.jsonl").write_text(json.dumps(ar) + "\n")
    base = {"world_size": 2, "size": "xl", "ctx": 128, "batch_per_rank": 4, "backend": "nccl", "device": "H200"}
    base |= {"warmup": 3, "steps": 3}
    rows = [
        base | {"label": "torch25mb", "variant": "torch", "bucket_mb": 25.0, "step_s": [0.10, 0.12, 0.11]},
        base | {"label": "bucketed25mb", "variant": "bucketed", "bucket_mb": 25.0, "step_s": [0.104, 0.105, 0.2]},
        base | {"label": "naive", "variant": "naive", "bucket_mb": None, "step_s": [0.2, 0.2, 0.2]},
    ]
    (tmp_path / "ddp_xl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = CliRunner().invoke(cli, ["ddp-report", str(tmp_path), "-o", str(tmp_path / "out"), "--no-html"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "out" / "report.md").read_text()
    assert (
        "bucketed25mb (2 ranks): median step 105.0 ms vs torch DDP (25 MiB buckets) 110.0 ms: -4.5%, within 5%." in md
    )
    assert "| gloo      |            4 |" in md
    res = CliRunner().invoke(cli, ["ddp-report", str(tmp_path), "-o", str(tmp_path / "csv"), "--format", "csv"])
    steps = pd.read_csv(next((tmp_path / "csv").glob("*step_time*.csv"))).set_index("label")
    assert steps.loc["naive", "vs_torch_ddp_frac"] == pytest.approx(0.2 / 0.11 - 1)
    assert steps.loc["naive", "step_ns"] == 200_000_000


def test_ddp_steps_compare_within_launch_and_scaling():
    base = {"size": "xl", "ctx": 128, "batch_per_rank": 4, "backend": "nccl", "device": "H200", "gpus_on_host": 4}
    rows = pd.DataFrame(
        [
            base
            | {
                "launch": "a",
                "world_size": 2,
                "label": "torch25mb",
                "variant": "torch",
                "bucket_mb": 25.0,
                "step_s": [0.10, 0.10, 0.10],
            },
            base
            | {
                "launch": "a",
                "world_size": 2,
                "label": "naive",
                "variant": "naive",
                "bucket_mb": None,
                "step_s": [0.15, 0.15, 0.15],
            },
            base
            | {
                "launch": "b",
                "world_size": 4,
                "label": "torch25mb",
                "variant": "torch",
                "bucket_mb": 25.0,
                "step_s": [0.125, 0.125, 0.125],
            },
            base
            | {
                "launch": "b",
                "world_size": 4,
                "label": "naive",
                "variant": "naive",
                "bucket_mb": None,
                "step_s": [0.25, 0.25, 0.25],
            },
            # an older row (no launch, other host): compared with nothing of launch a or b
            base
            | {
                "launch": None,
                "gpus_on_host": None,
                "world_size": 2,
                "label": "naive",
                "variant": "naive",
                "bucket_mb": None,
                "step_s": [0.3, 0.3, 0.3],
            },
        ]
    )
    s = summarize_ddp_steps(rows)
    assert s["torch_ddp_ns"].tolist()[:4] == [100_000_000, 100_000_000, 125_000_000, 125_000_000]
    assert s.loc[3, "vs_torch_ddp_frac"] == pytest.approx(1.0)
    assert pd.isna(s.loc[4, "torch_ddp_ns"]) and np.isnan(s.loc[4, "vs_torch_ddp_frac"])
    sc = ddp_scaling(s).set_index("label")
    assert sc.loc["naive", "step_n2_ns"] == 150_000_000  # the host-less 0.3 s row is not pooled in
    assert sc.loc["naive", "efficiency_n4_frac"] == pytest.approx(0.6)
    assert sc.loc["torch25mb", "efficiency_n4_frac"] == pytest.approx(0.8)


def test_no_kernels_gives_empty_tables():
    empty = kernels([]).astype({"start_ns": "int64", "end_ns": "int64"})
    out = summarize_rank_time(empty)
    assert out.empty and {"rank", "comm_ns", "comm_hidden_frac"} <= set(out.columns)
    steps = pd.DataFrame({"rank": [0], "step": [0], "start_ns": [0], "end_ns": [10], "duration_ns": [10]})
    per = summarize_steps(empty, steps)
    assert per.loc[0, "idle_ns"] == 10 and per.loc[0, "comm_ns"] == 0
