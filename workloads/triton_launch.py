"""How the Triton and Gluon attention kernels are launched: a cached fast path, fixed configs, TMA tile shapes.

Shared by ``flash_triton`` (the Triton kernels) and ``flash_gluon_ws`` (the Gluon dK/dV kernel), which
``flash_triton`` imports in turn: the launch path lives here so neither imports the other at load time.
"""

from __future__ import annotations

import functools
import inspect
import math
import os

import torch
import triton
from triton.runtime.autotuner import Autotuner, Heuristics

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def desc_hook(nargs):
    """Give the TMA descriptors among the arguments the tile shape of the config being launched."""
    for name, block in (
        ("K_DESC", "BLOCK_N"),
        ("V_DESC", "BLOCK_N"),
        ("DQ_DESC", "BLOCK_M"),
        ("Q_DESC", "BLOCK_M"),
        ("DO_DESC", "BLOCK_M"),
    ):
        if name in nargs and not isinstance(nargs[name], torch.Tensor):
            nargs[name].block_shape = [nargs[block], nargs["HEAD_DIM"]]


LAST_COMPILED: dict[str, tuple] = {}  # kernel name -> (registers, spills) of the last fixed-config launch

# Compiled kernels by launch key, with the tuned config's constants (see launch). Triton's own launch path
# (autotuner lookup, argument specialization, a cache-key string built per call) costs 40-150 us of host time
# per launch on the H200 machines (run 11), most of a short sequence's forward + backward.
_PLANS: dict[tuple, tuple] = {}
# How a compiled kernel takes its arguments (every bound argument, constexprs included, to CompiledKernel's
# runner) was checked on Triton 3.6 (run 11); older releases passed only the non-constexpr ones, so other
# versions take Triton's own launch path.
FAST_LAUNCH = not INTERPRET and triton.__version__.split(".")[:2] == ["3", "6"]
# Cached launches go straight to the kernel's C launcher, TMA descriptors with cached encodings (``_direct``);
# off: through CompiledKernel's runner (benchmarks compare the two)
DIRECT_LAUNCH = os.environ.get("FLASH_DIRECT_LAUNCH", "1") == "1"


def _launch_key(kernel, args: tuple, consts: dict) -> tuple:
    """What Triton specializes a launch on: each tensor's dtype and 16-byte alignment, integer values, constexprs."""
    parts = [id(kernel), torch.cuda.current_device()]
    for a in args:
        if isinstance(a, torch.Tensor):
            parts.append((a.dtype, a.data_ptr() % 16 == 0))
        elif hasattr(a, "base"):  # a TMA descriptor, Triton's or Gluon's; a Gluon kernel may read its head dim
            parts.append((a.base.dtype, a.base.data_ptr() % 16 == 0, "desc", tuple(a.block_shape)))  # off the tile
        else:
            parts.append(a if isinstance(a, int) else type(a))
    parts.extend(consts.items())
    return tuple(parts)


def _tuned_constants(kernel, args: tuple, consts: dict) -> dict:
    """The constexprs the autotuner and heuristics added to the launch ``kernel[grid](*args, **consts)`` just made."""
    tuned = dict(kernel.best_config.kwargs) if isinstance(kernel, Autotuner) else {}
    inner = kernel.fn if isinstance(kernel, Autotuner) else kernel
    if isinstance(inner, Heuristics):
        named = dict(zip(inner.arg_names, args, strict=False)) | consts | tuned
        tuned |= {name: heuristic(named) for name, heuristic in inner.values.items()}
    return tuned


# Encoded TMA descriptors (CUtensorMap) by everything the encoding reads: address, shape, strides, padding and
# the kernel's tile metadata. Triton encodes one per descriptor argument on every launch (cuTensorMapEncodeTiled
# behind a Python wrapper); a training loop hands the same buffers back, so most launches find theirs here.
_TMA_ARGS: dict[tuple, list] = {}
# entries a host-side cache of the launch path keeps before it is emptied (its addresses, shapes and launches;
# a stale entry is never wrong, only unused): here and in gluon_tiles and flash_triton
CACHE_ENTRIES = 4096


def _tma_arg(desc, meta: dict, meta_key: tuple) -> list:
    """What Triton's launcher passes for the descriptor ``desc``: the encoded map, then its shape and strides."""
    key = (desc.base.data_ptr(), *desc.shape, *desc.strides, desc.padding, meta_key)
    arg = _TMA_ARGS.get(key)
    if arg is None:
        from triton.backends.nvidia.driver import make_tensordesc_arg

        if len(_TMA_ARGS) >= CACHE_ENTRIES:
            _TMA_ARGS.clear()
        arg = _TMA_ARGS[key] = make_tensordesc_arg(desc, meta)
    return arg


