"""Repeating kernel sequences and the ops that launched them (analyze/sequences.py): a hand-built trace with
the answer worked out by hand, then a real Kineto trace against a walk over its raw JSON."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from profiler_kit.analyze.breakdown import gpu_ops
from profiler_kit.analyze.kineto import read_kineto
from profiler_kit.analyze.sequences import kernel_sequences, launch_ranges
from profiler_kit.analyze.tables import KERNELS, NVTX_RANGES, RUNTIME, Trace

from profiler_kit.build_findings import diagnose
from tests.conftest import SHARED_DATA
from tests.hand_tables import hand_table


def hand_trace() -> Trace:
    """Thread 1 runs block() three times, each as ops aten::a, aten::b, aten::c inside a range "block" inside
    ProfilerStep#i; each op launches one kernel (ka, kb, kc: 10, 20, 30 ns) on stream 7. A fourth kernel kd
    follows the second block, launched from thread 2 inside "other". The third block's kc has no launch
    in the trace.

    Kernel order on stream 7: ka kb kc | ka kb kc kd | ka kb kc. Windows of 3 that repeat: ka-kb-kc three times
    (60 ns each: 180 ns), the others once. Launches known for blocks 1 and 2 only: launched_by
    "aten::a -> aten::b -> aten::c", op_stack "block" (ProfilerStep#i left out) in both of them.
    """
    kernels, runtime, ops, nvtx = [], [], [], []
    t, corr = 0, 0
    for block in range(3):
        base = block * 1000
        nvtx.append((f"ProfilerStep#{block}", base, base + 900, 1))
        nvtx.append(("block", base + 10, base + 800, 1))
        for i, (op, kern, dur) in enumerate([("aten::a", "ka", 10), ("aten::b", "kb", 20), ("aten::c", "kc", 30)]):
            corr += 1
            s = base + 100 + 100 * i
            ops.append((op, s, s + 50, 1))
            if not (block == 2 and kern == "kc"):
                runtime.append({"start_ns": s + 10, "end_ns": s + 20, "correlation_id": corr, "tid": 1})
            t = base + 400 + 40 * i
            kernels.append({"start_ns": t, "end_ns": t + dur, "name": kern, "correlation_id": corr})
        if block == 1:
            corr += 1
            runtime.append({"start_ns": base + 455, "end_ns": base + 460, "correlation_id": corr, "tid": 2})
            nvtx.append(("other", base + 450, base + 470, 2))
            kernels.append({"start_ns": base + 600, "end_ns": base + 605, "name": "kd", "correlation_id": corr})
    kern = [k | {"demangled_name": k["name"], "device_id": 0, "stream_id": 7, "pid": 1} for k in kernels]
    rt = [r | {"name": "cudaLaunchKernel", "pid": 1} for r in runtime]
    ranges = [{"name": n, "start_ns": s, "end_ns": e, "pid": 1, "tid": tid, "style": "push_pop", "depth": 0}
              for n, s, e, tid in nvtx]  # fmt: skip
    trace = Trace(
        kernels=hand_table(kern, KERNELS), runtime=hand_table(rt, RUNTIME), nvtx=hand_table(ranges, NVTX_RANGES)
    )
    trace.meta["cpu_op_ranges"] = pd.DataFrame(ops, columns=["name", "start_ns", "end_ns", "tid"]).assign(pid=1)
    return trace


def test_launchers_by_hand():
    trace = hand_trace()
    ops = gpu_ops(trace)
    ranges = launch_ranges(trace.meta["cpu_op_ranges"], trace.nvtx)
    assert not ranges["name"].str.startswith("ProfilerStep").any()
    seq = kernel_sequences(ops, lengths=(3,), runtime=trace.runtime, ranges=ranges)
    top = seq.iloc[0]
    assert (top["sequence"], top["occurrences"], top["total_ns"]) == ("ka -> kb -> kc", 3, 180)
    assert (top["launched_by"], top["op_stack"], top["op_stack_frac"]) == (
        "aten::a -> aten::b -> aten::c",
        "block",
        1.0,
    )
    assert len(seq) == 1  # every other window occurs once
    # without the launch information, the same rows and no launcher columns
    plain = kernel_sequences(ops, lengths=(3,))
    assert plain.columns.tolist() == seq.columns.tolist()[: len(plain.columns)]
    assert "launched_by" not in plain


def test_launchers_across_threads_have_no_common_stack():
    """kb -> kc -> kd: once only, so look at length 2 windows kc -> kd (once) and ka -> kb (3 times)."""
    trace = hand_trace()
    ops = gpu_ops(trace)
    seq = kernel_sequences(ops, lengths=(2,), runtime=trace.runtime, ranges=launch_ranges(trace.meta["cpu_op_ranges"]))
    by_seq = seq.set_index("sequence")
    assert by_seq.loc["ka -> kb", "launched_by"] == "aten::a -> aten::b"
    assert by_seq.loc["ka -> kb", "op_stack"] == "-"  # cpu ops only: no range encloses both launches
    # kb -> kc: the third block's kc has no launch, so two of the three occurrences tell
    assert by_seq.loc["kb -> kc", "op_stack_frac"] == 1.0


def test_no_window_on_one_stream():
    """Every window of two crosses streams (one kernel per stream): no sequence, and no error while attributing
    launches (the fixture trace of the CLI tests once failed there)."""
    trace = hand_trace()
    trace.kernels["stream_id"] = np.arange(len(trace.kernels))
    ranges = launch_ranges(trace.meta["cpu_op_ranges"], trace.nvtx)
    seq = kernel_sequences(gpu_ops(trace), lengths=(2,), runtime=trace.runtime, ranges=ranges)
    assert seq.empty and "launched_by" in seq


def test_sequences_in_the_report_tables():
    trace = hand_trace()
    tables = diagnose(trace, gpu_ops(trace))
    row = tables["sequences"].set_index("sequence").loc["ka -> kb -> kc"]
    assert row["launched_by"] == "aten::a -> aten::b -> aten::c" and row["op_stack"] == "block"


WORKER0 = SHARED_DATA / "kineto" / "pytorch__kineto__worker0.pt.trace.json.gz"


def test_launchers_on_a_real_trace_against_the_raw_json():
    """The top sequence of the tb_plugin ResNet50 trace: every occurrence of its kernel names found in each
    stream's kernel order in the raw JSON, each kernel's launch call found by correlation, the shortest
    cpu_op around that call on its thread named. The most common naming is ours."""
    if not WORKER0.exists():
        pytest.skip("../shared/data absent")
    trace = read_kineto(WORKER0)
    ops = gpu_ops(trace)
    seq = kernel_sequences(
        ops, lengths=(3,), runtime=trace.runtime, ranges=launch_ranges(trace.meta["cpu_op_ranges"], trace.nvtx)
    )
    top = seq.iloc[0]
    names = top["sequence"].split(" -> ")
    events = json.load(gzip.open(WORKER0))["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") == "Runtime" or e.get("cat") == "cuda_runtime"}
    cpu = defaultdict(list)
    for e in events:
        if e.get("cat") in ("cpu_op", "Operator") and e.get("ph") == "X":
            cpu[e["tid"]].append(e)
    streams = defaultdict(list)
    for e in events:
        if e.get("cat") in ("kernel", "Kernel"):
            streams[e["args"]["stream"]].append(e)

    def innermost(corr):
        c = calls.get(corr)
        if c is None:
            return None
        around = [o for o in cpu[c["tid"]] if o["ts"] <= c["ts"] < o["ts"] + o["dur"]]
        return min(around, key=lambda o: o["dur"])["name"] if around else "-"

    named, windows = Counter(), 0
    for kernels in streams.values():
        kernels.sort(key=lambda e: e["ts"])
        for i in range(len(kernels) - 2):
            window = kernels[i : i + 3]
            if [k["name"] for k in window] == names:
                windows += 1
                who = [innermost(k["args"]["correlation"]) for k in window]
                if None not in who:
                    named[who[0] if len(set(who)) == 1 else " -> ".join(who)] += 1  # one launcher named once
    assert windows == top["occurrences"]
    assert 0 < sum(named.values()) < windows  # this trace's first kernels have no launch call in it
    (mode, times), *_ = named.most_common()
    assert times / sum(named.values()) > 0.5  # a clear mode: a sample of 16 finds it
    assert top["launched_by"] == mode
    assert np.isfinite(top["op_stack_frac"])


HTA_SEQ = json.loads((Path(__file__).parent / "data" / "hta" / "hta_figures.json").read_text())["overlap_sequences"]


@pytest.mark.parametrize(
    "name", [n for n, v in HTA_SEQ["traces"].items() if v.get("kernel_sequences_top")], ids=lambda n: n[:40]
)
def test_matches_hta_frequent_sequences(name):
    """HTA's top pattern ("aten::" roots: the shallowest op and every kernel launched under it) is one of our
    sequences of its length: the same count and GPU time, and its root op closes our op stack."""
    path = SHARED_DATA / "kineto" / name
    if not path.exists():
        pytest.skip("../shared/data absent")
    top = HTA_SEQ["traces"][name]["kernel_sequences_top"][0]
    root, *kernels = top["pattern"].split("|")
    trace = read_kineto(path)
    ours = kernel_sequences(
        gpu_ops(trace),
        lengths=(len(kernels),),
        top=100_000,
        runtime=trace.runtime,
        ranges=launch_ranges(trace.meta["cpu_op_ranges"], trace.nvtx),
    ).set_index("sequence")
    row = ours.loc[" -> ".join(kernels)]
    assert row["occurrences"] == top["count"]
    assert row["total_ns"] == round(top["gpu_us"] * 1000)
    assert row["op_stack"].split(" > ")[-1] == root


def test_window_ids_keep_windows_with_a_nameless_kernel_apart():
    """Name code -1 (no name) must not make two different windows one key: (0, -1) and (-1, 1) once packed as
    0 * 2 - 1 = -1 and -1 * 2 + 1 = -1."""
    from profiler_kit.analyze.sequences import _window_ids

    ids = _window_ids(np.array([0, -1, 1, 0, -1], dtype=np.int64), 2)  # windows (0,-1) (-1,1) (1,0) (0,-1)
    assert ids.tolist() == [0, 1, 2, 0]
