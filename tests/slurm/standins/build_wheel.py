#!/usr/bin/python3
"""STAND-IN for TensorRT-LLM's scripts/build_wheel.py, copied into the fixture checkout as
scripts/build_wheel.py (tests/conftest.py make_repo) and run by a built compile.slurm on the
fake Slurm test cluster, where there is no CUDA toolchain, CMake build tree or image.

What it copies from the real script (NVIDIA/TensorRT-LLM scripts/build_wheel.py, the version
stored at b35ac1b, Oct 2025; `add_arguments` there lists the options):
  * the options: the same names, short aliases, flags and value options; anything else is
    refused by argparse as the real script refuses it ("unrecognized arguments", exit 2);
    `--build_type` takes Release, RelWithDebInfo or Debug only; a `--cuda_architectures` list
    holding 70-real is refused ("Volta architecture is deprecated support."), as the real one
    raises;
  * the CMake configure (where the architectures, --nvtx and --use_ccache take effect) runs
    only on a first build (no `<build_dir>/CMakeFiles`), with --clean or with
    --configure_cmake; otherwise the build tree's cached configuration is built again, so
    another --cuda_architectures is silently not built (`main`: `if clean or first_build or
    configure_cmake or configure_only`);
  * the build's output as CMake's Makefile generator prints it (`[ NN%] Building CXX object
    ...`, `[ NN%] Linking CXX shared library ...`), which the real script streams unchanged;
  * the wheel: `tensorrt_llm-<version>-cp<XY>-cp<XY>-linux_<machine>.whl` (the name `python -m
    build --wheel` gives the package, version from tensorrt_llm/version.py), written into
    --dist_dir, default <checkout>/build; a valid zip holding the package and its dist-info;
  * a failed compile: the compiler's `error:` line, CMake's `FAILED: <object>` line, the
    build tool's stop line, and the CalledProcessError traceback of the real script's
    `build_run(... check=True)`, exit status 1.

Told to fail by a file `cpp/STANDIN_COMPILE_ERROR` in the checkout (its first line, if any, is
the compiler message) or by STANDIN_BUILD_WHEEL_FAIL=1. STANDIN_BUILD_WHEEL_STEP (seconds,
default 0.2) paces the progress lines, and STANDIN_BUILD_WHEEL_RECORD names a file to which
each call appends its arguments as one JSON line.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
import zipfile
from argparse import ArgumentParser
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
OBJECTS = [
    "tensorrt_llm/common/CMakeFiles/common_src.dir/logger.cpp.o",
    "tensorrt_llm/runtime/CMakeFiles/runtime_src.dir/gptDecoder.cpp.o",
    "tensorrt_llm/kernels/CMakeFiles/kernels_src.dir/samplingTopKKernels.cu.o",
    "tensorrt_llm/batch_manager/CMakeFiles/batch_manager_src.dir/kvCacheManager.cpp.o",
    "tensorrt_llm/nanobind/CMakeFiles/bindings.dir/bindings.cpp.o",
]


def parser() -> ArgumentParser:
    p = ArgumentParser()
    p.add_argument(
        "--build_type", "-b", default="Release", choices=["Release", "RelWithDebInfo", "Debug"]
    )
    p.add_argument("--generator", "-G", default="")
    p.add_argument("--cuda_architectures", "-a")
    p.add_argument("--install", "-i", action="store_true")
    p.add_argument("--clean", "-c", action="store_true")
    p.add_argument("--clean_wheel", action="store_true")
    p.add_argument("--configure_cmake", action="store_true")
    p.add_argument("--use_ccache", "-ccache", default=False, action="store_true")
    p.add_argument("--fast_build", "-f", default=False, action="store_true")
    p.add_argument("--job_count", "-j", const=os.cpu_count(), nargs="?")
    p.add_argument("--cpp_only", "-l", action="store_true")
    p.add_argument("--extra-cmake-vars", "-D", action="append", default=[])
    p.add_argument("--extra-make-targets", nargs="+", default=[])
    p.add_argument("--trt_root", default="/usr/local/tensorrt")
    p.add_argument("--nccl_root")
    p.add_argument("--nixl_root")
    p.add_argument("--internal-cutlass-kernels-root", default="")
    p.add_argument("--build_dir", type=Path)
    p.add_argument("--dist_dir", type=Path)
    p.add_argument("--skip_building_wheel", "-s", action="store_true")
    p.add_argument("--linking_install_binary", action="store_true")
    p.add_argument("--binding_type", choices=["pybind", "nanobind"], default="nanobind")
    p.add_argument("--benchmarks", action="store_true")
    p.add_argument("--micro_benchmarks", action="store_true")
    p.add_argument("--nvtx", action="store_true")
    p.add_argument("--skip-stubs", action="store_true")
    p.add_argument("--generate_fmha", action="store_true")
    p.add_argument("--no-venv", action="store_true")
    p.add_argument("--nvrtc_dynamic_linking", action="store_true")
    return p


def version() -> str:
    try:
        text = (PROJECT / "tensorrt_llm" / "version.py").read_text()
    except OSError:
        return "0.0.0.dev0"
    m = re.search(r'(?m)^__version__ = "([^"]+)"$', text)
    return m.group(1) if m else "0.0.0.dev0"


def failure() -> str | None:
    marker = PROJECT / "cpp" / "STANDIN_COMPILE_ERROR"
    if marker.is_file():
        first = marker.read_text().strip().splitlines()
        return first[0] if first else 'identifier "undefinedSymbol" is undefined'
    if os.environ.get("STANDIN_BUILD_WHEEL_FAIL") == "1":
        return 'identifier "undefinedSymbol" is undefined'
    return None


def write_wheel(dist_dir: Path) -> Path:
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    ver = version()
    name = f"tensorrt_llm-{ver}-{tag}-{tag}-linux_{platform.machine()}.whl"
    dist_dir.mkdir(parents=True, exist_ok=True)
    info = f"tensorrt_llm-{ver}.dist-info"
    with zipfile.ZipFile(dist_dir / name, "w") as z:
        z.writestr("tensorrt_llm/__init__.py", f'__version__ = "{ver}"\n')
        z.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: {ver}\n"
        )
        z.writestr(
            f"{info}/WHEEL",
            f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}-{tag}-linux_{platform.machine()}\n",
        )
        z.writestr(f"{info}/RECORD", "")
    return dist_dir / name


def main() -> int:
    args = parser().parse_args()
    record = os.environ.get("STANDIN_BUILD_WHEEL_RECORD")
    if record:
        with open(record, "a") as f:
            f.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd()}) + "\n")
    if args.cuda_architectures and "70-real" in args.cuda_architectures:
        raise RuntimeError("Volta architecture is deprecated support.")
    step = float(os.environ.get("STANDIN_BUILD_WHEEL_STEP", "0.2"))
    build_dir = args.build_dir or PROJECT / "cpp" / "build"
    archs = args.cuda_architectures or "all"
    print(f"-- Using environment {sys.prefix} as is. (stand-in build_wheel.py)", flush=True)
    first_build = not (build_dir / "CMakeFiles").exists()
    if args.clean or first_build or args.configure_cmake:
        print("CMake Configure command: ", flush=True)
        print(
            f'cmake -DCMAKE_BUILD_TYPE="{args.build_type}" -DNVTX_DISABLE="{"OFF" if args.nvtx else "ON"}" '
            f'-DBUILD_BENCHMARKS={"ON" if args.benchmarks else "OFF"} "-DCMAKE_CUDA_ARCHITECTURES={archs}"'
            f'{" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache" if args.use_ccache else ""} -S "{PROJECT / "cpp"}"',
            flush=True,
        )
        (build_dir / "CMakeFiles").mkdir(parents=True, exist_ok=True)
        (build_dir / "CMakeCache.txt").write_text(f"CMAKE_CUDA_ARCHITECTURES:STRING={archs}\n")
        print(f"-- Build files have been written to: {build_dir}", flush=True)
    print("CMake Build command: ", flush=True)
    print("cmake --build . --config Release --parallel 8 --target build_wheel_targets", flush=True)
    broken = failure()
    for i, obj in enumerate(OBJECTS):
        pct = (i + 1) * 100 // (len(OBJECTS) + 1)
        print(f"[{pct:3d}%] Building CXX object {obj}", flush=True)
        time.sleep(step)
        if broken is not None and i == 2:
            source = (
                PROJECT / "cpp" / obj.split("/CMakeFiles/")[0] / obj.rsplit("/", 1)[1][: -len(".o")]
            )
            print(f"{source}(42): error: {broken}", flush=True)
            print('1 error detected in the compilation of "' + str(source) + '".', flush=True)
            print(
                f"gmake[2]: *** [{obj.rsplit('/', 1)[0]}/build.make:76: {obj}] Error 2", flush=True
            )
            print(f"FAILED: {obj}", flush=True)
            print("gmake: *** [Makefile:146: all] Error 2", flush=True)
            cmd = "cmake --build . --config Release --parallel 8 --target build_wheel_targets"
            print("Traceback (most recent call last):", file=sys.stderr, flush=True)
            print(
                f'  File "{PROJECT / "scripts" / "build_wheel.py"}", line 1, in <module>',
                file=sys.stderr,
            )
            print(
                f"subprocess.CalledProcessError: Command '{cmd}' returned non-zero exit status 2.",
                file=sys.stderr,
                flush=True,
            )
            return 1
    print("[100%] Linking CXX shared library libtensorrt_llm.so", flush=True)
    print("[100%] Built target tensorrt_llm", flush=True)
    if args.skip_building_wheel:
        return 0
    wheel = write_wheel(args.dist_dir or PROJECT / "build")
    print(f"Successfully built {wheel.name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
