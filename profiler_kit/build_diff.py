"""Two runs -> the ``diff`` report: what changed, by how much, and whether it is more than noise.

Reading and measuring each side is ``load_side``; every number comes from ``analyze.diff``
(``compare``, ``evaluate_rules``); this module only picks rows and words the findings.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from profiler_kit.analyze.diff import (
    MIN_BOOTSTRAP,
    RESAMPLES,
    Measures,
    combine,
    measure_ops,
    measure_snapshot,
    measure_sweep,
    measure_trace,
)
from profiler_kit.analyze.errors import InputError
from profiler_kit.render.units import compact_names
from profiler_kit.report import Figure, Report, Section, Table

# The analysis tables a diff measures (analyze_trace skips the per-pair kernel tables a report shows).
DIFF_TABLES = ("summary", "kernels", "categories", "ops", "attributed", "range_groups", "phases")
SUFFIX = {"ns": "_ns", "bytes": "_bytes", "frac": "_frac"}


def load_side(
    path: str, options: frozenset[str] = frozenset(), cache: bool = False, ops: bool = False, prefetched=None
) -> tuple[Measures, list[str]]:
    """Read every trace and memory snapshot at ``path`` (a file or a folder) and measure them as one side.

    With ``ops``, Kineto traces are also measured per PyTorch op (``measure_ops``): the level at which
    runs compare when their kernels do not match.
    Several traces (repeats, ranks) are combined into their mean per file, the files its instances
    (``analyze.diff.combine``); so are several snapshots. Returns the measures and the files read.
    """
    from profiler_kit.analyze.breakdown import analyze_trace
    from profiler_kit.analyze.memory import analyze_snapshot
    from profiler_kit.analyze.memory_snapshot import read_memory_snapshot
    from profiler_kit.analyze.sources import TRACE_KINDS, discover, read_trace
    from profiler_kit.build_sweep import find_run_dirs, load_runs, run_size

    parts, files = [], []
    run_dirs = find_run_dirs([path]) if Path(path).is_dir() else []
    if run_dirs:  # a sweep or record folder: its cells' timed steps (run.json)
        sweep, status = measure_sweep(load_runs(run_dirs), run_size)
        sweep.extra["status"] = status
        parts.append(sweep)
        files.append(str(path))
    # one run's folder (record): its trace and snapshot too; a sweep's traces are other cells, not repeats
    sources = discover([path]) if len(run_dirs) <= 1 else []
    traces = [s for s in sources if s.kind in TRACE_KINDS]
    snapshots = [s for s in sources if s.kind == "memory-snapshot"]
    if not traces and not snapshots and not parts:
        raise InputError(f"{path}: no traces, memory snapshots or run.json found")
    if traces:
        measured = []
        for src in traces:
            trace = read_trace(src, details=False, cache=cache, runtime_later=True, prefetched=prefetched)
            tables = analyze_trace(trace, DIFF_TABLES)
            m = measure_trace(trace.nvtx, tables, options)
            if ops and src.kind == "kineto":
                m.values = pd.concat([m.values, _op_rows(src.path, trace, tables["ops"])], ignore_index=True)
            measured.append(m)
        parts.append(combine(measured, "files"))
    if snapshots:
        parts.append(combine([measure_snapshot(analyze_snapshot(read_memory_snapshot(s.path))) for s in snapshots]))
    side = parts[0]
    for other in parts[1:]:
        side = Measures(
            pd.concat([side.values, other.values], ignore_index=True),
            side.instances | other.instances,
            side.instance_kind | other.instance_kind,
            side.extra | other.extra,
        )
    return side, files + [str(s.path) for s in traces + snapshots]


def _op_rows(path: Path, trace, ops: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``measure_ops`` for one Kineto trace."""
    from profiler_kit.analyze.breakdown import op_ids
    from profiler_kit.analyze.kineto_ops import read_kineto_ops
    from profiler_kit.analyze.projection import launches

    return measure_ops(read_kineto_ops(path), ops, launches(op_ids(trace), trace.runtime))


