"""What running TensorRT-LLM's real submit.py under the builder found, each as a build through
the CLI with the submit.py stand-in (tests/fixtures/submit_stand_in.py, which copies the real
one at 38008eab) and the real perf configs of the shared data folder."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import shell_here

from .conftest import Env, shared_file, snapshot

PERF = "pytest perf/test_perf_sanity.py::test_e2e[aggr_upload-tiny_cfg-tiny_tp2pp3]"
LITE = "gb200_deepseek-v3-lite-fp8_1k1k_con256_ctx1_tp1_gen1_tp2_eplb0_mtp0_ccb-NIXL"


def with_real_disagg(env: Env) -> Path:
    """The real 4-GPU GB200 disaggregated config in the repo's config folder."""
    src = shared_file(f"tests/scripts/perf-sanity/disaggregated/{LITE}.yaml")
    dest = env.repo / "tests" / "scripts" / "perf-sanity" / "disaggregated" / f"{LITE}.yaml"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest)
    return dest


def argv_of(env: Env) -> list[str]:
    return list(json.loads((env.root / "submit_args.json").read_text())["argv"])


def spec_of(env: Env) -> dict:
    return json.loads((env.work / "job_spec.json").read_text())


# 1 -----------------------------------------------------------------------------------------


def test_cluster_name_reaches_submit_py_and_its_choice_is_shown(env: Env, cli) -> None:
    with_real_disagg(env)
    env.write_env(cluster_name="gb-cluster")
    tid = f"pytest perf/test_perf_sanity.py::test_e2e[disagg_upload-e2e-{LITE}]"
    r = cli([], env.request(test_cmd=tid, partition="gb"))
    assert r.code == 0, r.stderr
    argv = argv_of(env)
    assert argv[argv.index("--cluster-name") + 1] == "gb-cluster"
    # what submit.py said about the network settings it chose is shown, not swallowed
    assert "warning: submit.py: UCX env: cluster='gb-cluster' gpu='GB200'" in r.stderr


def test_remote_disaggregated_job_without_a_cluster_name_warns(env: Env, cli) -> None:
    with_real_disagg(env)
    tid = f"pytest perf/test_perf_sanity.py::test_e2e[disagg-e2e-{LITE}]"
    r = cli([], env.request("remote_slurm", test_cmd=tid, partition="gb"))
    assert r.code == 0, r.stderr
    assert "--cluster-name" not in argv_of(env)
    assert "cluster's name is not in the cluster file" in r.stderr


# 2 -----------------------------------------------------------------------------------------


def test_a_config_outside_repo_home_and_work_dir_is_mounted(env: Env, cli, tmp_path: Path) -> None:
    cfg = tmp_path / "configs" / "my_bench.yaml"
    cfg.parent.mkdir()
    cfg.write_text((env.repo / "tests/scripts/perf-sanity/aggregated/tiny_cfg.yaml").read_text())
    req = env.request(perf_config_yaml=str(cfg), perf_test_name="tiny_tp1", partition="gb")
    r = cli([], req)
    assert r.code == 0, r.stderr
    mounts = argv_of(env)[argv_of(env).index("--mounts") + 1].split(",")
    assert f"{cfg.parent}:{cfg.parent}" in mounts


# 3 -----------------------------------------------------------------------------------------


