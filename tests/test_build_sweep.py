"""Achieved throughput vs the GPU's ceilings: committed H200 runs, calibration lookup, storing it with runs."""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
import statistics
from pathlib import Path

import pytest
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.flops import forward_flops
from profiler_kit.workloads.models import RunSpec

from profiler_kit import run as run_mod
from profiler_kit import sweep as sweep_mod
from profiler_kit.build_sweep import NOT_MEASURED, build_sweep_sections, find_calibration, find_run_dirs, load_runs

SWEEP = Path(__file__).resolve().parent.parent / "reports" / "sweep"
TRACED = SWEEP / "traced"
SMALL = TRACED / "small_ctx512_train_bf16"
committed = pytest.mark.skipif(not SMALL.exists(), reason="committed GPU sweep absent")
TITLE = "Achieved throughput vs this GPU's ceilings"


def _ceiling_section(sections):
    return next(s for s in sections if s.title == TITLE)


@pytest.fixture(scope="module")
def traced_section():
    return _ceiling_section(build_sweep_sections(find_run_dirs([TRACED]), roots=[SWEEP]))


@committed
def test_throughput_row_per_traced_run_with_mfu_in_0_1(traced_section):
    table = traced_section.tables[0].df.set_index("size")
    # the committed sweep keeps the small run's trace only (the others' are in git history, see reports/sweep/README.md)
    runs = [m for m in load_runs(find_run_dirs([TRACED])) if (Path(m["_dir"]) / "trace.json.gz").exists()]
    assert runs and sorted(table.index) == sorted(m["spec"]["size"] for m in runs)
    cal = json.loads((SWEEP / "calibration.json").read_text())
    for m in runs:
        row = table.loc[m["spec"]["size"]]
        model = m["model"]
        assert row["ceilings"] == str(SWEEP / "calibration.json")
        assert row["peak_tflop_per_s"] == pytest.approx(cal["gemm"]["bf16"]["tflops"])
        assert 0 < row["mfu_frac"] < 1 and 0 < row["gemm_of_peak_frac"] < 1
        assert row["mfu_frac"] < row["gemm_of_peak_frac"]  # the step holds more than its GEMMs
        # every profiled step launches each of the 9 per-layer matmuls + lm_head once forward, twice backward
        assert row["gemm_kernels_per_step"] == 3 * (9 * model["layers"] + 1)
        assert row["model_tflop_per_step"] * 1e12 == pytest.approx(3 * forward_flops(model)["total"])
        step_ns = m["unprofiled"]["phases"]["step_wall"]["mean"] * 1e6
        assert row["mfu_frac"] == pytest.approx(
            row["model_tflop_per_step"] * 1e12 / (step_ns * 1e-9) / 1e12 / row["peak_tflop_per_s"]
        )
        assert row["adamw_gb_per_step"] * 1e9 == pytest.approx(23 * 4 * model["params"])
    assert not any(NOT_MEASURED in t for t in traced_section.text)


@committed
def test_gemm_kernel_time_matches_the_raw_trace(traced_section):
    row = traced_section.tables[0].df.set_index("size").loc["small"]
    with gzip.open(SMALL / "trace.json.gz", "rt") as fh:
        kernels = [e for e in json.load(fh)["traceEvents"] if e.get("cat") == "kernel"]
    # cuBLAS on Hopper names its GEMMs nvjet_*; every kernel of this trace is in a profiled step
    gemm_us = sum(e["dur"] for e in kernels if re.match(r"nvjet|.*gemm", e["name"]))
    assert row["gemm_kernel_ns"] == pytest.approx(gemm_us * 1e3 / row["profiled_steps"], rel=1e-6)


@committed
def test_whole_step_mfu_covers_timing_runs(traced_section):
    mfu = traced_section.tables[1].df
    ok = [m for m in load_runs(find_run_dirs([TRACED])) if m["status"] == "ok"]
    assert len(mfu) == len(ok) and mfu["mfu_frac"].between(0, 1, inclusive="neither").all()


@pytest.fixture
def uncalibrated(tmp_path):
    """A copy of the small traced run (run.json without calibration) in a folder without calibration.json."""
    if not SMALL.exists():
        pytest.skip("committed GPU sweep absent")
    root = tmp_path / "sweep"
    shutil.copytree(SMALL, root / "traced" / SMALL.name)
    return root


