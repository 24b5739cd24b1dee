"""profiler-kit diff: matching, noise bands, the --fail-on gate, memory snapshots, and the CLI."""

from __future__ import annotations

import copy
import gzip
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from profiler_kit.analyze.breakdown import analyze_trace
from profiler_kit.analyze.diff import (
    Measures,
    bootstrap,
    combine,
    compare,
    evaluate_rules,
    measure_trace,
    normalize_kernel_names,
    parse_rule,
)
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.sources import Source, read_trace

from profiler_kit.build_diff import DIFF_TABLES
from tests.conftest import ROOT, SHARED_DATA
from tests.memory_helpers import USER, MiB, T, event, known_peak_snapshot, write

GEMM_FWD = "ampere_sgemm_128x64_tn"
GEMM_BWD = "ampere_sgemm_64x64_nt"
POINTWISE = "triton_poi_fused_add_mul_3"
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, MulFunctor<float>>>(int)"
ADAM = "void at::native::multi_tensor_apply_kernel<TensorListMetadata<4>, FusedAdamMathFunctor<float, 4>>(int)"
# phase -> kernels it launches (name, duration in us)
PHASES = {
    "forward": [(GEMM_FWD, 100), (POINTWISE, 20), (GEMM_FWD, 100), (POINTWISE, 20)],
    "backward": [(GEMM_BWD, 200), (MUL, 30), (GEMM_BWD, 200), (MUL, 30)],
    "optimizer": [(ADAM, 50)],
}


OPS = {GEMM_FWD: "aten::mm", GEMM_BWD: "aten::mm", POINTWISE: "aten::add", MUL: "aten::mul", ADAM: "aten::_fused_adam_"}


def kineto_trace(path: Path, steps: int = 8, scale=None, rename=None, extra=(), seed: int = 0, ops=False) -> Path:
    """A Kineto trace of ``steps`` ProfilerStep#N ranges, each with forward/backward/optimizer ranges and
    the kernels of PHASES (durations jittered by up to 3%, from ``seed``). ``scale`` multiplies a kernel's
    durations, ``rename`` renames (None: drops) kernels, ``extra`` adds (name, us) kernels to the optimizer;
    with ``ops`` each launch is inside a cpu_op event (OPS, by the kernel's name before renaming)."""
    rng = np.random.default_rng(seed)
    scale, rename = scale or {}, rename or {}
    events, corr, t, gpu = [], 1, 1000.0, 0.0
    cpu = {"ph": "X", "pid": 1, "tid": 1}
    for s in range(steps):
        step_start = t
        for phase, kernels in PHASES.items():
            phase_start = t
            for i, (name, us) in enumerate([*kernels, *(extra if phase == "optimizer" else ())]):
                jitter = 1 + rng.uniform(-0.03, 0.03) if i < len(kernels) else 1.0  # extras draw none
                op = OPS.get(name, "aten::other")
                name = rename.get(name, name)
                t += 2
                if name is None:
                    continue
                if ops:
                    events.append({**cpu, "cat": "cpu_op", "name": op, "ts": t - 1, "dur": 6,
                                   "args": {"Input Dims": [[8, 64], [64, 32]]}})  # fmt: skip
                events.append({**cpu, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t, "dur": 4, "args": {"correlation": corr}})  # fmt: skip
                gpu = max(gpu, t + 10)
                dur = round(us * jitter * scale.get(name, 1.0), 3)
                events.append({"ph": "X", "pid": 0, "tid": 7, "cat": "kernel", "name": name, "ts": gpu, "dur": dur,
                               "args": {"correlation": corr, "device": 0, "stream": 7}})  # fmt: skip
                gpu += dur + 1
                corr += 1
                t += 6
            t += 2
            events.append({**cpu, "cat": "user_annotation", "name": phase, "ts": phase_start, "dur": t - phase_start})
            t += 2
        t = max(t, gpu) + 5  # the step waits for its kernels (a synchronize)
        events.append({**cpu, "cat": "user_annotation", "name": f"ProfilerStep#{s}", "ts": step_start - 1, "dur": t - step_start + 2})  # fmt: skip
        t += 10
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def measures(path: Path) -> Measures:
    trace = read_trace(Source(path, "kineto"), details=False)
    return measure_trace(trace.nvtx, analyze_trace(trace, DIFF_TABLES))


