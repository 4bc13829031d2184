"""The Slurm backend's one submit path (`submit_slurm`): one job (a batch of one) or every built
job of a build-many folder's `jobs.json`, jobs of one shape as one Slurm job array
(decision batch-job-arrays).

Two jobs have the same shape when their job_spec.json files describe the same allocation, host
and prerequisites (decision shape-from-job-spec). A shape of two jobs or more goes in as one
array: a driver script in the batch folder carries the shared `#SBATCH` lines and
`--array=0-(n-1)` (with `%N` from `--max-running`); task i goes into job i's folder, sends its
output where that job_spec says (with the task's own job id for `%j`) and runs the job's own
script. A shape of one job goes in as a plain `sbatch`. A shape of more jobs than the cluster's
MaxArraySize goes in as several arrays, each waiting for the one before under `--max-running`
(decision max-array-size).

Jobs built with `compile` or `sqsh_cache_dir` wait for prerequisites
(decisions compile-chain and batch-prerequisites): each distinct one (by its job_spec `key`: one
import per image file, one compile per checkout, image and build options) is submitted once, before
the arrays, and every array or plain job that needs it goes in with `--dependency=afterok:...` and
`--kill-on-invalid-dep=yes`. On a remote cluster the checkouts the compiles build are synced once
first.

Each job folder gets its `submission.json` (so `watch JOBDIR` follows one job, its chain
included), and a batch folder gets `batch_submission.json`, which `watch DIR` reads. On a
remote cluster the jobs' files are copied to their remote_work_dir first and the drivers go
beside them (remote_batch_dir). When one sbatch fails or the submit is interrupted, everything
it started is cancelled, a job whose sbatch named none included: every job of one submit
carries one Slurm comment, by which squeue finds it (decision sbatch-without-answer).
"""

from __future__ import annotations

import posixpath
import re
import secrets
import shlex
import socket
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from trtllm_script_builder.atomic import cleanly
from trtllm_script_builder.errors import BuildError, ToolFailed
from trtllm_script_builder.model import values
from trtllm_script_builder.model.datafile import parse_json
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process import host as hosts
from trtllm_script_builder.process.chain import (
    ChainJob,
    dependency_args,
    has_compile,
    submit_prerequisites,
)
from trtllm_script_builder.process.gitsync import ssh_failed
from trtllm_script_builder.process.handles import LogNames
from trtllm_script_builder.process.host import Host
from trtllm_script_builder.process.probe import parse
from trtllm_script_builder.process.probe.collect import first_line
from trtllm_script_builder.process.proc import CmdResult
from trtllm_script_builder.process.slurm import submitted_id
from trtllm_script_builder.process.spec_file import (
    check_log_folders,
    check_own_files,
    read_job_spec,
)
from trtllm_script_builder.process.ssh import SSH_FAILED, SshTarget
from trtllm_script_builder.process.submission import (
    Record,
    Say,
    Submission,
    load_submission,
    now,
    read_record,
    record_problem,
    save_submission,
    source_args,
    write_json,
)
from trtllm_script_builder.resolve import backend as be

BATCH_INDEX = "jobs.json"
BATCH_SUBMISSION = "batch_submission.json"
# sbatch's words when the controller's answer did not come back (slurm_strerror's for a socket
# timeout, zero bytes or a failed receive): it may have taken the job all the same
_NO_ANSWER = re.compile(r"timed out|zero bytes|receive", re.I)
# seconds between squeue's looks for the job of an sbatch that named none
LOST_JOB_PAUSES = (0.0, 1.0, 2.0, 4.0, 8.0)
LOST_JOB_WAIT = 30.0  # seconds, at most, for all of them: signals wait meanwhile
SLURM_MAX_ARRAY_SIZE = 1001  # its default; probe reads the cluster's (decision max-array-size)
# The options that name one job's own things; all other #SBATCH lines make the shape.
_OWN = re.compile(r"#SBATCH\s+(--job-name|--output|--error|-J|-o|-e)(=|\s|$)")
_DIRECTIVE = re.compile(r"#SBATCH\s.*")
_LOG_OPTION = re.compile(r"#SBATCH\s+(?:--output|--error|-o|-e)(?:=|\s+)(\S+)\s*")


def is_batch(folder: Path) -> bool:
    """A build-many folder: it holds the index `jobs.json`."""
    return (folder / BATCH_INDEX).is_file()


@dataclass
class Member:
    """One built job of a batch, as its jobs.json row names it."""

    work_dir: Path
    entry: str
    line: int | None = None


class BatchJob(BaseModel):
    model_config = ConfigDict(extra="ignore")

    work_dir: str
    entry: str
    job_id: str
    array_job_id: str | None = None
    array_task_id: int | None = None
    # the job ids of the prerequisites it waits for, in the order of its job_spec
    prerequisites: list[str] | None = None
    # the commit its clone was synced to, which its compile chain checks
    # (decision source-commit-check)
    source_commit: str | None = None


