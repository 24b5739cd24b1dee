"""Timing harness: warm-up, timed steps, per-phase statistics, OOM as a result row.

On a GPU each phase is timed with CUDA events (device time between the two
records, which includes launch gaps) and each whole step also with a host
timer around ``torch.cuda.synchronize``; on the CPU phases use
``time.perf_counter``. Results are plain dicts, written as JSONL rows and
rendered as a markdown table.

Run one spec from the command line (the nsys backend and the sweep do this)::

    python -m profiler_kit.workloads.harness --spec '{"size": "tiny", "device": "cpu", "mode": "train"}' --out row.json

``--memory PATH`` records the CUDA allocator's history in that process and dumps
the snapshot there (``MemoryHistory``): the nsys backend needs the snapshot from
the process nsys profiles.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
from profiler_kit.workloads.common import nvtx_range, sync
from profiler_kit.workloads.models import RunSpec, count_parameters, model_config

PHASE_ORDER = ("forward", "backward", "optimizer", "step", "step_wall")
# the ring buffer of torch.cuda.memory._record_memory_history, as large as CS336 assignment 2 makes it
MEMORY_HISTORY_ENTRIES = 1_000_000
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class PhaseTimer:
    """Context-manager factory ``timer(name)`` collecting per-phase times in ms."""

    def __init__(self, device: str | torch.device):
        self.cuda = torch.device(device).type == "cuda"
        self.times: dict[str, list[float]] = defaultdict(list)
        self._pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    @contextlib.contextmanager
    def __call__(self, name: str):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self._pending.append((name, start, end))
        else:
            t0 = time.perf_counter()
            yield
            self.times[name].append((time.perf_counter() - t0) * 1e3)

    def flush(self) -> None:
        """Read back the CUDA events of completed steps (synchronizes)."""
        if self._pending:
            torch.cuda.synchronize()
            for name, start, end in self._pending:
                self.times[name].append(start.elapsed_time(end))
            self._pending.clear()


class MemoryHistory:
    """torch.cuda.memory's allocation history from ``start()`` to ``stop()``, dumped as a snapshot at ``stop()``.

    Peak statistics are reset at ``start()``, so ``info["max_memory_allocated"]``
    (read just before the dump) covers the same window as the snapshot: its
    replayed peak should equal it. Does nothing (``info`` stays None) when
    ``path`` is None or the device is not CUDA: the history is the CUDA caching
    allocator's. ``stop()`` may be called more than once; it dumps once.
    """

    def __init__(self, path: str | Path | None, device: str | torch.device):
        self.path = Path(path) if path is not None and torch.device(device).type == "cuda" else None
        self.info: dict | None = None
        self._recording = False

    def start(self) -> None:
        if self.path is None:
            return
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.memory._record_memory_history(max_entries=MEMORY_HISTORY_ENTRIES)
        self._recording = True

    def stop(self) -> dict | None:
        if self._recording:
            self._recording = False
            peak = int(torch.cuda.max_memory_allocated())
            torch.cuda.memory._dump_snapshot(str(self.path))
            torch.cuda.memory._record_memory_history(enabled=None)
            self.info = {"file": self.path.name, "max_memory_allocated": peak, "max_entries": MEMORY_HISTORY_ENTRIES}
        return self.info


def stats(values: list[float]) -> dict:
    """n, mean, std (sample; 0 for one value), min, max of a list of ms."""
    if not values:
        return {"n": 0, "mean": math.nan, "std": math.nan, "min": math.nan, "max": math.nan}
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def measure(workload, warmup: int, steps: int, device: str) -> dict[str, list[float]]:
    """Run ``warmup`` untimed steps (each inside a "warmup" range), then ``steps`` timed ones."""
    for _ in range(warmup):
        with nvtx_range("warmup"):
            workload.step()
    sync(device)
    timer = PhaseTimer(device)
    for _ in range(steps):
        t0 = time.perf_counter()
        workload.step(timer)
        sync(device)
        timer.times["step_wall"].append((time.perf_counter() - t0) * 1e3)
        timer.flush()
    return dict(timer.times)


class CallableWorkload:
    """Adapts a zero-argument step callable (the attention benchmark's) to ``step(timer)``."""

    def __init__(self, fn: Callable[[], object]):
        self.fn = fn

    def step(self, timer: Callable = lambda name: contextlib.nullcontext()) -> None:
        """One call inside a "step" range; the callable opens its own "forward"/"backward" ranges."""
        with nvtx_range("step"), timer("step"):
            self.fn()


def _attention_module():
    try:
        return importlib.import_module("profiler_kit.workloads.attention")
    except ImportError as err:
        raise ValueError(
            f"workload 'attention' needs workloads.attention (attention_step), not available: {err}"
        ) from None


def build_workload(spec: RunSpec):
    """The steppable workload for ``spec``: the Transformer LM or one attention layer."""
    if spec.workload == "lm":
        from profiler_kit.workloads.models import build

        return build(spec)
    if spec.workload == "attention":
        fn = _attention_module().attention_step(
            spec.attention,
            spec.batch,
            spec.heads,
            spec.ctx,
            spec.d_head,
            DTYPES[spec.precision],
            True,
            spec.device,
            backward=spec.mode != "forward",
        )
        return CallableWorkload(fn)
    raise ValueError(f"unknown workload {spec.workload!r}")


def _is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def _free_memory(device: str) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def summarize(times: dict[str, list[float]]) -> dict:
    """Per-phase stats, in PHASE_ORDER, for the phases that ran."""
    return {p: stats(times[p]) for p in PHASE_ORDER if p in times}


def run_spec(spec: RunSpec, after: Callable | None = None) -> dict:
    """Build, warm up and time ``spec``; a result row (status "ok", "oom" or "error").

    ``after(workload)``, when given, runs on the warm workload before it is freed
    (the torch backend profiles more steps there). Memory is freed before
    returning, also after an OOM, so the next run in this process starts clean.
    """
    row: dict = {"run_id": spec.run_id, "spec": spec.to_dict(), "status": "ok"}
    if spec.workload == "lm":
        row["model"] = model_config(spec)
    cuda = torch.device(spec.device).type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    error = None
    workload = None
    try:
        torch.manual_seed(spec.seed)
        workload = build_workload(spec)
        if hasattr(workload, "model"):
            row["model"]["params"] = count_parameters(workload.model)
        times = measure(workload, spec.warmup, spec.steps, spec.device)
        row["phases"] = summarize(times)
        row["times_ms"] = times
        if after is not None:
            row.update(after(workload) or {})
    except Exception as err:  # an OOM is a result; anything else too, but labelled
        error = err
    if error is not None:
        row["status"] = "oom" if _is_oom(error) else "error"
        row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:500]
        error = None
    if cuda:
        row["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
    del workload
    _free_memory(spec.device)
    return row


def flat_row(row: dict) -> dict:
    """One line per run for tables: labels, status, ``<phase>_ms_mean/std/min/max``, peak memory."""
    spec = row.get("spec", {})
    out = {k: spec.get(k) for k in ("size", "ctx", "batch", "mode", "precision", "attention", "compile")}
    out["status"] = row.get("status")
    for phase, s in row.get("phases", {}).items():
        for k in ("mean", "std", "min", "max"):
            out[f"{phase}_ms_{k}"] = s[k]
    out["max_memory_allocated_bytes"] = row.get("max_memory_allocated_bytes")
    return out


def md_table(headers: list[str], body: list[list]) -> str:
    """A GitHub markdown table (no tabulate: the GPU machine's Python may lack it)."""
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in body]
    return "\n".join(lines)


