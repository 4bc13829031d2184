"""Nothing lost (decision atomic-job-set): `build`, `build --force` and `build-many` are killed by
SIGINT, SIGTERM, SIGHUP and SIGKILL at fixed points, at every change a rebuild makes to the file
system, and at seeded random moments; every time the folder reads as the old set or the new
one whole (job_spec.json and the script it names agree), nothing else in the work folder's
parent changed, and no temporary is left (after a SIGKILL: none after the next run). The
stops are made by `tests/interrupt_at.py`, a wrapper of the test suite's own.
A perf-sanity build whose submit.py fails or is interrupted leaves a repository root used as
work_dir exactly as it was: nested folders, modes, symlinks (a dangling one, one pointing
outside, one to a folder) and `.git`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from trtllm_script_builder.atomic import Interrupted, signals_to_exceptions, sweep, temp_name
from trtllm_script_builder.output.sets import CURRENT, SETS, install

from .conftest import Env

CMD = "pytest accuracy/test_tiny.py::TestTiny::test_one"
OLD, NEW = "01:00:00", "02:00:00"
TEMP = re.compile(r"\.tsb-[A-Za-z0-9_.-]+-[0-9]+-[0-9a-f]{12}\.tmp$")
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]
PERF = "pytest perf/test_perf_sanity.py::test_e2e[aggr_upload-tiny_cfg-tiny_tp2pp3] TIMEOUT (60)"
WRAPPER = str(Path(__file__).with_name("interrupt_at.py"))
BEFORE_INSTALL = "trtllm_script_builder.output.writer.install"  # a set staged, nothing moved
IN_INSTALL = "os.symlink"  # inside the switch of an existing folder's set, signals held


def dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def name_of(name: str, pid: int) -> str:
    """The temporary name process pid of this host gives `name`."""
    return temp_name(name).replace(f"-{os.getpid()}-", f"-{pid}-")


Tree = dict[str, tuple[Any, ...]]


def _entry(p: str) -> tuple[Any, ...]:
    st = os.lstat(p)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(p))
    if stat.S_ISDIR(st.st_mode):
        return ("dir", stat.S_IMODE(st.st_mode))
    return ("file", stat.S_IMODE(st.st_mode), hashlib.sha256(Path(p).read_bytes()).hexdigest())


def tree(root: Path) -> Tree:
    """Every path under root as a reader sees it: its type, mode, content hash or symlink
    target (never followed), except that a set's link (`name -> .tsb-sets/current/name`) is
    the entry it reads, and the sets' own folder is left out (see `leftovers`)."""
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if SETS in dirnames:
            dirnames.remove(SETS)
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            entry = _entry(p)
            if entry[0] == "link" and entry[1].startswith(f"{SETS}/{CURRENT}/"):
                entry = _entry(os.path.realpath(p)) if os.path.exists(p) else ("unfilled",)
            out[os.path.relpath(p, root)] = entry
    return out


def temps(t: Tree) -> list[str]:
    return [p for p in t if any(TEMP.search(part) for part in p.split("/"))]


def visible(root: Path) -> Tree:
    """`tree` less the temporaries (what a SIGKILL left, which the next run removes)."""
    t = tree(root)
    return {k: v for k, v in t.items() if not temps([k])}


def leftovers(root: Path) -> list[str]:
    """Temporaries anywhere under root, and in each folder's `.tsb-sets` whatever is not
    `current` or the generation it names (a killed run's, read by nobody)."""
    found = temps(tree(root))
    for sets in root.rglob(SETS):
        names = sorted(p.name for p in sets.iterdir())
        current = os.readlink(sets / CURRENT) if (sets / CURRENT).is_symlink() else None
        found += [f"{sets}/{n}" for n in names if n not in (CURRENT, current)]
        if current is None or current not in names:
            found.append(f"{sets} has no current set")
    return found


