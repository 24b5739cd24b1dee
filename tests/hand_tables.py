"""Normalized tables built by hand for tests whose answer is worked out by hand."""

from __future__ import annotations

import pandas as pd
from profiler_kit.analyze.tables import validate


def hand_table(rows: list[dict], schema: dict) -> pd.DataFrame:
    """``rows`` (start_ns and end_ns given) as a table of ``schema``: duration derived, every column the rows
    leave out filled with "" (text) or -1 (numbers), then checked as the readers' tables are."""
    df = pd.DataFrame(rows)
    df["duration_ns"] = df["end_ns"] - df["start_ns"]
    for col in schema:
        if col not in df:
            df[col] = "" if schema[col] == "category" else -1
    return validate(df, schema)
