"""probe, check and the fake pyxis plugin against the live test cluster (cluster.sh up)."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from trtllm_script_builder.cli.check import command as check_command
from trtllm_script_builder.cli.probe import command as probe_command
from trtllm_script_builder.model.jobspec import JobSpec, SlurmParams
from trtllm_script_builder.model.slurm_env import SlurmEnv
from trtllm_script_builder.process.check import check
from trtllm_script_builder.process.probe import probe, render_text

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


# ---------------------------------------------------------------- probe


def test_probe_matches_the_cluster(slurm_cluster: SlurmCluster) -> None:
    env, rc = probe()
    SlurmEnv.model_validate(env)
    assert (rc, env["errors"]) == (0, [])

    rows = [line.split("|") for line in sh("sinfo", "-h", "-o", "%P|%a|%l|%D|%G").splitlines()]
    parts = {p["name"]: p for p in env["partitions"]}
    assert list(parts) == [r[0].rstrip("*") for r in rows]
    for name, avail, limit, count, gres in rows:
        part = parts[name.rstrip("*")]
        assert (part["state"], part["time_limit"], part["nodes"], part["gres"]) == (
            avail,
            limit,
            count,
            gres,
        )

    nodes = {}
    for line in sh("scontrol", "show", "node", "-o").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        nodes[fields["Partitions"]] = fields
    gpu, cpu = parts[slurm_cluster.gpu_partition], parts[slurm_cluster.cpu_partition]
    assert gpu["arch"] == nodes["gpu"]["Arch"] == platform.machine()
    assert (gpu["gpus_per_node"], gpu["requires_gres"]) == (8, True)
    assert nodes["gpu"]["Gres"] == "gpu:8"
    assert (cpu["gres"], cpu["gpus_per_node"], cpu["requires_gres"]) == ("(null)", None, False)

    default = sh("sacctmgr", "-nP", "show", "user", "root", "format=defaultaccount").strip()
    assert env["default_account"] == default == slurm_cluster.account
    assert {slurm_cluster.account, slurm_cluster.other_account} <= set(env["accounts"])
    assert env["default_partition"] == slurm_cluster.gpu_partition

    mpi = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True).stdout
    assert env["pmix"]["preferred"] in mpi
    assert env["pmix"]["preferred"].startswith("pmix_v")
    assert "pmix" in env["pmix"]["available"]


def test_probe_command_text_and_file(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(probe_command, ["--format", "text", "--partitions", "cpu"])
    assert res.exit_code == 0, res.output
    assert "default partition: cpu" in res.stdout
    out = tmp_path / "slurm_env.json"
    res = runner.invoke(probe_command, ["--output", str(out)])
    assert res.exit_code == 0, res.output
    env = SlurmEnv.model_validate_json(out.read_text())
    assert env.partition("gpu") is not None and env.partition("gpu").gpus_per_node == 8  # type: ignore[union-attr]
    assert render_text(json.loads(out.read_text())).count("\n") > 5


def test_probe_unknown_partition_exits_2(slurm_cluster: SlurmCluster) -> None:
    env, rc = probe(["gpu", "nope"])
    assert rc == 2
    assert env["errors"] == ["partition nope: not found (partitions: gpu, cpu)"]


# ---------------------------------------------------------------- check


def make_job(tmp_path: Path, **params: Any) -> Path:
    """A minimal job_spec.json + sbatch script, as the builder would write them."""
    p: dict[str, Any] = {
        "partition": "gpu",
        "account": "tsb",
        "time_limit": "00:10:00",
        "nodes": 1,
        "ntasks": 2,
        "ntasks_per_node": 2,
        "gpus_per_node": 2,
        "gres": "gpu:2",
        "mpi_plugin": "pmix",
    }
    p.update(params)
    lines = ["#!/bin/bash", "#SBATCH --job-name=tsb-check"]
    lines += [f"#SBATCH --{key}={p[key]}" for key in ("partition", "account", "nodes", "ntasks")]
    lines += [
        f"#SBATCH --ntasks-per-node={p['ntasks_per_node']}",
        f"#SBATCH --time={p['time_limit']}",
    ]
    if p["gres"]:
        lines.append(f"#SBATCH --gres={p['gres']}")
    lines.append(f"#SBATCH --output={tmp_path}/%x-%j.out")
    lines.append(f"srun --mpi={p['mpi_plugin']} true")
    script = tmp_path / "job.slurm"
    script.write_text("\n".join(lines) + "\n")
    spec = JobSpec(
        workflow_type="custom",
        category=1,
        model_name="tiny",
        execution_scenario="local_slurm",
        container_image="nvcr.io/test/trtllm:1",
        docker_image="nvcr.io/test/trtllm:1",
        script_path=str(script),
        script_name=script.name,
        success_patterns=[],
        failure_patterns=[],
        required_devices=p["gpus_per_node"] or 0,
        node_count=p["nodes"],
        slurm_params=SlurmParams(**{**p, "gpus_per_node": p["gpus_per_node"] or 0}),
        work_dir=str(tmp_path),
        repo_root=str(tmp_path),
    )
    (tmp_path / "job_spec.json").write_text(spec.to_json())
    return tmp_path


def test_check_accepts_a_good_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    assert check(make_job(tmp_path)) == ([], 0)
    assert check(make_job(tmp_path, partition="cpu", gres="", gpus_per_node=None)) == ([], 0)
    assert check(make_job(tmp_path, account="tsb2", time_limit="04:00:00")) == ([], 0)


@pytest.mark.parametrize(
    ("params", "cluster_says", "we_say"),
    [
        (
            {"partition": "nope"},
            "sbatch --test-only: sbatch: error: invalid partition specified: nope",
            "slurm_params.partition: nope does not exist",
        ),
        (
            {"account": "nope"},
            "Invalid account or account/partition combination specified",
            "user root has no association with account nope",
        ),
        (
            {"gres": "gpu:9", "gpus_per_node": 9},
            "Requested node configuration is not available",
            "asks for 9 gpu per node on 1 node(s); nodes of partition gpu have 8",
        ),
        (
            {"partition": "cpu", "gres": "gpu:1", "gpus_per_node": 1},
            "Requested node configuration is not available",
            "the nodes of partition cpu have no gpu GRES",
        ),
        (
            {"time_limit": "05:00:00"},
            "Requested time limit is invalid (missing or exceeds some limit)",
            "05:00:00 exceeds the MaxTime 04:00:00 of partition gpu",
        ),
        (
            {"partition": "cpu", "gres": "", "gpus_per_node": None, "time_limit": "01:30:00"},
            "Requested time limit is invalid",
            "01:30:00 exceeds the MaxTime 01:00:00 of partition cpu",
        ),
    ],
)
def test_check_refuses_with_the_clusters_reason(
    slurm_cluster: SlurmCluster,
    tmp_path: Path,
    params: dict[str, Any],
    cluster_says: str,
    we_say: str,
) -> None:
    problems, rc = check(make_job(tmp_path, **params))
    assert rc == 1
    assert any(p.startswith("sbatch --test-only: ") and cluster_says in p for p in problems), (
        problems
    )
    assert any(we_say in p for p in problems), problems


def test_check_also_checks_the_compile_and_import_jobs(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    work = make_job(tmp_path)
    good = tmp_path / "compile.slurm"
    good.write_text("#!/bin/bash\n#SBATCH --partition=gpu\n#SBATCH --account=tsb\n"
                    "#SBATCH --ntasks=1\n#SBATCH --exclusive\n#SBATCH --time=00:10:00\ntrue\n")  # fmt: skip
    bad = tmp_path / "import.slurm"
    bad.write_text(good.read_text().replace("--partition=gpu", "--partition=nope"))
    spec = json.loads((work / "job_spec.json").read_text())
    spec["prerequisites"] = [
        {"kind": "import", "key": "import:i", "script_name": bad.name, "script_path": str(bad)},
        {"kind": "compile", "key": "compile:c", "script_name": good.name, "script_path": str(good)},
    ]
    (work / "job_spec.json").write_text(json.dumps(spec))
    problems, rc = check(work)
    assert rc == 1 and problems, problems
    assert all(p.startswith("import.slurm: sbatch --test-only: ") for p in problems), problems
    assert any("invalid partition specified: nope" in p for p in problems), problems
    bad.write_text(good.read_text())
    assert check(work) == ([], 0)


def test_check_reports_all_problems_at_once(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    bad = {"account": "nope", "gres": "gpu:1", "time_limit": "02:00:00", "mpi_plugin": "pmix_v9"}
    work = make_job(tmp_path, partition="cpu", **bad)
    problems, rc = check(work)
    assert rc == 1
    text = "\n".join(problems)
    assert "sbatch --test-only: allocation failure:" in text
    for fragment in ("account nope", "no gpu GRES", "exceeds the MaxTime", "pmix_v9 is not"):
        assert fragment in text, text
    res = CliRunner().invoke(check_command, [str(work)])
    assert res.exit_code == 1
    assert res.stdout.count("problem: ") == len(problems)


# ---------------------------------------------------------------- fake pyxis plugin


def batch_script(tmp_path: Path, body: str, options: str = "") -> Path:
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{options}set -e\n{body}\n")
    return script


def records(path: Path, job_id: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in lines if str(r["job"]) == job_id]


def test_container_options_reach_the_task(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    script = batch_script(
        tmp_path,
        "srun --container-image=x --container-mounts=/tmp:/tmp --container-workdir=/tmp "
        "bash -c 'env; echo cwd=$(pwd)'",
    )
    job = slurm_cluster.run_job(script, env={"FAKE_PYXIS_RECORD": str(record)})
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.output
    assert "FAKE_PYXIS_IMAGE=x\n" in job.output
    assert "FAKE_PYXIS_MOUNTS=/tmp:/tmp\n" in job.output
    assert "FAKE_PYXIS_WORKDIR=/tmp\n" in job.output
    assert "cwd=/tmp\n" in job.output
    assert "FAKE_PYXIS_NAME" not in job.output
    (rec,) = records(record, job.job_id)
    assert rec["step"] == 0 and rec["rank"] == 0 and rec["node"] in slurm_cluster.gpu_nodes
    assert (rec["image"], rec["mounts"], rec["workdir"], rec["cwd"]) == (
        "x",
        "/tmp:/tmp",
        "/tmp",
        "/tmp",
    )
    assert rec["name"] is None


def test_every_option_is_recorded_per_task(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    record = tmp_path / "record.jsonl"
    script = batch_script(
        tmp_path,
        "srun --ntasks=2 --container-image=nvcr.io#nvidia/pytorch:24.01-py3 "
        "--container-name=tiny_eval --container-mounts=/tmp:/data:ro,/etc "
        f"--container-workdir={tmp_path} --container-env=HF_HOME,HOME --container-writable "
        "--no-container-mount-home true",
        options="#SBATCH --ntasks=2\n",
    )
    job = slurm_cluster.run_job(script, env={"FAKE_PYXIS_RECORD": str(record)})
    assert job.state == "COMPLETED", job.output
    recs = records(record, job.job_id)
    assert sorted(r["rank"] for r in recs) == [0, 1]
    assert recs[0]["node"] in slurm_cluster.gpu_nodes
    assert recs[0] | {"rank": 0, "node": "gpunode1"} == {
        "job": int(job.job_id),
        "step": 0,
        "rank": 0,
        "node": "gpunode1",
        "cwd": str(tmp_path),
        "image": "nvcr.io#nvidia/pytorch:24.01-py3",
        "mounts": "/tmp:/data:ro,/etc",
        "name": "tiny_eval",
        "workdir": str(tmp_path),
        "env": "HF_HOME,HOME",
        "writable": "1",
        "mount_home": "0",
        "container": f"pyxis_{job.job_id}_tiny_eval",  # pyxis's job-scoped name
        "reused": False,
    }


def _named_step(image: str | None) -> str:
    given = f"--container-image={image} " if image else ""
    return f"srun {given}--container-name=tsb_c bash -c 'echo image=$FAKE_PYXIS_IMAGE'"


def test_a_named_container_is_reused_without_importing_the_image(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """pyxis with container_scope=global keeps pyxis_<name> across jobs and runs a later job
    in it whatever image that job names (decision container-names); job scope does not."""
    record, store = tmp_path / "record.jsonl", tmp_path / "enroot"
    env = {"FAKE_PYXIS_RECORD": str(record), "ENROOT_DATA_PATH": str(store)}
    first = slurm_cluster.run_job(
        batch_script(tmp_path, _named_step("img_old")),
        env=env | {"FAKE_PYXIS_CONTAINER_SCOPE": "global"},
    )
    assert first.state == "COMPLETED", first.output
    if "container" not in records(record, first.job_id)[0]:
        pytest.skip("the cluster's fake pyxis predates named containers: cluster.sh up rebuilds it")
    later = slurm_cluster.run_job(
        batch_script(tmp_path, _named_step("img_new") + "; " + _named_step(None)),
        env=env | {"FAKE_PYXIS_CONTAINER_SCOPE": "global"},
    )
    assert later.state == "COMPLETED", later.output
    assert later.output.count("image=img_old\n") == 2, later.output
    assert [r["reused"] for r in records(record, later.job_id)] == [True, True]
    assert sorted(p.name for p in store.iterdir()) == ["pyxis_tsb_c"]
    scoped = slurm_cluster.run_job(batch_script(tmp_path, _named_step("img_new")), env=env)
    assert "image=img_new\n" in scoped.output
    (rec,) = records(record, scoped.job_id)
    assert (rec["container"], rec["reused"]) == (f"pyxis_{scoped.job_id}_tsb_c", False)
    missing = slurm_cluster.run_job(batch_script(tmp_path, _named_step(None)), env=env)
    assert missing.state == "FAILED" and "does not exist" in missing.output


def test_sbatch_accepts_container_options(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    script = batch_script(
        tmp_path, "echo batch=$FAKE_PYXIS_IMAGE", options="#SBATCH --container-image=img1\n"
    )
    job = slurm_cluster.run_job(script)
    assert job.state == "COMPLETED", job.output
    assert "batch=img1" in job.output


def test_missing_mount_source_fails_the_step(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    script = batch_script(
        tmp_path, "srun --container-image=x --container-mounts=/no/such/dir:/data echo ran"
    )
    job = slurm_cluster.run_job(script)
    assert job.state == "FAILED", job.output
    assert "ran" not in job.output.split()
    assert "mount source /no/such/dir does not exist" in job.output


def test_missing_workdir_and_unrewritten_image_fail(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    script = batch_script(
        tmp_path,
        "srun --container-image=x --container-workdir=/no/such/dir true || echo workdir-failed\n"
        "srun --container-image=nvcr.io/nvidia/pytorch:24.01-py3 true || echo image-failed",
    )
    job = slurm_cluster.run_job(script)
    assert job.state == "COMPLETED", job.output
    assert "workdir-failed" in job.output and "image-failed" in job.output
    assert "couldn't chdir to /no/such/dir" in job.output
    assert "enroot needs REGISTRY#IMAGE, e.g. nvcr.io#nvidia/pytorch:24.01-py3" in job.output


def test_pmix_runs_eight_ranks_on_the_gpu_node(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """A fake GPU node takes 8 tasks (one per GPU), as 8-GPU jobs of the builder ask."""
    script = batch_script(
        tmp_path,
        "srun --mpi=pmix bash -c 'echo rank=$PMIX_RANK gpus=$CUDA_VISIBLE_DEVICES'",
        options="#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=8\n#SBATCH --gres=gpu:8\n",
    )
    job = slurm_cluster.run_job(script)
    assert job.state == "COMPLETED", job.output
    ranks = sorted(line for line in job.output.splitlines() if line.startswith("rank="))
    assert ranks == [f"rank={i} gpus=0,1,2,3,4,5,6,7" for i in range(8)]
