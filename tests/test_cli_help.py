"""Every command's --help shows an example of calling it.

An example is an `Example:` (or `Examples:`) heading followed by an indented line that calls
`trtllm-script-builder <command>`. Commands are taken from the CLI as it lists them (loaded or
lazy), so a new command is checked the day it is added.
"""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from trtllm_script_builder.cli import main

# Commands whose help has no example yet (their owners add one; then the entry goes, as the
# strict xfail fails once the example is there).
KNOWN_MISSING: set[str] = set()


def command_names() -> list[str]:
    """Every command the CLI offers, loaded or lazy (as `--help` and completion list them)."""
    return list(main.list_commands(click.Context(main)))


def example_lines(help_text: str) -> list[str]:
    m = re.search(r"^\s*Examples?:\n((?:[ \t]+\S.*\n?)+)", help_text, re.M)
    return [ln.strip() for ln in m.group(1).splitlines()] if m else []


def help_of(args: list[str]) -> str:
    r = CliRunner().invoke(main, [*args, "--help"], terminal_width=100)
    assert r.exit_code == 0, r.output
    return r.stdout


def test_the_group_help_shows_an_example() -> None:
    lines = example_lines(help_of([]))
    assert any(ln.startswith("trtllm-script-builder ") for ln in lines)


def test_the_core_commands_are_registered() -> None:
    names = command_names()
    assert {"build", "schema", "completion", "probe", "check"} <= set(names)
    for name in names:  # each lazy name resolves to a command of that name
        cmd = main.get_command(click.Context(main), name)
        assert cmd is not None and cmd.name == name


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            n,
            marks=pytest.mark.xfail(strict=True, reason="no example in --help yet")
            if n in KNOWN_MISSING
            else (),
        )
        for n in command_names()
    ],
)
def test_command_help_shows_an_example(name: str) -> None:
    lines = example_lines(help_of([name]))
    assert lines, f"`trtllm-script-builder {name} --help` shows no Example: section"
    calls = [ln for ln in lines if re.search(rf"trtllm-script-builder {re.escape(name)}\b", ln)]
    assert calls, f"the example of {name} does not call `trtllm-script-builder {name}`: {lines}"


@pytest.mark.parametrize("name", ["", *command_names()])
def test_every_command_help_lists_its_exit_status(name: str) -> None:
    text = help_of([name] if name else [])
    assert re.search(r"Exit status: 0 ", " ".join(text.split())), text


@pytest.mark.parametrize("name", ["build", "build-many", "run"])
def test_field_flags_are_grouped_by_topic_after_the_commands_own(name: str) -> None:
    text = help_of([name])
    headings = re.findall(r"^(\S[^:\n]*):$", text, re.M)
    assert headings[:4] == ["Options", "What to run", "Where it runs", "GPUs and nodes"], headings
    assert "Compile the checkout first (docs/compile.md)" in headings
    compile_part = text.split("Compile the checkout first")[1].split("\n\n")[0]
    assert "--cuda-arch" in compile_part and "--test-cmd" not in compile_part
    # the whole text of a field is in the schema; --help keeps its first clause
    assert len(text.splitlines()) <= 125, len(text.splitlines())
    own = text.split("Options:")[1].split("What to run:")[0]
    assert "--help" in own and "--test-cmd" not in own
