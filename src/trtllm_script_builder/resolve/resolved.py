"""What resolving decides, once: the frozen job that the renderers read, and nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from trtllm_script_builder.model.jobspec import OutFile, SlurmParams
from trtllm_script_builder.model.slurm_env import SlurmEnv
from trtllm_script_builder.resolve.compile import Chain
from trtllm_script_builder.resolve.mounts import Mount, covers


class Cluster(NamedTuple):
    """A cluster description: the validated model, and the file's own keys for job_spec.json."""

    env: SlurmEnv
    raw: dict[str, Any]


@dataclass(frozen=True)
class Paths:
    """Where the job lives as the script sees it (remote: on the cluster)."""

    project: str
    log_dir: str
    home: str
    remote: bool

    def to_script(self, local_repo: str, local_path: str) -> str | None:
        """A local path under the repo, as the script sees it (remote: under remote_repo_path)."""
        if not self.remote:
            return local_path
        if covers(local_repo, local_path):
            return self.project + local_path[len(local_repo.rstrip("/")) :]
        return None


@dataclass(frozen=True)
class SubmitPlan:
    """Category 4: the files submit.py reads, its arguments, and the remote path rewrite."""

    before: tuple[OutFile, ...]
    args: tuple[str, ...]
    launch_sh: str  # file name in work_dir
    rewrite: tuple[tuple[str, str], ...] | None  # keyword -> path for the remote rewrite
    # Remote: the target partition's GPU request lines (submit.py asked the local cluster).
    gpu_lines: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ResolvedJob:
    workflow: str  # job_spec's workflow_type
    category: int
    scenario: str
    model_name: str
    name: str  # job and script name
    # Slurm: the job name; Docker: unique per job folder (decision local-docker-run)
    container_name: str
    image: str  # canonical reference (job_spec)
    script_image: str  # as the script's container tool takes it
    repo_root: str  # local
    work_dir: str  # local: where the files are written
    paths: Paths
    models_root: str
    mounts: tuple[Mount, ...]
    mounts_text: str  # the --container-mounts value a follow-up srun reuses
    required_devices: int
    nodes: int
    success_patterns: tuple[str, ...]
    failure_patterns: tuple[str, ...]
    exports: tuple[tuple[str, str], ...] = ()
    run_cmd: str = ""
    prep_cmd: str | None = None
    run_script: str = ""  # custom on Slurm: the in-job path of slurm_run_custom.sh
    # pytest: pytest's --junitxml file, relative to paths.log_dir (`%j` the Slurm job id)
    junit_file: str = ""
    install: bool = True
    wheel: str = ""  # the wheel the install step takes, as the job sees it ("" for -e .)
    mpi: bool = False  # the run srun carries --mpi
    launcher: bool = False  # trtllm-llmapi-launch in front of the run command
    slurm: SlurmParams | None = None
    cluster_raw: dict[str, Any] | None = None
    ssh_host: str | None = None
    persistent: bool = False
    extra_files: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    submit: SubmitPlan | None = None
    chain: Chain | None = None  # the import and compile jobs submitted before this one
