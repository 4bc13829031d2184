"""The backends, one module each, registered in `model.registry.BACKENDS` when imported (as
every entry point does). Their run-time imports are made when used, so a build pays only for
their build-time data."""

from trtllm_script_builder.backends import docker, slurm
from trtllm_script_builder.model.registry import BACKENDS

assert docker.DOCKER and slurm.SLURM  # the imports register them
__all__ = ["BACKENDS"]
