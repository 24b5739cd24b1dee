"""Renderers format, they do not compute: units from column suffixes, names compacted for display only."""

from __future__ import annotations

import pandas as pd

from profiler_kit.render.markdown import render_table_md
from profiler_kit.render.units import compact_name, for_display

LONG = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<4>, at::native::(anonymous namespace)::PointwiseOpScalarFunctor<float, 4, 3, 0>>(T1)"
)


def test_compact_name_keeps_the_distinguishing_part():
    short = compact_name(LONG, 100)
    assert len(short) <= 100 and "PointwiseOpScalarFunctor" in short
    assert compact_name("ampere_sgemm_128x64_tn") == "ampere_sgemm_128x64_tn"


def test_units_from_suffixes_and_integers_stay_integers():
    df = pd.DataFrame(
        {"kernel": [LONG], "count": [3], "total_ns": [2_500_000], "share_frac": [0.25], "size_bytes": [2**21]}
    )
    shown = for_display(df)
    assert list(shown.columns) == ["kernel", "count", "total (ms)", "share (%)", "size (MiB)"]
    assert shown.iloc[0]["total (ms)"] == 2.5 and shown.iloc[0]["share (%)"] == 25 and shown.iloc[0]["size (MiB)"] == 2
    md = render_table_md(df)
    assert "|       3 |" in md or "| 3 |" in md.replace("  ", " ")
    assert "PointwiseOpScalarFunctor" in md and "3.000" not in md


def test_html_figure_is_plain_plotly_json_with_display_units():
    """Charts carry plain lists (any plotly.js reads them), values scaled like the tables, NaN as null."""
    import json
    import re

    from profiler_kit.render.html import render_html
    from profiler_kit.report import Figure, Report, Section

    df = pd.DataFrame({"kernel": ["gemm", "</script>", "softmax"], "total_ns": [2_500_000, 1_000_000, float("nan")]})
    rep = Report("t", sections=[Section("s", figures=[Figure("Top", df, "bar", x="kernel", y="total_ns", key="top")])])
    page = render_html(rep).decode("utf-8")
    assert page.count("Plotly.newPlot(") == 1 and '</script>"' not in page
    data = json.loads(re.search(r'Plotly\.newPlot\("[^"]+", (\[.*?\]), \{', page).group(1))
    assert data[0]["x"] == ["gemm", "</script>", "softmax"] and data[0]["y"] == [2.5, 1.0, None]


def test_html_is_the_same_bytes_each_time_with_unique_chart_ids():
    """Chart ids are numbered, not random: the same report renders to the same page (diffable, reproducible)."""
    import re

    from profiler_kit.render.html import render_html
    from profiler_kit.report import Figure, Report, Section

    df = pd.DataFrame({"kernel": ["gemm", "softmax"], "total_ns": [2_000, 1_000]})
    fig = Figure("Top", df, "bar", x="kernel", y="total_ns", key="top")
    rep = Report("t", sections=[Section("a", figures=[fig, fig]), Section("b", sections=[Section("c", figures=[fig])])])
    page = render_html(rep).decode("utf-8")
    ids = re.findall(r'<div id="([^"]+)" class="plotly-graph-div"', page)
    assert ids == ["chart-1", "chart-2", "chart-3"] and page == render_html(rep).decode("utf-8")
    assert page.count("window.PlotlyConfig") == 1  # plotly.js inlined once, with the first chart