def test_test_id_with_another_config_is_refused_naming_both(env: Env, cli, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("hardware: {gpus_per_node: 4}\nserver_configs:\n  - name: tiny_tp2pp3\n")
    r = cli([], env.request(test_cmd=PERF, perf_config_yaml=str(other), partition="gb"))
    assert r.code == 2 and r.stderr.startswith("error: perf_config_yaml: ")
    assert str(other) in r.stderr and "tiny_cfg.yaml" in r.stderr
    assert not env.work.exists()
    # the same file (or the same bytes) is no disagreement: sized from what submit.py runs
    same = env.repo / "tests/scripts/perf-sanity/aggregated/tiny_cfg.yaml"
    r = cli([], env.request(test_cmd=PERF, perf_config_yaml=str(same), partition="gb"))
    assert r.code == 0, r.stderr
    assert spec_of(env)["slurm_params"]["ntasks"] == 8


# 4 -----------------------------------------------------------------------------------------


def test_a_config_wider_than_the_partitions_nodes_is_refused(env: Env, cli) -> None:
    src = shared_file("tests/scripts/perf-sanity/aggregated/deepseek_r1_fp4_v2_blackwell.yaml")
    shutil.copy(src, env.repo / "tests/scripts/perf-sanity/aggregated" / src.name)
    tid = "pytest perf/test_perf_sanity.py::test_e2e[aggr_upload-deepseek_r1_fp4_v2_blackwell-r1_fp4_v2_tp4_mtp3_1k1k]"
    r = cli([], env.request(test_cmd=tid, partition="gb"))
    assert r.code == 2 and r.stderr.startswith("error: test_cmd: ")
    assert "asks for 8 GPUs per node" in r.stderr and "has 4" in r.stderr
    assert not env.work.exists()


# 5 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "tasks", "gpus"),
    [
        (f"disagg_upload-e2e-time_breakdown-{LITE}", 8, 3),
        (f"aggr_upload-ctx_only-time_breakdown-{LITE}", 4, 1),
        (f"aggr_upload-gen_only_no_context-{LITE}", 4, 2),
    ],
)
def test_newer_test_id_forms_build(env: Env, cli, label: str, tasks: int, gpus: int) -> None:
    with_real_disagg(env)
    r = cli(
        [],
        env.request(test_cmd=f"pytest perf/test_perf_sanity.py::test_e2e[{label}]", partition="gb"),
    )
    assert r.code == 0, r.stderr
    spec = spec_of(env)
    assert (spec["slurm_params"]["ntasks"], spec["required_devices"]) == (tasks, gpus)
    launch = (env.work / "slurm_launch.sh").read_text()
    assert f"#SBATCH --ntasks={tasks}" in launch


# 6 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["with space", "star*x", "semi;colon", "quote'd"])
def test_a_work_dir_submit_py_would_write_unquoted_is_refused(
    env: Env, cli, tmp_path: Path, name: str
) -> None:
    work = tmp_path / name
    r = cli([], env.request(test_cmd=PERF, partition="gb", work_dir=str(work)))
    assert r.code == 2 and r.stderr.startswith("error: work_dir: ")
    assert "unquoted" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not work.exists()


# 7 -----------------------------------------------------------------------------------------


def test_segment_left_out_where_the_clusters_slurm_predates_it(env: Env, cli) -> None:
    env.write_env(slurm_version="22.05.8")
    r = cli([], env.request(test_cmd=PERF, partition="gb"))
    assert r.code == 0, r.stderr
    assert "#SBATCH --segment" not in (env.work / "slurm_launch.sh").read_text()
    assert "--segment left out" in r.stderr and "22.05.8" in r.stderr
    env.write_env(slurm_version="24.05.4")
    r = cli(["--force"], env.request(test_cmd=PERF, partition="gb"))
    assert r.code == 0, r.stderr
    assert "#SBATCH --segment=2" in (env.work / "slurm_launch.sh").read_text()
    assert "--segment" not in r.stderr


# 8 -----------------------------------------------------------------------------------------


ACCURACY = """\
  enable_accuracy_test: true
  tasks:
    gsm8k_custom:
      model: local-completions
      model_args_extra: ''
      extra_kwargs: {custom_config: lm_eval/gsm8k_custom.yaml}
"""


