"""A remote_slurm compile chain end to end (decisions sync-snapshot and compile-chain): `submit`
first brings the local checkout's working state to remote_repo_path over ssh, copies the scripts,
then starts the image import, the compile (from the cluster's clone) and the test job (which
installs the wheel the compile built); `watch` follows the chain over ssh to one verdict.

The "cluster" is the live test cluster behind a real OpenSSH server on loopback. Its ssh
sessions get the environment a cluster login would give: the stand-ins of
tests/slurm/standins first on PATH (enroot, pip; sbatch passes it to the jobs) and a home
folder of their own (so no shell startup file puts the machine's own pip first). The user's
checkout is a git clone with a bare origin, a commit origin does not have, an unstaged change,
an untracked file and an ignored one.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from test_compile_chain import IMAGE, POLL, STANDINS, cli, sacct
from test_git_sync import git

from tests.conftest import make_repo
from trtllm_script_builder.resolve.compile import sqsh_name

if TYPE_CHECKING:
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm

COMPILER_ERROR = 'identifier "k" is undefined\n'


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
    """What the sync must carry: tracked and untracked-not-ignored files, as they are now,
    but for the tool's own job folders (work_dirs/)."""
    names = git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return {
        n: hashlib.sha256((repo / n).read_bytes()).hexdigest()
        for n in names.split("\0")
        if n and (repo / n).is_file() and not n.startswith("work_dirs/")
    }


def _build_tree(parts: tuple[str, ...]) -> bool:
    return len(parts) > 2 and parts[0] == "cpp" and parts[1].startswith("build")


