"""End to end on the live test cluster (cluster.sh up), as a user would work:

probe -> build (Categories 2 pytest, 3 custom, 5 eval, 6 bench) against a tiny
TensorRT-LLM-shaped repo -> check WORK_DIR -> plain `sbatch --parsable <script>` -> wait ->
assert on the job's own log (at job_spec's log_file_pattern), its accounting state, the
environment the command under test saw (dumped into work_dir) and what the fake pyxis plugin
received. trtllm-eval, trtllm-bench, trtllm-llmapi-launch, pip and nvidia-smi are the
stand-ins in tests/slurm/standins/, first on PATH of the submitting environment (sbatch
exports it to the job); pytest is real. The trtllm stand-ins start MPI as the real tools do,
with real OpenMPI + mpi4py: a one-rank run spawns its worker with MPI_Comm_spawn (fails under
srun --mpi=pmix or with the PMI/SLURM environment left), a run of N ranks needs a real MPI world
of N; they also check the GPUs Slurm exposed against tp x pp and refuse a Hugging Face id.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm

STANDINS = Path(__file__).resolve().parent / "standins"
SUBMIT_STAND_IN = Path(__file__).resolve().parents[1] / "fixtures" / "submit_stand_in.py"
sys.path.insert(0, str(STANDINS))
from _standin import WASTED_GPUS  # noqa: E402  (the stand-ins' warning for unused GPUs)

TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "OUT_OF_MEMORY",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
}
KEPT = {"SLURM_PROCID", "SLURM_LOCALID"}  # the only MPI/SLURM variables pytest may see
MPI_PREFIXES = ("PMI", "MPI", "OMPI", "SLURM")

# ---------------------------------------------------------------- the fixture repo

PROPERTIES = """\
LLM_DOCKER_IMAGE_12_9=nvcr.io/test/trtllm:cuda129-x86_64
LLM_DOCKER_IMAGE=nvcr.io/test/trtllm:x86_64-1
LLM_SBSA_DOCKER_IMAGE=nvcr.io/test/trtllm:aarch64-1
"""
IMAGES = {"x86_64": "nvcr.io/test/trtllm:x86_64-1", "aarch64": "nvcr.io/test/trtllm:aarch64-1"}

PYTEST_INI = """\
[pytest]
markers =
    skip_less_device(n): skip when fewer than n GPUs are visible
    skip_less_mpi_world_size(n): skip when the MPI world is smaller than n
"""

# Stand-in for TensorRT-LLM's tests/integration/defs/conftest.py: its autouse fixture
# skip_by_device_count skips a test whose skip_less_device(n) asks for more GPUs than the node
# shows (get_device_count: `nvidia-smi -L`), with the same message. Here the count is what
# Slurm exposed to the step (CUDA_VISIBLE_DEVICES, from the job's --gres=gpu:N), which is
# also what the nvidia-smi stand-in lists. skip_less_mpi_world_size as the real one (at
# 81e729a4e64d8c7659bf8fb9f54016db6dc05c2e): the world trtllm-llmapi-launch set up
# (tllm_mpi_size), or the GPUs of the node in a world of one. --output-dir and
# the session fixture output_dir as the real tests/integration/defs/conftest.py defines them.
DEFS_CONFTEST = """\
import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--output-dir", default=None, help="where the tests write their output")


@pytest.fixture(scope="session")
def output_dir(request):
    output = request.config.getoption("--output-dir")
    if output:
        os.makedirs(str(output), exist_ok=True)
    return output


def get_device_count():
    return len([d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()])


@pytest.fixture(autouse=True)
def skip_by_device_count(request):
    "fixture for skip less device count"
    if request.node.get_closest_marker("skip_less_device"):
        device_count = get_device_count()
        expected_count = request.node.get_closest_marker("skip_less_device").args[0]
        if expected_count > int(device_count):
            pytest.skip(f"Device count {device_count} is less than {expected_count}")


def get_mpi_world_size():
    "tensorrt_llm.llmapi.mpi_session.get_mpi_world_size: the launcher's world, else MPI's"
    if os.environ.get("TLLM_SPAWN_PROXY_PROCESS"):
        return int(os.environ.get("tllm_mpi_size") or 1)
    return int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))


@pytest.fixture(autouse=True)
def skip_by_mpi_world_size(request):
    "fixture for skip less mpi world size"
    if request.node.get_closest_marker("skip_less_mpi_world_size"):
        world = get_mpi_world_size()
        total = get_device_count() if world == 1 else world
        expected = request.node.get_closest_marker("skip_less_mpi_world_size").args[0]
        if expected > total:
            pytest.skip(f"Total world size {total} is less than {expected}")
"""

TEST_TINY = """\
import json
import os

import pytest


