"""A remote_slurm compile chain end to end (decisions 58, 65): `submit` first brings the local
checkout's working state to remote_repo_path over ssh, copies the scripts, then starts the
image import, the compile (from the cluster's clone) and the test job (which installs the
wheel the compile built); `watch` follows the chain over ssh to one verdict.

The "cluster" is the live test cluster behind a real OpenSSH server on loopback. Its ssh
sessions get the environment a cluster login would give: the stand-ins of
tests/slurm/standins first on PATH (enroot, pip; sbatch passes it to the jobs) and a home
folder of their own (so no shell startup file puts the machine's own pip first). The user's
checkout is a git clone with a bare origin, a commit origin does not have, an unstaged change,
an untracked file and an ignored one.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from test_compile_chain import IMAGE, POLL, STANDINS, cli, sacct

from tests.conftest import make_repo
from trtllm_script_builder.resolve.compile import sqsh_name

if TYPE_CHECKING:
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm

COMPILER_ERROR = 'identifier "k" is undefined\n'


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Tester",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "Tester",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    res = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False
    )
    assert res.returncode == 0, f"git {' '.join(args)}: {res.stderr}"
    return res.stdout


def fingerprint(repo: Path) -> dict[str, str]:
    """Every file under repo (.git included) by its bytes, and what git says of its state."""
    prints = {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }
    prints["<status>"] = git(repo, "--no-optional-locks", "status", "--porcelain")
    prints["<refs>"] = git(repo, "for-each-ref")
    return prints


def working_tree(repo: Path) -> dict[str, str]:
    """What the sync must carry: tracked and untracked-not-ignored files, as they are now."""
    names = git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return {
        n: hashlib.sha256((repo / n).read_bytes()).hexdigest()
        for n in names.split("\0")
        if n and (repo / n).is_file()
    }


def files_of(checkout: Path) -> dict[str, str]:
    return {
        str(p.relative_to(checkout)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(checkout.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(checkout).parts
    }


@dataclass
class Remote:
    root: Path
    repo: Path  # the user's checkout
    origin: Path  # its bare origin
    host: str
    slurm_env: Path  # probe --ssh of the loopback host
    remote_repo: Path  # remote_repo_path: the cluster's clone
    sqsh_dir: Path
    wheel_record: Path  # build_wheel.py's calls (argv, cwd)
    enroot_record: Path

    def request(self, name: str, **fields: Any) -> Path:
        req: dict[str, Any] = {
            "execution_scenario": "remote_slurm",
            "work_dir": str(self.root / name),
            "repo_root": str(self.repo),
            "remote_repo_path": str(self.remote_repo),
            "remote_work_dir": str(self.root / "cluster" / "work" / name),
            "custom_cmd": "echo the tests ran in $(pwd)",
            "required_devices": 1,
            "gpus_per_node": 1,
            "partition": "cpu",
            "account": "tsb",
            "slurm_env_file": str(self.slurm_env),
            "llm_models_root": "/models",
            "checkpoint_path": str(self.remote_repo / "models"),
            "container_image": IMAGE,
            "time_limit": "00:05:00",
            "compile": True,
            "cuda_arch": "90-real",
            "sqsh_cache_dir": str(self.sqsh_dir),
            **fields,
        }
        path = self.root / f"{name}.json"
        path.write_text(json.dumps(req))
        return path


def _user_checkout(root: Path) -> tuple[Path, Path]:
    """A TensorRT-LLM-like clone of a bare origin, with work of every kind not yet pushed."""
    seed = make_repo(root / "seed")
    (seed / ".gitignore").write_text("*.log\n")
    (seed / "tensorrt_llm").mkdir()
    (seed / "tensorrt_llm" / "version.py").write_text('__version__ = "1.2.0rc1"\n')
    git(seed, "init", "-q", "-b", "main")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "seed")
    origin = root / "origin.git"
    git(root, "clone", "-q", "--bare", str(seed), str(origin))
    repo = root / "TensorRT-LLM"
    git(root, "clone", "-q", str(origin), str(repo))
    # a commit origin does not have
    (repo / "tensorrt_llm" / "version.py").write_text('__version__ = "1.2.0rc2"\n')
    git(repo, "commit", "-q", "-am", "bump the version")
    # an unstaged change, an untracked file, an ignored file
    (repo / "requirements-dev.txt").write_text("pytest-unstaged\n")
    (repo / "cpp").mkdir()
    (repo / "cpp" / "new_kernel.cu").write_text("// untracked work\n")
    (repo / "build.log").write_text("ignored: stays here\n")
    return origin, repo


@pytest.fixture(scope="module")
def remote(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Remote]:
    from conftest import loopback_sshd

    root = tmp_path_factory.mktemp("remote_compile")
    origin, repo = _user_checkout(root)
    home = root / "cluster" / "home"
    home.mkdir(parents=True)
    wheel_record, enroot_record = root / "build_wheel.jsonl", root / "enroot.jsonl"
    session = {
        "HOME": str(home),
        "PATH": f"{STANDINS}:/usr/local/bin:/usr/bin:/bin",
        "STANDIN_ENROOT_RECORD": str(enroot_record),
        "STANDIN_BUILD_WHEEL_RECORD": str(wheel_record),
        "STANDIN_BUILD_WHEEL_STEP": "0.05",
        "FAKE_PYXIS_RECORD": str(root / "pyxis.jsonl"),
    }
    with loopback_sshd(root, session) as sshd:
        env_file = root / "slurm_env_remote.json"
        res = cli("probe", "--ssh", sshd.host, "--output", str(env_file))
        assert res.code == 0, res.stderr
        assert json.loads(env_file.read_text())["remote_home"] == str(home)
        yield Remote(
            root,
            repo,
            origin,
            sshd.host,
            env_file,
            root / "cluster" / "TensorRT-LLM",
            root / "cluster" / "sqsh",
            wheel_record,
            enroot_record,
        )


def _cancel(*jobs: str) -> None:
    if jobs:
        subprocess.run(["scancel", *jobs], check=False)


def _job_ids(work_dir: Path) -> list[str]:
    sub_file = work_dir / "submission.json"
    if not sub_file.exists():
        return []
    sub = json.loads(sub_file.read_text())
    return [p["job_id"] for p in sub.get("prerequisites") or []] + [sub["job_id"]]


def test_remote_chain_syncs_compiles_there_and_installs_the_wheel(remote: Remote) -> None:
    before = fingerprint(remote.repo)
    carried = working_tree(remote.repo)
    assert "cpp/new_kernel.cu" in carried and "build.log" not in carried
    work = remote.root / "pass"
    assert cli("build", str(remote.request("pass"))).code == 0
    try:
        sub = cli("submit", str(work), "--json")
        assert sub.code == 0, sub.stderr
        res = cli("watch", str(work), "--poll", POLL, "--json", "--timeout", "60")
    finally:
        _cancel(*_job_ids(work))
    after = fingerprint(remote.repo)
    assert after == before  # the user's checkout, .git included, is as it was

    # the sync: the cluster's clone holds the local working state, detached at a snapshot
    assert f"synced {remote.repo} to {remote.host}:{remote.remote_repo}" in sub.stderr
    assert files_of(remote.remote_repo) == carried
    assert git(remote.remote_repo, "status", "--porcelain") == ""
    snapshot = git(remote.remote_repo, "rev-parse", "HEAD").strip()
    local_head = git(remote.repo, "rev-parse", "HEAD").strip()
    assert git(remote.remote_repo, "rev-parse", "HEAD~1").strip() == local_head
    assert snapshot != local_head
    assert git(remote.origin, "for-each-ref", "refs/heads/tsb-sync") == ""  # no branch left

    v = res.json
    assert (res.code, v["verdict"], v["state"], v["host"]) == (0, "PASSED", "COMPLETED", remote.host), res.stdout  # fmt: skip
    submitted = json.loads(sub.stdout)
    chain = [(c["kind"], c["verdict"]) for c in v["chain"]]
    assert chain == [("import", "PASSED"), ("compile", "PASSED")]
    assert v["job_id"] == submitted["job_id"]

    # the import ran on the cluster's side, into the cluster's sqsh folder
    sqsh = remote.sqsh_dir / sqsh_name(IMAGE)
    assert sqsh.read_bytes().startswith(b"hsqs")
    # the compile built the cluster's clone: the stand-in ran there, its wheel is in the remote
    # wheel folder, with the version of the commit origin does not have
    calls = [json.loads(line) for line in remote.wheel_record.read_text().splitlines()]
    assert [c["cwd"] for c in calls] == [str(remote.remote_repo)]
    remote_work = remote.root / "cluster" / "work" / "pass"
    assert "--dist_dir" in calls[0]["argv"]
    assert calls[0]["argv"][calls[0]["argv"].index("--dist_dir") + 1] == str(remote_work / "wheel")
    (wheel,) = sorted((remote_work / "wheel").glob("tensorrt_llm-*.whl"))
    assert wheel.name.startswith("tensorrt_llm-1.2.0rc2-")
    compile_log = Path(submitted["prerequisites"][1]["log_file"])
    assert compile_log.parent == remote_work
    text = compile_log.read_text()
    assert "(stand-in build_wheel.py)" in text and f"Built wheel {wheel}" in text
    assert f'-S "{remote.remote_repo}/cpp"' in text
    assert "[compile] Built wheel " in res.stdout  # streamed over ssh
    # the test job ran after the compile, in the cluster's clone, and installed that wheel
    log = Path(submitted["log_file"]).read_text()
    assert f"the tests ran in {remote.remote_repo}" in log
    assert (
        "pip (stand-in): would run 'pip install --retries 10 --timeout 60 --no-deps "
        f"--force-reinstall {wheel}'" in log
    )
    start = sacct(submitted["job_id"], "State,Start")[1]
    assert start >= sacct(submitted["prerequisites"][1]["job_id"], "State,End")[1]
    # the job folder here holds no log: they stayed on the cluster
    assert not list(work.glob("*.out"))


def test_remote_compile_failure_stops_the_chain(remote: Remote) -> None:
    # untracked here: the compile fails only if the sync carried it to the cluster
    marker = remote.repo / "cpp" / "STANDIN_COMPILE_ERROR"
    marker.parent.mkdir(exist_ok=True)
    marker.write_text(COMPILER_ERROR)
    work = remote.root / "broken"
    try:
        before = fingerprint(remote.repo)
        assert cli("build", str(remote.request("broken"))).code == 0
        try:
            sub = cli("submit", str(work), "--json")
            assert sub.code == 0, sub.stderr
            res = cli("watch", str(work), "--poll", POLL, "--json", "--timeout", "60")
        finally:
            _cancel(*_job_ids(work))
        assert fingerprint(remote.repo) == before
    finally:
        marker.unlink()
    assert (remote.remote_repo / "cpp" / "STANDIN_COMPILE_ERROR").read_text() == COMPILER_ERROR
    v = res.json
    assert (res.code, v["verdict"], v["state"], v["exit_code"]) == (
        16,
        "COMPILE_FAILED",
        "FAILED",
        1,
    ), res.stdout
    assert "the test job never started" in v["reason"]
    chain = {c["kind"]: c["job_id"] for c in v["chain"]}
    submitted = json.loads(sub.stdout)
    assert chain["test"] == submitted["job_id"] and chain["compile"] == v["job_id"]
    assert any(e.endswith('error: identifier "k" is undefined') for e in v["evidence"]), v
    # the test job never ran: cancelled by its dependency, no batch step, no log on the cluster
    test_id = submitted["job_id"]
    assert sacct(test_id, "State", timeout=30)[0].startswith("CANCELLED")
    steps = subprocess.run(
        ["sacct", "-n", "-P", "-j", test_id, "-o", "JobID"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    assert steps == [test_id], steps
    assert not Path(submitted["log_file"]).exists()
    remote_work = remote.root / "cluster" / "work" / "broken"
    assert not list((remote_work / "wheel").glob("*.whl"))
