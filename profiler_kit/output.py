"""Writing report files: all or nothing, under predictable names.

Every failure to write (a file where a folder should be, a read-only or full
file system, no permission) is an ``OutputError`` naming the path and the
reason; what a failed or interrupted write had staged is removed again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from pathlib import Path

from profiler_kit.analyze.files import new_file_mode
from profiler_kit.render.data import render_tables
from profiler_kit.render.html import plotly_available, render_html
from profiler_kit.render.markdown import render_markdown
from profiler_kit.report import Report


class OutputError(Exception):
    """The output cannot be written; the message names the path and says why. The CLI exits 3 on it."""


def check_stem(stem: str) -> str:
    """``stem`` when it is a plain file-name stem, which keeps every output file in the output folder.

    Raises ValueError (saying why) for an empty stem, ".", "..", or one holding a path separator or NUL.
    """
    seps = [sep for sep in (os.sep, os.altsep, "/", "\0") if sep]
    if stem in ("", ".", "..") or any(sep in stem for sep in seps):
        raise ValueError(
            f"{stem!r} is not a plain file name: give a stem without '/', like 'report' (-o picks the folder)"
        )
    return stem


def _existing_and_missing(folder: Path) -> tuple[Path, list[Path]]:
    """The nearest of ``folder`` and its parents that exists, and the folders below it to make, outermost first."""
    missing = []
    folder = Path(os.path.abspath(folder))
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return folder, missing[::-1]


def check_out_dir(out_dir: Path) -> Path:
    """``out_dir`` when it is, or can be made, a folder to write in; else OutputError, before any work is done.

    Catches a file where a folder is wanted and a folder that cannot be written (read-only, no permission);
    a full disk shows only when writing (``write_files``).
    """
    base, missing = _existing_and_missing(out_dir)
    if not base.is_dir():
        where = "" if not missing else f"cannot write to {out_dir}: "
        raise OutputError(f"{where}{base} is {'a file, not a folder' if base.is_file() else 'not a folder'}")
    if not os.access(base, os.W_OK | os.X_OK):  # root may still write (permissions); ask the file system
        try:
            fd, tmp = tempfile.mkstemp(dir=base, prefix=".profiler-kit-check.")
        except OSError as err:
            raise OutputError(f"cannot write to {out_dir}: {err.strerror or err}") from None
        os.close(fd)
        os.unlink(tmp)
    return out_dir


@contextlib.contextmanager
def _sigint_deferred():
    """Hold Ctrl-C back while the staged files are renamed into place, so a report is never half replaced."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    old = signal.signal(signal.SIGINT, lambda *args: caught.append(args))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if caught:  # now handled as it would have been (KeyboardInterrupt, as a rule)
            signal.raise_signal(signal.SIGINT)


def write_files(out_dir: Path, files: dict[str, str | bytes]) -> list[Path]:
    """Write ``{name: text}`` (text as UTF-8, bytes as they are) into ``out_dir`` atomically per file,
    after all are rendered.

    Each file goes to a temporary name first and is renamed into place once all are
    written, so an interrupted or failed run never leaves a half-written report; the
    temporary files and any folder this call made are removed again. An OSError
    becomes an OutputError; names must be plain file names.
    """
    if any(Path(name).name != name or name in (".", "..") for name in files):
        raise ValueError(f"output file names must be plain names: {list(files)}")
    check_out_dir(out_dir)
    created = _existing_and_missing(out_dir)[1]
    mode = new_file_mode()
    staged = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.", suffix=".tmp")
            staged.append((tmp, out_dir / name))
            with os.fdopen(fd, "wb") as fh:
                fh.write(text if isinstance(text, bytes) else text.encode("utf-8"))
            os.chmod(tmp, mode)
        with _sigint_deferred():
            for tmp, final in staged:
                os.replace(tmp, final)
    except BaseException as err:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):  # renamed already, or never made
                os.unlink(tmp)
        for folder in reversed(created):
            with contextlib.suppress(OSError):  # not empty: files of a rename that went through
                folder.rmdir()
        if isinstance(err, OSError):
            where = err.filename if err.filename and not str(err.filename).endswith(".tmp") else out_dir
            raise OutputError(f"cannot write to {where}: {err.strerror or err}") from None
        raise
    return [final for _, final in staged]


def render_report_files(report: Report, stem: str, fmt: str = "md", html: bool = True) -> dict[str, str | bytes]:
    """Every output file of a report, by name: ``<stem>.md`` + ``<stem>.html``, or tables as csv/json.

    With ``fmt`` csv or json the tables go to ``<stem>.<table key>.<fmt>``. Without plotly
    installed there is no ``<stem>.html`` (the CLI says so). A report with nothing to chart (a trace
    without kernels) still gets its page, which says so.
    """
    files: dict[str, str | bytes] = {}
    html_name = f"{stem}.html" if html and plotly_available() else None
    if fmt == "md":
        files[f"{stem}.md"] = render_markdown(report, html_name)
    else:
        files.update({f"{stem}.{name}": text for name, text in render_tables(report, fmt).items()})
    if html_name:
        files[html_name] = render_html(report)
    return files
