"""The FlashAttention backward for Hopper at head dim 256 in Gluon, warp-specialized (FlashAttention-3's hdim-256
layout; issue 26).

At d 256 Triton assembles no good dK/dV tiles (0.26-0.29x SDPA's speed). As FlashAttention-3, a program owns 64 keys
and the two consumer warpgroups split the head dim, each holding dK and dV of all 64 keys over its 128 columns
(2 x 64 fp32 registers a thread):

- a 1-warp load partition: K and V of the program's 64 keys once, then the Q and dO tiles (64 query rows) with their
  rows of L and D (log-sum-exp, rowsum(dO O)) into a ``STAGES``-deep ring (``ready`` / ``empty`` mbarriers);
- two consumer warpgroups; per query tile consumer ``C`` computes S^T = K Q^T and dP^T = V dO^T (all 64 keys, its
  32 queries: a contraction over the whole head dim), P^T and dS^T, and writes them into shared tiles of the 64
  keys by 64 queries (its 32 columns; ``p_ready`` / ``ds_ready``, count 2, ``P_BUFS`` buffers), so that each
  consumer has them for all 64 queries: dV += P^T dO and dK += dS^T Q over its 128 columns (A from shared memory),
  then dQ = dS K over its 128 columns in ``DQ_COLS``-column products, each staged in fp32 shared memory
  (``DQ_BUFS`` tiles a consumer) and added into the fp32 dQ buffer by an asynchronous TMA reduce.

dV is issued as soon as both halves of P^T are there, so it runs while dS^T is computed; the Q/dO stage is
released once dV and dK are done, before dQ is staged, so that the next tile's load overlaps it. Every product of
a tile is waited for at its end (nothing may stay in flight across iterations, C7514). With one P/dS buffer
(``P_BUFS`` 1) a consumer writes P^T again only after both have finished the tile before (``pds_free``).

K and V are read through an index that is 0 at run time (``t * program_id(1)``, the grid is 1-D) but not to the
compiler: with K and V loop-invariant, ptxas keeps the 32 wgmma descriptors of S^T and dP^T (16 k-steps each) as
64-bit registers across the loop in one of the two consumers and spilled them (~230 bytes); computed each tile from
a base they take a few uniform-datapath adds and nothing spills.

Shared memory: K and V 64 KB, a Q/dO stage 64 KB, P^T and dS^T 16 KB a buffer, dQ staging 2 x ``DQ_BUFS`` x
``DQ_COLS`` x 256 bytes; of 227 KB two stages fit only with one P/dS buffer and 32-column dQ products (``d256_s2``).

Grouped-query heads (``GQA``): a program loops over the query heads that read its K/V head (no split).
Head dim 256, 16-bit inputs, lengths a multiple of 64, causal or not, Hopper only (``supported``);
``flash_triton.backward_kernels`` takes it where ``flash_triton.BWD_GLUON256`` names a config.

Measured on an H200 (1x16 heads, bf16, kernels alone, SDPA's time over ours, causal / not causal at 4096, 16384;
``benchmarks/attention_gluon_screen.py --kinds bwd --d-head 256``, results/attention/screen_bwd256_h200.jsonl):
``d256_dq128`` 1.03 1.15 / 1.06 1.18 (363-434 TFLOP/s against cuDNN's 354-382), ``d256_ahead_dq2`` 0.98 1.11 / 1.05
1.17, ``d256`` 0.94 1.07 / 1.00 1.12, ``d256_ahead`` within 0.02 of ``d256``, one P/dS buffer (``d256_p1``) 0.89-1.05,
two Q/dO stages (``d256_s2``) 0.85-1.03. With 16 query heads on 4 K/V heads the looping programs leave a causal
tail at 4096 (the backward 0.86x SDPA's; 16384 1.12x).
"""

from __future__ import annotations

import torch
from profiler_kit.workloads import gluon_tiles
from profiler_kit.workloads.gluon_tiles import (
    acc_layout,
    hopper_16bit,
    launch_backward,
    load_query_tiles,
    tensor_desc,
    tile_order,
    tma_reduce_add,
)
from profiler_kit.workloads.triton_launch import rows
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

LOG2E = gl.constexpr(1.4426950408889634)
QH = gl.constexpr(32)  # query columns of S^T and dP^T a consumer computes (half a tile)
HALF = gl.constexpr(128)  # head-dim columns of dK, dV and dQ a consumer owns
BLOCK_M = 64  # query rows a tile
KEYS_PER_PROGRAM = 64
HEAD_DIM = 256