def test_folder_submit_py_makes_is_an_expected_output(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = with_real_disagg(env)
    text = cfg.read_text()
    assert "accuracy:" not in text
    at = text.index("worker_config:")
    cfg.write_text(text[:at] + "accuracy:\n" + ACCURACY + text[at:])
    (env.repo / "lm_eval").mkdir()
    (env.repo / "lm_eval" / "gsm8k_custom.yaml").write_text("path: LLM_MODELS_ROOT/gsm8k\n")
    tid = f"pytest perf/test_perf_sanity.py::test_e2e[disagg-e2e-{LITE}]"
    r = cli([], env.request("remote_slurm", test_cmd=tid, partition="gb"))
    assert r.code == 0, r.stderr
    made = env.work / "lm_eval_configs" / "gsm8k_custom.yaml"
    assert made.read_text() == "path: /models/gsm8k\n"
    extra = spec_of(env)["extra_files"]
    assert str(made) in extra and all(Path(x).is_file() for x in extra)

    # submit copies it into the same folder of remote_work_dir (not refused, not flattened)
    from trtllm_script_builder.process import submit as submit_mod
    from trtllm_script_builder.process.proc import CmdResult

    copies: dict[str, list[str]] = {}

    class Ssh:
        remote = True
        name = "login"
        shell = staticmethod(shell_here)

        def __init__(self, target: object) -> None:
            pass

        def check(self) -> CmdResult:
            return CmdResult(0, "/w\n/home/u\nu\n")

        def copy(self, files: list[Path], remote_dir: str) -> CmdResult:
            copies.setdefault(remote_dir, []).extend(f.name for f in files)
            return CmdResult(0)

        def __call__(self, argv: list[str], cwd: Path | None = None, **_: object) -> CmdResult:
            return CmdResult(0, "99\n") if argv[0] == "sbatch" else CmdResult(0)

    monkeypatch.setattr("trtllm_script_builder.process.host.OverSsh", Ssh)
    submit_mod.submit(env.work)
    remote = spec_of(env)["remote_work_dir"]
    assert copies[f"{remote}/lm_eval_configs"] == ["gsm8k_custom.yaml"]
    assert "gsm8k_custom.yaml" not in copies[remote] and "test_list.txt" in copies[remote]


# 9 -----------------------------------------------------------------------------------------


def test_job_spec_says_what_the_script_asks(env: Env, cli) -> None:
    r = cli([], env.request("remote_slurm", test_cmd=PERF, partition="nogres", gpus_per_node=4))
    assert r.code == 0, r.stderr
    spec = spec_of(env)
    launch = (env.work / "slurm_launch.sh").read_text()
    # the drafts start every step with srun --mpi=pmix; no GRES line, no GRES in job_spec
    assert spec["slurm_params"]["mpi_plugin"] == "pmix" and "--mpi=pmix" in launch
    assert "--gres" not in launch and spec["slurm_params"]["gres"] is None
    r = cli(["--force"], env.request("remote_slurm", test_cmd=PERF, partition="gb"))
    assert r.code == 0 and spec_of(env)["slurm_params"]["gres"] == "gpu:4"
    # a local build: whatever this machine's sinfo told submit.py, job_spec agrees with it
    r = cli(["--force"], env.request(test_cmd=PERF, partition="gb"))
    launch = (env.work / "slurm_launch.sh").read_text()
    gres = spec_of(env)["slurm_params"]["gres"]
    assert (gres is None) == ("#SBATCH --gres" not in launch)
    if gres:
        assert f"#SBATCH --gres={gres}" in launch


# 10 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("label", ["aggr_upload-tiny_cfg-tiny_tp2pp3", f"disagg-e2e-{LITE}"])
def test_success_pattern_is_the_launch_scripts_own_last_word(env: Env, cli, label: str) -> None:
    with_real_disagg(env)
    r = cli(
        [],
        env.request(test_cmd=f"pytest perf/test_perf_sanity.py::test_e2e[{label}]", partition="gb"),
    )
    assert r.code == 0, r.stderr
    spec = spec_of(env)
    echoed = [
        ln.strip()[len("echo ") :].strip('"')
        for ln in (env.work / "slurm_launch.sh").read_text().splitlines()
        if ln.strip().startswith('echo "') and "completed successfully" in ln
    ]
    assert echoed and all(any(p in e for p in spec["success_patterns"]) for e in echoed)
    assert "8_done_" not in spec["success_patterns"]


# 11 ----------------------------------------------------------------------------------------


def test_same_request_same_bytes_without_a_fixed_clock(env: Env, cli) -> None:
    req = env.request(test_cmd=PERF, partition="gb")
    assert cli([], req).code == 0
    first = snapshot(env.work)
    time.sleep(1.1)  # submit.py's time stamp has whole seconds
    assert cli(["--force"], req).code == 0
    assert snapshot(env.work) == first
    assert (
        '"--container-name=aggr_test-${SLURM_JOB_ID}"' in (env.work / "slurm_launch.sh").read_text()
    )


def test_dry_run_prints_the_interpreter_the_build_runs(env: Env, cli) -> None:
    r = cli(["--dry-run"], env.request(test_cmd=PERF, partition="gb"))
    assert r.code == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("==> would run:"))
    assert line.startswith(f"==> would run: {sys.executable} ")


def test_build_many_folder_names_keep_what_tells_two_configs_apart() -> None:
    from trtllm_script_builder.workflows.pytest import NAME_MAX, test_job_name

    base = "perf/test_perf_sanity.py::test_e2e[disagg_upload-e2e-gb200_deepseek-r1-fp4_1k1k"
    names = [test_job_name(f"{base}_con2048_ctx2_dep4_gen1_dep16_eplb{n}_mtp3_ccb-UCX]")
             for n in (0, 288)]  # fmt: skip
    assert names[0] != names[1]
    assert names[0].endswith("_eplb0_mtp3_ccb_ucx") and names[1].endswith("_eplb288_mtp3_ccb_ucx")
    assert all(len(n) <= NAME_MAX and n.startswith("perf_sanity_e2e_disagg") for n in names)