class BatchArray(BaseModel):
    model_config = ConfigDict(extra="ignore")

    job_id: str
    driver: str
    size: int
    max_running: int | None = None


class BatchSubmission(Record):
    """What `submit DIR` started for a build-many folder (its `batch_submission.json`)."""

    model_config = ConfigDict(extra="ignore")

    batch_dir: str
    scenario: str
    submitted_at: str
    host: str
    ssh_host: str | None = None
    remote_batch_dir: str | None = None  # over ssh: where the array drivers were copied
    max_running: int | None = None
    arrays: list[BatchArray]
    jobs: list[BatchJob]
    # every prerequisite submitted for the batch, once each (chain.ChainJob.to_json), in order
    prerequisites: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _values(self) -> BatchSubmission:
        # the file may be edited: its job ids reach scancel (decision shown-never-obeyed)
        problem = record_problem(self.model_dump())
        if problem is not None:
            raise ValueError(problem)
        return self


def read_index(folder: Path) -> list[Member]:
    """The built jobs of `jobs.json`, in its order (rows whose status is not `built` are left
    out: they have no job)."""
    path = folder / BATCH_INDEX
    try:
        rows = parse_json(path.read_text())
    except (OSError, ValueError) as exc:
        raise BuildError(
            "work_dir", f"{path} cannot be read ({exc})", "run build-many into it again"
        ) from None
    if not isinstance(rows, list):
        raise BuildError("work_dir", f"{path} is not a list of jobs", "run build-many again")
    members = []
    for row in rows:
        if not isinstance(row, dict) or row.get("status") != "built":
            continue
        work = row.get("work_dir")
        if not isinstance(work, str) or not work:
            raise BuildError(
                "work_dir", f"{path}: a built row has no work_dir", "run build-many again"
            )
        # a relative work_dir is taken from the batch folder
        line = row.get("line")
        members.append(
            Member(
                folder / work,
                str(row.get("entry", "")),
                line if isinstance(line, int) else None,
            )
        )
    return members


def load_batch_submission(folder: Path) -> BatchSubmission | None:
    return read_record(folder / BATCH_SUBMISSION, BatchSubmission)


def directives(script: str) -> list[str]:
    """The `#SBATCH` lines at the head of a script (sbatch reads none after the first command)."""
    out = []
    for line in script.splitlines()[1:]:
        if not line.startswith("#"):
            break
        if _DIRECTIVE.fullmatch(line):
            out.append(line)
    return out


def shape(spec: JobSpec) -> tuple[object, ...]:
    """What makes jobs share one array, from their job_spec (decision shape-from-job-spec):
    where they run, the kind of script (its #SBATCH lines are made from the allocation), the
    allocation, and the keys of the prerequisites they wait for (one array has one
    --dependency)."""
    params = spec.slurm_params
    return (
        spec.execution_scenario,
        spec.ssh_host,
        spec.category,
        params.model_dump_json() if params is not None else spec.script_path,
        *(f"after {p['key']}" for p in spec.prerequisites or []),
    )


def shared_lines(lines: list[str]) -> list[str]:
    """A script's #SBATCH lines but those naming the job's own things (name, logs)."""
    return [ln for ln in lines if not _OWN.match(ln)]


def group_by_shape(keys: Sequence[tuple[object, ...]]) -> list[list[int]]:
    """Indexes of equal keys, groups in the order of their first member."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def split_arrays(groups: list[list[int]], limit: int) -> list[tuple[list[int], bool]]:
    """The groups cut into arrays Slurm takes (`--array=0-(n-1)` needs n <= MaxArraySize; 0 or 1
    leaves every job alone), each with whether it continues the group before it."""
    size = max(limit, 1)
    return [(g[i : i + size], i > 0) for g in groups for i in range(0, len(g), size)]


def max_array_size(jobs: list[_Job], runner: Host) -> tuple[int, str]:
    """The cluster's MaxArraySize and where it was read: probe's record, else the cluster's
    answer now, else Slurm's default."""
    probed = (jobs[0].spec.slurm_env or {}).get("max_array_size")
    if type(probed) is int and probed >= 0:
        return probed, "the jobs' slurm_env (probe)"
    found = _live_max_array_size(runner)
    if found is None:
        return SLURM_MAX_ARRAY_SIZE, "Slurm's default (`scontrol show config` did not say)"
    return found, "`scontrol show config`"


def _live_max_array_size(runner: Host) -> int | None:
    config = runner(["scontrol", "show", "config"])
    return parse.max_array_size(parse.parse_config(config.out)) if config.rc == 0 else None


_INVALID_ARRAY = "invalid job array specification"


