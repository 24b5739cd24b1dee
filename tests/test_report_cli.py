"""The report command end to end: outputs, formats, errors, help and docs."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profiler_kit.cli import cli
from profiler_kit.report import file_key
from tests.conftest import FIXTURES, ROOT, SHARED_DATA, requires_nsys, shared_dir

CPU_FIXTURE = FIXTURES / "nsys_cpu" / "cpu_nvtx.sqlite"
KINETO_FIXTURE = FIXTURES / "kineto"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_report_md_and_html(tmp_path):
    res = run("report", CPU_FIXTURE, KINETO_FIXTURE, "-o", tmp_path)
    assert res.exit_code == 0, res.output
    md = (tmp_path / "report.md").read_text()
    assert "Comparison across traces" in md and "forward" in md
    assert "no GPU kernels" in md  # the CPU export says it cannot answer GPU questions
    html = (tmp_path / "report.html").read_text()
    assert "Plotly.newPlot" in html and '<script src="http' not in html  # plotly.js embedded, opens offline


def test_report_without_plotly_writes_markdown_and_says_why_no_charts(tmp_path, monkeypatch):
    monkeypatch.setattr("profiler_kit.render.html.plotly_available", lambda: False)
    monkeypatch.setattr("profiler_kit.output.plotly_available", lambda: False)
    res = CliRunner().invoke(cli, ["report", str(KINETO_FIXTURE), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "plotly is not installed" in res.stderr
    assert (tmp_path / "report.md").exists() and not (tmp_path / "report.html").exists()
    assert "report.html" not in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_report_tables_as_data(tmp_path, fmt):
    res = run("report", CPU_FIXTURE, "-o", tmp_path, "--format", fmt, "--no-html")
    assert res.exit_code == 0, res.output
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files and all(f.endswith(f".{fmt}") for f in files)
    ranges = next(p for p in tmp_path.iterdir() if p.name.endswith(f"_ranges.{fmt}"))
    if fmt == "json":
        rows = json.loads(ranges.read_text())["rows"]
        step = next(r for r in rows if r["range"] == "step")
        assert step["instances"] == 3 and isinstance(step["cpu_total_ns"], int)


def test_report_data_files_for_traces_in_subfolders(tmp_path):
    """Trace labels hold the subfolder ("sub/cpu_nvtx.sqlite"): table files must still be plain names."""
    src = tmp_path / "in" / "sub"
    src.mkdir(parents=True)
    (src / "cpu_nvtx.sqlite").write_bytes(CPU_FIXTURE.read_bytes())
    res = run("report", tmp_path / "in", "-o", tmp_path / "out", "--format", "csv", "--no-html")
    assert res.exit_code == 0, res.output
    names = [p.name for p in (tmp_path / "out").iterdir()]
    assert any(n.endswith("_ranges.csv") and "sub" in n for n in names)
    assert all(p.is_file() for p in (tmp_path / "out").iterdir())


REAL_EXPORTS = shared_dir("nsys_sqlite", "*.sqlite")


def _top_kernel(path: Path) -> str | None:
    """The kernel name with the most GPU time, by SQL on the export; None without a kernel table."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    sql = """SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
             GROUP BY k.demangledName ORDER BY sum(k."end" - k.start) DESC LIMIT 1"""
    try:
        return con.execute(sql).fetchone()[0]
    except sqlite3.OperationalError:  # no such table
        return None
    finally:
        con.close()


@pytest.mark.skipif(REAL_EXPORTS is None, reason="no real exports (../shared/data or tests/data/real)")
def test_report_on_real_exports_names_top_kernel(tmp_path):
    """Several real exports in one report: each one's first kernel row is the kernel SQL finds most GPU time for."""
    res = run("report", REAL_EXPORTS, "-o", tmp_path, "--format", "csv")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "report.comparison_overview.csv").is_file()
    checked = 0
    for export in sorted(REAL_EXPORTS.glob("*.sqlite")):
        top = _top_kernel(export)
        if top is not None:
            table = tmp_path / f"report.{file_key(export.name + '_top_kernels', '')}.csv"
            with table.open(newline="") as fh:
                assert next(csv.DictReader(fh))["kernel"] == top, export.name
            checked += 1
    assert checked


def test_kernels_and_nvtx_commands():
    res = run("nvtx", CPU_FIXTURE, "--format", "csv")
    assert res.exit_code == 0 and res.output.startswith("range,")


@pytest.mark.parametrize(
    "make",
    [
        lambda tmp: tmp / "missing.sqlite",
        lambda tmp: (tmp / "notes.txt", (tmp / "notes.txt").write_text("hi"))[0],
        lambda tmp: (tmp / "bad.sqlite", (tmp / "bad.sqlite").write_bytes(b"junk" * 100))[0],
        lambda tmp: (tmp / "empty", (tmp / "empty").mkdir())[0],
        lambda tmp: (tmp / "t.json", (tmp / "t.json").write_text('{"traceEvents": ['))[0],
    ],
    ids=["missing", "unknown_type", "not_sqlite", "empty_dir", "truncated_json"],
)
def test_bad_input_exit_2_one_line_nothing_written(tmp_path, make):
    src = make(tmp_path)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["report", str(src), "-o", str(out)])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), res.output
    assert "Traceback" not in res.output
    assert not out.exists() or not any(out.iterdir())


