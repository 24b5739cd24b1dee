"""Files written whole or not at all: a temporary name beside the target, renamed onto it once complete."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def new_file_mode() -> int:
    """The mode a newly created file gets (0o666 less the umask); ``mkstemp``'s 0600 would hide results from others."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def replacing(target: Path, suffix: str = ".tmp") -> Iterator[Path]:
    """A fresh empty file beside ``target`` to write (or have a program write): renamed onto ``target`` when the
    block ends, removed when it raises. Readers of ``target`` never see half a file."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):  # renamed into place
            os.unlink(tmp)


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through ``replacing``."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
