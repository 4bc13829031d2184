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
            f"--{name.replace('_', '-')}", name, default=None, help=f"request field {name}"
        )(f)
    return f
