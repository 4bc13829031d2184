"""A pytest wider than one node runs as TensorRT-LLM's CI runs its multi-node stages
(decision multi-node-pytest): one job over the nodes, one MPI rank per GPU, pytest on rank 0
under the launcher; the launcher's MPI leader is stopped after pytest whatever its status
(decision launcher-stop).

The run step's payload is run here for real with bash, with stand-ins for what cannot run on
this machine (the launcher, pytest, python3's leader module) that record what they were given;
the live tests in tests/slurm/test_multi_node.py run it under real Slurm and OpenMPI.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from .conftest import Env
from .test_shell_safety import SETTINGS, Case, bits, build, check_script, run_recorded

TOO_BIG = "pytest accuracy/test_tiny.py::TestBig::test_too_big -v"  # skip_less_mpi_world_size(16)
CLASS_MARKED = "pytest accuracy/test_tiny.py::TestBig::test_class_marked"  # skip_less_device(8)


def built(env: Env, cli, **fields: Any) -> dict[str, Any]:
    r = cli([], env.request(**fields))
    assert r.code == 0, r.stderr
    spec: dict[str, Any] = json.loads((env.work / "job_spec.json").read_text())
    return spec


def run_step(script: str) -> str:
    """The last srun of the script: the run step."""
    return [ln for ln in script.splitlines() if ln.startswith("srun ")][-1]


def test_a_test_wider_than_a_node_spreads_over_nodes(env: Env, cli) -> None:
    spec = built(env, cli, test_cmd=TOO_BIG)
    params = spec["slurm_params"]
    assert (spec["required_devices"], spec["node_count"]) == (16, 2)
    assert (params["nodes"], params["ntasks"], params["ntasks_per_node"]) == (2, 16, 8)
    assert params["gres"] == "gpu:8"
    script = Path(spec["script_path"]).read_text()
    step = run_step(script)
    assert step.startswith("srun -l --nodes=2 --ntasks=16 --ntasks-per-node=8 --mpi=pmix_v5 ")
    assert '--container-workdir="$TEST_WORKDIR" --kill-on-bad-exit=1' in step
    # pytest reaches the launcher as words, and the MPI environment is left to the launcher
    assert "' bash pytest accuracy/test_tiny.py::TestBig::test_too_big -v || status=$?" in script
    assert "compgen -e" not in script.split("# Step 2:")[1].split("ci_launcher=")[0]
    assert spec["warnings"] == []  # the test id's [...] or :: is no warning


def test_nodes_of_four_gpus_as_ci_s_gb200_stages(env: Env, cli) -> None:
    """8 GPUs on nodes of 4: CI's `--nodes=2 --ntasks=8 --ntasks-per-node=4` shape; a test
    sized by skip_less_device gets told that the conftest counts one node's GPUs."""
    spec = built(env, cli, test_cmd=CLASS_MARKED, partition="gb")
    params = spec["slurm_params"]
    assert (params["nodes"], params["ntasks"], params["ntasks_per_node"]) == (2, 8, 4)
    assert params["gres"] == "gpu:4"
    (warning,) = [w for w in spec["warnings"] if "skip_less_device(8)" in w]
    assert "counts the GPUs of one node" in warning and "skip_less_mpi_world_size" in warning


def test_the_node_count_must_match(env: Env, cli) -> None:
    assert built(env, cli, test_cmd=TOO_BIG, node_count=2)["node_count"] == 2
    r = cli([], env.request(test_cmd=TOO_BIG, node_count=1))
    assert r.code == 2 and "error: node_count: 1 is too few" in r.stderr, r.stderr


def test_a_command_that_is_not_one_call_is_refused_across_nodes(env: Env, cli) -> None:
    r = cli([], env.request(test_cmd=f"cd . && {TOO_BIG}"))
    assert r.code == 2 and r.stderr.startswith("error: test_cmd: across nodes"), r.stderr
    assert not (env.work / "job_spec.json").exists()


