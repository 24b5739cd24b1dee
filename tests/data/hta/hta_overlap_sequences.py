"""HTA's communication/computation overlap and frequent CUDA kernel sequences ("aten::" roots) on one trace
folder; prints JSON. Run with HTA's own environment (HolisticTraceAnalysis 0.5.0, numpy < 2, pandas < 3):
    HTA_DISABLE_NS_ROUNDING=1 /work/venv-hta/bin/python tests/data/hta/hta_overlap_sequences.py FOLDER
"""

import json
import logging
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis  # noqa: E402

a = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
out = {}
ov = a.get_comm_comp_overlap(visualize=False)
out["comm_comp_overlap"] = [
    {"rank": int(r["rank"]), "comp_comm_overlap_pctg": float(r["comp_comm_overlap_pctg"])} for _, r in ov.iterrows()
]
seq = a.get_frequent_cuda_kernel_sequences("aten::", tempfile.mkdtemp(), visualize=False)
out["kernel_sequences_top"] = [
    {"pattern": r["pattern"], "count": int(r["count"]), "gpu_us": float(r["GPU kernel duration (us)"])}
    for _, r in seq.head(3).iterrows()
]
print(json.dumps(out))