def set_time(work: Path) -> str:
    """The set's time limit; fails when job_spec.json and the script it names disagree."""
    spec = json.loads((work / "job_spec.json").read_text())
    script = Path(spec["script_path"]).read_text()
    m = re.search(r"^#SBATCH --time=(\S+)$", script, re.M)
    assert m is not None and m.group(1) == spec["slurm_params"]["time_limit"], (m, spec)
    return m.group(1)


def start(args: list[str], stop: str | None = None, **popen: Any) -> subprocess.Popen[str]:
    """The command line, run as is or (`stop`: a spec of `interrupt_at.py`) with a stop."""
    head = [WRAPPER, stop] if stop else ["-m", "trtllm_script_builder"]
    return subprocess.Popen(
        [sys.executable, *head, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def run(args: list[str], stop: str | None = None) -> str:
    p = start(args, stop)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    return err


def paused(args: list[str], at: str, **popen: Any) -> subprocess.Popen[str]:
    """Started, and now paused before the first call of `at` until its stdin is closed
    (`communicate()` closes it): a pause of no fixed length, so a loaded machine cannot end
    it before the test did what it must meanwhile."""
    p = start(args, f"pause:{at}", stdin=subprocess.PIPE, **popen)
    assert p.stderr is not None
    said = []
    while (line := p.stderr.readline()) and line.strip() != f"tsb-pause {at}":
        said.append(line)
    assert line, "".join(said)  # the point was reached
    return p


def resume(p: subprocess.Popen[str]) -> None:
    """Let a `paused` command go on before `communicate()` (which would close stdin itself)."""
    assert p.stdin is not None
    p.stdin.close()
    p.stdin = None


def blocked_on_a_lock(p: subprocess.Popen[str]) -> None:
    """Wait until `p` waits for a lock another process holds (its `->` line in /proc/locks)."""
    while not any(
        ln.split()[1:2] == ["->"] and ln.split()[5:6] == [str(p.pid)]
        for ln in Path("/proc/locks").read_text().splitlines()
    ):
        assert p.poll() is None, p.communicate()[1]
        time.sleep(0.01)


def kill_at(args: list[str], at: str, sig: int) -> int:
    """Start, wait for the pause point, send sig; the exit status."""
    p = paused(args, at)
    p.send_signal(sig)
    p.communicate(timeout=60)
    return p.returncode


def kill_after(args: list[str], delay: float, sig: int) -> int:
    p = start(args)
    time.sleep(delay)
    p.send_signal(sig)
    p.communicate(timeout=60)
    return p.returncode


@pytest.fixture()
def place(env: Env, tmp_path: Path) -> Path:
    p = tmp_path / "place"
    p.mkdir()
    (p / "neighbour.txt").write_text("not ours\n")
    return p


def request_file(env: Env, work: Path, time_limit: str, name: str) -> str:
    path = env.root / name
    path.write_text(
        json.dumps(env.request(test_cmd=CMD, work_dir=str(work), time_limit=time_limit))
    )
    return str(path)


def test_a_new_job_folder_appears_whole_or_not_at_all(env: Env, place: Path) -> None:
    work = place / "work"
    req = request_file(env, work, NEW, "new.json")
    before = tree(place)
    for sig in SIGNALS:
        code = kill_at(["build", req], "os.rename", sig)  # the staged folder, not yet renamed
        assert code == (130 if sig == signal.SIGINT else -sig)
        after = tree(place)
        if sig == signal.SIGKILL:  # cannot be caught: its folder is left, and swept next
            assert {k: v for k, v in after.items() if not temps([k])} == before
            assert temps(after)
        else:
            assert after == before
    run(["build", req])
    assert set_time(work) == NEW and not leftovers(place)


def both_sets(env: Env, work: Path, place: Path) -> tuple[dict[str, str], dict[str, Tree]]:
    """The requests of the OLD and NEW sets into `work` and the tree of `place` after each was
    built (NEW first, then OLD with --force: OLD is the set there now)."""
    reqs = {
        OLD: request_file(env, work, OLD, "old.json"),
        NEW: request_file(env, work, NEW, "new.json"),
    }
    run(["build", reqs[NEW]])
    trees = {NEW: tree(place)}
    run(["build", "--force", reqs[OLD]])
    trees[OLD] = tree(place)
    return reqs, trees


def test_force_over_an_existing_job_swaps_the_whole_set(env: Env, place: Path) -> None:
    work = place / "work"
    reqs, trees = both_sets(env, work, place)
    assert set_time(work) == OLD and trees[OLD] != trees[NEW]
    now = OLD
    for point in (BEFORE_INSTALL, IN_INSTALL):
        for sig in SIGNALS:
            want = NEW if now == OLD else OLD
            code = kill_at(["build", "--force", reqs[want]], point, sig)
            after = tree(place)
            if sig == signal.SIGKILL:  # cannot be caught: the old set until the switch
                assert leftovers(place), after
                assert visible(place) == trees[now]
                run(["build", "--force", reqs[now]])  # the next run sweeps
                assert tree(place) == trees[now] and not leftovers(place)
            elif point == IN_INSTALL:  # held back until the set is switched, then it ends
                assert code == (130 if sig == signal.SIGINT else -sig)
                assert after == trees[want], sig
                now = want
            else:
                assert code == (130 if sig == signal.SIGINT else -sig)
                assert after == trees[now], sig
            assert set_time(work) == now
            assert sig == signal.SIGKILL or not leftovers(place)


def fresh_old(env: Env, work: Path, reqs: dict[str, str]) -> None:
    """work holds the OLD set as a first build writes it: plain files, no generations."""
    shutil.rmtree(work, ignore_errors=True)
    run(["build", reqs[OLD]])


def current_old(env: Env, work: Path, reqs: dict[str, str]) -> None:
    """work holds the OLD set as a rebuild leaves it: links to its current generation (the
    run also sweeps what a killed one left)."""
    run(["build", "--force", reqs[OLD]])


@pytest.mark.parametrize("layout", [fresh_old, current_old])
def test_a_rebuild_killed_at_every_step_reads_as_one_whole_set(
    env: Env, place: Path, layout: Any
) -> None:
    """SIGKILL before each change a rebuild makes to the file system, one run per change:
    the folder reads as the old set or the new one; the next run leaves no trace."""
    work = place / "work"
    reqs, trees = both_sets(env, work, place)
    layout(env, work, reqs)
    err = run(["build", "--force", reqs[NEW]], "count")
    steps = int(re.findall(r"tsb-ops (\d+)", err)[-1])
    assert steps >= 4
    seen = []
    for k in range(1, steps + 1):
        layout(env, work, reqs)
        assert tree(place) == trees[OLD] and not leftovers(place)
        p = start(["build", "--force", reqs[NEW]], f"kill:SIGKILL:{k}")
        p.communicate(timeout=60)
        assert p.returncode == -signal.SIGKILL, k
        assert visible(place) in (trees[OLD], trees[NEW]), k
        seen.append(set_time(work))
    assert set(seen) == {OLD, NEW}  # killed before the switch and after it
    run(["build", "--force", reqs[NEW]])
    assert tree(place) == trees[NEW] and not leftovers(place)


def test_a_rebuild_terminated_at_every_step_leaves_no_trace(env: Env, place: Path) -> None:
    """SIGTERM before each change: the old set and nothing more, or (once the switch had
    begun, signals held) the new one."""
    work = place / "work"
    reqs, trees = both_sets(env, work, place)
    err = run(["build", "--force", reqs[NEW]], "count")
    run(["build", "--force", reqs[OLD]])
    steps = int(re.findall(r"tsb-ops (\d+)", err)[-1])
    for k in range(1, steps + 1):
        p = start(["build", "--force", reqs[NEW]], f"kill:SIGTERM:{k}")
        p.communicate(timeout=60)
        assert p.returncode == -signal.SIGTERM, k
        assert tree(place) in (trees[OLD], trees[NEW]) and not leftovers(place), k
        set_time(work)
        run(["build", "--force", reqs[OLD]])


def test_random_kills_of_build_force_keep_one_whole_set(env: Env, place: Path) -> None:
    work = place / "work"
    reqs, trees = both_sets(env, work, place)
    rng = random.Random(55)
    for _ in range(8):
        sig, delay = rng.choice(SIGNALS), rng.uniform(0.05, 0.5)
        now = set_time(work)
        want = NEW if now == OLD else OLD
        kill_after(["build", "--force", reqs[want]], delay, sig)
        assert visible(place) in (trees[OLD], trees[NEW]), (sig, delay)
        if sig != signal.SIGKILL:
            assert not leftovers(place), (sig, delay)


def test_build_many_killed_leaves_whole_jobs_and_no_index_temporary(env: Env, place: Path) -> None:
    listing = env.root / "list.txt"
    listing.write_text("accuracy/test_tiny.py::TestTiny::test_one\n" * 600)
    root = place / "many"
    base = {k: v for k, v in env.request().items() if k != "work_dir"}
    reqs = {}
    for limit in (OLD, NEW):
        path = env.root / f"base{limit[1]}.json"
        path.write_text(json.dumps({**base, "time_limit": limit}))
        reqs[limit] = ["build-many", str(listing), "--base", str(path), "--work-dir", str(root)]
    run(reqs[NEW])
    trees = {NEW: tree(place)}
    run([*reqs[OLD], "--force"])
    trees[OLD] = tree(place)
    first = Path(json.loads((root / "jobs.json").read_text())[0]["work_dir"]) / "job_spec.json"
    rng = random.Random(7)
    mixed = 0
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL, signal.SIGHUP):
        want = NEW if set_time(first.parent) == OLD else OLD
        # Killed once the first job folder was replaced, at a random moment in the rest.
        ino = first.stat().st_ino
        p = start([*reqs[want], "--force"])
        deadline = time.monotonic() + 30
        while first.stat().st_ino == ino and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.25))
        p.send_signal(sig)
        p.communicate(timeout=60)
        after = tree(place)
        if sig != signal.SIGKILL:
            assert not temps(after), temps(after)
        else:  # what the next run does in each folder it writes
            for folder in [root, *root.iterdir()]:
                sweep(folder)
            after = tree(place)
        assert not temps(after) and ".jobs.json" not in str(after)
        assert after.keys() == trees[OLD].keys()
        for path, entry in after.items():  # every file is the old one or the new one
            assert entry in (trees[OLD][path], trees[NEW][path]), path
        times = {set_time(job) for job in root.iterdir() if job.is_dir()}
        mixed += len(times) == 2
    assert mixed  # the kills did land while job folders were being written
    run([*reqs[NEW], "--force"])
    assert tree(place) == trees[NEW]


