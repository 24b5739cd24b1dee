"""FlashAttention-2 in Triton: forward and backward kernels, autotuned for H100/H200.

Layout: inputs ``(batch, seq, d)`` or ``(batch, heads, seq, d)`` are made contiguous and read as
``(batch*heads, seq, d)`` (``triton_launch.rows``, no views). ``d`` must be a power of two from 16 to 256
(``tl.dot`` tiles; 256 takes smaller tiles, ``WIDE_CONFIGS``, to fit shared memory); the sequence length is
free: loads are masked when it is not a multiple of the tiles (``EVEN`` is a constexpr, so the common case pays
nothing).

- Forward: one program per query tile; fp32 accumulators, online
  softmax in base 2 (the scale is folded into ``log2(e)``), output in the input
  dtype, and the natural-log logsumexp ``L`` saved for backward. With
  ``IS_CAUSAL`` (a constexpr) the key loop stops at the diagonal: fully masked
  tiles are never loaded, and only the diagonal tile pays for the mask. Query
  tiles run heaviest first, heads in groups of ``FWD_HEAD_GROUP`` (``_tile_order``),
  so the short tiles fill the tail of the launch (head after head left the
  last heads' long tiles alone at the end: 5% of the forward, run 8).
- Backward: ``D = rowsum(dO * O)`` in a small kernel (which also copies a strided dO,
  such as ``o.sum()``'s, and zeroes the fp32 dQ buffer), then two kernels with no
  race on dQ: one program per key tile accumulates dK, dV over query tiles;
  one program per query tile accumulates dQ over key tiles. Each gradient tile
  has exactly one writer, so no atomics and results are deterministic. Two
  alternatives add each tile's dQ share into an fp32 buffer from the dK/dV
  kernel instead, saving the recomputation of S and dP (5 matmuls instead of
  7): ``"atomic"`` with per-element fp32 atomics, ``"tma"`` with one bulk
  tensor reduce (TMA ``cp.reduce.async.bulk``, Hopper and later) per tile.
  ``"gluon_ws"`` adds dQ the same way from a warp-specialized dK/dV kernel
  written in Gluon (``workloads/flash_gluon_ws.py``: a load warp, two consumer
  warpgroups of 64 keys, a dQ warpgroup; head dim 64, lengths a multiple of
  128, Hopper; other inputs take ``"tma"``). ``DEFAULT_BWD`` says which one
  16-bit inputs get on Hopper: ``"gluon_ws"``, 2.66-2.70 ms against cuDNN's
  3.03-3.04 and the ``tma`` kernel's 3.36 at the leaderboard shape, and less
  GPU time from seq 4096 up (runs 15-16, benchmarks/README.md).
  Their dQ sums in an unspecified order, so they are not bitwise deterministic.
  fp32 inputs and pre-Hopper GPUs use the two-kernel backward. ``BWD_OPTS``
  switches the dK/dV kernel's structure (16-bit inputs, head dims up to
  ``BWD_OPTS_MAX_D``); the defaults load Q and dO tiles by TMA descriptors,
  fold the softmax scale into dS and start the heads in groups of 4, which
  with a 168-register cap fits 3 programs per SM: 3.38 ms against 3.66 before
  run 8 at the leaderboard shape (benchmarks/README.md).
- Grouped-query attention: K/V with fewer heads than Q (a divisor of them); query head ``h`` reads K/V head
  ``h // group`` (SDPA's ``enable_gqa``), and the dK/dV kernel loops over a K/V head's query heads, so dK, dV
  are their sums with one writer per tile. The Gluon d 64 dK/dV kernel has no head groups (GQA takes ``"tma"``
  there); the d 128 one takes them where ``BWD_GLUON128_GQA`` is on (the default), the d 256 one always.
- At head dim 128 the forward is ``flash_gluon_fwd`` (``FWD_GLUON``: a load warp and two consumer warpgroups
  in FlashAttention-3's ping-pong) and the backward's dK/dV/dQ kernel ``flash_gluon_bwd128`` (``BWD_GLUON128``):
  about 1.02x and 0.93-1.06x SDPA's (cuDNN's) speed, where the Triton kernels ran at 0.78x and 0.75x (issue 26,
  H100, seq 4096-65536, causal and not; benchmarks/README.md). At head dim 256 the forward is
  ``flash_gluon_fwd`` too (1.04-1.16x SDPA's speed on an H200, the Triton one 0.34-0.43x) and the backward's
  ``flash_gluon_bwd256`` (``BWD_GLUON256``, grouped-query heads included): 1.03-1.18x, where the Triton ``tma``
  kernel, with tiles that fit (``WIDE_CONFIGS``; still the fallback), ran at 0.26-0.29x (H200, seq 4096 and 16384).
- ``FWD_TMA`` would load the forward's K/V tiles through TMA descriptors; it
  measured no faster than pointer loads (run 4), so it is off.

fp32 inputs keep fp32 accumulators but their ``tl.dot`` products run on TF32
tensor cores (Triton's default), like torch matmuls with TF32 allowed: about
2e-3 relative error against fp32 math attention (run 9), not fp32's 1e-6.

Short sequences are bound by the host, not the GPU: on Triton 3.6 ``triton_launch.launch`` calls a key's compiled
kernel directly after its first launch, skipping Triton's per-call Python (run 11: forward + backward at seq 4096, d
64 from 0.87 to 0.47-0.80 ms against SDPA's 0.40), and its C launcher with TMA descriptors' encodings cached
(2026-11-27, H100, d 128 at 4096: the forward's Python 177 -> 102 us); every kernel of the autograd path replays a
launch's encoded arguments where its key repeats (``triton_launch.launch_keyed``, 2026-11-28: a d 128 causal layer
at 4096, forward + sum + backward, 855 -> 685 us a call against 585 us of kernels and SDPA's 716; the d 64 forward
and backward too since 2026-11-28's seventh session: d 64 causal 4096 forward + backward 0.52-0.57x -> 0.98-1.06x
SDPA's speed, one H200, old and new in turn). At seq 4096 a loop of calls is GPU-bound only while the host's time a
call stays under the kernels' 0.59 ms, and the autograd engine runs the Python backward on its device thread, where
Python ran at up to twice its cost on the calling thread (H200, 2026-11-28, benchmarks/attention_host_timeline.py).
So the autograd path makes no views (the launchers take ``(batch, heads, seq, d)`` tensors as they are,
``triton_launch.rows``), ``_check`` remembers the shapes it passed, the Gluon modules are looked up once and launch
keys are written out: forward + backward at causal 4096 went from 0.73-0.74x SDPA's speed (the last session's two
processes) to 1.02-1.03x in five processes on two machines (benchmarks/README.md).

The kernels are wrapped in ``torch.library`` custom ops so ``torch.compile``
treats them as opaque calls (no graph break, no tracing into Triton). Eager
calls skip that wrapper: its dispatch cost 20-45 us a call on run 5's host
(4 us on run 11d's; benchmarks/attention_host_timeline.py).

Set ``TRITON_INTERPRET=1`` before importing this module to run the kernels on
the CPU (tests do); a single small tile config is then used.
"""

