"""Live: eval and bench wider than one node run as one multi-node job, one MPI rank per GPU
under trtllm-llmapi-launch with the command as words (decision launcher-words), on the two GPU
nodes of the test cluster, with real Slurm, PMIx and OpenMPI.

The launchers, their MPI leader and workers, trtllm-eval and trtllm-bench are the stand-ins in
tests/slurm/standins (their docstrings name the upstream files). The stand-in leader holds the
job until something stops it, as the real one does, and neither the installed launcher nor the
programs' LLM shutdown do: a command, passing or failing, ends its job promptly only because the
script's wrapper (or CI's copy of the launcher) stops the leader (decision launcher-stop).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_e2e_build import (  # noqa: F401 (site is a fixture)
    STANDINS,
    Site,
    assert_passed,
    build,
    dumps,
    log_results,
    site,
    submit,
)

pytestmark = pytest.mark.slurm

CI_LAUNCHER = Path("jenkins") / "scripts" / "trtllm-llmapi-launch"


@pytest.fixture
def wide(site: Site) -> Site:  # noqa: F811
    """The site with /usr/bin/python3 (mpi4py, OpenMPI) first for `python3 -m` and the stand-in
    leader and worker modules on PYTHONPATH; skipped on a cluster of fewer than two GPU nodes."""
    nodes = subprocess.run(
        ["sinfo", "-h", "-N", "-p", "gpu", "-o", "%N"], capture_output=True, text=True
    ).stdout.split()
    if len(set(nodes)) < 2:
        pytest.skip(f"the test cluster has {len(set(nodes))} GPU node(s); these tests need two")
    env = dict(site.env)
    env["PATH"] = os.pathsep.join([str(STANDINS), "/usr/bin", env["PATH"]])
    env["PYTHONPATH"] = str(STANDINS / "py")
    return dataclasses.replace(site, env=env)


@pytest.fixture(params=["installed", "ci"])
def launcher(request: pytest.FixtureRequest, wide: Site) -> object:
    """Which launcher the script finds: the installed one, or CI's copy in the checkout."""
    copy = wide.repo / CI_LAUNCHER
    if request.param == "ci":
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(STANDINS / "ci" / "trtllm-llmapi-launch", copy)
    yield request.param
    copy.unlink(missing_ok=True)


EVAL = "trtllm-eval --model org/Tiny-Model --tp_size 2 --pp_size 2 --gpus_per_node 2 gsm8k"


def test_two_node_eval_computes_its_score(wide: Site, launcher: str) -> None:
    """The stand-in eval leaves the leader running at its end, as TensorRT-LLM's LLM does since
    its shutdown stopped doing it: the job ends only because something else stops the leader
    (decision launcher-stop)."""
    spec = build(wide, f"eval_2n_{launcher}", eval_cmd=EVAL)
    params = spec["slurm_params"]
    assert (spec["category"], spec["node_count"], params["ntasks"]) == (5, 2, 4)
    assert (params["ntasks_per_node"], params["gres"]) == (2, "gpu:2")
    started = time.monotonic()
    job = submit(wide, spec)
    took = time.monotonic() - started
    assert_passed(job, spec)
    assert took < 60, f"the job took {took:.0f}s"
    assert log_results(job, spec) == {"gsm8k": {"accuracy": 75.0}}
    assert "trtllm-eval (stand-in): MPI world of 4 ranks on 2 node(s)" in job.log, job.log
    name = {"installed": "installed", "ci": "CI's copy"}[launcher]
    words = "trtllm-eval --model /models/org/Tiny-Model --tp_size 2 --pp_size 2"
    for rank in range(4):  # the installed one behind the script's wrapper that stops the leader
        runs = f"(stand-in, {name}): rank {rank} of 4 runs: "
        (line,) = [ln for ln in job.err.splitlines() if runs in ln]
        assert words in line and line.split(runs)[1].startswith(
            "bash /tmp/" if launcher == "installed" else words
        ), line
    # the command reached the program whole, as words, on rank 0 only
    (seen,) = dumps(Path(spec["work_dir"]), "trtllm-eval")
    assert seen["argv"] == [
        "--model",
        "/models/org/Tiny-Model",
        "--tp_size",
        "2",
        "--pp_size",
        "2",
        "--gpus_per_node",
        "2",
        "gsm8k",
    ]
    assert seen["env"]["TRTLLM_LLMAPI_LAUNCH_STANDIN"] == launcher


