"""What changed between two runs: measures of each side, matched by name, with noise bands and a gate.

Pure analyses: DataFrames in, DataFrames out. A side is measured once (``measure_trace``,
``measure_snapshot``) into a ``Measures``: one row per (scope, key) with the value the
report shows for it (kernel and category totals, range kernel time, phase time per
instance...) and, where the side has several instances (steps, phase instances, or
several files), the value per instance. ``compare`` joins two sides and gives each delta
a 95% interval over those instances (bootstrap, or Welch's t with few instances); ``parse_rule``/``evaluate_rules`` are the
``--fail-on`` gate. Times are ns, sizes bytes, changes fractions (``*_frac``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from profiler_kit.analyze.arrays import positions, sum_by
from profiler_kit.analyze.breakdown import PROJECTED_COLUMNS, gemm_vs_elementwise, range_name_codes, summarize_ranges
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.projection import project_nvtx, range_label_codes
from profiler_kit.analyze.taxonomy import CATEGORIES

# Ranges that are one training step each: "step", "train_step 3", "ProfilerStep#12", "iteration 4".
STEP_PATTERN = re.compile(
    r"^(?:profilerstep#\d+|(?:train[_ ]?)?step(?:[ _#:-]*\d+)?|iter(?:ation)?(?:[ _#:-]*\d+)?)$", re.IGNORECASE
)

# Kernel names that change from build to build, folded so that the same work matches (first match per rule,
# every rule applied in order). ``when``: "always", or an option name that turns the rule on.
NAME_RULES = (
    # when          category  pattern                                 replacement  example
    ("always",      None,     r"^(triton_[a-z]+_\w+?)_\d+$",          r"\1",       "triton_poi_fused_add_mul_12 -> triton_poi_fused_add_mul"),
    ("gemm_tiles",  "gemm",   r"\d+x\d+(?:x\d+)*",                    "<tile>",    "ampere_sgemm_128x64_tn -> ampere_sgemm_<tile>_tn"),
)  # fmt: skip
_NAME_RULES = tuple((when, cat, re.compile(pat), rep) for when, cat, pat, rep, _ in NAME_RULES)

SCOPES = (
    "summary",
    "step",
    "category",
    "kernel",
    "phase",
    "phase_wall",
    "range",
    "op",
    "memory",
    "memory_category",
    "memory_line",
)
RESAMPLES, SEED, LEVEL = 2000, 0, 0.95
DEFAULT_THRESHOLD = 0.02  # a significant change is also larger than this fraction of the base value


@dataclass
class Measures:
    """One side: ``values`` (scope, key, value, unit, category) and instance values per (scope, key).

    ``instance_kind`` says what the instances are ("steps", "files"...), per scope.
    """

    values: pd.DataFrame
    instances: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    instance_kind: dict[str, str] = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # what is not a measure: a sweep's cell statuses


def normalize_kernel_names(names: pd.Series, categories: pd.Series, options: frozenset[str] = frozenset()) -> pd.Series:
    """Kernel names with NAME_RULES applied (rules whose ``when`` is "always" or in ``options``)."""
    rules = [(cat, rx, rep) for when, cat, rx, rep in _NAME_RULES if when == "always" or when in options]

    def one(name: str, category: str) -> str:
        for cat, rx, rep in rules:
            if cat is None or cat == category:
                name = rx.sub(rep, name)
        return name

    return pd.Series([one(str(n), str(c)) for n, c in zip(names, categories, strict=True)], index=names.index)


def step_rows(nvtx: pd.DataFrame) -> np.ndarray:
    """Index labels of the ranges that are one step each (STEP_PATTERN), in start order."""
    codes, labels = range_label_codes(nvtx)
    is_step = np.append(pd.Series(labels, dtype=object).astype(str).str.match(STEP_PATTERN).to_numpy(bool), False)
    steps = nvtx[is_step[codes]]
    return steps.sort_values("start_ns", kind="stable").index.to_numpy()


def _rows(scope: str, keys, values, unit: str, category=None) -> pd.DataFrame:
    keys = [str(k) for k in keys]
    return pd.DataFrame(
        {
            "scope": scope,
            "key": keys,
            "value": np.asarray(values, dtype=float),
            "unit": unit,
            "category": [""] * len(keys) if category is None else [str(c) for c in category],
        }
    )


def measure_trace(
    nvtx: pd.DataFrame, tables: dict[str, pd.DataFrame], options: frozenset[str] = frozenset()
) -> Measures:
    """The measures of one analysed trace (``analyze_trace`` tables: summary, kernels, categories, ops,
    attributed, range_groups, phases) and its NVTX ranges.

    Values equal the report's: kernel and category totals, GPU busy, range kernel time (emit_nvtx
    names grouped), phase CPU time and kernel time per instance. Instances: steps (STEP_PATTERN
    ranges; per step, the kernel time each kernel, category and range launched inside it) and,
    for phases, each phase range instance.
    """
    summary = tables["summary"].iloc[0]
    cats = tables["categories"]
    share = gemm_vs_elementwise(cats)
    kernels = tables["kernels"]
    kernels = kernels.assign(key=normalize_kernel_names(kernels["kernel"], kernels["category"], options))
    by_kernel = kernels.groupby("key", sort=False).agg(total_ns=("total_ns", "sum"), category=("category", "first"))
    phases = tables["phases"]
    ranges = tables["range_groups"]
    ranges = ranges[~ranges["range"].astype(str).str.match(STEP_PATTERN)]  # steps have their own scope
    parts = [
        _rows(
            "summary",
            ["gpu_busy", "kernel_time", "memop_time", "gpu_span", "gpu_busy_frac", "gemm_frac", "elementwise_frac"],
            [summary["gpu_busy_ns"], summary["kernel_time_ns"], summary["memop_time_ns"], summary["gpu_span_ns"]]
            + [summary["gpu_busy_frac"], share["gemm_frac"], share["elementwise_frac"]],
            "ns",
        ).assign(unit=["ns"] * 4 + ["frac"] * 3),
        _rows("category", cats["category"], cats["total_ns"], "ns", cats["category"]),
        _rows("kernel", by_kernel.index, by_kernel["total_ns"], "ns", by_kernel["category"]),
        _rows("phase", phases["range"], phases["kernel_per_instance_ns"], "ns"),
        _rows("phase_wall", phases["range"], phases["cpu_avg_ns"], "ns"),
        _rows("range", ranges["range"], ranges["kernel_time_ns"], "ns"),
    ]
    if cats.set_index("category")["count"].get("communication", 0):
        parts.append(_communication(tables["ops"]))
    out = Measures(pd.DataFrame())
    steps = step_rows(nvtx)
    if len(steps):
        wall = nvtx.loc[steps, "duration_ns"].to_numpy()
        parts.append(_rows("step", ["step_wall"], [wall.mean()], "ns"))
        out.instances[("step", "step_wall")] = wall.astype(float)
    if len(steps) >= 2:
        _step_instances(out, nvtx, tables, steps, kernels)
    _phase_instances(out, nvtx, tables)
    out.values = pd.concat(parts, ignore_index=True)
    return out


def _communication(ops: pd.DataFrame) -> pd.DataFrame:
    """Summary rows of communication kernels, summed over ranks (``summarize_rank_time``): their time (union),
    the part not hidden under compute, and the hidden share."""
    from profiler_kit.analyze.ranks import summarize_rank_time

    ranks = summarize_rank_time(ops[ops["is_kernel"].to_numpy(dtype=bool)])
    comm, exposed = ranks["comm_ns"].sum(), ranks["exposed_comm_ns"].sum()
    rows = _rows("summary", ["communication", "exposed_communication", "comm_hidden_frac"], [comm, exposed, 0], "ns")
    rows.loc[2, ["value", "unit"]] = [(comm - exposed) / comm if comm else np.nan, "frac"]
    return rows


def _step_instances(out: Measures, nvtx, tables, steps: np.ndarray, kernels: pd.DataFrame) -> None:
    """Per step: the kernel time each kernel key, category and range (grouped) launched inside it."""
    attributed, ops = tables["attributed"], tables["ops"]
    n_steps = len(steps)
    pos = positions(pd.Index(steps), attributed["range_row"].to_numpy())
    inside = pos >= 0
    step_of_op = np.full(len(ops), -1, dtype=np.int64)
    step_of_op[attributed["op_row"].to_numpy()[inside]] = pos[inside]  # a step nested in a step: the later one
    is_kernel = ops["is_kernel"].to_numpy(dtype=bool)
    in_step = step_of_op >= 0
    counted = in_step & is_kernel
    duration = ops["duration_ns"].to_numpy()

    def per_step(codes: np.ndarray, labels, scope: str, rows: np.ndarray) -> None:
        k = len(labels)
        known = codes >= 0
        key = step_of_op[rows][known] * k + codes[known]
        table = sum_by(key, duration[rows][known], n_steps * k).reshape(n_steps, k)
        for j, label in enumerate(labels):
            out.instances[(scope, str(label))] = table[:, j].astype(float)

    rows = np.flatnonzero(counted)
    names = pd.Categorical(ops["name"])
    key_of_name = dict(zip(kernels["kernel"].astype(str), kernels["key"], strict=True))
    name_keys = pd.Categorical([key_of_name.get(str(n), str(n)) for n in names.categories])
    code_map = np.append(name_keys.codes, -1)
    per_step(code_map[names.codes[rows]], name_keys.categories, "kernel", rows)
    cats = pd.Categorical(ops["category"])
    all_rows = np.flatnonzero(in_step)  # categories count memcpy/memset too, as summarize_categories
    per_step(cats.codes[all_rows], cats.categories, "category", all_rows)
    out.instances[("summary", "kernel_time")] = sum_by(step_of_op[rows], duration[rows], n_steps).astype(float)
    # ranges: every (range, op) pair whose op ran in a step, per grouped range name
    range_codes, range_names = range_name_codes(nvtx, group_emit_nvtx=True)
    pair_pos = positions(nvtx.index, attributed["range_row"].to_numpy())
    op_rows = attributed["op_row"].to_numpy()
    pair_step = step_of_op[op_rows]
    keep = (pair_pos >= 0) & (pair_step >= 0) & is_kernel[op_rows]
    k = len(range_names)
    key = pair_step[keep] * k + range_codes[pair_pos[keep]]
    table = sum_by(key, attributed["duration_ns"].to_numpy()[keep], n_steps * k).reshape(n_steps, k)
    for j, label in enumerate(range_names):
        out.instances[("range", str(label))] = table[:, j].astype(float)
    out.instance_kind.update(dict.fromkeys(("kernel", "category", "range", "summary"), "steps"))


def _phase_instances(out: Measures, nvtx, tables) -> None:
    """Per phase range instance: its CPU time and the kernel time it launched (as the phases table averages)."""
    phases = tables["phases"]
    if phases.empty:
        return
    attributed = tables["attributed"]
    codes, labels = range_label_codes(nvtx)
    wanted = pd.Index(labels).get_indexer(phases["range"].astype(str))
    pos = positions(nvtx.index, attributed["range_row"].to_numpy())
    kern = (pos >= 0) & attributed["is_kernel"].to_numpy(dtype=bool)
    kernel_ns = sum_by(pos[kern], attributed["duration_ns"].to_numpy()[kern], len(nvtx))
    duration = nvtx["duration_ns"].to_numpy()
    for name, code in zip(phases["range"].astype(str), wanted, strict=True):
        rows = np.flatnonzero(codes == code)
        out.instances[("phase", name)] = kernel_ns[rows].astype(float)
        out.instances[("phase_wall", name)] = duration[rows].astype(float)
    out.instance_kind.update({"phase": "phase instances", "phase_wall": "phase instances"})


def measure_ops(op_ranges: pd.DataFrame, ops: pd.DataFrame, launched: pd.DataFrame) -> pd.DataFrame:
    """Measure rows (scope "op") of PyTorch ops: the GPU time of the kernels each op (name and input shapes)
    launched, summed over its instances, as ``summarize_ranges`` sums NVTX ranges. Ops that launched no
    kernel are left out. ``op_ranges``: ops in the NVTX range schema (``analyze.kineto_ops``); ``ops``,
    ``launched``: ``gpu_ops`` of the trace and ``launches`` of them."""
    attributed = project_nvtx(op_ranges, ops[PROJECTED_COLUMNS], launched)
    table = summarize_ranges(op_ranges, attributed)
    table = table[table["kernels"] > 0]
    return _rows("op", table["range"], table["kernel_time_ns"], "ns")


def matched_share(compared: pd.DataFrame) -> float:
    """The smaller side's share of kernel time in kernels matched by name (1: every kernel matched)."""
    k = compared[compared["scope"] == "kernel"]
    matched = k["status"] == "matched"
    shares = [k.loc[matched, c].sum() / k[c].sum() for c in ("base", "new") if k[c].sum() > 0]
    return min(shares, default=1.0)


