"""A grid of recorded runs (sizes x contexts x modes x precisions), one fresh process per cell.

A fresh process per cell keeps an OOM or a crash (or a CUDA context left in a
bad state) from poisoning the cells after it. Cells are ordered by context
length within each (size, precision, mode); once one OOMs, the longer contexts
of that group are not launched and are written as OOM rows that say so (peak
memory grows with context length, so they cannot fit).

With ``calibrate``, this GPU's ceilings are measured once, in a fresh process,
into ``out_dir/calibration.json`` before the cells; each cell (recorded into the
same ``out_dir``) then copies them into its run.json (profiler_kit.run).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from profiler_kit.analyze.files import write_atomic
from profiler_kit.run import CALIBRATION_FILE, RecordError, output_tail, workload_env

FLAT_PHASES = ("forward", "backward", "optimizer", "step_wall")


def grid(sizes, ctxs, modes, precisions, **common) -> list:
    """The RunSpecs of the grid, ordered size, precision, mode, then ascending context."""
    from profiler_kit.workloads.models import RunSpec

    cells = itertools.product(sizes, precisions, modes, sorted(ctxs))
    return [RunSpec(size=s, precision=p, mode=m, ctx=c, **common) for s, p, m, c in cells]


def _failed_meta(spec, status: str, error: str) -> dict:
    return {"run_id": spec.run_id, "spec": spec.to_dict(), "status": status, "error": error}


def run_cell(spec, backend: str, out_dir: Path, memory: bool = False, timeout: int = 1800) -> dict:
    """Record one cell in a subprocess; its run.json (written here too when the process died).

    A run.json left by an earlier record stays until the cell replaces it (record reads what it says of
    the files it keeps); one the cell did not rewrite (same inode and time) is not taken for its result.
    """
    run_json = out_dir / spec.run_id / "run.json"
    before = _identity(run_json)
    cmd = [sys.executable, "-m", "profiler_kit.run", "--spec", json.dumps(spec.to_dict())]
    cmd += ["--backend", backend, "-o", str(out_dir)] + (["--memory"] if memory else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=workload_env(), timeout=timeout)
        status, error = "error", f"exit {proc.returncode}: {output_tail(proc.stderr, 800)}"
    except subprocess.TimeoutExpired:
        status, error = "timeout", f"no result within {timeout} s"
    if run_json.exists() and _identity(run_json) != before:
        return json.loads(run_json.read_text())
    if "out of memory" in error.lower():
        status = "oom"
    meta = _failed_meta(spec, status, error)
    run_json.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(run_json, json.dumps(meta, indent=1))
    return meta


def _identity(path: Path) -> tuple | None:
    """(inode, mtime_ns) of a file, None when absent: record replaces run.json atomically (a new inode)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def measure_calibration(out_dir: Path, device: str, timeout: int = 600) -> Path:
    """Run workloads.calibrate for ``device`` in a subprocess; its JSON lands in ``out_dir/calibration.json``."""
    out = Path(out_dir) / CALIBRATION_FILE
    tmp = out.with_name(f".{out.name}.tmp")
    cmd = [sys.executable, "-m", "profiler_kit.workloads.calibrate", "--device", device, "--out", str(tmp)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=workload_env(), timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RecordError(f"calibration gave no result within {timeout} s") from None
    if proc.returncode != 0 or not tmp.exists():
        raise RecordError(f"calibration failed (exit {proc.returncode}): {output_tail(proc.stderr, 800)}")
    tmp.chmod(0o644)
    tmp.replace(out)
    return out


def sweep(
    specs: list,
    backend: str,
    out_dir: str | Path,
    memory: bool = False,
    timeout: int = 1800,
    progress: Callable[[Iterable], contextlib.AbstractContextManager] = contextlib.nullcontext,
    resume: bool = False,
    calibrate: bool = False,
) -> list[dict]:
    """Record every spec; write ``results.jsonl`` and ``results.md`` in ``out_dir``; return the flat rows.

    With ``resume``, a cell whose run.json already says "ok" or "oom" is read, not re-run.
    With ``calibrate``, the ceilings are measured first (``measure_calibration``).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if calibrate and specs:
        measure_calibration(out_dir, specs[0].device)
    metas: list[dict] = []
    oom_at: dict[tuple, int] = {}
    with progress(specs) as cells:
        for spec in cells:
            group = (spec.size, spec.precision, spec.mode, spec.attention, spec.batch, spec.compile)
            done = out_dir / spec.run_id / "run.json"
            previous = json.loads(done.read_text()) if resume and done.exists() else {}
            if previous.get("status") in ("ok", "oom"):
                meta = previous
                if meta["status"] == "oom":
                    oom_at.setdefault(group, spec.ctx)
            elif group in oom_at:
                meta = _failed_meta(spec, "oom", f"not run: ctx {oom_at[group]} already ran out of memory")
                meta["skipped"] = True
                write_atomic(_mkdir(out_dir / spec.run_id) / "run.json", json.dumps(meta, indent=1))
            else:
                meta = run_cell(spec, backend, out_dir, memory, timeout)
                if meta.get("status") == "oom":
                    oom_at[group] = spec.ctx
            metas.append(meta)
    rows = [flat_result(m) for m in metas]
    write_atomic(out_dir / "results.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write_atomic(out_dir / "results.md", results_markdown(rows))
    return rows


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def flat_result(meta: dict) -> dict:
    """One line per cell: labels, status, mean ms per phase (unprofiled and profiled step), peak bytes."""
    spec = meta.get("spec", {})
    row = {k: spec.get(k) for k in ("size", "ctx", "batch", "mode", "precision", "attention", "compile")}
    row.update(run_id=meta.get("run_id"), status=meta.get("status"), backend=meta.get("backend"))
    phases = (meta.get("unprofiled") or {}).get("phases", {})
    for p in FLAT_PHASES:
        row[f"{p}_ms_mean"] = phases.get(p, {}).get("mean")
        row[f"{p}_ms_std"] = phases.get(p, {}).get("std")
    prof = (meta.get("profiled") or {}).get("phases", {})
    row["profiled_step_wall_ms_mean"] = prof.get("step_wall", {}).get("mean")
    row["profiling_overhead_frac"] = meta.get("profiling_overhead_frac")
    row["max_memory_allocated_bytes"] = meta.get("max_memory_allocated_bytes")
    row["error"] = meta.get("error")
    return row


def results_markdown(rows: list[dict]) -> str:
    """A markdown table of the flat rows: ms to 2 decimals, GiB to 2, OOM cells marked."""
    from profiler_kit.workloads.harness import md_table

    cols = ["size", "ctx", "mode", "precision", "status"]
    cols += [f"{p}_ms_mean" for p in FLAT_PHASES] + ["profiled_step_wall_ms_mean", "profiling_overhead_frac"]
    body = []
    for r in rows:
        line = []
        for c in cols:
            v = r.get(c)
            if isinstance(v, float):
                v = "" if math.isnan(v) else (f"{v:+.1%}" if c.endswith("_frac") else f"{v:.2f}")
            line.append("" if v is None else v)
        mem = r.get("max_memory_allocated_bytes")
        line.append(f"{mem / 2**30:.2f}" if isinstance(mem, int | float) else "")
        body.append(line)
    return md_table(cols + ["peak_GiB"], body) + "\n"
