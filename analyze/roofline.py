"""Per-op roofline from recorded shapes: FLOPs and bytes of each PyTorch op against the GPU's peaks.

Kineto traces made with ``record_shapes=True`` carry each op's "Input Dims" and "Input type"
(``analyze.kineto`` keeps them in ``trace.meta["cpu_ops"]``). For the ops in FORMULAS, FLOPs follow
``torch.utils.flop_counter`` (a multiply-add is 2 FLOPs; bias adds and softmax are not counted there, so
softmax and normalization get FLOPs of 0 here too and are judged by bytes) and bytes moved are the
inputs read plus the output written once (no cache reuse: a lower bound on traffic). An op's GPU time is
the time of the kernels launched by the runtime calls made inside it on its thread (correlation ids).

Achieved TFLOP/s = FLOPs / GPU time; arithmetic intensity = FLOPs / bytes. The op is compute-bound when
its intensity is above the ridge point (peak FLOP/s / peak bytes/s), else memory-bound; ``of_roof_frac``
is achieved over what the roofline allows at that intensity. Peaks: GPU_PEAKS, published dense (no
sparsity) figures from the vendors' datasheets, by precision, or this GPU's own ceilings measured by
``record --calibrate`` (``calibrated_peaks``); ``peaks_table`` says which figure came from where.
Convolutions (CONV_ARGS) need the stride, padding and dilation Kineto records as "Concrete Inputs"
(torch >= 2.1); without them a convolution has no row.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd

DTYPE_BYTES = {
    "double": 8,
    "float": 4,
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "bool": 1,
    "unsigned char": 1,
    "signed char": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
}
PRECISION = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16", "double": "fp64"}

# name pattern, dense TFLOP/s by precision (fp32 = non-tensor FP32; tf32 = tensor core), memory TB/s, source.
# Figures are the vendors' published dense (no sparsity) peaks at boost clock; fp64 is taken as fp32 / 2.
GPU_PEAKS = (
    # pattern                 bf16     fp16     tf32    fp32   TB/s   source
    (r"H200", 989.4, 989.4, 494.7, 66.9, 4.8, "NVIDIA H200 datasheet (SXM)"),
    (r"H100.*(SXM|HBM3)", 989.4, 989.4, 494.7, 66.9, 3.35, "NVIDIA H100 datasheet (SXM)"),
    (r"H100", 756.0, 756.0, 378.0, 51.2, 2.0, "NVIDIA H100 datasheet (PCIe)"),
    (r"A100.*80GB|A100-SXM4-80", 312.0, 312.0, 156.0, 19.5, 2.039, "NVIDIA A100 datasheet (80GB SXM)"),
    (r"A100", 312.0, 312.0, 156.0, 19.5, 1.555, "NVIDIA A100 datasheet (40GB)"),
    # no bf16/tf32 tensor cores: bf16 runs as fp16, tf32 as fp32
    (r"V100", 125.0, 125.0, 15.7, 15.7, 0.9, "NVIDIA V100 datasheet (SXM2)"),
    (r"L4\b", 121.0, 121.0, 60.0, 30.3, 0.3, "NVIDIA L4 datasheet"),
    (r"A10\b", 125.0, 125.0, 62.5, 31.2, 0.6, "NVIDIA A10 datasheet"),
    (r"RTX 4090", 165.2, 165.2, 82.6, 82.6, 1.008, "NVIDIA Ada (RTX 4090) architecture whitepaper"),
    (r"MI300X", 1307.4, 1307.4, 653.7, 163.4, 5.3, "AMD Instinct MI300X data sheet"),
    (r"MI250X", 383.0, 383.0, 95.7, 95.7, 3.2, "AMD Instinct MI250X data sheet"),
)
PEAK_FIGURES = ("bf16", "fp16", "tf32", "fp32", "fp64")  # the precisions a peaks dict holds, with tb_per_s


def gpu_peaks(gpu_name: str) -> dict | None:
    """Published peak TFLOP/s by precision and TB/s for a GPU name (first matching row of GPU_PEAKS), or None.

    ``sources`` says where each figure came from (the table row's datasheet)."""
    for pattern, bf16, fp16, tf32, fp32, tbs, source in GPU_PEAKS:
        if re.search(pattern, gpu_name):
            peaks = {"bf16": bf16, "fp16": fp16, "tf32": tf32, "fp32": fp32, "fp64": fp32 / 2, "tb_per_s": tbs}
            sources = {k: f"published: {source}" for k in peaks} | {"fp64": f"published: {source} fp32 / 2"}
            return peaks | {"sources": sources}
    return None


def calibrated_peaks(calibration: dict, where: str, published: dict | None = None) -> dict | None:
    """Peaks measured by ``record --calibrate`` (workloads/calibrate.py's calibration.json: ``gemm[dtype].tflops``
    for an n x n x n matmul per dtype, ``copy.bytes_per_s`` for a device-to-device copy, read + write bytes),
    ``where`` naming the file; figures it lacks (fp64, a dtype not measured) from ``published``. None when
    the calibration holds no GEMM figure."""
    gemm = calibration.get("gemm") or {}
    peaks, sources = {}, {}
    for dtype in PEAK_FIGURES:
        tflops = (gemm.get(dtype) or {}).get("tflops")
        if isinstance(tflops, (int, float)) and tflops > 0:
            n = (gemm.get(dtype) or {}).get("n", "?")
            peaks[dtype], sources[dtype] = float(tflops), f"measured: {where} ({n}^3 {dtype} matmul, median)"
    rate = (calibration.get("copy") or {}).get("bytes_per_s")
    if isinstance(rate, (int, float)) and rate > 0:
        peaks["tb_per_s"], sources["tb_per_s"] = rate / 1e12, f"measured: {where} (device-to-device copy, median)"
    if not peaks or not any(k in peaks for k in PEAK_FIGURES):
        return None
    for key in (*PEAK_FIGURES, "tb_per_s"):
        if key not in peaks and published and key in published:
            peaks[key], sources[key] = published[key], published["sources"][key]
    if "tb_per_s" not in peaks:
        return None
    return peaks | {"sources": sources}


PEAK_COLUMNS = ["figure", "value", "unit", "source"]


def peaks_table(peaks: dict | None) -> pd.DataFrame:
    """The peaks a roofline was judged against, one row per figure, with the source of each (PEAK_COLUMNS)."""
    if not peaks:
        return pd.DataFrame(columns=PEAK_COLUMNS)
    rows = [[k, peaks[k], "TFLOP/s", peaks["sources"].get(k, "")] for k in PEAK_FIGURES if k in peaks]
    rows.append(["memory", peaks["tb_per_s"], "TB/s", peaks["sources"].get("tb_per_s", "")])
    return pd.DataFrame(rows, columns=PEAK_COLUMNS)


def _numel(shape) -> int:
    return int(math.prod(shape)) if isinstance(shape, list) else 0


def _mm(dims) -> tuple[int, list]:
    (m, k), (_, n) = dims[0], dims[1]
    return 2 * m * k * n, [m, n]


def _addmm(dims) -> tuple[int, list]:  # (bias, a, b)
    (m, k), (_, n) = dims[1], dims[2]
    return 2 * m * k * n, [m, n]


def _bmm(dims) -> tuple[int, list]:
    (b, m, k), (_, _, n) = dims[0], dims[1]
    return 2 * b * m * k * n, [b, m, n]


def _baddbmm(dims) -> tuple[int, list]:  # (input, b1, b2)
    (b, m, k), (_, _, n) = dims[1], dims[2]
    return 2 * b * m * k * n, [b, m, n]


def _linear(dims) -> tuple[int, list]:  # (x [..., K], weight [N, K], bias)
    x, w = dims[0], dims[1]
    rows = _numel(x[:-1])
    return 2 * rows * x[-1] * w[0], [*x[:-1], w[0]]


def _matmul(dims) -> tuple[int, list]:
    a, b = dims[0], dims[1]
    if len(a) == 1 and len(b) == 1:
        return 2 * a[0], []
    a2 = [1, *a] if len(a) == 1 else a
    b2 = [*b, 1] if len(b) == 1 else b
    batch = list(np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2])))
    m, k, n = a2[-2], a2[-1], b2[-1]
    out = [*batch, *([m] if len(a) > 1 else []), *([n] if len(b) > 1 else [])]
    return 2 * _numel(batch) * m * k * n if batch else 2 * m * k * n, out


