"""Attention benchmark: forward, backward and forward+backward of every implementation, one JSONL row each.

Timings come from ``triton.testing.do_bench`` (CUDA events, median), the implementations of a case taking
turns (``--rounds``; a power-capped GPU's clock follows its recent load). Backward
is the gradient of ``o.sum()``. ``mem_before_bwd_bytes`` is
``torch.cuda.memory_allocated()`` right after the forward (inputs, output and
what autograd saved). A configuration that runs out of memory is a row with
``status`` "oom". FLOPs follow the FlashAttention-2 benchmarks: forward ``4*B*H*N^2*d``, halved when
causal; backward 2.5x forward.

Rows are appended (and flushed) as they finish so a run cut short keeps what it
measured. ``python -m profiler_kit.attention_report`` turns the JSONL into
markdown + HTML. ``--sweep`` times ours (``triton``) and SDPA in one process over
d 64 and 128, seq 1k-64k, causal and not, bf16 and fp16, and ends with a side-by-side
table (ms, TFLOP/s, SDPA's time over ours); ``--quick`` is a subset of it for one call.
``--kv-heads`` gives K/V fewer heads (grouped-query attention; SDPA with ``enable_gqa``).

Example::

    python -m profiler_kit.workloads.attention_bench --impl triton sdpa --d-head 64 128 --seq 1024 4096 16384 \\
        --dtype bfloat16 --causal --out benchmarks/results/attention/run.jsonl
    python -m profiler_kit.workloads.attention_bench --sweep --quick   # ours against SDPA, 16 cases
    python -m profiler_kit.workloads.attention_bench --check   # correctness at real sizes vs an fp32 reference
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable

import torch
from profiler_kit.workloads.attention import IMPLS, get_impl, make_inputs

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def attention_flops(batch: int, heads: int, seq: int, d_head: int, causal: bool) -> tuple[float, float]:
    """(forward, backward) FLOPs as the FlashAttention-2 benchmarks count them."""
    fwd = 4.0 * batch * max(heads, 1) * seq * seq * d_head / (2 if causal else 1)
    return fwd, 2.5 * fwd


def time_interleaved(
    fns: dict[str, Callable], warmup: int = 25, rep: int = 100, rounds: int = 5, grad_to_none=None, bench=None
) -> dict[str, float]:
    """Median ms of each of ``fns``, timed in turns: ``rounds`` rounds of one ``do_bench`` block of
    ``rep / rounds`` ms each, the order rotated every round.

    Under a power cap (an H200 at 700 W runs d 128 attention at 1650-1980 MHz) the clock follows the last
    second's load, so timing one implementation after the other favours whichever ran on the cooler GPU;
    taking turns gives each the same mix of clocks. ``rounds=1``: one after the other."""
    if bench is None:
        from triton.testing import do_bench as bench
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times = bench(fns[name], warmup=warmup if r == 0 else 1, rep=max(1, rep // rounds),
                          grad_to_none=grad_to_none, return_mode="all")  # fmt: skip
            samples[name] += list(times)
    return {name: statistics.median(t) for name, t in samples.items()}


def bench_case(
    impls: list[str],
    batch: int,
    heads: int,
    seq: int,
    d_head: int,
    dtype: str,
    causal: bool,
    warmup: int = 25,
    rep: int = 100,
    kv_heads: int = 0,
    rounds: int = 5,
) -> list[dict]:
    """One row per implementation on the same inputs: fwd/bwd/fwd+bwd median ms (``time_interleaved``, the
    implementations taking turns), memory before backward, TFLOP/s; status ok / oom / error.

    FLOPs count the query heads: grouped-query attention (``kv_heads``) does the same products."""
    base = {"batch": batch, "heads": heads, "seq": seq, "d_head": d_head, "dtype": dtype, "causal": causal,
            "kv_heads": kv_heads or heads, "warmup_ms": warmup, "rep_ms": rep, "rounds": rounds,
            "device": torch.cuda.get_device_name()}  # fmt: skip
    rows = {impl: {"impl": impl, **base} for impl in impls}
    fns = {impl: get_impl(impl) for impl in impls}
    q = k = v = None
    outs: dict = {}
    try:
        q, k, v = make_inputs(batch, heads, seq, d_head, DTYPES[dtype], "cuda", kv_heads=kv_heads)
        for impl in impls:  # one forward and backward alone: its memory, and whether it runs at all
            try:
                out = fns[impl](q, k, v, causal)
                torch.cuda.synchronize()
                rows[impl]["mem_before_bwd_bytes"] = torch.cuda.memory_allocated()
                out.sum().backward()
                torch.cuda.synchronize()
                rows[impl]["status"] = "ok"
            except torch.OutOfMemoryError:
                rows[impl]["status"] = "oom"
            except Exception as err:  # a failing implementation is a result, not the end of the sweep
                rows[impl].update(status="error", error=f"{type(err).__name__}: {str(err)[:300]}")
            finally:
                out = None
                q.grad = k.grad = v.grad = None
                torch.cuda.empty_cache()
        live = {impl: fns[impl] for impl in impls if rows[impl]["status"] == "ok"}
        timing = {"warmup": warmup, "rep": rep, "rounds": rounds}
        fwd = time_interleaved({i: lambda f=f: f(q, k, v, causal) for i, f in live.items()}, **timing)
        outs = {i: f(q, k, v, causal) for i, f in live.items()}
        grad = torch.ones_like(next(iter(outs.values()))) if outs else None
        bwd = time_interleaved({i: lambda o=o: o.backward(grad, retain_graph=True) for i, o in outs.items()},
                               grad_to_none=[q, k, v], **timing)  # fmt: skip
        outs = {}
        both = time_interleaved({i: lambda f=f: f(q, k, v, causal).sum().backward() for i, f in live.items()},
                                grad_to_none=[q, k, v], **timing)  # fmt: skip
    except Exception as err:  # out of memory or a failure while taking turns: every row still timed says so
        status = "oom" if isinstance(err, torch.OutOfMemoryError) else "error"
        for row in rows.values():
            if row.get("status", "ok") == "ok":
                row["status"] = status
                if status == "error":
                    row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
        return list(rows.values())
    finally:
        q = k = v = None
        outs = {}
        torch.cuda.empty_cache()
    flops_f, flops_b = attention_flops(batch, heads, seq, d_head, causal)
    for impl in live:
        rows[impl].update(
            fwd_ms=fwd[impl],
            bwd_ms=bwd[impl],
            fwd_bwd_ms=both[impl],
            fwd_tflops=flops_f / fwd[impl] / 1e9,
            bwd_tflops=flops_b / bwd[impl] / 1e9,
            fwd_bwd_tflops=(flops_f + flops_b) / both[impl] / 1e9,
        )
    return list(rows.values())


def check_case(
    impl: str, batch: int, heads: int, seq: int, d_head: int, dtype: str, causal: bool, kv_heads: int = 0
) -> dict:
    """Relative error (||x - ref|| / ||ref||) of O, dQ, dK, dV against fp32 math attention on the GPU.

    With ``kv_heads`` the reference repeats each K/V head over its group, so its dK, dV sum over the group."""
    fn = get_impl(impl)
    q, k, v = make_inputs(batch, heads, seq, d_head, DTYPES[dtype], "cuda", seed=seq + d_head, kv_heads=kv_heads)
    out = fn(q, k, v, causal)
    grad = torch.randn_like(out)
    out.backward(grad)
    ref_in = [t.detach().float().requires_grad_() for t in (q, k, v)]
    group = q.shape[-3] // k.shape[-3] if q.dim() == 4 else 1
    kr, vr = (t.repeat_interleave(group, dim=-3) for t in ref_in[1:])
    scores = ref_in[0] @ kr.transpose(-1, -2) / math.sqrt(d_head)
    if causal:
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    ref = torch.softmax(scores, -1) @ vr
    ref.backward(grad.float())
    errs = {}
    for name, got, want in [("o", out, ref)] + [
        (f"d{n}", t.grad, r.grad) for n, t, r in zip("qkv", (q, k, v), ref_in, strict=True)
    ]:
        errs[f"rel_err_{name}"] = ((got.float() - want).norm() / want.norm()).item()
    return {"impl": impl, "batch": batch, "heads": heads, "kv_heads": kv_heads or heads, "seq": seq, "d_head": d_head,
            "dtype": dtype, "causal": causal, **errs}  # fmt: skip


# --sweep: ours against SDPA over the shapes of issue 26; --quick: a subset that fits one device call
SWEEP = {"d_head": [64, 128], "seq": [1024, 2048, 4096, 8192, 16384, 32768, 65536], "dtype": ["bfloat16", "float16"]}
QUICK = {"d_head": [64, 128], "seq": [4096, 16384], "dtype": ["bfloat16"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", nargs="+", default=None, choices=IMPLS, help="default: all (--sweep: triton sdpa)")
    p.add_argument("--d-head", nargs="+", type=int, default=None, help="default: 16 32 64 128")
    p.add_argument("--seq", nargs="+", type=int, default=None, help="default: 128 ... 65536")
    p.add_argument("--dtype", nargs="+", default=None, choices=list(DTYPES), help="default: bfloat16")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16, help="0 for (batch, seq, d) inputs")
    p.add_argument("--kv-heads", type=int, default=0, help="K/V heads, a divisor of --heads (0: as many)")
    p.add_argument("--causal", action="store_true", help="causal only (same as --mask causal)")
    p.add_argument("--mask", nargs="+", default=None, choices=["full", "causal"], help="default: full")
    p.add_argument("--sweep", action="store_true", help="triton and sdpa, d 64 128, seq 1k-64k, both masks, "
                   "bf16 fp16, then a side-by-side table")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="with --sweep: d 64 128, seq 4096 16384, bf16 only")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warm-up, ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms (of each implementation)")
    p.add_argument("--rounds", type=int, default=5, help="the implementations of a case take turns in this many "
                   "rounds of rep/rounds ms each (1: one after the other)")  # fmt: skip
    p.add_argument("--max-seq", nargs="*", default=[], metavar="IMPL=SEQ", help="skip IMPL above SEQ (slow impls)")
    p.add_argument("--check", action="store_true", help="correctness vs fp32 reference instead of timing")
    p.add_argument("--out", default="-", help="JSONL file to append to (- for stdout)")
    args = p.parse_args(argv)
    grid = (QUICK if args.quick else SWEEP) if args.sweep or args.quick else {}
    impls = args.impl or (["triton", "sdpa"] if grid else list(IMPLS))
    d_heads = args.d_head or grid.get("d_head", [16, 32, 64, 128])
    seqs = args.seq or grid.get("seq", [2**i for i in range(7, 17)])
    dtypes = args.dtype or grid.get("dtype", ["bfloat16"])
    masks = args.mask or (["causal"] if args.causal else ["causal", "full"] if grid else ["full"])
    limits = {k: int(v) for k, v in (item.split("=") for item in args.max_seq)}
    sink = sys.stdout if args.out == "-" else open(args.out, "a", encoding="utf-8")  # noqa: SIM115
    rows = []
    for dtype in dtypes:
        for d in d_heads:
            for mask in masks:
                causal = mask == "causal"
                for seq in seqs:
                    case_impls = [i for i in impls if seq <= limits.get(i, 1 << 30)]
                    for row in _run(args, case_impls, seq, d, dtype, causal):
                        rows.append(row)
                        sink.write(json.dumps(row) + "\n")
                        sink.flush()
                        print(_summary(row), file=sys.stderr, flush=True)
    if len(impls) > 1 and not args.check:
        print(side_by_side(rows, impls[0], impls[1]), file=sys.stderr if args.out == "-" else sys.stdout, flush=True)
    return 0


def _run(args, impls: list[str], seq: int, d: int, dtype: str, causal: bool) -> list[dict]:
    """Rows of one case: each implementation checked on its own, or all timed taking turns."""
    t0 = time.perf_counter()
    if not args.check:
        rows = bench_case(impls, args.batch, args.heads, seq, d, dtype, causal, args.warmup, args.rep,
                          args.kv_heads, args.rounds)  # fmt: skip
        return [{**row, "wall_s": round(time.perf_counter() - t0, 2)} for row in rows]
    rows = []
    for impl in impls:
        try:
            row = check_case(impl, args.batch, args.heads, seq, d, dtype, causal, args.kv_heads)
        except Exception as err:  # report and go on to the next case
            row = {"impl": impl, "seq": seq, "d_head": d, "dtype": dtype, "causal": causal,
                   "status": "error", "error": f"{type(err).__name__}: {str(err)[:300]}"}  # fmt: skip
        rows.append({**row, "wall_s": round(time.perf_counter() - t0, 2)})
        t0 = time.perf_counter()
    return rows


def side_by_side(rows: list[dict], ours: str, theirs: str) -> str:
    """Markdown table: each case's fwd, bwd and fwd+bwd ms (TFLOP/s) for ``ours`` and ``theirs``, and the
    speedup theirs/ours (above 1: ours is faster)."""
    by_case: dict[tuple, dict] = {}
    for r in rows:
        by_case.setdefault((r["dtype"], r["d_head"], r["causal"], r["seq"]), {})[r["impl"]] = r
    head = (
        f"| dtype | d | causal | seq | {ours} fwd / bwd / fwd+bwd ms (TFLOP/s) | {theirs} | speedup fwd / bwd / both |"
    )
    lines = [head, "|---|---:|---|---:|---|---|---|"]
    for (dtype, d, causal, seq), pair in by_case.items():
        a, b = pair.get(ours, {}), pair.get(theirs, {})
        cells = []
        for r in (a, b):
            if r.get("status") != "ok":
                cells.append(r.get("status", "-"))
                continue
            cells.append(" / ".join(f"{r[k + '_ms']:.3f} ({r[k + '_tflops']:.0f})" for k in ("fwd", "bwd", "fwd_bwd")))
        ok = a.get("status") == b.get("status") == "ok"
        ratio = " / ".join(f"{b[k] / a[k]:.2f}" for k in ("fwd_ms", "bwd_ms", "fwd_bwd_ms")) if ok else "-"
        lines.append(f"| {dtype} | {d} | {causal} | {seq} | {cells[0]} | {cells[1]} | {ratio} |")
    return "\n".join(lines)


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
