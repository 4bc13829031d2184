"""probe() and check() against canned tool output (no cluster needed)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.jobspec import JobSpec, SlurmParams
from trtllm_script_builder.model.slurm_env import NO_SLURM_TOOLS, SlurmEnv
from trtllm_script_builder.process.check import check
from trtllm_script_builder.process.probe import probe, render_text
from trtllm_script_builder.process.probe.collect import FALLBACK_ERROR
from trtllm_script_builder.process.proc import NOT_FOUND, CmdResult

SINFO = (
    "batch*|up|4:00:00|3|gpu:h100:8(S:0-1)\n"
    "batch*|up|4:00:00|1|(null)\n"
    "batch-hp|up|4:00:00|4|gpu:h100:8(S:0-1)\n"
    "arm|up|2:00:00|2|gpu:4\n"
    "dead|down|1:00:00|1|(null)\n"
)
NODES = (
    "NodeName=h1 CoresPerSocket=56 CPUTot=112 CPUEfctv=108 RealMemory=2000000 "
    "Gres=gpu:h100:8(S:0-1) Arch=x86_64 State=IDLE Partitions=batch,batch-hp\n"
    "NodeName=c1 Arch=x86_64 CoresPerSocket=8 CPUTot=16 RealMemory=64000 Gres=(null) "
    "State=IDLE Partitions=batch\n"
    "NodeName=g1 Arch=aarch64 Gres=gpu:4 State=IDLE Partitions=arm\n"
)
PARTITIONS = (
    "PartitionName=batch AllowAccounts=ALL Default=YES MaxTime=04:00:00 Nodes=h1,c1 State=UP "
    "TotalNodes=4\n"
    "PartitionName=arm AllowAccounts=ALL Default=NO MaxTime=02:00:00 Nodes=g1 State=UP "
    "TotalNodes=2\n"
    "PartitionName=dead AllowAccounts=ALL Default=NO MaxTime=01:00:00 Nodes=c2 State=DOWN "
    "TotalNodes=1\n"
)
MPI = (
    "MPI plugin types are...\n\tnone\n\tpmix\n"
    "specific pmix plugin versions available: pmix_v4,pmix_v5\n"
)
CONFIG = (
    "AccountingStorageEnforce = associations,limits,qos\nClusterName             = tsb\n"
    "SLURM_VERSION           = 22.05.8\nMaxArraySize            = 1001\n"
)
ASSOC = "prj|prj|\nprj|other|arm\n"


class Fake:
    """A host that answers by the first argv words and records every call; a shell line is
    split into words, with a file given on stdin shown as its path (`sbatch --test-only /w/x`)."""

    name = "fake"
    remote = False
    ssh_host = None

    def __init__(self, answers: dict[str, CmdResult | Callable[[list[str]], CmdResult]]):
        self.answers = answers
        self.calls: list[list[str]] = []

    def check(self) -> CmdResult:
        return CmdResult(0, "/w\n/home/alice\nalice\n")

    def shell(self, line: str, input: bytes | Path | None = None, **_: object) -> CmdResult:
        return self(shlex.split(line) + ([str(input)] if isinstance(input, Path) else []))

    def __call__(self, argv: Sequence[str], cwd: Path | None = None, **_: object) -> CmdResult:
        args = list(argv)
        self.calls.append(args)
        line = " ".join(args)
        for key in sorted(self.answers, key=len, reverse=True):
            if line.startswith(key):
                answer = self.answers[key]
                return answer(args) if callable(answer) else answer
        return CmdResult(NOT_FOUND, "", f"{args[0]}: command not found")


def answer_test_only(argv: list[str]) -> CmdResult:
    if "--partition=batch" in argv:
        return CmdResult(0, "", "sbatch: Job 9 to start at 2026-01-01T00:00:00 using 1 processors")
    return CmdResult(1, "", "allocation failure: Invalid account or account/partition combination")


def cluster(**changes: CmdResult | Callable[[list[str]], CmdResult]) -> Fake:
    answers: dict[str, CmdResult | Callable[[list[str]], CmdResult]] = {
        "sinfo": CmdResult(0, SINFO),
        "sacctmgr": CmdResult(0, ASSOC),
        "scontrol show node": CmdResult(0, NODES),
        "scontrol show partition": CmdResult(0, PARTITIONS),
        "scontrol show config": CmdResult(0, CONFIG),
        "srun --mpi=list": CmdResult(0, MPI),
        "sbatch --test-only --partition": answer_test_only,
        "sbatch --test-only /": CmdResult(0, "", "sbatch: Job 10 to start at 2026-01-01"),
    }
    answers.update({k.replace("_", " "): v for k, v in changes.items()})
    return Fake(answers)


def test_probe_full() -> None:
    fake = cluster()
    env, rc = probe(host=fake, user="alice")
    SlurmEnv.model_validate(env)
    assert (rc, env["errors"]) == (0, [])  # a down partition and a refused one are no errors
    assert env["user"] == "alice"
    assert env["default_account"] == "prj"
    assert env["accounts"] == ["prj", "other"]
    parts = {p["name"]: p for p in env["partitions"]}
    assert list(parts) == ["batch", "batch-hp", "arm", "dead"]
    assert parts["batch"] == {
        "name": "batch",
        "state": "up",
        "time_limit": "4:00:00",
        "nodes": "4",
        "arch": "x86_64",
        "gres": "gpu:h100:8(S:0-1)",
        "gpus_per_node": 8,
        "requires_gres": True,
        # the GPU node's, not the CPU node's of the same partition (decision gpu-cpu-share)
        "cpus_per_node": 108,
        "mem_per_node_mb": 2000000,
    }
    assert parts["arm"]["arch"] == "aarch64" and parts["arm"]["gpus_per_node"] == 4
    assert (parts["arm"]["cpus_per_node"], parts["arm"]["mem_per_node_mb"]) == (None, None)
    assert parts["dead"]["arch"] is None and parts["dead"]["requires_gres"] is False
    assert env["pmix"] == {"available": ["pmix", "pmix_v4", "pmix_v5"], "preferred": "pmix_v5"}
    assert env["default_partition"] == "batch"  # batch-hp scores worse, arm is refused
    assert env["max_array_size"] == 1001  # submit cuts a bigger batch (decision max-array-size)
    # what submit.py and sbatch need to know (decision slurm-version-cluster-name)
    assert (env["cluster_name"], env["slurm_version"]) == ("tsb", "22.05.8")


def test_probe_config_unreadable_or_hostile() -> None:
    """No config: no name, no version, one error; a name that is not a Slurm name is left out."""
    env, rc = probe(host=cluster(scontrol_show_config=CmdResult(1, "", "down")), user="alice")
    assert "cluster_name" not in env and "slurm_version" not in env and rc == 2
    assert any("scontrol show config failed: down" in e for e in env["errors"])
    odd = CmdResult(0, "ClusterName = a;rm -rf\nSLURM_VERSION = $(x)\n")
    env, _ = probe(host=cluster(scontrol_show_config=odd), user="alice")
    assert "cluster_name" not in env and "slurm_version" not in env


def test_probe_runs_each_tool_once() -> None:
    fake = cluster()
    probe(host=fake, user="alice")
    tools = [" ".join(c[:3]) for c in fake.calls if c[0] != "sbatch"]
    assert sorted(tools) == sorted(
        [
            "sinfo -h -o",
            "sacctmgr -nP show",
            "scontrol show node",
            "scontrol show config",
            "srun --mpi=list",
        ]
    )
    # the preferred partition first, the others only when it is refused (a big cluster has
    # hundreds): this one takes the first
    assert sum(c[0] == "sbatch" for c in fake.calls) == 1


def test_probe_clean_exit_zero() -> None:
    fake = cluster(sinfo=CmdResult(0, "gpu*|up|4:00:00|1|gpu:8\n"))
    fake.answers["scontrol show node"] = CmdResult(
        0, "NodeName=n1 Arch=x86_64 Gres=gpu:8 Partitions=gpu\n"
    )
    fake.answers["sbatch --test-only --partition"] = CmdResult(0, "", "sbatch: Job 1 to start")
    env, rc = probe(host=fake, user="alice")
    assert (rc, env["errors"], env["default_partition"]) == (0, [], "gpu")


def test_probe_no_tools() -> None:
    env, rc = probe(host=Fake({}), user="bob")
    assert rc == 1
    assert env["errors"] == [NO_SLURM_TOOLS]
    assert SlurmEnv.model_validate(env).tools_missing


def test_probe_partition_filter_and_fallback() -> None:
    fake = cluster()
    fake.answers["sbatch --test-only --partition"] = CmdResult(
        1, "", "allocation failure: Invalid account or account/partition combination specified"
    )
    env, rc = probe(["arm", "nope", "dead"], host=fake, user="alice")
    assert rc == 2
    assert env["default_partition"] == "arm"
    parts = {p["name"]: p for p in env["partitions"]}
    assert parts["batch"]["gres"] is None  # not probed
    assert parts["arm"]["gres"] == "gpu:4"
    assert any(e.startswith("partition nope: not found") for e in env["errors"])
    assert "partition dead: state is down, not up" in env["errors"]
    assert any(e.startswith(FALLBACK_ERROR) and "Invalid account" in e for e in env["errors"])


def test_probe_without_accounting() -> None:
    fake = cluster(
        sacctmgr=CmdResult(1, "", "sacctmgr: error: Slurm accounting storage is disabled")
    )
    env, rc = probe(host=fake, user="alice")
    assert rc == 2
    assert env["accounts"] == [] and env["default_account"] is None
    assert "sacctmgr failed: sacctmgr: error: Slurm accounting storage is disabled" in env["errors"]
    assert "no SLURM account associations for user alice" in env["errors"]


def test_render_text() -> None:
    env, _ = probe(host=cluster(), user="alice")
    text = render_text(env)
    assert "NAME" in text and "GPUS_PER_NODE" in text
    row = next(line for line in text.splitlines() if line.startswith("batch "))
    assert row.split() == ["batch", "up", "4:00:00", "4", "x86_64", "gpu:h100:8(S:0-1)", "8", "yes"]
    assert "default partition: batch" in text


# ---------------------------------------------------------------- check


def job(tmp_path: Path, **params: object) -> Path:
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\n#SBATCH --partition=batch\nsrun true\n")
    slurm_params: dict[str, object] = {
        "partition": "batch",
        "account": "prj",
        "time_limit": "02:00:00",
        "nodes": 1,
        "ntasks": 8,
        "ntasks_per_node": 8,
        "gpus_per_node": 8,
        "gres": "gpu:8",
        "mpi_plugin": "pmix_v5",
    }
    slurm_params.update(params)
    write_spec(tmp_path, script, "local_slurm", slurm_params)
    return tmp_path


def write_spec(
    work: Path, script: Path, scenario: str, slurm_params: dict[str, object] | None
) -> None:
    """A job_spec.json as `build` writes it (check reads it with the JobSpec model)."""
    spec = JobSpec(
        workflow_type="custom",
        category=1,
        model_name="tiny",
        execution_scenario=scenario,
        container_image="nvcr.io/test/trtllm:1",
        docker_image="nvcr.io/test/trtllm:1",
        script_path=str(script),
        script_name=script.name,
        success_patterns=[],
        failure_patterns=[],
        required_devices=8,
        node_count=1,
        slurm_params=SlurmParams(**slurm_params) if slurm_params else None,  # type: ignore[arg-type]
        work_dir=str(work),
        repo_root=str(work),
    )
    (work / "job_spec.json").write_text(spec.to_json())


def test_check_ok(tmp_path: Path) -> None:
    assert check(job(tmp_path), host=cluster(), user="alice") == ([], 0)


def test_check_reports_everything_at_once(tmp_path: Path) -> None:
    fake = cluster()
    fake.answers["sbatch --test-only /"] = CmdResult(
        1, "", "allocation failure: Requested time limit is invalid (missing or exceeds some limit)"
    )
    work = job(
        tmp_path, account="other", time_limit="05:00:00", gres="gpu:a100:8", mpi_plugin="pmix_v3"
    )
    problems, rc = check(work, host=fake, user="alice")
    assert rc == 1
    assert problems[0] == (
        "sbatch --test-only: allocation failure: Requested time limit is invalid "
        "(missing or exceeds some limit)"
    )
    text = "\n".join(problems)
    assert "account other for partition batch" in text
    assert "05:00:00 exceeds the MaxTime 04:00:00 of partition batch" in text
    assert "have no gpu:a100 GRES" in text
    assert "pmix_v3 is not an MPI plugin" in text
    assert len(problems) == 5


def test_check_gres_too_many_and_no_gres_partition(tmp_path: Path) -> None:
    problems, rc = check(job(tmp_path, gres="gpu:16"), host=cluster(), user="alice")
    assert rc == 1 and "asks for 16 gpu per node" in problems[0] and "have 8" in problems[0]
    work = job(tmp_path, partition="dead", gres="gpu:1", time_limit="30")
    problems, _ = check(work, host=cluster(), user="alice")
    assert any("dead is DOWN" in p for p in problems)
    assert any("have no gpu GRES" in p for p in problems)


def test_check_nodes_and_bad_time(tmp_path: Path) -> None:
    problems, _ = check(job(tmp_path, nodes=5, time_limit="soon"), host=cluster(), user="a")
    assert "slurm_params.nodes: 5 nodes, partition batch has 4" in problems
    assert "slurm_params.time_limit: soon is not a Slurm time (e.g. 02:00:00)" in problems


def test_check_unknown_partition(tmp_path: Path) -> None:
    fake = cluster()
    fake.answers["sbatch --test-only /"] = CmdResult(
        1,
        "",
        "sbatch: error: invalid partition specified: nope\n"
        "allocation failure: Invalid partition name specified\n",
    )
    problems, rc = check(job(tmp_path, partition="nope"), host=fake, user="alice")
    assert rc == 1
    assert problems[:2] == [
        "sbatch --test-only: sbatch: error: invalid partition specified: nope",
        "sbatch --test-only: allocation failure: Invalid partition name specified",
    ]
    expected = "nope does not exist on this cluster (partitions: batch, arm, dead)"
    assert any(expected in p for p in problems)


def test_check_accounts_ignored_when_not_enforced(tmp_path: Path) -> None:
    fake = cluster()
    fake.answers["scontrol show config"] = CmdResult(0, "AccountingStorageEnforce = none\n")
    assert check(job(tmp_path, account="whatever"), host=fake, user="alice") == ([], 0)


def test_check_missing_spec_and_script(tmp_path: Path) -> None:
    # Nothing built: the user's input, refused with exit 2 as submit and watch refuse it.
    with pytest.raises(BuildError, match="holds no job_spec.json") as err:
        check(tmp_path, host=cluster())
    assert err.value.exit_code == 2 and err.value.field == "work_dir"
    work = job(tmp_path)
    (work / "job.slurm").unlink()
    problems, rc = check(work, host=cluster(), user="alice")
    assert rc == 1 and problems[0].endswith("job.slurm does not exist")


def test_check_invalid_spec_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "job_spec.json").write_text('{"execution_scenario": "local_slurm"}')
    with pytest.raises(BuildError) as err:
        check(tmp_path, host=cluster())
    line = err.value.line()
    assert line.startswith(f"error: work_dir: {tmp_path / 'job_spec.json'}: ")
    assert line.endswith("; rebuild the job with this version")
    (tmp_path / "job_spec.json").write_text("{not json")
    with pytest.raises(BuildError) as err:
        check(tmp_path, host=cluster())
    assert err.value.line().startswith("error: work_dir: ") and "\n" not in err.value.line()


def test_check_docker_job_against_this_machine(tmp_path: Path) -> None:
    """Docker must answer and nvidia-smi (where there is one) list the job's GPUs."""
    write_spec(tmp_path, tmp_path / "docker_cmd.sh", "local_docker", None)
    eight = "".join(f"GPU {i}: H100 (UUID: GPU-{i})\n" for i in range(8))
    ok = {"docker version": CmdResult(0, "27.0.1\n"), "nvidia-smi -L": CmdResult(0, eight)}
    assert check(tmp_path, host=Fake(ok)) == ([], 0)
    assert check(tmp_path, host=Fake({"docker version": CmdResult(0, "27\n")})) == ([], 0)
    problems, rc = check(tmp_path, host=Fake({}))
    assert rc == 1 and problems == [
        "docker: not found on this machine; install Docker or use a Slurm scenario"
    ]
    down = CmdResult(1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
    two = CmdResult(0, "GPU 0: A\nGPU 1: B\n")
    problems, rc = check(tmp_path, host=Fake({"docker version": down, "nvidia-smi -L": two}))
    assert rc == 1 and problems[0].startswith("docker: the engine does not answer (Cannot connect")
    assert problems[1] == "nvidia-smi lists 2 GPU(s); the job needs 8"


def test_check_without_tools(tmp_path: Path) -> None:
    problems, rc = check(job(tmp_path), host=Fake({}), user="alice")
    assert rc == 1 and "SLURM client tools not found" in problems[0]


@pytest.mark.parametrize("gres", ["--gres=gpu:8", "gpu:h100:8", None, ""])
def test_check_gres_spellings(tmp_path: Path, gres: str | None) -> None:
    assert check(job(tmp_path, gres=gres), host=cluster(), user="alice") == ([], 0)


def test_check_no_gres_line_on_a_partition_without_gpus(tmp_path: Path) -> None:
    # the builder keeps gpus_per_node (from the request) but writes no --gres line
    work = job(tmp_path, partition="dead", gres=None, gpus_per_node=8, time_limit="10")
    problems, _ = check(work, host=cluster(), user="alice")
    assert problems == ["slurm_params.partition: dead is DOWN, jobs will not start"]
