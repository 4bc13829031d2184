"""`check` for a Slurm job: `sbatch --test-only` on its scripts and its parameters against
what the cluster reports, every problem at once, on the host the cluster's tools run on."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from trtllm_script_builder.model.jobspec import JobSpec, SlurmParams
from trtllm_script_builder.model.values import whole_number
from trtllm_script_builder.process.host import Host, current_user
from trtllm_script_builder.process.probe import parse
from trtllm_script_builder.process.probe.collect import first_line
from trtllm_script_builder.process.proc import CmdResult, Runner
from trtllm_script_builder.slurm_time import parse_time_minutes


class Found(NamedTuple):
    problems: list[str]
    unreachable: bool = False
    cluster: str | None = None  # Slurm's ClusterName


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _lines(result: CmdResult) -> list[str]:
    return [ln.strip() for ln in result.text.splitlines() if ln.strip()]


def check_slurm(spec: JobSpec, work_dir: Path, host: Host, user: str | None = None) -> Found:
    """Check the job's scripts and slurm_params on the cluster `host` reaches."""
    params = spec.slurm_params
    if params is None:
        return Found(["job_spec.json: slurm_params missing; rebuild the job"])
    script = Path(spec.script_path)
    script = script if script.is_absolute() else work_dir / script
    problems: list[str] = []
    missing = not script.is_file()
    if missing:
        problems.append(f"script_path: {script} does not exist")
    hello = host.check()
    if hello.rc != 0:
        why = f"ssh_host: ssh {host.name}: {first_line(hello)}; check that `ssh HOST true` works"
        return Found([why], unreachable=True)
    user = user or (hello.out.split() or [current_user()])[-1]  # the host's user: its last word
    # sbatch reads each script on stdin: over ssh it is not on the cluster before `submit`
    # copies it, and here the same line does the same
    test = None if missing else host.shell("sbatch --test-only", input=script)
    config = _config(host)  # the cluster's name, and whether it enforces accounts
    cluster = config.get("ClusterName") or None
    # 1. the cluster's own verdict on the script
    if test is not None and not test.found:
        problems.append("sbatch: SLURM client tools not found; cannot check the job")
        return Found(problems, cluster=cluster)
    if test is not None and test.rc != 0:
        reasons = _lines(test) or [f"exit status {test.rc}"]
        problems += [f"sbatch --test-only: {line}" for line in reasons]
    # ... and on the compile and import jobs it waits for (their own #SBATCH lines)
    for pre in spec.prerequisites or []:
        path = Path(str(pre.get("script_path", "")))
        name = str(pre.get("script_name") or path.name)
        if not path.is_absolute() or not path.is_file():
            problems.append(f"prerequisites: {name}: {path} does not exist; build the job again")
            continue
        res = host.shell("sbatch --test-only", input=path)
        if res.found and res.rc != 0:
            reasons = _lines(res) or [f"exit status {res.rc}"]
            problems += [f"{name}: sbatch --test-only: {line}" for line in reasons]

    # 2. independent checks against what the cluster reports
    problems += _check_params(params, host, user, config)
    return Found(problems, cluster=cluster)


def _config(runner: Runner) -> dict[str, str]:
    """`scontrol show config` as key -> value; empty when it cannot be read."""
    config = runner(["scontrol", "show", "config"])
    return parse.parse_config(config.out) if config.rc == 0 else {}


def _check_params(
    params: SlurmParams, runner: Runner, user: str, config: dict[str, str]
) -> list[str]:
    problems: list[str] = []
    partition = _text(params.partition)
    account = _text(params.account)

    show = runner(["scontrol", "show", "partition", "-o"])
    if not show.found:
        return ["scontrol: SLURM client tools not found; cannot check the job"]
    if show.rc != 0:
        return [f"scontrol show partition failed: {first_line(show)}"]
    partitions = {p.get("PartitionName", ""): p for p in parse.parse_scontrol_records(show.out)}
    part: dict[str, str] | None = None
    if partition is None:
        problems.append(
            "slurm_params.partition: not set (partitions: " + ", ".join(partitions) + ")"
        )
    elif partition not in partitions:
        problems.append(
            f"slurm_params.partition: {partition} does not exist on this cluster "
            f"(partitions: {', '.join(partitions) or 'none'})"
        )
    else:
        part = partitions[partition]
        state = part.get("State", "UNKNOWN")
        if state.upper() != "UP":
            problems.append(f"slurm_params.partition: {partition} is {state}, jobs will not start")
        allowed = part.get("AllowAccounts", "ALL")
        if account and allowed != "ALL" and account not in allowed.split(","):
            problems.append(
                f"slurm_params.account: partition {partition} allows only accounts {allowed}"
            )

    problems += _check_account(account, partition, runner, user, config)
    if part is not None:
        problems += _check_time(params.time_limit, partition or "", part)
        problems += _check_resources(params, partition or "", part, runner)
    problems += _check_mpi(_text(params.mpi_plugin), runner)
    return problems


