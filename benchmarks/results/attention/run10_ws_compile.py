"""Run 10 (no device time): does Triton's Hopper warp specialization take the dK/dV kernel?

Writes a copy of ``workloads/flash_triton.py`` whose dK/dV query loop is
``tl.range(lo, hi, BLOCK_M, warp_specialize=True)`` (``--unmasked-only``: only the loop
without the causal mask) and compiles it for sm_90 on this host, as run8_sm90_compile.py
does, for each (num_warps, num_stages) asked. Prints the compiler's failure or the
kernel's registers, and whether the TTGIR holds a warp-specialized region
(``ttg.warp_specialize``) at all.

    python3 benchmarks/results/attention/run10_ws_compile.py
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LOOP = "    for start_m in range(lo, hi, BLOCK_M):\n"
CHILD = """
import importlib.util, sys, triton
sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r})
spec = importlib.util.spec_from_file_location("flash_ws", {src!r})
ft = importlib.util.module_from_spec(spec); spec.loader.exec_module(ft)
import run8_sm90_compile as c
c.ft = ft
orig = triton.compile
def compile_(*a, **k):
    out = orig(*a, **k)
    print("warp_specialize regions in TTGIR:", out.asm["ttgir"].count("ttg.warp_specialize"))
    return out
c.triton.compile = compile_
sys.argv = ["x", "--warps", "{warps}", "--stages", "{stages}", "--maxnreg", "{maxnreg}"]
c.main()
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--unmasked-only", action="store_true")
    p.add_argument("--configs", nargs="+", default=["4,2,168", "4,3,0", "8,2,0"], help="warps,stages,maxnreg")
    args = p.parse_args()
    src = (ROOT / "workloads" / "flash_triton.py").read_text()
    assert src.count(LOOP) == 1, "the dK/dV loop changed; update LOOP"
    flag = "not MASK" if args.unmasked_only else "True"
    tmp = Path(tempfile.mkdtemp()) / "flash_ws.py"
    tmp.write_text(src.replace(LOOP, f"    for start_m in tl.range(lo, hi, BLOCK_M, warp_specialize={flag}):\n"))
    for cfg in args.configs:
        warps, stages, maxnreg = cfg.split(",")
        code = CHILD.format(root=str(ROOT), here=str(Path(__file__).parent), src=str(tmp), warps=warps,
                            stages=stages, maxnreg=maxnreg)  # fmt: skip
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        lines = (out.stdout + out.stderr).splitlines()
        keep = [
            x for x in lines if x.startswith(("_flash_bwd", "warp_specialize")) or "Assertion" in x or "error:" in x
        ]
        print(f"num_warps {warps}, num_stages {stages}, maxnreg {maxnreg}:")
        print("\n".join("  " + x[:200] for x in keep[:4]) or "  (no output)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
