"""A misspelt workflow (a typo, a tool's name, a category number) names the nearest one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from trtllm_script_builder.cli import main
from trtllm_script_builder.model.request import nearest_workflow

from .conftest import Env


@pytest.mark.parametrize(
    ("given", "near"),
    [
        ("pytst", "pytest"),
        ("PyTest", "pytest"),
        ("bnech", "bench"),
        ("evl", "eval"),
        ("costum", "custom"),
        ("perf-sanity", "perf_sanity"),
        ("trtllm-eval", "eval"),
        ("trtllm_bench", "bench"),
        (2, "pytest"),
        ("category 5", "eval"),
        (4, "perf_sanity"),
        ("xyz", None),
        (1, None),  # category 1 is a scenario (local Docker), not a workflow
    ],
)
def test_nearest_workflow(given: object, near: str | None) -> None:
    assert nearest_workflow(given) == near


def _request(env: Env, tmp_path: Path, workflow: object) -> Path:
    f = tmp_path / "req.json"
    req = env.request(test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one")
    req["workflow_type"] = workflow
    f.write_text(json.dumps(req))
    return f


@pytest.mark.parametrize("command", ["build", "run"])
def test_a_request_file_gets_the_nearest_workflow(env: Env, tmp_path: Path, command: str) -> None:
    r = CliRunner().invoke(main, [command, str(_request(env, tmp_path, "pytst"))])
    assert r.exit_code == 2
    assert r.stderr.splitlines()[-1].endswith("(got 'pytst'); did you mean pytest?")
    r = CliRunner().invoke(main, [command, str(_request(env, tmp_path, 6))])
    assert r.stderr.splitlines()[-1].endswith(
        "(got 6); did you mean bench? (category 6 is bench's script)"
    )
    r = CliRunner().invoke(main, [command, str(_request(env, tmp_path, "zzz"))])
    assert r.exit_code == 2 and "did you mean" not in r.stderr
    assert not env.work.exists()


def test_a_flag_gets_the_nearest_workflow(env: Env, tmp_path: Path) -> None:
    f = _request(env, tmp_path, "pytest")
    r = CliRunner().invoke(main, ["build", str(f), "--workflow-type", "evl"])
    assert r.exit_code == 2
    assert "'evl' is not one of" in r.stderr
    assert r.stderr.rstrip().endswith("; did you mean eval? see main build --help")


def test_a_request_list_item_gets_the_nearest_workflow(env: Env, tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({**env.request(), "work_dir": str(env.work)}))
    lst = tmp_path / "reqs.yaml"
    lst.write_text(yaml.safe_dump([{"workflow_type": "custm", "custom_cmd": "true"}]))
    r = CliRunner().invoke(main, ["build-many", str(lst), "--base", str(base)])
    assert r.exit_code == 2
    assert f"{lst}:1: error: workflow_type: " in r.stderr
    assert "(got 'custm'); did you mean custom?" in r.stderr
