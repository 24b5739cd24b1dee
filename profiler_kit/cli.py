"""The ``profiler-kit`` command line: thin click commands over library functions.

Every command opens its inputs, calls one library function and writes the
result. Bad input raises ``analyze.InputError``, shown as one line on stderr
with exit code 2; output that cannot be written is one line and exit code 3,
Ctrl-C one line and 130 (EXIT_CODES). With several inputs, ``report`` and
``memory`` list each one they cannot read and report the rest (exit code 1).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from profiler_kit import process
from profiler_kit.process import importing

process.tune_environment()  # before numpy and pyarrow are imported: profiler_kit/process.py

try:
    with importing():
        import click

        from profiler_kit.analyze.errors import InputError
except KeyboardInterrupt:  # Ctrl-C while the command starts: the line and exit code of later (Interrupted)
    sys.stderr.write("Error: interrupted (Ctrl-C)\n")
    raise SystemExit(130) from None

SKIPPED, BAD_INPUT, CANNOT_WRITE, INTERRUPTED, CLOSED_PIPE = 1, 2, 3, 130, 141
EXIT_CODES = f"""\b
Exit status:
  0    every input was reported
  {SKIPPED}    some inputs could not be read: listed on stderr and in the report
  {BAD_INPUT}    no input could be read, bad usage, or (--strict) a bad input
  {CANNOT_WRITE}    the output could not be written (not a folder, read-only, full)
  {INTERRUPTED}  interrupted (Ctrl-C); no file is left half-written"""


class BadInput(click.ClickException):
    """An InputError as click shows it: ``Error: <message>``, exit code 2."""

    exit_code = BAD_INPUT


class CannotWrite(click.ClickException):
    """Output that cannot be written (an OutputError, standard output): ``Error: <message>``, exit code 3."""

    exit_code = CANNOT_WRITE


class Interrupted(click.ClickException):
    """Ctrl-C: one line instead of click's "Aborted!" (exit 1), exit code 130 as a shell gives a killed command."""

    exit_code = INTERRUPTED

    def __init__(self):
        super().__init__("interrupted (Ctrl-C)")


HELP_TERM_WIDTH = 30  # click's widest option column (HelpFormatter.write_dl's col_max)


class SectionedCommand(click.Command):
    """A command whose ``--help`` lists its options under titled sections (``sections``: title -> parameter names),
    so a reader finds the ones of one workload together; options no section names come last, as "Other options"."""

    def __init__(self, *args, sections: dict[str, tuple[str, ...]], **kwargs):
        super().__init__(*args, **kwargs)
        unknown = {n for names in sections.values() for n in names} - {p.name for p in self.params} - {"help"}
        if unknown:
            raise ValueError(f"{self.name}: sections name no such option: {', '.join(sorted(unknown))}")
        self.sections = sections

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx)}
        placed = {n for names in self.sections.values() for n in names}
        groups = [(title, [rows[n] for n in names if rows[n]]) for title, names in self.sections.items()]
        groups.append(("Other options", [row for n, row in rows.items() if row and n not in placed]))
        # one column for the help text in every section, as click's single list would have it
        width = min(max(len(term) for term, _ in filter(None, rows.values())), HELP_TERM_WIDTH)
        for title, records in groups:
            if records:
                with formatter.section(title):
                    formatter.write_dl([(term.ljust(width), text) for term, text in records], col_max=width)


def caused_by_ctrl_c(err: BaseException) -> bool:
    """Did Ctrl-C set off ``err``? A reader's cleanup can fail while a KeyboardInterrupt passes through it
    (the SQLite driver: "cannot close, exported pointers exist"), and its error must not hide the Ctrl-C."""
    stack, seen = [err], set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        stack += [e.__cause__, e.__context__]
    return False


class Parsing:
    """Parsing the command line, --help and --version: Ctrl-C, and their output to a closed pipe or a full
    disk, end as they do in the commands (one line, documented exit code)."""

    def make_context(self, *args, **kwargs):
        try:
            with writing_stdout():
                return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            raise Interrupted() from None


class Command(Parsing, click.Command):
    """A command of the group (see Parsing)."""


class Group(Parsing, click.Group):
    """Turns library InputErrors (and unreadable files) and Ctrl-C into one-line errors."""

    command_class = Command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (InputError, MemoryError, RecursionError) as err:
            if caused_by_ctrl_c(err):
                raise Interrupted() from None
            if isinstance(err, InputError):
                raise BadInput(str(err)) from None
            raise BadInput(f"input too large or too deeply nested to read: {type(err).__name__}") from None
        except KeyboardInterrupt:
            raise Interrupted() from None


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="profiler-kit")
def cli():
    """Answer "where do my GPU time and memory go?" from PyTorch profiles.

    Reads Nsight Systems exports (.sqlite, .nsys-rep), PyTorch profiler traces
    (.json, .json.gz) and torch.cuda.memory snapshots (.pickle), and writes
    markdown reports with interactive HTML charts.

    Example: profiler-kit report examples/ -o reports/example

    Exit status: 0 done; 1 some inputs skipped (report and memory, listed on
    stderr); 2 bad input or usage; 3 output not written; 130 Ctrl-C; 141 the
    reader of standard output went away (| head), quietly.
    """


def main() -> None:
    """The console entry (``profiler-kit``, ``python -m profiler_kit``): the CLI, then a quick exit."""
    process.run_and_exit(_cli_or_interrupted)


def _cli_or_interrupted() -> None:
    """The CLI; Ctrl-C outside a command (click's own handling would say "Aborted!") is one line and exit 130."""
    try:
        cli(prog_name="profiler-kit")
    except KeyboardInterrupt:
        with contextlib.suppress(OSError, ValueError):
            click.echo(f"Error: {Interrupted().message}", err=True)
        raise SystemExit(INTERRUPTED) from None


