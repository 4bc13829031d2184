"""What a workflow tells every layer: the one object a `workflows/` module registers.

The layers below the workflows (model, resolve, render, output, process) never name a
workflow: they take the request's or the job's workflow name to the registry and ask the
object it holds. The object says which request fields carry its command, when a request
without `workflow_type` is it, how it is sized, what its job exports and mounts, its
template and names, and how its log reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.registry import WORKFLOWS
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.resolve.backend import queued
from trtllm_script_builder.resolve.mounts import Mount
from trtllm_script_builder.resolve.resolved import Paths

LAUNCHER = "trtllm-llmapi-launch"  # the script chooses the launcher: a user's own one is dropped
# A figure in a log line: at most 30 digits a side, as a longer run is no figure (it would be
# infinity in a float, which JSON cannot carry; decision shown-never-obeyed).
NUM = r"(-?\d{1,30}(?:\.\d{1,30})?)(?!\d)"


@dataclass
class Sizing:
    required_devices: int
    nodes: int
    ntasks: int
    model_name: str
    mpi: bool = False  # the run srun carries --mpi
    launcher: bool = False  # across nodes: the run step goes through trtllm-llmapi-launch
    workdir_rel: str = ""  # where, under the project, the command runs
    warnings: list[str] = field(default_factory=list)

    @property
    def ntasks_per_node(self) -> int:
        return self.ntasks // self.nodes


@dataclass
class Draft:
    """A job of Categories 1-3, 5 and 6 while its workflow fills in its own parts."""

    req: Request
    paths: Paths
    name: str  # <model>_<suffix>
    sizing: Sizing
    models_root: str
    warnings: list[str]
    exports: list[tuple[str, str]] = field(default_factory=list)
    extra_files: list[str] = field(default_factory=list)
    extras: list[Mount] = field(default_factory=list)  # mounts beyond home, project, models
    run_script: str = ""  # Slurm: an in-job helper script the job runs
    junit: str = ""  # pytest's --junitxml file, relative to the job's folder
    run_cmd: str = ""
    prep_cmd: str | None = None


@dataclass(frozen=True)
class Workflow:
    """Everything one workflow does; registered under `name` in `WORKFLOWS`."""

    name: str
    # The request fields its command is in; one of them is required (none: the workflow
    # finds its own input, as perf_sanity does through perf_config_yaml).
    commands: tuple[str, ...]
    # A request without workflow_type is the first workflow, by rank, that `infers` it.
    infer_rank: int
    infers: Callable[[Request], bool]
    suffix: str  # <model>_<suffix> names the job, its Slurm script and container
    category: int  # its Slurm script's category (job_spec); on Docker every job is 1
    # The lines that say the job passed or failed, as the real tool prints them
    # (decision log-patterns).
    patterns: tuple[tuple[str, ...], tuple[str, ...]]
    # Step 3: (request, GPUs per node, where that figure is from) -> the job's size.
    size: Callable[[Request, int, str], Sizing] | None = None
    # Its Slurm template: a name among the package's templates, or a file of its own.
    template: str | Path = ""
    aliases: tuple[str, ...] = ()  # what people write for it (the tool, the category)
    tool: str = ""  # the program its command runs, checked to be the one in its field
    model_options: tuple[str, ...] = ()  # the options `tool` refuses to start without
    adjust: Callable[[Request], Request] = lambda req: req  # the request as sizing reads it
    # Its parts of the job before the mounts are put together (exports, mounts, files) ...
    prepare: Callable[[Draft], None] = lambda draft: None
    # ... and after: the command as the container runs it.
    command: Callable[[Draft, list[Mount]], None] = lambda draft, mounts: None
    # Runs through the repo's submit.py (Category 4) rather than a script of its own.
    submit_py: Callable[[Request], bool] = lambda req: False
    eval_requirements: bool = False  # the install step adds trtllm-eval's requirements
    # The job writes a JUnit report the verdict reads, and pytest's exit codes judge it.
    junit: bool = False
    # The verdict's `results` group its figures go under (the report's figures table and
    # chart), and the figure one log line reports, as (name, value), or None.
    results: str = ""
    figure: Callable[[str], tuple[str, float] | None] | None = None
    # A build-many request item's folder name from its command, or None.
    job_name: Callable[[dict[str, Any]], str | None] = lambda item: None

    @property
    def template_name(self) -> str | Path:
        return self.template or f"{self.name}.slurm.j2"


def register(wf: Workflow) -> Workflow:
    WORKFLOWS.register(wf.name, wf)
    return wf


def workflow(name: str) -> Workflow:
    """The registered workflow of that name (KeyError when none is)."""
    return cast(Workflow, WORKFLOWS.get(name))


def workflows() -> tuple[Workflow, ...]:
    return cast(tuple[Workflow, ...], WORKFLOWS.items())


def find(name: str | None) -> Workflow | None:
    """The workflow a job spec names, or None for one this program does not know."""
    return workflow(name) if name is not None and name in WORKFLOWS else None


def command_fields() -> tuple[str, ...]:
    """Every request field that carries a command, in the registry's order."""
    return tuple(dict.fromkeys(f for wf in workflows() for f in wf.commands))


def one_node(req: Request, what: str) -> None:
    if req.node_count is not None and req.node_count > 1:
        raise BuildError(
            "node_count",
            f"{req.node_count} nodes asked, but {what} runs on one node",
            "drop --node-count or set it to 1",
        )


def by_world_size(req: Request, ws: int, gpn: int, what: str, model: str) -> Sizing:
    """Decision launcher-words: one task that sees the GPUs on one node (the program spawns
    its own MPI workers); across nodes one MPI rank per GPU under the launcher."""
    nodes = -(-ws // gpn)
    if nodes == 1:
        one_node(req, what)
        return Sizing(ws, 1, 1, model)
    if not queued(req):
        raise BuildError(
            "required_devices",
            f"{ws} GPUs ({what}) are more than this machine's {gpn}; across nodes it needs Slurm",
            "lower the parallelism or use a Slurm scenario",
        )
    if req.node_count is not None and req.node_count < nodes:
        raise BuildError(
            "node_count",
            f"{req.node_count} is too few: {ws} ranks ({what}) on nodes of {gpn} GPUs needs "
            f"{nodes} nodes",
            f"pass --node-count {nodes}, or drop --node-count",
        )
    if ws % nodes or (req.node_count is not None and req.node_count != nodes):
        raise BuildError(
            "node_count" if req.node_count is not None else "required_devices",
            f"{ws} ranks ({what}) do not spread evenly over "
            f"{req.node_count or nodes} nodes of {gpn} GPUs",
            "choose a parallelism that is a multiple of the node count, or drop --node-count",
        )
    return Sizing(ws, nodes, ws, model, mpi=True, launcher=True)


def devices_note(req: Request, devices: int, source: str) -> list[str]:
    """The command decides the GPU count; a different one in the request is named, not used."""
    if req.required_devices is None or req.required_devices == devices:
        return []
    return [
        f"required_devices {req.required_devices} from the request differs from {source}; using {devices}"
    ]
