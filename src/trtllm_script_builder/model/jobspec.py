"""`job_spec.json`, the manifest the executors read, and the writer that lands all files at once."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

SCHEMA_VERSION = 1


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


def write_atomically(work_dir: Path, files: list[OutFile]) -> list[Path]:
    """Land every file in work_dir, or none of them.

    A new work_dir is filled under a temporary name beside it and renamed into place, so it
    appears whole (one rename: build-many makes thousands). An existing one gets each file under
    a temporary name, then the renames. A failure before the renames leaves the disk as it was,
    parents made here included; the renames themselves do not fail short of a broken disk.
    """
    made: list[str] = []
    d = os.path.dirname(os.path.abspath(work_dir))
    while not os.path.exists(d):
        made.append(d)
        d = os.path.dirname(d)
    fresh = not os.path.lexists(work_dir)
    tag = f".{os.getpid()}.tmp"
    stage = f"{os.path.dirname(os.path.abspath(work_dir))}/.{work_dir.name}{tag}"
    temps: list[tuple[str, Path]] = []
    try:
        for m in reversed(made):
            os.mkdir(m)
        if fresh:
            os.mkdir(stage)
        for f in files:
            tmp = f"{stage}/{f.name}" if fresh else f"{work_dir}/.{f.name}{tag}"
            temps.append((tmp, work_dir / f.name))
            _write_new(tmp, f.text.encode(), 0o755 if f.executable else 0o644)
        if fresh:
            os.rename(stage, work_dir)
        else:
            for tmp, final in temps:
                os.replace(tmp, final)
    except BaseException:
        for tmp, _ in temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for leftover in ([stage] if fresh else []) + made:
            with contextlib.suppress(OSError):
                os.rmdir(leftover)
        raise
    return [final for _, final in temps]


def _write_new(path: str, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