# (STAGES, maxnreg, consumer regs, load regs, P_BUFS, DQ_COLS, DQ_BUFS, DQ_AHEAD): 12 warps a program (two consumer
# warpgroups and the load warp rounded up to a warpgroup), each allocated maxnreg registers at launch; P_BUFS P^T / dS^T
# shared tiles (2: a consumer may write the next tile's while the other still reads this one's); dQ of a consumer's
# 128 columns in DQ_COLS-column products, DQ_BUFS fp32 staging tiles a consumer; DQ_AHEAD: the next dQ product
# issued before this one is staged (two in registers)
CONFIGS = {
    "d256": (1, 168, 240, 24, 2, 64, 1, False),
    "d256_ahead": (1, 168, 240, 24, 2, 64, 1, True),
    "d256_ahead_dq2": (1, 168, 240, 24, 2, 64, 2, True),
    "d256_dq128": (1, 168, 240, 24, 2, 128, 1, False),
    "d256_p1": (1, 168, 240, 24, 1, 64, 1, False),
    "d256_s2": (2, 168, 240, 24, 1, 32, 1, True),
}
DEFAULT = "d256"
HEAD_GROUP = 1  # launch order: heads one after another


@gluon.jit
def _load_partition(a, STAGES: gl.constexpr, GQA: gl.constexpr):
    """One warp: K and V once, then the Q and dO tiles into the ring as the consumers free its stages."""
    (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, pt_smem, dst_smem, dq_smem, l_smem,
     d_smem, kv_bar, ready, empty, p_ready, ds_ready, pds_free, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m,
     N_CTX) = a  # fmt: skip
    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row0 + start_n, 0], kv_bar, k_smem.index(0))
    tma.async_copy_global_to_shared(v_desc, [row0 + start_n, 0], kv_bar, v_smem.index(0))
    load_query_tiles(
        row0, lo, num_m, N_CTX, q_desc, do_desc, L, D, q_smem, do_smem, l_smem, d_smem, ready, empty, STAGES, GQA
    )  # fmt: skip