def progress(items, label: str):
    """A progress bar on stderr; silent when stderr is not a terminal (logs, CI, pipes)."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext(items)
    return click.progressbar(items, label=label, file=sys.stderr, show_pos=True)


class _NoBar:
    def update(self, n: int) -> None:
        pass


def progress_bar(length: int, label: str, shown: bool = True):
    """A progress bar of ``length`` steps (``.update(n)``) on stderr; silent when stderr is not a terminal, or
    not ``shown`` (--no-progress)."""
    if not shown or not sys.stderr.isatty():
        return contextlib.nullcontext(_NoBar())
    return click.progressbar(length=length, label=label, file=sys.stderr, show_pos=True)


class WindowProgress:
    """One progress bar over the time windows of an export read in windows, opened once their number is known
    (none with ``shown`` false: --no-progress)."""

    def __init__(self, shown: bool = True):
        self.shown = shown
        self.bar, self.opened, self.done = None, None, 0

    def __call__(self, done: int, windows: int) -> None:
        if self.opened is None:
            self.opened = progress_bar(windows, "Windows", self.shown)
            self.bar, self.done = self.opened.__enter__(), 0
        self.bar.update(done - self.done)
        self.done = done
        if done == windows:
            self.opened.__exit__(None, None, None)
            self.opened = None


def echo_written(paths: list[Path]) -> None:
    """Tell the user where the output went (stderr, so stdout stays pipeable)."""
    for p in paths:
        click.echo(f"wrote {p}", err=True)


def writable(out_dir: Path) -> Path:
    """``out_dir`` if a report can be written there (checked before the work, one line and exit 3 if not)."""
    from profiler_kit.output import OutputError, check_out_dir

    try:
        return check_out_dir(out_dir)
    except OutputError as err:
        raise CannotWrite(str(err)) from None


def write_report(out_dir: Path, files: dict[str, str | bytes]) -> None:
    """Write the files all or nothing (``output.write_files``) and say where; one line and exit 3 if that fails."""
    from profiler_kit.output import OutputError, write_files

    try:
        echo_written(write_files(out_dir, files))
    except OutputError as err:
        raise CannotWrite(str(err)) from None


def say_cached(writer) -> None:
    """Wait for the cache writes of ``writer`` (a ``trace_cache.CacheWriter``, or None) and say where they went."""
    for folder in writer.finish() if writer is not None else ():
        click.echo(f"cached tables for the next report in {folder} (--no-cache: none)", err=True)


@contextlib.contextmanager
def writing_stdout():
    """Around writes to standard output: a reader that went away (``| head``) ends the command quietly with
    exit code 141; any other failure (a full disk) is one line and exit code 3, never a traceback."""
    try:
        yield
    except OSError as err:
        with contextlib.suppress(OSError, ValueError):  # what is still buffered goes nowhere, not to a traceback
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        if isinstance(err, BrokenPipeError):
            raise click.exceptions.Exit(CLOSED_PIPE) from None
        raise CannotWrite(f"cannot write to standard output: {err.strerror or err}") from None


def plain_stem(ctx, param, value: str) -> str:
    """--stem: a plain file-name stem, so every output file lands in the output folder."""
    if value in ("", ".", "..") or any(sep and sep in value for sep in ("/", os.sep, os.altsep, "\0")):
        raise BadInput(f"--stem {value!r}: give a plain file name without '/' (like 'report'); -o picks the folder")
    return value


class Skips:
    """Inputs a batch cannot read: each said in one line on stderr, listed in the report, and counted.

    Strict (--strict, or a single input): the first one is the command's error instead (exit 2).
    """

    def __init__(self, strict: bool):
        self.strict = strict
        self.skipped = []

    def __call__(self, path: Path, err: BaseException) -> None:
        from profiler_kit.analyze.sources import Skipped

        if caused_by_ctrl_c(err):
            raise KeyboardInterrupt
        if self.strict:
            if isinstance(err, OSError):
                raise InputError(f"{path}: {err.strerror or err}") from None
            raise err
        row = Skipped.of(path, err)
        self.skipped.append(row)
        click.echo(f"skipped {row.path}: {row.reason}", err=True)

    def nothing_read(self) -> InputError:
        """The error when every input was skipped."""
        return InputError(f"no input could be read ({len(self.skipped)} skipped, each listed above)")

    def finish(self) -> None:
        """Exit code 1 when inputs were skipped (the report of the others is written)."""
        if self.skipped:
            click.echo(f"{len(self.skipped)} input(s) skipped (listed above and in the report)", err=True)
            raise click.exceptions.Exit(SKIPPED)


def with_exit_codes(fn):
    """Ends the command's help with EXIT_CODES (put it under the other decorators)."""
    fn.__doc__ = fn.__doc__.rstrip() + "\n\n" + "\n".join("    " + line for line in EXIT_CODES.splitlines()) + "\n"
    return fn


RUN_TRACES = ("trace.json.gz", "trace.sqlite")  # what build_sweep.read_run_trace reads in a record folder


def readable_runs(run_dirs: list[Path], skips: Skips) -> list[Path]:
    """The record folders the sweep tables can use: run.json readable (else a skipped input) and the trace
    not skipped already (the sweep tables read both again; a run whose trace failed is left out of them)."""
    from profiler_kit.analyze.errors import READ_ERRORS
    from profiler_kit.build_sweep import load_runs

    failed = {Path(s.path).parent for s in skips.skipped if Path(s.path).name in RUN_TRACES}
    keep = []
    for d in run_dirs:
        if d in failed:
            continue
        try:
            load_runs([d])
        except READ_ERRORS as err:
            skips(d / "run.json", err)
            continue
        keep.append(d)
    return keep


