"""Persistent mode of the Slurm backend (a held allocation jobs run in), for a cluster whose
tools run on this machine.

One allocation per repo, held by `salloc --no-shell` under the job name
`<account>-trtllm.persistent`, is described by `<repo_root>/work_dirs/.slurm_alloc.json`
(keys: job_id, container_name, nodelist, partition, account, nodes, gpus_per_node,
docker_image, container_mounts, allocated_at, time_limit, installed). A job runs inside it as
`bash <script>` with SLURM_JOB_ID etc. exported, so the script's sruns become steps of the
allocation (its #SBATCH lines are then only comments). The allocation is reused while it is
RUNNING with more than 5 minutes left, on the same partition and account, with at least the
nodes and tasks per node the job needs and the same image; otherwise it is cancelled and a
new one is made. It is never released automatically: `trtllm-script-builder release`.

The allocation asks for what the job needs, as a batch job would (decision gpu-gres-request): the
job's GRES and `--ntasks-per-node` = max(the job's tasks, its GPUs) per node; a held allocation at
least that large is reused, a smaller one replaced. No separate set-up steps run: the script's own
install srun installs into the named container (pyxis keeps named containers for the life of
the allocation), so `installed` stays false. The allocation carries this checkout's mark in its
Slurm comment: one held under the same job name with this checkout's mark and no state file
naming it (a lost state file) is cancelled before a new allocation is made, unless a step runs
in it; another checkout's allocation, or one with a job running, is never cancelled here
(decision persistent-own-allocation).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import socket
import stat
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trtllm_script_builder.atomic import read_regular, read_regular_stat, write_file
from trtllm_script_builder.errors import BuildError, ToolFailed
from trtllm_script_builder.model import values
from trtllm_script_builder.model.datafile import parse_json
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process.host import Here, Host, host_user
from trtllm_script_builder.process.probe.collect import first_line
from trtllm_script_builder.process.proc import Runner, spawn_detached, start_time
from trtllm_script_builder.process.submission import RC_FILE, Say, Submission, write_json
from trtllm_script_builder.slurm_time import parse_time_minutes, time_to_seconds

STATE_FILE = ".slurm_alloc.json"
SALLOC_LOG = ".salloc.log"
LOCK_FILE = ".slurm_alloc.lock"
DEFAULT_ALLOC_TIME = "04:00:00"
MIN_LEFT_SECONDS = 300
ALLOC_WAIT_SECONDS = int(os.environ.get("TSB_ALLOC_WAIT", "600"))


class AllocState(BaseModel):
    """The state file is ours: unknown keys are refused, and every value is checked as a
    request's is (decision one-validation-layer), for another process may have written it. A file
    that fails is ignored, as if there were none: a new allocation replaces it."""

    model_config = ConfigDict(extra="forbid")

    # A job id becomes an argument of scancel and squeue, so only a Slurm job id is taken
    # (never an option such as `--user=NAME`).
    job_id: str = Field(pattern=r"^[0-9]+$")
    container_name: str | None = None
    nodelist: str | None = None
    partition: str
    account: str
    nodes: int
    gpus_per_node: int
    docker_image: str
    container_mounts: str | None = None
    allocated_at: str
    time_limit: str
    installed: bool = False

    @model_validator(mode="after")
    def _values(self) -> AllocState:
        found = values.tree_problem(self.model_dump())
        if found is not None:
            raise ValueError(f"{found[0]} {found[1]}")
        for name in (self.partition, self.account):
            if not values.SLURM_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a Slurm name")
        if self.container_name is not None and not values.MODEL_NAME.fullmatch(self.container_name):
            raise ValueError("container_name is not a container name")
        if not values.NODELIST.fullmatch(self.nodelist or ""):
            raise ValueError("nodelist is not a Slurm node list")
        parse_time_minutes(self.time_limit)  # a ValueError when it is not a time
        try:
            values.check_image(self.docker_image, "docker_image")
        except BuildError as err:
            raise ValueError(err.problem) from None
        return self


def state_dir(repo_root: str | Path) -> Path:
    return Path(repo_root) / "work_dirs"


def job_name(account: str) -> str:
    return f"{account}-trtllm.persistent"


def load_state(repo_root: str | Path) -> AllocState | None:
    path = state_dir(repo_root) / STATE_FILE
    # a state file is a few hundred bytes; never through a link nor from a named pipe, which
    # held submit and release for ever (decision shared-work-dir)
    got = read_regular_stat(str(path), 0, values.MAX_ARG_BYTES)
    if got is None:
        return None
    data, st = got
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        # another user's, or open to them, in a team's checkout: what it says (the image, the
        # mounts, whether the install ran) is not taken (decision records-acted-on-are-own)
        return None
    try:
        return AllocState.model_validate(parse_json(data.decode()))
    except (ValueError, ValidationError):  # UnicodeDecodeError is a ValueError
        return None


def save_state(repo_root: str | Path, state: AllocState) -> Path:
    path = state_dir(repo_root) / STATE_FILE
    write_json(path, state.model_dump())
    return path


def remove_state(repo_root: str | Path) -> None:
    for name in (STATE_FILE, SALLOC_LOG):
        (state_dir(repo_root) / name).unlink(missing_ok=True)


@contextlib.contextmanager
def locked(repo_root: str | Path) -> Iterator[None]:
    """One submit/release at a time per repo."""
    d = state_dir(repo_root)
    d.mkdir(parents=True, exist_ok=True)
    path = d / LOCK_FILE
    try:  # not through a link, nor a named pipe (an open for writing waits for a reader)
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
    except OSError as exc:
        raise BuildError(
            "repo_root", f"{path} cannot be opened ({exc.strerror})", "remove it"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _tasks_per_node(spec: JobSpec) -> int:
    """Tasks per node to hold: the job's, or its GPUs per node when more (one task per GPU
    lets a later job of the same GPU count run one rank per GPU)."""
    p = spec.slurm_params
    assert p is not None
    m = re.fullmatch(r"gpu:(?:[^:,]+:)?(\d{1,9})", p.gres or "")
    gpus = int(m.group(1)) if m else spec.required_devices // max(p.nodes, 1)
    return max(p.ntasks_per_node, gpus, 1)


def reuse_problem(state: AllocState, spec: JobSpec, runner: Runner) -> str | None:
    """Why the held allocation cannot take this job (None: it can)."""
    p = spec.slurm_params
    assert p is not None
    res = runner(["squeue", "-h", "-j", state.job_id, "-o", "%T %L"])
    words = res.out.split() if res.rc == 0 else []
    if len(words) < 2:
        return f"allocation {state.job_id} is gone"
    if words[0] != "RUNNING":
        return f"allocation {state.job_id} is {words[0]}"
    left = time_to_seconds(words[1])
    if left is not None and left <= MIN_LEFT_SECONDS:
        return f"allocation {state.job_id} has only {words[1]} left"
    if state.partition != p.partition:
        return f"it is on partition {state.partition}, the job wants {p.partition}"
    if state.account != p.account:
        return f"it is under account {state.account}, the job wants {p.account}"
    if state.nodes < p.nodes:
        return f"it has {state.nodes} node(s), the job wants {p.nodes}"
    if state.gpus_per_node < _tasks_per_node(spec):
        want = _tasks_per_node(spec)
        return f"it holds {state.gpus_per_node} GPU(s) per node, the job wants {want}"
    if state.docker_image != spec.container_image:
        return f"it was set up for image {state.docker_image}"
    return None


def cancel(runner: Runner, job_id: str) -> None:
    runner(["scancel", job_id])


def checkout_mark(repo_root: str | Path) -> str:
    """The Slurm comment of the allocations this checkout makes: which checkout holds one."""
    real = os.path.realpath(repo_root)
    return "tsb-persistent-" + hashlib.sha256(real.encode()).hexdigest()[:16]


def made_here(job_id: str, repo_root: str | Path, host: Host) -> bool:
    """Whether the allocation is this user's and carries this checkout's mark: a state file
    names an allocation, but it may have come with a copied checkout (`cp -a`), from another
    process, or from another user of a team's checkout, and the mark is only a comment, which
    anyone may give their own allocation (decision persistent-own-allocation). An allocation
    that is gone carries no mark."""
    res = host(["squeue", "-h", "-j", job_id, "-o", "%u %k"])
    return res.rc == 0 and res.out.split() == [host_user(host), checkout_mark(repo_root)]


def cancel_orphans(account: str, repo_root: str | Path, host: Host, say: Say) -> None:
    """This checkout's allocations under the persistent job name that its state file lost,
    when no step runs in them; any other is named and left alone."""
    user = host_user(host)
    res = host(["squeue", "-u", user, "-h", "-o", "%i %T %k", f"--name={job_name(account)}"])
    mark = checkout_mark(repo_root)
    for line in res.out.splitlines() if res.rc == 0 else []:
        words = line.split()
        if len(words) < 2 or not values.JOB_ID.fullmatch(words[0]):
            continue
        job, state = words[0], words[1]
        if words[2:] != [mark]:
            say(f"leaving allocation {job} ({state}): another checkout's, or not made by this tool")
        elif steps := active_steps(host, job):
            say(f"leaving allocation {job} ({state}): a job runs in it ({', '.join(steps)})")
        else:
            say(f"cancelling orphaned allocation {job} ({state}) of this checkout")
            cancel(host, job)


def alloc_time_for(spec: JobSpec, requested: str | None) -> str:
    """--alloc-time, else 04:00:00 capped at the partition's MaxTime from slurm_env."""
    if requested:
        return requested
    p = spec.slurm_params
    limit = None
    for part in (spec.slurm_env or {}).get("partitions") or []:
        if isinstance(part, dict) and p is not None and part.get("name") == p.partition:
            limit = part.get("time_limit")
    default = time_to_seconds(DEFAULT_ALLOC_TIME) or 0
    cap = time_to_seconds(limit) if isinstance(limit, str) else None
    if cap is not None and cap < default:
        return limit  # type: ignore[return-value]
    return DEFAULT_ALLOC_TIME