def rows(path: Path) -> pd.DataFrame:
    """The rows of one table written with --format json."""
    return pd.DataFrame(json.loads(path.read_text())["rows"])


def significant(compared: pd.DataFrame, scope: str) -> set[str]:
    return set(compared.loc[(compared["scope"] == scope) & compared["significant"], "key"])


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "profiler_kit", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    """A trace and its copy with GEMM_BWD's instances 20% longer (same jitter)."""
    d = tmp_path_factory.mktemp("pair")
    return kineto_trace(d / "base.json"), kineto_trace(d / "slow.json", scale={GEMM_BWD: 1.2})


def test_a_trace_against_itself_changes_nothing(pair):
    base = measures(pair[0])
    compared = compare(base, measures(pair[0]))
    assert len(compared) > 20 and (compared["status"] == "matched").all()
    assert (compared["delta"] == 0).all()
    assert not compared["significant"].any()
    noisy = compared[compared["base_instances"] >= 2]
    assert {"kernel", "category", "phase", "step", "range"} <= set(noisy["scope"])  # steps and phases are instances
    assert ((noisy["ci_low"] <= 0) & (noisy["ci_high"] >= 0)).all()
    rules = [parse_rule(r) for r in ("step>+3%", "category:gemm>+5%", "kernel:.>+1%", "phase:backward>+0%")]
    assert not evaluate_rules(rules, base, base, compared)["broken"].any()


def test_one_kernel_20_percent_longer_is_the_only_significant_change(pair):
    base, new = measures(pair[0]), measures(pair[1])
    compared = compare(base, new)
    assert significant(compared, "kernel") == {GEMM_BWD}
    assert significant(compared, "category") == {"gemm"}
    assert significant(compared, "phase") == {"backward"}  # the only phase holding it
    assert significant(compared, "phase_wall") == set()  # CPU time of the phases: they do not wait for the GPU
    assert significant(compared, "step") == {"step_wall"}  # each step ends with a synchronize: it holds the kernel
    row = compared.set_index(["scope", "key"]).loc[("kernel", GEMM_BWD)]
    assert row["delta_frac"] == pytest.approx(0.2, abs=0.002)
    assert row["ci_low_frac"] < 0.2 < row["ci_high_frac"] and row["ci_low_frac"] > 0.15
    # GEMM per step: 200 us forward + 400 us backward; +80 us is +13%
    gemm = compared.set_index(["scope", "key"]).loc[("category", "gemm"), "change_frac"]
    assert gemm == pytest.approx(80 / 600, rel=0.05)
    verdicts = evaluate_rules(
        [parse_rule(r) for r in ("category:gemm>+5%", "category:gemm>+15%", "kernel:64x64>+10%", "step>+3%")],
        base,
        new,
        compared,
    )
    assert verdicts["broken"].tolist() == [True, False, True, True]


def test_independent_noise_is_not_significant(tmp_path):
    base = measures(kineto_trace(tmp_path / "a.json", seed=1))
    new = measures(kineto_trace(tmp_path / "b.json", seed=2))
    compared = compare(base, new)
    assert not compared["significant"].any()
    assert (compared["delta"] != 0).any()


def test_new_removed_and_renamed_kernels(tmp_path):
    base = measures(kineto_trace(tmp_path / "a.json"))
    new = measures(
        kineto_trace(
            tmp_path / "b.json",
            rename={POINTWISE: "triton_poi_fused_add_mul_12", ADAM: None},
            extra=[("my_new_kernel", 40)],
        )
    )
    kernels = compare(base, new).query("scope == 'kernel'").set_index("key")
    assert kernels.loc["triton_poi_fused_add_mul", "status"] == "matched"  # Inductor's suffix folded
    assert kernels.loc["triton_poi_fused_add_mul", "delta"] == 0
    assert kernels.loc[ADAM, "status"] == "removed" and kernels.loc[ADAM, "new"] == 0
    assert kernels.loc["my_new_kernel", "status"] == "new"
    assert kernels.loc["my_new_kernel", "new"] == pytest.approx(8 * 40_000, rel=0.04)
    assert kernels.loc["my_new_kernel", "significant"] and kernels.loc[ADAM, "significant"]
    assert kernels.loc[ADAM, "change_frac"] == -1