def strict_option(fn):
    """--strict: stop at the first input that cannot be read."""
    return click.option(
        "--strict",
        is_flag=True,
        help="Stop at the first input that cannot be read (exit 2) instead of listing it and going on.",
    )(fn)


def parallel_options(fn):
    """--workers, --scheduler and --progress: where the per-input work runs (``profiler_kit.parallel``), and a
    bar of the inputs done."""
    fn = click.option(
        "--no-progress",
        "progress",
        flag_value=False,
        default=True,
        help="No progress bar. Without it, a terminal's stderr shows one of the inputs done, moved as each input's "
        "task finishes (none when stderr is not a terminal).",
    )(fn)
    fn = click.option(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="Run the per-input work on a running Dask cluster (tcp://host:8786, from `dask scheduler`); its "
        "workers must see the inputs at the same paths (a shared filesystem); --workers is then not used.",
    )(fn)
    return click.option(
        "--workers",
        type=click.IntRange(min=1),
        default=None,
        help="Processes that read and analyse the inputs at once: this one and N-1 more on a local Dask cluster; 1 "
        "reads them here, one after another [default: one per core for several inputs of 256 MiB or more in all, "
        "else 1].",
    )(fn)


def session(paths: list, workers: int | None, scheduler: str | None):
    """Where the per-input work runs (``parallel.Session``): --scheduler, else --workers, else the default for
    ``paths`` (``parallel.default_workers``)."""
    from profiler_kit.parallel import Session, default_workers

    return Session(default_workers(paths) if workers is None and scheduler is None else workers or 1, scheduler)


def forkserver_soon(workers: int | None, scheduler: str | None) -> None:
    """With --workers N > 1, start the local cluster's forkserver now, its imports beside this command's
    (``parallel.start_forkserver``)."""
    if scheduler is None and workers is not None and workers > 1:
        from profiler_kit.parallel import start_forkserver

        start_forkserver()


def single_file(paths) -> bool:
    """One file named: its error is the command's (one Error line, exit 2), as with --strict."""
    return len(paths) == 1 and not Path(paths[0]).is_dir()


def format_option(help: str):
    """--format: md, csv or json."""
    choice = click.Choice(["md", "csv", "json"])
    return click.option("--format", "fmt", type=choice, default="md", show_default=True, help=help)


def output_options(
    default_stem: str, default_folder: str = "reports/<name of the input>, reports/comparison for several"
):
    """The flags every report-writing command shares; ``default_folder`` says where output goes without -o
    (what the command's own default is, so its help names one folder)."""

    def wrap(fn):
        fn = click.option(
            "-o",
            "--output",
            "--out",
            "out_dir",
            type=click.Path(path_type=Path),
            default=None,
            help=f"Folder for the output files [default: {default_folder}].",
        )(fn)
        fn = format_option("md: one markdown report; csv/json: one file per table, raw units (ns, bytes, fractions).")(
            fn
        )
        fn = click.option("--no-html", is_flag=True, help="Skip the interactive HTML charts file.")(fn)
        fn = click.option("--top", type=click.IntRange(1), default=15, show_default=True, help="Rows in top-N tables.")(
            fn
        )
        fn = click.option(
            "--stem",
            default=default_stem,
            show_default=True,
            callback=plain_stem,
            help="Base name of the output files (a plain file name).",
        )(fn)
        return fn

    return wrap


def charts_wanted(no_html: bool) -> bool:
    """False with --no-html, and (with a one-line warning) when plotly is not installed."""
    if no_html:
        return False
    from profiler_kit.render.html import plotly_available

    if plotly_available():
        return True
    click.echo("Warning: plotly is not installed (pip install plotly), so no charts (.html) are written", err=True)
    return False


MEMORY_DIR, DIFF_DIR = Path("reports/memory"), Path("reports/diff")  # memory's and diff's output without -o