def dump_env(name):
    folder = os.environ.get("STANDIN_ENV_DUMP_DIR")
    if folder:
        with open(os.path.join(folder, f"pytest-{name}.json"), "w") as f:
            json.dump({"tool": "pytest", "cwd": os.getcwd(), "env": dict(os.environ)}, f)


class TestTiny:
    @pytest.mark.skip_less_device(2)
    def test_two_gpus(self, output_dir):
        dump_env("test_two_gpus")
        with open(os.path.join(output_dir, "test_two_gpus.out"), "w") as f:
            f.write("written under --output-dir")

    @pytest.mark.skip_less_device(8)
    @pytest.mark.parametrize("tp_size", [8], ids=["tp8"])
    def test_eight_gpus(self, tp_size):
        dump_env(f"test_eight_gpus_tp{tp_size}")


class TestBroken:
    def test_asserts_false(self):
        assert False, "this test fails on purpose"
"""

# The custom command: one line per rank, and its environment into STANDIN_ENV_DUMP_DIR.
REPORT_ENV = """\
import json
import os

rank = os.environ.get("SLURM_PROCID", "0")
gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
print(f"rank {rank} sees GPUs {gpus}; GREETING={os.environ.get('GREETING')}")
folder = os.environ.get("STANDIN_ENV_DUMP_DIR")
if folder:
    with open(os.path.join(folder, f"custom.rank{rank}.json"), "w") as f:
        json.dump({"tool": "custom", "cwd": os.getcwd(), "env": dict(os.environ)}, f)
"""


# Category 4: a perf-sanity config sized for the test cluster's gpu:8 node (one server of tp 2).
PERF_CFG = """\
metadata: {model_name: tiny}
hardware: {gpus_per_node: 8}
server_configs:
  - name: tiny_tp2
    model_name: tiny
    tensor_parallel_size: 2
"""

# Stand-in for TensorRT-LLM's jenkins/scripts/perf/local/slurm_run.sh, which the launch script
# submit.py writes runs on every task (srun ... "$runScript"): there it installs TensorRT-LLM,
# cds into tests/integration/defs and evals $pytestCommand (test_perf_sanity.py, which prints
# "test completed successfully" when the case passed), then prints "Rank<N> Pytest finished
# execution with exit code <rc>". Here: the same folder and closing line, the success line on
# rank 0, and each task's environment dumped as slurm_run.rank<N>.json (STANDIN_ENV_DUMP_DIR).
# Rank 0 also leaves what a passing case of test_perf_sanity.py leaves for `watch` to read:
# pytest's JUnit report at the --junitxml path and, in the case's folder under --output-dir,
# the benchmark client's log with its closing block of figures (made-up numbers).
SLURM_RUN_SH = """\
#!/bin/bash
# STAND-IN for TensorRT-LLM's jenkins/scripts/perf/local/slurm_run.sh (runs the perf test).
set -euo pipefail
cd "$llmSrcNode/tests/integration/defs"
rank=${SLURM_PROCID:-0}
echo "slurm_run.sh (stand-in): rank $rank of $SLURM_NTASKS sees GPUs ${CUDA_VISIBLE_DEVICES:-}"
echo "slurm_run.sh (stand-in): pytestCommand=$pytestCommand"
if [[ -n "${STANDIN_ENV_DUMP_DIR:-}" ]]; then
  /usr/bin/python3 -c 'import json, os, sys
json.dump({"tool": "slurm_run", "cwd": os.getcwd(), "env": dict(os.environ)}, sys.stdout)' \
    > "$STANDIN_ENV_DUMP_DIR/slurm_run.rank$rank.json"
fi
if [[ "$rank" == 0 ]]; then
  case_id=$(head -n 1 "$jobWorkspace/test_list.txt")
  label=${case_id#*test_e2e[}
  label=${label%]*}
  mkdir -p "$jobWorkspace/$label"
  printf '%s\n' "Request throughput (req/s):  1.55" "Output token throughput (tok/s):  1590.41" \
    "Mean E2EL (ms):  41250.00" > "$jobWorkspace/$label/trtllm-benchmark.0.0.log"
  printf '%s\n' '<?xml version="1.0" encoding="utf-8"?>' \
    "<testsuites><testsuite name='pytest' tests='1'><testcase classname='perf.test_perf_sanity' name='test_e2e[$label]' time='1.0'/></testsuite></testsuites>" \
    > "$jobWorkspace/report.xml"
  echo "test completed successfully"
