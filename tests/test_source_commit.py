"""A remote compile chain tests the code it synced (decision source-commit-check), without a
cluster: submit passes the synced commit to every job of the chain and records it; the compile and
test scripts refuse to start on a clone that moved; a refused compile is COMPILE_FAILED with that
line; `watch JOBDIR --timeout` on a batch's job leaves the batch's prerequisites alone."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shell_here
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.process import submit as submit_mod
from trtllm_script_builder.process.chain import decide_prerequisite
from trtllm_script_builder.process.gitsync import SyncResult
from trtllm_script_builder.process.proc import CmdResult
from trtllm_script_builder.process.submission import Submission, load_submission, save_submission
from trtllm_script_builder.process.verdict import Decision, LogLine, Verdict
from trtllm_script_builder.process.watch import WatchResult

from .conftest import Env
from .test_batch_submit_watch import FakeSsh, remote_chain_folder

GOLDEN_SPEC = Path(__file__).parent / "golden" / "cat2_pytest_local_slurm" / "job_spec.json"

SHA = "a1" * 20
OTHER = "b2" * 20
PIN = f"--export=ALL,TSB_SOURCE_COMMIT={SHA}"


def _build(cli, env: Env, scenario: str = "remote_slurm", **fields: Any):
    req = env.request(scenario, test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one")
    return cli([], {**req, "compile": True, "device_type": "H100", **fields})


class _Ssh:
    """SshRunner of a single-job remote submit: sbatch answers 70, 71, ...; all kept."""

    remote = True
    name = "login"
    shell = staticmethod(shell_here)

    def __init__(self, target: object) -> None:
        self.argvs: list[list[str]] = []
        _Ssh.made.append(self)

    made: list[_Ssh] = []

    def check(self) -> CmdResult:
        return CmdResult(0)

    def copy(self, files: Sequence[Path], remote_dir: str) -> CmdResult:
        return CmdResult(0)

    def __call__(self, argv: Sequence[str], cwd: Path | None = None, **_: Any) -> CmdResult:
        self.argvs.append(list(argv))
        if argv[0] == "sbatch":
            return CmdResult(0, f"{70 + len(self.argvs)}\n")
        return CmdResult(0)


def _fake_sync(monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    from trtllm_script_builder.process import gitsync

    def sync_checkout(*_: object, **__: object) -> SyncResult:
        return SyncResult(SHA, method, True)

    monkeypatch.setattr(gitsync, "sync_checkout", sync_checkout)
    monkeypatch.setattr("trtllm_script_builder.process.host.OverSsh", _Ssh)
    _Ssh.made = []


def test_a_remote_compile_chain_gets_the_synced_commit(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _build(cli, env, sqsh_cache_dir="/lustre/sqsh").code == 0
    _fake_sync(monkeypatch, "push")
    sub = submit_mod.submit(env.work)
    sbatches = [a for a in _Ssh.made[0].argvs if a[0] == "sbatch"]
    # import, compile and test job: each with the commit, the test job after the two
    assert [Path(a[-1]).name for a in sbatches] == [
        "import.slurm",
        "compile.slurm",
        "tiny_auto_test.slurm",
    ]
    assert all(a[3] == PIN for a in sbatches), sbatches  # after the submit's comment
    assert sub.source_commit == SHA
    assert json.loads((env.work / "submission.json").read_text())["source_commit"] == SHA


def test_a_shared_filesystem_pins_nothing(env: Env, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """remote_repo_path is the checkout itself: the jobs read its files as they are."""
    assert _build(cli, env).code == 0
    _fake_sync(monkeypatch, "shared")
    sub = submit_mod.submit(env.work)
    sbatches = [a for a in _Ssh.made[0].argvs if a[0] == "sbatch"]
    assert len(sbatches) == 2 and not any(w.startswith("--export") for a in sbatches for w in a)
    assert sub.source_commit is None
    assert "source_commit" not in json.loads((env.work / "submission.json").read_text())


def test_an_edited_source_commit_is_refused(env: Env, tmp_path: Path) -> None:
    base = {"scenario": "remote_slurm", "work_dir": "/w", "submitted_at": "t", "host": "h"}
    assert Submission(**base, script="s", source_commit=SHA).source_commit == SHA
    (tmp_path / "submission.json").write_text(
        json.dumps({**base, "script": "s", "source_commit": "HEAD; rm -rf ~"})
    )
    with pytest.raises(BuildError, match="source_commit"):
        load_submission(tmp_path)


# ---------------------------------------------------------------- the scripts' check


def _run(script: Path, commit: str | None, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TSB_SOURCE_COMMIT"}
    # what Slurm gives a job: its id, and the jobs it waited for (the compile: job 4)
    env.update(SLURM_JOB_ID="5", SLURM_JOB_DEPENDENCY="afterok:4")
    if commit is not None:
        env["TSB_SOURCE_COMMIT"] = commit
    # a script that gets past the check stops at the first srun, this one
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text("#!/bin/sh\necho 'srun reached' >&2\nexit 3\n")
    (bin_dir / "srun").chmod(0o755)
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    return subprocess.run(
        ["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30
    )


def _git_head(repo: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    if not (repo / ".git").exists():
        git("init", "-q")
        git("add", "-A")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    return git("rev-parse", "HEAD")


@pytest.mark.parametrize("script", ["compile.slurm", "tiny_auto_test.slurm"])
def test_a_job_on_a_moved_clone_stops_with_one_error_line(
    env: Env, cli, tmp_path: Path, script: str
) -> None:
    assert _build(cli, env, "local_slurm", wheel_dir=str(tmp_path / "wheel")).code == 0
    (tmp_path / "wheel" / "job-4").mkdir(parents=True)  # what compile job 4 built
    (tmp_path / "wheel" / "job-4" / "tensorrt_llm-1.2.0-py3-none-any.whl").write_text("")
    head = _git_head(env.repo)
    moved = _run(env.work / script, OTHER, tmp_path)
    assert moved.returncode == 1
    errors = [ln for ln in moved.stdout.splitlines() if ln.startswith("error:")]
    assert errors == [
        f"error: source_commit: {env.repo} is at {head}, not at {OTHER}, which submit synced "
        "for this job (another submit or sync moved the clone while the job was queued); "
        "submit again, and do not sync the same clone while a chain is queued"
    ]
    assert "srun reached" not in moved.stderr  # it stopped before the build or the tests
    # the right commit, or none given (local jobs, no sync): it goes on to srun
    for commit in (head, None):
        went_on = _run(env.work / script, commit, tmp_path)
        assert "srun reached" in went_on.stderr, went_on.stdout + went_on.stderr
        assert "error: source_commit" not in went_on.stdout


def test_a_compile_refused_for_a_moved_clone_is_compile_failed() -> None:
    line = (
        f"error: source_commit: /lustre/TensorRT-LLM is at {OTHER}, not at {SHA}, which "
        "submit synced for this job (...); submit again, and do not sync the same clone "
        "while a chain is queued"
    )
    lines = [
        LogLine("Job 7 started on n1: 1 node(s), 1 task(s)", "m_compile_7.out", 1),
        LogLine(line, "m_compile_7.out", 2),
    ]
    d = decide_prerequisite("compile", "7", "FAILED", 1, lines)
    assert d.verdict is Verdict.COMPILE_FAILED
    assert d.evidence == ["Slurm state FAILED, exit code 1", f"m_compile_7.out:2: {line}"]


def test_the_verdict_carries_the_source_commit() -> None:
    d = Decision(Verdict.PASSED, "exit code 0")
    assert WatchResult(d, "remote_slurm", "/w", source_commit=SHA).to_json()["source_commit"] == SHA
    assert "source_commit" not in WatchResult(d, "local_slurm", "/w").to_json()


# ---------------------------------------------------------------- batches


def test_a_remote_batch_pins_every_job_to_the_synced_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trtllm_script_builder.process import slurm_submit

    folder = remote_chain_folder(tmp_path, 3, ["/ROOT/repo"] * 3)

    def sync_for_compile(spec: Any, work_dir: Path, say: Any) -> Any:
        return lambda target: SHA

    FakeSsh.made = []
    monkeypatch.setattr("trtllm_script_builder.process.host.OverSsh", FakeSsh)
    monkeypatch.setattr(slurm_submit, "_sync_for_compile", sync_for_compile)
    batch = slurm_submit.submit_batch(folder)
    sbatches = [c for c in FakeSsh.made[0].calls if c[0] == "sbatch"]
    assert [Path(c[-1]).name for c in sbatches] == [
        "import.slurm",
        "compile.slurm",
        "batch_array0.slurm",
    ]
    assert all(c[3] == PIN for c in sbatches), sbatches  # after the submit's comment
    assert [j.source_commit for j in batch.jobs] == [SHA] * 3
    saved = json.loads((folder / "batch_submission.json").read_text())
    assert [j["source_commit"] for j in saved["jobs"]] == [SHA] * 3
    sub = json.loads((folder / "job1" / "submission.json").read_text())
    assert sub["source_commit"] == SHA


def test_a_batch_syncing_two_checkouts_into_one_clone_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trtllm_script_builder.process import slurm_submit

    folder = remote_chain_folder(tmp_path, 2, ["/ROOT/repo", "/ROOT/other"])
    synced: list[str] = []

    def sync_for_compile(spec: Any, work_dir: Path, say: Any) -> Any:
        return lambda target: synced.append(spec.repo_root)

    FakeSsh.made = []
    monkeypatch.setattr("trtllm_script_builder.process.host.OverSsh", FakeSsh)
    monkeypatch.setattr(slurm_submit, "_sync_for_compile", sync_for_compile)
    with pytest.raises(BuildError) as info:
        slurm_submit.submit_batch(folder)
    assert str(info.value).startswith(
        "error: remote_repo_path: the batch syncs both /ROOT/repo and /ROOT/other into "
        "login1:/remote/TensorRT-LLM"
    ), str(info.value)
    assert synced == [] and not any(c[0] == "sbatch" for c in FakeSsh.made[0].calls)


# ---------------------------------------------------------------- watch JOBDIR --timeout


def _chain_sub(batch_dir: str | None, shared: bool = False) -> Submission:
    pre = [
        {"kind": "import", "key": "i", "job_id": "40", "log_file": "/w/i_40.out",
         "err_file": "/w/i_40.err", "shared": shared},
        {"kind": "compile", "key": "c", "job_id": "41", "log_file": "/w/c_41.out",
         "err_file": "/w/c_41.err", "shared": shared},
    ]  # fmt: skip
    return Submission(
        scenario="local_slurm",
        work_dir="/w",
        submitted_at="t",
        host="h",
        script="s",
        job_id="42_1" if batch_dir else "42",
        prerequisites=[{k: v for k, v in p.items() if v is not False} for p in pre],
        batch_dir=batch_dir,
    )


class _Console:
    def __init__(self) -> None:
        self.said: list[str] = []

    def say(self, text: str) -> None:
        self.said.append(text)

    def lines(self, lines: Any, prefix: str = "") -> None:
        return None

    def progress(self, text: str) -> None:
        return None

    def clear(self) -> None:
        return None


def _watch_chain_to_timeout(
    sub: Submission, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[list[str]], WatchResult, _Console]:
    """`watch JOBDIR --timeout` of a job whose chain is still running: what it cancelled (a
    fake Slurm where every job runs until it is cancelled)."""
    from trtllm_script_builder.process import host
    from trtllm_script_builder.process.watch import watch

    argvs: list[list[str]] = []
    gone: set[str] = set()

    def runner(argv: Sequence[str], cwd: Any = None, **_: Any) -> CmdResult:
        ids = argv[argv.index("-j") + 1].split(",") if "-j" in argv else []
        if argv[0] == "scancel":
            argvs.append(list(argv))
            gone.update(argv[1:])
        elif argv[0] == "squeue":
            rows = [
                f"{j}|{j.split('_')[0]}|RUNNING|None|0:05|0:55|n1" for j in ids if j not in gone
            ]
            return CmdResult(0, "\n".join(rows) + "\n")
        elif argv[0] == "sacct":
            end = "2026-01-01T00:00:00"
            rows = [f"{j}|CANCELLED by 0|0:15|00:00:05|n1|{j}|{end}" for j in ids if j in gone]
            return CmdResult(0, "\n".join(rows) + "\n")
        return CmdResult(0)

    monkeypatch.setattr(host, "run", runner)
    spec = json.loads(GOLDEN_SPEC.read_text())
    spec["work_dir"] = str(tmp_path)
    (tmp_path / "job_spec.json").write_text(json.dumps(spec))
    save_submission(tmp_path, sub.model_copy(update={"work_dir": str(tmp_path)}))
    console = _Console()
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    result = watch(
        tmp_path,
        timeout=1.0,
        poll=0.05,
        console=console,  # type: ignore[arg-type]
        clock=lambda: now[0],
        sleep=sleep,
    )
    return argvs, result, console


@pytest.mark.parametrize(("batch_dir", "shared"), [("/batch", False), (None, True)])
def test_timeout_on_a_batch_job_cancels_only_that_job(
    batch_dir: str | None, shared: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = _chain_sub(batch_dir, shared)
    argvs, result, console = _watch_chain_to_timeout(sub, tmp_path, monkeypatch)
    assert argvs == [["scancel", sub.job_id]]  # the job's own (array task), nothing else
    assert result.verdict is Verdict.TIMEOUT and result.cancelled == "timeout"
    assert any("keeps running" in s and "watch DIR" in s for s in console.said)


def test_timeout_on_a_job_of_its_own_cancels_its_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argvs, result, _ = _watch_chain_to_timeout(_chain_sub(None), tmp_path, monkeypatch)
    assert argvs == [["scancel", "40", "41", "42"]]  # one call for the chain and the job
    assert result.verdict is Verdict.TIMEOUT and result.cancelled == "timeout"