def _view(df: pd.DataFrame, unit: str, frac: bool = True) -> pd.DataFrame:
    """Rows of one unit with the unit in the column names (renderers scale ``*_ns``/``*_bytes``/``*_frac``)."""
    sfx = SUFFIX[unit]
    cols = {"base": f"base{sfx}", "new": f"new{sfx}", "delta": f"delta{sfx}"}
    keep = ["key", "category", "status", "base", "new", "delta"]
    if unit != "frac":
        keep.append("delta_frac")
    if frac and ((df["base_instances"] >= 2) & (df["new_instances"] >= 2)).any():  # else no noise estimate to show
        keep += ["base_instances", "new_instances", "change_frac", "ci_low_frac", "ci_high_frac", "significant"]
    out = df[keep].rename(columns=cols)
    if not (out["category"].astype(str) != "").any() or (out["category"] == out["key"]).all():
        out = out.drop(columns="category")
    if (out["status"] == "matched").all():
        out = out.drop(columns="status")
    return out.reset_index(drop=True)


def _scope(compared: pd.DataFrame, *scopes: str) -> pd.DataFrame:
    return compared[compared["scope"].isin(scopes)]


def _by_size(df: pd.DataFrame, top: int) -> pd.DataFrame:
    order = df["delta"].abs().sort_values(ascending=False, kind="stable").index
    return df.loc[order].head(top)


def _top(rows: pd.DataFrame, top: int, title: str, key: str, unit: str = "ns", note: str = "") -> Table:
    """The ``top`` rows of largest |delta|; ``title`` says how many with ``{n}``."""
    shown = _by_size(rows, top)
    return Table(title.format(n=len(shown)), _view(shown, unit), key=key, note=note)


NOISE_TEXT = (
    f"Noise: where both sides have two or more instances of a value (steps, phase instances, or several "
    f"files a side), change_frac is the relative change of the mean per instance and ci_low/ci_high its 95% "
    f"interval: a percentile bootstrap ({RESAMPLES} resamples of each side's instances, fixed seed) with "
    f"{MIN_BOOTSTRAP} or more instances a side, else Welch's t interval (the noise column says which). A change is "
    "significant when the interval excludes zero and |change| exceeds the threshold."
)


def findings(compared: pd.DataFrame, threshold: float) -> list[str]:
    """Plain-language answers computed from the compared table."""
    out = []
    with_noise = compared["base_instances"].ge(2) & compared["new_instances"].ge(2)
    if not with_noise.any():
        out.append(
            "No noise estimate is possible: each side has one instance of every value (no repeated steps, "
            "phases or files), so no change below is called significant; the gate compares the changes themselves."
        )
    step = compared[(compared["scope"] == "step") & (compared["key"] == "step_wall")]
    if len(step) and step["base_instances"].iloc[0] != step["new_instances"].iloc[0]:
        out.append(
            f"The step counts differ ({step['base_instances'].iloc[0]} vs {step['new_instances'].iloc[0]}): "
            "totals (delta) differ for that reason alone; change_frac compares the means per step."
        )
    sig = compared[compared["significant"]]
    out.append(
        f"{len(sig)} significant change(s) (95% interval excludes zero and |change| > {100 * threshold:g}%) "
        f"among {int(with_noise.sum())} values with a noise estimate."
    )
    for scope in ("step", "category", "kernel", "phase"):
        rows = sig[sig["scope"] == scope]
        if len(rows):
            names = ", ".join(f"`{k}` {100 * c:+.1f}%" for k, c in zip(rows["key"], rows["change_frac"], strict=True))
            out.append(f"Significant {scope} changes: {names[:600]}.")
    kernels = _scope(compared, "kernel")
    new, gone = kernels[kernels["status"] == "new"], kernels[kernels["status"] == "removed"]
    if len(new) or len(gone):
        out.append(
            f"{len(new)} kernel name(s) only in NEW ({new['new'].sum() / 1e6:.3f} ms), "
            f"{len(gone)} only in BASE ({gone['base'].sum() / 1e6:.3f} ms)."
        )
    return out