def _sdpa(dims) -> tuple[int, list]:  # (q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev])
    q, k, v = dims[0], dims[1], dims[2]
    batch = _numel(q[:-2])
    length, e, s, ev = q[-2], q[-1], k[-2], v[-1]
    return 2 * batch * length * s * e + 2 * batch * length * s * ev, [*q[:-1], ev]


def _same_as_input(dims) -> tuple[int, list]:  # softmax, norms, elementwise: FLOPs not counted (as torch)
    shapes = [d for d in dims if isinstance(d, list) and d]
    out = list(np.broadcast_shapes(*[tuple(s) for s in shapes])) if shapes else []
    return 0, out


def _ints(text) -> list[int] | None:
    """A recorded int list ("[2, 2]") or int ("1") as a list of ints; None when absent or not ints ("", "same")."""
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return value
    return None


# Convolution ops: argument positions of (stride, padding, dilation, output_padding, groups) as each op's schema
# orders them (aten/src/ATen/native/native_functions.yaml), and whether the op is a transposed convolution
# (aten::convolution and aten::_convolution record it as an argument, position 6).
CONV_ARGS = {
    "aten::conv1d": (3, 4, 5, None, 6, False),
    "aten::conv2d": (3, 4, 5, None, 6, False),
    "aten::conv3d": (3, 4, 5, None, 6, False),
    "aten::convolution": (3, 4, 5, 7, 8, 6),
    "aten::_convolution": (3, 4, 5, 7, 8, 6),
    "aten::cudnn_convolution": (3, 2, 4, None, 5, False),
    "aten::mkldnn_convolution": (4, 3, 5, None, 6, False),
    "aten::conv_transpose1d": (3, 4, 7, 5, 6, True),
    "aten::conv_transpose2d": (3, 4, 7, 5, 6, True),
    "aten::conv_transpose3d": (3, 4, 7, 5, 6, True),
    "aten::cudnn_convolution_transpose": (4, 2, 5, 3, 6, True),
}


