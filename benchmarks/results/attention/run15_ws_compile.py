"""Run 15: compile the warp-specialized Gluon dK/dV kernel (workloads/flash_gluon_ws.py) for sm_90 without a GPU.

One line per config: registers (the launch figure; setmaxnreg values of the partitions from the PTX), spills
(local loads in the SASS), shared memory, wgmma count and how many ptxas serialized (gsb0), ptxas warnings.

    python3 benchmarks/results/attention/run15_ws_compile.py            # every config in CONFIGS
    python3 benchmarks/results/attention/run15_ws_compile.py nc2 nc1    # some of them
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from workloads import flash_gluon_ws as ws  # noqa: E402

TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def compile_config(config, n: int = 16384, causal: bool = True, dtype=torch.bfloat16):
    """The compiled kernel for ``config`` at (16 heads, n, 64) (``flash_gluon_ws.compile_sm90``)."""
    return ws.compile_sm90(config, n, causal, dtype)


def report(name, config) -> str:
    t0 = time.time()
    try:
        compiled = compile_config(config)
    except Exception as e:  # noqa: BLE001 - one line per config, whatever failed
        return f"{name} {config}: FAILED {type(e).__name__}: {str(e).splitlines()[-1][:300] if str(e) else ''}"
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    cubin = tmp / f"ws_{name}.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    ptx = cubin.with_suffix(".ptx")
    ptx.write_text(compiled.asm["ptx"])
    cubin.with_suffix(".ttgir").write_text(compiled.asm["ttgir"])
    regs = sorted({int(x) for x in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", compiled.asm["ptx"])})
    sass = subprocess.run([TOOLS / "cuobjdump", "--dump-sass", cubin], capture_output=True, text=True).stdout
    usage = subprocess.run([TOOLS / "cuobjdump", "--dump-resource-usage", cubin], capture_output=True, text=True)
    line = next((x.strip() for x in usage.stdout.splitlines() if "REG:" in x), "?")
    pt = subprocess.run(
        [TOOLS / "ptxas", "-arch=sm_90a", "-v", ptx, "-o", os.devnull], capture_output=True, text=True
    ).stderr  # fmt: skip
    warns = sorted(set(re.findall(r"\(C75\d\d\)", pt)))
    spill = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", pt)
    wgmma = [x for x in sass.splitlines() if "HGMMA" in x]
    return (
        f"{name} {config}: {line.split(' LOCAL')[0]}, setmaxnreg {regs}, shared {compiled.metadata.shared} B, "
        f"spill bytes (st, ld) {spill}, LDL {sass.count('LDL')}, wgmma {len(wgmma)} "
        f"(gsb0 {sum('gsb0' in x for x in wgmma)}), ptxas warnings {warns}, {time.time() - t0:.1f} s"
    )


def main() -> int:
    names = sys.argv[1:] or list(ws.CONFIGS)
    for name in names:
        print(report(name, ws.CONFIGS[name]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