def _check_account(
    account: str | None, partition: str | None, runner: Runner, user: str, config: dict[str, str]
) -> list[str]:
    enforce = config.get("AccountingStorageEnforce", "")
    if "associations" not in enforce.lower():
        return []  # the cluster does not check accounts, so neither do we
    if account is None:
        return ["slurm_params.account: not set (the cluster enforces account associations)"]
    fields = "format=defaultaccount,account,partition"
    result = runner(["sacctmgr", "-nP", "show", "user", user, "withassoc", fields])
    if result.rc != 0:
        return [f"slurm_params.account: cannot read associations: {first_line(result)}"]
    _, assocs = parse.parse_user_assocs(result.out)
    if parse.account_allows(assocs, account, partition):
        return []
    mine = ", ".join(parse.unique_accounts(assocs)) or "none"
    where = f" for partition {partition}" if partition else ""
    return [
        f"slurm_params.account: user {user} has no association with account {account}{where} "
        f"(accounts: {mine})"
    ]


def _check_time(value: str, partition: str, part: dict[str, str]) -> list[str]:
    limit = _text(value)
    if limit is None:
        return []
    try:
        minutes = parse_time_minutes(limit)
    except ValueError:
        return [f"slurm_params.time_limit: {limit} is not a Slurm time (e.g. 02:00:00)"]
    max_time = part.get("MaxTime", "UNLIMITED")
    try:
        max_minutes = parse_time_minutes(max_time)
    except ValueError:
        return []
    if minutes is not None and max_minutes is not None and minutes > max_minutes:
        return [
            f"slurm_params.time_limit: {limit} exceeds the MaxTime {max_time} of partition "
            f"{partition}"
        ]
    return []


def _check_resources(
    params: SlurmParams, partition: str, part: dict[str, str], runner: Runner
) -> list[str]:
    problems: list[str] = []
    nodes_wanted = params.nodes or 1
    total = whole_number(part.get("TotalNodes"))
    if total is not None and nodes_wanted > total:
        problems.append(
            f"slurm_params.nodes: {nodes_wanted} nodes, partition {partition} has {total}"
        )
    gres_text = _text(params.gres)
    if gres_text is not None:
        gres_text = gres_text.removeprefix("--gres=")
    # only the GRES the script asks for: gpus_per_node is also set for partitions without GPU
    # GRES, where the builder leaves the --gres line out
    wanted = parse.parse_gres(gres_text)
    if not wanted:
        return problems

    show = runner(["scontrol", "show", "node", "-o"])
    if show.rc != 0:
        return problems + [f"scontrol show node failed: {first_line(show)}"]
    nodes = [
        n for n in parse.parse_scontrol_records(show.out) if partition in parse.node_partitions(n)
    ]
    label = gres_text or ""
    for want in wanted:
        if want.count == 0:
            continue
        counts = []  # per node: how many of this GRES (name and type) it has
        for node in nodes:
            have = [
                g
                for g in parse.parse_gres(node.get("Gres"))
                if g.name == want.name and (want.type is None or g.type == want.type)
            ]
            counts.append(sum(g.count or 0 for g in have) if have else None)
        offered = sorted({c for c in counts if c is not None})
        kind = want.name + (f":{want.type}" if want.type else "")
        need = want.count or 1
        if not offered:
            problems.append(
                f"slurm_params.gres: {label} asks for {kind}, but the nodes of partition "
                f"{partition} have no {kind} GRES; drop the --gres request or pick another "
                "partition"
            )
        elif sum(1 for c in counts if c is not None and c >= need) < nodes_wanted:
            problems.append(
                f"slurm_params.gres: {label} asks for {need} {kind} per node on {nodes_wanted} "
                f"node(s); nodes of partition {partition} have {', '.join(map(str, offered))}"
            )
    return problems


def _check_mpi(plugin: str | None, runner: Runner) -> list[str]:
    if plugin is None or plugin == "none":
        return []
    result = runner(["srun", "--mpi=list"])
    if result.rc != 0:
        return [f"slurm_params.mpi_plugin: cannot list MPI plugins: {first_line(result)}"]
    names = parse.parse_mpi_list(result.text)
    if plugin in names:
        return []
    return [
        f"slurm_params.mpi_plugin: {plugin} is not an MPI plugin of this cluster "
        f"(srun --mpi=list: {', '.join(names) or 'none'})"
    ]