def allocate(spec: JobSpec, alloc_time: str, host: Host, say: Say) -> AllocState:
    p = spec.slurm_params
    assert p is not None
    argv = [
        "salloc",
        "--no-shell",
        f"--immediate={ALLOC_WAIT_SECONDS}",
        f"--job-name={job_name(p.account)}",
        f"--partition={p.partition}",
        f"--account={p.account}",
        f"--nodes={p.nodes}",
        f"--ntasks-per-node={_tasks_per_node(spec)}",
        f"--time={alloc_time}",
        f"--comment={checkout_mark(spec.repo_root)}",
    ]
    if p.gres:
        argv.append(f"--gres={p.gres}")
    # the job's share of the nodes' CPUs and memory, which its steps ask for (decision gpu-cpu-share)
    argv += [f"--cpus-per-task={p.cpus_per_task}"] if p.cpus_per_task else []
    argv += [f"--mem={p.mem}"] if p.mem else []
    say(f"allocating: {' '.join(argv)}")
    res = host(argv, timeout=ALLOC_WAIT_SECONDS + 60)
    # replaced whole, never written through a link another user of the checkout put there
    write_file(state_dir(spec.repo_root) / SALLOC_LOG, res.text + "\n")
    m = re.search(r"Granted job allocation (\d+)", res.text)
    if res.rc != 0 or m is None:
        pending = re.search(r"job allocation (\d+)", res.text)
        if pending:
            cancel(host, pending.group(1))
        raise ToolFailed("salloc", first_line(res), "check partition, account and time limit")
    job = m.group(1)
    nodelist = host(["squeue", "-h", "-j", job, "-o", "%N"]).out.strip()
    return AllocState(
        job_id=job,
        container_name=spec.container_name,
        nodelist=nodelist or None,
        partition=p.partition,
        account=p.account,
        nodes=p.nodes,
        gpus_per_node=_tasks_per_node(spec),
        docker_image=spec.container_image,
        container_mounts=spec.container_mounts,
        allocated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        time_limit=alloc_time,
        installed=False,
    )


