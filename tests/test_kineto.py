"""Kineto reader: real GPU traces against an independent plain-json count, hand-built traces, bad input."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal
from functools import cache
from pathlib import Path

import pandas as pd
import pytest
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.kineto import looks_like_kineto, read_kineto
from profiler_kit.analyze.projection import launches, project_nvtx, summarize_projection

from tests.conftest import FIXTURES, shared_params

REAL = shared_params("kineto", "*.json.gz")
CPU_FIXTURE = FIXTURES / "kineto" / "cpu_attention.pt.trace.json.gz"


@cache
def _read(path: Path):
    return read_kineto(path)


@cache
def _reference(path: Path) -> dict:
    """The same file through plain json, numbers as exact Decimals, events grouped by lower-cased cat."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    groups: dict[str, list] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            groups.setdefault(str(e.get("cat")).lower(), []).append(e)
    return {"doc": doc, "cat": groups}


def _ns(us) -> int:
    return int((Decimal(us) * 1000).to_integral_value(ROUND_HALF_EVEN))


# Real traces (../shared/data/kineto)


@pytest.mark.parametrize("path", REAL)
def test_kernel_count_and_times_match_plain_json(path):
    trace, ref = _read(path), _reference(path)
    kernels = ref["cat"].get("kernel", [])
    assert len(kernels) > 0
    assert len(trace.kernels) == len(kernels)
    # total time: within 1 ns per event of the float sum; exactly the decimal sum's rounding per event
    float_total = sum(float(e["dur"]) * 1000 for e in kernels)
    assert abs(int(trace.kernels["duration_ns"].sum()) - float_total) <= len(kernels)
    assert int(trace.kernels["duration_ns"].sum()) == sum(_ns(e["dur"]) for e in kernels)
    assert sorted(trace.kernels["start_ns"]) == sorted(_ns(e["ts"]) for e in kernels)
    assert (trace.kernels["end_ns"] == trace.kernels["start_ns"] + trace.kernels["duration_ns"]).all()
    names = Counter(e["name"] for e in kernels)
    assert trace.kernels["name"].astype(str).value_counts().to_dict() == dict(names)
    assert (trace.kernels["name"] == trace.kernels["demangled_name"]).all()


@pytest.mark.parametrize("path", REAL)
def test_kernels_find_their_launch_through_correlation(path):
    trace, ref = _read(path), _reference(path)
    launches = {
        e["args"]["correlation"]: e
        for cat in ("cuda_runtime", "cuda_driver", "runtime")
        for e in ref["cat"].get(cat, [])
        if "correlation" in e.get("args", {})
    }
    assert len(trace.runtime) == sum(len(ref["cat"].get(c, [])) for c in ("cuda_runtime", "cuda_driver", "runtime"))
    runtime_corr = set(trace.runtime["correlation_id"])
    matched = trace.kernels[trace.kernels["correlation_id"].isin(launches)]
    assert len(matched) > 0
    assert set(matched["correlation_id"]) <= runtime_corr
    expected_pid = matched["correlation_id"].map(lambda c: launches[c]["pid"])
    assert (matched["pid"] == expected_pid).all()
    # GPU events sit under pid = device index; no kernel may keep that as its process
    cpu_pids = {e["pid"] for e in ref["cat"].get("cpu_op", []) + ref["cat"].get("operator", [])}
    assert set(trace.kernels["pid"]) <= cpu_pids


@pytest.mark.parametrize("path", REAL)
def test_other_tables_match_plain_json(path):
    trace, ref = _read(path), _reference(path)
    cat, doc = ref["cat"], ref["doc"]
    copies = cat.get("gpu_memcpy", []) + cat.get("memcpy", [])
    sets = cat.get("gpu_memset", []) + cat.get("memset", [])
    expected_kinds = +Counter({"memcpy": len(copies), "memset": len(sets)})  # + drops zero counts
    assert Counter(trace.memops["kind"].astype(str)) == expected_kinds
    assert int(trace.memops["size_bytes"].sum()) == sum(e["args"]["bytes"] for e in copies + sets)
    assert not trace.memops["name"].astype(str).str.startswith("Memcpy").any()
    ranges = cat.get("user_annotation") or [e for e in cat.get("operator", []) if e["name"].startswith("ProfilerStep#")]
    assert sorted(trace.nvtx["name"].astype(str)) == sorted(e["name"] for e in ranges)
    assert (trace.nvtx.loc[trace.nvtx["name"].str.startswith("ProfilerStep#"), "depth"] == 0).all()
    assert len(trace.gpus) == len(doc.get("deviceProperties", []))
    assert len(trace.meta["gpu_user_annotations"]) == len(cat.get("gpu_user_annotation", []))
    assert trace.meta["format"] == "kineto"
    if "distributedInfo" in doc:
        assert trace.meta["rank"] == doc["distributedInfo"]["rank"]
    assert looks_like_kineto(path)