def test_a_sigkill_leftover_does_not_make_build_many_refuse_its_folder(
    env: Env, place: Path
) -> None:
    """The next run removes it first, so the folder is still empty."""
    root = place / "many"
    root.mkdir()
    left = root / name_of("jobs.json", dead_pid())
    left.write_text("[\n")
    listing = env.root / "list.txt"
    listing.write_text("accuracy/test_tiny.py::TestTiny::test_one\n")
    base = env.root / "base.json"
    base.write_text(json.dumps({k: v for k, v in env.request().items() if k != "work_dir"}))
    run(["build-many", str(listing), "--base", str(base), "--work-dir", str(root)])
    (row,) = json.loads((root / "jobs.json").read_text())
    assert sorted(root.iterdir()) == sorted([root / "jobs.json", Path(row["work_dir"])])


# ---------------------------------------------------------------- perf-sanity (submit.py)

SLOW_SUBMIT = '''\
"""A submit.py that writes its files, says so, and then takes its time."""
import os, sys, time
from pathlib import Path

args = sys.argv[1:]
work = Path(args[args.index("--work-dir") + 1])
(work / "test_list.txt").write_text("half\\n")
(work / "slurm_launch.sh").write_text("#!/bin/bash\\n")
Path(os.environ["SLOW_SUBMIT_MARK"]).write_text("written\\n")
time.sleep(30)
'''