from __future__ import annotations

import functools
import json
import math
import os

import torch
import triton
import triton.language as tl
from profiler_kit.workloads.triton_launch import (
    CACHE_ENTRIES,
    INTERPRET,
    capability,
    desc_hook,
    launch,
    launch_keyed,
    rows,
)
from triton.tools.tensor_descriptor import TensorDescriptor

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def _interpreter_numpy_shim() -> None:
    """Let Triton 3.6's interpreter run ``range(lo, hi)`` over runtime scalars with NumPy >= 2.4.

    The interpreter keeps scalars as 1-element arrays and converts them with
    ``int(array)``, which NumPy 2.4 rejects for arrays with a dimension. This
    re-registers ``__index__`` with ``.item()`` after the interpreter patches
    ``tl.tensor`` (and is undone with it). CPU tests only; compiled kernels are untouched.
    """
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_numpy_shim", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._numpy_shim = True
    interpreter._patch_lang_tensor = patched

    def create_descriptor_reduce(self, kind, desc, value, indices):
        """Tensor-descriptor ``atomic_add`` (missing from the 3.6 interpreter) as a masked elementwise atomic add."""
        from triton._C.libtriton import ir

        if kind != ir.DESCRIPTOR_REDUCE_KIND.ADD:
            raise NotImplementedError(f"descriptor reduce {kind}")
        ptrs, mask = desc.materialize_pointers(indices)
        return self.create_atomic_rmw(ir.ATOMIC_OP.FADD, ptrs, value, mask, ir.MEM_SEMANTIC.RELAXED, None)

    if not hasattr(interpreter.InterpreterBuilder, "create_descriptor_reduce"):
        interpreter.InterpreterBuilder.create_descriptor_reduce = create_descriptor_reduce


if INTERPRET:
    _interpreter_numpy_shim()


def _cfg(bm, bn, warps, stages, maxnreg=None, hook=None):
    """A tile config; ``maxnreg`` caps registers per thread (more resident programs per SM, or spills)."""
    return triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages, maxnreg=maxnreg, pre_hook=hook
    )


# Candidates for Hopper (H100/H200), the fastest of a screening on an H200 at batch 1, 16 heads, seq 16384,
# d 64, bf16, causal (benchmarks/attention_variants.py; results/attention/README.md, runs 4, 7, 8), best first,
# plus small 64x64 tiles that fit every head dim. BLOCK_M must be a multiple of BLOCK_N for the forward and
# dQ (causal diagonal split), and BLOCK_N of BLOCK_M for dK/dV.
if INTERPRET:
    FWD_CONFIGS = [_cfg(16, 16, 4, 1)]
    DKDV_CONFIGS = [_cfg(16, 32, 4, 1)]
    DQ_CONFIGS = [_cfg(32, 16, 4, 1)]
else:
    FWD_CONFIGS = [
        _cfg(128, 64, 8, 4, 112),
        _cfg(128, 64, 8, 3),
        _cfg(128, 64, 8, 4),
        _cfg(128, 64, 4, 4),
        _cfg(64, 64, 4, 3),
    ]
    # 64x64 with 2 stages and 168 registers: 3 programs per SM (a few spills; run 8), else 2
    DKDV_CONFIGS = [_cfg(64, 64, 4, 2, 168), _cfg(64, 64, 4, 3), _cfg(64, 128, 8, 3), _cfg(128, 128, 8, 2)]
    DQ_CONFIGS = [_cfg(128, 64, 4, 3), _cfg(64, 64, 4, 3), _cfg(128, 64, 8, 3)]
FP32_CONFIGS = [_cfg(32, 32, 4, 2), _cfg(64, 64, 4, 2)]  # fp32 tiles take twice the shared memory
# Head dim 256: the backward's tiles above need more shared memory than Hopper's 227 KB (offline sm_90 compiles,
# bf16: dK/dV 64x64 in 3 stages 329 KB, dQ 256 KB; fp32 dK/dV 32x32 228.25 KB), the forward's all but one. Each
# kernel fits one of these and ptxas assembles it without spills (bf16: forward 64x64 160 KB, dQ 64x64 192 KB, dK/dV
# 32x32 in 3 stages 130.5 KB; fp32: dK/dV 32x32 in one stage 196 KB; with 4 warps 64x64 dK/dV spilled 5 KB);
# autotuning skips those that do not fit (tests/test_attention.py::test_head_dim_256_tiles_fit_hopper_shared_memory)
WIDE_CONFIGS = [_cfg(64, 64, 8, 2), _cfg(32, 32, 8, 3), _cfg(32, 32, 8, 2)]
WIDE_FP32_CONFIGS = [_cfg(32, 32, 8, 1), _cfg(16, 16, 4, 2)]


DEFAULT_BWD = "gluon_ws"  # for 16-bit inputs on Hopper; see the module docstring
FWD_TMA = False  # K/V tiles of the forward through TMA descriptors (16-bit inputs on Hopper)
# head dim -> flash_gluon_fwd config for 16-bit inputs on Hopper, lengths a multiple of 128 (others: Triton):
# d 128 (H100, 1x16 heads, bf16, seq 4096-65536, causal and not; benchmarks/results/attention/screen_d128.jsonl):
# FA3's ping-pong ran at 1.02x SDPA's speed (geometric mean), the Triton kernel at 0.78x; with O stored by TMA
# (H200, taking turns; screen_fwd_tmao_h200.jsonl) 1.02-1.09x where without it 1.00-1.07x; d 256 (H200, seq 4096
# and 16384, causal and not; screen_fwd_d256_h200.jsonl): 1.04-1.16x SDPA's speed, the Triton forward 0.34-0.43x
FWD_GLUON: dict[int, str] = {128: "n128_pingpong_tmao", 256: "d256_pingpong"}
FWD_HEAD_GROUP = 2  # forward launch order: heads in groups of this many, longest tiles of a group first
# structure of the dK/dV kernel (see _flash_bwd_dkdv_kernel); QDO_TMA applies on Hopper (and the interpreter) only
# REORDER is off: with the 168-register cap ptxas serializes the wgmma instructions under it (run 8)
BWD_OPTS = {"HEAD_GROUP": 4, "QDO_TMA": True, "REORDER": False, "SCALE_DS": True}
BWD_OPTS_MAX_D = 64  # larger head dims keep the plain structure (with BWD_OPTS their tiles spill: run 8)
BWD_MODES = {"two_kernel": 0, "atomic": 1, "tma": 2, "gluon_ws": 2}  # gluon_ws: flash_gluon_ws, tma's dQ buffer
GLUON_WS_TRITON = "3.6."  # the Triton release flash_gluon_ws was written and measured with
# flash_gluon_bwd128 config for the "gluon_ws" backward at head dim 128 (None: the ``tma`` kernel there):
# 0.93-1.06x SDPA's speed where the ``tma`` kernel ran at 0.74-0.78x (same screens, 2026-11-28)
BWD_GLUON128: str | None = "d128"
# flash_gluon_bwd128 with grouped-query heads (GPU test: tests/test_flash_gluon_bwd128.py::
# test_grouped_query_heads_match_fp32_attention passed on the H100); off, GQA at d 128 takes the ``tma`` kernel
BWD_GLUON128_GQA = True
# flash_gluon_bwd256 config for the "gluon_ws" backward at head dim 256, grouped-query heads included (None: the
# ``tma`` kernel there, with WIDE_CONFIGS). H200, 1x16 heads, bf16, kernels alone, SDPA's time over ours, causal / not
# causal at 4096, 16384 (screen_bwd256_h200.jsonl): ``d256_dq128`` 1.03 1.15 / 1.06 1.18 (geometric mean 1.10, the
# other configs 0.94-1.08), the ``tma`` kernel 0.26-0.29
BWD_GLUON256: str | None = "d256_dq128"