@pytest.mark.parametrize("path", REAL)
def test_projection_agrees_with_kinetos_gpu_user_annotations(path):
    """Our projection of the CPU ranges (analyze.projection) against the GPU ranges Kineto itself drew.

    Kineto pads its gpu_user_annotation spans (1 ns in recent traces, 1 us / 0.5 us in
    older ones), so each must match a projected span of the same name within 1 us.
    """
    trace = _read(path)
    expected = trace.meta["gpu_user_annotations"]
    if not expected:
        pytest.skip("trace has no gpu_user_annotation events")
    ops = pd.concat([trace.kernels.assign(is_kernel=True), trace.memops.assign(is_kernel=False)], ignore_index=True)
    spans = summarize_projection(trace.nvtx, project_nvtx(trace.nvtx, ops, launches(ops, trace.runtime)))
    spans = spans.assign(name=spans["range"].astype(str), end=spans["gpu_start_ns"] + spans["gpu_duration_ns"])
    for gpu in expected:
        same = spans[spans["name"] == gpu["name"]]
        near = same[
            ((same["gpu_start_ns"] - gpu["start_ns"]).abs() <= 1000) & ((same["end"] - gpu["end_ns"]).abs() <= 1000)
        ]
        assert len(near) == 1, gpu


# Hand-built traces


def _write(tmp_path: Path, doc, name="trace.json", gz=False) -> Path:
    path = tmp_path / name
    text = doc if isinstance(doc, str) else json.dumps(doc)
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


def _x(cat, name, ts, dur, pid=100, tid=100, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _gpu_doc():
    # ts written as text so the nanosecond digits survive (json.dumps of a float would round them)
    events = [
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 101, "args": {"name": "thread 101 (pt_main_thread)"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        _x("cpu_op", "aten::mm", "TS0", "DUR0"),
        _x("cuda_runtime", "cudaLaunchKernel", 1712195495519600, 5, pid=300, tid=101, correlation=11),
        _x("cuda_runtime", "cudaMemcpyAsync", 1712195495519610, 5, pid=100, tid=101, correlation=12),
        _x("kernel", "void gemm<float>(float*)", "TS1", "DUR1", pid=0, tid=7, device=0, stream=7, correlation=11,
           grid=[4, 2, 1], block=[128, 1, 1], **{"registers per thread": 32, "shared memory": 4096}),
        _x("kernel", "orphan_kernel", 1712195495519700, 1, pid=0, tid=7, device=0, stream=7, correlation=99),
        _x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 1712195495519620, 2, pid=0, tid=7, device=0, stream=7,
           correlation=12, bytes=1024),
        _x("gpu_memset", "Memset (Device)", 1712195495519630, 1, pid=0, tid=7, device=0, stream=7, bytes=64),
        _x("gpu_user_annotation", "forward", 1712195495519600, 100, pid=0, tid=7),
        {"ph": "f", "id": 11, "pid": 0, "tid": 7, "ts": 1712195495519650, "cat": "ac2g", "name": "ac2g"},
    ]  # fmt: skip
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150_000_000_000, "computeMajor": 9,
                              "computeMinor": 0, "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
        "cuda_runtime_version": 13000,
        "traceEvents": events,
    }  # fmt: skip
    text = json.dumps(doc)
    for key, value in {
        "TS0": "1712195495519589.047",
        "DUR0": "20.5",
        "TS1": "1712195495519650.999",
        "DUR1": "4.9285",
    }.items():
        text = text.replace(f'"{key}"', value)
    return text


