"""A columnar copy of a big export's normalized tables, kept beside it, so a second read is fast.

Reading a 150 MiB nsys export through SQLite takes seconds; the same tables as
Arrow IPC files load in a fraction of that. The copy lives in a hidden folder
``.<export name>.profiler-kit-cache/`` next to the export and is used only while
its key still matches: the export's size and modification time, how it was read
(``variant``), and a fingerprint of the reader's source and the pandas/pyarrow
versions, so a changed file or a changed reader never serves stale tables.

Writing is all or nothing: the folder is built under a temporary name and
renamed into place, on a thread of a ``CacheWriter`` that the command makes and waits for. A folder without write permission bits (or any write error)
means no cache, silently; a cache that fails to load is ignored and rebuilt.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from profiler_kit.analyze.nsys_prefetch import Prefetch
    from profiler_kit.analyze.tables import Trace

# numpy, pandas and pyarrow (and hashlib, shutil, tempfile) are imported where used: ``cache_dir``,
# MIN_EXPORT_BYTES and ``prefetch_uncached`` serve a command line that has not loaded them yet, and
# whatever it imports before ``Prefetch.start`` (analyze/nsys_prefetch.py) forks delays the early read.
MIN_EXPORT_BYTES = 32 * 2**20  # smaller exports read fast enough; no folder beside them
SUFFIX = ".profiler-kit-cache"
READER_SOURCES = ("early_read.py", "nsys_schema.py", "nsys_sqlite.py", "sqlite_pages.py", "tables.py", "trace_cache.py")


class CacheWriter:
    """The cache writes one command starts (``read_cached``), so it can wait for them and say where they went.

    Made by the command line (or a Dask task) and passed down to the reader; no module state.
    """

    def __init__(self) -> None:
        self.pending: list[threading.Thread] = []
        self.written: list[Path] = []
        self._lock = threading.Lock()

    def start(self, folder: Path, arrow_tables: Callable[[], tuple[dict, dict]]) -> threading.Thread:
        """Write ``folder`` from ``arrow_tables()`` on a thread (not a daemon: the process waits for it)."""
        thread = threading.Thread(target=self._write, args=(folder, arrow_tables), name="trace-cache")
        thread.start()
        self.pending.append(thread)
        return thread

    def add(self, folders: list[Path]) -> None:
        """Count folders written elsewhere (a Dask worker's ``finish``) as this command's."""
        with self._lock:
            self.written.extend(folders)

    def finish(self) -> list[Path]:
        """Wait for the writes started so far; the cache folders written since the last call."""
        while self.pending:
            self.pending.pop().join()
        with self._lock:
            done, self.written = self.written, []
        return done

    def _write(self, folder: Path, arrow_tables: Callable[[], tuple[dict, dict]]) -> None:
        if _write(folder, arrow_tables):
            self.add([folder])


def cache_dir(path: Path) -> Path:
    return path.parent / f".{path.name}{SUFFIX}"


def cache_key(path: Path, variant: str) -> dict:
    """What the cached tables depend on; any difference makes the cache stale."""
    import hashlib

    import pandas as pd
    import pyarrow

    st = path.stat()
    here = Path(__file__).parent
    reader = hashlib.sha256(b"".join((here / name).read_bytes() for name in READER_SOURCES)).hexdigest()
    return {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "variant": variant,
        "reader": reader,
        "pandas": pd.__version__,
        "pyarrow": pyarrow.__version__,
    }


def prefetch_uncached(path: Path, prefetch: Prefetch, cache: bool = True) -> Prefetch:
    """Start reading a big nsys export's kernel, NVTX and runtime tables now (``prefetch.start``), unless a
    cache folder beside it will serve the report instead (``cache``: whether the report may use one); ``prefetch``.

    Called before the report imports pandas: the reads (in a forked process, or on a thread without the GIL)
    overlap the imports. A cache folder that turns out stale only means no early start.
    """
    if uncached_export(path, cache):
        prefetch.start(path)
    return prefetch


def prefetch_one(path: Path, cache: bool = True) -> Prefetch:
    """``prefetch_uncached`` of a report's one input, with the early reader's memory file allocated on a thread
    (``analyze.early_memory``) while numpy is imported here: called before numpy is."""
    from profiler_kit.analyze.early_memory import PagesAhead

    wanted = uncached_export(path, cache)
    pages = PagesAhead.start(path) if wanted else None
    from profiler_kit.analyze.nsys_prefetch import Prefetch  # imports numpy: the early read forks with it loaded

    prefetch = Prefetch(pages)
    if wanted:
        prefetch.start(path)
    return prefetch


def uncached_export(path: Path, cache: bool = True) -> bool:
    """Whether ``prefetch_uncached`` starts reading ``path``: a big nsys export that no cache folder will serve."""
    try:
        big = path.suffix == ".sqlite" and path.stat().st_size >= MIN_EXPORT_BYTES
    except OSError:
        return False
    return big and not (cache and cache_dir(path).exists())


def read_cached(path: Path, read: Callable[[], Trace], writer: CacheWriter, variant: str = "") -> Trace:
    """``read()``'s Trace, from the cache beside ``path`` when it is current, else read and cached by ``writer``.

    Exports under MIN_EXPORT_BYTES are always read directly. A cached Trace's
    ``meta["source"]`` is ``path`` as given this time.
    """
    path = Path(path)
    try:
        import pyarrow  # noqa: F401  optional (README, Dependencies): no pyarrow, no cache
    except ImportError:  # pragma: no cover - exercised where pyarrow is absent
        return read()
    if path.stat().st_size < MIN_EXPORT_BYTES:
        return read()
    key = cache_key(path, variant)
    trace = _load(cache_dir(path), key)
    if trace is None:
        trace = read()
        _save_soon(writer, cache_dir(path), key, trace)
    else:
        trace.meta["source"] = str(path)
    return trace


def _load(folder: Path, key: dict) -> Trace | None:
    import numpy as np
    import pyarrow as pa
    from profiler_kit.analyze.tables import SCHEMAS, Trace, with_columns

    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        if manifest.get("key") != key:
            return None
        tables = {}
        for name in SCHEMAS:
            with pa.memory_map(str(folder / f"{name}.arrow")) as source:
                df = pa.ipc.open_file(source).read_all().to_pandas(split_blocks=True)
            constant = manifest["constant"][name]  # a column of one value: a view of it
            tables[name] = with_columns(df, {c: np.broadcast_to(np.int64(v), len(df)) for c, v in constant.items()})
        return Trace(**tables, meta=manifest["meta"]).validated()
    except Exception:  # missing, partial or unreadable cache: read the export instead
        return None


def _save_soon(writer: CacheWriter, folder: Path, key: dict, trace: Trace) -> threading.Thread | None:
    """Start writing the cache on ``writer``'s thread (Arrow writes without the GIL) while the caller analyses.

    The thread takes the tables (waiting there for any still ``arriving``); the Arrow tables share
    the DataFrames' buffers, which nothing modifies in place.
    """
    import numpy as np
    import pyarrow as pa
    from profiler_kit.analyze.tables import SCHEMAS, one_value

    parent = folder.parent
    if not parent.stat().st_mode & 0o222:  # a folder marked read-only stays untouched, even for root
        return None
    meta = dict(trace.meta)  # as read: a caller may relabel the source afterwards

    def arrow_tables() -> tuple[dict, dict]:
        tables, constant = {}, {}
        for name in SCHEMAS:
            df = getattr(trace, name)
            int64 = [c for c in df.columns if df[c].dtype == np.int64]
            # a column of one value (unread, one process's pid, one GPU) goes into the manifest, not the file
            constant[name] = {c: int(df[c].iat[0]) for c in int64 if one_value(df[c].to_numpy())}
            # one thread: pyarrow's pool for a table of a few zero-copy columns costs more than it saves
            tables[name] = pa.Table.from_pandas(df.drop(columns=list(constant[name])), preserve_index=False, nthreads=1)
        return tables, {"key": key, "meta": meta, "constant": constant}

    return writer.start(folder, arrow_tables)


def _write(folder: Path, arrow_tables: Callable[[], tuple[dict, dict]]) -> bool:
    """Write the cache folder under a temporary name, then rename it into place; whether it was (any error: no cache)."""
    import shutil
    import tempfile

    import pyarrow as pa
    from profiler_kit.analyze.errors import InputError

    parent, tmp = folder.parent, None
    try:
        tables, manifest = arrow_tables()
        tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f"{folder.name}.tmp-"))
        for name, table in tables.items():
            with pa.OSFile(str(tmp / f"{name}.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
        (tmp / "manifest.json").write_text(json.dumps(manifest))
        os.chmod(tmp, 0o755)
        old = parent / f"{folder.name}.old-{os.getpid()}"
        if folder.exists():
            os.rename(folder, old)
        os.rename(tmp, folder)
        tmp = None
        shutil.rmtree(old, ignore_errors=True)
        return True
    except (OSError, pa.ArrowException, TypeError, ValueError, InputError):  # InputError: the read failed
        return False
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
