"""The build request: the fields a TensorRT-LLM job is described by, loaded and validated."""

import copy
import os
import re
import sys
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model import values
from trtllm_script_builder.model.datafile import parse_json
from trtllm_script_builder.model.registry import WORKFLOWS

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

Workflow = str  # a name in WORKFLOWS
Scenario = Literal["local_docker", "local_slurm", "remote_slurm"]

# Fields that name host paths; relative values are taken from the request file's folder.
PATH_FIELDS = (
    "work_dir",
    "repo_root",
    "skill_dir",
    "custom_script",
    "perf_config_yaml",
    "slurm_env_file",
    "checkpoint_path",
    "models_path",
    "job_spec_file",
    "wheel",
)
REMOTE_PATH_FIELDS = ("remote_repo_path", "remote_work_dir", "llm_models_root")
# Patterns, compiled by `re` on first use: most builds check one time limit and one or two names.
_TIME = r"(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}){0,2})"

# A build validates one request per process, and building a pydantic model costs more than
# the rest of the build (decision 51). So the dataclasses below are the one table of the
# fields (name, type, default, description, checks): a request whose every value already has
# its field's exact type and passes the checks is taken as is, and anything else goes through
# a pydantic twin made from the same table on first use, which gives the conversions, the
# error messages and the JSON Schema. tests/test_request_model.py keeps the two paths in step.

Check = Callable[[Any], Any]


# The checks, shared by both paths: a ValueError's text becomes the error line's problem.
# What a value may hold at all is model/values.py's (decision 69).
no_nul = values.plain_text


