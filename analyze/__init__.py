"""Readers and analyses: profile files in, pandas DataFrames out.

No torch, click or plotly here; a notebook can import any function. The package itself
imports nothing heavy (``Trace`` loads on first use), so a command line that needs only
``InputError`` starts without pandas, which loads with the first reader.
"""

from profiler_kit.analyze.errors import InputError

__all__ = ["InputError", "Trace"]


def __getattr__(name: str):
    if name == "Trace":
        from profiler_kit.analyze.tables import Trace

        return Trace
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
