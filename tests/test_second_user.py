"""Attacks of a second user account on what this tool shares with others: a /tmp that every
user writes, a team's work_dir, wheel folder and image cache, and the ssh socket folder.

Files the other user plants are made here and given to that user (`chown`: the tests run as
root on the test machine, and skip otherwise); the account is `tsbother` when it exists, else
`nobody`. Each attack got through once; the tests keep it out.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trtllm_script_builder import atomic
from trtllm_script_builder.process.proc import alive, start_time

from .conftest import Env
from .test_backend_host import short_tmp
from .test_runner_docker import docker, last_json, run_cli
from .test_shared_work_dir import _in_time, _submitted, bystander

__all__ = ["bystander", "docker", "run_cli", "short_tmp"]  # fixtures, used here by name

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root")


def _other() -> int:
    for name in ("tsbother", "nobody"):
        try:
            return pwd.getpwnam(name).pw_uid
        except KeyError:
            continue
    return 65534


OTHER = _other()


def planted(path: Path) -> Path:
    """`path` (and a folder's contents) as another user's."""
    os.chown(path, OTHER, OTHER, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for p in path.rglob("*"):
            os.chown(p, OTHER, OTHER, follow_symlinks=False)
    return path


# ---------------------------------------------------------------- temporaries in a shared parent


def test_a_planted_temporary_with_a_pid_too_big_for_kill_does_not_end_a_build(
    cli: Callable[..., Any], env: Env
) -> None:
    """A name kill(2) cannot take (OverflowError) planted beside the work_dir ended every
    build there in a traceback."""
    parent = env.work.parent
    parent.mkdir(parents=True, exist_ok=True)
    name = f".x.tsb-{atomic._HOST}-{'9' * 30}-{'a' * 12}.tmp"
    (parent / name).touch()
    planted(parent / name)
    r = cli([], env.request(custom_cmd="echo hi"))
    assert r.code == 0, r.stderr
    assert (parent / name).exists()  # another user's: left alone
    assert atomic.sweep(parent) == []


# ---------------------------------------------------------------- a team's work_dir


def _rewritten_by_other(env: Env, sub: dict[str, Any]) -> None:
    """The teammate's rewrite: a new file of theirs put over the record (the folder is
    theirs to write, the record is not)."""
    record = env.work / "submission.json"
    tmp = env.work / "record.new"
    tmp.write_text(json.dumps(sub))
    planted(tmp)
    os.replace(tmp, record)


def test_a_pid_rewritten_with_its_start_time_is_not_signalled(
    env: Env, docker: Path, run_cli: Callable[..., Any], bystander: subprocess.Popen[bytes]
) -> None:
    """/proc/<pid>/stat is readable by everyone: a teammate copies the start time of a later
    process of the victim's with its pid, and `watch --timeout` and `cancel` killed it."""
    sub = _submitted(run_cli, env, "sleep 30")
    ours, ours_start = sub["pid"], sub["pid_start"]
    sub["pid"], sub["pid_start"] = bystander.pid, start_time(bystander.pid)
    _rewritten_by_other(env, sub)
    run_cli("watch", None, str(env.work), "--poll", "0.1", "--timeout", "0.5")
    assert alive(bystander.pid, sub["pid_start"])
    code, out, err = run_cli("cancel", None, str(env.work))
    assert code == 2, out + err
    assert "submission.json" in err and f"uid {OTHER}" in err, err
    assert alive(bystander.pid, sub["pid_start"])
    os.killpg(ours, 9)
    assert ours_start


def test_a_record_others_may_write_is_not_acted_on(
    env: Env, docker: Path, run_cli: Callable[..., Any], bystander: subprocess.Popen[bytes]
) -> None:
    """The victim's own file, made writable by everyone: its pid is not taken either."""
    sub = _submitted(run_cli, env, "sleep 30")
    ours = sub["pid"]
    sub["pid"], sub["pid_start"] = bystander.pid, start_time(bystander.pid)
    record = env.work / "submission.json"
    record.write_text(json.dumps(sub))
    record.chmod(0o666)
    code, out, err = run_cli("cancel", None, str(env.work))
    assert code == 2 and "others may write" in err, out + err
    assert alive(bystander.pid, sub["pid_start"])
    os.killpg(ours, 9)


