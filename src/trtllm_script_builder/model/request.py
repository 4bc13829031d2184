"""The build request: the fields a TensorRT-LLM job is described by, loaded and validated.

The models below are the one definition of a request: their fields give the flags, `--help`,
completion and the JSON Schema, and pydantic checks a request with them, reporting every
problem at once. Pydantic builds a model's validator on first use (defer_build), so a command
pays only for the models it reads.
"""

import os
import re
import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from trtllm_script_builder.errors import BuildError, refusal
from trtllm_script_builder.model import values
from trtllm_script_builder.model.datafile import DataError, parse_json
from trtllm_script_builder.model.registry import WORKFLOWS

Scenario = Literal["local_docker", "local_slurm", "remote_slurm"]


# The workflows shipped with the tool, in the schema's order.
def workflow_names() -> tuple[str, ...]:
    """The names workflow_type may take: the registry's (the workflow package, when imported,
    fills it)."""
    return WORKFLOWS.names()


def _allowed(names: tuple[str, ...]) -> str:
    """The names as pydantic lists a Literal's values: 'a', 'b' or 'c'."""
    quoted = [f"'{n}'" for n in names]
    return " or ".join([", ".join(quoted[:-1]), quoted[-1]]) if len(quoted) > 1 else quoted[0]


def check_workflow(v: Any) -> str:
    """A registered workflow's name, refused as a Literal would refuse it."""
    values.plain_text(v)  # first, as in every field's own check
    names = workflow_names()
    if isinstance(v, str) and v in names:
        return v
    expected = _allowed(names)
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


class _WorkflowSchema:
    """The schema of workflow_type: an enum of the workflows registered when it is asked for."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        return {"enum": list(workflow_names()), "type": "string"}

    @classmethod
    def choices(cls) -> tuple[str, ...]:
        """The flag's choices and completion (cli/flags.py)."""
        return workflow_names()


WorkflowName = Annotated[str, _WorkflowSchema]

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
_TIME = r"(\d+|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}){0,2})"

# The checks: a ValueError's text becomes the error line's problem, a Problem's fix its fix.


class Problem(ValueError):
    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.fix = fix


# What a value may hold at all is model/values.py's (decision one-validation-layer).


