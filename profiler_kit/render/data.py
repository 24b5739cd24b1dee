"""Report tables -> CSV or JSON strings, raw units, for scripts to consume."""

from __future__ import annotations

import json
import math

import pandas as pd

from profiler_kit.report import Report


def json_value(value):
    """A cell as JSON: integers stay integers, floats keep Python's shortest exact form, missing is null."""
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def json_records(df: pd.DataFrame) -> list[dict]:
    """Rows as dicts of JSON values (``DataFrame.to_json`` prints 77662506.8 as 77662506.799999997)."""
    columns = [str(c) for c in df.columns]
    values = [df[c].astype(object).tolist() for c in df.columns]
    return [dict(zip(columns, map(json_value, row), strict=True)) for row in zip(*values, strict=True)]


def render_tables(report: Report, fmt: str) -> dict[str, str]:
    """Map ``<table key>.<fmt>`` to file content for every table ("csv" or "json").

    Keys are made unique by suffixing a counter, so two sections may share a title.
    """
    out: dict[str, str] = {}
    for table in report.tables():
        key, n = table.key, 2
        while f"{key}.{fmt}" in out:
            key, n = f"{table.key}_{n}", n + 1
        if fmt == "csv":
            out[f"{key}.csv"] = table.df.to_csv(index=False)
        else:
            records = json_records(table.df)
            out[f"{key}.json"] = json.dumps({"title": table.title, "rows": records}, indent=1) + "\n"
    return out
