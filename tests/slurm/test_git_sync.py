"""`sync_checkout` and `sync WORK_DIR` over a real OpenSSH server on loopback, against real git
repositories: a bare origin, the user's clone, and the cluster's clone under another folder.

Every test takes a fingerprint of the user's checkout (every file's bytes, .git included,
`git status --porcelain`, `git stash list`, `git for-each-ref`) before and after, and checks
that the sync left no temporary folder, file or branch behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from tests.conftest import make_repo
from trtllm_script_builder.cli import main
from trtllm_script_builder.errors import BuildError, ToolFailed
from trtllm_script_builder.process.gitsync import (
    SyncResult,
    check_remote_path,
    repo_key,
    sync_checkout,
)
from trtllm_script_builder.process.ssh import SshTarget

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import LoopbackSshd

HOST = "tsb-loopback"
DOWN = "tsb-nowhere"  # LoopbackSshd.down: in the same ssh config, a closed port


def git(cwd: Path, *args: str, check: bool = True) -> str:
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
    if check:
        assert res.returncode == 0, f"git {' '.join(args)}: {res.stderr}"
    return res.stdout


# ---------------------------------------------------------------- the pure parts


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("git@github.com:NVIDIA/TensorRT-LLM.git", "https://github.com/nvidia/TensorRT-LLM"),
        ("ssh://git@github.com/NVIDIA/TensorRT-LLM.git/", "git@github.com:NVIDIA/TensorRT-LLM"),
        ("/srv/git/trt.git", "file:///srv/git/trt.git"),
    ],
)
def test_repo_key_names_one_repository_in_every_url_form(a: str, b: str) -> None:
    assert repo_key(a) == repo_key(b)


def test_repo_key_tells_forks_and_hosts_apart() -> None:
    upstream = repo_key("git@github.com:NVIDIA/TensorRT-LLM.git")
    assert repo_key("git@github.com:alice/TensorRT-LLM.git") != upstream
    assert repo_key("git@gitlab.com:NVIDIA/TensorRT-LLM.git") != upstream
    assert repo_key("/srv/git/Trt.git") != repo_key("/srv/git/trt.git")  # paths keep case


@pytest.mark.parametrize("bad", ["relative/path", "-oProxyCommand=x", "/", "/a\nb", ""])
def test_remote_path_must_be_absolute_and_plain(bad: str) -> None:
    with pytest.raises(BuildError) as err:
        check_remote_path(bad)
    assert err.value.line().startswith("error: remote_repo_path: ")
    assert err.value.exit_code == 2


def test_repo_root_must_be_the_top_of_a_checkout_with_a_commit(tmp_path: Path) -> None:
    target = SshTarget("never-contacted.invalid")  # refused before any ssh
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(BuildError, match="is not a git checkout"):
        sync_checkout(target, plain, "/srv/trt")
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    with pytest.raises(BuildError) as err:
        sync_checkout(target, repo, "/srv/trt")
    assert err.value.line() == f"error: repo_root: {repo} has no commit yet; commit once, then sync"
    (repo / "sub").mkdir()
    (repo / "sub" / "f").write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    with pytest.raises(BuildError) as err:
        sync_checkout(target, repo / "sub", "/srv/trt")
    assert err.value.line() == (
        f"error: repo_root: {repo / 'sub'} is a folder inside the git checkout {repo}, not its "
        "top; give the top folder of your TensorRT-LLM clone"
    )
    assert err.value.exit_code == 2


# ---------------------------------------------------------------- sshd on loopback


@pytest.fixture(scope="module")
def sshd_session_env() -> dict[str, str]:
    """The test's submodules are local folders, which git fetches only when allowed."""
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "protocol.file.allow",
        "GIT_CONFIG_VALUE_0": "always",
    }


# ---------------------------------------------------------------- repositories


@dataclass
class World:
    root: Path
    origin: Path  # bare
    work: Path  # the user's checkout
    remote: Path  # remote_repo_path (on loopback, so the test can read it)
    tmp: Path  # TMPDIR of the sync


def _origin_and_clone(root: Path) -> tuple[Path, Path]:
    origin = root / "origin.git"
    git(root, "init", "-q", "--bare", "-b", "main", str(origin))
    first = root / "first"
    git(root, "init", "-q", "-b", "main", str(first))
    make_repo(first)
    (first / "cpp").mkdir()
    for name in ("kept.cpp", "staged.cpp", "unstaged.cpp", "deleted.cpp"):
        (first / "cpp" / name).write_text(f"// {name}\n")
    (first / ".gitignore").write_text("build/\n*.log\n")
    git(first, "add", "-A")
    git(first, "commit", "-qm", "first")
    git(first, "push", "-q", str(origin), "main")
    work = root / "work"
    git(root, "clone", "-q", str(origin), str(work))
    return origin, work


def dirty_up(work: Path) -> None:
    """A commit, a stash entry, then a staged, an unstaged, an untracked, an ignored and a
    deleted file."""
    (work / "cpp" / "kept.cpp").write_text("// kept, second commit\n")
    git(work, "commit", "-qam", "second")
    (work / "cpp" / "kept.cpp").write_text("// stashed away\n")
    git(work, "stash", "-q")
    (work / "cpp" / "staged.cpp").write_text("// staged change\n")
    git(work, "add", "cpp/staged.cpp")
    (work / "cpp" / "unstaged.cpp").write_text("// unstaged change\n")
    (work / "cpp" / "new_untracked.cpp").write_text("// untracked\n")
    (work / "build").mkdir()
    (work / "build" / "ignored.o").write_bytes(b"\0ignored object")
    (work / "run.log").write_text("ignored log\n")
    (work / "cpp" / "deleted.cpp").unlink()


