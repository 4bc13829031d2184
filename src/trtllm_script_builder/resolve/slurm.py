"""Step 3's cluster side: partition facts, GPUs per node, GRES flag, MPI plugin."""

from __future__ import annotations

import re
from dataclasses import dataclass

from trtllm_script_builder.errors import BuildError, refusal
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.model.slurm_env import Partition, SlurmEnv
from trtllm_script_builder.resolve.backend import queued
from trtllm_script_builder.slurm_time import parse_time_minutes, time_to_seconds


@dataclass(frozen=True)
class ClusterFacts:
    partition: Partition | None
    gpus_per_node: int
    gpus_source: str
    gres: str | None  # "gpu:8" when the partition schedules GPUs by GRES, else None
    mpi_plugin: str
    # decision image-by-arch's fallback: no Slurm tools, or the partition's arch unknown
    fallback: bool


def require_slurm_fields(req: Request) -> list[BuildError]:
    """A refusal for each of partition, account and the cluster file that is missing; the
    names the cluster file has are listed, so the fix is a choice, not a search."""
    problems = []
    for field in ("partition", "account", "slurm_env_file"):
        if not getattr(req, field):
            flag = "--" + field.replace("_", "-")
            if field == "slurm_env_file":
                hint = (
                    "probe the cluster first (trtllm-script-builder probe --output slurm_env.json)"
                )
            else:
                hint = _names_in_cluster_file(req, field) or "the value the cluster knows"
            problems.append(
                BuildError(
                    field, f"is required for {req.execution_scenario}", f"pass {flag} {hint}"
                )
            )
    return problems


def _names_in_cluster_file(req: Request, field: str) -> str | None:
    """`one of: a, b` from the request's slurm_env.json, or None when it cannot be read."""
    if not req.slurm_env_file:
        return None
    from trtllm_script_builder.model.slurm_env import load_slurm_env

    try:
        env = load_slurm_env(req.slurm_env_file)[0]
    except (BuildError, OSError, ValueError):
        return None
    names = [p.name for p in env.partitions] if field == "partition" else list(env.accounts)
    return f"with one of: {', '.join(names)}" if names else None


def find_partition(req: Request, env: SlurmEnv) -> Partition | None:
    assert req.partition is not None
    part = env.partition(req.partition)
    problems = []
    if part is None and env.partitions:
        names = [p.name for p in env.partitions]
        problems.append(
            BuildError(
                "partition",
                f"{req.partition!r} is not a partition of this cluster (has: {', '.join(names)})",
                _one_of(req.partition, names, "--partition"),
            )
        )
    if env.accounts and req.account not in env.accounts:
        problems.append(
            BuildError(
                "account",
                f"{req.account!r} is not one of your accounts ({', '.join(env.accounts)})",
                _one_of(req.account or "", env.accounts, "--account"),
            )
        )
    if problems:
        raise refusal(problems)
    return part


def _one_of(given: str, names: list[str], flag: str) -> str:
    """The fix for a name not on the list: the nearest one when a typo is likely."""
    from difflib import get_close_matches

    # Case does not count for "near": `GPU` for `gpu` is the likeliest typo of all.
    lowered = {n.lower(): n for n in names}
    near = get_close_matches(given.lower(), list(lowered), n=1, cutoff=0.6)
    if near:
        return f"did you mean {lowered[near[0]]}? pass it with {flag}"
    return f"pass one of those with {flag}"


def _has_gpus(part: Partition) -> bool:
    return bool(part.gpus_per_node) or any(
        g.strip().startswith("gpu") for g in (part.gres or "").split(",")
    )


def gpus_per_node(req: Request, part: Partition | None) -> tuple[int, str]:
    """Decision gpus-per-node: partition, else env_check (Docker), else the request, else refuse."""
    if part is not None and part.gpus_per_node:
        return part.gpus_per_node, f"partition {part.name}"
    here = not queued(req)  # a Docker job's node is this machine, as env_check reports it
    if here and req.env_check and req.env_check.gpus_per_node:
        return req.env_check.gpus_per_node, "env_check.gpus_per_node"
    # What the environment check reports for this machine, when it gives no per-node count.
    if here and req.env_check and req.env_check.available_gpus:
        return req.env_check.available_gpus, "env_check.available_gpus"
    if req.gpus_per_node:
        return req.gpus_per_node, "the request's gpus_per_node"
    if part is not None and part.arch is not None and not _has_gpus(part):
        # The probe saw this partition and no GPU in it: the fix is another partition.
        raise BuildError(
            "partition",
            f"{part.name} has no GPUs (GRES {part.gres})",
            "pass a GPU partition with --partition (or --gpus-per-node N if its nodes have GPUs "
            "that Slurm does not schedule)",
        )
    if here:  # build asked nvidia-smi before this (build._gpus_found_here)
        raise BuildError(
            "gpus_per_node",
            "unknown: env_check gives no GPU count and nvidia-smi -L lists no GPU on this machine",
            "pass what the environment check found, --env-check '{\"gpus_per_node\": N}', or "
            "--gpus-per-node N",
        )
    where = (
        f"partition {part.name} reports none (GRES {part.gres})" if part else "nothing reports it"
    )
    raise BuildError("gpus_per_node", f"unknown: {where}", "pass --gpus-per-node N")


