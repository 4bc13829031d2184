"""Category 4 through the CLI: submit.py's failure, remote configs, the job_spec it leaves."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import Env, snapshot

PERF = "pytest perf/test_perf_sanity.py::test_e2e[aggr_upload-tiny_cfg-tiny_tp2pp3] TIMEOUT (60)"
FAILING_SUBMIT = '''\
"""A submit.py that writes half its output and fails, as a broken checkout's would."""
import sys
from pathlib import Path

args = sys.argv[1:]
work = Path(args[args.index("--work-dir") + 1])
(work / "test_list.txt").write_text("half written\\n")
(work / "slurm_launch.sh").write_text("#!/bin/bash\\n")
print("Traceback (most recent call last):", file=sys.stderr)
print("KeyError: 'gpus_per_node' missing in hardware section", file=sys.stderr)
sys.exit(1)
'''


def test_submit_py_failure_exit_3_with_its_text_and_nothing_left(env: Env, cli) -> None:
    (env.repo / "jenkins" / "scripts" / "perf" / "local" / "submit.py").write_text(FAILING_SUBMIT)
    env.work.mkdir()
    (env.work / "keep.txt").write_text("mine")
    before = snapshot(env.work)
    r = cli([], env.request(test_cmd=PERF, partition="gb"))
    assert r.code == 3
    line = r.stderr.strip()
    assert line.startswith("error: submit.py: ") and "KeyError: 'gpus_per_node' missing" in line
    assert snapshot(env.work) == before


def test_submit_py_failure_removes_a_new_work_dir(env: Env, cli) -> None:
    (env.repo / "jenkins" / "scripts" / "perf" / "local" / "submit.py").write_text(FAILING_SUBMIT)
    r = cli([], env.request(test_cmd=PERF, partition="gb"))
    assert r.code == 3 and not env.work.exists()


def test_missing_submit_py_is_refused_first(env: Env, cli) -> None:
    (env.repo / "jenkins" / "scripts" / "perf" / "local" / "submit.py").unlink()
    r = cli([], env.request(test_cmd=PERF, partition="gb"))
    assert r.code == 2 and r.stderr.startswith("error: repo_root: ") and not env.work.exists()


def test_unknown_server_config_lists_the_names(env: Env, cli) -> None:
    r = cli([], env.request(test_cmd=PERF.replace("tiny_tp2pp3", "tiny_tp9")))
    assert r.code == 2 and "tiny_tp2pp3" in r.stderr and "tiny_tp1" in r.stderr


def test_perf_sanity_job_spec(env: Env, cli) -> None:
    r = cli([], env.request(test_cmd=PERF, partition="gb"))
    assert r.code == 0, r.stderr
    spec = json.loads((env.work / "job_spec.json").read_text())
    assert spec["category"] == 4 and spec["workflow_type"] == "pytest"  # decision job-spec-fields
    assert spec["script_path"] == str(env.work / "slurm_launch.sh")
    assert spec["log_file_pattern"] == "slurm-%j.out"
    assert spec["required_devices"] == 6 and spec["node_count"] == 2
    assert spec["slurm_params"]["ntasks"] == 8 and spec["slurm_params"]["gpus_per_node"] == 4
    assert "Aggregated test completed successfully" in spec["success_patterns"]
    assert str(env.work / "test_list.txt") in spec["extra_files"]
    recorded = json.loads((env.root / "submit_args.json").read_text())
    argv = recorded["argv"]
    # The id goes to submit.py as written (it drops `_upload` itself), without the TIMEOUT suffix.
    assert argv[:2] == [
        "--test-list",
        "perf/test_perf_sanity.py::test_e2e[aggr_upload-tiny_cfg-tiny_tp2pp3]",
    ]
    assert argv[argv.index("--job-name") + 1] == "tiny_cfg_perf"
    # submit.py writes into a private folder beside the new work_dir, gone once moved in place.
    private = Path(argv[argv.index("--work-dir") + 1])
    assert private.parent == env.work.parent and private.name.startswith(".work.tsb-")
    assert argv[argv.index("--launch-sh") + 1] == str(private / "slurm_launch.sh")
    assert not private.exists()
    assert str(private) not in (env.work / "slurm_launch.sh").read_text()
    generated = next(ln for ln in r.stdout.splitlines() if ln.startswith("Generated:"))
    assert "slurm_launch.sh" in generated and "test_list.txt" in generated
    assert "mpi " in next(ln for ln in r.stdout.splitlines() if ln.startswith("Slurm:"))


def test_config_file_mode_and_remote_config_shipped(env: Env, cli, tmp_path: Path) -> None:
    cfg = tmp_path / "elsewhere" / "my_bench.yaml"
    cfg.parent.mkdir()
    cfg.write_text((env.repo / "tests/scripts/perf-sanity/aggregated/tiny_cfg.yaml").read_text())
    req = env.request(
        "remote_slurm",
        workflow_type="perf_sanity",
        perf_config_yaml=str(cfg),
        perf_test_name="tiny_tp1",
    )
    r = cli([], req)
    assert r.code == 0, r.stderr
    spec = json.loads((env.work / "job_spec.json").read_text())
    shipped = env.work / "my_bench.yaml"
    assert shipped.read_text() == cfg.read_text() and str(shipped) in spec["extra_files"]
    argv = json.loads((env.root / "submit_args.json").read_text())["argv"]
    private = Path(argv[argv.index("--work-dir") + 1])
    assert argv[:4] == ["--config-file", str(private / shipped.name), "--test-name", "tiny_tp1"]
    assert argv[argv.index("--job-name") + 1] == "my_bench_benchmark"
    launch = (env.work / "slurm_launch.sh").read_text()
    remote_work = "/lustre/rtester/TensorRT-LLM/work_dirs/work"
    assert f"{remote_work}/my_bench.yaml" in launch and str(env.work) not in launch
    assert spec["remote_script_path"] == f"{remote_work}/slurm_launch.sh"
    assert spec["required_devices"] == 1 and spec["node_count"] == 1


def test_failure_restores_files_it_changed(env: Env, cli) -> None:
    (env.repo / "jenkins" / "scripts" / "perf" / "local" / "submit.py").write_text(FAILING_SUBMIT)
    env.work.mkdir()
    (env.work / "slurm_launch.sh").write_text("OLD\n")
    (env.work / "test_list.txt").write_text("old list\n")
    before = snapshot(env.work)
    r = cli([], env.request(test_cmd=PERF, partition="gb"))
    assert r.code == 3 and snapshot(env.work) == before


def test_rebuild_gives_the_same_bytes(env: Env, cli, monkeypatch) -> None:
    monkeypatch.setenv("SUBMIT_STAND_IN_TIMESTAMP", "20260101_000000")
    req = env.request(test_cmd=PERF, partition="gb")
    assert cli([], req).code == 0
    first = snapshot(env.work)
    assert cli([], req).code == 0
    assert snapshot(env.work) == first


def test_a_work_dir_outside_home_and_repo_is_mounted_for_submit_py(
    env: Env, cli, tmp_path: Path
) -> None:
    """submit.py runs the job with work_dir as its working folder: the container must see it."""
    outside = tmp_path / "scratch" / "perf"
    # decision work-dir-parent-made: a build makes work_dir, not the folders above it
    outside.parent.mkdir()
    r = cli([], env.request(test_cmd=PERF, partition="gb", work_dir=str(outside)))
    assert r.code == 0, r.stderr
    argv = json.loads((env.root / "submit_args.json").read_text())["argv"]
    assert f"{outside}:{outside}" in argv[argv.index("--mounts") + 1].split(",")


def test_remote_launch_script_holds_the_target_clusters_facts(env: Env, cli) -> None:
    """submit.py runs here and reads this cluster; the job runs on the target: its name and its
    partition's GPU request (none on a partition without GPU GRES) are what the script holds."""
    env.write_env(cluster_name="target-cluster")
    req = env.request("remote_slurm", test_cmd=PERF, partition="nogres", gpus_per_node=4)
    r = cli([], req)
    assert r.code == 0, r.stderr
    argv = json.loads((env.root / "submit_args.json").read_text())["argv"]
    assert argv[argv.index("--cluster-name") + 1] == "target-cluster"
    launch = (env.work / "slurm_launch.sh").read_text()
    assert "--gres" not in launch and "--gpus-per-node" not in launch
    assert (env.work / "slurm_launch.sh").stat().st_mode & 0o111

    r = cli(["--force"], env.request("remote_slurm", test_cmd=PERF, partition="gb"))
    assert r.code == 0, r.stderr
    lines = (env.work / "slurm_launch.sh").read_text().splitlines()
    gpu = [ln for ln in lines if ln.startswith(("#SBATCH --gres", "#SBATCH --gpus-per-node"))]
    assert gpu == ["#SBATCH --gpus-per-node=4", "#SBATCH --gres=gpu:4"]
    assert lines.index(gpu[0]) == lines.index("#SBATCH --ntasks-per-node=4") + 1


def test_a_local_launch_script_keeps_what_submit_py_wrote(env: Env, cli) -> None:
    assert cli([], env.request(test_cmd=PERF)).code == 0
    assert "--cluster-name" not in json.loads((env.root / "submit_args.json").read_text())["argv"]
    assert "#SBATCH --gres=gpu:4" in (env.work / "slurm_launch.sh").read_text()


def test_a_failed_build_leaves_what_was_in_work_dir(env: Env, cli) -> None:
    """Folders, symlinks and files that were there before stay as they were; only what the
    build made goes (a work_dir may be a folder full of other things, even the repo)."""
    env.work.mkdir()
    (env.work / "notes").mkdir()
    (env.work / "notes" / "keep.txt").write_text("mine\n")
    (env.work / "link").symlink_to(env.repo)
    (env.work / "data.txt").write_text("before\n")
    before = snapshot(env.work)
    (env.repo / "jenkins/scripts/perf/local/submit.py").write_text(FAILING_SUBMIT)
    r = cli([], env.request(test_cmd=PERF))
    assert r.code == 3
    assert snapshot(env.work) == before
    assert (env.work / "link").is_symlink() and (env.work / "notes" / "keep.txt").is_file()
