"""The ``profiler-kit`` command line: thin click commands over library functions.

Every command opens its inputs, calls one library function and writes the
result. Bad input raises ``analyze.InputError``, shown as one line on stderr
with exit code 2.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
from pathlib import Path

# A report reads each big array once or twice, so 2 MB pages buy it nothing, and asking for them (numpy's
# default) can make each first touch wait for the kernel to compact memory. On a 2-core VM a cached report
# of 1.1M kernels took 1.37-1.73 s with them and 1.26-1.43 s without (six runs each, alternating).
# Set before numpy is imported; a value the user set wins.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
# The same for Arrow's buffers (the NVTX text, string columns): pyarrow's default mimalloc pool asks for 2 MB pages
# and zeroes each whole page at its first touch, 3% of a big report's CPU samples. With the system allocator a
# report of 1.1M kernels took 1.16 s against 1.24 (medians of 16 alternating runs, 12 of 16 pairs faster).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


@contextlib.contextmanager
def importing():
    """Import without the cyclic garbage collector, then freeze what was imported.

    Imports build hundreds of thousands of long-lived objects and little garbage, so collector passes
    over them are wasted: they cost a cached report of 1.1M kernels about 0.1 s (1.27 -> 1.15 s,
    medians of seven alternating runs on a 2-core VM). Later passes skip the frozen objects too;
    the collector stays on for the work itself.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


with importing():
    import click

    from analyze.errors import InputError
    from analyze.heap import LARGEST_HEAP_BLOCK, keep_freed_memory

REPORT_KEPT_BYTES = 1 << 30  # a report's freed memory stays with it until it exits


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


def main() -> None:
    """The console entry (``profiler-kit``, ``python -m profiler_kit``): the CLI, then a quick exit.

    Tearing down the interpreter's modules and objects took 25 ms of a big report's 1.2 s; leaving with
    ``os._exit`` once the exit handlers have run (the early reader's child reaped) takes 11. With another
    thread still alive (a pool's idle worker, a cache write) the usual exit waits for it instead.
    """
    try:
        cli(prog_name="profiler-kit")
        code = 0
    except SystemExit as done:
        code = done.code
    if threading.active_count() > 1 or not isinstance(code, int | None):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that closed the pipe, a stream closed already
            stream.flush()
    os._exit(code or 0)


