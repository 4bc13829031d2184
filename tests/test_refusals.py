"""Every refusal: exit 2, one `error: <field>: ...; <fix>` line naming the field, work_dir untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Env, snapshot

PYTEST_4 = "pytest accuracy/test_tiny.py::TestTiny::test_four[tp4]"


def refused(cli, env: Env, req: dict, field: str, *args: str, contains: str = "") -> str:
    env.work.mkdir(parents=True, exist_ok=True)
    (env.work / "keep.txt").write_text("untouched")
    before = snapshot(env.work)
    r = cli(list(args), req)
    assert r.code == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: {field}: "), lines[0]
    assert "; " in lines[0]
    assert contains in lines[0]
    assert snapshot(env.work) == before
    return lines[0]


@pytest.mark.parametrize("field", ["partition", "account", "slurm_env_file"])
def test_missing_slurm_fields(env: Env, cli, field: str) -> None:
    req = env.request(test_cmd=PYTEST_4)
    del req[field]
    refused(cli, env, req, field)


def test_unreadable_slurm_env_says_probe_first(env: Env, cli) -> None:
    req = env.request(test_cmd=PYTEST_4, slurm_env_file=str(env.root / "nope.json"))
    line = refused(cli, env, req, "slurm_env_file")
    assert "probe" in line


def test_missing_remote_paths(env: Env, cli) -> None:
    req = env.request("remote_slurm", test_cmd=PYTEST_4)
    del req["remote_repo_path"]
    refused(cli, env, req, "remote_repo_path")
    env.write_env(remote_cwd=None)
    refused(cli, env, env.request("remote_slurm", test_cmd=PYTEST_4), "remote_cwd")
    refused(
        cli,
        env,
        env.request("remote_slurm", test_cmd=PYTEST_4, remote_work_dir="rel/dir"),
        "remote_work_dir",
    )


def test_pytest_that_does_not_spread_evenly_over_nodes(env: Env, cli) -> None:
    line = refused(
        cli,
        env,
        env.request(
            test_cmd="pytest accuracy/test_tiny.py::TestBig::test_too_big",
            partition="cpu",
            gpus_per_node=6,
        ),
        "required_devices",
    )
    assert "skip_less_mpi_world_size(16)" in line and "do not spread evenly over 3 nodes" in line


def test_pytest_wider_than_the_machine_needs_slurm(env: Env, cli) -> None:
    line = refused(
        cli,
        env,
        env.request("local_docker", test_cmd="pytest accuracy/test_tiny.py::TestBig::test_too_big"),
        "required_devices",
    )
    assert "across nodes it needs Slurm" in line


def test_pytest_node_count_over_one(env: Env, cli) -> None:
    refused(cli, env, env.request(test_cmd=PYTEST_4, node_count=2), "node_count")


def test_wider_than_a_node_refused_where_it_cannot_spread(env: Env, cli) -> None:
    # 12 ranks over 2 nodes of 8 is 6 a node; 12 over 3 asked nodes is not what sizing finds
    refused(
        cli,
        env,
        env.request(bench_cmd="trtllm-bench -m x throughput --tp 12", node_count=3),
        "node_count",
        contains="spread evenly",
    )
    refused(
        cli,
        env,
        env.request("local_docker", bench_cmd="trtllm-bench -m x throughput --tp 8 --pp 2"),
        "required_devices",
        contains="needs Slurm",
    )
    for cmd in (
        "trtllm-eval --model /m/x --tp_size 16 gsm8k | tee log",
        "A=1 trtllm-eval --model /m/x --tp_size 16 gsm8k",
    ):
        refused(cli, env, env.request(eval_cmd=cmd), "eval_cmd", contains="one plain command")


def test_custom_limits(env: Env, cli) -> None:
    refused(
        cli,
        env,
        env.request(custom_cmd="true", required_devices=9),
        "required_devices",
        contains="maximum of 8",
    )
    refused(
        cli,
        env,
        env.request(custom_cmd="true", required_devices=6, partition="gb"),
        "required_devices",
        contains="2 nodes",
    )


def test_no_models_source(env: Env, cli) -> None:
    req = env.request(test_cmd=PYTEST_4)
    del req["models_path"]
    refused(cli, env, req, "models_path", contains="default_models_repo_host")
    req = env.request(test_cmd=PYTEST_4)
    del req["llm_models_root"]
    refused(cli, env, req, "llm_models_root", contains="default_llm_models_root")


def test_no_image(env: Env, cli) -> None:
    (env.repo / "jenkins" / "current_image_tags.properties").unlink()
    refused(
        cli, env, env.request(test_cmd=PYTEST_4), "container_image", contains="--container-image"
    )
    (env.repo / "jenkins" / "current_image_tags.properties").write_text(
        "LLM_DOCKER_IMAGE_12_9=x/y:z\n"
    )
    refused(
        cli, env, env.request(test_cmd=PYTEST_4), "container_image", contains="LLM_DOCKER_IMAGE="
    )


def test_unknown_key_is_refused(env: Env, cli) -> None:
    refused(
        cli,
        env,
        env.request(test_cmd=PYTEST_4, test_comd="typo"),
        "test_comd",
        contains="not a request field",
    )


def test_unknown_partition_and_account(env: Env, cli) -> None:
    refused(
        cli,
        env,
        env.request(test_cmd=PYTEST_4, partition="nope"),
        "partition",
        contains="gpu, gb, nogres",
    )
    refused(cli, env, env.request(test_cmd=PYTEST_4, account="nope"), "account")


def test_missing_command_for_workflow(env: Env, cli) -> None:
    refused(cli, env, env.request(workflow_type="eval"), "eval_cmd")


def test_bad_values(env: Env, cli) -> None:
    refused(cli, env, env.request(test_cmd=PYTEST_4, time_limit="2 hours"), "time_limit")
    refused(
        cli, env, env.request(test_cmd=PYTEST_4, execution_scenario="cloud"), "execution_scenario"
    )
    refused(cli, env, env.request(test_cmd=PYTEST_4, required_devices=0), "required_devices")
    refused(cli, env, env.request(test_cmd=PYTEST_4, partition="gpu; rm -rf /"), "partition")
    refused(
        cli, env, env.request(custom_cmd="true", custom_env="A=1 not-an-assignment"), "custom_env"
    )
    refused(cli, env, env.request(test_cmd="pytest 'unbalanced"), "test_cmd")


def test_paths_that_cannot_be_represented(env: Env, cli) -> None:
    refused(cli, env, env.request(test_cmd=PYTEST_4, models_path="/data/a,b"), "models_path")
    refused(
        cli, env, env.request(test_cmd=PYTEST_4, llm_models_root="/models:x"), "llm_models_root"
    )
    weird = env.root / "work dir"
    req = env.request(test_cmd=PYTEST_4, work_dir=str(weird))
    r = cli([], req)
    assert r.code == 2 and r.stderr.startswith("error: work_dir: ")
    assert not weird.exists()


def test_perf_sanity_needs_slurm(env: Env, cli) -> None:
    refused(
        cli,
        env,
        env.request(
            "local_docker",
            test_cmd="pytest perf/test_perf_sanity.py::test_e2e[aggr-tiny_cfg-tiny_tp1]",
        ),
        "execution_scenario",
    )


def test_docker_without_gpu_count(env: Env, cli) -> None:
    req = env.request("local_docker", test_cmd=PYTEST_4)
    del req["env_check"]
    refused(cli, env, req, "gpus_per_node")


def test_bad_request_file(cli, tmp_path: Path) -> None:
    f = tmp_path / "r.yaml"
    f.write_text("- a list\n")
    r = cli(["build", str(f)])
    assert r.code == 2 and r.stderr.startswith("error: request: ")
    r = cli(["build", str(tmp_path / "missing.yaml")])
    assert r.code == 2 and "cannot read" in r.stderr
    f.write_text(json.dumps({"execution_scenario": "local_docker"}))
    r = cli(["build", str(f)])
    assert r.code == 2 and r.stderr.startswith("error: work_dir: is required")


def test_review_findings_refused_cleanly(env: Env, cli, tmp_path: Path) -> None:
    """Values a review found unsafe or crashing: each is one error line, exit 2, nothing written."""
    env.write_env(pmix={"available": ["pmix"], "preferred": "pmix_v5 $(touch /tmp/never)"})
    refused(
        cli,
        env,
        env.request(bench_cmd="trtllm-bench -m x throughput --tp 2"),
        "slurm_env_file",
        contains="pmix.preferred: is not a Slurm name",
    )
    env.write_env()
    refused(
        cli,
        env,
        env.request(test_cmd=PYTEST_4, checkpoint_path="/tmp"),
        "checkpoint_path",
        contains="root directory",
    )
    refused(cli, env, env.request(custom_script="/run.sh"), "custom_script")
    refused(
        cli,
        env,
        env.request(test_cmd=PYTEST_4, required_devices=True),
        "required_devices",
        contains="whole number",
    )
    f = tmp_path / "a_file"
    f.write_text("x")
    r = cli([], env.request(test_cmd=PYTEST_4, work_dir=str(f)))
    assert r.code == 2 and r.stderr.startswith("error: work_dir: ") and f.read_text() == "x"
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"test_cmd: caf\xe9\n")
    r = cli(["build", str(bad)])
    assert r.code == 2 and r.stderr.startswith("error: request: ") and "UTF-8" in r.stderr


def test_usage_errors_are_one_line(cli) -> None:
    r = cli(["build", "x.yaml", "--required-devices", "abc"])
    assert r.code == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: required_devices: ") and r.stderr.rstrip().endswith(
        " build --help"
    )


def test_yaml_times_and_nulls(env: Env, cli, tmp_path: Path) -> None:
    req = env.request(test_cmd=PYTEST_4, skip_install=None, node_count=None)
    text = "\n".join(f"{k}: {json.dumps(v)}" for k, v in req.items()) + "\ntime_limit: 4:00:00\n"
    f = tmp_path / "r.yaml"
    f.write_text(text)
    r = cli(["build", str(f), "--json"])
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["slurm_params"]["time_limit"] == "4:00:00"
    f.write_text(text.replace("4:00:00", "90").replace("skip_install", "# skip_install"))
    r = cli(["build", str(f), "--json"])
    assert json.loads(r.stdout)["slurm_params"]["time_limit"] == "90"


@pytest.mark.parametrize(
    "field", ["model_name", "partition", "account", "mpi_plugin", "time_limit"]
)
def test_trailing_newline_is_refused(field: str) -> None:
    from trtllm_script_builder.errors import BuildError
    from trtllm_script_builder.model.request import load_request

    base = {"execution_scenario": "local_docker", "work_dir": "/tmp/w", "repo_root": "/tmp/r"}
    value = "02:00:00\n" if field == "time_limit" else "evil\n"
    with pytest.raises(BuildError) as err:
        load_request({**base, field: value}, Path("/"), {})
    assert err.value.field == field
