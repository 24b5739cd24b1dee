"""Display units, chosen from column-name suffixes (the one place units are picked)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from profiler_kit.analyze.frame_memo import FrameMemo

# suffix -> (display suffix, divisor); first match wins, so rates come before the plain units they end in
UNIT_RULES = (
    ("_bytes_per_s", " (GB/s)", 1e9),
    ("_gb_per_s", " (GB/s)", 1.0),
    ("_tb_per_s", " (TB/s)", 1.0),
    ("_tflop_per_s", " (TFLOP/s)", 1.0),
    ("_per_s", " (/s)", 1.0),
    ("_ns", " (ms)", 1e6),
    ("_us", " (ms)", 1e3),
    ("_bytes", " (MiB)", 2**20),
    ("_frac", " (%)", 0.01),
)

HEX_COLUMNS = ("address",)  # device addresses: read in hex


def display_column(col: str) -> tuple[str, float]:
    """Return the display title of a raw column and the divisor that scales it. A column named by its unit
    alone ("bytes", "gb_per_s") is titled by the display unit ("MiB", "GB/s")."""
    for suffix, unit, div in UNIT_RULES:
        if col.endswith(suffix):
            return col[: -len(suffix)].replace("_", " ") + unit, div
        if col == suffix[1:]:
            return unit.strip(" ()"), div
    return col.replace("_", " "), 1.0


def for_display(df: pd.DataFrame) -> pd.DataFrame:
    """Scale unit-suffixed numeric columns and rename them to display titles.

    Plain numpy columns are scaled as arrays (a Series division costs ~0.1 ms, and a report shows
    hundreds of columns); pandas' own dtypes (nullable integers, say) go through pandas. Once per table
    (``DISPLAYED``): the markdown and the HTML show the same frame (22 of the 0.17 CPU-s a big report spends
    building and rendering its section, after every analysis is done). Read it, don't change it.
    """
    return DISPLAYED(df)


def _for_display(df: pd.DataFrame) -> pd.DataFrame:
    out = {}
    for col in df.columns:
        title, div = display_column(str(col))
        s = _as_numbers(df[col])
        if col in HEX_COLUMNS and pd.api.types.is_integer_dtype(s):
            out[title] = [hex(v) for v in s.tolist()]  # as PyTorch's memory tools and the segment chart write them
            continue
        if div != 1.0 and pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            s = s.to_numpy() / div if isinstance(s.dtype, np.dtype) else (s / div).array
        elif _whole_floats(s):
            s = s.astype("Int64").array  # counts that became floats (a mean, a merge with gaps) print as counts
        else:
            s = s.array
        out[title] = s
    return pd.DataFrame(out, index=df.index, copy=False)


DISPLAYED = FrameMemo(_for_display)


def _as_numbers(s: pd.Series) -> pd.Series:
    """A column of objects that are all numbers or missing (a table filled in where there was nothing to measure)
    as a numeric column, so that it is scaled and shown as one; any other column as it is."""
    if s.dtype != object:
        return s
    items = s.dropna().tolist()
    if not items or not all(
        isinstance(v, int | float | np.number) and not isinstance(v, bool | np.bool_) for v in items
    ):
        return s
    return pd.to_numeric(s)


def _whole_floats(s: pd.Series) -> bool:
    """A float column whose values are all whole numbers (missing values aside)."""
    if s.dtype != np.float64:
        return False
    values = s.to_numpy()
    finite = values[~np.isnan(values)]
    return bool(np.all(np.isfinite(finite)) and np.all(finite == np.round(finite)) and np.all(np.abs(finite) < 2**53))


# Namespace and cast noise dropped from long C++ kernel names before they are cut to width.
NAME_NOISE = re.compile(
    r"^void |at::native::|\(anonymous namespace\)::|<unnamed>::|at::detail::|at::|std::|c10::|\((?:int|unsigned long)\)"
)


def compact_name(name: str, width: int = 100) -> str:
    """A long kernel signature shortened for display: noise removed, then cut to ``width`` with an ellipsis.

    Short names are returned unchanged; CSV/JSON outputs keep full names.
    """
    if len(name) <= width:
        return name
    name = re.sub(r"\s+", " ", NAME_NOISE.sub("", name))
    return name if len(name) <= width else name[: width - 1] + "…"


def compact_names(names: list, width: int) -> list:
    """``compact_name`` of each string, numbered (" #2") where different names would read the same.

    Cut at ``width``, two kernels that differ only in their tails would look like one row; the number keeps
    them apart while CSV/JSON (and the HTML's hover text) keep the full names. Non-strings pass through.
    """
    short = [compact_name(n, width) if isinstance(n, str) else n for n in names]
    seen: dict[str, list[str]] = {}
    for full, text in zip(names, short, strict=True):
        if isinstance(full, str) and full not in seen.setdefault(text, []):
            seen[text].append(full)
    out = []
    for full, text in zip(names, short, strict=True):
        group = seen.get(text, []) if isinstance(full, str) else []
        if len(group) > 1:
            suffix = f" #{group.index(full) + 1}"
            text = compact_name(full, width - len(suffix)) + suffix
        out.append(text)
    return out