def conv_cost(name: str, dims, concrete) -> tuple[int, list]:
    """(FLOPs, output shape) of a convolution from its input and weight shapes and its concrete stride,
    padding, dilation (and output padding), as torch.utils.flop_counter.conv_flop_count counts it:
    2 * N * Cout * prod(output spatial) * Cin/groups * prod(kernel) (transposed: over the input's spatial size,
    with weight [Cin, Cout/groups, k...]). Raises ValueError when an argument it needs was not recorded."""
    stride_at, pad_at, dil_at, outpad_at, groups_at, transposed = CONV_ARGS[name]
    x, w = dims[0], dims[1]
    if not isinstance(concrete, list):
        raise ValueError("no concrete inputs recorded")
    arg = lambda i: _ints(concrete[i]) if i is not None and i < len(concrete) else None  # noqa: E731
    if not isinstance(transposed, bool):
        transposed = concrete[transposed] == "True"
    spatial = len(x) - 2
    stride, pad, dil = arg(stride_at), arg(pad_at), arg(dil_at)
    if stride is None or pad is None or dil is None:
        raise ValueError("stride, padding or dilation not recorded")
    stride, pad, dil = ([v[0]] * spatial if len(v) == 1 else v for v in (stride, pad, dil))
    groups = (arg(groups_at) or [1])[0]
    kernel = w[2:]
    if transposed:
        outpad = arg(outpad_at) or [0]
        outpad = outpad * spatial if len(outpad) == 1 else outpad
        out_spatial = [(i - 1) * s - 2 * p + d * (k - 1) + o + 1
                       for i, s, p, d, k, o in zip(x[2:], stride, pad, dil, kernel, outpad, strict=True)]  # fmt: skip
        flops = 2 * x[0] * math.prod(x[2:]) * math.prod(kernel) * w[0] * w[1]
        return flops, [x[0], w[1] * groups, *out_spatial]
    out_spatial = [(i + 2 * p - d * (k - 1) - 1) // s + 1
                   for i, s, p, d, k in zip(x[2:], stride, pad, dil, kernel, strict=True)]  # fmt: skip
    flops = 2 * x[0] * math.prod(out_spatial) * math.prod(kernel) * w[0] * w[1]
    return flops, [x[0], w[0], *out_spatial]