def _array_refused(err: ToolFailed, size: int, limit: int, source: str, runner: Host) -> ToolFailed:
    """sbatch's "Invalid job array specification" for an array the batch cut by `limit`: the
    refusal names the limit, where it came from, what the cluster says now, and the fix
    (decision max-array-size)."""
    live = _live_max_array_size(runner)
    now = "" if live is None else f"; the cluster's MaxArraySize is {live} now"
    said, cut, undone = err.problem.partition("; cancelled the ")
    undone = cut + undone
    if live is not None and live < size:
        fix = (
            f"probe the cluster again (trtllm-script-builder probe -o SLURM_ENV_FILE), build "
            f"the batch again and submit it: it goes in as arrays of at most {max(live, 1)} jobs"
        )
    else:
        fix = (
            "check the array against the cluster (scontrol show config: MaxArraySize, "
            "MaxJobCount; sbatch --test-only on the driver script), then submit again"
        )
    return ToolFailed(
        "sbatch",
        f"{said} (an array of {size} jobs, indexes 0-{size - 1}, cut by MaxArraySize {limit} "
        f"from {source}{now}){undone}",
        fix,
    )


def _also_after(args: list[str], job: str) -> list[str]:
    """`args` that also wait for `job` to end: one --dependency, since a second replaces it."""
    for i, arg in enumerate(args):
        if arg.startswith("--dependency="):
            return [*args[:i], f"{arg},afterany:{job}", *args[i + 1 :]]
    return [*args, f"--dependency=afterany:{job}"]


def array_spec(size: int, max_running: int | None) -> str:
    throttle = f"%{max_running}" if max_running else ""
    return f"0-{size - 1}{throttle}"


def _bash_array(name: str, values: list[str]) -> list[str]:
    return [f"{name}=(", *(f"  {shlex.quote(v)}" for v in values), ")"]


def render_driver(
    shared: list[str],
    job_name: str,
    driver_log: str,
    members: list[tuple[str, str, str, str]],
    max_running: int | None,
) -> str:
    """The array's driver script. `driver_log`: its own log as sbatch reads it (`%` of the
    path escaped, `%A_%a` for the array and the task). `members`: (folder, script, out, err) of
    each task, out and err as paths with `%j` for the task's own job id (err "" for the same
    file as out)."""
    head = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --output={driver_log}",
        f"#SBATCH --array={array_spec(len(members), max_running)}",
        *shared,
        "#",
        "# Slurm job array written by trtllm-script-builder submit for a build-many folder:",
        "# task i goes into job i's folder, writes the logs its job_spec names (%j: the task's",
        "# own job id) and runs that job's own script. Submit the folder again, not this file.",
        "# The paths are single-quoted on purpose: nothing in them expands.",
        "# shellcheck disable=SC2016",
        "set -euo pipefail",
        "",
    ]
    body = [
        *_bash_array("dirs", [m[0] for m in members]),
        *_bash_array("scripts", [m[1] for m in members]),
        *_bash_array("outs", [m[2] for m in members]),
        *_bash_array("errs", [m[3] for m in members]),
        "",
        "i=${SLURM_ARRAY_TASK_ID:?not a task of a job array}",
        'out=${outs[$i]//"%j"/$SLURM_JOB_ID}',
        'err=${errs[$i]//"%j"/$SLURM_JOB_ID}',
        'cd "${dirs[$i]}"',
        'if [[ -n "$err" ]]; then',
        '  exec >"$out" 2>"$err"',
        "else",
        '  exec >"$out" 2>&1',
        "fi",
        'exec bash "${scripts[$i]}"',
    ]
    return "\n".join(head + body) + "\n"


def _now() -> str:
    return now()


def _sync_for_compile(spec: JobSpec, work_dir: Path, say: Say) -> Callable[[SshTarget], str | None]:
    """The step a remote compile chain takes first: the compile job builds remote_repo_path,
    so the local checkout's full state is brought there (decision sync-snapshot) before anything is
    copied or submitted. The step gives the commit the clone is now at, which the chain's
    jobs check when they start (decision source-commit-check); None when remote_repo_path is the
    checkout itself (a shared filesystem: the jobs read its files as they are, not a commit)."""
    from trtllm_script_builder.process import gitsync

    assert spec.remote_repo_path is not None
    remote_repo = spec.remote_repo_path
    # `submit --force` submits again; discarding the clone's changes is `sync --force`'s job
    hint = (
        f"discard them with `trtllm-script-builder sync {shlex.quote(str(work_dir))} --force`, "
        "then submit again"
    )

    def sync(target: SshTarget) -> str | None:
        result = gitsync.sync_checkout(
            target, Path(spec.repo_root), remote_repo, say=say, force_hint=hint
        )
        say(
            f"synced {spec.repo_root} to {target.host}:{remote_repo} at {result.commit} ({result.method})"
        )
        return None if result.method == "shared" else result.commit

    return sync


