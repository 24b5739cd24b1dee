"""The nsys reader and analyses against NVIDIA's own reports, and on odd or bad files."""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

import pandas as pd
import pytest
from profiler_kit.analyze import nsys_sqlite
from profiler_kit.analyze.breakdown import analyze_trace
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.nsys_schema import adbc_sqlite
from profiler_kit.analyze.nsys_sqlite import read_nsys_sqlite
from profiler_kit.analyze.tables import SCHEMAS

from tests.conftest import FIXTURES, requires_nsys, shared_params
from tests.nsys_reference import nsys_stats

CPU_FIXTURE = FIXTURES / "nsys_cpu" / "cpu_nvtx.sqlite"
SHARED = shared_params("nsys_sqlite", "*.sqlite")


def _count(path: Path, table: str, where: str = "") -> int:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(f"SELECT count(*) FROM {table} {where}").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


@pytest.mark.parametrize("path", SHARED)
def test_reader_keeps_every_row(path):
    trace = read_nsys_sqlite(path)
    assert len(trace.kernels) == _count(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert len(trace.runtime) == _count(path, "CUPTI_ACTIVITY_KIND_RUNTIME")
    memops = _count(path, "CUPTI_ACTIVITY_KIND_MEMCPY") + _count(path, "CUPTI_ACTIVITY_KIND_MEMSET")
    assert len(trace.memops) == memops
    assert len(trace.nvtx) == _count(path, "NVTX_EVENTS", "WHERE eventType IN (59, 60, 70, 71)")
    assert (trace.kernels["duration_ns"] >= 0).all()
    assert not trace.kernels["name"].astype(str).str.startswith("<unknown").any()
    assert len(trace.gpus) >= 1


@pytest.mark.parametrize("path", SHARED)
def test_other_category_under_two_percent(path):
    cats = analyze_trace(read_nsys_sqlite(path))["categories"].set_index("category")
    if cats["total_ns"].sum():
        assert cats.loc["other", "share_frac"] < 0.02


def _agree(path: Path, tmp_path: Path):
    ref = nsys_stats(path, tmp_path)
    res = analyze_trace(read_nsys_sqlite(path))
    if ref["gpukernsum"] is not None:
        r = ref["gpukernsum"].groupby("Name").agg(total=("Total Time (ns)", "sum"), n=("Instances", "sum"))
        ours = res["kernels"].set_index("kernel")
        assert set(ours.index) == set(r.index)
        assert (ours.loc[r.index, "total_ns"] == r["total"]).all()
        assert (ours.loc[r.index, "count"] == r["n"]).all()
    if ref["nvtxsum"] is not None:
        r = ref["nvtxsum"].groupby("Range").agg(total=("Total Time (ns)", "sum"), n=("Instances", "sum"))
        ours = res["ranges"].dropna(subset="range").set_index("range")  # less the kernels outside every range
        assert set(ours.index) == set(r.index)
        assert (ours.loc[r.index, "cpu_total_ns"] == r["total"]).all()
        assert (ours.loc[r.index, "instances"] == r["n"]).all()
    if ref["nvtxkernsum"] is not None:
        outside = {"NVTX Range": "<outside>", "range": "<outside>"}  # kernels outside every range: no range name
        r = (
            ref["nvtxkernsum"]
            .fillna(outside)
            .groupby(["NVTX Range", "Kernel Name"])
            .agg(total=("Total Time (ns)", "sum"), n=("Kern Inst", "sum"), inst=("NVTX Inst", "sum"))
        )
        ours = res["range_kernels"].astype({"range": object}).fillna(outside).set_index(["range", "kernel"])
        assert len(ours) == len(r)
        joined = ours.join(r.rename_axis(["range", "kernel"]), how="inner")
        assert len(joined) == len(r)
        assert (joined["total_ns"] == joined["total"]).all()
        assert (joined["count"] == joined["n"]).all()
        assert (joined["range_instances"] == joined["inst"]).all()
    if ref["nvtxgpuproj"] is not None:
        r = ref["nvtxgpuproj"]
        ours = res["projection"]
        assert len(ours) == len(r)
        key = ["cpu_start_ns", "range"]
        mine = ours.sort_values(key).reset_index(drop=True)
        theirs = (
            r.rename(columns={"Orig Start (ns)": "cpu_start_ns", "Name": "range"})
            .sort_values(key)
            .reset_index(drop=True)
        )
        assert (mine["gpu_start_ns"].to_numpy() == theirs["Projected Start (ns)"].to_numpy()).all()
        assert (mine["gpu_duration_ns"].to_numpy() == theirs["Projected Duration (ns)"].to_numpy()).all()
        assert (mine["gpu_ops"].to_numpy() == theirs["NumGPUOps"].to_numpy()).all()
    return ref


@requires_nsys
@pytest.mark.parametrize("path", SHARED)
def test_agrees_with_nsys_stats_on_real_exports(path, tmp_path):
    _agree(path, tmp_path)


@requires_nsys
def test_agrees_with_nsys_stats_on_cpu_fixture(tmp_path):
    ref = _agree(CPU_FIXTURE, tmp_path)
    assert ref["nvtxsum"] is not None


def test_cpu_fixture_against_committed_nvtxsum():
    """Runs without nsys: the reference CSV was made by nsys stats when the fixture was recorded."""
    ref = pd.read_csv(CPU_FIXTURE.parent / "ref_nvtxsum.csv").set_index("Range")
    ours = analyze_trace(read_nsys_sqlite(CPU_FIXTURE))["ranges"].set_index("range")
    assert set(ours.index) == set(ref.index)
    assert (ours.loc[ref.index, "cpu_total_ns"] == ref["Total Time (ns)"]).all()
    assert (ours.loc[ref.index, "instances"] == ref["Instances"]).all()


def test_cpu_fixture_nesting_domains_and_styles():
    trace = read_nsys_sqlite(CPU_FIXTURE)
    nv = trace.nvtx.assign(name=trace.nvtx["name"].astype(str))
    depth = nv.groupby("name")["depth"].agg(set)
    assert depth["step"] == {0} and depth["forward"] == {1} and depth["layer_0"] == {2}
    assert depth["scaled dot product attention"] == {3} and depth["computing softmax"] == {4}
    assert (nv.loc[nv["name"] == "optimizer", "domain"].astype(str) == "profiler-kit-test").all()
    cross = nv[nv["name"] == "cross-thread range"].iloc[0]
    assert cross["style"] == "start_end" and cross["end_tid"] != cross["tid"]
    assert trace.kernels.empty and trace.gpus.empty


def _copy(src: Path, tmp_path: Path, name: str = "x.sqlite") -> Path:
    dst = tmp_path / name
    shutil.copy(src, dst)
    dst.chmod(0o644)
    return dst


def test_invalid_utf8_names_are_replaced_not_fatal(tmp_path):
    path = _copy(CPU_FIXTURE, tmp_path)
    con = sqlite3.connect(path)
    con.execute("UPDATE StringIds SET value = CAST(X'666f727761726480ff' AS TEXT) WHERE value = 'forward'")
    con.commit()
    con.close()
    names = set(read_nsys_sqlite(path).nvtx["name"].astype(str))
    assert "forward\ufffd\ufffd" in names


def _odd_nvtx_export(tmp_path: Path) -> Path:
    """The old-schema export plus NVTX rows with invalid UTF-8 text, no text, an open range, no domain."""
    path = _old_schema_export(tmp_path)
    con = sqlite3.connect(path)
    con.executescript(
        """
        INSERT INTO NVTX_EVENTS VALUES (60, 190, 59, CAST(X'6c617965728081' AS TEXT), 281474993487889, 0),
                                       (70, 180, 59, NULL, 281474993487889, NULL),
                                       (280, NULL, 59, 'open', 281474993487889, 0);
        """
    )
    con.commit()
    con.close()
    return path


def test_odd_nvtx_rows(tmp_path):
    nv = read_nsys_sqlite(_odd_nvtx_export(tmp_path)).nvtx.set_index("start_ns")
    assert nv.loc[60, "name"] == "layer\ufffd\ufffd"
    assert nv.loc[70, "name"] == "" and nv.loc[70, "domain"] == ""
    assert nv.loc[280, "end_ns"] == 400  # an open range ends at the last NVTX timestamp, as in nsys's reports
    assert list(nv.loc[[50, 60, 70], "depth"]) == [0, 1, 2]


@pytest.mark.parametrize("make", [lambda tmp: _copy(CPU_FIXTURE, tmp), _odd_nvtx_export])
def test_sqlite3_fallback_reads_what_adbc_reads(make, tmp_path, monkeypatch):
    """Without the optional ADBC driver every table comes through sqlite3, with the same values."""
    path = make(tmp_path)
    with_adbc = read_nsys_sqlite(path)
    monkeypatch.setattr("profiler_kit.analyze.nsys_sqlite.adbc_sqlite", lambda: None)
    without = read_nsys_sqlite(path)
    for name in ("kernels", "runtime", "nvtx"):
        a, b = getattr(with_adbc, name), getattr(without, name)
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False)