def test_name_rules():
    names = pd.Series(["triton_poi_fused_add_mul_12", "triton_red_fused_sum_0", "ampere_sgemm_128x64_tn", "x_12"])
    cats = pd.Series(["elementwise", "reduction", "gemm", "other"])
    assert normalize_kernel_names(names, cats).tolist() == [
        "triton_poi_fused_add_mul",
        "triton_red_fused_sum",
        "ampere_sgemm_128x64_tn",
        "x_12",
    ]
    folded = normalize_kernel_names(names, cats, frozenset({"gemm_tiles"}))
    assert folded[2] == "ampere_sgemm_<tile>_tn"


def test_bootstrap_interval_is_reproducible_and_covers_a_known_shift():
    rng = np.random.default_rng(5)
    a, b = rng.normal(100, 1, 30), rng.normal(110, 1, 30)
    assert bootstrap(a, b) == bootstrap(a, b)
    lo, hi, rlo, rhi = bootstrap(a, b)
    assert lo < b.mean() - a.mean() < hi and 8 < lo and hi < 12
    assert rlo < b.mean() / a.mean() - 1 < rhi


def test_one_instance_a_side_has_no_noise_estimate(tmp_path):
    base = measures(kineto_trace(tmp_path / "a.json", steps=1))
    new = measures(kineto_trace(tmp_path / "b.json", steps=1, scale={GEMM_BWD: 1.2}))
    compared = compare(base, new)
    kernels = compared[compared["scope"] == "kernel"]
    assert kernels["noise"].str.startswith("no noise estimate").all() and not compared["significant"].any()
    # the gate compares the change itself, and says so
    verdicts = evaluate_rules([parse_rule("kernel:64x64>+10%")], base, new, compared)
    assert verdicts["broken"].tolist() == [True] and "no noise estimate" in verdicts["line"][0]


def test_several_files_a_side_are_instances(tmp_path):
    sides = [[measures(kineto_trace(tmp_path / f"{s}{i}.json", steps=1, seed=i, scale=sc)) for i in range(4)]
             for s, sc in (("a", {}), ("b", {GEMM_BWD: 1.2}))]  # fmt: skip
    base, new = combine(sides[0]), combine(sides[1])
    compared = compare(base, new)
    assert significant(compared, "kernel") == {GEMM_BWD}
    row = compared.set_index(["scope", "key"]).loc[("kernel", GEMM_BWD)]
    assert row["base_instances"] == 4 and "files" in row["noise"]
    assert row["base"] == pytest.approx(np.mean([s.values.set_index("key").loc[GEMM_BWD, "value"] for s in sides[0]]))


@pytest.mark.parametrize(
    "rule",
    ["step", "step>3", "step>+3 %", "kernel>+3%", "category>+5%", "kernel:(>+1%", "peak_allocated>+1ms",
     "step>+1GiB", "bogus>+1%", "step=+3%", "kernel:>+1%", "category:gem>+5%"],
)  # fmt: skip
def test_malformed_rules_are_input_errors(rule):
    with pytest.raises(InputError, match="--fail-on"):
        parse_rule(rule)


def test_rule_grammar():
    r = parse_rule("kernel:a>b|c>+10%")
    assert (r.scope, r.pattern.pattern, r.op, r.limit, r.unit) == ("kernel", "a>b|c", ">", pytest.approx(0.1), "frac")
    r = parse_rule("peak_allocated>+1GiB")
    assert (r.scope, r.key, r.limit, r.unit) == ("memory", "peak_allocated", 2**30, "bytes")
    assert parse_rule("step<-2ms").limit == -2e6


