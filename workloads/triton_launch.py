"""How the Triton and Gluon attention kernels are launched: a cached fast path, fixed configs, TMA tile shapes.

Shared by ``flash_triton`` (the Triton kernels) and ``flash_gluon_ws`` (the Gluon dK/dV kernel), which
``flash_triton`` imports in turn: the launch path lives here so neither imports the other at load time.
"""

from __future__ import annotations

import functools
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
                _PLANS[key] = (compiled, _tuned_constants(kernel, args, consts))
            return
        compiled, tuned = plan
        named = dict(zip(kernel.arg_names, args, strict=False)) | consts | tuned
        desc_hook(named)
        dims = tuple(grid(named) if callable(grid) else grid)
        compiled[dims + (1,) * (3 - len(dims))](*(named[name] for name in kernel.arg_names))
    else:
        bm, bn, warps, stages, *rest = config
        extra = {"maxnreg": rest[0]} if rest and rest[0] else {}
        compiled = kernel.fn[grid](*args, **consts, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages, **extra)
        fn = kernel
        while hasattr(fn, "fn"):  # Autotuner -> Heuristics -> JITFunction -> the Python function
            fn = fn.fn
        LAST_COMPILED[fn.__name__] = (getattr(compiled, "n_regs", None), getattr(compiled, "n_spills", None))


@functools.cache
def capability(device_index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device_index)
