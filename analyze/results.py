"""Reader for the benchmark result files the workloads write: JSON Lines, one object per row."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from analyze.errors import InputError


def read_jsonl(path: str | Path) -> pd.DataFrame:
    """Rows of a JSONL file as a DataFrame; blank lines are skipped.

    Raises InputError for a missing file, a line that is not a JSON object, or a file without rows.
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
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no result rows")
    return pd.DataFrame(rows)
