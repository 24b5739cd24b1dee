"""Per-op roofline: FLOP formulas against torch.utils.flop_counter.FlopCounterMode, and a real trace."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from profiler_kit.analyze.roofline import (
    FORMULAS,
    GPU_PEAKS,
    gpu_peaks,
    innermost,
    op_cost,
    op_gpu_time,
    summarize_roofline,
)

from tests.conftest import SHARED_DATA

torch = pytest.importorskip("torch")
F = torch.nn.functional

CASES = [  # op name as Kineto records it, torch call, input tensors' shapes
    ("aten::mm", torch.mm, [[64, 48], [48, 40]]),
    ("aten::bmm", torch.bmm, [[3, 64, 48], [3, 48, 40]]),
    ("aten::addmm", torch.addmm, [[40], [64, 48], [48, 40]]),
    ("aten::baddbmm", torch.baddbmm, [[3, 64, 40], [3, 64, 48], [3, 48, 40]]),
    ("aten::linear", F.linear, [[2, 7, 48], [40, 48], [40]]),
    ("aten::linear", F.linear, [[7, 48], [40, 48]]),
    ("aten::matmul", torch.matmul, [[5, 1, 7, 48], [3, 48, 40]]),
    (
        "aten::scaled_dot_product_attention",
        F.scaled_dot_product_attention,
        [[2, 4, 33, 16], [2, 4, 21, 16], [2, 4, 21, 24]],
    ),
]


@pytest.mark.parametrize("name,fn,shapes", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_flops_equal_flop_counter(name, fn, shapes):
    from torch.utils.flop_counter import FlopCounterMode

    tensors = [torch.randn(s) for s in shapes]
    with FlopCounterMode(display=False) as counter:
        out = fn(*tensors)
    kind, flops, moved, precision = op_cost(name, shapes, ["float"] * len(shapes))
    assert flops == counter.get_total_flops()
    assert moved == 4 * (sum(int(np.prod(s)) for s in shapes) + out.numel())
    assert precision == "fp32"


def test_matrix_vector_flops():
    """torch.matmul of a matrix and a vector runs aten::mv, which FlopCounterMode does not count (0);
    it does 2*M*K FLOPs all the same."""
    assert op_cost("aten::matmul", [[7, 48], [48]], ["float", "float"])[1] == 2 * 7 * 48


def test_bytes_follow_the_recorded_types():
    kind, flops, moved, precision = op_cost("aten::_softmax", [[8, 128], [], []], ["c10::BFloat16", "Scalar", "bool"])
    assert (kind, flops, moved, precision) == ("softmax", 0, 2 * 2 * 8 * 128, "bf16")
    assert op_cost("aten::mm", [[4, 5]], ["float"]) is None  # shapes that do not fit: no figure
    assert op_cost("aten::unknown_op", [[4, 5]], ["float"]) is None


def test_peaks_table_rows_match_their_gpus():
    assert gpu_peaks("NVIDIA H100 80GB HBM3")["tb_per_s"] == 3.35
    assert gpu_peaks("NVIDIA H100 PCIe")["bf16"] == 756.0
    assert gpu_peaks("NVIDIA A100-SXM4-80GB")["tb_per_s"] == 2.039
    assert gpu_peaks("Tesla V100-SXM2-32GB")["fp16"] == 125.0
    assert gpu_peaks("Some Unknown GPU") is None
    assert all(len(row) == 6 for row in GPU_PEAKS)


def _ops(rows):
    return pd.DataFrame(rows, columns=["name", "start_ns", "end_ns", "pid", "tid", "input_dims", "input_types"])


def test_innermost_counts_nested_ops_once():
    dims, types = json.dumps([[4, 8], [8, 2]]), json.dumps(["float", "float"])
    ops = _ops(
        [
            ("aten::linear", 0, 100, 1, 1, dims, types),
            ("aten::matmul", 10, 90, 1, 1, dims, types),
            ("aten::mm", 20, 80, 1, 1, dims, types),
            ("aten::mm", 200, 300, 1, 1, dims, types),
            ("aten::mm", 50, 60, 1, 2, dims, types),  # another thread
        ]
    )
    keep = innermost(ops, np.ones(len(ops), dtype=bool))
    assert keep.tolist() == [False, False, True, True, True]


def test_roofline_by_hand():
    # one fp32 mm of 2*64*48*40 = 245760 FLOPs, 4*(64*48+48*40+64*40) = 30208 bytes, in 1000 ns on a V100
    ops = _ops([("aten::mm", 0, 10, 1, 1, json.dumps([[64, 48], [48, 40]]), json.dumps(["float", "float"]))])
    table = summarize_roofline(ops, np.array([1000]), gpu_peaks("Tesla V100-SXM2-32GB"))
    r = table.iloc[0]
    assert r["tflop_per_s"] == pytest.approx(245760 / 1000 / 1e3)
    assert r["intensity"] == pytest.approx(245760 / 30208)
    # ridge 15.7 TFLOP/s / 0.9 TB/s = 17.4 FLOP/B > 8.1: memory-bound, roof = 8.1 * 0.9 TB/s
    assert r["bound"] == "memory"
    assert r["of_roof_frac"] == pytest.approx(r["tflop_per_s"] / (r["intensity"] * 0.9))


def test_roofline_on_a_trace_with_shapes():
    from profiler_kit.analyze.breakdown import gpu_ops
    from profiler_kit.analyze.kineto import read_kineto

    path = SHARED_DATA / "kineto" / "AMD-AGI__TraceLens__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    if not path.exists():
        pytest.skip("../shared/data absent")
    trace = read_kineto(path)
    cpu = trace.meta["cpu_ops"]
    ops = gpu_ops(trace)
    gpu = op_gpu_time(cpu, trace.runtime, ops)
    # an op's GPU time never exceeds the GPU time of everything its thread launched
    assert gpu.max() <= ops["duration_ns"].sum()
    table = summarize_roofline(cpu, gpu, gpu_peaks(trace.gpus["name"].iloc[0]))
    assert set(table["op"]) <= set(FORMULAS) and "aten::linear" not in set(table["op"])  # innermost only
    mm = table[table["kind"] == "matmul"]
    big = mm[mm["gflop"] / mm["calls"] > 1]  # the projections: > 1 GFLOP a call, intensity in the hundreds
    assert len(big) and (big["bound"] == "compute").all() and (mm["of_roof_frac"] < 1).all()
    assert (table["gpu_ns"] > 0).all()