def ensure_allocation(
    spec: JobSpec, alloc_time: str | None, say: Say, host: Host | None = None
) -> AllocState:
    """Reuse the held allocation if it fits the job, else cancel it and allocate anew; the
    scheduler's tools run on `host` (default: here)."""
    host = host or Here()
    p = spec.slurm_params
    assert p is not None
    state = load_state(spec.repo_root)
    if state is not None and not made_here(state.job_id, spec.repo_root, host):
        say(
            f"leaving allocation {state.job_id}: the state file names an allocation that is not "
            "this user's with this checkout's mark (a copied checkout, another checkout's or "
            "another user's); not using it"
        )
        remove_state(spec.repo_root)
        state = None
    if state is not None:
        problem = reuse_problem(state, spec, host)
        if problem is None:
            if state.container_name != spec.container_name:
                # a new container name means pyxis imports (and the script installs) again
                state.container_name = spec.container_name
                state.container_mounts = spec.container_mounts
                state.installed = False
                save_state(spec.repo_root, state)
            say(f"reusing allocation {state.job_id} on {state.nodelist}")
            return state
        steps = active_steps(host, state.job_id)
        if steps:
            # the allocation still runs a job of this checkout: cancelling would end it
            raise BuildError(
                "persistent",
                f"allocation {state.job_id} cannot take this job ({problem}) and a job runs in "
                f"it ({', '.join(steps)})",
                "wait for that job (watch it), or `release` the allocation and submit again",
            )
        say(f"not reusing allocation {state.job_id}: {problem}; cancelling it")
        cancel(host, state.job_id)
        remove_state(spec.repo_root)
    cancel_orphans(p.account, spec.repo_root, host, say)
    state = allocate(spec, alloc_time_for(spec, alloc_time), host, say)
    save_state(spec.repo_root, state)
    say(f"holding allocation {state.job_id} on {state.nodelist} until released")
    return state


