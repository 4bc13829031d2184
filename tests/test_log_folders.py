"""Slurm opens a job's logs itself, following a link at their names: submit refuses log folders
another user may write into, or whose parents they may rename (decision
slurm-logs-folder-is-private), here and over ssh, before anything is copied or submitted."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Env, shell_here
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.process import submit as submit_mod
from trtllm_script_builder.process.host import Here
from trtllm_script_builder.process.proc import CmdResult
from trtllm_script_builder.process.spec_file import check_log_folders

OTHER_UID = 1001  # tsbother on the test machine; any uid that is not ours will do
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")


def folder(path: Path, mode: int) -> Path:
    path.mkdir(exist_ok=True)
    path.chmod(mode)  # not the umask's: the mode is the case under test
    return path


class ShellHost:
    """A cluster's login node for the check alone: its folders are this machine's and its
    shell lines run here under sh, as over ssh."""

    remote = True
    name = "login"
    shell = staticmethod(shell_here)


def refusal(folders: Sequence[Path | str], host: Any = None) -> list[str]:
    with pytest.raises(BuildError) as err:
        check_log_folders(host or Here(), [str(f) for f in folders])
    return err.value.line().splitlines()


class Sbatch:
    """This machine's programs: sbatch answers 4242; every call kept."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], cwd: Any = None, **_: Any) -> CmdResult:
        self.calls.append(list(argv))
        return CmdResult(0, "4242\n") if argv[0] == "sbatch" else CmdResult(0)


