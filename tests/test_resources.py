"""What a Slurm job asks for and names (decisions container-names, imex-channels,
gpu-cpu-share, compile-no-gpus, image-by-arch, compile-cuda-arch)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from trtllm_script_builder.process.probe.parse import node_size, parse_scontrol_records
from trtllm_script_builder.resolve.image import gres_gpu_type

from .conftest import SLURM_ENV, Env

PYTEST_1 = "pytest accuracy/test_tiny.py::TestTiny::test_one"
PYTEST_4 = "pytest accuracy/test_tiny.py::TestTiny::test_four[tp4] -v"
BENCH_2 = "trtllm-bench --model org/Tiny-Model throughput --dataset /tmp/d.json --tp 2"


def _script(env: Env, pattern: str = "*.slurm") -> str:
    found = [p for p in env.work.glob(pattern) if p.name not in ("compile.slurm", "import.slurm")]
    assert len(found) == 1, found
    return found[0].read_text()


def _warnings(env: Env) -> list[str]:
    return json.loads((env.work / "job_spec.json").read_text())["warnings"]


def test_the_container_name_carries_the_job_id_and_the_job_removes_its_own(cli, env: Env) -> None:
    r = cli([], env.request(test_cmd=PYTEST_1, persistent_mode=False))
    assert r.code == 0, r.stderr
    text = _script(env)
    assert 'CONTAINER_NAME=tiny_auto_test"_${SLURM_JOB_ID:-0}"' in text
    # pyxis with a global container_scope keeps pyxis_<name>: the job removes it on each node
    assert 'enroot remove -f "$1"' in text and 'bash "pyxis_$CONTAINER_NAME"' in text
    # the removal comes after the run and before the job's own exit status
    assert text.index("enroot remove") < text.index('exit "$status"')
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_a_held_allocation_keeps_its_container(cli, env: Env) -> None:
    assert cli([], env.request(test_cmd=PYTEST_1, persistent_mode=True)).code == 0
    text = _script(env)
    assert '"_${SLURM_JOB_ID:-0}"' in text and "enroot remove" not in text


def test_every_slurm_test_job_passes_the_imex_channel_into_its_container(cli, env: Env) -> None:
    for fields in ({"test_cmd": PYTEST_1}, {"bench_cmd": BENCH_2}, {"custom_cmd": "true"}):
        r = cli(["--force"], env.request(**fields))
        assert r.code == 0, r.stderr
        text = _script(env)
        assert 'export NVIDIA_IMEX_CHANNELS="${NVIDIA_IMEX_CHANNELS:-0}"' in text, fields
        assert "  --container-env=NVIDIA_IMEX_CHANNELS\n" in text, fields


def test_a_gpu_job_asks_its_share_of_the_node(cli, env: Env) -> None:
    # partition gpu: 8 GPUs, 64 CPUs, 512000 MiB per node
    assert cli([], env.request(test_cmd=PYTEST_4)).code == 0
    text = _script(env)
    assert "#SBATCH --cpus-per-task=32\n#SBATCH --mem=256000M\n" in text
    assert "export SRUN_CPUS_PER_TASK=32\n" in text
    assert not any("CPUs" in w for w in _warnings(env))
    # two tasks of one GPU each: the share of 2 GPUs split over them
    assert cli(["--force"], env.request(bench_cmd=BENCH_2)).code == 0
    spec = json.loads((env.work / "job_spec.json").read_text())["slurm_params"]
    ntasks = spec["ntasks_per_node"]
    assert spec["cpus_per_task"] == 16 // ntasks and spec["mem"] == "128000M"


def test_without_the_node_size_the_job_asks_none_and_says_so(cli, env: Env) -> None:
    bare = json.loads(json.dumps(SLURM_ENV))
    for part in bare["partitions"]:
        part.pop("cpus_per_node", None)
        part.pop("mem_per_node_mb", None)
    env.write_env(partitions=bare["partitions"])
    assert cli([], env.request(test_cmd=PYTEST_4)).code == 0
    text = _script(env)
    assert "--cpus-per-task" not in text and "--mem" not in text
    assert any("records no CPUs or memory per node" in w for w in _warnings(env))


def test_probe_records_the_smallest_node_of_a_partition() -> None:
    nodes = parse_scontrol_records(
        "NodeName=a Arch=x86_64 CPUTot=16 CPUEfctv=14 RealMemory=64000 Partitions=gpu\n"
        "NodeName=b Arch=x86_64 CPUTot=32 RealMemory=32000 Partitions=gpu,cpu\n"
    )
    assert node_size(nodes) == (14, 32000)
    assert node_size([]) == (None, None)


def test_compile_and_import_run_on_a_cpu_partition_and_hold_no_gpu(cli, env: Env) -> None:
    r = cli(
        [],
        env.request(
            test_cmd=PYTEST_1, compile=True, device_type="H100", sqsh_cache_dir="/lustre/sqsh"
        ),
    )
    assert r.code == 0, r.stderr
    comp, imp = (env.work / "compile.slurm").read_text(), (env.work / "import.slurm").read_text()
    for text in (comp, imp):
        assert (
            "#SBATCH --partition=cpu\n" in text
            and "gres" not in text
            and "gpu" not in text.split("set -euo")[0]
        )
    assert "#SBATCH --exclusive\n" in comp
    assert '--build_dir "cpp/build-$(uname -m)-"90-real' in comp


def test_without_a_cpu_partition_the_compile_takes_a_share_of_the_gpu_node(cli, env: Env) -> None:
    env.write_env(partitions=[p for p in SLURM_ENV["partitions"] if p["name"] != "cpu"])
    r = cli([], env.request(test_cmd=PYTEST_4, compile=True, device_type="H100"))
    assert r.code == 0, r.stderr
    comp = (env.work / "compile.slurm").read_text()
    assert "#SBATCH --partition=gpu\n" in comp and "--exclusive" not in comp and "gres" not in comp
    assert "#SBATCH --cpus-per-task=32\n#SBATCH --mem=256000M\n" in comp
    assert any("no CPU partition of x86_64" in w for w in _warnings(env))


def test_the_compile_counts_memory_given_per_cpu(cli, env: Env, tmp_path) -> None:
    assert cli([], env.request(test_cmd=PYTEST_1, compile=True, device_type="H100")).code == 0
    comp = (env.work / "compile.slurm").read_text()
    part = comp[comp.index("cpus=$(nproc)") : comp.index('echo "Compiling with')]
    out = subprocess.run(
        ["bash", "-c", part + 'echo "$jobs $mem_mib"'],
        env={"PATH": "/usr/bin:/bin", "SLURM_MEM_PER_CPU": "4096", "SLURM_CPUS_ON_NODE": "8"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[1] == "32768" and int(out[0]) == min(4, int(subprocess.getoutput("nproc")))


def test_a_device_type_of_another_gpu_than_the_partition_is_refused(cli, env: Env) -> None:
    parts = json.loads(json.dumps(SLURM_ENV["partitions"]))
    parts[0]["gres"] = "gpu:h100:8"
    env.write_env(partitions=parts)
    r = cli([], env.request(test_cmd=PYTEST_1, compile=True, device_type="B300"))
    assert r.code == 2
    assert (
        "B300 (103-real) is not the GPU of partition gpu, whose GRES names h100 (90-real)"
        in r.stderr
    )
    assert cli([], env.request(test_cmd=PYTEST_1, compile=True, device_type="H200")).code == 0


def test_a_gb200_partition_of_unknown_arch_gets_the_arm_image(cli, env: Env) -> None:
    parts = json.loads(json.dumps(SLURM_ENV["partitions"]))
    parts[0].update(arch=None, gres="gpu:gb200:4", gpus_per_node=4)
    env.write_env(partitions=parts)
    assert cli([], env.request(test_cmd=PYTEST_1, persistent_mode=False)).code == 0
    assert re.search(r"CONTAINER_IMAGE=.*aarch64", _script(env))
    assert gres_gpu_type("nic:1,gpu:gb200:4(S:0-1)") == "gb200" and gres_gpu_type("gpu:8") is None


def test_an_unknown_arch_is_said_not_guessed_silently(cli, env: Env) -> None:
    parts = json.loads(json.dumps(SLURM_ENV["partitions"]))
    parts[0].update(arch=None)
    env.write_env(partitions=parts)
    assert cli([], env.request(test_cmd=PYTEST_1, persistent_mode=False)).code == 0
    assert any("CPU architecture of partition gpu is unknown" in w for w in _warnings(env))


STANDINS = Path(__file__).resolve().parent / "slurm" / "standins"


def test_the_dataset_step_reads_its_tokenizer_from_the_local_copy(cli, env: Env) -> None:
    prep = "trtllm-bench --model org/Tiny-Model dataset --output /tmp/d.json token-norm-dist --num-requests 4"
    run = "trtllm-bench --model org/Tiny-Model throughput --dataset /tmp/d.json"
    assert cli([], env.request(bench_cmd=f"{prep} && {run}")).code == 0
    text = _script(env)
    # the user's subcommand is kept; --model itself is the local copy (read before --model_path)
    assert "PREP_CMD='trtllm-bench --model /models/org/Tiny-Model dataset --output" in text
    assert "--model org/Tiny-Model --model_path /models/org/Tiny-Model throughput" in text
    # a dataset step that names its own --model_path gets it in --model's place
    own = "trtllm-bench --model=org/Other --model_path /data/other prepare-dataset --output /tmp/d.json token-norm-dist"
    assert cli(["--force"], env.request(bench_cmd=f"{own} && {run}")).code == 0
    assert (
        "PREP_CMD='trtllm-bench --model=/data/other --model_path /data/other prepare-dataset"
        in _script(env)
    )


def test_the_bench_stand_in_fetches_the_dataset_tokenizer_from_model_first(tmp_path) -> None:
    local = tmp_path / "model"
    local.mkdir()
    out = tmp_path / "d.json"
    base = ["/usr/bin/python3", str(STANDINS / "trtllm-bench")]
    tail = ["--output", str(out), "token-norm-dist", "--num-requests", "2"]
    hub = subprocess.run(
        [*base, "--model", "org/X", "--model_path", str(local), "prepare-dataset", *tail],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert hub.returncode != 0 and "LocalEntryNotFoundError" in hub.stderr
    ok = subprocess.run(
        [*base, "--model", str(local), "dataset", *tail],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert len(out.read_text().splitlines()) == 2


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_sync_warns_of_build_outputs_the_clone_kept(tmp_path: Path) -> None:
    from trtllm_script_builder.process.gitsync import sync_checkout
    from trtllm_script_builder.process.host import Here

    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("cpp/build/\ntensorrt_llm/libs/\n*.so\n")
    _git(repo, "add", ".gitignore")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    clone = tmp_path / "cluster" / "TensorRT-LLM"
    said: list[str] = []
    first = sync_checkout(Here(), repo, str(clone), submodules=False, say=said.append)
    assert not any("build outputs" in n for n in first.notes)
    # an earlier build on the cluster left its compiled parts, which git ignores
    (clone / "tensorrt_llm" / "libs").mkdir(parents=True)
    (clone / "tensorrt_llm" / "bindings.cpython-312-x86_64-linux-gnu.so").write_text("")
    (repo / "b.txt").write_text("new\n")
    again = sync_checkout(Here(), repo, str(clone), submodules=False, say=said.append)
    note = next(n for n in again.notes if "build outputs" in n)
    assert "tensorrt_llm/libs, tensorrt_llm/bindings.cpython-312-x86_64-linux-gnu.so" in note
    assert "pip install -e ." in note and any(s.startswith("warning: ") for s in said)


FAKE_SRUN = """#!/bin/bash
# the container steps are not run here; a step without a container runs its command
for a in "$@"; do case "$a" in --container-*|*container\\[@\\]*) exit 0 ;; esac; done
while [ "${1#-}" != "$1" ]; do shift; done
exec "$@"
"""


def test_the_job_removes_its_own_kept_container_and_no_other(cli, env: Env, tmp_path: Path) -> None:
    """The script's end, run with the enroot stand-in: pyxis's global scope kept
    pyxis_<name>_<jobid> on the node; the job removes it and leaves another job's."""
    assert cli([], env.request(test_cmd=PYTEST_1, persistent_mode=False)).code == 0
    script = next(env.work.glob("*.slurm"))
    bin_dir, store = tmp_path / "bin", tmp_path / "enroot"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    (bin_dir / "enroot").symlink_to(STANDINS / "enroot")
    for name in (
        "pyxis_tiny_auto_test_77",
        "pyxis_tiny_auto_test_76",
        "pyxis_77_tiny_auto_test_77",
    ):
        (store / name).mkdir(parents=True)
    run = subprocess.run(
        ["bash", str(script)],
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "SLURM_JOB_ID": "77",
            "ENROOT_DATA_PATH": str(store),
            "HOME": str(tmp_path),
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr + run.stdout
    assert sorted(p.name for p in store.iterdir()) == [
        "pyxis_77_tiny_auto_test_77",  # job scope: pyxis removes it itself at the job's end
        "pyxis_tiny_auto_test_76",
    ]