def _direct(compiled):
    """A call ``(dims, values)`` straight into the C launcher Triton built for a compiled kernel (Triton's runner
    adds a launch-metadata dict, a closure and scratch checks per launch), with the TMA descriptors' encodings from
    ``_TMA_ARGS``; None where Triton's path is needed (scratch memory to allocate, a launcher this was not
    written against). The call's ``flat(values)`` gives the launcher's arguments after the stream and metadata."""
    run = compiled.run
    metas = getattr(compiled.metadata, "tensordesc_meta", None) or []
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None
    sig = list(compiled.src.signature.values())
    where = [i for i, s in enumerate(sig) if isinstance(s, str) and s.startswith("tensordesc")]
    if len(where) != len(metas):
        return None
    if not where:  # no descriptors: Triton calls the C launch itself (driver.wrap_handle_tensordesc)
        raw = run.launch if inspect.isbuiltin(run.launch) else None
    else:  # Triton 3.6 wraps the C launch in a closure that encodes the descriptors
        try:
            raw = inspect.getclosurevars(run.launch).nonlocals.get("launcher")
        except TypeError:
            return None
    if raw is None:
        return None
    descs = {i: (m, tuple(sorted((k, str(x)) for k, x in m.items()))) for i, m in zip(where, metas, strict=True)}
    head = (compiled.function, run.launch_cooperative_grid, run.launch_pdl, None, None, compiled.packed_metadata)
    from triton.runtime.driver import driver

    drv = driver.active

    def flat(values):
        if not descs:
            return list(values)
        out = []
        for i, a in enumerate(values):
            d = descs.get(i)
            if d is None:
                out.append(a)
            else:
                out.extend(_tma_arg(a, *d))
        return out

    def call(dims, values, flat_values=None):
        stream = drv.get_current_stream(drv.get_current_device())
        raw(*dims, stream, *head, None, None, None, *(flat(values) if flat_values is None else flat_values))

    call.flat = flat
    return call


# Whole launches by their caller's key (``launch_keyed``): the direct call and its flattened arguments, tensors as
# addresses (so that no entry keeps a tensor alive)
_KEYED: dict[tuple, tuple] = {}


def launch_keyed(key: tuple, kernel, build) -> None:
    """Launch ``kernel`` on what ``build()`` returns, ``(grid, args, consts)``, as ``launch`` does; a later call
    with the same ``key`` replays that launch's encoded arguments into the C launcher without calling ``build``.

    ``key`` must hold everything the arguments are made of (each tensor's address, shape and dtype, the scalars
    and constants): an equal key is then an equal launch. For launches whose argument building (TMA descriptors,
    launch keys) costs more host time than a short sequence's kernel leaves (issue 26)."""
    hit = _KEYED.get(key) if DIRECT_LAUNCH else None
    if hit is not None and not _hooked_launches():
        direct, dims, flat = hit
        direct(dims, None, flat)
        return
    grid, args, consts = build()
    launch(kernel, grid, args, consts)
    plan = _PLANS.get(_launch_key(kernel, args, consts)) if FAST_LAUNCH else None
    if plan is None or not plan[2]:
        return
    compiled, tuned, direct = plan
    named = dict(zip(kernel.arg_names, args, strict=False)) | consts | tuned
    desc_hook(named)  # an autotuned kernel's descriptors take the tuned tile shapes, its grid the tuned block
    dims = tuple(grid(named) if callable(grid) else grid)
    values = [named[name] for name in kernel.arg_names]
    flat = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in direct.flat(values)]
    if len(_KEYED) >= CACHE_ENTRIES:
        _KEYED.clear()
    _KEYED[key] = (direct, dims + (1,) * (3 - len(dims)), flat)


def _hooked_launches() -> bool:
    """Whether a launch hook is set (Triton's profiler, proton): those launches take Triton's own path."""
    rt = triton.knobs.runtime
    enter, exit_ = rt.launch_enter_hook, rt.launch_exit_hook
    return bool(getattr(enter, "calls", enter is not None) or getattr(exit_, "calls", exit_ is not None))


def launch(kernel, grid, args, consts, config=None):
    """Autotuned launch, or (``config=(BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg])``) one fixed config.

    The first autotuned launch of a key (``_launch_key``) goes through Triton, which tunes and compiles;
    later ones call that compiled kernel with the same constants, skipping Triton's per-call Python.
    """
    if config is None:
        key = _launch_key(kernel, args, consts) if FAST_LAUNCH else None
        plan = _PLANS.get(key)
        if plan is None:
            compiled = kernel[grid](*args, **consts)
            if key is not None and hasattr(compiled, "packed_metadata"):
                _PLANS[key] = (compiled, _tuned_constants(kernel, args, consts), DIRECT_LAUNCH and _direct(compiled))
            return
        compiled, tuned, direct = plan
        named = dict(zip(kernel.arg_names, args, strict=False)) | consts | tuned
        desc_hook(named)
        dims = tuple(grid(named) if callable(grid) else grid)
        dims += (1,) * (3 - len(dims))
        values = [named[name] for name in kernel.arg_names]
        if direct and not _hooked_launches():
            direct(dims, values)
        else:
            compiled[dims](*values)
    else:
        bm, bn, warps, stages, *rest = config
        extra = {"maxnreg": rest[0]} if rest and rest[0] else {}
        compiled = kernel.fn[grid](*args, **consts, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages, **extra)
        fn = kernel
        while hasattr(fn, "fn"):  # Autotuner -> Heuristics -> JITFunction -> the Python function
            fn = fn.fn
        LAST_COMPILED[fn.__name__] = (getattr(compiled, "n_regs", None), getattr(compiled, "n_spills", None))


def rows(t: torch.Tensor) -> tuple[int, int, int]:
    """``(batch*heads, seq, d)`` of a contiguous ``(..., seq, d)`` tensor. The launchers take any leading dims, so
    the autograd path hands them its ``(batch, heads, seq, d)`` tensors without views (issue 26: at short sequences
    the host's few microseconds a view are on the critical path)."""
    n, d = t.shape[-2:]
    return math.prod(t.shape[:-2]), n, d


@functools.cache
def capability(device_index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device_index)


@functools.cache
def sm_count(device_index: int) -> int:
    """The GPU's streaming multiprocessors (a persistent grid's size)."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count
