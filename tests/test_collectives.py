"""Collective bus bandwidth (analyze/collectives.py): hand-built instances with answers worked out by hand,
then the real traces, against sums taken from the raw JSON."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from profiler_kit.analyze.breakdown import gpu_ops
from profiler_kit.analyze.collectives import (
    collective_bandwidth,
    collective_instances,
    collective_kind,
    message_bytes,
    summarize_bandwidth,
)
from profiler_kit.analyze.kineto import read_kineto

from profiler_kit.build_findings import diagnose
from tests.conftest import SHARED_DATA

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
AG = "ncclDevKernel_AllGather_RING_LL"


def _comm(rows):
    return pd.DataFrame(rows, columns=["rank", "name", "start_ns", "end_ns", "collective", "bytes", "group_size"])


def test_bus_bandwidth_by_hand():
    """Two ranks. all_reduce of 1000 B in a group of 4: rank 0 in at 100, rank 1 at 150, both out by 250:
    time after the last arrival 100 ns, algBw 10 GB/s, busBw x 2(4-1)/4 = 15 GB/s. all_gather of 600 B,
    group size not recorded (2 ranks seen): 60 ns after the last arrival, algBw 10, busBw x 1/2 = 5."""
    comm = _comm(
        [
            (0, AR, 100, 250, "all_reduce", 1000, 4),
            (1, AR, 150, 250, "all_reduce", 1000, 4),
            (0, AG, 400, 470, "all_gather", 600, -1),
            (1, AG, 410, 470, "all_gather", 600, -1),
        ]
    )
    bw = collective_bandwidth(comm)
    assert bw[["name", "group_size", "time_ns", "algbw_gb_per_s", "busbw_gb_per_s"]].values.tolist() == [
        [AR, 4, 100, 10.0, 15.0],
        [AG, 2, 60, 10.0, 5.0],
    ]
    assert (bw["time_basis"] == "after last arrival").all()
    assert (bw["time_ns"] == collective_instances(comm)["after_last_ns"]).all()  # the same time as the skew table
    s = summarize_bandwidth(bw).set_index("name")
    assert s.loc[AR, "busbw_gb_per_s"] == pytest.approx(15.0) and s.loc[AG, "bytes"] == 600


def test_one_rank_uses_the_kernel_time_and_unknown_sizes_stay_unknown():
    comm = _comm(
        [
            (0, AR, 0, 200, "all_reduce", 1000, 2),  # 1000 B / 200 ns = 5 GB/s, x 2(2-1)/2 = 1
            (0, AR, 300, 400, "all_reduce", np.nan, 2),  # size not recorded
        ]
    )
    bw = collective_bandwidth(comm)
    assert bw["time_basis"].tolist() == ["kernel, wait included"] * 2
    assert bw["busbw_gb_per_s"].iloc[0] == pytest.approx(5.0) and np.isnan(bw["busbw_gb_per_s"].iloc[1])
    assert bw["bytes_source"].tolist() == ["collective args", "not recorded"]
    s = summarize_bandwidth(bw).iloc[0]
    assert s["busbw_gb_per_s"] == pytest.approx(5.0)  # over the instance whose size is known only
    assert s["bytes_source"] == "not recorded"


@pytest.mark.parametrize(
    "text,kind",
    [
        ("allreduce", "all_reduce"),
        ("_reduce_scatter_base", "reduce_scatter"),
        ("allgather_into_tensor_coalesced", "all_gather"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "all_reduce"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce_scatter"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv"),
        ("ncclDevKernel_Reduce_Sum_f32_RING_LL", "reduce"),
        ("broadcast", "broadcast"),
        ("barrier", ""),
    ],
)
def test_collective_kind(text, kind):
    assert collective_kind(text) == kind


def test_message_bytes_take_the_full_buffer():
    # all-gather: output = group x input; reduce-scatter: input = group x output; unknown dtype or size: NaN
    got = message_bytes([10, 40, 5, -1], [40, 10, 5, -1], ["Float", "BFloat16", "Quux", "Float"])
    assert got[:2].tolist() == [160.0, 80.0] and np.isnan(got[2:]).all()


HTA_NCCL = SHARED_DATA / "kineto" / "facebookresearch__HolisticTraceAnalysis__nccl_data.json.gz"


def test_bandwidth_on_a_kineto_rank_against_the_raw_json():
    """Rank 0 of 2 (one file): each NCCL kernel is an instance; bytes = nelems x 4 (Float) or 8 (Long), time =
    the kernel's dur; all-reduce and broadcast on 2 ranks both have factor 1, so busBw = bytes / dur."""
    if not HTA_NCCL.exists():
        pytest.skip("../shared/data absent")
    raw = [
        e
        for e in json.load(gzip.open(HTA_NCCL))["traceEvents"]
        if e.get("cat") == "kernel" and "In msg nelems" in e.get("args", {})
    ]
    size = {"Float": 4, "Long": 8}
    want = sorted(
        (round(e["ts"] * 1000), e["args"]["In msg nelems"] * size[e["args"]["dtype"]] / (e["dur"] * 1000)) for e in raw
    )
    trace = read_kineto(HTA_NCCL)
    tables = diagnose(trace, gpu_ops(trace))
    bw = tables["bandwidth_instances"]
    assert len(bw) == len(raw) == 21
    assert bw["busbw_gb_per_s"].to_numpy() == pytest.approx([w for _, w in want], rel=1e-9)
    assert set(bw["collective"]) == {"all_reduce", "broadcast"} and (bw["group_size"] == 2).all()
    by_name = tables["bandwidth"].set_index("collective")
    assert by_name.loc["all_reduce", "bytes"] == sum(
        e["args"]["In msg nelems"] * 4 for e in raw if "AllReduce" in e["name"]
    )