STAND_INS = {
    # the installed launcher, rank 0: runs the joined, re-split words as the real one does
    "trtllm-llmapi-launch": '#!/bin/bash\necho "$*" >>"$REC/launch"\n$*\n',
    "pytest": '#!/bin/bash\nprintf "%s\\n" "$@" >"$REC/pytest.args"\nexit "${PYTEST_RC:-0}"\n',
    "python3": '#!/bin/bash\necho "$*" >>"$REC/python3"\n',
}


def run_payload(spec: dict[str, Any], rec: Path, pytest_rc: int, ci: bool = False) -> int:
    """Run step 2's payload as rank 0 would, with recording stand-ins first on PATH."""
    script = Path(spec["script_path"]).read_text()
    words = shlex.split(run_step(script) + "\n" + script.split(run_step(script), 1)[1])
    payload = words[words.index("-c") + 1]
    args = words[words.index("-c") + 2 : words.index("||")]
    bin_dir = rec / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in STAND_INS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    project = rec / "project"
    (project / "defs").mkdir(parents=True, exist_ok=True)
    if ci:  # CI's copy in the checkout: keeps the words, stops the leader itself
        launcher = project / "jenkins" / "scripts" / "trtllm-llmapi-launch"
        launcher.parent.mkdir(parents=True, exist_ok=True)
        launcher.write_text('printf "%s\\n" "$@" >"$REC/ci_launch"\n"$@"\n')
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "REC": str(rec),
        "PROJECT_PATH": str(project),
        "TEST_WORKDIR": str(project / "defs"),
        "JUNIT_FILE": str(rec / "report.xml"),
        "SLURM_LOCALID": "1",  # no nvidia-smi here
        "PYTEST_RC": str(pytest_rc),
        "HOME": str(rec),
    }
    done = subprocess.run(["bash", "-c", payload, *args], env=env, capture_output=True, text=True)
    return done.returncode


@pytest.mark.parametrize("rc", [0, 1, 5])
def test_the_leader_is_stopped_after_pytest_whatever_its_status(
    env: Env, cli, tmp_path: Path, rc: int
) -> None:
    """The installed launcher never stops its leader: the script's wrapper does, once, after
    pytest, and the step ends with pytest's status (decision launcher-stop)."""
    spec = built(env, cli, test_cmd=TOO_BIG)
    assert run_payload(spec, tmp_path, rc) == rc
    pytest_args = (tmp_path / "pytest.args").read_text().splitlines()
    assert pytest_args == [
        "accuracy/test_tiny.py::TestBig::test_too_big",
        "-v",
        f"--junitxml={tmp_path}/report.xml",
    ]
    assert (
        tmp_path / "python3"
    ).read_text() == "-m tensorrt_llm.llmapi.mgmn_leader_node --action stop\n"


def test_ci_s_launcher_gets_the_words_whole(env: Env, cli, tmp_path: Path) -> None:
    spec = built(env, cli, test_cmd=TOO_BIG)
    assert run_payload(spec, tmp_path, 3, ci=True) == 3
    assert (tmp_path / "ci_launch").read_text().splitlines() == [
        "pytest",
        "accuracy/test_tiny.py::TestBig::test_too_big",
        "-v",
        f"--junitxml={tmp_path}/report.xml",
    ]
    assert not (tmp_path / "launch").exists()


@SETTINGS
@given(value=bits)
def test_hostile_words_across_nodes(value: str) -> None:
    """Whatever follows the test id: refused naming test_cmd, or a script bash and shellcheck
    accept whose run step hands the launcher exactly the words of the command."""
    c = Case()
    try:
        value = value.replace("CANARY", str(c.canary))
        cmd = f"{TOO_BIG} {value}"
        repo, work = c.repo(), c.tmp / "work"
        code, err = build(c.request(repo, work, test_cmd=cmd), c.home)
        if code != 0:
            assert code == 2 and err.startswith(
                ("error: test_cmd: ", "error: required_devices: ")
            ), err
            assert not work.exists()
            return
        script = next(work.glob("*.slurm"))
        check_script(script)
        spec = json.loads((work / "job_spec.json").read_text())
        assert spec["node_count"] == 2
        run_args, run_env = run_recorded(script, c.rec)[-1]
        assert "--mpi=pmix_v5" in run_args
        words = run_args[run_args.index("-c") + 3 :]
        assert words == shlex.split(run_env["TEST_CMD"]) == shlex.split(cmd)
    finally:
        c.close()


