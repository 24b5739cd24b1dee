"""The CLI's process tuning (profiler_kit/process.py): environment set before numpy is imported, user values kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from profiler_kit.process import ENVIRONMENT
from tests.conftest import ROOT

# Runs the real entry point on the bundled examples and records the environment at the moment numpy, then pyarrow,
# is first imported (a meta-path finder that only watches), and the exit code.
PROBE = """
import json, os, sys
seen = {}
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in ("numpy", "pyarrow") and name not in seen:
            seen[name] = {k: os.environ.get(k) for k in %(names)r}
        return None
sys.meta_path.insert(0, Watch())
import atexit
atexit.register(lambda: print(json.dumps(seen)))
sys.argv = ["profiler-kit", "report", %(examples)r, "-o", %(out)r, "--no-html"]
from profiler_kit.cli import main
main()
"""


def _probe(tmp_path, env: dict) -> tuple[int, dict]:
    code = PROBE % {"names": sorted(ENVIRONMENT), "examples": str(ROOT / "examples"), "out": str(tmp_path)}
    base = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT} | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=base | env, capture_output=True, text=True, cwd=ROOT)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def test_environment_is_set_before_numpy_and_pyarrow_are_imported(tmp_path):
    code, seen = _probe(tmp_path, {})
    assert code == 0 and (tmp_path / "report.md").exists()
    assert set(seen) == {"numpy", "pyarrow"}  # both imported by a report, each after the settings
    for module in seen.values():
        assert module == ENVIRONMENT


def test_a_value_the_user_set_wins(tmp_path):
    code, seen = _probe(tmp_path, {"NUMPY_MADVISE_HUGEPAGE": "1"})
    assert code == 0
    assert seen["numpy"] == ENVIRONMENT | {"NUMPY_MADVISE_HUGEPAGE": "1"}