SWEEP_PHASES = ("forward", "backward", "optimizer", "step_wall")  # as the harness times them


def cell_label(spec: dict, size: str | None) -> str:
    """One sweep cell: ``xl ctx512 train bf16``."""
    return f"{size} ctx{spec.get('ctx')} {spec.get('mode')} {spec.get('precision')}"


def measure_sweep(runs: list[dict], size_of) -> tuple[Measures, pd.DataFrame]:
    """The phase times of a sweep's cells (run.json dicts; ``size_of(spec)`` names the size column) and
    each cell's status.

    Rows scope "cell", key "<cell> <phase>", value the mean ns of the timed steps without profiler;
    instances the timed steps (``times_ms``). A cell recorded twice keeps its first run with times.
    Returns the measures and a table cell, status (ok, oom, error).
    """
    keys, values, status = [], [], {}
    out = Measures(pd.DataFrame())
    for run in runs:
        spec = run.get("spec") or {}
        cell = cell_label(spec, size_of(spec))
        times = (run.get("unprofiled") or {}).get("times_ms") or {}
        if cell in status and not times:
            continue
        status[cell] = run.get("status", "?")
        for phase in SWEEP_PHASES:
            steps = [t for t in times.get(phase) or () if isinstance(t, int | float)]
            if steps and (cell, phase) not in out.instances:
                out.instances[("cell", f"{cell} {phase}")] = np.asarray(steps, float) * 1e6
                keys.append(f"{cell} {phase}")
                values.append(float(np.mean(steps)) * 1e6)
    out.values = _rows("cell", keys, values, "ns")
    out.instance_kind["cell"] = "timed steps"
    return out, pd.DataFrame({"cell": list(status), "status": list(status.values())})


