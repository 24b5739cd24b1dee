"""Every figure of the kernel, range, CUDA API and memop summaries against ``nsys stats`` 2022.4 on the same export.

Counts, totals, minima and maxima must be equal; averages, medians and standard deviations, which
nsys prints rounded to 0.1 ns (sizes: unrounded, in bytes with ``csv:mem=B``), within that rounding.
The summaries are those the CLI and the report compute (``read_trace(..., details=False)``), launch
shapes from a full read (``profiler-kit kernels --by-shape``).
"""

from __future__ import annotations

import shutil
import sqlite3
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from profiler_kit.analyze.api import summarize_api
from profiler_kit.analyze.breakdown import analyze_trace, summarize_kernel_shapes
from profiler_kit.analyze.nsys_export import export_report
from profiler_kit.analyze.nsys_sqlite import MEMCPY_KIND_LABELS
from profiler_kit.analyze.sources import Source, read_trace

from tests.conftest import requires_nsys, shared_params
from tests.nsys_reference import nsys_stats

pytestmark = [pytest.mark.nsys, requires_nsys]

SHARED = shared_params("nsys_sqlite", "*.sqlite") + [
    p for p in shared_params("nsys_rep", "*.nsys-rep") if p.values[0] is not None
]  # reports are exported once (as_export)
REPORTS = ("gpukernsum", "gpukernsum:base", "nvtxsum", "nvtxkernsum", "cudaapisum", "gpumemtimesum", "gpumemsizesum")
# nsys 2022.4's memcpy names by copyKind (nsysstats.py MEM_OPER_STRS_CTE); the reader words them as the
# export's ENUM_CUDA_MEMCPY_OPER does ("[CUDA memcpy Host-to-Device]")
NSYS_MEMCPY = ("Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP",
               "Unified Memory memcpy HtoD", "Unified Memory memcpy DtoH", "Unified Memory memcpy DtoD")  # fmt: skip


_REFERENCES: dict[Path, dict[str, pd.DataFrame | None]] = {}
_EXPORTS: dict[Path, Path] = {}


def as_export(path: Path, folder: Path) -> Path:
    """``path``, or for a .nsys-rep the SQLite export of a copy of it in ``folder`` (made once)."""
    if path.suffix == ".sqlite":
        return path
    if path not in _EXPORTS:
        copy = folder / path.name
        shutil.copy(path, copy)
        _EXPORTS[path] = export_report(copy)
    return _EXPORTS[path]


@pytest.fixture(scope="module")
def nsys_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("nsys")


@pytest.fixture
def export(path: Path, nsys_dir: Path) -> Path:
    """The test's SQLite export: ``path`` itself, or the export of a .nsys-rep (as_export)."""
    return as_export(path, nsys_dir)


def ref_of(path: Path, nsys_dir: Path, report: str) -> pd.DataFrame:
    """nsys's ``report`` on ``path`` (an export); nsys runs once per export for all the tests here (skip: no such data)."""
    if path not in _REFERENCES:
        folder = nsys_dir / path.stem
        folder.mkdir()
        _REFERENCES[path] = nsys_stats(path, folder, REPORTS, fmt="csv:mem=B")
    ref = _REFERENCES[path][report]
    if ref is None:
        pytest.skip(f"nsys stats {report}: no data in {path.name}")
    return ref


@cache
def ours(path: Path) -> dict[str, pd.DataFrame]:
    """The tables the report and the CLI compute (no launch shapes read)."""
    return analyze_trace(read_trace(Source(path, "nsys-sqlite"), details=False))


def assert_rounded(mine, theirs, what: str) -> None:
    """Equal within nsys's rounding to 0.1 (and a float's last digits)."""
    mine, theirs = np.asarray(mine, dtype=float), np.asarray(theirs, dtype=float)
    bad = np.abs(mine - theirs) > 0.05 + 1e-9 * np.abs(theirs)
    assert not bad.any(), f"{what}: {mine[bad][:5]} against nsys {theirs[bad][:5]}"


