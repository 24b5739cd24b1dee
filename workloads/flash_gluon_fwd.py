"""The FlashAttention forward for Hopper in Gluon, warp-specialized (issue 26: head dim 128).

Triton's compiler gives the forward no producer warp on Hopper (Triton 3.6: ``tl.range(warp_specialize=True)``
leaves an 8-warp kernel as it is and fails an assertion at 4 warps), so this writes FlashAttention-3's
split out with ``gl.warp_specialize``, as ``flash_gluon_ws`` does for the d 64 backward:

- a 1-warp load partition: the program's 128 query rows once, then K and V tiles of ``BLOCK_N`` keys into a
  ``STAGES``-deep ring of shared memory, K and V each behind their own ``ready`` / ``empty`` mbarriers, 24 registers;
- two consumer warpgroups, each owning 64 of the query rows: S = Q K^T, the online softmax in registers and
  O += P V with P from registers, for every key tile; a K or V stage is released when both have read it.

Schedules of the key loop (``SCHEDULE``): ``PLAIN`` waits for each product in turn, and the two warpgroups run
independently. ``FA3`` is FlashAttention-3's intra-warpgroup overlap: the S product of tile j and the P V product
of tile j - 1 are issued together, and tile j's softmax runs while P V does (a second tile of scores and P in
registers). ``PINGPONG`` adds FA3's ping-pong: a warpgroup issues its two products only in its turn and then
hands the turn to the other (``turn`` mbarriers), so one's softmax overlaps the other's products.

``*_persist`` configs (issue 26; not the default) launch one program an SM (``PERSISTENT``), each
walking the (head, 128-row tile) work items ``program_id + k programs`` in the launch order above, its K/V ring,
its Q tile (freed by both consumers through ``q_free`` after their last S product) and the ping-pong turns carried
from item to item, so the load warp brings the next item's Q and K/V while the consumers finish this one's last
P V and store O (FA3's persistent forward; at not causal 4096 the one-program-an-item grid is 3.9 waves on 132
SMs with every item's prologue and epilogue exposed). The items are still whole, so a partial last round stays.
Timed on an H200 against ``n128_pingpong``, taking turns (``benchmarks/attention_gluon_screen.py --kinds fwd``,
results/attention/screen_fwd_persist_h200.jsonl): not causal within 0.05 of it either way (4096: 0.98 both);
causal 0.78-0.90x SDPA against 0.995-1.055x: a static ``program_id + k programs`` walk over an order that is
longest-first only within a head group leaves some programs all the long items, which the hardware's dynamic
placement of one program an item does not.

At 4096 not causal an item is 32 key tiles and, by the H200's TFLOP/s (608-617 there, 634-642 at 16384), costs
about 2 more: presumably at its ends, where both consumers are off the tensor cores (the first S product and
softmax with nothing to overlap, the last P V alone, then the epilogue), since the persistent grid did not help.
``*_tmao`` configs (``TMA_O``, 8th field) write O through shared memory and a TMA store (FA3's epilogue): 8
``stmatrix`` a thread where plain stores were 32 scattered 4-byte ones, and the store is waited for only before
its tile is written again (a persistent program's next item) or at the program's end; 32 KB more shared memory
(196 KB), so 2 stages. ``*_pipe`` configs (``PIPELINE``, 9th field; persistent, ``TMA_O``) pipeline across items:
Q in two buffers, so the next item's Q lands during this one, and each consumer issues the next item's first S
product before this item's epilogue, so the tensor cores run while O is normalized and stored (224 KB of shared
memory). Timed on an H200 taking turns (results/attention/screen_fwd_tmao_h200.jsonl), SDPA's time over each:
``n128_pingpong_tmao`` causal 4096 / 16384 / 65536 1.07 / 1.09 / 1.02, not causal 1.03 / 1.04 / 1.04, where
``n128_pingpong`` was 1.03 / 1.07 / 1.01 and 1.00 / 1.03 / 1.00: the default since. The pipelined configs were
within 0.02 of it not causal and 0.78-0.92x causal (the persistent walk's imbalance above), so not taken.

16-bit inputs, head dim 64, 128 or 256, lengths a multiple of 128, causal or not, grouped-query heads, Hopper only
(``supported``); ``flash_triton.forward_kernels`` takes it only where ``flash_triton.FWD_GLUON`` says so. At d 256
only the ``d256_*`` configs fit shared memory (``fits``: 64-key tiles in 2 stages, 192 KB, no spills). Screened on
an H200 in turns (1x16 heads, seq 4096 / 16384; results/attention/screen_fwd_d256_h200.jsonl), SDPA's time over
each, causal / not causal: ``d256_pingpong`` 1.07 1.16 / 1.08 1.04, ``d256_fa3`` 1.06 1.10 / 1.03 1.04, the Triton
forward 0.40-0.43 / 0.34-0.36: ``d256_pingpong`` is ``FWD_GLUON``'s d 256 entry.

At 1x16 heads, d 128, bf16 on an H100 (forward only, ``benchmarks/attention_gluon_screen.py``, SDPA in the same
process; results/attention/screen_d128.jsonl), ``n128_pingpong`` against SDPA, ms: causal 4096 / 16384 / 65536
0.149 / 1.805 / 27.78 against 0.153 / 1.917 / 28.00; not causal 0.226 / 3.458 / 54.89 against 0.213 / 3.563 / 57.44
(1.01-1.06x SDPA's speed, 0.94x at 4096 not causal; ``PLAIN`` 0.84-0.94x). ``n128_fa3`` and ``n128_s3_pingpong``
were within 0.06x of it either way, 64-key tiles slower (0.82-0.96x).
Before the FA3 schedules, the next S product issued before
the softmax on a K/V stage shared with V (2.462 ms causal 16384), 64-key tiles (2.043) and 3 stages (2.165) were
slower than ``PLAIN`` (1.995). d 64 is correct (GPU test) but was not timed, so the Triton forward stays there.
"""