@gluon.jit
def _tile(
    t, i, q_row0, dk, dv, a, C: gl.constexpr, MASK: gl.constexpr, STAGES: gl.constexpr, P_BUFS: gl.constexpr,
    DQ_BUFS: gl.constexpr, DQ_AHEAD: gl.constexpr,
):  # fmt: skip
    """Query tile ``i`` of the query head at row ``q_row0`` (the program's ``t``-th tile) for consumer ``C``: its
    halves of P^T and dS^T shared, dV and dK of its columns accumulated, dQ of its columns reduced."""
    (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, pt_smem, dst_smem, dq_smem, l_smem,
     d_smem, kv_bar, ready, empty, p_ready, ds_ready, pds_free, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m,
     N_CTX) = a  # fmt: skip
    BM: gl.constexpr = q_desc.block_type.shape[0]
    KEYS: gl.constexpr = k_desc.block_type.shape[0]
    DQ_COLS: gl.constexpr = dq_desc.block_type.shape[1]
    NDQ: gl.constexpr = HALF // DQ_COLS
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = acc_layout(QH)
    q_layout: gl.constexpr = acc_layout(DQ_COLS)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    stage = t % STAGES
    start_m = lo + i * BM
    b = t % P_BUFS
    phase = (t // P_BUFS) & 1

    mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
    q_s = q_smem.index(stage)
    do_s = do_smem.index(stage)
    zero = gl.zeros([KEYS, QH], gl.float32, s_layout)
    z = t * gl.program_id(1)  # 0 (a 1-D grid), opaque: K/V descriptors computed each tile, not kept (see above)
    k_s = k_smem.index(z)
    v_s = v_smem.index(z)
    s_t = warpgroup_mma(k_s, q_s.slice(C * QH, QH, dim=0).permute((1, 0)), zero, use_acc=False, is_async=True)
    dp_t = warpgroup_mma(v_s, do_s.slice(C * QH, QH, dim=0).permute((1, 0)), zero, use_acc=False, is_async=True)
    # the tile's L and D (with Q and dO), this consumer's 32 queries
    lse = l_smem.index(stage).reshape([BM]).slice(C * QH, QH).load(col_layout) * LOG2E
    s_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_t,))
    p_t = gl.exp2(s_t * (sm_scale * LOG2E) - lse[None, :])
    if MASK:  # the tile that crosses the diagonal: keys after the query are masked
        rows = start_n + gl.arange(0, KEYS, layout=gl.SliceLayout(1, s_layout))
        cols = start_m + C * QH + gl.arange(0, QH, layout=col_layout)
        p_t = gl.where(cols[None, :] >= rows[:, None], p_t, 0.0)
    if P_BUFS == 1:  # both consumers are done with the last tile's P^T and dS^T
        mbarrier.wait(pds_free, (t & 1) ^ 1)
    pt_s = pt_smem.index(b)
    ds_s = dst_smem.index(b)
    pt_s.slice(C * QH, QH, dim=1).store(p_t.to(dtype))
    fence_async_shared()
    mbarrier.arrive(p_ready.index(b), count=1)
    delta = d_smem.index(stage).reshape([BM]).slice(C * QH, QH).load(col_layout) * sm_scale
    mbarrier.wait(p_ready.index(b), phase)  # both halves of P^T written
    dv = warpgroup_mma(pt_s, do_s.slice(C * HALF, HALF, dim=1), dv, is_async=True)  # runs while dS^T is computed
    dp_t = warpgroup_mma_wait(num_outstanding=1, deps=(dp_t,))
    ds = (p_t * (dp_t * sm_scale - delta[None, :])).to(dtype)  # dS carries the softmax scale
    ds_s.slice(C * QH, QH, dim=1).store(ds)
    fence_async_shared()
    mbarrier.arrive(ds_ready.index(b), count=1)
    mbarrier.wait(ds_ready.index(b), phase)  # both halves of dS^T written
    dk = warpgroup_mma(ds_s, q_s.slice(C * HALF, HALF, dim=1), dk, is_async=True)
    ds_a = ds_s.permute((1, 0))  # dS, queries by keys
    q_zero = gl.zeros([BM, DQ_COLS], gl.float32, q_layout)
    acc = warpgroup_mma(ds_a, k_s.slice(C * HALF, DQ_COLS, dim=1), q_zero, use_acc=False, is_async=True)
    dk, dv = warpgroup_mma_wait(num_outstanding=1, deps=(dk, dv))
    mbarrier.arrive(empty.index(stage), count=1)  # dV and dK done: the Q/dO stage is free while dQ is staged
    for j in gl.static_range(NDQ):
        if DQ_AHEAD and j + 1 < NDQ:  # the next dQ product runs while this one is staged
            ahead = warpgroup_mma(
                ds_a, k_s.slice(C * HALF + (j + 1) * DQ_COLS, DQ_COLS, dim=1), q_zero, use_acc=False, is_async=True
            )  # fmt: skip
            dq = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        else:
            dq = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        buf = dq_smem.index(C * DQ_BUFS + (t * NDQ + j) % DQ_BUFS)
        tma.store_wait(pendings=DQ_BUFS - 1)  # the reduce DQ_BUFS products back has read this buffer
        buf.store(dq)
        fence_async_shared()
        tma_reduce_add(dq_desc, [q_row0 + start_m, C * HALF + j * DQ_COLS], buf)
        if j + 1 < NDQ:
            if DQ_AHEAD:
                acc = ahead
            else:
                acc = warpgroup_mma(
                    ds_a, k_s.slice(C * HALF + (j + 1) * DQ_COLS, DQ_COLS, dim=1), q_zero, use_acc=False,
                    is_async=True,
                )  # fmt: skip
    if P_BUFS == 1:
        mbarrier.arrive(pds_free, count=1)
    return dk, dv