FORMULAS = {  # op name -> (kind, formula(input dims) -> (flops, output shape))
    "aten::mm": ("matmul", _mm),
    "aten::addmm": ("matmul", _addmm),
    "aten::bmm": ("matmul", _bmm),
    "aten::baddbmm": ("matmul", _baddbmm),
    "aten::linear": ("matmul", _linear),
    "aten::matmul": ("matmul", _matmul),
    "aten::scaled_dot_product_attention": ("attention", _sdpa),
    "aten::_scaled_dot_product_flash_attention": ("attention", _sdpa),
    "aten::_scaled_dot_product_efficient_attention": ("attention", _sdpa),
    "aten::_scaled_dot_product_cudnn_attention": ("attention", _sdpa),
    **{name: ("convolution", None) for name in CONV_ARGS},  # conv_cost: needs the concrete inputs too
    "aten::_softmax": ("softmax", _same_as_input),
    "aten::softmax": ("softmax", _same_as_input),
    "aten::layer_norm": ("normalization", _same_as_input),
    "aten::native_layer_norm": ("normalization", _same_as_input),
    "aten::rms_norm": ("normalization", _same_as_input),
    "aten::add": ("elementwise", _same_as_input),
    "aten::mul": ("elementwise", _same_as_input),
    "aten::gelu": ("elementwise", _same_as_input),
    "aten::silu": ("elementwise", _same_as_input),
    "aten::sum": ("reduction", lambda dims: (0, [])),
    "aten::mean": ("reduction", lambda dims: (0, [])),
}


def op_cost(name: str, dims, types, concrete=None) -> tuple[str, int, int, str] | None:
    """(kind, FLOPs, bytes, precision) of one op from its recorded dims, types and (convolutions) concrete
    inputs; None without a formula or when the recorded arguments do not fit it."""
    entry = FORMULAS.get(name)
    if entry is None or not isinstance(dims, list):
        return None
    kind, formula = entry
    try:
        flops, out = conv_cost(name, dims, concrete) if formula is None else formula(dims)
    except (ValueError, TypeError, IndexError):
        return None
    types = types if isinstance(types, list) else []
    tensor = [(d, t) for d, t in zip(dims, types, strict=False) if isinstance(d, list) and d and t in DTYPE_BYTES]
    if not tensor:
        return None
    size = DTYPE_BYTES[tensor[0][1]]
    moved = sum(_numel(d) * DTYPE_BYTES[t] for d, t in tensor) + _numel(out) * size
    return kind, int(flops), int(moved), PRECISION.get(tensor[0][1], "other")


