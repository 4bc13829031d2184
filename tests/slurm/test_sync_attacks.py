"""Attacks on `sync` from the cluster side and from a second account: what the account's
login shell, ssh config and session environment hold, what another user planted in a
shared clone or beside it, and hostile remote paths. Real OpenSSH on loopback, real git,
the second account `tsbother` through `runuser`."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_git_sync import (
    HOST,
    World,
    check_synced,
    expected_tree,
    git,
    lock_of,
    refused,
    remote_tree,
    said_until,
    start_sync,
    sync,
    untouched,
    world,
)

from trtllm_script_builder.errors import BuildError, ToolFailed
from trtllm_script_builder.process.gitsync import sync_checkout
from trtllm_script_builder.process.ssh import SshRunner, SshTarget

__all__ = ["world"]  # the fixture, used here by name

OTHER_USER = "tsbother"


def _as_root() -> None:
    if os.getuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser (to act as a second account)")
    if subprocess.run(["id", OTHER_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "-m", OTHER_USER], check=True)


# ---------------------------------------------------------------- the account's ssh config


def test_a_user_ssh_config_with_its_own_remote_command_and_tty_still_syncs(
    world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The user's ssh config asks for a terminal and a command of its own for every host
    (`RequestTTY force`, `RemoteCommand`): a terminal would mangle the bundle's bytes and a
    RemoteCommand makes ssh refuse any command given on its command line."""
    config = Path(os.environ["TSB_SSH_CONFIG"])
    mine = tmp_path / "ssh_config"
    mine.write_text(
        config.read_text()
        + "Host *\n  RequestTTY force\n  RemoteCommand echo hijacked\n  ControlMaster no\n"
        "  ControlPath /nonexistent/%C\n"
    )
    monkeypatch.setenv("TSB_SSH_CONFIG", str(mine))
    git(world.work, "remote", "remove", "origin")  # a bundle: binary bytes on ssh's input
    try:
        res = sync(world)
    finally:
        SshRunner(SshTarget(HOST)).close()
    assert res.method == "bundle"
    check_synced(world, res.commit)


# ---------------------------------------------------------------- the cluster's environment


@pytest.fixture()
def git_env_sshd(tmp_path: Path) -> Iterator[Path]:
    """A cluster whose login sessions export GIT_DIR and GIT_WORK_TREE (an rc file of the
    account's, or sshd's SetEnv/AcceptEnv): a repository elsewhere that git would use."""
    from conftest import loopback_sshd

    elsewhere = tmp_path / "elsewhere"
    git(tmp_path, "init", "-q", str(elsewhere))
    (elsewhere / "precious.txt").write_text("not the clone's\n")
    env = {"GIT_DIR": str(elsewhere / ".git"), "GIT_WORK_TREE": str(elsewhere)}
    (tmp_path / "srv").mkdir()
    with loopback_sshd(tmp_path / "srv", env):
        yield elsewhere


def test_git_location_variables_of_the_cluster_session_are_not_followed(
    world: World, git_env_sshd: Path
) -> None:
    before = sorted(p.name for p in git_env_sshd.iterdir())
    res = sync(world)
    check_synced(world, res.commit)
    assert sorted(p.name for p in git_env_sshd.iterdir()) == before
    assert (git_env_sshd / "precious.txt").read_text() == "not the clone's\n"


# ---------------------------------------------------------------- hostile remote paths


@pytest.mark.parametrize(
    "name", ["with space", 'it\'s "q"', "$(touch pwned)", "-rf", "~root", "a\\b*?[x]"]
)
def test_a_remote_path_of_shell_characters_is_taken_as_written(world: World, name: str) -> None:
    world.remote = world.root / "cluster" / name / name
    res = sync(world)
    check_synced(world, res.commit)
    assert not (world.root / "cluster" / "pwned").exists() and not Path("pwned").exists()
    assert sorted(p.name for p in world.remote.parent.iterdir()) == [name]
    again = sync(world)
    assert again.method == "present"


