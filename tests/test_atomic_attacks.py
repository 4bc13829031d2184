"""Nothing lost, under what a careless user or a second run does (decisions atomic-job-set,
failed-set-restored, one-commit-per-folder, build-many-folder-lock, submit-py-children and
temporaries-under-signals).

* A rebuild whose set cannot be made current (a file of the old set that cannot be replaced:
  immutable, or a mount point) leaves the folder exactly as it was: no new script beside the
  old job_spec.json, no generation.
* Two builds into one folder at once: one whole set wins, with no script of the other left.
* Two build-many runs into one folder: the second is refused while the first writes.
* A SIGTERM or SIGHUP while a single file is written (`report`'s report.html, `watch`'s
  verdicts, `submit`'s records) leaves no temporary and no folder made for it.
* submit.py's own children are stopped with it: nothing appears after the build ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .conftest import Env
from .test_atomic_sets import (
    CMD,
    IN_INSTALL,
    NEW,
    OLD,
    blocked_on_a_lock,
    leftovers,
    paused,
    perf_request,
    request_file,
    resume,
    run,
    set_time,
    start,
    temps,
    tree,
    work_folder,
)


@pytest.fixture()
def place(tmp_path: Path) -> Path:
    p = tmp_path / "place"
    p.mkdir()
    (p / "neighbour.txt").write_text("not ours\n")
    return p


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """chattr +i for the block (skips where the file system or the user cannot)."""
    if shutil.which("chattr") is None:
        pytest.skip("no chattr")
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i not possible here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("which", ["job_spec.json", "script"])
def test_a_rebuild_that_cannot_replace_one_file_changes_nothing(
    env: Env, place: Path, which: str
) -> None:
    work = place / "work"
    run(["build", request_file(env, work, OLD, "old.json")])
    new = request_file(env, work, NEW, "new.json")
    target = work / "job_spec.json"
    if which == "script":
        target = Path(json.loads(target.read_text())["script_path"])
    before = tree(place)
    with immutable(target):
        p = start(["build", new])
        _, err = p.communicate(timeout=60)
        after = tree(place)
    assert p.returncode == 2, err
    assert "cannot write into" in err and "Operation not permitted" in err
    assert after == before and not leftovers(place), temps(after)
    assert set_time(work) == OLD


def request_named(env: Env, work: Path, name: str, model: str) -> str:
    path = env.root / name
    req = env.request(test_cmd=CMD, work_dir=str(work), time_limit=OLD, model_name=model)
    path.write_text(json.dumps(req))
    return str(path)


def test_two_builds_into_one_folder_at_once_leave_one_whole_set(env: Env, place: Path) -> None:
    """The first is held inside its switch (its lock held) while the second runs."""
    work = place / "work"
    run(["build", request_named(env, work, "x.json", "modelx")])
    first = paused(["build", "--force", request_named(env, work, "y.json", "modely")], IN_INSTALL)
    second = start(["build", "--force", request_named(env, work, "z.json", "modelz")])
    blocked_on_a_lock(second)
    resume(first)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    spec = json.loads((work / "job_spec.json").read_text())
    names = sorted(tree(work))
    # The one that switched last is the set there; no script of another job beside it.
    assert names == sorted(["job_spec.json", spec["script_name"]]), names
    assert set_time(work) == OLD and not leftovers(place)


def test_two_builds_of_one_job_at_once_do_not_mix_their_files(env: Env, place: Path) -> None:
    work = place / "work"
    run(["build", request_file(env, work, OLD, "old.json")])
    first = paused(["build", request_file(env, work, NEW, "new.json")], IN_INSTALL)
    second = start(["build", request_file(env, work, OLD, "old2.json")])
    blocked_on_a_lock(second)
    resume(first)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    _, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    set_time(work)  # job_spec.json and its script agree
    assert not leftovers(place)


def test_a_second_build_many_into_a_folder_being_written_is_refused(env: Env, place: Path) -> None:
    listing = env.root / "list.txt"
    listing.write_text("accuracy/test_tiny.py::TestTiny::test_one\n")
    base = env.root / "base.json"
    base.write_text(json.dumps({k: v for k, v in env.request().items() if k != "work_dir"}))
    root = place / "many"
    args = ["build-many", str(listing), "--base", str(base), "--work-dir", str(root)]
    first = paused(args, "os.rename")  # its first job folder staged, the lock held
    second = start([*args, "--force"])
    _, err = second.communicate(timeout=60)
    _, err1 = first.communicate(timeout=60)
    assert first.returncode == 0, err1
    assert second.returncode == 2
    assert err == (
        f"error: work_dir: {root} is being written by another build-many; "
        "wait for it to end, or choose another --work-dir\n"
    )
    rows = json.loads((root / "jobs.json").read_text())
    assert [r["status"] for r in rows] == ["built"]
    assert sorted(p.name for p in root.iterdir()) == sorted(
        ["jobs.json", *(Path(r["work_dir"]).name for r in rows)]
    )


# ---------------------------------------------------------------- single files


def verdict_folder(tmp_path: Path) -> Path:
    from .test_report_html import _verdict

    work = tmp_path / "job"
    work.mkdir()
    (work / "verdict.json").write_text(json.dumps(_verdict(work, "PASSED")))
    return work


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_while_report_writes_leaves_no_temporary(tmp_path: Path, sig: int) -> None:
    work = verdict_folder(tmp_path)
    before = tree(tmp_path)
    p = paused(["report", str(work)], "os.replace")  # written under its temporary name
    p.send_signal(sig)
    p.communicate(timeout=60)
    assert p.returncode == (130 if sig == signal.SIGINT else -sig)
    assert tree(tmp_path) == before


def test_schema_into_a_new_folder_interrupted_leaves_nothing(tmp_path: Path) -> None:
    before = tree(tmp_path)
    out = tmp_path / "new" / "deep" / "request.schema.json"
    p = paused(["schema", "request", "-o", str(out)], "os.replace")
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGTERM
    assert tree(tmp_path) == before


# ---------------------------------------------------------------- submit.py's children

FORKING_SUBMIT = '''\
"""A submit.py whose child writes into --work-dir a while after submit.py itself has failed."""
import os, subprocess, sys, time
from pathlib import Path

args = sys.argv[1:]
work = Path(args[args.index("--work-dir") + 1])
child = subprocess.Popen(
    [sys.executable, "-c",
     "import os, sys, time; time.sleep(60); os.makedirs(sys.argv[1], exist_ok=True); "
     "open(os.path.join(sys.argv[1], 'late.txt'), 'w').write('late')",
     str(work)],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=False,
)
Path(os.environ["SLOW_SUBMIT_MARK"]).write_text(str(child.pid))
sys.exit(1)
'''


def test_submit_pys_children_end_with_it(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its child would otherwise write into the private folder once it was removed, and
    leave it (a folder of a temporary name) behind."""
    (env.repo / "jenkins/scripts/perf/local/submit.py").write_text(FORKING_SUBMIT)
    mark = tmp_path / "mark"
    monkeypatch.setenv("SLOW_SUBMIT_MARK", str(mark))
    before = tree(work_folder(env))
    p = start(["build", perf_request(env)])
    _, err = p.communicate(timeout=60)
    assert p.returncode == 3, err
    child = int(mark.read_text())
    try:
        gone(child)  # ended with submit.py, not left to write later
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    assert tree(work_folder(env)) == before