def work_folder(env: Env) -> Path:
    """A perf-sanity work_dir full of someone's files (the checkout itself is refused as a
    work_dir: submit.py would write its test_list.txt among the sources)."""
    folder = env.root / "full"
    folder.mkdir(exist_ok=True)
    return folder


def repo_like(env: Env, tmp_path: Path) -> Path:
    """The work_dir, with what a checkout holds."""
    repo = work_folder(env)
    (repo / ".git" / "objects" / "ab").mkdir(parents=True, exist_ok=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "objects" / "ab" / "cdef").write_bytes(b"\x00\x01blob")
    (repo / "a" / "b").mkdir(parents=True)
    (repo / "a" / "b" / "c.txt").write_text("nested\n")
    (repo / "a" / "b" / "run.sh").write_text("#!/bin/sh\n")
    (repo / "a" / "b" / "run.sh").chmod(0o750)
    (repo / "readonly.txt").write_text("r\n")
    (repo / "readonly.txt").chmod(0o444)
    (repo / "test_list.txt").write_text("mine, not submit.py's\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.txt").write_text("outside\n")
    (repo / "link-out").symlink_to(outside / "target.txt")
    (repo / "dangling").symlink_to("no/such/file")
    (repo / "dir-link").symlink_to("a")
    return outside