def no_bool(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("must be a whole number, not true/false")
    return v


def minutes(v: Any) -> Any:
    # A bare number is minutes, as for sbatch --time.
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


def check_time(v: str) -> str:
    if v.upper() in ("UNLIMITED", "INFINITE") or re.fullmatch(_TIME, v):
        return v
    raise ValueError("is not a Slurm time (MM, HH:MM:SS, D-HH:MM:SS or UNLIMITED)")


def check_slurm_name(v: str | None) -> str | None:
    if v is not None and not values.SLURM_NAME.fullmatch(v):
        raise ValueError("may hold only letters, digits and . _ + - (not first)")
    return v


def check_model_name(v: str | None) -> str | None:
    if v is not None and not values.MODEL_NAME.fullmatch(v):
        raise ValueError("may hold only letters, digits and . _ - (it names files and jobs)")
    return v


# build_wheel.py --cuda_architectures: CMake's list, `;`-separated (e.g. 90-real;100-real), as
# TensorRT-LLM's CMake takes it: compute capability 8.0 or newer (build_wheel.py refuses Volta),
# an optional `a`, an optional `-real`; no `-virtual` (it builds no PTX), no `all-major`
# (decision 82); no `native`: the compile job has no GPU to detect, and CMake would fall back
# to every architecture.
_ARCH_ONE = r"([89]\d|[1-9]\d\d)a?(-real)?"
_CUDA_ARCH = rf"(all|{_ARCH_ONE}(;{_ARCH_ONE})*)"
_PLAIN_PATH = r"/[A-Za-z0-9._+/@=-]*"


def check_cuda_arch(v: str | None) -> str | None:
    if v is not None and not re.fullmatch(_CUDA_ARCH, v):
        raise ValueError(
            "is not a CUDA architecture list TensorRT-LLM builds for (e.g. 90-real, 100-real "
            "or 90-real;100-real)"
        )
    return v


def check_plain_path(v: str | None) -> str | None:
    if v is not None and not re.fullmatch(_PLAIN_PATH, v):
        raise ValueError(
            "must be an absolute path of letters, digits and . _ + / @ = - (it goes into "
            "mount lists and file names)"
        )
    return v


@dataclass(frozen=True)
class FieldInfo:
    """One row of a field table; named and shaped like pydantic's, which the flags read."""

    name: str
    annotation: Any
    default: Any  # MISSING: required
    description: str
    ge: int | None = None
    before: tuple[Check, ...] = ()  # on the value as given, in order
    after: tuple[Check, ...] = ()  # on the value of the field's type, in order
    # The values it may take, asked when used: the names a registry holds at that moment.
    choices: Callable[[], tuple[str, ...]] | None = None

    def is_required(self) -> bool:
        return self.default is MISSING


def _field(
    *,
    description: str,
    default: Any = MISSING,
    ge: int | None = None,
    before: tuple[Check, ...] = (),
    after: tuple[Check, ...] = (),
    choices: Callable[[], tuple[str, ...]] | None = None,
) -> Any:
    meta: dict[str, Any] = {"description": description, "ge": ge, "before": before, "after": after}
    if choices is not None:
        meta["choices"] = choices
    return field(default=default, metadata=meta)


def _table(cls: type) -> dict[str, FieldInfo]:
    return {f.name: FieldInfo(f.name, f.type, f.default, **f.metadata) for f in fields(cls)}


@dataclass(kw_only=True)
class EnvCheck:
    """What the environment check found on the local machine (forwarded by the orchestrator)."""

    model_fields: ClassVar[dict[str, FieldInfo]]
    every_field: ClassVar[tuple[Check, ...]] = ()  # checks run on each value before its own

    default_models_repo: str | None = _field(
        default=None,
        description="Host folder of the LLM models on this machine, mounted at llm_models_root "
        "when the request names no checkpoint_path or models_path.",
    )
    gpus_per_node: int | None = _field(
        default=None, ge=1, description="GPUs in this machine, the node size of a local_docker job."
    )
    available_gpus: int | None = _field(
        default=None,
        ge=0,
        description="GPUs free for the job on this machine; a local_docker job needing more is refused.",
    )
    device_type: str | None = _field(
        default=None, description="GPU type the check saw, e.g. H100 or GB200 (informational)."
    )


@dataclass(kw_only=True)
class Request:
    """A build request. Each description is also the field's --help line and its JSON Schema
    text, so it says what the field is, its format and its default in one sentence."""

    model_fields: ClassVar[dict[str, FieldInfo]]
    every_field: ClassVar[tuple[Check, ...]] = (no_nul,)

    workflow_type: Workflow | None = _field(
        default=None,
        choices=WORKFLOWS.names,
        description="Kind of job: pytest, eval (trtllm-eval), bench (trtllm-bench), custom or "
        "perf_sanity; default: inferred from the command given (custom_cmd or custom_script, "
        "bench_cmd, eval_cmd, perf_config_yaml without test_cmd, else pytest).",
    )
    execution_scenario: Scenario = _field(
        description="Where the job runs: local_docker (a container on this machine), local_slurm "
        "(sbatch on the cluster you are logged in to) or remote_slurm (sbatch on a cluster "
        "reached over ssh); required.",
    )
    work_dir: str = _field(
        description="Host folder the script, job_spec.json and logs are written to; required "
        "(a relative path is taken from the request file's folder, or for a flag from the "
        "current directory).",
    )
    repo_root: str = _field(
        description="Host path of the local TensorRT-LLM checkout: its tests size the job, its "
        "jenkins/current_image_tags.properties names the image and it is mounted as the "
        "project; required.",
    )
    skill_dir: str | None = _field(
        default=None,
        description="Folder of the agent skill that made the request; accepted and ignored.",
    )
    test_cmd: str | None = _field(
        default=None,
        description="pytest command or test id relative to tests/integration/defs (e.g. "
        "accuracy/test_x.py::TestX::test_y[tp4]) for a pytest or perf_sanity job; a pasted "
        "test-list suffix ` TIMEOUT (N)` (minutes) becomes pytest's --timeout; default none.",
    )
    eval_cmd: str | None = _field(
        default=None,
        description="trtllm-eval command line of an eval job, whose --tp_size and --pp_size "
        "give its GPU count; default none.",
    )
    bench_cmd: str | None = _field(
        default=None,
        description="trtllm-bench command line of a bench job, optionally after a dataset step "
        "joined with &&; default none.",
    )
    custom_cmd: str | None = _field(
        default=None,
        description="Shell command line a custom job runs inside the container; default none.",
    )
    custom_script: str | None = _field(
        default=None,
        description="Host path of a script a custom job runs inside the container instead of "
        "custom_cmd; default none.",
    )
    custom_env: str | None = _field(
        default=None,
        description="Environment of a custom job as KEY=VALUE shell words separated by spaces "
        "(quote a value with spaces; values are passed literally); default none.",
    )
    perf_config_yaml: str | None = _field(
        default=None,
        description="Host path of the perf-sanity config YAML the repo's submit.py sizes and "
        "runs; default none.",
    )
    perf_test_name: str | None = _field(
        default=None,
        description="Name of the server config (server_configs[].name) to run from an "
        "aggregated perf-sanity config; default none.",
    )
    model_name: str | None = _field(
        after=(check_model_name,),
        default=None,
        description="Name given to the script, log and container (letters, digits and . _ -); "
        "default: derived from the test, the command's model path or the script.",
    )
    required_devices: int | None = _field(
        before=(no_bool,),
        default=None,
        ge=1,
        description="Total GPUs of the job (a whole number, at least 1) when the command does "
        "not say; default: the test's skip_less_device marker or tp x pp, else 1.",
    )
    node_count: int | None = _field(
        before=(no_bool,),
        default=None,
        ge=1,
        description="Nodes the user asked for (at least 1; pytest, eval and custom jobs run on "
        "one); default: as many as the GPU count needs at gpus_per_node.",
    )
    partition: str | None = _field(
        after=(check_slurm_name,),
        default=None,
        description="Slurm partition to submit to, one of slurm_env.json's partitions (letters, "
        "digits and . _ + -); required for local_slurm and remote_slurm.",
    )
    account: str | None = _field(
        after=(check_slurm_name,),
        default=None,
        description="Slurm account the job is charged to, one of slurm_env.json's accounts "
        "(letters, digits and . _ + -); required for local_slurm and remote_slurm.",
    )
    slurm_env_file: str | None = _field(
        default=None,
        description="Path of the slurm_env.json that `trtllm-script-builder probe` wrote for the "
        "cluster; required for local_slurm and remote_slurm.",
    )
    time_limit: str = _field(
        before=(minutes,),
        after=(check_time,),
        default="02:00:00",
        description="Slurm time limit of the job as sbatch --time takes it (minutes, HH:MM:SS, "
        "D-HH:MM:SS or UNLIMITED); default 02:00:00.",
    )
    llm_models_root: str | None = _field(
        default=None,
        description="Absolute path of the models folder inside the container (LLM_MODELS_ROOT); "
        "default: the site config's default_llm_models_root, else asked on a terminal.",
    )
    checkpoint_path: str | None = _field(
        default=None,
        description="Host path of a model checkpoint whose parent folder is mounted at "
        "llm_models_root (wins over models_path); default none.",
    )
    models_path: str | None = _field(
        default=None,
        description="Host folder holding the models, mounted at llm_models_root; default: "
        "slurm_env.json's mounts, env_check's default_models_repo or the site config's "
        "default_models_repo_host, else asked on a terminal.",
    )
    device_type: str | None = _field(
        default=None,
        description="GPU type asked for, e.g. H100 or GB200; a Grace part (GB..., GH...) picks "
        "the aarch64 image when the partition does not report its CPU architecture; default "
        "none.",
    )
    persistent_mode: bool | None = _field(
        default=None,
        description="local_slurm only: whether job_spec.json carries the container name and "
        "mounts that `submit --persistent` needs to run the job in a held allocation; default "
        "true.",
    )
    # Extras the orchestrator forwards.
    container_image: str | None = _field(
        default=None,
        description="Container image to run in (registry/path:tag or a .sqsh path); default: "
        "the repo's jenkins/current_image_tags.properties entry for the partition's CPU "
        "architecture.",
    )
    remote_repo_path: str | None = _field(
        default=None,
        description="remote_slurm: absolute path of the TensorRT-LLM clone on the cluster; "
        "default: the site config's default_user_root_dir joined with repo_root's folder name.",
    )
    remote_work_dir: str | None = _field(
        default=None,
        description="remote_slurm: absolute path on the cluster that receives the job's files "
        "and logs; default <remote_repo_path>/work_dirs/<work_dir's folder name>.",
    )
    job_spec_file: str | None = _field(
        default=None,
        description="Path of an earlier job_spec.json whose container_image, llm_models_root, "
        "remote_repo_path and remote_work_dir fill in those this request leaves out; default "
        "none.",
    )
    env_check: EnvCheck | None = _field(
        default=None,
        description="What the environment check found on this machine, a JSON object with "
        "default_models_repo, gpus_per_node, available_gpus and device_type, used by "
        "local_docker jobs; default none.",
    )
    skip_install: bool = _field(
        default=False,
        description="Leave out the job's `pip install -e .` of the project (when the image "
        "already holds this TensorRT-LLM build); default false.",
    )
    mpi_plugin: str | None = _field(
        after=(check_slurm_name,),
        default=None,
        description="srun --mpi plugin (letters, digits and . _ + -); default: slurm_env.json's "
        "preferred PMIx plugin, else pmix.",
    )
    gpus_per_node: int | None = _field(
        before=(no_bool,),
        default=None,
        ge=1,
        description="GPUs per node (at least 1), used only when neither the partition nor "
        "env_check reports a GPU count; default none.",
    )
    wheel: str | None = _field(
        default=None,
        description="Host path of a TensorRT-LLM wheel (.whl) the install step installs with "
        "pip --no-deps --force-reinstall instead of `pip install -e .` of the checkout, as "
        "TensorRT-LLM's CI does; default none.",
    )
    test_timeout: int | None = _field(
        before=(no_bool,),
        default=None,
        ge=1,
        description="Seconds each pytest test may run before pytest-timeout stops it, added as "
        "--timeout when test_cmd has none; default 3600.",
    )

    # Building the checkout's wheel before the test job (decisions 64-66).
    compile: bool = _field(
        default=False,
        description="Slurm only: build a wheel from repo_root's checkout in a compile job "
        "(compile.slurm, scripts/build_wheel.py in the image) that runs before the test job, "
        "which then installs that wheel instead of `pip install -e .`; default false.",
    )
    cuda_arch: str | None = _field(
        after=(check_cuda_arch,),
        default=None,
        description="compile: CUDA architectures for build_wheel.py --cuda_architectures, e.g. "
        "90-real or 90-real;100-real; default: from device_type (B200, GB200 100-real; B300, "
        "GB300 103-real; H100, H200, H800, H20, GH200 90-real; L40S, L40, L20, L4 89-real; "
        "A100, A800, A30 80-real; A10, A10G, A40 86-real; RTX PRO 6000 120-real).",
    )
    use_ccache: bool = _field(
        default=False,
        description="compile: pass --use_ccache to build_wheel.py (ccache keeps its cache in "
        "the home folder, which the job mounts); default false.",
    )
    benchmarks: bool = _field(
        default=False,
        description="compile: pass --benchmarks to build_wheel.py (the C++ runtime benchmarks; "
        "refused when the checkout's build_wheel.py has no such option); default false.",
    )
    nvtx: bool = _field(
        default=True,
        description="compile: pass --nvtx to build_wheel.py (NVTX ranges for profiling), as the "
        "TensorRT-LLM agent skills' builds do; default true.",
    )
    wheel_dir: str | None = _field(
        after=(check_plain_path,),
        default=None,
        description="compile: absolute folder (on the cluster) the compile job writes the wheel "
        "into and the test job installs it from; default <work_dir>/wheel "
        "(<remote_work_dir>/wheel on remote_slurm).",
    )
    sqsh_cache_dir: str | None = _field(
        after=(check_plain_path,),
        default=None,
        description="Slurm only: absolute folder (on the cluster) of imported images; when set, "
        "an import job runs `enroot import` once per image into <folder>/<image name>.sqsh "
        "before the test job, which runs from that file; default none (pyxis imports the "
        "image itself).",
    )

    def workflow(self) -> Workflow:
        """The given workflow, else the first by rank that the present fields say it is
        (decision 2's order)."""
        if self.workflow_type:
            return self.workflow_type
        for wf in sorted(WORKFLOWS.items(), key=lambda w: w.infer_rank):
            if wf.infers(self):
                return str(wf.name)
        raise RuntimeError("no workflow takes this request: import trtllm_script_builder.workflows")

    @property
    def is_slurm(self) -> bool:
        return self.execution_scenario != "local_docker"

    @property
    def is_remote(self) -> bool:
        return self.execution_scenario == "remote_slurm"

    def model_copy(self, *, update: dict[str, Any] | None = None) -> "Request":
        """A shallow copy with `update` set unchecked, as pydantic's model_copy: a batch sets
        values it has checked already on a validated base."""
        new = copy.copy(self)
        new.__dict__.update(update or {})
        return new

    @classmethod
    def model_validate(cls, data: Any) -> "Request":
        """The request `data` describes; pydantic's ValidationError when it is not one."""
        exact = _exact(data)
        return exact if exact is not None else _from_twin(_twins()[1].model_validate(data))

    @classmethod
    def model_json_schema(cls, mode: Any = "validation") -> dict[str, Any]:
        schema: dict[str, Any] = _twins()[1].model_json_schema(mode=mode)
        return schema


EnvCheck.model_fields = _table(EnvCheck)
Request.model_fields = _table(Request)


def _take(cls: Any, data: Any, nested: dict[str, Callable[[Any], Any]]) -> Any:
    """`cls` made from `data` when pydantic would take every value unchanged after the shared
    checks; else None (pydantic then decides, and names what is wrong)."""
    if type(data) is not dict:
        return None
    table: dict[str, FieldInfo] = cls.model_fields
    values: dict[str, Any] = {}
    for name, value in data.items():
        info = table.get(name)
        if info is None:
            return None
        if value is None and info.default is None:
            values[name] = value
            continue
        try:
            for check in cls.every_field + info.before:
                value = check(value)
            if name in nested:
                value = nested[name](value)
            elif not _exact_type(value, info.annotation):
                return None
            if info.choices is not None and value not in info.choices():
                return None
            if info.ge is not None and value < info.ge:
                return None
            for check in info.after:
                value = check(value)
        except ValueError:
            return None
        if value is None:
            return None
        values[name] = value
    if any(info.is_required() and name not in values for name, info in table.items()):
        return None
    return cls(**values)


@cache
def _kinds(annotation: Any) -> tuple[type, frozenset[Any] | None]:
    """The one type a value must have, and the values a Literal allows (None: any)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is Literal:
        return str, frozenset(typing.get_args(annotation))
    if args:  # X | None
        return _kinds(args[0])
    return annotation, None


def _exact_type(value: Any, annotation: Any) -> bool:
    kind, allowed = _kinds(annotation)
    return type(value) is kind and (allowed is None or value in allowed)


def _exact(data: Any) -> Request | None:
    # JSON null or an empty YAML value means "not given": the field's default applies.
    if type(data) is dict:
        data = {k: v for k, v in data.items() if v is not None}
    request: Request | None = _take(Request, data, {"env_check": lambda v: _take(EnvCheck, v, {})})
    return request


def _from_twin(m: "BaseModel") -> Request:
    values = {name: getattr(m, name) for name in Request.model_fields}
    env = values["env_check"]
    if env is not None:
        values["env_check"] = EnvCheck(**{k: getattr(env, k) for k in EnvCheck.model_fields})
    return Request(**values)


def _twins() -> "tuple[type[BaseModel], type[BaseModel]]":
    """The pydantic models of EnvCheck and Request, made from the field tables and the
    workflows registered now."""
    return _twins_for(WORKFLOWS.names())


@lru_cache(maxsize=2)
def _twins_for(names: tuple[str, ...]) -> "tuple[type[BaseModel], type[BaseModel]]":
    from pydantic import model_validator

    from trtllm_script_builder.model.twin import pydantic_twin

    def twin(cls: Any, swap: dict[Any, Any], **extra: Any) -> "type[BaseModel]":
        # Strict (decision 91): a value in the type the schema names, as the schema says.
        return pydantic_twin(
            cls,
            extra="forbid",
            swap=swap,
            every_field=cls.every_field,
            doc=True,
            strict=True,
            **extra,
        )

    def null_is_absent(cls: Any, data: Any) -> Any:
        # JSON null or an empty YAML value means "not given": the field's default applies.
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    env_check = twin(EnvCheck, {})
    validators = {"_null_is_absent": model_validator(mode="before")(null_is_absent)}
    # A field of registry names is a Literal of them, as the schema lists them.
    chosen: dict[str, Any] = {}
    for name, info in Request.model_fields.items():
        if info.choices is not None:
            kind: Any = Literal[info.choices()]
            chosen[name] = kind if info.default is MISSING else kind | None
    request = twin(
        Request, {EnvCheck | None: env_check | None}, validators=validators, annotations=chosen
    )
    return env_check, request


def _first_error(exc: "ValidationError") -> BuildError:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "request"
    if err["type"] == "extra_forbidden":
        from difflib import get_close_matches

        known = list(
            EnvCheck.model_fields if loc.startswith("env_check.") else Request.model_fields
        )
        near = get_close_matches(loc.rsplit(".", 1)[-1], known, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}?" if near else "check its spelling;"
        return BuildError(
            loc,
            "is not a request field",
            f"{hint} trtllm-script-builder schema request lists every field",
        )
    if err["type"] == "missing":
        flag = "--" + loc.replace("_", "-")
        return BuildError(loc, "is required", f"add it to the request or pass {flag}")
    msg = err["msg"].removeprefix("Value error, ")
    refused = values.refuse(loc, msg, err.get("input"), _type_fix(err))
    if loc == "workflow_type" and (fix := _workflow_fix(err.get("input"))):
        return BuildError(loc, refused.problem, fix)
    return refused


def _type_fix(err: Any) -> str:
    """The fix for a value of the wrong type (decision 91): the value as the schema takes it,
    or the nearest allowed word."""
    given = err.get("input")
    if err["type"] == "int_type" and isinstance(given, str) and given.strip().isdigit():
        return f"write {given.strip()} without quotes"
    if err["type"] == "bool_type":
        return "write true or false, without quotes"
    if err["type"] == "literal_error" and isinstance(given, str):
        from difflib import get_close_matches

        allowed = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        text = given.strip().lower().replace("-", "_").replace(" ", "_")
        near = get_close_matches(text, allowed, n=1, cutoff=0.6)
        if near:
            return f"did you mean {near[0]}?"
    return "correct the value"


def workflow_aliases() -> dict[str, str]:
    """What people write for a workflow: the tool it runs, or the category of its script."""
    return {alias: wf.name for wf in WORKFLOWS.items() for alias in wf.aliases}


def nearest_workflow(given: object) -> str | None:
    """The workflow a misspelt name, a tool's name or a category number most likely means."""
    from difflib import get_close_matches

    workflows = WORKFLOWS.names()
    aliases = workflow_aliases()
    text = str(given).strip().lower().removeprefix("category").strip()
    if text in aliases:
        return aliases[text]
    text = text.replace("-", "_").replace(" ", "_")
    if text in workflows:
        return text
    near = get_close_matches(text, [*workflows, *aliases], n=1, cutoff=0.6)
    return aliases.get(near[0], near[0]) if near else None


def _workflow_fix(given: object) -> str | None:
    """`did you mean X?` for a refused workflow_type, or None when nothing is near."""
    near = nearest_workflow(given)
    if near is None:
        return None
    category = str(given).strip().lower().removeprefix("category").strip()
    why = f" (category {category} is {near}'s script)" if category.isdigit() else ""
    return f"did you mean {near}?{why}"


# A request is a few lines; anything much larger is a mistake or an attack on memory.
MAX_REQUEST_CHARS = 1 << 20


def read_request_file(source: str) -> tuple[dict[str, Any], Path]:
    """Read a JSON or YAML request file, or either from stdin for `-`; return data and base dir."""
    if source == "-":
        text, base, name = sys.stdin.read().removeprefix("\ufeff"), Path.cwd(), "standard input"
    else:
        path = Path(source)
        try:
            # UTF-8 whatever the locale says; a byte order mark (Windows editors write one)
            # is no part of the request, for JSON as for YAML.
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError:
            raise BuildError("request", f"{source} is not UTF-8 text", "save it as UTF-8") from None
        except OSError as exc:
            raise BuildError(
                "request",
                f"cannot read {source} ({exc.strerror})",
                "give an existing JSON or YAML file",
            ) from None
        base, name = path.resolve().parent, source
    if len(text) > MAX_REQUEST_CHARS:
        raise BuildError(
            "request",
            f"{name} holds {len(text)} characters, more than a request's {MAX_REQUEST_CHARS}",
            "give the request file itself (a long command belongs in a script: custom_script)",
        )
    try:
        # Standard input is JSON when it looks like JSON, else YAML, like a request file.
        as_json = text.lstrip().startswith("{") if source == "-" else source.endswith(".json")
        if not as_json:
            data = _load_yaml(text) or {}
        elif text.strip():
            data = parse_json(text)
        else:
            data = {}
    except (ValueError, ImportError, RecursionError) as exc:
        raise BuildError(
            "request", f"{name} cannot be parsed ({str(exc).splitlines()[0]})", "fix its syntax"
        ) from None
    except Exception as exc:  # yaml.YAMLError has no common base we can name without importing yaml
        raise BuildError(
            "request", f"{name} cannot be parsed ({str(exc).splitlines()[0]})", "fix its syntax"
        ) from None
    if not isinstance(data, dict):
        raise BuildError(
            "request",
            f"{name} does not hold a mapping of fields",
            "write one object of field: value",
        )
    return data, base


@lru_cache(maxsize=1)
def yaml_loader() -> Any:
    """A SafeLoader that reads an unquoted `4:00:00` as the string a request means (YAML 1.1
    would read the number 14400), for request files and build-many's request lists alike."""
    import yaml

    from trtllm_script_builder.model.datafile import yaml_loader_class

    class Loader(yaml_loader_class(aliases=False)):  # type: ignore[misc]
        """A request needs no aliases (decision 74)."""

    def refuse(loader: Any, node: Any) -> Any:
        # !!binary would carry bytes (a NUL) past the string checks; dates and sets are no
        # request value either.
        raise yaml.YAMLError(f"the tag {node.tag} is not allowed in a request")

    for tag in ("binary", "timestamp", "set", "omap", "pairs"):
        Loader.add_constructor(f"tag:yaml.org,2002:{tag}", refuse)

    Loader.yaml_implicit_resolvers = {
        ch: [
            (tag, rx)
            for tag, rx in resolvers
            if not (tag.endswith((":int", ":float")) and rx.match("4:00:00"))
        ]
        for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    for ch in "0123456789-+":
        Loader.add_implicit_resolver(
            "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$"), list(ch)
        )
    return Loader


def _load_yaml(text: str) -> Any:
    from trtllm_script_builder.model.datafile import load_yaml

    return load_yaml(text, yaml_loader())


_ENV_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def refuse_unexpanded(key: str, value: str) -> None:
    """`~/x` or `$HOME/x` in a request is taken as written (no shell reads a request), so it
    would become `<request folder>/~/x`: refused with the path the user meant (for a path on
    this machine; the cluster's or the container's home is not known here)."""
    here = key in PATH_FIELDS
    if value.startswith("~"):
        meant = os.path.expanduser(value) if here else value
        fix = (
            f"write the full path, e.g. {meant if len(meant) <= 200 else values.shown(meant)}"
            if meant != value
            else "write the full path"
        )
        raise BuildError(
            key, f"starts with ~, which is not expanded (got {values.shown(value)})", fix
        )
    if m := _ENV_REF.search(value):
        meant = os.path.expandvars(value) if here else value
        fix = (
            f"write the full path, e.g. {meant if len(meant) <= 200 else values.shown(meant)}"
            if "$" not in meant
            else "write the full path"
        )
        name = m.group(1)[:60]  # an identifier, but of any length
        raise BuildError(
            key, f"holds ${name}, which is not expanded (got {values.shown(value)})", fix
        )


def absolutise(data: dict[str, Any], base: Path) -> None:
    for key in PATH_FIELDS + REMOTE_PATH_FIELDS:
        v = data.get(key)
        if isinstance(v, str) and v:
            refuse_unexpanded(key, v)
    for key in PATH_FIELDS:
        v = data.get(key)
        if isinstance(v, str) and v and not os.path.isabs(v):
            data[key] = os.path.normpath(os.path.join(base, v))


def load_request(file_data: dict[str, Any], file_base: Path, flags: dict[str, Any]) -> Request:
    """Merge file fields and flags (flags win), make host paths absolute, validate."""
    data = dict(file_data)
    absolutise(data, file_base)
    flag_data = {k: v for k, v in flags.items() if v is not None}
    absolutise(flag_data, Path.cwd())
    data.update(flag_data)
    req = _exact(data)
    if req is None:
        from pydantic import ValidationError

        try:
            req = _from_twin(_twins()[1].model_validate(data))
        except ValidationError as exc:
            raise _first_error(exc) from None
    _check_values(req)
    if req.job_spec_file:
        _forward_job_spec(req)
        _check_values(req)  # again: the forwarded values come from a file too
    for key in REMOTE_PATH_FIELDS:
        v = getattr(req, key)
        if v is not None and not v.startswith("/"):
            raise BuildError(key, f"must be an absolute path (got {v!r})", "give the full path")
    return req


def _check_values(req: Request) -> None:
    """What no field's type says: one line, no leading `-`, bounded (model/values.py)."""
    values.check_fields((name, getattr(req, name)) for name in Request.model_fields)
    for name in PATH_FIELDS + REMOTE_PATH_FIELDS:
        path = getattr(req, name)
        if path is not None:
            values.check_path(path, name, absolute=False)
    if req.env_check is not None:
        env = req.env_check
        values.check_fields(((n, getattr(env, n)) for n in EnvCheck.model_fields), "env_check.")


def _forward_job_spec(req: Request) -> None:
    """Take the values the orchestrator forwarded in an earlier job_spec.json when absent."""
    if not req.job_spec_file:
        return
    try:
        spec = parse_json(Path(req.job_spec_file).read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise BuildError(
            "job_spec_file",
            f"cannot read {req.job_spec_file} ({exc})",
            "give an existing job_spec.json",
        ) from None
    if not isinstance(spec, dict):
        raise BuildError("job_spec_file", "does not hold a JSON object", "give a job_spec.json")
    keys = ["container_image", "llm_models_root"]
    if req.execution_scenario == "remote_slurm":  # elsewhere they are not used (decision 94)
        keys += ["remote_repo_path", "remote_work_dir"]
    for key in keys:
        if getattr(req, key) is None and isinstance(spec.get(key), str):
            setattr(req, key, spec[key])


def request_from_cli(source: str | None, flags: dict[str, Any]) -> Request:
    """REQUEST (file, `-` or none) plus the field flags, as `build` and `run` take them."""
    data, base = read_request_file(source) if source else ({}, Path.cwd())
    return load_request(data, base, parse_flag_values(flags))


def parse_flag_values(flags: dict[str, Any]) -> dict[str, Any]:
    """`--env-check` arrives as JSON text; the other flags are already typed by click."""
    flags = dict(flags)
    if isinstance(flags.get("env_check"), str):
        try:
            flags["env_check"] = parse_json(flags["env_check"])
        except ValueError as exc:
            raise BuildError("env_check", f"is not JSON ({exc})", "pass a JSON object") from None
    return flags
