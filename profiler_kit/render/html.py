"""Report -> one self-contained HTML page: tables plus interactive plotly charts.

plotly.js is embedded once (no CDN), so the page opens offline.
"""

from __future__ import annotations

import html
import re

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from profiler_kit.render.units import compact_name, display_column, for_display
from profiler_kit.report import Figure, Report, Section

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px;display:block;overflow-x:auto}
code{background:#f3f3f3;padding:0 3px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
.note{color:#666;font-style:italic}
"""


def build_plotly(fig: Figure) -> go.Figure:
    """A plotly figure for one Figure spec, values scaled to display units."""
    df = fig.df
    y_title, y_div = display_column(fig.y)
    x_title, _ = display_column(fig.x)
    groups = [(None, df)] if fig.color is None else list(df.groupby(fig.color, sort=False, observed=True))
    traces = []
    for name, part in groups:
        x, y = part[fig.x], part[fig.y] / y_div
        label = None if name is None else str(name)
        if fig.kind in ("bar", "stacked_bar"):
            xy = dict(x=y, y=x) if fig.orientation == "h" else dict(x=x, y=y)
            traces.append(go.Bar(name=label, orientation=fig.orientation, **xy))
        elif fig.kind == "area":
            traces.append(go.Scatter(x=x, y=y, name=label, mode="lines", stackgroup="one"))
        else:
            traces.append(go.Scatter(x=x, y=y, name=label, mode="lines+markers"))
    out = go.Figure(traces)
    axes = (
        dict(xaxis_title=y_title, yaxis_title=x_title)
        if fig.orientation == "h"
        else dict(xaxis_title=x_title, yaxis_title=y_title)
    )
    out.update_layout(title=fig.title, barmode="stack" if fig.kind == "stacked_bar" else "group", height=480, **axes)
    if fig.orientation == "h":
        out.update_yaxes(autorange="reversed")
    return out


def _table_html(df) -> str:
    if df.empty:
        return "<p class='note'>(no rows)</p>"
    shown = for_display(df)
    for col in shown.columns:
        if not pd.api.types.is_numeric_dtype(shown[col]):
            shown[col] = shown[col].astype(object).map(lambda v: compact_name(v, 140) if isinstance(v, str) else v)
    return shown.to_html(index=False, float_format=lambda v: f"{v:,.3f}", na_rep="", border=0)


def _para(text: str) -> str:
    """A paragraph with markdown `code` spans shown as <code>."""
    return "<p>" + re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text)) + "</p>"


def _section(sec: Section, level: int, first_plot: list[bool]) -> list[str]:
    h = min(level, 6)
    out = [f"<h{h}>{html.escape(sec.title)}</h{h}>"]
    out += [_para(p) for p in sec.text]
    for t in sec.tables:
        out += [f"<h{min(h + 1, 6)}>{html.escape(t.title)}</h{min(h + 1, 6)}>", _table_html(t.df)]
        if t.note:
            out.append(f"<p class='note'>{html.escape(t.note)}</p>")
    for f in sec.figures:
        include = "inline" if first_plot[0] else False
        first_plot[0] = False
        out.append(pio.to_html(build_plotly(f), full_html=False, include_plotlyjs=include))
    for sub in sec.sections:
        out += _section(sub, level + 1, first_plot)
    return out


def render_html(report: Report) -> str:
    """The whole report as one HTML page with embedded plotly.js."""
    body = [f"<h1>{html.escape(report.title)}</h1>"]
    body += [_para(p) for p in report.text]
    first_plot = [True]
    for sec in report.sections:
        body += _section(sec, 2, first_plot)
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(report.title)}</title><style>{_STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )
