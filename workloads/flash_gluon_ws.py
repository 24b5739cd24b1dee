"""The FlashAttention-2 backward's dK/dV kernel for Hopper in Gluon, warp-specialized (run 15).

Run 14's Gluon kernel (commit f4ca10a) wrote the waits out in one warpgroup and was as fast as the
``tl.dot`` kernel, not faster. This one splits a program of 128 keys into partitions that run side
by side (``gl.warp_specialize``), as FlashAttention-3's backward does:

- a 1-warp load partition: K and V once, then the Q and dO tiles (64 rows) into a ``STAGES``-deep
  ring of shared memory (``ready`` / ``empty`` mbarriers), 24 registers (``setmaxnreg``);
- two consumer warpgroups, each owning 64 of the keys: S^T, dP^T, P, dS, dV and dK for every query
  tile, reading the shared Q/dO tiles (loaded once for both). The dK product stays in flight into the
  next tile unless ``DS_REGS``; the Q/dO stage is released when it is done. ``KV_REGS`` keeps the
  warpgroup's K and V tiles in registers for the program (S and dP then read one operand from shared
  memory, not two); ``DS_REGS`` feeds dK its dS from registers. Each writes its dS into a
  double-buffered shared tile (``ds_ready`` / ``ds_empty``);
- a dQ warpgroup: dQ = dS^T K over all 128 keys in one product, added into the fp32 dQ buffer by one
  asynchronous TMA reduce (one per query tile and program, where the ``tma`` kernel does one per 64 keys).

The default (``kvds``: K, V and dS from registers; 16 warps, one program per SM) ran the backward at
1x16x16384x64 bf16 causal in 2.68 ms against cuDNN's 3.01-3.03 and the ``tma`` kernel's 3.40 (H200,
attention_bench; benchmarks/README.md, run 15). Commit 87d8786 holds every structure run 15
measured (one consumer a program, consumers with their own dQ product); they were slower, and the
one-consumer ones gave NaN with two programs on an SM.

Head dim 64, 16-bit inputs, lengths a multiple of 128, causal or not, Hopper only (``supported``);
``flash_triton.backward_kernels`` falls back to its ``tma`` kernel elsewhere.
"""

from __future__ import annotations

import os

import torch
from profiler_kit.workloads import gluon_tiles
from profiler_kit.workloads.gluon_tiles import (
    acc_layout,
    hopper_16bit,
    launch_backward,
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
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

LOG2E = gl.constexpr(1.4426950408889634)
KEYS = gl.constexpr(64)  # keys a consumer warpgroup owns (two a program)
BLOCK_M = 64  # query rows a tile

# (STAGES, maxnreg, consumer-worker regs, dQ-warpgroup regs, load regs, KV_REGS, DS_REGS). A program has 16 warps
# (2 consumer warpgroups, the dQ warpgroup and the load warp, rounded up to whole warpgroups), each allocated maxnreg
# registers at launch; the default partition (consumer 0) gets what the workers leave.
CONFIGS = {
    "kvds": (3, 128, 208, 72, 24, True, True),  # consumers 208 / 208, dQ 72: 2.88 ms in run 15d's timing
    "kv": (3, 128, 208, 72, 24, True, False),  # 2.99
    "ds": (3, 128, 192, 96, 24, False, True),  # 3.23
    "plain": (3, 128, 192, 96, 24, False, False),  # consumers 200 / 192, dQ 96: 3.10
}
DEFAULT = os.environ.get("FLASH_GLUON_WS_CONFIG", "kvds")  # benchmarks may pick another entry of CONFIGS by name
HEAD_GROUP = 1  # launch order: heads one after another (run 15b: 3.07 ms against 3.10-3.12 in groups of 2 or 8)
KEYS_PER_PROGRAM = 128


@gluon.jit
def _load_partition(a, STAGES: gl.constexpr):
    """One warp: K and V once, then the Q and dO tiles into the ring as the consumers free its stages."""
    (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem,
     kv_bar, ready, empty, ds_ready, ds_empty, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m) = a  # fmt: skip
    BM: gl.constexpr = q_desc.block_type.shape[0]
    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row0 + start_n, 0], kv_bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [row0 + start_n, 0], kv_bar, v_smem)
    for i in range(num_m):
        s = i % STAGES
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)  # fresh barriers pass phase 1 at once
        mbarrier.expect(ready.index(s), q_desc.block_type.nbytes + do_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [row0 + lo + i * BM, 0], ready.index(s), q_smem.index(s))
        tma.async_copy_global_to_shared(do_desc, [row0 + lo + i * BM, 0], ready.index(s), do_smem.index(s))


