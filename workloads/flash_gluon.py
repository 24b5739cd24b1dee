"""The FlashAttention-2 backward's dK/dV kernel for Hopper in Gluon (Triton's explicit dialect).

The ``tl.dot`` version (``flash_triton._flash_bwd_dkdv_kernel``) waits on every product that is not an
accumulator as soon as it is issued, and moves dS through shared memory and back to registers to
transpose it for the dQ product (results/attention/README.md, runs 10a and 13). Here the waits are
written out: S and dP are issued together and waited for one at a time, dS is stored to shared memory
once and read from there by both the dK and the dQ product (the latter through a transposed view),
and the dQ share leaves through an asynchronous TMA reduce into the fp32 dQ buffer. The tiles are
the ``tl.dot`` kernel's best (64 keys x 64 queries, 4 warps), so that three programs fit on an SM.

Hopper only, no interpreter: ``backward_kernels(..., mode="gluon")`` falls back to the ``tma`` mode
wherever ``supported`` says no. Tested on the GPU by the benchmark's checks and compiled for sm_90
without a GPU by ``tests/test_flash_gluon.py``.
"""

from __future__ import annotations

import torch
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

LOG2E = gl.constexpr(1.4426950408889634)
DEFAULT = (64, 64, 4, 3, None, 1, True)  # the fastest of run 14 (H200, 1x16x16384x64 bf16 causal)


@builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """Add the shared-memory tile ``src`` into global memory at ``coord`` (TMA bulk reduce, asynchronous)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


@gluon.constexpr_function
def _rows_layout(rows, cols, num_warps):
    """wgmma accumulator of a (rows, cols) product: warpgroups stacked along the rows (rows = 16 x warps)."""
    assert rows == 16 * num_warps, (rows, num_warps)
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, cols, 16])


@gluon.constexpr_function
def _dq_layout(rows, cols, num_warps):
    """wgmma accumulator of the (BLOCK_M, HEAD_DIM) dQ tile: a warpgroup's rows, warpgroups side by side."""
    groups = num_warps // 4
    return gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[rows // 16, num_warps * 16 // rows], instr_shape=[16, cols // groups, 16]
    )


@gluon.jit
def _tile_order(pid, num_tiles, n_bh, HEAD_GROUP: gl.constexpr):
    """Program id -> (key tile, head), heads in groups (as ``flash_triton._tile_order``)."""
    group = pid // (num_tiles * HEAD_GROUP)
    first = group * HEAD_GROUP
    size = gl.minimum(n_bh - first, HEAD_GROUP)
    r = pid - first * num_tiles
    return r // size, first + r % size


@gluon.jit
def _half(
    h, dk, dv, k_smem, v_smem, q_s, do_s, ds_smem, L, D, row0, start_m, start_n, qk_scale, sm_scale,
    MASK: gl.constexpr, PARTS: gl.constexpr, TOGETHER: gl.constexpr,
):  # fmt: skip
    """dK, dV for one part (``1 / PARTS``) of a query tile; its dS goes into its columns of ``ds_smem``."""
    BLOCK_N: gl.constexpr = k_smem.type.shape[0]
    HEAD_DIM: gl.constexpr = k_smem.type.shape[1]
    PART: gl.constexpr = ds_smem.type.shape[1] // PARTS
    dtype: gl.constexpr = k_smem.dtype
    NW: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = _rows_layout(BLOCK_N, PART, NW)
    d_layout: gl.constexpr = _rows_layout(BLOCK_N, HEAD_DIM, NW)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=d_layout, k_width=2)
    vec_layout: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])  # L and D one value a thread until used
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)

    q_h = q_s.slice(h * PART, PART, dim=0)
    do_h = do_s.slice(h * PART, PART, dim=0)
    offs = row0 + start_m + h * PART + gl.arange(0, PART, layout=vec_layout)
    lse = gl.load(L + offs)
    delta = gl.load(D + offs)
    zero = gl.zeros([BLOCK_N, PART], gl.float32, s_layout)
    s_t = warpgroup_mma(k_smem, q_h.permute((1, 0)), zero, use_acc=False, is_async=True)
    if TOGETHER:  # dP runs behind S (its 32 registers a thread are taken while P is computed)
        dp_t = warpgroup_mma(v_smem, do_h.permute((1, 0)), zero, use_acc=False, is_async=True)
    lse = gl.convert_layout(lse * LOG2E, col_layout)
    s_t = warpgroup_mma_wait(num_outstanding=1 if TOGETHER else 0, deps=(s_t,))
    p_t = gl.exp2(s_t * qk_scale - lse[None, :])
    if MASK:  # a tile that crosses the diagonal: keys after the query are masked
        rows = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
        cols = start_m + h * PART + gl.arange(0, PART, layout=col_layout)
        p_t = gl.where(cols[None, :] >= rows[:, None], p_t, 0.0)
    dv = warpgroup_mma(gl.convert_layout(p_t.to(dtype), p_layout), do_h, dv, is_async=True)
    if not TOGETHER:  # dP behind dV
        dp_t = warpgroup_mma(v_smem, do_h.permute((1, 0)), zero, use_acc=False, is_async=True)
    delta = gl.convert_layout(delta * sm_scale, col_layout)
    dp_t, dv = warpgroup_mma_wait(num_outstanding=1 if TOGETHER else 0, deps=(dp_t, dv))
    ds_h = ds_smem.slice(h * PART, PART, dim=1)
    ds_h.store((p_t * (dp_t * sm_scale - delta[None, :])).to(dtype))  # dS carries the softmax scale
    fence_async_shared()
    dk = warpgroup_mma(ds_h, q_h, dk, is_async=True)
    return dk, dv