@pytest.mark.parametrize("name", [".submit.lock", "job_spec.json"])
@pytest.mark.parametrize("command", ["submit", "watch", "cancel"])
def test_a_named_pipe_in_the_work_dir_blocks_no_command(
    env: Env, docker: Path, run_cli: Callable[..., Any], name: str, command: str
) -> None:
    """A teammate's named pipe where a command opens a file of the folder: an open without
    O_NONBLOCK waits for a writer for ever."""
    _submitted(run_cli, env, "true")
    path = env.work / name
    path.unlink()
    os.mkfifo(path)
    planted(path)
    args = ["--poll", "0.1", "--timeout", "2"] if command == "watch" else []
    got: list[Any] = []
    try:
        assert _in_time(lambda: got.append(run_cli(command, None, str(env.work), *args)), 20)
    finally:  # a blocked open in the thread goes on once a writer comes
        with contextlib.suppress(OSError):
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    code, out, err = got[0]
    if name == "job_spec.json" or command == "submit":
        assert code == 2 and f"{path} cannot be" in err, out + err


# ---------------------------------------------------------------- files that hold log text


def test_a_report_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    """report.html quotes each verdict's evidence (log lines), as verdict.json does."""
    from trtllm_script_builder.output.report_html import write_report

    from .test_report_html import make_batch

    path = write_report(make_batch(tmp_path / "batch"))
    assert "Device count 2 is less than 8" in path.read_text()
    assert path.stat().st_mode & 0o077 == 0, oct(path.stat().st_mode)


def test_a_batchs_merged_junit_is_readable_by_its_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merged junit.xml holds every failure's message and output."""
    from .test_batch_submit_watch import FakeSlurm, make_batch, run_watch, write_logs

    folder = make_batch(tmp_path, [("test_bad", "7")])
    write_logs(folder, "test_bad", "9", ok=False)
    run_watch(folder, FakeSlurm({"7_0": ["RUNNING", "FAILED"]}, {"7_0": "9"}), monkeypatch)
    for name in ("junit.xml", "results.json", "test_bad/verdict.json"):
        mode = (folder / name).stat().st_mode
        assert mode & 0o077 == 0, (name, oct(mode))


def test_a_verdict_linked_to_a_private_file_is_not_read_into_a_report(tmp_path: Path) -> None:
    """A teammate links a job's verdict.json to another of the victim's verdicts (0600)."""
    from trtllm_script_builder.output.report_html import write_report

    from .test_report_html import make_batch

    root = make_batch(tmp_path / "batch")
    secret = tmp_path / "mine" / "verdict.json"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"verdict": "FAILED", "reason": "password hunter2"}))
    secret.chmod(0o600)
    rows = json.loads((root / "jobs.json").read_text())
    victim = Path(rows[0]["work_dir"])
    (victim / "verdict.json").unlink()
    (victim / "verdict.json").symlink_to(secret)
    single = tmp_path / "single"
    single.mkdir()
    (single / "verdict.json").symlink_to(secret)
    for folder in (root, single):
        try:
            page = write_report(folder).read_text()
        except Exception as exc:  # refused in one line is fine too
            page = str(exc)
        assert "hunter2" not in page


def test_a_named_pipe_for_a_verdict_does_not_block_report(tmp_path: Path) -> None:
    from trtllm_script_builder.output.report_html import write_report

    from .test_report_html import make_batch

    root = make_batch(tmp_path / "batch")
    victim = Path(json.loads((root / "jobs.json").read_text())[0]["work_dir"])
    (victim / "verdict.json").unlink()
    os.mkfifo(victim / "verdict.json")
    try:
        assert _in_time(lambda: write_report(root), 20)
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(victim / "verdict.json", os.O_WRONLY | os.O_NONBLOCK))


# ---------------------------------------------------------------- the ssh socket folder


def _ssh_refusal() -> str:
    from trtllm_script_builder.errors import BuildError
    from trtllm_script_builder.process.ssh import SshTarget

    with pytest.raises(BuildError) as err:
        SshTarget("login.example.com").line_argv("true")
    return err.value.line()


