"""Batches that skip and say why, and no traceback ever: report and memory over several inputs, output
that cannot be written, --stem, Ctrl-C and standard output."""

from __future__ import annotations

import errno
import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.sources import Skipped, discover

from profiler_kit.cli import cli
from tests.conftest import FIXTURES, ROOT
from tests.memory_helpers import known_peak_snapshot, write

CPU_FIXTURE = FIXTURES / "nsys_cpu" / "cpu_nvtx.sqlite"
KINETO = ROOT / "examples" / "kineto" / "small_ctx512_train_bf16.json.gz"
TOO_NEW_REP = b"NVIDIA Tegra Profiler Report 1.\n" + b"2026.3.1.157-abcdef0\n"
ARRAY_TRACE = [{"ph": "X", "name": "k", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]


def run(*args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], **kw)


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


@pytest.fixture
def old_nsys(tmp_path, monkeypatch):
    """An nsys 2022.4 on PATH (a script that only tells its version), as Debian's."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nsys").write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2022.4.2.1-df9881f'\n")
    (fake / "nsys").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")


def mixed_folder(root: Path) -> Path:
    """Readable traces after a report too new for nsys 2022.4 and a JSON-array trace, plus sidecars."""
    folder = root / "in"
    (folder / "sub").mkdir(parents=True)
    (folder / "a_new.nsys-rep").write_bytes(TOO_NEW_REP)  # sorts first: it used to end the whole report
    (folder / "b_cpu.sqlite").write_bytes(CPU_FIXTURE.read_bytes())
    (folder / "sub" / "c_train.json.gz").write_bytes(KINETO.read_bytes())
    (folder / "d_array.json").write_text(json.dumps(ARRAY_TRACE))
    (folder / "results.json").write_text('{"step_ms": [1.0, 2.0]}')  # a result file, not a trace
    return folder


def test_folder_reports_the_readable_and_lists_the_rest(tmp_path, old_nsys):
    folder = mixed_folder(tmp_path)
    out = tmp_path / "out"
    res = run("report", folder, "-o", out, "--no-html")
    assert res.exit_code == 1, res.output
    skipped = [ln for ln in lines(res.stderr) if ln.startswith("skipped ")]
    assert [ln.split(":")[0] for ln in skipped] == [
        f"skipped {folder / 'a_new.nsys-rep'}",
        f"skipped {folder / 'd_array.json'}",
    ]
    assert "made by nsys 2026.3.1.157" in skipped[0] and "without PyTorch profiler events" in skipped[1]
    assert "Traceback" not in res.output and "Error" not in res.stderr
    md = (out / "report.md").read_text()
    assert md.index("## Skipped inputs") < md.index("## Comparison across traces")
    assert "## b_cpu.sqlite" in md and "## sub/c_train.json.gz" in md  # both reported after the bad report
    assert "2 trace(s)" in md and "results.json" not in md


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_skipped_inputs_table_as_data(tmp_path, old_nsys, fmt):
    folder = mixed_folder(tmp_path)
    res = run("report", folder, "-o", tmp_path / "out", "--format", fmt)
    assert res.exit_code == 1, res.output
    table = tmp_path / "out" / f"report.skipped_inputs.{fmt}"
    if fmt == "json":
        rows = json.loads(table.read_text())["rows"]
    else:
        import pandas as pd

        rows = pd.read_csv(table).to_dict("records")
    assert [Path(r["input"]).name for r in rows] == ["a_new.nsys-rep", "d_array.json"]
    assert rows[0]["reason"].startswith("made by nsys 2026.3.1.157") and "nsys export" in rows[0]["reason"]


def test_several_named_files_one_missing_one_unknown(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hi")
    res = run("report", CPU_FIXTURE, tmp_path / "gone.sqlite", notes, "-o", tmp_path / "out", "--no-html")
    assert res.exit_code == 1, res.output
    md = (tmp_path / "out" / "report.md").read_text()
    assert "no such file or directory" in md and "unknown file type" in md and "1 trace(s)" in md


def test_none_readable_exit_2_nothing_written(tmp_path, old_nsys):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.nsys-rep").write_bytes(TOO_NEW_REP)
    (folder / "b.sqlite").write_bytes(b"junk" * 100)
    res = run("report", folder, "-o", tmp_path / "out")
    assert res.exit_code == 2
    out = lines(res.stderr)
    assert [ln.split(":")[0] for ln in out[:2]] == [
        f"skipped {folder / 'a.nsys-rep'}",
        f"skipped {folder / 'b.sqlite'}",
    ]
    assert len(out) == 3 and out[2] == "Error: no input could be read (2 skipped, each listed above)"
    assert not (tmp_path / "out").exists()


def test_strict_stops_at_the_first_bad_input(tmp_path, old_nsys):
    folder = mixed_folder(tmp_path)
    res = run("report", folder, "-o", tmp_path / "out", "--strict")
    assert res.exit_code == 2
    assert lines(res.stderr) == [
        f"Error: {folder / 'a_new.nsys-rep'}: made by nsys 2026.3.1.157, but the installed nsys is 2022.4.2.1, "
        "which cannot read it; on a machine with nsys 2026.3 or newer, run: nsys export --type sqlite -o "
        "a_new.sqlite a_new.nsys-rep"
    ]
    assert not (tmp_path / "out").exists()


RUNS = ROOT / "benchmarks/results/attention/rec"


@pytest.mark.parametrize("damaged", ["run.json", "trace.json.gz"])
def test_record_folders_with_a_damaged_run(tmp_path, damaged):
    """A run whose run.json or trace cannot be read is listed; the other run still makes the sweep tables."""
    import shutil

    runs = sorted(p for p in RUNS.iterdir() if p.is_dir())[:2]
    for run_dir in runs:
        shutil.copytree(run_dir, tmp_path / "in" / run_dir.name)
    bad = tmp_path / "in" / runs[0].name / damaged
    bad.write_bytes(bad.read_bytes()[:100])
    res = run("report", tmp_path / "in", "-o", tmp_path / "out", "--format", "json")
    assert res.exit_code == 1, res.output
    assert [ln for ln in lines(res.stderr) if ln.startswith("skipped ")] == [
        f"skipped {bad}: {Skipped.of(bad, _error_of(bad)).reason}"
    ]
    timing = json.loads((tmp_path / "out" / "report.sweep_timing.json").read_text())["rows"]
    assert len(timing) == 1  # the other run


def _error_of(path: Path) -> InputError:
    from profiler_kit.analyze.kineto import read_kineto
    from profiler_kit.analyze.results import RUN_FIELDS, read_json_fields

    with pytest.raises(InputError) as err:
        read_kineto(path) if path.name.endswith(".gz") else read_json_fields(path, RUN_FIELDS)
    return err.value


@pytest.mark.parametrize("command, name", [("report", "t.sqlite"), ("memory", "s.pickle")])
def test_a_folder_with_one_bad_input_is_one_error(tmp_path, command, name):
    """One input found in a folder: as if named alone, its error is the command's (one line, exit 2)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_bytes(b"junk" * 100)
    res = run(command, tmp_path / "in", "-o", tmp_path / "out")
    assert res.exit_code == 2
    assert len(lines(res.output)) == 1 and lines(res.output)[0].startswith(f"Error: {tmp_path / 'in' / name}: ")
    assert not (tmp_path / "out").exists()