def extra_alloc_at_peak(size: int) -> dict:
    """known_peak_snapshot with one more allocation, from another source line, live across its peak."""
    snap = copy.deepcopy(known_peak_snapshot())
    line = {**USER, "line": 999}
    trace = snap["device_traces"][0]
    trace.insert(4, event("alloc", T + 2048, size, 13, [line]))  # right after the peak's allocation
    trace.append(event("free_requested", T + 2048, size, 17, [line]))
    trace.append(event("free_completed", T + 2048, size, 18, [line]))
    return snap


def test_memory_snapshot_with_an_extra_allocation_at_the_peak(tmp_path):
    a = write(tmp_path / "a.pickle", known_peak_snapshot())
    b = write(tmp_path / "b.pickle", extra_alloc_at_peak(512 * 1024))
    proc = run_cli("diff", str(a), str(b), "-o", str(tmp_path / "out"), "--format", "json", "--no-html")
    assert proc.returncode == 0, proc.stderr
    peaks = rows(tmp_path / "out" / "diff.memory_peaks.json")
    alloc = peaks.set_index("key").loc["peak_allocated"]
    assert alloc["delta_bytes"] == 512 * 1024
    assert alloc["base_bytes"] == 20 * MiB + 1024  # known_peak_snapshot's peak (its docstring)
    lines = rows(tmp_path / "out" / "diff.memory_lines.json")
    changed = lines[lines["delta_bytes"] != 0]
    assert (
        len(changed) == 1 and changed["key"].iloc[0].startswith("model.py:999") and changed["status"].iloc[0] == "new"
    )
    gate = run_cli(
        "diff", str(a), str(b), "-o", str(tmp_path / "g"), "--no-html", "--fail-on", "peak_allocated>+256KiB"
    )
    assert gate.returncode == 1 and gate.stdout.count("\n") == 1 and "peak_allocated" in gate.stdout
    ok = run_cli("diff", str(a), str(b), "-o", str(tmp_path / "g"), "--no-html", "--fail-on", "peak_allocated>+1MiB")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_cli_gate_exit_codes(pair, tmp_path):
    base, slow = map(str, pair)
    out = ["-o", str(tmp_path / "out"), "--no-html"]
    same = run_cli("diff", base, base, *out, "--fail-on", "step>+3%", "--fail-on", "category:gemm>+5%")
    assert same.returncode == 0 and same.stdout == "", same.stderr
    html = ["-o", str(tmp_path / "html")]  # with the charts
    worse = run_cli("diff", base, slow, *html, "--fail-on", "category:gemm>+5%", "--fail-on", "kernel:64x64>+30%")
    assert worse.returncode == 1, worse.stderr
    assert (tmp_path / "html" / "diff.html").exists() or "plotly is not installed" in worse.stderr
    (line,) = worse.stdout.splitlines()  # one line per broken rule: the kernel rule holds
    assert line.startswith("FAIL category:gemm>+5%: gemm changed +13.")
    passes = run_cli("diff", base, slow, *out, "--fail-on", "category:gemm>+15%")
    assert passes.returncode == 0
    bad = run_cli("diff", base, slow, *out, "--fail-on", "gemm>5")
    assert (
        bad.returncode == 2 and bad.stderr.startswith("Error: --fail-on 'gemm>5'") and len(bad.stderr.splitlines()) == 1
    )
    missing = run_cli("diff", base, str(tmp_path / "nope.json"), *out)
    assert missing.returncode == 2 and missing.stderr.startswith("Error: ") and len(missing.stderr.splitlines()) == 1
    assert run_cli("diff", base, "nope.json", "-o", str(tmp_path / "fresh")).returncode == 2
    assert not (tmp_path / "fresh").exists()  # nothing written by a failed run
    snapshot = write(tmp_path / "s.pickle", known_peak_snapshot())
    unlike = run_cli("diff", base, str(snapshot), *out)
    assert unlike.returncode == 2 and unlike.stderr.startswith("Error: ") and "nothing in common" in unlike.stderr