def allocation_env(state: AllocState, spec: JobSpec) -> dict[str, str]:
    """This process's environment without SLURM_*, plus the allocation's."""
    p = spec.slurm_params
    assert p is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    nodelist = state.nodelist or ""
    env.update(
        {
            "SLURM_JOB_ID": state.job_id,
            "SLURM_JOBID": state.job_id,
            "SLURM_JOB_NUM_NODES": str(p.nodes),
            "SLURM_NNODES": str(p.nodes),
            "SLURM_NTASKS": str(p.ntasks),
            "SLURM_NTASKS_PER_NODE": str(p.ntasks_per_node),
            "SLURM_NODELIST": nodelist,
            "SLURM_JOB_NODELIST": nodelist,
        }
    )
    return env


def submit_persistent(
    spec: JobSpec, work_dir: Path, alloc_time: str | None, say: Say
) -> Submission:
    if not spec.persistent_mode or spec.slurm_params is None:
        raise BuildError(
            "persistent_mode",
            "this job was built without persistent mode",
            "build it with --persistent-mode, or submit without --persistent",
        )
    script = Path(spec.script_path)
    if not script.is_file():
        raise BuildError(
            "script_path", f"{script} does not exist", "build the job again into this work_dir"
        )
    with locked(spec.repo_root):
        state = ensure_allocation(spec, alloc_time, say)
        log = work_dir / f"{spec.model_name}_{spec.workflow_type}.log"
        rc_file = work_dir / RC_FILE
        pid = spawn_detached(script, log, rc_file, cwd=work_dir, env=allocation_env(state, spec))
    return Submission(
        scenario=spec.execution_scenario,
        work_dir=str(work_dir),
        submitted_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        host=socket.gethostname(),
        script=str(script),
        job_id=state.job_id,
        pid=pid,
        pid_start=start_time(pid),
        rc_file=str(rc_file),
        log_file=str(log),
        persistent=True,
        alloc_job_id=state.job_id,
        alloc_state_file=str(state_dir(spec.repo_root) / STATE_FILE),
        container_name=spec.container_name,
    )


def release(repo_root: str | Path, host: Host | None = None) -> str | None:
    """Cancel the held allocation (on `host`, default here) and remove the state file;
    returns the job id (or None)."""
    with locked(repo_root):
        state = load_state(repo_root)
        raw_id: str | None = state.job_id if state else None
        if raw_id is None:
            path = state_dir(repo_root) / STATE_FILE
            raw = read_regular(str(path), 0, values.MAX_ARG_BYTES)
            with contextlib.suppress(ValueError, AttributeError):
                raw_id = str(parse_json(raw.decode()).get("job_id") or "") or None if raw else None
            if raw_id is not None and not values.JOB_ID.fullmatch(raw_id):
                raw_id = None  # never an option of scancel (`--user=NAME`)
        host = host or Here()
        if raw_id and not made_here(raw_id, repo_root, host):
            gone = host(["squeue", "-h", "-j", raw_id, "-o", "%T"])
            if gone.rc == 0 and gone.out.strip():  # it runs, and is not this checkout's
                path = state_dir(repo_root) / STATE_FILE
                raise BuildError(
                    "repo_root",
                    f"allocation {raw_id}, which {path} names, is not this checkout's (another "
                    "user's, or it carries another checkout's mark, or none): it was not cancelled",
                    f"remove {path}; cancel that allocation from the checkout that made it",
                )
            raw_id = None  # gone already: nothing to cancel
        if raw_id:
            cancel(host, raw_id)
        remove_state(repo_root)
    return raw_id


def active_steps(runner: Runner, job_id: str) -> list[str]:
    res = runner(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"])
    steps = res.out.split() if res.rc == 0 else []
    return [w for w in steps if re.fullmatch(rf"{re.escape(job_id)}\.\d+", w)]