def op_gpu_time(cpu_ops: pd.DataFrame, runtime: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """GPU ns of each cpu op: its kernels and memops, launched by runtime calls inside it on its thread."""
    out = np.zeros(len(cpu_ops), dtype=np.int64)
    if cpu_ops.empty or runtime.empty or ops.empty:
        return out
    from profiler_kit.analyze.launches import launch_table

    launched = launch_table(ops, runtime)
    by_call = pd.DataFrame(
        {
            "pid": np.broadcast_to(launched["pid"].to_numpy(), len(launched)),
            "tid": launched["tid"].to_numpy(),
            "t": launched["launch_start_ns"].to_numpy(),
            "ns": launched["gpu_ns"].to_numpy(),
        }
    ).sort_values(["pid", "tid", "t"], kind="stable")
    for (pid, tid), g in by_call.groupby(["pid", "tid"], sort=False):
        mine = np.flatnonzero((cpu_ops["pid"].to_numpy() == pid) & (cpu_ops["tid"].to_numpy() == tid))
        if not len(mine):
            continue
        t, cum = g["t"].to_numpy(), np.concatenate([[0], np.cumsum(g["ns"].to_numpy())])
        lo = np.searchsorted(t, cpu_ops["start_ns"].to_numpy()[mine], "left")
        hi = np.searchsorted(t, cpu_ops["end_ns"].to_numpy()[mine], "left")
        out[mine] = cum[hi] - cum[lo]
    return out


def innermost(cpu_ops: pd.DataFrame, candidates: np.ndarray) -> np.ndarray:
    """``candidates`` less the ops that enclose another candidate on their thread (aten::linear around
    aten::addmm, scaled_dot_product_attention around its flash kernel op): each op is counted once, at the
    level closest to its kernels. Ops on one thread nest, so an op encloses one exactly when the next
    candidate on its thread starts before it ends."""
    idx = np.flatnonzero(candidates)
    if not len(idx):
        return candidates
    sub = cpu_ops.iloc[idx]
    order = np.lexsort((sub["start_ns"].to_numpy(), sub["tid"].to_numpy(), sub["pid"].to_numpy()))
    rows = idx[order]
    pid, tid = cpu_ops["pid"].to_numpy()[rows], cpu_ops["tid"].to_numpy()[rows]
    start, end = cpu_ops["start_ns"].to_numpy()[rows], cpu_ops["end_ns"].to_numpy()[rows]
    outer = np.zeros(len(rows), dtype=bool)
    outer[:-1] = (pid[1:] == pid[:-1]) & (tid[1:] == tid[:-1]) & (start[1:] < end[:-1])
    out = candidates.copy()
    out[rows[outer]] = False
    return out


ROOFLINE_COLUMNS = [
    "op",
    "kind",
    "input_dims",
    "precision",
    "calls",
    "gpu_ns",
    "gflop",
    "gbytes",
    "tflop_per_s",
    "tb_per_s",
    "intensity",
    "bound",
    "of_roof_frac",
]


def summarize_roofline(cpu_ops: pd.DataFrame, gpu_ns: np.ndarray, peaks: dict | None) -> pd.DataFrame:
    """Per (op, input dims, precision): calls, GPU time, FLOPs and bytes, achieved rates and the roofline
    verdict (ROOFLINE_COLUMNS), costliest first. ``peaks`` from ``gpu_peaks``; None leaves the verdict empty."""
    mask = innermost(cpu_ops, cpu_ops["name"].isin(list(FORMULAS)).to_numpy(dtype=bool)) & (gpu_ns > 0)
    rows = []
    for i in np.flatnonzero(mask):
        r = cpu_ops.iloc[i]
        concrete = json.loads(r["concrete_inputs"]) if "concrete_inputs" in r else None
        cost = op_cost(r["name"], json.loads(r["input_dims"]), json.loads(r["input_types"]), concrete)
        if cost is None:
            continue
        kind, flops, moved, prec = cost
        rows.append([r["name"], kind, r["input_dims"], prec, flops, moved, int(gpu_ns[i])])
    if not rows:
        return pd.DataFrame(columns=ROOFLINE_COLUMNS)
    df = pd.DataFrame(rows, columns=["op", "kind", "input_dims", "precision", "flops", "bytes", "gpu_ns"])
    g = df.groupby(["op", "kind", "input_dims", "precision"], sort=False)
    out = pd.DataFrame({"calls": g.size(), "gpu_ns": g["gpu_ns"].sum(), "f": g["flops"].sum(), "b": g["bytes"].sum()})
    out = out.reset_index()
    out["gflop"], out["gbytes"] = out["f"] / 1e9, out["b"] / 1e9
    out["tflop_per_s"] = out["f"] / out["gpu_ns"] / 1e3
    out["tb_per_s"] = out["b"] / out["gpu_ns"] / 1e3
    out["intensity"] = out["f"] / out["b"]
    if peaks:
        flop_peak = out["precision"].map(lambda p: peaks.get(p, peaks["fp32"])).to_numpy(dtype=float)
        ridge = flop_peak / peaks["tb_per_s"]  # FLOP per byte where the two roofs meet
        intensity = out["intensity"].to_numpy(dtype=float)
        out["bound"] = np.where(intensity >= ridge, "compute", "memory")
        roof = np.minimum(flop_peak, intensity * peaks["tb_per_s"])  # TFLOP/s the roofline allows
        achieved = np.where(out["f"] > 0, out["tflop_per_s"] / np.where(roof > 0, roof, np.nan), np.nan)
        out["of_roof_frac"] = np.where(out["f"] > 0, achieved, out["tb_per_s"] / peaks["tb_per_s"])
    else:
        out["bound"], out["of_roof_frac"] = "", np.nan
    return out.sort_values("gpu_ns", ascending=False, kind="stable").reset_index(drop=True)[ROOFLINE_COLUMNS]
