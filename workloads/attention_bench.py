"""Attention benchmark: forward, backward and forward+backward of every implementation, one JSONL row each.

Timings come from ``triton.testing.do_bench`` (CUDA events, median). Backward
is the gradient of ``o.sum()``. ``mem_before_bwd_bytes`` is
``torch.cuda.memory_allocated()`` right after the forward (inputs, output and
what autograd saved). A configuration that runs out of memory is a row with
``status`` "oom". FLOPs follow the FlashAttention-2 benchmarks: forward ``4*B*H*N^2*d``, halved when
causal; backward 2.5x forward.

Rows are appended (and flushed) as they finish so a run cut short keeps what it
measured. ``python -m profiler_kit.attention_report`` turns the JSONL into
markdown + HTML.

Example::

    python -m workloads.attention_bench --impl triton sdpa --d-head 64 128 --seq 1024 4096 16384 \\
        --dtype bfloat16 --causal --out benchmarks/results/attention/run.jsonl
    python -m workloads.attention_bench --check   # correctness at real sizes vs an fp32 reference
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch

from workloads.attention import IMPLS, get_impl, make_inputs

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def attention_flops(batch: int, heads: int, seq: int, d_head: int, causal: bool) -> tuple[float, float]:
    """(forward, backward) FLOPs as the FlashAttention-2 benchmarks count them."""
    fwd = 4.0 * batch * max(heads, 1) * seq * seq * d_head / (2 if causal else 1)
    return fwd, 2.5 * fwd


def bench_case(
    impl: str,
    batch: int,
    heads: int,
    seq: int,
    d_head: int,
    dtype: str,
    causal: bool,
    warmup: int = 25,
    rep: int = 100,
) -> dict:
    """One row: fwd/bwd/fwd+bwd median ms, memory before backward, TFLOP/s; status ok / oom / error."""
    from triton.testing import do_bench

    row = {
        "impl": impl,
        "batch": batch,
        "heads": heads,
        "seq": seq,
        "d_head": d_head,
        "dtype": dtype,
        "causal": causal,
        "warmup_ms": warmup,
        "rep_ms": rep,
        "device": torch.cuda.get_device_name(),
    }
    fn = get_impl(impl)
    q = k = v = out = None
    try:
        q, k, v = make_inputs(batch, heads, seq, d_head, DTYPES[dtype], "cuda")
        torch.cuda.synchronize()
        fwd = do_bench(lambda: fn(q, k, v, causal), warmup=warmup, rep=rep, return_mode="median")
        out = fn(q, k, v, causal)
        torch.cuda.synchronize()
        row["mem_before_bwd_bytes"] = torch.cuda.memory_allocated()
        grad = torch.ones_like(out)
        bwd = do_bench(
            lambda: out.backward(grad, retain_graph=True),
            warmup=warmup,
            rep=rep,
            grad_to_none=[q, k, v],
            return_mode="median",
        )
        out = None
        both = do_bench(
            lambda: fn(q, k, v, causal).sum().backward(),
            warmup=warmup,
            rep=rep,
            grad_to_none=[q, k, v],
            return_mode="median",
        )
        flops_f, flops_b = attention_flops(batch, heads, seq, d_head, causal)
        row.update(
            status="ok",
            fwd_ms=fwd,
            bwd_ms=bwd,
            fwd_bwd_ms=both,
            fwd_tflops=flops_f / fwd / 1e9,
            bwd_tflops=flops_b / bwd / 1e9,
            fwd_bwd_tflops=(flops_f + flops_b) / both / 1e9,
        )
    except torch.OutOfMemoryError:
        row["status"] = "oom"
    except Exception as err:  # a failing implementation is a result, not the end of the sweep
        row.update(status="error", error=f"{type(err).__name__}: {str(err)[:300]}")
    finally:
        q = k = v = out = None
        torch.cuda.empty_cache()
    return row


def check_case(impl: str, batch: int, heads: int, seq: int, d_head: int, dtype: str, causal: bool) -> dict:
    """Relative error (||x - ref|| / ||ref||) of O, dQ, dK, dV against fp32 math attention on the GPU."""
    fn = get_impl(impl)
    q, k, v = make_inputs(batch, heads, seq, d_head, DTYPES[dtype], "cuda", seed=seq + d_head)
    out = fn(q, k, v, causal)
    grad = torch.randn_like(out)
    out.backward(grad)
    ref_in = [t.detach().float().requires_grad_() for t in (q, k, v)]
    scores = ref_in[0] @ ref_in[1].transpose(-1, -2) / math.sqrt(d_head)
    if causal:
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    ref = torch.softmax(scores, -1) @ ref_in[2]
    ref.backward(grad.float())
    errs = {}
    for name, got, want in [("o", out, ref)] + [
        (f"d{n}", t.grad, r.grad) for n, t, r in zip("qkv", (q, k, v), ref_in, strict=True)
    ]:
        errs[f"rel_err_{name}"] = ((got.float() - want).norm() / want.norm()).item()
    return {"impl": impl, "batch": batch, "heads": heads, "seq": seq, "d_head": d_head, "dtype": dtype,
            "causal": causal, **errs}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", nargs="+", default=list(IMPLS), choices=IMPLS)
    p.add_argument("--d-head", nargs="+", type=int, default=[16, 32, 64, 128])
    p.add_argument("--seq", nargs="+", type=int, default=[2**i for i in range(7, 17)])
    p.add_argument("--dtype", nargs="+", default=["bfloat16"], choices=list(DTYPES))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16, help="0 for (batch, seq, d) inputs")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warm-up, ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms")
    p.add_argument("--max-seq", nargs="*", default=[], metavar="IMPL=SEQ", help="skip IMPL above SEQ (slow impls)")
    p.add_argument("--check", action="store_true", help="correctness vs fp32 reference instead of timing")
    p.add_argument("--out", default="-", help="JSONL file to append to (- for stdout)")
    args = p.parse_args(argv)
    limits = {k: int(v) for k, v in (item.split("=") for item in args.max_seq)}
    sink = sys.stdout if args.out == "-" else open(args.out, "a", encoding="utf-8")  # noqa: SIM115
    for dtype in args.dtype:
        for d in args.d_head:
            for seq in args.seq:
                for impl in args.impl:
                    if seq > limits.get(impl, 1 << 30):
                        continue
                    t0 = time.perf_counter()
                    if args.check:
                        try:
                            row = check_case(impl, args.batch, args.heads, seq, d, dtype, args.causal)
                        except Exception as err:  # report and go on to the next case
                            row = {"impl": impl, "seq": seq, "d_head": d, "dtype": dtype, "causal": args.causal,
                                   "status": "error", "error": f"{type(err).__name__}: {str(err)[:300]}"}  # fmt: skip
                    else:
                        row = bench_case(
                            impl, args.batch, args.heads, seq, d, dtype, args.causal, args.warmup, args.rep
                        )
                    row["wall_s"] = round(time.perf_counter() - t0, 2)
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                    print(_summary(row), file=sys.stderr, flush=True)
    return 0


def _summary(row: dict) -> str:
    head = f"{row['impl']:>13} d={row['d_head']:<3} n={row['seq']:<6} {row['dtype']:<8} causal={row['causal']}"
    if row.get("status") == "error":
        return f"{head} error {row['error']}"
    if "rel_err_o" in row:
        return head + " " + " ".join(f"{k[8:]}={v:.1e}" for k, v in row.items() if k.startswith("rel_err"))
    if row.get("status") != "ok":
        return f"{head} {row.get('status')} {row.get('error', '')}"
    return (
        f"{head} fwd {row['fwd_ms']:.3f} ms ({row['fwd_tflops']:.0f} TF/s) bwd {row['bwd_ms']:.3f} "
        f"({row['bwd_tflops']:.0f}) fwd+bwd {row['fwd_bwd_ms']:.3f} ({row['fwd_bwd_tflops']:.0f}) [{row['wall_s']}s]"
    )


if __name__ == "__main__":
    raise SystemExit(main())
