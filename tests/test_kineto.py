"""Kineto reader: real GPU traces against an independent plain-json count, hand-built traces, bad input."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from analyze.errors import InputError
from analyze.kineto import looks_like_kineto, read_kineto
from analyze.projection import launches, project_nvtx, summarize_projection
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
    (tmp_path / "bad.json.gz").write_bytes(b"\x1f\x8b garbage")
    assert not looks_like_kineto(tmp_path / "bad.json.gz")
    assert looks_like_kineto(_write(tmp_path, {"traceEvents": []}, "plain.json"))
