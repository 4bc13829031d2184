"""Which backend runs a built job, and on which host its tools run: the one place outside the
request model that reads a job's execution scenario (check, sync and the rest work on the
backend's name and a `Host`)."""

from __future__ import annotations

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process.host import Host, host_for

DOCKER, SLURM = "docker", "slurm"


# scenario -> (backend, whether its tools run on a login node reached by ssh); an unknown
# scenario is a KeyError here, never taken silently for another backend
_SCENARIOS = {
    "local_docker": (DOCKER, False),
    "local_slurm": (SLURM, False),
    "remote_slurm": (SLURM, True),
}


def backend_for(spec: JobSpec) -> str:
    """DOCKER or SLURM: which backend runs the job."""
    return _SCENARIOS[spec.execution_scenario][0]


def refuse_ssh_host_here(spec: JobSpec, override: str | None) -> None:
    """--ssh-host on a job whose tools run here would be ignored without a word: the user
    meant another job, or a remote build of this one."""
    if override and not _SCENARIOS[spec.execution_scenario][1]:
        raise BuildError(
            "ssh_host",
            f"the job is {spec.execution_scenario}, which runs on this machine's cluster or Docker",
            "drop --ssh-host (it is for remote_slurm jobs)",
        )


def ssh_host_for(spec: JobSpec, override: str | None = None) -> str | None:
    """The ssh host the job's tools run on (`override`, else job_spec's ssh_host, else its
    slurm_env's; decision remote-check), None for a job whose tools run here."""
    refuse_ssh_host_here(spec, override)
    if not _SCENARIOS[spec.execution_scenario][1]:
        return None
    host = override or spec.ssh_host or (spec.slurm_env or {}).get("ssh_host")
    if not host:
        raise BuildError(
            "ssh_host",
            "job_spec.json and its slurm_env name no ssh_host",
            "pass --ssh-host HOST (or probe the cluster with probe --ssh HOST)",
        )
    return str(host)


def host_of(spec: JobSpec, override: str | None = None) -> Host:
    """The host the job's scheduler tools run on (BuildError: none can be named)."""
    return host_for(ssh_host_for(spec, override))


__all__ = ["DOCKER", "SLURM", "backend_for", "host_of", "refuse_ssh_host_here", "ssh_host_for"]
