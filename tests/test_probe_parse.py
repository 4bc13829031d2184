"""The probe's pure parsers, fed with what the Slurm tools really print."""

from __future__ import annotations

import pytest

from trtllm_script_builder.process.probe import parse

# scontrol show node -o, Slurm 22.05 (the test cluster): Arch= is NOT at the start of a line
NODE_LINES = (
    "NodeName=cpunode Arch=x86_64 CoresPerSocket=4  CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=0.13 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=vm Port=6820 Version=22.05.8 OS=Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC "
    "@0  RealMemory=24105 AllocMem=0 FreeMem=23026 Sockets=1 Boards=1 State=IDLE "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=cpu  "
    "BootTime=2026-12-02T11:10:14 SlurmdStartTime=2026-12-02T11:23:05 "
    "CfgTRES=cpu=4,mem=24105M,billing=4 AllocTRES= CapWatts=n/a CurrentWatts=0\n"
    "NodeName=gb200-07 CoresPerSocket=72 CPUAlloc=0 CPUTot=144 Gres=gpu:gb200:4(S:0-1) "
    "NodeAddr=gb200-07 Arch=aarch64 Version=23.11.4 OS=Linux 6.8.0-1013-nvidia #14-Ubuntu "
    "SMP RealMemory=880000 State=MIXED Partitions=batch,batch-backfill "
    "CfgTRES=cpu=144,mem=880000M,billing=144,gres/gpu=4\n"
)

# scontrol show node (no -o): one record over several indented lines
NODE_MULTILINE = """\
NodeName=gpunode Arch=x86_64 CoresPerSocket=8$
   CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=0.16
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=gpu:8
   NodeAddr=127.0.0.1 NodeHostName=vm Version=22.05.8
   OS=Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0$
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu$

NodeName=arm01
   CoresPerSocket=64 CPUTot=64
   Arch=aarch64 Gres=(null)
   Partitions=cpu-arm$
""".replace("$", " ")  # scontrol leaves trailing blanks ($ here)


def test_scontrol_one_line_records_find_arch_anywhere() -> None:
    nodes = parse.parse_scontrol_records(NODE_LINES)
    assert [n["NodeName"] for n in nodes] == ["cpunode", "gb200-07"]
    assert nodes[0]["Arch"] == "x86_64"
    assert nodes[1]["Arch"] == "aarch64"  # in the middle of the line
    assert nodes[0]["OS"] == "Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0"
    assert nodes[0]["CfgTRES"] == "cpu=4,mem=24105M,billing=4"
    assert nodes[0]["AllocTRES"] == ""
    assert parse.node_partitions(nodes[1]) == ["batch", "batch-backfill"]


def test_scontrol_multiline_records() -> None:
    nodes = parse.parse_scontrol_records(NODE_MULTILINE)
    assert [(n["NodeName"], n["Arch"], n["Gres"]) for n in nodes] == [
        ("gpunode", "x86_64", "gpu:8"),
        ("arm01", "aarch64", "(null)"),  # Arch= on a continuation line
    ]
    assert parse.node_partitions(nodes[0]) == ["gpu"]


def test_scontrol_partition_line() -> None:
    line = (
        "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL "
        "Default=YES QoS=N/A DefaultTime=NONE MaxNodes=UNLIMITED MaxTime=04:00:00 MinNodes=0 "
        "Nodes=gpunode State=UP TotalCPUs=16 TotalNodes=1 JobDefaults=(null) "
        "TRES=cpu=16,mem=24105M,node=1,billing=16,gres/gpu=8"
    )
    (part,) = parse.parse_scontrol_records(line)
    assert part["MaxTime"] == "04:00:00"
    assert part["State"] == "UP"
    assert part["TRES"] == "cpu=16,mem=24105M,node=1,billing=16,gres/gpu=8"


def test_sinfo_rows_strip_default_mark_and_keep_rows() -> None:
    out = (
        "gpu*|up|4:00:00|1|gpu:8\n"
        "cpu|up|1:00:00|1|(null)\n"
        "batch|up|1-00:00:00|3|(null)\n"
        "batch|up|1-00:00:00|12|gpu:a100:8(S:0-1)\n"
        "old|down|infinite|2|\n"
    )
    rows = parse.parse_sinfo(out)
    assert [(r.partition, r.default, r.avail, r.nodes) for r in rows] == [
        ("gpu", True, "up", 1),
        ("cpu", False, "up", 1),
        ("batch", False, "up", 3),
        ("batch", False, "up", 12),
        ("old", False, "down", 2),
    ]
    assert rows[2].time_limit == "1-00:00:00"
    assert rows[4].gres == "(null)"


