"""Run NVIDIA's own ``nsys stats`` reports on an export and load them as DataFrames.

Used by the agreement tests; nsys writes into a copy so read-only inputs work.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd

REPORTS = ("gpukernsum", "nvtxsum", "nvtxkernsum", "nvtxgpuproj")


def nsys_stats(export: Path, workdir: Path, reports=REPORTS, fmt: str = "csv") -> dict[str, pd.DataFrame | None]:
    """Each report as a DataFrame (None when nsys says the file lacks its data).

    ``reports`` may carry arguments ("gpukernsum:base"); ``fmt`` "csv:mem=B" gives sizes in bytes.
    """
    copy = workdir / export.name
    shutil.copy(export, copy)
    subprocess.run(
        ["nsys", "stats", "-q", "--force-export", "false", "--format", fmt, "--report", ",".join(reports),
         "--output", str(workdir / "ref"), str(copy)],
        check=False, capture_output=True, timeout=600,
    )  # fmt: skip
    out = {}
    for rep in reports:
        path = workdir / f"ref_{rep.replace(':', '_')}.csv"
        out[rep] = pd.read_csv(path) if path.exists() and path.stat().st_size else None
    return out
