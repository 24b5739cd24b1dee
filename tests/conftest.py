"""Shared test helpers: where the real data lives, and skips when it is absent."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "data"


def shared_files(subdir: str, pattern: str) -> list[Path]:
    """Real files under ../shared/data/<subdir>, or [] when the folder is absent."""
    folder = SHARED_DATA / subdir
    return sorted(folder.glob(pattern)) if folder.is_dir() else []


def shared_params(subdir: str, pattern: str):
    """pytest params over real files, one skip param when none are present."""
    files = shared_files(subdir, pattern)
    if not files:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"../shared/data/{subdir} absent"))]
    return [pytest.param(f, id=f.name[:60]) for f in files]


requires_nsys = pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not installed")