def test_totals_of_each_side_equal_the_report(pair, tmp_path):
    base, slow = map(str, pair)
    assert run_cli("diff", base, slow, "-o", str(tmp_path / "d"), "--format", "json", "--no-html").returncode == 0
    for side, path in (("base", base), ("new", slow)):
        rep = run_cli("report", path, "-o", str(tmp_path / side), "--format", "json", "--no-html", "--top", "100")
        assert rep.returncode == 0, rep.stderr
        label = Path(path).name.removesuffix(".json")
        summary = rows(tmp_path / side / f"report.{label}_summary.json").iloc[0]
        ours = rows(tmp_path / "d" / "diff.summary.json").set_index("key")[f"{side}_ns"]
        assert ours["kernel_time"] == summary["kernel_time_ns"] and ours["gpu_busy"] == summary["gpu_busy_ns"]
        top = rows(tmp_path / side / f"report.{label}_top_kernels.json").set_index("kernel")["total_ns"]
        every = rows(tmp_path / "d" / "diff.all.json").query("scope == 'kernel'").set_index("key")[side]
        top.index = normalize_kernel_names(top.index.to_series(), top.index.to_series())  # one name per kernel here
        pd.testing.assert_series_equal(every[top.index], top, check_names=False, check_dtype=False)
        cats = rows(tmp_path / side / f"report.{label}_categories.json").set_index("category")["total_ns"]
        ours = rows(tmp_path / "d" / "diff.categories.json").set_index("key")[f"{side}_ns"]
        pd.testing.assert_series_equal(
            ours[ours > 0].sort_index(),
            cats[cats > 0].sort_index(),
            check_names=False,
            check_index_type=False,
            check_dtype=False,
        )


NSYS = SHARED_DATA / "nsys_sqlite" / "bolongcheng__assignment2-systems__small_opt_A100.sqlite"


@pytest.mark.skipif(not NSYS.exists(), reason="../shared/data absent")
def test_real_nsys_export_with_one_kernel_made_longer(tmp_path):
    """A real export against a copy whose one GEMM kernel's instances are 20% longer (edited in SQL)."""
    slow = tmp_path / "slow.sqlite"
    slow.write_bytes(NSYS.read_bytes())
    with sqlite3.connect(slow) as con:
        (name_id,) = con.execute(
            "SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY demangledName ORDER BY sum(end - start) DESC"
        ).fetchone()
        con.execute(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + CAST((end - start) * 1.2 AS INTEGER) WHERE demangledName = ?",
            (name_id,),
        )
        (name,) = con.execute("SELECT value FROM StringIds WHERE id = ?", (name_id,)).fetchone()
    base, new = (measure_trace(t.nvtx, analyze_trace(t, DIFF_TABLES)) for t in
                 (read_trace(Source(p, "nsys-sqlite"), details=False) for p in (NSYS, slow)))  # fmt: skip
    compared = compare(base, new).set_index(["scope", "key"])
    kernels = compared.loc["kernel"]
    changed = kernels[kernels["delta"] != 0]
    assert list(changed.index) == [name] and changed["delta_frac"].iloc[0] == pytest.approx(0.2, abs=0.001)
    assert compared.loc[("category", "gemm"), "delta"] == changed["delta"].iloc[0]
    # one instance a side (no step ranges): nothing is called significant, the gate compares changes
    assert not compared.loc[["kernel", "category"]]["significant"].any()
    gemm_change = compared.loc[("category", "gemm"), "delta_frac"]
    verdicts = evaluate_rules(
        [
            parse_rule(f"category:gemm>+{100 * gemm_change - 0.5:.2f}%"),
            parse_rule(f"category:gemm>+{100 * gemm_change + 0.5:.2f}%"),
        ],
        base,
        new,
        compared.reset_index(),
    )
    assert verdicts["broken"].tolist() == [True, False]