def test_snapshots_beside_traces_are_skipped_too(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "cpu.sqlite").write_bytes(CPU_FIXTURE.read_bytes())
    (folder / "cut.pickle").write_bytes(b"\x80\x04junk")
    res = run("report", folder, "-o", tmp_path / "out", "--no-html")
    assert res.exit_code == 1, res.output
    assert "cut.pickle" in (tmp_path / "out" / "report.md").read_text()


def test_memory_batch_skips_bad_snapshots(tmp_path):
    folder = tmp_path / "snaps"
    folder.mkdir()
    write(folder / "a_good.pickle", known_peak_snapshot())
    (folder / "b_cut.pickle").write_bytes(b"\x80\x04junk")
    write(folder / "c_weights.pickle", {"state_dict": {"w": [1.0]}})
    res = run("memory", folder, tmp_path / "gone.pickle", "-o", tmp_path / "out", "--no-html")
    assert res.exit_code == 1, res.output
    skipped = [ln for ln in lines(res.stderr) if ln.startswith("skipped ")]
    assert [Path(ln.split(":")[0].removeprefix("skipped ")).name for ln in skipped] == [
        "b_cut.pickle",
        "c_weights.pickle",
        "gone.pickle",
    ]
    md = (tmp_path / "out" / "memory.md").read_text()
    assert md.index("## Skipped inputs") < md.index("## Memory: a_good") and "1 torch.cuda.memory snapshot(s)" in md


def test_memory_batch_none_readable(tmp_path):
    (tmp_path / "b_cut.pickle").write_bytes(b"\x80\x04junk")
    res = run("memory", tmp_path / "b_cut.pickle", tmp_path / "gone.pickle", "-o", tmp_path / "out")
    assert res.exit_code == 2
    assert lines(res.stderr)[-1] == "Error: no input could be read (2 skipped, each listed above)"
    assert not (tmp_path / "out").exists()


