"""What the Gluon kernels' tests share: whether Gluon and an sm_90 GPU are here, and ptxas's word on a kernel."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest


def gluon_available() -> bool:
    try:
        import triton.experimental.gluon.language  # noqa: F401
    except ImportError:
        return False
    return True


def sm90() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


def ptxas_spills(ptx: str, folder: Path) -> tuple[list[int], str]:
    """Assemble ``ptx`` for sm_90a with the ptxas that Triton ships (skip where it ships none): the spill-store
    bytes of each function and ptxas's verbose output. Fails when ptxas fails, or serializes a wgmma (warnings
    C7512/C7515, or info C7514 where a register of a product in flight is read: the kernel would run, far
    slower)."""
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not ptxas.exists():
        pytest.skip("ptxas not shipped with this triton")
    (folder / "k.ptx").write_text(ptx)
    out = subprocess.run(
        [ptxas, "-arch=sm_90a", "-v", folder / "k.ptx", "-o", folder / "k.cubin"], capture_output=True, text=True
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert not re.search(r"C751[245]", out.stderr), out.stderr[-2000:]
    return [int(x) for x in re.findall(r"(\d+) bytes spill stores", out.stderr)], out.stderr[-2000:]


def sdpa_reference(q, k, v, do, causal: bool) -> tuple[list, list[float]]:
    """fp32 math attention's gradients of ``q``, ``k``, ``v`` for ``do`` (the reference tensors, ``.grad`` set) and
    SDPA's own relative errors against them on the 16-bit inputs: the bar a kernel's dQ, dK, dV are held to. K/V may
    have fewer heads (``enable_gqa``)."""
    import torch

    sdpa = torch.nn.functional.scaled_dot_product_attention
    gqa = k.shape[-3] != q.shape[-3]
    ref = [t.float().requires_grad_() for t in (q, k, v)]
    sdpa(*ref, is_causal=causal, enable_gqa=gqa).backward(do.float())
    mine = [t.clone().requires_grad_() for t in (q, k, v)]
    sdpa(*mine, is_causal=causal, enable_gqa=gqa).backward(do)
    return ref, [((m.grad.float() - r.grad).norm() / r.grad.norm()).item() for m, r in zip(mine, ref, strict=True)]