def test_a_group_writable_log_folder_is_refused_and_nothing_is_submitted(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli([], env.request(test_cmd="pytest accuracy/test_tiny.py -v")).code == 0
    env.work.chmod(0o775)  # a team's umask 002
    fake = Sbatch()
    monkeypatch.setattr("trtllm_script_builder.process.host.run", fake)
    with pytest.raises(BuildError) as err:
        submit_mod.submit(env.work)
    line = err.value.line()
    assert line.startswith(f"error: work_dir: {env.work} can be written by its group: ")
    assert "following a link another user plants at a log's name" in line
    assert f"chmod go-w {env.work}" in line
    assert fake.calls == [] and not (env.work / "submission.json").exists()
    env.work.chmod(0o755)
    assert submit_mod.submit(env.work).job_id == "4242"
    assert [c[0] for c in fake.calls] == ["sbatch"]


def test_a_world_writable_parent_that_is_not_sticky_is_refused(tmp_path: Path) -> None:
    shared = folder(tmp_path / "shared", 0o777)
    work = folder(shared / "job", 0o755)
    (line,) = refusal([work])
    assert line.startswith(
        f"error: work_dir: {shared} (holding the log folder {work}) can be written by its "
        "group and others and is not sticky, so they can move the log folder away"
    )
    assert f"chmod go-w {shared}" in line
    # a log folder not made yet is judged by the folder it would be made in
    (line,) = refusal([shared / "later" / "logs"])
    assert line.startswith(f"error: work_dir: {shared} (holding the log folder {shared}/later")


def test_a_sticky_world_writable_parent_like_tmp_is_accepted(tmp_path: Path) -> None:
    tmp = folder(tmp_path / "tmp", 0o1777)
    work = folder(tmp / "job", 0o755)
    check_log_folders(Here(), [str(work), str(tmp / "not" / "made")])
    # but never as the log folder itself: anyone may put a link in it
    (line,) = refusal([tmp])
    assert line.startswith(f"error: work_dir: {tmp} can be written by its group and others: ")


def test_a_link_to_a_private_folder_is_judged_by_the_folder_it_names(tmp_path: Path) -> None:
    open_ = folder(tmp_path / "open", 0o777)
    real = folder(tmp_path / "real", 0o755)
    (open_ / "link").symlink_to(real)
    check_log_folders(Here(), [str(open_ / "link")])  # the link's own folder holds no log


def test_every_bad_folder_has_its_own_line(tmp_path: Path) -> None:
    team = folder(tmp_path / "team", 0o770)
    a = folder(team / "a", 0o775)
    b = folder(tmp_path / "b", 0o757)
    lines = refusal([a, b, a])
    assert len(lines) == 3, lines
    assert lines[0].startswith(f"error: work_dir: {a} can be written by its group: ")
    assert lines[1].startswith(f"error: work_dir: {team} (holding the log folder {a}) ")
    assert lines[2].startswith(f"error: work_dir: {b} can be written by others: ")


@needs_root
def test_a_log_folder_another_user_owns_is_refused(tmp_path: Path) -> None:
    theirs = folder(tmp_path / "theirs", 0o755)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    (line,) = refusal([theirs])
    assert line.startswith(
        f"error: work_dir: {theirs} is owned by uid {OTHER_UID}, not by you (uid 0): "
    )
    os.chown(theirs, 0, 0)
    check_log_folders(Here(), [str(theirs)])


@needs_root
def test_a_link_planted_before_the_folder_was_closed_is_refused(tmp_path: Path) -> None:
    work = folder(tmp_path / "job", 0o755)  # chmod go-w after another user wrote there
    planted = work / "job_4243.out"
    planted.symlink_to("/root/.netrc")
    os.lchown(planted, OTHER_UID, OTHER_UID)
    (line,) = refusal([work])
    assert line.startswith(
        f"error: work_dir: {work} holds 1 file(s) or link(s) another user made while they "
        "could write it: "
    )
    planted.unlink()
    check_log_folders(Here(), [str(work)])


class Ssh:
    """SshRunner stand-in: the cluster's folders are this machine's, its shell lines run here
    under sh as over ssh; copies and sbatch are only kept."""

    remote = True
    name = "login"
    made: list[Ssh] = []

    def __init__(self, target: object) -> None:
        self.events: list[str] = []
        Ssh.made.append(self)

    def check(self) -> CmdResult:
        return CmdResult(0, "/home/u\n/home/u\nu\n")

    def shell(self, line: str, input: Any = None, **_: Any) -> CmdResult:
        self.events.append("shell")
        return shell_here(line, input)

    def copy(self, files: Sequence[Path], remote_dir: str) -> CmdResult:
        self.events.append(f"copy {remote_dir}")
        return CmdResult(0)

    def __call__(self, argv: Sequence[str], cwd: Any = None, **_: Any) -> CmdResult:
        self.events.append(argv[0])
        return CmdResult(0, "99\n") if argv[0] == "sbatch" else CmdResult(0)


def test_a_remote_log_folder_is_checked_there_in_one_command(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    team = folder(tmp_path / "cluster_team", 0o2775)
    remote = folder(team / "work", 0o775)
    req = env.request(
        "remote_slurm", test_cmd="pytest accuracy/test_tiny.py -v", remote_work_dir=str(remote)
    )
    assert cli([], req).code == 0
    Ssh.made = []
    monkeypatch.setattr("trtllm_script_builder.process.host.OverSsh", Ssh)
    with pytest.raises(BuildError) as err:
        submit_mod.submit(env.work)
    lines = err.value.line().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"error: remote_work_dir: {remote} on login can be written by")
    assert lines[1].startswith(
        f"error: remote_work_dir: {team} (holding the log folder {remote}) on login can be "
        "written by its group and is not sticky"
    )
    (ssh,) = Ssh.made
    assert ssh.events == ["shell"]  # one command for every folder; nothing copied or started
    team.chmod(0o755)
    remote.chmod(0o755)
    assert submit_mod.submit(env.work).job_id == "99"
    assert Ssh.made[-1].events[0] == "shell" and "sbatch" in Ssh.made[-1].events


def test_a_remote_host_that_cannot_answer_stops_the_submit(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli([], env.request("remote_slurm", test_cmd="pytest accuracy/test_tiny.py")).code == 0

    class Mute(Ssh):
        def shell(self, line: str, input: Any = None, **_: Any) -> CmdResult:
            self.events.append("shell")
            return CmdResult(127, "", "sh: 1: stat: not found")

    Ssh.made = []
    monkeypatch.setattr("trtllm_script_builder.process.host.OverSsh", Mute)
    with pytest.raises(BuildError) as err:
        submit_mod.submit(env.work)
    assert "could not be checked on login (sh: 1: stat: not found)" in err.value.line()
    assert Ssh.made[-1].events == ["shell"]


@needs_root
@pytest.mark.parametrize("host", [Here(), ShellHost()], ids=["here", "over ssh"])
def test_a_link_another_user_made_on_the_way_to_the_log_folder_is_refused(
    tmp_path: Path, host: Any
) -> None:
    """A sticky /tmp-like folder, a private folder of ours, and a link to it another user made
    there: they can point it elsewhere between the check and the job."""
    tmp = folder(tmp_path / "tmp", 0o1777)
    real = folder(tmp_path / "real", 0o755)
    link = tmp / "jobs"
    link.symlink_to(real)
    os.lchown(link, OTHER_UID, OTHER_UID)
    (line,) = refusal([link / "w"], host)
    where = " on login" if host.remote else ""
    field = "remote_work_dir" if host.remote else "work_dir"
    assert line == (
        f"error: {field}: {link}{where} is a link uid {OTHER_UID} made on the way to the log "
        f"folder {link}/w: they can point it elsewhere between this check and the job; give "
        "the real folder's path (or a work_dir in a folder only you can write)"
    )
    os.lchown(link, 0, 0)
    check_log_folders(host, [str(link / "w")])


@needs_root
@pytest.mark.parametrize("host", [Here(), ShellHost()], ids=["here", "over ssh"])
def test_the_same_rules_hold_here_and_over_ssh(tmp_path: Path, host: Any) -> None:
    where = " on login" if host.remote else ""
    shared = folder(tmp_path / "shared", 0o777)
    sticky = folder(tmp_path / "sticky", 0o1777)
    theirs = folder(tmp_path / "theirs", 0o755)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    mine = folder(tmp_path / "mine", 0o755)
    (mine / "planted").symlink_to("/root/.netrc")
    os.lchown(mine / "planted", OTHER_UID, OTHER_UID)
    lines = refusal(
        [folder(shared / "a", 0o755), folder(sticky / "b", 0o755), theirs, mine, sticky / "new"],
        host,
    )
    assert [ln.split(": ", 2)[2].split(":")[0] for ln in lines] == [
        f"{shared} (holding the log folder {shared}/a){where} can be written by its group and "
        "others and is not sticky, so they can move the log folder away and put their own there",
        f"{theirs}{where} is owned by uid {OTHER_UID}, not by you (uid 0)",
        f"{mine}{where} holds 1 file(s) or link(s) another user made while they could write it",
    ]


def test_the_log_folders_are_each_jobs_folder_its_patterns_and_its_scripts_options(
    tmp_path: Path,
) -> None:
    from tests.conftest import job_spec
    from trtllm_script_builder.process.slurm_submit import Member, _Job, log_folders

    work = tmp_path / "a%b"
    spec = job_spec(
        work_dir=str(work),
        script_path=str(work / "x.slurm"),
        log_file_pattern="logs/x_%j.out",
        error_file_pattern="x_%j.err",
    )
    lines = ["#SBATCH --output=/elsewhere/a%%b/x_%j.out", "#SBATCH -e /errs/x_%j.err"]
    job = _Job(Member(work, ""), spec, work / "x.slurm", lines)
    assert log_folders([job], False, str(tmp_path)) == [
        str(tmp_path),
        str(work),
        f"{work}/logs",
        "/elsewhere/a%b",
        "/errs",
    ]