if os.environ.get("FLASH_TRITON_FIRST_CONFIG") == "1":  # skip autotuning (quick correctness runs)
    FWD_CONFIGS, DKDV_CONFIGS, DQ_CONFIGS = FWD_CONFIGS[:1], DKDV_CONFIGS[:1], DQ_CONFIGS[:1]
if os.environ.get("FLASH_TRITON_CONFIGS"):  # benchmarks: {"fwd": [[BM, BN, warps, stages], ...], "dkdv", "dq", "bwd"}
    _override = json.loads(os.environ["FLASH_TRITON_CONFIGS"])
    FWD_CONFIGS = [_cfg(*c) for c in _override.get("fwd", [])] or FWD_CONFIGS
    DKDV_CONFIGS = [_cfg(*c) for c in _override.get("dkdv", [])] or DKDV_CONFIGS
    DQ_CONFIGS = [_cfg(*c) for c in _override.get("dq", [])] or DQ_CONFIGS
    DEFAULT_BWD = _override.get("bwd", DEFAULT_BWD)
    FWD_TMA = _override.get("fwd_tma", FWD_TMA)
    _fwd_gluon = {**FWD_GLUON, **{int(d): c for d, c in _override.get("fwd_gluon", {}).items()}}  # per head dim
    FWD_GLUON = {d: c for d, c in _fwd_gluon.items() if c}  # null: the Triton forward at that head dim
    BWD_GLUON128 = _override.get("bwd_gluon128", BWD_GLUON128)
    BWD_GLUON128_GQA = _override.get("bwd_gluon128_gqa", BWD_GLUON128_GQA)
    BWD_GLUON256 = _override.get("bwd_gluon256", BWD_GLUON256)
    FWD_HEAD_GROUP = _override.get("fwd_head_group", FWD_HEAD_GROUP)
    BWD_OPTS = {**BWD_OPTS, **_override.get("bwd_opts", {})}


def _hooked(configs):
    return [
        _cfg(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages, c.maxnreg, desc_hook) for c in configs
    ]


FWD_CONFIGS, DKDV_CONFIGS, DQ_CONFIGS, FP32_CONFIGS, WIDE_CONFIGS, WIDE_FP32_CONFIGS = map(
    _hooked, (FWD_CONFIGS, DKDV_CONFIGS, DQ_CONFIGS, FP32_CONFIGS, WIDE_CONFIGS, WIDE_FP32_CONFIGS)
)


def _prune(configs, named_args, **kwargs):
    """Drop tiles much larger than the sequence and, for d >= 128, the register-hungry and register-capped ones;
    fp32 inputs and head dims above 128 take their own lists (shared memory)."""
    n = named_args["N_CTX"]
    d = kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM"))
    cap = max(16, triton.next_power_of_2(n))
    fp32 = named_args["Q"].dtype == torch.float32
    if not INTERPRET and d is not None and d > 128:
        configs = WIDE_FP32_CONFIGS if fp32 else WIDE_CONFIGS
    elif not INTERPRET and fp32:
        configs = FP32_CONFIGS
    kept = [c for c in configs if c.kwargs["BLOCK_M"] <= cap and c.kwargs["BLOCK_N"] <= cap]
    if kwargs.get("DQ_MODE") == 1:  # fewer, larger query tiles: fewer atomics
        kept = [c for c in kept if c.kwargs["BLOCK_M"] >= 64] or kept
    if d is not None and d >= 128:  # register caps were tuned at d 64; at d 128 those tiles spill
        kept = [c for c in kept if not (c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] >= 128 * 128 and c.num_warps < 8)]
        kept = [c for c in kept if not c.maxnreg]
    return kept or configs[-1:]


def _even(args):
    return args["N_CTX"] % args["BLOCK_M"] == 0 and args["N_CTX"] % args["BLOCK_N"] == 0


_KEY = ["N_CTX", "HEAD_DIM", "IS_CAUSAL"]
_KEY_FWD = ["N_CTX", "HEAD_DIM", "IS_CAUSAL", "TMA", "HEAD_GROUP"]
_KEY_DKDV = [
    "N_CTX",
    "HEAD_DIM",
    "IS_CAUSAL",
    "DQ_MODE",
    "HEAD_GROUP",
    "QDO_TMA",
    "REORDER",
    "SCALE_DS",
    "GQA",
]


@triton.jit
def _tile_order(pid, num_tiles, n_bh, HEAD_GROUP: tl.constexpr):
    """Program id -> (tile rank, head): heads in groups of ``HEAD_GROUP``, a group's heads interleaved.

    Blocks start in program-id order, so rank 0 of every head of a group
    starts before rank 1 of any: with rank 0 the longest tile of a causal
    head, the short tiles of the last group fill the tail of the launch.
    ``HEAD_GROUP`` 1 is head after head; a small group keeps the K/V (or
    Q/dO) that the programs in flight read inside L2.
    """
    group = pid // (num_tiles * HEAD_GROUP)
    first = group * HEAD_GROUP
    size = tl.minimum(HEAD_GROUP, n_bh - first)
    r = pid - first * num_tiles
    return r // size, first + r % size


# ---------------------------------------------------------------- forward


