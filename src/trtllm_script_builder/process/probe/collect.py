"""`probe`: ask the cluster's own tools (each once where possible) for `slurm_env.json`."""

from __future__ import annotations

import re
from typing import Any

from trtllm_script_builder.errors import ToolFailed
from trtllm_script_builder.model import values
from trtllm_script_builder.model.slurm_env import SLURM_VERSION
from trtllm_script_builder.process.host import Here, Host
from trtllm_script_builder.process.probe import parse
from trtllm_script_builder.process.proc import CmdResult, Runner

NO_SLURM_TOOLS = "SLURM client tools not found"  # same text as slurm_env.NO_SLURM_TOOLS
EXIT_CLEAN, EXIT_NO_TOOLS, EXIT_PARTIAL = 0, 1, 2
FALLBACK_ERROR = "partition access verification failed; falling back to first available partition"
NOT_A_NAME = "is not a Slurm name (letters, digits and . _ + -, not starting with -)"
_ARCH = re.compile(r"[A-Za-z0-9_.-]+")  # x86_64, aarch64: `uname -m` words


def empty_env(user: str | None) -> dict[str, Any]:
    return {
        "user": user,
        "default_account": None,
        "accounts": [],
        "default_partition": None,
        "partitions": [],
        "pmix": {"available": [], "preferred": None},
        "errors": [],
    }


def first_line(result: CmdResult) -> str:
    """The tool's own complaint, for an error message, a note or a warning: shown escaped
    and cut short (a remote host's git, ssh or Slurm may print escape sequences;
    decision shown-never-obeyed)."""
    for line in (result.err or result.out).splitlines():
        if line.strip():
            return values.printable(line.strip())
    return f"exit status {result.rc}"


def probe(
    partitions: list[str] | None = None,
    host: Host | None = None,
    user: str | None = None,
    remote_cwd: str | None = None,
) -> tuple[dict[str, Any], int]:
    """Return the slurm_env dict and the exit code (0 clean, 1 no Slurm tools, 2 partial) of
    the cluster whose tools run on `host` (default: here). A cluster reached over ssh is
    recorded with its ssh_host, remote_cwd (default: the login folder) and remote_home.
    Raises ToolFailed (exit 3) when the host cannot be reached."""
    host = host or Here()
    hello = host.check()
    words = hello.out.splitlines()
    if hello.rc != 0 or len(words) < 3:
        raise _unreachable(host, first_line(hello) if hello.rc else "no login answer")
    login_dir, home = words[0], words[1]
    user = user or words[2]
    if not values.SLURM_NAME.fullmatch(user):
        # the user goes to sacctmgr as an argument of its own (decision shown-never-obeyed)
        raise _unreachable(host, f"id -un answered {values.shown(user)}, which {NOT_A_NAME}")
    env, rc = _probe(partitions, host, user)
    if host.ssh_host:
        env["ssh_host"] = host.ssh_host
        # the login shell's answers are kept only as the cluster file is read back
        # (decision shown-never-obeyed)
        for key, value in (("remote_cwd", remote_cwd or login_dir), ("remote_home", home)):
            if values.is_absolute_path(value) and values.text_problem(value) is None:
                env[key] = value
            else:
                env["errors"].append(f"{key} {values.shown(value)} left out: not an absolute path")
                env[key] = None
                rc = rc or EXIT_PARTIAL
    return env, rc


def _unreachable(host: Host, said: str) -> ToolFailed:
    return ToolFailed(
        "ssh_host", f"ssh {host.name}: {said}", "check that `ssh HOST true` works without a prompt"
    )