@gluon.jit
def _consumer(
    a, C: gl.constexpr, IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr, P_BUFS: gl.constexpr, DQ_BUFS: gl.constexpr,
    DQ_AHEAD: gl.constexpr, GQA: gl.constexpr,
):  # fmt: skip
    """One warpgroup: columns ``128 C ...`` of dK, dV of the program's 64 keys over every query tile that sees them."""
    (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, pt_smem, dst_smem, dq_smem, l_smem,
     d_smem, kv_bar, ready, empty, p_ready, ds_ready, pds_free, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m,
     N_CTX) = a  # fmt: skip
    KEYS: gl.constexpr = k_desc.block_type.shape[0]
    D_HEAD: gl.constexpr = k_desc.block_type.shape[1]
    h_layout: gl.constexpr = acc_layout(HALF)
    dk = gl.zeros([KEYS, HALF], gl.float32, h_layout)
    dv = gl.zeros([KEYS, HALF], gl.float32, h_layout)
    mbarrier.wait(kv_bar, 0)
    for h in range(GQA):  # dK, dV sum over the query heads that read these keys
        q_row0 = row0 * GQA + h * N_CTX
        first = 0
        if IS_CAUSAL:  # the first tile crosses the diagonal: masked; the rest need no mask
            dk, dv = _tile(h * num_m, 0, q_row0, dk, dv, a, C, True, STAGES, P_BUFS, DQ_BUFS, DQ_AHEAD)
            first = 1
        for i in range(first, num_m):
            dk, dv = _tile(h * num_m + i, i, q_row0, dk, dv, a, C, False, STAGES, P_BUFS, DQ_BUFS, DQ_AHEAD)
    tma.store_wait(pendings=0)
    rows = row0 + start_n + gl.arange(0, KEYS, layout=gl.SliceLayout(1, h_layout))
    cols = C * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, h_layout))
    off = rows.to(gl.int64)[:, None] * D_HEAD + cols[None, :]
    gl.store(DK + off, dk.to(DK.dtype.element_ty))
    gl.store(DV + off, dv.to(DV.dtype.element_ty))


