"""Shrink a torch.profiler trace for committing: keep GPU activity and annotated ranges.

Drops cpu_op, flow events and profiler overhead; keeps kernel, gpu_memcpy, gpu_memset,
user_annotation, gpu_user_annotation and metadata. ``--keep-runtime`` also keeps the
cuda_runtime/cuda_driver calls, which tie each kernel to the range that launched it
(without them a report cannot project GPU work onto ranges).
Usage: python scripts/trim_trace.py [--keep-runtime] IN.json.gz OUT.json.gz
"""

import gzip
import json
import sys

KEEP = {"kernel", "gpu_memcpy", "gpu_memset", "user_annotation", "gpu_user_annotation"}
RUNTIME = {"cuda_runtime", "cuda_driver"}

args = sys.argv[1:]
keep = KEEP | RUNTIME if "--keep-runtime" in args else KEEP
src, dst = [a for a in args if not a.startswith("--")]
with gzip.open(src, "rt") as fh:
    doc = json.load(fh)
doc["traceEvents"] = [
    e for e in doc["traceEvents"] if e.get("cat") in keep or e.get("ph") == "M" or e.get("cat") is None
]
with gzip.open(dst, "wt") as fh:
    json.dump(doc, fh)