fi
echo "Rank$rank Pytest finished execution with exit code 0"
"""


def make_repo(repo: Path) -> Path:
    (repo / "jenkins").mkdir(parents=True)
    (repo / "jenkins" / "current_image_tags.properties").write_text(PROPERTIES)
    defs = repo / "tests" / "integration" / "defs"
    (defs / "accuracy").mkdir(parents=True)
    (defs / "pytest.ini").write_text(PYTEST_INI)
    (defs / "conftest.py").write_text(DEFS_CONFTEST)
    (defs / "accuracy" / "test_tiny.py").write_text(TEST_TINY)
    (repo / "scripts").mkdir()
    (repo / "scripts" / "report_env.py").write_text(REPORT_ENV)
    (repo / "requirements-dev.txt").write_text("pytest\n")
    (repo / "models" / "org" / "Tiny-Model").mkdir(parents=True)
    (repo / "models" / "org" / "Tiny-Model" / "config.json").write_text("{}\n")
    perf = repo / "jenkins" / "scripts" / "perf" / "local"
    perf.mkdir(parents=True)
    shutil.copy(SUBMIT_STAND_IN, perf / "submit.py")
    (perf / "slurm_run.sh").write_text(SLURM_RUN_SH)
    (perf / "slurm_run.sh").chmod(0o755)
    agg = repo / "tests" / "scripts" / "perf-sanity" / "aggregated"
    agg.mkdir(parents=True)
    (agg / "tiny_cfg.yaml").write_text(PERF_CFG)
    return repo


# ---------------------------------------------------------------- the user's side


@dataclass(frozen=True)
class Site:
    root: Path
    repo: Path
    home: Path
    slurm_env_file: Path
    slurm_env: dict[str, Any]
    env: dict[str, str]  # the user's shell: HOME, PATH with the stand-ins first


def user_env(home: Path) -> dict[str, str]:
    """This process's environment, minus what would steer sbatch/the build or leak from pytest."""
    drop = ("PYTEST_", "SBATCH_", "SALLOC_", "SRUN_", "FAKE_PYXIS_", "STANDIN_")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(drop)
        and not (k.startswith("SLURM_") and k != "SLURM_CONF")
        and k not in ("CUDA_VISIBLE_DEVICES", "TRTLLM_SCRIPT_BUILDER_CONFIG")
    }
    path = [str(STANDINS), str(Path(sys.executable).parent), env.get("PATH", "")]
    env.update(HOME=str(home), PATH=os.pathsep.join(path))
    return env


def tsb(site_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trtllm_script_builder", *args],
        capture_output=True,
        text=True,
        env=site_env,
        check=False,
        timeout=60,
    )


