"""What a benchmark's JSON carries besides its figures: the command, date, commit and machine that made them, so
that a row of benchmarks/README.md can be traced back to its run."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def provenance() -> dict:
    """The running benchmark's command line, the UTC date, the commit, the machine and how busy it was."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    script = Path(sys.argv[0]).resolve()
    name = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    return {
        "command": " ".join(["python", str(name), *sys.argv[1:]]),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit.stdout.strip(),
        "machine": " ".join(
            filter(None, [platform.machine(), platform.processor(), "python", platform.python_version()])
        ),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),  # the VMs are shared: a busy one inflates wall times most
    }


def write_json(path: Path | None, result: dict) -> None:
    """``result`` as indented JSON at ``path`` (its folder made); nothing when no path was asked for."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
