"""GPU memory from the PyTorch profiler's allocator counters (``[memory]`` events of profile_memory=True)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from profiler_kit.analyze.kineto import read_kineto
from profiler_kit.analyze.memory_counters import memory_counter_timeline, summarize_memory_counters

from profiler_kit.cli import cli

ROOT = Path(__file__).resolve().parent.parent
QWEN = ROOT.parent / "shared/data/kineto/AMD-AGI__TraceLens__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def _event(ts_us: float, allocated: int, reserved: int, delta: int, device_type: int = 1, device: int = 0) -> dict:
    args = {"Total Allocated": allocated, "Total Reserved": reserved, "Bytes": delta, "Device Id": device,
            "Device Type": device_type, "Addr": 1}  # fmt: skip
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts_us,
            "args": args}  # fmt: skip


def _trace(tmp_path: Path, memory: list[dict]) -> Path:
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1000.0, "dur": 5.0,
              "args": {"device": 0, "stream": 7, "correlation": 1}}  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [kernel, *memory]}))
    return path


def test_peaks_count_the_level_before_a_leading_free(tmp_path):
    """A trace that opens with a free had more allocated before it than any event shows after it."""
    events = [
        _event(1001.0, 900, 4096, -100),  # 1000 allocated before this free
        _event(1002.0, 950, 4096, 50),
        _event(1003.0, 10, 2048, 0, device_type=0),  # CPU: left out
        _event(1004.0, 500, 8192, -450, device=1),
    ]
    trace = read_kineto(_trace(tmp_path, events))
    assert trace.memory_counters["device_id"].tolist() == [0, 0, 1]
    peaks = summarize_memory_counters(trace.memory_counters, start_ns=1_000_000).set_index("device_id")
    assert peaks.loc[0, "allocated_before_bytes"] == 1000 and peaks.loc[0, "peak_allocated_bytes"] == 1000
    assert peaks.loc[0, "peak_allocated_at_ns"] == 1_000 and peaks.loc[0, "peak_reserved_bytes"] == 4096
    assert peaks.loc[1, "peak_allocated_bytes"] == 950 and peaks.loc[1, "peak_reserved_bytes"] == 8192
    assert peaks.loc[1, "peak_reserved_at_ns"] == 4_000


def test_timeline_keeps_every_peak_when_thinned():
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(1)
    alloc = rng.integers(0, 1000, 10_000)
    alloc[7_777] = 5_000
    counters = pd.DataFrame({"time_ns": np.arange(10_000) * 10, "device_id": 0, "allocated_bytes": alloc,
                             "reserved_bytes": 8_000, "delta_bytes": 0})  # fmt: skip
    line = memory_counter_timeline(counters, start_ns=0, points=100)
    allocated = line[line["series"] == "cuda:0 allocated"]
    assert len(allocated) == 100 and allocated["memory_bytes"].max() == 5_000
    assert allocated.loc[allocated["memory_bytes"].idxmax(), "time_ns"] == 77_770


@pytest.mark.skipif(not QWEN.exists(), reason="../shared/data absent")
def test_real_trace_peaks_equal_the_raw_json(tmp_path):
    """On a real trace (HF Qwen inference on an H100, profile_memory=True): peaks equal a plain pass over the JSON."""
    events = json.loads(gzip.decompress(QWEN.read_bytes()))["traceEvents"]
    gpu = [e["args"] for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") != 0]
    first = min(gpu, key=lambda a: a["Ev Idx"])
    want_alloc = max(max(a["Total Allocated"] for a in gpu), first["Total Allocated"] - first["Bytes"])
    want_reserved = max(a["Total Reserved"] for a in gpu)
    res = CliRunner().invoke(cli, ["report", str(QWEN), "-o", str(tmp_path), "--format", "json"])
    assert res.exit_code == 0, res.output
    (table,) = tmp_path.glob("report.*_memory_counters.json")
    (row,) = json.loads(table.read_text())["rows"]
    assert row["events"] == len(gpu)
    assert (row["peak_allocated_bytes"], row["peak_reserved_bytes"]) == (want_alloc, want_reserved)


def test_report_says_nothing_of_counters_without_them(tmp_path):
    res = CliRunner().invoke(cli, ["report", str(ROOT / "examples/kineto"), "-o", str(tmp_path), "--no-html"])
    assert res.exit_code == 0, res.output
    assert "profiler counters" not in (tmp_path / "report.md").read_text()