@pytest.fixture(scope="module")
def site(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Site:
    root = tmp_path_factory.mktemp("e2e")
    home = root / "home"
    home.mkdir()
    repo = make_repo(root / "TensorRT-LLM")
    env = user_env(home)
    # The repo's submit.py (the stand-in) writes --segment as the real one does; the build
    # leaves it out for this cluster's Slurm 22.05. What it received goes beside the work dirs.
    env.update(SUBMIT_STAND_IN_RECORD=str(root / "submit_args.json"))
    out = root / "slurm_env.json"
    res = tsb(env, "probe", "--output", str(out))
    assert res.returncode == 0, res.stderr
    slurm_env = json.loads(out.read_text())
    gpu = next(p for p in slurm_env["partitions"] if p["name"] == slurm_cluster.gpu_partition)
    assert (gpu["gpus_per_node"], gpu["requires_gres"]) == (8, True)
    assert slurm_env["pmix"]["preferred"].startswith("pmix_v")
    # what submit.py and sbatch need (decision slurm-version-cluster-name)
    assert slurm_env["cluster_name"] and slurm_env["slurm_version"].startswith("22.05")
    return Site(root, repo, home, out, slurm_env, env)


def build(site: Site, name: str, **fields: Any) -> dict[str, Any]:
    """Build a request into <root>/<name>, check it against the cluster; the job_spec."""
    work = site.root / name
    request = {
        "execution_scenario": "local_slurm",
        "work_dir": str(work),
        "repo_root": str(site.repo),
        "partition": "gpu",
        "account": "tsb",
        "slurm_env_file": str(site.slurm_env_file),
        "llm_models_root": "/models",
        "models_path": str(site.repo / "models"),
        "time_limit": "00:10:00",
        **fields,
    }
    req_file = site.root / f"{name}.json"
    req_file.write_text(json.dumps(request))
    res = tsb(site.env, "build", str(req_file))
    assert res.returncode == 0, res.stderr
    spec: dict[str, Any] = json.loads((work / "job_spec.json").read_text())
    res = tsb(site.env, "check", str(work))
    assert res.returncode == 0, res.stdout + res.stderr
    return spec


@dataclass(frozen=True)
class Finished:
    job_id: str
    state: str
    exit_code: str
    log: str
    records: list[dict[str, Any]]  # what the fake pyxis plugin saw, one per task
    err: str = ""  # the job's stderr file beside the log (srun's and the tools' errors)

    def step(self, n: int) -> list[dict[str, Any]]:
        return sorted((r for r in self.records if r["step"] == n), key=lambda r: r["rank"])


def wait(job_id: str, timeout: float = 150) -> tuple[str, str]:
    """Poll squeue until the job left the queue, then sacct until it has a final state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True
        )
        if not queued.stdout.strip():
            acct = subprocess.run(
                ["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode"],
                capture_output=True,
                text=True,
            )
            lines = acct.stdout.splitlines()
            if lines and "|" in lines[0]:
                state, code = lines[0].split("|")[:2]
                state = state.split()[0] if state.strip() else ""  # "CANCELLED by 0"
                if state in TERMINAL:
                    return state, code
        time.sleep(0.25)
    subprocess.run(["scancel", job_id], check=False)
    pytest.fail(f"job {job_id} did not finish within {timeout}s")


def submit(site: Site, spec: dict[str, Any]) -> Finished:
    """Plain `sbatch --parsable <script>` from work_dir, then the log at log_file_pattern."""
    work = Path(spec["work_dir"])
    record = site.root / f"{work.name}.pyxis.jsonl"
    env = {**site.env, "FAKE_PYXIS_RECORD": str(record), "STANDIN_ENV_DUMP_DIR": str(work)}
    res = subprocess.run(
        ["sbatch", "--parsable", spec["script_path"]],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip().split(";")[0]
    state, code = wait(job_id)
    log = work / spec["log_file_pattern"].replace("%j", job_id)
    assert log.is_file(), f"no log at {log}: {sorted(p.name for p in work.iterdir())}"
    lines = record.read_text().splitlines() if record.exists() else []
    records = [r for r in map(json.loads, lines) if str(r["job"]) == job_id]
    err = log.with_suffix(".err")
    return Finished(
        job_id, state, code, log.read_text(), records, err.read_text() if err.is_file() else ""
    )


# ---------------------------------------------------------------- what to assert


def dumps(work: Path, tool: str) -> list[dict[str, Any]]:
    """Environment dumps of one tool, rank order (files <tool>.rank<N>.<pid>.json)."""
    found = [json.loads(p.read_text()) for p in sorted(work.glob(f"{tool}.rank*.json"))]
    return sorted(found, key=lambda d: int(d["env"].get("SLURM_PROCID", "0")))


def gpu_list(env: dict[str, str]) -> list[str]:
    return [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]


def mpi_vars(env: dict[str, str]) -> set[str]:
    return {k for k in env if k.startswith(MPI_PREFIXES)}


def assert_passed(job: Finished, spec: dict[str, Any]) -> None:
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.log + job.err
    assert any(p in job.log for p in spec["success_patterns"]), job.log
    assert not [p for p in spec["failure_patterns"] if p in job.log], job.log
    assert f"Job {job.job_id} finished with exit code 0" in job.log


def log_results(job: Finished, spec: dict[str, Any]) -> dict[str, Any]:
    """The `results` watch would report for this job's log (srun's rank labels and all)."""
    from types import SimpleNamespace

    from trtllm_script_builder.process.verdict import decide_verdict

    patterns = SimpleNamespace(
        success_patterns=spec["success_patterns"], failure_patterns=spec["failure_patterns"]
    )
    return decide_verdict(job.state, 0, job.log.splitlines(), patterns).results


def assert_slurm_gpus(env: dict[str, str], spec: dict[str, Any], ntasks: int) -> None:
    """What Slurm set in the step: its task count and the GPUs the job asked for (gpu:N, N the
    job's devices, not the node's)."""
    devices = spec["required_devices"]
    assert spec["slurm_params"]["gres"] == f"gpu:{devices}"
    assert devices <= spec["slurm_params"]["gpus_per_node"]
    assert env["SLURM_NTASKS"] == env["SLURM_STEP_NUM_TASKS"] == str(ntasks)
    assert env["SLURM_GPUS_ON_NODE"] == str(devices)
    # which of the node's GPUs Slurm gives depends on the jobs already there: count them
    gpus = gpu_list(env)
    assert len(set(gpus)) == devices and all(g.isdigit() and int(g) < 8 for g in gpus), gpus


def assert_container(job: Finished, spec: dict[str, Any], workdirs: list[tuple[Path, int]]) -> None:
    """Every step of the job ran with the job_spec's container values, one record per task:
    steps 0.. as listed (workdir, task count); the install and the run step share the name."""
    canonical = spec["container_image"]
    assert canonical == IMAGES[platform.machine()]
    registry, _, path = canonical.partition("/")
    for n, (workdir, ntasks) in enumerate(workdirs):
        recs = job.step(n)
        assert [r["rank"] for r in recs] == list(range(ntasks)), job.records
        for r in recs:
            assert r["image"] == f"{registry}#{path}"
            assert r["mounts"] == spec["container_mounts"]
            # the job id keeps pyxis from reusing another job's container (container-names)
            assert r["name"] == f"{spec['container_name']}_{job.job_id}"
            assert r["workdir"] == r["cwd"] == str(workdir)
    assert len(job.records) == sum(n for _, n in workdirs)
    assert job.step(0)[0]["name"] == job.step(len(workdirs) - 1)[0]["name"]


def assert_installed(job: Finished, site: Site) -> None:
    retries = "--retries 10 --timeout 60"  # decision install-step
    assert f"pip (stand-in): would run 'pip install {retries} -e .' in {site.repo}" in job.log
    assert f"pip (stand-in): would run 'pip install {retries} -r requirements-dev.txt'" in job.log
    assert "install done" in job.log


# ---------------------------------------------------------------- Category 2: pytest


def test_pytest_job_runs_the_tests_on_all_gpus_with_mpi_cleared(site: Site) -> None:
    spec = build(site, "pytest_pass", test_cmd="pytest accuracy/test_tiny.py::TestTiny -v")
    assert (spec["category"], spec["required_devices"], spec["container_name"]) == (
        2,
        8,  # the largest skip_less_device of the selected class
        "tiny_auto_test",
    )
    assert spec["slurm_params"]["ntasks"] == 1
    job = submit(site, spec)
    assert_passed(job, spec)
    assert "2 passed" in job.log and "PASSED" in job.log
    assert job.log.count("Fake GPU (stand-in)") == 8  # nvidia-smi's table
    assert_installed(job, site)
    defs = site.repo / "tests" / "integration" / "defs"
    assert_container(job, spec, [(site.repo, 1), (defs, 1)])

    work = Path(spec["work_dir"])
    (smi,) = dumps(work, "nvidia-smi")  # the run step as Slurm set it, before the clean-up
    assert_slurm_gpus(smi["env"], spec, ntasks=1)
    assert "PMIX_RANK" not in smi["env"]  # pytest runs without --mpi
    for name in ("test_two_gpus", "test_eight_gpus_tp8"):
        seen = json.loads((work / f"pytest-{name}.json").read_text())
        assert seen["cwd"] == str(defs)
        assert mpi_vars(seen["env"]) == KEPT, mpi_vars(seen["env"]) - KEPT
        assert (seen["env"]["SLURM_PROCID"], seen["env"]["SLURM_LOCALID"]) == ("0", "0")
        assert gpu_list(seen["env"]) == [str(i) for i in range(8)]
        assert seen["env"]["FAKE_PYXIS_NAME"] == f"tiny_auto_test_{job.job_id}"
    # as CI runs pytest (decision pytest-as-ci): the output fixture has the job's folder
    assert f"--output-dir={work} -o junit_logging=out-err" in seen["env"]["PYTEST_ADDOPTS"]
    assert (work / "test_two_gpus.out").read_text() == "written under --output-dir"


def test_pytest_job_with_fewer_gpus_than_the_marker_reports_skipped_tests(site: Site) -> None:
    """The fixture's skip_less_device (as TensorRT-LLM's conftest) counts the GPUs Slurm gave:
    the built script with its --gres cut to gpu:2 runs test_two_gpus and skips the tp8 one."""
    spec = build(site, "pytest_skip", test_cmd="pytest accuracy/test_tiny.py::TestTiny -v")
    script = Path(spec["script_path"])
    text = script.read_text()
    assert "#SBATCH --gres=gpu:8\n" in text
    script.write_text(text.replace("#SBATCH --gres=gpu:8\n", "#SBATCH --gres=gpu:2\n"))
    job = submit(site, spec)
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.log
    assert "1 passed, 1 skipped" in job.log, job.log
    assert "test_eight_gpus[tp8] SKIPPED (Devic" in job.log, job.log  # -v cuts the reason
    work = Path(spec["work_dir"])
    assert (work / "pytest-test_two_gpus.json").is_file()
    assert not (work / "pytest-test_eight_gpus_tp8.json").exists()


def test_failing_pytest_gives_a_failed_job(site: Site) -> None:
    spec = build(
        site, "pytest_fail", test_cmd="pytest accuracy/test_tiny.py::TestBroken::test_asserts_false"
    )
    job = submit(site, spec)
    assert job.state == "FAILED" and job.exit_code != "0:0", (job.state, job.exit_code)
    assert job.exit_code == "1:0"  # pytest's own status, passed through by the script
    assert [p for p in spec["failure_patterns"] if p in job.log] == ["FAILED"]
    assert "this test fails on purpose" in job.log and "1 failed" in job.log
    assert not any(p in job.log for p in spec["success_patterns"]), job.log
    assert f"Job {job.job_id} finished with exit code 1" in job.log
    assert_container(job, spec, [(site.repo, 1), (site.repo / "tests/integration/defs", 1)])


def submit_and_watch(site: Site, spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """`submit` then `watch --json`, as a user would: watch's exit status and its verdict."""
    work = spec["work_dir"]
    res = tsb(site.env, "submit", work)
    assert res.returncode == 0, res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "trtllm_script_builder", "watch", work, "--json", "-q"],
        capture_output=True,
        text=True,
        env=site.env,
        check=False,
        timeout=180,
    )
    verdict: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return res.returncode, verdict


