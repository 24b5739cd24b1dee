"""HTA's get_potential_stragglers on a folder of per-rank traces: overall and per profiler step; prints JSON.

Run with HTA's own environment (HolisticTraceAnalysis 0.5.0, numpy < 2, pandas < 3):
    HTA_DISABLE_NS_ROUNDING=1 /work/venv-hta/bin/python tests/data/hta/hta_stragglers.py FOLDER
"""

import json
import logging
import sys
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis  # noqa: E402

a = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
out = {"ranks": sorted(int(r) for r in a.t.get_all_traces())}
try:
    steps = a.get_profiler_steps()
    out["steps"] = [int(s) for s in steps]
    out["overall_top1"] = [int(r) for r in a.get_potential_stragglers(num_candidates=1)]
    out["per_step_top1"] = {
        f"ProfilerStep#{s}": [int(r) for r in a.get_potential_stragglers(profiler_steps=[s], num_candidates=1)]
        for s in steps
    }
except Exception as err:  # noqa: BLE001 - what HTA does on this input is the figure
    out["error"] = f"{type(err).__name__}: {err}"
print(json.dumps(out))