def test_two_node_bench_prepares_then_runs(wide: Site) -> None:
    dataset = wide.home / "tiny_dataset_2n.json"  # the home folder is mounted
    spec = build(
        wide,
        "bench_2n",
        bench_cmd=(
            f"trtllm-bench --model org/Tiny-Model prepare-dataset --output {dataset} "
            "token-norm-dist --num-requests 4 --input-mean 16 --input-stdev 0 "
            "--output-mean 8 --output-stdev 0 && "
            f"trtllm-bench --model org/Tiny-Model throughput --dataset {dataset} --tp 16"
        ),
    )
    assert (spec["node_count"], spec["slurm_params"]["ntasks"]) == (2, 16)
    job = submit(wide, spec)
    assert_passed(job, spec)
    assert log_results(job, spec)["bench"]["total_output_throughput_tokens_per_sec"] == 1600.0
    assert "trtllm-bench (stand-in): MPI world of 16 ranks on 2 node(s)" in job.log, job.log
    assert len(dataset.read_text().splitlines()) == 4


def test_a_failing_two_node_eval_ends_its_job_within_a_minute(wide: Site, launcher: str) -> None:
    """The installed launcher's leader would wait for a stop the failing command never sends;
    the script's wrapper (or CI's copy) sends it, and the job ends with the command's status."""
    failing = EVAL + " --check_accuracy --accuracy_threshold 99"
    spec = build(wide, f"eval_2n_fail_{launcher}", eval_cmd=failing)
    started = time.monotonic()
    job = submit(wide, spec)
    took = time.monotonic() - started
    assert (job.state, job.exit_code) == ("FAILED", "1:0"), job.log + job.err
    assert "AssertionError: Expected accuracy >= 99.0" in job.log
    assert f"Job {job.job_id} finished with exit code 1" in job.log
    assert took < 60, f"the failing job took {took:.0f}s"


@pytest.mark.parametrize("outcome", ["passes", "fails"])
def test_an_llm_that_stops_the_leader_itself_ends_its_job_too(wide: Site, outcome: str) -> None:
    """Older TensorRT-LLM stopped the leader from the LLM's shutdown: the script's own stop then
    finds no leader, and the real one would wait for ever; the job still ends at once with the
    command's status."""
    env = {**wide.env, "STANDIN_LLM_STOPS_LEADER": "1"}
    older = dataclasses.replace(wide, env=env)
    failing = " --check_accuracy --accuracy_threshold 99" if outcome == "fails" else ""
    spec = build(older, f"eval_2n_old_llm_{outcome}", eval_cmd=EVAL + failing)
    started = time.monotonic()
    job = submit(older, spec)
    took = time.monotonic() - started
    expected = ("COMPLETED", "0:0") if outcome == "passes" else ("FAILED", "1:0")
    assert (job.state, job.exit_code) == expected, job.log + job.err
    assert took < 60, f"the job took {took:.0f}s"


def test_a_failing_eval_ends_with_its_status_while_workers_are_still_ending(
    wide: Site, launcher: str
) -> None:
    """Rank 0 ends last after a failure: a worker still tearing down (here 3 s after MPI_Finalize,
    as a real one unloads torch and CUDA) would be ended by --kill-on-bad-exit, and the job's
    status would be its signal's (143), not the command's."""
    slow = dataclasses.replace(wide, env={**wide.env, "STANDIN_WORKER_EXIT_DELAY": "3"})
    failing = EVAL + " --check_accuracy --accuracy_threshold 99"
    spec = build(slow, f"eval_2n_slow_workers_{launcher}", eval_cmd=failing)
    started = time.monotonic()
    job = submit(slow, spec)
    took = time.monotonic() - started
    assert (job.state, job.exit_code) == ("FAILED", "1:0"), job.log + job.err
    assert f"Job {job.job_id} finished with exit code 1" in job.log
    assert took < 60, f"the failing job took {took:.0f}s"