def test_nsys_rep_without_nsys_says_what_to_run(tmp_path, monkeypatch):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"NVIDIA Tegra Profiler Report 1.\n" + b"\0" * 64 + b"2025.1.1.110-123456789abc\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    res = CliRunner().invoke(cli, ["report", str(rep), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert (
        "no nsys is installed" in res.output
        and "nsys export --type sqlite" in res.output
        and "2025.1.1.110" in res.output
    )


def test_nsys_rep_newer_than_installed_nsys(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nsys").write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2022.4.2.1-df9881f'\n")
    (fake / "nsys").chmod(0o755)
    rep = tmp_path / "new.nsys-rep"
    rep.write_bytes(b"NVIDIA Tegra Profiler Report 1.\n" + b"2026.3.1.157-abcdef0\n")
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    res = CliRunner().invoke(cli, ["report", str(rep), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "made by nsys 2026.3.1.157" in res.output and "2022.4.2.1" in res.output


def _commands(group, prefix=()):
    for name, cmd in group.commands.items():
        yield (*prefix, name), cmd
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*prefix, name))


@pytest.mark.parametrize("path, cmd", list(_commands(cli)), ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_command_has_help_with_example_and_is_documented(path, cmd):
    res = run(*path, "--help")
    assert res.exit_code == 0 and len(cmd.help or "") > 40
    assert "Example" in res.output or "example" in res.output
    readme = (ROOT / "README.md").read_text()
    assert f"profiler-kit {' '.join(path)}" in readme


def test_python_dash_m_entry_point():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "profiler_kit", "--help"], capture_output=True, text=True, cwd=Path(ROOT)
    )
    assert out.returncode == 0 and "report" in out.stdout


# main() as the console entry runs it, with an exit handler registered first and, optionally, a thread still running
ENTRY = """
import atexit, sys, threading, time
atexit.register(lambda: print("exit handler ran", flush=True))
if sys.argv[1] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished", flush=True))).start()
sys.argv = ["profiler-kit", *sys.argv[2:]]
from profiler_kit.cli import main
main()
"""


@pytest.mark.parametrize("thread", ["none", "thread"])
@pytest.mark.parametrize(("args", "code"), [(["--help"], 0), (["report", "missing.sqlite"], 2), (["no-such"], 2)])
def test_the_console_entry_keeps_exit_codes_handlers_and_threads(tmp_path, thread, args, code):
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", ENTRY, thread, *args], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert out.returncode == code, out.stderr
    assert out.stdout.rstrip().endswith("exit handler ran")
    assert ("thread finished" in out.stdout) == (thread == "thread")
    if code == 2:
        assert out.stderr.count("Error") == 1


@requires_nsys
@pytest.mark.skipif(not (SHARED_DATA / "nsys_rep").is_dir(), reason="shared data absent")
def test_real_nsys_rep_is_exported_once_and_cached(tmp_path):
    src = next((SHARED_DATA / "nsys_rep").glob("*.nsys-rep"))
    rep = tmp_path / src.name
    rep.write_bytes(src.read_bytes())
    res = run("report", rep, "-o", tmp_path / "out")
    assert res.exit_code == 0, res.output
    cached = rep.with_suffix(".sqlite")
    assert cached.is_file()
    mtime = cached.stat().st_mtime_ns
    assert run("report", rep, "-o", tmp_path / "out2").exit_code == 0
    assert cached.stat().st_mtime_ns == mtime  # reused, not exported again


