"""On a CUDA GPU: ``record --memory`` with each backend leaves memory.pickle, and its replayed peak
(``profiler-kit memory --format json``) equals run.json's max_memory_allocated to the byte.

From the repository root on the GPU machine (prints one line per backend; nsys is skipped, with the
reason, when it is absent or cannot trace kernels there):

    PYTHONPATH=$PWD python -m pytest -q -p no:cacheprovider -s -rs tests/test_record_gpu.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from profiler_kit.run import nsys_can_trace_cuda, workload_env  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")]

RECORD = ["small", "--ctx", "128", "--batch", "2", "--mode", "train", "--steps", "2", "--warmup", "1"]
RUN_ID = "small_ctx128_train_fp32_b2"


def _cli(*args, timeout=900) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "profiler_kit", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=workload_env(), timeout=timeout)


@pytest.mark.parametrize("backend", ["torch", "none", "nsys"])
def test_snapshot_peak_equals_run_json_max_memory_allocated(tmp_path, backend):
    if backend == "nsys":
        if shutil.which("nsys") is None:
            pytest.skip("nsys not installed")
        ok, why = nsys_can_trace_cuda()
        if not ok:
            pytest.skip(f"nsys cannot trace CUDA here: {why}")
    rec = _cli("record", *RECORD, "--backend", backend, "--memory", "-o", tmp_path / "runs")
    assert rec.returncode == 0, rec.stderr[-3000:]
    run_dir = tmp_path / "runs" / RUN_ID
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "ok" and meta["backend"] == backend
    assert sorted(meta["files"]) == sorted(os.listdir(run_dir))
    assert "memory.pickle" in meta["files"] and meta["memory_history"] and meta["memory_snapshot"]["file"]
    want = meta["max_memory_allocated"]
    rep = _cli(
        "memory", run_dir / "memory.pickle", "--format", "json", "--no-html", "-o", tmp_path / "mem", timeout=600
    )
    assert rep.returncode == 0, rep.stderr[-3000:]
    (row,) = json.loads((tmp_path / "mem" / "memory.memory_comparison.json").read_text())["rows"]
    got = row["peak_allocated_bytes"]
    verdict = "equal" if got == want else f"DIFFER by {got - want:+,}"
    print(
        f"\n{backend}: replayed peak {got:,} B, run.json max_memory_allocated {want:,} B ({verdict}); "
        f"events {row['events']:,}, complete trace {row['complete_trace']}, "
        f"max_memory_allocated_bytes of the whole run {meta['max_memory_allocated_bytes']:,} B"
    )
    assert got == want