@dataclass
class _Job:
    member: Member
    spec: JobSpec
    script: Path
    lines: list[str]


def load_jobs(members: list[Member], force: bool) -> list[_Job]:
    jobs: list[_Job] = []
    for m in members:
        spec = read_job_spec(m.work_dir)
        if be.backend_of(spec.execution_scenario).name != "slurm":
            raise BuildError(
                "execution_scenario",
                f"a batch is submitted on {be.scenarios_where(lambda b, _: b.name == 'slurm')}, "
                f"but {m.work_dir} is {spec.execution_scenario}",
                "submit its jobs one at a time: trtllm-script-builder submit JOBDIR",
            )
        if jobs and spec.execution_scenario != jobs[0].spec.execution_scenario:
            raise BuildError(
                "execution_scenario",
                f"the batch mixes {jobs[0].spec.execution_scenario} and "
                f"{spec.execution_scenario} jobs",
                "build the list for one scenario",
            )
        previous = load_submission(m.work_dir)
        if previous is not None and not force:
            raise BuildError(
                "work_dir",
                f"{m.work_dir} was already submitted (job {previous.job_id})",
                "watch the batch with `trtllm-script-builder watch DIR`, or pass --force "
                "to submit it again",
            )
        check_own_files(m.work_dir, spec)
        script = Path(spec.script_path)
        try:
            text = script.read_text()
        except OSError:
            raise BuildError(
                "script_path", f"{script} does not exist", "build the job again into this work_dir"
            ) from None
        jobs.append(_Job(m, spec, script, directives(text)))
    return jobs


def resolve_ssh_host(spec: JobSpec, override: str | None) -> str:
    host = override or spec.ssh_host or (spec.slurm_env or {}).get("ssh_host")
    if not host:
        raise BuildError(
            "ssh_host",
            "job_spec.json and its slurm_env name no ssh_host",
            "pass --ssh-host HOST (or probe the cluster with probe --ssh HOST)",
        )
    return str(host)


def _job_name(lines: list[str]) -> str:
    for ln in lines:
        m = re.fullmatch(r"#SBATCH\s+--job-name=(\S+)", ln)
        if m:
            return m.group(1)
    return "batch"


@dataclass
class _Target:
    """Where the jobs go: the Slurm of this machine's host, or one reached over ssh."""

    runner: Host
    host: str
    ssh_host: str | None = None
    # (repo_root, remote_repo_path) -> the commit synced there (decision source-commit-check)
    commits: dict[tuple[str, str | None], str | None] = field(default_factory=dict)
    # the Slurm comment of every job this submit makes: it finds a job whose sbatch named
    # none (decision sbatch-without-answer)
    mark: str = field(default_factory=lambda: "tsb-submit-" + secrets.token_hex(8))
    lost: bool = False  # an sbatch may have made a job it did not name
    user: str | None = None  # the cluster's user name, when reaching it said (over ssh)

    def commit(self, spec: JobSpec) -> str | None:
        """The commit the job's compile chain checks its clone against; None without one."""
        if not has_compile(spec):
            return None
        return self.commits.get((spec.repo_root, spec.remote_repo_path))

    def sbatch(
        self,
        script: str,
        cwd: str,
        started: list[str],
        job_dir: Path,
        extra: Sequence[str] = (),
    ) -> str:
        self.lost = True  # until sbatch answers: an interrupt may come while it runs
        res = self.runner(["sbatch", "--parsable", f"--comment={self.mark}", *extra, script], cwd)
        job = submitted_id(res) if res.rc == 0 else None
        if job is None:
            # no answer: sbatch timed out, its connection was lost, or it printed no job id
            self.lost = res.rc == 0 or self.no_answer(res) or bool(_NO_ANSWER.search(res.err))
            note, unknown = cleanly(lambda: self.undo(started))
            where = f"on {self.ssh_host}: " if self.ssh_host else ""
            fix = f"check the job against the cluster: trtllm-script-builder check {job_dir}"
            if unknown:
                fix = "once slurmctld answers, scancel the job that squeue line shows, then submit again"
            raise ToolFailed("sbatch", f"{where}{first_line(res)}{note}", fix)
        self.lost = False
        started.append(job)
        return job

    def no_answer(self, res: CmdResult) -> bool:
        """Whether a tool got no answer: it timed out, or ssh lost the connection (whether the
        command ran there is not known)."""
        return res.timed_out or self.ssh_host is not None and res.rc == SSH_FAILED

    def undo(self, started: list[str]) -> tuple[str, bool]:
        """Cancel every job this submit made (nothing half-submitted: they all go again), a job
        an unanswered sbatch made included. Returns what it did, for the error, and whether a
        job may be left that squeue did not show."""
        note, extra = "", []
        if self.lost:
            user = self.user or hosts.host_user(self.runner)
            extra = self.find_lost(user, started)
            if extra:
                note = f" (job {', '.join(extra)} by this submit's comment: its sbatch named none)"
            else:
                note = (
                    f"; sbatch may have submitted a job all the same: `squeue -u {user} -o "
                    f"'%F %k'` shows it with the comment {self.mark}"
                )
        every = [*started, *extra]
        if every:  # the list is emptied only once scancel has run
            self.runner(["scancel", *every])
        started.clear()
        unknown, self.lost = self.lost and not extra, False
        return (f"; cancelled the {len(every)} already submitted{note}" if every else note), unknown

    def find_lost(self, user: str, started: list[str]) -> list[str]:
        """`user`'s jobs with this submit's comment that no sbatch named (an array by its base
        id: `%A` gives each running task an id of its own). slurmctld may still be working
        through the request sbatch gave up on, so squeue is asked again a few times, within
        LOST_JOB_WAIT in all, and not after a squeue that got no answer."""
        deadline = time.monotonic() + LOST_JOB_WAIT
        for pause in LOST_JOB_PAUSES:
            time.sleep(pause)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            res = self.runner(["squeue", "-h", "-u", user, "-o", "%F %k"], timeout=left)
            if self.no_answer(res):
                break
            rows = (line.split() for line in res.out.splitlines()) if res.rc == 0 else ()
            found = [w[0] for w in rows if w[1:] == [self.mark] and w[0] not in started]
            if found := [j for j in dict.fromkeys(found) if values.JOB_ID.fullmatch(j)]:
                return found
        return []