def default_out_dir(paths: tuple[str, ...]) -> Path:
    """reports/<name of the single input>, or reports/comparison for several."""
    if len(paths) == 1:
        p = Path(paths[0]).resolve()
        name = p.name if p.is_dir() else p.name.split(".")[0]
        return Path("reports") / (name or "report")
    return Path("reports") / "comparison"


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@output_options("report")
@click.option(
    "--no-cache",
    is_flag=True,
    help="Neither read nor write the Arrow copy of a big export (.<name>.profiler-kit-cache/ beside it).",
)
@click.option(
    "--window",
    is_flag=True,
    help="Read each nsys SQLite export a time window at a time (memory bounded by the window, not the export); "
    "automatic for an export larger than a fifth of the memory available. Leaves out what needs the whole trace "
    "at once (the diagnosis and the per-rank table) and says so. With --workers N (N > 1) or --scheduler, the "
    "windows of each such export are Dask tasks, shared by the workers.",
)
@click.option("--window-rows", type=click.IntRange(min=1), default=None, hidden=True)
@click.option(
    "--tmp",
    "scratch",
    type=click.Path(exists=True, file_okay=False, writable=True, path_type=str),
    default=None,
    metavar="DIR",
    help="Folder for the spill files of an export read in windows (about 50 bytes a row, removed at the end) "
    "[default: the system's temporary folder]. With --scheduler the workers read them: a folder every worker "
    "sees at the same path (a shared filesystem).",
)
@strict_option
@parallel_options
@with_exit_codes
def report(
    paths,
    out_dir,
    fmt,
    no_html,
    top,
    stem,
    no_cache,
    strict,
    window,
    window_rows,
    scratch,
    workers,
    scheduler,
    progress,
):
    """Kernel, category and NVTX-range breakdowns of nsys exports and PyTorch traces.

    PATHS are files (.sqlite, .nsys-rep, .qdrep, .json, .json.gz, and memory
    snapshots .pickle) or folders, searched recursively. Folders left by
    `profiler-kit record`/`sweep` (a run.json per run) add the sweep tables:
    phase times per size x context, top kernel per cell, GEMM share, softmax vs
    attention matmuls, fp32 vs bf16, profiling overhead, achieved GEMM TFLOP/s
    and MFU against the GPU's calibrated ceilings (calibration.json). Writes <stem>.md and <stem>.html (charts) to the
    output folder; with --format csv/json, one <stem>.<table>.<fmt> per table.
    Several traces also get comparison tables; --workers N reads and analyses
    them in N processes at once, --scheduler on a running Dask cluster. An
    export over 32 MiB leaves an Arrow copy of its tables in a hidden folder
    beside it, which makes the next report on the unchanged file faster
    (--no-cache: neither read nor write it).

    A file that cannot be read (damaged, or an .nsys-rep too new for the
    installed nsys) is said in one line on stderr and listed in a "Skipped
    inputs" table; the others are reported. With a single input (named or
    found), or --strict, it is an error instead.

    Example: profiler-kit report outputs/nsys/ -o reports/nsys
    """
    process.tune_report()  # before numpy is imported: profiler_kit/process.py
    forkserver_soon(workers, scheduler)
    prefetched = None
    from profiler_kit.analyze.windowing import WINDOW_ROWS, Windowing

    windowing = Windowing(window, window_rows or WINDOW_ROWS, WindowProgress(progress), scratch)
    one_windowed = len(paths) == 1 and Path(paths[0]).is_file() and windowing.applies(Path(paths[0]))
    if len(paths) == 1 and scheduler is None and not one_windowed:  # one big export: its reading starts now
        with importing():  # the early read imports numpy before it forks its reader
            from profiler_kit.analyze.trace_cache import prefetch_one

            prefetched = prefetch_one(Path(paths[0]), cache=not no_cache)
    with importing():
        from profiler_kit.analyze.sources import TRACE_KINDS, discover
        from profiler_kit.analyze.trace_cache import CacheWriter
        from profiler_kit.build import analyze_sources, build_report
        from profiler_kit.build_sweep import build_sweep_sections, find_run_dirs
        from profiler_kit.output import render_report_files

    out_dir = writable(out_dir or default_out_dir(paths))
    skips = Skips(strict or single_file(paths))
    sources = discover(list(paths), skip=skips)
    skips.strict |= len(sources) == 1 and not skips.skipped  # one input found: its error is the command's
    traces = [s for s in sources if s.kind in TRACE_KINDS]
    snapshots = [s.path for s in sources if s.kind == "memory-snapshot"]
    if not traces and not snapshots and not skips.skipped:
        raise InputError(f"no traces or memory snapshots found in {', '.join(paths)}")
    writer = None if no_cache else CacheWriter()
    with (
        progress_bar(len(traces), "Analysing", progress) as bar,
        session([s.path for s in traces], workers, scheduler) as run,
    ):
        results = analyze_sources(
            traces,
            paths,
            on_each=lambda _: bar.update(1),
            cache=writer,
            skip=skips,
            session=run,
            prefetched=prefetched,
            window=windowing,
            top=top,
            markdown=fmt == "md",
        )
    for path, reason in windowing.refused.items():
        click.echo(f"{path}: read whole, not in time windows ({reason})", err=True)
    loaded = []
    if snapshots:
        from profiler_kit.build_memory import load_snapshots, memory_sections

        loaded = load_snapshots(snapshots, skip=skips)
    if not results and not loaded:
        raise skips.nothing_read()
    run_dirs = readable_runs(find_run_dirs(paths), skips)
    extra = build_sweep_sections(run_dirs, roots=paths) if run_dirs else []
    if loaded:
        extra += memory_sections(loaded, top=top)
    rep = build_report(results, top=top, extra=extra, skipped=skips.skipped)
    files = render_report_files(rep, stem, fmt, html=charts_wanted(no_html))
    write_report(out_dir, files)
    say_cached(writer)
    skips.finish()


def _read_one(path: str, details: bool = False):
    """The Trace of one trace file (``details``: launch shapes and short kernel names too)."""
    with importing():
        from profiler_kit.analyze.sources import Source, kind_of, read_trace

    kind = kind_of(Path(path))
    if kind not in ("nsys-sqlite", "nsys-report", "kineto"):
        raise InputError(f"{path}: not a trace file (.sqlite, .nsys-rep, .qdrep, .json[.gz])")
    return read_trace(Source(Path(path), kind), details=details)


def _one_trace(path: str):
    with importing():
        from profiler_kit.analyze.breakdown import analyze_trace

    return analyze_trace(_read_one(path))


def _print_table(df, fmt: str) -> None:
    from profiler_kit.render.markdown import render_table_md

    with writing_stdout():
        if fmt == "csv":
            click.echo(df.to_csv(index=False), nl=False)
        elif fmt == "json":
            click.echo(df.to_json(orient="records", indent=1))
        else:
            click.echo(render_table_md(df))


