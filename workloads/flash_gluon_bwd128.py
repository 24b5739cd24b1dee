"""The FlashAttention backward for Hopper at head dim 128 in Gluon, warp-specialized (issue 26).

The d 64 kernel (``flash_gluon_ws``) gives dQ its own warpgroup; at d 128 the consumers' dK and dV accumulators
alone take 128 registers a thread, so no registers are left for a fourth warpgroup. As FlashAttention-3's
backward, the two consumer warpgroups compute dQ themselves:

- a 1-warp load partition: K and V of the program's 128 keys once, then the Q and dO tiles (64 query rows) with
  their rows of L and D (log-sum-exp, rowsum(dO O)) into a ``STAGES``-deep ring of shared memory (``ready`` /
  ``empty`` mbarriers), 24 registers;
- two consumer warpgroups, each owning 64 of the keys, per query tile: S^T = K Q^T and dP^T = V dO^T issued
  together, P^T, dV += P^T dO (P^T from registers), dS^T, dK += dS^T Q (dS^T from registers); each writes its half
  of dS^T into a double-buffered shared tile, and once both halves are there (``ds_ready``) computes one 64-column
  half of dQ = dS K (``DQ_COLS`` columns of d), added into the fp32 dQ buffer by an asynchronous TMA reduce.

dK is issued before dS^T is shared, so it runs while the warpgroups wait for each other; every product of a tile is
waited for at its end. (dK issued after dQ and left in flight into the next tile needs more registers than 240:
ptxas serializes the wgmma instructions, C7512.)

Grouped-query heads (``GQA``): a program loops over the query heads that read its K/V head, so dK and dV keep one
writer; or, with ``SPLIT_GQA`` (causal), a program per query head writes that head's dK and dV in fp32 and
``sum_groups`` sums them per K/V head (one keyed launch where four torch operations took ~100 us of host time; 16 on
4 K/V heads, causal 4096, H200: backward 0.467 -> 0.443-0.445 ms against SDPA's 0.443; the fused layer there stays
host-bound, 0.71-1.03x SDPA's speed from process to process). Looping makes programs GQA times longer and fewer, and
a causal grid's tail grows with them: at 16 query heads on 4 K/V heads (H100, 2026-11-27, kernels alone, SDPA's time
over ours) causal 4096 / 16384 ran at 0.59 / 0.82x looping and 0.86 / 0.95x split, not causal 0.92 / 0.89x looping
and 0.86 / 0.81x split (the extra fp32 traffic); on 8 K/V heads at 16384 causal 0.83 / 0.93x, not causal 0.93 /
0.92x. Launching all K/V heads' longest programs first instead of head after head was slower (0.72 against 0.75x
looping; without groups 0.86 / 0.90x against 0.92 / 0.95x at 16384). ``flash_triton.BWD_GLUON128_GQA`` routes GQA
here (GPU tests passed).

Head dim 128, 16-bit inputs, lengths a multiple of 128, causal or not, Hopper only (``supported``);
``flash_triton.backward_kernels`` takes it where ``flash_triton.BWD_GLUON128`` names a config.

At 1x16 heads, d 128, bf16 on an H100 (``benchmarks/attention_gluon_screen.py --kinds bwd``, the backward's
kernels alone, ms, SDPA in the same process, two calls, 2026-11-28): ``d128`` causal 4096 / 16384 / 65536 0.445 /
4.95-5.17 / 80.8-81.1 against SDPA's 0.443 / 5.10-5.23 / 81.0-82.0, not causal 0.675-0.685 / 10.36-10.68 /
155.9-158.5 against 0.673-0.678 / 9.86-10.05 / 154.5-158.8: 0.93-1.06x SDPA's speed (515-565 TFLOP/s from 16384
on; results/attention/screen_bwd128_final.jsonl, screen_bwd128_ld_smem.jsonl). L and D came from global memory
in each consumer before (0.82-0.91x, 470-490 TFLOP/s): ncu (causal 16384) put a third of the consumers' stall
samples on those loads, which L2 served late under the dQ reductions (L2 71% busy), and on ~236 bytes of spilled
address registers reloaded every tile (84 left). Two dQ staging tiles (``d128_dq2``) and a 3-stage ring
(``d128_s3``) were within 0.03x before. Not kept (commit 31e9378): products issued after dQ so that one runs while
dQ is staged: dV (``d128_dvl``, 0.96-1.02x on the H100, 0.94-0.99x on an H200 at 4096 where ``d128`` was
0.98-0.99x) or dK's second 64-column half (``d128_dkh``, 0.95-1.03x). Not kept (commit 0f0b728): dK issued after
dQ, as FA3 issues it (0.90-0.99x), and ``d128_dvl`` with two staging tiles (0.90-1.01x).
Not kept (commit bc5faac): each consumer's dQ over its own 64 keys and every column, no dS^T exchange, so
the consumers need not wait for each other: 0.71-0.76x (twice the dQ reduce traffic into a busy L2). Not kept
(commit 70105f5): each tile's dQ product one tile later: 0.76-0.87x, with ~500 bytes of spilled scalars. Not kept
(commit a0fafb2, ``d128_late``): each tile's dQ staged into shared memory by the next tile after it issues S^T:
0.84-0.87x against 0.90x then, ~270 bytes of spills; nothing may stay in flight across iterations (C7514), and
240 registers hold no more.
Read from the sm_90 PTX (fourth session, no GPU): the dQ staging tile is already NVMMA 128-byte swizzled (two
[64, 32] fp32 boxes), written by ``st.shared.v2.b32`` whose 256 bytes a warp spread over all 32 banks twice (2
wavefronts, the least for 256 bytes), so a swizzle has nothing to remove there; Gluon 3.6's TMA loads take no
multicast (no 2-CTA cluster for Q / dO).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
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
from profiler_kit.workloads.triton_launch import launch_keyed, rows
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
KEYS = gl.constexpr(64)  # keys a consumer warpgroup owns (two a program)
BLOCK_M = 64  # query rows a tile
KEYS_PER_PROGRAM = 128
HEAD_DIM = 128

# (STAGES, maxnreg, consumer regs, load regs, DQ_BUFS): 12 warps a program (two consumer warpgroups and the
# load warp rounded up to a warpgroup), each allocated maxnreg registers at launch; DQ_BUFS fp32 dQ staging tiles
# a consumer (2: the reduce of the last tile need not be done before this tile's dQ is staged)
CONFIGS = {
    "d128": (2, 168, 240, 24, 1),
    "d128_dq2": (2, 168, 240, 24, 2),
    "d128_s3": (3, 168, 240, 24, 1),
}
DEFAULT = "d128"
HEAD_GROUP = 1  # launch order: heads one after another
# grouped-query heads, causal or not: a program per query head, its dK and dV summed after in fp32 (as many programs
# as without groups, the same tail), rather than a program looping over a K/V head's query heads
SPLIT_GQA = {"causal": True, "full": False}


@gluon.jit
def _load_partition(a, STAGES: gl.constexpr, GQA: gl.constexpr, SPLIT: gl.constexpr):
    """One warp: K and V once, then the Q and dO tiles into the ring as the consumers free its stages."""
    (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, l_smem, d_smem,
     kv_bar, ready, empty, ds_ready, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m, N_CTX) = a  # fmt: skip
    kv_row0 = row0
    if SPLIT > 1:  # a program per query head (row0 its rows): K/V of the head it reads
        kv_row0 = row0 // (SPLIT * N_CTX) * N_CTX
    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [kv_row0 + start_n, 0], kv_bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [kv_row0 + start_n, 0], kv_bar, v_smem)
    load_query_tiles(
        row0, lo, num_m, N_CTX, q_desc, do_desc, L, D, q_smem, do_smem, l_smem, d_smem, ready, empty, STAGES, GQA
    )  # fmt: skip


@gluon.jit
def _tile(
    t, i, q_row0, dk, dv, a, C: gl.constexpr, MASK: gl.constexpr, STAGES: gl.constexpr, DQ_BUFS: gl.constexpr,
):  # fmt: skip
    """Query tile ``i`` of the query head at row ``q_row0`` (the program's ``t``-th tile) for consumer ``C``: dV, dK
    accumulated, its half of dS^T shared, its half of dQ reduced."""
    (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, l_smem, d_smem,
     kv_bar, ready, empty, ds_ready, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m, N_CTX) = a  # fmt: skip
    BM: gl.constexpr = q_desc.block_type.shape[0]
    D_HEAD: gl.constexpr = q_desc.block_type.shape[1]
    DQ_COLS: gl.constexpr = dq_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = acc_layout(BM)
    d_layout: gl.constexpr = acc_layout(D_HEAD)
    q_layout: gl.constexpr = acc_layout(DQ_COLS)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=d_layout, k_width=2)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    stage = t % STAGES
    start_m = lo + i * BM
    b = t % 2

    mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
    q_s = q_smem.index(stage)
    do_s = do_smem.index(stage)
    k_a = k_smem.slice(C * KEYS, KEYS, dim=0)
    v_a = v_smem.slice(C * KEYS, KEYS, dim=0)
    zero = gl.zeros([KEYS, BM], gl.float32, s_layout)
    s_t = warpgroup_mma(k_a, q_s.permute((1, 0)), zero, use_acc=False, is_async=True)
    dp_t = warpgroup_mma(v_a, do_s.permute((1, 0)), zero, use_acc=False, is_async=True)
    lse = l_smem.index(stage).reshape([BM]).load(col_layout) * LOG2E  # the tile's L and D: with Q and dO
    s_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_t,))
    p_t = gl.exp2(s_t * (sm_scale * LOG2E) - lse[None, :])
    if MASK:  # a tile that crosses the diagonal: keys after the query are masked
        rows = start_n + C * KEYS + gl.arange(0, KEYS, layout=gl.SliceLayout(1, s_layout))
        cols = start_m + gl.arange(0, BM, layout=col_layout)
        p_t = gl.where(cols[None, :] >= rows[:, None], p_t, 0.0)
    p_op = gl.convert_layout(p_t.to(dtype), p_layout)
    dv = warpgroup_mma(p_op, do_s, dv, is_async=True)
    delta = d_smem.index(stage).reshape([BM]).load(col_layout) * sm_scale
    dp_t = warpgroup_mma_wait(num_outstanding=1, deps=(dp_t,))
    ds = (p_t * (dp_t * sm_scale - delta[None, :])).to(dtype)  # dS carries the softmax scale
    ds_op = gl.convert_layout(ds, p_layout)
    dk = warpgroup_mma(ds_op, q_s, dk, is_async=True)  # runs while dS^T is shared
    ds_smem.index(b).slice(C * KEYS, KEYS, dim=0).store(ds)
    fence_async_shared()
    mbarrier.arrive(ds_ready.index(b), count=1)
    mbarrier.wait(ds_ready.index(b), (t // 2) & 1)  # both halves of dS^T written
    dq = warpgroup_mma(
        ds_smem.index(b).permute((1, 0)), k_smem.slice(C * DQ_COLS, DQ_COLS, dim=1),
        gl.zeros([BM, DQ_COLS], gl.float32, q_layout), use_acc=False, is_async=True,
    )  # fmt: skip
    dk, dv, dq, p_op, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv, dq, p_op, ds_op))
    mbarrier.arrive(empty.index(stage), count=1)
    buf = dq_smem.index(C * DQ_BUFS + t % DQ_BUFS)
    tma.store_wait(pendings=DQ_BUFS - 1)  # the reduce DQ_BUFS tiles back has read this buffer
    buf.store(dq)
    fence_async_shared()
    tma_reduce_add(dq_desc, [q_row0 + start_m, C * DQ_COLS], buf)
    return dk, dv


@gluon.jit
def _consumer(
    a, C: gl.constexpr, IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr, DQ_BUFS: gl.constexpr, GQA: gl.constexpr
):  # fmt: skip
    """One warpgroup: dK, dV of keys ``start_n + 64 C ...`` over every query tile that sees them."""
    (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, l_smem, d_smem,
     kv_bar, ready, empty, ds_ready, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m, N_CTX) = a  # fmt: skip
    D_HEAD: gl.constexpr = q_desc.block_type.shape[1]
    d_layout: gl.constexpr = acc_layout(D_HEAD)
    dk = gl.zeros([KEYS, D_HEAD], gl.float32, d_layout)
    dv = gl.zeros([KEYS, D_HEAD], gl.float32, d_layout)
    mbarrier.wait(kv_bar, 0)
    if GQA == 1:
        first = 0
        if IS_CAUSAL:  # the first 2 tiles cross some consumer's diagonal: masked; the rest need no mask
            for i in range(2):
                dk, dv = _tile(i, i, row0, dk, dv, a, C, True, STAGES, DQ_BUFS)
            first = 2
        for i in range(first, num_m):
            dk, dv = _tile(i, i, row0, dk, dv, a, C, False, STAGES, DQ_BUFS)
    else:
        for h in range(GQA):  # dK, dV sum over the query heads that read these keys
            q_row0 = row0 * GQA + h * N_CTX
            first = 0
            if IS_CAUSAL:
                for i in range(2):
                    dk, dv = _tile(h * num_m + i, i, q_row0, dk, dv, a, C, True, STAGES, DQ_BUFS)
                first = 2
            for i in range(first, num_m):
                dk, dv = _tile(h * num_m + i, i, q_row0, dk, dv, a, C, False, STAGES, DQ_BUFS)
    dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv))
    tma.store_wait(pendings=0)
    rows = row0 + start_n + C * KEYS + gl.arange(0, KEYS, layout=gl.SliceLayout(1, d_layout))
    cols = gl.arange(0, D_HEAD, layout=gl.SliceLayout(0, d_layout))
    off = rows.to(gl.int64)[:, None] * D_HEAD + cols[None, :]
    gl.store(DK + off, dk.to(DK.dtype.element_ty))  # fp32 partial sums with SPLIT
    gl.store(DV + off, dv.to(DV.dtype.element_ty))


@gluon.jit
def _flash_bwd128_kernel(
    q_desc, k_desc, v_desc, do_desc, dq_desc, DK, DV, L, D, sm_scale, N_CTX,
    IS_CAUSAL: gl.constexpr, HEAD_GROUP: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
    LOAD_REGS: gl.constexpr, DQ_BUFS: gl.constexpr, GQA: gl.constexpr, SPLIT: gl.constexpr,
):  # fmt: skip
    """One program per 128 keys of a K/V head (two consumer warpgroups), over the query tiles of the ``GQA`` query
    heads that read it; each query tile's dQ added into fp32 dQ in halves. ``SPLIT`` (with ``GQA`` 1): a program
    per 128 keys and query head instead, K/V head ``h // SPLIT`` read, dK and dV of query head ``h`` written."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    D_HEAD: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    DQ_COLS: gl.constexpr = dq_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    gl.static_assert(BLOCK_N == 2 * KEYS)
    gl.static_assert(D_HEAD == 2 * DQ_COLS)

    num_n = N_CTX // BLOCK_N
    pid_n, pid_bh = tile_order(gl.program_id(0), num_n, gl.num_programs(0) // num_n, HEAD_GROUP)
    row0 = pid_bh * N_CTX  # K/V rows; query head h of the group starts at row0 * GQA + h * N_CTX
    start_n = pid_n * BLOCK_N
    lo = start_n if IS_CAUSAL else 0
    num_m = (N_CTX - lo) // BM

    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, D_HEAD], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, D_HEAD], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BM, D_HEAD], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BM, D_HEAD], do_desc.layout)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BM], dtype)
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BM], ds_layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [2 * DQ_BUFS, BM, DQ_COLS], dq_desc.layout)
    l_smem = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BM], L.layout)
    d_smem = gl.allocate_shared_memory(gl.float32, [STAGES, 1, BM], D.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both consumers release a Q/dO stage
    for b in gl.static_range(2):
        # both consumers' halves of dS^T written; a consumer writes a buffer again two tiles on, after the other
        # has arrived on the other buffer, which it does after its dQ product read this one
        mbarrier.init(ds_ready.index(b), count=2)

    a = (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem, l_smem, d_smem,
         kv_bar, ready, empty, ds_ready, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m, N_CTX)  # fmt: skip
    gl.warp_specialize(
        [(_consumer, (a, 0, IS_CAUSAL, STAGES, DQ_BUFS, GQA)),
         (_consumer, (a, 1, IS_CAUSAL, STAGES, DQ_BUFS, GQA)),
         (_load_partition, (a, STAGES, GQA, SPLIT))],
        [4, 1], [CONSUMER_REGS, LOAD_REGS],
    )  # fmt: skip


def supported(q: torch.Tensor) -> bool:
    """The inputs this kernel handles: 16-bit on Hopper, head dim 128, whole 128-key programs."""
    return hopper_16bit(q, HEAD_DIM, KEYS_PER_PROGRAM)


def launch_args(
    q, k, v, do, dq, lse, delta, dk, dv, sm_scale, is_causal, config, head_group=HEAD_GROUP, split: bool = False
):  # fmt: skip
    """The kernel's arguments, constexprs and launch options for one ``config`` (a name or a tuple of CONFIGS);
    ``split``: grouped-query heads one program per query head, ``dk``, ``dv`` of the query heads' shape."""
    stages, maxnreg, consumer_regs, load_regs, dq_bufs = CONFIGS[config] if isinstance(config, str) else config
    bh, n, d = rows(q)
    bh_kv = rows(k)[0]
    group = bh // bh_kv
    if n % KEYS_PER_PROGRAM:
        raise ValueError(f"sequence length {n} is no multiple of {KEYS_PER_PROGRAM} (the keys of a program)")
    args = (
        tensor_desc(q, (BLOCK_M, d)), tensor_desc(k, (KEYS_PER_PROGRAM, d)), tensor_desc(v, (KEYS_PER_PROGRAM, d)),
        tensor_desc(do, (BLOCK_M, d)), tensor_desc(dq, (BLOCK_M, d // 2)), dk, dv,
        tensor_desc(lse.view(-1, BLOCK_M), (1, BLOCK_M)), tensor_desc(delta.view(-1, BLOCK_M), (1, BLOCK_M)),
        sm_scale, n,
    )  # fmt: skip
    split = split and group > 1
    consts = (is_causal, head_group, stages, consumer_regs, load_regs, int(dq_bufs), 1 if split else group,
              group if split else 1)  # fmt: skip
    grid = (n // KEYS_PER_PROGRAM * (bh if split else bh_kv),)
    return grid, args, consts, {"num_warps": 4, "maxnreg": maxnreg}


def dkdv(q, k, v, do, dq, lse, delta, dk, dv, sm_scale, is_causal, config=DEFAULT, head_group=HEAD_GROUP):
    """Launch: dK, dV into ``dk``, ``dv``; dQ added into the zeroed fp32 ``dq`` (as ``flash_gluon_ws.dkdv``).

    Inputs as ``flash_triton.backward_kernels`` has them: contiguous ``(batch*heads, seq, 128)`` q, dO and
    ``(batch*kv_heads, seq, 128)`` k, v (query head ``h`` reads K/V head ``h // (heads // kv_heads)``; dK, dV are the
    sums over a K/V head's query heads: in one program, or with ``SPLIT_GQA`` each query head's in fp32, summed
    here); ``lse`` and ``delta`` ``(batch*heads, seq)`` fp32 (log-sum-exp of the scaled scores, rowsum(dO * O)).
    Any leading dims may stand for ``batch*heads`` (``triton_launch.rows``).
    """
    bh_kv, n, d = rows(k)
    split = SPLIT_GQA["causal" if is_causal else "full"] and rows(q)[0] != bh_kv
    dk_out, dv_out = dk, dv
    if split:
        dk, dv = (torch.empty(q.shape, dtype=torch.float32, device=q.device) for _ in range(2))

    launch_backward(_flash_bwd128_kernel, launch_args, q, k, v, do, dq, lse, delta, dk, dv, sm_scale,
                    is_causal, config, head_group, split)  # fmt: skip
    if split:
        sum_groups(dk, dv, dk_out, dv_out)


@triton.jit
def _sum_groups_kernel(DK32, DV32, DK, DV, PER_HEAD: tl.constexpr, GROUP: tl.constexpr, BLOCK: tl.constexpr):
    """dK and dV of a K/V head: the sums of its ``GROUP`` query heads' fp32 partials, cast once."""
    h = tl.program_id(1).to(tl.int64)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    dk = tl.zeros([BLOCK], tl.float32)
    dv = tl.zeros([BLOCK], tl.float32)
    for g in tl.static_range(GROUP):
        dk += tl.load(DK32 + (h * GROUP + g) * PER_HEAD + offs)
        dv += tl.load(DV32 + (h * GROUP + g) * PER_HEAD + offs)
    tl.store(DK + h * PER_HEAD + offs, dk.to(DK.dtype.element_ty))
    tl.store(DV + h * PER_HEAD + offs, dv.to(DV.dtype.element_ty))


def sum_groups(dk32: torch.Tensor, dv32: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor) -> None:
    """``dk``, ``dv`` (K/V heads) = the sums of the fp32 per-query-head ``dk32``, ``dv32`` over each head's group:
    one launch where torch took four operations and an fp32 temporary (their host time counted at seq 4096)."""
    bh_kv, n, d = rows(dk)
    per_head, group = n * d, rows(dk32)[0] // bh_kv
    block = math.gcd(per_head, 1024)
    key = (id(_sum_groups_kernel), dk.device.index, dk.dtype, bh_kv, per_head, group,
           dk32.data_ptr(), dv32.data_ptr(), dk.data_ptr(), dv.data_ptr())  # fmt: skip
    launch_keyed(
        key, _sum_groups_kernel,
        lambda: ((per_head // block, bh_kv), (dk32, dv32, dk, dv), {"PER_HEAD": per_head, "GROUP": group,
                                                                      "BLOCK": block}),
    )  # fmt: skip


def compile_sm90(
    config=DEFAULT, n: int = 4096, is_causal: bool = True, dtype=torch.bfloat16, heads: int = 4, kv_heads: int = 0,
    split: bool = False,
):  # fmt: skip
    """Compile for sm_90 without a GPU (as ``flash_gluon_ws.compile_sm90``): Triton's compiled kernel."""
    q, do = (torch.empty(heads, n, HEAD_DIM, dtype=dtype) for _ in range(2))
    k = v = torch.empty(kv_heads or heads, n, HEAD_DIM, dtype=dtype)
    dq = torch.empty(heads, n, HEAD_DIM, dtype=torch.float32)
    lse = delta = torch.empty(heads, n, dtype=torch.float32)
    dk = torch.empty(heads, n, HEAD_DIM, dtype=torch.float32) if split else k
    _, args, consts, opts = launch_args(q, k, v, do, dq, lse, delta, dk, dk, 0.125, is_causal, config, split=split)
    return gluon_tiles.compile_sm90(_flash_bwd128_kernel, args, consts, opts, ("DK", "DV", "N_CTX"))