@pytest.mark.parametrize(
    ("gres", "count"),
    [
        ("gpu:8", 8),
        ("gpu:a100:8", 8),
        ("gpu:8(S:0-1)", 8),
        ("gpu:a100:4(S:0-1)", 4),
        ("gpu:4(IDX:0,2-3)", 4),  # a comma inside the parentheses
        ("gpu:a100:4,gpu:v100:2", 6),  # two typed entries on one node
        ("nic:1,gpu:h100:8(S:0-1),mps:400", 8),
        ("gpu:no_consume:4", 4),
        ("gpu", 1),
        ("(null)", None),
        ("", None),
        (None, None),
        ("mps:100,shard:8", None),
    ],
)
def test_gpu_count(gres: str | None, count: int | None) -> None:
    assert parse.gpu_count(gres) == count


def test_parse_gres_types() -> None:
    assert parse.parse_gres("gpu:a100:8(S:0-1),nic:1") == [
        parse.Gres("gpu", "a100", 8),
        parse.Gres("nic", None, 1),
    ]


def test_pick_gres_prefers_a_gpu_row() -> None:
    assert parse.pick_gres(["(null)", "gpu:a100:8(S:0-1)", "gpu:4"]) == "gpu:a100:8(S:0-1)"
    assert parse.pick_gres(["(null)", "nic:1"]) == "(null)"
    assert parse.pick_gres([]) == "(null)"


MPI_22_05 = """\
MPI plugin types are...
\tpmix
\tnone
\tcray_shasta
\tpmi2
specific pmix plugin versions available: pmix_v4
"""
MPI_23 = """\
MPI plugin types are...
\tcray_shasta
\tnone
\tpmi2
\tpmix
specific pmix plugin versions available: pmix_v4,pmix_v5
"""
MPI_OLD = """\
srun: MPI types are...
srun: none
srun: pmix_v3
srun: pmi2
srun: pmix
"""


@pytest.mark.parametrize(
    ("text", "available", "preferred"),
    [
        (MPI_22_05, ["pmix", "pmix_v4"], "pmix_v4"),
        (MPI_23, ["pmix", "pmix_v4", "pmix_v5"], "pmix_v5"),
        (MPI_OLD, ["pmix_v3", "pmix"], "pmix_v3"),
        ("MPI plugin types are...\n\tnone\n\tpmi2\n", [], None),
        ("MPI plugin types are...\n\tpmix\n\tnone\n", ["pmix"], "pmix"),
        ("srun: error: Invalid MPI type 'list'\n", [], None),
    ],
)
def test_mpi_list(text: str, available: list[str], preferred: str | None) -> None:
    found = parse.pmix_plugins(parse.parse_mpi_list(text))
    assert found == available
    assert parse.preferred_pmix(found) == preferred


def test_mpi_list_all_names() -> None:
    names = parse.parse_mpi_list(MPI_22_05)
    assert names == ["pmix", "none", "cray_shasta", "pmi2", "pmix_v4"]


def test_preferred_pmix_compares_numbers() -> None:
    assert parse.preferred_pmix(["pmix", "pmix_v9", "pmix_v10"]) == "pmix_v10"


def test_user_assocs_with_default_account() -> None:
    # sacctmgr -nP show user root withassoc format=defaultaccount,account,partition
    out = "tsb|tsb|\ntsb|tsb2|\ntsb|root|\ntsb|tsb2|gpu\n"
    default, assocs = parse.parse_user_assocs(out)
    assert default == "tsb"
    assert parse.unique_accounts(assocs) == ["tsb", "tsb2", "root"]
    assert parse.account_allows(assocs, "tsb", "cpu")
    assert parse.account_allows(assocs, "tsb2", "gpu")
    assert not parse.account_allows(assocs, "nope", None)


def test_user_assocs_partition_restricted() -> None:
    default, assocs = parse.parse_user_assocs("prj|prj|gpu\nprj|prj|gpu\n")
    assert default == "prj"
    assert assocs == [parse.Assoc("prj", "gpu")]
    assert parse.account_allows(assocs, "prj", "gpu")
    assert not parse.account_allows(assocs, "prj", "cpu")


def test_plain_assoc_output() -> None:
    # sacctmgr -nP show assoc where user=root format=account
    default, assocs = parse.parse_user_assocs(" tsb \ntsb2\n\ntsb\n")
    assert default is None
    assert parse.unique_accounts(assocs) == ["tsb", "tsb2"]


def test_config() -> None:
    out = (
        "Configuration data as of 2026-12-02T11:28:44\n"
        "AccountingStorageEnforce = associations,limits,qos\n"
        "AccountingStorageType   = accounting_storage/slurmdbd\n"
        "EnforcePartLimits       = ALL\n"
    )
    config = parse.parse_config(out)
    assert config["AccountingStorageEnforce"] == "associations,limits,qos"
    assert config["EnforcePartLimits"] == "ALL"


@pytest.mark.parametrize(
    ("name", "score"), [("gpu", 1), ("batch-backfill", 2), ("batch-hp", 3), ("admin-admin", 3)]
)
def test_partition_score(name: str, score: int) -> None:
    assert parse.partition_score(name) == score
