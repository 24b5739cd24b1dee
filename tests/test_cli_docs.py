"""The README's CLI reference: generated from ``--help`` (cog), current, and naming every option of every command."""

from __future__ import annotations

import re

import click
import pytest

from profiler_kit.cli_reference import commands, help_sections
from tests.conftest import ROOT

README = ROOT / "README.md"
GENERATED = re.compile(r"\]\]\] -->\n(.*?)<!-- \[\[\[end\]\]\] -->", re.S)

OPTIONS_HEADING = re.compile(r"^\S[^\n]*:\n  -", re.M)  # "Options:", or a section of a command that has them
NO_HELP_YET: set[tuple[str, str]] = set()  # every option has help text; keep it so


def _generated() -> str:
    found = GENERATED.findall(README.read_text())
    assert len(found) == 1, "README.md should hold one cog block (the CLI reference)"
    return found[0]


def _section(name: str) -> str:
    text = _generated()
    start = text.index(f"#### `profiler-kit {name}`\n")
    end = text.find("#### `profiler-kit ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_readme_cli_reference_is_current():
    """What `cog -r README.md` would write (pip install -e .[test]; PYTHONPATH=. cog -r README.md)."""
    assert _generated() == help_sections(), "README.md's CLI reference is stale: run `cog -r README.md`"


@pytest.mark.parametrize("name", list(commands()))
def test_every_option_of_every_command_is_documented(name):
    cmd = commands()[name]
    section = _section(name)
    assert cmd.help and f"Usage: profiler-kit {name} " in section
    for param in cmd.params:
        if isinstance(param, click.Argument):
            assert param.human_readable_name in section.splitlines()[3], (name, param.name)
            continue
        if getattr(param, "hidden", False):
            continue
        options = section[OPTIONS_HEADING.search(section).start() :]  # an option's own line, not the examples above
        for opt in param.opts + param.secondary_opts:
            assert re.search(rf"^ +(\S+, )*{re.escape(opt)}([ ,/=]|$)", options, re.M), (name, opt)
        longest = max(param.opts, key=len)
        if not param.help:
            assert (name, longest) in NO_HELP_YET, f"profiler-kit {name} {longest} has no help text"


def test_record_help_groups_options_by_workload():
    """Each of record's options under the heading of the workloads it applies to, each once, with aligned help."""
    from profiler_kit.cli import RECORD_SECTIONS
    from profiler_kit.cli_reference import help_text

    text = help_text("record")
    cmd = commands()["record"]
    headings = [m.group(0)[:-5] for m in OPTIONS_HEADING.finditer(text)]
    assert headings == list(RECORD_SECTIONS), "every option is in a section; no 'Other options'"
    by_name = {p.name: p for p in cmd.params}
    for title, names in RECORD_SECTIONS.items():
        body = text[text.index(f"\n{title}:\n") :].split("\n\n")[0]
        for name in names:
            opt = "--help" if name == "help" else max(by_name[name].opts, key=len)
            assert re.search(rf"^  (\S+, )*{re.escape(opt)}\b", body, re.M), (title, opt)
    assert {n for names in RECORD_SECTIONS.values() for n in names} == {*by_name, "help"} - {"workload"}
    columns = {m.start(2) - m.start(0) for m in re.finditer(r"^(  -\S.*?  +)(\S)", text, re.M)}
    assert len(columns) == 1, f"help text starts in one column in every section, not {sorted(columns)}"


@pytest.mark.parametrize("name", ["report", "memory", "diff", "ddp-report"])
def test_help_names_one_default_output_folder(name):
    """The description and -o's default agree (memory's said reports/memory in one place and 'a folder under
    reports/ named for the input' in the other)."""
    from profiler_kit.cli_reference import help_text

    text = help_text(name)
    described = text[: text.index("Example:")]
    option = re.search(r"--out PATH +Folder for the output files \[default: ([^\]]+)\]", " ".join(text.split()))
    assert option, text
    named = set(re.findall(r"reports/[\w<>]+", described))
    assert named <= set(re.findall(r"reports/[\w<>]+", option.group(1))), (named, option.group(1))