def test_without_calibration_the_table_says_not_measured(uncalibrated):
    section = _ceiling_section(build_sweep_sections(find_run_dirs([uncalibrated]), roots=[uncalibrated]))
    row = section.tables[0].df.iloc[0]
    assert row["ceilings"] == NOT_MEASURED
    assert math.isnan(row["peak_tflop_per_s"]) and math.isnan(row["mfu_frac"]) and math.isnan(row["gemm_of_peak_frac"])
    assert row["gemm_tflop_per_s"] > 0  # achieved throughput needs no ceiling
    assert any("not measured" in t for t in section.text)


def test_calibration_lookup_stops_at_the_given_root_and_checks_the_device(uncalibrated):
    meta = load_runs(find_run_dirs([uncalibrated]))[0]
    cal = json.loads((SWEEP / "calibration.json").read_text())
    (uncalibrated.parent / "calibration.json").write_text(json.dumps(cal))  # above the root: not used
    assert find_calibration(meta, [uncalibrated]) == (None, NOT_MEASURED)
    (uncalibrated / "calibration.json").write_text(json.dumps({**cal, "device": "NVIDIA H100 80GB HBM3"}))
    assert find_calibration(meta, [uncalibrated]) == (None, NOT_MEASURED)  # another GPU's ceilings
    (uncalibrated / "calibration.json").write_text(json.dumps(cal))
    found, source = find_calibration(meta, [uncalibrated])
    assert found == cal and source == str(uncalibrated / "calibration.json")
    assert find_calibration({**meta, "calibration": {**cal, "gemm": {}}}, [])[1] == "run.json"


def test_sweep_calibrate_stores_ceilings_with_every_run(tmp_path, monkeypatch):
    def cell(spec, backend, out_dir, memory=False, timeout=0):
        return run_mod.record(spec, "none", out_dir=out_dir, log=lambda m: None).meta

    monkeypatch.setattr(sweep_mod, "run_cell", cell)  # same record() as the subprocess, without its start-up
    specs = sweep_mod.grid(["tiny"], [8], ["train"], ["fp32"], device="cpu", warmup=0, steps=1, batch=1)
    sweep_mod.sweep(specs, "none", tmp_path, calibrate=True)
    cal = json.loads((tmp_path / "calibration.json").read_text())
    assert cal["device"] == "cpu" and cal["gemm"]["fp32"]["tflops"] > 0
    meta = json.loads((tmp_path / specs[0].run_id / "run.json").read_text())
    assert meta["calibration"] == cal
    assert meta["matmul"]["allow_tf32"] is False  # PyTorch's default, recorded for the fp32 ceiling choice
    section = _ceiling_section(build_sweep_sections([tmp_path / specs[0].run_id], roots=[tmp_path]))
    row = section.tables[0].df.iloc[0]  # whole-step MFU (no trace): against the CPU's own fp32 ceiling
    assert row["ceilings"] == "run.json" and row["peak_dtype"] == "fp32"
    assert row["peak_tflop_per_s"] == pytest.approx(cal["gemm"]["fp32"]["tflops"]) and row["mfu_frac"] > 0


def test_record_copies_the_cached_calibration_only_for_the_same_device(tmp_path):
    (tmp_path / "calibration.json").write_text(json.dumps({"device": "NVIDIA H200", "gemm": {}}))
    spec = RunSpec(size="tiny", ctx=8, batch=1, mode="forward", warmup=0, steps=1, device="cpu")
    meta = run_mod.record(spec, "none", out_dir=tmp_path, log=lambda m: None).meta
    assert "calibration" not in meta


ATTENTION_RECORDS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "attention" / "rec"


@pytest.mark.skipif(not ATTENTION_RECORDS.exists(), reason="committed attention records absent")
def test_attention_runs_are_told_apart_in_the_sweep_tables():
    """One attention layer per run: the size column names implementation and shape, not the LM default size."""
    sections = build_sweep_sections(find_run_dirs([ATTENTION_RECORDS]))
    timing = next(t for s in sections for t in s.tables if t.title.startswith("Forward, backward"))
    sizes = list(timing.df["size"])
    assert sorted(sizes) == sorted(f"attention {i} d{d} h16 b1" for i in ("sdpa", "triton") for d in (64, 128))


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda text: text[: len(text) // 2], "not JSON"),
        (lambda text: "[]", "the file should be a JSON object, found []"),
        (lambda text: text.replace('"ctx": 64', '"ctx": "64"'), "spec.ctx should be an integer, found '64'"),
        (lambda text: text.replace('"spec": {', '"spec": null, "x": {'), "spec should be a JSON object, found None"),
    ],
)
def test_damaged_run_json_is_one_clear_error(tmp_path, edit, says):
    """A run folder whose run.json was cut short or edited: the report names the file and the field."""
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parent.parent / "examples" / "nsys", run)
    (run / "run.json").write_text(edit((run / "run.json").read_text()))
    with pytest.raises(InputError, match=re.escape(f"{run / 'run.json'}: ") + ".*" + re.escape(says)):
        load_runs(find_run_dirs([tmp_path]))