def test_gzip_kineto_and_folder_sides(tmp_path, pair):
    folder = tmp_path / "runs"
    folder.mkdir()
    for i in range(3):
        data = kineto_trace(tmp_path / f"r{i}.json", steps=2, seed=i).read_bytes()
        (folder / f"r{i}.json.gz").write_bytes(gzip.compress(data))
    proc = run_cli("diff", str(folder), str(folder), "-o", str(tmp_path / "o"), "--no-html")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "o" / "diff.md").read_text()
    assert "r2.json.gz" in text and "0 significant change(s)" in text


def test_runs_whose_kernels_differ_compare_per_op(tmp_path):
    """Another GPU: every kernel renamed, the GEMMs also 20% slower; the ops that launched them still match."""
    other_gpu = {GEMM_FWD: "sm90_gemm_a", GEMM_BWD: "sm90_gemm_b", POINTWISE: "p2", MUL: "m2", ADAM: "a2"}
    a = kineto_trace(tmp_path / "a.json", ops=True)
    b = kineto_trace(tmp_path / "b.json", ops=True, rename=other_gpu, scale={"sm90_gemm_a": 1.2, "sm90_gemm_b": 1.2})
    out = tmp_path / "out"
    proc = run_cli(
        "diff", str(a), str(b), "-o", str(out), "--format", "json", "--no-html", "--fail-on", "op:^aten::mm>+10%"
    )
    assert proc.returncode == 1 and proc.stdout.startswith("FAIL op:^aten::mm>+10%: aten::mm [[8, 64], [64, 32]]")
    ops = rows(out / "diff.ops.json").set_index("key")
    mm, add = ops.loc["aten::mm [[8, 64], [64, 32]]"], ops.loc["aten::add [[8, 64], [64, 32]]"]
    assert mm["delta_frac"] == pytest.approx(0.2, abs=0.002)
    assert add["delta_ns"] == 0 and add["base_ns"] == pytest.approx(8 * 2 * 20_000, rel=0.03)
    every = rows(out / "diff.all.json")
    assert set(every.loc[every["scope"] == "kernel", "status"]) == {"new", "removed"}  # no kernel name matched
    same = run_cli("diff", str(a), str(a), "-o", str(tmp_path / "same"), "--format", "json", "--no-html")
    assert same.returncode == 0 and not (tmp_path / "same" / "diff.ops.json").exists()  # kernels match: no op level


def sweep_folder(root: Path, slower: float = 1.0, oom: bool = False) -> Path:
    """Two cells (small ctx128/ctx256 train fp32) of a sweep, 10 timed steps each, jittered by up to 2%."""
    rng = np.random.default_rng(3)
    for ctx in (128, 256):
        base_ms = {"forward": 10.0, "backward": 20.0, "optimizer": 5.0}
        times = {p: [v * ctx / 128 * (1 + rng.uniform(-0.02, 0.02)) for _ in range(10)] for p, v in base_ms.items()}
        if ctx == 128:
            times["backward"] = [t * slower for t in times["backward"]]
        times["step_wall"] = [sum(v) for v in zip(*times.values(), strict=True)]
        run_id = f"small_ctx{ctx}_train_fp32"
        meta = {
            "run_id": run_id,
            "status": "ok",
            "spec": {"size": "small", "ctx": ctx, "mode": "train", "precision": "fp32"},
        }
        meta["unprofiled"] = {
            "phases": {p: {"n": 10, "mean": float(np.mean(v))} for p, v in times.items()},
            "times_ms": times,
        }
        if oom and ctx == 256:
            meta = {**meta, "status": "oom", "unprofiled": None}
        (root / run_id).mkdir(parents=True)
        (root / run_id / "run.json").write_text(json.dumps(meta))
    return root


