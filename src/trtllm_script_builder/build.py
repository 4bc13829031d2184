"""The pipeline: request -> resolve -> render -> write, and Category 4's finishing step."""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from trtllm_script_builder.atomic import foreign_links, open_regular, write_file
from trtllm_script_builder.backends import BACKENDS
from trtllm_script_builder.errors import BuildError, refusal
from trtllm_script_builder.model import values
from trtllm_script_builder.model.datafile import parse_json
from trtllm_script_builder.model.jobspec import OutFile
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.model.site_config import SiteConfig
from trtllm_script_builder.model.slurm_env import SlurmEnv, load_slurm_env
from trtllm_script_builder.output.template_cache import use_template_cache
from trtllm_script_builder.output.writer import staged_set, write_atomically, write_files
from trtllm_script_builder.render.job import render_job
from trtllm_script_builder.render.spec import BuildResult, SubmitStep
from trtllm_script_builder.resolve.backend import queued
from trtllm_script_builder.resolve.job import (
    refuse_ask,
    request_problems,
    resolve,
)
from trtllm_script_builder.resolve.mounts import Ask
from trtllm_script_builder.resolve.resolved import Cluster
from trtllm_script_builder.resolve.stamp import file_stamp
from trtllm_script_builder.workflows import WORKFLOWS

assert WORKFLOWS.names(), "importing the workflows registers them"
assert BACKENDS.names(), "and the backends"

__all__ = ["BuildResult", "SubmitStep", "build", "finish", "refuse_ask"]


@lru_cache(maxsize=16)
def _cluster_at(stamp: tuple[str, int, int]) -> tuple[SlurmEnv, dict[str, Any]]:
    """A batch of builds reads the cluster file once (keyed by mtime, so an edit is seen)."""
    return load_slurm_env(stamp[0])


def load_cluster(req: Request) -> Cluster | None:
    if not queued(req):
        return None
    assert req.slurm_env_file is not None
    return Cluster(*_cluster_at(file_stamp(req.slurm_env_file)))


def _gpus_found_here(req: Request) -> tuple[Request, str | None]:
    """A local_docker request that gives no GPU count of this machine: nvidia-smi counts them,
    and the warning says so (decision gpus-per-node)."""
    env = req.env_check
    if queued(req) or req.gpus_per_node or (env and (env.gpus_per_node or env.available_gpus)):
        return req, None
    from trtllm_script_builder.backends.docker import gpus_here

    found = gpus_here()
    if found is None:
        return req, None
    count, said = found
    note = f"gpus_per_node {count}: {said} (env_check gives no count)"
    return req.model_copy(update={"gpus_per_node": count}), note


def problems_of(req: Request) -> list[BuildError]:
    """What is wrong with a request before its job is sized: command, Slurm fields, host
    paths, the cluster file and the names in it, a line each. load_request asks it too when
    the request's own checks failed, so every problem comes in one answer."""
    problems: list[BuildError] = []
    cluster = None
    if queued(req) and req.slurm_env_file:
        try:
            cluster = load_cluster(req)
        except BuildError as err:
            problems.append(err)
    seen = {p.field for p in problems}
    problems += [p for p in request_problems(req, cluster) if p.field not in seen]
    order = list(Request.model_fields)
    return sorted(problems, key=lambda e: order.index(e.field) if e.field in order else len(order))


def build(req: Request, site: SiteConfig | None = None, ask: Ask | None = None) -> BuildResult:
    # A missing command or Slurm field is named before any file is read, with every other
    # problem found so far.
    if problems := problems_of(req):
        raise refusal(problems)
    req, found = _gpus_found_here(req)
    job = resolve(req, load_cluster(req), site or SiteConfig(), ask, checked=True)
    if found:
        job = replace(job, warnings=(*job.warnings, found))
    use_template_cache()
    result = render_job(job)
    if result.submit is not None:  # refused now, so a dry run refuses what the build refuses
        from trtllm_script_builder.process.submit_py import require_submit_py

        require_submit_py(Path(result.submit.repo_root))
    return result


