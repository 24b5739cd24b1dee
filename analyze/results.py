"""Reader for the benchmark result files the workloads write: JSON Lines, one object per row."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from profiler_kit.analyze.errors import InputError


def read_jsonl(path: str | Path, fields: dict | None = None) -> pd.DataFrame:
    """Rows of a JSONL file as a DataFrame; blank lines are skipped.

    Raises InputError for a missing file, a line that is not a JSON object, a row whose ``fields``
    (see RUN_FIELDS) have other types or that lacks one of them (those without "?"), or a file without rows.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{path}:{i}: not JSON ({err.msg}); a truncated results file?") from None
        if not isinstance(row, dict):
            raise InputError(f"{path}:{i}: expected one JSON object per line")
        problem = fields_problem(row, fields or {})
        if problem:
            raise InputError(f"{path}:{i}: {problem}")
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no result rows")
    return pd.DataFrame(rows)


# The fields of the result files that reports read, with their JSON types. A key without "?" must be there
# (when its parent is); one ending in "?" may be absent or null. "*" stands for any key, [fields] for a list of
# such items. Other fields are not checked.
NUMBER = (int, float)
PHASE_STATS = dict.fromkeys(("n?", "mean?", "std?", "min?", "max?"), NUMBER)
TIMING = {"phases?": {"*": PHASE_STATS}}
CALIBRATION_FIELDS = {"device?": str, "gemm?": {"*": {"tflops?": NUMBER}}, "copy?": {"bytes_per_s?": NUMBER}}
RUN_FIELDS = {
    "run_id": str,
    "status": str,
    "backend?": str,
    "max_memory_allocated_bytes?": int,
    "spec": {
        **dict.fromkeys(("workload?", "size?", "attention?", "mode?", "precision?", "device?"), str),
        **dict.fromkeys(("ctx?", "batch?", "heads?", "d_head?", "steps?", "warmup?"), int),
        **dict.fromkeys(("fused_adamw?", "compile?"), bool),
    },
    "unprofiled?": TIMING,
    "profiled?": TIMING,
    "gpu?": {"name?": str},
    "matmul?": {"allow_tf32?": bool},
    "model?": {**dict.fromkeys(("vocab", "d_model", "d_ff", "layers", "heads", "batch", "ctx"), int), "d_head?": int},
    "calibration?": CALIBRATION_FIELDS,
}
ALLREDUCE_FIELDS = {
    **dict.fromkeys(("backend", "device"), str),
    **dict.fromkeys(("world_size", "size_bytes", "iters", "gpus_on_host?"), int),
    **dict.fromkeys(("time_s_median", "algbw_bytes_per_s", "busbw_bytes_per_s"), NUMBER),
}
DDP_STEP_FIELDS = {
    **dict.fromkeys(("label", "variant", "backend", "device", "size", "launch?"), str),
    **dict.fromkeys(("world_size", "ctx", "batch_per_rank", "warmup", "steps", "gpus_on_host?"), int),
    "bucket_mb?": NUMBER,
    "profiled?": bool,
    "step_s": [NUMBER],
}


def read_json_fields(path: str | Path, fields: dict) -> dict:
    """A JSON object from ``path`` whose ``fields`` have their types (see RUN_FIELDS); else InputError."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not JSON ({getattr(err, 'msg', err)}); a truncated file?") from None
    problem = fields_problem(data, fields, "")
    if problem:
        raise InputError(f"{path}: {problem}")
    return data


def fields_problem(value, fields, where: str = "") -> str | None:
    """What in ``value`` does not match ``fields`` (see RUN_FIELDS): a missing key or a value of another type; or None."""
    if isinstance(fields, list):  # [item fields]: a list of such items
        if not isinstance(value, list):
            return f"{where} should be a list, found {value!r:.40}"
        return next((p for i, v in enumerate(value) if (p := fields_problem(v, fields[0], f"{where}[{i}]"))), None)
    if not isinstance(fields, dict):
        types = fields if isinstance(fields, tuple) else (fields,)
        if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
            return None
        name = "a number" if types == NUMBER else " or ".join(_JSON_NAMES[t] for t in types)
        return f"{where} should be {name}, found {value!r:.40}"
    if not isinstance(value, dict):
        return f"{where or 'the file'} should be a JSON object, found {value!r:.40}"
    missing = [k for k in fields if k != "*" and not k.endswith("?") and k not in value]
    if missing:
        return f"{where + ' has ' if where else ''}no {', '.join(missing)}"
    for key, item in value.items():
        spec = fields.get(key, fields.get(f"{key}?", fields.get("*")))
        if spec is None or (item is None and f"{key}?" in fields):
            continue
        problem = fields_problem(item, spec, f"{where}.{key}".lstrip("."))
        if problem:
            return problem
    return None


_JSON_NAMES = {str: "text", int: "an integer", float: "a number", bool: "true or false", list: "a list"}