def status_changes(base: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Sweep cells whose status differs (ok -> oom...), or that only one sweep has ("absent" on the other)."""
    both = base.merge(new, on="cell", how="outer", suffixes=("_base", "_new")).fillna("absent")
    return both[both["status_base"] != both["status_new"]].reset_index(drop=True)


def measure_snapshot(analysis) -> Measures:
    """The measures of one ``analyze.memory.MemoryAnalysis``: peaks, and what is live at the allocated peak
    by category and by source line (top frame)."""
    live = analysis.live_at_peak
    by_cat = live.groupby("category", observed=True)["size_bytes"].sum()
    by_line = live.groupby(live["top_frame"].astype(str))["size_bytes"].sum()
    values = pd.concat(
        [
            _rows("memory", ["peak_allocated", "peak_reserved"], [analysis.peak_allocated["bytes"], analysis.peak_reserved["bytes"]], "bytes"),
            _rows("memory_category", by_cat.index, by_cat.to_numpy(), "bytes"),
            _rows("memory_line", by_line.index, by_line.to_numpy(), "bytes"),
        ],
        ignore_index=True,
    )  # fmt: skip
    return Measures(values)


def combine(sides: list[Measures], kind: str = "files") -> Measures:
    """Several files of one side (repeats, ranks) as one: the mean value per key (0 where a file lacks it),
    the files its instances."""
    if len(sides) == 1:
        return sides[0]
    keys = ["scope", "key"]
    frames = [m.values.set_index(keys) for m in sides]
    index = frames[0].index
    for f in frames[1:]:
        index = index.append(f.index[~f.index.isin(index)])
    per_file = np.column_stack([f["value"].reindex(index).fillna(0).to_numpy() for f in frames])
    first = pd.concat([f[["unit", "category"]] for f in frames])
    first = first[~first.index.duplicated()].reindex(index)
    values = first.assign(value=per_file.mean(axis=1)).reset_index()[["scope", "key", "value", "unit", "category"]]
    instances = {(s, k): per_file[i] for i, (s, k) in enumerate(index)}
    return Measures(values, instances, dict.fromkeys(values["scope"].unique(), kind))


def _weights(n: int, rng: np.random.Generator) -> np.ndarray:
    """RESAMPLES bootstrap resamples of n instances, as weights (counts / n), shape (RESAMPLES, n)."""
    return rng.multinomial(n, np.full(n, 1 / n), size=RESAMPLES) / n


def bootstrap(base: np.ndarray, new: np.ndarray, seed: int = SEED) -> tuple[float, float, float, float]:
    """95% percentile intervals of mean(new) - mean(base) and of mean(new) / mean(base) - 1.

    Each side's instances are resampled with replacement, RESAMPLES times, from a fixed seed
    (the same inputs give the same interval). The ratio interval is NaN when a base resample's
    mean is 0.
    """
    rng = np.random.default_rng(seed)
    mb, mn = _weights(len(base), rng) @ base, _weights(len(new), rng) @ new
    tail = 100 * (1 - LEVEL) / 2
    lo, hi = np.percentile(mn - mb, [tail, 100 - tail])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = mn / mb - 1
    rlo, rhi = np.percentile(ratio, [tail, 100 - tail]) if np.isfinite(ratio).all() else (np.nan, np.nan)
    return float(lo), float(hi), float(rlo), float(rhi)


MIN_BOOTSTRAP = 8  # fewer instances on a side: a percentile bootstrap's interval is too narrow, Welch's t is used
# Student's t, 97.5% quantile, by degrees of freedom 1..30 (beyond: the next rows of the usual table, rounded up)
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def t975(df: float) -> float:
    """The 97.5% quantile of Student's t at ``df`` degrees of freedom, rounded down (a wider interval)."""
    if df < 1:
        return T975[0]
    if df <= 30:
        return T975[int(df) - 1]
    return 2.042 if df < 40 else 2.021 if df < 60 else 2.000 if df < 120 else 1.980


def welch(base: np.ndarray, new: np.ndarray) -> tuple[float, float, float, float]:
    """95% Welch t interval of mean(new) - mean(base), and that interval over mean(base) (NaN when it is 0)."""
    nb, nn = len(base), len(new)
    vb, vn = np.var(base, ddof=1) / nb, np.var(new, ddof=1) / nn
    se = np.sqrt(vb + vn)
    df = (vb + vn) ** 2 / (vb**2 / (nb - 1) + vn**2 / (nn - 1)) if se > 0 else np.inf
    d = float(np.mean(new) - np.mean(base))
    lo, hi = d - t975(df) * se, d + t975(df) * se
    mb = float(np.mean(base))
    return float(lo), float(hi), (lo / mb if mb else np.nan), (hi / mb if mb else np.nan)


def interval(base: np.ndarray, new: np.ndarray) -> tuple[float, float, float, float, str]:
    """The 95% interval of a change (``bootstrap`` with MIN_BOOTSTRAP instances a side or more, else
    ``welch``) and the method's name."""
    base, new = np.asarray(base, float), np.asarray(new, float)
    if min(len(base), len(new)) >= MIN_BOOTSTRAP:
        return (*bootstrap(base, new), "bootstrap")
    return (*welch(base, new), "Welch t")


COMPARE_COLUMNS = [
    "scope", "key", "category", "unit", "status", "base", "new", "delta", "delta_frac",
    "base_instances", "new_instances", "base_mean", "new_mean", "change_frac",
    "ci_low", "ci_high", "ci_low_frac", "ci_high_frac", "significant", "noise",
]  # fmt: skip


def compare(base: Measures, new: Measures, threshold: float = DEFAULT_THRESHOLD) -> pd.DataFrame:
    """Every (scope, key) of either side: values, delta, and its noise band.

    ``status``: matched, new (only in NEW) or removed (only in BASE). ``delta``/``delta_frac``
    compare the values (0 for a missing side). Where both sides have at least two instances of
    the key, ``base_mean``/``new_mean`` are the means per instance, ``change_frac`` their relative
    change and ``ci_*`` the 95% intervals (``interval``: bootstrap or Welch t) of the difference and the
    relative change; ``significant`` when the interval excludes zero and ``|change_frac|`` exceeds
    ``threshold``. Otherwise ``change_frac`` is ``delta_frac``, ``significant`` False and ``noise``
    says why no estimate is possible.
    """
    keys = ["scope", "key"]
    joined = base.values.merge(new.values, on=keys, how="outer", suffixes=("_b", "_n"), sort=False).set_index(keys)
    order = {s: i for i, s in enumerate(SCOPES)}
    rows = []
    for (scope, key), r in joined.iterrows():
        in_b, in_n = not pd.isna(r["value_b"]), not pd.isna(r["value_n"])
        vb = r["value_b"] if in_b else 0.0
        vn = r["value_n"] if in_n else 0.0
        unit = r["unit_b"] if in_b else r["unit_n"]
        category = r["category_b"] if in_b else r["category_n"]
        delta = vn - vb
        row = {
            "scope": scope, "key": key, "category": category, "unit": unit,
            "status": "matched" if in_b and in_n else ("removed" if in_b else "new"),
            "base": vb, "new": vn, "delta": delta, "delta_frac": delta / vb if vb else np.nan,
        }  # fmt: skip
        row.update(_noise(base, new, (scope, key), in_b, in_n, row["delta_frac"], threshold))
        rows.append(row)
    out = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
    out["_o"] = out["scope"].map(order).fillna(len(order))
    return out.sort_values(["_o"], kind="stable").drop(columns="_o").reset_index(drop=True)


def _noise(base: Measures, new: Measures, key, in_b: bool, in_n: bool, delta_frac: float, threshold: float) -> dict:
    """The instance columns of one compare row."""
    scope = key[0]
    # a key one side never ran is zero on each of that side's instances of the scope
    xb = base.instances.get(key) if in_b else _zeros_like_scope(base, scope)
    xn = new.instances.get(key) if in_n else _zeros_like_scope(new, scope)
    nb, nn = (0 if xb is None else len(xb)), (0 if xn is None else len(xn))
    out = {"base_instances": nb, "new_instances": nn, "base_mean": np.nan, "new_mean": np.nan}
    out |= {"change_frac": delta_frac, "ci_low": np.nan, "ci_high": np.nan, "ci_low_frac": np.nan}
    out |= {"ci_high_frac": np.nan, "significant": False}
    if nb < 2 or nn < 2:
        out["noise"] = f"no noise estimate: {max(nb, 1)} vs {max(nn, 1)} instances (two a side needed)"
        return out
    mb, mn = float(np.mean(xb)), float(np.mean(xn))
    lo, hi, rlo, rhi, method = interval(xb, xn)
    change = mn / mb - 1 if mb else (np.inf if mn > 0 else (0.0 if mn == 0 else -np.inf))
    kind = new.instance_kind.get(scope) or base.instance_kind.get(scope) or "instances"
    out |= {"base_mean": mb, "new_mean": mn, "change_frac": change, "ci_low": lo, "ci_high": hi}
    out |= {"ci_low_frac": rlo, "ci_high_frac": rhi, "noise": f"{method} over {kind}, {nb} vs {nn}"}
    out["significant"] = bool((lo > 0 or hi < 0) and abs(change) > threshold)
    return out


def _zeros_like_scope(side: Measures, scope: str) -> np.ndarray | None:
    """Zeros, one per instance of ``scope`` on ``side`` (a key that side never ran), or None without instances."""
    for (s, _), x in side.instances.items():
        if s == scope:
            return np.zeros(len(x))
    return None


# ---- the gate -------------------------------------------------------------------------------------------

UNITS = {
    "%": ("frac", 0.01), "ns": ("ns", 1), "us": ("ns", 1e3), "ms": ("ns", 1e6), "s": ("ns", 1e9),
    "B": ("bytes", 1), "KB": ("bytes", 1e3), "MB": ("bytes", 1e6), "GB": ("bytes", 1e9),
    "KiB": ("bytes", 2**10), "MiB": ("bytes", 2**20), "GiB": ("bytes", 2**30), "TiB": ("bytes", 2**40),
}  # fmt: skip
# metric name -> (scope, key or None: the text after "name:" is a regex over the scope's keys)
METRICS = {
    "step": ("step", "step_wall"),
    "gpu_busy": ("summary", "gpu_busy"),
    "kernel_time": ("summary", "kernel_time"),
    "memop_time": ("summary", "memop_time"),
    "peak_allocated": ("memory", "peak_allocated"),
    "peak_reserved": ("memory", "peak_reserved"),
    "category": ("category", None),
    "kernel": ("kernel", None),
    "phase": ("phase", None),
    "range": ("range", None),
    "op": ("op", None),
    "cell": ("cell", None),
    "memory_category": ("memory_category", None),
    "memory_line": ("memory_line", None),
}
RULE_PATTERN = re.compile(r"^(?P<metric>.+?)(?P<op>[<>])(?P<value>[+-]?\d+(?:\.\d+)?)(?P<unit>%|[A-Za-z]+)$")
RULE_GRAMMAR = """RULE is METRIC OP LIMIT, no spaces around OP:
  METRIC  step | gpu_busy | kernel_time | memop_time | peak_allocated | peak_reserved
          | category:NAME | kernel:REGEX | phase:REGEX | range:REGEX | op:REGEX | cell:REGEX
          | memory_category:REGEX | memory_line:REGEX
  OP      > (fails when the change is above LIMIT) or < (below LIMIT)
  LIMIT   signed number and unit: % (relative) or ns us ms s (time) or B KB MB GB KiB MiB GiB (bytes)
A REGEX is searched in the (normalized) names of its kind; what it matches is summed.
A rule fails when the change passes LIMIT and is significant (its 95% interval excludes zero); with
one instance a side there is no interval and the change itself is compared (the line says so).
Examples: 'step>+3%'  'category:gemm>+5%'  'kernel:^triton_poi>+10%'  'peak_allocated>+1GiB'  'gpu_busy>+2ms'"""


@dataclass(frozen=True)
class Rule:
    text: str
    scope: str
    key: str | None  # exact key, or None with ``pattern``
    pattern: re.Pattern | None
    op: str
    limit: float
    unit: str  # "frac", "ns" or "bytes"


def parse_rule(text: str) -> Rule:
    """One ``--fail-on`` rule (RULE_GRAMMAR); InputError naming what is wrong."""
    m = RULE_PATTERN.match(text.strip())
    if not m:
        raise InputError(f"--fail-on {text!r}: not METRIC>LIMIT or METRIC<LIMIT (e.g. 'step>+3%')")
    metric, op, unit = m["metric"], m["op"], m["unit"]
    if unit not in UNITS:
        raise InputError(f"--fail-on {text!r}: unknown unit {unit!r} (one of {' '.join(UNITS)})")
    name, sep, arg = metric.partition(":")
    if name not in METRICS or bool(sep) != (METRICS[name][1] is None) or (sep and not arg):
        known = ", ".join(k if v[1] else f"{k}:..." for k, v in METRICS.items())
        raise InputError(f"--fail-on {text!r}: unknown metric {metric!r} (one of {known})")
    scope, key = METRICS[name]
    kind, scale = UNITS[unit]
    in_bytes = scope.startswith("memory")
    if kind == "bytes" and not in_bytes or kind == "ns" and in_bytes:
        raise InputError(f"--fail-on {text!r}: {unit} does not measure {name}")
    pattern = None
    if key is None:
        if name == "category":
            if arg not in CATEGORIES:
                raise InputError(f"--fail-on {text!r}: unknown category {arg!r} (one of {', '.join(CATEGORIES)})")
            key = arg
        else:
            try:
                pattern = re.compile(arg)
            except re.error as err:
                raise InputError(f"--fail-on {text!r}: bad regex {arg!r}: {err}") from None
    return Rule(text, scope, key, pattern, op, float(m["value"]) * scale, kind)


def evaluate_rules(rules: list[Rule], base: Measures, new: Measures, compared: pd.DataFrame) -> pd.DataFrame:
    """Each rule's verdict: rule, metric (what it measured), base, new, change (in the rule's unit),
    ci_low/ci_high (same unit, NaN without noise estimate), broken (bool), line (one sentence)."""
    rows = []
    for rule in rules:
        keys = _rule_keys(rule, compared)
        if not keys:
            rows.append({"rule": rule.text, "metric": "", "broken": False, "line": f"{rule.text}: nothing matched"})
            continue
        b, n, xb, xn = _summed(rule.scope, keys, base, new)
        change = (n / b - 1 if b else np.nan) if rule.unit == "frac" else n - b
        lo = hi = np.nan
        noise = "no noise estimate (one instance a side): the change itself is compared"
        if xb is not None and xn is not None and len(xb) >= 2 and len(xn) >= 2:
            alo, ahi, rlo, rhi, _ = interval(xb, xn)
            lo, hi = (rlo, rhi) if rule.unit == "frac" else (alo, ahi)
            change = (
                (np.mean(xn) / np.mean(xb) - 1 if np.mean(xb) else np.nan)
                if rule.unit == "frac"
                else np.mean(xn) - np.mean(xb)
            )
            noise = f"95% interval {_fmt(lo, rule.unit)} .. {_fmt(hi, rule.unit)}"
        beyond = change > rule.limit if rule.op == ">" else change < rule.limit
        significant = np.isnan(lo) or lo > 0 or hi < 0
        broken = bool(np.isfinite(change) and beyond and significant)
        metric = keys[0][1] if len(keys) == 1 else f"{len(keys)} {rule.scope} keys"
        line = f"{rule.text}: {metric} changed {_fmt(change, rule.unit)} ({noise})"
        rows.append({"rule": rule.text, "metric": metric, "base": b, "new": n, "change": change,
                     "ci_low": lo, "ci_high": hi, "broken": broken, "line": line})  # fmt: skip
    return pd.DataFrame(
        rows, columns=["rule", "metric", "base", "new", "change", "ci_low", "ci_high", "broken", "line"]
    )


def _rule_keys(rule: Rule, compared: pd.DataFrame) -> list[tuple[str, str]]:
    keys = compared.loc[compared["scope"] == rule.scope, "key"].astype(str)
    if rule.pattern is not None:
        keys = keys[keys.str.contains(rule.pattern)]
    else:
        keys = keys[keys == rule.key]
    return [(rule.scope, k) for k in keys]


def _summed(scope: str, keys, base: Measures, new: Measures):
    """Summed values of ``keys`` on each side, and summed instances where every key has them on a side."""

    def side(m: Measures):
        v = m.values.set_index(["scope", "key"])["value"]
        total = float(sum(v.get(k, 0.0) for k in keys))
        xs = [m.instances.get(k) for k in keys]
        present = [x for x in xs if x is not None]
        if not present or len({len(x) for x in present}) != 1:
            return total, None
        return total, np.sum(present, axis=0)

    (b, xb), (n, xn) = side(base), side(new)
    return b, n, xb, xn


def _fmt(value: float, unit: str) -> str:
    if not np.isfinite(value):
        return "n/a"
    if unit == "frac":
        return f"{100 * value:+.1f}%"
    if unit == "bytes":
        return f"{value / 2**20:+.1f} MiB"
    return f"{value / 1e6:+.3f} ms"