def test_pytest_job_whose_tests_all_skip_is_not_run_with_the_reason(site: Site) -> None:
    """Built for 8 GPUs, run with 2 (the --gres cut as above): pytest skips the only test and
    exits 0, which must not read as PASSED. The verdict quotes the skip from the JUnit report."""
    spec = build(
        site, "pytest_all_skip", test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_eight_gpus"
    )
    assert spec["junit_file_pattern"] == "tiny_auto_test_%j_junit.xml"
    script = Path(spec["script_path"])
    script.write_text(script.read_text().replace("--gres=gpu:8\n", "--gres=gpu:2\n"))
    status, v = submit_and_watch(site, spec)
    assert (status, v["verdict"], v["state"], v["exit_code"]) == (15, "NOT_RUN", "COMPLETED", 0), v
    skip = "accuracy/test_tiny.py::TestTiny::test_eight_gpus[tp8]: Device count 2 is less than 8"
    assert f"skipped {skip}" in v["evidence"], v["evidence"]
    junit = f"tiny_auto_test_{v['job_id']}_junit.xml"
    assert (Path(spec["work_dir"]) / junit).is_file()
    tests = v["tests"]
    assert (tests["source"], tests["passed"], tests["skipped"], tests["failed"]) == (junit, 0, 1, 0)
    assert tests["skipped_tests"] == [
        {"id": skip.split(": ")[0], "message": "Device count 2 is less than 8"}
    ]


