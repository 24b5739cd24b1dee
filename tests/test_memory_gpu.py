"""On a GPU: provoke out-of-memory errors with history recording on and check the report against torch.

Each scenario runs in a fresh process (recording starts before its first CUDA allocation), allocates a
few tensors, frees some, then asks for more than it can get. The snapshot's ``oom`` entry must carry the
numbers of torch's own exception message ("Tried to allocate X. GPU 0 has a total capacity of T of which
F is free"), and the replayed peak must equal ``torch.cuda.max_memory_allocated()`` to the byte.

Run: PYTHONPATH=$PWD python -m pytest -q -p no:cacheprovider -m gpu tests/test_memory_gpu.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
from profiler_kit.analyze.memory import analyze_snapshot
from profiler_kit.analyze.memory_snapshot import read_memory_snapshot

from profiler_kit.build_memory import build_memory_report, load_snapshots
from profiler_kit.render.markdown import render_markdown

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SCENARIO = textwrap.dedent(
    """
    import json, sys, torch
    out, fraction = sys.argv[1], float(sys.argv[2])
    torch.cuda.memory._record_memory_history(max_entries=1000000)
    if fraction < 1:
        torch.cuda.set_per_process_memory_fraction(fraction)
    keep = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(4)]
    tmp = [torch.empty(100 << 20, dtype=torch.uint8, device="cuda") for _ in range(3)]
    del tmp[1]
    total = torch.cuda.get_device_properties(0).total_memory
    ask = 2 * total if fraction == 1 else int(total * fraction) // (2 << 20) * (2 << 20)  # a multiple of 2 MiB
    try:
        torch.empty(ask, dtype=torch.uint8, device="cuda")
        message = None
    except torch.OutOfMemoryError as err:
        message = str(err)
    torch.cuda.memory._dump_snapshot(out + "/oom.pickle")
    info = {"message": message, "requested": ask, "max_memory_allocated": torch.cuda.max_memory_allocated(),
            "max_memory_reserved": torch.cuda.max_memory_reserved(), "total": total}
    json.dump(info, open(out + "/oom.json", "w"))
    """
)


def torch_format_size(n: int) -> str:
    """c10's format_size (CUDACachingAllocator.cpp), which writes the sizes of the OOM message."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1048576:
        return f"{n / 1024:.2f} KiB"
    if n <= 1073741824:
        return f"{n / 1048576:.2f} MiB"
    return f"{n / 1073741824:.2f} GiB"


@pytest.mark.parametrize(("fraction", "verdict"), [(1.0, "shortage"), (0.5, "device had room")])
def test_provoked_oom_matches_torch(tmp_path, fraction, verdict):
    subprocess.run([sys.executable, "-c", SCENARIO, str(tmp_path), str(fraction)], check=True, timeout=300)
    info = json.loads((tmp_path / "oom.json").read_text())
    assert info["message"], "no OutOfMemoryError was raised"
    m = re.search(
        r"Tried to allocate (.+?)\. GPU \d+ has a total capacity of (.+?) of which (.+?) is free", info["message"]
    )
    assert m, info["message"]
    snap = read_memory_snapshot(tmp_path / "oom.pickle")
    a = analyze_snapshot(snap)
    [oom] = a.ooms
    assert oom["requested_bytes"] == info["requested"]  # a multiple of 2 MiB: the segment size torch tried
    assert torch_format_size(oom["requested_bytes"]) == m.group(1)
    assert torch_format_size(oom["device_free_bytes"]) == m.group(3)  # the same cudaMemGetInfo call
    assert oom["verdict"] == verdict
    assert a.peak_allocated["bytes"] == info["max_memory_allocated"]
    assert a.peak_reserved["bytes"] == info["max_memory_reserved"]
    assert oom["allocated_bytes"] == 4 * (256 << 20) + 2 * (100 << 20)
    md = render_markdown(build_memory_report(load_snapshots([tmp_path / "oom.pickle"])))
    assert md.startswith("# GPU memory") and "## Out of memory:" in md