@pytest.fixture
def world(sshd_loopback: LoopbackSshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    origin, work = _origin_and_clone(tmp_path)
    dirty_up(work)
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return World(tmp_path, origin, work, tmp_path / "cluster" / "TensorRT-LLM", tmp)


def fingerprint(repo: Path) -> dict[str, str]:
    """Every file under repo (.git included) by its bytes, plus what git says of its state."""
    prints = {}
    for path in sorted(repo.rglob("*")):
        if path.is_file() and not path.is_symlink():
            prints[str(path.relative_to(repo))] = hashlib.sha256(path.read_bytes()).hexdigest()
    prints["<status>"] = git(repo, "--no-optional-locks", "status", "--porcelain")
    prints["<stash>"] = git(repo, "stash", "list")
    prints["<refs>"] = git(repo, "for-each-ref")
    prints["<head>"] = git(repo, "rev-parse", "HEAD")
    return prints


def expected_tree(work: Path) -> dict[str, str]:
    """What should reach the cluster: tracked and untracked-not-ignored files, as they are."""
    names = git(work, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return {
        n: hashlib.sha256((work / n).read_bytes()).hexdigest()
        for n in names.split("\0")
        if n and (work / n).is_file()
    }


def remote_tree(remote: Path) -> dict[str, str]:
    return {
        str(p.relative_to(remote)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(remote.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(remote).parts
    }


def no_leftovers(w: World) -> None:
    assert list(w.tmp.iterdir()) == [], "a temporary folder was left behind"
    assert "tsb-sync" not in git(w.origin, "for-each-ref"), "a temporary branch was left"
    if (w.remote / ".git").is_dir():
        assert not list((w.remote / ".git").glob("tsb-sync-*")), "a bundle was left there"
        assert "tsb-sync" not in git(w.remote, "for-each-ref")


def check_synced(w: World, commit: str, dirty: bool = True) -> None:
    assert git(w.remote, "rev-parse", "HEAD").strip() == commit
    assert git(w.remote, "status", "--porcelain") == ""
    expected = expected_tree(w.work)
    assert remote_tree(w.remote) == expected
    if not dirty:
        return
    assert "cpp/new_untracked.cpp" in expected and "cpp/staged.cpp" in expected
    assert not (w.remote / "cpp" / "deleted.cpp").exists()
    assert not (w.remote / "build").exists() and not (w.remote / "run.log").exists()
    assert (w.remote / "cpp" / "kept.cpp").read_text() == "// kept, second commit\n"


@contextlib.contextmanager
def untouched(w: World) -> Iterator[None]:
    """The block must leave the user's checkout as it was and no temporary folder, file or
    branch behind."""
    before = fingerprint(w.work)
    yield
    assert fingerprint(w.work) == before
    no_leftovers(w)


def sync(w: World) -> SyncResult:
    """sync_checkout of the user's checkout to w.remote, leaving it `untouched`."""
    with untouched(w):
        return sync_checkout(SshTarget(HOST), w.work, str(w.remote))


def refused(w: World, kind: type[BuildError], host: str = HOST) -> BuildError:
    """sync_checkout's refusal (a `kind`) to sync to host:w.remote, leaving it `untouched`."""
    with untouched(w), pytest.raises(kind) as err:
        sync_checkout(SshTarget(host), w.work, str(w.remote))
    return err.value


# ---------------------------------------------------------------- the two methods


def test_shared_origin_clones_then_pushes_a_temporary_branch(world: World) -> None:
    head = git(world.work, "rev-parse", "HEAD").strip()
    res = sync(world)
    assert (res.method, res.snapshot) == ("push", True)
    assert git(world.remote, "rev-parse", f"{res.commit}^").strip() == head
    # the snapshot exists only there: not even its objects were written here
    assert git(world.work, "cat-file", "-t", res.commit, check=False) == ""
    assert any("cloned" in n for n in res.notes)
    check_synced(world, res.commit)

    # the same state again gives the same commit, which the cluster has
    again = sync(world)
    assert (again.commit, again.method) == (res.commit, "present")

    # a new change goes as a new snapshot, over the shared origin
    (world.work / "cpp" / "unstaged.cpp").write_text("// changed again\n")
    third = sync(world)
    assert third.method == "push" and third.commit != res.commit
    check_synced(world, third.commit)


def test_no_shared_origin_sends_bundles(world: World) -> None:
    git(world.work, "remote", "remove", "origin")
    res = sync(world)
    assert res.method == "bundle"
    assert any("empty repository" in n for n in res.notes)
    check_synced(world, res.commit)

    # the second bundle leaves out what the cluster has
    (world.work / "cpp" / "second_untracked.cpp").write_text("// more\n")
    again = sync(world)
    assert again.method == "bundle" and again.commit != res.commit
    check_synced(world, again.commit)


def test_a_clean_checkout_sends_its_head(world: World) -> None:
    git(world.work, "checkout", "-q", "--", ".")
    git(world.work, "reset", "-q", "--hard")
    git(world.work, "clean", "-q", "-fd")
    res = sync_checkout(SshTarget(HOST), world.work, str(world.remote))
    assert (res.snapshot, res.commit) == (False, git(world.work, "rev-parse", "HEAD").strip())
    check_synced(world, res.commit, dirty=False)


def test_a_refused_push_falls_back_to_a_bundle(world: World) -> None:
    hook = world.origin / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'pushes are closed' >&2\nexit 1\n")
    hook.chmod(0o755)
    git(world.root, "clone", "-q", str(world.origin), str(world.remote))
    res = sync(world)
    assert res.method == "bundle"
    assert any("refused" in n for n in res.notes), res.notes
    check_synced(world, res.commit)


def test_submodules_follow_the_snapshot(
    sshd_loopback: LoopbackSshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster's submodule sits at the commit the local checkout has (a new one, pushed to
    the submodule's origin); uncommitted changes inside it stay here and get a note."""
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    sub_origin = tmp_path / "lib.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(sub_origin))
    lib = tmp_path / "lib"
    git(tmp_path, "clone", "-q", str(sub_origin), str(lib))
    (lib / "lib.h").write_text("// v1\n")
    git(lib, "add", "-A")
    git(lib, "commit", "-qm", "v1")
    git(lib, "push", "-q", "origin", "HEAD:main")
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    first = tmp_path / "first"
    git(tmp_path, "init", "-q", "-b", "main", str(first))
    (first / "README").write_text("top\n")
    git(first, "submodule", "-q", "add", str(sub_origin), "3rdparty/lib")
    git(first, "add", "-A")
    git(first, "commit", "-qm", "with lib")
    git(first, "push", "-q", str(origin), "main")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", "--recurse-submodules", str(origin), str(work))
    # the submodule moves to a new, pushed commit; one file in it is edited and not committed
    (lib / "lib.h").write_text("// v2\n")
    git(lib, "commit", "-qam", "v2")
    git(lib, "push", "-q", "origin", "HEAD:main")
    inner = work / "3rdparty" / "lib"
    git(inner, "pull", "-q", "origin", "main")
    (inner / "extra.h").write_text("// not committed\n")
    before = fingerprint(work)
    remote = tmp_path / "cluster" / "TensorRT-LLM"
    res = sync_checkout(SshTarget(HOST), work, str(remote))
    assert fingerprint(work) == before
    assert any("submodule 3rdparty/lib has uncommitted changes" in n for n in res.notes)
    there = remote / "3rdparty" / "lib"
    assert git(there, "rev-parse", "HEAD") == git(inner, "rev-parse", "HEAD")
    assert (there / "lib.h").read_text() == "// v2\n" and not (there / "extra.h").exists()
    assert git(remote, "status", "--porcelain") == ""

    # --no-submodules leaves the cluster's submodule checkout where it is
    (lib / "lib.h").write_text("// v3\n")
    git(lib, "commit", "-qam", "v3")
    git(lib, "push", "-q", "origin", "HEAD:main")
    git(inner, "pull", "-q", "origin", "main")
    kept = sync_checkout(SshTarget(HOST), work, str(remote), submodules=False)
    assert git(remote, "rev-parse", "HEAD").strip() == kept.commit
    assert (there / "lib.h").read_text() == "// v2\n"


# ---------------------------------------------------------------- refusals and failures


def test_cluster_changes_are_refused_without_force(world: World) -> None:
    first = sync_checkout(SshTarget(HOST), world.work, str(world.remote))
    (world.remote / "cpp" / "kept.cpp").write_text("// edited on the cluster\n")
    (world.remote / "scratch.txt").write_text("cluster notes\n")
    (world.work / "cpp" / "unstaged.cpp").write_text("// newer\n")
    err = refused(world, BuildError)
    line = err.line()
    assert err.exit_code == 2 and "\n" not in line
    assert line.startswith(f"error: remote_repo_path: {HOST}:{world.remote} has changes of its own")
    assert "cpp/kept.cpp" in line and line.endswith("or pass --force to discard them")
    assert (world.remote / "cpp" / "kept.cpp").read_text() == "// edited on the cluster\n"
    assert git(world.remote, "rev-parse", "HEAD").strip() == first.commit

    forced = sync_checkout(SshTarget(HOST), world.work, str(world.remote), force=True)
    assert any("discarded 2 change(s)" in n for n in forced.notes)
    check_synced(world, forced.commit)


def test_an_unreachable_host_changes_nothing(world: World) -> None:
    err = refused(world, ToolFailed, DOWN)
    assert err.exit_code == 3
    assert err.line().startswith(f"error: ssh_host: ssh {DOWN}: ")
    assert not world.remote.exists()


def test_a_remote_path_that_is_a_file_is_refused(world: World) -> None:
    world.remote.parent.mkdir(parents=True)
    world.remote.write_text("not a folder\n")
    err = refused(world, BuildError)
    assert err.exit_code == 2
    assert err.line() == (
        f"error: remote_repo_path: {HOST}:{world.remote} is not a folder; give the folder of "
        "the checkout there (or a path that does not exist yet)"
    )
    assert world.remote.read_text() == "not a folder\n"


def test_a_failed_fetch_midway_removes_the_new_clone(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git on the cluster fails to fetch the bundle (as on a full disk): the sync fails after
    the new repository was made there and the bundle sent, and leaves nothing behind."""
    from trtllm_script_builder.process import gitsync

    git(world.work, "remote", "remove", "origin")  # a bundle into a new repository
    fake = world.root / "fakebin"
    fake.mkdir()
    (fake / "git").write_text(
        '#!/bin/sh\ncase " $* " in *" fetch "*) echo "fatal: disk full" >&2; exit 128;; esac\n'
        f'exec {shutil.which("git")} "$@"\n'
    )
    (fake / "git").chmod(0o755)
    monkeypatch.setattr(gitsync, "_FETCH_BUNDLE", f"PATH={fake}:$PATH\n{gitsync._FETCH_BUNDLE}")
    err = refused(world, ToolFailed)
    assert err.exit_code == 3
    assert err.line() == (
        f"error: remote_repo_path: sending the snapshot to {HOST}:{world.remote} failed: "
        "fatal: disk full; check the free space and the permissions there"
    )
    assert not world.remote.exists() and list(world.remote.parent.iterdir()) == []


# ---------------------------------------------------------------- the command


def test_sync_command_reads_the_job_spec(world: World, tmp_path: Path) -> None:
    env = json.loads(Path("examples/slurm_env_remote.json").read_text())
    env["ssh_host"] = HOST
    (tmp_path / "env.json").write_text(json.dumps(env))
    request = {
        "execution_scenario": "remote_slurm",
        "work_dir": str(tmp_path / "job"),
        "repo_root": str(world.work),
        "bench_cmd": "trtllm-bench --model org/Tiny-Model throughput --dataset /d.json --tp 1",
        "partition": "gpu",
        "account": "tsb",
        "slurm_env_file": str(tmp_path / "env.json"),
        "remote_repo_path": str(world.remote),
        "llm_models_root": "/models",
    }
    (tmp_path / "req.json").write_text(json.dumps(request))
    built = CliRunner().invoke(main, ["build", str(tmp_path / "req.json")])
    assert built.exit_code == 0, built.output
    before = fingerprint(world.work)
    res = CliRunner().invoke(main, ["sync", str(tmp_path / "job")])
    assert res.exit_code == 0, res.output
    commit = res.stdout.strip()
    check_synced(world, commit)
    assert fingerprint(world.work) == before

    spec = json.loads((tmp_path / "job" / "job_spec.json").read_text())
    del spec["remote_repo_path"]
    (tmp_path / "job" / "job_spec.json").write_text(json.dumps(spec))
    res = CliRunner().invoke(main, ["sync", str(tmp_path / "job")])
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "error: remote_repo_path: job_spec.json has no remote_repo_path; build the job for "
        "remote_slurm (remote_repo_path names the cluster's clone)"
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_sync_leaves_no_temporary_folder(world: World, sig: int) -> None:
    """SIGTERM and SIGHUP run the sync's cleanups too (decision temporaries-under-signals): its
    snapshot folder in TMPDIR goes, the checkout and the cluster side are as they were."""
    # Paused (a wrapper of the test's own) once the snapshot is made, nothing sent yet; the
    # signals are exceptions as the command line's entry makes them.
    code = (
        "import sys, time; from pathlib import Path\n"
        "from trtllm_script_builder.atomic import signals_to_exceptions\n"
        "from trtllm_script_builder.process import gitsync\n"
        "from trtllm_script_builder.process.ssh import SshTarget\n"
        "snapshot = gitsync._snapshot\n"
        "def paused(*a):\n"
        "    made = snapshot(*a)\n"
        "    print('tsb-pause snapshot', file=sys.stderr, flush=True)\n"
        "    time.sleep(5)\n"
        "    return made\n"
        "gitsync._snapshot = paused\n"
        "with signals_to_exceptions():\n"
        "    gitsync.sync_checkout(SshTarget(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])\n"
    )
    env = {**os.environ, "TMPDIR": str(world.tmp)}
    with untouched(world):
        p = subprocess.Popen(
            [sys.executable, "-c", code, HOST, str(world.work), str(world.remote)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert p.stderr is not None
        assert p.stderr.readline().strip() == "tsb-pause snapshot"
        assert [t.name[:14] for t in world.tmp.iterdir()] == [".tsb-sync.tsb-"]
        p.send_signal(sig)
        p.communicate(timeout=60)
        assert p.returncode == -sig
    assert not world.remote.exists()


# ---------------------------------------------------------------- what a sync must not do


def test_an_edit_in_the_second_it_was_staged_travels(world: World) -> None:
    """git's racy-stat case: a file staged, then changed to other bytes of the same size with
    the same time stamps as the index holds for it, in the second the index was written. The
    user's `git status` sees the change (git compares the content of a racily clean file);
    the snapshot must carry the content too."""
    git(world.work, "config", "core.trustctime", "false")
    f = world.work / "cpp" / "kept.cpp"
    f.write_text("// staged version\n")
    stamp = (int(time.time()) - 100) * 10**9  # the second the file was staged in, long ago
    os.utime(f, ns=(stamp, stamp))
    git(world.work, "add", "cpp/kept.cpp")
    f.write_text("// edited version\n")  # the same size
    os.utime(f, ns=(stamp, stamp))
    index = world.work / ".git" / "index"
    os.utime(index, ns=(stamp, stamp))  # written in the same second as the file
    assert "kept.cpp" in git(world.work, "--no-optional-locks", "status", "--porcelain")
    res = sync(world)
    assert (world.remote / "cpp" / "kept.cpp").read_text() == "// edited version\n"
    check_synced(world, res.commit, dirty=False)


def test_an_interrupted_push_leaves_no_branch_and_a_killed_ones_goes_next_time(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trtllm_script_builder.process import gitsync

    git(world.root, "clone", "-q", str(world.origin), str(world.remote))
    real = gitsync._Local.git
    calls: list[str] = []

    def interrupted(self: object, args: list[str], *a: object, **k: object) -> object:
        done = real(self, args, *a, **k)  # type: ignore[arg-type]
        if args[0] == "push" and not calls:
            calls.append("push")
            raise KeyboardInterrupt  # Ctrl-C once the branch is there
        return done

    monkeypatch.setattr(gitsync._Local, "git", interrupted)
    with untouched(world), pytest.raises(KeyboardInterrupt):
        sync_checkout(SshTarget(HOST), world.work, str(world.remote))
    monkeypatch.setattr(gitsync._Local, "git", real)

    # what a SIGKILLed sync of this checkout left, and a branch of another checkout's sync
    tag = gitsync._checkout_tag(gitsync._open_checkout(world.work))
    head = git(world.work, "rev-parse", "HEAD").strip()
    mine, other = f"tsb-sync/{tag}-{head[:12]}-0badf00d", "tsb-sync/0123456789ab-in-flight"
    for ref in (mine, other):
        git(world.work, "push", "-q", str(world.origin), f"{head}:refs/heads/{ref}")
    res = sync_checkout(SshTarget(HOST), world.work, str(world.remote))
    assert res.method == "push"
    assert git(world.origin, "for-each-ref", "--format=%(refname)", "refs/heads/tsb-sync") == (
        f"refs/heads/{other}\n"
    )
    # killed once the cluster had fetched: the next sync sends nothing, and still removes it
    git(world.work, "push", "-q", str(world.origin), f"{head}:refs/heads/{mine}")
    again = sync_checkout(SshTarget(HOST), world.work, str(world.remote))
    assert (again.commit, again.method) == (res.commit, "present")
    assert git(world.origin, "for-each-ref", "--format=%(refname)", "refs/heads/tsb-sync") == (
        f"refs/heads/{other}\n"
    )


def test_a_push_url_elsewhere_gets_nothing(world: World) -> None:
    """origin's pushurl names a fork: the snapshot goes where the cluster fetches from."""
    fork = world.root / "fork.git"
    git(world.root, "clone", "-q", "--bare", str(world.origin), str(fork))
    git(world.work, "config", "remote.origin.pushurl", str(fork))

    def files(repo: Path) -> dict[str, bytes]:
        return {str(p): p.read_bytes() for p in repo.rglob("*") if p.is_file()}

    before = files(fork)
    res = sync(world)
    assert res.method == "push"
    check_synced(world, res.commit)
    assert files(fork) == before


@pytest.mark.parametrize("rule", ["pushInsteadOf", "insteadOf"])
def test_a_push_rewritten_to_a_fork_gets_nothing(world: World, rule: str) -> None:
    """The user's git config rewrites the origin's URL for pushes (or for everything) to a
    fork; the cluster's clone reads the origin: nothing goes to the fork, a bundle goes to the
    cluster and a note says why."""
    fork = world.root / "fork.git"
    git(world.root, "clone", "-q", "--bare", str(world.origin), str(fork))
    git(world.root, "clone", "-q", str(world.origin), str(world.remote))
    git(world.work, "config", f"url.{fork}.{rule}", str(world.origin))
    pushed = subprocess.run(
        ["git", "-C", str(world.work), "push", "--dry-run", "--porcelain", str(world.origin), "HEAD:x"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    assert f"To {fork}" in pushed  # git itself sends a push of the origin's URL to the fork

    def files(repo: Path) -> dict[str, bytes]:
        return {str(p): p.read_bytes() for p in repo.rglob("*") if p.is_file()}

    before = files(fork)
    res = sync(world)
    assert res.method == "bundle"
    assert (
        f"a push to origin ({world.origin}) goes to {fork} (url.<base>.pushInsteadOf or "
        "insteadOf in your git config), which the cluster does not read: not pushed"
    ) in res.notes
    check_synced(world, res.commit)
    assert files(fork) == before


@pytest.mark.parametrize(
    ("url", "rules", "push_rules", "target"),
    [
        ("git@h:o/r", [], [], "git@h:o/r"),
        ("git@h:o/r", [("ssh://x/", "git@h:")], [], "ssh://x/o/r"),
        ("git@h:o/r", [("ssh://x/", "git@h:")], [("me@f:", "git@h:o")], "me@f:/r"),
        # the longest prefix wins; of equal ones the first
        (
            "https://h/o/r",
            [("A", "https://h/"), ("B", "https://h/o/"), ("C", "https://h/o/")],
            [],
            "Br",
        ),
    ],
)
def test_push_target_rewrites_as_git_does(
    url: str,
    rules: list[tuple[str, str]],
    push_rules: list[tuple[str, str]],
    target: str,
    tmp_path: Path,
) -> None:
    from trtllm_script_builder.process.gitsync import push_target

    assert push_target(url, rules, push_rules) == target
    # git's own answer for the fetch side (ls-remote --get-url applies insteadOf)
    repo = tmp_path / "r"
    git(tmp_path, "init", "-q", str(repo))
    for base, prefix in rules:
        git(repo, "config", "--add", f"url.{base}.insteadOf", prefix)
    fetched = git(repo, "ls-remote", "--get-url", url).strip()
    assert fetched == (push_target(url, rules, []))


def test_git_lfs_files_travel_as_their_content(world: World) -> None:
    if shutil.which("git-lfs") is None:
        pytest.skip("git-lfs is not installed")
    git(world.work, "lfs", "install", "--local")
    (world.work / ".gitattributes").write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")
    (world.work / "weights.bin").write_bytes(b"committed weights\n")
    git(world.work, "add", ".gitattributes", "weights.bin")
    git(world.work, "commit", "-qm", "lfs")
    git(world.work, "push", "-q", "origin", "HEAD:main")
    (world.work / "weights.bin").write_bytes(b"changed weights\n")
    (world.work / "new.bin").write_bytes(b"new weights\n")
    res = sync(world)  # .git/lfs of the user's checkout included: nothing written there
    assert (world.remote / "weights.bin").read_bytes() == b"changed weights\n"
    assert (world.remote / "new.bin").read_bytes() == b"new weights\n"
    assert git(world.remote, "rev-parse", "HEAD").strip() == res.commit


def _committed_lfs_file(world: World) -> str:
    """A Git LFS file committed and pushed without its object (the pre-push hook skipped):
    HEAD."""
    if shutil.which("git-lfs") is None:
        pytest.skip("git-lfs is not installed")
    git(world.work, "lfs", "install", "--local")
    (world.work / ".gitattributes").write_text("*.a filter=lfs diff=lfs merge=lfs -text\n")
    (world.work / "libkernels.a").write_bytes(b"!<arch>\nthe static library\n")
    # written long before the index: not racily clean, so the snapshot keeps the pointer
    os.utime(world.work / "libkernels.a", (time.time() - 100,) * 2)
    git(world.work, "add", ".gitattributes", "libkernels.a")
    git(world.work, "commit", "-qm", "lfs")
    git(world.work, "push", "-q", "--no-verify", "origin", "HEAD:main")  # the object stays here
    git(world.work, "stash", "-q", "-u")
    return git(world.work, "rev-parse", "HEAD").strip()


def test_git_lfs_pointers_on_the_cluster_are_refused(world: World) -> None:
    """A cluster without git-lfs (its clone's filter is a plain copy) would hold the pointer
    text of a committed LFS file: the sync says so and fails instead of passing it on."""
    git(world.root, "clone", "-q", str(world.origin), str(world.remote))
    head = _committed_lfs_file(world)
    for key, value in [("process", ""), ("smudge", "cat"), ("required", "false")]:
        git(world.remote, "config", f"filter.lfs.{key}", value)
    err = refused(world, ToolFailed)
    assert err.line() == (
        f"error: remote_repo_path: {HOST}:{world.remote} is at {head[:12]} but its Git LFS "
        "files hold pointer text, not their content (libkernels.a); install git-lfs there, run "
        "`git lfs install` and `git lfs pull` in the clone (the objects must be on origin's LFS "
        "server: `git lfs push origin HEAD` here), then sync again"
    )
    assert (world.remote / "libkernels.a").read_bytes().startswith(b"version https://git-lfs")


def test_git_lfs_objects_the_cluster_cannot_get_are_named(world: World) -> None:
    """git-lfs set up on the cluster, the object not on origin's LFS server: the checkout's
    smudge fails, and the refusal names the file and the fix, not git-lfs's progress line."""
    if not git(world.root, "config", "--get", "filter.lfs.process", check=False).strip():
        pytest.skip("git-lfs is not set up for every repository here (git lfs install --system)")
    head = _committed_lfs_file(world)
    err = refused(world, ToolFailed)
    assert err.line() == (
        f"error: remote_repo_path: checking out {head[:12]} at {HOST}:{world.remote} failed: "
        "Git LFS could not get the content of libkernels.a there; push the LFS objects to "
        "origin's LFS server (`git lfs push origin HEAD` here), or let the cluster reach it, then "
        "sync again"
    )
    assert not world.remote.exists()  # the new clone went


def test_a_killed_syncs_snapshot_goes_with_the_next_sync(world: World) -> None:
    code = (
        "import os, signal, sys; from pathlib import Path\n"
        "from trtllm_script_builder.process import gitsync\n"
        "from trtllm_script_builder.process.ssh import SshTarget\n"
        "snapshot = gitsync._snapshot\n"
        "def killed(*a):\n"
        "    snapshot(*a)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "gitsync._snapshot = killed\n"
        "gitsync.sync_checkout(SshTarget(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])\n"
    )
    env = {**os.environ, "TMPDIR": str(world.tmp)}
    p = subprocess.run(
        [sys.executable, "-c", code, HOST, str(world.work), str(world.remote)], env=env
    )
    assert p.returncode == -signal.SIGKILL
    left = list(world.tmp.iterdir())
    assert len(left) == 1 and any(left[0].rglob("index"))  # the snapshot, untracked files too
    sync(world)  # leaves world.tmp empty


# ---------------------------------------------------------------- two syncs of one path

# A sync in a process of its own, said lines on stderr, the commit on stdout. With a name, that
# step of gitsync waits (after printing `tsb-pause NAME`) until the file `go` exists.
_SYNC_PROCESS = """
import os, sys, time; from pathlib import Path
from trtllm_script_builder.process import gitsync
from trtllm_script_builder.process.ssh import SshTarget
host, work, remote, name, go = sys.argv[1:6]
if name:
    real = getattr(gitsync, name)
    def paused(*a, **k):
        print("tsb-pause", name, file=sys.stderr, flush=True)
        while not os.path.exists(go):
            time.sleep(0.05)
        return real(*a, **k)
    setattr(gitsync, name, paused)
say = lambda line: print(line, file=sys.stderr, flush=True)
print(gitsync.sync_checkout(SshTarget(host), Path(work), remote, say=say).commit)
"""


def start_sync(
    w: World, work: Path, pause: str = "", go: Path | None = None, code: str = _SYNC_PROCESS
) -> subprocess.Popen[str]:
    """A sync of `work` to w.remote in a process of its own (`_SYNC_PROCESS`)."""
    return subprocess.Popen(
        [sys.executable, "-c", code, HOST, str(work), str(w.remote), pause, str(go or "")],
        env={**os.environ, "TMPDIR": str(w.tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def said_until(p: subprocess.Popen[str], start: str, timeout: float = 60) -> list[str]:
    """The lines `p` prints on stderr up to the first that starts with `start`. Read a byte at
    a time from the pipe itself: a buffered reader may hold the awaited line already read
    while `select` sees an empty pipe (two lines printed at once), and what follows the line
    stays in the pipe for `communicate`."""
    assert p.stderr is not None
    fd = p.stderr.fileno()
    lines: list[str] = []
    line = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 0.2)[0]:
            continue
        byte = os.read(fd, 1)
        if not byte:
            break
        if byte != b"\n":
            line += byte
            continue
        lines.append(line.decode())
        line = b""
        if lines[-1].startswith(start):
            return lines
    pytest.fail(f"no line starting with {start!r} within {timeout}s: {lines}")


def second_checkout(w: World) -> Path:
    """Another clone of the same origin, with work of its own."""
    other = w.root / "other"
    git(w.root, "clone", "-q", str(w.origin), str(other))
    (other / "cpp" / "theirs.cpp").write_text("// the other checkout's work\n")
    return other


def lock_of(w: World) -> Path:
    return w.remote.parent / f".{w.remote.name}.tsb-sync.lock"


def test_two_syncs_to_one_missing_path_take_turns(world: World) -> None:
    """A holds the cluster lock (paused before it sends anything, its new clone made); B,
    from another checkout, waits for it, naming it, then syncs the clone A made."""
    other = second_checkout(world)
    go = world.root / "go"
    a = start_sync(world, world.work, "_transfer", go)
    assert said_until(a, "tsb-pause")[0].startswith("cloning ")
    node = os.uname().nodename
    owner = (lock_of(world) / "owner").read_text().split()
    assert owner[0] == node and owner[4] == f"{node}:{a.pid}"
    b = start_sync(world, other)
    assert said_until(b, "waiting for ")[-1] == (
        f"waiting for the sync of root from {node}:{a.pid} (pid {owner[1]} on {node}) to end: "
        f"it syncs {HOST}:{world.remote} ({lock_of(world)})"
    )
    assert not world.remote.exists()
    go.touch()
    a_out, a_err = a.communicate(timeout=120)
    b_out, b_err = b.communicate(timeout=120)
    assert (a.returncode, b.returncode) == (0, 0), a_err + b_err
    assert "cloning" not in b_err
    assert git(world.remote, "rev-parse", "HEAD").strip() == b_out.strip() != a_out.strip()
    assert (world.remote / "cpp" / "theirs.cpp").exists()
    assert sorted(p.name for p in world.remote.parent.iterdir()) == ["TensorRT-LLM"]
    no_leftovers(world)


def test_a_failing_sync_leaves_the_clone_another_sync_made(world: World) -> None:
    """B waits while A makes the clone; then B's transfer fails (a full disk there): A's clone,
    its commit and a job's log in it stay, and B removes nothing."""
    git(world.work, "remote", "remove", "origin")  # bundles into new repositories
    other = second_checkout(world)
    git(other, "remote", "remove", "origin")
    go = world.root / "go"
    a = start_sync(world, world.work, "_checkout", go)
    said_until(a, "tsb-pause")
    fake = world.root / "fakebin"
    fake.mkdir()
    (fake / "git").write_text(
        '#!/bin/sh\ncase " $* " in *" fetch "*) echo "fatal: disk full" >&2; exit 128;; esac\n'
        f'exec {shutil.which("git")} "$@"\n'
    )
    (fake / "git").chmod(0o755)
    full = f"gitsync._FETCH_BUNDLE = {f'PATH={fake}:$PATH'!r} + chr(10) + gitsync._FETCH_BUNDLE\n"
    b = start_sync(world, other, code=_SYNC_PROCESS.replace("say = ", full + "say = "))
    said_until(b, "waiting for ")
    go.touch()
    a_out, a_err = a.communicate(timeout=120)
    assert a.returncode == 0, a_err
    log = world.remote / "work_dirs" / "job" / "job.log"
    log.parent.mkdir(parents=True)
    log.write_text("the job's log\n")
    _, b_err = b.communicate(timeout=120)
    assert b.returncode == 1 and "fatal: disk full" in b_err, b_err
    assert log.read_text() == "the job's log\n"
    assert git(world.remote, "rev-parse", "HEAD").strip() == a_out.strip()
    assert sorted(p.name for p in world.remote.parent.iterdir()) == ["TensorRT-LLM"]


def test_a_sigkilled_sync_frees_the_lock_and_its_unfinished_clone_goes(world: World) -> None:
    """SIGKILL while the lock is held and the new clone half made: the cluster side ends with the
    ssh session (its input closes), removes that clone and the lock; the next sync does not
    wait."""
    a = start_sync(world, world.work, "_transfer", world.root / "never")
    said_until(a, "tsb-pause")
    parent = world.remote.parent
    assert sorted(p.name for p in parent.iterdir())[0].startswith(".TensorRT-LLM.tsb-sync-")
    a.kill()
    a.communicate(timeout=30)
    deadline = time.monotonic() + 20
    while list(parent.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(parent.iterdir()) == []
    shutil.rmtree(world.tmp)  # the killed sync's snapshot (the next sync's sweep removes it)
    world.tmp.mkdir()
    said: list[str] = []
    with untouched(world):
        res = sync_checkout(SshTarget(HOST), world.work, str(world.remote), say=said.append)
    assert not [s for s in said if s.startswith("waiting")]
    check_synced(world, res.commit)


def _plant_lock(w: World, owner: str, age: float = 0) -> Path:
    lock = lock_of(w)
    lock.mkdir(parents=True)
    (lock / "owner").write_text(owner + "\n")
    if age:
        os.utime(lock, (time.time() - age,) * 2)
    return lock


def test_a_lock_whose_sync_has_ended_is_removed(world: World) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    node = os.uname().nodename
    # a sync of this account on this host whose shell is gone; one elsewhere silent for 10 min
    for owner, age in [(f"{node} {dead.pid} 0 root gone:1", 0), ("login2 4242 0 root gone:2", 600)]:
        _plant_lock(world, owner, age)
        said: list[str] = []
        res = sync_checkout(SshTarget(HOST), world.work, str(world.remote), say=said.append)
        assert not [s for s in said if s.startswith("waiting")], said
        check_synced(world, res.commit)
        assert sorted(p.name for p in world.remote.parent.iterdir()) == ["TensorRT-LLM"]


def test_a_live_lock_is_waited_for_then_refused_and_kept(world: World) -> None:
    lock = _plant_lock(world, "login2 4242 1001 alice laptop:77")
    said: list[str] = []
    with untouched(world), pytest.raises(ToolFailed) as err:
        sync_checkout(SshTarget(HOST), world.work, str(world.remote), timeout=3, say=said.append)
    assert err.value.line() == (
        f"error: remote_repo_path: {HOST}:{world.remote} is being synced by the sync of alice "
        "from laptop:77 (pid 4242 on login2), which did not end within 3s; run sync again once "
        f"it has ended (its lock there is {lock})"
    )
    assert err.value.exit_code == 3
    assert said == [
        "waiting for the sync of alice from laptop:77 (pid 4242 on login2) to end: it syncs "
        f"{HOST}:{world.remote} ({lock})"
    ]
    assert (lock / "owner").read_text() == "login2 4242 1001 alice laptop:77\n"
    assert [p.name for p in world.remote.parent.iterdir()] == [lock.name]


def test_a_link_at_the_lock_path_is_refused_and_not_followed(world: World) -> None:
    target = world.root / "elsewhere"
    target.mkdir()
    world.remote.parent.mkdir(parents=True)
    lock_of(world).symlink_to(target)
    err = refused(world, ToolFailed)
    assert err.line() == (
        f"error: remote_repo_path: taking the sync lock of {HOST}:{world.remote} failed: "
        f"{lock_of(world)} is there and is not a lock folder; check that its folder can be "
        "written there"
    )
    assert list(target.iterdir()) == [] and lock_of(world).is_symlink()


def test_the_lock_between_two_accounts(tmp_path: Path) -> None:
    """The lock script as a second account runs it (`su`): it waits for root's live lock and
    gives up; a lock of root's that has ended but that it cannot remove is named, not looped
    on or taken."""
    from trtllm_script_builder.process import gitsync
    from trtllm_script_builder.process.host import Here
    from trtllm_script_builder.process.sync_lock import LOCK

    if os.getuid() != 0 or shutil.which("su") is None:
        pytest.skip("needs root and su (to run as a second account)")
    user = "tsbother"
    if subprocess.run(["id", user], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "-m", user], check=True)
    shared = Path(tempfile.mkdtemp(prefix="tsb-shared-", dir="/tmp"))
    try:
        shared.chmod(0o777)  # a project folder both accounts write
        clone = shared / "TensorRT-LLM"
        line = gitsync._line(LOCK, str(clone), "2", "theirs:1")

        def as_other() -> list[str]:
            res = subprocess.run(
                ["su", user, "-s", "/bin/sh", "-c", line],
                capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
            )  # fmt: skip
            return res.stdout.splitlines()

        held = Here().start(gitsync._line(LOCK, str(clone), "5", "mine:1"))
        try:
            assert [held.line(10), held.line(10)][-1] == "locked"
            out = as_other()
            assert out[0] == f"lock={shared}/.TensorRT-LLM.tsb-sync.lock"
            assert out[1].startswith("held=") and out[2].startswith("busy=")
            assert out[1].split()[4] == "mine:1"
        finally:
            assert held.end(10) == 0
        assert list(shared.iterdir()) == []  # root's lock gone with its session

        lock = shared / ".TensorRT-LLM.tsb-sync.lock"
        lock.mkdir()
        (lock / "owner").write_text("login2 99 0 root gone:1\n")
        os.utime(lock, (time.time() - 600,) * 2)
        assert as_other()[-1] == "stuck=login2 99 0 root gone:1"
        assert (lock / "owner").exists()
        shutil.rmtree(lock)
        # with nothing in the way the second account takes it, and leaves nothing
        assert as_other()[-1] == "locked"
        assert list(shared.iterdir()) == []
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_a_new_clone_removes_what_a_killed_sync_left_beside_it(world: World) -> None:
    """Under the lock no other sync of the path runs: the temporary clones of this account's
    killed syncs go, another account's stay."""
    world.remote.parent.mkdir(parents=True)
    old, recent, theirs = (
        world.remote.parent / f".TensorRT-LLM.tsb-sync-{s}" for s in ("0ld000", "n3w000", "th3ir5")
    )
    for folder in (old, recent, theirs):
        (folder / ".git").mkdir(parents=True)
    os.utime(old, (time.time() - 3 * 3600,) * 2)
    os.chown(theirs, 4321, 4321)
    res = sync(world)
    check_synced(world, res.commit)
    assert sorted(p.name for p in world.remote.parent.iterdir()) == [theirs.name, "TensorRT-LLM"]


def test_a_clone_named_like_a_pattern_sweeps_only_its_own_leftovers(world: World) -> None:
    """remote_repo_path `.../T*`: the sweep of killed syncs' clones beside it reads the name
    as it is, not as a pattern that takes another clone's in-flight folder."""
    parent = world.remote.parent
    other = parent / ".TensorRT-LLM.tsb-sync-abc123"
    (other / ".git").mkdir(parents=True)
    starry = parent / "T*"
    with untouched(world):
        res = sync_checkout(SshTarget(HOST), world.work, str(starry))
    assert git(starry, "rev-parse", "HEAD").strip() == res.commit
    assert sorted(p.name for p in parent.iterdir()) == [other.name, "T*"]


def test_a_sparse_checkout_with_a_nested_repository_syncs(world: World) -> None:
    """A sparse checkout (cone `cpp`) with an untracked file outside the cone, an untracked
    repository inside the checkout and a `.gitmodules` (as TensorRT-LLM has): the file
    travels, the nested repository stays here with a note, and the submodule update there
    does not trip over it."""
    (world.work / "docs").mkdir()
    (world.work / "docs" / "guide.md").write_text("guide\n")
    (world.work / ".gitmodules").write_text("# no submodules yet\n")
    git(world.work, "add", "docs", ".gitmodules")
    git(world.work, "commit", "-qm", "docs")
    git(world.work, "sparse-checkout", "set", "cpp")
    assert not (world.work / "docs" / "guide.md").exists()
    (world.work / "docs").mkdir()
    (world.work / "docs" / "draft.md").write_text("outside the cone\n")
    nested = world.work / "scratch"
    git(world.work, "init", "-q", str(nested))
    (nested / "notes.txt").write_text("a repository of its own\n")
    git(nested, "add", "-A")
    git(nested, "commit", "-qm", "scratch")
    res = sync(world)
    assert (world.remote / "docs" / "draft.md").read_text() == "outside the cone\n"
    assert (world.remote / "docs" / "guide.md").read_text() == "guide\n"  # the commit's
    assert "scratch" not in git(world.remote, "ls-files")
    assert any(n.startswith("scratch is a git repository of its own") for n in res.notes)


def test_a_submodule_added_but_not_committed_travels(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`git submodule add` stages the link and .gitmodules: that is a submodule, not an
    untracked repository; the cluster checks it out at the staged commit, with no note."""
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    lib_origin = world.root / "lib.git"
    git(world.root, "init", "-q", "--bare", "-b", "main", str(lib_origin))
    lib = world.root / "lib"
    git(world.root, "clone", "-q", str(lib_origin), str(lib))
    (lib / "lib.h").write_text("// lib\n")
    git(lib, "add", "-A")
    git(lib, "commit", "-qm", "lib")
    git(lib, "push", "-q", "origin", "HEAD:main")
    git(world.work, "submodule", "-q", "add", str(lib_origin), "3rdparty/lib")
    res = sync(world)
    assert not [n for n in res.notes if "repository of its own" in n], res.notes
    there = world.remote / "3rdparty" / "lib"
    assert (there / "lib.h").read_text() == "// lib\n"
    assert git(there, "rev-parse", "HEAD") == git(lib, "rev-parse", "HEAD")


def test_an_account_whose_login_shell_is_tcsh_syncs(world: World) -> None:
    """sshd hands every command to the account's login shell; under tcsh the sync's scripts
    (quotes, `!`, newlines) run as written, under `sh`."""
    from conftest import loopback_sshd

    tcsh = shutil.which("tcsh")
    if tcsh is None or os.getuid() != 0:
        pytest.skip("needs tcsh and root (to make an account whose shell it is)")
    user = "tsbtcsh"
    if subprocess.run(["id", user], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "-m", "-s", tcsh, user], check=True)
    subprocess.run(["usermod", "-p", "*", user], check=True)  # no password, not locked
    base = Path(tempfile.mkdtemp(prefix="tsb-tcsh-", dir="/tmp"))
    base.chmod(0o755)  # sshd reads the account's authorized_keys as that account
    try:
        with loopback_sshd(base) as sshd:
            config = base / "ssh_config"
            config.write_text(sshd.config.read_text().replace("User root", f"User {user}"))
            os.environ["TSB_SSH_CONFIG"] = str(config)  # the block restores it
            home = base / "home"
            home.mkdir()
            shutil.chown(home, user)
            git(world.work, "remote", "remove", "origin")  # a bundle: root's origin is not theirs
            there = home / "TensorRT-LLM"
            try:
                res = sync_checkout(SshTarget(HOST), world.work, str(there))
            finally:
                from trtllm_script_builder.process.ssh import SshRunner

                SshRunner(SshTarget(HOST)).close()
        assert res.method == "bundle"
        assert remote_tree(there) == expected_tree(world.work)
        assert there.stat().st_uid != 0
    finally:
        shutil.rmtree(base, ignore_errors=True)