def _old_schema_export(tmp_path: Path) -> Path:
    """A 2.x-era export: no shortName/globalPid/textId columns, names in text, EXPORT_META_DATA."""
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE EXPORT_META_DATA(name TEXT, value TEXT);
        INSERT INTO EXPORT_META_DATA VALUES ('EXPORT_SCHEMA_VERSION', '2.9.0');
        CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT);
        INSERT INTO StringIds VALUES (1, 'volta_sgemm_128x64_nn'), (2, 'cudaLaunchKernel');
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start INT, end INT, deviceId INT, streamId INT,
            correlationId INT, demangledName INT, gridX INT, gridY INT, gridZ INT, blockX INT, blockY INT, blockZ INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000, 1500, 0, 7, 11, 1, 1, 1, 1, 128, 1, 1),
                                                      (2000, 2600, 0, 7, 12, 1, 1, 1, 1, 128, 1, 1);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INT, end INT, globalTid INT, correlationId INT, nameId INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (100, 120, 281474993487889, 11, 2), (300, 320, 281474993487889, 12, 2);
        CREATE TABLE NVTX_EVENTS(start INT, end INT, eventType INT, text TEXT, globalTid INT, domainId INT);
        INSERT INTO NVTX_EVENTS VALUES (50, 200, 59, 'forward', 281474993487889, 0),
                                       (250, 400, 59, 'backward', 281474993487889, 0);
        """
    )
    con.close()
    return path


def test_old_schema_without_optional_columns(tmp_path):
    trace = read_nsys_sqlite(_old_schema_export(tmp_path))
    assert trace.meta["schema_version"] == "2.9.0"
    assert list(trace.kernels["name"].astype(str)) == ["volta_sgemm_128x64_nn"] * 2
    res = analyze_trace(trace)
    ranges = res["ranges"].set_index("range")
    assert ranges.loc["forward", "kernel_time_ns"] == 500
    assert ranges.loc["backward", "kernel_time_ns"] == 600


BAD_CASES = {
    "missing": lambda tmp: tmp / "nope.sqlite",
    "not_sqlite": lambda tmp: _write(tmp / "text.sqlite", b"hello, not a database\n" * 10),
    "truncated": lambda tmp: _write(tmp / "cut.sqlite", CPU_FIXTURE.read_bytes()[:40960]),
    "corrupt": lambda tmp: _write(tmp / "bad.sqlite", CPU_FIXTURE.read_bytes()[:100] + b"\xde\xad" * 204750),
    "not_nsys": lambda tmp: _plain_sqlite(tmp / "plain.sqlite"),
    "unknown_schema": lambda tmp: _future_schema(tmp),
    "empty_file": lambda tmp: _write(tmp / "empty.sqlite", b""),
}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _plain_sqlite(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t(a)")
    con.commit()
    con.close()
    return path


def _future_schema(tmp: Path) -> Path:
    path = _copy(CPU_FIXTURE, tmp, "future.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE EXPORT_META_DATA SET value = '4.0.0' WHERE name = 'EXPORT_SCHEMA_VERSION'")
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_is_one_clear_error(case, tmp_path):
    path = BAD_CASES[case](tmp_path)
    with pytest.raises(InputError) as err:
        read_nsys_sqlite(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("adbc", [True, False])
@pytest.mark.parametrize(
    ("table", "column", "value", "says"),
    [
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "start", "X'ff00fe'", r"holds a blob"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName", "'volta'", r"holds text \('volta'\)"),
        ("NVTX_EVENTS", "end", "1.5", r"holds a real number \(1\.5\)"),
        # invalid UTF-8: sqlite3 decodes it with a replacement character, Arrow refuses to
        (
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            "end",
            "CAST(X'61ff' AS TEXT)",
            r"holds text (\('a\ufffd'\)|that is not valid UTF-8)",
        ),
    ],
)
def test_non_integer_values_are_one_clear_error(table, column, value, says, adbc, tmp_path, monkeypatch):
    """SQLite lets an INTEGER column hold text, blobs and reals; a value nsys never writes there is refused,
    not turned into a traceback or (doubles) into rounded timestamps."""
    path = _old_schema_export(tmp_path)
    con = sqlite3.connect(path)
    con.execute(f'UPDATE {table} SET "{column}" = {value} WHERE rowid = 2')
    con.commit()
    con.close()
    if not adbc:
        monkeypatch.setattr("profiler_kit.analyze.nsys_sqlite.adbc_sqlite", lambda: None)
    with pytest.raises(InputError, match=rf"{table}\.{column} {says} where nsys writes integers"):
        read_nsys_sqlite(path)


def test_damaged_string_table_still_names_kernels(tmp_path):
    """StringIds with a repeated id (first wins, as a lookup by id finds it) and a blob name (decoded, replaced)."""
    path = _old_schema_export(tmp_path)
    con = sqlite3.connect(path)
    con.executescript(
        """
        DROP TABLE StringIds;
        CREATE TABLE StringIds(id INT, value TEXT);
        INSERT INTO StringIds VALUES (1, 'volta_sgemm_128x64_nn'), (1, 'later'), (2, X'6375646180');
        """
    )
    con.commit()
    con.close()
    trace = read_nsys_sqlite(path)
    assert list(trace.kernels["name"].astype(str)) == ["volta_sgemm_128x64_nn"] * 2
    assert set(trace.runtime["name"].astype(str)) == {"cuda\ufffd"}


def test_gpu_table_with_odd_values_is_read(tmp_path):
    """GPU facts are descriptive: a value that is not a number is left out (-1, as NULL is), the report goes on."""
    path = _old_schema_export(tmp_path)
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE TARGET_INFO_GPU(id INT, name TEXT, smCount INT, totalMemory INT);
        INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100', 132, NULL), (1, 'NVIDIA H100', 'many', X'00');
        """
    )
    con.commit()
    con.close()
    gpus = read_nsys_sqlite(path).gpus.set_index("device_id")
    assert gpus.loc[0, "sm_count"] == 132 and gpus.loc[1, "sm_count"] == -1
    assert (gpus["memory_bytes"] == -1).all()


def test_runtime_later_hands_the_trace_over_before_a_slow_runtime_read(monkeypatch, tmp_path):
    path = _old_schema_export(tmp_path)
    want = read_nsys_sqlite(path, details=False)
    read_runtime = nsys_sqlite.read_runtime

    def slow(*args):
        time.sleep(0.3)
        return read_runtime(*args)

    monkeypatch.setattr(nsys_sqlite, "read_runtime", slow)
    got = read_nsys_sqlite(path, details=False, runtime_later=True)
    # on a worker thread (the ADBC driver installed) the read is still running; without it, it ran in the call
    assert got.pending("runtime") == (adbc_sqlite() is not None)
    for name in SCHEMAS:
        pd.testing.assert_frame_equal(getattr(got, name), getattr(want, name), check_exact=True)
