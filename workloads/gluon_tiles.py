"""Pieces both warp-specialized Gluon attention kernels use (the d 128 forward, the d 64 dK/dV backward)."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.constexpr_function
def acc_layout(cols):
    """wgmma accumulator of a (64, cols) product on one warpgroup."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, cols, 16])


@gluon.jit
def tile_order(pid, num_tiles, n_bh, HEAD_GROUP: gl.constexpr):
    """Program id -> (tile rank, head), heads in groups (as ``flash_triton._tile_order``)."""
    group = pid // (num_tiles * HEAD_GROUP)
    first = group * HEAD_GROUP
    size = gl.minimum(n_bh - first, HEAD_GROUP)
    r = pid - first * num_tiles
    return r // size, first + r % size
