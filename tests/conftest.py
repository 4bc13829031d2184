"""Shared fixtures: a small TensorRT-LLM-shaped repo, a slurm_env.json, and a CLI runner."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from trtllm_script_builder.backends import BACKENDS
from trtllm_script_builder.cli import main
from trtllm_script_builder.process.proc import CmdResult
from trtllm_script_builder.workflows import WORKFLOWS

assert WORKFLOWS.names(), "the built-in workflows are registered for every test"
assert BACKENDS.names(), "and the backends"

if TYPE_CHECKING:
    from trtllm_script_builder.model.jobspec import JobSpec

HERE = Path(__file__).resolve().parent
# A clone at /work/<name> sees the read-only shared folder at /work/shared.
SHARED_DATA = HERE.parents[1] / "shared" / "data" / "trtllm"
STAND_IN = HERE / "fixtures" / "submit_stand_in.py"
BUILD_WHEEL_STAND_IN = HERE / "slurm" / "standins" / "build_wheel.py"

PROPERTIES = """\
# Image tags for the test repo; the _12_9 key comes first, as in one real version.
LLM_DOCKER_IMAGE_12_9=nvcr.io/test/trtllm:cuda129-x86_64
LLM_DOCKER_IMAGE=nvcr.io/test/trtllm:x86_64-1
LLM_SBSA_DOCKER_IMAGE=nvcr.io/test/trtllm:aarch64-1
"""

ACCURACY_TESTS = """\
import pytest

NUM = 2


class TestTiny:
    def test_one(self):
        pass

    @pytest.mark.skip_less_device(4)
    @pytest.mark.parametrize("tp_size,pp_size", [(4, 1), (2, 2)], ids=["tp4", "tp2pp2"])
    def test_four(self, tp_size, pp_size):
        pass

    @pytest.mark.parametrize("tp", [1, pytest.param(2, marks=pytest.mark.skip_less_device(NUM), id="tp2")])
    def test_param(self, tp):
        pass


@pytest.mark.skip_less_device(8)
class TestBig:
    def test_class_marked(self):
        pass

    @pytest.mark.skip_less_device(2)
    def test_method_wins(self):
        pass

    @pytest.mark.skip_less_mpi_world_size(16)
    def test_too_big(self):
        pass


@pytest.mark.skip_less_mpi_world_size(2)
def test_world():
    pass
"""

AGG_CFG = """\
metadata: {model_name: tiny}
hardware: {gpus_per_node: 4}
server_configs:
  - name: tiny_tp2pp3
    model_name: tiny
    tensor_parallel_size: 2
    pipeline_parallel_size: 3
  - name: tiny_tp1
    model_name: tiny
"""


def _still_ignored(signum: int, frame: object) -> None:
    """Caught and dropped: pytest itself goes on ignoring the signal."""


def pytest_configure(config: pytest.Config) -> None:
    """A run started where a signal is ignored (SIGINT in a script's background job; SIGHUP
    under nohup) would pass that on to every process a test starts, and the tests that stop
    a build, submit, sync or watch with it would see it ignored (the tool keeps an ignored
    SIGHUP ignored, as nohup asks). SIGINT gets Python's own handler back; SIGHUP and SIGTERM
    get a handler that drops them, so pytest still ignores them while the programs it starts
    begin with the default (exec resets a caught signal, never an ignored one)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGHUP, signal.SIGTERM):
        if signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, _still_ignored)


