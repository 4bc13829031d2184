"""submit joins job_spec's relative log patterns with the job's folder
(decision relative-log-patterns)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.conftest import shell_here
from trtllm_script_builder.process import submit as submit_mod
from trtllm_script_builder.process.proc import CmdResult
from trtllm_script_builder.process.submission import log_path

from .conftest import Env

PYTEST_4 = "pytest accuracy/test_tiny.py::TestTiny::test_four[tp4] -v"


def test_log_path_joins_a_relative_pattern_and_keeps_an_absolute_one() -> None:
    assert log_path("a_%j.out", "7", "/w") == "/w/a_7.out"
    assert log_path("/old/a_%j.out", "7", "/w") == "/old/a_7.out"  # job_specs written before
    assert log_path(None, "7", "/w") is None


def test_local_submit_records_the_absolute_logs(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli([], env.request(test_cmd=PYTEST_4)).code == 0
    spec = json.loads((env.work / "job_spec.json").read_text())
    assert spec["log_file_pattern"] == "tiny_auto_test_%j.out"

    def sbatch(argv: Sequence[str], cwd: Path | None = None, **_: object) -> CmdResult:
        assert argv[0] == "sbatch"
        return CmdResult(0, "4242\n")

    monkeypatch.setattr("trtllm_script_builder.process.host.run", sbatch)
    sub = submit_mod.submit(env.work)
    assert sub.log_file == f"{env.work}/tiny_auto_test_4242.out"
    assert sub.err_file == f"{env.work}/tiny_auto_test_4242.err"


class _FakeSsh:
    remote = True
    name = "login"
    shell = staticmethod(shell_here)

    def __init__(self, target: object) -> None:
        pass

    def check(self) -> CmdResult:
        return CmdResult(0)

    def copy(self, files: Sequence[Path], remote_dir: str) -> CmdResult:
        return CmdResult(0)

    def __call__(self, argv: Sequence[str], cwd: Path | None = None) -> CmdResult:
        return CmdResult(0, "99\n") if argv[0] == "sbatch" else CmdResult(0)


def test_remote_submit_joins_with_the_remote_work_dir(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli([], env.request("remote_slurm", test_cmd=PYTEST_4)).code == 0
    monkeypatch.setattr("trtllm_script_builder.process.host.OverSsh", _FakeSsh)
    sub = submit_mod.submit(env.work)
    remote = "/lustre/rtester/TensorRT-LLM/work_dirs/work"
    assert sub.log_file == f"{remote}/tiny_auto_test_99.out"
    assert sub.err_file == f"{remote}/tiny_auto_test_99.err"
