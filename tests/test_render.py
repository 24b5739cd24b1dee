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


def _kernel_pair():
    """Two kernels whose first 100 characters are equal: they differ only in the last template argument."""
    stem = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, " + "x" * 80
    )
    return stem + ", MulFunctor<float>>", stem + ", AddFunctor<float>>"


def test_names_cut_for_width_stay_distinct_and_whole_on_hover():
    from profiler_kit.render.html import render_html
    from profiler_kit.render.units import compact_names
    from profiler_kit.report import Figure, Report, Section, Table

    mul, add = _kernel_pair()
    short = compact_names([mul, add, mul, "gemm", 3], 100)
    assert short[0] != short[1] and short[0] == short[2] and short[3:] == ["gemm", 3]
    assert all(len(s) <= 100 for s in short[:3]) and short[0].endswith("#1") and short[1].endswith("#2")
    df = pd.DataFrame({"kernel": [mul, add], "total_ns": [7_000_000, 5_570_000]})
    md = render_table_md(df)
    assert len({line.split("|")[1] for line in md.splitlines()[2:]}) == 2
    sec = Section("s", tables=[Table("Top", df)], figures=[Figure("Top", df, "bar", x="kernel", y="total_ns")])
    page = render_html(Report("t", sections=[sec])).decode("utf-8")
    assert f'title="{html_escape(mul)}"' in page and f'title="{html_escape(add)}"' in page


def html_escape(text: str) -> str:
    import html

    return html.escape(text)


def test_top_kernel_chart_has_one_bar_per_kernel():
    """Bars are grouped by their label: two kernels shortened to one label made one 12.57 ms bar."""
    import json
    import re

    from profiler_kit.render.html import render_html
    from profiler_kit.report import Report

    mul, add = _kernel_pair()
    kernels = pd.DataFrame(
        {
            "kernel": [mul, add],
            "category": ["elementwise"] * 2,
            "count": [1, 1],
            "total_ns": [7_000_000, 5_570_000],
            "avg_ns": [7_000_000, 5_570_000],
            "min_ns": [7_000_000, 5_570_000],
            "max_ns": [7_000_000, 5_570_000],
            "med_ns": [7_000_000, 5_570_000],
            "std_ns": [0.0, 0.0],
            "share_frac": [0.557, 0.443],
        }
    )
    charts = [f for f in trace_section_figures(kernels) if f.key.endswith("top_kernels")]
    assert len(charts) == 1 and charts[0].df["kernel"].nunique() == 2
    page = render_html(Report("t", sections=[trace_section_stub(charts[0])])).decode("utf-8")
    data = json.loads(re.search(r'Plotly\.newPlot\("[^"]+", (\[.*?\]), \{', page).group(1))
    assert data[0]["x"] == [7.0, 5.57] and len(set(data[0]["y"])) == 2  # horizontal bars: labels on y


def trace_section_figures(kernels: pd.DataFrame):
    from profiler_kit.build import TraceResult, trace_section

    summary = pd.DataFrame(
        [{"gpus": 1, "trace_span_ns": 20_000_000, "gpu_span_ns": 13_000_000, "kernels": 2, "kernel_time_ns": 12_570_000,
          "memops": 0, "memop_time_ns": 0, "gpu_busy_ns": 12_570_000, "gpu_busy_frac": 0.97, "nvtx_ranges": 0,
          "launched_ops": 2}]
    )  # fmt: skip
    categories = pd.DataFrame({"category": ["elementwise", "other"], "count": [2, 0], "total_ns": [12_570_000, 0],
                               "share_frac": [1.0, 0.0]})  # fmt: skip
    tables = {
        "summary": summary,
        "kernels": kernels,
        "categories": categories,
        "range_names": pd.DataFrame(columns=["range"]),
    }
    res = TraceResult(label="t", source="t.json", meta={}, tables=tables)
    return trace_section(res, top=10).figures


def trace_section_stub(fig):
    from profiler_kit.report import Section

    return Section("s", figures=[fig])


def test_one_heading_per_table_and_whole_numbers_without_decimals():
    from profiler_kit.render.html import render_html
    from profiler_kit.render.markdown import render_markdown
    from profiler_kit.report import Report, Section, Table

    df = pd.DataFrame({"range": ["step", "forward"], "kernels_per_instance": [1925.0, 37.0], "ratio": [0.5, 2.25]})
    rep = Report("t", sections=[Section("Top kernels in 'step'", tables=[Table("Top kernels in 'step'", df)])])
    md = render_markdown(rep)
    assert md.count("Top kernels in 'step'") == 1
    assert "1925 " in md and "1925.000" not in md and "0.500" in md
    page = render_html(rep).decode("utf-8")
    assert page.count("Top kernels in &#x27;step&#x27;") == 1
    assert "1925</td>" in page and "1,925.000" not in page


def test_json_keeps_integers_and_exact_floats():
    import json

    from profiler_kit.render.data import render_tables
    from profiler_kit.report import Report, Section, Table

    df = pd.DataFrame({"kernel": ["a", "b"], "count": [3, 4], "avg_ns": [77662506.8, float("nan")]})
    out = render_tables(Report("t", sections=[Section("s", tables=[Table("Kernels", df, key="k")])]), "json")
    text = out["k.json"]
    assert '"avg_ns": 77662506.8\n' in text and "799999" not in text
    rows = json.loads(text)["rows"]
    assert rows == [{"kernel": "a", "count": 3, "avg_ns": 77662506.8}, {"kernel": "b", "count": 4, "avg_ns": None}]
    assert isinstance(rows[0]["count"], int)


