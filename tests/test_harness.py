"""Harness statistics, OOM rows, the precision experiments and calibration, on the CPU."""

from __future__ import annotations

import json
import statistics

import pytest
import torch
from profiler_kit.workloads import calibrate, harness, precision
from profiler_kit.workloads.models import RunSpec


@pytest.fixture(scope="module")
def train_row():
    return harness.run_spec(RunSpec(size="tiny", ctx=16, batch=2, mode="train", warmup=1, steps=3, device="cpu"))


def test_phase_stats_are_consistent(train_row):
    assert train_row["status"] == "ok"
    phases = train_row["phases"]
    assert set(phases) == {"forward", "backward", "optimizer", "step", "step_wall"}
    for name, s in phases.items():
        assert s["n"] == 3, name
        assert s["min"] <= s["mean"] <= s["max"]
        assert s["std"] >= 0
        assert s["mean"] == pytest.approx(statistics.fmean(train_row["times_ms"][name]))
    # phases nest inside the step, which nests inside the wall-clock step
    for i in range(3):
        parts = sum(train_row["times_ms"][p][i] for p in ("forward", "backward", "optimizer"))
        assert parts <= train_row["times_ms"]["step"][i] <= train_row["times_ms"]["step_wall"][i]
    assert train_row["model"]["params"] > 0
    json.dumps(train_row)  # rows are plain JSON


def test_forward_mode_has_only_forward_phases():
    row = harness.run_spec(RunSpec(size="tiny", ctx=8, batch=1, mode="forward", warmup=0, steps=2, device="cpu"))
    assert set(row["phases"]) == {"forward", "step", "step_wall"}


def test_stats_against_statistics_module():
    values = [3.0, 1.0, 4.0, 1.5]
    s = harness.stats(values)
    assert s == {"n": 4, "mean": 2.375, "std": statistics.stdev(values), "min": 1.0, "max": 4.0}
    assert harness.stats([2.0])["std"] == 0.0
    assert harness.stats([])["n"] == 0


class _OOMWorkload:
    def step(self, timer=None):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_oom_becomes_a_row(monkeypatch, train_row):
    monkeypatch.setattr(harness, "build_workload", lambda spec: _OOMWorkload())
    row = harness.run_spec(RunSpec(size="tiny", ctx=8, mode="train", warmup=1, steps=1, device="cpu"))
    assert row["status"] == "oom"
    assert "OutOfMemoryError" in row["error"]
    assert "phases" not in row
    table = harness.markdown_table([train_row, row])
    lines = table.splitlines()
    assert len(lines) == 4 and "| oom" in lines[3] and "| ok" in lines[2]


def test_jsonl_rows_roundtrip(tmp_path, train_row):
    path = tmp_path / "rows.jsonl"
    harness.write_jsonl([train_row, train_row], path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["phases"] == train_row["phases"]


def test_accumulation_experiment():
    rows = {r["case"]: r for r in precision.accumulation()}
    assert rows["float32"]["abs_error"] < 1e-3
    assert rows["float16"]["abs_error"] > 1e-2  # a float16 accumulator loses visibly
    assert rows["float32 += float16"]["abs_error"] < rows["float16"]["abs_error"]


def test_autocast_dtypes_cpu_bf16():
    seen = {r["tensor"]: r["dtype"] for r in precision.autocast_dtypes("cpu", torch.bfloat16)}
    assert seen["parameters (fc1.weight)"] == "float32"
    assert seen["fc1 output"] == "bfloat16"
    assert seen["layernorm output"] in {"float32", "bfloat16"}  # CUDA autocast keeps layer_norm fp32; CPU does not
    assert seen["logits"] == "bfloat16"
    assert seen["loss"] == "float32"
    assert seen["gradient (fc1.weight.grad)"] == "float32"


def test_warmup_study_rows():
    spec = RunSpec(size="tiny", ctx=8, batch=1, mode="forward", steps=2, device="cpu")
    rows = precision.warmup_study(spec, warmups=(0, 1))
    assert [r["warmup"] for r in rows] == [0, 1]
    assert all(r["step_ms_n"] == 2 and r["step_ms_min"] <= r["step_ms_mean"] <= r["step_ms_max"] for r in rows)


def test_calibration_cpu():
    cal = calibrate.calibrate("cpu", n=128, copy_bytes=2**20)
    assert set(cal["gemm"]) == {"fp32", "bf16"}
    assert all(g["tflops"] > 0 for g in cal["gemm"].values())
    assert cal["copy"]["bytes"] == 2 * 2**20 and cal["copy"]["bytes_per_s"] > 0
