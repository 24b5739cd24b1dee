"""Values derived from one DataFrame, computed once and kept while that frame object lives.

Why: a report derives the same arrays from one table in several functions that each take only the table (the NVTX
ranges' label codes: 7 times from all ranges and 4 from the phase rows in one report, 4-7 ms each on 77k ranges).
Sound because the tables of a read trace are not changed in place; the kept arrays are made read-only.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

import pandas as pd

T = TypeVar("T")


class FrameMemo(Generic[T]):
    """``compute(frame)`` per frame object, for as long as that object lives (keyed by its identity)."""

    def __init__(self, compute: Callable[[pd.DataFrame], T]):
        self.compute = compute
        self.values: dict[int, tuple[weakref.ref, T]] = {}
        self.lock = threading.RLock()  # two threads asking at once: the second waits instead of computing again

    def __call__(self, frame: pd.DataFrame) -> T:
        with self.lock:
            kept = self.values.get(id(frame))
            if kept is not None and kept[0]() is frame:
                return kept[1]
            value = self.compute(frame)
            self.put(frame, value)
            return value

    def put(self, frame: pd.DataFrame, value: T) -> None:
        """Keep ``value`` as ``frame``'s (a caller that derived the frame knows its value cheaper)."""
        key, values = id(frame), self.values
        with self.lock:  # the entry goes when the frame does, before its id can name another object
            values[key] = (weakref.ref(frame, lambda _: values.pop(key, None)), value)