def test_table_file_names_drop_the_trace_extension():
    from profiler_kit.report import Table

    assert Table("s", pd.DataFrame(), key="kineto/run.json.gz_summary").key == "kineto_run_summary"
    assert Table("s", pd.DataFrame(), key="rank-0.pt.trace.json_top_kernels").key == "rank-0_top_kernels"
    assert Table("s", pd.DataFrame(), key="nsys/a.sqlite_ranges").key == "nsys_a_ranges"
    assert Table("s", pd.DataFrame(), key="x.json_data_d0_peak").key == "x_data_d0_peak"
    assert Table("Top kernels", pd.DataFrame()).key == "top_kernels"


def test_html_tables_fit_the_page():
    """Numbers right-aligned and never broken inside; text left-aligned; many columns: a smaller font, no scrolling."""
    import re

    from profiler_kit.render.html import _STYLE, WIDE_TABLE, render_html
    from profiler_kit.report import Report, Section, Table

    df = pd.DataFrame({"range": ["step", None], "count": [6400, 3], "total_ns": [1_452_000_000, float("nan")]})
    wide = pd.DataFrame({f"c{i}_frac": [0.5] for i in range(WIDE_TABLE)})
    page = render_html(Report("t", sections=[Section("s", tables=[Table("a", df), Table("b", wide)])])).decode()
    assert "<td>step</td><td class='n'>6400</td><td class='n'>1,452.000</td>" in page
    assert "<td></td><td class='n'>3</td><td class='n'></td>" in page  # missing: empty, not None or nan
    assert page.count("<table class='wide'>") == 1
    assert re.search(r"td\.n\{[^}]*white-space:nowrap", _STYLE) and "overflow-x" not in _STYLE
    wide_screen = _STYLE.split("@media")[0]  # narrow windows may break names anywhere, numbers never
    assert "overflow-wrap:anywhere" not in wide_screen  # that broke "6400" into "640 / 0" in a narrow column


def test_html_number_columns_of_objects_are_numbers():
    """A column of numbers held as objects (a table filled in where there was nothing to measure) is scaled to its
    unit and shown as numbers."""
    from profiler_kit.render.html import render_html
    from profiler_kit.report import Report, Section, Table

    df = pd.DataFrame({"idle_class": ["host_wait", "other"], "gaps": pd.Series([0, 2], dtype=object),
                       "idle_ns": pd.Series([5e6, None], dtype=object), "flag": [True, False]})  # fmt: skip
    page = render_html(Report("t", sections=[Section("s", tables=[Table("a", df)])])).decode()
    assert "<td>host_wait</td><td class='n'>0</td><td class='n'>5.000</td><td>True</td>" in page
    assert "<td>other</td><td class='n'>2</td><td class='n'></td><td>False</td>" in page


def test_long_chart_titles_wrap_inside_the_chart():
    """plotly.js does not wrap titles: the memory view's 230-character title ran off the right edge."""
    import json
    import re

    from profiler_kit.render.html import TITLE_CHARS, render_html
    from profiler_kit.report import Figure, Report, Section

    title = "Allocations over time: " + "the largest one by one, the others summed in the grey band; " * 4
    df = pd.DataFrame({"kernel": ["gemm"], "total_ns": [1_000]})
    page = render_html(
        Report("t", sections=[Section("s", figures=[Figure(title, df, "bar", x="kernel", y="total_ns")])])
    )
    layout = json.loads(
        re.search(r'Plotly\.newPlot\("[^"]+", \[.*?\], (\{.*\}), \{"responsive"', page.decode()).group(1)
    )
    lines = layout["title"]["text"].split("<br>")
    assert len(lines) > 1 and all(len(line) <= TITLE_CHARS for line in lines) and " ".join(lines) == title.strip()
    assert layout["margin"]["t"] > 60 + len(lines) * 10


def test_rates_and_bare_units_are_titled_with_their_unit():
    """GB/s and TFLOP/s in the header, not "gb (/s)"; a column named by its unit alone is titled by the unit
    it is shown in, and byte rates are scaled to GB/s like the bandwidths computed in GB/s."""
    df = pd.DataFrame(
        {"bytes": [3 * 2**20], "gb_per_s": [12.5], "busbw_gb_per_s": [7.0], "achieved_tflop_per_s": [0.5],
         "memory_bandwidth_bytes_per_s": [2.0e12], "tokens_per_s": [10.0]}
    )  # fmt: skip
    shown = for_display(df)
    assert list(shown.columns) == [
        "MiB", "GB/s", "busbw (GB/s)", "achieved (TFLOP/s)", "memory bandwidth (GB/s)", "tokens (/s)"
    ]  # fmt: skip
    assert shown.iloc[0].tolist() == [3, 12.5, 7.0, 0.5, 2000.0, 10.0]


def test_addresses_read_in_hex_and_stay_integers_in_the_data():
    df = pd.DataFrame({"address": [0x7FF4B6000000], "reserved_bytes": [2**27]})
    assert for_display(df).iloc[0]["address"] == "0x7ff4b6000000"
    assert "0x7ff4b6000000" in render_table_md(df)
    assert df["address"].dtype.kind == "i"  # the table itself (CSV/JSON) keeps the number


def test_allocation_bands_axis_says_allocated():
    from profiler_kit.render.html import figure_json
    from profiler_kit.report import Figure

    bands = pd.DataFrame({"time_ns": [0, 10], "top_bytes": [2**20, 2**21], "bottom_bytes": [0, 0], "band": [1, 1]})
    layout = figure_json(Figure("Allocations", bands, "bands", "time_ns", "top_bytes", color="band"))["layout"]
    assert layout["yaxis"]["title"]["text"] == "allocated (MiB)"