def test_two_sweep_folders(tmp_path):
    a = sweep_folder(tmp_path / "a")
    b = sweep_folder(tmp_path / "b", slower=1.2, oom=True)
    out = tmp_path / "out"
    proc = run_cli(
        "diff",
        str(a),
        str(b),
        "-o",
        str(out),
        "--format",
        "json",
        "--no-html",
        "--fail-on",
        "cell:ctx128.*step_wall>+5%",
    )
    assert proc.returncode == 1 and proc.stdout.startswith("FAIL cell:ctx128.*step_wall>+5%"), proc.stderr
    status = rows(out / "diff.cell_status.json")
    assert status.to_dict("records") == [{"cell": "small ctx256 train fp32", "status_base": "ok", "status_new": "oom"}]
    cells = rows(out / "diff.all.json").query("scope == 'cell'").set_index("key")
    backward = cells.loc["small ctx128 train fp32 backward"]
    assert backward["significant"] and backward["change_frac"] == pytest.approx(0.2, abs=0.01)
    assert not cells.loc["small ctx128 train fp32 forward", "significant"]
    assert cells.loc["small ctx256 train fp32 forward", "status"] == "removed"  # no times on the OOM side
    same = run_cli("diff", str(a), str(a), "-o", str(tmp_path / "same"), "--no-html", "--fail-on", "cell:.>+1%")
    assert same.returncode == 0, same.stdout + same.stderr


MEM = SHARED_DATA / "mem_snapshot"
FORWARD_128 = MEM / "LINYUNLinYun__CS336-assignment2-systems__xl_ctx128_forward_none.pickle"
STEP_512 = MEM / "LINYUNLinYun__CS336-assignment2-systems__xl_ctx512_full_step_bf16.pickle"


@pytest.mark.skipif(not (FORWARD_128.exists() and STEP_512.exists()), reason="../shared/data absent")
def test_real_snapshot_pair_matches_the_memory_command(tmp_path):
    """XL forward at ctx 128 against a full bf16 step at ctx 512 (checked by hand once, frozen here)."""
    d = run_cli("diff", str(FORWARD_128), str(STEP_512), "-o", str(tmp_path / "d"), "--format", "json", "--no-html")
    m = run_cli("memory", str(FORWARD_128), str(STEP_512), "-o", str(tmp_path / "m"), "--format", "json", "--no-html")
    assert d.returncode == 0 and m.returncode == 0, d.stderr + m.stderr
    peaks = rows(tmp_path / "d" / "diff.memory_peaks.json").set_index("key")
    ref = rows(tmp_path / "m" / "memory.memory_comparison.json")
    assert peaks.loc["peak_allocated", ["base_bytes", "new_bytes"]].tolist() == ref["peak_allocated_bytes"].tolist()
    assert peaks.loc["peak_reserved", ["base_bytes", "new_bytes"]].tolist() == ref["peak_reserved_bytes"].tolist()
    assert ref["peak_allocated_bytes"].tolist() == [19384430592, 68417112576]  # frozen
    cats = rows(tmp_path / "d" / "diff.memory_categories.json").set_index("key")
    # the full step holds gradients and optimizer state at its peak; the forward pass neither
    assert cats.loc["gradients", "status"] == "new" and cats.loc["gradients", "new_bytes"] == 13610156032
    assert cats.loc["optimizer state", "new_bytes"] == 13627959296
    gate = run_cli("diff", str(FORWARD_128), str(STEP_512), "-o", str(tmp_path / "g"), "--no-html",
                   "--fail-on", "peak_allocated>+45GiB", "--fail-on", "peak_allocated>+46GiB")  # fmt: skip
    assert gate.returncode == 1 and gate.stdout.splitlines()[0].startswith("FAIL peak_allocated>+45GiB")
    assert len(gate.stdout.splitlines()) == 1  # +45.66 GiB: the 46 GiB rule holds
    grads = run_cli("diff", str(FORWARD_128), str(STEP_512), "-o", str(tmp_path / "g"), "--no-html",
                    "--fail-on", "memory_category:^grad>+12GiB", "--fail-on", "memory_line:silu<-1GiB")  # fmt: skip
    assert [line.split(":")[0] for line in grads.stdout.splitlines()] == ["FAIL memory_category", "FAIL memory_line"]