def build_diff_report(
    base_files: list[str],
    new_files: list[str],
    compared: pd.DataFrame,
    verdicts: pd.DataFrame | None = None,
    top: int = 15,
    threshold: float = 0.02,
    everything: bool = False,
    statuses: pd.DataFrame | None = None,
) -> Report:
    """The diff report: summary, categories, kernels, phases, ranges, memory and the gate's verdicts.

    ``everything`` adds the whole compared table (every scope and key, every column): for CSV/JSON.
    ``statuses``: sweep cells whose status changed (``analyze.diff.status_changes``).
    """
    rep = Report(
        "profiler-kit diff",
        text=[
            f"BASE: {', '.join(f'`{f}`' for f in base_files)}",
            f"NEW: {', '.join(f'`{f}`' for f in new_files)}",
            "Values are each side's totals as `report` gives them (several files a side: the mean per file); "
            "times in ms, shares and changes in %.",
            NOISE_TEXT,
            *findings(compared, threshold),
        ],
    )
    cells = _scope(compared, "cell")
    if len(cells) or statuses is not None:
        sec = Section("Sweep cells")
        if statuses is not None:
            sec.tables.append(Table("Cells whose status changed (OOM, error, absent)", statuses, key="cell_status"))
        sec.tables.append(
            Table(
                "Phase times per cell",
                _view(cells, "ns"),
                key="cells",
                note="Mean of the timed steps without profiler (run.json); each step an instance.",
            )
        )
        rep.sections.append(sec)
    summary = Section("Summary")
    times = _scope(compared, "summary", "step")
    summary.tables.append(Table("Times", _view(times[times["unit"] == "ns"], "ns"), key="summary"))
    shares = times[times["unit"] == "frac"]
    if len(shares):
        summary.tables.append(Table("Shares", _view(shares, "frac", frac=False), key="shares"))
    cats = _scope(compared, "category")
    cats = cats[(cats["base"] > 0) | (cats["new"] > 0)]
    summary.tables.append(
        Table("GPU time by category", _view(cats, "ns"), key="categories", note="Kernels plus memcpy/memset.")
    )
    if len(cats):
        summary.figures.append(
            Figure(
                "Change of GPU time by category",
                cats[["key", "delta"]].rename(columns={"delta": "delta_ns"}),
                "bar",
                "key",
                "delta_ns",
            )
        )
    rep.sections.append(summary)
    rep.sections.append(_kernel_section(_scope(compared, "kernel"), top))
    phases = _scope(compared, "phase", "phase_wall")
    if len(phases):
        sec = Section("Phases")
        sec.tables.append(
            Table(
                "Kernel time per phase instance",
                _view(_scope(phases, "phase"), "ns"),
                key="phases",
                note="GPU time of the kernels each instance launched, as the report's phase table.",
            )
        )
        sec.tables.append(
            Table("CPU time per phase instance", _view(_scope(phases, "phase_wall"), "ns"), key="phase_wall")
        )
        rep.sections.append(sec)
    ranges = _scope(compared, "range")
    if len(ranges):
        note = "Range names grouped as the report's range groups (emit_nvtx suffixes dropped)."
        table = _top(ranges, top, "Top {n} ranges by |delta| of their kernel time", "ranges", note=note)
        rep.sections.append(Section("NVTX ranges", tables=[table]))
    ops = _scope(compared, "op")
    if len(ops):
        rep.sections.append(
            Section(
                "PyTorch ops",
                text=[
                    "GPU time of the kernels each op (name and input shapes, Kineto cpu_op) launched: the level at "
                    "which runs compare when their kernels do not match. Nested ops each count their kernels."
                ],
                tables=[_top(ops, top, "Top {n} ops by |delta|", "ops")],
            )
        )
    memory = _scope(compared, "memory", "memory_category", "memory_line")
    if len(memory):
        sec = Section("Memory")
        sec.tables.append(Table("Peaks", _view(_scope(memory, "memory"), "bytes"), key="memory_peaks"))
        sec.tables.append(
            Table(
                "Live at the allocated peak by category",
                _view(_scope(memory, "memory_category"), "bytes"),
                key="memory_categories",
            )
        )
        title = "Live at the allocated peak by source line (top {n} by |delta|)"
        sec.tables.append(_top(_scope(memory, "memory_line"), top, title, "memory_lines", unit="bytes"))
        rep.sections.append(sec)
    if everything:
        rep.sections.append(Section("All values", tables=[Table("All compared values", compared, key="all")]))
    if verdicts is not None and len(verdicts):
        rep.sections.append(
            Section(
                "Gate",
                text=[f"{int(verdicts['broken'].sum())} of {len(verdicts)} rule(s) broken."],
                tables=[
                    Table(
                        "Rules",
                        verdicts[["rule", "metric", "change", "ci_low", "ci_high", "broken", "line"]],
                        key="gate",
                    )
                ],
            )
        )
    return rep


