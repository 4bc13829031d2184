"""`check` for a Docker job: it runs on this machine, so Docker must answer and nvidia-smi
(where there is one) list the GPUs it needs."""

from __future__ import annotations

from trtllm_script_builder.process.probe.collect import first_line
from trtllm_script_builder.process.proc import Runner

WHERE = "this machine (docker, GPUs)"


def check_docker(devices: int, host: Runner) -> list[str]:
    """Every problem found (none: the job can start here)."""
    problems: list[str] = []
    docker = host(["docker", "version", "--format", "{{.Server.Version}}"])
    if not docker.found:
        problems.append("docker: not found on this machine; install Docker or use a Slurm scenario")
    elif docker.rc != 0:
        problems.append(f"docker: the engine does not answer ({first_line(docker)})")
    smi = host(["nvidia-smi", "-L"])
    if smi.found and smi.rc == 0:
        gpus = sum(1 for ln in smi.out.splitlines() if ln.startswith("GPU "))
        if gpus < devices:
            problems.append(f"nvidia-smi lists {gpus} GPU(s); the job needs {devices}")
    return problems
