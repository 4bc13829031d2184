"""Pure parsers for what Slurm's tools print (no processes, no I/O)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from trtllm_script_builder.model.values import whole_number

NULL_GRES = "(null)"


# ---------------------------------------------------------------- sacctmgr


@dataclass(frozen=True)
class Assoc:
    account: str
    partition: str | None  # None: every partition


def parse_user_assocs(text: str) -> tuple[str | None, list[Assoc]]:
    """`sacctmgr -nP show user U withassoc format=defaultaccount,account,partition`.

    Returns the default account and the associations, in sacctmgr's order, without repeats.
    Also reads plain `show assoc format=account[,partition]` output (no default column):
    a line with one or two fields is taken as account[|partition].
    """
    default: str | None = None
    assocs: list[Assoc] = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.strip().split("|")]
        if not any(fields):
            continue
        if len(fields) >= 3:
            default = default or fields[0] or None
            account, partition = fields[1], fields[2]
        else:
            account, partition = fields[0], (fields[1] if len(fields) > 1 else "")
        if not account:
            continue
        assoc = Assoc(account, partition or None)
        if assoc not in assocs:
            assocs.append(assoc)
    return default, assocs


def unique_accounts(assocs: list[Assoc]) -> list[str]:
    return list(dict.fromkeys(a.account for a in assocs))


def account_allows(assocs: list[Assoc], account: str, partition: str | None) -> bool:
    """True when an association lets `account` run in `partition` (None: any partition)."""
    return any(
        a.account == account
        and (a.partition is None or partition is None or a.partition == partition)
        for a in assocs
    )


# ---------------------------------------------------------------- sinfo


@dataclass(frozen=True)
class SinfoRow:
    partition: str
    default: bool  # sinfo's trailing '*'
    avail: str
    time_limit: str
    nodes: int | None
    gres: str


def parse_sinfo(text: str) -> list[SinfoRow]:
    """`sinfo -h -o '%P|%a|%l|%D|%G'`: one row per partition and node group."""
    rows: list[SinfoRow] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split("|")]
        fields += [""] * (5 - len(fields))
        name, avail, limit, count, gres = fields[:5]
        is_default = name.endswith("*")
        name = name.rstrip("*")
        if not name:
            continue
        rows.append(
            SinfoRow(
                partition=name,
                default=is_default,
                avail=avail.lower(),
                time_limit=limit,
                nodes=whole_number(count),
                gres=gres or NULL_GRES,
            )
        )
    return rows


# ---------------------------------------------------------------- scontrol

_KEY = re.compile(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_.:/]*)=")


def parse_kv(text: str) -> dict[str, str]:
    """One scontrol record (`Key=Value Key=Value ...`); values may hold spaces (OS=Linux 6.1 #1)."""
    matches = list(_KEY.finditer(text))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        out.setdefault(m.group(1), text[m.end() : end].strip())
    return out


def parse_scontrol_records(text: str) -> list[dict[str, str]]:
    """`scontrol show node|partition` with or without -o.

    With -o every line is a record; without it a record starts on an unindented line and
    goes on over indented lines, and records are separated by blank lines.
    """
    records: list[list[str]] = []
    for line in text.splitlines():
        if not line.strip():
            records.append([])
        elif line[:1].isspace() and records and records[-1]:
            records[-1].append(line.strip())
        else:
            records.append([line.strip()])
    return [parse_kv(" ".join(r)) for r in records if r]


def node_partitions(node: dict[str, str]) -> list[str]:
    parts = node.get("Partitions", "")
    return [p for p in parts.split(",") if p and p != "(null)"]


def node_size(nodes: list[dict[str, str]]) -> tuple[int | None, int | None]:
    """The smallest node's CPUs (`CPUEfctv`, the CPUs left to jobs, else `CPUTot`) and
    `RealMemory` (MiB): a share of it fits on any node of the partition."""

    def least(keys: tuple[str, ...]) -> int | None:
        found = []
        for n in nodes:  # an ASCII number of a sane length: `²` and 5,000 digits are none
            value = next((v for k in keys if (v := whole_number(n.get(k))) is not None), None)
            if value is not None and value > 0:
                found.append(value)
        return min(found) if found else None

    return least(("CPUEfctv", "CPUTot")), least(("RealMemory",))


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config`: `Key = Value` lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def max_array_size(config: dict[str, str]) -> int | None:
    """`MaxArraySize` of `scontrol show config`: an array's indexes must stay below it (0: no
    arrays at all)."""
    value = config.get("MaxArraySize", "")
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else None


# ---------------------------------------------------------------- GRES


@dataclass(frozen=True)
class Gres:
    name: str
    type: str | None
    count: int | None


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside parentheses: `gpu:4(IDX:0,2),nic:1` -> two items."""
    items: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == sep and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


def parse_gres(text: str | None) -> list[Gres]:
    """`gpu:8`, `gpu:a100:8(S:0-1)`, `gpu:no_consume:4`, `gpu:a100:4,nic:1`, `(null)`."""
    if not text or text.strip() in ("", NULL_GRES, "N/A"):
        return []
    out: list[Gres] = []
    for item in split_top_level(text):
        # `(S:0-1)` is cut without a pattern (decision linear-log-patterns)
        if item.endswith(")") and "(" in item:
            item = item[: item.index("(")].strip()
        parts = [p for p in item.split(":") if p]
        if not parts:
            continue
        name, rest = parts[0], parts[1:]
        count: int | None = None
        if rest and whole_number(rest[-1]) is not None:
            count = whole_number(rest.pop())
        elif not rest:
            count = 1  # a bare name counts one
        rest = [r for r in rest if r != "no_consume"]
        out.append(Gres(name, rest[0] if rest else None, count))
    return out


def gpu_count(gres: str | None) -> int | None:
    """GPUs in a GRES string (all gpu entries added up), None when it has no gpu entry."""
    gpus = [g for g in parse_gres(gres) if g.name == "gpu"]
    if not gpus:
        return None
    return sum(g.count or 0 for g in gpus)


def pick_gres(values: list[str]) -> str:
    """The GRES to report for a partition: the first with a gpu entry, else the first."""
    for value in values:
        if gpu_count(value) is not None:
            return value
    return values[0] if values else NULL_GRES


# ---------------------------------------------------------------- srun --mpi=list

_PMIX = re.compile(r"pmix(_v[0-9]{1,9})?")  # int() takes it


def parse_mpi_list(text: str) -> list[str]:
    """Every MPI plugin name in `srun --mpi=list` output, in order, without repeats.

    Handles 22.05+ (`MPI plugin types are...` + tab-indented names + `specific pmix plugin
    versions available: pmix_v4,pmix_v5`) and older (`srun: mpi/pmix_v3`) formats.
    """
    names: list[str] = []
    for line in text.splitlines():
        line = re.sub(r"^\s*srun:\s*", "", line).strip()
        if not line or line.lower().startswith("mpi ") or "types are" in line:
            continue
        head, colon, tail = line.partition(":")
        if colon and "available" in head:  # "specific ... versions available: pmix_v4,pmix_v5"
            line = tail
        elif colon or " " in line:  # "error: ...", prose: not plugin names
            continue
        for token in re.split(r"[,\s]+", line):
            token = token.strip().lstrip("-")
            token = token.removeprefix("mpi/")
            if token and re.fullmatch(r"[A-Za-z0-9_]+", token) and token not in names:
                names.append(token)
    return names


def pmix_plugins(names: list[str]) -> list[str]:
    return [n for n in names if _PMIX.fullmatch(n)]


def preferred_pmix(available: list[str]) -> str | None:
    """The highest `pmix_vN`, else bare `pmix`, else None."""
    versioned = [(int(n[6:]), n) for n in available if _PMIX.fullmatch(n) and n != "pmix"]
    if versioned:
        return max(versioned)[1]
    return "pmix" if "pmix" in available else None


# ---------------------------------------------------------------- partitions and time


def partition_score(name: str) -> int:
    """Lower is better when choosing a default: plain 1, *-backfill 2, *-hp / *-admin 3."""
    if name.endswith(("-hp", "-admin")):
        return 3
    if name.endswith("-backfill"):
        return 2
    return 1