def _dry_run_spec(stdout: str) -> dict:
    text = stdout.split("job_spec.json (not written)\n", 1)[1]
    return json.loads(text[: text.index("\n}\n") + 2])


@pytest.mark.parametrize(
    "test_cmd",
    [PERF, f"pytest perf/test_perf_sanity.py::test_e2e[disagg_upload-e2e-{LITE}]"],
)
def test_dry_run_job_spec_agrees_with_the_build(env: Env, cli, test_cmd: str) -> None:
    with_real_disagg(env)
    env.write_env(slurm_version="22.05.8")
    req = env.request(test_cmd=test_cmd, partition="gb")
    dry = cli(["--dry-run"], req)
    assert dry.code == 0, dry.stderr
    assert not env.work.exists()
    built = cli([], req)
    assert built.code == 0, built.stderr
    want, got = spec_of(env), _dry_run_spec(dry.stdout)
    # what submit.py prints is only known once it ran; everything else is known before
    ran = [w for w in want["warnings"] if w.startswith("submit.py: ")]
    assert got["warnings"] == [w for w in want["warnings"] if w not in ran]
    assert any("--segment left out" in w for w in got["warnings"])
    assert got["extra_files"] == want["extra_files"] == [str(env.work / "test_list.txt")]
    for key in ("required_devices", "node_count", "success_patterns"):
        assert got[key] == want[key], key
    # the GRES line is the one submit.py's own sinfo call chose, known once it ran
    assert {**got["slurm_params"], "gres": None} == {**want["slurm_params"], "gres": None}


def test_a_config_needing_more_nodes_than_the_partition_has_is_refused(env: Env, cli) -> None:
    ucx = "gb200_deepseek-r1-fp4_1k1k_con2048_ctx2_dep4_gen1_dep16_eplb0_mtp3_ccb-UCX"
    src = shared_file(f"tests/scripts/perf-sanity/disaggregated/{ucx}.yaml")
    shutil.copy(src, with_real_disagg(env).parent / src.name)
    tid = f"pytest perf/test_perf_sanity.py::test_e2e[disagg_upload-e2e-{ucx}]"
    r = cli([], env.request(test_cmd=tid, partition="gb"))
    assert r.code == 2 and not (env.work / "job_spec.json").exists()
    assert r.stderr.strip() == (
        "error: required_devices: the job needs 6 nodes of 4 GPUs, but partition gb has 2; "
        "ask for at most 8 GPUs (2 nodes), or pick a partition with more nodes"
    )
    # a job that fits says nothing of the kind
    r = cli(["--force"], env.request(test_cmd=PERF, partition="gb"))
    assert r.code == 0 and "nodes" not in r.stderr


def test_the_stand_in_writes_the_exports_the_real_drafts_read(
    env: Env, cli, tmp_path: Path
) -> None:
    # the real disaggregated draft loops over numGenServers/numCtxServers and calls the
    # precheck gate; submit.py points the config-folder variable at a --config-file's folder
    with_real_disagg(env)
    tid = f"pytest perf/test_perf_sanity.py::test_e2e[disagg_upload-e2e-{LITE}]"
    assert cli([], env.request(test_cmd=tid, partition="gb")).code == 0
    text = (env.work / "slurm_launch.sh").read_text()
    for line in ("export numCtxServers=1", "export numGenServers=1", "export ctPrecheckEnabled=1",
                 "export gpusPerNodePerGenServer=2", "export LLM_MODELS_ROOT=/models"):  # fmt: skip
        assert line in text.splitlines(), line
    assert 'export pytestCommandGENWorker="unset UCX_CUDA_IPC_ENABLE_MNNVL' in text
    cfg = tmp_path / "configs" / "my_bench.yaml"
    cfg.parent.mkdir()
    cfg.write_text((env.repo / "tests/scripts/perf-sanity/aggregated/tiny_cfg.yaml").read_text())
    req = env.request(perf_config_yaml=str(cfg), perf_test_name="tiny_tp1", partition="gb")
    assert cli(["--force"], req).code == 0
    assert f"AGG_CONFIG_FOLDER='{cfg.parent}'" in (env.work / "slurm_launch.sh").read_text()