# the printing commands' (kernels, nvtx, api) output format
table_format_option = format_option("Markdown table, or CSV/JSON in raw units (ns, bytes).")


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--top", type=click.IntRange(1), default=20, show_default=True, help="Rows to print.")
@table_format_option
@click.option("--by-shape", is_flag=True, help="One row per kernel name, grid and block, as nsys gpukernsum.")
@click.option(
    "--base",
    is_flag=True,
    help="Group by the short (base) kernel name, as nsys gpukernsum:base (Kineto records one name: the same).",
)
def kernels(path, top, fmt, by_shape, base):
    """Print the kernels of one trace by total GPU time (like nsys gpukernsum).

    Count, total, average, median, minimum, maximum and (sample) standard deviation of
    the launches' GPU time per demangled kernel name; --by-shape splits each name by
    grid and block dimensions and --base groups by short names, as gpukernsum's
    rows and its :base option.

    Example: profiler-kit kernels run.sqlite --top 10 --by-shape
    """
    if not (by_shape or base):
        _print_table(_one_trace(path)["kernels"].head(top), fmt)
        return
    with importing():
        from profiler_kit.analyze.breakdown import summarize_kernel_shapes

    trace = _read_one(path, details=True)
    name = "name" if base else "demangled_name"
    _print_table(summarize_kernel_shapes(trace.kernels, name=name, by_shape=by_shape, top=top), fmt)


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--top", type=click.IntRange(1), default=30, show_default=True, help="Rows to print.")
@table_format_option
def nvtx(path, top, fmt):
    """Print the NVTX ranges of one trace with their CPU time and projected GPU time.

    Per range name: instances and CPU time (total, average, median, minimum, maximum,
    standard deviation, as nsys nvtxsum), the projected GPU span, and the distinct kernels
    launched inside (each once per name, as nvtxkernsum) with their time by category.
    A row with an empty name holds the kernels launched outside every range; it is
    printed whatever --top.

    Example: profiler-kit nvtx run.sqlite --format csv
    """
    ranges = _one_trace(path)["ranges"]
    outside = ranges["range"].isna().to_numpy()
    if outside[top:].any():  # the unnamed row (last by CPU time) replaces the last one shown
        shown = ranges[(ranges.index < top - 1) | outside]
    else:
        shown = ranges.head(top)
    _print_table(shown, fmt)


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--top", type=click.IntRange(1), default=20, show_default=True, help="Rows to print.")
@table_format_option
def api(path, top, fmt):
    """Print the CUDA API calls (runtime and driver) of one trace by total CPU time (like nsys cudaapisum).

    Per function: calls, total, average, median, minimum, maximum and (sample) standard
    deviation of their duration, and the share of all API time. Kineto traces give their
    cuda_runtime and cuda_driver events.

    Example: profiler-kit api run.sqlite --top 10
    """
    with importing():
        from profiler_kit.analyze.api import summarize_api

    table = summarize_api(_read_one(path).runtime, top=top)
    if table.empty:
        click.echo(f"{path}: no CUDA API calls recorded", err=True)
    _print_table(table, fmt)


@cli.command()
@click.argument("snapshots", nargs=-1, required=True, type=click.Path(path_type=Path))
@output_options("memory", str(MEMORY_DIR))
@strict_option
@with_exit_codes
@click.option("--label", "labels", multiple=True, help="Name of each snapshot, in order (one per file found).")
def memory(snapshots, out_dir, fmt, no_html, top, stem, strict, labels):
    """Explain peak GPU memory from torch.cuda.memory snapshots (.pickle, .pkl, .pickle.gz).

    Replays each snapshot's allocation trace: peak allocated and reserved and
    when, what is live at the peak by category, source line and size, the
    largest allocations, segments at dump time, and an interactive timeline.
    Several snapshots also get a comparison table (size, ctx, mode, precision
    from a run.json / <stem>.json beside the file; names from --label, else
    the run id there, else the file name). Directories
    are searched recursively. Snapshots are read without running code.

    Writes <stem>.md and <stem>.html (default stem "memory", default folder
    reports/memory); with --format csv/json, one <stem>.<table>.<fmt> per table.
    A snapshot that cannot be read is said in one line on stderr and listed in
    a "Skipped inputs" table; the others are reported. With a single
    snapshot (named or found), or --strict, it is an error instead.

    Example: profiler-kit memory runs/xl_ctx512_full_step_bf16.pickle -o reports/mem
    """
    with importing():
        from profiler_kit.build_memory import build_memory_report, find_snapshots, load_snapshots
        from profiler_kit.output import render_report_files

    out_dir = writable(out_dir or MEMORY_DIR)
    paths = find_snapshots(list(snapshots))
    if not paths:
        raise InputError(f"no snapshot files (*.pickle, *.pkl, *.pickle.gz) under {', '.join(map(str, snapshots))}")
    skips = Skips(strict or len(paths) == 1)  # one snapshot: its error is the command's
    loaded = load_snapshots(paths, list(labels) or None, skip=skips)
    if not loaded:
        raise skips.nothing_read()
    report = build_memory_report(loaded, top=top, skipped=skips.skipped)
    files = render_report_files(report, stem, fmt, html=charts_wanted(no_html))
    write_report(out_dir, files)
    skips.finish()


RECORD_SIZES = ("tiny", "small", "medium", "large", "xl", "2.7B")


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


MODES = click.Choice(["forward", "forward_backward", "train"])
PRECISIONS = click.Choice(["fp32", "bf16", "fp16"])

# record's options by the workloads they apply to (its --help shows them so)
RECORD_SECTIONS = {
    "Common options": ("mode", "precision", "compile_", "batch", "steps", "warmup", "device", "out_dir", "help"),
    "WORKLOAD tiny ... 2.7B (a Transformer)": ("ctx", "attention", "fused_adamw"),
    "WORKLOAD attention (one attention layer)": ("impl", "seq", "d_head", "heads"),
    "WORKLOAD ddp (data-parallel; of the others it takes --ctx --batch --steps --warmup --device -o)": (
        "variant",
        "bucket_mb",
        "nproc",
        "sharded",
        "ddp_size",
    ),
    "Profiling": ("backend", "memory", "calibrate"),
}


def backend_option(default: str, help: str):
    """--backend of record and sweep."""
    choice = click.Choice(["auto", "nsys", "torch", "none"])
    return click.option("--backend", type=choice, default=default, show_default=True, help=help)


