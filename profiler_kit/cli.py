"""The ``profiler-kit`` command line: thin click commands over library functions.

Every command opens its inputs, calls one library function and writes the
result. Bad input raises ``analyze.InputError``, shown as one line on stderr
with exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from analyze.errors import InputError


class BadInput(click.ClickException):
    """An InputError as click shows it: ``Error: <message>``, exit code 2."""

    exit_code = 2


class Group(click.Group):
    """Turns library InputErrors (and unreadable files) into one-line errors."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InputError as err:
            raise BadInput(str(err)) from None
        except (MemoryError, RecursionError) as err:
            raise BadInput(f"input too large or too deeply nested to read: {type(err).__name__}") from None


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="profiler-kit")
def cli():
    """Answer "where do my GPU time and memory go?" from PyTorch profiles.

    Reads Nsight Systems exports (.sqlite, .nsys-rep), PyTorch profiler traces
    (.json, .json.gz) and torch.cuda.memory snapshots (.pickle), and writes
    markdown reports with interactive HTML charts.

    Example: profiler-kit report examples/ -o reports/example
    """


def progress(items, label: str):
    """A progress bar on stderr (hidden when stderr is not a terminal)."""
    return click.progressbar(items, label=label, file=sys.stderr, show_pos=True)


def echo_written(paths: list[Path]) -> None:
    """Tell the user where the output went (stderr, so stdout stays pipeable)."""
    for p in paths:
        click.echo(f"wrote {p}", err=True)


def output_options(default_stem: str):
    """The flags every report-writing command shares."""

    def wrap(fn):
        fn = click.option(
            "-o",
            "--output",
            "out_dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Folder for the output files [default: reports/<input name>].",
        )(fn)
        fn = click.option(
            "--format",
            "fmt",
            type=click.Choice(["md", "csv", "json"]),
            default="md",
            show_default=True,
            help="md: one markdown report; csv/json: one file per table, raw units (ns, bytes, fractions).",
        )(fn)
        fn = click.option("--no-html", is_flag=True, help="Skip the interactive HTML charts file.")(fn)
        fn = click.option("--top", type=click.IntRange(1), default=15, show_default=True, help="Rows in top-N tables.")(
            fn
        )
        fn = click.option("--stem", default=default_stem, show_default=True, help="Base name of the output files.")(fn)
        return fn

    return wrap


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
def report(paths, out_dir, fmt, no_html, top, stem):
    """Kernel, category and NVTX-range breakdowns of nsys exports and PyTorch traces.

    PATHS are files (.sqlite, .nsys-rep, .qdrep, .json, .json.gz) or folders,
    searched recursively. Writes <stem>.md and <stem>.html (charts) to the
    output folder; with --format csv/json, one <stem>.<table>.<fmt> per table.
    Several traces also get comparison tables.

    Example: profiler-kit report outputs/nsys/ -o reports/nsys
    """
    from analyze.sources import TRACE_KINDS, discover
    from profiler_kit.build import analyze_sources, build_report
    from profiler_kit.output import render_report_files, write_files

    sources = discover(list(paths))
    traces = [s for s in sources if s.kind in TRACE_KINDS]
    if not traces:
        raise InputError(f"no trace files (.sqlite, .nsys-rep, .qdrep, .json[.gz]) found in {', '.join(paths)}")
    with progress(traces, "Analysing") as bar:
        results = analyze_sources(bar, paths)
    rep = build_report(results, top=top)
    files = render_report_files(rep, stem, fmt, html=not no_html)
    echo_written(write_files(out_dir or default_out_dir(paths), files))


def _one_trace(path: str):
    from analyze.breakdown import analyze_trace
    from analyze.sources import Source, kind_of, read_trace

    kind = kind_of(Path(path))
    if kind not in ("nsys-sqlite", "nsys-report", "kineto"):
        raise InputError(f"{path}: not a trace file (.sqlite, .nsys-rep, .qdrep, .json[.gz])")
    return analyze_trace(read_trace(Source(Path(path), kind)))


def _print_table(df, fmt: str) -> None:
    from profiler_kit.render.markdown import render_table_md

    if fmt == "csv":
        click.echo(df.to_csv(index=False), nl=False)
    elif fmt == "json":
        click.echo(df.to_json(orient="records", indent=1))
    else:
        click.echo(render_table_md(df))


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--top", type=click.IntRange(1), default=20, show_default=True, help="Rows to print.")
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default="md", show_default=True)
def kernels(path, top, fmt):
    """Print the kernels of one trace by total GPU time (like nsys gpukernsum).

    Example: profiler-kit kernels run.sqlite --top 10
    """
    _print_table(_one_trace(path)["kernels"].head(top), fmt)


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--top", type=click.IntRange(1), default=30, show_default=True, help="Rows to print.")
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default="md", show_default=True)
def nvtx(path, top, fmt):
    """Print the NVTX ranges of one trace with their projected GPU time.

    Example: profiler-kit nvtx run.sqlite --format csv
    """
    _print_table(_one_trace(path)["ranges"].head(top), fmt)


@cli.command()
@click.argument("snapshots", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("reports/memory"),
    show_default=True,
    help="Directory for memory.md and memory.html.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["md", "csv", "json"]),
    default="md",
    show_default=True,
    help="md: memory.md + memory.html; csv/json: one file per table (plus memory.html).",
)
@click.option(
    "--top", type=click.IntRange(1), default=10, show_default=True, help="Rows per 'top' table and series per chart."
)
def memory(snapshots, out_dir, fmt, top):
    """Explain peak GPU memory from torch.cuda.memory snapshots (.pickle, .pkl, .pickle.gz).

    Replays each snapshot's allocation trace: peak allocated and reserved and
    when, what is live at the peak by category, source line and size, the
    largest allocations, segments at dump time, and an interactive timeline.
    Several snapshots also get a comparison table (size, ctx, mode, precision
    from file names or a run.json / <stem>.json beside the file). Directories
    are searched recursively. Snapshots are read without running code.

    Example: profiler-kit memory runs/xl_ctx512_full_step_bf16.pickle -o reports/mem
    """
    from analyze.errors import InputError
    from profiler_kit.build_memory import build_memory_report, find_snapshots, load_snapshots
    from profiler_kit.output import render_report_files, write_files

    paths = find_snapshots(list(snapshots))
    if not paths:
        raise InputError(f"no snapshot files (*.pickle, *.pkl, *.pickle.gz) under {', '.join(map(str, snapshots))}")
    report = build_memory_report(load_snapshots(paths), top=top)
    echo_written(write_files(out_dir, render_report_files(report, "memory", fmt)))