# A test TensorRT-LLM's multi-node stages could run: it needs a world of 16 ranks, more than
# one node of the test cluster has GPUs
# (skip_less_mpi_world_size counts the launcher's tllm_mpi_size, decision multi-node-pytest) and
# checks the world its LLM would use, through the launcher's MPI leader as the LLM's proxy
# reaches it; it records what it saw in --output-dir.
MULTI_NODE_TESTS = """\
import json
import os

import pytest

from tensorrt_llm.llmapi._mgmn import ask


@pytest.mark.skip_less_mpi_world_size(16)
def test_world(output_dir):
    world = json.loads(ask("world") or "[]")
    seen = {
        "world": world,
        "tllm_mpi_size": os.environ.get("tllm_mpi_size"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "mpi_env": sorted(v for v in os.environ if v.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_"))),
        "cwd": os.getcwd(),
    }
    with open(os.path.join(output_dir, f"world.{os.getpid()}.json"), "w") as f:
        json.dump(seen, f)
    assert len(world) == 16, world
    assert len({r["host"] for r in world}) == 2, world
    assert all(r["local_rank"] < len(r["gpus"]) for r in world), world


@pytest.mark.skip_less_mpi_world_size(16)
def test_fails():
    assert False, "this multi-node test fails on purpose"
"""


@pytest.fixture
def multi_node_tests(wide: Site) -> Path:
    folder = wide.repo / "tests" / "integration" / "defs" / "multinode"
    folder.mkdir(exist_ok=True)
    (folder / "test_world.py").write_text(MULTI_NODE_TESTS)
    return folder


def test_two_node_pytest_runs_on_rank_0_of_the_world(
    wide: Site, launcher: str, multi_node_tests: Path
) -> None:
    """pytest is real; it runs once, on rank 0 under the launcher, and its test sees a world of
    16 ranks over both nodes, each with a GPU of its node (decision multi-node-pytest)."""
    spec = build(
        wide, f"pytest_2n_{launcher}", test_cmd="pytest multinode/test_world.py::test_world -v"
    )
    params = spec["slurm_params"]
    assert (spec["category"], spec["node_count"], spec["required_devices"]) == (2, 2, 16)
    assert (params["ntasks"], params["ntasks_per_node"], params["gres"]) == (16, 8, "gpu:8")
    job = submit(wide, spec)
    assert_passed(job, spec)
    assert job.log.count("1 passed") == 1, job.log  # one pytest session, not one per rank
    work = Path(spec["work_dir"])
    (seen_file,) = work.glob("world.*.json")  # --output-dir is the job's folder
    seen = json.loads(seen_file.read_text())
    assert [r["rank"] for r in seen["world"]] == list(range(16))
    assert sorted({r["host"] for r in seen["world"]}) == ["gpunode1", "gpunode2"]
    assert seen["tllm_mpi_size"] == "16" and seen["mpi_env"] == []
    assert len(seen["cuda_visible_devices"].split(",")) == 8  # its node's GPUs
    assert seen["cwd"].endswith("tests/integration/defs")
    junit = work / spec["junit_file_pattern"].replace("%j", job.job_id)
    assert 'tests="1"' in junit.read_text() and 'failures="0"' in junit.read_text()
    name = {"installed": "installed", "ci": "CI's copy"}[launcher]
    runs = [ln for ln in job.err.splitlines() if f"(stand-in, {name}): rank " in ln]
    assert len(runs) == 16 and all(
        "pytest multinode/test_world.py::test_world" in ln for ln in runs
    )


def test_a_failing_two_node_pytest_ends_its_job_within_a_minute(
    wide: Site, launcher: str, multi_node_tests: Path
) -> None:
    """The failing test ends pytest with status 1; the leader is stopped, rank 0 exits 1 and
    --kill-on-bad-exit ends the workers: the job ends with 1 instead of at its time limit."""
    spec = build(
        wide, f"pytest_2n_fail_{launcher}", test_cmd="pytest multinode/test_world.py::test_fails -v"
    )
    started = time.monotonic()
    job = submit(wide, spec)
    took = time.monotonic() - started
    assert (job.state, job.exit_code) == ("FAILED", "1:0"), job.log + job.err
    assert "this multi-node test fails on purpose" in job.log
    assert f"Job {job.job_id} finished with exit code 1" in job.log
    junit = Path(spec["work_dir"]) / spec["junit_file_pattern"].replace("%j", job.job_id)
    assert 'failures="1"' in junit.read_text()
    assert took < 60, f"the failing job took {took:.0f}s"