def progress(items, label: str):
    """A progress bar on stderr; silent when stderr is not a terminal (logs, CI, pipes)."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext(items)
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
            "--out",
            "out_dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Folder for the output files [default: a folder under reports/ named for the input].",
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


def charts_wanted(no_html: bool) -> bool:
    """False with --no-html, and (with a one-line warning) when plotly is not installed."""
    if no_html:
        return False
    from profiler_kit.render.html import plotly_available

    if plotly_available():
        return True
    click.echo("Warning: plotly is not installed (pip install plotly), so no charts (.html) are written", err=True)
    return False


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
def report(paths, out_dir, fmt, no_html, top, stem, no_cache):
    """Kernel, category and NVTX-range breakdowns of nsys exports and PyTorch traces.

    PATHS are files (.sqlite, .nsys-rep, .qdrep, .json, .json.gz, and memory
    snapshots .pickle) or folders, searched recursively. Folders left by
    `profiler-kit record`/`sweep` (a run.json per run) add the sweep tables:
    phase times per size x context, top kernel per cell, GEMM share, softmax vs
    attention matmuls, fp32 vs bf16, profiling overhead, achieved GEMM TFLOP/s
    and MFU against the GPU's calibrated ceilings (calibration.json). Writes <stem>.md and <stem>.html (charts) to the
    output folder; with --format csv/json, one <stem>.<table>.<fmt> per table.
    Several traces also get comparison tables. An export over 32 MiB leaves an
    Arrow copy of its tables in a hidden folder beside it, which makes the next
    report on the unchanged file faster (--no-cache: neither read nor write it).

    Example: profiler-kit report outputs/nsys/ -o reports/nsys
    """
    # A report does no matrix products. numpy's OpenBLAS otherwise starts a thread per core at import, and
    # each spins for a while: 2% of a big report's CPU time (perf samples), taken from the early reader on a
    # 2-core machine. Set before numpy is imported; a value the user set wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if len(paths) == 1:  # one big export: its reading starts now, beside the imports below
        with importing():  # the early read imports numpy before it forks its reader
            from analyze.trace_cache import prefetch_uncached

            prefetch_uncached(Path(paths[0]), cache=not no_cache)
    # Freed arrays are kept for the next ones, not faulted in afresh (analyze/heap.py): 7% fewer page faults
    # and about 0.03 s less on a report of 1.1M kernels (14 alternating runs, 10 faster), 13 MiB more peak memory.
    keep_freed_memory(REPORT_KEPT_BYTES, LARGEST_HEAP_BLOCK)
    with importing():
        from analyze.sources import TRACE_KINDS, discover
        from profiler_kit.build import analyze_sources, build_report
        from profiler_kit.build_sweep import build_sweep_sections, find_run_dirs
        from profiler_kit.output import render_report_files, write_files

    sources = discover(list(paths))
    traces = [s for s in sources if s.kind in TRACE_KINDS]
    snapshots = [s.path for s in sources if s.kind == "memory-snapshot"]
    if not traces and not snapshots:
        raise InputError(f"no traces or memory snapshots found in {', '.join(paths)}")
    with progress(traces, "Analysing") as bar:
        results = analyze_sources(bar, paths, cache=not no_cache)
    run_dirs = find_run_dirs(paths)
    extra = build_sweep_sections(run_dirs, roots=paths) if run_dirs else []
    if snapshots:
        from profiler_kit.build_memory import load_snapshots, memory_sections

        extra += memory_sections(load_snapshots(snapshots), top=top)
    rep = build_report(results, top=top, extra=extra)
    files = render_report_files(rep, stem, fmt, html=charts_wanted(no_html))
    echo_written(write_files(out_dir or default_out_dir(paths), files))
    if not no_cache:
        from analyze.trace_cache import finish_writes

        for folder in finish_writes():
            click.echo(f"cached tables for the next report in {folder} (--no-cache: none)", err=True)


def _one_trace(path: str):
    with importing():
        from analyze.breakdown import analyze_trace
        from analyze.sources import Source, kind_of, read_trace

    kind = kind_of(Path(path))
    if kind not in ("nsys-sqlite", "nsys-report", "kineto"):
        raise InputError(f"{path}: not a trace file (.sqlite, .nsys-rep, .qdrep, .json[.gz])")
    return analyze_trace(read_trace(Source(Path(path), kind), details=False))


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
@output_options("memory")
def memory(snapshots, out_dir, fmt, no_html, top, stem):
    """Explain peak GPU memory from torch.cuda.memory snapshots (.pickle, .pkl, .pickle.gz).

    Replays each snapshot's allocation trace: peak allocated and reserved and
    when, what is live at the peak by category, source line and size, the
    largest allocations, segments at dump time, and an interactive timeline.
    Several snapshots also get a comparison table (size, ctx, mode, precision
    from file names or a run.json / <stem>.json beside the file). Directories
    are searched recursively. Snapshots are read without running code.

    Writes <stem>.md and <stem>.html (default stem "memory", default folder
    reports/memory); with --format csv/json, one <stem>.<table>.<fmt> per table.

    Example: profiler-kit memory runs/xl_ctx512_full_step_bf16.pickle -o reports/mem
    """
    with importing():
        from profiler_kit.build_memory import build_memory_report, find_snapshots, load_snapshots
        from profiler_kit.output import render_report_files, write_files

    paths = find_snapshots(list(snapshots))
    if not paths:
        raise InputError(f"no snapshot files (*.pickle, *.pkl, *.pickle.gz) under {', '.join(map(str, snapshots))}")
    report = build_memory_report(load_snapshots(paths), top=top)
    files = render_report_files(report, stem, fmt, html=charts_wanted(no_html))
    echo_written(write_files(out_dir or Path("reports") / "memory", files))


RECORD_SIZES = ("tiny", "small", "medium", "large", "xl", "2.7B")


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@cli.command()
@click.argument("workload", metavar="WORKLOAD")
@click.option("--ctx", type=click.IntRange(1), default=512, show_default=True, help="Context length (LM sizes).")
@click.option("--batch", type=click.IntRange(1), default=None, help="Batch size [default: 4; attention 8].")
@click.option("--mode", type=click.Choice(["forward", "forward_backward", "train"]), default="train", show_default=True)
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True)
@click.option("--compile", "compile_", is_flag=True, help="torch.compile the model.")
@click.option(
    "--attention",
    type=click.Choice(["reference", "sdpa", "flash_pytorch", "flash_triton"]),
    default="reference",
    show_default=True,
    help="Attention inside the LM.",
)
@click.option("--fused-adamw", is_flag=True, help="torch.optim.AdamW(fused=True) instead of the hand-written AdamW.")
@click.option("--impl", default="sdpa", show_default=True, help="attention workload: naive, compiled, sdpa, ...")
@click.option("--seq", type=click.IntRange(1), default=1024, show_default=True, help="attention workload: sequence.")
@click.option("--d-head", type=click.IntRange(1), default=64, show_default=True, help="attention workload: head dim.")
@click.option("--heads", type=click.IntRange(0), default=16, show_default=True, help="attention workload: heads.")
@click.option("--variant", default="bucketed", show_default=True, help="ddp: naive, flat, overlap, bucketed, torch.")
@click.option("--bucket-mb", type=float, default=25.0, show_default=True, help="ddp: bucket size in MiB.")
@click.option("--nproc", type=click.IntRange(1), default=2, show_default=True, help="ddp: processes.")
@click.option("--sharded", is_flag=True, help="ddp: ZeRO-1 sharded optimizer.")
@click.option("--ddp-size", default="small", show_default=True, help="ddp: model size.")
@click.option("--backend", type=click.Choice(["auto", "nsys", "torch", "none"]), default="auto", show_default=True)
@click.option(
    "--memory",
    is_flag=True,
    help="Also write a CUDA memory snapshot (memory.pickle), with any backend; none on the CPU (run.json says so).",
)
@click.option("--steps", type=click.IntRange(1), default=10, show_default=True, help="Timed (and profiled) steps.")
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True, help="Warm-up steps.")
@click.option("--calibrate", is_flag=True, help="Measure this GPU's GEMM TFLOP/s and copy bandwidth first.")
@click.option("--device", default=None, help="cuda or cpu [default: cuda when available, else cpu, said on stderr].")
@click.option("-o", "--out-dir", type=click.Path(path_type=Path), default=Path("outputs"), show_default=True)
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
    from workloads.models import RunSpec

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
@click.option("--sizes", default="small,medium,large,xl,2.7B", show_default=True, callback=_csv_list(str))
@click.option("--ctx", "ctxs", default="128,256,512,1024", show_default=True, callback=_csv_list(int))
@click.option("--modes", default="forward,train", show_default=True, callback=_csv_list(str))
@click.option("--precisions", default="fp32,bf16", show_default=True, callback=_csv_list(str))
@click.option("--backend", type=click.Choice(["auto", "nsys", "torch", "none"]), default="torch", show_default=True)
@click.option("--steps", type=click.IntRange(1), default=10, show_default=True)
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True)
@click.option("--batch", type=click.IntRange(1), default=4, show_default=True)
@click.option("--memory", is_flag=True, help="A CUDA memory snapshot per cell.")
@click.option("--timeout", type=click.IntRange(1), default=1800, show_default=True, help="Seconds per cell.")
@click.option("--resume", is_flag=True, help="Keep cells whose run.json already says ok or oom.")
@click.option("--calibrate", is_flag=True, help="First measure this GPU's ceilings into OUT_DIR/calibration.json.")
@click.option("--device", default=None, help="cuda or cpu [default: cuda when available].")
@click.option("-o", "--out-dir", type=click.Path(path_type=Path), default=Path("outputs/sweep"), show_default=True)
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
@output_options("report")
def ddp_report(folder, out_dir, fmt, no_html, top, stem):
    """Distributed results: all-reduce bandwidth, DDP step time per variant, cross-rank GPU time.

    FOLDER holds allreduce_*.jsonl (python -m workloads.distributed), ddp_*.jsonl
    or ddp.jsonl (python -m workloads.ddp_train) and per-rank traces <label>_rank<r>.json.gz
    (profiler-kit record ddp, in any subfolder); multi-rank nsys exports (.sqlite)
    are read too. Per rank: communication (NCCL) vs compute vs idle GPU time and
    the share of communication hidden under compute; slowest rank per step; one
    comparison row per traced variant. --top is unused here.

    Example: profiler-kit ddp-report reports/ddp -o reports/ddp
    """
    with importing():
        from profiler_kit.build_ddp import build_ddp_report, load_ddp_inputs
        from profiler_kit.output import render_report_files, write_files

    rep = build_ddp_report(load_ddp_inputs(folder))
    files = render_report_files(rep, stem, fmt, html=charts_wanted(no_html))
    echo_written(write_files(out_dir or folder, files))


class DiffCommand(click.Command):
    """The diff command, whose help ends with the --fail-on grammar (imported only when help is shown)."""

    def format_epilog(self, ctx, formatter):
        from analyze.diff import RULE_GRAMMAR

        formatter.write_paragraph()
        formatter.write_text("FAIL-ON RULES")
        with formatter.indentation():
            for line in RULE_GRAMMAR.splitlines():
                formatter.write(f"{formatter.current_indent * ' '}{line}\n")


@cli.command(cls=DiffCommand)
@click.argument("base", type=click.Path(path_type=str))
@click.argument("new", type=click.Path(path_type=str))
@output_options("diff")
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
    "--ops/--no-ops",
    default=None,
    help="Also compare Kineto traces per PyTorch op [default: when kernels matched by name hold under half "
    "of either side's kernel time].",
)
@click.option("--no-cache", is_flag=True, help="Neither read nor write the Arrow copy of big exports.")
def diff(base, new, out_dir, fmt, no_html, top, stem, fail_on, threshold, fold_gemm_tiles, ops, no_cache):
    """What changed from BASE to NEW, with noise bands, and a gate for CI.

    BASE and NEW are each a trace (.sqlite, .nsys-rep, .json[.gz]), a memory
    snapshot (.pickle), or a folder of them: several files a side (repeated runs)
    are compared by their mean, each file an instance. Kernels are matched by
    name (Inductor suffixes folded); categories, phases, NVTX ranges and memory
    peaks are compared too. Each delta gets a 95% interval over the side's
    instances (steps, phase instances or files): a percentile bootstrap (fixed
    seed) with 8 or more a side, else Welch's t. A change is significant when its
    interval excludes zero and it exceeds --threshold; with one instance a side
    the report says that no noise estimate is possible.

    Exit codes: 0 no rule broken, 1 a --fail-on rule broken (one line each on
    stdout), 2 bad input or a malformed rule.

    Example: profiler-kit diff base.sqlite new.sqlite --fail-on 'step>+3%' --fail-on 'category:gemm>+5%'
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as report: no matrix products worth a thread per core
    with importing():  # big exports start being read now, beside the imports below (as report does)
        from analyze.trace_cache import prefetch_uncached

        for path in (base, new):
            prefetch_uncached(Path(path), cache=not no_cache)
    keep_freed_memory(REPORT_KEPT_BYTES, LARGEST_HEAP_BLOCK)
    with importing():
        from analyze.diff import parse_rule
        from profiler_kit.build_diff import gate_lines, run_diff
        from profiler_kit.output import render_report_files, write_files

    rules = [parse_rule(r) for r in fail_on]  # a malformed rule fails before anything is read
    rep, verdicts = run_diff(
        base,
        new,
        rules,
        frozenset({"gemm_tiles"} if fold_gemm_tiles else ()),
        ops=ops,
        threshold=threshold / 100,
        top=top,
        everything=fmt != "md",
        cache=not no_cache,
    )
    files = render_report_files(rep, stem, fmt, html=charts_wanted(no_html))
    echo_written(write_files(out_dir or Path("reports") / "diff", files))
    for line in verdicts.loc[verdicts["metric"] == "", "line"] if verdicts is not None else ():
        click.echo(f"Warning: --fail-on {line}", err=True)  # a regex that matched no name checks nothing
    broken = gate_lines(verdicts) if verdicts is not None else []
    for line in broken:
        click.echo(line)
    if rules:
        click.echo(f"gate: {len(broken)} of {len(rules)} rule(s) broken", err=True)
    if broken:
        sys.exit(1)
