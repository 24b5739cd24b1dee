"""Distributed results -> Report: all-reduce bandwidth, DDP step times, cross-rank trace analyses.

Inputs live in one folder (what ``benchmarks/bench_ddp.sh``
leaves): ``allreduce_*.jsonl`` (workloads.distributed), ``ddp_*.jsonl`` and
``ddp.jsonl`` (workloads.ddp_train timings; record_ddp writes the latter) and per-rank traces ``<label>_rank<r>.json.gz``
in any subfolder; multi-rank nsys exports (``*.sqlite``, one process per rank)
are analysed too, each as one variant named after the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.ranks import (
    compare_variants,
    concat_ranks,
    ddp_scaling,
    launch_keys,
    slowest_rank_per_step,
    step_ranges,
    summarize_all_reduce,
    summarize_ddp_steps,
    summarize_rank_time,
    summarize_steps,
    with_ranks,
)
from profiler_kit.analyze.results import ALLREDUCE_FIELDS, DDP_STEP_FIELDS, read_jsonl
from profiler_kit.analyze.tables import Trace
from profiler_kit.report import Figure, Report, Section, Table, slug

RANK_FILE = re.compile(r"^(?P<label>.+)_rank(?P<rank>\d+)\.json(\.gz)?$")


@dataclass
class DdpInputs:
    """What a results folder holds, read: benchmark rows and, per variant, its kernels and step ranges."""

    allreduce: pd.DataFrame | None = None
    ddp: pd.DataFrame | None = None
    kernels: dict[str, pd.DataFrame] = field(default_factory=dict)  # label -> kernels with rank, category
    steps: dict[str, pd.DataFrame] = field(default_factory=dict)  # label -> rank, step, start_ns, end_ns, ...


def _classify(trace: Trace) -> pd.DataFrame:
    from profiler_kit.analyze.taxonomy import classify_kernels

    return classify_kernels(trace.kernels)


def load_ddp_inputs(folder: Path) -> DdpInputs:
    """Read every result file under ``folder``; InputError when there is none."""
    from profiler_kit.analyze.kineto import read_kineto
    from profiler_kit.analyze.nsys_sqlite import read_nsys_sqlite

    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder")
    out = DdpInputs()
    ar = sorted(folder.rglob("allreduce_*.jsonl"))
    if ar:
        out.allreduce = pd.concat([read_jsonl(p, ALLREDUCE_FIELDS) for p in ar], ignore_index=True)
    ddp = sorted({*folder.rglob("ddp_*.jsonl"), *folder.rglob("ddp.jsonl")})
    if ddp:
        out.ddp = pd.concat([read_jsonl(p, DDP_STEP_FIELDS) for p in ddp], ignore_index=True)
    per_rank: dict[str, dict[int, Path]] = {}
    for p in sorted(folder.rglob("*_rank*.json*")):
        m = RANK_FILE.match(p.name)
        if m:
            sub = p.parent.relative_to(folder).as_posix()
            label = m["label"] if sub == "." else f"{sub}/{m['label']}"  # traces of several runs stay apart
            per_rank.setdefault(label, {})[int(m["rank"])] = p
    for label, files in sorted(per_rank.items()):
        traces = [read_kineto(files[r]) for r in sorted(files)]
        out.kernels[label] = concat_ranks([_classify(t) for t in traces])
        nvtx = pd.concat([t.nvtx.assign(rank=r) for r, t in zip(sorted(files), traces, strict=True)])
        out.steps[label] = step_ranges(nvtx)
    for p in sorted(folder.rglob("*.sqlite")):
        trace = read_nsys_sqlite(p)
        k = with_ranks(_classify(trace))
        out.kernels[p.stem] = k
        out.steps[p.stem] = step_ranges(trace.nvtx, k)
    if out.allreduce is None and out.ddp is None and not out.kernels:
        raise InputError(f"{folder}: no allreduce_*.jsonl, ddp_*.jsonl, *_rank<r>.json.gz or .sqlite files")
    return out


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms"


def _ddp_findings(steps: pd.DataFrame) -> list[str]:
    text = []
    for _, r in steps[steps["variant"] == "bucketed"].iterrows():
        verdict = "within" if abs(r["vs_torch_ddp_frac"]) <= 0.05 else "outside"
        text.append(
            f"{r['label']} ({r['world_size']} ranks): median step {_ms(r['step_ns'])} vs torch DDP ({r['torch_ddp_bucket_mb']:g} MiB buckets) "
            f"{_ms(r['torch_ddp_ns'])}: {r['vs_torch_ddp_frac']:+.1%}, {verdict} 5%."
        )
    return text


def _with_ranks(df: pd.DataFrame, name: str, into: str) -> pd.DataFrame:
    """``df`` with a column ``into``: ``name`` and the world size ("nccl n=8"), one series or bar for each, since
    a backend or variant runs at several sizes."""
    return df.assign(**{into: df[name] + " n=" + df["world_size"].astype(str)})


def build_ddp_report(inputs: DdpInputs) -> Report:
    """The distributed report: one section per kind of input present."""
    rep = Report(title="Distributed training: collectives, DDP variants, cross-rank time")
    if inputs.allreduce is not None:
        t = summarize_all_reduce(inputs.allreduce)
        sec = Section(
            "All-reduce bandwidth",
            text=[
                "float32 all-reduce, 5 warm-ups at the same size, then each op timed between a barrier + device "
                "sync and a device sync; time is the median over ops of the slowest rank. "
                "busbw = algbw * 2(n-1)/n (NCCL-tests' definition). Sizes in MiB."
            ],
            tables=[Table("All-reduce time and bandwidth", t)],
            figures=[
                Figure(
                    "Bus bandwidth by size",
                    _with_ranks(t, "backend", "series"),
                    kind="line",
                    x="size_bytes",
                    y="busbw_gb_per_s",
                    color="series",
                )
            ],
        )
        rep.sections.append(sec)
    if inputs.ddp is not None:
        rows, timing_note = inputs.ddp, "Steps timed without a profiler."
        profiled = rows["profiled"].fillna(False).astype(bool) if "profiled" in rows else pd.Series(False, rows.index)
        if profiled.all():
            timing_note = "All these steps ran under torch.profiler: its overhead is in the times."
        elif profiled.any():
            rows = rows[~profiled]
            timing_note = f"{int(profiled.sum())} runs timed under torch.profiler are left out of this table."
        s = summarize_ddp_steps(rows)
        launches = [
            f"Launch {key}: model {r['size']}, ctx {r['ctx']}, batch {r['batch_per_rank']} per rank, "
            f"{r['world_size']} ranks ({r['backend']}, {r['device']}"
            + (f", host with {int(r['gpus_on_host'])} GPUs" if pd.notna(r.get("gpus_on_host")) else "")
            + f"); {r['warmup']} warm-up then {r['steps']} timed steps per variant."
            for key, r in rows.assign(launch=launch_keys(rows)).groupby("launch", sort=False).first().iterrows()
        ]
        sec = Section(
            "DDP step time by variant",
            text=[
                "Each launch runs its variants one after another in one torchrun job; a step's time is the slowest "
                "rank's (host clock, device sync at step end), and each variant is compared with torch DDP of the "
                "same launch. torch DDP rows that appear twice ran first and last: their spread is the run-to-run "
                "noise. " + timing_note,
                *launches,
                *_ddp_findings(s),
            ],
            tables=[Table("Step time per variant", s)],
            figures=[Figure("Median step time", _with_ranks(s, "label", "variant"), "bar", "variant", "step_ns")],
        )
        scaling = ddp_scaling(s)
        if not scaling.empty:
            sec.tables.append(
                Table(
                    "Scaling with world size",
                    scaling,
                    note="Batch per rank fixed: perfect scaling keeps the step time flat; efficiency = step time "
                    "at the smallest world size / step time at n. Same host only.",
                )
            )
        rep.sections.append(sec)
    if inputs.kernels:
        per_step = {}
        sec = Section(
            "Cross-rank GPU time",
            text=[
                "From the per-rank traces: GPU time in communication (NCCL) kernels, compute kernels and idle, as "
                "interval unions per rank. Hidden communication = communication time during which a compute "
                "kernel runs on the same GPU. A NCCL kernel also counts the time it waits for a late peer. "
                "Traced runs are slower than the timed ones above (profiler overhead)."
            ],
        )
        for label, k in inputs.kernels.items():
            if k.empty:
                sec.sections.append(
                    Section(label, text=["No GPU kernels in these traces (a CPU run): nothing to split."])
                )
                continue
            sub = Section(
                label, tables=[Table(f"{label}: per rank", summarize_rank_time(k), key=slug(f"{label}_ranks"))]
            )
            steps = inputs.steps.get(label)
            if steps is not None and not steps.empty:
                per_step[label] = summarize_steps(k, steps)
                sub.tables.append(
                    Table(f"{label}: slowest rank per step", slowest_rank_per_step(steps), key=slug(f"{label}_slowest"))
                )
            else:
                sub.text.append("No 'step' ranges in this trace: per-step tables need them.")
            sec.sections.append(sub)
        if per_step:
            sec.tables.append(
                Table(
                    "Variant comparison (traced steps)",
                    compare_variants(per_step),
                    note="Per rank-step means; step_ns is the median over steps of the slowest rank.",
                )
            )
        rep.sections.append(sec)
    return rep
