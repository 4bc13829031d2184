"""`slurm_env.json`: what the probe learnt about a cluster, in the schema of
decision cluster-file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model import values
from trtllm_script_builder.model.datafile import DataError, parse_json

NO_SLURM_TOOLS = "SLURM client tools not found"


class _ClusterFile(BaseModel):
    # A cluster file may carry keys a newer probe adds; they are kept, not refused. The
    # validators are built on first use, by the commands that read a cluster file.
    model_config = ConfigDict(extra="allow", defer_build=True)


class Partition(_ClusterFile):
    name: str
    state: str | None = None
    time_limit: str | None = None
    nodes: str | None = None
    arch: str | None = None
    gres: str | None = None
    gpus_per_node: int | None = None
    requires_gres: bool = False
    # The smallest node's usable CPUs and memory (MiB), for a job's share (decision gpu-cpu-share).
    cpus_per_node: int | None = None
    mem_per_node_mb: int | None = None


class Pmix(_ClusterFile):
    available: list[str] = Field(default_factory=values.empty_list)
    preferred: str | None = None


class SlurmEnv(_ClusterFile):
    """The probe's output plus the site fields the case-executor merges in."""

    user: str | None = None
    default_account: str | None = None
    accounts: list[str] = Field(default_factory=values.empty_list)
    default_partition: str | None = None
    partitions: list[Partition] = Field(default_factory=values.empty_list)
    pmix: Pmix = Field(default_factory=Pmix)
    errors: list[str] = Field(default_factory=values.empty_list)
    cluster_name: str | None = None  # scontrol show config: ClusterName
    slurm_version: str | None = None  # scontrol show config: SLURM_VERSION (22.05.8)
    mounts: list[str] | None = None
    ssh_host: str | None = None
    slurm_user: str | None = None
    remote_cwd: str | None = None
    remote_home: str | None = None  # `probe --ssh` reads $HOME on the cluster
    mfa_style: bool | None = None
    max_array_size: int | None = Field(default=None, ge=0)  # Slurm's MaxArraySize

    def partition(self, name: str) -> Partition | None:
        return next((p for p in self.partitions if p.name == name), None)

    @property
    def tools_missing(self) -> bool:
        return any(NO_SLURM_TOOLS in e for e in self.errors)


def load_slurm_env(path: str | Path) -> tuple[SlurmEnv, dict[str, Any]]:
    """Read and validate the file; return the model and the raw object (embedded as is)."""
    fix = "probe the cluster first (trtllm-script-builder probe --output slurm_env.json)"
    try:
        raw = parse_json(Path(path).read_text())
    except OSError as exc:
        raise BuildError("slurm_env_file", f"cannot read {path} ({exc.strerror})", fix) from None
    except UnicodeDecodeError:
        raise BuildError("slurm_env_file", f"{path} is not UTF-8 text", fix) from None
    except DataError as exc:
        raise BuildError("slurm_env_file", f"{path} is not valid JSON ({exc})", fix) from None
    if not isinstance(raw, dict):
        raise BuildError("slurm_env_file", f"{path} does not hold a JSON object", fix)
    found = values.tree_problem(raw)
    if found is not None:
        where, problem, value = found
        raise BuildError(
            "slurm_env_file", f"{path}: {where}: {problem} (got {values.shown(value)})", FIX_KEY
        )
    try:
        env = SlurmEnv.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise BuildError("slurm_env_file", f"{path}: {where}: {err['msg']}", fix) from None
    _check_values(env, str(path))
    return env, raw


FIX_KEY = "probe the cluster again, or correct that key"
_NAME = "is not a Slurm name (letters, digits and . _ + -, not starting with -)"
_MOUNT_FLAGS = re.compile(r"[A-Za-z0-9_.=+-]+")
SLURM_VERSION = re.compile(r"\d{1,4}\.\d{1,4}(?:\.\d{1,4})?(?:-[A-Za-z0-9.]{1,20})?")


def version_before(version: str | None, major: int, minor: int) -> bool:
    """True when `version` (a probed SLURM_VERSION) is known and older than major.minor."""
    m = SLURM_VERSION.fullmatch(version or "")
    if m is None:
        return False
    got = [int(x) for x in m.group(0).split("-")[0].split(".")[:2]]
    return (got[0], got[1]) < (major, minor)


def _check_values(env: SlurmEnv, path: str) -> None:
    """The values another person may have written that reach a command line or a script:
    names as Slurm spells them, paths, mount entries, the ssh host
    (decision one-validation-layer)."""

    def bad(key: str, what: str, value: Any) -> BuildError:
        return BuildError(
            "slurm_env_file", f"{path}: {key}: {what} (got {values.shown(value)})", FIX_KEY
        )

    names = [("default_account", env.default_account), ("default_partition", env.default_partition)]
    names += [
        ("user", env.user),
        ("slurm_user", env.slurm_user),
        ("pmix.preferred", env.pmix.preferred),
        ("cluster_name", env.cluster_name),
    ]
    names += [(f"accounts[{i}]", a) for i, a in enumerate(env.accounts)]
    names += [(f"partitions[{i}].name", p.name) for i, p in enumerate(env.partitions)]
    names += [(f"pmix.available[{i}]", a) for i, a in enumerate(env.pmix.available)]
    for key, name in names:
        if name is not None and not values.SLURM_NAME.fullmatch(name):
            raise bad(key, _NAME, name)
    if env.slurm_version is not None and not SLURM_VERSION.fullmatch(env.slurm_version):
        raise bad("slurm_version", "is not a Slurm version (22.05.8)", env.slurm_version)
    for key in ("remote_cwd", "remote_home"):
        value = getattr(env, key)
        if value is not None and not values.is_absolute_path(value):
            raise bad(key, "is not an absolute path", value)
    if env.ssh_host is not None and not values.HOST.fullmatch(env.ssh_host):
        raise bad(
            "ssh_host", "is not a host name (host, user@host or an ssh config alias)", env.ssh_host
        )
    for i, entry in enumerate(env.mounts or []):
        # pyxis splits the list at `,` and an entry at `:`: a comma in a path would add a
        # mount, a `"` would end docker's CSV field.
        host, _, rest = entry.partition(":")
        container, _, flags = rest.partition(":")
        paths_ok = all(
            p.startswith("/") and not values.NOT_MOUNT.search(p) for p in (host, container)
        )
        if not paths_ok or (flags and not _MOUNT_FLAGS.fullmatch(flags)):
            raise bad(
                f"mounts[{i}]",
                'is not host:container[:flags] with absolute paths free of , : and "',
                entry,
            )