from __future__ import annotations

import torch
from profiler_kit.workloads import gluon_tiles
from profiler_kit.workloads.gluon_tiles import SHARED_MEMORY, acc_layout, tensor_desc, tile_order
from profiler_kit.workloads.triton_launch import capability, launch_keyed, rows, sm_count
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

LOG2E = gl.constexpr(1.4426950408889634)
LN2 = gl.constexpr(0.6931471805599453)
ROWS = gl.constexpr(64)  # query rows a consumer warpgroup owns (two a program)
BLOCK_M = 128

# schedules of a consumer warpgroup's key loop
PLAIN, FA3, PINGPONG = (gl.constexpr(i) for i in range(3))
# (BLOCK_N, STAGES, maxnreg, consumer regs, load regs, schedule): 12 warps a program (two consumer warpgroups and
# the load warp rounded up to a warpgroup), each allocated maxnreg registers at launch
CONFIGS = {
    "n128": (128, 2, 168, 240, 24, PLAIN),
    "n128_fa3": (128, 2, 168, 240, 24, FA3),
    "n128_pingpong": (128, 2, 168, 240, 24, PINGPONG),
    "n128_s3_pingpong": (128, 3, 168, 240, 24, PINGPONG),
    "n64_pingpong": (64, 4, 168, 240, 24, PINGPONG),
    # a persistent grid (7th field): one program an SM walking the work items, the next item's loads overlapping
    # this one's last products and stores, and no partial last wave of programs
    "n128_pingpong_persist": (128, 2, 168, 240, 24, PINGPONG, True),
    "n128_s3_pingpong_persist": (128, 3, 168, 240, 24, PINGPONG, True),
    "n128_fa3_persist": (128, 2, 168, 240, 24, FA3, True),
    # O through shared memory and a TMA store (8th field), its wait deferred: 32 KB more shared memory, so 2 stages
    "n128_pingpong_tmao": (128, 2, 168, 240, 24, PINGPONG, False, True),
    "n128_pingpong_persist_tmao": (128, 2, 168, 240, 24, PINGPONG, True, True),
    # persistent, the next item's first S product issued before this item's epilogue, Q in two buffers (9th field)
    "n128_pingpong_pipe": (128, 2, 168, 240, 24, PINGPONG, True, True, True),
    "n128_fa3_pipe": (128, 2, 168, 240, 24, FA3, True, True, True),
    # head dim 256: 64-key tiles in 2 stages are what fits shared memory (192 KB; see ``fits``)
    "d256_pingpong": (64, 2, 168, 240, 24, PINGPONG),
    "d256_fa3": (64, 2, 168, 240, 24, FA3),
}
SMS_OFFLINE = 132  # an H100 SXM's SMs: the persistent grid of a compile without a GPU
PERSISTENT_PROGRAMS: int | None = None  # the persistent grid's size at most (None: the GPU's SMs)
DEFAULT = "n128_pingpong_tmao"
HEAD_GROUP = 2  # launch order: heads in groups of this many, longest tiles of a group first


