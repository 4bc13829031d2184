"""Reading WORK_DIR/job_spec.json back: the one reader check, submit, watch and run share."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model import values
from trtllm_script_builder.model.jobspec import JobSpec

JOB_SPEC = "job_spec.json"


def read_job_spec(work_dir: Path) -> JobSpec:
    """The validated job_spec.json of work_dir; a BuildError on work_dir when it is missing,
    unreadable, not JSON, or not what this version writes."""
    path = Path(work_dir) / JOB_SPEC
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BuildError(
            "work_dir",
            f"{work_dir} holds no job_spec.json",
            "build the job first (trtllm-script-builder build ...)",
        ) from None
    except OSError as exc:
        raise BuildError(
            "work_dir", f"{path} cannot be read ({exc.strerror})", "check its permissions"
        ) from None
    try:
        spec = JobSpec.model_validate_json(text)
    except ValidationError as exc:
        err = exc.errors()[0]
        # only the first problem: the fix (a rebuild) is the same for all of them
        key = ".".join(str(p) for p in err["loc"]) or "(whole file)"
        raise BuildError(
            "work_dir", f"{path}: {key}: {err['msg']}", "rebuild the job with this version"
        ) from None
    problem = _unsafe(spec)
    if problem is not None:
        key, what = problem
        raise BuildError("work_dir", f"{path}: {key}: {what}", "rebuild the job with this version")
    return spec


def _unsafe(spec: JobSpec) -> tuple[str, str] | None:
    """The first value that submit, watch or release would pass to a program and that no
    build writes (an edited file): checked as a request's values are (decision 69)."""
    for key in ("script_path", "work_dir", "remote_work_dir", "remote_script_path"):
        value = getattr(spec, key)
        if value is not None and (values.text_problem(value) or not values.is_absolute_path(value)):
            return key, f"is not an absolute path (got {values.shown(value)})"
    checks = (("container_name", values.MODEL_NAME), ("ssh_host", values.HOST))
    for key, pattern in checks:
        value = getattr(spec, key)
        if value is not None and not pattern.fullmatch(value):
            return key, f"is not a {key.replace('_', ' ')} (got {values.shown(value)})"
    return None