def test_hand_built_gpu_trace(tmp_path):
    trace = read_kineto(_write(tmp_path, _gpu_doc(), "t.json.gz", gz=True))
    k = trace.kernels.set_index("name", drop=False)
    gemm = k.loc["void gemm<float>(float*)"]
    assert gemm["start_ns"] == 1712195495519650999  # exact: float64 would give ...650999 +- 128
    assert gemm["duration_ns"] == 4928  # 4928.5 rounds half to even
    assert gemm["end_ns"] == 1712195495519655927
    # launching process from the runtime call with the same correlation id, not the GPU event's pid (device)
    assert (gemm["pid"], gemm["device_id"], gemm["stream_id"], gemm["correlation_id"]) == (300, 0, 7, 11)
    assert (gemm["grid_x"], gemm["grid_y"], gemm["grid_z"], gemm["block_x"]) == (4, 2, 1, 128)
    assert (gemm["registers_per_thread"], gemm["shared_memory_bytes"]) == (32, 4096)
    assert k.loc["orphan_kernel", "pid"] == 100  # no runtime row: the process with the cpu_ops
    assert list(trace.kernels["name"]) == ["void gemm<float>(float*)", "orphan_kernel"]  # sorted by start
    m = trace.memops.set_index("kind")
    assert m.loc["memcpy", "name"] == "[CUDA memcpy Host-to-Device]"
    assert (m.loc["memcpy", "size_bytes"], m.loc["memcpy", "pid"], m.loc["memcpy", "correlation_id"]) == (1024, 100, 12)
    assert (m.loc["memset", "name"], m.loc["memset", "size_bytes"], m.loc["memset", "correlation_id"]) == (
        "[CUDA memset]",
        64,
        -1,
    )
    assert set(trace.runtime["tid"]) == {101} and sorted(trace.runtime["pid"]) == [100, 300]
    assert trace.nvtx.empty  # gpu_user_annotation is Kineto's GPU projection, not a CPU range
    assert trace.meta["gpu_user_annotations"] == [
        {
            "name": "forward",
            "start_ns": 1712195495519600000,
            "end_ns": 1712195495519700000,
            "device_id": 0,
            "stream_id": 7,
        }
    ]
    g = trace.gpus.iloc[0]
    assert (g["name"], g["sm_count"], g["memory_bytes"], g["compute_capability"]) == (
        "NVIDIA H200",
        132,
        150_000_000_000,
        "9.0",
    )
    assert (trace.meta["rank"], trace.meta["world_size"], trace.meta["versions"]) == (
        3,
        8,
        {"cuda_runtime_version": 13000},
    )
    threads = trace.threads.set_index(["pid", "tid"])["thread_name"].to_dict()
    assert threads == {(100, 101): "thread 101 (pt_main_thread)", (0, 7): "stream 7"}
    assert trace.threads.set_index("tid").loc[101, "process_name"] == "python"


def test_old_format_categories(tmp_path):
    """PyTorch 1.8 traces: capitalized categories, string tids, ProfilerStep as an operator."""
    events = [
        _x("Operator", "ProfilerStep#5", 1000, 100, tid="1890023232"),
        _x("Operator", "aten::mm", 1010, 10, tid="1890023232"),
        _x("Runtime", "cudaLaunchKernel", 1011, 2, tid="1890023232", correlation=5),
        _x("Kernel", "sgemm", 1020, 3, pid=0, tid="stream 7", device=0, stream=7, correlation=5),
        _x("Memcpy", "Memcpy DtoH (Device -> Pageable)", 1030, 1, pid=0, tid="stream 7", device=0, bytes=8),
    ]
    trace = read_kineto(_write(tmp_path, {"schemaVersion": 1, "traceEvents": events}))
    assert list(trace.kernels["name"]) == ["sgemm"] and trace.kernels["pid"].tolist() == [100]
    assert trace.runtime["tid"].tolist() == [1890023232]
    assert trace.memops["name"].tolist() == ["[CUDA memcpy Device-to-Host]"]
    assert trace.nvtx[["name", "depth", "tid"]].values.tolist() == [["ProfilerStep#5", 0, 1890023232]]
    assert trace.gpus.empty