def test_failing_pytest_is_named_with_its_message_in_the_verdict(site: Site) -> None:
    spec = build(
        site,
        "pytest_fail_watch",
        test_cmd="pytest accuracy/test_tiny.py::TestBroken accuracy/test_tiny.py::TestTiny -v",
    )
    status, v = submit_and_watch(site, spec)
    assert (status, v["verdict"], v["exit_code"]) == (1, "FAILED", 1), v
    failing = "failed accuracy/test_tiny.py::TestBroken::test_asserts_false: AssertionError: "
    assert v["evidence"][1].startswith(failing), v["evidence"]
    assert "this test fails on purpose" in v["evidence"][1]
    tests = v["tests"]
    assert (tests["passed"], tests["failed"], tests["errors"], tests["skipped"]) == (2, 1, 0, 0)
    assert [t["id"] for t in tests["failing"]] == [
        "accuracy/test_tiny.py::TestBroken::test_asserts_false"
    ]


# ---------------------------------------------------------------- Category 3: custom


def test_custom_job_runs_once_seeing_its_gpus_with_literal_env(site: Site) -> None:
    spec = build(
        site,
        "custom",
        custom_cmd="python3 scripts/report_env.py",
        custom_env="GREETING='hello world' LITERAL='$HOME' SLURM_MY_SETTING=kept",
        required_devices=2,
        model_name="smoke",
    )
    assert (spec["category"], spec["slurm_params"]["ntasks"]) == (3, 1)
    job = submit(site, spec)
    assert_passed(job, spec)
    # One task: the command runs once, and both GPUs of the job are visible to it.
    assert "Rank0 Custom command finished with exit code 0" in job.log
    assert "Rank1 " not in job.log
    assert "rank 0 sees GPUs 0,1; GREETING=hello world" in job.log
    assert "1 node(s), 1 task(s)" in job.log
    assert_installed(job, site)
    assert_container(job, spec, [(site.repo, 1), (site.repo, 1)])

    seen = dumps(Path(spec["work_dir"]), "custom")
    assert [d["env"]["SLURM_PROCID"] for d in seen] == ["0"]
    for d in seen:
        env = d["env"]
        assert (env["GREETING"], env["LITERAL"]) == ("hello world", "$HOME")
        # one node: the MPI/SLURM variables are cleared, custom_env is applied after that
        assert mpi_vars(env) == KEPT | {"SLURM_MY_SETTING"}
        assert env["SLURM_MY_SETTING"] == "kept"
        assert gpu_list(env) == ["0", "1"]


# ---------------------------------------------------------------- Category 5: eval


