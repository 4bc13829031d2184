"""`slurm_env.json`: what the probe learnt about a cluster, in the seed's schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trtllm_script_builder.errors import BuildError

NO_SLURM_TOOLS = "SLURM client tools not found"


class Partition(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    state: str | None = None
    time_limit: str | None = None
    nodes: str | None = None
    arch: str | None = None
    gres: str | None = None
    gpus_per_node: int | None = None
    requires_gres: bool = False


class Pmix(BaseModel):
    model_config = ConfigDict(extra="allow")

    available: list[str] = Field(default_factory=list)
    preferred: str | None = None


class SlurmEnv(BaseModel):
    """The probe's output plus the site fields the case-executor merges in (Step 2.5)."""

    # A cluster file may carry keys a newer probe adds; they are kept, not refused.
    model_config = ConfigDict(extra="allow")

    user: str | None = None
    default_account: str | None = None
    accounts: list[str] = Field(default_factory=list)
    default_partition: str | None = None
    partitions: list[Partition] = Field(default_factory=list)
    pmix: Pmix = Field(default_factory=Pmix)
    errors: list[str] = Field(default_factory=list)
    cluster_name: str | None = None
    mounts: list[str] | None = None
    ssh_host: str | None = None
    slurm_user: str | None = None
    remote_cwd: str | None = None
    remote_home: str | None = None  # `probe --ssh` reads $HOME on the cluster
    mfa_style: bool | None = None

    def partition(self, name: str) -> Partition | None:
        return next((p for p in self.partitions if p.name == name), None)

    @property
    def tools_missing(self) -> bool:
        return any(NO_SLURM_TOOLS in e for e in self.errors)


def load_slurm_env(path: str | Path) -> tuple[SlurmEnv, dict[str, Any]]:
    """Read and validate the file; return the model and the raw object (embedded as is)."""
    fix = "probe the cluster first (trtllm-script-builder probe --output slurm_env.json)"
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as exc:
        raise BuildError("slurm_env_file", f"cannot read {path} ({exc.strerror})", fix) from None
    except json.JSONDecodeError as exc:
        raise BuildError("slurm_env_file", f"{path} is not JSON ({exc.msg})", fix) from None
    except UnicodeDecodeError:
        raise BuildError("slurm_env_file", f"{path} is not UTF-8 text", fix) from None
    if not isinstance(raw, dict):
        raise BuildError("slurm_env_file", f"{path} does not hold a JSON object", fix)
    try:
        return SlurmEnv.model_validate(raw), raw
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise BuildError("slurm_env_file", f"{path}: {where}: {err['msg']}", fix) from None