@triton.jit
def _fwd_inner(
    acc, l_i, m_i, q, k_base, v_base, k_desc, v_desc, row0, offs_m, offs_d, lo, hi, N_CTX, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr, EVEN: tl.constexpr, IS_CAUSAL: tl.constexpr,
    TMA: tl.constexpr,
):  # fmt: skip
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_off = offs_n[:, None] * HEAD_DIM + offs_d[None, :]
        if TMA:  # rows past N_CTX come from the next head (or zeros): masked below, and p = 0 on them
            k = k_desc.load([row0 + start_n, 0])
        elif EVEN:
            k = tl.load(k_base + kv_off)
        else:
            k = tl.load(k_base + kv_off, mask=offs_n[:, None] < N_CTX, other=0.0)
        qk = tl.dot(q, tl.trans(k))
        if MASK:
            qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, float("-inf"))
        elif not EVEN and not IS_CAUSAL:
            qk = tl.where(offs_n[None, :] < N_CTX, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if TMA:
            v = v_desc.load([row0 + start_n, 0])
        elif EVEN:
            v = tl.load(v_base + kv_off)
        else:
            v = tl.load(v_base + kv_off, mask=offs_n[:, None] < N_CTX, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.autotune(configs=FWD_CONFIGS, key=_KEY_FWD, prune_configs_by={"early_config_prune": _prune})
@triton.heuristics({"EVEN": _even})
@triton.jit
def _flash_fwd_kernel(
    Q, K, V, K_DESC, V_DESC, Out, L, sm_scale, N_CTX,
    HEAD_DIM: tl.constexpr, IS_CAUSAL: tl.constexpr, TMA: tl.constexpr, HEAD_GROUP: tl.constexpr, GQA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr,
):  # fmt: skip
    """One program per query tile (1-D grid, order by ``_tile_order``); with ``TMA`` K and V tiles come
    through bulk tensor copies (``K_DESC``, ``V_DESC``). Query head ``h`` reads K/V head ``h // GQA``."""
    num_m = tl.cdiv(N_CTX, BLOCK_M)
    pid_m, pid_bh = _tile_order(tl.program_id(0), num_m, tl.num_programs(0) // num_m, HEAD_GROUP)
    if IS_CAUSAL:
        pid_m = num_m - 1 - pid_m  # longest rows first
    off_bh = pid_bh.to(tl.int64)
    base = off_bh * N_CTX * HEAD_DIM
    kv_base = (off_bh // GQA) * N_CTX * HEAD_DIM
    row0 = (pid_bh // GQA) * N_CTX  # K/V rows in the descriptors
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_off = offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    if EVEN:
        q = tl.load(Q + base + q_off)
    else:
        q = tl.load(Q + base + q_off, mask=offs_m[:, None] < N_CTX, other=0.0)
    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if IS_CAUSAL:
        diag = pid_m * BLOCK_M
        acc, l_i, m_i = _fwd_inner(
            acc, l_i, m_i, q, K + kv_base, V + kv_base, K_DESC, V_DESC, row0, offs_m, offs_d, 0, diag, N_CTX, qk_scale,
            HEAD_DIM, BLOCK_N, False, EVEN, IS_CAUSAL, TMA,
        )  # fmt: skip
        acc, l_i, m_i = _fwd_inner(
            acc, l_i, m_i, q, K + kv_base, V + kv_base, K_DESC, V_DESC, row0, offs_m, offs_d, diag, diag + BLOCK_M, N_CTX, qk_scale,
            HEAD_DIM, BLOCK_N, True, EVEN, IS_CAUSAL, TMA,
        )  # fmt: skip
    else:
        acc, l_i, m_i = _fwd_inner(
            acc, l_i, m_i, q, K + kv_base, V + kv_base, K_DESC, V_DESC, row0, offs_m, offs_d, 0, N_CTX, N_CTX, qk_scale,
            HEAD_DIM, BLOCK_N, False, EVEN, IS_CAUSAL, TMA,
        )  # fmt: skip
    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    if EVEN:
        tl.store(Out + base + q_off, acc.to(Out.dtype.element_ty))
        tl.store(L + off_bh * N_CTX + offs_m, lse)
    else:
        tl.store(Out + base + q_off, acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_CTX)
        tl.store(L + off_bh * N_CTX + offs_m, lse, mask=offs_m < N_CTX)


# ---------------------------------------------------------------- backward


@triton.jit
def _flash_bwd_delta_kernel(
    Out, DO, DO_OUT, DQ, D, N_CTX, stride_b, stride_n, stride_d,
    HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, COPY_DO: tl.constexpr, ZERO_DQ: tl.constexpr,
    SCALAR_DO: tl.constexpr,
):  # fmt: skip
    """``D = rowsum(dO * O)``; also the two chores due before the dK/dV kernel, which would each cost a launch.

    ``COPY_DO`` writes dO (read with any strides, such as the expanded gradient of ``o.sum()``)
    contiguous to ``DO_OUT``; ``ZERO_DQ`` zeroes the fp32 ``DQ`` buffer that the dQ shares add into.
    ``SCALAR_DO``: dO is one value a head (rows and columns of stride 0, as ``o.sum()`` gives), read once a
    program: read element by element (128 scalar loads a thread, all of one address) the kernel took 0.585 ms in
    fp16 at 16x16384x128 on an H200 (0.103 ms in bf16, 0.067 without the copy; benchmarks/README.md, issue 26)."""
    off_bh = tl.program_id(1).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    off = off_bh * N_CTX * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    mask = offs_m[:, None] < N_CTX
    o = tl.load(Out + off, mask=mask, other=0.0).to(tl.float32)
    if SCALAR_DO:
        do = tl.zeros([BLOCK, HEAD_DIM], dtype=DO.dtype.element_ty) + tl.load(DO + off_bh * stride_b)
    else:
        do_off = off_bh * stride_b + offs_m[:, None] * stride_n + offs_d[None, :] * stride_d
        do = tl.load(DO + do_off, mask=mask, other=0.0)
    if COPY_DO:
        tl.store(DO_OUT + off, do, mask=mask)
    if ZERO_DQ:
        tl.store(DQ + off, tl.zeros([BLOCK, HEAD_DIM], dtype=tl.float32), mask=mask)
    tl.store(D + off_bh * N_CTX + offs_m, tl.sum(o * do.to(tl.float32), 1), mask=offs_m < N_CTX)


@triton.jit
def _dkdv_inner(
    dk, dv, k, v, q_base, do_base, q_desc, do_desc, dq_base, dq_desc, row0, l_base, d_base, offs_n, offs_d, lo, hi,
    N_CTX, qk_scale, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASK: tl.constexpr, EVEN: tl.constexpr, DQ_MODE: tl.constexpr,
    QDO_TMA: tl.constexpr, REORDER: tl.constexpr, SCALE_DS: tl.constexpr,
):  # fmt: skip
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        row_off = offs_m[:, None] * HEAD_DIM + offs_d[None, :]
        if QDO_TMA:  # rows past N_CTX come from the next head (or zeros): lse = inf gives them p = 0, ds = 0
            q = q_desc.load([row0 + start_m, 0])
        elif EVEN:
            q = tl.load(q_base + row_off)
        else:
            q = tl.load(q_base + row_off, mask=offs_m[:, None] < N_CTX, other=0.0)
        if EVEN:
            lse = tl.load(l_base + offs_m) * 1.4426950408889634
        else:
            lse = tl.load(l_base + offs_m, mask=offs_m < N_CTX, other=float("inf")) * 1.4426950408889634
        p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])  # (BLOCK_N, BLOCK_M)
        if MASK:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        if QDO_TMA:
            do = do_desc.load([row0 + start_m, 0])
        elif EVEN:
            do = tl.load(do_base + row_off)
        else:
            do = tl.load(do_base + row_off, mask=offs_m[:, None] < N_CTX, other=0.0)
        if EVEN:
            delta = tl.load(d_base + offs_m)
        else:
            delta = tl.load(d_base + offs_m, mask=offs_m < N_CTX, other=0.0)
        if REORDER:  # dP first: the dV product then runs while dS is computed
            dp_t = tl.dot(v, tl.trans(do))
            dv = tl.dot(p_t.to(do.dtype), do, dv)
        else:
            dv = tl.dot(p_t.to(do.dtype), do, dv)
            dp_t = tl.dot(v, tl.trans(do))
        if SCALE_DS:  # dS carries the softmax scale, so dK and dQ need no scaling afterwards
            ds_t = (p_t * (dp_t * sm_scale - (delta * sm_scale)[None, :])).to(q.dtype)
        else:
            ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk)
        if DQ_MODE:
            dq = tl.dot(tl.trans(ds_t), k) * (1.0 if SCALE_DS else sm_scale)
        if DQ_MODE == 1:
            if EVEN:
                tl.atomic_add(dq_base + row_off, dq, sem="relaxed")
            else:
                tl.atomic_add(dq_base + row_off, dq, mask=offs_m[:, None] < N_CTX, sem="relaxed")
        elif DQ_MODE == 2:
            # rows past N_CTX have p = 0, so their share is exactly zero (and the next head's rows absorb zeros)
            dq_desc.atomic_add([row0 + start_m, 0], dq)
    return dk, dv


@triton.jit
def _dkdv_head(
    dk, dv, k, v, Q, DO, Q_DESC, DO_DESC, DQ, DQ_DESC, L, D, pid_bh, pid_n, offs_n, offs_d, N_CTX, sm_scale,
    HEAD_DIM: tl.constexpr, IS_CAUSAL: tl.constexpr, DQ_MODE: tl.constexpr, QDO_TMA: tl.constexpr,
    REORDER: tl.constexpr, SCALE_DS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr,
):  # fmt: skip
    """dK, dV of one key tile accumulated over the query tiles of query head ``pid_bh`` that see it."""
    off_bh = pid_bh.to(tl.int64)
    base = off_bh * N_CTX * HEAD_DIM
    row0 = pid_bh * N_CTX
    qk_scale = sm_scale * 1.4426950408889634
    lrow = L + off_bh * N_CTX
    drow = D + off_bh * N_CTX
    if IS_CAUSAL:
        start = pid_n * BLOCK_N
        dk, dv = _dkdv_inner(
            dk, dv, k, v, Q + base, DO + base, Q_DESC, DO_DESC, DQ + base, DQ_DESC, row0, lrow, drow, offs_n, offs_d,
            start, start + BLOCK_N, N_CTX, qk_scale, sm_scale, HEAD_DIM, BLOCK_M, True, EVEN, DQ_MODE,
            QDO_TMA, REORDER, SCALE_DS,
        )  # fmt: skip
        dk, dv = _dkdv_inner(
            dk, dv, k, v, Q + base, DO + base, Q_DESC, DO_DESC, DQ + base, DQ_DESC, row0, lrow, drow, offs_n, offs_d,
            start + BLOCK_N, N_CTX, N_CTX, qk_scale, sm_scale, HEAD_DIM, BLOCK_M, False, EVEN, DQ_MODE,
            QDO_TMA, REORDER, SCALE_DS,
        )  # fmt: skip
    else:
        dk, dv = _dkdv_inner(
            dk, dv, k, v, Q + base, DO + base, Q_DESC, DO_DESC, DQ + base, DQ_DESC, row0, lrow, drow, offs_n, offs_d,
            0, N_CTX, N_CTX, qk_scale, sm_scale, HEAD_DIM, BLOCK_M, False, EVEN, DQ_MODE,
            QDO_TMA, REORDER, SCALE_DS,
        )  # fmt: skip
    return dk, dv


@triton.autotune(
    configs=DKDV_CONFIGS,
    key=_KEY_DKDV,
    prune_configs_by={"early_config_prune": _prune},
    reset_to_zero=["DQ"],  # atomic dQ accumulates: each autotune trial must start from zero
)
@triton.heuristics({"EVEN": _even})
@triton.jit
def _flash_bwd_dkdv_kernel(
    Q, K, V, DO, Q_DESC, DO_DESC, DK, DV, DQ, DQ_DESC, L, D, sm_scale, N_CTX,
    HEAD_DIM: tl.constexpr, IS_CAUSAL: tl.constexpr, DQ_MODE: tl.constexpr, HEAD_GROUP: tl.constexpr,
    QDO_TMA: tl.constexpr, REORDER: tl.constexpr, SCALE_DS: tl.constexpr, GQA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr,
):  # fmt: skip
    """One program per key tile of a K/V head: dK, dV accumulated over the query tiles that see it, in each
    of the head's ``GQA`` query heads.

    ``DQ_MODE`` 1 also adds each tile's dQ share into fp32 ``DQ`` with
    elementwise atomics, 2 with one bulk tensor reduce per tile through
    ``DQ_DESC`` (a descriptor over ``DQ`` viewed as ``(batch*heads*N_CTX, HEAD_DIM)``).
    Structure switches (``BWD_OPTS``): ``HEAD_GROUP`` launch order (``_tile_order``;
    with causal masking key tile 0 sees the most queries); ``QDO_TMA`` Q and dO tiles through ``Q_DESC``/``DO_DESC``;
    ``REORDER`` issues dP before dV, so that the dV product runs while dS is
    computed; ``SCALE_DS`` folds the softmax scale into dS. Run 8 also screened
    queries-as-rows P/dS and issuing the dQ product first; both lost and were
    removed (they live at commit 7fa6ddf).
    """
    num_n = tl.cdiv(N_CTX, BLOCK_N)
    pid_n, pid_kv = _tile_order(tl.program_id(0), num_n, tl.num_programs(0) // num_n, HEAD_GROUP)
    base = pid_kv.to(tl.int64) * N_CTX * HEAD_DIM  # K/V head; its query heads are pid_kv * GQA + g
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_off = offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    if EVEN:
        k = tl.load(K + base + kv_off)
        v = tl.load(V + base + kv_off)
    else:
        k = tl.load(K + base + kv_off, mask=offs_n[:, None] < N_CTX, other=0.0)
        v = tl.load(V + base + kv_off, mask=offs_n[:, None] < N_CTX, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    if GQA == 1:
        dk, dv = _dkdv_head(
            dk, dv, k, v, Q, DO, Q_DESC, DO_DESC, DQ, DQ_DESC, L, D, pid_kv, pid_n, offs_n, offs_d, N_CTX, sm_scale,
            HEAD_DIM, IS_CAUSAL, DQ_MODE, QDO_TMA, REORDER, SCALE_DS, BLOCK_M, BLOCK_N, EVEN,
        )  # fmt: skip
    else:  # grouped-query attention: dK, dV of a shared head sum over the GQA query heads that read it
        for g in range(GQA):
            dk, dv = _dkdv_head(
                dk, dv, k, v, Q, DO, Q_DESC, DO_DESC, DQ, DQ_DESC, L, D, pid_kv * GQA + g, pid_n, offs_n, offs_d,
                N_CTX, sm_scale, HEAD_DIM, IS_CAUSAL, DQ_MODE, QDO_TMA, REORDER, SCALE_DS, BLOCK_M, BLOCK_N, EVEN,
            )  # fmt: skip
    if not SCALE_DS:
        dk = dk * sm_scale
    if EVEN:
        tl.store(DK + base + kv_off, dk.to(DK.dtype.element_ty))
        tl.store(DV + base + kv_off, dv.to(DV.dtype.element_ty))
    else:
        tl.store(DK + base + kv_off, dk.to(DK.dtype.element_ty), mask=offs_n[:, None] < N_CTX)
        tl.store(DV + base + kv_off, dv.to(DV.dtype.element_ty), mask=offs_n[:, None] < N_CTX)


@triton.jit
def _dq_inner(
    dq, q, do, lse, delta, k_base, v_base, offs_m, offs_d, lo, hi, N_CTX, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr, EVEN: tl.constexpr, IS_CAUSAL: tl.constexpr,
):  # fmt: skip
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_off = offs_n[:, None] * HEAD_DIM + offs_d[None, :]
        if EVEN:
            k = tl.load(k_base + kv_off)
            v = tl.load(v_base + kv_off)
        else:
            k = tl.load(k_base + kv_off, mask=offs_n[:, None] < N_CTX, other=0.0)
            v = tl.load(v_base + kv_off, mask=offs_n[:, None] < N_CTX, other=0.0)
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])
        if MASK:
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        elif not EVEN and not IS_CAUSAL:
            p = tl.where(offs_n[None, :] < N_CTX, p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.autotune(configs=DQ_CONFIGS, key=_KEY, prune_configs_by={"early_config_prune": _prune})
@triton.heuristics({"EVEN": _even})
@triton.jit
def _flash_bwd_dq_kernel(
    Q, K, V, DO, DQ, L, D, sm_scale, N_CTX,
    HEAD_DIM: tl.constexpr, IS_CAUSAL: tl.constexpr, GQA: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, EVEN: tl.constexpr,
):  # fmt: skip
    """One program per query tile: dQ accumulated over the key tiles it sees (of K/V head ``head // GQA``)."""
    num_m = tl.cdiv(N_CTX, BLOCK_M)
    pid_m = tl.program_id(0)
    if IS_CAUSAL:
        pid_m = num_m - 1 - pid_m  # longest rows first
    off_bh = tl.program_id(1).to(tl.int64)
    base = off_bh * N_CTX * HEAD_DIM
    kv_base = (off_bh // GQA) * N_CTX * HEAD_DIM
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_off = offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    if EVEN:
        q = tl.load(Q + base + row_off)
        do = tl.load(DO + base + row_off)
        lse = tl.load(L + off_bh * N_CTX + offs_m) * 1.4426950408889634
        delta = tl.load(D + off_bh * N_CTX + offs_m)
    else:
        row_ok = offs_m < N_CTX
        q = tl.load(Q + base + row_off, mask=row_ok[:, None], other=0.0)
        do = tl.load(DO + base + row_off, mask=row_ok[:, None], other=0.0)
        lse = tl.load(L + off_bh * N_CTX + offs_m, mask=row_ok, other=float("inf")) * 1.4426950408889634
        delta = tl.load(D + off_bh * N_CTX + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    if IS_CAUSAL:
        diag = pid_m * BLOCK_M
        dq = _dq_inner(
            dq, q, do, lse, delta, K + kv_base, V + kv_base, offs_m, offs_d, 0, diag, N_CTX, qk_scale,
            HEAD_DIM, BLOCK_N, False, EVEN, IS_CAUSAL,
        )  # fmt: skip
        dq = _dq_inner(
            dq, q, do, lse, delta, K + kv_base, V + kv_base, offs_m, offs_d, diag, diag + BLOCK_M, N_CTX, qk_scale,
            HEAD_DIM, BLOCK_N, True, EVEN, IS_CAUSAL,
        )  # fmt: skip
    else:
        dq = _dq_inner(
            dq, q, do, lse, delta, K + kv_base, V + kv_base, offs_m, offs_d, 0, N_CTX, N_CTX, qk_scale,
            HEAD_DIM, BLOCK_N, False, EVEN, IS_CAUSAL,
        )  # fmt: skip
    dq = dq * sm_scale
    if EVEN:
        tl.store(DQ + base + row_off, dq.to(DQ.dtype.element_ty))
    else:
        tl.store(DQ + base + row_off, dq.to(DQ.dtype.element_ty), mask=offs_m[:, None] < N_CTX)


# ---------------------------------------------------------------- launchers


_CHECKED: set[tuple] = set()  # (shapes, dtype) that passed _check: a training loop repeats a few


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """One shape for q, k, v, except that k and v may have fewer heads (dim -3) than q, a divisor of q's."""
    signature = (q.shape, k.shape, v.shape, q.dtype)
    if signature in _CHECKED:
        return
    gqa = (
        k.shape == v.shape
        and q.dim() >= 4
        and q.shape[:-3] == k.shape[:-3]
        and q.shape[-2:] == k.shape[-2:]
        and 0 < k.shape[-3] <= q.shape[-3]
        and q.shape[-3] % k.shape[-3] == 0
    )
    if not (q.shape == k.shape == v.shape or gqa):
        raise ValueError(
            "q, k, v must have one shape, or k and v a divisor of q's heads (dim -3) and q's other dims, got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    d = q.shape[-1]
    if d < 16 or d > 256 or d & (d - 1):
        raise ValueError(f"head dim must be a power of two in [16, 256], got {d}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"unsupported dtype {q.dtype}")
    if len(_CHECKED) >= CACHE_ENTRIES:  # variable-length batches bring many shapes
        _CHECKED.clear()
    _CHECKED.add(signature)


def _hopper(q: torch.Tensor) -> bool:
    return INTERPRET or (q.is_cuda and capability(q.device.index)[0] >= 9)


def forward_kernels(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    config: tuple | None = None,
    tma: bool | None = None,
    head_group: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward on contiguous ``(batch*heads, seq, d)`` tensors (or ``(batch, heads, seq, d)``: any leading dims are
    flattened): ``(O, L)``, O like ``q`` and L of ``q.shape[:-1]``; ``config`` skips autotuning.

    ``k`` and ``v`` may have fewer rows than ``q`` (``batch*kv_heads``, grouped-query attention): query row
    ``i`` of the flattened heads then reads K/V row ``i // (q.shape[0] // k.shape[0])``, as SDPA's
    ``enable_gqa=True`` does for ``(batch, heads, seq, d)`` inputs.

    ``tma=None`` takes ``FWD_TMA`` for 16-bit inputs on Hopper, pointer loads otherwise;
    ``head_group=None`` takes ``FWD_HEAD_GROUP`` (launch order, see ``_tile_order``).
    """
    bh, n, d = rows(q)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    gluon_fwd = _gluon_fwd(q, k) if config is None and tma is None and d in FWD_GLUON else None
    if gluon_fwd is not None:
        gluon_fwd.forward(q, k, v, o, lse, 1.0 / math.sqrt(d), is_causal, FWD_GLUON[d], head_group or FWD_HEAD_GROUP)
        return o, lse
    if tma is None:
        tma = FWD_TMA and _hopper(q) and q.dtype != torch.float32
    if head_group is None:
        head_group = FWD_HEAD_GROUP
    bh_kv = rows(k)[0]

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_M"]) * bh,)

    def build():  # only when the key below is new
        k_desc, v_desc = k, v
        if tma:  # block shape set per config by desc_hook (or here for a fixed config)
            bn = config[1] if config else 16
            k_desc = TensorDescriptor(k, [bh_kv * n, d], [d, 1], [bn, d])
            v_desc = TensorDescriptor(v, [bh_kv * n, d], [d, 1], [bn, d])
        consts = {"HEAD_DIM": d, "IS_CAUSAL": is_causal, "TMA": tma, "HEAD_GROUP": head_group, "GQA": bh // bh_kv}
        return grid, (q, k, v, k_desc, v_desc, o, lse, 1.0 / math.sqrt(d), n), consts

    if config is not None:
        launch(_flash_fwd_kernel, *build(), config)
        return o, lse
    # every input of the launch (contiguous tensors): the same key is the same launch
    key = (id(_flash_fwd_kernel), q.device.index, q.dtype, k.dtype, bh, bh_kv, n, d, is_causal, tma, head_group,
           q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())  # fmt: skip
    launch_keyed(key, _flash_fwd_kernel, build)
    return o, lse


def resolve_bwd_mode(q: torch.Tensor, mode: str | bool | None) -> str:
    """``None``/``False`` -> the default for this input, ``True`` -> ``"atomic"``, a name -> itself."""
    if mode is True:
        return "atomic"
    if mode is None or mode is False:
        return DEFAULT_BWD if _hopper(q) and q.dtype != torch.float32 else "two_kernel"
    if mode not in BWD_MODES:
        raise ValueError(f"backward mode must be one of {sorted(BWD_MODES)}, got {mode!r}")
    return mode


@functools.cache
def _gluon_modules(release: str) -> tuple | None:
    """``(flash_gluon_fwd, flash_gluon_ws, flash_gluon_bwd128, flash_gluon_bwd256)`` where Triton's version starts
    with ``release`` (the one they were written for, ``GLUON_WS_TRITON``), else None; imported once (an import
    statement a call cost ~10 us of the backward's host time, issue 26).

    Gluon is Triton's experimental dialect and the kernels call one of the compiler's internal builders
    (the TMA reduce), so another Triton release gets the ``tma`` kernel rather than a compile error.
    """
    if not triton.__version__.startswith(release):
        return None
    try:
        from profiler_kit.workloads import flash_gluon_bwd128, flash_gluon_bwd256, flash_gluon_fwd, flash_gluon_ws
    except (ImportError, AttributeError):  # a Triton without Gluon, or whose internals it uses have moved
        return None
    return flash_gluon_fwd, flash_gluon_ws, flash_gluon_bwd128, flash_gluon_bwd256


def _gluon_ws(q: torch.Tensor, grouped: bool = False):
    """The warp-specialized Gluon dK/dV module that takes these inputs (``supported``; ``grouped``: K/V with fewer
    heads than Q), else None: ``flash_gluon_ws`` at head dim 64 (no head groups), ``flash_gluon_bwd128`` at 128 and
    ``flash_gluon_bwd256`` at 256 where ``BWD_GLUON128`` / ``BWD_GLUON256`` names a config (head groups at 128 where
    ``BWD_GLUON128_GQA`` is on)."""
    modules = _gluon_modules(GLUON_WS_TRITON)
    if modules is None:
        return None
    _, ws, bwd128, bwd256 = modules
    if ws.supported(q):
        return None if grouped else ws
    if BWD_GLUON128 and bwd128.supported(q):
        return bwd128 if BWD_GLUON128_GQA or not grouped else None
    return bwd256 if BWD_GLUON256 and bwd256.supported(q) else None


def _gluon_fwd(q: torch.Tensor, k: torch.Tensor):
    """``flash_gluon_fwd`` where it takes these inputs under the Triton it was written for, else None."""
    modules = _gluon_modules(GLUON_WS_TRITON)
    return modules[0] if modules is not None and modules[0].supported(q, k) else None


def backward_kernels(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    is_causal: bool,
    mode: str = "two_kernel",
    dkdv_config: tuple | None = None,
    dq_config: tuple | None = None,
    opts: dict | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward on contiguous ``(batch*heads, seq, d)`` tensors, or any leading dims as ``forward_kernels`` (``do``
    any strides): ``(dQ, dK, dV)`` like ``q``, ``k``, ``v``.

    With fewer K/V rows than Q rows (grouped-query attention, as ``forward_kernels``) dK and dV of a shared
    head are the sums over its query heads, accumulated in one program (no atomics); the d 64 warp-specialized
    Gluon kernel takes no head groups (d 128: unless ``BWD_GLUON128_GQA``), so ``"gluon_ws"`` takes ``"tma"`` then.

    ``dkdv_config`` and ``dq_config`` skip autotuning.

    ``opts`` overrides entries of ``BWD_OPTS`` (the dK/dV kernel's structure switches, which apply to 16-bit
    inputs with head dims up to ``BWD_OPTS_MAX_D``; others start from all switches off).
    """
    bh, n, d = rows(q)
    bh_kv = rows(k)[0]
    gqa = bh // bh_kv
    ws = _gluon_ws(q, gqa > 1) if mode == "gluon_ws" else None
    if mode == "gluon_ws" and ws is None:  # inputs the warp-specialized kernel does not take
        mode, dkdv_config = "tma", None
    mode_id = BWD_MODES[mode]
    # dO may have any strides (``o.sum()`` gives an expanded one): the D kernel reads it by (batch*heads, seq, d)
    # strides, copies it and zeroes dQ's buffer
    if not do.is_contiguous():
        do = do.reshape(bh, n, d)  # a view where the strides allow (as the expanded dO's), else a copy
    do_strides = do.stride() if do.dim() == 3 else (n * d, d, 1)
    do_c = do if do.is_contiguous() else torch.empty(do.shape, dtype=do.dtype, device=do.device)
    dq = torch.empty(q.shape, dtype=torch.float32, device=q.device) if mode_id else torch.empty_like(q)
    delta = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    block = 64 if INTERPRET else 128
    consts = {"HEAD_DIM": d, "BLOCK": block, "COPY_DO": do_c is not do, "ZERO_DQ": bool(mode_id),
              "SCALAR_DO": do_strides[1] == do_strides[2] == 0}  # fmt: skip
    key = (id(_flash_bwd_delta_kernel), q.device.index, o.dtype, do.dtype, dq.dtype, bh, n, *do_strides,
           *consts.values(), o.data_ptr(), do.data_ptr(), do_c.data_ptr(), dq.data_ptr(), delta.data_ptr())  # fmt: skip
    launch_keyed(
        key, _flash_bwd_delta_kernel,
        lambda: ((triton.cdiv(n, block), bh), (o, do, do_c, dq, delta, n, *do_strides), consts),
    )  # fmt: skip
    do = do_c
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    scale = 1.0 / math.sqrt(d)
    if ws is not None:
        head_group = (opts or {}).get("HEAD_GROUP", ws.HEAD_GROUP)  # its own launch order
        config = dkdv_config or {128: BWD_GLUON128, 256: BWD_GLUON256}.get(d) or ws.DEFAULT
        ws.dkdv(q, k, v, do, dq, lse, delta, dk, dv, scale, is_causal, config, head_group)
        return dq.to(q.dtype), dk, dv
    plain = {name: 1 if name == "HEAD_GROUP" else False for name in BWD_OPTS}
    tuned = d <= BWD_OPTS_MAX_D and q.dtype != torch.float32
    opts = {**(BWD_OPTS if tuned else plain), **(opts or {})}
    aligned = q.data_ptr() % 16 == 0 and do.data_ptr() % 16 == 0  # TMA needs 16-byte aligned tiles
    opts["QDO_TMA"] = bool(opts["QDO_TMA"]) and _hopper(q) and aligned
    bm = dkdv_config[0] if dkdv_config else 16  # descriptors' block shapes: set per config by desc_hook
    dq_desc, q_desc, do_desc = dq, q, do
    if mode_id == 2:
        dq_desc = TensorDescriptor(dq, [bh * n, d], [d, 1], [bm, d])
    if opts["QDO_TMA"]:
        q_desc = TensorDescriptor(q, [bh * n, d], [d, 1], [bm, d])
        do_desc = TensorDescriptor(do, [bh * n, d], [d, 1], [bm, d])

    def grid_n(meta):
        return (triton.cdiv(n, meta["BLOCK_N"]) * bh_kv,)

    def grid_m(meta):
        return (triton.cdiv(n, meta["BLOCK_M"]), bh)

    args = (q, k, v, do, q_desc, do_desc, dk, dv, dq, dq_desc, lse, delta, scale, n)
    consts = {"HEAD_DIM": d, "IS_CAUSAL": is_causal, "DQ_MODE": mode_id, **opts, "GQA": gqa}
    launch(_flash_bwd_dkdv_kernel, grid_n, args, consts, dkdv_config)
    if mode_id:
        return dq.to(q.dtype), dk, dv
    args = (q, k, v, do, dq, lse, delta, scale, n)
    launch(_flash_bwd_dq_kernel, grid_m, args, {"HEAD_DIM": d, "IS_CAUSAL": is_causal, "GQA": gqa}, dq_config)
    return dq, dk, dv


@torch.library.custom_op("workloads::flash2_triton_fwd", mutates_args=())
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return forward_kernels(q, k, v, is_causal)


@_fwd_op.register_fake
def _(q, k, v, is_causal):
    return torch.empty_like(q), q.new_empty(q.shape[:-1], dtype=torch.float32)  # k, v may have fewer heads


@torch.library.custom_op("workloads::flash2_triton_bwd", mutates_args=())
def _bwd_op(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    is_causal: bool,
    mode: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return backward_kernels(do, q, k, v, o, lse, is_causal, mode)


@_bwd_op.register_fake
def _(do, q, k, v, o, lse, is_causal, mode):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_contiguous() else x.contiguous()


def _fwd(q, k, v, is_causal):
    """The custom op while torch.compile traces, the kernels themselves in eager mode."""
    return (_fwd_op if torch.compiler.is_compiling() else forward_kernels)(q, k, v, is_causal)


def _bwd(do, q, k, v, o, lse, is_causal, mode):
    return (_bwd_op if torch.compiler.is_compiling() else backward_kernels)(do, q, k, v, o, lse, is_causal, mode)


def triton_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward only: ``(O, L)`` with O like ``q`` and L (natural log, fp32) of shape ``q.shape[:-1]``."""
    _check(q, k, v)
    return _fwd(_contiguous(q), _contiguous(k), _contiguous(v), is_causal)


class FlashAttention2Triton(torch.autograd.Function):
    """``FlashAttention2Triton.apply(q, k, v, is_causal=False, atomic_dq=False)`` on ``(..., seq, d)`` tensors.

    ``(batch, heads, seq, d)`` k and v may have fewer heads than q (grouped-query attention: query head ``h``
    reads K/V head ``h // (heads // kv_heads)``, SDPA's ``enable_gqa=True``).

    ``atomic_dq`` picks the backward: ``False`` the default for the input
    (``resolve_bwd_mode``), ``True`` the one-kernel one with elementwise fp32
    atomics, or a name from ``BWD_MODES``. All are exact up to summation order.
    """

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False, atomic_dq=False):
        _check(q, k, v)
        q, k, v = _contiguous(q), _contiguous(k), _contiguous(v)  # kept in their shapes: views cost host time
        o, lse = _fwd(q, k, v, is_causal)
        ctx.save_for_backward(lse, q, k, v, o)
        ctx.is_causal = is_causal
        ctx.bwd_mode = resolve_bwd_mode(q, atomic_dq)
        return o

    @staticmethod
    def backward(ctx, do):
        lse, q, k, v, o = ctx.saved_tensors
        dq, dk, dv = _bwd(do, q, k, v, o, lse, ctx.is_causal, ctx.bwd_mode)  # do: any strides
        return dq, dk, dv, None, None


def flash_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """Differentiable FlashAttention-2 (Triton) on ``(batch, seq, d)`` or ``(batch, heads, seq, d)``."""
    return FlashAttention2Triton.apply(q, k, v, is_causal)