def gone(pid: int) -> None:
    """Wait until `pid` has ended (a zombie has ended: only its parent's wait is missing)."""
    deadline = time.monotonic() + 30
    status = Path(f"/proc/{pid}/status")
    while status.exists() and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if "\nState:\tZ" in status.read_text():
                return
        time.sleep(0.02)
    assert not status.exists(), f"process {pid} is still running"


def test_the_commit_lock_is_let_go_after_the_commit(tmp_path: Path) -> None:
    """Another process can lock the folder once a switch is done, and cannot during one."""
    from trtllm_script_builder.atomic import folder_lock, temp_name
    from trtllm_script_builder.output.sets import SETS, install

    probe = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n"
        "    sys.exit(1)\n"
    )

    def free() -> bool:
        return subprocess.run([sys.executable, "-c", probe, str(tmp_path)]).returncode == 0

    stage = tmp_path / temp_name("tsb-set")
    stage.mkdir()
    (stage / "job_spec.json").write_text("new")
    with folder_lock(str(tmp_path)):
        assert not free()
        install(str(stage), str(tmp_path))  # the lock is this process's already
        assert not free()
    assert free()
    assert sorted(p.name for p in tmp_path.iterdir()) == [SETS, "job_spec.json"]


PID_SUBMIT = '''\
"""A submit.py that says its pid and then takes its time."""
import os, sys, time
from pathlib import Path

Path(os.environ["SLOW_SUBMIT_MARK"]).write_text(str(os.getpid()))
time.sleep(30)
'''