@pytest.mark.parametrize("how", ["tmpdir", "control_dir", "linked_tmpdir", "ssh_folder"])
def test_a_socket_folder_inside_another_users_folder_is_refused(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, how: str
) -> None:
    """Whoever owns a folder above the socket folder can rename ours away and put theirs in its
    place between the check and ssh's connect: every folder above must be root's or ours, and
    one others may write must be sticky (as /tmp)."""
    theirs = short_tmp / "theirs"
    theirs.mkdir()
    theirs.chmod(0o777)  # a scratch folder of theirs, open to all, not sticky
    planted(theirs)
    if how == "tmpdir":
        monkeypatch.setenv("TMPDIR", str(theirs))
    elif how == "control_dir":
        monkeypatch.setenv("TSB_SSH_CONTROL_DIR", str(theirs / "ctl"))
    elif how == "linked_tmpdir":
        (short_tmp / "t").symlink_to(theirs)
        monkeypatch.setenv("TMPDIR", str(short_tmp / "t"))
    else:
        home = short_tmp / "h"
        home.mkdir()
        (home / ".ssh").symlink_to(theirs)
        monkeypatch.setenv("HOME", str(home))
    line = _ssh_refusal()
    assert "another user could take over the ssh connection" in line, line
    assert str(theirs) in line, line


# ---------------------------------------------------------------- numbers no int() can take


@pytest.mark.parametrize(
    "body",
    [
        "def test_a():\n    os.system('mpirun -n {n} python x.py')\n",
        "def test_a():\n    cmd = 'mpirun -np {n} x'\n",
    ],
)
def test_an_mpirun_count_of_5000_digits_is_no_traceback(
    cli: Callable[..., Any], env: Env, body: str
) -> None:
    f = env.repo / "tests" / "integration" / "defs" / "accuracy" / "test_huge.py"
    f.write_text("import os\n\n\n" + body.format(n="9" * 5000))
    r = cli([], env.request(test_cmd="pytest accuracy/test_huge.py::test_a"))
    assert r.code == 2 and "required_devices: the job needs 125000000000000000 nodes" in r.stderr, (
        r.stderr
    )
    assert len(r.stderr.strip().splitlines()) <= 2, r.stderr[:2000]
    assert len(r.stderr) < 2000, r.stderr[:3000]


# ---------------------------------------------------------------- a team's wheel folder


def _wheel_job(cli: Callable[..., Any], env: Env, tmp_path: Path) -> Path:
    from .test_source_commit import _build

    assert _build(cli, env, "local_slurm", wheel_dir=str(tmp_path / "wheel")).code == 0
    return tmp_path / "wheel"


def test_a_compile_does_not_build_into_a_folder_another_user_made_for_its_job_id(
    cli: Callable[..., Any], env: Env, tmp_path: Path
) -> None:
    """Job ids come in order: a teammate makes `job-<next id>` (open to all) in the shared
    wheel folder first, and can swap the wheel the compile leaves there before the tests
    install it."""
    from .test_source_commit import _run

    wheel = _wheel_job(cli, env, tmp_path)
    theirs = wheel / "job-5"  # _run runs the script as job 5
    theirs.mkdir(parents=True)
    theirs.chmod(0o777)
    planted(theirs)
    got = _run(env.work / "compile.slurm", None, tmp_path)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "srun reached" not in got.stderr
    (error,) = [ln for ln in got.stdout.splitlines() if ln.startswith("error:")]
    assert str(theirs) in error and "not this user's" in error, error
    # its own folder from an earlier run of the job (a requeue) is built into
    theirs.rmdir()
    theirs.mkdir(mode=0o755)
    assert "srun reached" in _run(env.work / "compile.slurm", None, tmp_path).stderr


@pytest.mark.parametrize("what", ["folder", "wheel", "open_folder"])
def test_a_test_job_installs_no_wheel_another_user_could_have_put_there(
    cli: Callable[..., Any], env: Env, tmp_path: Path, what: str
) -> None:
    """The folder of the compile it waited for (job 4), replaced by a teammate's, or the wheel
    in it: the job stops before installing anything."""
    from .test_source_commit import _run

    wheel = _wheel_job(cli, env, tmp_path)
    folder = wheel / "job-4"
    folder.mkdir(parents=True, mode=0o755)
    whl = folder / "tensorrt_llm-1.2.0-py3-none-any.whl"
    whl.write_text("")
    if what == "folder":
        planted(folder)
    elif what == "wheel":
        planted(whl)
    else:
        folder.chmod(0o777)
    got = _run(env.work / "tiny_auto_test.slurm", None, tmp_path)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "srun reached" not in got.stderr
    assert "error: no tensorrt_llm-*.whl" in got.stdout