def runs_folder_option(default: Path, help: str):
    """-o/--out-dir of record and sweep: the folder their run folders go into."""
    return click.option(
        "-o", "--out-dir", type=click.Path(path_type=Path), default=default, show_default=True, help=help
    )


def steps_options(per: str = ""):
    """--steps and --warmup of record and sweep (``per``: " per cell")."""

    def wrap(fn):
        fn = click.option(
            "--warmup", type=click.IntRange(0), default=5, show_default=True, help=f"Warm-up steps{per}."
        )(fn)
        return click.option(
            "--steps", type=click.IntRange(1), default=10, show_default=True, help=f"Timed (and profiled) steps{per}."
        )(fn)

    return wrap


@cli.command(cls=SectionedCommand, sections=RECORD_SECTIONS)
@click.argument("workload", metavar="WORKLOAD")
@click.option(
    "--mode", type=MODES, default="train", show_default=True, help="What each step runs (train adds the optimizer)."
)
@click.option("--precision", type=PRECISIONS, default="fp32", show_default=True, help="fp32, or bf16/fp16 autocast.")
@click.option("--compile", "compile_", is_flag=True, help="torch.compile the model.")
@click.option("--batch", type=click.IntRange(1), default=None, help="Batch size [default: 4; attention 8].")
@steps_options()
@click.option("--device", default=None, help="cuda or cpu [default: cuda when available, else cpu, said on stderr].")
@runs_folder_option(Path("outputs"), "Folder that gets outputs/<run_id>/.")
@click.option("--ctx", type=click.IntRange(1), default=512, show_default=True, help="Context length.")
@click.option(
    "--attention",
    type=click.Choice(["reference", "sdpa", "flash_pytorch", "flash_triton"]),
    default="reference",
    show_default=True,
    help="Attention inside the model.",
)
@click.option("--fused-adamw", is_flag=True, help="torch.optim.AdamW(fused=True) instead of the hand-written AdamW.")
@click.option("--impl", default="sdpa", show_default=True, help="Implementation: naive, compiled, sdpa, ...")
@click.option("--seq", type=click.IntRange(1), default=1024, show_default=True, help="Sequence length.")
@click.option("--d-head", type=click.IntRange(1), default=64, show_default=True, help="Head dimension.")
@click.option("--heads", type=click.IntRange(0), default=16, show_default=True, help="Heads.")
@click.option("--variant", default="bucketed", show_default=True, help="naive, flat, overlap, bucketed, torch.")
@click.option("--bucket-mb", type=float, default=25.0, show_default=True, help="Bucket size in MiB.")
@click.option("--nproc", type=click.IntRange(1), default=2, show_default=True, help="Processes.")
@click.option("--sharded", is_flag=True, help="ZeRO-1 sharded optimizer.")
@click.option("--ddp-size", default="small", show_default=True, help="Model size.")
@backend_option("auto", "Profiler: nsys, the PyTorch profiler, none (timings only); auto picks nsys when it can trace.")
@click.option(
    "--memory",
    is_flag=True,
    help="Also write a CUDA memory snapshot (memory.pickle), with any backend; none on the CPU (run.json says so).",
)
@click.option("--calibrate", is_flag=True, help="Measure this GPU's GEMM TFLOP/s and copy bandwidth first.")
def record(
    workload,
    ctx,
    batch,
    mode,
    precision,
    compile_,
    attention,
    fused_adamw,
    impl,
    seq,
    d_head,
    heads,
    variant,
    bucket_mb,
    nproc,
    sharded,
    ddp_size,
    backend,
    memory,
    steps,
    warmup,
    calibrate,
    device,
    out_dir,
):
    """Run WORKLOAD under a profiler; leave trace, run.json (and memory.pickle) in OUT_DIR/<run_id>/.

    WORKLOAD is a Transformer size (tiny, small, medium, large, xl, 2.7B),
    "attention" (one attention layer: --impl --seq --d-head --heads) or "ddp"
    (data-parallel training, --variant --nproc). Backend auto uses nsys where it
    can trace this machine, else the PyTorch profiler; "none" only times.
    run.json holds the spec, versions, GPU, step times without and with the
    profiler, and peak memory; --calibrate measures this GPU's GEMM and copy
    ceilings into OUT_DIR/calibration.json, which later runs into OUT_DIR copy.
    --memory writes memory.pickle with every backend on a GPU (under nsys, the
    profiled process records it); run.json's max_memory_allocated covers the
    same window. Recording the same run again with another backend keeps the
    first trace (each backend has its own file names; run.json's "files" says
    which file is which and which record made it). Without a GPU the run goes
    to the CPU, and stderr says so unless --device cpu was given.

    Example: profiler-kit record xl --ctx 512 --precision bf16 --memory -o outputs/
    """
    if device is None:
        device = _default_device()
        if device == "cpu":
            click.echo("no CUDA GPU found: running on the CPU", err=True)
    elif device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise click.BadParameter(f"{device}: no CUDA GPU found (use --device cpu)", param_hint="--device")
    if workload == "ddp":
        try:
            from profiler_kit.run_ddp import record_ddp
        except ImportError as err:
            raise click.ClickException(f"ddp recording is not available: {err}") from None
        paths = record_ddp(
            variant,
            bucket_mb,
            nproc,
            ddp_size,
            ctx,
            out_dir,
            batch=batch or 4,
            warmup=warmup,
            steps=steps,
            sharded=sharded,
            device=device,
        )
        echo_written(paths)
        return
    from profiler_kit.run import RecordError
    from profiler_kit.run import record as record_run
    from profiler_kit.workloads.models import RunSpec

    if workload == "attention":
        spec_kw = {
            "workload": "attention",
            "attention": impl,
            "ctx": seq,
            "heads": heads,
            "d_head": d_head,
            "batch": batch or 8,
        }
    elif workload in RECORD_SIZES:
        spec_kw = {
            "size": workload,
            "ctx": ctx,
            "attention": attention,
            "batch": batch or 4,
            "fused_adamw": fused_adamw,
        }
    else:
        raise click.BadParameter(
            f"{workload!r}: one of {', '.join(RECORD_SIZES)}, attention, ddp", param_hint="WORKLOAD"
        )
    spec = RunSpec(
        mode=mode, precision=precision, compile=compile_, warmup=warmup, steps=steps, device=device, **spec_kw
    )
    try:
        result = record_run(spec, backend, memory, out_dir, calibrate, log=lambda m: click.echo(m, err=True))
    except RecordError as err:
        raise click.ClickException(str(err)) from None
    if result.status != "ok":
        click.echo(f"{spec.run_id}: {result.status}: {result.meta.get('error', '')}", err=True)
    echo_written(result.files)