def assert_exact(mine, theirs, what: str) -> None:
    mine, theirs = np.asarray(mine), np.asarray(theirs)
    assert (mine == theirs).all(), f"{what}: {mine[mine != theirs][:5]} against nsys {theirs[mine != theirs][:5]}"


STATS = {  # our column suffix -> nsys column, exact or rounded
    "count": ("Instances", assert_exact),
    "total_ns": ("Total Time (ns)", assert_exact),
    "avg_ns": ("Avg (ns)", assert_rounded),
    "med_ns": ("Med (ns)", assert_rounded),
    "min_ns": ("Min (ns)", assert_exact),
    "max_ns": ("Max (ns)", assert_exact),
    "std_ns": ("StdDev (ns)", assert_rounded),
}


def assert_stats(
    joined: pd.DataFrame, what: str, prefix: str = "", count: str = "Instances", my_count: str = "count"
) -> None:
    for col, (theirs, check) in STATS.items():
        theirs = count if col == "count" else theirs
        mine = my_count if col == "count" else prefix + col
        check(joined[mine], joined[theirs], f"{what} {mine}")


def shape(xyz: pd.Series) -> pd.Series:
    return xyz.str.split().map("x".join)


@pytest.mark.parametrize("path", SHARED)
def test_kernels_per_name_agree(export, nsys_dir):
    """The kernels table (report, `kernels`): gpukernsum's rows summed over shapes; med and std where one shape."""
    ref = ref_of(export, nsys_dir, "gpukernsum")
    kernels = ours(export)["kernels"].set_index("kernel")
    g = ref.groupby("Name")
    per_name = g.agg(
        count=("Instances", "sum"), total=("Total Time (ns)", "sum"), low=("Min (ns)", "min"), high=("Max (ns)", "max")
    )
    assert set(kernels.index.astype(str)) == set(per_name.index)
    mine = kernels.loc[per_name.index]
    assert_exact(mine["count"], per_name["count"], "count")
    assert_exact(mine["total_ns"], per_name["total"], "total")
    assert_exact(mine["min_ns"], per_name["low"], "min")
    assert_exact(mine["max_ns"], per_name["high"], "max")
    assert_rounded(mine["avg_ns"], per_name["total"] / per_name["count"], "avg")
    single = ref[g["Name"].transform("size") == 1].set_index("Name")  # one shape: its med and std are the name's
    joined = kernels.join(single, how="inner")
    assert len(joined) == len(single)
    assert_stats(joined, "kernel")


@pytest.mark.parametrize("path", SHARED)
@pytest.mark.parametrize("base", [False, True], ids=["demangled", "base"])
def test_kernel_shapes_agree(export, base, nsys_dir):
    """``kernels --by-shape`` (``--base``): one row per (name, grid, block), every statistic, as gpukernsum[:base]."""
    ref = ref_of(export, nsys_dir, "gpukernsum:base" if base else "gpukernsum")
    trace = read_trace(Source(export, "nsys-sqlite"))
    mine = summarize_kernel_shapes(trace.kernels, name="name" if base else "demangled_name")
    ref = ref.assign(grid=shape(ref["GridXYZ"]), block=shape(ref["BlockXYZ"]), kernel=ref["Name"])
    key = ["kernel", "grid", "block"]
    assert not ref.duplicated(key).any()
    joined = mine.assign(kernel=mine["kernel"].astype(str)).merge(ref, on=key, validate="one_to_one")
    assert len(joined) == len(mine) == len(ref)
    assert_stats(joined, "shape")
    assert_rounded(100 * joined["share_frac"], joined["Time (%)"], "share")


@pytest.mark.parametrize("path", SHARED)
def test_range_cpu_times_agree(export, nsys_dir):
    """The ranges table (`nvtx`, report): instances and CPU time statistics as nvtxsum, per range name."""
    ref = ref_of(export, nsys_dir, "nvtxsum")
    ranges = ours(export)["ranges"]
    named = ranges[ranges["range"].notna()].set_index("range")
    assert set(named.index) == set(ref["Range"])
    single = ref[~ref["Range"].duplicated(keep=False)].set_index("Range")  # one style per name
    joined = named.join(single, how="inner")
    assert len(joined) == len(single)
    assert_stats(joined, "range", prefix="cpu_", my_count="instances")