@gluon.jit
def _load_partition(a, STAGES: gl.constexpr):
    """One warp: the Q tile once, then K and V tiles into the ring as the consumers free its stages."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row0 + start_m, 0], q_bar, q_smem)
    _load_kv(a, 0, STAGES)


@gluon.jit
def _load_kv(a, it, STAGES: gl.constexpr):
    """K and V tiles of one work item into the ring; ``it``: the key tiles the program has loaded before it."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    BN: gl.constexpr = k_desc.block_type.shape[0]
    for j in range(num_n):  # K of stage s behind barriers s, V behind STAGES + s: each freed when read
        s = (it + j) % STAGES
        phase = (((it + j) // STAGES) & 1) ^ 1  # fresh barriers pass phase 1 at once
        mbarrier.wait(empty.index(s), phase)
        mbarrier.expect(ready.index(s), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row0 + j * BN, 0], ready.index(s), k_smem.index(s))
        mbarrier.wait(empty.index(STAGES + s), phase)
        mbarrier.expect(ready.index(STAGES + s), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [kv_row0 + j * BN, 0], ready.index(STAGES + s), v_smem.index(s))


@gluon.jit
def _softmax_pv(j, s_t, acc, l_i, m_i, a, it, C: gl.constexpr, MASK: gl.constexpr, STAGES: gl.constexpr):
    """Online softmax of the scores ``s_t`` of key tile ``j``, then O += P V (waited for), the stage released."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    BN: gl.constexpr = k_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = acc_layout(BN)
    o_layout: gl.constexpr = acc_layout(HEAD_DIM)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    qk_scale = sm_scale * LOG2E
    if MASK:  # the diagonal tile: keys after the query are masked
        rows = start_m + C * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
        cols = j * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
        s_t = gl.where(cols[None, :] <= rows[:, None], s_t, float("-inf"))
    m_ij = gl.maximum(m_i, gl.max(s_t, 1) * qk_scale)
    p = gl.exp2(s_t * qk_scale - m_ij[:, None])
    alpha = gl.exp2(m_i - m_ij)
    l_i = l_i * alpha + gl.sum(p, 1)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    stage = (it + j) % STAGES
    mbarrier.wait(ready.index(STAGES + stage), ((it + j) // STAGES) & 1)
    acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_smem.index(stage), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    mbarrier.arrive(empty.index(stage), count=1)
    mbarrier.arrive(empty.index(STAGES + stage), count=1)
    return acc, l_i, m_ij


@gluon.jit
def _scores(j, q_c, a, it, STAGES: gl.constexpr):
    """Issue S = Q K^T for key tile ``j`` (asynchronous) once its stage has landed."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    BN: gl.constexpr = k_desc.block_type.shape[0]
    stage = (it + j) % STAGES
    mbarrier.wait(ready.index(stage), ((it + j) // STAGES) & 1)
    zero = gl.zeros([ROWS, BN], gl.float32, acc_layout(BN))
    return warpgroup_mma(q_c, k_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)


@gluon.jit
def _softmax(j, s_t, l_i, m_i, a, C: gl.constexpr, MASK: gl.constexpr):
    """Online softmax of key tile ``j``'s scores: P (the P V product's register operand), the factor O is
    rescaled by before P V is added, and the new row sums and maxima."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    BN: gl.constexpr = k_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = acc_layout(BN)
    o_layout: gl.constexpr = acc_layout(HEAD_DIM)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    qk_scale = sm_scale * LOG2E
    if MASK:
        rows = start_m + C * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
        cols = j * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
        s_t = gl.where(cols[None, :] <= rows[:, None], s_t, float("-inf"))
    m_ij = gl.maximum(m_i, gl.max(s_t, 1) * qk_scale)
    p = gl.exp2(s_t * qk_scale - m_ij[:, None])
    alpha = gl.exp2(m_i - m_ij)
    l_i = l_i * alpha + gl.sum(p, 1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    return p_op, gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), l_i, m_ij


@gluon.jit
def _fa3_step(j, acc, p, alpha, l_i, m_i, q_c, a, it, C: gl.constexpr, MASK: gl.constexpr, STAGES: gl.constexpr,
              PING: gl.constexpr):  # fmt: skip
    """Key tile ``j``: its S product and tile ``j - 1``'s P V product issued together, then tile ``j``'s softmax
    while P V runs (FA3's intra-warpgroup overlap). ``PING``: the two products are issued in this warpgroup's
    turn, which it passes to the other warpgroup (FA3's ping-pong: one's softmax overlaps the other's products)."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    BN: gl.constexpr = k_desc.block_type.shape[0]
    g = it + j  # the program's key tile count: ring stage and phases
    stage = g % STAGES
    prev = (g + STAGES - 1) % STAGES
    mbarrier.wait(ready.index(stage), (g // STAGES) & 1)
    if PING:
        mbarrier.wait(turn.index(C), g & 1)
    zero = gl.zeros([ROWS, BN], gl.float32, acc_layout(BN))
    s_t = warpgroup_mma(q_c, k_smem.index(stage).permute((1, 0)), zero, use_acc=False, is_async=True)
    acc = acc * alpha[:, None]
    mbarrier.wait(ready.index(STAGES + prev), ((g - 1) // STAGES) & 1)
    acc = warpgroup_mma(p, v_smem.index(prev), acc, is_async=True)
    if PING:
        mbarrier.arrive(turn.index(1 - C), count=1)
    s_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_t,))
    mbarrier.arrive(empty.index(stage), count=1)  # K of tile j read
    p_next, alpha, l_i, m_i = _softmax(j, s_t, l_i, m_i, a, C, MASK)
    acc, p = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p))  # P's registers stay live until P V is done
    mbarrier.arrive(empty.index(STAGES + prev), count=1)  # V of tile j - 1 read
    return acc, p_next, alpha, l_i, m_i


@gluon.jit
def _fa3_loop(acc, l_i, m_i, q_c, num_full, a, it, C: gl.constexpr, IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr,
              PING: gl.constexpr, FIRST: gl.constexpr):  # fmt: skip
    """Every key tile in FA3's order: S of tile 0 and its softmax, then S of tile j with P V of tile j - 1, then
    the last P V. Both warpgroups see the same number of tiles, so their turns alternate to the end (of every
    work item: ``it`` key tiles before this one; ``FIRST``: the program's first item, consumer 0 takes the turn)."""
    turn = a[16]
    if PING:
        if C == 1:
            if FIRST:
                mbarrier.arrive(turn.index(0), count=1)  # consumer 0 issues first
    s_t = _first_scores(q_c, a, it, C, STAGES, PING)
    return _fa3_rest(s_t, acc, l_i, m_i, q_c, num_full, a, it, C, IS_CAUSAL, STAGES, PING)


@gluon.jit
def _first_scores(q_c, a, it, C: gl.constexpr, STAGES: gl.constexpr, PING: gl.constexpr):
    """Issue a work item's first S product (``it`` key tiles before it), in this warpgroup's turn with ``PING``."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    BN: gl.constexpr = k_desc.block_type.shape[0]
    first = it % STAGES
    mbarrier.wait(ready.index(first), (it // STAGES) & 1)
    if PING:
        mbarrier.wait(turn.index(C), it & 1)
    zero = gl.zeros([ROWS, BN], gl.float32, acc_layout(BN))
    s_t = warpgroup_mma(q_c, k_smem.index(first).permute((1, 0)), zero, use_acc=False, is_async=True)
    if PING:
        mbarrier.arrive(turn.index(1 - C), count=1)
    return s_t


@gluon.jit
def _fa3_rest(s_t, acc, l_i, m_i, q_c, num_full, a, it, C: gl.constexpr, IS_CAUSAL: gl.constexpr,
              STAGES: gl.constexpr, PING: gl.constexpr):  # fmt: skip
    """``_fa3_loop`` after the item's first S product ``s_t`` was issued: its softmax, the other tiles, the last
    P V (waited for)."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    first = it % STAGES
    s_t = warpgroup_mma_wait(num_outstanding=0, deps=(s_t,))
    mbarrier.arrive(empty.index(first), count=1)
    if num_full > 0:
        p, alpha, l_i, m_i = _softmax(0, s_t, l_i, m_i, a, C, False)
    else:
        p, alpha, l_i, m_i = _softmax(0, s_t, l_i, m_i, a, C, True)
    for j in range(1, num_full):
        acc, p, alpha, l_i, m_i = _fa3_step(j, acc, p, alpha, l_i, m_i, q_c, a, it, C, False, STAGES, PING)
    if IS_CAUSAL:
        for j in range(gl.maximum(num_full, 1), num_n):
            acc, p, alpha, l_i, m_i = _fa3_step(j, acc, p, alpha, l_i, m_i, q_c, a, it, C, True, STAGES, PING)
    last = (it + num_n - 1) % STAGES
    acc = acc * alpha[:, None]
    mbarrier.wait(ready.index(STAGES + last), ((it + num_n - 1) // STAGES) & 1)
    acc = warpgroup_mma(p, v_smem.index(last), acc, is_async=True)
    acc, p = warpgroup_mma_wait(num_outstanding=0, deps=(acc, p))
    mbarrier.arrive(empty.index(STAGES + last), count=1)
    return acc, l_i, m_i


@gluon.jit
def _consumer(
    a, C: gl.constexpr, IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr, SCHEDULE: gl.constexpr, TMA_O: gl.constexpr
):  # fmt: skip
    """One warpgroup: O and L of query rows ``start_m + 64 C ...`` over every key tile they see."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    _consumer_item(a, 0, 0, q_bar, C, IS_CAUSAL, STAGES, SCHEDULE, True, False, TMA_O)
    if TMA_O:
        tma.store_wait(pendings=0)  # O's tile read out of shared memory before the program ends


@gluon.jit
def _consumer_item(
    a, it, q_phase, q_free, C: gl.constexpr, IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr, SCHEDULE: gl.constexpr,
    FIRST: gl.constexpr, RELEASE_Q: gl.constexpr, TMA_O: gl.constexpr,
):  # fmt: skip
    """One work item of a warpgroup (``it`` key tiles and ``q_phase`` Q tiles of the program before it);
    ``RELEASE_Q``: arrive on ``q_free`` once its last S product has read Q, so the next item's Q may land.
    ``TMA_O``: ``Out`` is the pair (O's descriptor of 64-row tiles, a tile of shared memory for each consumer),
    and O goes out by a TMA store that nobody waits for until the tile is written again or the program ends."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    BN: gl.constexpr = k_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    s_layout: gl.constexpr = acc_layout(BN)
    o_layout: gl.constexpr = acc_layout(HEAD_DIM)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    m_i = gl.full([ROWS], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([ROWS], gl.float32, row_layout)
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, o_layout)
    mbarrier.wait(q_bar, q_phase)
    q_c = q_smem.slice(C * ROWS, ROWS, dim=0)
    # causal: the last BLOCK_M // BN key tiles cross the diagonal of the program's 128 rows
    BM: gl.constexpr = q_desc.block_type.shape[0]
    num_full = num_n - (BM // BN) if IS_CAUSAL else num_n
    if SCHEDULE >= FA3:
        acc, l_i, m_i = _fa3_loop(acc, l_i, m_i, q_c, num_full, a, it, C, IS_CAUSAL, STAGES, SCHEDULE == PINGPONG,
                                  FIRST)  # fmt: skip
    else:
        for j in range(num_full):
            s_t = warpgroup_mma_wait(num_outstanding=0, deps=(_scores(j, q_c, a, it, STAGES),))
            acc, l_i, m_i = _softmax_pv(j, s_t, acc, l_i, m_i, a, it, C, False, STAGES)
        if IS_CAUSAL:
            for j in range(num_full, num_n):
                s_t = warpgroup_mma_wait(num_outstanding=0, deps=(_scores(j, q_c, a, it, STAGES),))
                acc, l_i, m_i = _softmax_pv(j, s_t, acc, l_i, m_i, a, it, C, True, STAGES)
    if RELEASE_Q:  # every S product of the item has been waited for
        mbarrier.arrive(q_free, count=1)
    _epilogue(acc, l_i, m_i, a, C, TMA_O)


@gluon.jit
def _epilogue(acc, l_i, m_i, a, C: gl.constexpr, TMA_O: gl.constexpr):
    """O = acc / l and L of a warpgroup's 64 rows of a work item into global memory (see ``_consumer_item``)."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    o_layout: gl.constexpr = acc_layout(HEAD_DIM)
    row_layout: gl.constexpr = gl.SliceLayout(1, acc_layout(k_desc.block_type.shape[0]))
    if TMA_O:
        _o_to_smem(acc, l_i, a, C)
        _o_l_out(l_i, m_i, a, C)
    else:
        o = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
        rows = q_row0 + start_m + C * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, o_layout))
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        gl.store(Out + rows.to(gl.int64)[:, None] * HEAD_DIM + cols[None, :], o.to(dtype))
        lse = (m_i + gl.log2(l_i)) * LN2
        lrows = q_row0 + start_m + C * ROWS + gl.arange(0, ROWS, layout=row_layout)
        gl.store(L + lrows, lse)


@gluon.jit
def _o_to_smem(acc, l_i, a, C: gl.constexpr):
    """``TMA_O`` epilogue, first half: O = acc / l into this warpgroup's tile of shared memory, once the last
    item's store has read it."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    o_layout: gl.constexpr = acc_layout(q_desc.block_type.shape[1])
    o_desc, o_smem = Out
    o = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    o_tile = o_smem.index(C)
    tma.store_wait(pendings=0)  # the last item's O store has read the tile (persistent programs)
    o_tile.store(o.to(q_desc.dtype))


@gluon.jit
def _o_l_out(l_i, m_i, a, C: gl.constexpr):
    """``TMA_O`` epilogue, second half: the TMA store of O's tile (not waited for), L."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
     start_m, num_n, turn) = a  # fmt: skip
    row_layout: gl.constexpr = gl.SliceLayout(1, acc_layout(k_desc.block_type.shape[0]))
    o_desc, o_smem = Out
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [q_row0 + start_m + C * ROWS, 0], o_smem.index(C))
    lse = (m_i + gl.log2(l_i)) * LN2
    lrows = q_row0 + start_m + C * ROWS + gl.arange(0, ROWS, layout=row_layout)
    gl.store(L + lrows, lse)


@gluon.jit
def _item(w, s, IS_CAUSAL: gl.constexpr, GQA: gl.constexpr, HEAD_GROUP: gl.constexpr):
    """Work item ``w`` of the persistent grid, in the launch order of one program per item: its first query row,
    the rows of its query head and K/V head, its key tiles."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, turn, q_free, N_CTX,
     N_BH) = s  # fmt: skip
    BM: gl.constexpr = q_desc.block_type.shape[0]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    num_m = N_CTX // BM
    pid_m, pid_bh = tile_order(w, num_m, N_BH, HEAD_GROUP)
    if IS_CAUSAL:
        pid_m = num_m - 1 - pid_m  # longest rows first
    start_m = pid_m * BM
    num_n = (start_m + BM) // BN if IS_CAUSAL else N_CTX // BN
    return (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, pid_bh * N_CTX,
            (pid_bh // GQA) * N_CTX, start_m, num_n, turn)  # fmt: skip


@gluon.jit
def _load_persistent(
    s, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, GQA: gl.constexpr, HEAD_GROUP: gl.constexpr,
    Q_BUFS: gl.constexpr,
):  # fmt: skip
    """The load warp of a persistent program: per work item its Q tile once both consumers are done with the one
    before in that buffer (``q_free``), then its K and V tiles on through the same ring. ``Q_BUFS`` 2 (pipelined
    programs): item ``i``'s Q into buffer ``i % 2`` once item ``i - 2``'s S products are done, so it lands while
    item ``i - 1`` runs; 1: the single Q tile, its barriers unindexed."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, turn, q_free, N_CTX,
     N_BH) = s  # fmt: skip
    BM: gl.constexpr = q_desc.block_type.shape[0]
    it = 0
    i = 0
    for w in range(gl.program_id(0), N_CTX // BM * N_BH, gl.num_programs(0)):
        a = _item(w, s, IS_CAUSAL, GQA, HEAD_GROUP)
        if Q_BUFS == 1:
            free, landed, tile, phase = q_free, q_bar, q_smem, i & 1
        else:
            free, landed, tile, phase = q_free.index(i % 2), q_bar.index(i % 2), q_smem.index(i % 2), (i // 2) & 1
        mbarrier.wait(free, phase ^ 1)  # a fresh barrier passes phase 1 at once
        mbarrier.expect(landed, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [a[12] + a[14], 0], landed, tile)
        _load_kv(a, it, STAGES)
        it += a[15]
        i += 1


@gluon.jit
def _consumer_persistent(
    s, C: gl.constexpr, IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr, SCHEDULE: gl.constexpr, GQA: gl.constexpr,
    HEAD_GROUP: gl.constexpr, TMA_O: gl.constexpr,
):  # fmt: skip
    """A consumer warpgroup of a persistent program: every work item ``program_id + k num_programs`` in turn, the
    K/V ring, the Q tile and the ping-pong turns carried on from item to item."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, turn, q_free, N_CTX,
     N_BH) = s  # fmt: skip
    BM: gl.constexpr = q_desc.block_type.shape[0]
    if SCHEDULE == PINGPONG:
        if C == 1:
            mbarrier.arrive(turn.index(0), count=1)  # consumer 0 issues first, once for the program
    it = 0
    i = 0
    for w in range(gl.program_id(0), N_CTX // BM * N_BH, gl.num_programs(0)):
        a = _item(w, s, IS_CAUSAL, GQA, HEAD_GROUP)
        _consumer_item(a, it, i & 1, q_free, C, IS_CAUSAL, STAGES, SCHEDULE, False, True, TMA_O)
        it += a[15]
        i += 1
    if TMA_O:
        tma.store_wait(pendings=0)


@gluon.jit
def _consumer_pipelined(
    s, C: gl.constexpr, IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr, SCHEDULE: gl.constexpr, GQA: gl.constexpr,
    HEAD_GROUP: gl.constexpr,
):  # fmt: skip
    """A consumer warpgroup of a persistent program that issues the next item's first S product before this item's
    epilogue (cross-item software pipelining): the tensor cores run it while O is normalized and stored, instead
    of both warpgroups leaving them idle at every item's end. Q in two buffers (item ``i``'s in ``i % 2``), O by
    TMA (``_epilogue``). After the last item a product of nothing stands in for the next one's (a loop-carried S
    product in flight or not, by branch, makes ptxas wait for it and spill)."""
    (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, turn, q_free, N_CTX,
     N_BH) = s  # fmt: skip
    BM: gl.constexpr = q_desc.block_type.shape[0]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    PING: gl.constexpr = SCHEDULE == PINGPONG
    if PING:
        if C == 1:
            mbarrier.arrive(turn.index(0), count=1)  # consumer 0 issues first, once for the program
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    items = N_CTX // BM * N_BH
    mbarrier.wait(q_bar.index(0), 0)
    s_t = _first_scores(q_smem.index(0).slice(C * ROWS, ROWS, dim=0), _item(pid, s, IS_CAUSAL, GQA, HEAD_GROUP), 0,
                        C, STAGES, PING)  # fmt: skip
    it = 0
    i = 0
    for w in range(pid, items, programs):
        a = _item(w, s, IS_CAUSAL, GQA, HEAD_GROUP)
        acc, l_i, m_i = _pipelined_item(s_t, a, it, i, q_smem, q_free, C, IS_CAUSAL, STAGES, PING)
        it += a[15]
        i += 1
        if w + programs < items:
            mbarrier.wait(q_bar.index(i % 2), (i // 2) & 1)
            # the next item's first S product: its K tile is the ring's next, whatever item it is of
            s_t = _first_scores(q_smem.index(i % 2).slice(C * ROWS, ROWS, dim=0), a, it, C, STAGES, PING)
        else:  # none: a product of nothing (no barrier, no turn), so that one S product is in flight either way
            s_t = warpgroup_mma(k_smem.index(0).slice(C * ROWS, ROWS, dim=0), k_smem.index(0).permute((1, 0)),
                                gl.zeros([ROWS, BN], gl.float32, acc_layout(BN)), use_acc=False, is_async=True)  # fmt: skip
        _epilogue(acc, l_i, m_i, a, C, True)
    warpgroup_mma_wait(num_outstanding=0, deps=(s_t,))
    tma.store_wait(pendings=0)


@gluon.jit
def _pipelined_item(s_t, a, it, i, q_smem, q_free, C: gl.constexpr, IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr,
                    PING: gl.constexpr):  # fmt: skip
    """Work item ``i`` of a pipelined program (``it`` key tiles before it) from its first S product ``s_t`` on, to
    its last P V; then its Q buffer is released."""
    q_desc = a[0]
    BM: gl.constexpr = q_desc.block_type.shape[0]
    BN: gl.constexpr = a[1].block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    row_layout: gl.constexpr = gl.SliceLayout(1, acc_layout(BN))
    m_i = gl.full([ROWS], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([ROWS], gl.float32, row_layout)
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, acc_layout(HEAD_DIM))
    num_full = a[15] - (BM // BN) if IS_CAUSAL else a[15]
    q_c = q_smem.index(i % 2).slice(C * ROWS, ROWS, dim=0)
    acc, l_i, m_i = _fa3_rest(s_t, acc, l_i, m_i, q_c, num_full, a, it, C, IS_CAUSAL, STAGES, PING)
    mbarrier.arrive(q_free.index(i % 2), count=1)  # every S product of the item waited for
    return acc, l_i, m_i


@gluon.jit
def _pipelined_program(
    q_desc, k_desc, v_desc, o_desc, L, sm_scale, N_CTX, N_BH, IS_CAUSAL: gl.constexpr, GQA: gl.constexpr,
    HEAD_GROUP: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr,
    SCHEDULE: gl.constexpr,
):  # fmt: skip
    """The persistent program of ``PIPELINE`` configs: two Q tiles, the K/V ring, a 64-row O tile a consumer
    (Q 64 KB + K/V 2 stages 128 KB + O 32 KB: 224 KB of shared memory, so 2 stages only)."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    gl.static_assert(SCHEDULE != PLAIN)
    q_smem = gl.allocate_shared_memory(dtype, [2, BM, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, HEAD_DIM], v_desc.layout)
    o_smem = gl.allocate_shared_memory(dtype, [2, ROWS, HEAD_DIM], o_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [2 * STAGES, 1], mbarrier.MBarrierLayout())  # K stages, V stages
    empty = gl.allocate_shared_memory(gl.int64, [2 * STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(2):
        mbarrier.init(q_bar.index(b), count=1)
        mbarrier.init(q_free.index(b), count=2)  # both consumers done with the Q tile
        mbarrier.init(turn.index(b), count=1)
    for st in gl.static_range(2 * STAGES):
        mbarrier.init(ready.index(st), count=1)
        mbarrier.init(empty.index(st), count=2)
    s = (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, (o_desc, o_smem), L, sm_scale, turn,
         q_free, N_CTX, N_BH)  # fmt: skip
    gl.warp_specialize(
        [(_consumer_pipelined, (s, 0, IS_CAUSAL, STAGES, SCHEDULE, GQA, HEAD_GROUP)),
         (_consumer_pipelined, (s, 1, IS_CAUSAL, STAGES, SCHEDULE, GQA, HEAD_GROUP)),
         (_load_persistent, (s, STAGES, IS_CAUSAL, GQA, HEAD_GROUP, 2))],
        [4, 1], [CONSUMER_REGS, LOAD_REGS],
    )  # fmt: skip


@gluon.jit
def _flash_gluon_fwd_kernel(
    q_desc, k_desc, v_desc, Out, L, sm_scale, N_CTX, N_BH,
    IS_CAUSAL: gl.constexpr, GQA: gl.constexpr, HEAD_GROUP: gl.constexpr, STAGES: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr, SCHEDULE: gl.constexpr, TMA_O: gl.constexpr,
    PIPELINE: gl.constexpr, PERSISTENT: gl.constexpr,
):  # fmt: skip
    """One program per 128 query rows (two consumer warpgroups of 64); query head ``h`` reads K/V head ``h // GQA``.
    ``PERSISTENT``: as many programs as fit the GPU at once, each walking the ``N_BH`` heads' 128-row work items
    ``program_id + k num_programs``, so that one item's last products and stores overlap the next item's loads.
    ``TMA_O``: ``Out`` is O's descriptor of 64-row tiles, stored from shared memory (``_consumer_item``).
    ``PIPELINE`` (with both): the persistent program of ``_pipelined_program``."""
    if PIPELINE:
        _pipelined_program(q_desc, k_desc, v_desc, Out, L, sm_scale, N_CTX, N_BH, IS_CAUSAL, GQA, HEAD_GROUP, STAGES,
                           CONSUMER_REGS, LOAD_REGS, SCHEDULE)  # fmt: skip
        return
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    gl.static_assert(BM == 2 * ROWS)
    gl.static_assert(BM % BN == 0)

    num_m = N_CTX // BM
    pid_m, pid_bh = tile_order(gl.program_id(0), num_m, gl.num_programs(0) // num_m, HEAD_GROUP)
    if IS_CAUSAL:
        pid_m = num_m - 1 - pid_m  # longest rows first
    start_m = pid_m * BM
    q_row0 = pid_bh * N_CTX
    kv_row0 = (pid_bh // GQA) * N_CTX
    num_n = (start_m + BM) // BN if IS_CAUSAL else N_CTX // BN

    q_smem = gl.allocate_shared_memory(dtype, [BM, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BN, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [2 * STAGES, 1], mbarrier.MBarrierLayout())  # K stages, V stages
    empty = gl.allocate_shared_memory(gl.int64, [2 * STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for c in gl.static_range(2):
        mbarrier.init(turn.index(c), count=1)  # PINGPONG: consumer c may issue its products
    for s in gl.static_range(2 * STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both consumers release a K or V stage

    if TMA_O:
        Out = (Out, gl.allocate_shared_memory(dtype, [2, ROWS, HEAD_DIM], Out.layout))  # a tile each consumer
    if PERSISTENT:
        q_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(q_free, count=2)  # both consumers done with the Q tile
        s = (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, turn, q_free,
             N_CTX, N_BH)  # fmt: skip
        gl.warp_specialize(
            [(_consumer_persistent, (s, 0, IS_CAUSAL, STAGES, SCHEDULE, GQA, HEAD_GROUP, TMA_O)),
             (_consumer_persistent, (s, 1, IS_CAUSAL, STAGES, SCHEDULE, GQA, HEAD_GROUP, TMA_O)),
             (_load_persistent, (s, STAGES, IS_CAUSAL, GQA, HEAD_GROUP, 1))],
            [4, 1], [CONSUMER_REGS, LOAD_REGS],
        )  # fmt: skip
        return
    a = (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty, Out, L, sm_scale, q_row0, kv_row0,
         start_m, num_n, turn)  # fmt: skip
    gl.warp_specialize(
        [(_consumer, (a, 0, IS_CAUSAL, STAGES, SCHEDULE, TMA_O)), (_consumer, (a, 1, IS_CAUSAL, STAGES, SCHEDULE, TMA_O)),
         (_load_partition, (a, STAGES))],
        [4, 1], [CONSUMER_REGS, LOAD_REGS],
    )  # fmt: skip


def _fields(config) -> tuple:
    """A config (a name or a tuple of CONFIGS) with its optional fields filled in: (BLOCK_N, STAGES, maxnreg,
    consumer regs, load regs, schedule, PERSISTENT, TMA_O, PIPELINE)."""
    fields = CONFIGS[config] if isinstance(config, str) else config
    return (*fields[:6], *(bool(f) for f in (*fields[6:], False, False, False)[:3]))


def fits(config, d: int) -> bool:
    """Whether ``config``'s tiles fit a program's shared memory at head dim ``d``: its Q tiles (two when pipelined),
    the K/V ring and O's two 64-row staging tiles (``TMA_O``), 16-bit, with 1 KB left for the barriers."""
    bn, stages, *_, tma_o, pipeline = _fields(config)
    tile_rows = BLOCK_M * (2 if pipeline else 1) + 2 * stages * bn + (BLOCK_M if tma_o else 0)
    return 2 * tile_rows * d <= SHARED_MEMORY - 1024


def supported(q: torch.Tensor, k: torch.Tensor) -> bool:
    """The inputs this kernel handles: 16-bit on Hopper, head dim 64, 128 or 256, whole 128-row programs."""
    _, n, d = rows(q)
    return (
        q.is_cuda
        and q.dtype in (torch.bfloat16, torch.float16)
        and k.dtype == q.dtype
        and d in (64, 128, 256)
        and n % BLOCK_M == 0
        and q.data_ptr() % 16 == 0  # TMA tiles start 16-byte aligned
        and k.data_ptr() % 16 == 0
        and capability(q.device.index)[0] == 9
    )


def launch_args(q, k, v, o, lse, sm_scale, is_causal, config, head_group=HEAD_GROUP):
    """The kernel's arguments, constexprs and launch options for one ``config`` (a name or a tuple of CONFIGS)."""
    bn, stages, maxnreg, consumer_regs, load_regs, schedule, persistent, tma_o, pipeline = _fields(config)
    if pipeline and not (persistent and tma_o):
        raise ValueError(f"config {config}: a pipelined program is persistent and stores O by TMA")
    bh, n, d = rows(q)
    if n % BLOCK_M:
        raise ValueError(f"sequence length {n} is no multiple of {BLOCK_M} (the query rows of a program)")
    if not fits(config, d):
        raise ValueError(f"config {config}: its tiles take more than {SHARED_MEMORY} bytes of shared memory at d {d}")
    out = tensor_desc(o, (BLOCK_M // 2, d)) if tma_o else o  # TMA_O: a tile of 64 rows a consumer
    args = (tensor_desc(q, (BLOCK_M, d)), tensor_desc(k, (bn, d)), tensor_desc(v, (bn, d)), out, lse, sm_scale, n, bh)
    consts = (is_causal, bh // rows(k)[0], head_group, stages, consumer_regs, load_regs, int(schedule), tma_o,
              pipeline, persistent)  # fmt: skip
    grid = (n // BLOCK_M * bh,)
    if persistent:  # one program an SM (the shared memory of one)
        sms = sm_count(q.device.index) if q.is_cuda else SMS_OFFLINE
        grid = (min(grid[0], PERSISTENT_PROGRAMS or sms),)
    return grid, args, consts, {"num_warps": 4, "maxnreg": maxnreg}


def forward(q, k, v, o, lse, sm_scale, is_causal, config=DEFAULT, head_group=HEAD_GROUP):
    """Launch: O into ``o``, the natural-log logsumexp into ``lse`` (``(batch*heads, seq)`` fp32, any leading dims).

    Inputs as ``flash_triton.forward_kernels`` has them: contiguous ``(batch*heads, seq, d)`` q and
    ``(batch*kv_heads, seq, d)`` k, v, or with the leading dim split (``(batch, heads, seq, d)``).
    """

    def build():
        grid, args, consts, opts = launch_args(q, k, v, o, lse, sm_scale, is_causal, config, head_group)
        names = _flash_gluon_fwd_kernel.arg_names[len(args) :]
        return grid, args, dict(zip(names, consts, strict=True)) | opts

    # every input of the launch (addresses, strides, shapes, constants): the same key is the same launch; written
    # out, as generator expressions cost microseconds of host time a call (issue 26)
    key = (id(_flash_gluon_fwd_kernel), q.device.index, q.dtype, q.shape, k.shape, sm_scale, is_causal,
           config if isinstance(config, str) else tuple(config), head_group, PERSISTENT_PROGRAMS,
           q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), q.stride(), k.stride(),
           v.stride())  # fmt: skip
    launch_keyed(key, _flash_gluon_fwd_kernel, build)


def compile_sm90(config=DEFAULT, n: int = 4096, d: int = 128, is_causal: bool = True, dtype=torch.bfloat16):
    """Compile for sm_90 without a GPU (as ``flash_gluon_ws.compile_sm90``): Triton's compiled kernel."""
    q, k, v, o = (torch.empty(4, n, d, dtype=dtype) for _ in range(4))
    lse = torch.empty(4, n, dtype=torch.float32)
    _, args, consts, opts = launch_args(q, k, v, o, lse, 0.125, is_causal, config)
    pointers = ("L", "N_CTX") if isinstance(args[3], TensorDescriptor) else ("Out", "L", "N_CTX")
    return gluon_tiles.compile_sm90(_flash_gluon_fwd_kernel, args, consts, opts, pointers)