def test_nesting_depth_nests_per_thread(tmp_path):
    ua = "user_annotation"
    events = [
        _x(ua, "inner_b", 40, 10),  # out of order on purpose
        _x(ua, "same_start_child", 0, 30),  # starts with its parent, listed first: the longer one is the parent
        _x(ua, "outer", 0, 100),
        _x(ua, "grandchild", 5, 10),
        _x(ua, "sibling_touching", 30, 10),  # starts where the previous child ends: a sibling
        _x(ua, "inner_b_child", 41, 2),
        _x(ua, "after", 100, 5),  # starts where outer ends
        _x(ua, "other_thread", 10, 5, tid=200),
    ]
    trace = read_kineto(_write(tmp_path, {"traceEvents": events}))
    depth = trace.nvtx.set_index("name")["depth"].to_dict()
    assert depth == {
        "outer": 0,
        "same_start_child": 1,
        "grandchild": 2,
        "sibling_touching": 1,
        "inner_b": 1,
        "inner_b_child": 2,
        "after": 0,
        "other_thread": 0,
    }
    assert set(trace.nvtx["style"]) == {"push_pop"} and set(trace.nvtx["domain"]) == {""}
    assert (trace.nvtx["end_tid"] == -1).all()  # push/pop, as the nsys reader gives them
    assert trace.kernels.empty and trace.runtime.empty


# Trace layouts across PyTorch/Kineto versions, ROCm and CUDA graphs (hand-built, tests/data/kineto/README.md)

LAYOUT_DIR = FIXTURES / "kineto"
# By construction (README.md): layout, kernel count and summed kernel ns, memcpy/memset counts, per graph
# (Kineto "graph id", else the correlation id of the graph launch) the summed kernel ns.
LAYOUTS = {
    "array_capitalized_categories.json": dict(
        layout="array", kernels=2, kernel_ns=22_750, memcpy=1, memset=1, graphs={}
    ),
    "pt111_mixed_categories.json": dict(layout="object", kernels=2, kernel_ns=13_250, memcpy=1, memset=0, graphs={}),
    "legacy_autograd_cuda.json": dict(layout="array", kernels=3, kernel_ns=50_016, memcpy=0, memset=0, graphs={}),
    "rocm_roctracer.json": dict(layout="object", kernels=3, kernel_ns=25_440, memcpy=1, memset=1, graphs={}),
    "rocm_hip_graph.json": dict(layout="object", kernels=4, kernel_ns=21_875, memcpy=0, memset=0, graphs={701: 18_625}),
    "cuda_graph_launch.json": dict(
        layout="object", kernels=8, kernel_ns=77_500, memcpy=0, memset=0, graphs={601: 36_875, 655: 36_875}
    ),
    "cuda_graph_id_args.json": dict(
        layout="object", kernels=6, kernel_ns=23_500, memcpy=0, memset=0, graphs={12: 19_500, 13: 3_000}
    ),
}
# What the test counts as GPU work in the raw JSON, written out here rather than taken from the reader.
RAW_KERNEL_CATS = {"kernel", "Kernel"}
RAW_NOT_KERNELS = {"CopyHostToDevice": "memcpy", "FillBuffer": "memset", "Marker": None}  # roctracer HIP ops
RAW_GRAPH_LAUNCHES = {"cudaGraphLaunch", "hipGraphLaunch"}


