"""The request is one pydantic model: each field takes what its type and checks allow, and a
request with several problems gets a line for each, in the request's field order."""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trtllm_script_builder.cli import main
from trtllm_script_builder.cli.flags import field_specs
from trtllm_script_builder.cli.schema import generate
from trtllm_script_builder.errors import BuildError, BuildErrors
from trtllm_script_builder.model import request as rq
from trtllm_script_builder.model.registry import WORKFLOWS

BUILT_IN = ("pytest", "eval", "bench", "custom", "perf_sanity")

ROOT = Path(__file__).resolve().parents[1]
BASE: dict[str, Any] = {
    "execution_scenario": "local_slurm",
    "work_dir": "/w",
    "repo_root": "/r",
    "test_cmd": "pytest accuracy/test_x.py::TestX::test_y[tp4]",
    "partition": "gpu",
    "account": "tsb",
    "slurm_env_file": "/c/slurm_env.json",
}
# Every field gets each of these: right and wrong types, values a field's checks refuse, and
# the edges of each check.
VALUES: list[Any] = [
    None, True, False, 0, 1, 4, -1, 2**70, 4.0, 4.5, "4", "", "x", "a\x00b", "gpu", "gpu\n",
    " gpu", "02:00:00", "4:00:00", "2 hours", "UNLIMITED", "infinite", "1-2:3", "90", [], ["a"],
    {}, b"x", "local_docker", "remote_slurm", "pytest", "perf_sanity", "Model-1.x", "-bad",
    {"gpus_per_node": 8},
]  # fmt: skip


def load(data: dict[str, Any]) -> rq.Request:
    return rq.load_request(data, Path("/base"), {})


def refused(data: dict[str, Any]) -> list[str]:
    """The error lines a build prints for `data`."""
    with pytest.raises(BuildError) as caught:
        load(data)
    return caught.value.line().splitlines()


def _kind(annotation: Any) -> type:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Literal, typing.Annotated):
        return str
    return _kind(args[0]) if args else annotation


@pytest.mark.parametrize("field", list(rq.Request.model_fields))
def test_each_field_takes_its_type_or_names_itself(field: str) -> None:
    """Whatever a field is given, the request holds a value of the field's type, or the one
    refusal line names that field."""
    kind = _kind(rq.Request.model_fields[field].annotation)
    taken = 0
    for value in VALUES:
        try:
            got = getattr(load({**BASE, field: value}), field)
        except BuildError as err:
            lines = err.line().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"error: {field}"), (value, lines)
            continue
        taken += 1
        default = rq.Request.model_fields[field].default
        assert got is None and value is None or isinstance(got, kind) or got == default, value
    assert taken, f"{field} took no value"


def test_one_problem_is_one_line_as_before() -> None:
    assert refused({**BASE, "time_limit": "2 hours"}) == [
        "error: time_limit: is not a Slurm time (MM, HH:MM:SS, D-HH:MM:SS or UNLIMITED) "
        "(got '2 hours'); write 02:00:00 for 2 h"
    ]
    assert refused({**BASE, "workflow_type": "4"}) == [
        "error: workflow_type: Input should be 'pytest', 'eval', 'bench', 'custom' or "
        "'perf_sanity' (got '4'); did you mean perf_sanity? (category 4 is perf_sanity's script)"
    ]
    with pytest.raises(BuildError) as caught:
        load({**BASE, "node_count": 0})
    assert not isinstance(caught.value, BuildErrors) and caught.value.field == "node_count"


def test_every_problem_is_reported_at_once_in_field_order() -> None:
    data = {
        **BASE,
        "test_comd": "typo",
        "partition": "bad name",
        "required_devices": True,
        "work_dir": "~/w",
        "model_name": "a\nb",
        "remote_repo_path": "relative",
        "env_check": {"gpus_per_node": "8"},
    }
    lines = refused(data)
    fields = [line.split(":", 2)[1].strip() for line in lines]
    assert fields == [
        "work_dir",
        "model_name",
        "required_devices",
        "partition",
        "remote_repo_path",
        "env_check.gpus_per_node",
        "test_comd",
    ]
    assert lines[-1].endswith(
        "did you mean test_cmd? trtllm-script-builder schema request lists every field"
    )
    # one line per field, even when a value breaks more than one of its checks
    assert refused({**BASE, "wheel": "/a\nb"}) == [
        "error: wheel: holds a newline, which no script or command line can carry "
        "(got '/a\\nb'); correct the value"
    ]


def test_missing_fields_are_each_named() -> None:
    assert refused({}) == [
        f"error: {name}: is required; add it to the request or pass --{name.replace('_', '-')}"
        for name in ("execution_scenario", "work_dir", "repo_root")
    ]


def test_the_cli_prints_each_problem_and_writes_nothing(tmp_path: Path) -> None:
    request = tmp_path / "req.json"
    request.write_text(json.dumps({**BASE, "work_dir": str(tmp_path / "w"), "node_count": 0}))
    r = CliRunner().invoke(main, ["build", str(request), "--time-limit", "soon"])
    assert r.exit_code == 2
    # The build's own checks of the rest of the request come in the same answer: the
    # checkout and the cluster file named here do not exist.
    assert r.stderr.splitlines() == [
        "error: repo_root: /r is not a folder; pass the path of your TensorRT-LLM checkout "
        "with --repo-root",
        "error: node_count: Input should be greater than or equal to 1 (got 0); write a whole "
        "number of at least 1, or leave the field out",
        "error: slurm_env_file: cannot read /c/slurm_env.json (No such file or directory); "
        "probe the cluster first (trtllm-script-builder probe --output slurm_env.json)",
        "error: time_limit: is not a Slurm time (MM, HH:MM:SS, D-HH:MM:SS or UNLIMITED) "
        "(got 'soon'); write minutes (90), HH:MM:SS (01:30:00) or D-HH:MM:SS (1-00:00:00)",
    ]
    assert not (tmp_path / "w").exists()


def test_model_copy_sets_values_on_a_copy() -> None:
    req = rq.Request.model_validate(BASE)
    other = req.model_copy(update={"test_cmd": "pytest b.py", "time_limit": "10"})
    assert (other.test_cmd, other.time_limit) == ("pytest b.py", "10")
    assert req.test_cmd == BASE["test_cmd"] and req.time_limit == "02:00:00"
    assert other.workflow() == "pytest" and other.execution_scenario == "local_slurm"


@pytest.fixture
def registered() -> Iterator[None]:
    """The built-in workflows registered (by the test suite's conftest), and one more that only
    this test knows."""
    WORKFLOWS.register(
        "serve", dataclasses.replace(WORKFLOWS.get("custom"), name="serve", aliases=())
    )
    yield
    WORKFLOWS.unregister("serve")


def test_workflow_type_is_a_registered_workflow(registered: None) -> None:
    assert load({**BASE, "workflow_type": "serve"}).workflow() == "serve"
    schema = generate("request")["properties"]["workflow_type"]
    assert schema["anyOf"][0]["enum"] == [*BUILT_IN, "serve"]
    assert refused({**BASE, "workflow_type": "serv"}) == [
        "error: workflow_type: Input should be 'pytest', 'eval', 'bench', 'custom', "
        "'perf_sanity' or 'serve' (got 'serv'); did you mean serve?"
    ]
    flag = dict((decls[0], attrs) for decls, attrs in field_specs())["--workflow-type"]
    assert tuple(flag["type"].choices) == (*BUILT_IN, "serve")