@gluon.jit
def _dq_partition(a):
    """One warpgroup: dQ = dS^T K over the program's 128 keys for each query tile, added by a TMA reduce."""
    (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem,
     kv_bar, ready, empty, ds_ready, ds_empty, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m) = a  # fmt: skip
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    layout: gl.constexpr = acc_layout(HEAD_DIM)
    mbarrier.wait(kv_bar, 0)
    for i in range(num_m):
        b = i % 2
        mbarrier.wait(ds_ready.index(b), (i // 2) & 1)
        dq = warpgroup_mma(
            ds_smem.index(b).permute((1, 0)), k_smem, gl.zeros([BM, HEAD_DIM], gl.float32, layout), use_acc=False,
            is_async=True,
        )  # fmt: skip
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq,))
        mbarrier.arrive(ds_empty.index(b), count=1)
        tma.store_wait(pendings=1)  # the reduce two tiles back has read this buffer
        dq_smem.index(b).store(dq)
        fence_async_shared()
        tma_reduce_add(dq_desc, [row0 + lo + i * BM, 0], dq_smem.index(b))
    tma.store_wait(pendings=0)


@gluon.jit
def _tile(
    i, dk, dv, lse, delta, k_a, v_a, a, C: gl.constexpr, MASK: gl.constexpr, STAGES: gl.constexpr,
    DS_REGS: gl.constexpr,
):  # fmt: skip
    """One query tile for consumer ``C``: dV and dK accumulated (dK left in flight unless DS_REGS), dS passed on."""
    (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem,
     kv_bar, ready, empty, ds_ready, ds_empty, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m) = a  # fmt: skip
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = acc_layout(BM)
    d_layout: gl.constexpr = acc_layout(HEAD_DIM)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=d_layout, k_width=2)
    vec_layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    stage = i % STAGES
    start_m = lo + i * BM
    b = i % 2

    # the next tile's L and D, loaded while this one runs (the last tile loads its own again)
    nxt = row0 + lo + gl.minimum(i + 1, num_m - 1) * BM + gl.arange(0, BM, layout=vec_layout)
    lse_next = gl.load(L + nxt)
    delta_next = gl.load(D + nxt)

    mbarrier.wait(ready.index(stage), (i // STAGES) & 1)
    mbarrier.wait(
        ds_empty.index(b), ((i // 2) & 1) ^ 1
    )  # this tile's dS buffer: read by the dQ warpgroup two tiles back
    q_s = q_smem.index(stage)
    do_s = do_smem.index(stage)
    zero = gl.zeros([KEYS, BM], gl.float32, s_layout)
    s_t = warpgroup_mma(k_a, q_s.permute((1, 0)), zero, use_acc=False, is_async=True)  # K, V: smem or registers
    dp_t = warpgroup_mma(v_a, do_s.permute((1, 0)), zero, use_acc=False, is_async=True)
    # the previous tile's dV and dK are done: its Q/dO stage and its dS buffer are free
    dk, dv = warpgroup_mma_wait(num_outstanding=2, deps=(dk, dv))
    mbarrier.arrive(empty.index((i + STAGES - 1) % STAGES), count=1, pred=i > 0)
    mbarrier.arrive(ds_empty.index((i + 1) % 2), count=1, pred=i > 0)
    lse = gl.convert_layout(lse * LOG2E, col_layout)
    s_t = warpgroup_mma_wait(num_outstanding=1, deps=(s_t,))
    p_t = gl.exp2(s_t * (sm_scale * LOG2E) - lse[None, :])
    if MASK:  # a tile that crosses the diagonal: keys after the query are masked
        rows = start_n + C * KEYS + gl.arange(0, KEYS, layout=gl.SliceLayout(1, s_layout))
        cols = start_m + gl.arange(0, BM, layout=col_layout)
        p_t = gl.where(cols[None, :] >= rows[:, None], p_t, 0.0)
    dv = warpgroup_mma(gl.convert_layout(p_t.to(dtype), p_layout), do_s, dv, is_async=True)
    delta = gl.convert_layout(delta * sm_scale, col_layout)
    dp_t = warpgroup_mma_wait(num_outstanding=1, deps=(dp_t,))
    ds = (p_t * (dp_t * sm_scale - delta[None, :])).to(dtype)  # dS carries the softmax scale
    ds_c = ds_smem.index(b).slice(C * KEYS, KEYS, dim=0)
    ds_c.store(ds)
    fence_async_shared()
    mbarrier.arrive(ds_ready.index(b), count=1)
    if DS_REGS:  # dK's dS operand from registers (half the shared-memory reads), waited for in the tile
        dk = warpgroup_mma(gl.convert_layout(ds, p_layout), q_s, dk, is_async=True)
        dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv))
        dk = warpgroup_mma_init(dk)
    else:
        dk = warpgroup_mma(ds_c, q_s, dk, is_async=True)
        dv = warpgroup_mma_wait(num_outstanding=1, deps=(dv,))  # dV (issued before the dS math) done, dK in flight
    return dk, dv, lse_next, delta_next


@gluon.jit
def _consumer(a, C: gl.constexpr, IS_CAUSAL: gl.constexpr, STAGES: gl.constexpr, KV_REGS: gl.constexpr,
              DS_REGS: gl.constexpr):  # fmt: skip
    """One warpgroup: dK, dV of keys ``start_n + 64 C ...`` over every query tile that sees them."""
    (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem,
     kv_bar, ready, empty, ds_ready, ds_empty, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m) = a  # fmt: skip
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    dtype: gl.constexpr = q_desc.dtype
    d_layout: gl.constexpr = acc_layout(HEAD_DIM)
    vec_layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = row0 + lo + gl.arange(0, BM, layout=vec_layout)
    lse = gl.load(L + offs)
    delta = gl.load(D + offs)
    dk = warpgroup_mma_init(gl.zeros([KEYS, HEAD_DIM], gl.float32, d_layout))  # carried in flight between tiles
    dv = gl.zeros([KEYS, HEAD_DIM], gl.float32, d_layout)
    mbarrier.wait(kv_bar, 0)
    k_a = k_smem.slice(C * KEYS, KEYS, dim=0)
    v_a = v_smem.slice(C * KEYS, KEYS, dim=0)
    if KV_REGS:  # this warpgroup's K and V tiles as the S and dP products' A operands, in registers for the program
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout(BM), k_width=2)
        k_a = k_a.load(a_layout)
        v_a = v_a.load(a_layout)
    first = 0
    if IS_CAUSAL:  # the first 2 tiles cross some consumer's diagonal: masked; the rest need no mask
        for i in gl.static_range(2):
            dk, dv, lse, delta = _tile(i, dk, dv, lse, delta, k_a, v_a, a, C, True, STAGES, DS_REGS)
        first = 2
    for i in range(first, num_m):
        dk, dv, lse, delta = _tile(i, dk, dv, lse, delta, k_a, v_a, a, C, False, STAGES, DS_REGS)
    dk, dv = warpgroup_mma_wait(num_outstanding=0, deps=(dk, dv))
    rows = row0 + start_n + C * KEYS + gl.arange(0, KEYS, layout=gl.SliceLayout(1, d_layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, d_layout))
    off = rows.to(gl.int64)[:, None] * HEAD_DIM + cols[None, :]
    gl.store(DK + off, dk.to(dtype))
    gl.store(DV + off, dv.to(dtype))


@gluon.jit
def _flash_ws_dkdv_kernel(
    q_desc, k_desc, v_desc, do_desc, dq_desc, DK, DV, L, D, sm_scale, N_CTX,
    IS_CAUSAL: gl.constexpr, HEAD_GROUP: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
    DQ_REGS: gl.constexpr, LOAD_REGS: gl.constexpr, KV_REGS: gl.constexpr, DS_REGS: gl.constexpr,
):  # fmt: skip
    """One program per 128 keys (two consumer warpgroups); each query tile's dQ share added into fp32 dQ."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[0]
    dtype: gl.constexpr = q_desc.dtype
    gl.static_assert(BLOCK_N == 2 * KEYS)

    num_n = N_CTX // BLOCK_N
    pid_n, pid_bh = tile_order(gl.program_id(0), num_n, gl.num_programs(0) // num_n, HEAD_GROUP)
    row0 = pid_bh * N_CTX
    start_n = pid_n * BLOCK_N
    lo = start_n if IS_CAUSAL else 0
    num_m = (N_CTX - lo) // BM

    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], v_desc.layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BM, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BM, HEAD_DIM], do_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BM], k_desc.layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [2, BM, HEAD_DIM], dq_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ds_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=2)  # both consumers release a Q/dO stage
    for b in gl.static_range(2):
        mbarrier.init(ds_ready.index(b), count=2)  # both consumers' halves of dS written
        mbarrier.init(ds_empty.index(b), count=3)  # both consumers' dK and the dQ product have read it

    a = (q_desc, k_desc, v_desc, do_desc, dq_desc, k_smem, v_smem, q_smem, do_smem, ds_smem, dq_smem,
         kv_bar, ready, empty, ds_ready, ds_empty, DK, DV, L, D, sm_scale, row0, start_n, lo, num_m)  # fmt: skip
    gl.warp_specialize(
        [(_consumer, (a, 0, IS_CAUSAL, STAGES, KV_REGS, DS_REGS)), (_consumer, (a, 1, IS_CAUSAL, STAGES, KV_REGS, DS_REGS)),
         (_dq_partition, (a,)), (_load_partition, (a, STAGES))],
        [4, 4, 1], [CONSUMER_REGS, DQ_REGS, LOAD_REGS],
    )  # fmt: skip


def supported(q: torch.Tensor) -> bool:
    """The inputs this kernel handles: 16-bit on Hopper, head dim 64, whole 128-key programs."""
    return hopper_16bit(q, 64, KEYS_PER_PROGRAM)


def launch_args(q, k, v, do, dq, lse, delta, dk, dv, sm_scale, is_causal, config, head_group=HEAD_GROUP):
    """The kernel's arguments, constexprs and launch options for one ``config`` (a name or a tuple of CONFIGS)."""
    stages, maxnreg, consumer_regs, dq_regs, load_regs, kv_regs, ds_regs = (
        CONFIGS[config] if isinstance(config, str) else tuple(config)
    )
    bh, n, d = rows(q)
    if n % KEYS_PER_PROGRAM:
        raise ValueError(f"sequence length {n} is no multiple of {KEYS_PER_PROGRAM} (the keys of a program)")
    args = (
        tensor_desc(q, (BLOCK_M, d)), tensor_desc(k, (KEYS_PER_PROGRAM, d)), tensor_desc(v, (KEYS_PER_PROGRAM, d)),
        tensor_desc(do, (BLOCK_M, d)), tensor_desc(dq, (BLOCK_M, d)), dk, dv, lse, delta, sm_scale, n,
    )  # fmt: skip
    consts = (is_causal, head_group, stages, consumer_regs, dq_regs, load_regs, bool(kv_regs), bool(ds_regs))
    grid = (n // KEYS_PER_PROGRAM * bh,)
    return grid, args, consts, {"num_warps": 4, "maxnreg": maxnreg}


def dkdv(q, k, v, do, dq, lse, delta, dk, dv, sm_scale, is_causal, config=DEFAULT, head_group=HEAD_GROUP):
    """Launch: dK, dV into ``dk``, ``dv``; each dQ share added into the zeroed fp32 ``dq``.

    Inputs as ``flash_triton.backward_kernels`` has them: contiguous ``(batch*heads, seq, 64)`` q, k, v, dO;
    ``lse`` and ``delta`` ``(batch*heads, seq)`` fp32 (log-sum-exp of the scaled scores, rowsum(dO * O)); any
    leading dims may stand for ``batch*heads`` (``triton_launch.rows``). Launched through
    ``triton_launch.launch_keyed``: after the first launch on these buffers, its encoded arguments are replayed into
    the compiled kernel's C launcher.
    """
    launch_backward(_flash_ws_dkdv_kernel, launch_args, q, k, v, do, dq, lse, delta, dk, dv, sm_scale,
                    is_causal, config, head_group)  # fmt: skip


def compile_sm90(config=DEFAULT, n: int = 16384, is_causal: bool = True, dtype=torch.bfloat16, heads: int = 16):
    """Compile for sm_90 without a GPU (the signature taken from CPU tensors): Triton's compiled kernel, with
    ``asm["ptx"]``, ``asm["cubin"]`` and ``metadata.shared``. No driver is needed; ptxas ships with Triton."""
    q, k, v, do = (torch.empty(heads, n, 64, dtype=dtype) for _ in range(4))
    dq = torch.empty(heads, n, 64, dtype=torch.float32)
    lse = delta = torch.empty(heads, n, dtype=torch.float32)
    _, args, consts, opts = launch_args(q, k, v, do, dq, lse, delta, q, q, 0.125, is_causal, config)
    return gluon_tiles.compile_sm90(_flash_ws_dkdv_kernel, args, consts, opts, ("DK", "DV", "L", "D", "N_CTX"))