@pytest.mark.parametrize("path", SHARED)
def test_range_kernel_counts_agree(export, nsys_dir):
    """Kernels and kernel time per range name (`nvtx`, report), the unnamed range included, as nvtxkernsum."""
    ref = ref_of(export, nsys_dir, "nvtxkernsum")
    ranges = ours(export)["ranges"]
    per_name = ref.groupby("NVTX Range", dropna=False).agg(n=("Kern Inst", "sum"), time=("Total Time (ns)", "sum"))
    mine = ranges[ranges["kernels"] > 0].set_index("range")
    assert mine.index.is_unique
    joined = mine.join(per_name, how="inner")  # NaN (the unnamed range) joins NaN
    assert len(joined) == len(mine) == len(per_name)
    assert_exact(joined["kernels"], joined["n"], "kernels")
    assert_exact(joined["kernel_time_ns"], joined["time"], "kernel time")


@pytest.mark.parametrize("path", SHARED)
def test_range_kernel_pairs_agree(export, nsys_dir):
    """range_kernels row by row, kernels outside every range under the unnamed range, as nvtxkernsum."""
    ref = ref_of(export, nsys_dir, "nvtxkernsum")
    r = ref.groupby(["NVTX Range", "Kernel Name"], dropna=False).agg(
        total=("Total Time (ns)", "sum"), n=("Kern Inst", "sum"), inst=("NVTX Inst", "sum")
    )
    mine = ours(export)["range_kernels"]
    mine = mine.assign(range=mine["range"].astype(object), kernel=mine["kernel"].astype(object))
    joined = mine.merge(
        r.reset_index(), left_on=["range", "kernel"], right_on=["NVTX Range", "Kernel Name"], validate="one_to_one"
    )
    assert len(joined) == len(mine) == len(r)
    assert_exact(joined["count"], joined["n"], "count")
    assert_exact(joined["total_ns"], joined["total"], "total")
    assert_exact(joined["range_instances"], joined["inst"], "range instances")


@pytest.mark.parametrize("path", SHARED)
def test_cuda_api_summary_agrees(export, nsys_dir):
    """``profiler-kit api`` and the report's CUDA API table, as cudaapisum."""
    ref = ref_of(export, nsys_dir, "cudaapisum")
    api = ours(export)["api"]
    assert not ref["Name"].duplicated().any() and not api["function"].duplicated().any()
    joined = api.merge(ref, left_on="function", right_on="Name", validate="one_to_one")
    assert len(joined) == len(api) == len(ref)
    assert_stats(joined, "api", count="Num Calls")
    assert_rounded(100 * joined["share_frac"], joined["Time (%)"], "share")
    full = summarize_api(read_trace(Source(export, "nsys-sqlite")).runtime)  # the full read: same table
    pd.testing.assert_frame_equal(full, api)


def nsys_memop_name(name: str) -> str:
    labels = {f"[CUDA memcpy {label}]": f"[CUDA {'' if 'Unified' in n else 'memcpy '}{n}]"
              for label, n in zip(MEMCPY_KIND_LABELS.values(), NSYS_MEMCPY, strict=True)}  # fmt: skip
    return labels.get(name, name)


@pytest.mark.parametrize("path", SHARED)
def test_memop_summary_agrees(export, nsys_dir):
    """Memcpy/memset per kind: time as gpumemtimesum, bytes as gpumemsizesum (in bytes), bandwidth their ratio."""
    times, sizes = ref_of(export, nsys_dir, "gpumemtimesum"), ref_of(export, nsys_dir, "gpumemsizesum")
    memops = ours(export)["memops"]
    memops = memops.assign(Operation=memops["operation"].map(nsys_memop_name))
    joined = memops.merge(times, on="Operation", validate="one_to_one").merge(sizes, on="Operation")
    assert len(joined) == len(memops) == len(times) == len(sizes)
    assert_stats(joined, "memop time", count="Count_x")
    assert_exact(joined["count"], joined["Count_y"], "memop count (sizes)")
    assert_exact(joined["total_bytes"], joined["Total (B)"], "total bytes")
    assert_exact(joined["min_bytes"], joined["Min (B)"], "min bytes")
    assert_exact(joined["max_bytes"], joined["Max (B)"], "max bytes")
    for ours_col, theirs in (("avg_bytes", "Avg (B)"), ("med_bytes", "Med (B)"), ("std_bytes", "StdDev (B)")):
        assert np.allclose(joined[ours_col], joined[theirs], rtol=1e-9, atol=1e-6), ours_col
    assert np.allclose(joined["bandwidth_gb_per_s"], joined["Total (B)"] / joined["Total Time (ns)"], rtol=1e-12)