def _kernel_section(kernels: pd.DataFrame, top: int) -> Section:
    """Top regressions and improvements among matched kernels, then new and removed ones."""
    sec = Section(
        "Kernels", text=["Kernels matched by name, Inductor's numeric suffixes folded (analyze/diff.py NAME_RULES)."]
    )
    matched = kernels[kernels["status"] == "matched"]
    worse = matched[matched["delta"] > 0].sort_values("delta", ascending=False).head(top)
    better = matched[matched["delta"] < 0].sort_values("delta").head(top)
    sec.tables.append(
        Table(f"Top {len(worse)} regressions by absolute time", _view(worse, "ns"), key="kernel_regressions")
    )
    moved = _by_size(kernels[kernels["delta"] != 0], top)
    if len(moved):
        shown = pd.DataFrame(
            {"kernel": compact_names(moved["key"].tolist(), 60), "delta_ns": moved["delta"].to_numpy()}
        )
        sec.figures.append(
            Figure(f"Top {len(moved)} kernel changes by |delta|", shown, "bar", "kernel", "delta_ns", orientation="h")
        )
    sec.tables.append(
        Table(f"Top {len(better)} improvements by absolute time", _view(better, "ns"), key="kernel_improvements")
    )
    for status, title in (("new", "only in NEW"), ("removed", "only in BASE")):
        rows = kernels[kernels["status"] == status]
        sec.tables.append(
            Table(
                f"Kernels {title} ({len(rows)})", _view(_by_size(rows, top), "ns", frac=False), key=f"kernels_{status}"
            )
        )
    return sec


def run_diff(
    base: str,
    new: str,
    rules: list | None = None,
    options: frozenset[str] = frozenset(),
    ops: bool | None = None,
    threshold: float = 0.02,
    top: int = 15,
    everything: bool = False,
    cache: bool = False,
    prefetched=None,
) -> tuple[Report, pd.DataFrame | None]:
    """Measure, compare and gate two sides: the report and the rules' verdicts (None without rules).

    ``ops`` None: the op level only when kernels matched by name hold under half of a side's kernel time.
    """
    from profiler_kit.analyze.diff import compare, evaluate_rules, matched_share, status_changes

    base_side, base_files = load_side(base, options, cache=cache, ops=bool(ops), prefetched=prefetched)
    new_side, new_files = load_side(new, options, cache=cache, ops=bool(ops), prefetched=prefetched)
    scopes = set(base_side.values["scope"]) & set(new_side.values["scope"])
    if not scopes:
        raise InputError(f"{base} and {new} have nothing in common to compare (a trace against a memory snapshot?)")
    compared = compare(base_side, new_side, threshold)
    if ops is None and matched_share(compared) < 0.5:  # kernels do not match: compare the ops that launched them
        base_side, _ = load_side(base, options, cache=cache, ops=True)
        new_side, _ = load_side(new, options, cache=cache, ops=True)
        compared = compare(base_side, new_side, threshold)
    statuses = None
    if "status" in base_side.extra and "status" in new_side.extra:
        statuses = status_changes(base_side.extra["status"], new_side.extra["status"])
    verdicts = evaluate_rules(rules, base_side, new_side, compared) if rules else None
    rep = build_diff_report(base_files, new_files, compared, verdicts, top, threshold, everything, statuses)
    return rep, verdicts


def gate_lines(verdicts: pd.DataFrame) -> list[str]:
    """One line per broken rule."""
    return [f"FAIL {line}" for line in verdicts.loc[verdicts["broken"], "line"]]