def files_of(checkout: Path) -> dict[str, str]:
    """The files of a clone but for .git, the job folders (work_dirs/) and the build tree a
    compile leaves (cpp/build*, one per architecture, which .gitignore names, as TensorRT-LLM's
    does)."""
    return {
        str(p.relative_to(checkout)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(checkout.rglob("*"))
        if p.is_file()
        and p.relative_to(checkout).parts[0] not in (".git", "work_dirs")
        and not _build_tree(p.relative_to(checkout).parts)
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

    def remote_work(self, name: str, clone: Path | None = None) -> Path:
        """remote_work_dir by default: <remote_repo_path>/work_dirs/<name>, inside the clone
        (TensorRT-LLM's .gitignore does not name work_dirs/)."""
        return (clone or self.remote_repo) / "work_dirs" / name


def _user_checkout(root: Path) -> tuple[Path, Path]:
    """A TensorRT-LLM-like clone of a bare origin, with work of every kind not yet pushed."""
    upstream = make_repo(root / "upstream")
    (upstream / ".gitignore").write_text("*.log\ncpp/build*\n")  # as TensorRT-LLM's
    (upstream / "tensorrt_llm").mkdir()
    (upstream / "tensorrt_llm" / "version.py").write_text('__version__ = "1.2.0rc1"\n')
    git(upstream, "init", "-q", "-b", "main")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "upstream")
    origin = root / "origin.git"
    git(root, "clone", "-q", "--bare", str(upstream), str(origin))
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
    # a job folder of an earlier local build: the tool's own, it does not travel
    (repo / "work_dirs" / "old_job").mkdir(parents=True)
    (repo / "work_dirs" / "old_job" / "job_spec.json").write_text("{}\n")
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
    assert not (remote.remote_repo / "work_dirs" / "old_job").exists()
    assert git(remote.remote_repo, "status", "--porcelain") == "?? work_dirs/\n"  # the job's
    snapshot = git(remote.remote_repo, "rev-parse", "HEAD").strip()
    local_head = git(remote.repo, "rev-parse", "HEAD").strip()
    assert git(remote.remote_repo, "rev-parse", "HEAD~1").strip() == local_head
    assert snapshot != local_head
    assert git(remote.origin, "for-each-ref", "refs/heads/tsb-sync") == ""  # no branch left

    v = res.json
    assert (res.code, v["verdict"], v["state"], v["host"]) == (0, "PASSED", "COMPLETED", remote.host), res.stdout  # fmt: skip
    submitted = json.loads(sub.stdout)
    # what was built and tested: the commit the sync left there, checked by the jobs
    # (decision source-commit-check)
    assert v["source_commit"] == snapshot == submitted["source_commit"]
    assert json.loads((work / "submission.json").read_text())["source_commit"] == snapshot
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
    remote_work = remote.remote_work("pass")
    assert "--dist_dir" in calls[0]["argv"]
    compile_id = submitted["prerequisites"][1]["job_id"]
    own = remote_work / "wheel" / f"job-{compile_id}"  # decision own-wheel-per-chain
    assert calls[0]["argv"][calls[0]["argv"].index("--dist_dir") + 1] == str(own)
    (wheel,) = sorted(own.glob("tensorrt_llm-*.whl"))
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
    # the job folders of earlier jobs in the clone's work_dirs/ (the first test's) are no
    # change of the clone's own: the sync neither refuses for them nor removes them
    earlier = sorted(remote.remote_repo.glob("work_dirs/*/wheel/*.whl"))
    try:
        before = fingerprint(remote.repo)
        try:  # run: build, submit (the sync first) and watch in one go
            req = remote.request("broken")
            res = cli("run", str(req), "--poll", POLL, "--json", "--timeout", "60")
        finally:
            _cancel(*_job_ids(work))
        assert fingerprint(remote.repo) == before
    finally:
        marker.unlink()
    assert (remote.remote_repo / "cpp" / "STANDIN_COMPILE_ERROR").read_text() == COMPILER_ERROR
    assert sorted(remote.remote_repo.glob("work_dirs/*/wheel/*.whl")) == earlier
    v = res.json
    assert (res.code, v["verdict"], v["state"], v["exit_code"]) == (
        16,
        "COMPILE_FAILED",
        "FAILED",
        1,
    ), res.stdout
    assert "the test job never started" in v["reason"]
    chain = {c["kind"]: c["job_id"] for c in v["chain"]}
    assert f"synced {remote.repo} to {remote.host}:{remote.remote_repo}" in res.stderr
    submitted = json.loads((work / "submission.json").read_text())
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
    remote_work = remote.remote_work("broken")
    assert not list((remote_work / "wheel").glob("*.whl"))


def test_a_chain_whose_clone_moved_before_its_compile_fails_on_the_commit(remote: Remote) -> None:
    """Chain A is submitted (the clone synced to A's state), then other work is synced to the
    same clone before A's compile starts: the compile stops on the commit check and the
    verdict is COMPILE_FAILED with that line, not a build of the other work
    (decision source-commit-check).

    A's import holds the chain back: it waits for the image file's lock (as a second import of
    the same image does), which the test holds until the clone has moved."""
    work = remote.root / "moved"
    assert cli("build", str(remote.request("moved"))).code == 0
    remote.sqsh_dir.mkdir(parents=True, exist_ok=True)
    other = remote.repo / "cpp" / "other_work.cu"
    other.parent.mkdir(exist_ok=True)
    try:
        with open(remote.sqsh_dir / (sqsh_name(IMAGE) + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            sub = cli("submit", str(work), "--json")
            assert sub.code == 0, sub.stderr
            synced_a = json.loads(sub.stdout)["source_commit"]
            assert git(remote.remote_repo, "rev-parse", "HEAD").strip() == synced_a
            # other work, synced to the same clone while A is queued
            other.write_text("// other work\n")
            moved = cli("sync", str(work), "--json")
            assert moved.code == 0, moved.stderr
            synced_b = json.loads(moved.stdout)["commit"]
            assert synced_b != synced_a
            import_id = json.loads(sub.stdout)["prerequisites"][0]["job_id"]
            assert sacct_state(import_id) == "RUNNING"  # waiting for the lock, A's compile too
        res = cli("watch", str(work), "--poll", POLL, "--json", "--timeout", "45")
    finally:
        other.unlink(missing_ok=True)
        _cancel(*_job_ids(work))
    v = res.json
    assert (res.code, v["verdict"], v["exit_code"]) == (16, "COMPILE_FAILED", 1), res.stdout
    assert v["source_commit"] == synced_a
    line = (
        f"error: source_commit: {remote.remote_repo} is at {synced_b}, not at {synced_a}, which "
        "submit synced for this job (another submit or sync moved the clone while the job was "
        "queued); submit again, and do not sync the same clone while a chain is queued"
    )
    assert [e for e in v["evidence"] if "source_commit" in e] == [
        f"{Path(v['log_files'][0]).name}:2: {line}"
    ], v["evidence"]
    assert Path(v["log_files"][0]).parent == remote.remote_work("moved")
    # nothing of the other work was built: the compile stopped before build_wheel.py
    calls = [json.loads(ln) for ln in remote.wheel_record.read_text().splitlines()] if remote.wheel_record.exists() else []  # fmt: skip
    assert not any(str(remote.remote_work("moved")) in " ".join(c["argv"]) for c in calls)
    test_id = json.loads((work / "submission.json").read_text())["job_id"]
    assert sacct(test_id, "State", timeout=30)[0].startswith("CANCELLED")


def sacct_state(job: str) -> str:
    """The job's state now (squeue), waiting up to 10 s for it to leave PENDING."""
    deadline = time.monotonic() + 10
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if state and state != "PENDING":
            break
        time.sleep(0.2)
    return state


def test_a_cluster_clone_with_changes_of_its_own_is_refused_before_anything_is_submitted(
    remote: Remote,
) -> None:
    # a clone of its own at another path, with an edit made there
    clone = remote.root / "cluster" / "edited"
    git(remote.root, "clone", "-q", str(remote.origin), str(clone))
    (clone / "requirements-dev.txt").write_text("edited on the cluster\n")
    old_log = remote.remote_work("old", clone) / "old_1.out"  # a job folder: no change
    old_log.parent.mkdir(parents=True)
    old_log.write_text("an earlier job's log\n")
    work = remote.root / "edited"
    assert cli("build", str(remote.request("edited", remote_repo_path=str(clone)))).code == 0
    before = fingerprint(remote.repo)
    res = cli("submit", str(work))
    assert res.code == 2, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert line.startswith(
        f"error: remote_repo_path: {remote.host}:{clone} has changes of its own "
        "(1 file(s): M requirements-dev.txt)"
    ), line
    # `submit --force` only submits again: the fix names the command that discards them
    assert line.endswith(f"discard them with `trtllm-script-builder sync {work} --force`, then submit again")  # fmt: skip
    assert not (work / "submission.json").exists()
    assert not remote.remote_work("edited", clone).exists()  # nothing copied
    assert (clone / "requirements-dev.txt").read_text() == "edited on the cluster\n"
    # the command it names does it
    synced = cli("sync", str(work), "--force", "--json")
    assert synced.code == 0, synced.stderr
    assert files_of(clone) == working_tree(remote.repo)
    assert old_log.read_text() == "an earlier job's log\n"  # --force kept the job folders
    assert fingerprint(remote.repo) == before


def test_a_remote_repo_path_that_is_the_checkout_itself_is_left_alone(remote: Remote) -> None:
    """On a filesystem the cluster shares, remote_repo_path may name the local checkout: the
    cluster sees its files already, and a sync there would detach (--force: reset) it."""
    work = remote.root / "same"
    assert cli("build", str(remote.request("same", remote_repo_path=str(remote.repo)))).code == 0
    before = fingerprint(remote.repo)
    branch = git(remote.repo, "symbolic-ref", "HEAD")
    res = cli("sync", str(work), "--force", "--json")
    assert res.code == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["method"] == "shared" and out["snapshot"] is True, out
    assert any("is this checkout itself" in n for n in out["notes"])
    assert fingerprint(remote.repo) == before
    assert git(remote.repo, "symbolic-ref", "HEAD") == branch


def test_the_same_folder_needs_the_same_path_and_inode(tmp_path: Path) -> None:
    from trtllm_script_builder.process import gitsync

    repo = tmp_path / "repo"
    repo.mkdir()
    local = gitsync._Local(repo)
    ino = os.stat(repo).st_ino
    probe = f"state=repo\ntop={repo.resolve()}\ninode={ino}\norigin=\nhead=\nhas=no\nchanges=0\n"
    parsed = gitsync._parse_probe(probe)
    assert (parsed.top, parsed.inode) == (str(repo.resolve()), str(ino))
    assert gitsync._same_folder(local, parsed)
    # the same path on another machine (another inode), or another path: a clone to sync
    assert not gitsync._same_folder(local, gitsync._parse_probe(probe.replace(f"inode={ino}", f"inode={ino + 1}")))  # fmt: skip
    assert not gitsync._same_folder(local, gitsync._parse_probe(probe.replace("top=", "top=/x")))
    assert not gitsync._same_folder(local, gitsync._parse_probe(probe.replace("state=repo", "state=missing")))  # fmt: skip


def test_a_failed_sbatch_in_the_chain_cancels_what_it_submitted() -> None:
    """The compile's sbatch fails after the import's went in: the import is cancelled (it
    would run for nothing) and no later job of a batch reuses it."""
    from tests.test_compile import _entry, _spec
    from trtllm_script_builder.errors import ToolFailed
    from trtllm_script_builder.process.chain import ChainJob, submit_prerequisites

    def sbatch(script: str, extra: list[str]) -> str:
        if script.endswith("compile.slurm"):
            raise ToolFailed("sbatch", "compile.slurm: Invalid account", "check the job")
        return "101"

    cancelled: list[list[str]] = []
    known: dict[str, ChainJob] = {}
    spec = _spec([_entry("import", "import:/c/x.sqsh"), _entry("compile", "compile:a")])
    with pytest.raises(ToolFailed):
        submit_prerequisites(
            spec,
            sbatch,
            "/w",
            known=known,
            cancel=lambda js: cancelled.append([j.job_id for j in js]),
        )
    assert cancelled == [["101"]] and known == {}
    # a job shared with an earlier test job of the batch is not this one's to cancel
    known = {"import:/c/x.sqsh": ChainJob("import", "import:/c/x.sqsh", "99", None, None)}
    cancelled.clear()
    with pytest.raises(ToolFailed):
        submit_prerequisites(
            spec,
            sbatch,
            "/w",
            known=known,
            cancel=lambda js: cancelled.append([j.job_id for j in js]),
        )
    assert cancelled == [] and list(known) == ["import:/c/x.sqsh"]