# ---------------------------------------------------------------- a team's image cache


def test_a_cut_image_or_a_named_pipe_in_the_cache_is_imported_again(
    cli: Callable[..., Any], env: Env, tmp_path: Path
) -> None:
    """A copy cut short keeps the squashfs magic; a teammate's named pipe held `head` for
    ever. Neither stands for the image."""
    from .test_chain_scripts import _import

    done, sqsh, _ = _import(cli, env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    whole = sqsh.read_bytes()
    sqsh.write_bytes(whole[:100])  # the superblock and a little more
    done, _, _ = _import(cli, env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Image already imported" not in done.stdout
    assert sqsh.read_bytes() == whole
    sqsh.unlink()
    os.mkfifo(sqsh)
    planted(sqsh)
    try:
        got: list[Any] = []
        assert _in_time(lambda: got.append(_import(cli, env, tmp_path)), 30)
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(sqsh, os.O_WRONLY | os.O_NONBLOCK))
    done = got[0][0]
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"warning: {sqsh} is not a whole squashfs image" in done.stdout
    assert sqsh.is_file() and sqsh.read_bytes() == whole
    # the next job finds the whole image
    done, _, _ = _import(cli, env, tmp_path)
    assert f"Image already imported: {sqsh}" in done.stdout


# ---------------------------------------------------------------- two submits at once


def test_a_job_of_a_batch_being_submitted_is_not_submitted_on_its_own(
    env: Env, docker: Path, run_cli: Callable[..., Any]
) -> None:
    """`submit BATCH` and `submit BATCH/job` at once: each held its own folder's lock, and the
    job went to Slurm twice, once untracked."""
    import fcntl

    code, _, err = run_cli("run", "true", "--poll", "0.1")
    assert code == 0, err
    (env.work / "submission.json").unlink()  # built, not submitted
    batch = env.work.parent
    (batch / "jobs.json").write_text(json.dumps([{"work_dir": env.work.name, "status": "built"}]))
    with open(batch / ".submit.lock", "a") as held:  # the batch's submit runs
        fcntl.flock(held, fcntl.LOCK_EX)
        code, _, err = run_cli("submit", None, str(env.work))
        assert code == 2, err
        assert f"{batch} is being submitted by another process" in err
        assert not (env.work / "submission.json").exists()
    code, _, err = run_cli("submit", None, str(env.work))
    assert code == 0, err


# ---------------------------------------------------------------- huge lines in the logs


def test_watch_reads_a_log_of_huge_hostile_lines_in_seconds(
    env: Env, docker: Path, run_cli: Callable[..., Any]
) -> None:
    """A job that prints one 256 KB line of each shape that once made a pattern read the line
    from every place it could start (a 128 KB line took 35-46 s), to its log and its error
    stream: `run` (submit and watch to the verdict) ends in seconds."""
    import time

    from .test_linear_patterns import HOSTILE

    units = [*HOSTILE, "PASSED ", "1 passed in ", "MMLU weighted average accuracy: "]
    cmd = "; ".join(
        f"yes {json.dumps(u)} | head -c 262144 | tr -d '\\n'; echo; "
        f"yes {json.dumps(u)} | head -c 262144 | tr -d '\\n' >&2; echo >&2"
        for u in units
    )
    start = time.monotonic()
    code, out, err = run_cli("run", cmd + "; echo '1 passed in 0.1s'", "--poll", "0.2", "--json")
    took = time.monotonic() - start
    assert code == 0, err[-2000:]
    assert last_json(out)["verdict"] == "PASSED"
    assert took < 60, took


@pytest.mark.parametrize(
    "option", [["--timeout", "nan"], ["--timeout", "inf"], ["--poll", "nan"], ["--poll", "1e999"]]
)
def test_a_timeout_or_poll_that_is_no_number_is_refused(
    env: Env, docker: Path, run_cli: Callable[..., Any], option: list[str]
) -> None:
    """`--timeout nan` compares false with every time, so it never came; `--poll 1e999` is
    infinite: each is refused in one line before anything is submitted."""
    code, out, err = run_cli("run", "sleep 30", *option)
    assert code == 2, (code, out, err[-500:])
    (line,) = err.strip().splitlines()
    assert option[0].lstrip("-") in line, line
    assert not (env.work / "submission.json").exists()


def test_temporaries_another_user_planted_beside_the_work_dir_are_left_alone(
    cli: Callable[..., Any], env: Env, tmp_path: Path
) -> None:
    """Names of ours with this process's pid or a dead one, planted by another user: a folder
    holding a script, a link to a file of the victim's, a file; the build goes on, nothing of
    theirs is moved or removed, and nothing of the victim's is touched."""
    parent = env.work.parent
    parent.mkdir(parents=True, exist_ok=True)
    victim = tmp_path / "mine.txt"
    victim.write_text("mine\n")
    names = []
    for pid in (os.getpid(), 999_999_999):
        folder = parent / f".{env.work.name}.tsb-{atomic._HOST}-{pid}-{'b' * 12}.tmp"
        folder.mkdir()
        (folder / "custom_local.slurm").write_text("#!/bin/bash\necho theirs\n")
        link = parent / f".y.tsb-{atomic._HOST}-{pid}-{'c' * 12}.tmp"
        link.symlink_to(victim)
        file = parent / f".z.tsb-{atomic._HOST}-{pid}-{'d' * 12}.tmp"
        file.write_text("theirs\n")
        for p in (folder, link, file):
            planted(p)
            names.append(p)
    r = cli([], env.request(custom_cmd="echo hi"))
    assert r.code == 0, r.stderr
    assert all(os.path.lexists(p) for p in names)
    assert victim.read_text() == "mine\n"
    assert "theirs" not in "".join(p.read_text() for p in env.work.glob("*.slurm"))


def test_a_batch_record_another_user_wrote_is_followed_but_nothing_is_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A teammate's batch_submission.json may name any job ids (a Slurm coordinator of the
    account may cancel others' jobs): `watch --timeout` follows them and cancels none; `cancel`
    refuses the record."""
    from click.testing import CliRunner

    from trtllm_script_builder.cli import main

    from .test_batch_submit_watch import FakeSlurm, make_batch, run_watch

    folder = make_batch(tmp_path, [("test_a", "7"), ("test_b", "7")])
    planted(folder / "batch_submission.json")
    fake = FakeSlurm({"7_0": ["RUNNING"], "7_1": ["PENDING"]}, {"7_0": "8", "7_1": "9"})
    result, _ = run_watch(folder, fake, monkeypatch, timeout=2.0)
    assert not [c for c in fake.calls if c[0] == "scancel"]
    assert [r.verdict.value for r in result.jobs] == ["TIMEOUT", "TIMEOUT"]
    res = CliRunner().invoke(main, ["cancel", str(folder)])
    assert res.exit_code == 2 and f"written by uid {OTHER}, not by you" in res.stderr
    assert not [c for c in fake.calls if c[0] == "scancel"]


@pytest.mark.parametrize("kind", ["link", "their folder", "open folder"])
def test_a_sets_folder_another_user_put_in_the_work_dir_is_refused(
    cli: Callable[..., Any], env: Env, tmp_path: Path, kind: str
) -> None:
    """In a team's work_dir another member puts `.tsb-sets` there as a link to a folder of the
    victim's (the rebuild's tidy-up removed its files), as a folder of theirs, or opens the
    victim's to all (its `current` then names their scripts): the rebuild stops with one line
    and touches neither folder."""
    for cmd in ("echo one", "echo two"):  # the second build writes a generation
        r = cli([], env.request(custom_cmd=cmd))
        assert r.code == 0, r.stderr
    sets = env.work / ".tsb-sets"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("mine\n")
    if kind == "open folder":
        sets.chmod(0o777)
    else:
        import shutil

        shutil.rmtree(sets)
        if kind == "link":
            sets.symlink_to(victim)
        else:
            sets.mkdir()
        planted(sets)
    before = sorted(os.listdir(sets))
    r = cli([], env.request(custom_cmd="echo again"))
    assert r.code == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: work_dir: {sets} is ") and "remove it" in line
    assert sorted(os.listdir(victim)) == ["precious"]
    assert sorted(os.listdir(sets)) == before
    assert "again" not in "".join(p.read_text() for p in env.work.glob("*.slurm") if p.exists())


def test_a_set_is_not_open_to_the_team_whatever_the_umask(
    cli: Callable[..., Any], env: Env
) -> None:
    """A team's umask (002) made `.tsb-sets` and its generations group-writable: another
    member could then swap the job's script between build and submit."""
    old = os.umask(0o002)
    try:
        for cmd in ("echo one", "echo two"):  # the second build writes a generation
            r = cli([], env.request(custom_cmd=cmd))
            assert r.code == 0, r.stderr
    finally:
        os.umask(old)
    sets = env.work / ".tsb-sets"
    for d in [sets, *(p for p in sets.iterdir() if not p.is_symlink())]:
        assert d.stat().st_mode & 0o022 == 0, d