def no_bool(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("must be a whole number, not true/false")
    return v


def minutes(v: Any) -> Any:
    # A bare number is minutes, as for sbatch --time.
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


def check_time(v: str) -> str:
    if m := re.fullmatch(r"(\d+):(\d{1,2})", v):
        # Slurm reads H:MM as minutes:seconds; which was meant cannot be told, so the user
        # picks (decision ambiguous-time-limit).
        h, mm = int(m.group(1)), int(m.group(2))
        raise Problem(
            f"is minutes:seconds to Slurm ({h} min {mm} s), and hours:minutes is as likely meant",
            f"write {h:02d}:{mm:02d}:00 for {h} h {mm} min, or 0:{h:02d}:{mm:02d} for {h} min {mm} s",
        )
    if v.upper() in ("UNLIMITED", "INFINITE") or re.fullmatch(_TIME, v):
        return v
    raise Problem(
        "is not a Slurm time (MM, HH:MM:SS, D-HH:MM:SS or UNLIMITED)", _time_fix(v.strip())
    )


_TIME_FIX = "write minutes (90), HH:MM:SS (01:30:00) or D-HH:MM:SS (1-00:00:00)"


def _time_fix(v: str) -> str:
    """The Slurm spelling of what a person wrote: `2h`, `90 min`, `1d`, `1:06:00:00`."""
    if m := re.fullmatch(r"(\d+)\s*(h|hr|hrs|hour|hours)", v, re.IGNORECASE):
        return f"write {int(m.group(1)):02d}:00:00 for {m.group(1)} h"
    if m := re.fullmatch(r"(\d+)\s*(m|min|mins|minute|minutes)", v, re.IGNORECASE):
        return f"write {int(m.group(1))} (a bare number is minutes)"
    if m := re.fullmatch(r"(\d+)\s*(d|day|days)", v, re.IGNORECASE):
        return f"write {int(m.group(1))}-00:00:00 for {m.group(1)} days"
    if (m := re.fullmatch(r"(\d+):(\d\d):(\d\d):(\d\d)", v)) and int(m.group(2)) < 24:
        return f"write {m.group(1)}-{m.group(2)}:{m.group(3)}:{m.group(4)} (days-hours:minutes:seconds)"
    if v.startswith("-"):
        return f"a time limit is not negative; {_TIME_FIX}"
    return _TIME_FIX


def check_slurm_name(v: str | None) -> str | None:
    if v is not None and not values.SLURM_NAME.fullmatch(v):
        if not v.strip():
            raise Problem("is empty", "write the name, or leave the field out")
        if values.SLURM_NAME.fullmatch(v.strip()):
            raise Problem("has white space around it", f"write {values.shown(v.strip())}")
        raise Problem(
            "may hold only letters, digits and . _ + - (not first)",
            "write the name as sinfo or sacctmgr shows it",
        )
    return v


def check_model_name(v: str | None) -> str | None:
    if v is not None and not values.MODEL_NAME.fullmatch(v):
        meant = re.sub(r"[^A-Za-z0-9._-]+", "_", v.rstrip("/").rsplit("/", 1)[-1]).strip("_")
        fits = meant and len(meant) <= 120 and values.MODEL_NAME.fullmatch(meant)
        fix = f"write {meant}" if fits else ""
        raise Problem(
            "may hold only letters, digits and . _ - (it names files and jobs)",
            fix or "write a name of letters, digits and . _ -",
        )
    return v


# build_wheel.py --cuda_architectures: CMake's list, `;`-separated (e.g. 90-real;100-real), as
# TensorRT-LLM's CMake takes it: compute capability 8.0 or newer (build_wheel.py refuses Volta),
# an optional `a`, an optional `-real`; no `-virtual` (it builds no PTX), no `all-major`
# (decision gpu-arch-table); no `native`: the compile job has no GPU to detect, and CMake would fall
# back to every architecture.
_ARCH_ONE = r"([89]\d|[1-9]\d\d)a?(-real)?"
_CUDA_ARCH = rf"(all|{_ARCH_ONE}(;{_ARCH_ONE})*)"
_PLAIN_PATH = r"/[A-Za-z0-9._+/@=-]*"


def check_cuda_arch(v: str | None) -> str | None:
    if v is not None and not re.fullmatch(_CUDA_ARCH, v):
        raise Problem(
            "is not a CUDA architecture list TensorRT-LLM builds for (e.g. 90-real, 100-real "
            "or 90-real;100-real)",
            _cuda_arch_fix(v),
        )
    return v


def _cuda_arch_fix(v: str) -> str:
    """CMake's spelling of what nvcc or a person writes: sm_90a, compute_90, 9.0, 90,100."""
    out = []
    for part in re.split(r"[;, ]+", v.strip()):
        m = re.fullmatch(r"(?:sm_?|compute_?)?(\d+)(?:\.(\d))?(a)?(?:-real)?", part, re.IGNORECASE)
        if m is None:
            return "write CMake's form: the compute capability without a dot, e.g. 90-real"
        num = m.group(1) + (m.group(2) or "") if m.group(2) or len(m.group(1)) == 1 else m.group(1)
        if len(num) == 1:
            num += "0"
        out.append(f"{num}{(m.group(3) or '').lower()}-real")
    meant = ";".join(out)
    if re.fullmatch(_CUDA_ARCH, meant):
        return f"write {meant}"
    return "write CMake's form for compute capability 8.0 or newer, e.g. 90-real"


def check_plain_path(v: str | None) -> str | None:
    if v is not None and not re.fullmatch(_PLAIN_PATH, v):
        raise ValueError(
            "must be an absolute path of letters, digits and . _ + / @ = - (it goes into "
            "mount lists and file names)"
        )
    return v


# Leading VAR=value words, then the first word of the command.
_FIRST_WORD = re.compile(r"((?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*)(\S+)")


def run_test_id_with_pytest(v: str | None) -> str | None:
    """A bare test id (a test-list line, a perf-sanity id) is what `test_cmd` takes too: it
    runs with pytest, as the test list's runner would run it (decision bare-test-id)."""
    m = _FIRST_WORD.match(v) if v else None
    if v is None or m is None:
        return v
    first = m.group(2)
    if "::" in first or first.endswith(".py"):
        return f"{m.group(1)}pytest {v[m.start(2) :]}"
    return v


# The form of each tool's command, shown when a field holds a word instead of one.
_TOOL_FORMS = {
    "eval_cmd": "trtllm-eval --model <checkpoint or Hugging Face id> [--tp_size N] <task, e.g. mmlu>",
    "bench_cmd": "trtllm-bench --model <model> throughput --dataset <dataset file>",
}


def check_tool_command(v: str | None, info: Any) -> str | None:
    """One word with no path is a keyword (`accuracy`, as an orchestrator may pass the kind of
    run), not a command: the job would run a program of that name (decision bare-test-id)."""
    if (
        v is not None
        and re.fullmatch(r"[\w.-]+", v.strip())
        and not v.strip().startswith("trtllm-")
    ):
        raise Problem("is one word, not a command line", f"write {_TOOL_FORMS[info.field_name]}")
    return v


class _Strict(BaseModel):
    # Strict (decision strict-request-types): a value in the type the schema names, as the schema
    # says.
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class EnvCheck(_Strict):
    """What the environment check found on the local machine (forwarded by the orchestrator)."""

    default_models_repo: str | None = Field(
        default=None,
        description="Host folder of the LLM models on this machine, mounted at llm_models_root "
        "when the request names no checkpoint_path or models_path.",
    )
    gpus_per_node: int | None = Field(
        default=None, ge=1, description="GPUs in this machine, the node size of a local_docker job."
    )
    available_gpus: int | None = Field(
        default=None,
        ge=0,
        description="GPUs free for the job on this machine; a local_docker job needing more is refused.",
    )
    device_type: str | None = Field(
        default=None, description="GPU type the check saw, e.g. H100 or GB200 (informational)."
    )


class Request(_Strict):
    """A build request. Each description is also the field's --help line and its JSON Schema
    text, so it says what the field is, its format and its default in one sentence."""

    workflow_type: WorkflowName | None = Field(
        default=None,
        description="Kind of job: pytest, eval (trtllm-eval), bench (trtllm-bench), custom or "
        "perf_sanity; default: inferred from the command given (custom_cmd or custom_script, "
        "bench_cmd, eval_cmd, perf_config_yaml without test_cmd, else pytest).",
    )
    execution_scenario: Scenario = Field(
        description="Where the job runs: local_docker (a container on this machine), local_slurm "
        "(sbatch on the cluster you are logged in to) or remote_slurm (sbatch on a cluster "
        "reached over ssh); required.",
    )
    work_dir: str = Field(
        description="Host folder the script, job_spec.json and logs are written to; required "
        "(a relative path is taken from the request file's folder, or for a flag from the "
        "current directory).",
    )
    repo_root: str = Field(
        description="Host path of the local TensorRT-LLM checkout: its tests size the job, its "
        "jenkins/current_image_tags.properties names the image and it is mounted as the "
        "project; required.",
    )
    skill_dir: str | None = Field(
        default=None,
        description="Folder of the agent skill that made the request; accepted and ignored.",
    )
    test_cmd: str | None = Field(
        default=None,
        description="pytest command or test id relative to tests/integration/defs (e.g. "
        "accuracy/test_x.py::TestX::test_y[tp4]) for a pytest or perf_sanity job; a pasted "
        "test-list suffix ` TIMEOUT (N)` (minutes) becomes pytest's --timeout; default none.",
    )
    eval_cmd: str | None = Field(
        default=None,
        description="trtllm-eval command line of an eval job, whose --tp_size and --pp_size "
        "give its GPU count; default none.",
    )
    bench_cmd: str | None = Field(
        default=None,
        description="trtllm-bench command line of a bench job, optionally after a dataset step "
        "joined with &&; default none.",
    )
    custom_cmd: str | None = Field(
        default=None,
        description="Shell command line a custom job runs inside the container; default none.",
    )
    custom_script: str | None = Field(
        default=None,
        description="Host path of a script a custom job runs inside the container instead of "
        "custom_cmd; default none.",
    )
    custom_env: str | None = Field(
        default=None,
        description="Environment of a custom job as KEY=VALUE shell words separated by spaces "
        "(quote a value with spaces; values are passed literally); default none.",
    )
    perf_config_yaml: str | None = Field(
        default=None,
        description="Host path of the perf-sanity config YAML the repo's submit.py sizes and "
        "runs; default none.",
    )
    perf_test_name: str | None = Field(
        default=None,
        description="Name of the server config (server_configs[].name) to run from an "
        "aggregated perf-sanity config; default none.",
    )
    model_name: str | None = Field(
        default=None,
        description="Name given to the script, log and container (letters, digits and . _ -); "
        "default: derived from the test, the command's model path or the script.",
    )
    required_devices: int | None = Field(
        default=None,
        ge=1,
        description="Total GPUs of the job (a whole number, at least 1) when the command does "
        "not say; default: the test's skip_less_device marker or tp x pp, else 1.",
    )
    node_count: int | None = Field(
        default=None,
        ge=1,
        description="Nodes the user asked for (at least 1; pytest, eval and custom jobs run on "
        "one); default: as many as the GPU count needs at gpus_per_node.",
    )
    partition: str | None = Field(
        default=None,
        description="Slurm partition to submit to, one of slurm_env.json's partitions (letters, "
        "digits and . _ + -); required for local_slurm and remote_slurm.",
    )
    account: str | None = Field(
        default=None,
        description="Slurm account the job is charged to, one of slurm_env.json's accounts "
        "(letters, digits and . _ + -); required for local_slurm and remote_slurm.",
    )
    slurm_env_file: str | None = Field(
        default=None,
        description="Path of the slurm_env.json that `trtllm-script-builder probe` wrote for the "
        "cluster; required for local_slurm and remote_slurm.",
    )
    time_limit: str = Field(
        default="02:00:00",
        description="Slurm time limit of the job as sbatch --time takes it (minutes, HH:MM:SS, "
        "D-HH:MM:SS or UNLIMITED); default 02:00:00.",
    )
    llm_models_root: str | None = Field(
        default=None,
        description="Absolute path of the models folder inside the container (LLM_MODELS_ROOT); "
        "default: the site config's default_llm_models_root, else asked on a terminal.",
    )
    checkpoint_path: str | None = Field(
        default=None,
        description="Host path of a model checkpoint whose parent folder is mounted at "
        "llm_models_root (wins over models_path); default none.",
    )
    models_path: str | None = Field(
        default=None,
        description="Host folder holding the models, mounted at llm_models_root; default: "
        "slurm_env.json's mounts, env_check's default_models_repo or the site config's "
        "default_models_repo_host, else asked on a terminal.",
    )
    device_type: str | None = Field(
        default=None,
        description="GPU type asked for, e.g. H100 or GB200; a Grace part (GB..., GH...) picks "
        "the aarch64 image when the partition does not report its CPU architecture; default "
        "none.",
    )
    persistent_mode: bool | None = Field(
        default=None,
        description="local_slurm only: whether job_spec.json carries the container name and "
        "mounts that `submit --persistent` needs to run the job in a held allocation; default "
        "true.",
    )
    # Extras the orchestrator forwards.
    container_image: str | None = Field(
        default=None,
        description="Container image to run in (registry/path:tag or a .sqsh path); default: "
        "the repo's jenkins/current_image_tags.properties entry for the partition's CPU "
        "architecture.",
    )
    remote_repo_path: str | None = Field(
        default=None,
        description="remote_slurm: absolute path of the TensorRT-LLM clone on the cluster; "
        "default: the site config's default_user_root_dir joined with repo_root's folder name.",
    )
    remote_work_dir: str | None = Field(
        default=None,
        description="remote_slurm: absolute path on the cluster that receives the job's files "
        "and logs; default <remote_repo_path>/work_dirs/<work_dir's folder name>.",
    )
    job_spec_file: str | None = Field(
        default=None,
        description="Path of an earlier job_spec.json whose container_image, llm_models_root, "
        "remote_repo_path and remote_work_dir fill in those this request leaves out; default "
        "none.",
    )
    env_check: EnvCheck | None = Field(
        default=None,
        description="What the environment check found on this machine, a JSON object with "
        "default_models_repo, gpus_per_node, available_gpus and device_type, used by "
        "local_docker jobs; default none.",
    )
    skip_install: bool = Field(
        default=False,
        description="Leave out the job's `pip install -e .` of the project (when the image "
        "already holds this TensorRT-LLM build); default false.",
    )
    mpi_plugin: str | None = Field(
        default=None,
        description="srun --mpi plugin (letters, digits and . _ + -); default: slurm_env.json's "
        "preferred PMIx plugin, else pmix.",
    )
    gpus_per_node: int | None = Field(
        default=None,
        ge=1,
        description="GPUs per node (at least 1), used only when neither the partition nor "
        "env_check reports a GPU count; default none.",
    )
    wheel: str | None = Field(
        default=None,
        description="Host path of a TensorRT-LLM wheel (.whl) the install step installs with "
        "pip --no-deps --force-reinstall instead of `pip install -e .` of the checkout, as "
        "TensorRT-LLM's CI does; default none.",
    )
    test_timeout: int | None = Field(
        default=None,
        ge=1,
        description="Seconds each pytest test may run before pytest-timeout stops it, added as "
        "--timeout when test_cmd has none; default 3600.",
    )

    # Building the checkout's wheel before the test job (decisions compile-cuda-arch,
    # compile-chain and image-import-cache).
    compile: bool = Field(
        default=False,
        description="Slurm only: build a wheel from repo_root's checkout in a compile job "
        "(compile.slurm, scripts/build_wheel.py in the image) that runs before the test job, "
        "which then installs that wheel instead of `pip install -e .`; default false.",
    )
    cuda_arch: str | None = Field(
        default=None,
        description="compile: CUDA architectures for build_wheel.py --cuda_architectures, e.g. "
        "90-real or 90-real;100-real; default: from device_type (B200, GB200 100-real; B300, "
        "GB300 103-real; H100, H200, H800, H20, GH200 90-real; L40S, L40, L20, L4 89-real; "
        "A100, A800, A30 80-real; A10, A10G, A40 86-real; RTX PRO 6000 120-real).",
    )
    use_ccache: bool = Field(
        default=False,
        description="compile: pass --use_ccache to build_wheel.py (ccache keeps its cache in "
        "the home folder, which the job mounts); default false.",
    )
    benchmarks: bool = Field(
        default=False,
        description="compile: pass --benchmarks to build_wheel.py (the C++ runtime benchmarks; "
        "refused when the checkout's build_wheel.py has no such option); default false.",
    )
    nvtx: bool = Field(
        default=True,
        description="compile: pass --nvtx to build_wheel.py (NVTX ranges for profiling), as the "
        "TensorRT-LLM agent skills' builds do; default true.",
    )
    wheel_dir: str | None = Field(
        default=None,
        description="compile: absolute folder (on the cluster) the compile job writes the wheel "
        "into and the test job installs it from; default <work_dir>/wheel "
        "(<remote_work_dir>/wheel on remote_slurm).",
    )
    sqsh_cache_dir: str | None = Field(
        default=None,
        description="Slurm only: absolute folder (on the cluster) of imported images; when set, "
        "an import job runs `enroot import` once per image into <folder>/<image name>.sqsh "
        "before the test job, which runs from that file; default none (pyxis imports the "
        "image itself).",
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        # JSON null or an empty YAML value means "not given": the field's default applies.
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    _workflow = field_validator(
        "workflow_type", mode="plain", json_schema_input_type=WorkflowName | None
    )(check_workflow)
    _whole = field_validator(
        "required_devices", "node_count", "gpus_per_node", "test_timeout", mode="before"
    )(no_bool)
    _minutes = field_validator("time_limit", mode="before")(minutes)
    _time = field_validator("time_limit")(check_time)
    _test_id = field_validator("test_cmd")(run_test_id_with_pytest)
    _tool_command = field_validator("eval_cmd", "bench_cmd")(check_tool_command)
    _model_name = field_validator("model_name")(check_model_name)
    _slurm_names = field_validator("partition", "account", "mpi_plugin")(check_slurm_name)
    _cuda_arch = field_validator("cuda_arch")(check_cuda_arch)
    _plain_paths = field_validator("wheel_dir", "sqsh_cache_dir")(check_plain_path)

    def workflow(self) -> str:
        """The given workflow, else the first by rank that the present fields say it is
        (decision workflow-inference's order)."""
        if self.workflow_type:
            return self.workflow_type
        for wf in sorted(WORKFLOWS.items(), key=lambda w: w.infer_rank):
            if wf.infers(self):
                return str(wf.name)
        raise RuntimeError("no workflow takes this request: import trtllm_script_builder.workflows")


def _refusal(err: Any) -> BuildError:
    """The error line of one of pydantic's errors."""
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
    if err["type"] in ("dict_type", "model_type"):
        msg = "should be a mapping of fields"  # not pydantic's name for the model class
    refused = values.refuse(loc, msg, err.get("input"), _type_fix(err))
    if loc == "workflow_type" and (fix := _workflow_fix(err.get("input"))):
        return BuildError(loc, refused.problem, fix)
    return refused


def _type_fix(err: Any) -> str:
    """The fix for a value of the wrong type (decision strict-request-types): the value as the
    schema takes it, or the nearest allowed word."""
    given = err.get("input")
    if isinstance(own := err.get("ctx", {}).get("error"), Problem):
        return own.fix
    kind = err["type"]
    if kind == "int_type" and isinstance(given, str) and given.strip().isdigit():
        return f"write {given.strip()} without quotes"
    if kind in ("int_type", "int_from_float") and isinstance(given, float) and given.is_integer():
        return f"write {int(given)}, a whole number"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "write a whole number, e.g. 4"
    if kind in ("greater_than_equal", "greater_than"):
        bound = err.get("ctx", {}).get("ge", err.get("ctx", {}).get("gt"))
        return f"write a whole number of at least {bound}, or leave the field out"
    if kind == "string_type" and isinstance(given, list) and len(given) == 1:
        return f"write one value, not a list: {shown_plain(given[0])}"
    if kind == "string_type" and err["loc"] == ("time_limit",) and isinstance(given, float):
        return "write whole minutes (90) or HH:MM:SS (01:30:00)"
    if kind == "string_type" and isinstance(given, (int, float)) and not isinstance(given, bool):
        return f"write it as text, in quotes: '{given}'"
    if kind in ("dict_type", "model_type"):
        return "write a mapping of its fields, e.g. {gpus_per_node: 8, available_gpus: 8}"
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


def shown_plain(value: object) -> str:
    """A list's one item as the user would write it in its place."""
    return str(value) if isinstance(value, (str, int, float)) else values.shown(value)


def workflow_aliases() -> dict[str, str]:
    """What people write for a workflow: the tool it runs, or the category of its script."""
    return {alias: wf.name for wf in WORKFLOWS.items() for alias in wf.aliases}


def nearest_workflow(given: object) -> str | None:
    """The workflow a misspelt name, a tool's name or a category number most likely means."""
    from difflib import get_close_matches

    workflows = workflow_names()
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
        if isinstance(exc, DataError) and exc.where:
            # YAML given a .json name reads as broken JSON: the fix is the name, not the text.
            looks_yaml = not text.lstrip().startswith(("{", "["))
            fix = (
                "name the file .yaml (it is YAML, not JSON)" if looks_yaml else _json_fix(text, exc)
            )
            raise BuildError(
                "request", f"{name}{exc.where} cannot be parsed: {exc.what}", fix
            ) from None
        raise BuildError(
            "request", f"{name} cannot be parsed ({str(exc).splitlines()[0]})", "fix its syntax"
        ) from None
    except Exception as exc:  # yaml.YAMLError has no common base we can name without importing yaml
        from trtllm_script_builder.model.datafile import yaml_error_at

        where, what, fix = yaml_error_at(exc, text)
        raise BuildError("request", f"{name}{where} cannot be parsed: {what}", fix) from None
    if not isinstance(data, dict):
        raise BuildError(
            "request",
            f"{name} does not hold a mapping of fields",
            "write one object of field: value",
        )
    return data, base


def _json_fix(text: str, exc: DataError) -> str:
    """The usual JSON slips named: a comma before `}` or `]`, a single-quoted string."""
    line, col = (int(x) for x in (exc.where or ":1:1").split(":")[1:])
    rest = text.splitlines()[line - 1 :] or [""]
    here = "\n".join(rest)[col - 1 :].lstrip()
    before = "\n".join(text.splitlines()[: line - 1] + [rest[0][: col - 1]]).rstrip()
    if before.endswith(",") and here[:1] in ("}", "]"):
        return "remove the comma before it (JSON allows no trailing comma)"
    if here[:1] == "'":
        return "write strings and keys in double quotes (JSON takes no single quotes)"
    return "fix the JSON there"


@lru_cache(maxsize=1)
def yaml_loader() -> Any:
    """A SafeLoader that reads an unquoted `4:00:00` as the string a request means (YAML 1.1
    would read the number 14400), for request files and build-many's request lists alike."""
    import yaml

    from trtllm_script_builder.model.datafile import yaml_loader_class

    class Loader(yaml_loader_class(aliases=False)):  # type: ignore[misc]
        """A request needs no aliases (decision one-data-reader)."""

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


_WINDOWS_PATH = re.compile(r"[A-Za-z]:[\\/]|\\\\")
_ENV_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def refuse_unexpanded(key: str, value: str) -> None:
    """`~/x` or `$HOME/x` in a request is taken as written (no shell reads a request), so it
    would become `<request folder>/~/x`: refused with the path the user meant (for a path on
    this machine; the cluster's or the container's home is not known here). A Windows path
    would be glued to the current folder the same way."""
    here = key in PATH_FIELDS
    if _WINDOWS_PATH.match(value):
        raise BuildError(
            key,
            f"is a Windows path (got {values.shown(value)}); the job runs on Linux",
            "give the path as this machine (or WSL: /mnt/c/...) names it, with /",
        )
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


def absolutise(
    data: dict[str, Any], base: Path, problems: dict[str, BuildError] | None = None
) -> None:
    """Relative host paths taken from `base`; a `~` or `$VAR` refused, or with `problems`
    recorded there under its field."""
    for key in PATH_FIELDS + REMOTE_PATH_FIELDS:
        v = data.get(key)
        if isinstance(v, str) and v:
            try:
                refuse_unexpanded(key, v)
            except BuildError as err:
                if problems is None:
                    raise
                problems.setdefault(key, err)
    for key in PATH_FIELDS:
        v = data.get(key)
        if isinstance(v, str) and v and not os.path.isabs(v):
            data[key] = os.path.normpath(os.path.join(base, v))


def load_request(
    file_data: dict[str, Any],
    file_base: Path,
    flags: dict[str, Any],
    more: Callable[[Request], list[BuildError]] | None = None,
) -> Request:
    """Merge file fields and flags (flags win), make host paths absolute, validate; every
    problem found is reported at once, a line per field. When the request's own checks fail,
    `more` (the build's checks of command, paths and cluster names) is asked about the rest of
    the request, so those problems come in the same answer."""
    problems: dict[str, BuildError] = {}
    data = dict(file_data)
    absolutise(data, file_base, problems)
    flag_data = {k: v for k, v in flags.items() if v is not None}
    absolutise(flag_data, Path.cwd(), problems)
    data.update(flag_data)
    # What no value may hold is named before its type or its field's own check: one pass
    # here, not a `*` validator on every field (3 ms to build, 12 us a request).
    for name, value in data.items():
        problem = values.text_problem(value, lines=True) if isinstance(value, str) else None
        if problem is not None and name in Request.model_fields:
            problems.setdefault(name, values.refuse(name, problem, value, "correct the value"))
    req: Request | None = None
    try:
        req = Request.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            refused = _refusal(err)
            problems.setdefault(refused.field, refused)
    _check_values(_given(req, data), problems)
    if req is not None and not problems and req.job_spec_file:
        _forward_job_spec(req)
        _check_values(
            _given(req, data), problems
        )  # again: the forwarded values come from a file too
    if problems and more is not None:
        for other in _problems_of_the_rest(data, problems, more):
            problems.setdefault(other.field, other)
    if problems or req is None:
        order = list(Request.model_fields)

        def place(err: BuildError) -> int:
            name = err.field.split(".")[0]
            return order.index(name) if name in order else len(order)

        raise refusal(sorted(problems.values(), key=place))
    return req


def _problems_of_the_rest(
    data: dict[str, Any],
    problems: dict[str, BuildError],
    more: Callable[[Request], list[BuildError]],
) -> list[BuildError]:
    """`more`'s problems of the request without its refused fields, or none when what is left
    is no request (a required field was among them)."""
    bad = {name.split(".")[0] for name in problems}
    rest = {k: v for k, v in data.items() if k not in bad}
    try:
        found = more(Request.model_validate(rest))
    except (ValidationError, BuildError):
        return []
    # A field left out because it was refused, or misspelt, is not missing as well: with a
    # command among them "no command given" is no problem of the request.
    from difflib import get_close_matches

    meant = set(bad)
    for name in bad - set(Request.model_fields):
        meant.update(get_close_matches(name, list(Request.model_fields), n=1, cutoff=0.6))
    what_runs = {*_COMMAND_FIELDS, "workflow_type"}
    if meant & what_runs:
        meant |= what_runs
    return [p for p in found if p.field not in meant]


_COMMAND_FIELDS = (
    "test_cmd",
    "eval_cmd",
    "bench_cmd",
    "custom_cmd",
    "custom_script",
    "perf_config_yaml",
    "perf_test_name",
)


def _given(req: Request | None, data: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each field's value: the request's, or as given when pydantic refused the request (its
    other fields are still checked)."""
    if req is not None:
        pairs = [(name, getattr(req, name)) for name in Request.model_fields]
        env = req.env_check.model_dump() if req.env_check is not None else {}
    else:
        pairs = [(name, v) for name, v in data.items() if name in Request.model_fields]
        given = data.get("env_check")
        env = given if isinstance(given, dict) else {}
    return pairs + [(f"env_check.{k}", v) for k, v in env.items() if k in EnvCheck.model_fields]


def _check_values(pairs: list[tuple[str, Any]], problems: dict[str, BuildError]) -> None:
    """What no field's type says: one line, no leading `-`, bounded (model/values.py); paths
    on the cluster absolute. A field's first problem is recorded in `problems`."""
    for name, value in pairs:
        if name in problems or not isinstance(value, str):
            continue
        prefix, _, own = name.rpartition(".")
        try:
            values.check_fields([(own, value)], prefix + "." if prefix else "")
            if not prefix and own in PATH_FIELDS + REMOTE_PATH_FIELDS:
                if value != value.strip() and value.strip():
                    # A pasted path's stray space would name another folder (and, in a
                    # folder derived from it, be blamed on that one).
                    raise BuildError(
                        name,
                        f"has white space at its start or end (got {values.shown(value)})",
                        f"write {values.shown(value.strip())}",
                    )
                values.check_path(value, name, absolute=False)
            if not prefix and own in REMOTE_PATH_FIELDS and not value.startswith("/"):
                raise BuildError(
                    name, f"must be an absolute path (got {value!r})", "give the full path"
                )
        except BuildError as err:
            problems[name] = err


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
    # elsewhere they are not used (decision unread-field-warning)
    if req.execution_scenario == "remote_slurm":
        keys += ["remote_repo_path", "remote_work_dir"]
    for key in keys:
        if getattr(req, key) is None and isinstance(spec.get(key), str):
            setattr(req, key, spec[key])


def request_from_cli(
    source: str | None,
    flags: dict[str, Any],
    more: Callable[[Request], list[BuildError]] | None = None,
) -> Request:
    """REQUEST (file, `-` or none) plus the field flags, as `build` and `run` take them."""
    data, base = read_request_file(source) if source else ({}, Path.cwd())
    return load_request(data, base, parse_flag_values(flags), more)


def parse_flag_values(flags: dict[str, Any]) -> dict[str, Any]:
    """`--env-check` arrives as JSON text; the other flags are already typed by click."""
    flags = dict(flags)
    if isinstance(flags.get("env_check"), str):
        try:
            flags["env_check"] = parse_json(flags["env_check"])
        except ValueError as exc:
            raise BuildError("env_check", f"is not JSON ({exc})", "pass a JSON object") from None
    return flags
