"""record / sweep on the CPU: torch.profiler and nsys backends, run.json and its file list, re-records, CLI."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, requires_nsys
from profiler_kit.workloads.models import SIZES, RunSpec

from profiler_kit import run as run_mod
from profiler_kit.build_sweep import short_kernel_name
from profiler_kit.cli import cli

STEPS, WARMUP = 2, 1
TINY = RunSpec(size="tiny", ctx=8, batch=1, mode="train", warmup=WARMUP, steps=STEPS, device="cpu")
LAYERS = SIZES["tiny"][2]
RUN_ID = "tiny_ctx8_train_fp32_b1_cpu"
BACKEND_FILES = {"torch": {"trace.json.gz"}, "nsys": {"trace.sqlite", "trace.nsys-rep"}, "none": set()}


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
    kineto = pytest.importorskip("profiler_kit.analyze.kineto")
    trace = kineto.read_kineto(torch_run.run_dir / "trace.json.gz")
    counts = trace.nvtx["name"].astype(str).value_counts()
    assert counts["forward"] == STEPS and counts["backward"] == STEPS and counts[f"layer_{LAYERS - 1}"] == STEPS


@pytest.fixture(scope="module")
def rerecorded(tmp_path_factory):
    """One run recorded with torch, then again into the same folder with nsys, both with --memory.

    Returns the folder, both RunResults, the record log and the folder's listing right after the nsys record.
    """
    out, logs = tmp_path_factory.mktemp("rerec"), []
    first = run_mod.record(TINY, "torch", memory=True, out_dir=out, log=logs.append)
    second = run_mod.record(TINY, "nsys", memory=True, out_dir=out, log=logs.append)
    return second.run_dir, first, second, list(logs), sorted(os.listdir(second.run_dir))


@requires_nsys
def test_nsys_record_cpu_has_nvtx_ranges_with_counts(rerecorded):
    run_dir, _, result, _, _ = rerecorded
    sqlite = run_dir / "trace.sqlite"
    assert sqlite.exists() and not (run_dir / "trace.qdstrm").exists()
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
    meta = result.meta
    assert meta["backend"] == "nsys" and meta["versions"]["nsys"].startswith("NVIDIA Nsight Systems")
    assert meta["profiled"]["phases"]["forward"]["n"] == STEPS
    reader = pytest.importorskip("profiler_kit.analyze.nsys_sqlite")
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


def _record_cli(out_dir, backend, *extra):
    args = ["record", "tiny", "--ctx", "8", "--batch", "1", "--steps", str(STEPS), "--warmup", str(WARMUP)]
    return CliRunner().invoke(cli, [*args, "--backend", backend, "-o", str(out_dir), *extra])


def _folder(run_dir) -> dict[str, bytes]:
    """Every entry of a run folder (hidden ones too) with its bytes."""
    return {p.name: p.read_bytes() if p.is_file() else b"<dir>" for p in sorted(run_dir.iterdir())}


@pytest.mark.parametrize("backend", ["torch", "none"])  # nsys: test_a_second_backend_keeps_the_first_trace
def test_memory_on_the_cpu_claims_no_snapshot_and_files_match_the_disk(tmp_path, backend):
    res = _record_cli(tmp_path, backend, "--memory", "--device", "cpu")
    assert res.exit_code == 0, res.output
    run_dir = tmp_path / RUN_ID
    meta = json.loads((run_dir / "run.json").read_text())
    on_disk = sorted(os.listdir(run_dir))  # hidden entries too: the record's work folder is gone
    assert sorted(meta["files"]) == on_disk == sorted(BACKEND_FILES[backend] | {"run.json"})
    assert all(e["this_record"] and e["recorded_at"] == meta["recorded_at"] for e in meta["files"].values())
    assert {n: e["backend"] for n, e in meta["files"].items()} == dict.fromkeys(on_disk, backend)
    assert meta["trace"] == run_mod.TRACE_FILES.get(backend)
    # no CUDA device, so no CUDA memory history: said once on stderr, recorded in run.json, no file claimed
    assert meta["memory_history"] is False and "max_memory_allocated" not in meta
    assert meta["memory_snapshot"] == {"file": None, "reason": run_mod.NO_CUDA_SNAPSHOT}
    assert res.stderr.count("no CUDA device") == 1 and "no CUDA GPU found" not in res.stderr  # --device cpu asked
    written = sorted(Path(line.removeprefix("wrote ")).name for line in res.stderr.splitlines() if "wrote " in line)
    assert written == on_disk


def test_cli_says_when_it_runs_on_the_cpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = _record_cli(tmp_path, "none")
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines()[0] == "no CUDA GPU found: running on the CPU"
    assert json.loads((tmp_path / RUN_ID / "run.json").read_text())["spec"]["device"] == "cpu"
    asked = _record_cli(tmp_path, "none", "--device", "cpu")
    assert asked.exit_code == 0 and "no CUDA GPU found" not in asked.stderr
    bad = _record_cli(tmp_path / "cuda", "none", "--device", "cuda")
    assert bad.exit_code == 2 and "no CUDA GPU found" in bad.stderr and "Traceback" not in bad.output
    assert not (tmp_path / "cuda").exists()


@requires_nsys
def test_a_second_backend_keeps_the_first_trace(rerecorded, tmp_path):
    from profiler_kit.build_sweep import read_run_trace

    run_dir, first, second, logs, listing = rerecorded
    meta = second.meta
    assert sorted(meta["files"]) == listing == sorted(["run.json", "trace.json.gz", *BACKEND_FILES["nsys"]])
    assert meta["files"]["trace.json.gz"] == {**first.meta["files"]["trace.json.gz"], "this_record": False}
    assert meta["files"]["trace.json.gz"]["backend"] == "torch"
    assert meta["files"]["trace.sqlite"]["backend"] == "nsys" and meta["files"]["trace.sqlite"]["this_record"]
    assert meta["backend"] == "nsys" and meta["trace"] == "trace.sqlite"
    assert meta["memory_snapshot"] == {"file": None, "reason": run_mod.NO_CUDA_SNAPSHOT} and not meta["memory_history"]
    assert sum("no CUDA device" in m for m in logs) == 2  # once per record
    assert {p.name for p in second.files} == {"run.json", *BACKEND_FILES["nsys"]}
    assert any(m.startswith("kept from earlier records") and "trace.json.gz (torch, recorded 20" in m for m in logs)
    # the sweep tables read the trace of run.json's record (nsys re-runs the warm-up: warmup + steps forwards) ...
    forwards = (read_run_trace(run_dir, meta).nvtx["name"].astype(str) == "forward").sum()
    assert forwards == STEPS + WARMUP
    # ... and the report on the folder finds both traces
    res = CliRunner().invoke(cli, ["report", str(run_dir.parent), "-o", str(tmp_path / "rep"), "--no-html"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert f"## {RUN_ID}/trace.json.gz" in md and f"## {RUN_ID}/trace.sqlite" in md
    # the same backend again replaces its own trace (and says so), and keeps the other's
    logs = []
    third = run_mod.record(TINY, "torch", out_dir=run_dir.parent, log=logs.append)
    meta3 = json.loads((run_dir / "run.json").read_text())
    assert any(m.startswith("replaced in") and "trace.json.gz (torch" in m for m in logs)
    assert meta3["files"]["trace.json.gz"]["recorded_at"] == third.meta["recorded_at"]
    assert meta3["files"]["trace.sqlite"]["recorded_at"] == meta["recorded_at"]
    assert (read_run_trace(run_dir, meta3).nvtx["name"].astype(str) == "forward").sum() == STEPS
    # a timing-only record has no trace of its own: the sweep tables read none for it
    run_mod.record(TINY, "none", out_dir=run_dir.parent, log=logs.append)
    meta4 = json.loads((run_dir / "run.json").read_text())
    assert meta4["trace"] is None and read_run_trace(run_dir, meta4) is None
    assert sorted(meta4["files"]) == sorted(os.listdir(run_dir))


def test_a_failed_record_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    first = run_mod.record(TINY, "none", out_dir=tmp_path, log=lambda m: None)
    before = _folder(first.run_dir)

    def half_written(spec, work, memory):
        (work / "trace.json.gz").write_bytes(b"\x1f\x8b half a trace")
        raise run_mod.RecordError("the profiler broke off")

    monkeypatch.setitem(run_mod.BACKEND_RECORDERS, "torch", half_written)
    with pytest.raises(run_mod.RecordError, match="broke off"):
        run_mod.record(TINY, "torch", out_dir=tmp_path, log=lambda m: None)
    assert _folder(first.run_dir) == before  # no trace, no work folder, the earlier run.json


def test_run_json_from_before_the_file_list_claims_only_files_there(tmp_path):
    run_dir = tmp_path / RUN_ID
    run_dir.mkdir()
    (run_dir / "trace.sqlite").write_bytes(b"an earlier nsys export")
    old = {"run_id": RUN_ID, "backend": "nsys", "files": ["trace.sqlite", "memory.pickle", "run.json"]}
    (run_dir / "run.json").write_text(json.dumps(old))
    meta = run_mod.record(TINY, "none", out_dir=tmp_path, log=lambda m: None).meta
    assert sorted(meta["files"]) == ["run.json", "trace.sqlite"]  # memory.pickle is not there
    assert meta["files"]["trace.sqlite"] == {
        "what": run_mod.RUN_FILES["trace.sqlite"][1],
        "backend": "nsys",
        "recorded_at": None,
        "this_record": False,
    }


def test_harness_memory_flag_on_the_cpu_writes_nothing(tmp_path, capsys):
    from profiler_kit.workloads import harness

    spec = json.dumps(TINY.to_dict())
    snapshot = tmp_path / "memory.pickle"
    assert harness.main(["--spec", spec, "--out", str(tmp_path / "row.json"), "--memory", str(snapshot)]) == 0
    row = json.loads((tmp_path / "row.json").read_text())
    assert row["status"] == "ok" and "memory_snapshot" not in row and not snapshot.exists()


def test_memory_history_reads_the_peak_then_dumps_once(tmp_path, monkeypatch):
    """MemoryHistory's calls on a CUDA device, without one: peak stats reset with the history, read before the dump."""
    import torch
    from profiler_kit.workloads.harness import MEMORY_HISTORY_ENTRIES, MemoryHistory

    calls = []
    cuda, memory = torch.cuda, torch.cuda.memory
    monkeypatch.setattr(cuda, "reset_peak_memory_stats", lambda *a: calls.append("reset"))
    monkeypatch.setattr(
        memory, "_record_memory_history", lambda enabled="all", **kw: calls.append(f"history {enabled}")
    )
    monkeypatch.setattr(cuda, "max_memory_allocated", lambda *a: calls.append("peak") or 123)
    monkeypatch.setattr(memory, "_dump_snapshot", lambda path: calls.append("dump") or Path(path).write_bytes(b"x"))
    history = MemoryHistory(tmp_path / "m.pickle", "cuda")
    history.start()
    info = history.stop()
    assert history.stop() is info  # the torch backend stops before profiling and again after the run
    assert calls == ["reset", "history all", "peak", "dump", "history None"]
    assert info == {"file": "m.pickle", "max_memory_allocated": 123, "max_entries": MEMORY_HISTORY_ENTRIES}
    assert MemoryHistory(tmp_path / "cpu.pickle", "cpu").stop() is None and not (tmp_path / "cpu.pickle").exists()