def _probe(partitions: list[str] | None, runner: Runner, user: str) -> tuple[dict[str, Any], int]:
    env = empty_env(user)
    errors: list[str] = env["errors"]

    sinfo = runner(["sinfo", "-h", "-o", "%P|%a|%l|%D|%G"])
    if not sinfo.found:
        errors.append(NO_SLURM_TOOLS)
        return env, EXIT_NO_TOOLS
    fields = "format=defaultaccount,account,partition"
    assoc = runner(["sacctmgr", "-nP", "show", "user", user, "withassoc", fields])
    if not assoc.found:
        errors.append(NO_SLURM_TOOLS)
        return env, EXIT_NO_TOOLS

    # accounts
    if assoc.rc != 0:
        errors.append(f"sacctmgr failed: {first_line(assoc)}")
    else:
        default, assocs = parse.parse_user_assocs(assoc.out)
        assocs = [a for a in assocs if _name_ok(a.account, "account", errors)]
        if default is not None and not _name_ok(default, "default account", errors):
            default = None
        env["accounts"] = parse.unique_accounts(assocs)
        env["default_account"] = default or (env["accounts"][0] if env["accounts"] else None)
    if not env["accounts"]:
        errors.append(f"no SLURM account associations for user {user}")

    # partitions
    rows = _valid_rows(parse.parse_sinfo(sinfo.out), errors) if sinfo.rc == 0 else []
    if sinfo.rc != 0:
        errors.append(f"sinfo failed: {first_line(sinfo)}")
    by_name: dict[str, list[parse.SinfoRow]] = {}
    for row in rows:
        by_name.setdefault(row.partition, []).append(row)
    if sinfo.rc == 0 and not by_name:
        errors.append("sinfo lists no partitions")
    up = [name for name, rs in by_name.items() if rs[0].avail == "up"]
    if partitions is None:
        probed = up
    else:
        probed = []
        for name in dict.fromkeys(partitions):
            if name not in by_name:
                from difflib import get_close_matches

                known = ", ".join(by_name) or "none"
                near = get_close_matches(name, list(by_name), n=1, cutoff=0.6)
                hint = f"; did you mean {near[0]}?" if near else ""
                errors.append(f"partition {name}: not found (partitions: {known}){hint}")
            elif name not in up:
                errors.append(f"partition {name}: state is {by_name[name][0].avail}, not up")
            else:
                probed.append(name)

    nodes: list[dict[str, str]] = []
    if probed:
        show = runner(["scontrol", "show", "node", "-o"])
        if show.rc == 0:
            nodes = parse.parse_scontrol_records(show.out)
        else:
            errors.append(f"scontrol show node failed: {first_line(show)}")

    in_partition: dict[str, list[dict[str, str]]] = {}  # one pass: 5,000 nodes x 300 partitions
    for n in nodes:
        for name in dict.fromkeys(parse.node_partitions(n)):
            in_partition.setdefault(name, []).append(n)
    for name, rs in by_name.items():
        part: dict[str, Any] = {
            "name": name,
            "state": rs[0].avail,
            "time_limit": rs[0].time_limit,
            "nodes": str(sum(r.nodes or 0 for r in rs)),
            "arch": None,
            "gres": None,
            "gpus_per_node": None,
            "requires_gres": False,
            "cpus_per_node": None,
            "mem_per_node_mb": None,
        }
        if name in probed:
            gres = parse.pick_gres([r.gres for r in rs])
            part["gres"] = gres
            part["gpus_per_node"] = parse.gpu_count(gres)
            part["requires_gres"] = part["gpus_per_node"] is not None
            mine = in_partition.get(name, [])
            arches = [
                n["Arch"]
                for n in mine
                if n.get("Arch") not in (None, "", "(null)") and _ARCH.fullmatch(n["Arch"])
            ]
            part["arch"] = arches[0] if arches else None
            # a GPU job's share is of the nodes with GPUs
            gpu = [n for n in mine if "gpu" in n.get("Gres", "")]
            part["cpus_per_node"], part["mem_per_node_mb"] = parse.node_size(gpu or mine)
            if not arches:
                errors.append(f"partition {name}: could not determine Arch")
        env["partitions"].append(part)

    # MPI plugins
    mpi = runner(["srun", "--mpi=list"])
    if not mpi.found:
        errors.append("srun not found; cannot list MPI plugins")
    else:
        available = parse.pmix_plugins(parse.parse_mpi_list(mpi.text))
        available = [a for a in available if _name_ok(a, "MPI plugin", errors)]
        env["pmix"] = {"available": available, "preferred": parse.preferred_pmix(available)}
        if mpi.rc != 0 and not available:
            errors.append(f"srun --mpi=list failed: {first_line(mpi)}")
        elif not available:
            errors.append("no pmix MPI plugin reported by srun --mpi=list")

    # the cluster's name (submit.py picks network settings by it) and Slurm release (what
    # its sbatch reads; decision slurm-version-cluster-name)
    config = runner(["scontrol", "show", "config"])
    if config.rc == 0:
        said = parse.parse_config(config.out)
        cluster, version = said.get("ClusterName"), said.get("SLURM_VERSION")
        if cluster and _name_ok(cluster, "cluster name", errors):
            env["cluster_name"] = cluster
        if version and SLURM_VERSION.fullmatch(version):
            env["slurm_version"] = version
        # submit cuts a bigger batch into arrays of this many jobs (decision max-array-size)
        env["max_array_size"] = parse.max_array_size(said)
    else:
        errors.append(f"scontrol show config failed: {first_line(config)}")

    # default partition: the best-ranked one this user may really submit to
    if probed:
        env["default_partition"] = choose_default(
            probed, by_name, env["default_account"], runner, errors
        )

    if partitions is None and not up and by_name:
        errors.append("no partition is up")
    # the tools' own words (a remote host's stderr among them) are kept escaped, one line each
    env["errors"] = [values.printable(e) for e in errors]
    _validate(env)
    return env, EXIT_PARTIAL if errors else EXIT_CLEAN