def log_folders(jobs: list[_Job], remote: bool, driver_dir: str | None) -> list[str]:
    """Every folder Slurm writes a log of these jobs into, where they run: each job's folder
    (sbatch's default `slurm-%j.out`), the folders of its log patterns, its prerequisites' and
    its script's `--output`/`--error`, and the array drivers' folder."""
    found = [] if driver_dir is None else [driver_dir]
    for j in jobs:
        base = _where(j, remote).work_dir
        patterns = [j.spec.log_file_pattern, j.spec.error_file_pattern]
        for p in j.spec.prerequisites or []:
            patterns += [p.get("log_file_pattern"), p.get("error_file_pattern")]
        for line in j.lines:
            m = _LOG_OPTION.fullmatch(line)
            # sbatch reads `%%` in a path as `%` (a folder's own `%`, escaped by the build)
            patterns.append(m.group(1).replace("%%", "%") if m else None)
        found.append(base)
        found += [posixpath.dirname(posixpath.join(base, p)) for p in patterns if p]
    return list(dict.fromkeys(found))


def _target(
    jobs: list[_Job], override: str | None, say: Say, driver_dir: str | None = None
) -> _Target:
    """This machine's Slurm, or the remote one the jobs name: reached, the folders their logs
    go to checked (decision slurm-logs-folder-is-private), its checkouts synced for the
    compiles, and the jobs' files copied to their remote_work_dir."""
    be.refuse_options(jobs[0].spec, ssh_host=override)
    if not be.over_ssh(jobs[0].spec.execution_scenario):
        here = hosts.host_for(None)
        check_log_folders(here, log_folders(jobs, False, driver_dir))
        return _Target(here, socket.gethostname())
    names = {resolve_ssh_host(j.spec, override) for j in jobs}
    if len(names) > 1:
        raise BuildError(
            "ssh_host",
            f"the batch's jobs name more than one host ({', '.join(sorted(names))})",
            "pass --ssh-host HOST",
        )
    host = names.pop()
    on = hosts.OverSsh(host)
    hello = on.check()
    if hello.rc != 0:
        raise ssh_failed(hello, host)
    check_log_folders(on, log_folders(jobs, True, driver_dir))
    commits = _sync_checkouts(jobs, SshTarget(host), say)
    for repo in dict.fromkeys(j.spec.remote_repo_path for j in jobs if j.spec.remote_repo_path):
        if on(["test", "-d", repo]).rc != 0:
            say(
                f"warning: {repo} does not exist on {host}; the job mounts it (sync the repo there first)"
            )
    # each job's files into its remote_work_dir: one copy per folder
    by_dir: dict[str, list[Path]] = {}
    for j in jobs:
        remote = _remote(j)
        files = by_dir.setdefault(remote.work_dir, [])
        files.append(j.script)
        for extra in j.spec.extra_files:
            if not Path(extra).is_file():
                raise BuildError(
                    "extra_files",
                    f"{extra} does not exist",
                    "build the job again into this work_dir",
                )
            # a file in a folder of work_dir (submit.py's lm_eval_configs/) keeps its folder
            sub = posixpath.relpath(posixpath.dirname(extra), j.spec.work_dir)
            if sub != "." and not sub.startswith(".."):
                by_dir.setdefault(posixpath.join(remote.work_dir, sub), []).append(Path(extra))
            else:
                files.append(Path(extra))
    for remote_dir, files in by_dir.items():
        copied = on.copy(files, remote_dir)
        if copied.rc != 0:
            raise ToolFailed(
                "remote_work_dir",
                f"copying to {host}:{remote_dir} failed: {first_line(copied)}",
                "check that the folder can be written",
            )
        if len(by_dir) == 1:
            say(f"copied {len(files)} file(s) to {host}:{remote_dir}")
    if len(by_dir) > 1:
        say(f"copied the scripts of {len(jobs)} job(s) to {host} ({len(by_dir)} folder(s))")
    return _Target(on, host, host, commits, user=hosts.user_in(hello))


