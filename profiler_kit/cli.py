"""The ``profiler-kit`` command line: thin click commands over library functions.

Every command opens its inputs, calls one library function and writes the
result. Bad input raises ``analyze.InputError``, shown as one line on stderr
with exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from analyze.errors import InputError


class BadInput(click.ClickException):
    """An InputError as click shows it: ``Error: <message>``, exit code 2."""

    exit_code = 2


class Group(click.Group):
    """Turns library InputErrors (and unreadable files) into one-line errors."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InputError as err:
            raise BadInput(str(err)) from None
        except (MemoryError, RecursionError) as err:
            raise BadInput(f"input too large or too deeply nested to read: {type(err).__name__}") from None


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="profiler-kit")
def cli():
    """Answer "where do my GPU time and memory go?" from PyTorch profiles.

    Reads Nsight Systems exports (.sqlite, .nsys-rep), PyTorch profiler traces
    (.json, .json.gz) and torch.cuda.memory snapshots (.pickle), and writes
    markdown reports with interactive HTML charts.

    Example: profiler-kit report examples/ -o reports/example
    """


def progress(items, label: str):
    """A progress bar on stderr (hidden when stderr is not a terminal)."""
    return click.progressbar(items, label=label, file=sys.stderr, show_pos=True)


def echo_written(paths: list[Path]) -> None:
    """Tell the user where the output went (stderr, so stdout stays pipeable)."""
    for p in paths:
        click.echo(f"wrote {p}", err=True)