def _csv_list(cast):
    def parse(ctx, param, value):
        try:
            return [cast(v) for v in value.split(",") if v]
        except ValueError as err:
            raise click.BadParameter(str(err)) from None

    return parse


@cli.command()
@click.option(
    "--sizes", default="small,medium,large,xl,2.7B", show_default=True, callback=_csv_list(str), help="Model sizes."
)
@click.option(
    "--ctx", "ctxs", default="128,256,512,1024", show_default=True, callback=_csv_list(int), help="Context lengths."
)
@click.option("--modes", default="forward,train", show_default=True, callback=_csv_list(str), help="Step modes.")
@click.option("--precisions", default="fp32,bf16", show_default=True, callback=_csv_list(str), help="Precisions.")
@backend_option("torch", "Profiler of each cell (as record).")
@steps_options(" per cell")
@click.option("--batch", type=click.IntRange(1), default=4, show_default=True, help="Batch size.")
@click.option("--memory", is_flag=True, help="A CUDA memory snapshot per cell.")
@click.option("--timeout", type=click.IntRange(1), default=1800, show_default=True, help="Seconds per cell.")
@click.option("--resume", is_flag=True, help="Keep cells whose run.json already says ok or oom.")
@click.option("--calibrate", is_flag=True, help="First measure this GPU's ceilings into OUT_DIR/calibration.json.")
@click.option("--device", default=None, help="cuda or cpu [default: cuda when available].")
@runs_folder_option(Path("outputs/sweep"), "Folder of the sweep: one run folder per cell.")
def sweep(
    sizes, ctxs, modes, precisions, backend, steps, warmup, batch, memory, timeout, resume, calibrate, device, out_dir
):
    """Record a grid of sizes x contexts x modes x precisions, one fresh process per cell.

    An OOM or crash in one cell is a row of results.jsonl / results.md, not the
    end of the sweep; longer contexts of a group that ran out of memory are
    marked OOM without being run. Each cell leaves OUT_DIR/<run_id>/run.json
    (with --calibrate, the ceilings measured once into OUT_DIR/calibration.json).

    Example: profiler-kit sweep --sizes small,xl --ctx 128,512 --modes forward,train -o outputs/sweep
    """
    from profiler_kit.sweep import grid
    from profiler_kit.sweep import sweep as run_sweep

    try:
        specs = grid(
            sizes, ctxs, modes, precisions, batch=batch, warmup=warmup, steps=steps, device=device or _default_device()
        )
    except ValueError as err:
        raise click.BadParameter(str(err)) from None
    from profiler_kit.run import RecordError

    try:
        rows = run_sweep(
            specs,
            backend,
            out_dir,
            memory,
            timeout,
            progress=lambda s: progress(s, "sweep"),
            resume=resume,
            calibrate=calibrate,
        )
    except RecordError as err:
        raise click.ClickException(str(err)) from None
    bad = sum(r["status"] != "ok" for r in rows)
    click.echo(f"{len(rows)} cells, {bad} not ok (OOM or error)", err=True)
    echo_written([out_dir / "results.jsonl", out_dir / "results.md"])


@cli.command("ddp-report")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@output_options("report", "FOLDER itself")
@strict_option
@parallel_options
@with_exit_codes
def ddp_report(folder, out_dir, fmt, no_html, top, stem, strict, workers, scheduler, progress):
    """Distributed results: all-reduce bandwidth, DDP step time per variant, cross-rank GPU time.

    FOLDER holds allreduce_*.jsonl (python -m profiler_kit.workloads.distributed), ddp_*.jsonl
    or ddp.jsonl (python -m profiler_kit.workloads.ddp_train) and per-rank traces <label>_rank<r>.json.gz
    (profiler-kit record ddp, in any subfolder); multi-rank nsys exports (.sqlite)
    are read too. Per rank: communication (NCCL) vs compute vs idle GPU time and
    the share of communication hidden under compute; slowest rank per step; one
    comparison row per traced variant. --top is unused here. Each trace is read
    into small per-rank tables as its own task (--workers/--scheduler: in
    parallel); one that cannot be read is said on stderr and listed in the
    report, the others reported.

    Example: profiler-kit ddp-report reports/ddp -o reports/ddp
    """
    process.tune_report()  # before numpy is imported: profiler_kit/process.py
    forkserver_soon(workers, scheduler)
    with importing():
        from profiler_kit.build_ddp import build_ddp_report, ddp_trace_items, load_ddp_inputs
        from profiler_kit.output import render_report_files

    out_dir = writable(out_dir or folder)
    skips = Skips(strict)
    traces = ddp_trace_items(folder) if folder.is_dir() else []
    with (
        progress_bar(len(traces), "Analysing", progress) as bar,
        session([item[3] for item in traces], workers, scheduler) as run,
    ):
        inputs = load_ddp_inputs(folder, session=run, skip=skips, on_each=lambda _: bar.update(1))
    inputs.skipped = skips.skipped
    files = render_report_files(build_ddp_report(inputs), stem, fmt, html=charts_wanted(no_html))
    write_report(out_dir, files)
    skips.finish()


