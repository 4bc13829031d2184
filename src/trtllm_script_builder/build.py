"""The pipeline: request -> resolve -> render -> write, and Category 4's finishing step."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from trtllm_script_builder.atomic import write_file
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.jobspec import OutFile
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.model.site_config import SiteConfig
from trtllm_script_builder.model.slurm_env import SlurmEnv, load_slurm_env
from trtllm_script_builder.output.writer import write_atomically
from trtllm_script_builder.render.job import render_job
from trtllm_script_builder.render.spec import BuildResult, SubmitStep
from trtllm_script_builder.resolve.job import (
    PATTERNS,
    check_request,
    file_stamp,
    refuse_ask,
    resolve,
)
from trtllm_script_builder.resolve.mounts import Ask
from trtllm_script_builder.resolve.resolved import Cluster

__all__ = ["PATTERNS", "BuildResult", "SubmitStep", "build", "finish", "refuse_ask"]


@lru_cache(maxsize=16)
def _cluster_at(stamp: tuple[str, int, int]) -> tuple[SlurmEnv, dict[str, Any]]:
    """A batch of builds reads the cluster file once (keyed by mtime, so an edit is seen)."""
    return load_slurm_env(stamp[0])


def load_cluster(req: Request) -> Cluster | None:
    if not req.is_slurm:
        return None
    assert req.slurm_env_file is not None
    return Cluster(*_cluster_at(file_stamp(req.slurm_env_file)))


def build(req: Request, site: SiteConfig | None = None, ask: Ask | None = None) -> BuildResult:
    check_request(req)  # a missing command or Slurm field is named before any file is read
    job = resolve(req, load_cluster(req), site or SiteConfig(), ask, checked=True)
    return render_job(job)


def _guard(result: BuildResult) -> str | None:
    """Refuse a folder that holds another job or a submitted one; return the old script name."""
    work_dir = result.work_dir
    if not os.path.isdir(work_dir):  # a new folder (build-many's case): nothing to keep
        return None
    if (work_dir / "submission.json").exists():
        raise BuildError(
            "work_dir",
            f"{work_dir} holds a job that was submitted (submission.json)",
            "choose another work_dir, or pass --force to build over it",
        )
    try:
        old = json.loads((work_dir / "job_spec.json").read_text()).get("script_name")
    except (OSError, ValueError, AttributeError):
        return None
    if old and old != result.spec.script_name:
        raise BuildError(
            "work_dir",
            f"{work_dir} holds another job ({old})",
            "choose another work_dir, or pass --force to replace it",
        )
    return None


def finish(result: BuildResult, force: bool = False) -> list[Path]:
    """Write the result; Category 4 runs submit.py first and undoes everything on failure.

    A folder holding another job, or a submitted one, is refused unless `force`: its old
    script beside the new job_spec.json would mislead whoever opens the folder.
    """

    def unwritable(exc: OSError) -> BuildError:
        return BuildError(
            "work_dir",
            f"cannot write into {result.work_dir} ({exc.strerror})",
            "give a folder you can write to",
        )

    try:
        not_a_folder = result.work_dir.exists() and not result.work_dir.is_dir()
    except OSError as exc:  # a name too long, a parent that is a file
        raise unwritable(exc) from None
    if not_a_folder:
        raise BuildError(
            "work_dir", f"{result.work_dir} exists and is not a folder", "give a folder path"
        )
    if not force:
        _guard(result)
    if result.submit is None:
        try:
            return write_atomically(result.work_dir, result.files)
        except OSError as exc:
            raise unwritable(exc) from None
    return _run_submit_step(result)


def _run_submit_step(result: BuildResult) -> list[Path]:
    """Write the files submit.py needs, run it, move its paths for remote, write job_spec."""
    from trtllm_script_builder.process.submit_py import (
        retarget_gpu_lines,
        rewrite_remote_paths,
        run_submit_py,
    )

    step = result.submit
    assert step is not None

    work_dir = result.work_dir
    existed = work_dir.exists()
    saved = _snapshot(work_dir)
    try:
        written = write_atomically(work_dir, step.before)
        run_submit_py(Path(step.repo_root), step.args, cwd=Path(step.repo_root))
        if not step.launch_sh.is_file():
            raise BuildError(
                "repo_root",
                f"submit.py exited 0 but wrote no {step.launch_sh}",
                "check the repo's submit.py",
            )
        if step.rewrite:
            text = rewrite_remote_paths(step.launch_sh.read_text(), **step.rewrite)
            if step.gpu_lines is not None:
                text = retarget_gpu_lines(text, step.gpu_lines)
            write_file(step.launch_sh, text, 0o755)
        # What submit.py wrote besides the launch script travels with it (e.g. test_list.txt).
        after = _snapshot(work_dir)
        made = sorted(
            n
            for n, (stamp, data) in after.items()
            if data is not None and (n not in saved or saved[n][0] != stamp)
        )
        made = [n for n in made if n not in (step.launch_sh.name, "job_spec.json")]
        result.spec.extra_files = sorted(
            {*result.spec.extra_files, *(str(work_dir / n) for n in made)}
        )
        result.files = [OutFile("job_spec.json", result.spec.to_json())]
        return written + [step.launch_sh] + write_atomically(work_dir, result.files)
    except BaseException:
        _restore(work_dir, saved, existed)
        raise


def _snapshot(work_dir: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every top-level entry of work_dir; a regular file with its modification time and bytes
    (to put back if submit.py changes it), anything else by name only (left as it is)."""
    if not work_dir.is_dir():
        return {}
    saved: dict[str, tuple[int, bytes | None]] = {}
    for e in os.scandir(work_dir):
        if e.is_file(follow_symlinks=False):
            saved[e.name] = (e.stat(follow_symlinks=False).st_mtime_ns, Path(e.path).read_bytes())
        else:
            saved[e.name] = (-1, None)
    return saved


def _restore(work_dir: Path, saved: dict[str, tuple[int, bytes | None]], existed: bool) -> None:
    """Put work_dir back as it was: only entries the build made are removed, changed files get
    their old bytes, and folders, symlinks and files that were there are never touched."""
    import shutil

    if not work_dir.exists():
        return
    if not existed:
        shutil.rmtree(work_dir, ignore_errors=True)
        return
    for entry in os.scandir(work_dir):
        p = Path(entry.path)
        if entry.name in saved:
            data = saved[entry.name][1]
            if data is not None and entry.is_file(follow_symlinks=False) and p.read_bytes() != data:
                p.write_bytes(data)
        elif entry.is_dir(follow_symlinks=False):
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    for name, (_, data) in saved.items():
        if data is not None and not os.path.lexists(work_dir / name):
            (work_dir / name).write_bytes(data)
