"""Screen of the head-dim-128 (and 256) Gluon kernels against SDPA in one process (issue 26).

For each mask and length (1x16 heads, d 128, bf16): SDPA's forward and backward, the Triton forward and the ``tma``
backward, every ``flash_gluon_fwd`` config and every ``flash_gluon_bwd128`` config. ``--d-head 256``: the forward
configs that fit shared memory there (``flash_gluon_fwd.fits``) and every ``flash_gluon_bwd256`` config. Each of
ours is checked against the Triton kernels' results on the same inputs before it is timed (do_bench medians, ms; the
candidates of a kind taking turns, ``--rounds``, as ``attention_bench.time_interleaved`` explains). Prints a table
of SDPA's time over each (above 1: ours faster) and writes, with ``--best``, the fastest config of each kind that
was correct in every case, as ``FLASH_TRITON_CONFIGS`` takes it (``fwd_gluon``, ``bwd_gluon128`` or
``bwd_gluon256``; none where no Gluon config beat the Triton kernel)::

    python3 benchmarks/attention_gluon_screen.py --out screen.jsonl --best best.json

``--probe FILE`` first runs every config once at a small size, each in its own process with a time limit (in
parallel: this also compiles them into Triton's cache), against fp32 math attention, and writes which passed;
``--probed FILE`` screens only those (a persistent forward's probe runs 3 programs, each over several work
items), so a config that hangs or fails costs its limit, not the screen.
``--configs`` limits both to the configs named, ``--kinds`` to the forward or the backward; ``--kv-heads`` gives K/V
fewer heads (SDPA with ``enable_gqa``), ``--bwd-head-groups`` times the backward with each launch order (heads
started in groups of this many, longest programs of a group first; 0 the module's ``HEAD_GROUP``; rows
``gluon:NAME/hgN`` for N > 0); with grouped-query heads each backward is timed with a program per K/V head looping
over its query heads (``/loop``) and a program per query head (``/split``, ``flash_gluon_bwd128.SPLIT_GQA``).
``--best`` does not choose among rows with a ``/``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from profiler_kit.workloads import flash_gluon_bwd128, flash_gluon_bwd256, flash_gluon_fwd
from profiler_kit.workloads import flash_triton as ft
from profiler_kit.workloads.attention_bench import time_interleaved

BWD = {128: flash_gluon_bwd128, 256: flash_gluon_bwd256}  # head dim -> its Gluon backward


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def probe(kind: str, name: str, causal: bool, d: int = 128) -> float:
    """Max relative error of one config against fp32 math attention at 2x1024 (O and L, or dQ, dK, dV)."""
    heads, n = 2, 1024
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, do = (torch.randn(heads, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    ref = [t.float().requires_grad_() for t in (q, k, v)]
    s = ref[0] @ ref[1].transpose(-1, -2) * d**-0.5
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    lse_ref = torch.logsumexp(s, -1)
    o_ref = torch.softmax(s, -1) @ ref[2]
    if kind == "fwd":
        o, lse = torch.empty_like(q), torch.empty(heads, n, device="cuda", dtype=torch.float32)
        flash_gluon_fwd.PERSISTENT_PROGRAMS = 3  # a persistent config's programs walk several items each
        flash_gluon_fwd.forward(q, k, v, o, lse, d**-0.5, causal, name)
        return max(_rel(o, o_ref), (lse - lse_ref).abs().max().item())
    o_ref.backward(do.float())
    setattr(ft, f"BWD_GLUON{d}", name)
    got = ft.backward_kernels(do, q, k, v, o_ref.detach().to(q.dtype), lse_ref.detach(), causal, "gluon_ws")
    return max(_rel(g, r.grad) for g, r in zip(got, ref, strict=True))


def _names(mod, configs, kind: str, kinds, d: int = 128) -> list[str]:
    """The configs of ``mod`` to screen: those named in ``configs`` (all where None) that take head dim ``d``, none if
    ``kind`` is left out."""
    fit = flash_gluon_fwd.fits if mod is flash_gluon_fwd else (lambda _, dim: dim == mod.HEAD_DIM)
    return [n for n in mod.CONFIGS if (configs is None or n in configs) and kind in kinds and fit(n, d)]


def probe_all(path: str, limit: int, configs=None, kinds=("fwd", "bwd"), d: int = 128) -> None:
    """Every config's probe in its own process, all at once, each within ``limit`` s; ``path``: the passed ones."""
    jobs = [(kind, name, causal) for kind, mod in (("fwd", flash_gluon_fwd), ("bwd", BWD[d]))
            for name in _names(mod, configs, kind, kinds, d) for causal in (True, False)]  # fmt: skip
    procs = [
        subprocess.Popen([sys.executable, __file__, "--probe-one", kind, name, str(int(causal)), str(d)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        for kind, name, causal in jobs
    ]  # fmt: skip
    passed = []
    for (kind, name, causal), proc in zip(jobs, procs, strict=True):
        try:
            out, _ = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            proc.kill()
            out = "timed out"
        last = out.strip().splitlines()[-1] if out.strip() else ""
        ok = proc.returncode == 0 and last.startswith("err ") and float(last.split()[1]) < 2e-2
        print(f"probe {kind} {name} causal={causal}: {'ok' if ok else 'FAILED'} {last[:300]}", flush=True)
        if ok:
            passed.append([kind, name, causal])
    with open(path, "w", encoding="utf-8") as f:
        json.dump(passed, f)


def screen_case(
    seq: int, causal: bool, heads: int, warmup: int, rep: int, allowed=None, kv_heads: int = 0, configs=None,
    kinds=("fwd", "bwd"), head_groups=(0,), rounds: int = 5, d: int = 128,
) -> list[dict]:  # fmt: skip
    """Rows of one (seq, mask): kind fwd / bwd, impl, ms, TFLOP/s, error against the Triton kernels' result."""
    kv = kv_heads or heads
    gen = torch.Generator(device="cuda").manual_seed(seq + causal)
    q, do = (torch.randn(1, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    k, v = (torch.randn(1, kv, seq, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    q3, do3 = (t.view(heads, seq, d) for t in (q, do))
    k3, v3 = (t.view(kv, seq, d) for t in (k, v))
    gqa = {"enable_gqa": True} if kv != heads else {}
    fwd_flops = 4.0 * heads * seq * seq * d / (2 if causal else 1)
    base = {"seq": seq, "causal": causal, "heads": heads, "kv_heads": kv, "d_head": d,
            "device": torch.cuda.get_device_name()}  # fmt: skip
    rows = []
    pending: list[tuple] = []  # (impl, fn, err) of one kind, timed together by flush

    def add(impl, fn, err=float("nan")):
        pending.append((impl, fn, err))

    def flush(kind, grads=None):
        """Time the kind's correct candidates taking turns (time_interleaved), then write their rows."""
        fns = {impl: fn for impl, fn, err in pending if math.isfinite(err) or impl in ("sdpa", "triton")}
        ms = time_interleaved(fns, warmup, rep, rounds, grad_to_none=grads)
        flops = fwd_flops * (2.5 if kind == "bwd" else 1.0)
        for impl, _, err in pending:
            t = ms.get(impl, float("nan"))
            row = {**base, "kind": kind, "impl": impl, "ms": t, "tflops": flops / t / 1e9, "err": err}
            rows.append(row)
            print(json.dumps(row), flush=True)
        pending.clear()

    sq, sk, sv = (t.clone().requires_grad_() for t in (q, k, v))
    if "fwd" in kinds:
        add("sdpa", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa))
    o_ref, lse_ref = ft.forward_kernels(q3, k3, v3, causal, tma=False)  # the Triton forward
    if "fwd" in kinds:
        add("triton", lambda: ft.forward_kernels(q3, k3, v3, causal, tma=False))
    for name in _names(flash_gluon_fwd, configs, "fwd", kinds, d):
        if allowed is not None and ["fwd", name, causal] not in allowed:
            continue
        o, lse = torch.empty_like(q3), torch.empty(heads, seq, device="cuda", dtype=torch.float32)
        try:
            flash_gluon_fwd.forward(q3, k3, v3, o, lse, d**-0.5, causal, name)
            torch.cuda.synchronize()
            err = max(_rel(o, o_ref), (lse - lse_ref).abs().max().item())
            err = err if err < 2e-2 else float("inf")
        except Exception as e:  # a config that fails to compile or run is a result
            print(f"fwd {name}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
            err = float("inf")
        add(f"gluon:{name}", lambda n=name, o=o, lse=lse: flash_gluon_fwd.forward(q3, k3, v3, o, lse, d**-0.5, causal, n), err)  # fmt: skip

    if "fwd" in kinds:
        flush("fwd")
    if "bwd" not in kinds:
        return rows
    out = F.scaled_dot_product_attention(sq, sk, sv, is_causal=causal, **gqa)
    add("sdpa", lambda: out.backward(do, retain_graph=True))
    want = ft.backward_kernels(do3, q3, k3, v3, o_ref, lse_ref, causal, "tma")
    add("triton", lambda: ft.backward_kernels(do3, q3, k3, v3, o_ref, lse_ref, causal, "tma"))
    kept = ft.BWD_GLUON128_GQA, ft.BWD_GLUON256, flash_gluon_bwd128.SPLIT_GQA
    ft.BWD_GLUON128_GQA, ft.BWD_GLUON256 = True, ft.BWD_GLUON256 or flash_gluon_bwd256.DEFAULT  # Gluon taken
    mod = BWD[d]
    for name in _names(mod, configs, "bwd", kinds, d):
        if allowed is not None and ["bwd", name, causal] not in allowed:
            continue
        splits = (False, True) if kv != heads and mod is flash_gluon_bwd128 else (None,)
        for hg, split in ((hg, split) for hg in head_groups for split in splits):
            opts = {"HEAD_GROUP": hg or mod.HEAD_GROUP}

            def bwd(name=name, opts=opts, split=split):  # sets its config's module switches: timed in turns
                if split is not None:
                    flash_gluon_bwd128.SPLIT_GQA = dict.fromkeys(("causal", "full"), split)
                return ft.backward_kernels(do3, q3, k3, v3, o_ref, lse_ref, causal, "gluon_ws", name, opts=opts)

            try:
                got = bwd()
                torch.cuda.synchronize()
                err = max(_rel(g, w) for g, w in zip(got, want, strict=True))
                err = err if err < 1e-2 else float("inf")
            except Exception as e:
                print(f"bwd {name}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
                err = float("inf")
            impl = f"gluon:{name}" + (f"/hg{hg}" if hg else "") + {None: "", False: "/loop", True: "/split"}[split]
            add(impl, bwd, err)
    flush("bwd", grads=[sq, sk, sv])
    ft.BWD_GLUON128_GQA, ft.BWD_GLUON256, flash_gluon_bwd128.SPLIT_GQA = kept
    return rows


def best_configs(rows: list[dict], d: int = 128) -> dict:
    """Per kind, the Gluon config correct in every case with the highest geometric mean of SDPA's time over its
    own, if that beats the Triton kernel's; as FLASH_TRITON_CONFIGS entries, with the means."""
    sdpa = {(r["kind"], r["seq"], r["causal"]): r["ms"] for r in rows if r["impl"] == "sdpa"}
    score: dict[tuple, list] = {}
    for r in rows:
        if r["impl"] != "sdpa":
            score.setdefault((r["kind"], r["impl"]), []).append(sdpa[r["kind"], r["seq"], r["causal"]] / r["ms"])
    means = {key: math.exp(sum(map(math.log, v)) / len(v)) for key, v in score.items() if all(map(math.isfinite, v))}
    out: dict = {"means": {f"{k}:{i}": round(m, 3) for (k, i), m in means.items()}}
    for kind, key in (("fwd", "fwd_gluon"), ("bwd", f"bwd_gluon{d}")):
        gluon = {i: m for (k, i), m in means.items() if k == kind and i.startswith("gluon:") and "/" not in i}
        if gluon and max(gluon.values()) > means.get((kind, "triton"), 0.0):
            name = max(gluon, key=gluon.get).removeprefix("gluon:")
            out[key] = {str(d): name} if kind == "fwd" else name
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", nargs="+", type=int, default=[4096, 16384])
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--d-head", type=int, default=128, choices=[128, 256], help="head dim")
    p.add_argument("--kv-heads", type=int, default=0, help="K/V heads, a divisor of --heads (0: as many)")
    p.add_argument("--configs", nargs="+", default=None, help="only these configs (default: every one)")
    p.add_argument("--kinds", nargs="+", default=["fwd", "bwd"], choices=["fwd", "bwd"])
    p.add_argument("--bwd-head-groups", nargs="+", type=int, default=[0], help="0: the module's HEAD_GROUP")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warm-up, ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time of each candidate, ms")
    p.add_argument("--rounds", type=int, default=5, help="a kind's candidates take turns in this many rounds")
    p.add_argument("--out", default=None, help="JSONL of every row")
    p.add_argument("--best", default=None, help="JSON: the fastest correct configs (FLASH_TRITON_CONFIGS form)")
    p.add_argument("--probe", default=None, help="only probe every config (own processes); JSON of those passed")
    p.add_argument("--probe-limit", type=int, default=150, help="seconds a probe may take, compile included")
    p.add_argument("--probed", default=None, help="screen only the configs this --probe file lists")
    p.add_argument("--probe-one", nargs=4, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.probe_one:
        kind, name, causal, d = args.probe_one
        print(f"err {probe(kind, name, causal == '1', int(d)):.3e}")
        return 0
    if args.probe:
        probe_all(args.probe, args.probe_limit, args.configs, args.kinds, args.d_head)
        return 0
    allowed = None
    if args.probed:
        with open(args.probed, encoding="utf-8") as f:
            allowed = json.load(f)
    rows = []
    for causal in (True, False):
        for seq in args.seq:
            rows += screen_case(seq, causal, args.heads, args.warmup, args.rep, allowed, args.kv_heads, args.configs,
                                args.kinds, args.bwd_head_groups, args.rounds, args.d_head)  # fmt: skip
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    sdpa = {(r["kind"], r["seq"], r["causal"]): r["ms"] for r in rows if r["impl"] == "sdpa"}
    print("| kind | causal | seq | impl | ms | TFLOP/s | SDPA ms / ours | err |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        ratio = sdpa[r["kind"], r["seq"], r["causal"]] / r["ms"]
        print(f"| {r['kind']} | {r['causal']} | {r['seq']} | {r['impl']} | {r['ms']:.3f} | {r['tflops']:.0f} | "
              f"{ratio:.3f} | {r['err']:.1e} |")  # fmt: skip
    best = best_configs(rows, args.d_head)
    print(json.dumps(best))
    if args.best:
        with open(args.best, "w", encoding="utf-8") as f:
            json.dump({k: v for k, v in best.items() if k != "means"}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