def work_dir_parent_warnings(work_dir: str | Path, repo_root: str | None = None) -> list[str]:
    """work_dir is made with the folders above it, as a missing work_dir always was; that
    those folders did not exist is said (decision work-dir-parent-made), since a typo in a path
    (`/home/me/wrok/job`) makes a new tree nobody looks in. The checkout's `work_dirs/`, the
    tool's own folder for jobs, is made without a word. A file in the way is refused."""
    parent = os.path.dirname(os.path.abspath(work_dir))
    if os.path.isdir(parent):
        return []
    own = repo_root and os.path.join(os.path.abspath(repo_root), "work_dirs")
    if parent == own and os.path.isdir(repo_root or ""):
        return []
    name = os.path.basename(os.path.abspath(work_dir))
    if os.path.lexists(parent):
        raise BuildError(
            "work_dir",
            f"{parent}, the folder {name} is made in, is not a folder",
            "correct the path (a file is in the way)",
        )
    return [
        f"work_dir: {values.shown(parent)} did not exist and is made with {name}; "
        "check the path if you meant an existing folder"
    ]


def _guard(result: BuildResult, old: dict[str, Any]) -> None:
    """Refuse a folder that holds another job or a submitted one (`old`: its job_spec)."""
    work_dir = result.work_dir  # an existing folder: `finish` guards no new one
    if (work_dir / "submission.json").exists():
        raise BuildError(
            "work_dir",
            f"{work_dir} holds a job that was submitted (submission.json)",
            "choose another work_dir, or pass --force to build over it",
        )
    name = old.get("script_name")
    if name and name != result.spec.script_name:
        raise BuildError(
            "work_dir",
            f"{work_dir} holds another job ({values.shown(name)})",
            "choose another work_dir, or pass --force to replace it",
        )


def refuse_foreign_link(work_dir: Path) -> None:
    """work_dir, or a folder above it, must not be a link another user made (decision
    work-dir-links-are-own): they may point it anywhere, at any moment, as the kernel's
    protected_symlinks keeps from sticky folders (when it is on)."""
    links = foreign_links(work_dir)
    if links:
        uid, link = links[0]
        raise BuildError(
            "work_dir",
            f"{link} is a link another user (uid {uid}) made: the job's files would go "
            "wherever they point it",
            "give the real folder's path, or one without another user's links",
        )


def finish(result: BuildResult, force: bool = False) -> list[Path]:
    """Write the result as one set, or leave work_dir as it was (decision atomic-job-set); Category
    4 runs submit.py first, in a private folder.

    A folder holding another job, or a submitted one, is refused unless `force`: its old
    script beside the new job_spec.json would mislead whoever opens the folder.
    """

    def unwritable(exc: OSError) -> BuildError:
        return BuildError(
            "work_dir",
            f"cannot write into {result.work_dir} ({exc.strerror})",
            "give a folder you can write to",
        )

    refuse_foreign_link(result.work_dir)
    try:
        mode: int | None = os.stat(result.work_dir).st_mode
    except OSError as exc:  # a name too long; a missing folder (or a parent that is a file)
        if exc.errno not in _MISSING:
            raise unwritable(exc) from None
        mode = None
    if mode is not None and not stat.S_ISDIR(mode):
        raise BuildError(
            "work_dir", f"{result.work_dir} exists and is not a folder", "give a folder path"
        )
    fresh = mode is None  # build-many's case: nothing to guard or to replace
    if not force and not fresh:
        _guard(result, _old_spec(result.work_dir))
    if result.submit is None:
        try:
            return write_atomically(result.work_dir, result.files, _stale)
        except OSError as exc:
            raise unwritable(exc) from None
    return _run_submit_step(result, unwritable)


# What Path.exists() takes for "not there"; any other error (a name too long) is the user's.
_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)
# The names the tool gives scripts (`<model>_<kind>.slurm`, compile.slurm, docker_cmd.sh, ...).
_SCRIPT_NAME = re.compile(r"[\w.+-]{1,250}\.(?:slurm|sh)")


def _old_spec(work_dir: Path) -> dict[str, Any]:
    """The folder's previous job_spec.json ({} when there is none that can be read, or when
    it is no regular file: a named pipe of that name would hang the build)."""
    try:
        with open_regular(work_dir / "job_spec.json") as f:
            old = parse_json(f.read(4 << 20).decode())
    except (OSError, ValueError):  # not regular; UnicodeDecodeError and DataError: ValueErrors
        return {}
    return old if isinstance(old, dict) else {}


def _old_scripts(old: dict[str, Any]) -> set[str]:
    """The scripts the folder's previous build wrote, as its job_spec.json names them (the
    job's script and its compile/import scripts): nothing else in the folder is ours."""
    names = [old.get("script_name")]
    prereqs = old.get("prerequisites")
    if isinstance(prereqs, list):
        names += [p.get("script_name") for p in prereqs if isinstance(p, dict)]
    return {n for n in names if isinstance(n, str) and _SCRIPT_NAME.fullmatch(n)}