def _raw_layout(path: Path) -> dict:
    """Kernel ns, memop counts and graph ns straight from the JSON text (plain json, Decimal times)."""
    doc = json.loads(path.read_text(), parse_float=Decimal)
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    done = [e for e in events if e.get("ph") == "X"]
    kernels = [
        e
        for e in done
        if (e.get("cat") in RAW_KERNEL_CATS or e.get("pid") == "CUDA functions") and e["name"] not in RAW_NOT_KERNELS
    ]
    hip = Counter(RAW_NOT_KERNELS[e["name"]] for e in done if e.get("cat") == "kernel" and e["name"] in RAW_NOT_KERNELS)
    launches = {e["args"]["correlation"] for e in done if e["name"] in RAW_GRAPH_LAUNCHES}
    graphs: Counter = Counter()
    for e in kernels:
        args = e.get("args", {})
        graph = args.get("graph id") or (args.get("correlation") if args.get("correlation") in launches else None)
        if graph:
            graphs[graph] += _ns(e["dur"])
    return {
        "layout": "array" if isinstance(doc, list) else "object",
        "kernels": len(kernels),
        "kernel_ns": sum(_ns(e["dur"]) for e in kernels),
        "memcpy": sum(1 for e in done if e.get("cat") in ("Memcpy", "gpu_memcpy")) + hip["memcpy"],
        "memset": sum(1 for e in done if e.get("cat") in ("Memset", "gpu_memset")) + hip["memset"],
        "graphs": dict(graphs),
    }


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layouts_read_as_the_raw_json_says(name):
    path = LAYOUT_DIR / name
    expected = LAYOUTS[name]
    assert _raw_layout(path) == expected  # the hand-built file holds what its README entry says
    trace = read_kineto(path)
    k = trace.kernels
    assert trace.meta["layout"] == expected["layout"]
    assert (len(k), int(k["duration_ns"].sum())) == (expected["kernels"], expected["kernel_ns"])
    kinds = trace.memops["kind"].astype(str)
    assert ((kinds == "memcpy").sum(), (kinds == "memset").sum()) == (expected["memcpy"], expected["memset"])
    graphs = k[k["graph_id"] >= 0].groupby("graph_id")["duration_ns"].sum().to_dict()
    assert graphs == expected["graphs"]
    assert (k["graph_id"] == -1).sum() == len(k) - k["graph_id"].isin(list(expected["graphs"])).sum()
    assert looks_like_kineto(path)


def test_old_array_trace_with_capitalized_categories():
    """The array layout of the issue: every table filled, GPU events tied to the launching process."""
    trace = read_kineto(LAYOUT_DIR / "array_capitalized_categories.json")
    sgemm = trace.kernels.iloc[0]
    assert (sgemm["name"], sgemm["start_ns"], sgemm["duration_ns"]) == ("volta_sgemm_128x64_nn", 1_030_500, 20_250)
    assert (sgemm["pid"], sgemm["device_id"], sgemm["stream_id"], sgemm["correlation_id"]) == (2104, 0, 7, 41)
    assert (sgemm["grid_x"], sgemm["grid_y"], sgemm["block_x"], sgemm["registers_per_thread"]) == (2, 4, 256, 128)
    assert trace.memops["name"].tolist() == ["[CUDA memcpy Host-to-Device]", "[CUDA memset]"]
    assert trace.memops["size_bytes"].tolist() == [4096, 512] and set(trace.memops["pid"]) == {2104}
    assert trace.runtime["name"].tolist() == [
        "cudaLaunchKernel",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "cudaLaunchKernel",
    ]
    assert trace.nvtx["name"].tolist() == ["ProfilerStep#3"]  # logged as an Operator then
    assert [g["name"] for g in trace.meta["gpu_user_annotations"]] == ["ProfilerStep#3"]  # cat "User" then
    assert trace.meta["schema_version"] is None and trace.meta["main_pid"] == 2104


def test_pytorch_1_9_to_1_11_categories():
    trace = read_kineto(LAYOUT_DIR / "pt111_mixed_categories.json")
    assert trace.nvtx[["name", "depth"]].values.tolist() == [["ProfilerStep#8", 0], ["forward", 1]]
    assert [g["name"] for g in trace.meta["gpu_user_annotations"]] == [
        "forward",
        "ProfilerStep#8",
    ]  # gpu_user_Annotation
    assert set(trace.kernels["pid"]) == {77} and trace.gpus["name"].tolist() == ["NVIDIA A100-SXM4-40GB"]
    assert trace.meta["event_counts"]["python_function"] == 1  # counted, feeds no table


def test_legacy_autograd_profiler_kernels():
    """torch <= 1.7 (use_cuda=True): kernels under pid "CUDA functions", device in tid, no stream, no launch link."""
    k = read_kineto(LAYOUT_DIR / "legacy_autograd_cuda.json").kernels
    assert k[["name", "device_id", "stream_id", "correlation_id"]].values.tolist() == [
        ["implicit_convolve_sgemm", 0, -1, -1],
        ["elementwise_kernel", 0, -1, -1],
        ["elementwise_kernel", 1, -1, -1],
    ]
    assert k["start_ns"].tolist() == [130_817, 175_500, 180_100]