def _sync_checkouts(
    jobs: list[_Job], target: SshTarget, say: Say
) -> dict[tuple[str, str | None], str | None]:
    """The remote compiles build remote_repo_path: bring each checkout there once (the step
    single-job submit takes, decision sync-snapshot), before anything is copied or submitted. Gives
    the commit each clone is at, which the jobs check when they start
    (decision source-commit-check)."""
    compiling = [j for j in jobs if has_compile(j.spec)]
    into: dict[str | None, str] = {}
    for j in compiling:  # one clone holds one state: two checkouts cannot both be there
        first = into.setdefault(j.spec.remote_repo_path, j.spec.repo_root)
        if first != j.spec.repo_root:
            raise BuildError(
                "remote_repo_path",
                f"the batch syncs both {first} and {j.spec.repo_root} into "
                f"{target.host}:{j.spec.remote_repo_path}, which holds one of them at a time",
                "build the jobs of each checkout with a remote_repo_path of its own, "
                "or submit them as separate batches one after the other",
            )
    done: dict[tuple[str, str | None], str | None] = {}
    for j in compiling:
        where = (j.spec.repo_root, j.spec.remote_repo_path)
        if where not in done:
            done[where] = _sync_for_compile(j.spec, j.member.work_dir, say)(target)
    return done


@dataclass
class _Where:
    """A job's folder and script where Slurm runs it (remote_work_dir over ssh)."""

    work_dir: str
    script: str


def _remote(j: _Job) -> _Where:
    if not j.spec.remote_work_dir or not j.spec.remote_script_path:
        raise BuildError(
            "remote_work_dir",
            "job_spec.json has no remote_work_dir/remote_script_path",
            f"build the job for {be.scenarios_where(lambda b, s: s in b.over_ssh)} again",
        )
    return _Where(j.spec.remote_work_dir, j.spec.remote_script_path)


def _where(j: _Job, remote: bool) -> _Where:
    if remote:
        return _remote(j)
    return _Where(j.spec.work_dir or str(j.member.work_dir), str(j.script))


def remote_batch_dir(folders: list[str], name: str) -> str:
    """Where an array's driver goes on the remote host: beside the jobs' remote folders, in a
    folder named after the batch."""
    common = posixpath.commonpath(folders) if len(set(folders)) > 1 else folders[0]
    return common if posixpath.basename(common) == name else posixpath.join(common, name)


def submit_batch(
    folder: Path,
    *,
    max_running: int | None = None,
    force: bool = False,
    ssh_host: str | None = None,
    say: Say = lambda _: None,
) -> BatchSubmission:
    """Submit every built job of the build-many folder `folder`; refuses a folder (or a job of
    it) already submitted unless `force`."""
    folder = folder.resolve()
    previous = load_batch_submission(folder)
    if previous is not None and not force:
        raise BuildError(
            "work_dir",
            f"{folder} was already submitted as a batch ({previous.submitted_at})",
            "watch it with `trtllm-script-builder watch DIR`, or pass --force to submit it again",
        )
    members = read_index(folder)
    if not members:
        raise BuildError(
            "work_dir", f"{folder / BATCH_INDEX} lists no built job", "run build-many again"
        )
    _, batch = submit_slurm(
        load_jobs(members, force),
        folder=folder,
        max_running=max_running,
        ssh_host=ssh_host,
        say=say,
    )
    assert batch is not None
    return batch


