"""`slurm_env.json`: what the probe learnt about a cluster, in the schema of decision 3."""

from __future__ import annotations

import re
from dataclasses import MISSING, dataclass, field, fields
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model import values
from trtllm_script_builder.model.datafile import DataError, parse_json

if TYPE_CHECKING:
    from pydantic import BaseModel

NO_SLURM_TOOLS = "SLURM client tools not found"

# A build reads slurm_env.json every time, and building pydantic models costs a process more
# than the rest of a build; so a file whose every value already has its field's exact type is
# taken as is, and anything else (wrong, or needing a conversion) goes through the pydantic
# twins in `_models`, which also give the error messages and the JSON Schema.
# Made from these classes (model/twin.py); tests/test_slurm_env_model.py compares the paths.


@dataclass(kw_only=True)
class Partition:
    name: str
    state: str | None = None
    time_limit: str | None = None
    nodes: str | None = None
    arch: str | None = None
    gres: str | None = None
    gpus_per_node: int | None = None
    requires_gres: bool = False


@dataclass(kw_only=True)
class Pmix:
    available: list[str] = field(default_factory=list)
    preferred: str | None = None


@dataclass(kw_only=True)
class SlurmEnv:
    """The probe's output plus the site fields the case-executor merges in."""

    user: str | None = None
    default_account: str | None = None
    accounts: list[str] = field(default_factory=list)
    default_partition: str | None = None
    partitions: list[Partition] = field(default_factory=list)
    pmix: Pmix = field(default_factory=Pmix)
    errors: list[str] = field(default_factory=list)
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

    @classmethod
    def model_validate(cls, data: Any) -> SlurmEnv:
        exact = _exact(data)
        return exact if exact is not None else _from_model(_models()[2].model_validate(data))

    @classmethod
    def model_validate_json(cls, text: str | bytes) -> SlurmEnv:
        return _from_model(_models()[2].model_validate_json(text))

    @classmethod
    def model_json_schema(cls, mode: Any = "validation") -> dict[str, Any]:
        schema: dict[str, Any] = _models()[2].model_json_schema(mode=mode)
        return schema


def _is(value: Any, kind: str) -> bool:
    """Whether pydantic would keep `value` unchanged in a field of this type."""
    if kind.endswith(" | None"):
        if value is None:
            return True
        kind = kind[: -len(" | None")]
    if kind == "list[str]":
        return type(value) is list and all(type(x) is str for x in value)
    return type(value).__name__ == kind and kind in ("str", "int", "bool")


@cache
def _fields(cls: type) -> dict[str, tuple[str, bool]]:
    """Field name -> (annotation as written, required)."""
    return {
        f.name: (str(f.type), f.default is MISSING and f.default_factory is MISSING)
        for f in fields(cls)
    }


def _take(cls: type, data: Any, nested: dict[str, Any]) -> Any:
    """An instance of `cls` from `data` when every known value has its exact type; else None.
    Unknown keys are allowed and left in the raw file only."""
    if type(data) is not dict:
        return None
    values = {}
    for name, (kind, required) in _fields(cls).items():
        if name not in data:
            if required:
                return None
            continue
        value = data[name]
        if name in nested:
            value = nested[name](value)
            if value is None:
                return None
        elif not _is(value, kind):
            return None
        values[name] = value
    return cls(**values)


def _partitions(value: Any) -> list[Partition] | None:
    if type(value) is not list:
        return None
    out = [_take(Partition, p, {}) for p in value]
    return None if any(p is None for p in out) else out


def _exact(data: Any) -> SlurmEnv | None:
    env: SlurmEnv | None = _take(
        SlurmEnv, data, {"partitions": _partitions, "pmix": lambda v: _take(Pmix, v, {})}
    )
    return env


def _from_model(m: BaseModel) -> SlurmEnv:
    def plain(cls: type, obj: Any) -> Any:
        return cls(**{name: getattr(obj, name) for name in _fields(cls)})

    env: SlurmEnv = plain(SlurmEnv, m)
    env.partitions = [plain(Partition, p) for p in env.partitions]
    env.pmix = plain(Pmix, env.pmix)
    return env


@lru_cache(maxsize=1)
def _models() -> tuple[type[BaseModel], type[BaseModel], type[BaseModel]]:
    """The pydantic twins of Partition, Pmix and SlurmEnv. A cluster file may carry keys a
    newer probe adds; they are kept, not refused."""
    from trtllm_script_builder.model.twin import pydantic_twin

    partition = pydantic_twin(Partition, extra="allow")
    pmix = pydantic_twin(Pmix, extra="allow")
    env = pydantic_twin(
        SlurmEnv,
        extra="allow",
        swap={list[Partition]: list[partition], Pmix: pmix},  # type: ignore[valid-type]
        doc=True,
    )
    return partition, pmix, env


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
    env = _exact(raw)
    if env is None:
        # Imported only here: even pydantic_core costs a build more than the rest of its work.
        from pydantic_core import ValidationError

        try:
            env = _from_model(_models()[2].model_validate(raw))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise BuildError("slurm_env_file", f"{path}: {where}: {err['msg']}", fix) from None
    _check_values(env, str(path))
    return env, raw


FIX_KEY = "probe the cluster again, or correct that key"
_NAME = "is not a Slurm name (letters, digits and . _ + -, not starting with -)"
_MOUNT_FLAGS = re.compile(r"[A-Za-z0-9_.=+-]+")


def _check_values(env: SlurmEnv, path: str) -> None:
    """The values another person may have written that reach a command line or a script:
    names as Slurm spells them, paths, mount entries, the ssh host (decision 69)."""

    def bad(key: str, what: str, value: Any) -> BuildError:
        return BuildError(
            "slurm_env_file", f"{path}: {key}: {what} (got {values.shown(value)})", FIX_KEY
        )

    names = [("default_account", env.default_account), ("default_partition", env.default_partition)]
    names += [
        ("user", env.user),
        ("slurm_user", env.slurm_user),
        ("pmix.preferred", env.pmix.preferred),
    ]
    names += [(f"accounts[{i}]", a) for i, a in enumerate(env.accounts)]
    names += [(f"partitions[{i}].name", p.name) for i, p in enumerate(env.partitions)]
    names += [(f"pmix.available[{i}]", a) for i, a in enumerate(env.pmix.available)]
    for key, name in names:
        if name is not None and not values.SLURM_NAME.fullmatch(name):
            raise bad(key, _NAME, name)
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
