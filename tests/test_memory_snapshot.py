"""The snapshot reader: refuses code and bad files, tolerates format drift, agrees with torch's _memory_viz."""

from __future__ import annotations

import copy
import gzip
import json
import os
import pickle

import pytest
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.memory_snapshot import USER_FRAME_SKIP, read_memory_snapshot, top_frame

from tests.conftest import shared_params
from tests.memory_helpers import CPP, TORCH, USER, event, known_peak_snapshot, write

REAL = shared_params("mem_snapshot", "*.pickle")


class RunsShell:
    """Unpickling this with pickle.load runs a shell command that creates a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class CallsEval:
    def __reduce__(self):
        return (eval, ("__import__('os').system('false')",))


@pytest.mark.parametrize("gz", [False, True])
def test_malicious_pickle_is_refused_and_nothing_runs(tmp_path, gz):
    marker = tmp_path / "pwned"
    snap = known_peak_snapshot()
    snap["allocator_settings"]["evil"] = RunsShell(marker)
    path = write(tmp_path / "evil.pickle", snap, gz=gz)
    with pytest.raises(InputError, match=r"references code \((posix|os|nt)\.system\)"):
        read_memory_snapshot(path)
    assert not marker.exists()


def test_plain_pickle_would_have_run_the_payload(tmp_path):
    """Guards the test above: the payload is live, so 'marker absent' means our loader stopped it."""
    marker = tmp_path / "pwned"
    pickle.loads(pickle.dumps(RunsShell(marker)))
    assert marker.exists()


def test_eval_global_and_persistent_ids_are_refused(tmp_path):
    with pytest.raises(InputError, match="references code"):
        read_memory_snapshot(write(tmp_path / "eval.pickle", {"segments": [], "device_traces": [[CallsEval()]]}))

    class WithPid(pickle.Pickler):
        def persistent_id(self, obj):
            return "x" if obj == "persist-me" else None

    path = tmp_path / "pid.pickle"
    with open(path, "wb") as fh:
        WithPid(fh).dump({"segments": [], "device_traces": [["persist-me"]]})
    with pytest.raises(InputError, match="persistent ids"):
        read_memory_snapshot(path)


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_file(tmp_path, gz):
    full = pickle.dumps(known_peak_snapshot())
    data = gzip.compress(full) if gz else full
    path = tmp_path / "cut.pickle"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated"):
        read_memory_snapshot(path)


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"weights": [1, 2]}, "not a torch.cuda.memory snapshot"),
        ([1, 2, 3], "not a torch.cuda.memory snapshot"),
        ({"segments": [], "device_traces": [[], []]}, "no trace events"),
        ({"segments": [], "device_traces": []}, "no trace events"),
        ({"segments": [], "device_traces": [[1, 2]]}, "not a list of event dicts"),
        ({"segments": [], "device_traces": [[{"addr": 1}]]}, "malformed snapshot"),
    ],
)
def test_not_a_snapshot(tmp_path, payload, message):
    with pytest.raises(InputError, match=message):
        read_memory_snapshot(write(tmp_path / "x.pickle", payload))


def test_missing_and_non_pickle_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_memory_snapshot(tmp_path / "absent.pickle")
    text = tmp_path / "notes.pickle"
    text.write_text("hello, not a pickle\n")
    with pytest.raises(InputError, match="unreadable pickle"):
        read_memory_snapshot(text)


def test_known_snapshot_tables(tmp_path):
    snap = read_memory_snapshot(write(tmp_path / "s.pickle.gz", known_peak_snapshot(), gz=True))
    ev = snap.events
    assert ev["action"].astype(str).tolist()[:3] == ["segment_alloc", "alloc", "segment_alloc"]
    assert ev["time_ns"].tolist()[0] == 10_000
    assert ev["top_frame"].astype(str).tolist()[1] == "model.py:385 forward"  # C++ and torch frames skipped
    assert ev["top_frame"].astype(str).tolist()[0] == "(no frames)"
    assert snap.segments["total_size_bytes"].sum() == 22 * 2**20
    assert set(snap.blocks["state"].astype(str)) == {"inactive", "active_allocated"}
    assert snap.devices() == [0]


@pytest.mark.parametrize(("value", "kept"), [(123, True), ([1], False), ("12 GB", False)])
def test_sidecar_with_odd_fields_is_left_out(tmp_path, value, kept):
    """The JSON beside a snapshot is optional context: with a field of another type it is ignored, not fatal."""
    path = write(tmp_path / "s.pickle", known_peak_snapshot())
    (tmp_path / "s.json").write_text(json.dumps({"max_memory_allocated": value, "precision": "bf16"}))
    sidecar = read_memory_snapshot(path).meta["sidecar"]
    assert (sidecar.get("max_memory_allocated") == value) == kept and (sidecar == {}) != kept


def test_format_variations(tmp_path):
    """Older/newer spellings: awaiting_free state, legacy history, no time_us/frames, several devices, segment_map."""
    data = known_peak_snapshot()
    data["segments"][1]["blocks"][1]["state"] = "active_awaiting_free"
    legacy = data["segments"][1]["blocks"][0]
    del legacy["frames"], legacy["requested_size"], legacy["address"]
    legacy["history"] = [{"addr": legacy.get("address"), "real_size": 1000, "frames": [USER]}]
    dev1 = [
        {"action": "segment_map", "addr": 7 << 40, "size": 2 * 2**20, "stream": 0},
        {"action": "alloc", "addr": 7 << 40, "size": 4096, "stream": 0},
    ]
    data["device_traces"] = [copy.deepcopy(data["device_traces"][0]), dev1]
    for e in data["device_traces"][0]:
        e.pop("frames")
    snap = read_memory_snapshot(write(tmp_path / "v.pickle", data))
    assert "active_pending_free" in set(snap.blocks["state"].astype(str))
    blk = snap.blocks[snap.blocks["segment_address"] == (1 << 41)].iloc[0]
    assert (blk["address"], blk["requested_size_bytes"], blk["top_frame"]) == (1 << 41, 1000, "model.py:385 forward")
    assert sorted(snap.devices()) == [0, 1]
    one = snap.on_device(1)
    assert one.events["time_ns"].tolist() == [-1, -1]
    assert one.events["action"].astype(str).tolist() == ["segment_map", "alloc"]
    assert (snap.on_device(0).events["stack_id"] == -1).all()


@pytest.mark.parametrize(
    "frames, expected",
    [
        ([CPP, TORCH, USER], "model.py:385 forward"),
        (
            [{"filename": "/usr/lib/python3.12/contextlib.py", "line": 81, "name": "inner"}, USER],
            "model.py:385 forward",
        ),
        ([{"filename": "<frozen runpy>", "line": 88, "name": "_run_code"}, USER], "model.py:385 forward"),
        (
            [{"filename": "/x/site-packages/einops/einops.py", "line": 9, "name": "einsum"}, USER],
            "model.py:385 forward",
        ),
        ([TORCH], "module.py:1790 _call_impl"),  # only library Python frames: the first of them
        (
            [
                CPP,
                {"filename": "??", "line": 0, "name": "torch::autograd::generated::BmmBackward0_apply_functional(x)"},
            ],
            "(autograd) BmmBackward0",
        ),
        (
            [{"filename": "", "line": 0, "name": "void torch::autograd::AccumulateGrad::accumulateGrad<f>"}],
            "(autograd) AccumulateGrad",
        ),
        ([CPP], "(C++ only)"),
        ([], "(no frames)"),
    ],
)
def test_top_frame_rules(frames, expected):
    assert top_frame(tuple((f["filename"], f["line"], f["name"]) for f in frames)) == expected
    assert len(USER_FRAME_SKIP) >= 4


@pytest.mark.parametrize("path", REAL)
def test_real_snapshot_agrees_with_memory_viz(path):
    """Per segment, allocated bytes equal torch's calc_active; totals equal what segsum prints."""
    mv = pytest.importorskip("torch.cuda._memory_viz")
    raw = pickle.load(open(path, "rb"))  # trusted shared data, loaded the way torch's tools do
    snap = read_memory_snapshot(path)
    ours = snap.blocks[snap.blocks["state"] == "active_allocated"].groupby("segment_address")["size_bytes"].sum()
    for seg in raw["segments"]:
        assert ours.get(seg["address"], 0) == mv.calc_active(seg)
    text = mv.segsum(raw)
    reserved = int(snap.segments["total_size_bytes"].sum())
    requested_active = int(snap.blocks.loc[snap.blocks["state"] == "active_allocated", "requested_size_bytes"].sum())
    assert f"total_reserved: {mv.Bytes(reserved)}" in text
    assert f"total_allocated: {mv.Bytes(requested_active)}" in text  # segsum counts requested sizes
    assert f"segments: {len(snap.segments)}" in text
    assert len(snap.events) == sum(len(t) for t in raw["device_traces"])
    assert (snap.events.groupby("device").size().to_dict()) == {
        d: len(t) for d, t in enumerate(raw["device_traces"]) if t
    }


@pytest.mark.parametrize("path", REAL)
def test_real_events_match_raw(path):
    raw = pickle.load(open(path, "rb"))
    snap = read_memory_snapshot(path)
    trace = next(t for t in raw["device_traces"] if t)
    ev = snap.on_device(snap.devices()[0]).events
    for i in (0, len(trace) // 2, len(trace) - 1):
        e = trace[i]
        row = ev.iloc[i]
        assert (row["action"], row["addr"], row["size_bytes"], row["time_ns"]) == (
            e["action"],
            e["addr"],
            e["size"],
            e["time_us"] * 1000,
        )


def test_event_helper_shape():
    assert set(event("alloc", 1, 2, 3)) == {"action", "addr", "size", "stream", "time_us", "frames"}
