"""Find profile files under the paths a user gives, and read each with its reader.

File kinds are recognised by suffix (a data table, first match wins); JSON
files found while walking a directory are read only when they look like traces
(TRACE_JSON_HINTS), so result files and metadata sidecars beside them are left
alone, while a trace the reader refuses is reported as skipped, not dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.tables import Trace

if TYPE_CHECKING:
    from profiler_kit.analyze.nsys_prefetch import Prefetch
    from profiler_kit.analyze.trace_cache import CacheWriter

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
METADATA_NAMES = ("run.json",)
# What makes a JSON file found in a folder a trace to read (any one of them). A sidecar or result file has
# none; a trace with one of them that the reader then refuses (cut short, Chrome's array format) is a
# skipped input with its reason, not silently dropped.
TRACE_JSON_HINTS = (
    ("name", ".json.gz"),  # every .json.gz the tools here write or read is a trace
    ("name", ".pt.trace.json"),  # torch.profiler's tensorboard_trace_handler names
    ("head", b'"traceEvents"'),  # Kineto's object format
    ("head", b'"schemaVersion"'),
    ("head", b'"ph"'),  # Chrome's array of events: [{"ph": "X", ...}, ...]
)
SNIFF_BYTES = 4096


@dataclass(frozen=True)
class Source:
    path: Path
    kind: str


@dataclass(frozen=True)
class Skipped:
    """An input left out of a report, and why: a row of its "Skipped inputs" table."""

    path: str
    reason: str

    @classmethod
    def of(cls, path: str | Path, err: BaseException) -> Skipped:
        """The row for ``path`` from the error its reading raised (the message without the path it starts with)."""
        if isinstance(err, InputError):
            reason = str(err).removeprefix(f"{path}: ")
        elif isinstance(err, OSError):
            reason = err.strerror or str(err)
        else:
            reason = f"too large or too deeply nested to read ({type(err).__name__})"
        return cls(str(path), reason)


Skip = Callable[[Path, BaseException], None]  # takes an input that cannot be read, and the error


def kind_of(path: Path) -> str | None:
    """The kind of a file from its name, or None."""
    name = path.name.lower()
    return next((kind for suffix, kind in SOURCE_RULES if name.endswith(suffix)), None)


def _is_trace_json(path: Path) -> bool:
    """Does a JSON file found in a folder claim to be a trace (TRACE_JSON_HINTS)? Never raises."""
    from profiler_kit.analyze.kineto import looks_like_kineto

    name = path.name.lower()
    if any(name.endswith(hint) for where, hint in TRACE_JSON_HINTS if where == "name"):
        return True
    if looks_like_kineto(path):  # reads far enough into a gzipped trace to see its keys
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return False
    return any(hint in head for where, hint in TRACE_JSON_HINTS if where == "head")


def _raise(path: Path, err: BaseException) -> None:
    raise err


def discover(paths: list[str | Path], skip: Skip | None = None) -> list[Source]:
    """Every profile file named or found (recursively) under ``paths``, sorted per argument.

    A named file of unknown kind, or a missing path, is an InputError, or with
    ``skip`` given, handed to it and left out. Inside directories, unknown files,
    metadata sidecars, reports whose .sqlite export sits beside them, and JSON
    that is not a trace are passed over without a word.
    """
    skip = skip or _raise
    found: list[Source] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            skip(path, InputError(f"{path}: no such file or directory"))
            continue
        if path.is_file():
            kind = kind_of(path)
            if kind is None:
                skip(
                    path,
                    InputError(
                        f"{path}: unknown file type (expected .sqlite, .nsys-rep, .qdrep, .json[.gz] or .pickle)"
                    ),
                )
                continue
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


def read_trace(
    source: Source,
    details: bool = True,
    cache: CacheWriter | None = None,
    runtime_later: bool = False,
    prefetched: Prefetch | None = None,
) -> Trace:
    """Read one trace file (nsys export or report, or Kineto JSON) into a Trace.

    ``details=False`` lets the nsys reader skip columns the breakdowns never use
    (``read_nsys_sqlite``); ``cache``, a ``trace_cache.CacheWriter``, keeps a big export's
    tables beside it as Arrow files for the next read (the caller waits on its ``finish``); ``runtime_later``
    may hand the Trace over while an export's runtime table is still being read;
    ``prefetched``: reads of the export started early (``analyze.nsys_prefetch``).
    """
    from profiler_kit.analyze.nsys_sqlite import read_nsys_sqlite

    def read_export(path: Path) -> Trace:
        if not cache:
            return read_nsys_sqlite(path, details, runtime_later, prefetched)
        from profiler_kit.analyze.trace_cache import read_cached

        return read_cached(
            path,
            lambda: read_nsys_sqlite(path, details, runtime_later, prefetched),
            cache,
            variant=f"details={details}",
        )

    if source.kind == "nsys-sqlite":
        return read_export(source.path)
    if source.kind == "nsys-report":
        from profiler_kit.analyze.nsys_export import export_report

        trace = read_export(export_report(source.path))
        trace.meta["source"] = str(source.path)
        return trace
    if source.kind == "kineto":
        from profiler_kit.analyze.kineto import read_kineto

        return read_kineto(source.path)
    raise InputError(f"{source.path}: a {source.kind} is not a trace")