# ---------------------------------------------------------------- what others planted


def test_hooks_and_fsmonitor_planted_in_the_cluster_clone_do_not_run(world: World) -> None:
    """A clone others may write (a team's, group-writable): a post-checkout hook and a
    `core.fsmonitor` command in its config are programs another user wrote; the sync's git
    runs neither."""
    git(world.root, "clone", "-q", str(world.origin), str(world.remote))
    proof = world.root / "ran"
    hook = world.remote / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\necho hook >> {proof}\n")
    hook.chmod(0o755)
    monitor = world.root / "monitor.sh"
    monitor.write_text(f"#!/bin/sh\necho fsmonitor >> {proof}\n")
    monitor.chmod(0o755)
    git(world.remote, "config", "core.fsmonitor", str(monitor))
    res = sync(world)
    assert not proof.exists(), proof.read_text()
    git(world.remote, "config", "--unset", "core.fsmonitor")  # the test's own git
    check_synced(world, res.commit)


def test_a_lock_planted_as_a_file_is_refused_and_kept(world: World) -> None:
    world.remote.parent.mkdir(parents=True)
    lock_of(world).write_text("not a folder\n")
    err = refused(world, ToolFailed)
    assert err.line() == (
        f"error: remote_repo_path: taking the sync lock of {HOST}:{world.remote} failed: "
        f"{lock_of(world)} is there and is not a lock folder; check that its folder can be "
        "written there"
    )
    assert lock_of(world).read_text() == "not a folder\n"
    assert not world.remote.exists()


# ---------------------------------------------------------------- the lock, as a second account