def test_discover_reads_trace_like_json_only(tmp_path):
    """Sidecars and result files stay out; anything that claims to be a trace goes to the reader."""
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "mlp.json").write_text('{"max_memory_allocated": 1}')
    (tmp_path / "array.json").write_text(json.dumps(ARRAY_TRACE))
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(b'{"schemaVersion": 1, "traceEv')[:20])
    (tmp_path / "w0.pt.trace.json").write_text("")
    (tmp_path / "k.json").write_text('{"traceEvents": [')
    names = [s.path.name for s in discover([tmp_path])]
    assert names == ["array.json", "cut.json.gz", "k.json", "w0.pt.trace.json"]


def test_discover_hands_missing_paths_to_skip(tmp_path):
    got = []
    assert discover([tmp_path / "gone.sqlite"], skip=lambda p, e: got.append(Skipped.of(p, e))) == []
    assert got == [Skipped(str(tmp_path / "gone.sqlite"), "no such file or directory")]
    with pytest.raises(InputError, match="no such file"):
        discover([tmp_path / "gone.sqlite"])


# ---- output that cannot be written: one line, exit 3, nothing left behind


@pytest.mark.parametrize("command, src", [("report", CPU_FIXTURE), ("memory", FIXTURES / "memory")])
@pytest.mark.parametrize("where", ["file", "under_file"])
def test_output_folder_is_a_file(tmp_path, command, src, where):
    blocker = tmp_path / "passwd"
    blocker.write_text("root:x:0:0\n")
    out = blocker if where == "file" else blocker / "x"
    res = run(command, src, "-o", out)
    assert res.exit_code == 3, res.output
    assert lines(res.output) == [
        f"Error: {'' if where == 'file' else f'cannot write to {out}: '}{blocker} is a file, not a folder"
    ]
    assert blocker.read_text() == "root:x:0:0\n"


def _failing(monkeypatch, err: int):
    def mkstemp(*args, **kwargs):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr("profiler_kit.output.tempfile.mkstemp", mkstemp)


@pytest.mark.parametrize("err", [errno.EROFS, errno.EACCES])
def test_read_only_or_forbidden_output(tmp_path, monkeypatch, err):
    _failing(monkeypatch, err)
    out = tmp_path / "new" / "deeper"
    res = run("report", CPU_FIXTURE, "-o", out, "--no-html")
    assert res.exit_code == 3
    assert lines(res.output) == [f"Error: cannot write to {out}: {os.strerror(err)}"]
    assert not (tmp_path / "new").exists()  # the folders it made are gone again


def test_read_only_output_found_before_the_work(tmp_path, monkeypatch):
    _failing(monkeypatch, errno.EROFS)
    real = os.access
    monkeypatch.setattr("os.access", lambda path, mode, **kw: False if mode & os.W_OK else real(path, mode, **kw))

    def never(*args, **kwargs):
        raise AssertionError("analysed although the output cannot be written")

    monkeypatch.setattr("profiler_kit.build.analyze_sources", never)
    res = run("report", CPU_FIXTURE, "-o", tmp_path / "out")
    assert res.exit_code == 3 and lines(res.output) == [
        f"Error: cannot write to {tmp_path / 'out'}: Read-only file system"
    ]


