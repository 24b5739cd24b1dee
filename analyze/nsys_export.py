"""Turn ``.nsys-rep`` / ``.qdrep`` reports into SQLite with the installed nsys.

A report can only be exported by an nsys at least as new as the one that made
it (Debian's 2022.4 cannot read most reports made since 2023, and may even
produce an empty export). So the report's own version is read from the file
first and compared with ``nsys --version``; when they do not fit, or no nsys
is installed, the error says so and gives the command to run elsewhere.
The exported ``.sqlite`` is cached beside the report (or in a cache folder when
that directory is read-only) and reused while it is newer than the report.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.files import replacing

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
_VERSION_RX = re.compile(rb"(20\d\d)\.(\d+)\.(\d+)\.(\d+)-[0-9a-f]{6,}")
_CLI_VERSION_RX = re.compile(r"(20\d\d)\.(\d+)\.(\d+)\.(\d+)")
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "profiler-kit"


def report_version(path: Path, chunk: int = 1 << 22) -> tuple[int, ...] | None:
    """The nsys version that wrote a report, read from the file (None when not found)."""
    tail = b""
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            m = _VERSION_RX.search(tail + block)
            if m:
                return tuple(int(g) for g in m.groups())
            tail = block[-64:]
    return None


def installed_nsys() -> tuple[str, tuple[int, ...]] | None:
    """Path and version of the nsys on PATH, or None."""
    exe = shutil.which("nsys")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _CLI_VERSION_RX.search(out)
    return exe, tuple(int(g) for g in m.groups()) if m else ()


def _fmt(version: tuple[int, ...]) -> str:
    return ".".join(str(v) for v in version)


def cached_sqlite_path(report: Path) -> Path:
    """Where the export of ``report`` is cached: beside it, else in the user cache."""
    beside = report.with_suffix(".sqlite")
    if os.access(report.parent, os.W_OK):
        return beside
    return CACHE_DIR / f"{report.stem}-{report.stat().st_size}-{int(report.stat().st_mtime)}.sqlite"


def export_report(report: str | Path) -> Path:
    """Return an SQLite export of an nsys report, exporting it once if needed."""
    report = Path(report)
    if not report.is_file():
        raise InputError(f"{report}: no such file")
    with open(report, "rb") as fh:
        if not fh.read(64).startswith(REPORT_MAGIC):
            raise InputError(f"{report}: not an Nsight Systems report (.nsys-rep/.qdrep)")
    target = cached_sqlite_path(report)
    if target.is_file() and target.stat().st_mtime >= report.stat().st_mtime:
        return target
    made_by = report_version(report)
    command = f"nsys export --type sqlite -o {target.name} {report.name}"
    have = installed_nsys()
    if have is None:
        need = f"nsys {_fmt(made_by)} or newer" if made_by else "nsys"
        raise InputError(f"{report}: no nsys is installed to export it; on a machine with {need}, run: {command}")
    exe, version = have
    if made_by and version and made_by[:2] > version[:2]:
        raise InputError(
            f"{report}: made by nsys {_fmt(made_by)}, but the installed nsys is {_fmt(version)}, which cannot read it; "
            f"on a machine with nsys {_fmt(made_by[:2])} or newer, run: {command}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with replacing(target, suffix=".sqlite") as tmp:
        proc = subprocess.run(
            [exe, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(tmp), str(report)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 or not tmp.stat().st_size:
            last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise InputError(f"{report}: nsys {_fmt(version)} could not export it ({last}); run elsewhere: {command}")
    return target
