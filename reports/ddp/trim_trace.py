"""Shrink a torch.profiler trace for committing: keep GPU activity and annotated ranges.

Drops cpu_op, cuda_runtime/cuda_driver, flow events and profiler overhead; keeps kernel, gpu_memcpy,
gpu_memset, user_annotation, gpu_user_annotation and metadata.
Usage: python reports/ddp/trim_trace.py IN.json.gz OUT.json.gz
"""

import gzip
import json
import sys

KEEP = {"kernel", "gpu_memcpy", "gpu_memset", "user_annotation", "gpu_user_annotation"}

src, dst = sys.argv[1], sys.argv[2]
with gzip.open(src, "rt") as fh:
    doc = json.load(fh)
doc["traceEvents"] = [
    e for e in doc["traceEvents"] if e.get("cat") in KEEP or e.get("ph") == "M" or e.get("cat") is None
]
with gzip.open(dst, "wt") as fh:
    json.dump(doc, fh)
