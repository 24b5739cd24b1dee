"""record / sweep on the CPU: torch.profiler and nsys backends, run.json, CLI."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
from collections import Counter

import pytest
from click.testing import CliRunner
from conftest import requires_nsys

from profiler_kit import run as run_mod
from profiler_kit.build_sweep import short_kernel_name
from profiler_kit.cli import cli
from workloads.models import SIZES, RunSpec

STEPS, WARMUP = 2, 1
TINY = RunSpec(size="tiny", ctx=8, batch=1, mode="train", warmup=WARMUP, steps=STEPS, device="cpu")
LAYERS = SIZES["tiny"][2]


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    return run_mod.record(TINY, "torch", out_dir=tmp_path_factory.mktemp("rec"), log=lambda m: None)


def test_torch_record_writes_trace_and_run_json(torch_run):
    run_dir = torch_run.run_dir
    assert run_dir.name == "tiny_ctx8_train_fp32_b1_cpu"
    assert {p.name for p in torch_run.files} == {"trace.json.gz", "run.json"}
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "ok" and meta["backend"] == "torch"
    assert meta["spec"]["size"] == "tiny" and meta["versions"]["torch"]
    for key in ("unprofiled", "profiled"):
        assert meta[key]["phases"]["step_wall"]["n"] == STEPS
    overhead = meta["profiled"]["phases"]["step_wall"]["mean"] / meta["unprofiled"]["phases"]["step_wall"]["mean"] - 1
    assert meta["profiling_overhead_frac"] == pytest.approx(overhead)
    with gzip.open(run_dir / "trace.json.gz", "rt") as fh:
        doc = json.load(fh)
    names = Counter(e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation")
    # only the profiled steps are in the trace: no warm-up ranges
    assert names["forward"] == STEPS and names["optimizer"] == STEPS and names["warmup"] == 0
    assert names["computing softmax"] == STEPS * LAYERS


def test_kineto_reader_reads_the_recorded_trace(torch_run):
    kineto = pytest.importorskip("analyze.kineto")
    trace = kineto.read_kineto(torch_run.run_dir / "trace.json.gz")
    counts = trace.nvtx["name"].astype(str).value_counts()
    assert counts["forward"] == STEPS and counts["backward"] == STEPS and counts[f"layer_{LAYERS - 1}"] == STEPS


@requires_nsys
def test_nsys_record_cpu_has_nvtx_ranges_with_counts(tmp_path):
    result = run_mod.record(TINY, "nsys", out_dir=tmp_path, log=lambda m: None)
    sqlite = result.run_dir / "trace.sqlite"
    assert sqlite.exists() and not (result.run_dir / "trace.qdstrm").exists()
    with sqlite3.connect(sqlite) as con:
        rows = con.execute(
            "SELECT COALESCE(e.text, s.value), COUNT(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id "
            "WHERE e.eventType = 59 GROUP BY 1"
        ).fetchall()
    counts = dict(rows)
    runs = STEPS + WARMUP  # the nsys backend re-runs warm-up and timed steps under the profiler
    assert counts["forward"] == runs and counts["backward"] == runs and counts["optimizer"] == runs
    assert counts["step"] == runs and counts["warmup"] == WARMUP
    assert counts["scaled dot product attention"] == runs * LAYERS
    meta = json.loads((result.run_dir / "run.json").read_text())
    assert meta["backend"] == "nsys" and meta["versions"]["nsys"].startswith("NVIDIA Nsight Systems")
    assert meta["profiled"]["phases"]["forward"]["n"] == STEPS
    reader = pytest.importorskip("analyze.nsys_sqlite")
    nvtx = reader.read_nsys_sqlite(sqlite).nvtx
    assert (nvtx["name"].astype(str) == "forward").sum() == runs


def _fake_nsys(tmp_path, monkeypatch, message: str):
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")


def test_unsupported_driver_is_an_error_not_an_empty_profile(tmp_path, monkeypatch):
    msg = "WARNING: Installed CUDA driver version (13.0) is not supported by this build of Nsight Systems."
    _fake_nsys(tmp_path, monkeypatch, msg)
    with pytest.raises(run_mod.RecordError, match="cannot trace this CUDA driver"):
        run_mod.nsys_profile(["true"], tmp_path / "trace", cuda=True)


def test_missing_report_is_an_error(tmp_path, monkeypatch):
    _fake_nsys(tmp_path, monkeypatch, "something went wrong")
    with pytest.raises(run_mod.RecordError, match="nsys wrote no report"):
        run_mod.nsys_profile(["true"], tmp_path / "trace", cuda=False)


def test_auto_backend_choice(monkeypatch):
    monkeypatch.setattr(run_mod.shutil, "which", lambda name: None)
    assert run_mod.choose_backend("auto", cuda=False)[0] == "torch"
    monkeypatch.setattr(run_mod.shutil, "which", lambda name: "/usr/bin/nsys")
    assert run_mod.choose_backend("auto", cuda=False)[0] == "nsys"
    monkeypatch.setattr(run_mod, "nsys_can_trace_cuda", lambda: (False, "driver not supported"))
    backend, why = run_mod.choose_backend("auto", cuda=True)
    assert backend == "torch" and "driver not supported" in why


def test_cli_record_timing_only_and_bad_workload(tmp_path):
    runner = CliRunner()
    args = ["record", "tiny", "--ctx", "8", "--batch", "1", "--mode", "forward", "--steps", "1", "--warmup", "0"]
    res = runner.invoke(cli, [*args, "--device", "cpu", "--backend", "none", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "tiny_ctx8_forward_fp32_b1_cpu" / "run.json").read_text())
    assert meta["status"] == "ok" and meta["unprofiled"]["phases"]["forward"]["n"] == 1
    bad = runner.invoke(cli, ["record", "huge", "--device", "cpu", "-o", str(tmp_path)])
    assert bad.exit_code == 2 and "huge" in bad.output


def test_cli_sweep_runs_cells_in_processes_and_writes_results(tmp_path):
    runner = CliRunner()
    args = ["sweep", "--sizes", "tiny", "--ctx", "8", "--modes", "forward", "--precisions", "fp32,bf16"]
    res = runner.invoke(
        cli, [*args, "--steps", "1", "--warmup", "0", "--device", "cpu", "--backend", "none", "-o", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [(r["precision"], r["status"]) for r in rows] == [("fp32", "ok"), ("bf16", "ok")]
    assert (tmp_path / "tiny_ctx8_forward_bf16_cpu" / "run.json").exists()
    assert "| tiny | 8 | forward | fp32 | ok |" in (tmp_path / "results.md").read_text()


def test_sweep_marks_longer_contexts_oom_after_an_oom(tmp_path, monkeypatch):
    from profiler_kit import sweep as sweep_mod

    calls = []

    def fake_cell(spec, backend, out_dir, memory=False, timeout=0):
        calls.append(spec.ctx)
        return {"run_id": spec.run_id, "spec": spec.to_dict(), "status": "oom" if spec.ctx >= 16 else "ok"}

    monkeypatch.setattr(sweep_mod, "run_cell", fake_cell)
    specs = sweep_mod.grid(["tiny"], [32, 8, 16], ["train"], ["fp32"], device="cpu")
    rows = sweep_mod.sweep(specs, "none", tmp_path)
    assert calls == [8, 16]  # ctx 32 is not launched once ctx 16 ran out of memory
    assert [(r["ctx"], r["status"]) for r in rows] == [(8, "ok"), (16, "oom"), (32, "oom")]
    assert "not run" in rows[2]["error"]


TRACED = __import__("pathlib").Path(__file__).resolve().parent.parent / "reports" / "sweep" / "traced"


@pytest.mark.skipif(not (TRACED / "small_ctx512_train_bf16").exists(), reason="committed GPU sweep absent")
def test_build_sweep_on_committed_gpu_run():
    from profiler_kit.build_sweep import build_sweep_sections, load_runs, read_run_trace, summarize_run_trace

    run_dir = TRACED / "small_ctx512_train_bf16"
    meta = load_runs([run_dir])[0]
    row = summarize_run_trace(read_run_trace(run_dir), meta)
    steps = meta["spec"]["steps"]
    assert row["forward_ranges"] == steps
    # independent count from the raw JSON: the top step kernel's launches over the profiled steps
    with gzip.open(run_dir / "trace.json.gz", "rt") as fh:
        kernels = [e for e in json.load(fh)["traceEvents"] if e.get("cat") == "kernel"]
    top = max({e["name"] for e in kernels}, key=lambda n: sum(e["dur"] for e in kernels if e["name"] == n))
    assert row["top_step_kernel"] == short_kernel_name(top)  # the raw JSON's top kernel, shortened for display
    assert row["top_step_kernel_per_pass"] == sum(e["name"] == top for e in kernels) / steps
    assert row["softmax_to_matmul_flop"] == pytest.approx(5 / (4 * 64))  # small: d_head 768 / 12
    assert abs(row["trace_vs_harness_frac"]) < 0.10  # issue 3's bar for forward time
    sections = build_sweep_sections([run_dir])
    timing = sections[0].tables[0].df
    assert timing.loc[0, "forward_ns"] == pytest.approx(meta["unprofiled"]["phases"]["forward"]["mean"] * 1e6)
