"""Two runs -> the ``diff`` report: what changed, by how much, and whether it is more than noise.

Reading and measuring each side is ``load_side``; every number comes from ``analyze.diff``
(``compare``, ``evaluate_rules``); this module only picks rows and words the findings.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
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


@dataclass
class Side:
    """What one side names: its sweep cells (run.json) measured, and the traces and snapshots to measure."""

    path: str
    sweep: Measures | None
    sources: list  # analyze.sources.Source, traces then snapshots


def find_side(path: str) -> Side:
    """The inputs of one side (a file or a folder); a sweep or record folder's cells are measured here (small)."""
    from profiler_kit.analyze.sources import TRACE_KINDS, discover
    from profiler_kit.build_sweep import find_run_dirs, load_runs, run_size

    sweep = None
    run_dirs = find_run_dirs([path]) if Path(path).is_dir() else []
    if run_dirs:  # a sweep or record folder: its cells' timed steps (run.json)
        sweep, status = measure_sweep(load_runs(run_dirs), run_size)
        sweep.extra["status"] = status
    # one run's folder (record): its trace and snapshot too; a sweep's traces are other cells, not repeats
    sources = discover([path]) if len(run_dirs) <= 1 else []
    traces = [s for s in sources if s.kind in TRACE_KINDS]
    snapshots = [s for s in sources if s.kind == "memory-snapshot"]
    if not traces and not snapshots and sweep is None:
        raise InputError(f"{path}: no traces, memory snapshots or run.json found")
    return Side(str(path), sweep, traces + snapshots)


def measure_source(
    src, options: frozenset[str] = frozenset(), ops: bool = False, cache=None, prefetched=None
) -> Measures:
    """The measures of one trace or memory snapshot: the per-input task of ``diff`` (small: one row per value).

    With ``ops``, Kineto traces are also measured per PyTorch op (``measure_ops``): the level at which
    runs compare when their kernels do not match.
    """
    from profiler_kit.analyze.breakdown import analyze_trace
    from profiler_kit.analyze.memory import analyze_snapshot
    from profiler_kit.analyze.memory_snapshot import read_memory_snapshot
    from profiler_kit.analyze.sources import read_trace

    if src.kind == "memory-snapshot":
        return measure_snapshot(analyze_snapshot(read_memory_snapshot(src.path)))
    trace = read_trace(src, details=False, cache=cache, runtime_later=True, prefetched=prefetched)
    tables = analyze_trace(trace, DIFF_TABLES)
    m = measure_trace(trace.nvtx, tables, options)
    if ops and src.kind == "kineto":
        m.values = pd.concat([m.values, _op_rows(src.path, trace, tables["ops"])], ignore_index=True)
    return m


def _measure_item(options, ops, item, cache=None, prefetched=None) -> tuple:
    """The task of ``measure_sides``: (side, source) -> (side, source, its measures)."""
    side, src = item
    return side, src, measure_source(src, options, ops, cache=cache, prefetched=prefetched)


def measure_sides(
    sides: list[Side],
    options: frozenset[str] = frozenset(),
    ops: bool = False,
    session=None,
    skip=None,
    cache=None,
    prefetched=None,
    on_each=None,
) -> list[list[tuple]]:
    """Every input of every side measured (``measure_source``) as one map (``parallel.Session``: here, or one
    Dask task per input): per side, its (source, measures) pairs in order; ``on_each(source)`` after each.

    ``skip(path, error)`` takes an input that cannot be read, left out; without it the error is raised.
    """
    from profiler_kit.parallel import Session

    items = [(i, src) for i, side in enumerate(sides) for src in side.sources]
    done = (lambda item: on_each(item[1])) if on_each else None
    results = (session or Session()).map_reading(
        functools.partial(_measure_item, options, ops),
        items,
        cache=cache,
        prefetched=prefetched,
        key=lambda item: item[1].path,
        on_done=done,
        skip=skip,
    )
    return [[(src, m) for j, src, m in results if j == i] for i in range(len(sides))]