def test_cuda_run_json_gives_the_memory_report_its_peak(tmp_path, monkeypatch):
    """run.json of a CUDA record as the memory report reads it, without a GPU: a recorder that leaves a real
    H200 snapshot (tests/data/memory) and that process's max_memory_allocated."""
    import torch

    src = FIXTURES / "memory" / "mlp_full_step_fp32.pickle.gz"
    peak = json.loads((FIXTURES / "memory" / "mlp_full_step_fp32.json").read_text())["max_memory_allocated"]

    def fake(spec, work, memory):
        assert memory
        (work / "memory.pickle").write_bytes(gzip.decompress(src.read_bytes()))
        snapshot = {"file": "memory.pickle", "max_memory_allocated": peak, "max_entries": 1_000_000}
        return {"run_id": spec.run_id, "spec": spec.to_dict(), "status": "ok", "memory_snapshot": snapshot}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(run_mod, "gpu_info", lambda device: {"name": "a GPU"})
    monkeypatch.setitem(run_mod.BACKEND_RECORDERS, "none", fake)
    spec = RunSpec(size="tiny", ctx=8, batch=1, mode="train", device="cuda")
    result = run_mod.record(spec, "none", memory=True, out_dir=tmp_path, log=lambda m: None)
    meta = json.loads((result.run_dir / "run.json").read_text())
    assert sorted(meta["files"]) == sorted(os.listdir(result.run_dir)) == ["memory.pickle", "run.json"]
    assert meta["max_memory_allocated"] == meta["files"]["memory.pickle"]["max_memory_allocated"] == peak
    assert meta["memory_history"] and meta["memory_snapshot"]["covers"] == run_mod.MEMORY_WINDOWS["none"]
    out = tmp_path / "mem"
    res = CliRunner().invoke(cli, ["memory", str(result.run_dir / "memory.pickle"), "-o", str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads((out / "memory.memory_comparison.json").read_text())["rows"]
    assert row["label"] == spec.run_id and row["peak_allocated_bytes"] == meta["max_memory_allocated"]
    res = CliRunner().invoke(cli, ["memory", str(result.run_dir / "memory.pickle"), "-o", str(out), "--no-html"])
    assert f"records max_memory_allocated = {peak:,} bytes" in (out / "memory.md").read_text()
    assert "(equal)" in (out / "memory.md").read_text()


def test_sweep_cell_does_not_take_an_earlier_run_json_for_its_result(tmp_path, monkeypatch):
    from profiler_kit import sweep as sweep_mod

    run_json = tmp_path / RUN_ID / "run.json"
    run_json.parent.mkdir()
    run_json.write_text(json.dumps({"run_id": RUN_ID, "status": "ok", "backend": "torch"}))
    crashed = sweep_mod.subprocess.CompletedProcess([], 139, "", "Segmentation fault")
    monkeypatch.setattr(sweep_mod.subprocess, "run", lambda *a, **kw: crashed)
    meta = sweep_mod.run_cell(TINY, "nsys", tmp_path)
    assert meta["status"] == "error" and "Segmentation fault" in meta["error"]
    assert json.loads(run_json.read_text()) == meta