@gluon.jit
def _step(
    i, dk, dv, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ready, q_desc, do_desc, dq_desc, L, D,
    row0, lo, start_n, num_m, qk_scale, sm_scale, MASK: gl.constexpr, STAGES: gl.constexpr, PARTS: gl.constexpr,
    TOGETHER: gl.constexpr,
):  # fmt: skip
    """One query tile: dK and dV accumulated, its dQ share sent off; the next load into its stage started."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    q_layout: gl.constexpr = _dq_layout(BLOCK_M, HEAD_DIM, gl.num_warps())
    stage = i % STAGES
    start_m = lo + i * BLOCK_M
    mbarrier.wait(ready.index(stage), phase=(i // STAGES) & 1)
    q_s = q_smem.index(stage)
    do_s = do_smem.index(stage)
    for h in gl.static_range(PARTS):
        dk, dv = _half(
            h, dk, dv, k_smem, v_smem, q_s, do_s, ds_smem, L, D, row0, start_m, start_n, qk_scale, sm_scale, MASK, PARTS, TOGETHER
        )  # fmt: skip
    dq = warpgroup_mma(
        ds_smem.permute((1, 0)), k_smem, gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, q_layout), use_acc=False,
        is_async=True,
    )  # fmt: skip
    dq, dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dq, dk, dv))
    nxt = i + STAGES  # this stage's buffers are free again: start loading the tile STAGES ahead
    mbarrier.expect(ready.index(stage), 2 * q_desc.block_type.nbytes, pred=nxt < num_m)
    tma.async_copy_global_to_shared(q_desc, [row0 + lo + nxt * BLOCK_M, 0], ready.index(stage), q_s, pred=nxt < num_m)
    tma.async_copy_global_to_shared(do_desc, [row0 + lo + nxt * BLOCK_M, 0], ready.index(stage), do_s, pred=nxt < num_m)
    tma.store_wait(pendings=0)  # the previous tile's reduce has read dq_smem
    dq_smem.store(dq)
    fence_async_shared()
    _tma_reduce_add(dq_desc, [row0 + start_m, 0], dq_smem)
    return dk, dv


@gluon.jit
def _gluon_dkdv_kernel(
    q_desc, k_desc, v_desc, do_desc, dq_desc, DK, DV, L, D, sm_scale, N_CTX,
    IS_CAUSAL: gl.constexpr, HEAD_GROUP: gl.constexpr, STAGES: gl.constexpr, PARTS: gl.constexpr,
    TOGETHER: gl.constexpr,
):  # fmt: skip
    """One program per key tile: dK, dV over the query tiles that see it; each tile's dQ share added into fp32 dQ."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    d_layout: gl.constexpr = _rows_layout(BLOCK_N, HEAD_DIM, gl.num_warps())

    num_n = gl.cdiv(N_CTX, BLOCK_N)
    pid_n, pid_bh = _tile_order(gl.program_id(0), num_n, gl.num_programs(0) // num_n, HEAD_GROUP)
    row0 = pid_bh * N_CTX
    start_n = pid_n * BLOCK_N
    lo = start_n if IS_CAUSAL else 0
    num_m = (N_CTX - lo) // BLOCK_M

    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], do_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, BLOCK_M], k_desc.layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HEAD_DIM], dq_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)

    mbarrier.expect(kv_bar, 2 * k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row0 + start_n, 0], kv_bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [row0 + start_n, 0], kv_bar, v_smem)
    for s in gl.static_range(STAGES):  # the first STAGES query tiles
        mbarrier.expect(ready.index(s), 2 * q_desc.block_type.nbytes, pred=s < num_m)
        tma.async_copy_global_to_shared(
            q_desc, [row0 + lo + s * BLOCK_M, 0], ready.index(s), q_smem.index(s), pred=s < num_m
        )
        tma.async_copy_global_to_shared(
            do_desc, [row0 + lo + s * BLOCK_M, 0], ready.index(s), do_smem.index(s), pred=s < num_m
        )

    qk_scale = sm_scale * LOG2E
    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, d_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, d_layout)
    mbarrier.wait(kv_bar, phase=0)
    first = 0
    if IS_CAUSAL:  # the tiles that cross the diagonal first, masked; the rest need no mask
        for i in gl.static_range(BLOCK_N // BLOCK_M):
            dk, dv = _step(
                i, dk, dv, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ready, q_desc, do_desc, dq_desc, L, D,
                row0, lo, start_n, num_m, qk_scale, sm_scale, True, STAGES, PARTS, TOGETHER,
            )  # fmt: skip
        first = BLOCK_N // BLOCK_M
    for i in range(first, num_m):
        dk, dv = _step(
            i, dk, dv, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, ready, q_desc, do_desc, dq_desc, L, D,
            row0, lo, start_n, num_m, qk_scale, sm_scale, False, STAGES, PARTS, TOGETHER,
        )  # fmt: skip
    tma.store_wait(pendings=0)
    mbarrier.invalidate(kv_bar)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(s))

    rows = row0 + start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, d_layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, d_layout))
    off = rows.to(gl.int64)[:, None] * HEAD_DIM + cols[None, :]
    gl.store(DK + off, dk.to(dtype))
    gl.store(DV + off, dv.to(dtype))