def choose_default(
    probed: list[str],
    rows: dict[str, list[parse.SinfoRow]],
    account: str | None,
    runner: Runner,
    errors: list[str],
) -> str:
    refusals: list[str] = []
    order = {name: i for i, name in enumerate(rows)}

    def preference(n: str) -> tuple[int, bool, int]:
        return parse.partition_score(n), not rows[n][0].default, order[n]

    # the best first, up to the first the account may use: one sbatch per partition was 300
    # round trips to slurmctld on a big cluster
    for name in sorted(probed, key=preference):
        argv = ["sbatch", "--test-only", f"--partition={name}"]
        if account:
            argv.append(f"--account={account}")
        argv += ["--nodes=1", "--ntasks=1", "--time=00:01:00", "--wrap=true"]
        result = runner(argv)
        if result.rc == 0:
            return name
        reason = "; ".join(ln.strip() for ln in result.text.splitlines() if ln.strip())
        refusals.append(f"{name}: {reason or f'exit status {result.rc}'}")
    errors.append(f"{FALLBACK_ERROR} ({' | '.join(refusals)})")
    return probed[0]


def _name_ok(name: str, what: str, errors: list[str]) -> bool:
    """A name the cluster listed that the cluster file can carry (the file is read back
    through the validation layer, decision shown-never-obeyed); else an error line and False."""
    if values.SLURM_NAME.fullmatch(name) and values.text_problem(name) is None:
        return True
    errors.append(f"{what} {values.shown(name)} left out: it {NOT_A_NAME}")
    return False


def _valid_rows(rows: list[parse.SinfoRow], errors: list[str]) -> list[parse.SinfoRow]:
    """sinfo's rows whose partition name and fields a script can carry; the others are left
    out with an error line each, so a hostile cluster cannot write a file the build refuses,
    nor escape sequences into the table probe prints."""
    kept = []
    for row in rows:
        if not _name_ok(row.partition, "partition", errors):
            continue
        bad = next(
            (v for v in (row.avail, row.time_limit, row.gres) if values.text_problem(v)), None
        )
        if bad is not None:
            problem = values.text_problem(bad)
            errors.append(f"partition {row.partition} left out: {values.shown(bad)} {problem}")
            continue
        kept.append(row)
    return kept


def _validate(env: dict[str, Any]) -> None:
    """The output must be a valid SlurmEnv; imported here to keep `import probe` light."""
    from trtllm_script_builder.model.slurm_env import SlurmEnv

    SlurmEnv.model_validate(env)