def test_rocm_roctracer_hip_ops_are_not_kernels():
    trace = read_kineto(LAYOUT_DIR / "rocm_roctracer.json")
    k = trace.kernels
    assert "Marker" not in set(k["name"]) and trace.meta["not_kernels"] == {"Marker": 1}
    assert k["correlation_id"].tolist() == [11, 12, 13] and set(k["pid"]) == {3141} and set(k["device_id"]) == {2}
    assert (k.iloc[0]["grid_x"], k.iloc[0]["block_x"]) == (256, 256)
    assert set(trace.runtime["name"]) >= {"hipExtModuleLaunchKernel", "hipLaunchKernel", "hipModuleLaunchKernel"}
    m = trace.memops
    assert m[["name", "size_bytes", "correlation_id"]].values.tolist() == [
        ["[CUDA memcpy Host-to-Device]", 65536, 14],
        ["[CUDA memset]", -1, 15],
    ]


def test_graph_ids_from_graph_launch_correlation():
    for name in ("cuda_graph_launch.json", "rocm_hip_graph.json"):
        assert read_kineto(LAYOUT_DIR / name).meta["graph_id_source"] == "graph launch correlation"
    k = read_kineto(LAYOUT_DIR / "cuda_graph_launch.json").kernels
    in_graph = k[k["graph_id"] >= 0]
    assert (in_graph["graph_id"] == in_graph["correlation_id"]).all()  # the launch's correlation id
    assert k.loc[k["graph_id"] == -1, "name"].tolist() == [
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)",
        "triton_poi_fused_mul_0",  # cuLaunchKernel (cuda_driver): launched on its own
    ]
    assert read_kineto(LAYOUT_DIR / "pt111_mixed_categories.json").meta["graph_id_source"] is None


def test_graph_ids_from_kineto_graph_id_args(tmp_path):
    trace = read_kineto(LAYOUT_DIR / "cuda_graph_id_args.json")
    assert trace.meta["graph_id_source"] == "kineto graph id"
    assert trace.kernels["graph_id"].tolist() == [-1, 12, 12, 12, 12, 13]  # "graph id": 0 is no graph
    # a graph-launched kernel whose args say 0 (no graph recorded) still counts, under its launch's correlation
    doc = json.loads((LAYOUT_DIR / "cuda_graph_id_args.json").read_text())
    doc["traceEvents"][-1]["args"]["graph id"] = 0
    trace = read_kineto(_write(tmp_path, doc))
    assert trace.kernels["graph_id"].tolist() == [-1, 12, 12, 12, 12, 4]
    assert trace.meta["graph_id_source"] == "kineto graph id + graph launch correlation"


@pytest.mark.parametrize("path", REAL)
def test_real_traces_have_graph_ids_only_where_graphs_were_launched(path):
    ref = _reference(path)
    launched = any(e["name"].startswith(("cudaGraphLaunch", "cuGraphLaunch")) for c in ("cuda_runtime", "cuda_driver")
                   for e in ref["cat"].get(c, []))  # fmt: skip
    trace = _read(path)
    assert (trace.kernels["graph_id"] >= 0).any() == launched
    assert trace.meta["layout"] == "object"


def test_array_without_closing_bracket(tmp_path):
    """The Trace Event Format lets an array trace end without "]" (a tracer stopped mid-run)."""
    text = (LAYOUT_DIR / "legacy_autograd_cuda.json").read_text().rstrip()
    assert text.endswith("]")
    trace = read_kineto(_write(tmp_path, text[:-1].rstrip() + ",\n"))
    assert trace.meta["layout"] == "array without its closing ]" and len(trace.kernels) == 3
    cut = text[: text.rindex('"dur"')]  # cut inside an event: truncated, not a layout
    with pytest.raises(InputError, match="truncated"):
        read_kineto(_write(tmp_path, cut, "cut.json"))