def perf_request(env: Env) -> str:
    path = env.root / "perf.json"
    path.write_text(
        json.dumps(env.request(test_cmd=PERF, partition="gb", work_dir=str(work_folder(env))))
    )
    return str(path)


def test_perf_sanity_into_a_full_folder_changes_only_its_own_files(
    env: Env, tmp_path: Path
) -> None:
    outside = repo_like(env, tmp_path)
    before, out_before = tree(work_folder(env)), tree(outside)
    run(["build", perf_request(env)])
    after = tree(work_folder(env))
    assert sorted(set(after) - set(before)) == ["job_spec.json", "slurm_launch.sh"]
    changed = sorted(k for k in before if after[k] != before[k])
    assert changed == ["test_list.txt"]  # submit.py's own output, part of the set
    assert tree(outside) == out_before and not leftovers(work_folder(env))
    assert set_time(work_folder(env))
    assert os.readlink(work_folder(env) / "test_list.txt") == f"{SETS}/{CURRENT}/test_list.txt"


def test_perf_sanity_failing_submit_py_leaves_a_full_folder_as_it_was(
    env: Env, tmp_path: Path
) -> None:
    from .test_category4 import FAILING_SUBMIT

    outside = repo_like(env, tmp_path)
    (env.repo / "jenkins/scripts/perf/local/submit.py").write_text(FAILING_SUBMIT)
    before, out_before = tree(work_folder(env)), tree(outside)
    p = start(["build", perf_request(env)])
    _, err = p.communicate(timeout=60)
    assert p.returncode == 3 and "KeyError" in err
    assert tree(work_folder(env)) == before and tree(outside) == out_before
    assert not (work_folder(env) / SETS).exists()


@pytest.mark.parametrize("sig", SIGNALS)
def test_perf_sanity_interrupted_submit_py_leaves_a_full_folder_as_it_was(
    env: Env, tmp_path: Path, sig: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = repo_like(env, tmp_path)
    (env.repo / "jenkins/scripts/perf/local/submit.py").write_text(SLOW_SUBMIT)
    mark = tmp_path / "mark"
    monkeypatch.setenv("SLOW_SUBMIT_MARK", str(mark))
    p = None
    try:
        before, out_before = tree(work_folder(env)), tree(outside)
        p = start(["build", perf_request(env)], start_new_session=True)
        deadline = time.monotonic() + 30
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert mark.exists()
        if sig == signal.SIGINT:
            os.killpg(p.pid, sig)  # Ctrl-C reaches the builder and submit.py alike
        else:
            p.send_signal(sig)  # the builder only: it must stop submit.py itself
        p.communicate(timeout=60)
        assert p.returncode == (130 if sig == signal.SIGINT else -sig)
        if sig == signal.SIGKILL:
            with_left = tree(work_folder(env))
            assert temps(with_left)
            # submit.py dies with the builder (PR_SET_PDEATHSIG, decision submit-py-children)
            time.sleep(0.2)
            sweep(work_folder(env))
        else:
            time.sleep(0.1)  # submit.py was stopped and waited for: nothing more appears
        assert tree(work_folder(env)) == before and tree(outside) == out_before
        assert not (work_folder(env) / SETS).exists()
    finally:
        if p is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)