@pytest.mark.parametrize(
    ("task", "tp", "result"),
    [
        ("gsm8k", 2, "lm-eval gsm8k average accuracy: 75.00"),
        ("mmlu", 1, "MMLU weighted average accuracy: 75.00 (14042)"),
    ],
)
def test_eval_job_runs_in_the_mpi_world_of_its_size(
    site: Site, task: str, tp: int, result: str
) -> None:
    spec = build(
        site, f"eval_{task}", eval_cmd=f"trtllm-eval --model org/Tiny-Model --tp_size {tp} {task}"
    )
    # one node: one task that sees tp GPUs and spawns its own workers (decision launcher-words)
    assert (spec["category"], spec["slurm_params"]["ntasks"]) == (5, 1)
    job = submit(site, spec)
    assert_passed(job, spec)
    assert result in job.log
    expected = {"accuracy": 75.0, **({"samples": 14042} if task == "mmlu" else {})}
    assert log_results(job, spec) == {task: expected}
    assert job.log.count("Fake GPU (stand-in)") == tp  # nvidia-smi, the job's GPUs
    assert WASTED_GPUS not in job.log  # the job asked for the GPUs it uses, no more
    assert "MPI_ERR_SPAWN" not in job.log + job.err and "MPI_Init" not in job.err, job.err
    # its executor workers came up through MPI_Comm_spawn (real mpi4py), no launcher
    assert f"trtllm-eval (stand-in): MPI world 1, spawned {tp} worker(s)" in job.log, job.log
    assert "trtllm-llmapi-launch" not in job.log + job.err
    assert_installed(job, site)
    assert_container(job, spec, [(site.repo, 1), (site.repo, 1)])

    (seen,) = dumps(Path(spec["work_dir"]), "trtllm-eval")
    assert seen["argv"] == ["--model", "/models/org/Tiny-Model", "--tp_size", str(tp), task]
    env = seen["env"]
    assert mpi_vars(env) == KEPT  # its environment cleared, so its spawned workers start
    assert spec["slurm_params"]["gres"] == f"gpu:{tp}"
    assert len(gpu_list(env)) == tp  # which ones depends on the jobs beside it
    assert "TRTLLM_LLMAPI_LAUNCH_STANDIN" not in env


# ---------------------------------------------------------------- Category 6: bench


def test_bench_job_prepares_then_runs_on_two_gpus(site: Site) -> None:
    dataset = site.home / "tiny_dataset.json"  # the home folder is mounted
    spec = build(
        site,
        "bench",
        bench_cmd=(
            # A Hugging Face id: the node is offline, so the build must point every call at
            # the mounted copy (decision bench-sizing), or the stand-in refuses to download.
            f"trtllm-bench --model org/Tiny-Model prepare-dataset --output {dataset} "
            "token-norm-dist --num-requests 4 --input-mean 16 --input-stdev 0 "
            "--output-mean 8 --output-stdev 0 && "
            f"trtllm-bench --model org/Tiny-Model throughput --dataset {dataset} --tp 2"
        ),
    )
    assert (spec["category"], spec["slurm_params"]["ntasks"]) == (6, 1)
    script = Path(spec["script_path"]).read_text()
    # the dataset step reads its tokenizer from --model: the local copy goes there
    # (decision bench-dataset-local-model); the benchmark keeps the id with --model_path
    assert "trtllm-bench --model /models/org/Tiny-Model prepare-dataset" in script, script
    assert script.count("--model_path /models/org/Tiny-Model") == 1, script
    job = submit(site, spec)
    assert_passed(job, spec)
    assert "= PERFORMANCE OVERVIEW" in job.log
    assert "Total Output Throughput (tokens/sec):" in job.log
    bench = log_results(job, spec)["bench"]
    assert bench["total_output_throughput_tokens_per_sec"] == 1600.0
    assert bench["request_throughput_req_per_sec"] == 12.5
    assert "Number of requests:                               4" in job.log
    assert len(dataset.read_text().splitlines()) == 4
    assert WASTED_GPUS not in job.log and "MPI_ERR_SPAWN" not in job.err, job.err
    assert "trtllm-bench (stand-in): MPI world 1, spawned 2 worker(s)" in job.log, job.log
    assert_installed(job, site)
    assert_container(job, spec, [(site.repo, 1), (site.repo, 1), (site.repo, 1)])

    work = Path(spec["work_dir"])
    (smi,) = dumps(work, "nvidia-smi")  # in the dataset step, before the clean-up
    assert_slurm_gpus(smi["env"], spec, ntasks=1)
    assert "PMIX_RANK" not in smi["env"]  # the dataset step never runs under MPI
    (prep,) = dumps(work, "trtllm-bench-prepare-dataset")
    assert mpi_vars(prep["env"]) == KEPT
    (run,) = dumps(work, "trtllm-bench-throughput")
    assert mpi_vars(run["env"]) == KEPT and len(gpu_list(run["env"])) == 2
    assert "TRTLLM_LLMAPI_LAUNCH_STANDIN" not in run["env"]


# ---------------------------------------------------------------- Category 4: perf-sanity


