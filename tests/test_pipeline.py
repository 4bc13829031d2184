"""The pipeline's seams: resolve decides everything once into a frozen job, render reads only
that job, and the fixes that came with the split (one prompt per field, GPU-count warnings)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from trtllm_script_builder.build import build, load_cluster
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.request import Request, load_request
from trtllm_script_builder.model.site_config import SiteConfig
from trtllm_script_builder.render.job import render_job
from trtllm_script_builder.resolve.job import resolve

from .conftest import Env

EVAL_16 = "trtllm-eval --model org/Tiny-Model --tp_size 8 --pp_size 2 gsm8k"


def _req(env: Env, **fields: Any) -> Request:
    return load_request(env.request(**fields), env.root, {})


def _bytes(result: Any) -> list[tuple[str, str, bool]]:
    return [(f.name, f.text, f.executable) for f in result.files]


def test_the_resolved_job_is_frozen_and_render_needs_nothing_else(env: Env) -> None:
    req = _req(env, eval_cmd="trtllm-eval --model org/Tiny-Model --tp_size 2 mmlu")
    job = resolve(req, load_cluster(req), SiteConfig())
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.name = "other"  # type: ignore[misc]
    first = _bytes(render_job(job))
    # Rendering reads no file: with the repo and the cluster file gone it gives the same bytes.
    shutil.rmtree(env.repo)
    env.slurm_env.unlink()
    assert _bytes(render_job(job)) == first
    assert first == _bytes(build(_req_after_restore(env, req)))


def _req_after_restore(env: Env, req: Request) -> Request:
    from .conftest import make_repo

    make_repo(env.repo)
    env.write_env()
    return req


def test_partition_is_decided_once_and_rendered_from_the_job(env: Env) -> None:
    req = _req(env, test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one")
    job = resolve(req, load_cluster(req), SiteConfig())
    assert job.slurm is not None and job.slurm.partition == "gpu"
    moved = dataclasses.replace(job, slurm=job.slurm.model_copy(update={"partition": "elsewhere"}))
    result = render_job(moved)
    script = next(f.text for f in result.files if f.name.endswith(".slurm"))
    assert "#SBATCH --partition=elsewhere" in script
    assert result.spec.slurm_params is not None
    assert result.spec.slurm_params.partition == "elsewhere"


def test_a_two_node_eval_asks_for_each_field_once(env: Env) -> None:
    req = _req(env, eval_cmd=EVAL_16, models_path=None)
    asked: list[str] = []

    def ask(field: str, question: str) -> str:
        asked.append(field)
        return str(env.repo / "models")

    result = build(req, SiteConfig(), ask)
    assert result.spec.category == 5 and result.spec.node_count == 2
    assert asked == ["models_path"]


def test_an_answer_is_reused_when_a_field_is_needed_again(env: Env) -> None:
    req = _req(env, eval_cmd=EVAL_16, models_path=None, llm_models_root=None)
    asked: list[str] = []

    def ask(field: str, question: str) -> str:
        asked.append(field)
        return "/models" if field == "llm_models_root" else str(env.repo / "models")

    build(req, SiteConfig(), ask)
    assert sorted(asked) == ["llm_models_root", "models_path"]


@pytest.mark.parametrize(
    ("field", "cmd", "name"),
    [
        ("eval_cmd", "trtllm-eval --model org/Tiny-Model --tp_size 2 --pp_size 2 mmlu", "eval"),
        ("eval_cmd", EVAL_16, "eval"),
        (
            "bench_cmd",
            "trtllm-bench --model org/Tiny-Model throughput --dataset /tmp/d.json --tp 4",
            "trtllm-bench",
        ),
    ],
)
def test_eval_and_bench_warn_when_required_devices_differs(
    env: Env, field: str, cmd: str, name: str
) -> None:
    result = build(_req(env, **{field: cmd, "required_devices": 3}))
    notes = [w for w in result.spec.warnings if w.startswith("required_devices 3 ")]
    assert len(notes) == 1, result.spec.warnings
    assert f"using {result.spec.required_devices}" in notes[0]
    assert result.spec.required_devices in (4, 16)


def test_eval_and_bench_say_nothing_when_required_devices_agrees(env: Env) -> None:
    cmd = "trtllm-eval --model org/Tiny-Model --tp_size 2 --pp_size 2 mmlu"
    result = build(_req(env, eval_cmd=cmd, required_devices=4))
    assert not [w for w in result.spec.warnings if "required_devices" in w]


@pytest.mark.parametrize("count", [0])
def test_a_marker_of_no_gpus_is_sized_as_one_with_a_warning(env: Env, count: int) -> None:
    defs = env.repo / "tests" / "integration" / "defs" / "accuracy"
    (defs / "test_zero.py").write_text(
        f"import pytest\n\n\n@pytest.mark.skip_less_device({count})\ndef test_zero():\n    pass\n"
    )
    result = build(_req(env, test_cmd="pytest accuracy/test_zero.py::test_zero"))
    assert result.spec.required_devices == 1
    assert any(
        f"skip_less_device({count})" in w and "sized as 1" in w for w in result.spec.warnings
    )


def test_a_refused_answer_stops_the_build(env: Env) -> None:
    req = _req(env, eval_cmd=EVAL_16, models_path=None)
    with pytest.raises(BuildError) as err:
        build(req, SiteConfig())
    assert err.value.field == "models_path"


def test_same_request_same_resolved_job(env: Env) -> None:
    req = _req(env, bench_cmd="trtllm-bench --model org/Tiny-Model throughput --tp 2")
    cluster = load_cluster(req)
    assert resolve(req, cluster, SiteConfig()) == resolve(req, cluster, SiteConfig())
    assert Path(req.work_dir) == env.work


def test_a_partition_without_gpus_is_named_as_such(env: Env) -> None:
    env.write_env(
        partitions=[
            {"name": "gpu", "state": "up", "time_limit": "4:00:00", "nodes": "1",
             "arch": "x86_64", "gres": "gpu:8", "gpus_per_node": 8, "requires_gres": True},
            {"name": "cpu", "state": "up", "time_limit": "1:00:00", "nodes": "1",
             "arch": "x86_64", "gres": "(null)", "gpus_per_node": None, "requires_gres": False},
        ]
    )  # fmt: skip
    with pytest.raises(BuildError) as err:
        build(
            _req(env, test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one", partition="cpu")
        )
    assert err.value.field == "partition" and "has no GPUs" in err.value.line()
    assert "GPU partition" in err.value.line()


@pytest.mark.parametrize(
    ("field", "value", "near"), [("partition", "gpux", "gpu"), ("account", "acc", "acct")]
)
def test_a_near_name_is_suggested(env: Env, field: str, value: str, near: str) -> None:
    req = _req(env, test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one", **{field: value})
    with pytest.raises(BuildError) as err:
        build(req)
    assert err.value.field == field and f"did you mean {near}?" in err.value.line()


CI_OPTS = "--timeout-method=thread --output-dir={work} -o junit_logging=out-err"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, "--timeout=3600 " + CI_OPTS),
        ({"test_timeout": 900}, "--timeout=900 " + CI_OPTS),
        # Slurm's 30 minutes end the job before an hour per test; no timeout, so no method
        ({"time_limit": "30"}, CI_OPTS.replace("--timeout-method=thread ", "")),
        ({"test_timeout": 600, "time_limit": "30"}, "--timeout=600 " + CI_OPTS),
    ],
)
def test_pytest_jobs_get_a_per_test_timeout_and_cis_options(
    env: Env, fields: dict[str, Any], expected: str
) -> None:
    test = "pytest accuracy/test_tiny.py::TestTiny::test_one"
    req = _req(env, test_cmd=test, **fields)
    job = resolve(req, load_cluster(req), SiteConfig())
    exports = dict(job.exports)
    # as jenkins/scripts/slurm_run.sh runs pytest (decision pytest-as-ci)
    assert exports.get("PYTEST_ADDOPTS") == expected.format(work=env.work)
    assert exports["TEST_CMD"] == test  # the command arrives as written


def test_a_command_with_its_own_options_keeps_them(env: Env) -> None:
    test = "pytest accuracy/test_tiny.py::TestTiny::test_one --timeout=60 --timeout-method=signal --junitxml=r.xml"
    req = _req(env, test_cmd=test, workflow_type="pytest")
    assert dict(resolve(req, load_cluster(req), SiteConfig()).exports)["PYTEST_ADDOPTS"] == (
        f"--output-dir={env.work}"
    )
    # outside tests/integration/defs pytest knows no --output-dir
    (env.repo / "tests" / "unittest").mkdir(parents=True)
    (env.repo / "tests" / "unittest" / "test_u.py").write_text("def test_u():\n    pass\n")
    req = _req(env, test_cmd="pytest tests/unittest/test_u.py --junitxml=r.xml")
    opts = dict(resolve(req, load_cluster(req), SiteConfig()).exports)["PYTEST_ADDOPTS"]
    assert opts == "--timeout=3600 --timeout-method=thread"


@pytest.mark.parametrize(
    ("where", "limit", "expected"),
    [
        ("class", "02:00:00", "02:30:00"),  # 7200 s mark + 30 min for install and start-up
        ("function", "02:00:00", "03:10:00"),  # the function's mark wins over its class's
        ("function", "05:00:00", "05:00:00"),  # already long enough: kept
        (None, "02:00:00", "02:00:00"),
    ],
)
def test_a_timeout_mark_raises_the_time_limit(
    env: Env, where: str | None, limit: str, expected: str
) -> None:
    cls_mark = "@pytest.mark.timeout(7200)\n" if where else ""
    fn_mark = "    @pytest.mark.timeout(9600)\n" if where == "function" else ""
    (env.repo / "tests" / "integration" / "defs" / "accuracy" / "test_long.py").write_text(
        f"import pytest\n\n{cls_mark}class TestLong:\n{fn_mark}    def test_it(self):\n        pass\n"
    )
    req = _req(env, test_cmd="pytest accuracy/test_long.py::TestLong::test_it", time_limit=limit)
    job = resolve(req, load_cluster(req), SiteConfig())
    assert job.slurm is not None and job.slurm.time_limit == expected
    assert any("pytest.mark.timeout" in w for w in job.warnings) == (expected != limit)


def _wheel(env: Env, where: Path | None = None) -> Path:
    folder = where or env.repo / "build"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "tensorrt_llm-1.2.0-cp312-cp312-linux_x86_64.whl"
    wheel.write_bytes(b"PK")
    return wheel


def test_a_wheel_is_installed_instead_of_the_checkout(env: Env, tmp_path: Path) -> None:
    wheel = _wheel(env)
    result = build(
        _req(env, test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one", wheel=str(wheel))
    )
    script = next(f.text for f in result.files if f.name.endswith(".slurm"))
    assert f"export WHEEL_PATH={wheel}\n" in script
    assert (
        'pip install --retries 10 --timeout 60 --no-deps --force-reinstall "$WHEEL_PATH"' in script
    )
    assert "-e ." not in script
    check = tmp_path / "s.sh"
    check.write_text(script)
    subprocess.run(["bash", "-n", str(check)], check=True)
    if shutil.which("shellcheck"):
        done = subprocess.run(["shellcheck", str(check)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout


def test_a_wheel_on_docker_and_a_remote_wheel_outside_the_repo(env: Env) -> None:
    wheel = _wheel(env)
    req = _req(
        env,
        scenario="local_docker",
        test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one",
        wheel=str(wheel),
    )
    spec = build(req).spec
    assert f"--env WHEEL_PATH={wheel}" in (spec.docker_cmd or "")
    assert "--force-reinstall" in (spec.docker_cmd or "")
    outside = _wheel(env, env.root / "wheels")
    req = _req(
        env,
        scenario="remote_slurm",
        test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one",
        wheel=str(outside),
    )
    result = build(req)
    assert str(outside) in result.spec.extra_files  # shipped with the job
    script = next(f.text for f in result.files if f.name.endswith(".slurm"))
    assert f"export WHEEL_PATH={result.spec.remote_work_dir}/{outside.name}\n" in script


@pytest.mark.parametrize("name", ["missing.whl", "not_a_wheel.tar.gz"])
def test_a_wheel_that_is_not_there_is_refused(env: Env, name: str) -> None:
    path = env.repo / name
    if name.endswith(".gz"):
        path.write_text("x")
    with pytest.raises(BuildError) as err:
        build(
            _req(env, test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one", wheel=str(path))
        )
    assert err.value.field == "wheel"


def test_a_misspelt_field_gets_the_nearest_name(env: Env, cli) -> None:
    req = env.request(test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one")
    req["tset_cmd"] = req.pop("test_cmd")
    r = cli([], req)
    assert r.code == 2 and r.stderr.startswith(
        "error: tset_cmd: is not a request field; did you mean test_cmd?"
    )


def test_a_missing_argument_says_which(cli) -> None:
    r = cli(["check"])
    assert r.code == 2 and r.stderr.startswith("error: work_dir: Missing argument 'WORK_DIR'; see ")
    assert r.stderr.count("\n") == 1


def test_standard_input_takes_yaml_as_well_as_json(env: Env, cli) -> None:
    import yaml
    from click.testing import CliRunner

    from trtllm_script_builder.cli import main

    req = env.request(test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one")
    res = CliRunner().invoke(main, ["build", "-", "--json"], input=yaml.safe_dump(req))
    assert res.exit_code == 0, res.stderr
    assert '"workflow_type": "pytest"' in res.stdout


def test_a_relative_site_config_path_is_refused(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRTLLM_SCRIPT_BUILDER_CONFIG", "config/config.yaml")
    r = cli([], env.request(test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one"))
    assert r.code == 2 and r.stderr.startswith("error: TRTLLM_SCRIPT_BUILDER_CONFIG: ")
    assert "absolute path" in r.stderr