LIVE = "tests/slurm/"  # node ids are relative to the repository


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The live-cluster tests (tests/slurm) are one unit of work: one worker runs them one after
    another, first, as they share the cluster's two GPU nodes, while the other workers share
    out the CPU-bound tests one by one. xdist's own `--dist loadgroup` no longer groups on
    pytest 9.2 (it renames node ids, which pytest no longer takes), so the scheduler decides
    by path."""
    from xdist.scheduler import LoadScopeScheduling

    class LiveTestsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return LIVE if nodeid.startswith(LIVE) else nodeid

    return LiveTestsTogether(config, log)


def shared_file(rel: str) -> Path:
    path = SHARED_DATA / rel
    if not path.exists():
        pytest.skip(f"shared data file {path} is not present")
    return path


def make_repo(root: Path) -> Path:
    (root / "jenkins").mkdir(parents=True)
    (root / "jenkins" / "current_image_tags.properties").write_text(PROPERTIES)
    defs = root / "tests" / "integration" / "defs" / "accuracy"
    defs.mkdir(parents=True)
    (defs / "test_tiny.py").write_text(ACCURACY_TESTS)
    (root / "requirements-dev.txt").write_text("")
    (root / "models" / "org" / "Tiny-Model").mkdir(parents=True)
    submit = root / "jenkins" / "scripts" / "perf" / "local" / "submit.py"
    submit.parent.mkdir(parents=True)
    shutil.copy(STAND_IN, submit)
    (root / "scripts").mkdir()
    shutil.copy(BUILD_WHEEL_STAND_IN, root / "scripts" / "build_wheel.py")
    agg = root / "tests" / "scripts" / "perf-sanity" / "aggregated"
    agg.mkdir(parents=True)
    (agg / "tiny_cfg.yaml").write_text(AGG_CFG)
    return root


SLURM_ENV: dict[str, Any] = {
    "user": "tester",
    "default_account": "acct",
    "accounts": ["acct", "other"],
    "default_partition": "gpu",
    "partitions": [
        {
            "name": "gpu",
            "state": "up",
            "time_limit": "4:00:00",
            "nodes": "2",
            "arch": "x86_64",
            "gres": "gpu:8",
            "gpus_per_node": 8,
            "requires_gres": True,
            "cpus_per_node": 64,
            "mem_per_node_mb": 512000,
        },
        {
            "name": "gb",
            "state": "up",
            "time_limit": "4:00:00",
            "nodes": "2",
            "arch": "aarch64",
            "gres": "gpu:4",
            "gpus_per_node": 4,
            "requires_gres": True,
        },
        {
            "name": "nogres",
            "state": "up",
            "time_limit": "1:00:00",
            "nodes": "2",
            "arch": None,
            "gres": "(null)",
            "gpus_per_node": None,
            "requires_gres": False,
        },
        {
            "name": "cpu",
            "state": "up",
            "time_limit": "4:00:00",
            "nodes": "4",
            "arch": "x86_64",
            "gres": "(null)",
            "gpus_per_node": None,
            "requires_gres": False,
            "cpus_per_node": 32,
            "mem_per_node_mb": 128000,
        },
    ],
    "pmix": {"available": ["pmix", "pmix_v4", "pmix_v5"], "preferred": "pmix_v5"},
    "errors": [],
    "remote_cwd": "/home/rtester/work",
    "ssh_host": "cluster.example.com",
}


@dataclass
class Env:
    """Everything a build test needs: repo, work dir, slurm_env file, a request base."""

    root: Path
    repo: Path
    work: Path
    slurm_env: Path
    home: Path

    def request(self, scenario: str = "local_slurm", **fields: Any) -> dict[str, Any]:
        req: dict[str, Any] = {
            "execution_scenario": scenario,
            "work_dir": str(self.work),
            "repo_root": str(self.repo),
            "llm_models_root": "/models",
            "models_path": str(self.repo / "models"),
        }
        if scenario != "local_docker":
            req.update(partition="gpu", account="acct", slurm_env_file=str(self.slurm_env))
        else:
            req["env_check"] = {"gpus_per_node": 8, "available_gpus": 8}
        if scenario == "remote_slurm":
            req.update(remote_repo_path="/lustre/rtester/TensorRT-LLM")
            req.pop("models_path")
            req["checkpoint_path"] = "/lustre/ckpt/tiny/model"
        req.update(fields)
        return {k: v for k, v in req.items() if v is not None}

    def write_env(self, **changes: Any) -> Path:
        env = json.loads(json.dumps(SLURM_ENV))
        env.update(changes)
        self.slurm_env.write_text(json.dumps(env))
        return self.slurm_env


@pytest.fixture()
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TRTLLM_SCRIPT_BUILDER_CONFIG", "")
    monkeypatch.delenv("TRTLLM_SCRIPT_BUILDER_CONFIG")
    # The submit.py stand-in records what it received here, outside work_dir.
    monkeypatch.setenv("SUBMIT_STAND_IN_RECORD", str(tmp_path / "submit_args.json"))
    repo = make_repo(tmp_path / "repo")
    e = Env(tmp_path, repo, tmp_path / "work", tmp_path / "slurm_env.json", home)
    e.write_env()
    return e


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


@pytest.fixture()
def cli() -> Callable[..., Run]:
    def run(args: list[str], request: dict[str, Any] | None = None) -> Run:
        runner = CliRunner()
        if request is not None:
            res = runner.invoke(main, ["build", "-", *args], input=json.dumps(request))
        else:
            res = runner.invoke(main, args)
        if res.exception and not isinstance(res.exception, SystemExit):
            raise res.exception
        return Run(res.exit_code, res.stdout, res.stderr)

    return run


def job_spec(**fields: Any) -> JobSpec:
    """A one-GPU custom job's JobSpec (model m, work_dir /w), with `fields` over it."""
    from trtllm_script_builder.model.jobspec import JobSpec

    values: dict[str, Any] = {
        "workflow_type": "custom",
        "category": 3,
        "model_name": "m",
        "execution_scenario": "local_slurm",
        "container_image": "img",
        "docker_image": "img",
        "script_path": "/w/m_custom.slurm",
        "script_name": "m_custom.slurm",
        "success_patterns": [],
        "failure_patterns": [],
        "required_devices": 1,
        "node_count": 1,
        "work_dir": "/w",
        "repo_root": "/r",
    }
    return JobSpec(**{**values, **fields})


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file under path with its bytes, as a reader sees them (a rebuilt folder's files
    are links into `.tsb-sets`, which is not listed), to prove a refusal changed nothing."""
    if not path.exists():
        return {}
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and ".tsb-sets" not in p.relative_to(path).parts
    }


def materialise_tests(repo: Path, ids: list[str]) -> None:
    """Write the test files, classes and functions that test ids name into the fixture repo,
    so ids taken from TensorRT-LLM's own lists name tests that exist (a build checks them)."""
    from trtllm_script_builder.workflows.pytest_sizing import split_selections

    files: dict[str, dict[str | None, set[str]]] = {}
    for test_id in ids:
        for sel in split_selections(f"pytest {test_id}").selections:
            if sel.path.startswith("/") or not sel.path.endswith(".py"):
                continue
            tests = files.setdefault(sel.path, {})
            if sel.func:
                tests.setdefault(sel.cls, set()).add(sel.func)
            elif sel.cls:
                tests.setdefault(sel.cls, set())
    for rel, by_class in files.items():
        path = repo / "tests" / "integration" / "defs" / rel
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for cls, funcs in sorted(by_class.items(), key=lambda kv: kv[0] or ""):
            indent = "    " if cls else ""
            if cls:
                lines.append(f"class {cls}:")
            lines += [f"{indent}def {f}(self=None):\n{indent}    pass" for f in sorted(funcs)]
            if cls and not funcs:
                lines.append("    pass")
        path.write_text("\n".join(lines) + "\n")


def shell_here(line: str, input: bytes | None = None, **_: Any) -> CmdResult:
    """What a stand-in for a cluster's login node answers to a shell line: the line run under
    `sh` on this machine, whose folders play the cluster's (a real host runs it the same way)."""
    res = subprocess.run(["sh", "-c", line], input=input, capture_output=True, check=False)
    return CmdResult(res.returncode, res.stdout.decode(), res.stderr.decode(), raw=res.stdout)
