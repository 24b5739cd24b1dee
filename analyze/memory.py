"""What fills GPU memory: replay a snapshot's trace into a timeline, the peak and what is live at it.

Pure functions over the tables of ``analyze.memory_snapshot`` (one device at a
time). Two byte counts are kept apart:

- ``requested``: the sizes the trace records for alloc/free (what the caller
  asked for; what PyTorch's memory_viz plots);
- ``allocated``: allocator block sizes, what ``torch.cuda.memory_allocated``
  and ``max_memory_allocated`` count. A request is rounded up to 512 bytes, and
  a large-pool block keeps the whole free block when splitting would leave
  1 MiB or less (``should_split`` in c10/cuda/CUDACachingAllocator.cpp).
  ``_block_sizes`` replays that rule over the segment layout; the snapshot's
  blocks at dump time check it.

The allocated counter drops when a free is *requested* (the block may stay
reserved for pending stream uses until ``free_completed``).

Without history (``analyze_dump_state``) only the state at dump time is known:
allocated and reserved per segment, blocks, the largest free block. An ``oom``
entry (``analyze_oom``) is judged by OOM_VERDICTS from the request, the device's
free memory then and the free blocks the replay rebuilds at that moment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from profiler_kit.analyze.memory_snapshot import BEFORE_TRACE, NO_FRAMES, USER_FRAME_SKIP, MemorySnapshot

KMIN_BLOCK = 512  # kMinBlockSize
KSMALL_SIZE = 1 << 20  # kSmallSize: requests up to this go to the small pool
NEVER = np.iinfo(np.int64).max

# Allocation categories from the allocation's call stack (every frame "file:line name", one per line).
# Allocation categories from call stacks (every frame "file:line name", one per line). "site" says which
# stack a rule reads: where the block was allocated, or where it was freed (-1 stack when not freed in the trace).
CATEGORY_RULES = (  # first match wins
    # category                  rule                                                  site     pattern (regex, multiline)
    ("gradients", "autograd accumulates a parameter's .grad", "alloc", r"AccumulateGrad"),
    ("gradients", "released by optimizer zero_grad (a .grad set to None)", "free", r"\.py:\d+ zero_grad$"),
    ("optimizer state", "inside optimizer.step (state buffers and step temporaries)", "alloc",
     r"[/\\]torch[/\\]optim[/\\]|optim\w*\.py:\d+ (step|_init_group|\w*adam\w*)$"),
    ("parameters", "module construction or .to()/.cuda()/load_state_dict", "alloc",
     r"module\.py:\d+ (_apply|to|cuda|convert|load_state_dict)$|[/\\]nn[/\\]init\.py:|:\d+ (__init__|reset_parameters)$"),
    ("activations/temporaries", "backward pass (autograd engine)", "alloc", r"autograd::Engine|autograd::generated::|\.py:\d+ backward$"),
    ("activations/temporaries", "forward pass (a frame named forward)", "alloc", r"\.py:\d+ forward$"),
    ("other", "no frames recorded", "alloc", r"^$"),
    ("other", "anything else (data, user code outside forward/step)", "alloc", r""),
)  # fmt: skip
CATEGORIES = ("parameters", "gradients", "optimizer state", "activations/temporaries", "other")
_CATEGORY_RE = [(c, r, site, re.compile(p, re.M)) for c, r, site, p in CATEGORY_RULES]


def text_values(series: pd.Series) -> np.ndarray:
    """A column of names as a numpy object array. For a categorical, its categories taken by code: pandas'
    ``astype(str)`` builds an Arrow string per row (2-3 s for the columns of a 1M-event trace)."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        cats = np.asarray(series.cat.categories.astype(object).tolist() + [""], dtype=object)
        return cats[series.cat.codes.to_numpy()]  # code -1 (missing) takes the appended ""
    return series.to_numpy(dtype=object)


