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
    assert all(len(row) == 7 and row[-1] for row in GPU_PEAKS)  # every row names its source
    assert gpu_peaks("NVIDIA H200")["sources"]["bf16"] == "published: NVIDIA H200 datasheet (SXM)"


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


CONV_CASES = [  # torch call, input shape, weight shape, keyword arguments
    (F.conv2d, [2, 4, 9, 9], [6, 2, 3, 3], {"stride": 2, "padding": 1, "groups": 2}),
    (F.conv2d, [1, 3, 10, 7], [5, 3, 3, 2], {"stride": (2, 1), "padding": (0, 1), "dilation": (2, 1)}),
    (F.conv1d, [2, 4, 17], [8, 4, 5], {"padding": 2}),
    (F.conv3d, [1, 2, 5, 6, 7], [3, 2, 2, 3, 3], {"stride": 2}),
    (F.conv_transpose2d, [2, 4, 9, 9], [4, 3, 3, 3], {"stride": 2, "padding": 1, "output_padding": 1}),
]


@pytest.mark.parametrize("fn,x,w,kw", CONV_CASES, ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CONV_CASES)])
def test_convolution_flops_equal_flop_counter(tmp_path, fn, x, w, kw):
    """Each convolution recorded by torch.profiler (record_shapes=True, as a user records it): every conv op
    of its call stack (conv2d, convolution, _convolution, the backend's op) read back by analyze.kineto gives
    FlopCounterMode's FLOPs for the same call, and bytes for the real output's size."""
    from profiler_kit.analyze.kineto import read_kineto
    from torch.utils.flop_counter import FlopCounterMode

    tensors = [torch.randn(x), torch.randn(w)]
    with FlopCounterMode(display=False) as counter:
        out = fn(*tensors, **kw)
    with torch.profiler.profile(record_shapes=True) as prof:
        fn(*tensors, **kw)
    prof.export_chrome_trace(str(tmp_path / "conv.json"))
    cpu = read_kineto(tmp_path / "conv.json").meta["cpu_ops"]
    convs = cpu[cpu["name"].isin([n for n, (kind, _) in FORMULAS.items() if kind == "convolution"])]
    assert len(convs) >= 3  # the public op, aten::convolution, aten::_convolution (and the backend's)
    for _, r in convs.iterrows():
        cost = op_cost(
            r["name"], json.loads(r["input_dims"]), json.loads(r["input_types"]), json.loads(r["concrete_inputs"])
        )
        if cost is None:  # only a backend op with arguments this table does not map
            assert r["name"] not in ("aten::convolution", "aten::_convolution"), r["name"]
            continue
        kind, flops, moved, precision = cost
        assert (kind, flops, precision) == ("convolution", counter.get_total_flops(), "fp32"), r["name"]
        assert moved == 4 * (int(np.prod(x)) + int(np.prod(w)) + out.numel()), r["name"]


def test_convolution_without_concrete_inputs_has_no_figure():
    assert op_cost("aten::conv2d", [[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], []], ["float"] * 2) is None
    assert op_cost("aten::conv2d", [[1, 3, 8, 8], [4, 3, 3, 3]], ["float"] * 2, ["", "", "", "[1, 1]", ""]) is None


CALIBRATION = {
    "device": "NVIDIA H200",
    "gemm": {"fp32": {"n": 8192, "tflops": 51.0}, "tf32": {"n": 8192, "tflops": 416.6},
             "bf16": {"n": 8192, "tflops": 793.5}, "fp16": {"n": 8192, "tflops": 767.3}},
    "copy": {"bytes": 2**31, "bytes_per_s": 4.19e12},
}  # fmt: skip


def test_calibrated_peaks_say_where_each_figure_came_from():
    from profiler_kit.analyze.roofline import calibrated_peaks, peaks_table

    peaks = calibrated_peaks(CALIBRATION, "run/calibration.json", gpu_peaks("NVIDIA H200"))
    assert (peaks["bf16"], peaks["fp32"], peaks["tb_per_s"]) == (793.5, 51.0, 4.19)
    table = peaks_table(peaks).set_index("figure")
    assert table.loc["bf16", "source"].startswith("measured: run/calibration.json (8192^3 bf16")
    assert table.loc["memory", "unit"] == "TB/s" and table.loc["memory", "source"].startswith("measured")
    assert table.loc["fp64", "source"].startswith("published: NVIDIA H200")  # not measured: the datasheet's
    assert peaks_table(gpu_peaks("NVIDIA H200"))["source"].str.startswith("published").all()
    assert calibrated_peaks({"device": "x"}, "f", None) is None  # nothing measured


def test_report_takes_the_run_folders_calibration(tmp_path):
    """A record-style layout: out/<run>/trace.json.gz with run.json, out/calibration.json: the peaks come
    from the nearest calibration of this GPU (run.json first), else the published figures, each naming its source."""
    from profiler_kit.analyze.tables import GPUS, Trace, validate

    from profiler_kit.build_findings import trace_peaks

    run = tmp_path / "out" / "run1"
    run.mkdir(parents=True)
    gpu = {c: [""] if GPUS[c] == "object" else [-1] for c in GPUS} | {"device_id": [0], "name": ["NVIDIA H200"]}
    trace = Trace(gpus=validate(pd.DataFrame(gpu), GPUS))
    trace.meta["source"] = str(run / "trace.json.gz")
    assert trace_peaks(trace)["sources"]["bf16"].startswith("published")  # no calibration yet
    (tmp_path / "out" / "calibration.json").write_text(json.dumps(CALIBRATION))
    peaks = trace_peaks(trace)
    assert peaks["bf16"] == 793.5 and str(tmp_path / "out" / "calibration.json") in peaks["sources"]["bf16"]
    (tmp_path / "out" / "calibration.json").write_text(json.dumps(CALIBRATION | {"device": "NVIDIA A100"}))
    assert trace_peaks(trace)["bf16"] == 989.4  # another GPU's calibration is not this one's ceiling
    (run / "run.json").write_text(json.dumps({"run_id": "r", "status": "ok", "calibration": CALIBRATION}))
    assert trace_peaks(trace)["sources"]["tb_per_s"] == f"measured: {run / 'run.json'} (device-to-device copy, median)"