def test_one_node_is_unchanged(env: Env, cli) -> None:
    spec = built(env, cli, test_cmd="pytest accuracy/test_tiny.py::TestBig::test_class_marked")
    assert (spec["node_count"], spec["slurm_params"]["ntasks"]) == (1, 1)
    script = Path(spec["script_path"]).read_text()
    assert "--mpi" not in run_step(script) and "trtllm-llmapi-launch" not in script
    assert os.path.basename(spec["script_path"]) == "big_auto_test.slurm"


def test_a_multi_node_test_db_block_builds_jobs_over_nodes(env: Env, cli, tmp_path: Path) -> None:
    """A block shaped like l0_gb200_multi_nodes.yml (system_gpu_count 8, GB200 nodes of 4
    GPUs): its lines become jobs of 2 nodes, 8 ranks, 4 per node, as CI's 2-node stages."""
    from .conftest import materialise_tests
    from .test_batch import base_file

    materialise_tests(env.repo, ["accuracy/test_mn.py::TestBigModel::test_nvfp4_multi_gpus"])
    db = tmp_path / "l0_gb200_multi_nodes.yml"
    db.write_text(
        "version: 0.0.1\n"
        "l0_gb200_multi_nodes:\n"
        "- condition:\n"
        "    ranges: {system_gpu_count: {gte: 8, lte: 8}}\n"
        "    wildcards: {gpu: ['*gb200*']}\n"
        "  tests:\n"
        "  - accuracy/test_mn.py::TestBigModel::test_nvfp4_multi_gpus TIMEOUT (180)\n"
    )
    out = tmp_path / "jobs"
    base = base_file(env, tmp_path, partition="gb")
    r = cli(["build-many", str(db), "--base", str(base), "--work-dir", str(out)])
    assert r.code == 0, r.stderr
    (row,) = json.loads((out / "jobs.json").read_text())
    spec = json.loads((Path(row["work_dir"]) / "job_spec.json").read_text())
    params = spec["slurm_params"]
    assert (spec["required_devices"], spec["node_count"]) == (8, 2)
    assert (params["ntasks"], params["ntasks_per_node"], params["gres"]) == (8, 4, "gpu:4")
    script = Path(spec["script_path"]).read_text()
    (words,) = [ln for ln in script.splitlines() if ln.startswith("' bash pytest ")]
    # TIMEOUT (180) is minutes: pytest's --timeout, as CI passes it, one word among the others
    assert words.endswith(
        " accuracy/test_mn.py::TestBigModel::test_nvfp4_multi_gpus --timeout=10800 || status=$?"
    ), words


def test_more_nodes_than_the_partition_has_are_refused(env: Env, cli) -> None:
    """The probe counted the partition's nodes: a job wider than that is refused before
    anything is written (sbatch would refuse it, or it would pend for ever)."""
    from .conftest import SLURM_ENV

    parts = json.loads(json.dumps(SLURM_ENV["partitions"]))
    for p in parts:
        p["nodes"] = "1"
    env.write_env(partitions=parts)
    r = cli([], env.request(test_cmd=TOO_BIG))
    assert r.code == 2
    assert r.stderr.strip() == (
        "error: required_devices: the job needs 2 nodes of 8 GPUs, but partition gpu has 1; "
        "ask for at most 8 GPUs (1 node), or pick a partition with more nodes"
    )
    assert not env.work.exists() or not any(env.work.iterdir())


@pytest.mark.parametrize("op", [";;", ">|", "|&", ";&", "<>"])
def test_every_run_of_shell_operators_is_refused_across_nodes(env: Env, cli, op: str) -> None:
    """`;;*` once reached the launcher as the words `;;` and `*` (found by hypothesis)."""
    r = cli([], env.request(test_cmd=f"{TOO_BIG} {op}*"))
    assert r.code == 2 and r.stderr.startswith("error: test_cmd: across nodes"), r.stderr
    assert not env.work.exists() or not any(env.work.iterdir())
