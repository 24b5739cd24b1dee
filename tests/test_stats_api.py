"""Group statistics against pandas and the statistics module, the CUDA API summary against raw Kineto JSON,
and the commands that print them (``api``, ``kernels --by-shape``, ``nvtx``'s unnamed range)."""

from __future__ import annotations

import gzip
import json
import statistics
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from profiler_kit.analyze.api import summarize_api
from profiler_kit.analyze.kineto import read_kineto
from profiler_kit.analyze.stats import SMALL_BITS, SMALL_GROUP, group_stats, small_square_sums, square_sums

from profiler_kit.cli import cli
from tests.conftest import ROOT, SHARED_DATA, shared_files

EXAMPLE = ROOT / "examples" / "kineto" / "small_ctx512_train_bf16.json.gz"
KINETO = [EXAMPLE, *shared_files("kineto", "*.json.gz")]

# CUDA/HIP API call categories across Kineto versions, written out here so the check does not use the reader's list.
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "hip_runtime", "Runtime")


@pytest.mark.parametrize("seed", range(4))
def test_group_stats_is_pandas(seed):
    rng = np.random.default_rng(seed)
    n_groups = [3, 40, 2_000, 1][seed]
    sizes = rng.choice([1, 2, 5, SMALL_GROUP, SMALL_GROUP + 1, 3_000], n_groups)  # small and large groups
    codes = np.repeat(np.arange(n_groups), sizes)
    rng.shuffle(codes)
    values = rng.integers(0, [10, 2**40, 1_000, 7][seed], len(codes))
    n = n_groups + 2  # two empty groups
    got = group_stats(codes, values, n)
    g = pd.Series(values).groupby(codes)
    index = range(n)
    assert (got["count"] == g.size().reindex(index, fill_value=0)).all()
    assert (got["total"] == g.sum().reindex(index, fill_value=0)).all()
    has = got["count"] > 0
    assert (got["min"][has] == g.min().to_numpy()).all() and (got["max"][has] == g.max().to_numpy()).all()
    assert (got["min"][~has] == -1).all() and np.isnan(got["med"][~has]).all() and np.isnan(got["std"][~has]).all()
    assert np.allclose(got["avg"][has], g.mean().to_numpy(), rtol=1e-12)
    assert (got["med"][has] == g.median().to_numpy()).all()  # halves of integer sums: exact
    std = g.std(ddof=1).fillna(0).to_numpy()  # nsys: 0 for one value, where pandas gives NaN
    assert np.allclose(got["std"][has], std, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("case", ["small", "few large", "many large", "negative", "sums near int64"])
def test_square_sums_are_exact(case):
    """Both ways (one int64 product for small values, limbs otherwise) against Python integers."""
    rng = np.random.default_rng(len(case))
    values = rng.integers(0, 1 << SMALL_BITS, 20_000)
    if case == "few large":  # long synchronize calls: squared as Python ints
        values[rng.integers(0, len(values), 30)] = rng.integers(1 << SMALL_BITS, 1 << 62, 30)
    elif case == "many large":
        values[::10] = 1 << 40
    elif case == "negative":
        values[5] = -3
    elif case == "sums near int64":  # whole chunks of the largest small value
        values[:] = (1 << SMALL_BITS) - 1
    start = np.array([0, 1, 4_000, 4_001, 19_999])
    want = [sum(int(v) ** 2 for v in part) for part in np.split(values, start[1:])]
    assert square_sums(values, start) == want
    fast = small_square_sums(values, start)
    assert fast is None if case in ("many large", "negative") else fast == want


def test_group_stats_are_nsys_definitions():
    """nsys 2022.4's bundled sqlite3: median(1, 2, 3, 10) = 2.5, stdev = 4.08248290463863 (n - 1), stdev(5) = 0.0."""
    got = group_stats(np.array([0, 0, 0, 0, 1]), np.array([1, 2, 3, 10, 5]), 2)
    assert got["med"].tolist() == [2.5, 5.0]
    assert got["std"][0] == pytest.approx(4.08248290463863, abs=1e-12) and got["std"][1] == 0.0


def test_group_stats_of_nothing():
    got = group_stats(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 2)
    assert got["count"].tolist() == [0, 0] and got["total"].tolist() == [0, 0] and np.isnan(got["med"]).all()


def raw_api_calls(path: Path) -> pd.DataFrame:
    """Name and duration in ns of each CUDA runtime/driver complete event, straight from the JSON (exact decimals)."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    rows = [(e["name"], int(Decimal(e.get("dur", 0)) * 1000)) for e in doc["traceEvents"]
            if e.get("cat") in RUNTIME_CATS and e.get("ph") == "X"]  # fmt: skip
    return pd.DataFrame(rows, columns=["name", "ns"])


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name[:50])
def test_kineto_api_summary_is_the_raw_events(path):
    raw = raw_api_calls(path)
    api = summarize_api(read_kineto(path).runtime).set_index("function")
    assert len(api) == raw["name"].nunique()
    for name, ns in raw.groupby("name")["ns"]:
        row = api.loc[name]
        values = ns.tolist()
        assert (row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == (
            len(values), sum(values), min(values), max(values)
        )  # fmt: skip
        assert row["med_ns"] == statistics.median(values)
        assert row["std_ns"] == pytest.approx(statistics.stdev(values) if len(values) > 1 else 0.0, rel=1e-9, abs=1e-6)
    assert api["total_ns"].is_monotonic_decreasing


def test_api_summary_drops_the_version_suffix_and_sorts():
    runtime = pd.DataFrame(
        {
            "name": pd.Categorical(["cudaLaunchKernel_v7000", "cuMemAlloc_v2", "cudaLaunchKernel_v7000"]),
            "duration_ns": [5, 100, 7],
        }
    )
    api = summarize_api(runtime)
    assert api["function"].tolist() == ["cuMemAlloc_v2", "cudaLaunchKernel"]  # "_v2" is not a 6-character suffix
    assert api["count"].tolist() == [1, 2] and api["med_ns"].tolist() == [100.0, 6.0]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_api_command_prints_the_summary():
    res = run("api", EXAMPLE, "--format", "csv", "--top", "3")
    assert res.exit_code == 0, res.output
    table = pd.read_csv(pd.io.common.StringIO(res.output))
    assert list(table.columns) == ["function", "count", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns",
                                   "share_frac"]  # fmt: skip
    assert len(table) == 3 and table["function"].iloc[0] == "cudaLaunchKernel"


def test_api_command_on_a_trace_without_api_calls(tmp_path):
    doc = json.loads(gzip.decompress(EXAMPLE.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in RUNTIME_CATS]
    src = tmp_path / "trimmed.json"
    src.write_text(json.dumps(doc))
    res = CliRunner().invoke(cli, ["api", str(src)])
    assert res.exit_code == 0 and "no CUDA API calls recorded" in res.output


NSYS_EXPORT = SHARED_DATA / "nsys_sqlite" / "lizhieffe__assignment2-systems__ddp53_profile.sqlite"
needs_export = pytest.mark.skipif(not NSYS_EXPORT.is_file(), reason="../shared/data absent")


@needs_export
def test_kernels_by_shape_and_base():
    shapes = pd.read_csv(pd.io.common.StringIO(run("kernels", NSYS_EXPORT, "--by-shape", "--format", "csv").output))
    plain = pd.read_csv(pd.io.common.StringIO(run("kernels", NSYS_EXPORT, "--top", "1000", "--format", "csv").output))
    assert {"grid", "block", "med_ns", "std_ns"} <= set(shapes.columns)
    assert shapes.duplicated(["kernel", "grid", "block"]).sum() == 0 and shapes["kernel"].duplicated().any()
    base = pd.read_csv(pd.io.common.StringIO(run("kernels", NSYS_EXPORT, "--base", "--format", "csv").output))
    assert "grid" not in base.columns and not base["kernel"].str.contains(r"\(").any()  # short names: no signature
    full = run("kernels", NSYS_EXPORT, "--by-shape", "--top", "1000", "--format", "csv").output
    assert pd.read_csv(pd.io.common.StringIO(full))["count"].sum() == plain["count"].sum()


@needs_export
def test_nvtx_command_keeps_the_unnamed_range():
    """Kernels outside every range are the last row, kept whatever --top (this export has 2720 of them)."""
    table = pd.read_csv(pd.io.common.StringIO(run("nvtx", NSYS_EXPORT, "--top", "3", "--format", "csv").output))
    assert len(table) == 3 and table["range"].isna().tolist() == [False, False, True]
    assert table["kernels"].iloc[-1] == 2720 and table["instances"].iloc[-1] == 0


def test_package_names_itself_in_attribute_errors():
    import profiler_kit.analyze as analyze

    assert analyze.Trace.__name__ == "Trace"  # loaded on first use
    with pytest.raises(AttributeError, match="module 'profiler_kit.analyze' has no attribute 'nothing'"):
        analyze.nothing  # noqa: B018
