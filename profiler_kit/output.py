"""Writing report files: all or nothing, under predictable names."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from profiler_kit.render.data import render_tables
from profiler_kit.render.html import plotly_available, render_html
from profiler_kit.render.markdown import render_markdown
from profiler_kit.report import Report


def write_files(out_dir: Path, files: dict[str, str | bytes]) -> list[Path]:
    """Write ``{name: text}`` (text as UTF-8, bytes as they are) into ``out_dir`` atomically per file,
    after all are rendered.

    Each file goes to a temporary name first and is renamed into place, so an
    interrupted run never leaves a half-written report.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    umask = os.umask(0)
    os.umask(umask)
    staged = []
    try:
        for name, text in files.items():
            fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(text if isinstance(text, bytes) else text.encode("utf-8"))
            os.chmod(tmp, 0o666 & ~umask)
            staged.append((tmp, out_dir / name))
    except BaseException:
        for tmp, _ in staged:
            os.unlink(tmp)
        raise
    for tmp, final in staged:
        os.replace(tmp, final)
    return [final for _, final in staged]


def render_report_files(report: Report, stem: str, fmt: str = "md", html: bool = True) -> dict[str, str | bytes]:
    """Every output file of a report, by name: ``<stem>.md`` + ``<stem>.html``, or tables as csv/json.

    With ``fmt`` csv or json the tables go to ``<stem>.<table key>.<fmt>``. Without plotly
    installed there is no ``<stem>.html`` (the CLI says so).
    """
    files: dict[str, str | bytes] = {}
    html_name = f"{stem}.html" if html and report.figures() and plotly_available() else None
    if fmt == "md":
        files[f"{stem}.md"] = render_markdown(report, html_name)
    else:
        files.update({f"{stem}.{name}": text for name, text in render_tables(report, fmt).items()})
    if html_name:
        files[html_name] = render_html(report)
    return files
