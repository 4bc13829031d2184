"""The request's field table has two readers: the fast path a build takes and the pydantic twin
that converts, refuses and gives the schema. They must agree on every input: the fast path
may only take what the twin would keep unchanged, and anything else goes to the twin."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from trtllm_script_builder.model import request as rq

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
# Every field gets each of these: right and wrong types, conversions pydantic would make
# (which must go to the twin), values its checks refuse, and the edges of each check.
VALUES: list[Any] = [
    None, True, False, 0, 1, 4, -1, 2**70, 4.0, 4.5, "4", "", "x", "a\x00b", "gpu", "gpu\n",
    " gpu", "02:00:00", "4:00:00", "2 hours", "UNLIMITED", "infinite", "1-2:3", "90", [], ["a"],
    {}, b"x", "local_docker", "remote_slurm", "pytest", "perf_sanity", "Model-1.x", "-bad",
    {"gpus_per_node": 8},
]  # fmt: skip
ENV_CHECKS: list[Any] = [
    {},
    {"gpus_per_node": 8, "available_gpus": 0, "default_models_repo": "/m", "device_type": "H100"},
    {"gpus_per_node": None},
    {"gpus_per_node": 0},
    {"gpus_per_node": True},
    {"gpus_per_node": "8"},
    {"gpus_per_node": 8.0},
    {"available_gpus": -1},
    {"device_type": "a\x00b"},  # the NUL check is the request's, not env_check's
    {"device_type": 5},
    {"surplus": 1},
    [],
    "{}",
]


def outcome(how: str, data: Any) -> Any:
    """The plain request, or the error line a build would print."""
    try:
        if how == "twin":
            return rq._from_twin(rq._twins()[1].model_validate(data))
        return rq.Request.model_validate(data)
    except ValidationError as exc:
        return rq._first_error(exc).line()


def agree(data: Any) -> bool:
    """Both paths give the same; returns whether the fast path took it."""
    expected = outcome("twin", data)
    exact = rq._exact(data)
    if exact is not None:
        assert exact == expected, data
    assert outcome("either", data) == expected, data
    return exact is not None


@pytest.mark.parametrize("field", list(rq.Request.model_fields))
def test_each_field_agrees_on_every_kind_of_value(field: str) -> None:
    taken = sum(agree({**BASE, field: v}) for v in VALUES)
    assert taken, f"no value of {field} took the fast path"


@pytest.mark.parametrize("env_check", ENV_CHECKS, ids=repr)
def test_env_check_agrees(env_check: Any) -> None:
    agree({**BASE, "env_check": env_check})


def test_whole_requests_agree() -> None:
    without = {k: v for k, v in BASE.items() if k != "work_dir"}
    cases: list[Any] = [
        BASE,
        {},
        without,
        {**without, "work_dir": None},  # null is "not given", so required and missing
        {**BASE, "surplus": 1},
        {**BASE, "test_comd": "typo", "time_limit": 5},
        {**BASE, "required_devices": True, "partition": "bad name"},  # the first error wins
        {**BASE, **dict.fromkeys(["node_count", "skip_install", "env_check"])},
        {**BASE, "time_limit": 90, "skip_install": True, "persistent_mode": False},
        [],
        "request",
        None,
    ]
    assert sum(agree(c) for c in cases) >= 3


def test_the_fast_path_takes_a_typical_request_whole() -> None:
    full = {**BASE, "required_devices": 4, "time_limit": "4:00:00", "model_name": "m-1"}
    req = rq._exact({**full, "env_check": {"gpus_per_node": 8}, "mpi_plugin": None})
    assert req is not None and req.required_devices == 4 and req.mpi_plugin is None
    assert req.env_check == rq.EnvCheck(gpus_per_node=8)
    minutes = rq._exact({**full, "time_limit": 240})
    assert minutes == dataclasses.replace(req, time_limit="240", env_check=None)


@pytest.mark.parametrize("plain", [rq.Request, rq.EnvCheck])
def test_the_twin_is_made_from_the_table(plain: Any) -> None:
    twin = dict(zip(["EnvCheck", "Request"], rq._twins(), strict=True))[plain.__name__]
    assert list(twin.model_fields) == list(plain.model_fields)
    assert twin.__doc__ == plain.__doc__
    for name, info in plain.model_fields.items():
        theirs = twin.model_fields[name]
        assert theirs.description == info.description, name
        assert theirs.is_required() == info.is_required(), name
        if not info.is_required():
            assert theirs.default == info.default, name


def test_model_copy_sets_values_on_a_copy() -> None:
    req = rq.Request.model_validate(BASE)
    other = req.model_copy(update={"test_cmd": "pytest b.py", "time_limit": "10"})
    assert (other.test_cmd, other.time_limit) == ("pytest b.py", "10")
    assert req.test_cmd == BASE["test_cmd"] and req.time_limit == "02:00:00"
    assert other.workflow() == "pytest" and other.is_slurm and not other.is_remote


def test_a_build_of_the_example_imports_no_pydantic() -> None:
    code = (
        "import sys\n"
        "from trtllm_script_builder.cli import main\n"
        "try:\n"
        f"    main(['build', {str(ROOT / 'examples/requests/pytest_local_slurm.yaml')!r},"
        " '--dry-run'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "assert not [m for m in sys.modules if m.startswith('pydantic')], 'pydantic imported'\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, stdin=subprocess.DEVNULL
    )
