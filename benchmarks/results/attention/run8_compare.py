"""Run 8: the Triton attention before and after run 8, and SDPA, timed side by side in one process.

Usage (device machine, repo root)::

    python3 benchmarks/results/attention/run8_compare.py --before <flash_triton.py before run 8> --out run8_compare.jsonl

The file given by ``--before`` (``git show f1684bb:workloads/flash_triton.py``) is loaded as a module of
its own, its ``torch.library`` op names moved to another namespace so that both versions can register.
Each implementation is timed like ``workloads.attention_bench`` (do_bench median, warmup 200 / rep 2000
ms; backward of ``o.sum()``), twice, the second pass in reverse order, so the spread between passes
shows next to the differences. Besides "before" and "after" (the committed defaults), two rows undo one
run-8 change each: "after_fwd_order_1" (forward head after head) and "after_bwd_plain" (every dK/dV
switch off, head after head), to see what each half contributes to forward+backward.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from workloads import flash_triton as after  # noqa: E402
from workloads.attention import make_inputs  # noqa: E402


def load_before(path: str):
    """The module at ``path`` under the name ``flash_triton_before``, its custom ops renamed."""
    src = Path(path).read_text().replace('"workloads::flash2_triton', '"run8_before::flash2_triton')
    spec = importlib.util.spec_from_loader("flash_triton_before", loader=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__file__ = path  # Triton reads the source of jitted functions through inspect
    sys.modules[spec.name] = mod
    exec(compile(src, path, "exec"), mod.__dict__)  # noqa: S102
    return mod


@contextlib.contextmanager
def patched(module, **values):
    """Set module globals for the duration (the launchers read them at each call)."""
    old = {k: getattr(module, k) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)


def bench(fn, q, k, v, warmup, rep) -> dict:
    from triton.testing import do_bench

    fwd = do_bench(lambda: fn(q, k, v, True), warmup=warmup, rep=rep, return_mode="median")
    out = fn(q, k, v, True)
    grad = torch.ones_like(out)
    bwd = do_bench(
        lambda: out.backward(grad, retain_graph=True), warmup=warmup, rep=rep, grad_to_none=[q, k, v],
        return_mode="median",
    )  # fmt: skip
    out = None
    both = do_bench(
        lambda: fn(q, k, v, True).sum().backward(), warmup=warmup, rep=rep, grad_to_none=[q, k, v],
        return_mode="median",
    )  # fmt: skip
    return {"fwd_ms": fwd, "bwd_ms": bwd, "fwd_bwd_ms": both}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--d-head", type=int, nargs="+", default=[64])
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--rep", type=int, default=2000)
    args = p.parse_args()
    before = load_before(args.before)
    plain = {name: 1 if name == "HEAD_GROUP" else False for name in after.BWD_OPTS}
    impls = {
        "sdpa": (lambda q, k, v, c: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=c), {}),
        "before": (before.flash_attention_triton, {}),
        "after": (after.flash_attention_triton, {}),
        "after_fwd_order_1": (after.flash_attention_triton, {"FWD_HEAD_GROUP": 1}),
        "after_bwd_plain": (after.flash_attention_triton, {"BWD_OPTS": plain}),
    }
    sink = open(args.out, "a", encoding="utf-8")  # noqa: SIM115
    for d in args.d_head:
        q, k, v = make_inputs(1, 16, 16384, d, torch.bfloat16, "cuda")
        order = list(impls)
        for pass_ in range(args.passes):
            for name in order if pass_ % 2 == 0 else order[::-1]:
                fn, globals_ = impls[name]
                t0 = time.perf_counter()
                with patched(after, **globals_):
                    row = bench(fn, q, k, v, args.warmup, args.rep)
                row = {"impl": name, "pass": pass_, "d_head": d, "seq": 16384, "heads": 16, "dtype": "bfloat16",
                       "causal": True, "warmup_ms": args.warmup, "rep_ms": args.rep,
                       "device": torch.cuda.get_device_name(), **row, "wall_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                print(f"d={d} pass {pass_} {name:>18} fwd {row['fwd_ms']:.3f} bwd {row['bwd_ms']:.3f} "
                      f"fwd+bwd {row['fwd_bwd_ms']:.3f} ms [{row['wall_s']}s]", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
