"""The request fields are described once, on the model, and every surface shows that text:
the field flags of build, build-many and run, their --help lines and the request JSON Schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from trtllm_script_builder.cli import main
from trtllm_script_builder.cli.flags import brief, field_options
from trtllm_script_builder.cli.schema import generate
from trtllm_script_builder.model.request import EnvCheck, Request, load_request, parse_flag_values

FIELDS = list(Request.model_fields)
FIELD_COMMANDS = ["build", "build-many", "run"]


def squeeze(text: str) -> str:
    """Text without whitespace: click wraps help lines, and may break them after a hyphen."""
    return "".join(text.split())


def command(name: str) -> click.Command:
    cmd = main.get_command(click.Context(main), name)
    assert cmd is not None
    return cmd


def help_entries(name: str) -> dict[str, str]:
    """Each option of `<name> --help` by its first spelling: its whole entry, unwrapped."""
    r = CliRunner().invoke(main, [name, "--help"], terminal_width=100)
    assert r.exit_code == 0, r.output
    options = r.stdout.split("\nOptions:\n", 1)[1]
    entries: dict[str, str] = {}
    current = None
    for line in options.splitlines():
        m = re.match(r"  (-[-\w]+)", line)
        if m:
            current = m.group(1)
            entries[current] = line.strip()
        elif current and line.startswith("    "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return entries


@pytest.mark.parametrize("model", [Request, EnvCheck])
def test_every_field_has_a_description(model: type[Request] | type[EnvCheck]) -> None:
    for name, info in model.model_fields.items():
        text = info.description or ""
        assert len(text.split()) >= 5, f"{model.__name__}.{name} has no real description"
        assert text[0].isalnum() and text.endswith("."), f"{name}: one sentence, please"
        assert "request field" not in text


@pytest.mark.parametrize("name", FIELD_COMMANDS)
def test_every_field_is_a_flag_spelled_from_its_name(name: str) -> None:
    opts = {p.name: p for p in command(name).params if isinstance(p, click.Option)}
    for field in FIELDS:
        option = opts[field]
        assert f"--{field.replace('_', '-')}" in option.opts
        # --help keeps the description's first clause; the schema has the whole text
        assert option.help == brief(Request.model_fields[field].description or "")
        assert option.default is None  # an absent flag leaves the request file's value


def test_switches_and_types_follow_the_model() -> None:
    opts = {p.name: p for p in command("build").params if isinstance(p, click.Option)}
    assert opts["persistent_mode"].secondary_opts == ["--no-persistent-mode"]
    assert opts["skip_install"].secondary_opts == ["--no-skip-install"]
    assert isinstance(opts["required_devices"].type, click.types.IntParamType)
    assert isinstance(opts["repo_root"].type, click.Path)
    assert isinstance(opts["execution_scenario"].type, click.Choice)
    assert opts["env_check"].metavar == "JSON"


@pytest.mark.parametrize("name", ["build", "run"])
def test_each_field_help_line_is_the_description(name: str) -> None:
    entries = help_entries(name)
    for field, info in Request.model_fields.items():
        flag = f"--{field.replace('_', '-')}"
        entry = entries[flag]
        text = brief(info.description or "")
        assert squeeze(entry).endswith(squeeze(text)), field
        # Nothing but the flag (and its metavar or choices) stands before the description.
        head = squeeze(entry)[: -len(squeeze(text))]
        assert head.startswith(squeeze(flag)) and "request field" not in entry, field


def test_flags_reach_the_request() -> None:
    """A generated flag is still typed and merged as before: int, bool, choice, JSON."""
    seen: dict[str, object] = {}

    @click.command()
    @field_options
    def take(**fields: object) -> None:
        seen.update(fields)

    args = [
        "--execution-scenario", "local_docker", "--work-dir", "/w", "--repo-root", "/r",
        "--required-devices", "4", "--no-persistent-mode", "--skip-install",
        "--env-check", json.dumps({"gpus_per_node": 8}), "--time-limit", "30",
    ]  # fmt: skip
    r = CliRunner().invoke(take, args)
    assert r.exit_code == 0, r.output
    req = load_request({}, Path("/"), parse_flag_values(seen))
    assert req.required_devices == 4 and req.persistent_mode is False and req.skip_install
    assert req.env_check is not None and req.env_check.gpus_per_node == 8
    assert req.time_limit == "30" and req.workflow_type is None


def test_the_request_schema_carries_the_descriptions() -> None:
    schema = generate("request")
    for field, info in Request.model_fields.items():
        assert schema["properties"][field]["description"] == info.description, field
    env_check = schema["$defs"]["EnvCheck"]["properties"]
    for field, info in EnvCheck.model_fields.items():
        assert env_check[field]["description"] == info.description, field


def test_schema_command_prints_the_descriptions() -> None:
    r = CliRunner().invoke(main, ["schema", "request"])
    assert r.exit_code == 0, r.output
    props = json.loads(r.stdout)["properties"]
    assert props["time_limit"]["description"] == Request.model_fields["time_limit"].description
    assert all(p.get("description") for p in props.values())