def test_bandwidth_of_an_nsys_export_is_not_recorded():
    from profiler_kit.analyze.sources import discover, read_trace

    path = SHARED_DATA / "nsys_sqlite" / "lizhieffe__assignment2-systems__ddp53_profile.sqlite"
    if not path.exists():
        pytest.skip("../shared/data absent")
    trace = read_trace(discover([path])[0])
    tables = diagnose(trace, gpu_ops(trace))
    bw = tables["bandwidth_instances"]
    inst = collective_instances(tables["comm_kernels"])
    assert len(bw) >= len(inst) > 0
    two = bw[bw["ranks"] == 2]
    assert (two["time_basis"] == "after last arrival").all() and (two["group_size"] == 2).all()
    assert two["time_ns"].sum() == inst["after_last_ns"].sum()
    assert (bw["bytes_source"] == "not recorded").all() and bw["busbw_gb_per_s"].isna().all()
    assert set(bw["collective"]) == {"all_reduce", "broadcast"}


HTA_OVERLAP = json.loads((Path(__file__).parent / "data" / "hta" / "hta_figures.json").read_text())["overlap_sequences"]


@pytest.mark.parametrize(
    "name", [n for n, v in HTA_OVERLAP["traces"].items() if "comm_comp_overlap" in v], ids=lambda n: n[:40]
)
def test_comm_hidden_share_matches_hta_overlap(name):
    """HTA get_comm_comp_overlap = time communication kernels run under compute kernels / communication
    time; ours is 1 - exposed / communication time of the temporal breakdown: equal (HTA rounds to 0.01%;
    both NaN without communication)."""
    from profiler_kit.analyze.idle import temporal_breakdown

    path = SHARED_DATA / "kineto" / name
    if not path.exists():
        pytest.skip("../shared/data absent")
    (hta,) = HTA_OVERLAP["traces"][name]["comm_comp_overlap"]
    row = temporal_breakdown(gpu_ops(read_kineto(path))).iloc[0]
    ours = 100 * (1 - row["comm_exposed_ns"] / row["comm_ns"]) if row["comm_ns"] > 0 else float("nan")
    if np.isnan(hta["comp_comm_overlap_pctg"]):
        assert np.isnan(ours)
    else:
        assert round(ours, 2) == hta["comp_comm_overlap_pctg"]
