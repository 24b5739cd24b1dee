"""Pieces the warp-specialized Gluon attention kernels share (the forward, the d 64, 128 and 256 backwards): device
helpers (the backwards' load step among them), which inputs they take, the TMA descriptor of a tensor, and the offline
compile for sm_90 their tests use."""

from __future__ import annotations

import functools

import torch
from profiler_kit.workloads.triton_launch import CACHE_ENTRIES, capability, launch_keyed, rows
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

SHARED_MEMORY = 227 * 1024  # bytes of shared memory a program may take on an H100 or H200 (sm_90)


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


@gluon.jit
def load_query_tiles(
    row0, lo, num_m, N_CTX, q_desc, do_desc, L, D, q_smem, do_smem, l_smem, d_smem, ready, empty,
    STAGES: gl.constexpr, GQA: gl.constexpr,
):  # fmt: skip
    """The backwards' load warp: the Q and dO tiles from row ``lo`` on, with their rows of L and D (log-sum-exp,
    rowsum(dO O); 4 bytes a row each), of each of the ``GQA`` query heads that read the program's K/V head (head
    after head; the first at row ``row0 * GQA``), into a ``STAGES``-deep ring as the consumers free its stages."""
    BM: gl.constexpr = q_desc.block_type.shape[0]
    for t in range(GQA * num_m):
        q_row = row0 + lo + t * BM
        if GQA > 1:
            h = t // num_m
            q_row = row0 * GQA + h * N_CTX + lo + (t - h * num_m) * BM
        s = t % STAGES
        mbarrier.wait(empty.index(s), ((t // STAGES) & 1) ^ 1)  # fresh barriers pass phase 1 at once
        mbarrier.expect(ready.index(s), q_desc.block_type.nbytes + do_desc.block_type.nbytes + 2 * BM * 4)
        tma.async_copy_global_to_shared(L, [q_row // BM, 0], ready.index(s), l_smem.index(s))
        tma.async_copy_global_to_shared(D, [q_row // BM, 0], ready.index(s), d_smem.index(s))
        tma.async_copy_global_to_shared(q_desc, [q_row, 0], ready.index(s), q_smem.index(s))
        tma.async_copy_global_to_shared(do_desc, [q_row, 0], ready.index(s), do_smem.index(s))


def hopper_16bit(q, d: int, multiple: int) -> bool:
    """Whether a Gluon kernel of head dim ``d`` and ``multiple``-row programs takes ``q``: 16-bit on Hopper."""
    _, n, dim = rows(q)
    return (
        q.is_cuda
        and q.dtype in (torch.bfloat16, torch.float16)
        and dim == d
        and n % multiple == 0
        and capability(q.device.index)[0] == 9
    )


def launch_backward(kernel, launch_args, q, k, v, do, dq, lse, delta, dk, dv, sm_scale, is_causal, config, *rest):
    """Launch a Gluon dK/dV kernel on what its module's ``launch_args(q, ..., config, *rest)`` builds, replayed by
    ``triton_launch.launch_keyed`` while every address, shape, stride and constant repeats (``rest``: the module's
    launch-order and layout switches)."""

    def build():
        grid, args, consts, opts = launch_args(q, k, v, do, dq, lse, delta, dk, dv, sm_scale, is_causal, config, *rest)
        return grid, args, dict(zip(kernel.arg_names[len(args) :], consts, strict=True)) | opts

    # written out, as generator expressions cost microseconds of host time a call (issue 26)
    key = (id(kernel), q.device.index, q.dtype, q.shape, k.shape, sm_scale, is_causal,
           config if isinstance(config, str) else tuple(config), *rest,
           q.data_ptr(), k.data_ptr(), v.data_ptr(), do.data_ptr(), dq.data_ptr(), lse.data_ptr(), delta.data_ptr(),
           dk.data_ptr(), dv.data_ptr(), q.stride(), k.stride(), v.stride(), do.stride())  # fmt: skip
    launch_keyed(key, kernel, build)


@builtin
def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """Add the shared-memory tile ``src`` into global memory at ``coord`` (TMA bulk reduce, asynchronous)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


@functools.cache
def _shared_layout(block: tuple[int, ...], dtype: torch.dtype):
    gl_dtype = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}[dtype]
    return gl.NVMMASharedLayout.get_default_for(list(block), gl_dtype)


_CHECKED: set[tuple] = set()  # (dtype, shape, strides, block) that TensorDescriptor's own checks have passed


def tensor_desc(t: torch.Tensor, block: tuple[int, ...]) -> TensorDescriptor:
    """TMA descriptor of ``t`` seen as 2-D (its last dimension kept), tiles of ``block``.

    Built for every launch, so kept cheap (its host time counts at short sequences): TensorDescriptor checks its
    fields on construction, and all but the base's 16-byte alignment depend only on dtype, shape, strides and
    block, so a combination it has passed once is built again without them (the alignment checked here), and a
    contiguous ``t`` is its own base (only its address and dtype are read)."""
    if t.is_contiguous():
        d = t.shape[-1]
        base, shape, strides = t, [t.numel() // d, d], [d, 1]
    else:
        base = t.view(-1, t.shape[-1])
        shape, strides = list(base.shape), list(base.stride())
    key = (t.dtype, *shape, *strides, *block)
    layout = _shared_layout(tuple(block), t.dtype)
    if key not in _CHECKED:
        desc = TensorDescriptor(base, shape, strides, list(block), layout)
        if len(_CHECKED) >= CACHE_ENTRIES:
            _CHECKED.clear()
        _CHECKED.add(key)
        return desc
    if t.data_ptr() % 16:
        raise ValueError(f"a TMA tensor must start 16-byte aligned, got address {t.data_ptr():#x}")
    desc = object.__new__(TensorDescriptor)
    desc.__dict__ = {
        "base": base, "shape": shape, "strides": strides, "block_shape": list(block), "layout": layout,
        "padding": "zero",
    }  # fmt: skip
    return desc


def compile_sm90(fn, args: tuple, consts: tuple, opts: dict, divisible: tuple[str, ...]):
    """Compile the Gluon or Triton kernel ``fn`` for sm_90 without a GPU (the signature taken from CPU tensors in
    ``args``, the pointer arguments ``divisible`` by 16; a Triton kernel may come under its autotune and heuristics
    wrappers): Triton's compiled kernel, with ``asm["ptx"]``, ``asm["cubin"]`` and ``metadata.shared``. No driver
    is needed; ptxas ships with Triton."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction
    from triton.runtime.jit import JITFunction, mangle_type

    while not isinstance(fn, JITFunction):  # an Autotuner or Heuristics wrapper
        fn = fn.fn
    names = fn.arg_names
    const_names = names[len(args) :]
    sig = {name: mangle_type(a) for name, a in zip(names, args, strict=False)} | dict.fromkeys(const_names, "constexpr")
    constexprs = {(names.index(c),): x for c, x in zip(const_names, consts, strict=True)}
    attrs = {(names.index(c),): [["tt.divisibility", 16]] for c in divisible}
    src = (GluonASTSource if isinstance(fn, GluonJITFunction) else ASTSource)(fn, sig, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={k: x for k, x in opts.items() if x})