def _lock_as_other(clone: Path, wait: int, who: str) -> subprocess.Popen[str]:
    from trtllm_script_builder.process import gitsync
    from trtllm_script_builder.process.sync_lock import LOCK

    line = gitsync._line(LOCK, str(clone), str(wait), who)
    return subprocess.Popen(
        ["runuser", "-u", OTHER_USER, "--", "sh", "-c", line],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.fixture()
def team_clone(tmp_path: Path) -> Iterator[Path]:
    """A team's clone both accounts write, in a folder only root may write (a project folder
    an administrator made): the second account cannot make a lock beside the clone."""
    _as_root()
    base = Path(tempfile.mkdtemp(prefix="tsb-team-", dir="/tmp"))
    try:
        base.chmod(0o755)
        clone = base / "TensorRT-LLM"
        origin = tmp_path / "o.git"
        git(tmp_path, "init", "-q", "--bare", str(origin))
        git(base, "init", "-q", str(clone))
        git(base, "config", "--global", "--add", "safe.directory", str(clone))
        subprocess.run(["chmod", "-R", "a+rwX", str(clone)], check=True)
        yield clone
    finally:
        git(base, "config", "--global", "--unset-all", "safe.directory", str(clone), check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_an_account_that_cannot_write_beside_the_clone_locks_inside_it(team_clone: Path) -> None:
    p = _lock_as_other(team_clone, 5, "theirs:1")
    assert p.stdout is not None and p.stdin is not None
    assert p.stdout.readline() == f"lock={team_clone}/.git/tsb-sync.lock\n"
    assert p.stdout.readline() == "locked\n"
    lock = team_clone / ".git" / "tsb-sync.lock"
    assert lock.stat().st_uid != 0
    owner = (lock / "owner").read_text().split()
    assert owner[3:5] == [OTHER_USER, "theirs:1"] and owner[5].isdigit()
    p.stdin.close()
    assert p.wait(30) == 0
    assert not lock.exists()
    assert sorted(p.name for p in team_clone.parent.iterdir()) == ["TensorRT-LLM"]


def test_two_accounts_one_of_which_cannot_write_beside_the_clone_take_one_lock(
    team_clone: Path,
) -> None:
    """root may write beside the team's clone, the second account may not: both must still
    take the same lock, or both syncs change the clone at once."""
    from trtllm_script_builder.process import gitsync
    from trtllm_script_builder.process.host import Here
    from trtllm_script_builder.process.sync_lock import LOCK

    mine = Here().start(gitsync._line(LOCK, str(team_clone), "5", "mine:1"))
    try:
        lines = [mine.line(10) for _ in range(3)]
        assert lines == [
            f"lock={team_clone.parent}/.TensorRT-LLM.tsb-sync.lock",
            f"lock={team_clone}/.git/tsb-sync.lock",
            "locked",
        ]
        p = _lock_as_other(team_clone, 2, "theirs:1")
        out, _ = p.communicate("", timeout=60)
        said = out.splitlines()
        assert said[1].startswith("held=") and said[-1].startswith("busy="), said
    finally:
        assert mine.end(10) == 0
    assert sorted(p.name for p in team_clone.parent.iterdir()) == ["TensorRT-LLM"]
    assert not (team_clone / ".git" / "tsb-sync.lock").exists()


# ---------------------------------------------------------------- the socket folder, for real


def _connects(folder: Path | None = None) -> Path:
    """One real ssh call to the loopback host; the socket folder its master listens in."""
    from trtllm_script_builder.process.ssh import control_dir

    runner = SshRunner(SshTarget(HOST))
    try:
        res = runner.shell("echo ok")
        assert (res.rc, res.out) == (0, "ok\n"), res.err
        where = control_dir()
        assert [p.is_socket() for p in where.iterdir()] == [True]
        assert runner.check().rc == 0  # through the master
    finally:
        runner.close()
    return where


@pytest.mark.parametrize("length", [45, 46, 68, 69])
def test_socket_folders_at_the_length_limits_connect(
    world: World, monkeypatch: pytest.MonkeyPatch, length: int
) -> None:
    """%C (40 hex digits) up to 45 characters, a 16-digit name above; 69 is the longest
    folder whose socket, with ssh's temporary suffix, fits sun_path."""
    base = Path(tempfile.mkdtemp(prefix="tsb-len-", dir="/tmp"))
    try:
        folder = base / ("d" * (length - len(str(base)) - 1))
        assert len(str(folder)) == length
        monkeypatch.setenv("TSB_SSH_CONTROL_DIR", str(folder))
        assert _connects() == folder
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("name", ["Jane Doe", 'q"uote', "back\\slash", "hash#", "dollar$x", "p%d"])
def test_a_home_of_blanks_and_quotes_connects(
    world: World, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """~/.ssh/tsb-control in a home such as `/home/Jane Doe`: ssh would split the option's
    value at the blank."""
    base = Path(tempfile.mkdtemp(prefix="tsb-h-", dir="/tmp"))
    try:
        home = base / name
        home.mkdir()
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.delenv("TSB_SSH_CONTROL_DIR")
        assert _connects() == home / ".ssh" / "tsb-control"
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------- the account's login shell


@contextlib.contextmanager
def account_sshd(user: str, shell: str) -> Iterator[Path]:
    """A loopback sshd whose client logs in as `user` (made with login shell `shell`): that
    account's home."""
    from conftest import loopback_sshd

    _as_root()
    if subprocess.run(["id", user], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "-m", "-s", shell, user], check=True)
    subprocess.run(["usermod", "-s", shell, "-p", "*", user], check=True)
    base = Path(tempfile.mkdtemp(prefix="tsb-acct-", dir="/tmp"))
    base.chmod(0o755)  # sshd reads the account's authorized_keys as that account
    old = os.environ.get("TSB_SSH_CONFIG")
    try:
        with loopback_sshd(base) as sshd:
            config = base / "ssh_config"
            config.write_text(sshd.config.read_text().replace("User root", f"User {user}"))
            os.environ["TSB_SSH_CONFIG"] = str(config)
            home = base / "home"
            home.mkdir()
            shutil.chown(home, user)
            try:
                yield home
            finally:
                SshRunner(SshTarget(HOST)).close()
    finally:
        if old is not None:
            os.environ["TSB_SSH_CONFIG"] = old
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("shell", ["/bin/false", "/usr/sbin/nologin"])
def test_an_account_whose_login_shell_runs_nothing_is_named(world: World, shell: str) -> None:
    if not os.path.exists(shell):
        pytest.skip(f"no {shell} here")
    git(world.work, "remote", "remove", "origin")
    with account_sshd("tsbnoshell", shell) as home:
        with untouched(world), pytest.raises(ToolFailed) as err:
            sync_checkout(SshTarget(HOST), world.work, str(home / "TensorRT-LLM"))
        assert list(home.iterdir()) == []
    said = "exit status 1" if shell == "/bin/false" else "This account is currently not available."
    assert err.value.line() == (
        f"error: ssh_host: the account's login shell on {HOST} runs no command ({said}); give "
        f"the account a login shell that runs commands (`ssh {HOST} sh -c true` must work; "
        "/bin/false and nologin do not), or use another account"
    )
    assert err.value.exit_code == 3


@pytest.mark.parametrize("shell", ["fish", "tcsh", "dash"])
def test_an_account_whose_login_shell_is_not_sh_syncs_paths_of_shell_characters(
    world: World, shell: str
) -> None:
    """fish and csh read quotes, `$`, `!` and `;` otherwise than sh; the sync's scripts and a
    remote path full of them run as written."""
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed")
    git(world.work, "remote", "remove", "origin")  # a bundle: root's origin is not theirs
    with account_sshd(f"tsb{shell}", path) as home:
        there = home / "a b'c\"$(x)!{d};%e" / "TensorRT-LLM"
        with untouched(world):
            res = sync_checkout(SshTarget(HOST), world.work, str(there))
        assert res.method == "bundle"
        assert remote_tree(there) == expected_tree(world.work)
        assert there.stat().st_uid != 0
        again = sync_checkout(SshTarget(HOST), world.work, str(there))
        assert again.method == "present"
        assert sorted(p.name for p in there.parent.iterdir()) == ["TensorRT-LLM"]


# ---------------------------------------------------------------- stale code


@pytest.mark.parametrize("stat", ["minimal", "default"])
def test_an_edit_with_its_time_stamps_put_back_travels(world: World, stat: str) -> None:
    """A file staged, then changed to other bytes of the same size and its times put back
    (`touch -r`, as a tool that keeps times does), in a checkout whose git compares only
    the time stamp and size (`core.checkStat=minimal`, `core.trustctime=false`): the
    snapshot is of the content."""
    git(world.work, "config", "core.trustctime", "false")
    git(world.work, "config", "core.checkStat", stat)
    f = world.work / "cpp" / "kept.cpp"
    f.write_text("// staged version\n")
    git(world.work, "add", "cpp/kept.cpp")
    keep = world.root / "stamp"
    subprocess.run(["touch", "-r", str(f), str(keep)], check=True)
    f.write_text("// edited version\n")  # the same size
    subprocess.run(["touch", "-r", str(keep), str(f)], check=True)
    time.sleep(1.1)  # not racily clean: the index is older than this second
    res = sync(world)
    assert (world.remote / "cpp" / "kept.cpp").read_text() == "// edited version\n"
    check_synced(world, res.commit, dirty=False)


# ---------------------------------------------------------------- a sync killed at each step


@pytest.mark.parametrize(
    "step", ["_probe", "_create", "_send_bundle", "_checkout", "_build_outputs"]
)
@pytest.mark.parametrize("fresh", [True, False])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_a_sync_killed_at_any_step_leaves_nothing_the_next_does_not_remove(
    world: World, step: str, fresh: bool, sig: int
) -> None:
    """SIGKILL (nothing of the sync runs after it) or Ctrl-C at each step, with and without a
    clone there: the cluster side removes the lock and an unfinished clone (after Ctrl-C the
    sync's own temporaries are gone at once), and the next sync ends with nothing left
    anywhere: TMPDIR, the origin, the clone's .git, beside the clone."""
    git(world.work, "remote", "remove", "origin")  # bundles
    if not fresh:
        git(world.root, "clone", "-q", str(world.origin), str(world.remote))
    a = start_sync(world, world.work, step, world.root / "never")
    if step == "_create" and not fresh:
        a.wait(120)  # no clone to make: it never pauses there
    else:
        said_until(a, "tsb-pause")
        a.send_signal(sig)
        a.communicate(timeout=60)
        if sig == signal.SIGINT:
            assert a.returncode == -sig and list(world.tmp.iterdir()) == []
            # a new clone goes unless it was whole already (in place before _build_outputs)
            keep = [] if fresh and step != "_build_outputs" else [world.remote.name]
            deadline = time.monotonic() + 30  # the cluster side ends with the ssh session
            while [p.name for p in world.remote.parent.iterdir()] != keep:
                assert time.monotonic() < deadline, list(world.remote.parent.iterdir())
                time.sleep(0.1)
    with untouched(world):  # nothing left, after the next sync
        res = sync_checkout(SshTarget(HOST), world.work, str(world.remote), timeout=60)
    check_synced(world, res.commit)
    assert sorted(p.name for p in world.remote.parent.iterdir()) == ["TensorRT-LLM"]
    assert not (world.remote / ".git" / "tsb-sync.lock").exists()


def test_a_clone_path_linked_to_another_users_clone_is_refused_and_left_alone(
    world: World,
) -> None:
    _as_root()
    base = Path(tempfile.mkdtemp(prefix="tsb-theirs-", dir="/tmp"))
    try:
        base.chmod(0o755)
        theirs = base / "TensorRT-LLM"
        git(world.root, "clone", "-q", "--no-hardlinks", str(world.origin), str(theirs))
        shutil.chown(base, OTHER_USER)
        subprocess.run(["chown", "-R", OTHER_USER, str(theirs)], check=True)
        world.remote.parent.mkdir(parents=True)
        world.remote.symlink_to(theirs)
        before = {str(p): p.stat().st_mtime_ns for p in theirs.rglob("*") if p.is_file()}
        with pytest.raises(BuildError) as caught:
            sync_checkout(SshTarget(HOST), world.work, str(world.remote))
        err = caught.value
        assert list(world.tmp.iterdir()) == []
        assert {str(p): p.stat().st_mtime_ns for p in theirs.rglob("*") if p.is_file()} == before
        assert sorted(p.name for p in base.iterdir()) == ["TensorRT-LLM"]
        assert err.line() == (
            f"error: remote_repo_path: {HOST}:{world.remote} is a clone of another account "
            f"({OTHER_USER}), which git there refuses to work in; give a clone of your own (or "
            "a path that does not exist yet); for a team's clone its owner must let you write "
            "it and you must trust it (`git config --global --add safe.directory PATH` there)"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_another_accounts_live_lock_that_looks_stale_is_not_taken(team_clone: Path) -> None:
    """The second account's sync holds the lock, but its refresher is gone (killed): no
    refresh for 10 minutes, yet its shell runs on this host. root, which could remove the
    folder, waits and gives up naming it instead of taking it over."""
    import signal

    from trtllm_script_builder.process import gitsync
    from trtllm_script_builder.process.host import Here
    from trtllm_script_builder.process.sync_lock import LOCK

    line = gitsync._line(LOCK, str(team_clone), "5", "theirs:1")
    theirs = subprocess.Popen(
        ["runuser", "-u", OTHER_USER, "--", "sh", "-c", line],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert theirs.stdout is not None and theirs.stdin is not None
    lock = team_clone / ".git" / "tsb-sync.lock"
    try:
        assert theirs.stdout.readline() == f"lock={lock}\n"
        assert theirs.stdout.readline() == "locked\n"
        shell = (lock / "owner").read_text().split()[1]
        kids = subprocess.run(["ps", "-o", "pid=", "--ppid", shell], capture_output=True, text=True)
        for kid in kids.stdout.split():  # the refresher
            os.kill(int(kid), signal.SIGKILL)
        os.utime(lock, (time.time() - 600,) * 2)
        mine = Here().start(gitsync._line(LOCK, str(team_clone), "3", "mine:1"))
        said = [mine.line(30) for _ in range(4)]
        mine.end(10)
        assert said[2].startswith("held=") and said[3].startswith("busy="), said
        assert said[3].split()[3:5] == [OTHER_USER, "theirs:1"]
        assert (lock / "owner").read_text().split()[3:5] == [OTHER_USER, "theirs:1"]
    finally:
        theirs.stdin.close()
        assert theirs.wait(30) == 0
    assert not lock.exists()


@pytest.mark.parametrize("part", ["config", "hooks", ".", "modules"])
def test_a_clone_whose_git_folder_anyone_may_write_is_refused(world: World, part: str) -> None:
    """A git config every account may write can name programs git runs (core.sshCommand for
    the fetch from origin, a submodule's update command, filters): refused before any git
    step there, naming it; nothing it names runs."""
    git(world.root, "clone", "-q", str(world.origin), str(world.remote))
    proof = world.root / "ran"
    git(world.remote, "config", "core.sshCommand", f"touch {proof}; ssh")
    target = world.remote / ".git" / part
    if part == "modules":  # the submodules' repositories and their configs
        target.mkdir()
    target.chmod(0o666 if target.is_file() else 0o777)
    err = refused(world, BuildError)
    shown = world.remote / ".git" if part == "." else target
    assert err.line() == (
        f"error: remote_repo_path: {HOST}:{world.remote}: {shown} may be changed by every "
        "account there (world-writable), and git would run the programs its config names; "
        "make it writable by its owner only (`chmod o-w` there), then sync again"
    )
    assert not proof.exists()
    assert git(world.remote, "rev-parse", "HEAD") == git(world.origin, "rev-parse", "main")


def test_git_location_variables_here_are_not_followed(
    world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GIT_DIR, GIT_WORK_TREE and GIT_INDEX_FILE set in the user's shell (another checkout's):
    the sync reads repo_root's own repository and changes neither."""
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(world.origin), str(other))
    (other / "theirs.txt").write_text("the other checkout's\n")
    for name, value in [
        ("GIT_DIR", str(other / ".git")),
        ("GIT_WORK_TREE", str(other)),
        ("GIT_INDEX_FILE", str(other / ".git" / "index")),
    ]:
        monkeypatch.setenv(name, value)
    before = {str(p): p.read_bytes() for p in other.rglob("*") if p.is_file()}
    res = sync(world)
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_WORK_TREE")
    monkeypatch.delenv("GIT_INDEX_FILE")
    check_synced(world, res.commit)
    assert not (world.remote / "theirs.txt").exists()
    assert {str(p): p.read_bytes() for p in other.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(("length", "used"), [(69, "home"), (70, "tmpdir")])
def test_a_home_at_the_socket_length_limit(
    world: World, monkeypatch: pytest.MonkeyPatch, length: int, used: str
) -> None:
    """~/.ssh/tsb-control of 69 characters is used (its socket fits sun_path with ssh's
    suffix); of 70, the private folder in TMPDIR."""
    base = Path(tempfile.mkdtemp(prefix="tsb-hl-", dir="/tmp"))
    try:
        home = base / ("h" * (length - len(str(base)) - len("/.ssh/tsb-control") - 1))
        home.mkdir()
        control = home / ".ssh" / "tsb-control"
        assert len(str(control)) == length
        tmpdir = base / "t"
        tmpdir.mkdir(mode=0o700)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("TMPDIR", str(tmpdir))
        monkeypatch.delenv("TSB_SSH_CONTROL_DIR")
        want = control if used == "home" else tmpdir / f"tsb-ssh-{os.getuid()}"
        assert _connects() == want
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("shell", ["tcsh", "bash"])
def test_a_login_shell_that_prints_a_banner_still_syncs(world: World, shell: str) -> None:
    """The account's rc file prints lines of its own (a welcome, a module system's notes,
    one looking like the sync's own `key=value` lines) before every command."""
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed")
    git(world.work, "remote", "remove", "origin")
    with account_sshd(f"tsbb{shell}", path) as home:
        banner = "echo Welcome to the cluster; echo state=notdir; echo work=/tmp; echo locked\n"
        import pwd

        own = Path(pwd.getpwnam(f"tsbb{shell}").pw_dir)  # where the shell reads its rc files
        for rc in (".cshrc", ".bashrc", ".profile"):
            (own / rc).write_text(banner)
        said = subprocess.run(
            SshTarget(HOST).line_argv("true"), capture_output=True, text=True, check=True
        )
        assert said.stdout.startswith("Welcome to the cluster\n"), said
        runner = SshRunner(SshTarget(HOST))
        hello = runner.check().out.splitlines()
        assert hello == [str(own), str(own), f"tsbb{shell}"]
        log = home.parent / "job.log"
        log.write_bytes(b"line one\nstate=x\n\xff")
        assert runner.read_from(str(log), 5) == b"one\nstate=x\n\xff"
        there = home / "TensorRT-LLM"
        with untouched(world):
            res = sync_checkout(SshTarget(HOST), world.work, str(there))
        assert remote_tree(there) == expected_tree(world.work)
        again = sync_checkout(SshTarget(HOST), world.work, str(there))
        assert again.method == "present"
        assert sorted(p.name for p in home.iterdir() if not p.name.startswith(".")) == [
            "TensorRT-LLM"
        ]
        assert res.commit == again.commit


def test_a_lock_whose_pid_now_names_another_process_is_taken_over(world: World) -> None:
    """A lock of a shell that died with its login node (no refresh for 10 minutes), whose pid
    a process started since holds: not its holder (another start time), so the lock is
    taken over, not waited for."""
    node = os.uname().nodename
    lock = lock_of(world)
    lock.mkdir(parents=True)
    (lock / "owner").write_text(f"{node} {os.getpid()} 1001 alice laptop:7 1\n")
    os.utime(lock, (time.time() - 600,) * 2)
    said: list[str] = []
    res = sync_checkout(SshTarget(HOST), world.work, str(world.remote), timeout=5, say=said.append)
    assert not [s for s in said if s.startswith("waiting")], said
    check_synced(world, res.commit)
    assert sorted(p.name for p in world.remote.parent.iterdir()) == ["TensorRT-LLM"]


def test_lfs_pointers_the_cluster_asked_for_are_named_in_a_note(
    world: World, tmp_path: Path
) -> None:
    """GIT_LFS_SKIP_SMUDGE in the cluster's sessions (set to spare an LFS server): the files
    stay pointer text there, as asked, and the sync says so instead of passing silently."""
    from conftest import loopback_sshd
    from test_git_sync import _committed_lfs_file

    git(world.root, "clone", "-q", str(world.origin), str(world.remote))
    head = _committed_lfs_file(world)
    for key, value in [("process", ""), ("smudge", "cat"), ("required", "false")]:
        git(world.remote, "config", f"filter.lfs.{key}", value)
    (tmp_path / "srv").mkdir()
    said: list[str] = []
    with loopback_sshd(tmp_path / "srv", {"GIT_LFS_SKIP_SMUDGE": "1"}):
        res = sync_checkout(SshTarget(HOST), world.work, str(world.remote), say=said.append)
    assert res.commit == head
    note = (
        f"Git LFS files at {HOST}:{world.remote} hold pointer text, not their content "
        "(libkernels.a): GIT_LFS_SKIP_SMUDGE is set there; run `git lfs pull` in the clone "
        "for them"
    )
    assert note in res.notes and f"warning: {note}" in said
    assert (world.remote / "libkernels.a").read_bytes().startswith(b"version https://git-lfs")