def test_perf_sanity_launch_script_runs_its_step_with_the_tasks_it_asks(site: Site) -> None:
    """The repo's submit.py (stand-in) writes slurm_launch.sh; `submit` + `watch` run it: one
    srun step of slurm_run.sh over the server's GPUs, in the container submit.py named."""
    spec = build(
        site,
        "perf",
        test_cmd="pytest perf/test_perf_sanity.py::test_e2e[aggr_upload-tiny_cfg-tiny_tp2]",
    )
    assert (spec["category"], spec["required_devices"], spec["node_count"]) == (4, 2, 1)
    assert spec["success_patterns"] == [
        "Aggregated test completed successfully",
        "Disagg server and benchmark completed successfully",
    ]
    work = Path(spec["work_dir"])
    script = Path(spec["script_path"])
    assert script == work / "slurm_launch.sh" and script.stat().st_mode & 0o111
    text = script.read_text()
    asked = [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]
    for line in ("--nodes=1", "--ntasks=8", "--ntasks-per-node=8", "--gres=gpu:8"):
        assert f"#SBATCH {line}" in asked, asked
    assert "--segment" not in text  # sbatch 22.05 refuses it: probed, and left out
    assert any("--segment left out" in w for w in spec["warnings"]), spec["warnings"]
    assert "export gpusPerNodePerServer=2" in text and "export totalNodes=1" in text
    assert f"{site.repo}/jenkins/scripts/perf/local/slurm_run.sh" in text
    assert (work / "test_list.txt").read_text() == (
        "perf/test_perf_sanity.py::test_e2e[aggr-tiny_cfg-tiny_tp2]\n"
    )

    record = site.root / "perf.pyxis.jsonl"
    env = {**site.env, "FAKE_PYXIS_RECORD": str(record), "STANDIN_ENV_DUMP_DIR": str(work)}
    res = tsb(env, "submit", str(work))
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "trtllm_script_builder", "watch", str(work), "--json", "-q"],
        capture_output=True,
        text=True,
        env=site.env,
        check=False,
        timeout=180,
    )
    v = json.loads(res.stdout.strip().splitlines()[-1])
    log = (work / f"slurm-{v['job_id']}.out").read_text()
    assert (res.returncode, v["verdict"], v["state"], v["exit_code"]) == (
        0,
        "PASSED",
        "COMPLETED",
        0,
    ), (v, log)
    # PASSED by the job_spec's success pattern, found in the job's own log
    found = v["evidence"][-1]  # <log>:<line>: <text>; the line depends on the ranks' order
    assert found.startswith(f"slurm-{v['job_id']}.out:"), v
    assert found.endswith(": Aggregated test completed successfully"), v
    assert [p for p in spec["failure_patterns"] if p in log] == [], log
    # the case's pass/fail from report.xml and its client's figures from the benchmark log
    label = "aggr-tiny_cfg-tiny_tp2"
    perf = v["results"]["perf_sanity"]
    assert (perf["passed"], perf["failed"]) == (1, 0), perf
    assert [(c["case"], c["outcome"]) for c in perf["cases"]] == [(label, "passed")]
    assert perf["cases"][0]["clients"] == [
        {
            "server": 0,
            "client": 0,
            "log": f"{label}/trtllm-benchmark.0.0.log",
            "seq_throughput": 1.55,
            "token_throughput": 1590.41,
            "mean_e2el": 41250.0,
        }
    ]
    assert v["tests"]["passed"] == 1 and v["tests"]["source"] == "report.xml"
    for rank in range(2):
        assert f"Rank{rank} Pytest finished execution with exit code 0" in log, log
    assert "Rank2 " not in log

    # The step: 2 tasks on the one node (gpusPerNodePerServer), all 8 GPUs of the job's gres.
    seen = dumps(work, "slurm_run")
    assert [d["env"]["SLURM_PROCID"] for d in seen] == ["0", "1"]
    for d in seen:
        env_seen = d["env"]
        assert d["cwd"] == str(site.repo / "tests" / "integration" / "defs")
        assert env_seen["SLURM_JOB_NUM_NODES"] == "1"
        assert env_seen["SLURM_NTASKS"] == env_seen["SLURM_STEP_NUM_TASKS"] == "2"
        assert env_seen["SLURM_STEP_TASKS_PER_NODE"] == "2"
        assert env_seen["SLURM_GPUS_ON_NODE"] == "8"
        assert gpu_list(env_seen) == [str(i) for i in range(8)]
        assert env_seen["totalGpus"] == "8" and env_seen["gpusPerNode"] == "8"
        assert "test_list.txt" in env_seen["pytestCommand"]

    # What the (fake) pyxis plugin received: submit.py's container for both tasks of step 0.
    lines = record.read_text().splitlines()
    records = [r for r in map(json.loads, lines) if str(r["job"]) == str(v["job_id"])]
    assert sorted((r["step"], r["rank"]) for r in records) == [(0, 0), (0, 1)], records
    registry, _, path = spec["container_image"].partition("/")
    for r in records:
        assert r["image"] == f"{registry}#{path}"
        assert r["name"].startswith("aggr_test-")
        assert r["workdir"] == str(work)
        assert f"{site.repo}:{site.repo}" in r["mounts"].split(",")
