"""The README's CLI reference, generated from each command's ``--help`` (``cog -r README.md``; tests check it)."""

from __future__ import annotations

import click
from click.testing import CliRunner

WIDTH = 100  # fixed, so the text does not depend on the terminal that regenerates it


def commands(group: click.Group | None = None) -> dict[str, click.Command]:
    """Every command by its name after ``profiler-kit``, in the order ``--help`` lists them."""
    from profiler_kit.cli import cli

    group = group or cli
    with click.Context(group) as ctx:
        return {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}


def help_text(name: str) -> str:
    """``profiler-kit NAME --help`` as printed at ``WIDTH`` columns."""
    from profiler_kit.cli import cli

    res = CliRunner().invoke(
        cli, [name, "--help"], prog_name="profiler-kit", terminal_width=WIDTH, max_content_width=WIDTH
    )
    if res.exit_code != 0:
        raise RuntimeError(f"profiler-kit {name} --help failed: {res.output}")
    return res.output


def help_sections() -> str:
    """Markdown: a heading and the ``--help`` text of each command."""
    return "".join(f"#### `profiler-kit {name}`\n\n```text\n{help_text(name)}```\n\n" for name in commands())
