"""Reading WORK_DIR/job_spec.json back: the one reader check, submit, watch and run share."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from trtllm_script_builder.errors import BuildError
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
        return JobSpec.model_validate_json(text)
    except ValidationError as exc:
        err = exc.errors()[0]
        # only the first problem: the fix (a rebuild) is the same for all of them
        key = ".".join(str(p) for p in err["loc"]) or "(whole file)"
        raise BuildError(
            "work_dir", f"{path}: {key}: {err['msg']}", "rebuild the job with this version"
        ) from None
