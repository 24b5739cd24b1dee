"""Report -> one self-contained HTML page: tables plus interactive plotly charts.

plotly.js is embedded once (no CDN), so the page opens offline. Figures are plain
plotly.js JSON (data, layout, plotly's default template) written into the same markup
``plotly.io.to_html`` writes: importing plotly's Python package and validating its
figure objects cost 0.1-0.2 s a report, more than the rest of the rendering.
"""

from __future__ import annotations

import functools
import html
import importlib.util
import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from profiler_kit.render.units import compact_names, display_column, for_display
from profiler_kit.report import Figure, Report, Section

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px;max-width:100%}
table.wide{font-size:11px}
code{background:#f3f3f3;padding:0 3px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3;font-weight:600}
td{overflow-wrap:break-word} td span[title]{text-decoration:underline dotted}
th.n,td.n{text-align:right} td.n{white-space:nowrap;font-variant-numeric:tabular-nums}
table.wide th,table.wide td{padding:2px 3px}
.note{color:#666;font-style:italic}
details{margin:0 0 1.5em} summary{cursor:pointer;font-weight:600;margin:.5em 0}
@media (max-width:1100px){table{font-size:11px} table.wide{font-size:9px} td{overflow-wrap:anywhere} td:first-child{min-width:7em}}
"""
WIDE_TABLE = 12  # columns from which a table is set in a smaller font, so that it fits the page without scrolling
FIGURE_HEIGHT = 480  # px
TITLE_CHARS, TITLE_MARGIN, TITLE_LINE = 110, 60, 22  # a chart title's line length; the top margin, px, and per line
NOTHING_TO_CHART = (
    "No charts: these inputs hold nothing to chart (no GPU kernels, phases or memory timeline); the tables follow."
)


def plotly_available() -> bool:
    """Whether plotly, which ships the charts' plotly.js and template, is installed."""
    return importlib.util.find_spec("plotly") is not None


@functools.cache
def plotly_package_data() -> Path:
    """plotly's package_data folder (plotly.min.js, templates), found without importing plotly."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("plotly is not installed (pip install plotly): it provides the charts' plotly.js")
    return Path(spec.submodule_search_locations[0]) / "package_data"


@functools.cache
def plotly_template() -> dict:
    """plotly's default figure template ("plotly"), as plotly.graph_objects would apply it."""
    return json.loads((plotly_package_data() / "templates" / "plotly.json").read_text(encoding="utf-8"))


def json_values(values: pd.Series) -> list:
    """A column as plotly.js data: numbers as floats, anything else as text, missing values as null.

    Plain lists, not plotly's base64 typed arrays, which need plotly.js 2.28 or newer (plotly 5.0 ships 2.0).
    """
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        return [None if np.isnan(v) else v for v in values.to_numpy(dtype="<f8", na_value=np.nan).tolist()]
    return [None if pd.isna(v) else str(v) for v in values.astype(object)]


def _hover(row: dict, skip: tuple) -> str:
    """One row's other columns as hover lines, in display units ("size (MiB): 412.000")."""
    lines = []
    for col, value in row.items():
        if col in skip or value in ("", None) or (isinstance(value, (int, float)) and value < 0):
            continue
        title, div = display_column(col)
        text = (
            f"{value / div:,.3f}"
            if isinstance(value, (int, float, np.integer, np.floating))
            else html.escape(str(value))
        )
        lines.append(f"{title}: {text.replace(chr(10), '<br>  ')}")
    return "<br>".join(lines)


def _bands(fig: Figure, x_div: float, y_div: float) -> list[dict]:
    """Kind "bands": one filled polygon per ``color`` value between ``bottom_bytes`` and ``y``; hover: the other columns."""
    traces = []
    for band, part in fig.df.groupby(fig.color, sort=True):
        xs = json_values(part[fig.x] / x_div)
        top, bottom = json_values(part[fig.y] / y_div), json_values(part["bottom_bytes"] / y_div)
        row = part.iloc[0].to_dict()
        name = _hover(row, (fig.x, fig.y, "bottom_bytes", fig.color))
        traces.append({"type": "scatter", "mode": "lines", "x": xs + xs[::-1], "y": top + bottom[::-1], "fill": "toself",
                       "line": {"width": 0.5}, "hoveron": "fills", "name": name, "showlegend": False,
                       **({"fillcolor": "rgba(150,150,150,0.5)", "line": {"width": 0}} if band == 0 else {})})  # fmt: skip
    return traces


def _blocks(fig: Figure, x_div: float) -> list[dict]:
    """Kind "blocks": horizontal bars of length ``x`` from ``offset_bytes`` on rows ``y``, one trace per ``color``."""
    traces = []
    for name, part in fig.df.groupby(fig.color, sort=False, observed=True):
        rows = part.to_dict("records")
        traces.append({"type": "bar", "orientation": "h", "name": str(name), "y": json_values(part[fig.y]),
                       "x": json_values(part[fig.x] / x_div), "base": json_values(part["offset_bytes"] / x_div),
                       "text": [_hover(r, (fig.y, "offset_bytes")) for r in rows], "hovertemplate": "%{text}<extra></extra>",
                       "textposition": "none",
                       **({"marker": {"color": "rgba(200,200,200,0.6)"}} if name == "(segment)" else {})})  # fmt: skip
    return traces


def figure_json(fig: Figure) -> dict:
    """The plotly.js figure (data and layout) for one Figure spec, values scaled to display units."""
    df = fig.df
    y_title, y_div = display_column(fig.y)
    x_title, x_div = display_column(fig.x)  # the axis title names a unit: its values are scaled to it
    special = {"bands": lambda: _bands(fig, x_div, y_div), "blocks": lambda: _blocks(fig, x_div)}.get(fig.kind)
    traces = special() if special else []
    groups = (
        [] if special else [(None, df)] if fig.color is None else list(df.groupby(fig.color, sort=False, observed=True))
    )
    for name, part in groups:
        xs = part[fig.x]
        if x_div != 1.0 and pd.api.types.is_numeric_dtype(xs) and not pd.api.types.is_bool_dtype(xs):
            xs = xs / x_div
        x, y = json_values(xs), json_values(part[fig.y] / y_div)
        trace = {} if name is None else {"name": str(name)}
        if fig.kind in ("bar", "stacked_bar"):
            xy = dict(x=y, y=x) if fig.orientation == "h" else dict(x=x, y=y)
            trace.update(type="bar", orientation=fig.orientation, **xy)
        elif fig.kind == "area":
            trace.update(type="scatter", x=x, y=y, mode="lines", stackgroup="one")
        else:
            trace.update(type="scatter", x=x, y=y, mode="lines+markers")
        traces.append(trace)
    axis_titles = (y_title, x_title) if fig.orientation == "h" else (x_title, y_title)
    title_lines = textwrap.wrap(fig.title, TITLE_CHARS) or [""]  # plotly does not wrap a title: a long one ran off
    layout = {
        "template": plotly_template(),
        "title": {"text": "<br>".join(title_lines)},
        "margin": {"t": TITLE_MARGIN + TITLE_LINE * len(title_lines)},
        "barmode": {"stacked_bar": "stack", "blocks": "overlay"}.get(fig.kind, "group"),
        "height": FIGURE_HEIGHT,
        "xaxis": {"title": {"text": axis_titles[0]}},
        "yaxis": {"title": {"text": axis_titles[1]}},
    }
    if fig.orientation == "h" or fig.kind == "blocks":
        layout["yaxis"]["autorange"] = "reversed"
    if fig.kind == "blocks":
        layout["xaxis"]["title"]["text"] = "offset in segment" + x_title[x_title.rfind(" (") :]
    if fig.kind == "bands":  # a band's top edge is the memory allocated up to and including it
        layout["yaxis"]["title"]["text"] = "allocated" + y_title[y_title.rfind(" (") :]
    return {"data": traces, "layout": layout}


def script_json(value) -> str:
    """JSON safe inside a ``<script>``: <, > and / escaped, as plotly does (a range named "</script>" stays text)."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("/", "\\u002f")


def figure_parts(fig: Figure, include_plotlyjs: bool, div_id: str) -> list[str | bytes]:
    """One chart as the ``<div>`` plotly.io.to_html(full_html=False) writes (plotly.js inline when asked),
    as a list of parts that the page joins once. plotly.js (4.8 MB, not ASCII) stays the file's UTF-8 bytes:
    decoding it, copying the text and encoding it again cost 17 ms a report.

    ``div_id`` must be unique in the page; numbered in order (not random) so that the same
    report renders to the same bytes.
    """
    spec = figure_json(fig)
    load = []
    if include_plotlyjs:
        plotlyjs = (plotly_package_data() / "plotly.min.js").read_bytes()
        load = ["<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script><script>", plotlyjs, "</script>"]
    plot = f'Plotly.newPlot("{div_id}", {script_json(spec["data"])}, {script_json(spec["layout"])}, {{"responsive": true}})'
    return [
        f'<div style="height:{FIGURE_HEIGHT}px; width:100%;">',
        *load,
        f'<div id="{div_id}" class="plotly-graph-div" style="height:100%; width:100%;"></div>'
        f'<script>window.PLOTLYENV=window.PLOTLYENV || {{}}; if (document.getElementById("{div_id}")) {{ {plot} }};</script>'
        "</div>",
    ]


NAME_CELL = 80  # characters of a name shown in a cell; the whole name is its hover text


def _text_cells(values: list) -> list:
    """Escaped text cells; a name cut for width keeps its whole text as the hover title."""
    out = []
    for full, short in zip(values, compact_names(values, NAME_CELL), strict=True):
        if not isinstance(full, str):
            out.append(full)
        elif short == full:
            out.append(html.escape(full))
        else:
            out.append(f'<span title="{html.escape(full)}">{html.escape(short)}</span>')
    return out


def _table_html(df) -> str:
    """A table: text columns left-aligned (long names cut, whole on hover), number columns right-aligned and
    unbroken (floats to three decimals with thousands separators, integers as they are), missing values empty."""
    if df.empty:
        return "<p class='note'>(no rows)</p>"
    shown = for_display(df)
    columns = []
    for col in shown.columns:
        values = shown[col]
        if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            columns.append(("n", [_number(v) for v in values.tolist()]))
        else:
            text = [v if isinstance(v, str) else "" if _missing(v) else str(v) for v in values.astype(object).tolist()]
            columns.append(("", _text_cells(text)))
    heads = [
        f"<th{_cls(c)}>{html.escape(str(title))}</th>" for title, (c, _) in zip(shown.columns, columns, strict=True)
    ]
    rows = [
        "<tr>" + "".join(f"<td{_cls(c)}>{cells[i]}</td>" for c, cells in columns) + "</tr>" for i in range(len(shown))
    ]
    wide = " class='wide'" if len(columns) >= WIDE_TABLE else ""
    return f"<table{wide}><thead><tr>{''.join(heads)}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _cls(kind: str) -> str:
    return f" class='{kind}'" if kind else ""


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value))


def _number(value) -> str:
    """A number cell: floats ``1,234.568``; integers (whole-number columns come as Int64) as they are."""
    if _missing(value):
        return ""
    return f"{value:,.3f}" if isinstance(value, float | np.floating) else str(value)


def _para(text: str) -> str:
    """A paragraph with markdown `code` spans shown as <code>."""
    return "<p>" + re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text)) + "</p>"


def _section(sec: Section, level: int, charts: list[int]) -> list[str | bytes]:
    """The section as HTML parts; ``charts`` holds the number of charts written so far (plotly.js goes with the first)."""
    h = min(level, 6)
    out = [f"<h{h}>{html.escape(sec.title)}</h{h}>"]
    out += [_para(p) for p in sec.text]
    for t in sec.tables:
        if t.collapsed:  # detail behind a folded row: a click away
            out.append(f"<details><summary>{html.escape(t.title)} ({len(t.df)} rows)</summary>{_table_html(t.df)}")
        elif t.title != sec.title:  # a section holding one table of its own name needs no second heading
            out.append(f"<h{min(h + 1, 6)}>{html.escape(t.title)}</h{min(h + 1, 6)}>")
        if not t.collapsed:
            out.append(_table_html(t.df))
        if t.note:
            out.append(f"<p class='note'>{html.escape(t.note)}</p>")
        if t.collapsed:
            out.append("</details>")
    for f in sec.figures:
        charts[0] += 1
        out += figure_parts(f, include_plotlyjs=charts[0] == 1, div_id=f"chart-{charts[0]}")
    for sub in sec.sections:
        out += _section(sub, level + 1, charts)
    return out


def render_html(report: Report) -> bytes:
    """The whole report as one HTML page with embedded plotly.js, UTF-8 encoded."""
    body = [f"<h1>{html.escape(report.title)}</h1>"]
    body += [_para(p) for p in report.text]
    if not report.figures():
        body.append(f"<p class='note'>{NOTHING_TO_CHART}</p>")
    charts = [0]
    for sec in report.sections:
        body += _section(sec, 2, charts)
    head = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(report.title)}</title><style>{_STYLE}</style></head><body>"
    )
    parts = [head, *body, "</body></html>\n"]
    return b"".join(p if isinstance(p, bytes) else p.encode("utf-8") for p in parts)  # plotly.js copied once