def test_legacy_autograd_profiler_trace_recorded_here(tmp_path):
    """torch.autograd.profiler's own exporter (no Kineto): the array of "CPU functions" events; CPU only."""
    torch = pytest.importorskip("torch")
    from torch.autograd import profiler_legacy

    out = tmp_path / "legacy.json"
    x = torch.ones(8, 8)
    with profiler_legacy.profile() as prof:
        with torch.autograd.profiler.record_function("forward"):
            for _ in range(3):
                x = (x @ x) / 8
    prof.export_chrome_trace(str(out))
    raw = json.loads(out.read_text())
    assert isinstance(raw, list) and looks_like_kineto(out)
    trace = read_kineto(out)
    assert trace.kernels.empty and trace.runtime.empty and trace.memops.empty
    assert trace.meta["layout"] == "array"
    assert trace.meta["event_counts"] == {}  # no cat at all: the pid told the reader what the events are
    assert sum(1 for e in raw if e["name"] == "aten::matmul") == 3


# Folders and the report command


def _report(*args):
    from click.testing import CliRunner

    from profiler_kit.cli import cli

    return CliRunner().invoke(cli, ["report", *map(str, args)])


def test_folder_reads_array_traces_and_lists_unreadable_ones(tmp_path):
    from profiler_kit.analyze.sources import discover

    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(LAYOUT_DIR / "array_capitalized_categories.json", runs / "old.json")
    (runs / "results.json").write_text('{"step_ms": [1.5, 1.4]}')  # not a trace: passed over
    (runs / "sizes.json").write_text("[1, 2]")
    assert [s.path.name for s in discover([runs])] == ["old.json"]
    res = _report(runs, "-o", tmp_path / "out", "--no-html")
    assert res.exit_code == 0, res.output
    assert "## old.json" in (tmp_path / "out" / "report.md").read_text()
    # a gzip stream cut in its header, and a file named as torch.profiler names traces: listed with their reason
    (runs / "cut.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}')[:10])
    (runs / "worker0.1700000000.pt.trace.json").write_text("<html>not a trace</html>")
    res = _report(runs, "-o", tmp_path / "out2", "--no-html")
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    skipped = sorted(ln for ln in res.stderr.splitlines() if ln.startswith("skipped "))
    assert [ln.split(": ", 1)[0] for ln in skipped] == [
        f"skipped {runs / 'cut.json.gz'}",
        f"skipped {runs / 'worker0.1700000000.pt.trace.json'}",
    ]
    assert "truncated or corrupt gzip" in skipped[0] and "not valid JSON" in skipped[1]
    assert "## old.json" in (tmp_path / "out2" / "report.md").read_text()


def test_report_on_a_cpu_only_array_trace_says_there_is_no_gpu_activity(tmp_path):
    doc = [
        {"name": "forward", "ph": "X", "ts": 10.5, "dur": 100.25, "tid": 1, "pid": "CPU functions", "args": {}},
        {"name": "aten::mm", "ph": "X", "ts": 20.0, "dur": 50.0, "tid": 1, "pid": "CPU functions", "args": {}},
    ]
    res = _report(_write(tmp_path, doc, "cpu.json"), "-o", tmp_path / "out", "--no-html")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "out" / "report.md").read_text()
    assert "holds no GPU kernels" in md and "GPU was busy" not in md and "Traceback" not in res.output


# CPU traces from torch.profiler


EXPECTED_PER_STEP = {
    "step": 1,
    "forward": 1,
    "scaled dot product attention": 2,
    "computing attention scores": 2,
    "computing softmax": 2,
    "final matmul": 2,
    "optimizer": 1,
}
EXPECTED_DEPTH = {"step": 1, "forward": 2, "scaled dot product attention": 3, "computing attention scores": 4,
                  "computing softmax": 4, "final matmul": 4, "optimizer": 2}  # fmt: skip


def test_committed_cpu_fixture():
    trace = read_kineto(CPU_FIXTURE)
    names = trace.nvtx["name"].astype(str)
    steps = names[names.str.startswith("ProfilerStep#")]
    assert len(steps) == 2
    counts = names[~names.str.startswith("ProfilerStep#")].value_counts().to_dict()
    assert counts == {k: 2 * v for k, v in EXPECTED_PER_STEP.items()}
    depth = trace.nvtx.drop_duplicates("name").set_index("name")["depth"].to_dict()
    assert {k: v for k, v in depth.items() if not k.startswith("ProfilerStep#")} == EXPECTED_DEPTH
    assert trace.kernels.empty and trace.gpus.empty and trace.memops.empty
    assert (trace.nvtx["pid"] == trace.meta["main_pid"]).all()
    assert trace.meta["event_counts"]["cpu_op"] > 0
    assert looks_like_kineto(CPU_FIXTURE)


