"""The report model: what a report says, independent of how it is rendered.

Builders (``build.py``, ``build_memory.py``...) fill it from analysis results;
renderers turn it into markdown, HTML or CSV/JSON. Tables keep raw units
(``*_ns``, ``*_bytes``, ``*_frac`` columns); renderers choose display units.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd


def slug(text: str) -> str:
    """A file-name-safe, lower-case key for a title ("Top kernels" -> "top_kernels")."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "item"


# A trace's file extension inside a key ("run.json.gz_summary"): dropped, so CSV names read <trace>_<table>.
TRACE_EXTENSION = re.compile(r"(?:\.pt\.trace)?\.(?:json|sqlite|nsys-rep|qdrep|pickle)(?:\.gz)?(?=_|$)")


def file_key(key: str, title: str) -> str:
    """``key`` made safe as a file name, else the title's slug.

    Labels of traces in subfolders hold "/" (made "_"), and their file extensions are dropped:
    ``kineto/run.json.gz_summary`` becomes ``kineto_run_summary``.
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "_", TRACE_EXTENSION.sub("", key)).strip("_.") if key else slug(title)


@dataclass
class Table:
    """A titled DataFrame. ``key`` names its CSV/JSON file; ``note`` is shown under it. A ``collapsed`` table
    holds detail behind another (the members of a folded row): the HTML shows it folded, to be expanded."""

    title: str
    df: pd.DataFrame
    note: str = ""
    key: str = ""
    collapsed: bool = False
    # its markdown, when rendered beside the analysis (render.markdown.prerender: on a Dask worker, in parallel)
    markdown: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.key = file_key(self.key, self.title)


@dataclass
class Figure:
    """A chart spec: ``kind`` is "bar", "stacked_bar", "line", "area", "bands" (a filled band per ``color``
    value between ``bottom_bytes`` and ``y``) or "blocks" (bars of length ``x`` from ``offset_bytes``, rows ``y``).

    ``x``/``y`` name columns of ``df``; ``color`` splits series (stacking for
    stacked kinds); ``facet`` optionally splits panels. Values are raw units:
    the renderer scales ``*_ns``/``*_bytes``/``*_frac`` columns for display.
    """

    title: str
    df: pd.DataFrame
    kind: str
    x: str
    y: str
    color: str | None = None
    orientation: str = "v"
    key: str = ""

    def __post_init__(self):
        self.key = file_key(self.key, self.title)


@dataclass
class Section:
    """A heading with paragraphs, tables, figures and nested sections, in that order."""

    title: str
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)

    def walk(self):
        """Yield this section and every nested one, depth first."""
        yield self
        for sub in self.sections:
            yield from sub.walk()


@dataclass
class Report:
    """A whole report: a title, an intro and sections."""

    title: str
    sections: list[Section] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def tables(self) -> list[Table]:
        """Every table, in reading order."""
        return [t for top in self.sections for s in top.walk() for t in s.tables]

    def figures(self) -> list[Figure]:
        """Every figure, in reading order."""
        return [f for top in self.sections for s in top.walk() for f in s.figures]
