"""Shared test helpers: where the real data lives, and skips when it is absent."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Real captures by others, beside the project (not in it); PROFILER_KIT_SHARED_DATA points elsewhere (a missing
# folder runs the suite as a public clone does: on the subset shipped in tests/data).
SHARED_DATA = Path(os.environ.get("PROFILER_KIT_SHARED_DATA", ROOT.parent / "shared" / "data"))
FIXTURES = Path(__file__).resolve().parent / "data"
# The shipped subset (tests/data/MANIFEST.md), gzipped where the readers take no .gz: folder per shared subdir.
SHIPPED = {
    "nsys_sqlite": FIXTURES / "real" / "nsys_sqlite",
    "kineto": FIXTURES / "real" / "kineto",
    "mem_snapshot": FIXTURES / "memory",  # the snapshots this project recorded on an H200
}


def _unpacked(path: Path) -> Path:
    """``x.gz`` unpacked once into a temporary folder kept between runs (the readers want the plain file)."""
    key = hashlib.sha256(str(path.parent).encode()).hexdigest()[:12]  # one folder per shipped folder
    out = Path(tempfile.gettempdir()) / f"profiler-kit-tests-{key}" / path.name.removesuffix(".gz")
    if not out.exists() or out.stat().st_mtime < path.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_name(f"{out.name}.{os.getpid()}.part")
        with gzip.open(path, "rb") as src, part.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        part.replace(out)
    return out


def shared_files(subdir: str, pattern: str) -> list[Path]:
    """Real files under ../shared/data/<subdir>; without that folder, the subset shipped in tests/data."""
    folder = SHARED_DATA / subdir
    if folder.is_dir():
        return sorted(folder.glob(pattern))
    shipped = SHIPPED.get(subdir)
    if shipped is None or not shipped.is_dir():
        return []
    plain = sorted(shipped.glob(pattern))
    return plain or [_unpacked(p) for p in sorted(shipped.glob(pattern + ".gz"))]


def shared_dir(subdir: str, pattern: str) -> Path | None:
    """The folder holding ``shared_files(subdir, pattern)``, or None when there are none."""
    files = shared_files(subdir, pattern)
    return files[0].parent if files else None


def shared_params(subdir: str, pattern: str):
    """pytest params over real files, one skip param when none are present."""
    files = shared_files(subdir, pattern)
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"../shared/data/{subdir} absent"))]
    return [pytest.param(f, id=f.name[:60]) for f in files]


requires_nsys = pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not installed")
