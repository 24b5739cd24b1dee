"""Report -> markdown (tables by tabulate)."""

from __future__ import annotations

import pandas as pd
from tabulate import tabulate

from profiler_kit.render.units import compact_names, for_display
from profiler_kit.report import Report, Section

MAX_CELL = 100  # characters; long kernel signatures are cut (CSV/JSON keep them whole)


def _cells(values: list) -> list:
    """A column's cells: long names compacted (distinct ones kept apart), pipes escaped, missing values blank."""
    return [
        v.replace("|", "\\|") if isinstance(v, str) else "" if pd.isna(v) else v
        for v in compact_names(values, MAX_CELL)
    ]


def render_table_md(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """One DataFrame as a GitHub markdown table with display units."""
    if df.empty:
        return "_(no rows)_"
    shown = for_display(df)
    # column lists keep ints as ints (a whole-frame array would turn them into floats)
    columns = [_cells(shown[c].tolist()) for c in shown.columns]
    return tabulate(list(zip(*columns, strict=True)), headers=list(shown.columns), tablefmt="github", floatfmt=floatfmt)


def prerender(sec: Section) -> Section:
    """``sec`` with the markdown of each of its tables (and its subsections') rendered now (``Table.markdown``):
    a trace's section built on a Dask worker is rendered there too, not in the client after every input."""
    for table in sec.tables:
        table.markdown = render_table_md(table.df)
    for sub in sec.sections:
        prerender(sub)
    return sec


def _section(sec: Section, level: int, html_name: str | None) -> list[str]:
    out = [f"{'#' * level} {sec.title}", ""]
    for para in sec.text:
        out += [para, ""]
    for table in sec.tables:
        if table.title != sec.title:  # a section holding one table of its own name needs no second heading
            out += [f"**{table.title}**", ""]
        out += [table.markdown if table.markdown is not None else render_table_md(table.df), ""]
        if table.note:
            out += [f"_{table.note}_", ""]
    if sec.figures and html_name:
        names = ", ".join(f.title for f in sec.figures)
        out += [f"Charts ({names}): see [{html_name}]({html_name}).", ""]
    for sub in sec.sections:
        out += _section(sub, min(level + 1, 6), html_name)
    return out


def render_markdown(report: Report, html_name: str | None = None) -> str:
    """The whole report as markdown; ``html_name`` links the chart file beside it."""
    lines = [f"# {report.title}", ""]
    for para in report.text:
        lines += [para, ""]
    for sec in report.sections:
        lines += _section(sec, 2, html_name)
    return "\n".join(lines).rstrip() + "\n"