def submit_slurm(
    jobs: list[_Job],
    *,
    folder: Path | None = None,
    max_running: int | None = None,
    ssh_host: str | None = None,
    say: Say = lambda _: None,
) -> tuple[list[Submission], BatchSubmission | None]:
    """The one way jobs go to Slurm, one job (`folder` None) or a build-many folder's: their
    prerequisites once each, then jobs of one shape as one array (a batch's), the others as
    plain jobs; every job's submission.json, and the batch's record. When an sbatch fails or
    the run is interrupted, everything it started is cancelled
    (decision interrupted-submit-undone)."""
    from trtllm_script_builder.resolve.job import check_sbatch_value

    _refuse_shared_wheel_dirs(jobs)
    groups = group_by_shape([shape(j.spec) for j in jobs])
    remote = be.over_ssh(jobs[0].spec.execution_scenario)
    driver_dir = str(folder)
    if folder is not None:
        if remote and any(len(g) > 1 for g in groups):
            driver_dir = remote_batch_dir([_remote(j).work_dir for j in jobs], folder.name)
        check_sbatch_value(driver_dir, "remote_work_dir" if remote else "work_dir")
    arrays = folder is not None and any(len(g) > 1 for g in groups)
    target = _target(jobs, ssh_host, say, driver_dir if arrays else None)
    started: list[str] = []
    try:
        return _submit_all(folder, jobs, groups, target, started, driver_dir, max_running, say)
    except BaseException:  # interrupted, or failed: nothing of this run is left running
        if started or target.lost:
            cleanly(lambda: _say_undone(target.undo(started)[0], say))
        raise


def _say_undone(note: str, say: Say) -> None:
    if note:
        say(note.removeprefix("; "))


def _submit_all(
    folder: Path | None,
    jobs: list[_Job],
    groups: list[list[int]],
    target: _Target,
    started: list[str],
    driver_dir: str,
    max_running: int | None,
    say: Say,
) -> tuple[list[Submission], BatchSubmission | None]:
    """Every array and job, then their records (decision interrupted-submit-undone)."""
    from trtllm_script_builder.atomic import signals_held, write_file
    from trtllm_script_builder.process.submission import err_path, log_path

    scenario = jobs[0].spec.execution_scenario
    remote = target.ssh_host is not None
    arrays: list[BatchArray] = []
    rows: list[BatchJob | None] = [None] * len(jobs)
    subs: list[Submission | None] = [None] * len(jobs)
    known: dict[str, ChainJob] = {}
    chains: list[list[ChainJob]] = []
    for j in jobs:  # the prerequisites first, each key once (decision batch-prerequisites)
        at = _where(j, remote)

        def sbatch(script: str, extra: list[str], j: _Job = j, at: _Where = at) -> str:
            pin = source_args(target.commit(j.spec))
            return target.sbatch(script, at.work_dir, started, j.member.work_dir, pin + extra)

        chains.append(submit_prerequisites(j.spec, sbatch, at.work_dir, remote=remote, known=known))
    for c in known.values() if len(jobs) > 1 else ():  # one job's record says them
        users = sum(1 for chain in chains if any(p.key == c.key for p in chain))
        say(f"submitted {c.kind} job {c.job_id} for {users} job(s)")
    _hint_wheel_dirs(known, say)

    def record(i: int, job: str, array: str | None, task: int | None) -> None:
        j = jobs[i]
        at = _where(j, remote)
        log = err = None
        if array is None:
            names = LogNames(j.spec.log_file_pattern, j.spec.error_file_pattern, at.work_dir)
            log, err = names.paths(job)
        chain = chains[i]
        subs[i] = Submission(
            prerequisites=[c.to_json() for c in chain] or None,
            scenario=scenario,
            work_dir=str(j.member.work_dir),
            submitted_at=_now(),
            host=target.host,
            ssh_host=target.ssh_host,
            remote_work_dir=at.work_dir if remote else None,
            script=at.script,
            job_id=job,
            log_file=log,
            err_file=err,
            array_job_id=array,
            array_task_id=task,
            batch_dir=str(folder) if folder is not None else None,
            source_commit=target.commit(j.spec),
        )
        rows[i] = BatchJob(
            work_dir=str(j.member.work_dir),
            entry=j.member.entry,
            job_id=job,
            array_job_id=array,
            array_task_id=task,
            prerequisites=[c.job_id for c in chain] or None,
            source_commit=target.commit(j.spec),
        )

    limit, source = max(map(len, groups)), ""
    if limit > 1:
        limit, source = max_array_size(jobs, target.runner)
    parts = split_arrays(groups, limit)
    last = ""
    for g, continues in parts:
        # the same for the group: the prerequisites, hence the clone, are part of its shape
        after = source_args(target.commit(jobs[g[0]].spec)) + dependency_args(chains[g[0]])
        if continues and max_running:  # the throttle holds for the whole group
            after = _also_after(after, last)
        if len(g) == 1:
            j = jobs[g[0]]
            at = _where(j, remote)
            last = job = target.sbatch(at.script, at.work_dir, started, j.member.work_dir, after)
            record(g[0], job, None, None)
            if chains[g[0]] and len(jobs) > 1:
                say(f"submitted job {job}{_after_text(chains[g[0]])} ({j.member.work_dir.name})")
            continue
        assert folder is not None  # one job is a group of one
        k = len(arrays)
        tasks = []
        for i in g:
            j = jobs[i]
            at = _where(j, remote)
            out = log_path(j.spec.log_file_pattern, "%j", at.work_dir) or posixpath.join(
                at.work_dir, "slurm-%j.out"
            )
            err = log_path(j.spec.error_file_pattern, "%j", at.work_dir) or err_path(out) or ""
            tasks.append((at.work_dir, at.script, out, err))
        first = jobs[g[0]]
        shared = shared_lines(first.lines)
        for i in g[1:]:  # the array asks for the first job's allocation on behalf of all
            if shared_lines(jobs[i].lines) != shared:
                raise BuildError(
                    "script_path",
                    f"{jobs[i].script} asks Slurm for another allocation than {first.script}, "
                    "though their job_spec.json files describe the same one (an edited script)",
                    "build the jobs again",
                )
        text = render_driver(
            shared,
            _job_name(first.lines),
            driver_dir.replace("%", "%%") + f"/batch_array{k}_%A_%a.out",
            tasks,
            max_running,
        )
        driver = folder / f"batch_array{k}.slurm"
        write_file(driver, text)
        if remote:
            copied = target.runner.copy([driver], driver_dir)
            if copied.rc != 0:  # what this submit started is cancelled on the way out
                raise ToolFailed(
                    "remote_work_dir",
                    f"copying to {target.host}:{driver_dir} failed: {first_line(copied)}",
                    "check that the folder can be written",
                )
        script = posixpath.join(driver_dir, driver.name) if remote else str(driver)
        try:
            last = array = target.sbatch(script, driver_dir, started, first.member.work_dir, after)
        except ToolFailed as err:
            if _INVALID_ARRAY not in err.problem.lower():
                raise
            raise _array_refused(err, len(g), limit, source, target.runner) from None
        arrays.append(BatchArray(job_id=array, driver=script, size=len(g), max_running=max_running))
        for t, i in enumerate(g):
            record(i, f"{array}_{t}", array, t)
        throttle = f", at most {max_running} at once" if max_running else ""
        waits = _after_text(chains[g[0]])
        cut = f" (MaxArraySize is {limit})" if len(parts) > len(groups) else ""
        say(
            f"submitted array {array}: {len(g)} jobs of one shape{throttle}{waits}{cut} "
            f"({driver.name})"
        )
    batch = None
    if folder is not None:
        batch = BatchSubmission(
            batch_dir=str(folder),
            scenario=scenario,
            submitted_at=_now(),
            host=target.host,
            ssh_host=target.ssh_host,
            remote_batch_dir=driver_dir if remote else None,
            max_running=max_running,
            arrays=arrays,
            jobs=[r for r in rows if r is not None],
            prerequisites=[c.to_json() for c in known.values()] or None,
        )
    saved = [sub for sub in subs if sub is not None]
    with signals_held():  # the records whole, and then nothing of the run is undone
        for j, sub in zip(jobs, saved, strict=True):
            save_submission(j.member.work_dir, sub)
        if batch is not None and folder is not None:
            write_json(folder / BATCH_SUBMISSION, batch.model_dump(exclude_none=True))
        started.clear()
    return saved, batch


