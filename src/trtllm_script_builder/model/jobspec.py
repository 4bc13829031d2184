"""`job_spec.json`, the manifest the executors read, and the files a build produces."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

SCHEMA_VERSION = 1
# The script header's and the report's name for each value of job_spec's category.
CATEGORY_TITLES = {
    1: "local Docker command",
    2: "pytest Slurm script",
    3: "custom command Slurm script",
    4: "perf-sanity launch script (the repo's submit.py)",
    5: "trtllm-eval Slurm script",
    6: "trtllm-bench Slurm script",
}


class SlurmParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    partition: str
    account: str
    time_limit: str
    nodes: int
    ntasks: int
    ntasks_per_node: int
    gpus_per_node: int
    gres: str | None
    mpi_plugin: str


class JobSpec(BaseModel):
    """Step 5 of the seed plus `category`, sizing and `schema_version` (DESIGN)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    workflow_type: str
    category: int = Field(ge=1, le=6)
    model_name: str
    execution_scenario: str
    container_image: str
    docker_image: str
    script_path: str
    script_name: str
    log_file_pattern: str | None = None
    # The seed's scripts keep stderr apart (#SBATCH --error); tracebacks land there, so a
    # watcher reads both files.
    error_file_pattern: str | None = None
    log_file: str | None = None
    docker_cmd: str | None = None
    success_patterns: list[str]
    failure_patterns: list[str]
    extra_files: list[str] = Field(default_factory=list)
    required_devices: int
    node_count: int
    slurm_params: SlurmParams | None = None
    # Embedded as probed, not re-validated or copied: a batch shares one object across jobs.
    slurm_env: SkipValidation[dict[str, Any] | None] = None
    work_dir: str
    repo_root: str
    llm_models_root: str | None = None
    remote_repo_path: str | None = None
    remote_work_dir: str | None = None
    remote_script_path: str | None = None
    ssh_host: str | None = None
    persistent_mode: bool | None = None
    container_name: str | None = None
    container_mounts: str | None = None
    warnings: list[str] = Field(default_factory=list)

    def to_json(self) -> str:
        # Absent top-level fields are left out (remote-only, persistent-only, Docker-only);
        # inside slurm_params a null gres is a fact the executors read.
        data = self.model_dump(exclude={"slurm_env"})
        data["slurm_env"] = self.slurm_env
        # One top-level key per line, each value compact: readable, and the C encoder keeps
        # build-many fast (an indented dump runs the pure-Python encoder). Keys are plain names.
        body = ",\n".join(
            f'  "{k}": {_dumps(data[k])}' for k in type(self).model_fields if data[k] is not None
        )
        return "{\n" + body + "\n}\n"


_last_env: tuple[Any, str] | None = None
# What json.dumps does for a str; called directly, it skips the encoder set-up per value.
_json_str = json.encoder.encode_basestring_ascii


def _dumps(value: Any) -> str:
    """json.dumps, remembering the last slurm_env object: a batch embeds the same one each time."""
    global _last_env
    if type(value) is str:
        return _json_str(value)
    if type(value) is int:
        return str(value)
    if isinstance(value, dict) and "partitions" in value:
        if _last_env is None or _last_env[0] is not value:
            _last_env = (value, json.dumps(value))
        return _last_env[1]
    return json.dumps(value)


@dataclass(frozen=True)
class OutFile:
    name: str
    text: str
    executable: bool = False
