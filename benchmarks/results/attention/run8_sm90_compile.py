"""Compile the dK/dV and forward kernels for sm_90 on a host without a GPU: registers, spills, shared memory.

Run 8 read these figures before spending device time (Triton compiles for a target named by hand and
ships ptxas and cuobjdump; no driver is needed). For the 64x64, 4-warp, 3-stage dK/dV kernel as committed
before run 8 it gives 218 registers and no spills, the figure the device reported in runs 5 and 7.
``gsb0`` counts the wgmma instructions that wait for the one before them: all of them (40 of 40) means
ptxas serialized the tensor-core pipeline (its message C7512 or C7515).

    python3 benchmarks/results/attention/run8_sm90_compile.py            # the committed defaults
    python3 benchmarks/results/attention/run8_sm90_compile.py --stages 3 --maxnreg 0 --opts '{"REORDER": true}'
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from workloads import flash_triton as ft  # noqa: E402

TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def build(kernel, sig: dict, consts: dict, warps: int, stages: int, maxnreg: int | None) -> str:
    """One line: the compiler's resource usage, spills in the SASS, serialized wgmma count."""
    fn = kernel
    while not isinstance(fn, triton.runtime.jit.JITFunction):
        fn = fn.fn
    sig = {**sig, **{k: "constexpr" for k in consts}}
    # what the launcher specializes on at this shape: 16-byte aligned pointers, N_CTX a multiple of 16
    attrs = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k, t in sig.items() if t[0] == "*" or k == "N_CTX"}
    opts = {"num_warps": warps, "num_stages": stages} | ({"maxnreg": maxnreg} if maxnreg else {})
    compiled = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32), options=opts)
    cubin = Path(os.environ.get("TMPDIR", "/tmp")) / f"{fn.__name__}.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    cubin.with_suffix(".ttgir").write_text(compiled.asm["ttgir"])  # the GPU IR, beside the cubin, to read
    cubin.with_suffix(".ptx").write_text(compiled.asm["ptx"])
    usage = subprocess.run([TOOLS / "cuobjdump", "--dump-resource-usage", cubin], capture_output=True, text=True)
    sass = subprocess.run([TOOLS / "cuobjdump", "--dump-sass", cubin], capture_output=True, text=True).stdout
    line = next(x.strip() for x in usage.stdout.splitlines() if "REG:" in x)
    wgmma = [x for x in sass.splitlines() if "HGMMA" in x]
    return (f"{fn.__name__}: {line.split(' LOCAL')[0]} shared {compiled.metadata.shared} B, spill loads "
            f"{sass.count('LDL')}, wgmma {len(wgmma)} (gsb0 {sum('gsb0' in x for x in wgmma)})")  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-head", type=int, default=64)
    p.add_argument("--block", type=int, nargs=2, default=[64, 64], help="dK/dV BLOCK_M BLOCK_N")
    p.add_argument("--warps", type=int, default=4)
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--maxnreg", type=int, default=168, help="0: no cap")
    p.add_argument("--opts", default="{}", help="JSON overrides of BWD_OPTS")
    args = p.parse_args()
    d, (bm, bn) = args.d_head, args.block
    opts = {**ft.BWD_OPTS, **json.loads(args.opts)}
    desc = f"tensordesc<bf16[{bm},{d}]>" if opts["QDO_TMA"] else "*bf16"
    sig = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "DO": "*bf16", "Q_DESC": desc, "DO_DESC": desc, "DK": "*bf16",
           "DV": "*bf16", "DQ": "*fp32", "DQ_DESC": f"tensordesc<fp32[{bm},{d}]>", "L": "*fp32", "D": "*fp32",
           "sm_scale": "fp32", "N_CTX": "i32"}  # fmt: skip
    consts = {"HEAD_DIM": d, "IS_CAUSAL": True, "DQ_MODE": 2, **opts, "BLOCK_M": bm, "BLOCK_N": bn, "EVEN": True}
    print(build(ft._flash_bwd_dkdv_kernel, sig, consts, args.warps, args.stages, args.maxnreg or None))
    sig = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "K_DESC": "*bf16", "V_DESC": "*bf16", "Out": "*bf16",
           "L": "*fp32", "sm_scale": "fp32", "N_CTX": "i32"}  # fmt: skip
    consts = {"HEAD_DIM": d, "IS_CAUSAL": True, "TMA": False, "HEAD_GROUP": ft.FWD_HEAD_GROUP, "BLOCK_M": 128,
              "BLOCK_N": 64, "EVEN": True}  # fmt: skip
    print(build(ft._flash_fwd_kernel, sig, consts, 8, 4, 112))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