def test_a_new_work_dir_and_its_parents_are_not_open_to_the_team_whatever_the_umask(
    cli: Callable[..., Any], env: Env
) -> None:
    """Under a team's umask (002) the build made a new work_dir, and the folders above it,
    group-writable; Slurm writes the job's logs there, so submit refused the folder the build
    had just made (decision slurm-logs-folder-is-private)."""
    work = env.root / "new" / "deeper" / "work"
    old = os.umask(0o002)
    try:
        r = cli([], env.request(custom_cmd="echo one", work_dir=str(work)))
        assert r.code == 0, r.stderr
    finally:
        os.umask(old)
    for d in (work, work.parent, work.parent.parent):
        assert d.stat().st_mode & 0o777 == 0o755, d


def docker_job(env: Env, cli: Callable[..., Any], cmd: str) -> None:
    """A local Docker job of `cmd` built in env.work, its image's install skipped."""
    req = env.request(
        "local_docker",
        custom_cmd=cmd,
        container_image="nvcr.io/test/trtllm:x86_64-1",
        skip_install=True,
    )
    assert cli([], req).code == 0


@pytest.mark.parametrize("attack", ["job_spec.json", "script", "open script"])
def test_submit_starts_no_file_another_user_could_have_written(
    env: Env, docker: Path, run_cli: Callable[..., Any], cli: Callable[..., Any], attack: str
) -> None:
    """In a team's work_dir another member puts a job_spec.json of theirs naming a script of
    theirs, or a script of theirs, in place of the links the build made, or the victim's
    script is open to all: `submit` (as root, often) ran their script. It is refused with one
    line, nothing runs and nothing is recorded."""
    docker_job(env, cli, "echo mine")
    spec = json.loads((env.work / "job_spec.json").read_text())
    script = Path(spec["script_path"])
    ran = env.root / "theirs-ran"
    theirs = f"#!/bin/bash\ntouch {ran}\n"
    if attack == "job_spec.json":
        mine = env.work / "their.sh"
        mine.write_text(theirs)
        mine.chmod(0o755)
        planted(mine)
        new = env.work / "spec.new"
        new.write_text(json.dumps({**spec, "script_path": str(mine)}))
        planted(new)
        os.replace(new, env.work / "job_spec.json")
    elif attack == "script":
        new = env.work / "script.new"
        new.write_text(theirs)
        new.chmod(0o755)
        planted(new)
        os.replace(new, script)
    else:
        os.chmod(script, 0o777)
    code, out, err = run_cli("submit", None, str(env.work))
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert "submit starts only files of yours that nobody else may write" in line, line
    assert not ran.exists()
    assert not (env.work / "submission.json").exists()


