"""Shared by the Python stand-ins in this folder (tests/slurm/test_e2e_build.py puts the folder
first on PATH of the sbatch submission): record what the tool saw, for the test to assert on.

When STANDIN_ENV_DUMP_DIR is set (the e2e test sets it to the job's work_dir), every call
writes <dir>/<tool>.rank<SLURM_PROCID>.<pid>.json with the tool name, argv, cwd and the whole
environment of the process, exactly as the real tool would have received them.
"""

from __future__ import annotations

import json
import os
import sys


def rank() -> int:
    """The rank as trtllm-llmapi-launch computes it (SLURM_PROCID first)."""
    for name in ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMI_ID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def dump_env(tool: str) -> None:
    folder = os.environ.get("STANDIN_ENV_DUMP_DIR")
    if not folder:
        return
    path = os.path.join(folder, f"{tool}.rank{rank()}.{os.getpid()}.json")
    record = {"tool": tool, "argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}
    with open(path, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)


def option(args: list[str], *names: str, default: str | None = None) -> str | None:
    """The last value of `--name V` or `--name=V`."""
    value = default
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                value = args[i + 1]
            elif a.startswith(n + "="):
                value = a[len(n) + 1 :]
    return value


def subcommands(args: list[str], flags: set[str]) -> list[str]:
    """The bare words of a click command line (options with a value skip that value)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            i += 1 if ("=" in a or a in flags) else 2
            continue
        out.append(a)
        i += 1
    return out


def world_size() -> int:
    """tllm_mpi_size (set by trtllm-llmapi-launch) as TensorRT-LLM reads it, else 1."""
    value = os.environ.get("tllm_mpi_size", "1")  # noqa: SIM112 (the real, lower-case name)
    return int(value) if value.isdigit() else 1
