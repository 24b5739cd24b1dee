"""The attention benchmark report: JSONL rows -> tables and a chart, bad input -> InputError."""

from __future__ import annotations

import json

import pytest
from profiler_kit.analyze.errors import InputError

from profiler_kit.attention_report import build_attention_report, read_bench_jsonl


def _row(impl, seq, fwd_bwd_ms, status="ok"):
    return {"impl": impl, "batch": 1, "heads": 16, "seq": seq, "d_head": 64, "dtype": "bfloat16", "causal": True,
            "status": status, "fwd_ms": 1.0, "bwd_ms": 2.0, "fwd_bwd_ms": fwd_bwd_ms, "fwd_tflops": 1.0,
            "bwd_tflops": 2.0, "fwd_bwd_tflops": 3.0, "device": "GPU"}  # fmt: skip


def test_report_from_jsonl(tmp_path):
    path = tmp_path / "grid.jsonl"
    rows = [_row("triton", 16384, 5.0), _row("sdpa", 16384, 4.0), _row("naive", 16384, None, status="oom")]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    df = read_bench_jsonl([path])
    assert df.set_index("impl").loc["sdpa", "fwd_bwd_ns"] == 4_000_000
    report = build_attention_report(df)
    lead = report.tables()[0].df
    assert list(lead["impl"]) == ["sdpa", "triton"]  # fastest first
    titles = [t.title for t in report.tables()]
    assert "Failed or out of memory" in titles
    assert report.figures()[0].y == "fwd_bwd_tflops"


def test_bad_jsonl_is_input_error(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("{not json\n")
    with pytest.raises(InputError, match="not a JSON line"):
        read_bench_jsonl([path])
    with pytest.raises(InputError, match="cannot read"):
        read_bench_jsonl([tmp_path / "missing.jsonl"])


def test_timing_rows_with_missing_or_odd_fields_are_one_clear_error(tmp_path, capsys):
    from profiler_kit.attention_report import main

    row = {"impl": "triton", "status": "ok", "dtype": "bfloat16", "batch": 1, "heads": 16, "seq": 128, "d_head": 64}
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({**row, "causal": True, "fwd_ms": "fast"}) + "\n")
    with pytest.raises(InputError, match=r"x.jsonl:1: fwd_ms should be a number, found 'fast'"):
        read_bench_jsonl([path])
    path.write_text(json.dumps(row) + "\n")
    assert main([str(path), "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"Error: {path}:1: no causal\n" and not (tmp_path / "out").exists()


def test_rows_say_how_they_were_timed(tmp_path):
    """Rows timed taking turns carry their rounds; older rows (one after the other) leave the cell empty."""
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps({**_row("triton", 4096, 1.0), "rounds": 5}) + "\n" + json.dumps(_row("sdpa", 4096, 1.2)))
    every = [t for t in build_attention_report(read_bench_jsonl([path])).tables() if t.title == "All rows"][0].df
    rounds = every.set_index("impl")["rounds"]
    assert rounds["triton"] == 5 and rounds.isna()["sdpa"]
    path.write_text(json.dumps({**_row("triton", 4096, 1.0), "rounds": "five"}) + "\n")
    with pytest.raises(InputError, match="rounds"):
        read_bench_jsonl([path])