def nested_copy(src: Path, dst: Path) -> str:
    """A copy of ``src`` where its busiest push/pop range (by kernels launched inside) is wrapped in a second
    range of the same name, one ns wider on each side, on the same thread: the name nested in itself."""
    shutil.copy(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst)
    try:
        rowid, text, text_id = con.execute(
            """SELECT e.rowid, e.text, e.textId FROM NVTX_EVENTS e JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
               ON r.globalTid = e.globalTid AND r.start >= e.start AND r.end <= e.end
               WHERE e.eventType = 59 AND e."end" IS NOT NULL AND coalesce(e.domainId, 0) = 0 GROUP BY e.rowid ORDER BY count(*) DESC LIMIT 1"""
        ).fetchone()
        columns = [c[1] for c in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
        values = ", ".join("start - 1" if c == "start" else '"end" + 1' if c == "end" else f'"{c}"' for c in columns)
        con.execute(f"INSERT INTO NVTX_EVENTS ({', '.join(map(repr, columns))}) SELECT {values} FROM NVTX_EVENTS "
                    f"WHERE rowid = ?", (rowid,))  # fmt: skip
        con.commit()
        name = (
            text
            if text is not None
            else con.execute("SELECT value FROM StringIds WHERE id = ?", (text_id,)).fetchone()[0]
        )
    finally:
        con.close()
    return name


@pytest.mark.parametrize("path", SHARED)
def test_name_nested_in_itself(export, tmp_path, nsys_dir):
    """Kernels under two nested ranges of one name count once, in count and time; nsys's Kern Inst agrees
    (its Total Time adds such a kernel once per enclosing range, which we do not)."""
    nested = tmp_path / "nested.sqlite"
    try:
        name = nested_copy(export, nested)
    except (TypeError, sqlite3.OperationalError):  # no push/pop range with a launch inside
        pytest.skip("no push/pop range encloses a launch")
    (tmp_path / "ref").mkdir()
    r = nsys_stats(nested, tmp_path / "ref", ("nvtxkernsum",))["nvtxkernsum"]
    r = r[r["NVTX Range"] == name]
    res = analyze_trace(read_trace(Source(nested, "nsys-sqlite"), details=False))
    pairs = res["range_kernels"]
    pairs = pairs[pairs["range"] == name].assign(kernel=lambda d: d["kernel"].astype(str)).set_index("kernel")
    theirs = r.groupby("Kernel Name").agg(n=("Kern Inst", "sum"), total=("Total Time (ns)", "sum"))
    assert_exact(pairs.loc[theirs.index, "count"], theirs["n"], "count")
    # nsys's rows: one per (range instance, kernel); its avg is over them, so rows = total / avg
    row = res["ranges"].set_index("range").loc[name]
    assert row["kernels"] == theirs["n"].sum()
    assert row["kernel_time_ns"] == pairs["total_ns"].sum()
    doubled = theirs["total"] > pairs.loc[theirs.index, "total_ns"]
    assert doubled.any()  # nsys counted the nested kernels' time twice; we did not
    same = (
        analyze_trace(read_trace(Source(export, "nsys-sqlite"), details=False))["ranges"].set_index("range").loc[name]
    )
    assert (row["kernels"], row["kernel_time_ns"]) == (same["kernels"], same["kernel_time_ns"])  # as before the copy
