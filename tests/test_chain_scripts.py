"""What the generated compile and test scripts of a chain do with the wheel folder, run here
with bash: `srun` is a stand-in that runs its command on this machine (in the
`--container-workdir` it is given, without a container), `pip` one that records its arguments.
The live runs on the test cluster are in tests/slurm/test_compile_chain.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .conftest import Env

PYTEST_1 = "pytest accuracy/test_tiny.py::TestTiny::test_one"

# Runs the install step's command; the run step (any other command) only says it was reached.
SRUN = """#!/bin/bash
dir=
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
  case "$1" in --container-workdir=*) dir="${1#*=}" ;; esac
  shift
done
case "$*" in
  *"installing TensorRT-LLM"*|*build_wheel.py*) cd "${dir:-.}" && exec "$@" ;;
  *) echo "run step reached" ;;
esac
"""
PIP = """#!/bin/bash
echo "$*" >> "$PIP_RECORD"
"""


def _build(cli, env: Env, wheel_dir: Path, **fields: Any) -> None:
    req = env.request(test_cmd=PYTEST_1, compile=True, device_type="H100", **fields)
    r = cli([], {**req, "wheel_dir": str(wheel_dir)})
    assert r.code == 0, r.stderr


def _script_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a script run here: srun and pip stand-ins first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("srun", SRUN), ("pip", PIP)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "pip.txt"
    record.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "TSB_SOURCE_COMMIT"}
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", PIP_RECORD=str(record), SLURM_JOB_ID="5")
    return env


def _run(
    script: Path, tmp_path: Path, **more: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    env = {**_script_env(tmp_path), **more}
    done = subprocess.run(
        ["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    return done, Path(env["PIP_RECORD"]).read_text().splitlines()


def test_the_test_job_installs_its_own_compiles_wheel_forced_and_without_deps(
    cli, env: Env, tmp_path: Path
) -> None:
    wheels = tmp_path / "wheel"
    _build(cli, env, wheels)
    (wheels / "job-4").mkdir(parents=True)
    (wheels / "job-4" / "tensorrt_llm-1.2.0-cp312-cp312-linux_x86_64.whl").write_text("")
    # Slurm names the jobs a job waited for (the import, then the compile)
    done, pip = _run(
        env.work / "tiny_auto_test.slurm", tmp_path, SLURM_JOB_DEPENDENCY="afterok:3:4"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert pip[0] == (
        "install --retries 10 --timeout 60 --no-deps --force-reinstall "
        f"{wheels}/job-4/tensorrt_llm-1.2.0-cp312-cp312-linux_x86_64.whl"
    )
    assert "run step reached" in done.stdout


def test_two_builds_sharing_a_wheel_dir_each_install_their_own_wheel(
    cli, env: Env, tmp_path: Path
) -> None:
    """A's compile, then B's into the same folder, then A's test job: it installs A's wheel
    (B's compile once replaced it, and A's test passed on B's code)."""
    wheels = tmp_path / "wheel"
    _build(cli, env, wheels)
    for compile_job in ("4", "9"):
        done, _ = _run(env.work / "compile.slurm", tmp_path, SLURM_JOB_ID=compile_job)
        assert done.returncode == 0, done.stdout + done.stderr
    built = sorted(p.relative_to(wheels).parts[0] for p in wheels.glob("*/tensorrt_llm-*.whl"))
    assert built == ["job-4", "job-9"]
    for compile_job in ("4", "9"):
        done, pip = _run(
            env.work / "tiny_auto_test.slurm",
            tmp_path,
            SLURM_JOB_ID="20",
            SLURM_JOB_DEPENDENCY=f"afterok:{compile_job}",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert pip[0].split()[-1].startswith(f"{wheels}/job-{compile_job}/tensorrt_llm-"), pip


def test_the_test_job_refuses_to_run_without_its_compiles_wheel(
    cli, env: Env, tmp_path: Path
) -> None:
    """Another build's wheel in the folder is not this chain's: installing it would test other
    code."""
    wheels = tmp_path / "wheel"
    _build(cli, env, wheels)
    (wheels / "job-9").mkdir(parents=True)
    (wheels / "job-9" / "tensorrt_llm-1.2.0-cp312-cp312-linux_x86_64.whl").write_text("")
    (wheels / "tensorrt_llm-1.2.0-cp312-cp312-linux_x86_64.whl").write_text("")
    done, pip = _run(env.work / "tiny_auto_test.slurm", tmp_path, SLURM_JOB_DEPENDENCY="afterok:4")
    assert done.returncode == 1, done.stdout + done.stderr
    assert pip == []
    assert "run step reached" not in done.stdout
    errors = [ln for ln in done.stdout.splitlines() if ln.startswith("error:")]
    assert errors == [
        f"error: no tensorrt_llm-*.whl in {wheels}/job-<id> for the jobs this one waited for "
        "(afterok:4), in a folder of this user's that nobody else may write: the compile job "
        "writes it there"
    ]


def test_the_compile_job_fails_when_the_folder_holds_two_wheels(
    cli, env: Env, tmp_path: Path
) -> None:
    wheels = tmp_path / "wheel"
    _build(cli, env, wheels)
    build_wheel = env.repo / "scripts" / "build_wheel.py"
    text = build_wheel.read_text()
    # a second wheel lands in the folder while the build runs (another compile into it)
    build_wheel.write_text(
        text.replace(
            '    wheel = write_wheel(args.dist_dir or PROJECT / "build")\n',
            '    wheel = write_wheel(args.dist_dir or PROJECT / "build")\n'
            "    (wheel.parent / 'tensorrt_llm-0.1-py3-none-any.whl').write_text('')\n",
        )
    )
    assert "0.1-py3" in build_wheel.read_text()
    done, _ = _run(env.work / "compile.slurm", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [ln for ln in done.stdout.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: build_wheel.py left more than one tensorrt_llm-*.whl in {wheels}/job-5 ("
    ), errors
    # one wheel: the job succeeds and names it
    build_wheel.write_text(text)
    done, _ = _run(env.work / "compile.slurm", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [ln for ln in done.stdout.splitlines() if ln.startswith("Built wheel ")] == [
        f"Built wheel {next(wheels.glob('job-5/tensorrt_llm-*.whl'))}"
    ]


# ---------------------------------------------------------------- the image import

ENROOT = Path(__file__).resolve().parent / "slurm" / "standins" / "enroot"
NO_FLOCK = """#!/bin/bash
echo "flock: $1: Function not implemented" >&2
exit 1
"""
SLEEP = """#!/bin/bash
echo "$*" >> "$SLEEP_RECORD"
"""


def _import(
    cli, env: Env, tmp_path: Path, *, flock: bool = True, failures: int = 0
) -> tuple[subprocess.CompletedProcess[str], Path, list[str]]:
    """Build a job with an image cache in tmp_path/sqsh and run its import.slurm with the
    enroot stand-in; `sleep` records its delays instead of waiting."""
    req = env.request(test_cmd=PYTEST_1, sqsh_cache_dir=str(tmp_path / "sqsh"))
    if not (env.work / "import.slurm").exists():
        assert cli([], req).code == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "enroot").write_text(ENROOT.read_text())
    (bin_dir / "sleep").write_text(SLEEP)
    if not flock:
        (bin_dir / "flock").write_text(NO_FLOCK)
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    slept = tmp_path / "slept.txt"
    slept.write_text("")
    env_vars = dict(os.environ)
    env_vars.update(
        PATH=f"{bin_dir}:/usr/bin:/bin",
        SLURM_JOB_ID="7",
        SLEEP_RECORD=str(slept),
        STANDIN_ENROOT_RECORD=str(tmp_path / "enroot.jsonl"),
        STANDIN_ENROOT_FAIL=str(failures),
    )
    done = subprocess.run(
        ["bash", str(env.work / "import.slurm")],
        env=env_vars,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    sqsh = Path(json.loads((env.work / "job_spec.json").read_text())["prerequisites"][0]["output"])
    return done, sqsh, slept.read_text().splitlines()


def test_an_import_without_flock_still_imports_whole(cli, env: Env, tmp_path: Path) -> None:
    """A file system without flock (Lustre mounted without it) must not fail the import: the
    temporary name and the rename keep the file whole without the lock
    (decision import-cache-key)."""
    done, sqsh, _ = _import(cli, env, tmp_path, flock=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sqsh.read_bytes().startswith(b"hsqs")
    assert f"warning: no lock on {sqsh}.lock" in done.stdout
    assert not list(sqsh.parent.glob("*.partial.*"))


def test_an_import_retries_three_times_then_fails(cli, env: Env, tmp_path: Path) -> None:
    done, sqsh, slept = _import(cli, env, tmp_path, failures=5)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count("Importing ") == 3 and slept == ["60", "60"]
    assert not sqsh.exists() and not list(sqsh.parent.glob("*.partial.*"))
    # a registry that fails once: the second attempt imports it
    (tmp_path / "enroot.jsonl.failures").unlink()
    done, sqsh, slept = _import(cli, env, tmp_path, failures=1)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("Importing ") == 2 and slept == ["60"]
    assert sqsh.read_bytes().startswith(b"hsqs")
    # and the next job of that image finds the file
    done, _, _ = _import(cli, env, tmp_path)
    assert done.returncode == 0 and f"Image already imported: {sqsh}" in done.stdout


def test_a_second_compile_for_another_gpu_builds_for_that_gpu(
    cli, env: Env, tmp_path: Path
) -> None:
    """build_wheel.py configures CMake (where --cuda_architectures, --nvtx and --use_ccache
    take effect) only in a new build tree unless told --configure_cmake: a checkout built once
    for H100 would otherwise build H100 kernels again for a B200 job
    (decision always-configure-cmake)."""
    first, second = tmp_path / "w1", tmp_path / "w2"
    for work, gpu in ((first, "H100"), (second, "B200")):
        req = env.request(test_cmd=PYTEST_1, work_dir=str(work), compile=True, device_type=gpu)
        assert cli([], {**req, "wheel_dir": str(work / "wheel")}).code == 0
    logs = []
    for work in (first, second):
        done, _ = _run(work / "compile.slurm", tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        logs.append(done.stdout)
    assert '"-DCMAKE_CUDA_ARCHITECTURES=90-real"' in logs[0]
    assert '"-DCMAKE_CUDA_ARCHITECTURES=100-real"' in logs[1], logs[1]


def test_the_build_runs_as_many_compilers_as_the_memory_holds(
    cli, env: Env, tmp_path: Path
) -> None:
    """build_wheel.py runs one compiler per CPU by default; on a whole node of many CPUs that is
    more nvcc processes than its memory holds (TensorRT-LLM's CI gives each 6-12 GiB). The job
    passes --job_count: its CPUs, at most one per 8 GiB of the job's memory
    (decision compile-job-count)."""
    record = tmp_path / "build_wheel.jsonl"
    _build(cli, env, tmp_path / "wheel")
    counts = []
    for mem_mb in ("8192", "1000", "100000000"):
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        done = subprocess.run(
            ["bash", str(env.work / "compile.slurm")],
            env={**_script_env(tmp_path), "SLURM_MEM_PER_NODE": mem_mb,
                 "STANDIN_BUILD_WHEEL_RECORD": str(record), "STANDIN_BUILD_WHEEL_STEP": "0"},
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        argv = json.loads(record.read_text().splitlines()[-1])["argv"]
        counts.append(argv[argv.index("--job_count") + 1])
    cpus = str(len(os.sched_getaffinity(0)))
    assert counts == ["1", "1", cpus]


def test_an_empty_or_cut_image_file_is_imported_again(cli, env: Env, tmp_path: Path) -> None:
    """Only a whole squashfs image stands for the import: an empty file (a full disk, a copy
    by hand) was taken as imported for good (decision shared-image-cache)."""
    done, sqsh, _ = _import(cli, env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    for broken in (b"", b"PK\x03\x04 not squashfs"):
        sqsh.write_bytes(broken)
        done, _, _ = _import(cli, env, tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"warning: {sqsh} is not a whole squashfs image" in done.stdout
        assert "Image already imported" not in done.stdout
        assert sqsh.read_bytes().startswith(b"hsqs")


def test_a_second_user_imports_with_the_first_users_lock_file(
    cli, env: Env, tmp_path: Path
) -> None:
    """A cache folder shared by a team: the lock file one user made (0644 under umask 022, or
    0600 under 077) failed the other user's import (`exec 9>` needs write access); the lock is
    taken on a descriptor opened for reading (decision shared-image-cache)."""
    import shutil
    import tempfile

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("acting as a second user needs root and setpriv")
    _import(cli, env, tmp_path)  # builds the job; the first user's import
    shared = Path(tempfile.mkdtemp(prefix="tsb-shared-cache-", dir="/tmp"))
    try:
        shared.chmod(0o777)
        script = env.work / "import.slurm"
        sqsh_dir = Path(
            json.loads((env.work / "job_spec.json").read_text())["prerequisites"][0]["output"]
        ).parent
        text = script.read_text().replace(str(sqsh_dir), str(shared / "sqsh"))
        (shared / "import.slurm").write_text(text)
        (shared / "sqsh").mkdir(mode=0o777)
        (shared / "sqsh").chmod(0o777)
        sqsh = (
            next(shared.glob("import.slurm"))
            .read_text()
            .split("SQSH_FILE=", 1)[1]
            .split()[0]
            .strip("'")
        )
        lock = Path(sqsh + ".lock")
        lock.write_text("")
        lock.chmod(0o644)  # the first user's, as umask 022 makes it
        bin_dir = shared / "bin"
        bin_dir.mkdir()
        (bin_dir / "enroot").write_text(ENROOT.read_text())
        (bin_dir / "sleep").write_text(SLEEP)
        for f in (*bin_dir.iterdir(), shared / "import.slurm"):
            f.chmod(0o755)
        env_vars = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "SLURM_JOB_ID": "8",
            "SLEEP_RECORD": "/dev/null",
            "STANDIN_ENROOT_RECORD": str(shared / "enroot.jsonl"),
            "HOME": str(shared),
        }
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(shared / "import.slurm")],
            env=env_vars, cwd=shared, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "warning: no lock" not in done.stdout
        assert Path(sqsh).read_bytes().startswith(b"hsqs")
        assert Path(sqsh).stat().st_uid == 65534
    finally:
        shutil.rmtree(shared, ignore_errors=True)