class DiffCommand(Command):
    """The diff command, whose help ends with the --fail-on grammar (imported only when help is shown)."""

    def format_epilog(self, ctx, formatter):
        from profiler_kit.analyze.diff import RULE_GRAMMAR

        formatter.write_paragraph()
        formatter.write_text("FAIL-ON RULES")
        with formatter.indentation():
            for line in RULE_GRAMMAR.splitlines():
                formatter.write(f"{formatter.current_indent * ' '}{line}\n")


@cli.command(cls=DiffCommand)
@click.argument("base", type=click.Path(path_type=str))
@click.argument("new", type=click.Path(path_type=str))
@output_options("diff", str(DIFF_DIR))
@click.option(
    "--fail-on", "fail_on", multiple=True, metavar="RULE", help="Exit 1 when a significant change breaks RULE (below)."
)
@click.option(
    "--threshold",
    type=click.FloatRange(0),
    default=2.0,
    show_default=True,
    help="Percent: a change is significant only when larger than this (and its 95% interval excludes zero).",
)
@click.option("--fold-gemm-tiles", is_flag=True, help="Match GEMM kernels across tile variants (128x64 -> <tile>).")
@click.option(
    "--ops",
    type=click.Choice(["auto", "on", "off"]),
    default="auto",
    show_default=True,
    help="Also compare Kineto traces per PyTorch op; auto: when kernels matched by name hold under half of "
    "either side's kernel time.",
)
@click.option("--no-cache", is_flag=True, help="Neither read nor write the Arrow copy of big exports.")
@strict_option
@parallel_options
def diff(
    base,
    new,
    out_dir,
    fmt,
    no_html,
    top,
    stem,
    fail_on,
    threshold,
    fold_gemm_tiles,
    ops,
    no_cache,
    strict,
    workers,
    scheduler,
    progress,
):
    """What changed from BASE to NEW, with noise bands, and a gate for CI.

    BASE and NEW are each a trace (.sqlite, .nsys-rep, .json[.gz]), a memory
    snapshot (.pickle), or a folder of them: several files a side (repeated runs)
    are compared by their mean, each file an instance. Folders left by
    record/sweep (run.json) compare each cell's timed steps and list cells whose
    status changed (OOM). Kernels are matched by
    name (Inductor suffixes folded); categories, phases, NVTX ranges and memory
    peaks are compared too. Each delta gets a 95% interval over the side's
    instances (steps, phase instances or files): a percentile bootstrap (fixed
    seed) with 8 or more a side, else Welch's t. A change is significant when its
    interval excludes zero and it exceeds --threshold; with one instance a side
    the report says that no noise estimate is possible. A file of a folder side
    that cannot be read is said on stderr and listed in the report, and the
    others compared (--strict, or one file a side: an error instead).
    --workers/--scheduler measure the files in parallel, as report does.

    Exit status: 0 no rule broken; 1 a --fail-on rule broken (one line each on
    stdout); 2 bad input or a malformed rule; 3 output not written; 130 Ctrl-C.

    Example: profiler-kit diff base.sqlite new.sqlite --fail-on 'step>+3%' --fail-on 'category:gemm>+5%'
    """
    process.tune_report()  # before numpy is imported: profiler_kit/process.py
    forkserver_soon(workers, scheduler)
    with importing():  # big exports start being read now, beside the imports below (as report does)
        from profiler_kit.analyze.nsys_prefetch import Prefetch
        from profiler_kit.analyze.trace_cache import CacheWriter, prefetch_uncached

        prefetched = Prefetch()
        for path in (base, new):
            prefetch_uncached(Path(path), prefetched, cache=not no_cache)
    with importing():
        from profiler_kit.analyze.diff import parse_rule
        from profiler_kit.build_diff import find_side, gate_lines, run_diff
        from profiler_kit.output import render_report_files

    rules = [parse_rule(r) for r in fail_on]  # a malformed rule fails before anything is read
    out_dir = writable(out_dir or DIFF_DIR)
    writer = None if no_cache else CacheWriter()
    sides = [find_side(base), find_side(new)]
    skips = Skips(strict or (single_file([base]) and single_file([new])))
    inputs = [src.path for side in sides for src in side.sources]
    with progress_bar(len(inputs), "Measuring", progress) as bar, session(inputs, workers, scheduler) as run:
        rep, verdicts = run_diff(
            sides[0],
            sides[1],
            rules,
            frozenset({"gemm_tiles"} if fold_gemm_tiles else ()),
            ops={"auto": None, "on": True, "off": False}[ops],
            threshold=threshold / 100,
            top=top,
            everything=fmt != "md",
            cache=writer,
            prefetched=prefetched,
            session=run,
            skip=skips,
            on_each=lambda _: bar.update(1),
        )
    files = render_report_files(rep, stem, fmt, html=charts_wanted(no_html))
    write_report(out_dir, files)
    say_cached(writer)
    for line in verdicts.loc[verdicts["metric"] == "", "line"] if verdicts is not None else ():
        click.echo(f"Warning: --fail-on {line}", err=True)  # a regex that matched no name checks nothing
    broken = gate_lines(verdicts) if verdicts is not None else []
    with writing_stdout():
        for line in broken:
            click.echo(line)
    if rules:
        click.echo(f"gate: {len(broken)} of {len(rules)} rule(s) broken", err=True)
    if skips.skipped:
        click.echo(f"{len(skips.skipped)} input(s) skipped (listed above and in the report)", err=True)
    if broken:
        sys.exit(1)
