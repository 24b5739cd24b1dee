"""``profiler-kit memory``: report files for good input; one line, exit 2 and no files for bad input."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil

import pytest
from click.testing import CliRunner

from profiler_kit.build_memory import parse_run_label
from profiler_kit.cli import cli
from tests.conftest import FIXTURES, SHARED_DATA
from tests.memory_helpers import known_peak_snapshot, write

GPU_DIR = FIXTURES / "memory"
re_script_src = re.compile(r"<script[^>]*\bsrc=", re.I)


def run(*args):
    return CliRunner().invoke(cli, ["memory", *map(str, args)])


def test_report_on_gpu_fixtures(tmp_path):
    out = tmp_path / "rep"
    res = run(GPU_DIR, "-o", out, "--top", "5")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["memory.html", "memory.md"]
    md = (out / "memory.md").read_text()
    info = json.loads((GPU_DIR / "mlp_full_step_fp32.json").read_text())
    assert f"{info['max_memory_allocated']:,} bytes" in md
    assert "records max_memory_allocated" in md and "(equal)" in md
    assert "Peak memory per snapshot" in md and "Category rules" in md
    html = (out / "memory.html").read_text()
    assert "plotly" in html and "Allocated memory over time by category" in html
    assert not re_script_src.search(html)  # plotly.js is embedded, nothing loads from the network


def test_csv_format_writes_tables(tmp_path):
    out = tmp_path / "csv"
    res = run(GPU_DIR / "mlp_full_step_bf16.pickle.gz", "-o", out, "--format", "csv")
    assert res.exit_code == 0, res.output
    names = {p.name for p in out.iterdir()}
    assert "memory.memory_category_rules.csv" in names and any(n.endswith("_by_category.csv") for n in names)


def test_shared_snapshot_dir(tmp_path):
    folder = SHARED_DATA / "mem_snapshot"
    if not folder.is_dir():
        pytest.skip("../shared/data/mem_snapshot absent")
    pick = sorted(folder.glob("*xl_ctx512_full_step_bf16*"))[:1] + sorted(folder.glob("*medium*"))[:1]
    work = tmp_path / "in" / "nested"
    work.mkdir(parents=True)
    for p in pick:
        shutil.copy(p, work / p.name)
    res = run(tmp_path / "in", "-o", tmp_path / "out")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "out" / "memory.md").read_text()
    assert "were allocated before the first recorded event" in md  # these traces started after the model was built
    assert "| xl " in md and "| full_step " in md and "| bf16 " in md


def _bad_inputs(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "device_traces": [[Evil()]]}))
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(pickle.dumps(known_peak_snapshot())[:300])
    return marker, {
        "code": evil,
        "truncated": cut,
        "not a snapshot": write(tmp_path / "weights.pickle", {"state_dict": {"w": [1.0]}}),
        "empty trace": write(tmp_path / "empty.pickle", {"segments": [], "device_traces": [[]]}),
        "missing": tmp_path / "absent.pickle",
    }


@pytest.mark.parametrize("how", ["alone", "strict"])
@pytest.mark.parametrize("case", ["code", "truncated", "not a snapshot", "empty trace", "missing"])
def test_bad_input_exit_2_one_line_no_files(tmp_path, case, how):
    """A bad snapshot named alone, or beside a good one with --strict (without, it is skipped: test_batch_cli)."""
    marker, bad = _bad_inputs(tmp_path)
    good = write(tmp_path / "good.pickle", known_peak_snapshot())
    out = tmp_path / "out"
    res = run(bad[case], "-o", out) if how == "alone" else run(good, bad[case], "--strict", "-o", out)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and str(bad[case].name) in lines[0]
    assert "Traceback" not in res.output
    assert not out.exists() or not any(out.iterdir())
    assert not marker.exists()


def test_no_snapshots_in_dir(tmp_path):
    (tmp_path / "empty").mkdir()
    res = run(tmp_path / "empty", "-o", tmp_path / "out")
    assert res.exit_code == 2 and "no snapshot files" in res.stderr


def test_help_has_example():
    res = CliRunner().invoke(cli, ["memory", "--help"])
    assert res.exit_code == 0 and "Example: profiler-kit memory" in res.output


@pytest.mark.parametrize(
    "name, sidecar, expected",
    [
        ("xl_ctx512_full_step_bf16", None, {"size": "xl", "ctx": "512", "mode": "full_step", "precision": "bf16"}),
        (
            "memory_snapshot_xl_fwd_cl512_dtypetorch.bfloat16",
            None,
            {"size": "xl", "ctx": "512", "mode": "forward", "precision": "bf16"},
        ),
        ("medium_512_training_memory_snapshot", None, {"size": "medium", "ctx": "512", "mode": "full_step"}),
        ("2.7B_ctx256_forward_fp32", None, {"size": "2.7B", "ctx": "256", "mode": "forward", "precision": "fp32"}),
        (
            "snap",
            {"model_size": "large", "context_length": 128, "precision": "bfloat16"},
            {"size": "large", "ctx": "128", "precision": "bf16"},
        ),
    ],
)
def test_parse_run_label(name, sidecar, expected):
    assert parse_run_label(name, sidecar) == expected


def test_record_folders_label_generic_snapshot_names(tmp_path):
    """record --memory writes <run_id>/memory.pickle: the run folder, not "memory", labels it."""
    from profiler_kit.build_memory import load_snapshots

    src = FIXTURES / "memory" / "mlp_full_step_bf16.pickle.gz"
    paths = []
    for run_id in ("xl_ctx128_train_bf16", "xl_ctx512_forward_fp32"):
        (tmp_path / run_id).mkdir()
        dst = tmp_path / run_id / "memory.pickle.gz"
        dst.write_bytes(src.read_bytes())
        paths.append(dst)
    labels = [(label, fields.get("ctx"), fields.get("precision")) for label, _, fields in load_snapshots(paths)]
    assert [lab for lab, _, _ in labels] == ["xl_ctx128_train_bf16", "xl_ctx512_forward_fp32"]
    assert [str(c) for _, c, _ in labels] == ["128", "512"] and [p for _, _, p in labels] == ["bf16", "fp32"]