def test_trace_without_runtime_calls_leaves_range_gpu_columns_empty(tmp_path):
    """A trace trimmed of its CUDA runtime calls cannot tie kernels to ranges: the report says so, no zeros."""
    import gzip

    doc = json.loads(gzip.decompress((ROOT / "examples/kineto/small_ctx512_train_bf16.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("cuda_runtime", "cuda_driver")]
    src = tmp_path / "trimmed.json"
    src.write_text(json.dumps(doc))
    res = run("report", src, "-o", tmp_path / "out", "--format", "json", "--no-html")
    assert res.exit_code == 0, res.output
    out = tmp_path / "out"
    summary = json.loads(next(out.glob("*_summary.json")).read_text())["rows"][0]
    assert summary["launched_ops"] == 0 and summary["kernels"] > 0
    step = next(r for r in json.loads(next(out.glob("*_ranges.json")).read_text())["rows"] if r["range"] == "step")
    assert step["instances"] == 2 and step["kernels"] is None and step["kernel_time_ns"] is None
    res = run("report", src, "-o", tmp_path / "md", "--no-html")
    md = (tmp_path / "md" / "report.md").read_text()
    assert "records no CUDA runtime calls" in md and "have no launching CPU call" in md


def test_example_trace_projects_kernels_onto_phases(tmp_path):
    res = run("report", ROOT / "examples/kineto", "-o", tmp_path, "--format", "json", "--no-html")
    assert res.exit_code == 0, res.output
    summary = json.loads(next(tmp_path.glob("*_summary.json")).read_text())["rows"][0]
    assert summary["launched_ops"] == summary["kernels"] + summary["memops"]  # every op found its launch
    phases = {r["range"]: r for r in json.loads(next(tmp_path.glob("*_phases.json")).read_text())["rows"]}
    assert "feed forward" not in phases
    # autograd launches backward from its own thread: only the window view sees its kernels
    assert phases["backward"]["window_kernels_per_instance"] > 100 * phases["backward"]["kernels_per_instance"]
    inside = json.loads(next(tmp_path.glob("*_range_kernels.json")).read_text())["rows"]
    softmax = [r for r in inside if r["range"] == "computing softmax"]
    assert 1 <= len(softmax) <= 3 and not {r["range"] for r in inside} & set(phases)
    assert all(0 < r["share_frac"] <= 1 for r in inside)
    assert [r["total_ns"] for r in softmax] == sorted((r["total_ns"] for r in softmax), reverse=True)


def test_trace_without_kernels_still_gets_its_html_page(tmp_path):
    """The README promises report.md and report.html; with nothing to chart the page says so (and carries no plotly.js)."""
    from profiler_kit.render.html import NOTHING_TO_CHART

    res = run("report", CPU_FIXTURE, "-o", tmp_path)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.md"]
    page = (tmp_path / "report.html").read_text()
    assert NOTHING_TO_CHART in page and "Plotly.newPlot" not in page and "no GPU kernels" in page
    assert len(page) < 100_000


def test_trace_without_gpu_ops_has_no_table_of_zero_idle_gaps(tmp_path):
    """A CPU-only trace's 'Why is it slow' would hold only an idle-time table of zeros: it is left out, and the
    page says why there is nothing GPU-side to show."""
    res = run("report", CPU_FIXTURE, "-o", tmp_path)
    assert res.exit_code == 0, res.output
    md = (tmp_path / "report.md").read_text()
    assert "no GPU kernels" in md and "Why is it slow" not in md and "Idle time by cause" not in md


def test_kernel_sequence_times_carry_a_unit(tmp_path):
    """The mean time of one occurrence is shown in ms like the other times, and a sequence launched by one op
    names it once."""
    res = run(
        "report", ROOT / "examples" / "kineto" / "small_ctx512_train_bf16.json.gz", "-o", tmp_path, "--format", "json"
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(next(tmp_path.glob("*_sequences.json")).read_text())["rows"]
    assert rows and all(r["per_occurrence_ns"] * r["occurrences"] == pytest.approx(r["total_ns"]) for r in rows)
    assert not any(" -> " in r["launched_by"] and len(set(r["launched_by"].split(" -> "))) == 1 for r in rows)
    md = run("report", ROOT / "examples" / "kineto" / "small_ctx512_train_bf16.json.gz", "-o", tmp_path / "md")
    assert md.exit_code == 0 and "per occurrence (ms)" in (tmp_path / "md" / "report.md").read_text()


def test_steps_of_one_name_are_numbered_in_the_step_table(tmp_path):
    """The workloads' NVTX steps are all named "step": the per-step table numbers them in time order, so two rows
    never read the same."""
    res = run(
        "report", ROOT / "examples" / "kineto" / "small_ctx512_train_bf16.json.gz", "-o", tmp_path, "--format", "json"
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(next(tmp_path.glob("*_temporal_steps.json")).read_text())["rows"]
    assert [r["step"] for r in rows] == ["step 1", "step 2"]
    assert rows[0]["span_ns"] > 0 and rows == sorted(rows, key=lambda r: (r["pid"], r["device_id"]))


@pytest.mark.parametrize("top", [3, 50])
def test_the_by_size_note_speaks_of_a_folded_row_only_where_there_is_one(tmp_path, top):
    """The live-by-size table folds the sizes after the first ``top`` into one row without a size; its note says
    so only when that row is there (11 sizes live at the example's peak)."""
    res = run("memory", ROOT / "examples" / "memory" / "mlp_full_step_bf16.pickle.gz", "-o", tmp_path, "--top", top)
    assert res.exit_code == 0, res.output
    md = (tmp_path / "memory.md").read_text()
    section = md[md.index("Live at peak by size") :].split("Largest")[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and "---" not in line][1:]
    assert ("without a size" in section) == (top == 3)
    assert len(rows) == (top + 1 if top == 3 else 11)