def round_size(size: np.ndarray) -> np.ndarray:
    """Allocator rounding of requested sizes: at least 512 bytes, a multiple of 512 (``round_size``)."""
    size = np.asarray(size, dtype=np.int64)
    return np.maximum(KMIN_BLOCK, (size + KMIN_BLOCK - 1) // KMIN_BLOCK * KMIN_BLOCK)


def _pairs(seq: np.ndarray, addr: np.ndarray, is_alloc: np.ndarray, is_free: np.ndarray):
    """Match each alloc with the next free of its address.

    Returns (free_seq per alloc row or NEVER, matched mask per free row,
    number of allocs of an address that was already live).
    """
    rows = np.flatnonzero(is_alloc | is_free)
    order = rows[np.lexsort((seq[rows], addr[rows]))]
    a, al, fr = addr[order], is_alloc[order], is_free[order]
    same_next = np.zeros(len(order), dtype=bool)
    same_next[:-1] = a[1:] == a[:-1]
    alloc_freed = al & np.concatenate([same_next[:-1] & fr[1:], [False]]) if len(order) else al
    free_matched = fr & np.concatenate([[False], same_next[:-1] & al[:-1]]) if len(order) else fr
    double_alloc = int((al & np.concatenate([same_next[:-1] & al[1:], [False]])).sum()) if len(order) else 0
    free_seq = np.full(len(seq), NEVER, dtype=np.int64)
    idx = np.flatnonzero(alloc_freed)
    free_seq[order[idx]] = seq[order[idx + 1]]
    matched = np.zeros(len(seq), dtype=bool)
    matched[order[free_matched]] = True
    return free_seq, matched, double_alloc


def _initial_segments(events: pd.DataFrame, segments: pd.DataFrame) -> dict[int, int]:
    """Segments that existed before the first event: those at dump time, undone by the trace's segment events."""
    segs = dict(zip(segments["address"].tolist(), segments["total_size_bytes"].tolist(), strict=True))
    seg_ev = events[events["action"].isin(["segment_alloc", "segment_free"])]
    for action, addr, size in zip(
        seg_ev["action"].tolist()[::-1], seg_ev["addr"].tolist()[::-1], seg_ev["size_bytes"].tolist()[::-1], strict=True
    ):
        if action == "segment_alloc":
            segs.pop(addr, None)
        else:
            segs[addr] = size
    return segs


def _lifetimes(starts_addr, starts_t, ends_addr, ends_t) -> np.ndarray:
    """For each start (address, time), the time of the next end at the same address after it; NEVER if none."""
    addr = np.concatenate([starts_addr, ends_addr])
    t = np.concatenate([starts_t, ends_t])
    is_end = np.concatenate([np.zeros(len(starts_addr), bool), np.ones(len(ends_addr), bool)])
    order = np.lexsort((is_end, t, addr))  # at one time a start sorts before an end
    a, tt, e = addr[order], t[order], is_end[order]
    nxt = np.full(len(order), NEVER, dtype=np.int64)
    ok = np.zeros(len(order), bool)
    ok[:-1] = (a[1:] == a[:-1]) & e[1:]
    nxt[:-1] = np.where(ok[:-1], tt[1:], NEVER)
    out = np.empty(len(order), dtype=np.int64)
    out[order] = nxt
    return out[: len(starts_addr)]


def _latest_at(keys: np.ndarray, rank: np.ndarray, t: np.ndarray, m: int) -> np.ndarray:
    """Index into ``keys`` (rank * m + start + 1, sorted) of the latest entry with rank ``rank`` that starts at or
    before ``t``; -1 where there is none."""
    pos = np.searchsorted(keys, rank * m + t + 1, side="right") - 1
    ok = (pos >= 0) & (keys[np.maximum(pos, 0)] // m == rank)
    return np.where(ok, pos, -1)


def _block_sizes(
    events: pd.DataFrame, rounded: np.ndarray, initial_live: list[int], initial_segs: dict[int, int], expandable: bool
) -> tuple[np.ndarray, int]:
    """Allocator block size for every alloc event (other rows: 0), and how many large allocs had no known segment.

    Small-pool blocks and expandable segments always split, so the block is the
    rounded request. A large-pool block starts a free region that ends at the
    next live block or the segment end; it is split only when more than 1 MiB
    would remain. Vectorized over lifetimes (time = row of ``events``): segments
    live from their segment_alloc to their segment_free, large blocks from their
    alloc to the next large free_completed of their address or their segment's
    end. Each alloc then looks for the lowest address above it, within its
    segment and the 1 MiB that decides the split, whose latest block is live:
    one numpy pass per distinct address it steps over.
    """
    action = text_values(events["action"])
    is_alloc = action == "alloc"
    out = np.where(is_alloc, rounded, 0)
    large = is_alloc & (rounded > KSMALL_SIZE)
    if expandable or not large.any():
        return out, 0
    n = len(events)
    m = n + 2
    addr = events["addr"].to_numpy()
    sizes = events["size_bytes"].to_numpy()
    # segment lifetimes: those before the trace from time -1, then each segment_alloc; each ends at its segment_free
    sa, sf = np.flatnonzero(action == "segment_alloc"), np.flatnonzero(action == "segment_free")
    init = np.array(sorted(initial_segs), dtype=np.int64)
    s_addr = np.concatenate([init, addr[sa]])
    s_size = np.concatenate([np.array([initial_segs[a] for a in init.tolist()], dtype=np.int64), sizes[sa]])
    s_from = np.concatenate([np.full(len(init), -1, dtype=np.int64), sa])
    s_to = _lifetimes(s_addr, s_from, addr[sf], sf)
    s_order = np.lexsort((s_from, s_addr))
    s_addr, s_size, s_from, s_to = s_addr[s_order], s_size[s_order], s_from[s_order], s_to[s_order]
    s_uniq, s_rank = np.unique(s_addr, return_inverse=True)
    s_keys = s_rank * m + s_from + 1

    def segment_at(a: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Row of the segment lifetime that holds address ``a`` at time ``t``; -1 where none does."""
        r = np.searchsorted(s_uniq, a, side="right") - 1
        j = np.where(r >= 0, _latest_at(s_keys, np.maximum(r, 0), t, m), -1)
        js = np.maximum(j, 0)
        ok = (j >= 0) & (s_to[js] > t) & (a < s_addr[js] + s_size[js])
        j = np.where(ok, j, -1)
        for q in np.flatnonzero(~ok).tolist():  # a segment further down that reaches this high: search them all
            hit = np.flatnonzero((s_addr <= a[q]) & (a[q] < s_addr + s_size) & (s_from <= t[q]) & (s_to > t[q]))
            j[q] = hit[-1] if len(hit) else -1
        return j

    # block lifetimes: large allocs in a known segment, and blocks live before the trace in a segment then
    big = np.flatnonzero(large)
    seg_of_alloc = segment_at(addr[big], big)
    unknown = int((seg_of_alloc < 0).sum())
    pre = np.array(sorted(initial_live), dtype=np.int64)
    seg_of_pre = segment_at(pre, np.full(len(pre), -1, dtype=np.int64)) if len(pre) else pre
    known = seg_of_alloc >= 0
    b_addr = np.concatenate([pre[seg_of_pre >= 0], addr[big][known]])
    b_from = np.concatenate([np.full(int((seg_of_pre >= 0).sum()), -1, dtype=np.int64), big[known]])
    b_seg = np.concatenate([seg_of_pre[seg_of_pre >= 0], seg_of_alloc[known]])
    frees = np.flatnonzero((action == "free_completed") & (rounded > KSMALL_SIZE))
    b_to = np.minimum(_lifetimes(b_addr, b_from, addr[frees], frees), s_to[b_seg])
    b_order = np.lexsort((b_from, b_addr))
    b_addr, b_from, b_to = b_addr[b_order], b_from[b_order], b_to[b_order]
    b_uniq, b_rank = np.unique(b_addr, return_inverse=True)
    b_keys = b_rank * m + b_from + 1

    # each alloc: the first live block above it, up to where it decides the split and below its segment's end
    q_t, q_addr, q_size = big[known], addr[big][known], rounded[big][known]
    seg = seg_of_alloc[known]
    seg_end = s_addr[seg] + s_size[seg]
    limit = np.minimum(q_addr + q_size + KSMALL_SIZE, seg_end - 1)
    cur = np.searchsorted(b_uniq, q_addr, side="right")
    end = np.where(seg_end - q_addr - q_size <= KSMALL_SIZE, seg_end, -1)  # if nothing live is found
    todo = np.flatnonzero(cur < len(b_uniq))
    while len(todo):
        c = cur[todo]
        todo, c = todo[b_uniq[c] <= limit[todo]], c[b_uniq[c] <= limit[todo]]
        j = _latest_at(b_keys, c, q_t[todo], m)
        live = (j >= 0) & (b_to[np.maximum(j, 0)] > q_t[todo])
        end[todo[live]] = b_uniq[c[live]]
        todo = todo[~live]
        cur[todo] += 1
        todo = todo[cur[todo] < len(b_uniq)]
    out[q_t] = np.where(end >= 0, end - q_addr, q_size)
    return out, unknown


def replay_allocations(snap: MemorySnapshot) -> tuple[pd.DataFrame, dict]:
    """Every block lifetime the snapshot shows, from the trace plus the blocks that predate it.

    Args:
        snap: one device's tables (``MemorySnapshot.on_device``).

    Returns:
        (allocations, checks). allocations: ``alloc_seq`` (-1 = before the
        first event), ``free_seq`` (the free_requested event; NEVER = live at
        dump), ``address``, ``size_bytes`` (allocator block), ``requested_bytes``,
        ``time_ns`` of the alloc (-1 before trace), ``stack_id``, ``free_stack_id``
        (where it was freed; -1 when not freed in the trace), ``top_frame``,
        ``origin`` ("trace", "before trace, freed in trace", "before trace, live
        at dump"). checks: counts and bytes that say how complete the trace is
        and whether it agrees with the segments at dump time.
    """
    ev = snap.events.sort_values("seq").reset_index(drop=True)
    seq = ev["seq"].to_numpy()
    addr = ev["addr"].to_numpy()
    action = text_values(ev["action"])
    is_alloc = action == "alloc"
    stack = ev["stack_id"].to_numpy()
    seq0 = int(seq[0]) if len(seq) else 0
    free_action = "free_requested" if (action == "free_requested").any() else "free_completed"
    free_seq, free_matched, double_alloc = _pairs(seq, addr, is_alloc, action == free_action)
    done_seq, done_matched, _ = _pairs(seq, addr, is_alloc, action == "free_completed")

    blocks = snap.blocks
    active = blocks[blocks["state"] == "active_allocated"]
    occupied = blocks[blocks["state"] != "inactive"]
    live_end = is_alloc & (free_seq == NEVER)
    live_end_addr = set(addr[live_end].tolist())
    dump_size = dict(zip(active["address"].tolist(), active["size_bytes"].tolist(), strict=True))

    # blocks live when the trace starts: freed without an alloc in the trace, or live at dump but never allocated in it
    pre_freed = (action == free_action) & ~free_matched
    pre_done = (action == "free_completed") & ~done_matched
    pre_dump = active[~active["address"].isin(live_end_addr)]
    initial_live = set(addr[pre_done].tolist()) | (
        set(occupied["address"].tolist()) - set(addr[is_alloc & (done_seq == NEVER)].tolist())
    )

    settings = snap.meta.get("allocator_settings") or {}
    rounded = round_size(ev["size_bytes"].to_numpy())
    block, unknown_segment = _block_sizes(
        ev,
        rounded,
        list(initial_live),
        _initial_segments(ev, snap.segments),
        bool(snap.meta.get("expandable_segments")),
    )

    trace_rows = pd.DataFrame(
        {
            "alloc_seq": seq[is_alloc],
            "free_seq": free_seq[is_alloc],
            "address": addr[is_alloc],
            "size_bytes": block[is_alloc],
            "requested_bytes": ev["size_bytes"].to_numpy()[is_alloc],
            "time_ns": ev["time_ns"].to_numpy()[is_alloc],
            "stack_id": ev["stack_id"].to_numpy()[is_alloc],
            "free_stack_id": np.where(
                free_seq[is_alloc] == NEVER, -1, stack[np.minimum(free_seq[is_alloc] - seq0, len(ev) - 1)]
            ),
            "top_frame": text_values(ev["top_frame"])[is_alloc],
            "origin": "trace",
        }
    )
    freed_rows = pd.DataFrame(
        {
            "alloc_seq": -1,
            "free_seq": seq[pre_freed],
            "address": addr[pre_freed],
            "size_bytes": rounded[pre_freed],
            "requested_bytes": ev["size_bytes"].to_numpy()[pre_freed],
            "time_ns": -1,
            "stack_id": -1,
            "free_stack_id": stack[pre_freed],
            "top_frame": BEFORE_TRACE,
            "origin": "before trace, freed in trace",
        }
    )
    dump_rows = pd.DataFrame(
        {
            "alloc_seq": -1,
            "free_seq": NEVER,
            "address": pre_dump["address"].to_numpy(),
            "size_bytes": pre_dump["size_bytes"].to_numpy(),
            "requested_bytes": pre_dump["requested_size_bytes"].to_numpy(),
            "time_ns": -1,
            "stack_id": pre_dump["stack_id"].to_numpy(),
            "free_stack_id": -1,
            "top_frame": [
                t if s >= 0 else BEFORE_TRACE
                for t, s in zip(pre_dump["top_frame"].astype(str), pre_dump["stack_id"], strict=True)
            ],
            "origin": "before trace, live at dump",
        }
    )
    allocs = pd.concat([r for r in (freed_rows, dump_rows, trace_rows) if len(r)], ignore_index=True)
    if allocs.empty:
        allocs = trace_rows
    allocs["top_frame"] = allocs["top_frame"].astype("category")

    live_sizes = block[live_end]
    live_addrs = addr[live_end]
    in_dump = np.array([a in dump_size for a in live_addrs.tolist()], dtype=bool)
    size_ok = np.array(
        [dump_size.get(a) == s for a, s in zip(live_addrs.tolist(), live_sizes.tolist(), strict=True)], dtype=bool
    )
    roundup = settings.get("roundup_power2_divisions") or {}
    checks = {
        "events": int(len(ev)),
        "free_counted_at": free_action,
        "pre_trace_freed_blocks": int(pre_freed.sum()),
        "pre_trace_freed_bytes": int(rounded[pre_freed].sum()),
        "pre_trace_live_at_dump_blocks": int(len(pre_dump)),
        "pre_trace_live_at_dump_bytes": int(pre_dump["size_bytes"].sum()),
        "live_at_end_blocks": int(live_end.sum()),
        "live_at_end_missing_from_segments": int((~in_dump).sum()),
        "live_at_end_size_mismatch": int((in_dump & ~size_ok).sum()),
        "double_allocs": int(double_alloc),
        "large_allocs_without_segment": int(unknown_segment),
        "allocated_at_dump_bytes": int(active["size_bytes"].sum()),
        "allocated_at_dump_replayed_bytes": int(allocs.loc[allocs["free_seq"] == NEVER, "size_bytes"].sum()),
        "reserved_at_dump_bytes": int(snap.segments["total_size_bytes"].sum()),
        "block_sizes_exact": bool(unknown_segment == 0 and not any(int(v) > 1 for v in roundup.values())
                                  and int(settings.get("max_split_size", -1) or -1) in (-1, NEVER)),
    }  # fmt: skip
    checks["complete"] = checks["pre_trace_freed_blocks"] == 0 and checks["pre_trace_live_at_dump_blocks"] == 0
    return allocs, checks


def classify_allocations(allocs: pd.DataFrame, stacks: pd.DataFrame) -> pd.DataFrame:
    """Add ``category`` and ``rule`` from CATEGORY_RULES applied to each allocation's stacks.

    Input columns: ``stack_id`` (allocation site) and optionally ``free_stack_id``
    (free site); -1 = no frames. Each distinct pair is classified once, so the
    cost does not grow with the number of allocations. Gradients that autograd
    hands over without a copy are allocated by the backward node that made them;
    only their release by zero_grad tells them apart from temporaries.
    """
    texts = dict(zip(stacks["stack_id"].tolist(), stacks["stack"].tolist(), strict=True))
    texts[-1] = ""
    alloc_ids = allocs["stack_id"].to_numpy(dtype=np.int64)
    free_ids = (
        allocs["free_stack_id"].to_numpy(dtype=np.int64) if "free_stack_id" in allocs else np.full_like(alloc_ids, -1)
    )
    span = (
        int(free_ids.max(initial=-1)) + 2
    )  # one int64 key per (alloc, free) stack pair: np.unique on rows is 8x slower
    keys, inverse = np.unique(alloc_ids * span + free_ids + 1, return_inverse=True)
    hit = np.empty(len(keys), dtype=np.int64)
    for k, (a_id, f_id) in enumerate(zip((keys // span).tolist(), (keys % span - 1).tolist(), strict=True)):
        site_text = {"alloc": texts.get(a_id, ""), "free": texts.get(f_id, "") if f_id >= 0 else None}
        hit[k] = next(
            i
            for i, (_, _, site, rx) in enumerate(_CATEGORY_RE)
            if site_text[site] is not None and rx.search(site_text[site])
        )
    row_rule = hit[inverse.reshape(-1)]
    cat_of_rule = np.array([CATEGORIES.index(c) for c, _, _, _ in CATEGORY_RULES], dtype=np.int64)
    rule_names = list(dict.fromkeys(r for _, r, _, _ in CATEGORY_RULES))
    name_of_rule = np.array([rule_names.index(r) for _, r, _, _ in CATEGORY_RULES], dtype=np.int64)
    out = allocs.copy()
    out["category"] = pd.Categorical.from_codes(cat_of_rule[row_rule], categories=list(CATEGORIES))
    out["rule"] = pd.Categorical.from_codes(name_of_rule[row_rule], categories=rule_names)
    return out


def _levels(a_seq: np.ndarray, f_seq: np.ndarray, sizes: np.ndarray, seq0: int, n: int) -> np.ndarray:
    """Live bytes after each of ``n`` events: blocks from before the trace (a_seq < 0) plus a cumulative sum.

    An event allocates or frees at most one block, so the scatter indices are unique.
    """
    delta = np.zeros(n, dtype=np.int64)
    before = a_seq < 0
    delta[a_seq[~before] - seq0] += sizes[~before]
    freed = f_seq != NEVER
    delta[f_seq[freed] - seq0] -= sizes[freed]
    return int(sizes[before].sum()) + np.cumsum(delta)


def summarize_timeline(allocs: pd.DataFrame, events: pd.DataFrame, segments: pd.DataFrame) -> pd.DataFrame:
    """Allocated, requested and reserved bytes after every event.

    Returns one row per event: ``seq``, ``time_ns``, ``action``,
    ``allocated_bytes`` (block sizes, what max_memory_allocated counts),
    ``requested_bytes`` and ``reserved_bytes`` (segments). Levels include the
    blocks and segments that predate the trace, so they are absolute.
    Vectorized: one cumulative sum per column.
    """
    ev = events.sort_values("seq").reset_index(drop=True)
    n = len(ev)
    seq0 = int(ev["seq"].iloc[0]) if n else 0
    out = {"seq": ev["seq"].to_numpy(), "time_ns": ev["time_ns"].to_numpy(), "action": ev["action"]}
    a_seq = allocs["alloc_seq"].to_numpy()
    f_seq = allocs["free_seq"].to_numpy()
    for col, sizes in (
        ("allocated_bytes", allocs["size_bytes"].to_numpy()),
        ("requested_bytes", allocs["requested_bytes"].to_numpy()),
    ):
        out[col] = _levels(a_seq, f_seq, sizes, seq0, n)
    action = text_values(ev["action"])
    size = ev["size_bytes"].to_numpy()
    sign = np.select(
        [np.isin(action, ["segment_alloc", "segment_map"]), np.isin(action, ["segment_free", "segment_unmap"])],
        [1, -1],
        0,
    )
    change = np.cumsum(sign * size)
    reserved_dump = int(segments["total_size_bytes"].sum())
    out["reserved_bytes"] = reserved_dump - (change[-1] if n else 0) + change
    return pd.DataFrame(out)


def levels_before_trace(allocs: pd.DataFrame, events: pd.DataFrame, segments: pd.DataFrame) -> dict:
    """Allocated, requested and reserved bytes before the first recorded event (the blocks and segments that
    predate it): the level a trace starts from, which the first event may lower (a free, a segment_free)."""
    before = allocs["alloc_seq"].to_numpy() < 0
    action = text_values(events["action"])
    size = events["size_bytes"].to_numpy()
    grown = size[np.isin(action, ["segment_alloc", "segment_map"])].sum()
    shrunk = size[np.isin(action, ["segment_free", "segment_unmap"])].sum()
    return {
        "allocated_bytes": int(allocs["size_bytes"].to_numpy()[before].sum()),
        "requested_bytes": int(allocs["requested_bytes"].to_numpy()[before].sum()),
        "reserved_bytes": int(segments["total_size_bytes"].sum() - grown + shrunk),
    }


def find_peak(timeline: pd.DataFrame, column: str = "allocated_bytes", before: dict | None = None) -> dict:
    """The first event at which ``column`` is highest: its row index, seq, time and value.

    With ``before`` (``levels_before_trace``), a level before the first event that is
    at least as high as every later one is the peak (it was reached first): index -1, seq one before the first event's,
    the first event's time (the level held until then), ``before_first_event`` True.
    """
    values = timeline[column].to_numpy()
    if not len(values) or (before is not None and before[column] >= values.max() and before[column] > 0):
        first = timeline.iloc[0] if len(values) else {"seq": 0, "time_ns": -1}
        value = before[column] if before is not None else 0
        return {"index": -1, "seq": int(first["seq"]) - 1, "time_ns": int(first["time_ns"]), "bytes": int(value),
                "before_first_event": True}  # fmt: skip
    i = int(np.argmax(values))
    row = timeline.iloc[i]
    return {"index": i, "seq": int(row["seq"]), "time_ns": int(row["time_ns"]), "bytes": int(row[column]),
            "before_first_event": False}  # fmt: skip


def live_at(allocs: pd.DataFrame, seq: int) -> pd.DataFrame:
    """Allocations live right after event ``seq`` (allocated at or before it, free requested after it)."""
    return allocs[(allocs["alloc_seq"] <= seq) & (allocs["free_seq"] > seq)]


def summarize_live_by(live: pd.DataFrame, key: str | list[str], top: int | None = None) -> pd.DataFrame:
    """Live allocations grouped by ``key``: ``count``, ``total_bytes``, ``largest_bytes``, ``share_frac``.

    Sorted by total bytes; with ``top`` the rest is folded into one last row,
    labelled "(N more)" (left blank when the key is numeric).
    """
    keys = [key] if isinstance(key, str) else list(key)
    g = live.groupby(keys, observed=True, dropna=False)["size_bytes"]
    out = pd.DataFrame({"count": g.size(), "total_bytes": g.sum(), "largest_bytes": g.max()}).reset_index()
    out = out.sort_values(["total_bytes", "count"], ascending=False, kind="stable").reset_index(drop=True)
    total = int(live["size_bytes"].sum())
    if top is not None and len(out) > top:
        rest = out.iloc[top:]
        numeric = [k for k in keys if pd.api.types.is_numeric_dtype(out[k])]
        folded = {k: (np.nan if k in numeric else "") for k in keys}
        if keys[0] not in numeric:
            folded[keys[0]] = f"({len(rest)} more)"
        folded.update(
            count=int(rest["count"].sum()),
            total_bytes=int(rest["total_bytes"].sum()),
            largest_bytes=int(rest["largest_bytes"].max()),
        )
        head = out.iloc[:top].astype({k: object for k in keys if k not in numeric})
        out = pd.concat([head, pd.DataFrame([folded])], ignore_index=True)
    out["share_frac"] = out["total_bytes"] / total if total else 0.0
    return out


def summarize_segments(segments: pd.DataFrame, blocks: pd.DataFrame) -> pd.DataFrame:
    """Segments at dump time per pool (``segment_type``) and in total.

    Columns: ``pool``, ``segments``, ``reserved_bytes``, ``allocated_bytes``
    (active_allocated blocks), ``pending_free_bytes``, ``free_bytes``
    (inactive blocks), ``requested_bytes`` (of allocated blocks),
    ``rounding_bytes`` (allocated - requested), ``balanced`` (allocated +
    pending + free == reserved, the check of ``segsum`` in torch's _memory_viz).
    """
    b = blocks.assign(
        pool=blocks["segment_address"].map(
            dict(zip(segments["address"], segments["segment_type"].astype(str), strict=True))
        )
    )
    rows = []
    for pool, segs in [*segments.groupby(segments["segment_type"].astype(str)), ("total", segments)]:
        bb = b if pool == "total" else b[b["pool"] == pool]
        alloc = bb[bb["state"] == "active_allocated"]
        row = {
            "pool": pool,
            "segments": len(segs),
            "reserved_bytes": int(segs["total_size_bytes"].sum()),
            "allocated_bytes": int(alloc["size_bytes"].sum()),
            "pending_free_bytes": int(bb.loc[bb["state"] == "active_pending_free", "size_bytes"].sum()),
            "free_bytes": int(bb.loc[bb["state"] == "inactive", "size_bytes"].sum()),
            "requested_bytes": int(alloc["requested_size_bytes"].sum()),
        }
        row["rounding_bytes"] = row["allocated_bytes"] - row["requested_bytes"]
        row["balanced"] = (
            row["allocated_bytes"] + row["pending_free_bytes"] + row["free_bytes"] == row["reserved_bytes"]
        )
        rows.append(row)
    return pd.DataFrame(rows)


def downsample_indices(values: np.ndarray, max_points: int) -> np.ndarray:
    """Row indices to plot: the first, last, and each bucket's min and max, so the exact peak stays.

    Buckets are equal runs of events; at most about ``max_points`` indices come back.
    """
    n = len(values)
    if n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // 2)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    starts = edges[:-1]
    hi = np.maximum.reduceat(values, starts)
    lo = np.minimum.reduceat(values, starts)
    bucket = np.repeat(np.arange(buckets), np.diff(edges))
    picks = []
    for extreme in (hi, lo):
        hit = np.flatnonzero(values == extreme[bucket])
        picks.append(hit[np.r_[True, bucket[hit][1:] != bucket[hit][:-1]]])  # first hit per bucket
    return np.unique(np.concatenate([[0, n - 1, int(np.argmax(values))], *picks]))


def timeline_by(
    allocs: pd.DataFrame, timeline: pd.DataFrame, key: str, keep: list[str], max_points: int = 3000
) -> pd.DataFrame:
    """Live bytes after each sampled event split by ``allocs[key]``, for a stacked area chart.

    Values not in ``keep`` are summed as "other". Returns long rows: ``event``,
    ``time_ns`` (since the first event; -1 without times), ``key`` value,
    ``allocated_bytes``. Sampled rows come from ``downsample_indices`` on the
    total, so the stack reaches the exact peak.
    """
    idx = downsample_indices(timeline["allocated_bytes"].to_numpy(), max_points)
    n = len(timeline)
    seq0 = int(timeline["seq"].iloc[0])
    order = [k for k in keep if k != "other"] + ["other"]
    col = allocs[key]
    if isinstance(col.dtype, pd.CategoricalDtype):  # group by code: one small lookup, no string per row
        lut = np.array(
            [order.index(c) if c in order else len(order) - 1 for c in map(str, col.cat.categories)] + [len(order) - 1]
        )
        group = lut[col.cat.codes.to_numpy()]
    else:
        index = {k: i for i, k in enumerate(order)}
        group = np.array([index.get(str(v), len(order) - 1) for v in col.tolist()], dtype=np.int64)
    t = timeline["time_ns"].to_numpy()
    t_rel = np.where(t >= 0, t - t[t >= 0].min(), -1) if (t >= 0).any() else np.full(n, -1)
    a_seq, f_seq, sizes = (allocs[c].to_numpy() for c in ("alloc_seq", "free_seq", "size_bytes"))
    parts = []
    for g, name in enumerate(order):
        rows = group == g
        if not rows.any():
            continue
        level = _levels(a_seq[rows], f_seq[rows], sizes[rows], seq0, n)
        parts.append(pd.DataFrame({"event": idx, "time_ns": t_rel[idx], key: name, "allocated_bytes": level[idx]}))
    if not parts:
        return pd.DataFrame({"event": idx, "time_ns": t_rel[idx], key: "other", "allocated_bytes": 0})
    return pd.concat(parts, ignore_index=True)


@dataclass
class MemoryAnalysis:
    """Everything the memory report shows for one device of one snapshot with allocation history."""

    device: int
    allocations: pd.DataFrame
    timeline: pd.DataFrame
    checks: dict
    peak_allocated: dict
    peak_reserved: dict
    live_at_peak: pd.DataFrame
    segments_summary: pd.DataFrame
    start: dict = field(default_factory=dict)  # levels before the first event (levels_before_trace)
    ooms: list = field(default_factory=list)  # analyze_oom per oom entry
    segment_table: pd.DataFrame = field(default_factory=pd.DataFrame)  # summarize_segment_table at dump
    extra: dict = field(default_factory=dict)

    @property
    def fragmentation_at_peak_bytes(self) -> int:
        """Reserved minus allocated at the allocated peak: memory held by the cache but not in use."""
        if self.peak_allocated["index"] < 0:
            return int(self.start["reserved_bytes"] - self.start["allocated_bytes"])
        row = self.timeline.iloc[self.peak_allocated["index"]]
        return int(row["reserved_bytes"] - row["allocated_bytes"])


def analyze_snapshot(snap: MemorySnapshot, device: int | None = None) -> MemoryAnalysis:
    """Replay, classify and summarize one device (default: the one with the most events)."""
    device = snap.devices()[0] if device is None else device
    one = snap.on_device(device)
    allocs, checks = replay_allocations(one)
    allocs = classify_allocations(allocs, one.stacks)
    timeline = summarize_timeline(allocs, one.events, one.segments)
    start = levels_before_trace(allocs, one.events, one.segments)
    peak = find_peak(timeline, before=start)
    out = MemoryAnalysis(
        device=device,
        allocations=allocs,
        timeline=timeline,
        checks=checks,
        peak_allocated=peak,
        peak_reserved=find_peak(timeline, "reserved_bytes", before=start),
        live_at_peak=live_at(allocs, peak["seq"]),
        segments_summary=summarize_segments(one.segments, one.blocks),
        start=start,
        segment_table=summarize_segment_table(one.segments, one.blocks),
    )
    out.ooms = [analyze_oom(one, oom, out) for oom in one.ooms.to_dict("records")]
    return out


def summarize_segment_table(segments: pd.DataFrame, blocks: pd.DataFrame) -> pd.DataFrame:
    """One row per segment at dump time, largest first: reserved, allocated, pending and free bytes, the
    largest free (inactive) block, and the block counts. The largest free block bounds the largest request
    the segment could serve without a new cudaMalloc."""
    st = blocks["state"].astype(str)
    size = blocks["size_bytes"]
    g = blocks.assign(
        allocated=size.where(st == "active_allocated", 0),
        pending=size.where(st == "active_pending_free", 0),
        free=size.where(st == "inactive", 0),
        n_alloc=(st == "active_allocated").astype(np.int64),
    ).groupby("segment_address")
    agg = pd.DataFrame(
        {
            "allocated_bytes": g["allocated"].sum(),
            "pending_free_bytes": g["pending"].sum(),
            "free_bytes": g["free"].sum(),
            "largest_free_block_bytes": g["free"].max(),
            "blocks": g.size(),
            "allocated_blocks": g["n_alloc"].sum(),
        }
    )
    out = pd.DataFrame(
        {
            "address": segments["address"].to_numpy(),
            "pool": segments["segment_type"].astype(str).to_numpy(),
            "stream": segments["stream"].to_numpy(),
            "reserved_bytes": segments["total_size_bytes"].to_numpy(),
        }
    ).join(agg, on="address")
    out = out.fillna(0).astype({c: np.int64 for c in agg.columns})
    return out.sort_values(["reserved_bytes", "address"], ascending=[False, True], kind="stable").reset_index(drop=True)


@dataclass
class DumpState:
    """What a snapshot without allocation history shows for one device: the state at dump time."""

    device: int
    live: pd.DataFrame  # active_allocated blocks as allocations (size_bytes, requested_bytes, top_frame, category)
    segment_table: pd.DataFrame
    segments_summary: pd.DataFrame
    totals: dict
    ooms: list = field(default_factory=list)


def analyze_dump_state(snap: MemorySnapshot, device: int) -> DumpState:
    """Allocated and reserved bytes per segment and block at dump time, blocks classified by their frames."""
    one = snap.on_device(device)
    b = one.blocks[one.blocks["state"].astype(str) == "active_allocated"]
    live = pd.DataFrame(
        {
            "address": b["address"].to_numpy(),
            "size_bytes": b["size_bytes"].to_numpy(),
            "requested_bytes": b["requested_size_bytes"].to_numpy(),
            "stack_id": b["stack_id"].to_numpy(),
            "free_stack_id": np.full(len(b), -1, dtype=np.int64),
            "top_frame": b["top_frame"].astype(str).to_numpy(),
            "alloc_seq": np.full(len(b), -1, dtype=np.int64),
            "free_seq": np.full(len(b), NEVER, dtype=np.int64),
            "time_ns": np.full(len(b), -1, dtype=np.int64),
            "origin": "live at dump",
        }
    )
    live = classify_allocations(live, one.stacks)
    table = summarize_segment_table(one.segments, one.blocks)
    reserved = int(table["reserved_bytes"].sum())
    allocated = int(live["size_bytes"].sum())
    totals = {
        "segments": len(table),
        "reserved_bytes": reserved,
        "allocated_bytes": allocated,
        "requested_bytes": int(live["requested_bytes"].sum()),
        "pending_free_bytes": int(table["pending_free_bytes"].sum()),
        "free_bytes": int(table["free_bytes"].sum()),
        "cached_unallocated_bytes": reserved - allocated,
        "largest_free_block_bytes": int(table["largest_free_block_bytes"].max()) if len(table) else 0,
        "blocks_with_frames": int((live["stack_id"] >= 0).sum()),
        "blocks": len(live),
    }
    out = DumpState(device, live, table, summarize_segments(one.segments, one.blocks), totals)
    out.ooms = [analyze_oom(one, oom, None) for oom in one.ooms.to_dict("records")]
    return out


SMALL_SEGMENT = 2 << 20  # kSmallBuffer: every small-pool segment is this size


def segment_layout_at(allocs: pd.DataFrame, events: pd.DataFrame, segments: pd.DataFrame, seq: int):
    """Segments alive right after event ``seq`` and the live blocks inside them, rebuilt from the replay.

    Segments: those at dump time with the trace's segment events undone, then
    replayed up to ``seq``. A block occupies its segment from its alloc to its free
    (requested; the allocator completes pending frees before it reports an OOM).
    Returns (segment starts, segment sizes, live allocations inside a segment with
    ``segment`` = index into the starts).
    """
    segs = _initial_segments(events, segments)
    ev = events[(events["seq"] <= seq) & events["action"].isin(["segment_alloc", "segment_free"])]
    for action, addr, size in zip(
        text_values(ev["action"]).tolist(), ev["addr"].tolist(), ev["size_bytes"].tolist(), strict=True
    ):
        if action == "segment_alloc":
            segs[addr] = size
        else:
            segs.pop(addr, None)
    starts = np.array(sorted(segs), dtype=np.int64)
    sizes = np.array([segs[a] for a in starts.tolist()], dtype=np.int64)
    live = live_at(allocs, seq)
    addr = live["address"].to_numpy()
    j = np.searchsorted(starts, addr, side="right") - 1
    inside = (j >= 0) & (addr < starts[np.maximum(j, 0)] + sizes[np.maximum(j, 0)]) if len(starts) else j < -1
    return starts, sizes, live[inside].assign(segment=j[inside])


def free_blocks_at(allocs: pd.DataFrame, events: pd.DataFrame, segments: pd.DataFrame, seq: int) -> pd.DataFrame:
    """The free gaps of every segment right after event ``seq`` (``segment_layout_at``).

    Returns ``segment_address``, ``segment_bytes``, ``gap_bytes`` per gap.
    """
    starts, sizes, live = segment_layout_at(allocs, events, segments, seq)
    if not len(starts):
        return pd.DataFrame({"segment_address": [], "segment_bytes": [], "gap_bytes": []}, dtype=np.int64)
    addr = live["address"].to_numpy()
    # each segment contributes its start and end as zero-size blocks; gaps lie between consecutive blocks
    b_seg = np.concatenate([live["segment"].to_numpy(), np.arange(len(starts)), np.arange(len(starts))])
    b_start = np.concatenate([addr, starts, starts + sizes])
    b_end = np.concatenate([addr + live["size_bytes"].to_numpy(), starts, starts + sizes])
    order = np.lexsort((b_start, b_seg))
    b_seg, b_start, b_end = b_seg[order], b_start[order], b_end[order]
    same = b_seg[1:] == b_seg[:-1]
    gap = b_start[1:] - np.maximum.accumulate(b_end)[:-1]
    keep = same & (gap > 0)
    return pd.DataFrame(
        {"segment_address": starts[b_seg[1:][keep]], "segment_bytes": sizes[b_seg[1:][keep]], "gap_bytes": gap[keep]}
    )


def segments_view(allocs: pd.DataFrame, events: pd.DataFrame, segments: pd.DataFrame, seq: int, top: int = 40):
    """The ``top`` largest segments alive after event ``seq`` with their live blocks, for a segment chart.

    Returns (rows, info), as ``segment_rows``.
    """
    return segment_rows(*segment_layout_at(allocs, events, segments, seq), top)


def segments_view_at_dump(segments: pd.DataFrame, live: pd.DataFrame, top: int = 40):
    """``segments_view`` for the state at dump time: the segments table and the blocks allocated then."""
    starts = segments["address"].to_numpy()
    sizes = segments["total_size_bytes"].to_numpy()
    order = np.argsort(starts, kind="stable")
    starts, sizes = starts[order], sizes[order]
    j = np.searchsorted(starts, live["address"].to_numpy(), side="right") - 1
    inside = (j >= 0) & (live["address"].to_numpy() < starts[np.maximum(j, 0)] + sizes[np.maximum(j, 0)])
    return segment_rows(starts, sizes, live[inside].assign(segment=j[inside]), top)


def segment_rows(starts: np.ndarray, sizes: np.ndarray, live: pd.DataFrame, top: int):
    """Rows for a segment chart: the ``top`` largest segments and the blocks in them.

    Rows: ``segment`` ("#k 20.0 MiB @0x..": rank by size), ``offset_bytes`` (block
    start in its segment), ``size_bytes``, ``category``, ``top_frame``; a row per
    segment with category "(segment)" spans it whole. info: segments, segments
    shown, bytes they reserve, bytes reserved in all.
    """
    order = np.lexsort((starts, -sizes))[:top]
    names = {int(k): f"#{r + 1} {sizes[k] / 2**20:,.1f} MiB @{starts[k]:#x}" for r, k in enumerate(order.tolist())}
    shown = live[live["segment"].isin(list(names))]
    rows = pd.DataFrame(
        {
            "segment": [names[k] for k in order.tolist()] + [names[k] for k in shown["segment"].tolist()],
            "offset_bytes": np.concatenate(
                [np.zeros(len(order), np.int64), shown["address"].to_numpy() - starts[shown["segment"].to_numpy()]]
            ),
            "size_bytes": np.concatenate([sizes[order], shown["size_bytes"].to_numpy()]),
            "category": ["(segment)"] * len(order) + shown["category"].astype(str).tolist(),
            "top_frame": [""] * len(order) + shown["top_frame"].astype(str).tolist(),
        }
    )
    info = {
        "segments": len(starts),
        "shown": len(order),
        "shown_bytes": int(sizes[order].sum()),
        "reserved_bytes": int(sizes.sum()),
    }
    return rows, info


_USER_SKIP = re.compile("|".join(f"(?:{p})" for _, p in USER_FRAME_SKIP))


def _user_frames(stack: str, n: int = 4) -> str:
    """The first ``n`` Python frames of a stack text that USER_FRAME_SKIP keeps (else the first Python ones)."""
    py = [ln for ln in stack.splitlines() if re.search(r"\.py:\d+ ", ln)]
    user = [ln for ln in py if not _USER_SKIP.search(ln.rsplit(":", 1)[0])]
    return "\n".join((user or py)[:n])


def allocation_bands(
    allocs: pd.DataFrame, timeline: pd.DataFrame, stacks: pd.DataFrame, max_bands: int = 300, max_points: int = 2000
) -> tuple[pd.DataFrame, dict]:
    """Every allocation as a band over time, stacked in allocation order, as memory_viz draws its trace.

    The ``max_bands`` largest allocations are drawn one by one; all smaller ones
    are summed, exactly, into one band at the bottom (the threshold is returned),
    so the top of the stack is the allocated total at every sampled event. Events
    are sampled by ``downsample_indices`` (the peak kept) plus every drawn band's
    alloc and free, so band edges are exact. Returns (rows, info): rows per band
    and sampled event ``band`` (0 = the summed small ones), ``time_ns`` (since the
    first event; event index when the trace has no times), ``bottom_bytes``,
    ``top_bytes``, and per band ``size_bytes``, ``top_frame``, ``frames`` (first
    Python frames), ``allocated_ns``, ``freed_ns`` (-1: before the trace / never).
    """
    n = len(timeline)
    seq0 = int(timeline["seq"].iloc[0])
    sizes = allocs["size_bytes"].to_numpy()
    k = min(max_bands, len(allocs))
    drawn = np.sort(np.argsort(-sizes, kind="stable")[:k]) if k else np.array([], dtype=np.int64)
    threshold = int(sizes[drawn].min()) if k else 0
    small = np.ones(len(allocs), bool)
    small[drawn] = False
    a_seq, f_seq = allocs["alloc_seq"].to_numpy(), allocs["free_seq"].to_numpy()
    a_i = np.clip(a_seq[drawn] - seq0, 0, n - 1)  # before-trace blocks start at the first event
    f_i = np.where(f_seq[drawn] == NEVER, n - 1, np.clip(f_seq[drawn] - seq0, 0, n - 1))
    pts = np.unique(
        np.concatenate([downsample_indices(timeline["allocated_bytes"].to_numpy(), max_points), a_i, f_i, [0, n - 1]])
    )
    small_level = _levels(a_seq[small], f_seq[small], sizes[small], seq0, n)[pts]
    # live[p, b]: drawn band b holds its bytes after sampled event p
    p_seq = timeline["seq"].to_numpy()[pts]
    live = (a_seq[drawn][None, :] <= p_seq[:, None]) & (f_seq[drawn][None, :] > p_seq[:, None])
    tops = small_level[:, None] + np.cumsum(live * sizes[drawn][None, :], axis=1)
    t = timeline["time_ns"].to_numpy()
    has_time = bool((t >= 0).all())
    x = (t - t.min()) if has_time else np.arange(n)
    xs = x[pts]
    parts = [pd.DataFrame({"band": 0, "time_ns": xs, "bottom_bytes": 0, "top_bytes": small_level})]
    texts = dict(zip(stacks["stack_id"].tolist(), stacks["stack"].tolist(), strict=True))
    frames = [_user_frames(texts.get(sid, "")) for sid in allocs["stack_id"].to_numpy()[drawn].tolist()]
    t_alloc = np.where(a_seq[drawn] >= seq0, x[a_i], -1)
    t_free = np.where(f_seq[drawn] == NEVER, -1, x[f_i])
    for b in range(k):
        rows = np.flatnonzero(live[:, b])
        parts.append(
            pd.DataFrame(
                {
                    "band": b + 1,
                    "time_ns": xs[rows],
                    "bottom_bytes": tops[rows, b] - sizes[drawn[b]],
                    "top_bytes": tops[rows, b],
                }
            )
        )
    out = pd.concat(parts, ignore_index=True)
    per_band = pd.DataFrame(
        {
            "band": np.arange(k + 1),
            "size_bytes": np.concatenate([[int(sizes[small].max()) if small.any() else 0], sizes[drawn]]),
            "top_frame": [f"{int(small.sum()):,} allocations smaller than the drawn ones (summed)"]
            + allocs["top_frame"].astype(str).to_numpy()[drawn].tolist(),
            "frames": [""] + frames,
            "allocated_ns": np.concatenate([[-1], t_alloc]),
            "freed_ns": np.concatenate([[-1], t_free]),
        }
    )
    info = {
        "drawn": k,
        "threshold_bytes": threshold,
        "summed": int(small.sum()),
        "points": len(pts),
        "has_time": has_time,
    }
    return out.merge(per_band, on="band", how="left"), info


# What an OOM was, from the request and the free memory then; first match wins. n: requested, device_free,
# cached_free (reserved - allocated), largest_free (largest free block in a segment of the request's pool).
OOM_VERDICTS = (
    # verdict           condition                                                     explanation
    ("free block fit", lambda n: n["largest_free"] >= n["requested"],
     "a free cached block was large enough; it belonged to another stream or memory pool"),
    ("device had room", lambda n: n["device_free"] >= n["requested"],
     "the device reported enough free memory; the allocator asks for a rounded-up segment, or a per-process "
     "memory fraction capped it"),
    ("fragmentation", lambda n: n["device_free"] + n["cached_free"] >= n["requested"],
     "free memory in total covered the request, but split: neither a cached free block nor the device's "
     "free memory alone was large enough"),
    ("shortage", lambda n: True, "even with every cached but unallocated byte free, the device lacked memory"),
)  # fmt: skip


def analyze_oom(one: MemorySnapshot, oom: dict, analysis: MemoryAnalysis | None) -> dict:
    """An ``oom`` entry explained: the request, free device memory, allocated and reserved bytes then,
    what was live (from the replay; without history, the blocks at dump time), the largest free block
    of the pool the request needed, and a verdict from OOM_VERDICTS."""
    seq = int(oom["seq"])
    requested = int(oom["size_bytes"])
    if analysis is not None:
        allocs, tl = analysis.allocations, analysis.timeline
        row = tl.index[tl["seq"].to_numpy() == seq][0]
        allocated, reserved = int(tl.at[row, "allocated_bytes"]), int(tl.at[row, "reserved_bytes"])
        live = live_at(allocs, seq)
        gaps = free_blocks_at(allocs, one.events, one.segments, seq)
        source = "replay"
    else:
        state = one.blocks
        live = None
        allocated = int(state.loc[state["state"].astype(str) == "active_allocated", "size_bytes"].sum())
        reserved = int(one.segments["total_size_bytes"].sum())
        inactive = state[state["state"].astype(str) == "inactive"]
        sizes = inactive["segment_address"].map(
            dict(zip(one.segments["address"], one.segments["total_size_bytes"], strict=True))
        )
        gaps = pd.DataFrame({"segment_bytes": sizes.to_numpy(), "gap_bytes": inactive["size_bytes"].to_numpy()})
        source = "dump"
    pool = gaps["segment_bytes"] > SMALL_SEGMENT if requested > KSMALL_SIZE else gaps["segment_bytes"] == SMALL_SEGMENT
    largest_free = int(gaps.loc[pool, "gap_bytes"].max()) if pool.any() else 0
    names = {
        "requested": requested,
        "device_free": int(oom["device_free_bytes"]),
        "cached_free": reserved - allocated,
        "largest_free": largest_free,
    }
    verdict, _, why = next(v for v in OOM_VERDICTS if v[1](names))
    return {
        "seq": seq,
        "time_ns": int(oom["time_ns"]),
        "requested_bytes": requested,
        "device_free_bytes": names["device_free"],
        "allocated_bytes": allocated,
        "reserved_bytes": reserved,
        "cached_free_bytes": names["cached_free"],
        "largest_free_block_bytes": largest_free,
        "short_bytes": max(0, requested - names["device_free"] - names["cached_free"]),
        "verdict": verdict,
        "why": why,
        "top_frame": str(oom["top_frame"]),
        "stack_id": int(oom["stack_id"]),
        "source": source,
        "live": live,
    }


def compare_live(base: pd.DataFrame, other: pd.DataFrame, key: str) -> pd.DataFrame:
    """Live bytes per ``key`` in two states (each at its peak), the change, largest change first."""
    a = base.groupby(key, observed=True)["size_bytes"].sum()
    b = other.groupby(key, observed=True)["size_bytes"].sum()
    out = pd.DataFrame({"base_bytes": a, "other_bytes": b}).fillna(0).astype(np.int64)
    out["delta_bytes"] = out["other_bytes"] - out["base_bytes"]
    out = out.reset_index().rename(columns={"index": key})
    order = np.lexsort((out[key].astype(str).to_numpy(), -out["delta_bytes"].abs().to_numpy()))
    return out.iloc[order].reset_index(drop=True)


__all__ = [
    "CATEGORIES",
    "CATEGORY_RULES",
    "NO_FRAMES",
    "OOM_VERDICTS",
    "DumpState",
    "MemoryAnalysis",
    "analyze_dump_state",
    "analyze_oom",
    "analyze_snapshot",
    "compare_live",
    "allocation_bands",
    "free_blocks_at",
    "segment_layout_at",
    "segment_rows",
    "segments_view",
    "segments_view_at_dump",
    "levels_before_trace",
    "summarize_segment_table",
    "classify_allocations",
    "downsample_indices",
    "find_peak",
    "live_at",
    "replay_allocations",
    "round_size",
    "summarize_live_by",
    "summarize_segments",
    "summarize_timeline",
    "timeline_by",
]