@gluon.jit
def _flash_bwd256_kernel(
    q_desc, k_desc, v_desc, do_desc, dq_desc, DK, DV, L, D, sm_scale, N_CTX,
    IS_CAUSAL: gl.constexpr, HEAD_GROUP: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
    LOAD_REGS: gl.constexpr, P_BUFS: gl.constexpr, DQ_BUFS: gl.constexpr, DQ_AHEAD: gl.constexpr, GQA: gl.constexpr,
):  # fmt: skip
    """One program per 64 keys of a K/V head (two consumer warpgroups, 128 head-dim columns each), over the query
    tiles of the ``GQA`` query heads that read it; each query tile's dQ added into fp32 dQ."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    D_HEAD: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    DQ_COLS: gl.constexpr = dq_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    gl.static_assert(D_HEAD == 2 * HALF)
    gl.static_assert(BM == 2 * QH)
    gl.static_assert(HALF % DQ_COLS == 0)

    num_n = N_CTX // BLOCK_N
    pid_n, pid_bh = tile_order(gl.program_id(0), num_n, gl.num_programs(0) // num_n, HEAD_GROUP)
    row0 = pid_bh * N_CTX  # K/V rows; query head h of the group starts at row0 * GQA + h * N_CTX
    start_n = pid_n * BLOCK_N
    lo = start_n if IS_CAUSAL else 0
    num_m = (N_CTX - lo) // BM

    k_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_N, D_HEAD], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [1, BLOCK_N, D_HEAD], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BM, D_HEAD], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BM, D_HEAD], do_desc.layout)
    # P^T and dS^T: keys by queries, each consumer writes 32 query columns (a 64-byte swizzle: whole atoms)
    pds_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=64, element_bitwidth=16, rank=2)
    pt_smem = gl.allocate_shared_memory(dtype, [P_BUFS, BLOCK_N, BM], pds_layout)
    dst_smem = gl.allocate_shared_memory(dtype, [P_BUFS, BLOCK_N, BM], pds_layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [2 * DQ_BUFS, BM, DQ_COLS], dq_desc.layout)
    l_smem = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BM], L.layout)
    d_smem = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BM], D.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    p_ready = gl.allocate_shared_memory(gl.int64, [P_BUFS, 1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [P_BUFS, 1], mbarrier.MBarrierLayout())
    pds_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both consumers release a Q/dO stage
    for b in gl.static_range(P_BUFS):
        # both consumers' halves written; with two buffers a consumer writes a buffer again two tiles on, after the
        # other has arrived on the other buffer, which it does after its products of this one are done
        mbarrier.init(p_ready.index(b), count=2)
        mbarrier.init(ds_ready.index(b), count=2)
    mbarrier.init(pds_free, count=2)  # with one buffer: both consumers' products of a tile are done

    a = (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, pt_smem, dst_smem, dq_smem, l_smem,
         d_smem, kv_bar, ready, empty, p_ready, ds_ready, pds_free, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m,
         N_CTX)  # fmt: skip
    gl.warp_specialize(
        [(_consumer, (a, 0, IS_CAUSAL, STAGES, P_BUFS, DQ_BUFS, DQ_AHEAD, GQA)),
         (_consumer, (a, 1, IS_CAUSAL, STAGES, P_BUFS, DQ_BUFS, DQ_AHEAD, GQA)),
         (_load_partition, (a, STAGES, GQA))],
        [4, 1], [CONSUMER_REGS, LOAD_REGS],
    )  # fmt: skip


def supported(q: torch.Tensor) -> bool:
    """The inputs this kernel handles: 16-bit on Hopper, head dim 256, whole 64-key programs."""
    return hopper_16bit(q, HEAD_DIM, KEYS_PER_PROGRAM)


def launch_args(q, k, v, do, dq, lse, delta, dk, dv, sm_scale, is_causal, config, head_group=HEAD_GROUP):
    """The kernel's arguments, constexprs and launch options for one ``config`` (a name or a tuple of CONFIGS)."""
    stages, maxnreg, consumer_regs, load_regs, p_bufs, dq_cols, dq_bufs, dq_ahead = (
        CONFIGS[config] if isinstance(config, str) else config
    )
    bh, n, d = rows(q)
    bh_kv = rows(k)[0]
    if n % KEYS_PER_PROGRAM:
        raise ValueError(f"sequence length {n} is no multiple of {KEYS_PER_PROGRAM} (the keys of a program)")
    args = (
        tensor_desc(q, (BLOCK_M, d)), tensor_desc(k, (KEYS_PER_PROGRAM, d)), tensor_desc(v, (KEYS_PER_PROGRAM, d)),
        tensor_desc(do, (BLOCK_M, d)), tensor_desc(dq, (BLOCK_M, dq_cols)), dk, dv,
        tensor_desc(lse.view(-1, BLOCK_M), (1, BLOCK_M)), tensor_desc(delta.view(-1, BLOCK_M), (1, BLOCK_M)),
        sm_scale, n,
    )  # fmt: skip
    consts = (is_causal, head_group, stages, consumer_regs, load_regs, p_bufs, dq_bufs, dq_ahead, bh // bh_kv)
    grid = (n // KEYS_PER_PROGRAM * bh_kv,)
    return grid, args, consts, {"num_warps": 4, "maxnreg": maxnreg}


def dkdv(q, k, v, do, dq, lse, delta, dk, dv, sm_scale, is_causal, config=DEFAULT, head_group=HEAD_GROUP):
    """Launch: dK, dV into ``dk``, ``dv``; dQ added into the zeroed fp32 ``dq`` (as ``flash_gluon_bwd128.dkdv``).

    Inputs as ``flash_triton.backward_kernels`` has them: contiguous ``(batch*heads, seq, 256)`` q, dO and
    ``(batch*kv_heads, seq, 256)`` k, v (query head ``h`` reads K/V head ``h // (heads // kv_heads)``; dK, dV are the
    sums over a K/V head's query heads, in one program); ``lse`` and ``delta`` ``(batch*heads, seq)`` fp32
    (log-sum-exp of the scaled scores, rowsum(dO * O)). Any leading dims may stand for ``batch*heads``
    (``triton_launch.rows``).
    """
    launch_backward(_flash_bwd256_kernel, launch_args, q, k, v, do, dq, lse, delta, dk, dv, sm_scale,
                    is_causal, config, head_group)  # fmt: skip


def compile_sm90(
    config=DEFAULT, n: int = 4096, is_causal: bool = True, dtype=torch.bfloat16, heads: int = 4, kv_heads: int = 0
):  # fmt: skip
    """Compile for sm_90 without a GPU (as ``flash_gluon_bwd128.compile_sm90``): Triton's compiled kernel."""
    q, do = (torch.empty(heads, n, HEAD_DIM, dtype=dtype) for _ in range(2))
    k = v = torch.empty(kv_heads or heads, n, HEAD_DIM, dtype=dtype)
    dq = torch.empty(heads, n, HEAD_DIM, dtype=torch.float32)
    lse = delta = torch.empty(heads, n, dtype=torch.float32)
    _, args, consts, opts = launch_args(q, k, v, do, dq, lse, delta, k, k, 0.0625, is_causal, config)
    return gluon_tiles.compile_sm90(_flash_bwd256_kernel, args, consts, opts, ("DK", "DV", "N_CTX"))