# ---------------------------------------------------------------- the pieces


def test_sweep_leaves_a_live_process_and_another_host_alone(tmp_path: Path) -> None:
    mine = tmp_path / temp_name("a.json")
    mine.write_text("in progress")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = tmp_path / name_of("b.json", sleeper.pid)
        live.write_text("another live run")
        other = tmp_path / ".c.json.tsb-otherhost-1-0123456789ab.tmp"
        other.write_text("another host's run, on a shared file system")
        assert sweep(tmp_path) == []
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sweep(tmp_path) == [live.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, other.name])


def staged(folder: Path, files: dict[str, str]) -> str:
    stage = folder / temp_name("tsb-set")
    stage.mkdir()
    for name, text in files.items():
        (stage / name).write_text(text)
    return str(stage)


def test_install_switches_the_set_and_keeps_the_rest(tmp_path: Path) -> None:
    (tmp_path / "keep").write_text("mine")
    (tmp_path / "job_spec.json").write_text("old")
    (tmp_path / "old.slurm").write_text("old")
    install(staged(tmp_path, {"job_spec.json": "new", "run.sh": "new"}), str(tmp_path))
    assert {p.name: p.read_text() for p in tmp_path.iterdir() if p.name != SETS} == {
        "keep": "mine",
        "job_spec.json": "new",
        "run.sh": "new",
        "old.slurm": "old",  # not named as the old set's (no `stale`): the user's, kept
    }
    install(staged(tmp_path, {"job_spec.json": "newer"}), str(tmp_path), lambda _: {"old.slurm"})
    assert sorted(p.name for p in tmp_path.iterdir()) == [SETS, "job_spec.json", "keep"]
    assert not leftovers(tmp_path)


def test_signals_become_exceptions_and_the_old_handlers_come_back() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGHUP, lambda s, f: seen.append(s))
    try:
        with pytest.raises(Interrupted) as caught, signals_to_exceptions():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(1)
        assert caught.value.signum == signal.SIGHUP and seen == []
        os.kill(os.getpid(), signal.SIGHUP)  # the old handler is back
        time.sleep(0.05)
        assert seen == [signal.SIGHUP]
        with pytest.raises(KeyboardInterrupt), signals_to_exceptions():  # Python's own
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ignored = signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with signals_to_exceptions():  # an ignored signal stays ignored
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
        signal.signal(signal.SIGHUP, ignored)
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_second_signal_does_not_break_the_cleanup_of_the_first() -> None:
    done = []
    previous = signal.signal(signal.SIGHUP, lambda s, f: None)
    try:
        with pytest.raises(Interrupted), signals_to_exceptions():
            try:
                os.kill(os.getpid(), signal.SIGHUP)
                time.sleep(1)
            finally:
                os.kill(os.getpid(), signal.SIGHUP)
                time.sleep(0.05)
                done.append(True)
        assert done == [True]
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_kill_ends_the_command_by_its_signal_after_its_cleanups(tmp_path: Path) -> None:
    """SIGTERM during a command: its `finally` ran, and the process ends by SIGTERM."""
    code = (
        "import os, signal, sys, time\n"
        "from trtllm_script_builder.atomic import signals_to_exceptions\n"
        "with signals_to_exceptions():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)\n"
        "    finally:\n"
        "        open(sys.argv[1], 'w').write('cleaned')\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "mark")], timeout=30)
    assert done.returncode == -signal.SIGTERM
    assert (tmp_path / "mark").read_text() == "cleaned"
