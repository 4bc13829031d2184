"""Golden files: the exact bytes of every category x scenario, reviewed by eye once.

The build runs in a temporary tree whose root is written as /ROOT in the golden copies.
Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/test_golden.py`
and read the diff before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from trtllm_script_builder.resolve.compile import checkout_job_name
from trtllm_script_builder.resolve.job import docker_container_name as container_name

from .conftest import Env

GOLDEN = Path(__file__).resolve().parent / "golden"
PYTEST = "pytest accuracy/test_tiny.py::TestTiny::test_four[tp4] -v"
EVAL = "trtllm-eval --model org/Tiny-Model --tp_size 2 gsm8k"
BENCH = "trtllm-bench --model org/Tiny-Model prepare-dataset --output /tmp/d.json token-norm-dist --num-requests 4 && trtllm-bench --model org/Tiny-Model throughput --dataset /tmp/d.json --tp 2"
PERF = "pytest perf/test_perf_sanity.py::test_e2e[aggr-tiny_cfg-tiny_tp2pp3] TIMEOUT (60)"

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "cat1_pytest_local_docker": ("local_docker", {"test_cmd": PYTEST}),
    "cat1_eval_local_docker": ("local_docker", {"eval_cmd": EVAL}),
    "cat1_bench_local_docker": ("local_docker", {"bench_cmd": BENCH, "skip_install": True}),
    "cat1_custom_local_docker": (
        "local_docker",
        {"custom_cmd": "python3 run.py --flag", "custom_env": "A='x y' B=1"},
    ),
    "cat2_pytest_local_slurm": ("local_slurm", {"test_cmd": PYTEST}),
    "cat2_pytest_remote_slurm": ("remote_slurm", {"test_cmd": PYTEST}),
    # A chain (decisions compile-chain and image-import-cache): image import, compile, then the test
    # job installing the wheel.
    "cat2_pytest_compile_local_slurm": (
        "local_slurm",
        {
            "test_cmd": PYTEST,
            "compile": True,
            "device_type": "H100",
            "use_ccache": True,
            "sqsh_cache_dir": "/lustre/sqsh",
        },
    ),
    "cat3_custom_compile_remote_slurm": (
        "remote_slurm",
        {"custom_cmd": "nvidia-smi", "compile": True, "cuda_arch": "90-real;100-real"},
    ),
    "cat3_custom_local_slurm": (
        "local_slurm",
        {"custom_cmd": "python3 run.py --flag", "custom_env": "A='x y' B=1", "required_devices": 2},
    ),
    "cat3_custom_remote_slurm": (
        "remote_slurm",
        {"custom_cmd": "nvidia-smi", "skip_install": True},
    ),
    "cat4_perf_local_slurm": ("local_slurm", {"test_cmd": PERF, "partition": "gb"}),
    "cat4_perf_remote_slurm": ("remote_slurm", {"test_cmd": PERF, "partition": "gb"}),
    # Across nodes: one MPI rank per GPU under the launcher, the command as words
    # (decision launcher-words).
    "cat5_eval_two_nodes_local_slurm": (
        "local_slurm",
        {"eval_cmd": "trtllm-eval --model org/Tiny-Model --tp_size 8 --pp_size 2 gsm8k"},
    ),
    "cat6_bench_two_nodes_local_slurm": (
        "local_slurm",
        {"bench_cmd": BENCH.replace("--tp 2", "--tp 16")},
    ),
    # A test wider than a node, as CI's multi-node stages run it: one rank per GPU, pytest on
    # rank 0 under the launcher (decision multi-node-pytest); the second on nodes of 4 GPUs, as
    # CI's GB200 stages, with the warning that skip_less_device counts one node's GPUs.
    "cat2_pytest_two_nodes_local_slurm": (
        "local_slurm",
        {"test_cmd": "pytest accuracy/test_tiny.py::TestBig::test_too_big -v"},
    ),
    "cat2_pytest_two_nodes_remote_slurm": (
        "remote_slurm",
        {
            "test_cmd": "pytest accuracy/test_tiny.py::TestBig::test_class_marked -v",
            "partition": "gb",
        },
    ),
    "cat5_eval_local_slurm": ("local_slurm", {"eval_cmd": EVAL}),
    "cat5_eval_remote_slurm": (
        "remote_slurm",
        {"eval_cmd": "trtllm-eval --model /lustre/ckpt/tiny/model mmlu"},
    ),
    "cat6_bench_local_slurm": ("local_slurm", {"bench_cmd": BENCH}),
    "cat6_bench_remote_slurm": (
        "remote_slurm",
        {
            "bench_cmd": "trtllm-bench -m org/Tiny-Model throughput --dataset /data/d.json",
            "partition": "nogres",
            "gpus_per_node": 4,
        },
    ),
}


def _normalise(text: str, env: Env) -> str:
    # The Docker container name carries a hash of the job folder: shown as /ROOT's.
    shown = str(env.work).replace(str(env.root), "/ROOT")
    text = text.replace(_folder_tag(str(env.work)), _folder_tag(shown))
    # A compile's job name carries a hash of its checkout: shown as /ROOT's.
    repo = str(env.repo).replace(str(env.root), "/ROOT")
    text = text.replace(checkout_job_name(str(env.repo)), checkout_job_name(repo))
    return text.replace(str(env.root), "/ROOT")


def _folder_tag(work_dir: str) -> str:
    return container_name("", work_dir)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str, env: Env, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMIT_STAND_IN_TIMESTAMP", "20260101_000000")
    scenario, fields = CASES[case]
    r = cli([], env.request(scenario, **fields))
    assert r.code == 0, r.stderr
    produced = {
        p.name: _normalise(p.read_text(), env) for p in sorted(env.work.iterdir()) if p.is_file()
    }
    folder = GOLDEN / case
    if os.environ.get("UPDATE_GOLDEN"):
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, text in produced.items():
            (folder / name).write_text(text)
    expected = {p.name: p.read_text() for p in sorted(folder.iterdir())} if folder.exists() else {}
    assert sorted(produced) == sorted(expected), f"files differ for {case}"
    for name, text in produced.items():
        assert text == expected[name], f"{case}/{name} differs from its golden copy"