@pytest.mark.parametrize("at", ["log", "exit status"])
def test_a_job_writes_nothing_through_a_link_another_user_put_at_its_log(
    env: Env, docker: Path, run_cli: Callable[..., Any], cli: Callable[..., Any], tmp_path: Path,
    at: str,
) -> None:  # fmt: skip
    """In a team's work_dir another member puts a link at the log or exit-status path of the
    job to be started, naming a file of the victim's: the job's output (or its exit status)
    went through it, replacing that file (as root: any file). The job writes its own files
    there, private to its user, and the victim's file is untouched."""
    docker_job(env, cli, "echo job-output")
    victim = tmp_path / "victim.conf"
    victim.write_text("precious\n")
    from trtllm_script_builder.process.submission import RC_FILE

    name = f"{json.loads((env.work / 'job_spec.json').read_text())['model_name']}_local.log"
    target = env.work / (name if at == "log" else RC_FILE + ".tmp")
    target.symlink_to(victim)
    planted(target)
    code, out, err = run_cli("submit", None, str(env.work))
    assert code == 0, out + err
    code, out, err = run_cli("watch", None, str(env.work), "--poll", "0.1", "--timeout", "20")
    assert victim.read_text() == "precious\n"
    log = env.work / name
    assert not log.is_symlink() and "job-output" in log.read_text(), out + err
    assert log.stat().st_mode & 0o077 == 0
    assert (env.work / RC_FILE).read_text().strip() == "0"