def _stale(work_dir: str) -> set[str]:
    """The scripts the job_spec.json being replaced names: those the new set does not have go
    once it is in place (a rebuild with --force over another job, or without the compile it
    had); only regular files, never a link or a folder of that name (decision atomic-job-set). Read
    while the folder is locked for the commit, so a build that committed meanwhile counts."""
    return _old_scripts(_old_spec(Path(work_dir)))


# submit.py's flags whose value is a path in work_dir: given in the private folder instead.
_PATH_FLAGS = ("--work-dir", "--launch-sh", "--config-file")


def _run_submit_step(
    result: BuildResult, unwritable: Callable[[OSError], BuildError]
) -> list[Path]:
    """submit.py writes into a private folder; its files, the launch script's paths moved to
    work_dir (and for remote to the cluster's), and job_spec.json then land as one set.

    submit.py never sees work_dir, so whatever it does or however it ends, what was in work_dir
    (even a repository root) is left as it was; only the set's own names are replaced, and only
    once the whole set is written (`staged_set`, decision atomic-job-set).
    """
    from trtllm_script_builder.process.submit_py import (
        fit_launch,
        retarget_gpu_lines,
        rewrite_remote_paths,
        run_submit_py,
        script_gres,
    )

    step = result.submit
    assert step is not None
    work_dir = Path(os.path.abspath(result.work_dir))
    launch_name = step.launch_sh.name
    try:
        with staged_set(work_dir, _stale) as stage:
            write_files(stage, step.before)
            # Paths the build writes, as the same paths in the private folder.
            ours: dict[str, Path] = {}
            for d in dict.fromkeys((str(result.work_dir), str(work_dir))):
                ours[d] = stage
                ours.update({f"{d}/{f.name}": stage / f.name for f in step.before})
            ours[str(step.launch_sh)] = stage / launch_name
            args = list(step.args)
            for i, arg in enumerate(args[:-1]):
                if arg in _PATH_FLAGS and args[i + 1] in ours:
                    args[i + 1] = str(ours[args[i + 1]])
            said = run_submit_py(Path(step.repo_root), args, cwd=Path(step.repo_root))
            launch = stage / launch_name
            if not launch.is_file():
                raise BuildError(
                    "repo_root",
                    f"submit.py exited 0 but wrote no {step.launch_sh}",
                    "check the repo's submit.py",
                )
            text = launch.read_text()
            # The paths submit.py wrote are the private folder's: back to work_dir's.
            for private in dict.fromkeys((str(stage), os.path.realpath(stage))):
                text = rewrite_remote_paths(
                    text, repo_root="", remote_repo_path="", work_dir=private,
                    remote_work_dir=str(work_dir),
                )  # fmt: skip
            if step.rewrite:
                text = rewrite_remote_paths(text, **step.rewrite)
                if step.gpu_lines is not None:
                    text = retarget_gpu_lines(text, step.gpu_lines)
            version = (result.spec.slurm_env or {}).get("slurm_version")
            text, notes = fit_launch(text, version if isinstance(version, str) else None)
            write_file(launch, text, 0o755)
            # a note the resolve step already gave (the same text) is said once
            result.spec.warnings = list(dict.fromkeys([*result.spec.warnings, *said, *notes]))
            # job_spec's GRES is the one the script asks for (submit.py's, or ours for remote)
            if result.spec.slurm_params is not None:
                result.spec.slurm_params = result.spec.slurm_params.model_copy(
                    update={"gres": script_gres(text)}
                )
            # What submit.py wrote besides the launch script travels with it (test_list.txt,
            # the files of lm_eval_configs/ for an accuracy config).
            made = sorted(
                str(p.relative_to(stage))
                for p in stage.rglob("*")
                if p.is_file() and p.name != "job_spec.json" and p != stage / launch_name
            )
            # a file the resolve step expected (test_list.txt) is listed only when it was made
            result.spec.extra_files = sorted(
                {*(str(work_dir / f.name) for f in step.before), *(str(work_dir / n) for n in made)}
            )
            result.files = [OutFile("job_spec.json", result.spec.to_json())]
            write_file(stage / "job_spec.json", result.files[0].text)
    except OSError as exc:
        raise unwritable(exc) from None
    firsts = [work_dir / f.name for f in step.before]
    return firsts + [step.launch_sh, work_dir / "job_spec.json"]
