"""`job_spec.json`, the manifest the executors read, and the files a build produces."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from trtllm_script_builder.model import values

SCHEMA_VERSION = 2
# The script header's and the report's name for each value of job_spec's category.
CATEGORY_TITLES = {
    1: "local Docker command",
    2: "pytest Slurm script",
    3: "custom command Slurm script",
    4: "perf-sanity launch script (the repo's submit.py)",
    5: "trtllm-eval Slurm script",
    6: "trtllm-bench Slurm script",
}


# Each model's validator is built on first use (defer_build): a command pays for the models it
# reads or fills, not for every model it imports.


# The allocation, as #SBATCH lines and job_spec's slurm_params carry it; also what resolve
# decides (a frozen value, shared by the resolved job and its job spec). A comment, not a
# docstring: the schema of job_spec.json has no text for it.
class SlurmParams(BaseModel):
    partition: str
    account: str
    time_limit: str
    nodes: int
    ntasks: int
    ntasks_per_node: int
    gpus_per_node: int
    gres: str | None
    mpi_plugin: str
    # The job's share of its nodes' CPUs and memory (decision gpu-cpu-share); None when unknown.
    cpus_per_task: int | None = None
    mem: str | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class JobSpec(BaseModel):
    """What a build tells the executors: the script, how to read its log, and its sizing."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

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
    # The scripts keep stderr apart (#SBATCH --error); tracebacks land there, so a watcher
    # reads both files.
    error_file_pattern: str | None = None
    # pytest jobs: the JUnit XML file pytest writes, relative to work_dir like the log
    # patterns (`%j` the job id on Slurm); `watch` reads per-test results from it.
    junit_file_pattern: str | None = None
    log_file: str | None = None
    docker_cmd: str | None = None
    success_patterns: list[str]
    failure_patterns: list[str]
    extra_files: list[str] = Field(default_factory=values.empty_list)
    required_devices: int
    node_count: int
    slurm_params: SlurmParams | None = None
    # Embedded as probed, not re-validated or copied: a batch shares one object across jobs.
    slurm_env: Annotated[dict[str, Any] | None, SkipValidation()] = None
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
    # Jobs `submit` starts before this one, in order (an image import, then a compile), each
    # {kind, key, script_name, script_path, log_file_pattern, error_file_pattern, output,
    # [remote_script_path]}; the test job waits for them (sbatch --dependency=afterok).
    prerequisites: list[dict[str, str]] | None = None
    warnings: list[str] = Field(default_factory=values.empty_list)

    def to_json(self) -> str:
        # Absent top-level fields are left out (remote-only, persistent-only, Docker-only);
        # inside slurm_params a null gres is a fact the executors read.
        # One top-level key per line, each value compact: readable, and the C encoder keeps
        # build-many fast (an indented dump runs the pure-Python encoder). Keys are plain names.
        body = []
        for k in JobSpec.model_fields:
            value = getattr(self, k)
            if value is None:
                continue
            if k == "slurm_params":
                value = vars(value)  # the fields, as model_dump gives them, without its cost
            body.append(f'  "{k}": {_dumps(value)}')
        return "{\n" + ",\n".join(body) + "\n}\n"


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
