"""Record a workload under a profiler, leaving predictable files under ``out_dir/<run_id>/``.

- ``trace.json.gz``: PyTorch profiler (Kineto) trace, torch backend;
- ``trace.sqlite`` (+ ``trace.nsys-rep``): Nsight Systems export, nsys backend;
- ``memory.pickle``: CUDA memory snapshot (``memory=True``, any backend, CUDA
  runs only: the history is the CUDA caching allocator's; a CPU run says so in
  run.json's ``memory_snapshot`` and writes none);
- ``run.json``: always; the RunSpec, library versions, GPU, harness timings
  without and with the profiler (so its overhead is visible), peak memory, the
  fp32 matmul settings (``matmul``: allow_tf32, float32_matmul_precision) and,
  when measured or cached, this GPU's calibration figures (``calibration``).
  ``files`` maps every file of the folder (checked on disk after the run) to
  what it is, its backend and the record that made it; ``trace`` names this
  record's trace; ``max_memory_allocated`` is torch.cuda.max_memory_allocated()
  over the window memory.pickle covers (the memory report compares its
  replayed peak with it).

Each backend writes its own file names, so recording the same run again with
another backend keeps the first trace (run.json lists it under ``files`` as from
an earlier record); a record replaces only the files it writes itself. A record
works in a hidden folder inside the run folder and moves its files into place
when it is done: one that fails leaves the folder as it was.

Calibration (this GPU's GEMM TFLOP/s per dtype and copy bytes/s,
workloads.calibrate) lives in two places: ``out_dir/calibration.json``, measured
by ``record(calibrate=True)`` (``profiler-kit record --calibrate``) or once per
sweep before its cells (``profiler-kit sweep --calibrate``); and a copy in the
``calibration`` key of every run.json recorded into that ``out_dir`` on the same
GPU model. The report takes run.json's copy, else the nearest calibration.json
from the run folder up to the folder it was given, and says "not measured"
when there is neither.

Backend ``none`` only times (run.json without a trace). ``auto`` picks nsys
when it is installed and can trace this machine (CPU-only runs, or a CUDA probe
that records kernels), else torch. Debian's split nsys install (its
nsight-systems 2022.4 package) leaves a ``.qdstrm`` that QdstrmImporter turns
into a report; nsys 2022.4 on a CUDA 13 driver "runs" but records no kernels,
which is an error here, not an empty profile.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from profiler_kit.analyze.files import write_atomic

BACKENDS = ("auto", "nsys", "torch", "none")
REPO_ROOT = Path(__file__).resolve().parent.parent
NSYS_GPU_FLAGS = ["-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none"]
NSYS_CPU_FLAGS = ["-t", "nvtx,osrt", "--sample=none", "--cpuctxsw=none"]
DRIVER_UNSUPPORTED = re.compile(r"driver version.{0,40}not supported|not supported by this build of Nsight", re.I)
CALIBRATION_FILE = "calibration.json"
# What a record leaves in a run folder: file name -> (the backend that writes it, None for any; what it is).
RUN_FILES = {
    "trace.json.gz": ("torch", "PyTorch profiler (Kineto) trace"),
    "trace.sqlite": ("nsys", "Nsight Systems trace, SQLite export (what the report reads)"),
    "trace.nsys-rep": ("nsys", "Nsight Systems report (for the nsys GUI)"),
    "memory.pickle": (None, "torch.cuda.memory snapshot"),
    "run.json": (None, "this run's metadata"),
}
TRACE_FILES = {"torch": "trace.json.gz", "nsys": "trace.sqlite"}  # the file the report reads, per backend
# The window a snapshot covers, per backend, and which timings pay for recording the history.
MEMORY_WINDOWS = {
    "torch": "build, warm-up and timed steps in the recording process, before the profiler starts "
    "(the unprofiled timings include the cost of recording the history)",
    "nsys": "build, warm-up and timed steps in the process nsys profiles "
    "(the profiled timings include the cost of recording the history)",
    "none": "build, warm-up and timed steps (the timings include the cost of recording the history)",
}
NO_CUDA_SNAPSHOT = "no CUDA device: torch.cuda.memory records the CUDA caching allocator, and this run is on the CPU"


class RecordError(RuntimeError):
    """The profiler could not produce a usable trace (message says why)."""


@dataclass
class RunResult:
    """Where a recorded run went: its folder, backend, status ("ok", "oom", "error") and files."""

    run_dir: Path
    backend: str
    status: str
    files: list[Path] = field(default_factory=list)
    meta: dict = field(default_factory=dict)


def workload_env() -> dict:
    """The environment for workload subprocesses: this checkout importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def output_tail(text: str, n: int = 1500) -> str:
    return text[-n:].strip()