class _FullDisk:
    """os.fdopen whose files raise ``exc`` on the ``nth`` write (a disk that fills up, a Ctrl-C)."""

    def __init__(self, exc, nth=2):
        self.exc, self.nth, self.calls, self.real = exc, nth, 0, os.fdopen

    def __call__(self, fd, *args, **kwargs):
        fh = self.real(fd, *args, **kwargs)
        self.calls += 1
        if self.calls == self.nth:
            exc = self.exc

            def write(data):
                fh.raw.write(data[: len(data) // 2])  # half of it reached the disk
                raise exc

            fh.write = write
        return fh


@pytest.mark.parametrize(
    "exc, code, line",
    [
        (OSError(errno.ENOSPC, "No space left on device"), 3, "Error: cannot write to {out}: No space left on device"),
        (KeyboardInterrupt(), 130, "Error: interrupted (Ctrl-C)"),
    ],
    ids=["full_disk", "ctrl_c"],
)
def test_failed_write_leaves_the_old_report_whole(tmp_path, monkeypatch, exc, code, line):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("old report\n")
    monkeypatch.setattr("os.fdopen", _FullDisk(exc))
    res = run("report", KINETO, "-o", out)  # report.md, then report.html: the second write fails
    assert res.exit_code == code, res.output
    assert lines(res.output) == [line.format(out=out)]
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]  # no temporary files, no new report.html
    assert (out / "report.md").read_text() == "old report\n"


@pytest.fixture
def sigint_raises():
    """Ctrl-C raises KeyboardInterrupt here even where the test process was started with SIGINT ignored
    (a background job of a non-interactive shell)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _sigint_default():
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the child installs Python's own handler over this


def test_ctrl_c_while_renaming_keeps_the_report_whole(tmp_path, monkeypatch, sigint_raises):
    """Ctrl-C between two renames waits until every file is in place: never half the new report."""
    out = tmp_path / "out"
    real = os.replace

    def replace(src, dst):
        os.kill(os.getpid(), signal.SIGINT)
        real(src, dst)

    monkeypatch.setattr("os.replace", replace)
    res = run("report", KINETO, "-o", out)
    assert res.exit_code == 130 and lines(res.output) == ["Error: interrupted (Ctrl-C)"]
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.md"]
    assert (out / "report.md").read_text().startswith("# profiler-kit report")


@pytest.mark.parametrize("stem", ["../escaped", "a/b", "..", ".", "", "/abs"])
def test_stem_must_be_a_plain_name(tmp_path, stem):
    out = tmp_path / "out"
    res = run("report", CPU_FIXTURE, "-o", out, "--stem", stem)
    assert res.exit_code == 2
    assert len(lines(res.output)) == 1 and lines(res.output)[0].startswith(f"Error: --stem {stem!r}: give a plain")
    assert not out.exists() and not (tmp_path / "escaped.md").exists()


def test_stem_with_dots_is_fine(tmp_path):
    res = run("report", CPU_FIXTURE, "-o", tmp_path, "--stem", "run.v2", "--no-html")
    assert res.exit_code == 0 and (tmp_path / "run.v2.md").is_file()


# ---- Ctrl-C: one line, exit 130, nothing written


def test_ctrl_c_during_the_analysis(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("profiler_kit.build.analyze_sources", interrupted)
    res = run("report", CPU_FIXTURE, "-o", tmp_path / "out")
    assert res.exit_code == 130 and lines(res.output) == ["Error: interrupted (Ctrl-C)"]
    assert not (tmp_path / "out").exists()


def test_ctrl_c_hidden_in_a_reader_error_is_not_a_skipped_input(tmp_path, monkeypatch):
    """A reader whose cleanup fails while Ctrl-C passes raises its own error: still Ctrl-C, not a skip."""

    def read(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise InputError("x.sqlite: corrupt or truncated SQLite file (cannot close)") from None

    monkeypatch.setattr("profiler_kit.analyze.sources.read_trace", read)
    res = run("report", CPU_FIXTURE, KINETO, "-o", tmp_path / "out")
    assert res.exit_code == 130 and lines(res.output) == ["Error: interrupted (Ctrl-C)"]


SLOW_REPORT = """
import sys, time
import profiler_kit.build as build
def slow(*args, **kwargs):
    print("analysing", file=sys.stderr, flush=True)
    time.sleep(60)
build.analyze_sources = slow
sys.argv = ["profiler-kit", *sys.argv[1:]]
from profiler_kit.cli import main
main()
"""


def test_sigint_to_a_running_report(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_REPORT, "report", str(CPU_FIXTURE), "-o", str(out)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_sigint_default,
    )
    assert proc.stderr.readline() == "analysing\n"
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130 and lines(rest) == ["Error: interrupted (Ctrl-C)"]
    assert not out.exists()


# ---- standard output


STDOUT_COMMANDS = {
    "kernels": ["kernels", str(KINETO), "--format", "json"],
    "help": ["--help"],
    "report_help": ["report", "--help"],
    "version": ["--version"],
}


def _printing(stdout, args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "profiler_kit", *args]
    return subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, timeout=120)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", STDOUT_COMMANDS.values(), ids=STDOUT_COMMANDS)
def test_stdout_on_a_full_disk(args):
    with open("/dev/full", "w") as full:
        proc = _printing(full, args)
    assert proc.returncode == 3
    assert lines(proc.stderr) == ["Error: cannot write to standard output: No space left on device"]


@pytest.mark.parametrize("args", STDOUT_COMMANDS.values(), ids=STDOUT_COMMANDS)
def test_stdout_reader_gone_is_quiet(args):
    read, write_end = os.pipe()
    os.close(read)  # like `| head` once it has its lines
    try:
        proc = _printing(write_end, args)
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and proc.stderr == ""


@pytest.mark.parametrize("command", ["report", "memory"])
def test_help_documents_exit_codes(command):
    res = run(command, "--help")
    assert res.exit_code == 0
    text = res.output
    assert "Exit status:" in text and "--strict" in text
    for code in ("0", "1", "2", "3", "130"):
        assert f"\n  {code} " in text.replace("    ", "  ")
