"""The stand-ins' refusals that need no cluster: an offline node refuses a Hugging Face id, too
few visible GPUs fail, and the fixture repo's conftest skips on too few GPUs with TensorRT-LLM's
message. They run the stand-ins as the jobs do, under /usr/bin/python3."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_e2e_build import STANDINS, make_repo

SYSTEM_PYTHON = Path("/usr/bin/python3")
pytestmark = pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="no /usr/bin/python3")


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "CUDA_", "SLURM_"))}
    return subprocess.run(
        args, capture_output=True, text=True, env={**clean, **env}, cwd=cwd, timeout=60
    )


def test_eval_refuses_a_hugging_face_id_offline(tmp_path: Path) -> None:
    res = run([str(STANDINS / "trtllm-eval"), "--model", "org/Not-Local", "gsm8k"], {}, tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert (
        "LocalEntryNotFoundError" in res.stderr
        and "outgoing traffic has been disabled" in res.stderr
    )


def test_bench_refuses_a_hugging_face_id_offline(tmp_path: Path) -> None:
    args = [str(STANDINS / "trtllm-bench"), "--model", "org/Not-Local", "prepare-dataset"]
    res = run(args, {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert res.returncode == 1 and "LocalEntryNotFoundError" in res.stderr, res.stderr


@pytest.mark.parametrize("gpus", ["", "0"])
def test_eval_fails_with_fewer_gpus_than_tp(tmp_path: Path, gpus: str) -> None:
    args = [str(STANDINS / "trtllm-eval"), "--model", str(tmp_path), "--tp_size", "2", "mmlu"]
    res = run(args, {"CUDA_VISIBLE_DEVICES": gpus}, tmp_path)  # one node: it spawns tp workers
    assert res.returncode == 1, res.stdout + res.stderr
    assert "invalid device ordinal" in res.stderr


def test_fixture_conftest_skips_on_too_few_visible_gpus(tmp_path: Path) -> None:
    defs = make_repo(tmp_path / "repo") / "tests" / "integration" / "defs"
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-rs",
        f"--output-dir={tmp_path}",  # as the job passes it (decision pytest-as-ci)
        "accuracy/test_tiny.py::TestTiny",
    ]
    res = run(args, {"CUDA_VISIBLE_DEVICES": "0,1"}, defs)
    assert res.returncode == 0, res.stdout
    assert "1 passed, 1 skipped" in res.stdout
    assert "Device count 2 is less than 8" in res.stdout
