"""Report tables -> CSV or JSON strings, raw units, for scripts to consume."""

from __future__ import annotations

import json

from profiler_kit.report import Report


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
            records = json.loads(table.df.to_json(orient="records"))
            out[f"{key}.json"] = json.dumps({"title": table.title, "rows": records}, indent=1) + "\n"
    return out
