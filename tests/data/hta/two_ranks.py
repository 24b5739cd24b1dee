"""A two-rank trace set derived from the shared HTA NCCL trace (rank 0 of 2), with a known straggler per step.

Rank 0 is the file as it is. Rank 1 is the same file with distributedInfo.rank = 1 and each NCCL kernel moved
as a late or early rank's kernel would be: it ends when rank 0's does (a collective ends on every rank at
once) and starts ``late[step] * dur`` later (its rank arrived late, so it waited less: a shorter kernel) or,
for a negative figure, earlier (rank 0 is the late one: rank 1's kernel is longer). The step of a kernel is
the ProfilerStep#N open when its runtime call was made. So the slowest rank is 1 in steps 4 and 6 and 0 in
step 5, by construction; tests/test_stragglers.py checks profiler-kit and HTA (tests/data/hta/hta_figures.json,
``stragglers``) against it.

    python tests/data/hta/two_ranks.py OUT_DIR small|large   # writes OUT_DIR/rank-0.json.gz, OUT_DIR/rank-1.json.gz
"""

from __future__ import annotations

import copy
import gzip
import json
import sys
from pathlib import Path

SOURCE = "kineto/facebookresearch__HolisticTraceAnalysis__nccl_data.json.gz"  # under ../shared/data
# rank 1's lateness per step, x kernel time. "small": no kernel crosses HTA's duration filter (1% of the
# iteration: ~2.2 ms here) on one rank only; "large": the late rank's shorter kernels fall under it.
LATE = {
    "small": {"ProfilerStep#4": 0.05, "ProfilerStep#5": -0.05, "ProfilerStep#6": 0.05},
    "large": {"ProfilerStep#4": 0.3, "ProfilerStep#5": -0.2, "ProfilerStep#6": 0.1},
}
SLOWEST = {"ProfilerStep#4": 1, "ProfilerStep#5": 0, "ProfilerStep#6": 1}  # both sets


def make_two_ranks(src: Path, out_dir: Path, late: dict[str, float]) -> list[Path]:
    doc = json.load(gzip.open(src))
    events = doc["traceEvents"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime" and "args" in e}
    rank1 = copy.deepcopy(doc)
    rank1["distributedInfo"]["rank"] = 1
    for e in rank1["traceEvents"]:
        if e.get("cat") != "kernel" or not e["name"].startswith("nccl"):
            continue
        t = calls.get(e["args"].get("correlation"))
        step = next((s["name"] for s in steps if t is not None and s["ts"] <= t < s["ts"] + s["dur"]), None)
        if step is None:
            continue
        shift = round(late[step] * e["dur"], 3)
        e["ts"], e["dur"] = round(e["ts"] + shift, 3), round(e["dur"] - shift, 3)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, d in ((0, doc), (1, rank1)):
        path = out_dir / f"rank-{rank}.json.gz"
        with gzip.open(path, "wt") as f:
            json.dump(d, f)
        paths.append(path)
    return paths


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[3].parent / "shared" / "data"
    print(make_two_ranks(root / SOURCE, Path(sys.argv[1]), LATE[sys.argv[2]]))