def _after_text(chain: list[ChainJob]) -> str:
    if not chain:
        return ""
    return " after " + ", ".join(f"{c.kind} job {c.job_id}" for c in chain)


_DIST_DIR = re.compile(r" --dist_dir \S+")


def _refuse_shared_wheel_dirs(jobs: list[_Job]) -> None:
    """Two different compiles writing into one wheel folder: each empties it for its own
    wheel, so a test job could install the other build's wheel (decision one-wheel-per-folder)."""
    builds: dict[str, dict[str, str]] = {}  # wheel folder -> compile key -> first job's name
    for j in jobs:
        for p in j.spec.prerequisites or []:
            m = _DIST_DIR.search(p["key"]) if p["kind"] == "compile" else None
            if m is not None:
                builds.setdefault(m.group(0).split()[-1], {}).setdefault(
                    p["key"], j.member.work_dir.name
                )
    for folder, keys in builds.items():
        if len(keys) > 1:
            shown = "; ".join(
                f"{name}: {_DIST_DIR.sub('', key).removeprefix('compile:')}"
                for key, name in keys.items()
            )
            raise BuildError(
                "wheel_dir",
                f"{len(keys)} different compiles of the batch build into {folder} ({shown}), "
                "and each empties it for its own wheel, so a job could install the other's",
                "give the jobs of each build a wheel_dir of their own, or build them alike",
            )


def _hint_wheel_dirs(known: dict[str, ChainJob], say: Say) -> None:
    """Compiles that differ only in their wheel folder are the same build done again: say
    how to build once (the default wheel_dir is each job's own folder)."""
    builds = Counter(_DIST_DIR.sub("", c.key) for c in known.values() if c.kind == "compile")
    again = sum(n for n in builds.values() if n > 1)
    if again:
        say(
            f"note: {again} compile jobs differ only in their wheel folder; set wheel_dir "
            "in the base request to build once for the whole batch"
        )
