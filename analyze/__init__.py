"""Readers and analyses: profile files in, pandas DataFrames out.

No torch, click or plotly here; a notebook can import any function.
"""

from analyze.errors import InputError
from analyze.tables import Trace

__all__ = ["InputError", "Trace"]
