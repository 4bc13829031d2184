"""Every request field as a command-line flag, shared by build, build-many and run."""

from __future__ import annotations

from typing import Any

import click

# Every request field as a flag: (name, click type). Booleans get --x/--no-x.
_STR_FIELDS = (
    "workflow_type", "execution_scenario", "work_dir", "repo_root", "skill_dir", "test_cmd",
    "eval_cmd", "bench_cmd", "custom_cmd", "custom_script", "custom_env", "perf_config_yaml",
    "perf_test_name", "model_name", "partition", "account", "slurm_env_file", "time_limit",
    "llm_models_root", "checkpoint_path", "models_path", "device_type", "container_image",
    "remote_repo_path", "remote_work_dir", "job_spec_file", "mpi_plugin",
)  # fmt: skip
_INT_FIELDS = ("required_devices", "node_count", "gpus_per_node")
# The request's closed sets (tests keep them equal to the model's), offered by completion.
CHOICES = {
    "workflow_type": ("pytest", "eval", "bench", "custom", "perf_sanity"),
    "execution_scenario": ("local_docker", "local_slurm", "remote_slurm"),
}
# Host paths: completed as files by the shell.
_PATH_FIELDS = {
    "work_dir", "repo_root", "skill_dir", "custom_script", "perf_config_yaml", "slurm_env_file",
    "checkpoint_path", "models_path", "job_spec_file",
}  # fmt: skip


def _type(name: str) -> Any:
    if name in CHOICES:
        return click.Choice(CHOICES[name])
    return click.Path() if name in _PATH_FIELDS else None


_BOOL_FIELDS = ("persistent_mode", "skip_install")


def field_options(f: Any) -> Any:
    for name in reversed(_BOOL_FIELDS):
        flag = name.replace("_", "-")
        f = click.option(f"--{flag}/--no-{flag}", name, default=None, help=f"request field {name}")(
            f
        )
    for name in reversed(_INT_FIELDS):
        f = click.option(
            f"--{name.replace('_', '-')}",
            name,
            type=int,
            default=None,
            help=f"request field {name}",
        )(f)
    f = click.option(
        "--env-check",
        "env_check",
        default=None,
        metavar="JSON",
        help="request field env_check, as a JSON object",
    )(f)
    for name in reversed(_STR_FIELDS):
        f = click.option(
            f"--{name.replace('_', '-')}",
            name,
            type=_type(name),
            default=None,
            help=f"request field {name}",
        )(f)
    return f
