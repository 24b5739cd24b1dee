"""NCCL kernel count and total time per GPU of the shared DDP export, as NVIDIA's `nsys stats` reports them.

Runs `nsys stats --report gputrace` (Nsight Systems 2022.4, Debian non-free) on a copy of
../shared/data/nsys_sqlite/lizhieffe__assignment2-systems__ddp53_profile.sqlite and sums the
rows whose Name starts with "nccl" per Device. Usage: python tests/data/ddp/make_ref.py [OUT.csv]
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

SRC = (
    Path(__file__).resolve().parents[3].parent
    / "shared/data/nsys_sqlite/lizhieffe__assignment2-systems__ddp53_profile.sqlite"
)


def nccl_per_device(sqlite: Path) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "ddp.sqlite"
        shutil.copy(sqlite, copy)
        subprocess.run(
            ["nsys", "stats", "--report", "gputrace", "--format", "csv", "--output", f"{tmp}/out", str(copy)],
            check=True, capture_output=True,
        )  # fmt: skip
        with open(f"{tmp}/out_gputrace.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        if r["Name"].startswith("nccl"):
            dev = int(re.search(r"\((\d+)\)$", r["Device"]).group(1))
            totals[dev][0] += 1
            totals[dev][1] += int(r["Duration (ns)"])
    return [{"device_id": d, "nccl_kernels": n, "nccl_total_ns": t} for d, (n, t) in sorted(totals.items())]


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("ref_nccl_per_device.csv")
    rows = nccl_per_device(SRC)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