def test_trace_recorded_here(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    out = tmp_path / "rank0.pt.trace.json"
    x = torch.ones(16, 16)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3),
        on_trace_ready=lambda p: p.export_chrome_trace(str(out)),
    ) as prof:
        for _ in range(5):
            with record_function("forward"):
                for _ in range(3):
                    with record_function("final matmul"):
                        x = (x @ x) / 16
            prof.step()
    trace = read_kineto(out)
    names = trace.nvtx["name"].astype(str)
    assert sorted(n for n in names if n.startswith("ProfilerStep#")) == [
        "ProfilerStep#2",
        "ProfilerStep#3",
        "ProfilerStep#4",
    ]
    assert names.value_counts()[["forward", "final matmul"]].tolist() == [3, 9]
    assert trace.nvtx.groupby("name", observed=True)["depth"].max()[["forward", "final matmul"]].tolist() == [1, 2]
    mm = json.loads(out.read_text())
    n_mm = sum(1 for e in mm["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == "aten::matmul")
    assert n_mm == 9 and trace.meta["event_counts"]["cpu_op"] >= n_mm


# Bad input


def _cpu_bytes() -> bytes:
    return gzip.decompress(CPU_FIXTURE.read_bytes())


BAD = {
    "missing": None,
    "directory": "dir",
    "empty": b"",
    "text": b"hello, not json\n",
    "binary": bytes(range(256)) * 4,
    "truncated_gzip": "cut_gz",
    "truncated_json": "cut_json",
    "json_list": b"[]",
    "no_trace_events": b'{"schemaVersion": 1}',
    "trace_events_not_list": b'{"traceEvents": {}}',
    "no_events": b'{"traceEvents": []}',
    "metadata_only": json.dumps(
        {
            "traceEvents": [
                {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
                {
                    "ph": "X",
                    "cat": "Trace",
                    "name": "PyTorch Profiler (0)",
                    "pid": "Spans",
                    "tid": "x",
                    "ts": 1,
                    "dur": 2,
                },
            ]
        }
    ).encode(),  # fmt: skip
    "non_object_event": b'{"traceEvents": [1, 2]}',
    "kernel_without_ts": json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "dur": 1}]}).encode(),
    "kernel_bad_ts": json.dumps(
        {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1}]}
    ).encode(),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_input_error(tmp_path, case):
    content = BAD[case]
    path = tmp_path / f"{case}.json.gz"
    if content == "dir":
        path.mkdir()
    elif content == "cut_gz":
        raw = CPU_FIXTURE.read_bytes()
        path.write_bytes(raw[: len(raw) // 2])
    elif content == "cut_json":
        path = tmp_path / f"{case}.json"
        raw = _cpu_bytes()
        path.write_bytes(raw[: len(raw) // 2])
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError) as err:
        read_kineto(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    if case in ("truncated_gzip", "truncated_json"):
        assert "truncated" in message


def test_looks_like_kineto_rejects_other_files(tmp_path):
    db = tmp_path / "x.sqlite"
    sqlite3.connect(db).execute("CREATE TABLE StringIds (id INTEGER, value TEXT)").connection.commit()
    assert not looks_like_kineto(db)
    assert not looks_like_kineto(tmp_path / "missing.json")
    assert not looks_like_kineto(tmp_path)
    assert not looks_like_kineto(_write(tmp_path, "[1, 2]", "list.json"))
    assert not looks_like_kineto(_write(tmp_path, '[{"a": 1}]', "objects.json"))
    assert looks_like_kineto(_write(tmp_path, '[{"name": "x", "ph": "X"}]', "array.json"))
    (tmp_path / "bad.json.gz").write_bytes(b"\x1f\x8b garbage")
    assert not looks_like_kineto(tmp_path / "bad.json.gz")
    assert looks_like_kineto(_write(tmp_path, {"traceEvents": []}, "plain.json"))