def cluster_facts(req: Request, env: SlurmEnv | None) -> ClusterFacts:
    part = find_partition(req, env) if env is not None else None
    gpn, source = gpus_per_node(req, part)
    gres = None
    # GPU GRES may share the row with others (`nic:1,gpu:8`); the probe's requires_gres says so too.
    if part is not None and (
        part.requires_gres
        or any(g.strip().startswith("gpu:") for g in (part.gres or "").split(","))
    ):
        gres = f"gpu:{gpn}"
    fallback = env is None or env.tools_missing or part is None or part.arch is None
    if req.mpi_plugin:
        plugin = req.mpi_plugin
        known = env.pmix.available if env is not None and not env.tools_missing else []
        if known and _PMIX.fullmatch(plugin) and plugin not in known:
            # srun --mpi=<a pmix the cluster lacks> fails when the job starts.
            raise BuildError(
                "mpi_plugin",
                f"{plugin} is not one of the cluster's PMIx plugins ({', '.join(known)})",
                _one_of(plugin, known, "--mpi-plugin"),
            )
    elif not fallback and env is not None and env.pmix.preferred:
        plugin = env.pmix.preferred
    else:
        plugin = "pmix"
    # Whichever it is, it was checked as a Slurm name when it was read (model/values.py).
    return ClusterFacts(part, gpn, source, gres, plugin, fallback)


_PMIX = re.compile(r"pmix(_v\d+)?")


def time_limit_warnings(req: Request, facts: ClusterFacts | None) -> list[str]:
    """A time limit past the partition's: sbatch refuses it, or the job waits for ever. And
    a limit of zero, which Slurm reads as no limit at all (decision ambiguous-time-limit)."""
    notes = []
    if time_to_seconds(req.time_limit) == 0:
        notes.append(
            f"time_limit {req.time_limit} asks Slurm for no time limit (the partition's "
            "MaxTime applies); give the job's real length, e.g. 02:00:00"
        )
    part = facts.partition if facts else None
    if part is None or not part.time_limit:
        return notes
    try:
        asked, allowed = parse_time_minutes(req.time_limit), parse_time_minutes(part.time_limit)
    except ValueError:
        return notes
    if allowed is None or (asked is not None and asked <= allowed):
        return notes
    return notes + [
        f"time_limit {req.time_limit} is longer than partition {part.name}'s {part.time_limit}; "
        "sbatch may refuse the job or leave it pending"
    ]


@dataclass(frozen=True)
class Share:
    """A job's part of each node it runs on: `--cpus-per-task` and `--mem` (None: not known)."""

    cpus_per_task: int | None
    mem: str | None
    warnings: tuple[str, ...] = ()


def node_share(part: Partition | None, gpus_on_node: int, gpn: int, tasks_on_node: int) -> Share:
    """Decision gpu-cpu-share: the node's CPUs and memory in proportion to the GPUs the job
    holds on it, split over its tasks there; never guessed when the probe did not record them."""
    if part is not None and part.arch is not None and not _has_gpus(part):
        # a partition the probe saw without GPUs: no GPU share to take, the node is shared
        # as the cluster's defaults say
        return Share(None, None, ())
    if part is None or not part.cpus_per_node or not part.mem_per_node_mb:
        name = f"partition {part.name}" if part else "the partition"
        return Share(
            None,
            None,
            (
                f"{name}: the cluster file records no CPUs or memory per node, so the job asks "
                "none and a cluster that allocates by core may give it one CPU; probe the "
                "cluster again to record them",
            ),
        )
    gpus_on_node = min(gpus_on_node, gpn)
    cpus = max(part.cpus_per_node * gpus_on_node // gpn, tasks_on_node)
    mem = part.mem_per_node_mb * gpus_on_node // gpn
    return Share(max(cpus // tasks_on_node, 1), f"{mem}M" if mem > 0 else None)


def cpu_partition(env: SlurmEnv | None, part: Partition | None) -> Partition | None:
    """Decision compile-no-gpus: an up partition of the job's CPU architecture without GPUs,
    for the jobs that need none (compile, image import)."""
    if env is None or part is None or part.arch is None:
        return None
    return next(
        (
            p
            for p in env.partitions
            if p.arch == part.arch
            and p.state in (None, "up")
            and not p.gpus_per_node
            and not _has_gpus(p)
        ),
        None,
    )
