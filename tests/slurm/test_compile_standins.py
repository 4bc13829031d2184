"""The enroot and build_wheel.py stand-ins refuse what the real programs refuse (no cluster
needed): a stand-in that took anything would let a wrong script pass the live tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

STANDINS = Path(__file__).resolve().parent / "standins"


def _run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, env={**os.environ, **env}, check=False
    )


def test_enroot_import_writes_the_file_and_refuses_an_existing_one(tmp_path: Path) -> None:
    enroot = str(STANDINS / "enroot")
    out = tmp_path / "x.sqsh"
    ok = _run(
        [enroot, "import", "-o", str(out), "--", "docker://nvcr.io#nvidia/pytorch:25.05-py3"],
        tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert out.read_bytes().startswith(b"hsqs")
    again = _run(
        [enroot, "import", "-o", str(out), "docker://nvcr.io#nvidia/pytorch:25.05-py3"], tmp_path
    )
    assert (again.returncode, again.stderr.strip()) == (1, f"[ERROR] File already exists: {out}")
    bad = _run(
        [enroot, "import", "-o", str(tmp_path / "y.sqsh"), "docker://nvcr.io/Nvidia/X:1"], tmp_path
    )
    assert bad.returncode == 1 and "[ERROR] Invalid image reference" in bad.stderr
    default = _run([enroot, "import", "docker://ubuntu:24.04"], tmp_path)
    assert default.returncode == 0 and (tmp_path / "ubuntu+24.04.sqsh").is_file()
    assert _run([enroot, "export", "x"], tmp_path).returncode == 1


def test_enroot_fails_as_told_and_then_succeeds(tmp_path: Path) -> None:
    env = {"STANDIN_ENROOT_FAIL": "1", "STANDIN_ENROOT_RECORD": str(tmp_path / "r.jsonl")}
    argv = [str(STANDINS / "enroot"), "import", "-o", str(tmp_path / "a.sqsh"), "docker://a/b:c"]
    first = _run(argv, tmp_path, **env)
    assert first.returncode == 1 and "returned error code: 503" in first.stderr
    assert _run(argv, tmp_path, **env).returncode == 0


def _checkout(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(STANDINS / "build_wheel.py", tmp_path / "scripts" / "build_wheel.py")
    return tmp_path


def test_build_wheel_refuses_unknown_options_and_volta(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    script = [sys.executable, "scripts/build_wheel.py"]
    unknown = _run([*script, "--cuda_architectures", "90-real", "--no-such-option"], repo)
    assert unknown.returncode == 2 and "unrecognized arguments: --no-such-option" in unknown.stderr
    volta = _run([*script, "-a", "70-real;80-real"], repo, STANDIN_BUILD_WHEEL_STEP="0")
    assert volta.returncode == 1 and "Volta architecture is deprecated support." in volta.stderr


def test_build_wheel_builds_a_wheel_or_fails_like_a_compile(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    argv = [sys.executable, "scripts/build_wheel.py", "--cuda_architectures", "90-real", "--dist_dir", str(repo / "dist"), "--use_ccache", "--benchmarks", "--nvtx"]  # fmt: skip
    ok = _run(argv, repo, STANDIN_BUILD_WHEEL_STEP="0")
    assert ok.returncode == 0, ok.stderr
    assert "[ 50%] Building CXX object" in ok.stdout
    (wheel,) = (repo / "dist").glob("*.whl")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name.startswith(f"tensorrt_llm-0.0.0.dev0-{tag}-{tag}-linux_")
    assert "tensorrt_llm/__init__.py" in zipfile.ZipFile(wheel).namelist()
    assert '"-DCMAKE_CUDA_ARCHITECTURES=90-real"' in ok.stdout  # a new tree: configured
    # the tree is configured now: another architecture is not configured unless asked
    again = _run([*argv[:3], "100-real", *argv[4:]], repo, STANDIN_BUILD_WHEEL_STEP="0")
    assert again.returncode == 0 and "CMake Configure command" not in again.stdout
    asked = _run([*argv[:3], "100-real", *argv[4:], "--configure_cmake"], repo)
    assert '"-DCMAKE_CUDA_ARCHITECTURES=100-real"' in asked.stdout
    (repo / "cpp" / "STANDIN_COMPILE_ERROR").write_text("expected a ';'\n")
    bad = _run(argv, repo, STANDIN_BUILD_WHEEL_STEP="0")
    assert bad.returncode == 1
    lines = bad.stdout.splitlines()
    err = next(i for i, line in enumerate(lines) if line.endswith("): error: expected a ';'"))
    assert any(line.startswith("FAILED: ") for line in lines[err:])
    assert "CalledProcessError" in bad.stderr
