"""Attention benchmark JSONL (``workloads/attention_bench.py``) -> report (markdown + HTML chart).

Usage::

    python -m profiler_kit.attention_report benchmarks/results/attention/*.jsonl \\
        -o benchmarks/results/attention --stem attention
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.results import NUMBER, fields_problem
from profiler_kit.output import render_report_files, write_files
from profiler_kit.report import Figure, Report, Section, Table

TIME_COLS = {"fwd_ms": "fwd_ns", "bwd_ms": "bwd_ns", "fwd_bwd_ms": "fwd_bwd_ns"}
RATE_COLS = ["fwd_tflops", "bwd_tflops", "fwd_bwd_tflops"]
BENCH_FIELDS = {  # the fields of a timing row (workloads.attention_bench) this report reads; "?": may be absent or null
    **dict.fromkeys(("impl", "status", "dtype"), str),
    **dict.fromkeys(("batch", "heads", "seq", "d_head"), int),
    "causal": bool,
    **dict.fromkeys([f"{c}?" for c in (*TIME_COLS, *RATE_COLS, "warmup_ms", "rep_ms")], NUMBER),
    "mem_before_bwd_bytes?": int,
    "rounds?": int,
    "device?": str,
}


def read_bench_jsonl(paths: list[Path]) -> pd.DataFrame:
    """Timing rows (those with a ``status``) of benchmark JSONL files; times converted to int ns."""
    rows = []
    for path in paths:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise InputError(f"{path}: cannot read: {err.strerror}") from None
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise InputError(f"{path}:{i}: not a JSON line") from None
            if isinstance(row, dict) and "status" in row and "impl" in row:  # other rows (checks) are skipped
                problem = fields_problem(row, BENCH_FIELDS)
                if problem:
                    raise InputError(f"{path}:{i}: {problem}")
                rows.append({**row, "source": Path(path).name})
    if not rows:
        raise InputError("no benchmark rows (with impl and status) in " + ", ".join(map(str, paths)))
    df = pd.DataFrame(rows)
    for ms, ns in TIME_COLS.items():
        if ms in df:
            df[ns] = (df[ms] * 1e6).round().astype("Int64")
    return df


def build_attention_report(df: pd.DataFrame, note: str = "") -> Report:
    """Leaderboard shape first, then TFLOP/s per d across seq lengths, then every row."""
    ok = df[df["status"] == "ok"]
    cols = ["impl", "batch", "heads", "seq", "d_head", "dtype", "causal", "fwd_ns", "bwd_ns", "fwd_bwd_ns"]
    cols += RATE_COLS + ["mem_before_bwd_bytes", "warmup_ms", "rep_ms", "rounds", "source"]
    sections = []
    lead = ok[(ok["batch"] == 1) & (ok["heads"] == 16) & (ok["seq"] == 16384) & (ok["d_head"] == 64) & ok["causal"]]
    lead = lead[lead["dtype"] == "bfloat16"].sort_values("fwd_bwd_ns")
    if not lead.empty:
        sections.append(
            Section(
                "Leaderboard shape (1x16x16384x64, bf16, causal, o.sum() backward)",
                text=["Sorted by forward+backward time; one row per run (source file)."],
                tables=[Table("Leaderboard shape", lead[[c for c in cols if c in lead]].reset_index(drop=True))],
            )
        )
    per_d = []
    for d, grp in ok.groupby("d_head"):
        grp = grp[grp["source"] != "lead.jsonl"] if (grp["source"] != "lead.jsonl").any() else grp
        pivot = grp.pivot_table(index="seq", columns="impl", values=RATE_COLS, aggfunc="first")
        pivot.columns = [f"{impl}_{rate}" for rate, impl in pivot.columns]
        pivot.index = pivot.index.astype(str)  # keep seq an integer label in mixed-type tables
        per_d.append(Table(f"TFLOP/s, d_head {d}", pivot.reset_index(), key=f"tflops_d{d}"))
    fig_df = ok[ok["source"] != "lead.jsonl"].assign(series=lambda x: x["impl"] + " d=" + x["d_head"].astype(str))
    sections.append(
        Section(
            "TFLOP/s across sequence lengths",
            text=[
                "FLOPs: forward 4*B*H*N^2*d, halved when causal; backward 2.5x forward (FlashAttention-2's convention)."
            ],
            tables=per_d,
            figures=[
                Figure("Forward+backward TFLOP/s", fig_df.sort_values("seq"), "line", "seq", "fwd_bwd_tflops", "series")
            ],
        )
    )
    bad = df[df["status"] != "ok"]
    if not bad.empty:
        sections.append(
            Section(
                "Not measured",
                tables=[
                    Table("Failed or out of memory", bad[[c for c in bad.columns if c in cols + ["status", "error"]]])
                ],
            )
        )
    sections.append(Section("All rows", tables=[Table("All rows", ok[[c for c in cols if c in ok]])]))
    text = [f"Device: {', '.join(sorted(df['device'].dropna().unique()))}."] if "device" in df else []
    return Report("Attention benchmark", sections=sections, text=text + ([note] if note else []))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jsonl", nargs="+", type=Path)
    p.add_argument("-o", "--out-dir", type=Path, required=True)
    p.add_argument("--stem", default="attention")
    p.add_argument("--note", default="", help="a paragraph for the report (e.g. the command that ran)")
    args = p.parse_args(argv)
    try:
        report = build_attention_report(read_bench_jsonl(args.jsonl), args.note)
    except InputError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    for path in write_files(args.out_dir, render_report_files(report, args.stem)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
