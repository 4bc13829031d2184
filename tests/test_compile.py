"""Compile and image-import chains (decisions compile-cuda-arch,
compile-chain and image-import-cache): the request fields, what the build writes, how `submit`
chains the jobs and how their end is judged. The live runs are in
tests/slurm/test_compile_chain.py."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shell_here
from trtllm_script_builder.model.jobspec import JobSpec
from trtllm_script_builder.process import submit as submit_mod
from trtllm_script_builder.process.chain import (
    ChainJob,
    decide_prerequisite,
    dependency_args,
    submit_prerequisites,
)
from trtllm_script_builder.process.proc import CmdResult
from trtllm_script_builder.process.verdict import VERDICT_EXIT, LogLine, Verdict
from trtllm_script_builder.resolve.compile import sqsh_name

from .conftest import Env, job_spec

PYTEST_1 = "pytest accuracy/test_tiny.py::TestTiny::test_one"


def _build(cli, env: Env, scenario: str = "local_slurm", **fields: Any):
    return cli([], env.request(scenario, test_cmd=PYTEST_1, **fields))


@pytest.mark.parametrize(
    ("device", "arch"),
    [
        ("B200", "100-real"),
        ("GB200", "100-real"),
        # Blackwell Ultra is its own architecture (10.3): TensorRT-LLM's CI builds 103-real
        # beside 100-real, and kernels built for 100a do not load on it (decision gpu-arch-table).
        ("B300", "103-real"),
        ("NVIDIA GB300", "103-real"),
        ("H100", "90-real"),
        ("NVIDIA H200 141GB HBM3e", "90-real"),
        ("NVIDIA GH200 480GB", "90-real"),
        ("H20", "90-real"),
        ("l40s", "89-real"),
        ("NVIDIA L40", "89-real"),
        ("NVIDIA L4", "89-real"),
        ("A100-SXM4-80GB", "80-real"),
        ("NVIDIA A30", "80-real"),
        ("NVIDIA A10G", "86-real"),
        ("A40", "86-real"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "120-real"),
        ("rtx_pro_6000", "120-real"),
    ],
)
def test_the_arch_comes_from_the_gpu_type(cli, env: Env, device: str, arch: str) -> None:
    r = _build(cli, env, compile=True, device_type=device)
    assert r.code == 0, r.stderr
    text = (env.work / "compile.slurm").read_text()
    assert f"python3 scripts/build_wheel.py --cuda_architectures {arch} " in text


def test_cuda_arch_wins_and_is_quoted(cli, env: Env) -> None:
    r = _build(cli, env, compile=True, device_type="H100", cuda_arch="90-real;100-real")
    assert r.code == 0, r.stderr
    assert "--cuda_architectures '90-real;100-real' " in (env.work / "compile.slurm").read_text()


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        (
            {"device_type": "T4"},
            "error: cuda_arch: is not given and device_type 'T4' is not one of B200, GB200, "
            "B300, GB300, H100, H200, H800, H20, GH200, L40S, L40, L20, L4, A100, A800, A30, "
            "A10, A10G, A40, RTX PRO 6000; pass --cuda-arch (e.g. 90-real)",
        ),
        (
            {},
            "error: cuda_arch: is not given and there is no device_type to derive it from; "
            "pass --cuda-arch (e.g. 90-real) or --device-type (e.g. H100)",
        ),
    ],
)
def test_an_unknown_gpu_without_cuda_arch_is_refused(
    cli, env: Env, fields: dict[str, Any], line: str
) -> None:
    r = _build(cli, env, compile=True, **fields)
    assert (r.code, r.stderr.strip()) == (2, line)
    assert not env.work.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cuda_arch", "-90-real"),
        ("cuda_arch", "90-real; rm -rf /"),
        ("cuda_arch", "90-real\n"),
        # refused by TensorRT-LLM's CMake (no PTX, no all-major, only the `a` suffix) or by
        # build_wheel.py (Volta): refused here rather than in the queue
        ("cuda_arch", "90-virtual"),
        ("cuda_arch", "all-major"),
        ("cuda_arch", "100f-real"),
        ("cuda_arch", "70-real"),
        ("cuda_arch", "90-real;75"),
        # the compile job has no GPU for CMake to detect: it would build every architecture
        ("cuda_arch", "native"),
        ("wheel_dir", "relative/wheel"),
        ("wheel_dir", "-/x"),
        ("sqsh_cache_dir", "/a,b"),
        ("sqsh_cache_dir", "/a b"),
    ],
)
def test_bad_values_are_refused_in_one_line(cli, env: Env, field: str, value: str) -> None:
    r = _build(cli, env, compile=True, device_type="H100", **{field: value})
    assert r.code == 2 and r.stderr.startswith(f"error: {field}: "), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("scenario", "fields", "start"),
    [
        ("local_slurm", {"use_ccache": True}, "error: use_ccache: is a compile option"),
        ("local_slurm", {"cuda_arch": "90-real"}, "error: cuda_arch: is a compile option"),
        ("local_docker", {"compile": True}, "error: compile: runs as a Slurm job"),
        ("local_docker", {"sqsh_cache_dir": "/c"}, "error: sqsh_cache_dir: runs as a Slurm job"),
        ("local_slurm", {"compile": True, "skip_install": True}, "error: compile: builds a wheel"),
        (
            "local_slurm",
            {"sqsh_cache_dir": "/c", "container_image": "/images/x.sqsh"},
            "error: sqsh_cache_dir: container_image '/images/x.sqsh' is a squashfs file",
        ),
    ],
)
def test_contradictions_are_refused(
    cli, env: Env, scenario: str, fields: dict[str, Any], start: str
) -> None:
    r = _build(cli, env, scenario, device_type="H100", **fields)
    assert r.code == 2 and r.stderr.startswith(start), r.stderr


def test_perf_sanity_is_refused(cli, env: Env) -> None:
    perf = "pytest perf/test_perf_sanity.py::test_e2e[aggr-tiny_cfg-tiny_tp2pp3]"
    req = env.request(test_cmd=perf, partition="gb", compile=True, device_type="GB200")
    r = cli([], req)
    assert r.code == 2 and r.stderr.startswith("error: compile: is not available for perf-sanity")


def test_an_option_the_checkout_lacks_is_refused(cli, env: Env) -> None:
    build_wheel = env.repo / "scripts" / "build_wheel.py"
    assert '"--benchmarks"' in build_wheel.read_text()  # the stand-in: an older build_wheel.py
    assert _build(cli, env, compile=True, device_type="H100", benchmarks=True).code == 0
    assert "--benchmarks" in (env.work / "compile.slurm").read_text()
    # newer checkouts dropped --benchmarks (micro_benchmarks stays)
    build_wheel.write_text(build_wheel.read_text().replace('"--benchmarks"', '"--micro_only"'))
    r = _build(cli, env, compile=True, device_type="H100", benchmarks=True)
    assert r.code == 2
    assert r.stderr.startswith("error: benchmarks: the checkout's scripts/build_wheel.py has no")


def test_a_checkout_without_build_wheel_is_refused(cli, env: Env) -> None:
    (env.repo / "scripts" / "build_wheel.py").unlink()
    r = _build(cli, env, compile=True, device_type="H100")
    assert r.code == 2 and r.stderr.startswith("error: compile: ") and "build_wheel.py" in r.stderr


def test_a_rebuild_without_the_chain_leaves_no_chain_script_behind(cli, env: Env) -> None:
    assert _build(cli, env, compile=True, device_type="H100", sqsh_cache_dir="/l/sqsh").code == 0
    assert {"import.slurm", "compile.slurm"} <= {p.name for p in env.work.iterdir()}
    assert _build(cli, env, compile=True, device_type="H100").code == 0
    names = {p.name for p in env.work.iterdir()}
    assert "compile.slurm" in names and "import.slurm" not in names
    assert _build(cli, env).code == 0
    assert not {"import.slurm", "compile.slurm"} & {p.name for p in env.work.iterdir()}


def test_the_chain_in_the_job_folder(cli, env: Env) -> None:
    r = _build(cli, env, compile=True, device_type="H100", sqsh_cache_dir="/lustre/sqsh")
    assert r.code == 0, r.stderr
    spec = json.loads((env.work / "job_spec.json").read_text())
    kinds = [(p["kind"], p["script_name"]) for p in spec["prerequisites"]]
    assert kinds == [("import", "import.slurm"), ("compile", "compile.slurm")]
    sqsh = "/lustre/sqsh/" + sqsh_name("docker://nvcr.io#test/trtllm:x86_64-1")
    assert spec["prerequisites"][0]["output"] == sqsh
    assert spec["prerequisites"][1]["output"] == f"{env.work}/wheel"
    assert "persistent_mode" not in spec  # a held allocation cannot run a chain first
    test = (env.work / "tiny_auto_test.slurm").read_text()
    assert f"CONTAINER_IMAGE={sqsh}\n" in test
    assert "pip install -e ." not in test and '--force-reinstall "$WHEEL_PATH"' in test
    assert 'dist="$WHEEL_DIR/job-$dep"' in test and 'wheels=("$dist"/tensorrt_llm-*.whl)' in test
    imp = (env.work / "import.slurm").read_text()
    assert "IMAGE_URI=docker://nvcr.io#test/trtllm:x86_64-1\n" in imp
    assert "--nvtx" in (env.work / "compile.slurm").read_text()
    # the build gets every CPU of its node; the import needs no whole node
    assert "\n#SBATCH --exclusive\n" in (env.work / "compile.slurm").read_text()
    assert "--exclusive" not in imp
    assert _build(cli, env, compile=True, device_type="H100", nvtx=False).code == 0
    assert "--nvtx" not in (env.work / "compile.slurm").read_text()


def test_without_the_fields_nothing_changes(cli, env: Env) -> None:
    assert _build(cli, env).code == 0
    spec = json.loads((env.work / "job_spec.json").read_text())
    assert "prerequisites" not in spec
    assert sorted(p.name for p in env.work.iterdir()) == ["job_spec.json", "tiny_auto_test.slurm"]


def test_sqsh_names_are_readable_and_distinct() -> None:
    a = sqsh_name("docker://nvcr.io#nvidia/pytorch:25.05-py3")
    assert a.startswith("nvcr.io_nvidia_pytorch_25.05-py3-") and a.endswith(".sqsh")
    assert a == sqsh_name("docker://nvcr.io#nvidia/pytorch:25.05-py3")
    assert sqsh_name("docker://a/b:c") != sqsh_name("docker://a_b:c")  # same readable part


def _sqsh(cli, env: Env, image: str, work: str = "w", rewrite: bool = True) -> str:
    """The cache file of `image`, from a build into its own folder `work`."""
    if not rewrite:
        cfg = env.root / "site.yaml"
        cfg.write_text("enroot_uri_rewrite: false\n")
        os.environ["TRTLLM_SCRIPT_BUILDER_CONFIG"] = str(cfg)
    folder = env.root / work
    try:
        r = cli([], {**env.request(test_cmd=PYTEST_1, work_dir=str(folder)),
                     "container_image": image, "sqsh_cache_dir": "/c"})  # fmt: skip
    finally:
        os.environ.pop("TRTLLM_SCRIPT_BUILDER_CONFIG", None)
    assert r.code == 0, r.stderr
    return json.loads((folder / "job_spec.json").read_text())["prerequisites"][0]["output"]


@pytest.mark.parametrize(
    ("one", "other"),
    [
        # the spelling enroot needs, given by hand: the same image, so the same file
        ("nvcr.io/nvidia/pytorch:25.05-py3", "nvcr.io#nvidia/pytorch:25.05-py3"),
        ("nvcr.io/nvidia/pytorch:25.05-py3", "docker://nvcr.io/nvidia/pytorch:25.05-py3"),
        # Docker Hub's default registry, namespace and tag
        ("ubuntu:24.04", "docker.io/library/ubuntu:24.04"),
        ("ubuntu", "ubuntu:latest"),
    ],
)
def test_one_image_in_two_spellings_is_one_cache_file(cli, env: Env, one: str, other: str) -> None:
    assert _sqsh(cli, env, one, "a") == _sqsh(cli, env, other, "b")


def test_the_cache_file_is_keyed_by_what_enroot_imports(cli, env: Env) -> None:
    """With the registry rewrite turned off, enroot reads `nvcr.io/x` as a Docker Hub path:
    another image than `nvcr.io#x`, so another file (decision import-cache-key)."""
    rewritten = _sqsh(cli, env, "nvcr.io/nvidia/pytorch:25.05-py3", "a")
    as_given = _sqsh(cli, env, "nvcr.io/nvidia/pytorch:25.05-py3", "b", rewrite=False)
    assert rewritten != as_given
    assert _sqsh(cli, env, "nvcr.io/nvidia/pytorch:25.05-py4", "c") != rewritten


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        # enroot takes tags only
        ("nvcr.io/nvidia/pytorch@sha256:" + "a" * 64, "is not a reference enroot import takes "),
        # an image path is lower case, for docker as for enroot: refused with or without an import
        ("nvcr.io/nvidia/PyTorch:25.05", "has capitals in its repository path"),
    ],
)
def test_an_image_enroot_cannot_import_is_refused(cli, env: Env, image: str, problem: str) -> None:
    r = _build(cli, env, container_image=image, sqsh_cache_dir="/c")
    assert r.code == 2, r.stderr
    assert r.stderr.startswith(f"error: container_image: {image!r} {problem}"), r.stderr
    assert not env.work.exists()


def test_an_image_of_a_moving_tag_gets_a_warning(cli, env: Env) -> None:
    for image, work, warned in (
        ("ubuntu", "a", True),
        ("nvcr.io/nvidia/pytorch:25.05", "b", False),
    ):
        _sqsh(cli, env, image, work)
        spec = json.loads((env.root / work / "job_spec.json").read_text())
        ours = [w for w in spec.get("warnings") or [] if w.startswith("sqsh_cache_dir:")]
        assert len(ours) == int(warned), ours
        if warned:
            assert ours[0].startswith(f"sqsh_cache_dir: {image!r} names the tag latest"), ours


# ---------------------------------------------------------------- submit


def _spec(prereqs: list[dict[str, str]]) -> JobSpec:
    return job_spec(
        container_image="i",
        docker_image="i",
        script_path="/w/m.slurm",
        script_name="m.slurm",
        prerequisites=prereqs,
    )


def _entry(kind: str, key: str) -> dict[str, str]:
    return {
        "kind": kind,
        "key": key,
        "script_name": f"{kind}.slurm",
        "script_path": f"/w/{kind}.slurm",
        "log_file_pattern": f"m_{kind}_%j.out",
        "error_file_pattern": f"m_{kind}_%j.err",
        "output": "/x",
    }


def test_prerequisites_are_chained_and_shared_by_key() -> None:
    calls: list[tuple[str, list[str]]] = []

    def sbatch(script: str, extra: list[str]) -> str:
        calls.append((script, extra))
        return str(100 + len(calls))

    known: dict[str, ChainJob] = {}
    spec = _spec([_entry("import", "import:/c/x.sqsh"), _entry("compile", "compile:a")])
    first = submit_prerequisites(spec, sbatch, "/w", known=known)
    # the compile also waits for any other compile of the checkout (singleton: one job name per
    # checkout), which builds in the same tree (decision one-compile-per-checkout)
    assert calls == [
        ("/w/import.slurm", []),
        ("/w/compile.slurm", ["--dependency=afterok:101,singleton", "--kill-on-invalid-dep=yes"]),
    ]
    assert [(j.kind, j.job_id, j.log_file) for j in first] == [
        ("import", "101", "/w/m_import_101.out"),
        ("compile", "102", "/w/m_compile_102.out"),
    ]
    assert dependency_args(first) == ["--dependency=afterok:101:102", "--kill-on-invalid-dep=yes"]
    # a second test job of a batch: same image, another compile
    spec2 = _spec([_entry("import", "import:/c/x.sqsh"), _entry("compile", "compile:b")])
    second = submit_prerequisites(spec2, sbatch, "/w", known=known)
    assert [(j.job_id, j.shared) for j in second] == [("101", True), ("103", False)]
    assert calls[-1] == (
        "/w/compile.slurm",
        ["--dependency=afterok:101,singleton", "--kill-on-invalid-dep=yes"],
    )
    # a compile without an import waits for the other compiles of its checkout only
    spec3 = _spec([_entry("compile", "compile:c")])
    submit_prerequisites(spec3, sbatch, "/w", known=known)
    assert calls[-1] == ("/w/compile.slurm", ["--dependency=singleton"])


def test_the_compile_jobs_of_one_checkout_share_a_job_name(cli, env: Env, tmp_path: Path) -> None:
    """Slurm's singleton dependency runs one job of a name (and user) at a time: named after
    the checkout, two compiles of it never build in its one build tree at once
    (decision one-compile-per-checkout)."""

    def name(work: str, **fields: Any) -> str:
        req = env.request(test_cmd=PYTEST_1, work_dir=str(tmp_path / work), compile=True)
        assert cli([], {**req, **fields}).code == 0
        lines = (tmp_path / work / "compile.slurm").read_text().splitlines()
        assert "#SBATCH --dependency=singleton" in lines
        return next(ln for ln in lines if ln.startswith("#SBATCH --job-name="))

    h100 = name("a", device_type="H100")
    assert h100.startswith("#SBATCH --job-name=tsb_compile_repo_")
    assert name("b", device_type="B200") == h100  # another build of the same checkout
    other = tmp_path / "other_repo"
    shutil.copytree(env.repo, other)
    assert name("c", device_type="H100", repo_root=str(other)) != h100


def test_submit_chains_the_test_job(env: Env, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _build(cli, env, compile=True, device_type="H100", sqsh_cache_dir="/c").code == 0
    argvs: list[list[str]] = []

    def sbatch(argv: Sequence[str], cwd: Path | None = None, **_: object) -> CmdResult:
        argvs.append(list(argv))
        return CmdResult(0, f"{40 + len(argvs)}\n")

    monkeypatch.setattr("trtllm_script_builder.process.host.run", sbatch)
    sub = submit_mod.submit(env.work)
    assert argvs[-1] == [
        "sbatch",
        "--parsable",
        argvs[0][2],  # the comment of every job of this submit
        "--dependency=afterok:41:42",
        "--kill-on-invalid-dep=yes",
        str(env.work / "tiny_auto_test.slurm"),
    ]
    assert [a[-1] for a in argvs[:2]] == [
        str(env.work / "import.slurm"),
        str(env.work / "compile.slurm"),
    ]
    assert sub.job_id == "43"
    saved = json.loads((env.work / "submission.json").read_text())
    assert [(p["kind"], p["job_id"]) for p in saved["prerequisites"]] == [
        ("import", "41"),
        ("compile", "42"),
    ]
    assert saved["prerequisites"][1]["log_file"] == f"{env.work}/tiny_compile_42.out"


def test_persistent_submit_of_a_chain_is_refused(env: Env, cli) -> None:
    assert _build(cli, env, compile=True, device_type="H100").code == 0
    r = cli(["submit", str(env.work), "--persistent"])
    assert r.code == 2 and r.stderr.startswith("error: persistent: this job waits for a compile")


# ---------------------------------------------------------------- verdicts


def _lines(*texts: str) -> list[LogLine]:
    return [LogLine(t, "m_compile_7.out", i) for i, t in enumerate(texts, 1)]


def test_a_failed_compile_names_the_first_compiler_error() -> None:
    lines = _lines(
        "Job 7 started on n1: 1 node(s), 1 task(s)",
        "[ 33%] Building CXX object a.cpp.o",
        '/r/cpp/a.cu(42): error: identifier "x" is undefined',
        "/r/cpp/b.cu(7): error: second",
        "FAILED: tensorrt_llm/kernels/a.cu.o",
        "Job 7 finished with exit code 1",
    )
    d = decide_prerequisite("compile", "7", "FAILED", 1, lines)
    assert d.verdict is Verdict.COMPILE_FAILED and d.exit_status == 16 == VERDICT_EXIT[d.verdict]
    assert d.evidence == [
        "Slurm state FAILED, exit code 1",
        'm_compile_7.out:3: /r/cpp/a.cu(42): error: identifier "x" is undefined',
        "m_compile_7.out:5: FAILED: tensorrt_llm/kernels/a.cu.o",
    ]
    assert "test job never started" in d.reason


def test_a_compile_that_exits_0_passes_despite_error_words() -> None:
    lines = _lines("warning: treating error: as text", "Built wheel /w/wheel/t.whl")
    assert decide_prerequisite("compile", "7", "COMPLETED", 0, lines).verdict is Verdict.PASSED


def test_a_compile_out_of_time_is_a_timeout_and_a_failed_import_is_infra() -> None:
    d = decide_prerequisite("compile", "7", "TIMEOUT", 0, _lines("[ 40%] Building CXX object x"))
    assert d.verdict is Verdict.TIMEOUT and d.reason.startswith("the compile job 7: Slurm state")
    d = decide_prerequisite(
        "import", "6", "FAILED", 1, _lines("[ERROR] URL https://r/v2/x returned error code: 503")
    )
    assert d.verdict is Verdict.INFRA_FAILURE and "import job 6" in d.reason


def test_a_refused_test_job_takes_its_prerequisites_back(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _build(cli, env, compile=True, device_type="H100", sqsh_cache_dir="/c").code == 0
    argvs: list[list[str]] = []

    def slurm(argv: Sequence[str], cwd: Path | None = None, **_: object) -> CmdResult:
        argvs.append(list(argv))
        if argv[0] == "sbatch" and str(argv[-1]).endswith("tiny_auto_test.slurm"):
            return CmdResult(1, "", "sbatch: error: Batch job submission failed: Invalid account")
        return CmdResult(0, f"{50 + len(argvs)}\n")

    monkeypatch.setattr("trtllm_script_builder.process.host.run", slurm)
    r = cli(["submit", str(env.work)])
    assert r.code == 3 and r.stderr.startswith("error: sbatch: "), r.stderr
    assert argvs[-1] == ["scancel", "51", "52"]
    assert not (env.work / "submission.json").exists()


def test_a_remote_import_chain_is_copied_and_submitted_there(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _build(cli, env, "remote_slurm", sqsh_cache_dir="/lustre/sqsh").code == 0
    seen: dict[str, list[Any]] = {"copied": [], "argv": []}

    class FakeSsh:
        remote = True
        name = "login"
        shell = staticmethod(shell_here)

        def __init__(self, target: object) -> None:
            pass

        def check(self) -> CmdResult:
            return CmdResult(0)

        def copy(self, files: Sequence[Path], remote_dir: str) -> CmdResult:
            seen["copied"] += [Path(f).name for f in files]
            return CmdResult(0)

        def __call__(self, argv: Sequence[str], cwd: Path | None = None, **_: Any) -> CmdResult:
            seen["argv"].append(list(argv))
            return (
                CmdResult(0, f"{70 + len(seen['argv'])}\n") if argv[0] == "sbatch" else CmdResult(0)
            )

    monkeypatch.setattr("trtllm_script_builder.process.host.OverSsh", FakeSsh)
    sub = submit_mod.submit(env.work)
    remote = "/lustre/rtester/TensorRT-LLM/work_dirs/work"
    assert "import.slurm" in seen["copied"] and "tiny_auto_test.slurm" in seen["copied"]
    sbatches = [a for a in seen["argv"] if a[0] == "sbatch"]
    mark = sbatches[0][2]  # one Slurm comment for every job of one submit
    assert mark.startswith("--comment=tsb-submit-")
    assert sbatches == [
        ["sbatch", "--parsable", mark, f"{remote}/import.slurm"],
        [
            "sbatch",
            "--parsable",
            mark,
            f"--dependency=afterok:{70 + seen['argv'].index(sbatches[0]) + 1}",
            "--kill-on-invalid-dep=yes",
            f"{remote}/tiny_auto_test.slurm",
        ],
    ]
    assert sub.prerequisites and sub.prerequisites[0]["log_file"].startswith(
        f"{remote}/tiny_import_"
    )


@pytest.mark.parametrize(
    ("lines", "percent"),
    [
        # CMake's Makefile generator
        ("[  9%] Building CXX object a.o\n[ 45%] Building CUDA object b.o\n", "45%"),
        # Ninja, which TensorRT-LLM's CI builds with (build_wheel.py -G Ninja): done/total
        ("[1/400] Building CUDA object a.o\n[100/400] Building CXX object b.o\n", "25%"),
        ("[399/400] Linking CXX shared library libtensorrt_llm.so\n", "99%"),
    ],
)
def test_the_compile_progress_is_read_from_either_generator(
    tmp_path: Path, lines: str, percent: str
) -> None:
    from trtllm_script_builder.process.chain import PrerequisiteJob
    from trtllm_script_builder.process.handles import read_local

    from .test_batch_submit_watch import COMPILE_KEY, FakeSlurm

    log = tmp_path / "cc_301.out"
    log.write_text(lines)
    job = ChainJob("compile", COMPILE_KEY, "301", str(log), None)
    handle = PrerequisiteJob(job, FakeSlurm({}, {}), read_local, "h")
    handle.logs()
    assert handle.percent == percent


def test_a_build_wheel_that_can_prompt_is_told_not_to(cli, env: Env) -> None:
    """Newer build_wheel.py versions stop at an input() prompt unless --yes; a batch job has no
    terminal, so the prompt would end the build with EOFError (decision build-wheel-yes)."""
    build_wheel = env.repo / "scripts" / "build_wheel.py"
    text = build_wheel.read_text()
    assert '"--yes"' not in text  # the stand-in copies an older version: no option, no --yes
    r = _build(cli, env, compile=True, device_type="H100")
    assert r.code == 0 and "--yes" not in (env.work / "compile.slurm").read_text()
    build_wheel.write_text(
        text.replace(
            '    p.add_argument("--nvtx", action="store_true")\n',
            '    p.add_argument("--nvtx", action="store_true")\n'
            '    p.add_argument("--yes", "-y", action="store_true")\n',
        )
    )
    r = cli(["--force"], env.request(test_cmd=PYTEST_1, compile=True, device_type="H100"))
    assert r.code == 0, r.stderr
    text = (env.work / "compile.slurm").read_text()
    assert ' --nvtx --configure_cmake --yes --dist_dir "$DIST_DIR" --build_dir ' in text


def test_a_compile_batch_reads_build_wheel_once_and_sees_an_edit(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from trtllm_script_builder.resolve import compile as compile_mod

    reads: list[str] = []
    real = Path.read_text

    def counting(self: Path, *a: Any, **kw: Any) -> str:
        reads.append(self.name)
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", counting)
    req: Any = SimpleNamespace(repo_root=str(env.repo))
    first = compile_mod._build_wheel_text(req)
    assert compile_mod._build_wheel_text(req) == first
    assert reads.count("build_wheel.py") == 1
    path = env.repo / "scripts" / "build_wheel.py"
    path.write_text(first + "# edited\n")
    assert compile_mod._build_wheel_text(req).endswith("# edited\n")
    assert reads.count("build_wheel.py") == 2


def test_a_request_list_of_two_builds_gets_a_wheel_folder_per_build(env: Env, cli) -> None:
    """build-many shares one <work_dir>/wheel between the jobs of one build
    (decision batch-prerequisites); an entry that builds for another architecture gets its own
    folder, so submit, which refuses two builds in one wheel folder (decision one-wheel-per-folder),
    takes the batch."""
    from trtllm_script_builder.process.slurm_submit import (
        _refuse_shared_wheel_dirs,
        load_jobs,
        read_index,
    )

    base = env.request(compile=True, device_type="H100", test_cmd=None, work_dir=None)
    base_file = env.work.parent / "base.json"
    base_file.write_text(json.dumps(base))
    listing = env.work.parent / "list.yaml"
    listing.write_text(
        f"- {{test_cmd: '{PYTEST_1} -k a'}}\n"
        f"- {{test_cmd: '{PYTEST_1} -k b', cuda_arch: 100-real}}\n"
        f"- {{test_cmd: '{PYTEST_1} -k c'}}\n"
        f"- {{test_cmd: '{PYTEST_1} -k d', device_type: H200}}\n"  # 90-real too: one build
    )
    root = env.work.parent / "many"
    r = cli(["build-many", str(listing), "--base", str(base_file), "--work-dir", str(root)])
    assert r.code == 0, r.stderr
    rows = json.loads((root / "jobs.json").read_text())
    dist = []
    for row in rows:
        text = (Path(row["work_dir"]) / "compile.slurm").read_text()
        dist.append(text.split("export WHEEL_DIR=", 1)[1].split()[0].strip("'\""))
    assert dist[0] == dist[2] == dist[3] == str(root / "wheel") != dist[1]
    assert dist[1].startswith(str(root / "wheel-"))
    _refuse_shared_wheel_dirs(load_jobs(read_index(root), False))  # nothing to refuse