def supported(q: torch.Tensor, is_causal: bool) -> bool:
    """The shapes this kernel handles: 16-bit inputs on Hopper, head dim 64, whole 128-row tiles."""
    bh, n, d = q.shape
    return (
        q.is_cuda
        and torch.cuda.get_device_capability(q.device)[0] == 9
        and q.dtype in (torch.bfloat16, torch.float16)
        and d == 64
        and n % 128 == 0
    )


def _desc(t: torch.Tensor, block: list[int]) -> TensorDescriptor:
    dtype = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}[t.dtype]
    flat = t.view(-1, t.shape[-1])
    layout = gl.NVMMASharedLayout.get_default_for(block, dtype)
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), block, layout)


def dkdv(q, k, v, do, dq, lse, delta, dk, dv, sm_scale, is_causal, config=(64, 64, 4, 2, None, 1, True), head_group=4):
    """Launch: dK, dV into ``dk``, ``dv``; each dQ share added into the zeroed fp32 ``dq``.

    ``config``: query rows a step, key rows a program (16 per warp), warps, load stages, register cap,
    parts a step is cut into (halves need fewer registers), S and dP issued together.
    """
    block_m, block_n, warps, stages, maxnreg, parts, together = config
    bh, n, d = q.shape
    grid = (n // block_n * bh,)
    _gluon_dkdv_kernel[grid](
        _desc(q, [block_m, d]), _desc(k, [block_n, d]), _desc(v, [block_n, d]), _desc(do, [block_m, d]),
        _desc(dq, [block_m, d]), dk, dv, lse, delta, sm_scale, n, is_causal, head_group, stages, parts, together,
        num_warps=warps, maxnreg=maxnreg or None,
    )  # fmt: skip
