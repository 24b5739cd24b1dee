"""Find profile files under the paths a user gives, and read each with its reader.

File kinds are recognised by suffix (a data table, first match wins); JSON
files found while walking a directory are read only when they look like PyTorch
profiler traces, so result files and metadata sidecars beside them are skipped.
A JSON file that may be a trace but cannot be sniffed (a broken gzip stream), or
that is named like one (``*.pt.trace.json``), is read anyway: its reader then
says what is wrong with it, where a skip would hide it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analyze.errors import InputError
from analyze.tables import Trace

SOURCE_RULES = (  # suffix, kind; first match wins
    (".nsys-rep", "nsys-report"),
    (".qdrep", "nsys-report"),
    (".sqlite", "nsys-sqlite"),
    (".json.gz", "kineto"),
    (".json", "kineto"),
    (".pickle.gz", "memory-snapshot"),
    (".pickle", "memory-snapshot"),
    (".pkl", "memory-snapshot"),
)
TRACE_KINDS = ("nsys-report", "nsys-sqlite", "kineto")
# torch.profiler.tensorboard_trace_handler names its files <worker>.<time>.pt.trace.json[.gz]
TRACE_NAMES = (".pt.trace.json", ".pt.trace.json.gz")
METADATA_NAMES = ("run.json",)


@dataclass(frozen=True)
class Source:
    path: Path
    kind: str


def kind_of(path: Path) -> str | None:
    """The kind of a file from its name, or None."""
    name = path.name.lower()
    return next((kind for suffix, kind in SOURCE_RULES if name.endswith(suffix)), None)


def _is_trace_json(path: Path) -> bool:
    """Read this JSON found in a folder? Yes unless it is readable and starts unlike a trace."""
    from analyze.kineto import sniff

    return path.name.lower().endswith(TRACE_NAMES) or sniff(path) != "other"


def discover(paths: list[str | Path]) -> list[Source]:
    """Every profile file named or found (recursively) under ``paths``, sorted per argument.

    A named file of unknown kind, or a missing path, is an InputError. Inside
    directories, unknown files, metadata sidecars, reports whose .sqlite export
    sits beside them, and JSON that is not a trace are skipped.
    """
    found: list[Source] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
        if path.is_file():
            kind = kind_of(path)
            if kind is None:
                raise InputError(
                    f"{path}: unknown file type (expected .sqlite, .nsys-rep, .qdrep, .json[.gz] or .pickle)"
                )
            found.append(Source(path, kind))
            continue
        for sub in sorted(p for p in path.rglob("*") if p.is_file()):
            kind = kind_of(sub)
            if kind is None or sub.name in METADATA_NAMES or sub.name.startswith("."):
                continue
            if kind == "nsys-report" and sub.with_suffix(".sqlite").exists():
                continue  # already exported: read the .sqlite beside it (no nsys needed)
            if kind == "kineto" and not _is_trace_json(sub):
                continue
            found.append(Source(sub, kind))
    return found


def read_trace(source: Source, details: bool = True, cache: bool = False, runtime_later: bool = False) -> Trace:
    """Read one trace file (nsys export or report, or Kineto JSON) into a Trace.

    ``details=False`` lets the nsys reader skip columns the breakdowns never use
    (``read_nsys_sqlite``); ``cache=True`` keeps a big export's tables beside it
    as Arrow files for the next read (``analyze.trace_cache``); ``runtime_later``
    may hand the Trace over while an export's runtime table is still being read.
    """
    from analyze.nsys_sqlite import read_nsys_sqlite

    def read_export(path: Path) -> Trace:
        if not cache:
            return read_nsys_sqlite(path, details, runtime_later)
        from analyze.trace_cache import read_cached

        return read_cached(path, lambda: read_nsys_sqlite(path, details, runtime_later), variant=f"details={details}")

    if source.kind == "nsys-sqlite":
        return read_export(source.path)
    if source.kind == "nsys-report":
        from analyze.nsys_export import export_report

        trace = read_export(export_report(source.path))
        trace.meta["source"] = str(source.path)
        return trace
    if source.kind == "kineto":
        from analyze.kineto import read_kineto

        return read_kineto(source.path)
    raise InputError(f"{source.path}: a {source.kind} is not a trace")