def test_a_sweep_never_reaches_through_a_hard_link_or_a_linked_folder(tmp_path: Path) -> None:
    """Planted temporaries with a dead pid: a hard link to a file of the victim's (its owner
    is the victim's, so the name may go, never the file's content) and another user's link
    to a folder of the victim's (left, and nothing in the folder is touched)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("mine\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "keep").write_text("mine\n")
    hard = shared / f".h.tsb-{atomic._HOST}-999999999-{'e' * 12}.tmp"
    os.link(secret, hard)
    linked = shared / f".f.tsb-{atomic._HOST}-999999999-{'f' * 12}.tmp"
    linked.symlink_to(folder)
    planted(linked)
    atomic.sweep(shared)
    assert secret.read_text() == "mine\n"
    assert os.path.islink(linked) and sorted(os.listdir(folder)) == ["keep"]


@pytest.mark.parametrize("how", ["theirs", "open to all"])
def test_a_persistent_state_file_another_user_could_write_is_not_taken(
    tmp_path: Path, how: str
) -> None:
    """In a team's checkout another member rewrites work_dirs/.slurm_alloc.json (the install
    marked done, other mounts) naming the victim's own allocation: it is not reused on the
    file's word; a new allocation is asked for."""
    from trtllm_script_builder.errors import ToolFailed
    from trtllm_script_builder.process.persistent import (
        STATE_FILE,
        checkout_mark,
        ensure_allocation,
        save_state,
        state_dir,
    )

    from .test_persistent import FakeHost, held, spec

    job = spec(2, 2, "gpu:2").model_copy(update={"repo_root": str(tmp_path)})
    save_state(tmp_path, held(8))
    path = state_dir(tmp_path) / STATE_FILE
    if how == "theirs":
        planted(path)
    else:
        path.chmod(0o666)
    host = FakeHost([("7", "RUNNING", checkout_mark(tmp_path))], {"7": ["7.0"]})
    said: list[str] = []
    with pytest.raises(ToolFailed):  # past the file, to a new salloc (the fake has none)
        ensure_allocation(job, None, said.append, host)  # type: ignore[arg-type]
    assert not [s for s in said if s.startswith("reusing allocation")]
    assert host.cancelled() == []  # a job runs in it: left


@pytest.mark.parametrize("where", ["work_dir", "above it"])
def test_a_work_dir_through_another_users_link_is_refused(
    cli: Callable[..., Any], env: Env, tmp_path: Path, where: str
) -> None:
    """Another user makes the work_dir's path (or a folder above it) a link to a folder of the
    victim's: the build wrote its files, `.tsb-sets` and links there (and could be sent
    elsewhere between the checks and the writes). Refused with one line, nothing written."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine\n")
    if where == "work_dir":
        link, work = tmp_path / "their_link", tmp_path / "their_link"
    else:
        link, work = tmp_path / "their_link", tmp_path / "their_link" / "job"
    link.symlink_to(victim)
    planted(link)
    r = cli([], {**env.request(custom_cmd="echo hi"), "work_dir": str(work)})
    assert r.code == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert f"{link} is a link another user (uid {OTHER}) made" in line
    assert sorted(os.listdir(victim)) == ["keep"]


def test_a_build_many_folder_that_is_another_users_link_is_refused(
    cli: Callable[..., Any], env: Env, tmp_path: Path
) -> None:
    """build-many's folder as another user's link to a folder of the victim's: refused before
    its index or any job is written there."""
    from .test_batch import IDS, base_file

    victim = tmp_path / "victim"
    victim.mkdir()
    env.work.parent.mkdir(parents=True, exist_ok=True)
    env.work.symlink_to(victim)
    planted(env.work)
    lst = tmp_path / "list.txt"
    lst.write_text("\n".join(IDS[:2]) + "\n")
    r = cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))])
    assert r.code == 2, r.stderr
    assert f"{env.work} is a link another user (uid {OTHER}) made" in r.stderr
    assert os.listdir(victim) == []
