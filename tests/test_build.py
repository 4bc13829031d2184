"""The build command end to end through the CLI: files, values and job_spec per workflow x scenario."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import Env, snapshot

PYTEST_4 = "pytest accuracy/test_tiny.py::TestTiny::test_four[tp4] -v"


def spec_of(env: Env) -> dict:
    return json.loads((env.work / "job_spec.json").read_text())


def test_pytest_local_slurm(env: Env, cli) -> None:
    r = cli([], env.request(test_cmd=PYTEST_4))
    assert r.code == 0, r.stderr
    script = env.work / "tiny_auto_test.slurm"
    text = script.read_text()
    assert "#SBATCH --job-name=tiny_auto_test" in text
    assert f"#SBATCH --output={env.work}/tiny_auto_test_%j.out" in text
    assert "#SBATCH --gres=gpu:4\n" in text  # what the test needs, not the node's 8
    assert "#SBATCH --ntasks=1\n" in text
    assert "CONTAINER_IMAGE=nvcr.io#test/trtllm:x86_64-1" in text
    assert "--mpi" not in text
    assert "export TEST_CMD=" in text
    spec = spec_of(env)
    assert spec["category"] == 2 and spec["workflow_type"] == "pytest"
    assert spec["required_devices"] == 4 and spec["node_count"] == 1
    assert spec["container_image"] == "nvcr.io/test/trtllm:x86_64-1"
    assert spec["script_path"] == str(script)
    assert spec["log_file_pattern"] == "tiny_auto_test_%j.out"  # relative to work_dir
    assert spec["slurm_params"] == {
        "partition": "gpu", "account": "acct", "time_limit": "02:00:00", "nodes": 1, "ntasks": 1,
        "ntasks_per_node": 1, "gpus_per_node": 8, "gres": "gpu:4", "mpi_plugin": "pmix_v5",
        "cpus_per_task": 32, "mem": "256000M",
    }  # fmt: skip
    assert spec["slurm_env"]["pmix"]["preferred"] == "pmix_v5"
    assert spec["persistent_mode"] is True and spec["container_name"] == "tiny_auto_test"
    assert "remote_work_dir" not in spec
    assert "passed" in spec["success_patterns"] and "FAILED" in spec["failure_patterns"]
    assert "Devices:      4 GPUs across 1 node" in r.stdout


def test_pytest_test_workdir_follows_defs_relative_path(env: Env, cli) -> None:
    cli([], env.request(test_cmd=PYTEST_4))
    text = (env.work / "tiny_auto_test.slurm").read_text()
    assert f"TEST_WORKDIR={env.repo}/tests/integration/defs\n" in text
    cli(
        [],
        env.request(
            test_cmd="pytest tests/integration/defs/accuracy/test_tiny.py::TestTiny::test_one"
        ),
    )
    assert f"TEST_WORKDIR={env.repo}\n" in (env.work / "tiny_auto_test.slurm").read_text()


def test_no_gres_line_and_bare_pmix_when_partition_has_none(env: Env, cli) -> None:
    r = cli([], env.request(test_cmd=PYTEST_4, partition="nogres", gpus_per_node=4))
    assert r.code == 0, r.stderr
    text = (env.work / "tiny_auto_test.slurm").read_text()
    assert "--gres" not in text
    spec = spec_of(env)
    # arch null: the Step 1 fallback path, so the bare plugin name whatever pmix.preferred says
    assert spec["slurm_params"]["mpi_plugin"] == "pmix"
    assert spec["slurm_params"]["gres"] is None and spec["slurm_params"]["gpus_per_node"] == 4


def test_eval_single_rank_and_multi_rank(env: Env, cli) -> None:
    r = cli([], env.request(eval_cmd="trtllm-eval --model org/Tiny-Model mmlu"))
    assert r.code == 0, r.stderr
    text = (env.work / "tiny_model_eval.slurm").read_text()
    # One rank runs outside MPI, its environment cleared: the worker it spawns needs that.
    assert '--ntasks=1 --ntasks-per-node=1 "${container[@]}"' in text and "--mpi" not in text
    assert "PMI*|MPI*|OMPI*|SLURM*) unset" in text
    assert "#SBATCH --gres=gpu:1\n" in text
    assert "trtllm-llmapi-launch" not in text
    assert "export EVAL_CMD='trtllm-eval --model /models/org/Tiny-Model mmlu'" in text
    assert "examples/trtllm-eval/requirements.txt" in text
    r = cli(
        [], env.request(eval_cmd="trtllm-eval --model org/Tiny-Model --tp_size 2 --pp_size 2 gsm8k")
    )
    text = (env.work / "tiny_model_eval.slurm").read_text()
    # tp x pp on one node: still one task that sees the GPUs, no launcher (decision launcher-words)
    assert '--ntasks=1 --ntasks-per-node=1 "${container[@]}"' in text and "--mpi" not in text
    assert "PMI*|MPI*|OMPI*|SLURM*) unset" in text and "trtllm-llmapi-launch" not in text
    assert "#SBATCH --gres=gpu:4\n" in text and "#SBATCH --ntasks=1\n" in text
    assert '\nbash -c "$EVAL_CMD"' in text
    spec = spec_of(env)
    assert spec["category"] == 5 and spec["required_devices"] == 4
    assert spec["success_patterns"][:2] == ["accuracy:", "score:"]


def test_eval_model_not_found_warns(env: Env, cli) -> None:
    r = cli([], env.request(eval_cmd="trtllm-eval --model org/Missing gsm8k"))
    assert r.code == 0
    # On stderr, one `warning:` line, and not repeated in the report (decision warnings-to-stderr).
    assert "warning: --model org/Missing" in r.stderr and "org/Missing" not in r.stdout
    assert any("org/Missing" in w for w in spec_of(env)["warnings"])


def test_an_eval_model_under_llm_models_root_is_in_the_mount(env: Env, cli) -> None:
    # llm_models_root (/models) is where the models folder is mounted: no "under no mount"
    r = cli([], env.request(eval_cmd="trtllm-eval --model /models/org/Tiny-Model mmlu"))
    assert r.code == 0, r.stderr
    assert "under no mount" not in r.stderr and not spec_of(env)["warnings"]
    text = (env.work / "tiny_model_eval.slurm").read_text()
    assert "export EVAL_CMD='trtllm-eval --model /models/org/Tiny-Model mmlu'" in text
    r = cli(["--force"], env.request(eval_cmd="trtllm-eval --model /elsewhere/m mmlu"))
    assert "--model /elsewhere/m is under no mount" in r.stderr


def test_bench_split_and_mpi(env: Env, cli) -> None:
    cmd = "trtllm-bench --model org/Tiny-Model prepare-dataset --output /tmp/d.json token-norm-dist --num-requests 2 && trtllm-bench --model org/Tiny-Model throughput --dataset /tmp/d.json --tp 2 --ep 2"
    r = cli([], env.request(bench_cmd=cmd))
    assert r.code == 0, r.stderr
    text = (env.work / "tiny_model_bench.slurm").read_text()
    local = "--model org/Tiny-Model --model_path /models/org/Tiny-Model"
    # the dataset step reads the tokenizer from --model (decision bench-dataset-local-model)
    assert "export PREP_CMD='trtllm-bench --model /models/org/Tiny-Model prepare-dataset" in text
    assert (
        f"export BENCH_CMD='trtllm-bench {local} throughput --dataset /tmp/d.json --tp 2 --ep 2'"
        in text
    )
    prep, run = text.split("# Step 3")
    assert "--mpi" not in prep.split("# Step 2")[1]
    assert '--ntasks=1 --ntasks-per-node=1 "${container[@]}"' in run and "--mpi" not in run
    assert '\nbash -c "$BENCH_CMD"' in run and "trtllm-llmapi-launch" not in run
    r = cli([], env.request(bench_cmd="trtllm-bench -m org/Tiny-Model throughput --dataset d.json"))
    text = (env.work / "tiny_model_bench.slurm").read_text()
    assert "PREP_CMD" not in text and "--mpi" not in text and "compgen -e" in text
    assert "tokens/sec" in spec_of(env)["success_patterns"]


def test_bench_files_on_tmp_or_outside_the_mounts_are_warned(env: Env, cli) -> None:
    """enroot starts every srun with an empty /tmp: a dataset written there in step 1 is gone."""
    prep = "trtllm-bench -m org/Tiny-Model prepare-dataset --output {} token-norm-dist"
    run = "trtllm-bench -m org/Tiny-Model throughput --dataset {}"

    def warnings(path: str, scenario: str = "local_slurm") -> list[str]:
        req = env.request(scenario, bench_cmd=f"{prep.format(path)} && {run.format(path)}")
        r = cli(["--force"], req)  # one folder for Slurm and Docker jobs in turn
        assert r.code == 0, r.stderr
        return [w for w in spec_of(env)["warnings"] if "--output" in w or "--dataset" in w]

    on_tmp = warnings("/tmp/d.json")
    assert len(on_tmp) == 2 and all("tmpfs, which every srun starts empty" in w for w in on_tmp)
    assert warnings("/tmp/d.json", "local_docker") == []  # one container run: /tmp lasts
    outside = warnings("/nowhere/d.json")
    assert len(outside) == 2 and all("under no mount" in w for w in outside)
    assert warnings(f"{env.home}/d.json") == []
    assert warnings('"$HOME/d.json"') == []


def test_custom_job_and_run_script(env: Env, cli) -> None:
    script = env.root / "tools" / "do it.sh"
    script.parent.mkdir()
    script.write_text("echo hi\n")
    r = cli(
        [], env.request(custom_script=str(script), custom_env="A='x y' B=2", required_devices=2)
    )
    assert r.code == 0, r.stderr
    slurm = (env.work / "do_it_custom.slurm").read_text()
    assert f"export CUSTOM_COMMAND='bash '\\''{script}'\\'''" in slurm or "CUSTOM_COMMAND=" in slurm
    # One task runs the command once, seeing both GPUs; N tasks would run it N times.
    assert "--ntasks=1 --ntasks-per-node=1" in slurm and "--mpi" not in slurm
    assert "#SBATCH --gres=gpu:2\n" in slurm
    assert f"{env.root}/tools:{env.root}/tools" in slurm  # the script's folder is mounted
    assert f"{env.work}:{env.work}" in slurm  # the run script's folder too
    run = env.work / "slurm_run_custom.sh"
    assert run.stat().st_mode & 0o111
    spec = spec_of(env)
    assert spec["category"] == 3 and spec["extra_files"] == [str(run)]
    assert spec["required_devices"] == 2 and spec["slurm_params"]["ntasks"] == 1


def test_local_docker(env: Env, cli) -> None:
    r = cli([], env.request("local_docker", test_cmd=PYTEST_4))
    assert r.code == 0, r.stderr
    sh = (env.work / "docker_cmd.sh").read_text()
    assert "-it" in sh and "[ -t 0 ]" in sh
    spec = spec_of(env)
    assert spec["category"] == 1 and spec["log_file"] == f"{env.work}/tiny_local.log"
    assert spec["docker_cmd"].startswith("docker run --rm --net=host --gpus")
    assert " -it " not in spec["docker_cmd"]
    assert "slurm_params" not in spec and "persistent_mode" not in spec
    assert re.search(r"--name tiny_auto_test_[0-9a-f]{8} ", spec["docker_cmd"])


def test_local_docker_gpus_ulimits_and_a_name_per_folder(env: Env, cli) -> None:
    """Decision local-docker-run: the GPUs the job needs, TensorRT-LLM's limits, no name clash
    between folders."""
    assert cli([], env.request("local_docker", test_cmd=PYTEST_4)).code == 0
    cmd = spec_of(env)["docker_cmd"]
    assert "--gpus '\"device=0,1,2,3\"'" in cmd  # the 4 GPUs of test_four[tp4]
    assert "--ulimit memlock=-1 --ulimit stack=67108864" in cmd
    assert "--runtime" not in cmd
    sh = (env.work / "docker_cmd.sh").read_text()
    assert "  --gpus '\"device=0,1,2,3\"' \\\n" in sh
    first = re.search(r"--name (\S+)", cmd)
    other = env.root / "work2"
    req = env.request("local_docker", test_cmd=PYTEST_4, work_dir=str(other))
    assert cli([], req).code == 0
    second = re.search(
        r"--name (\S+)", json.loads((other / "job_spec.json").read_text())["docker_cmd"]
    )
    assert first and second and first.group(1) != second.group(1)
    assert first.group(1).startswith("tiny_auto_test_") and second.group(1).startswith(
        "tiny_auto_test_"
    )
    r = cli([], env.request("local_docker", custom_cmd="nvidia-smi"))
    assert r.code == 0, r.stderr
    assert "--gpus '\"device=0\"'" in spec_of(env)["docker_cmd"]


def test_remote_slurm_uses_cluster_paths(env: Env, cli) -> None:
    r = cli([], env.request("remote_slurm", test_cmd=PYTEST_4))
    assert r.code == 0, r.stderr
    text = (env.work / "tiny_auto_test.slurm").read_text()
    remote = "/lustre/rtester/TensorRT-LLM"
    assert f"#SBATCH --output={remote}/work_dirs/work/tiny_auto_test_%j.out" in text
    assert f"export PROJECT_PATH={remote}\n" in text
    assert "/home/rtester:/home/rtester" in text and f"{remote}:{remote}" in text
    assert "/lustre/ckpt/tiny:/models" in text
    assert str(env.repo) not in text
    spec = spec_of(env)
    assert spec["script_path"] == str(env.work / "tiny_auto_test.slurm")
    assert spec["remote_script_path"] == f"{remote}/work_dirs/work/tiny_auto_test.slurm"
    assert (
        spec["remote_work_dir"] == f"{remote}/work_dirs/work"
        and spec["ssh_host"] == "cluster.example.com"
    )
    assert "persistent_mode" not in spec


def test_aarch64_partition_picks_sbsa_image(env: Env, cli) -> None:
    r = cli([], env.request(test_cmd=PYTEST_4, partition="gb"))
    assert r.code == 0
    assert spec_of(env)["container_image"] == "nvcr.io/test/trtllm:aarch64-1"


def test_container_image_given_is_used(env: Env, cli) -> None:
    r = cli(["--container-image", "/scratch/img.sqsh"], env.request(test_cmd=PYTEST_4))
    assert r.code == 0
    assert "CONTAINER_IMAGE=/scratch/img.sqsh" in (env.work / "tiny_auto_test.slurm").read_text()


def test_flags_win_over_file_and_json_output(env: Env, cli, tmp_path: Path) -> None:
    req = tmp_path / "req.yaml"
    import yaml

    req.write_text(yaml.safe_dump(env.request(test_cmd=PYTEST_4)))
    r = cli(["build", str(req), "--time-limit", "00:30:00", "--json"])
    assert r.code == 0, r.stderr
    spec = json.loads(r.stdout)
    assert spec["slurm_params"]["time_limit"] == "00:30:00"


def test_dry_run_writes_nothing(env: Env, cli) -> None:
    r = cli(["--dry-run"], env.request(test_cmd=PYTEST_4))
    assert r.code == 0
    assert "#SBATCH --job-name=tiny_auto_test" in r.stdout
    assert not env.work.exists()


def test_same_request_same_bytes(env: Env, cli) -> None:
    req = env.request(eval_cmd="trtllm-eval --model org/Tiny-Model --tp_size 2 gsm8k")
    cli([], req)
    first = snapshot(env.work)
    cli([], req)
    assert snapshot(env.work) == first


def test_workflow_inferred(env: Env, cli) -> None:
    r = cli(["--json"], env.request(bench_cmd="trtllm-bench -m x throughput"))
    assert json.loads(r.stdout)["workflow_type"] == "bench"
    r = cli(["--json", "--force"], env.request(custom_cmd="true"))
    assert json.loads(r.stdout)["workflow_type"] == "custom"


def test_a_folder_of_another_or_a_submitted_job_is_kept_unless_forced(env: Env, cli) -> None:
    assert cli([], env.request(bench_cmd="trtllm-bench -m x throughput")).code == 0
    assert (
        cli([], env.request(bench_cmd="trtllm-bench -m x throughput --tp 2")).code == 0
    )  # same job
    before = snapshot(env.work)
    r = cli([], env.request(custom_cmd="true"))
    assert r.code == 2 and r.stderr.startswith("error: work_dir: ") and "x_bench.slurm" in r.stderr
    assert "--force" in r.stderr
    assert snapshot(env.work) == before  # nothing written
    assert cli(["--force"], env.request(custom_cmd="true")).code == 0
    # the old job's script went with it; what the tool did not write stays
    assert not (env.work / "x_bench.slurm").exists()
    (env.work / "submission.json").write_text("{}")
    r = cli([], env.request(custom_cmd="true"))
    assert r.code == 2 and "was submitted" in r.stderr
    assert cli(["--force"], env.request(custom_cmd="true")).code == 0


def test_a_forced_rebuild_removes_only_the_old_jobs_own_scripts(env: Env, cli) -> None:
    assert cli([], env.request(bench_cmd="trtllm-bench -m x throughput")).code == 0
    (env.work / "notes.txt").write_text("mine")
    (env.work / "keep").mkdir()
    spec = json.loads((env.work / "job_spec.json").read_text())
    # a job_spec naming what the tool never writes (a folder, a path, not a script) removes
    # nothing of it
    (env.work / "keep.sh").mkdir()
    spec["prerequisites"] = [
        {"script_name": "keep.sh"},
        {"script_name": "../x.sh"},
        {"script_name": "notes.txt"},
    ]
    (env.work / "job_spec.json").write_text(json.dumps(spec))
    assert cli(["--force"], env.request(custom_cmd="true")).code == 0
    names = sorted(p.name for p in env.work.iterdir())
    assert "x_bench.slurm" not in names
    assert {"keep", "keep.sh", "notes.txt", "job_spec.json"} <= set(names)
    assert (env.work / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"custom_cmd": "true", "bench_cmd": "trtllm-bench -m x throughput"}, "custom_cmd",
         "together with bench_cmd"),
        ({"bench_cmd": "trtllm-bench -m x throughput", "eval_cmd": "trtllm-eval --model x mmlu"},
         "bench_cmd", "together with eval_cmd"),
        ({"bench_cmd": "pytest accuracy/test_tiny.py"}, "bench_cmd", "--test-cmd"),
        ({"eval_cmd": "python -m pytest accuracy/test_tiny.py"}, "eval_cmd", "--test-cmd"),
        ({"eval_cmd": "trtllm-bench -m x throughput"}, "eval_cmd", "--bench-cmd"),
        ({"test_cmd": "trtllm-eval --model x mmlu"}, "test_cmd", "--eval-cmd"),
    ],
)  # fmt: skip
def test_a_command_in_the_wrong_field_or_a_second_command_is_refused(
    env: Env, cli, fields: dict, field: str, words: str
) -> None:
    r = cli([], env.request(**fields))
    assert r.code == 2 and r.stderr.startswith(f"error: {field}: "), r.stderr
    assert words in r.stderr


def test_job_spec_file_forwarding(env: Env, cli, tmp_path: Path) -> None:
    prior = tmp_path / "prior.json"
    prior.write_text(
        json.dumps({"container_image": "nvcr.io/fwd/img:1", "llm_models_root": "/fwd/models"})
    )
    req = env.request(test_cmd=PYTEST_4, job_spec_file=str(prior))
    del req["llm_models_root"]
    r = cli(["--json"], req)
    spec = json.loads(r.stdout)
    assert (
        spec["container_image"] == "nvcr.io/fwd/img:1" and spec["llm_models_root"] == "/fwd/models"
    )


def test_site_config_supplies_defaults(
    env: Env, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "site.yaml"
    cfg.write_text(
        f"default_llm_models_root: /site/models\ndefault_models_repo_host: {env.repo}/models\nenroot_uri_rewrite: false\n"
    )
    monkeypatch.setenv("TRTLLM_SCRIPT_BUILDER_CONFIG", str(cfg))
    req = env.request(test_cmd=PYTEST_4)
    del req["llm_models_root"], req["models_path"]
    r = cli([], req)
    assert r.code == 0, r.stderr
    text = (env.work / "tiny_auto_test.slurm").read_text()
    assert f"{env.repo}/models:/site/models" in text
    assert "CONTAINER_IMAGE=nvcr.io/test/trtllm:x86_64-1" in text


def test_slurm_env_mounts_used_verbatim(env: Env, cli) -> None:
    env.write_env(mounts=["/data/models:/models:ro", "/data/link:/data/link"])
    req = env.request(test_cmd=PYTEST_4)
    del req["models_path"]
    cli([], req)
    text = (env.work / "tiny_auto_test.slurm").read_text()
    # then the job's folder, where pytest writes its JUnit report
    work = f",{env.work}:{env.work}"
    assert re.search(
        rf"CONTAINER_MOUNTS=\S*,/data/models:/models:ro,/data/link:/data/link{work}\n", text
    )
    # the one at the models root is read-only even when the site wrote no flags
    # (decision read-only-models-mount)
    env.write_env(mounts=["/data/models:/models", "/data/link:/data/link"])
    cli([], req)
    text = (env.work / "tiny_auto_test.slurm").read_text()
    assert re.search(
        rf"CONTAINER_MOUNTS=\S*,/data/models:/models:ro,/data/link:/data/link{work}\n", text
    )


def test_models_mount_is_read_only_in_every_scenario(env: Env, cli) -> None:
    assert cli(["--force"], env.request(test_cmd=PYTEST_4)).code == 0
    assert f"{env.repo}/models:/models:ro" in spec_of(env)["container_mounts"]
    assert cli(["--force"], env.request("remote_slurm", test_cmd=PYTEST_4)).code == 0
    assert "/lustre/ckpt/tiny:/models:ro" in (env.work / "tiny_auto_test.slurm").read_text()
    assert cli(["--force"], env.request("local_docker", test_cmd=PYTEST_4)).code == 0
    assert f"source={env.repo}/models,target=/models,readonly" in spec_of(env)["docker_cmd"]


def test_a_users_launcher_is_dropped_for_the_scripts_own(env: Env, cli) -> None:
    cmd = "trtllm-llmapi-launch trtllm-eval --model /m/x --tp_size 16 gsm8k"
    r = cli([], env.request(eval_cmd=cmd))
    assert r.code == 0, r.stderr
    text = (env.work / "x_eval.slurm").read_text()
    assert "\n' bash trtllm-eval --model /m/x --tp_size 16 gsm8k || status=$?" in text
    assert text.count("trtllm-llmapi-launch bash") == 1  # the script's own, with its wrapper
    r = cli(
        ["--force"], env.request(eval_cmd="trtllm-llmapi-launch trtllm-eval --model /m/x gsm8k")
    )
    text = (env.work / "x_eval.slurm").read_text()
    assert "export EVAL_CMD='trtllm-eval --model /m/x gsm8k'" in text
    assert "trtllm-llmapi-launch" not in text


def test_across_nodes_the_command_must_be_one_plain_call(env: Env, cli) -> None:
    # The installed launcher joins its arguments and runs the string unquoted: shell syntax
    # would not reach a shell, so it is refused, naming the field (decision launcher-words).
    wide = "trtllm-eval --model /m/x --tp_size 16 gsm8k"
    for cmd, shown in (
        (f"{wide} && echo done", "('&&')"),
        (f"{wide} > /tmp/out.txt", "('>')"),
        ("trtllm-eval --model $MODEL --tp_size 16 gsm8k", "('$MODEL')"),
        (f"HF_HUB_OFFLINE=1 {wide}", "is not one plain command"),
    ):
        r = cli([], env.request(eval_cmd=cmd))
        assert r.code == 2, (cmd, r.stderr)
        assert "eval_cmd: across nodes runs under trtllm-llmapi-launch" in r.stderr, r.stderr
        assert shown in r.stderr and not list(env.work.glob("*.slurm")), r.stderr
    # the same calls on one node run as written, under bash (no launcher)
    r = cli([], env.request(eval_cmd="trtllm-eval --model /m/x --tp_size 2 gsm8k && echo done"))
    assert r.code == 0, r.stderr


def test_across_nodes_a_word_the_installed_launcher_splits_is_warned(env: Env, cli) -> None:
    cmd = "trtllm-eval --model /m/x --tp_size 16 --extra_llm_api_options '/m/a b.yaml' gsm8k"
    r = cli([], env.request(eval_cmd=cmd))
    assert r.code == 0, r.stderr
    assert "eval_cmd: '/m/a b.yaml' does not survive the installed trtllm-llmapi-launch" in r.stderr
    text = (env.work / "x_eval.slurm").read_text()
    # still one word in the script: CI's copy of the launcher keeps it whole
    assert "--extra_llm_api_options '/m/a b.yaml' gsm8k || status=$?" in text
    r = cli(["--force"], env.request(eval_cmd=cmd.replace("16", "2")))
    assert r.code == 0 and "does not survive" not in r.stderr, r.stderr


def test_mpi_plugin_flag_is_quoted_and_used(env: Env, cli) -> None:
    cli([], env.request(bench_cmd="trtllm-bench -m x throughput --tp 16", mpi_plugin="pmi2"))
    assert " --mpi=pmi2 " in (env.work / "x_bench.slurm").read_text()


def test_docker_more_gpus_than_available(env: Env, cli) -> None:
    req = env.request(
        "local_docker", test_cmd=PYTEST_4, env_check={"gpus_per_node": 8, "available_gpus": 2}
    )
    r = cli([], req)
    assert (
        r.code == 2
        and r.stderr.startswith("error: required_devices: ")
        and "available_gpus" in r.stderr
    )


def test_eval_chained_tasks_and_host_paths(env: Env, cli) -> None:
    cmd = "trtllm-eval --model org/Tiny-Model --tp_size 4 gsm8k && trtllm-eval --model org/Tiny-Model --tp_size 2 mmlu"
    r = cli(["--json"], env.request(eval_cmd=cmd))
    spec = json.loads(r.stdout)
    assert spec["required_devices"] == 4 and spec["slurm_params"]["gres"] == "gpu:4"  # the widest
    text = (env.work / "tiny_model_eval.slurm").read_text()
    assert (
        text.count("--model /models/org/Tiny-Model") == 2 and "--model org/Tiny-Model" not in text
    )
    ckpt = env.root / "ckpts" / "tiny"
    ckpt.mkdir(parents=True)
    r = cli(
        ["--json", "--force"],  # a second model in the same folder
        env.request(
            eval_cmd=f"trtllm-eval --model {ckpt} mmlu", checkpoint_path=str(ckpt), models_path=None
        ),
    )
    assert r.code == 0, r.stderr
    assert (
        "export EVAL_CMD='trtllm-eval --model /models/tiny mmlu'"
        in (env.work / "tiny_eval.slurm").read_text()
    )


def test_a_time_limit_past_the_partition_is_warned(env: Env, cli) -> None:
    for asked, warned in (("1-00:00:00", True), ("04:00:00", False), ("90", False)):
        r = cli([], env.request(test_cmd=PYTEST_4, time_limit=asked))
        assert r.code == 0, r.stderr
        notes = [w for w in spec_of(env)["warnings"] if "time_limit" in w]
        assert bool(notes) == warned, (asked, notes)


def test_an_eval_cmd_without_trtllm_eval_is_warned(env: Env, cli) -> None:
    assert cli([], env.request(eval_cmd="python run_eval.py --tp_size 2")).code == 0
    assert any("runs no trtllm-eval" in w for w in spec_of(env)["warnings"])
    assert (
        cli(["--force"], env.request(eval_cmd="trtllm-eval --model org/Tiny-Model mmlu")).code == 0
    )
    assert not any("runs no trtllm-eval" in w for w in spec_of(env)["warnings"])


BENCH_TWO_STEPS = (
    "trtllm-bench --model org/Tiny-Model prepare-dataset --output /models/d.json token-norm-dist"
    " && trtllm-bench -m org/Tiny-Model throughput --dataset /models/d.json"
)


def test_bench_hf_id_found_locally_gets_model_path_on_every_call(env: Env, cli) -> None:
    """Decision bench-sizing: the compute node never downloads a model the models folder holds."""
    r = cli(["--force"], env.request(bench_cmd=BENCH_TWO_STEPS))
    assert r.code == 0, r.stderr
    text = (env.work / "tiny_model_bench.slurm").read_text()
    assert "export PREP_CMD='trtllm-bench --model /models/org/Tiny-Model prepare-dataset" in text
    assert (
        "export BENCH_CMD='trtllm-bench -m org/Tiny-Model --model_path /models/org/Tiny-Model throughput"
        in text
    )
    assert not any("Tiny-Model" in w for w in spec_of(env)["warnings"])
    # the models mount is read-only: the dataset cannot be written there
    # (decision read-only-models-mount)
    assert [w for w in spec_of(env)["warnings"] if "read-only" in w] == [
        "--output /models/d.json is on a read-only mount (decision read-only-models-mount); write it elsewhere"
    ]
    r = cli(["--force"], env.request("local_docker", bench_cmd=BENCH_TWO_STEPS))
    assert r.code == 0, r.stderr
    assert spec_of(env)["docker_cmd"].count("--model_path /models/org/Tiny-Model") == 1


def test_bench_hf_id_not_found_or_remote_warns_and_keeps_the_command(env: Env, cli) -> None:
    cmd = BENCH_TWO_STEPS.replace("Tiny-Model", "Missing")
    r = cli(["--force"], env.request(bench_cmd=cmd))
    assert r.code == 0, r.stderr
    assert "--model_path" not in (env.work / "missing_bench.slurm").read_text()
    warned = [w for w in spec_of(env)["warnings"] if "org/Missing" in w]
    assert len(warned) == 1 and "trtllm-bench will try to download it" in warned[0]
    r = cli(["--force"], env.request("remote_slurm", bench_cmd=BENCH_TWO_STEPS))
    assert r.code == 0, r.stderr
    assert "--model_path" not in (env.work / "tiny_model_bench.slurm").read_text()
    assert any("could not be looked up locally" in w for w in spec_of(env)["warnings"])


def test_bench_call_with_model_path_or_a_path_model_is_left_alone(env: Env, cli) -> None:
    given = "trtllm-bench -m org/Tiny-Model --model_path /models/own throughput --dataset /models/d"
    r = cli([], env.request(bench_cmd=given))
    assert r.code == 0, r.stderr
    assert f"export BENCH_CMD='{given}'" in (env.work / "tiny_model_bench.slurm").read_text()
    assert spec_of(env)["warnings"] == []


def _bindings_notes(env: Env) -> list[str]:
    return [w for w in spec_of(env)["warnings"] if "bindings" in w]


def test_uncompiled_checkout_warns_when_the_install_step_runs(env: Env, cli) -> None:
    """Decision install-step: setup.py refuses `pip install -e .` without the compiled bindings."""
    pkg = env.repo / "tensorrt_llm"
    pkg.mkdir()
    (pkg / "bindings.pyi").write_text("")  # stubs alone do not import
    for scenario in ("local_slurm", "local_docker"):
        assert cli(["--force"], env.request(scenario, test_cmd=PYTEST_4)).code == 0
        (note,) = _bindings_notes(env)
        assert "no compiled bindings" in note
        assert "skip_install" in note and "TRTLLM_USE_PRECOMPILED=1" in note
    assert cli(["--force"], env.request(test_cmd=PYTEST_4, skip_install=True)).code == 0
    assert _bindings_notes(env) == []
    assert cli(["--force"], env.request("remote_slurm", test_cmd=PYTEST_4)).code == 0
    assert _bindings_notes(env) == []  # the cluster's checkout is not this one
    (pkg / "bindings").mkdir()
    (pkg / "bindings" / "__init__.cpython-312-x86_64-linux-gnu.so").write_text("")
    assert cli(["--force"], env.request(test_cmd=PYTEST_4)).code == 0
    assert _bindings_notes(env) == []


def test_bindings_for_another_architecture_warn(env: Env, cli) -> None:
    import platform

    pkg = env.repo / "tensorrt_llm"
    pkg.mkdir()
    (pkg / "bindings.cpython-312-x86_64-linux-gnu.so").write_text("")
    assert cli(["--force"], env.request(test_cmd=PYTEST_4)).code == 0  # partition gpu: x86_64
    assert _bindings_notes(env) == []
    assert cli(["--force"], env.request(test_cmd=PYTEST_4, partition="gb")).code == 0  # aarch64
    (note,) = _bindings_notes(env)
    assert "are for x86_64, but partition gb is aarch64" in note
    assert "TRTLLM_USE_PRECOMPILED=1" in note
    assert (
        cli(["--force"], env.request(test_cmd=PYTEST_4, partition="nogres", gpus_per_node=4)).code
        == 0
    )
    assert _bindings_notes(env) == []  # the partition's architecture is unknown
    assert cli(["--force"], env.request("local_docker", test_cmd=PYTEST_4)).code == 0
    on_x86 = platform.machine().lower() in ("x86_64", "amd64")
    assert bool(_bindings_notes(env)) is not on_x86  # this machine's architecture


def test_docker_passes_trtllm_use_precompiled_through_when_it_installs(env: Env, cli) -> None:
    assert cli([], env.request("local_docker", test_cmd=PYTEST_4)).code == 0
    assert "--env TRTLLM_USE_PRECOMPILED " in spec_of(env)["docker_cmd"]
    assert "pip install --retries 10 --timeout 60 -e ." in spec_of(env)["docker_cmd"]
    req = env.request("local_docker", test_cmd=PYTEST_4, skip_install=True)
    assert cli([], req).code == 0
    assert "TRTLLM_USE_PRECOMPILED" not in spec_of(env)["docker_cmd"]
