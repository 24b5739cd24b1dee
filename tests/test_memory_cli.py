"""``profiler-kit memory``: report files for good input; one line, exit 2 and no files for bad input."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil

import pytest
from click.testing import CliRunner

from profiler_kit.build_memory import run_fields
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
    assert "| xl " not in md and "| bf16 " not in md  # no run.json beside them: no fields guessed from file names


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
    "sidecar, expected",
    [
        (None, {}),
        ({"model_size": "large", "context_length": 128, "precision": "bfloat16"}, {"size": "large", "ctx": "128", "precision": "bf16"}),
        ({"run_id": "x", "spec": {"size": "xl", "ctx": 512, "mode": "forward_backward", "precision": "bf16"}},
         {"size": "xl", "ctx": "512", "mode": "forward_backward", "precision": "bf16"}),
        ({"dtype": "torch.float32", "spec": {"precision": "bf16"}}, {"precision": "fp32"}),  # top level first
    ],
)  # fmt: skip
def test_run_fields_from_metadata_only(sidecar, expected):
    assert run_fields(sidecar) == expected


@pytest.mark.parametrize(
    "name",
    ["xl_bf16_False_ctx128", "forward_and_backward_medium_512", "memory_snapshot_xl_fwd_cl512_dtypetorch.bfloat16"],
)
def test_file_names_give_no_fields(tmp_path, name):
    """Names mislead ("bf16_False" meant bf16 off; "forward_and_backward" is not forward): nothing is read from them."""
    from profiler_kit.build_memory import load_snapshots

    path = write(tmp_path / f"{name}.pickle", known_peak_snapshot())
    [(label, _, fields)] = load_snapshots([path])
    assert label == name and fields == {}


def test_record_folders_label_generic_snapshot_names(tmp_path):
    """record --memory writes <run_id>/memory.pickle beside run.json: its run id and spec label the snapshot."""
    from profiler_kit.build_memory import load_snapshots

    src = FIXTURES / "memory" / "mlp_full_step_bf16.pickle.gz"
    paths = []
    for run_id, ctx, precision in (("run_a", 128, "bf16"), ("run_b", 512, "fp32")):
        (tmp_path / run_id).mkdir()
        dst = tmp_path / run_id / "memory.pickle.gz"
        dst.write_bytes(src.read_bytes())
        spec = {"size": "xl", "ctx": ctx, "mode": "train", "precision": precision}
        (tmp_path / run_id / "run.json").write_text(
            json.dumps({"run_id": f"{run_id}_id", "status": "ok", "spec": spec})
        )
        paths.append(dst)
    labels = [(label, fields.get("ctx"), fields.get("precision")) for label, _, fields in load_snapshots(paths)]
    assert labels == [("run_a_id", "128", "bf16"), ("run_b_id", "512", "fp32")]
    bare = tmp_path / "bare" / "memory.pickle.gz"
    bare.parent.mkdir()
    bare.write_bytes(src.read_bytes())
    assert load_snapshots([bare])[0][0] == "bare"  # no run.json: the folder names the run, fields stay empty
    assert [lab for lab, _, _ in load_snapshots(paths, labels=["A", "B"])] == ["A", "B"]