def test_submit_py_dies_with_a_killed_builder(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL cannot be caught, but submit.py (in a group of its own) is not left running
    into a private folder nobody will move."""
    (env.repo / "jenkins/scripts/perf/local/submit.py").write_text(PID_SUBMIT)
    mark = tmp_path / "mark"
    monkeypatch.setenv("SLOW_SUBMIT_MARK", str(mark))
    p = start(["build", perf_request(env)])
    deadline = time.monotonic() + 30
    while not (mark.exists() and mark.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = int(mark.read_text())
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert not Path(f"/proc/{pid}").exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_named_pipe_called_job_spec_json_does_not_hang_a_rebuild(env: Env, place: Path) -> None:
    """It is replaced as any old file of the set (it names no scripts to remove)."""
    work = place / "work"
    work.mkdir()
    os.mkfifo(work / "job_spec.json")
    p = start(["build", request_file(env, work, NEW, "new.json")])
    try:
        _, err = p.communicate(timeout=20)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert set_time(work) == NEW and not leftovers(place)


def test_a_perf_sanity_rebuild_into_a_repo_root_that_cannot_replace_a_file_changes_nothing(
    env: Env, tmp_path: Path
) -> None:
    """submit.py's test_list.txt (part of the set) cannot replace the repo's own: the launch
    script turned into a link before it is put back."""
    from .test_atomic_sets import repo_like

    outside = repo_like(env, tmp_path)
    (work_folder(env) / "slurm_launch.sh").write_text("the repo's own\n")
    before, out_before = tree(work_folder(env)), tree(outside)
    with immutable(work_folder(env) / "test_list.txt"):
        p = start(["build", perf_request(env)])
        _, err = p.communicate(timeout=60)
        after = tree(work_folder(env))
    assert p.returncode == 2, err
    assert after == before and not (work_folder(env) / ".tsb-sets").exists(), temps(after)
    assert tree(outside) == out_before


def test_a_failed_switch_puts_back_what_it_replaced(tmp_path: Path) -> None:
    """The set's old files are put back when one of them cannot be replaced; a link of the
    user's at one of the set's names is replaced as a name, never followed."""
    from trtllm_script_builder.atomic import temp_name
    from trtllm_script_builder.output.sets import install

    outside = tmp_path / "outside.txt"
    outside.write_text("outside")
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("old a")
    (work / "b.txt").symlink_to(outside)
    (work / "job_spec.json").write_text("old spec")
    stage = work / temp_name("tsb-set")
    stage.mkdir()
    for name in ("a.txt", "b.txt", "c.txt", "job_spec.json"):
        (stage / name).write_text(f"new {name}")
    before = tree(tmp_path)
    with immutable(work / "job_spec.json"):
        with pytest.raises(PermissionError):
            install(str(stage), str(work))
        after = tree(tmp_path)
    # as it was (the staged set is the writer's to discard), and no generation left
    assert after == before
    assert not (work / ".tsb-sets").exists()
    assert outside.read_text() == "outside"


NOBODY = 65534  # a user that is not the one running the tests


def as_nobody(work: Callable[[], None]) -> tuple[int, str]:
    """Run `work` in a child process of another user (a fork: this interpreter's files are
    not readable by that user); its exit status and the error it ended with."""
    if os.getuid() != 0:
        pytest.skip("needs root to run a build as another user")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        code = 0
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            work()
        except BaseException as exc:
            os.write(w, repr(exc).encode())
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r) as fh:
        err = fh.read()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), err


def test_a_shared_folder_sweep_never_touches_another_users_temporaries() -> None:
    """In a sticky world-writable folder (as /tmp), another user plants temporaries under the
    names this tool's sweep looks for, of a dead process of this host: a file, a folder with a
    `.slurm` of its own, and a link to a file of the victim's. The victim's build there succeeds
    and lands only its own files; the planted ones stay as they were, the link unfollowed."""
    from trtllm_script_builder import atomic
    from trtllm_script_builder.model.jobspec import OutFile
    from trtllm_script_builder.output.writer import write_atomically

    from .test_atomic_sets import dead_pid, name_of

    shared = Path(tempfile.mkdtemp(prefix="tsb-shared-", dir="/tmp"))
    try:
        shared.chmod(0o1777)
        dead = dead_pid()
        old_style = f".y.tsb-{atomic._HOST}-{dead}.tmp"  # no token
        planted_file = shared / old_style
        planted_file.write_text("planted\n")
        planted_new = shared / name_of("z", dead)
        planted_new.write_text("planted too\n")
        planted_dir = shared / name_of("job", dead)
        planted_dir.mkdir()
        (planted_dir / "job.slurm").write_text("#!/bin/sh\necho hijacked\n")
        victim_file = shared / "victims_notes"
        victim_file.write_text("mine\n")
        os.chown(victim_file, NOBODY, NOBODY)
        planted_link = shared / name_of("link", dead)
        planted_link.symlink_to(victim_file)
        for p in (planted_file, planted_new, planted_dir, planted_link):
            os.chown(p, 0, 0, follow_symlinks=False)
        before = tree(shared)
        rc, err = as_nobody(
            lambda: write_atomically(shared / "job", [OutFile(name="job.slurm", text="ours\n")])
        )
        assert rc == 0, err
        after = tree(shared)
        assert sorted(k for k in after if k not in before) == ["job", "job/job.slurm"]
        assert (shared / "job" / "job.slurm").read_text() == "ours\n"
        assert {k: v for k, v in after.items() if k in before} == before
        assert victim_file.read_text() == "mine\n"
    finally:
        shutil.rmtree(shared, ignore_errors=True)