def markdown_table(rows: list[dict]) -> str:
    """A markdown table of flat rows (ms with 2 decimals, memory in GiB, OOM rows marked)."""
    flat = [flat_row(r) for r in rows]
    cols = list(dict.fromkeys(k for f in flat for k in f))
    body = []
    for f in flat:
        line = []
        for c in cols:
            v = f.get(c)
            if c == "max_memory_allocated_bytes" and isinstance(v, int | float):
                v = f"{v / 2**30:.2f}"
            elif isinstance(v, float):
                v = "" if math.isnan(v) else f"{v:.2f}"
            line.append("" if v is None else v)
        body.append(line)
    headers = [("peak_GiB" if c == "max_memory_allocated_bytes" else c) for c in cols]
    return md_table(headers, body)


def write_jsonl(rows: list[dict], path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


def run_spec_recording_memory(spec: RunSpec, snapshot: str | Path | None) -> dict:
    """``run_spec`` with the allocator's history recorded and dumped to ``snapshot`` (None: no recording);
    the row says what was dumped (``memory_snapshot``)."""
    history = MemoryHistory(snapshot, spec.device)
    history.start()
    try:
        row = run_spec(spec)
    finally:
        history.stop()
    if history.info:
        row["memory_snapshot"] = history.info
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Time one RunSpec; write the result row as JSON.")
    ap.add_argument("--spec", required=True, help="RunSpec fields as JSON")
    ap.add_argument("--out", help="write the row here (JSON); stdout otherwise")
    ap.add_argument("--memory", metavar="PICKLE", help="record the CUDA allocator's history; dump the snapshot here")
    args = ap.parse_args(argv)
    spec = RunSpec(**json.loads(args.spec))
    row = run_spec_recording_memory(spec, args.memory)
    text = json.dumps(row)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    print(markdown_table([row]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