def test_calibration_with_odd_values_is_one_clear_error(tmp_path):
    (tmp_path / "calibration.json").write_text(json.dumps({"device": "cpu", "gemm": {"fp32": {"tflops": "fast"}}}))
    with pytest.raises(InputError, match=r"gemm.fp32.tflops should be a number, found 'fast'"):
        find_calibration({"gpu": None, "_dir": tmp_path})


def _phases(times: dict[str, list[float]]) -> dict:
    return {
        p: {
            "n": len(v),
            "mean": statistics.mean(v),
            "std": statistics.stdev(v),
            "min": min(v),
            "max": max(v),
        }
        for p, v in times.items()
    }


def _meta(precision: str, forward: list[float]) -> dict:
    return {
        "status": "ok",
        "spec": {"size": "tiny", "ctx": 64, "mode": "train", "precision": precision},
        "unprofiled": {"phases": _phases({"forward": forward, "step_wall": [3 * f for f in forward]})},
    }


def test_unstable_cells_are_flagged_and_give_no_speedup():
    """A cell whose fp32 forward ranged 10.8-307.7 ms gave "bf16 speedup 49": flagged, and no ratio from it."""
    from profiler_kit.build_sweep import UNSTABLE_SPREAD, precision_table, timing_table

    timing = timing_table([_meta("fp32", [10.8, 307.7, 150.0]), _meta("bf16", [5.0, 5.1, 5.0])])
    assert timing["unstable"].tolist() == [True, False]
    assert timing.loc[0, "spread_frac"] == pytest.approx((307.7 - 10.8) / ((10.8 + 307.7 + 150) / 3))
    prec = precision_table(timing)
    assert prec["unstable"].tolist() == ["fp32"] and math.isnan(prec["bf16_speedup"].iloc[0])
    steady = precision_table(timing_table([_meta("fp32", [10.0, 10.2, 10.1]), _meta("bf16", [5.0, 5.1, 5.0])]))
    assert steady["unstable"].tolist() == [""] and steady["bf16_speedup"].iloc[0] == pytest.approx(10.1 / 5.0333, 1e-3)
    assert 0 < UNSTABLE_SPREAD < 1


def test_negative_overhead_within_noise_is_called_noise():
    from profiler_kit.build_sweep import overhead_table

    def run(plain, prof):
        m = _meta("fp32", [p / 3 for p in plain])
        m["unprofiled"]["phases"] = _phases({"step_wall": plain})
        m |= {"profiled": {"phases": _phases({"step_wall": prof})}, "backend": "torch"}
        return m

    table = overhead_table([run([100, 110, 90], [98, 108, 88]), run([100, 100.5, 99.5], [130, 131, 129])])
    assert table["overhead_frac"].iloc[0] < 0 and table["verdict"].tolist() == ["within noise", "overhead"]
    assert table["noise_frac"].iloc[1] == pytest.approx(math.hypot(0.5 / 100, 1 / 130))


def test_trace_agreement_never_says_nan():
    """A CPU record has no traced forward range: the sentence says so instead of "largest difference nan%"."""
    import pandas as pd

    from profiler_kit.build_sweep import trace_vs_harness_text

    assert "nan" not in trace_vs_harness_text(pd.Series([float("nan")]))
    assert "no run has both" in trace_vs_harness_text(pd.Series([float("nan"), float("nan")]))
    assert trace_vs_harness_text(pd.Series([0.02, -0.15, float("nan")])).endswith(
        "largest difference 15.0% (outside 10%)."
    )
    assert trace_vs_harness_text(pd.Series([0.05])).endswith("largest difference 5.0% (within 10%).")
