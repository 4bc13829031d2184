"""Step 2: container mounts, as pyxis's comma-separated `host:container` list."""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.values import check_mount_path

__all__ = ["Mount", "check_mount_path", "models_mounts", "assemble", "parse_entry"]

Ask = Callable[[str, str], str]  # (field, question) -> answer; raises BuildError when it cannot ask


@dataclass(frozen=True)
class Mount:
    host: str
    container: str
    field: str  # the request field (or source) the host side came from

    def entry(self) -> str:
        return f"{self.host}:{self.container}"

    @property
    def target(self) -> str:
        """The container side without pyxis's flags (`/models:ro` -> `/models`)."""
        return self.container.split(":")[0]


def covers(mount_host: str, path: str) -> bool:
    base = mount_host.rstrip("/") or "/"
    return path == base or path.startswith(base if base == "/" else base + "/")


def parse_entry(entry: str, field: str) -> Mount:
    parts = entry.split(":")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise BuildError(
            field, f"mount {entry!r} is not host:container[:flags]", "fix slurm_env.mounts"
        )
    return Mount(parts[0], ":".join(parts[1:]), field)


def models_mounts(
    *,
    checkpoint_path: str | None,
    models_path: str | None,
    slurm_env_mounts: list[str] | None,
    default_models_repo: str | None,
    site_models_repo: str | None,
    llm_models_root: str,
    ask: Ask,
) -> list[Mount]:
    """Decision read-only-models-mount's priority: checkpoint parent > models_path >
    slurm_env.mounts > env_check/site.

    Every one is read-only (decision read-only-models-mount): a job must not change the shared
    models, and the install step's writes go to the container, not there. slurm_env entries stay as
    the site wrote them, except that the one at the models root without flags gets `:ro`.
    """
    ro = f"{llm_models_root}:ro"
    if checkpoint_path:
        parent = posixpath.dirname(checkpoint_path.rstrip("/")) or "/"
        return [Mount(check_mount_path(parent, "checkpoint_path"), ro, "checkpoint_path")]
    if models_path:
        return [Mount(check_mount_path(models_path, "models_path"), ro, "models_path")]
    if slurm_env_mounts:
        entries = [parse_entry(e, "slurm_env.mounts") for e in slurm_env_mounts]
        return [_read_only(m) if m.container == llm_models_root.rstrip("/") else m for m in entries]
    host = default_models_repo or site_models_repo
    field = "env_check.default_models_repo" if default_models_repo else "default_models_repo_host"
    if not host:
        host = ask(
            "models_path",
            "Host path of the LLM models directory (mounted at the models root)",
        )
        field = "models_path"
    return [Mount(check_mount_path(host, field), ro, field)]


def _read_only(m: Mount) -> Mount:
    return Mount(m.host, f"{m.container}:ro", m.field)


def assemble(home: Mount, project: Mount, models: list[Mount], extras: list[Mount]) -> list[Mount]:
    """`home, project, models..., extras...`, dropping exact repeats and covered extras."""
    out: list[Mount] = []
    for m in [home, project, *models]:
        if all(m.entry() != o.entry() for o in out):
            out.append(m)
    for m in extras:
        if not any(covers(o.host, m.host) and o.host == o.container for o in out):
            out.append(m)
    return out


def host_to_container(mounts: list[Mount], host_path: str) -> str | None:
    """Where a host path appears inside the container, through the longest covering mount."""
    best: Mount | None = None
    for m in mounts:
        if covers(m.host, host_path) and (best is None or len(m.host) > len(best.host)):
            best = m
    if best is None:
        return None
    rest = host_path[len(best.host.rstrip("/")) :]
    return best.target.rstrip("/") + rest


def in_a_mount(mounts: list[Mount], container_path: str) -> bool:
    """Whether a path the container sees lies under one of the mounts."""
    return any(covers(m.target, container_path) for m in mounts)