def qdstrm_importer(nsys: str | None = None) -> Path | None:
    """QdstrmImporter next to the nsys install (Debian puts it under /usr/lib/nsight-systems)."""
    candidates = [Path("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter")]
    if nsys:
        real = Path(nsys).resolve()
        candidates += [real.parent.parent / "host-linux-x64" / "QdstrmImporter", real.parent / "QdstrmImporter"]
    return next((c for c in candidates if c.is_file()), None)


def nsys_version(nsys: str) -> str:
    out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or out.stderr.strip()


def _sqlite_tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as con:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def nsys_diagnostics(path: Path) -> list[str]:
    """Text of the export's diagnostic messages (table names drift between releases)."""
    messages = []
    with sqlite3.connect(path) as con:
        for table in _sqlite_tables(path):
            if "DIAGNOSTIC" not in table.upper():
                continue
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            for col in ("text", "message", "value"):
                if col in cols:
                    messages += [str(r[0]) for r in con.execute(f'SELECT "{col}" FROM "{table}"') if r[0]]
    return messages


def nsys_profile(cmd: list[str], out_stem: Path, cuda: bool, timeout: int = 3600) -> Path:
    """Run ``cmd`` under nsys and return the SQLite export ``<out_stem>.sqlite``.

    Raises RecordError when nsys reports an unsupported driver, writes no
    report, or (CUDA runs) records no kernels.
    """
    nsys = shutil.which("nsys")
    if nsys is None:
        raise RecordError("nsys is not installed (not on PATH)")
    flags = NSYS_GPU_FLAGS if cuda else NSYS_CPU_FLAGS
    proc = subprocess.run(
        [nsys, "profile", *flags, "-o", str(out_stem), "--force-overwrite", "true", *cmd],
        capture_output=True,
        text=True,
        env=workload_env(),
        timeout=timeout,
    )
    log = proc.stdout + proc.stderr
    if DRIVER_UNSUPPORTED.search(log):
        raise RecordError(f"nsys cannot trace this CUDA driver: {DRIVER_UNSUPPORTED.search(log).group(0)}")
    rep, qdstrm = out_stem.with_suffix(".nsys-rep"), out_stem.with_suffix(".qdstrm")
    if not rep.exists() and qdstrm.exists():  # Debian's split install: nsys cannot find its importer
        importer = qdstrm_importer(nsys)
        if importer is None:
            raise RecordError(f"nsys left {qdstrm.name} and no QdstrmImporter was found to convert it")
        imp = subprocess.run([str(importer), "-i", str(qdstrm)], capture_output=True, text=True, timeout=timeout)
        if not rep.exists():
            raise RecordError(f"QdstrmImporter could not convert {qdstrm.name}: {output_tail(imp.stdout + imp.stderr)}")
    if not rep.exists():
        raise RecordError(f"nsys wrote no report (exit {proc.returncode}): {output_tail(log)}")
    qdstrm.unlink(missing_ok=True)
    sqlite = out_stem.with_suffix(".sqlite")
    exp = subprocess.run(
        [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(sqlite), str(rep)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if not sqlite.exists():
        raise RecordError(f"nsys export failed: {output_tail(exp.stdout + exp.stderr)}")
    diagnostics = nsys_diagnostics(sqlite)
    bad = [m for m in diagnostics if DRIVER_UNSUPPORTED.search(m)]
    if bad:
        raise RecordError(f"nsys cannot trace this CUDA driver: {bad[0]}")
    if cuda and "CUPTI_ACTIVITY_KIND_KERNEL" not in _sqlite_tables(sqlite):
        raise RecordError(
            "nsys recorded no CUDA kernels for a GPU run" + (f": {diagnostics[0]}" if diagnostics else "")
        )
    if proc.returncode != 0:
        raise RecordError(f"profiled workload failed (exit {proc.returncode}): {output_tail(log)}")
    return sqlite


_PROBE: dict[str, tuple[bool, str]] = {}


def nsys_can_trace_cuda() -> tuple[bool, str]:
    """Whether nsys records kernels of a tiny CUDA program here (cached per process)."""
    if "cuda" not in _PROBE:
        code = "import torch; x = torch.ones(1024, device='cuda'); (x * 2).sum().item()"
        with tempfile.TemporaryDirectory() as tmp:
            try:
                nsys_profile([sys.executable, "-c", code], Path(tmp) / "probe", cuda=True, timeout=300)
                _PROBE["cuda"] = (True, "nsys traced a CUDA probe")
            except (RecordError, subprocess.TimeoutExpired, OSError) as err:
                _PROBE["cuda"] = (False, str(err))
    return _PROBE["cuda"]


def choose_backend(backend: str, cuda: bool) -> tuple[str, str]:
    """(backend, reason): ``auto`` becomes nsys when it works for this run, else torch."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; one of {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend, "asked for"
    if shutil.which("nsys") is None:
        return "torch", "nsys is not installed"
    if not cuda:
        return "nsys", "nsys is installed and the run is CPU-only (NVTX ranges)"
    ok, why = nsys_can_trace_cuda()
    return ("nsys", why) if ok else ("torch", f"nsys cannot trace CUDA here ({why})")


def versions() -> dict:
    import torch

    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "platform": platform.platform(),
    }
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    return out


def gpu_info(device: str) -> dict | None:
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(device)
    return {
        "name": p.name,
        "compute_capability": f"{p.major}.{p.minor}",
        "memory_bytes": int(p.total_memory),
        "sm_count": p.multi_processor_count,
    }


def matmul_settings() -> dict:
    """Whether fp32 matmuls may use TF32 tensor cores: picks the ceiling an fp32 run is compared with."""
    import torch

    return {
        "allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def load_or_measure_calibration(out_dir: Path, device: str, measure: bool) -> dict | None:
    """This GPU's calibration: measured when asked (and cached in out_dir), else the cached one if it matches."""
    from profiler_kit.workloads.calibrate import calibrate

    cache = Path(out_dir) / CALIBRATION_FILE
    cached = json.loads(cache.read_text()) if cache.exists() else None
    gpu = gpu_info(device)
    name = gpu["name"] if gpu else "cpu"
    if measure:
        cal = calibrate(device)
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(cache, json.dumps(cal, indent=1))
        return cal
    return cached if cached and cached.get("device") == name else None


def _gzip_to(src: Path, dst: Path) -> None:
    with src.open("rb") as fin, gzip.open(dst, "wb", compresslevel=6) as fout:
        shutil.copyfileobj(fin, fout)
    src.unlink()


def _record_torch(spec, work: Path, memory: bool) -> dict:
    """Unprofiled timing, then ``spec.steps`` more steps under torch.profiler on the warm workload."""
    import torch

    from profiler_kit.workloads.harness import MemoryHistory, measure, run_spec, summarize

    cuda = spec.device.startswith("cuda")
    history = MemoryHistory(work / "memory.pickle" if memory else None, spec.device)
    history.start()

    def profile(workload) -> dict:
        history.stop()  # the snapshot covers build, warm-up and timed steps, not the profiler's
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            times = measure(workload, 0, spec.steps, spec.device)
        raw = work / "trace.json"
        prof.export_chrome_trace(str(raw))
        _gzip_to(raw, work / "trace.json.gz")
        return {"profiled": {"phases": summarize(times), "times_ms": times}}

    try:
        row = run_spec(spec, after=profile)
    finally:
        history.stop()  # an OOM before profiling still leaves its snapshot
    if history.info:
        row["memory_snapshot"] = history.info
    return row


def _record_plain(spec, work: Path, memory: bool) -> dict:
    """Backend none: the harness's timing only (and the snapshot, with ``memory``)."""
    from profiler_kit.workloads.harness import run_spec_recording_memory

    return run_spec_recording_memory(spec, work / "memory.pickle" if memory else None)


def _record_nsys(spec, work: Path, memory: bool) -> dict:
    """Unprofiled timing in one subprocess, then the same harness under nsys in another.

    With ``memory`` the profiled process itself records the allocator's history
    and dumps the snapshot (``workloads.harness --memory``).
    """
    cuda = spec.device.startswith("cuda")
    spec_json = json.dumps(spec.to_dict())
    plain = work / "harness_unprofiled.json"
    proc = subprocess.run(
        [sys.executable, "-m", "profiler_kit.workloads.harness", "--spec", spec_json, "--out", str(plain)],
        capture_output=True,
        text=True,
        env=workload_env(),
    )
    if not plain.exists():
        raise RecordError(f"workload failed (exit {proc.returncode}): {output_tail(proc.stderr)}")
    row = json.loads(plain.read_text())
    plain.unlink()
    if row["status"] != "ok":
        if memory:
            row["memory_snapshot"] = {
                "file": None,
                "reason": f"the run ended with {row['status']} without the profiler, so the profiled process "
                "that records the snapshot did not run",
            }
        return row
    profiled = work / "harness_profiled.json"
    cmd = [sys.executable, "-m", "profiler_kit.workloads.harness", "--spec", spec_json, "--out", str(profiled)]
    if memory:
        cmd += ["--memory", str(work / "memory.pickle")]
    nsys_profile(cmd, work / "trace", cuda=cuda)
    prof_row = json.loads(profiled.read_text())
    profiled.unlink()
    row["profiled"] = {k: prof_row.get(k) for k in ("status", "phases", "times_ms")}
    if prof_row.get("memory_snapshot"):
        row["memory_snapshot"] = prof_row["memory_snapshot"]
    return row


BACKEND_RECORDERS = {"torch": _record_torch, "nsys": _record_nsys, "none": _record_plain}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _earlier_files(run_dir: Path) -> dict[str, dict]:
    """RUN_FILES already in ``run_dir`` (run.json aside), each with what the earlier run.json says of it.

    A run.json from before ``files`` described each file (a plain list), or none, gives
    only the name's backend; ``recorded_at`` is then None.
    """
    try:
        old = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = {}
    described = old.get("files") if isinstance(old, dict) and isinstance(old.get("files"), dict) else {}
    out = {}
    for name, (backend, what) in RUN_FILES.items():
        if name == "run.json" or not (run_dir / name).is_file():
            continue
        entry = described.get(name)
        if not isinstance(entry, dict):
            entry = {"what": what, "backend": backend, "recorded_at": None}
        out[name] = {**entry, "this_record": False}
    return out


def _describe(files: dict[str, dict]) -> str:
    return ", ".join(
        f"{name} ({e.get('backend') or 'any backend'}, recorded {e.get('recorded_at') or 'at an unknown time'})"
        for name, e in files.items()
    )


def record(
    spec,
    backend: str = "auto",
    memory: bool = False,
    out_dir: str | Path = "outputs",
    calibrate: bool = False,
    log=None,
) -> RunResult:
    """Run ``spec`` (a workloads.models.RunSpec) under ``backend``; write its files and run.json.

    The harness times ``spec.warmup`` + ``spec.steps`` steps without a profiler;
    the torch backend then profiles ``spec.steps`` more steps of the same warm
    workload, the nsys backend re-runs warm-up and steps in a subprocess under
    nsys (so its NVTX export has warmup + steps "forward" ranges). ``memory``
    adds memory.pickle with every backend on a CUDA device (MEMORY_WINDOWS says
    what it covers); on the CPU there is none, and ``log`` and run.json say why.
    Files of earlier records into the same folder that this one does not write
    are kept (``log`` names them). ``RunResult.files``: what this record wrote.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr))
    cuda = spec.device.startswith("cuda")
    if cuda:
        import torch

        if not torch.cuda.is_available():
            raise RecordError(f"device {spec.device}: no CUDA GPU found (torch {torch.__version__}); use device cpu")
    backend, why = choose_backend(backend, cuda)
    log(f"backend: {backend} ({why})")
    if memory and not cuda:
        log(f"--memory: no snapshot written ({NO_CUDA_SNAPSHOT})")
    out_dir = Path(out_dir)
    run_dir = out_dir / spec.run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    earlier = _earlier_files(run_dir)
    meta = {
        "run_id": spec.run_id,
        "spec": spec.to_dict(),
        "backend": backend,
        "backend_reason": why,
        "recorded_at": _now(),
        "command": " ".join(sys.argv),
        "versions": versions(),
        "gpu": gpu_info(spec.device),
        "matmul": matmul_settings(),
    }
    if backend == "nsys":
        meta["versions"]["nsys"] = nsys_version(shutil.which("nsys"))
    cal = load_or_measure_calibration(out_dir, spec.device, calibrate)
    if cal:
        meta["calibration"] = cal
    work = Path(tempfile.mkdtemp(dir=run_dir, prefix=".record-"))
    try:
        row = BACKEND_RECORDERS[backend](spec, work, memory and cuda)
        made = [name for name in RUN_FILES if (work / name).is_file()]
        for name in made:
            os.replace(work / name, run_dir / name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    snapshot = row.pop("memory_snapshot", None)
    meta["status"] = row.pop("status")
    meta["unprofiled"] = {k: row.pop(k) for k in ("phases", "times_ms") if k in row}
    meta.update(row)
    meta["profiling_overhead_frac"] = _overhead(meta)
    meta["trace"] = TRACE_FILES.get(backend) if TRACE_FILES.get(backend) in made else None
    meta["memory_history"] = "memory.pickle" in made
    if memory:
        meta["memory_snapshot"] = _snapshot_meta(snapshot, backend, cuda, "memory.pickle" in made)
    replaced = {n: e for n, e in earlier.items() if n in made}
    kept = {n: e for n, e in earlier.items() if n not in made and (run_dir / n).is_file()}
    if replaced:
        log(f"replaced in {run_dir}: {_describe(replaced)}")
    if kept:
        log(f"kept from earlier records in {run_dir}: {_describe(kept)}")
    files = {}
    for name, (file_backend, what) in RUN_FILES.items():
        if name in made or name == "run.json":
            files[name] = {"what": what, "backend": file_backend or backend, "recorded_at": meta["recorded_at"]}
            files[name]["this_record"] = True
            if name == "memory.pickle":
                files[name]["max_memory_allocated"] = (snapshot or {}).get("max_memory_allocated")
        elif name in kept:
            files[name] = kept[name]
    meta["files"] = files
    peak = files.get("memory.pickle", {}).get("max_memory_allocated")
    if peak is not None:  # the memory report compares the snapshot's replayed peak with this
        meta["max_memory_allocated"] = peak
    written = [run_dir / n for n in made]
    written.append(write_atomic(run_dir / "run.json", json.dumps(meta, indent=1, default=str)))
    return RunResult(run_dir, backend, meta["status"], written, meta)


def _snapshot_meta(info: dict | None, backend: str, cuda: bool, written: bool) -> dict:
    """run.json's ``memory_snapshot``: the file, its window and peak, or why there is none."""
    if written:
        return {**(info or {}), "file": "memory.pickle", "covers": MEMORY_WINDOWS[backend]}
    if not cuda:
        return {"file": None, "reason": NO_CUDA_SNAPSHOT}
    reason = (info or {}).get("reason") or "the workload process ended before it dumped the snapshot"
    return {"file": None, "reason": reason}


def _overhead(meta: dict) -> float | None:
    """Profiled over unprofiled mean wall-clock step time, minus one."""
    try:
        plain = meta["unprofiled"]["phases"]["step_wall"]["mean"]
        prof = meta["profiled"]["phases"]["step_wall"]["mean"]
    except (KeyError, TypeError):
        return None
    return prof / plain - 1


def main(argv: list[str] | None = None) -> int:
    """Entry point for one sweep cell in a fresh process: ``python -m profiler_kit.run --spec JSON``."""
    from profiler_kit.workloads.models import RunSpec

    ap = argparse.ArgumentParser(description="Record one RunSpec (a sweep cell).")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--backend", default="auto", choices=BACKENDS)
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("-o", "--out-dir", default="outputs")
    args = ap.parse_args(argv)
    try:
        result = record(RunSpec(**json.loads(args.spec)), args.backend, args.memory, args.out_dir, args.calibrate)
    except RecordError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    print(json.dumps({"run_dir": str(result.run_dir), "status": result.status, "backend": result.backend}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
