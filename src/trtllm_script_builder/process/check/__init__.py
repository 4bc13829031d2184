"""Check a built job (WORK_DIR/job_spec.json) against where it will run.

`check_job()` runs the check of the job's backend (its `check` hook): Slurm's
(`check/slurm.py`) runs `sbatch --test-only` on the scripts and checks partition, account, GRES,
node count, time limit and MPI plugin against what the cluster reports, on the host its tools
run on (here or over ssh); Docker's (`check/docker.py`) checks this machine. The click command
is in cli/check.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trtllm_script_builder.model.values import printable
from trtllm_script_builder.process.host import Host
from trtllm_script_builder.process.spec_file import read_job_spec
from trtllm_script_builder.resolve.backend import backend_of

EXIT_OK, EXIT_PROBLEMS, EXIT_UNREACHABLE = 0, 1, 3


@dataclass(frozen=True)
class Checked:
    """What `check` found, and where: `cluster` is Slurm's ClusterName, `host` the ssh host
    the cluster was reached by (None: this machine), `place` a place that is no cluster."""

    problems: list[str]
    rc: int
    cluster: str | None = None
    host: str | None = None
    place: str | None = None

    def __post_init__(self) -> None:
        # the cluster's own words (sbatch's reasons, partition and cluster names of a remote
        # cluster) are printed: shown escaped and cut short, never obeyed
        # (decision shown-never-obeyed)
        object.__setattr__(self, "problems", [printable(p) for p in self.problems])
        if self.cluster is not None:
            object.__setattr__(self, "cluster", printable(self.cluster))

    @property
    def where(self) -> str:
        if self.place:
            return self.place
        name = f"cluster {self.cluster}" if self.cluster else "the cluster"
        return f"{name} on {self.host}" if self.host else name


def check(
    work_dir: Path, host: Host | None = None, user: str | None = None
) -> tuple[list[str], int]:
    """Return the problems found (cluster reasons quoted) and the exit code (0 fine, 1 not)."""
    found = check_job(work_dir, host=host, user=user)
    return found.problems, found.rc


def check_job(
    work_dir: Path,
    *,
    ssh_host: str | None = None,
    host: Host | None = None,
    user: str | None = None,
) -> Checked:
    """Check the job in work_dir where it will run: on the host its backend's tools run on
    (over ssh when the job's cluster is reached that way; `ssh_host` wins, decision remote-check),
    or `host` when given."""
    work_dir = Path(work_dir).resolve()
    # Nothing built there (or a job_spec.json this version cannot read) is the user's input,
    # refused as submit and watch refuse it (exit 2), not a problem of the job with the cluster.
    spec = read_job_spec(work_dir)
    backend = backend_of(spec.execution_scenario)
    backend.refuse_options(spec, ssh_host=ssh_host)
    found: Checked = backend.check(spec, work_dir, ssh_host=ssh_host, host=host, user=user)
    return found