def side_measures(side: Side, measured: list) -> tuple[Measures, list[str]]:
    """One side from its sweep and its inputs' measures: several traces (repeats, ranks) combined into their
    mean per file, the files its instances (``analyze.diff.combine``), and so several snapshots; and the files."""
    from profiler_kit.analyze.sources import TRACE_KINDS

    traces = [(src, m) for src, m in measured if src.kind in TRACE_KINDS]
    snapshots = [(src, m) for src, m in measured if src.kind not in TRACE_KINDS]
    parts = [side.sweep] if side.sweep is not None else []
    if traces:
        parts.append(combine([m for _, m in traces], "files"))
    if snapshots:
        parts.append(combine([m for _, m in snapshots]))
    if not parts:
        raise InputError(f"{side.path}: no input could be read (each listed above)")
    result = parts[0]
    for other in parts[1:]:
        result = Measures(
            pd.concat([result.values, other.values], ignore_index=True),
            result.instances | other.instances,
            result.instance_kind | other.instance_kind,
            result.extra | other.extra,
        )
    files = [side.path] if side.sweep is not None else []
    return result, files + [str(src.path) for src, _ in traces + snapshots]


def load_side(path: str, options: frozenset[str] = frozenset(), cache=None, ops: bool = False, prefetched=None):
    """Read every trace and memory snapshot at ``path`` (a file or a folder) and measure them as one side, here:
    the measures and the files read."""
    side = find_side(path)
    return side_measures(side, measure_sides([side], options, ops, cache=cache, prefetched=prefetched)[0])


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
    skipped=(),
) -> Report:
    """The diff report: summary, categories, kernels, phases, ranges, memory and the gate's verdicts.

    ``everything`` adds the whole compared table (every scope and key, every column): for CSV/JSON.
    ``statuses``: sweep cells whose status changed (``analyze.diff.status_changes``). ``skipped``: the inputs
    left out (``analyze.sources.Skipped`` rows), listed first.
    """
    from profiler_kit.build import skipped_section

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
    if skipped:
        rep.sections.append(skipped_section(skipped))
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
    base: str | Side,
    new: str | Side,
    rules: list | None = None,
    options: frozenset[str] = frozenset(),
    ops: bool | None = None,
    threshold: float = 0.02,
    top: int = 15,
    everything: bool = False,
    cache=None,
    prefetched=None,
    session=None,
    skip=None,
    on_each=None,
) -> tuple[Report, pd.DataFrame | None]:
    """Measure, compare and gate two sides (paths, or ``find_side``'s): the report and the rules' verdicts
    (None without rules).

    ``ops`` None: the op level only when kernels matched by name hold under half of a side's kernel time (then
    the Kineto traces are measured again, per op). ``session`` (``parallel.Session``), ``skip`` and ``on_each``
    as ``measure_sides``; the inputs skipped are listed in the report (``skip.skipped``, when it has them).
    """
    from profiler_kit.analyze.diff import compare, evaluate_rules, matched_share, status_changes

    sides = [s if isinstance(s, Side) else find_side(s) for s in (base, new)]
    base, new = (s.path for s in sides)
    measured = measure_sides(
        sides, options, bool(ops), session, skip, cache=cache, prefetched=prefetched, on_each=on_each
    )
    (base_side, base_files), (new_side, new_files) = (side_measures(s, m) for s, m in zip(sides, measured, strict=True))
    scopes = set(base_side.values["scope"]) & set(new_side.values["scope"])
    if not scopes:
        raise InputError(f"{base} and {new} have nothing in common to compare (a trace against a memory snapshot?)")
    compared = compare(base_side, new_side, threshold)
    if ops is None and matched_share(compared) < 0.5:  # kernels do not match: compare the ops that launched them
        kineto = [
            Side(s.path, None, [src for src, _ in m if src.kind == "kineto"])
            for s, m in zip(sides, measured, strict=True)
        ]
        again = measure_sides(kineto, options, True, session, skip, cache=cache)
        per_op = [dict(pairs) for pairs in again]  # a Source is its path and kind: equal after a trip to a worker
        measured = [[(src, per.get(src, m)) for src, m in pairs] for pairs, per in zip(measured, per_op, strict=True)]
        base_side, new_side = (side_measures(s, m)[0] for s, m in zip(sides, measured, strict=True))
        compared = compare(base_side, new_side, threshold)
    statuses = None
    if "status" in base_side.extra and "status" in new_side.extra:
        statuses = status_changes(base_side.extra["status"], new_side.extra["status"])
    verdicts = evaluate_rules(rules, base_side, new_side, compared) if rules else None
    rep = build_diff_report(
        base_files, new_files, compared, verdicts, top, threshold, everything, statuses,
        skipped=getattr(skip, "skipped", ()),
    )  # fmt: skip
    return rep, verdicts


def gate_lines(verdicts: pd.DataFrame) -> list[str]:
    """One line per broken rule."""
    return [f"FAIL {line}" for line in verdicts.loc[verdicts["broken"], "line"]]