def test_different_step_counts_compare_per_step(tmp_path):
    base, new = (
        measures(kineto_trace(tmp_path / "a.json", steps=6)),
        measures(kineto_trace(tmp_path / "b.json", steps=12)),
    )
    compared = compare(base, new).set_index(["scope", "key"])
    gemm = compared.loc[("category", "gemm")]
    assert gemm["delta_frac"] == pytest.approx(1.0, abs=0.02)  # twice the steps, twice the total
    assert abs(gemm["change_frac"]) < 0.02 and not gemm["significant"]  # the same per step
    from profiler_kit.build_diff import findings

    assert any("step counts differ (6 vs 12)" in line for line in findings(compared.reset_index(), 0.02))


DDP = SHARED_DATA / "nsys_sqlite" / "lizhieffe__assignment2-systems__ddp53_profile.sqlite"


@pytest.mark.skipif(not DDP.exists(), reason="../shared/data absent")
def test_communication_rows_of_a_two_rank_export():
    """Two ranks' NCCL time summed as the ddp report's per-rank table gives it (frozen: checked by hand once)."""
    from profiler_kit.analyze.ranks import summarize_rank_time

    trace = read_trace(Source(DDP, "nsys-sqlite"), details=False)
    tables = analyze_trace(trace, DIFF_TABLES)
    m = measure_trace(trace.nvtx, tables)
    values = m.values.set_index(["scope", "key"])["value"]
    ops = tables["ops"]
    ranks = summarize_rank_time(ops[ops["is_kernel"].to_numpy(dtype=bool)])
    assert values[("summary", "communication")] == ranks["comm_ns"].sum() == 253402977
    assert values[("summary", "exposed_communication")] == ranks["exposed_comm_ns"].sum() == 229338087
    compared = compare(m, m)
    assert (compared["delta"] == 0).all() and not compared["significant"].any()


def test_welch_interval_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    from profiler_kit.analyze.diff import interval, t975, welch

    assert [t975(df) for df in range(1, 31)] == pytest.approx([stats.t.ppf(0.975, df) for df in range(1, 31)], abs=1e-3)
    rng = np.random.default_rng(1)
    a, b = rng.normal(100, 3, 4), rng.normal(106, 1, 5)
    lo, hi, rlo, rhi = welch(a, b)
    ref = stats.ttest_ind(b, a, equal_var=False).confidence_interval(0.95)
    assert lo <= ref.low and hi >= ref.high  # df rounded down: never narrower than scipy's
    assert hi - lo == pytest.approx(ref.high - ref.low, rel=0.1)
    assert interval(a, b)[4] == "Welch t" and interval(rng.normal(0, 1, 8), rng.normal(0, 1, 9))[4] == "bootstrap"
    assert welch(np.ones(3), np.ones(3))[:2] == (0.0, 0.0)  # no spread, no change: not significant


def test_record_folders_compare_timed_steps_and_traces(tmp_path, pair):
    """A folder of one run (record): its run.json's timed steps and its trace."""
    for side, trace in zip("ab", pair, strict=True):
        run = tmp_path / side / "small_ctx128_train_fp32"
        run.mkdir(parents=True)
        (run / "trace.json").write_bytes(trace.read_bytes())
        times = {"step_wall": [1.0, 1.02, 0.99] if side == "a" else [1.2, 1.22, 1.19]}
        spec = {"size": "small", "ctx": 128, "mode": "train", "precision": "fp32"}
        (run / "run.json").write_text(json.dumps({"run_id": run.name, "status": "ok", "spec": spec,
                                                  "unprofiled": {"times_ms": times}}))  # fmt: skip
    a, b = (str(tmp_path / s / "small_ctx128_train_fp32") for s in "ab")
    proc = run_cli("diff", a, b, "-o", str(tmp_path / "o"), "--format", "json", "--no-html",
                   "--fail-on", "cell:step_wall>+10%", "--fail-on", "category:gemm>+5%")  # fmt: skip
    assert proc.returncode == 1 and len(proc.stdout.splitlines()) == 2, proc.stdout + proc.stderr
    every = rows(tmp_path / "o" / "diff.all.json").set_index(["scope", "key"])
    assert every.loc[("cell", "small ctx128 train fp32 step_wall"), "noise"].startswith(
        "Welch t over timed steps, 3 vs 3"
    )
    assert every.loc[("kernel", GEMM_BWD), "significant"]
