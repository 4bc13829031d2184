"""The validation layer (model/values.py, decision one-validation-layer): what every value is
checked for, and that each refusal is one line naming the field with the value escaped and cut
short."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model import values
from trtllm_script_builder.model.request import load_request
from trtllm_script_builder.model.site_config import load_site_config
from trtllm_script_builder.model.slurm_env import load_slurm_env

from .conftest import SLURM_ENV

BASE = {"execution_scenario": "local_docker", "work_dir": "/tmp/w", "repo_root": "/tmp/r"}


def refusal(data: dict[str, Any]) -> BuildError:
    with pytest.raises(BuildError) as err:
        load_request({**BASE, **data}, Path("/"), {})
    line = err.value.line()
    assert "\n" not in line and len(line) < 1200, line
    return err.value


@pytest.mark.parametrize(
    "bad",
    ["\x00", "\x1b[2J", "\r", "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\udc80", "\x0b"],
)
@pytest.mark.parametrize("field", ["custom_cmd", "work_dir", "device_type", "container_image"])
def test_characters_no_script_can_carry_are_refused_in_every_field(field: str, bad: str) -> None:
    err = refusal({field: f"/x{bad}y"})
    assert err.field == field and "holds " in err.problem


@pytest.mark.parametrize("field", ["work_dir", "device_type", "model_name", "perf_test_name"])
@pytest.mark.parametrize("bad", ["x\n", "a\tb", "a\nb"])
def test_newlines_and_tabs_are_refused_in_one_line_fields(field: str, bad: str) -> None:
    assert refusal({field: bad}).field == field


@pytest.mark.parametrize("field", ["test_cmd", "eval_cmd", "bench_cmd", "custom_cmd"])
def test_commands_may_hold_lines_and_tabs(field: str) -> None:
    req = load_request({**BASE, field: "a\n\tb\n"}, Path("/"), {})
    assert getattr(req, field) == "a\n\tb\n"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("partition", "-x"),
        ("account", "--user=alice"),
        ("mpi_plugin", "-pmix"),
        ("device_type", "-H100"),
        ("perf_test_name", "--opt=value"),
        ("env_check", {"device_type": "-x"}),
    ],
)
def test_a_leading_dash_is_refused_where_no_double_dash_can_go(field: str, value: Any) -> None:
    err = refusal({field: value})
    assert err.field.startswith(field), err.line()


def test_the_error_line_shows_the_value_escaped_and_cut_short() -> None:
    err = refusal({"device_type": "a\nb" + "x" * 5000})
    assert "'a\\nb" in err.line() and "characters)" in err.line()


def test_sizes_are_bounded_with_the_field_named() -> None:
    err = refusal({"device_type": "x" * 140_000})
    assert err.field == "device_type" and "131072-byte limit" in err.problem
    err = refusal({"work_dir": "/" + "d" * 5000})
    assert err.field == "work_dir" and "bytes of a path" in err.problem


def test_any_error_line_is_one_line() -> None:
    """The safety net: an OS message or a value interpolated raw cannot start a line."""
    line = BuildError("f\n", "cannot read a\nb (x\x1b)" + "y" * 4000, "fix\r").line()
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert line.startswith("error: f\\n: cannot read a\\nb (x\\x1b)") and len(line) < 1100


@pytest.mark.parametrize(
    ("path", "ok"),
    [("/a/b", True), ("/a,b", False), ("/a:b", False), ('/a"b', False), ("/a b", True)],
)
def test_mount_paths(path: str, ok: bool) -> None:
    if ok:
        assert values.check_mount_path(path, "models_path") == path
    else:
        with pytest.raises(BuildError, match="mount lists cannot carry"):
            values.check_mount_path(path, "models_path")


def write_env(tmp_path: Path, **changes: Any) -> Path:
    path = tmp_path / "slurm_env.json"
    path.write_text(json.dumps({**SLURM_ENV, **changes}))
    return path


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"mounts": ["/a,/evil:/b"]}, "mounts[0]"),
        ({"mounts": ['/a:/b"c']}, "mounts[0]"),
        ({"mounts": ["/a:/b:ro,/evil"]}, "mounts[0]"),
        ({"mounts": ["relative:/b"]}, "mounts[0]"),
        ({"accounts": ["acct", "--user=x"]}, "accounts[1]"),
        ({"default_partition": "gpu\n"}, "default_partition"),
        ({"ssh_host": "-oProxyCommand=x"}, "ssh_host"),
        ({"remote_cwd": "home/me"}, "remote_cwd"),
        ({"cluster_name": "a\x1bb"}, "cluster_name"),
        ({"pmix": {"available": ["pmix"], "preferred": "pmix $(x)"}}, "pmix.preferred"),
    ],
)
def test_the_cluster_file_is_validated_like_a_request(
    tmp_path: Path, changes: dict[str, Any], key: str
) -> None:
    with pytest.raises(BuildError) as err:
        load_slurm_env(write_env(tmp_path, **changes))
    assert err.value.field == "slurm_env_file" and f": {key}: " in err.value.problem
    assert "\n" not in err.value.line()


def test_a_cluster_file_with_good_mounts_and_new_keys_is_taken(tmp_path: Path) -> None:
    env, raw = load_slurm_env(write_env(tmp_path, mounts=["/a:/b:ro", "/c:/d"], newer_key=1))
    assert env.mounts == ["/a:/b:ro", "/c:/d"] and raw["newer_key"] == 1


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("default_llm_models_root: models\n", "site config default_llm_models_root"),
        ('default_user_root_dir: "/a\\nb"\n', "site config default_user_root_dir"),
        ("a: &x /m\ndefault_llm_models_root: *x\n", "site config"),
        ("default_models_repo_host: !!binary AAAA\n", "site config"),
        ("surplus: 1\n", "site config surplus"),
    ],
)
def test_the_site_config_is_validated_like_a_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, field: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    monkeypatch.setenv("TRTLLM_SCRIPT_BUILDER_CONFIG", str(config))
    with pytest.raises(BuildError) as err:
        load_site_config()
    assert err.value.field == field and "\n" not in err.value.line()


def test_tree_problem_bounds_nesting() -> None:
    deep: Any = "x"
    for _ in range(40):
        deep = [deep]
    found = values.tree_problem({"a": deep})
    assert found is not None and "nests deeper than 32" in found[1]
    assert values.tree_problem({"a": [["x"]], "b": {"c": "d"}}) is None


@pytest.mark.parametrize("host", ['/data/a"b', "/data/a,b", "/data/a:b"])
def test_docker_mount_options_refuse_what_docker_would_split(host: str) -> None:
    from trtllm_script_builder.render.docker import docker_run
    from trtllm_script_builder.resolve.mounts import Mount

    with pytest.raises(BuildError) as err:
        docker_run(
            name="n", image="img", gpus=1, mounts=[Mount(host, "/models:ro", "models_path")],
            env=[], install=False, wheel=False, eval_requirements=False, custom_env=False,
            has_prep=False,
        )  # fmt: skip
    assert err.value.field == "models_path"


@pytest.mark.parametrize(
    ("key", "value"),
    [("job_id", "--user=alice"), ("container_name", "-x"), ("host", "a\nb"), ("job_id", "1 2")],
)
def test_an_edited_submission_is_refused_before_any_program_sees_it(
    tmp_path: Path, key: str, value: str
) -> None:
    """watch would run `scancel <job_id>` or `docker kill <container_name>`."""
    sub = {
        "scenario": "local_slurm",
        "work_dir": str(tmp_path),
        "submitted_at": "now",
        "host": "h",
        "script": "/x.slurm",
        "job_id": "12",
        key: value,
    }
    (tmp_path / "submission.json").write_text(json.dumps(sub))
    (tmp_path / "job_spec.json").write_text("{}")
    from trtllm_script_builder.process.submission import load_submission

    with pytest.raises(BuildError) as err:
        load_submission(tmp_path)
    assert err.value.field == "work_dir" and key in err.value.problem
    assert "\n" not in err.value.line()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("script_path", "--wrap=touch x"),
        ("remote_work_dir", "rel"),
        ("ssh_host", "-oProxyCommand=x"),
        ("container_name", "a b"),
    ],
)
def test_an_edited_job_spec_is_refused_before_any_program_sees_it(
    tmp_path: Path, key: str, value: str
) -> None:
    from trtllm_script_builder.process.spec_file import read_job_spec

    golden = Path(__file__).parent / "golden"
    spec = json.loads(next(golden.rglob("job_spec.json")).read_text())
    (tmp_path / "job_spec.json").write_text(json.dumps({**spec, key: value}))
    with pytest.raises(BuildError) as err:
        read_job_spec(tmp_path)
    assert err.value.field == "work_dir" and f": {key}: " in err.value.problem


def test_file_names_of_the_checkout_that_no_line_can_carry_are_left_out(tmp_path: Path) -> None:
    from trtllm_script_builder.resolve.checkout import compiled_bindings

    pkg = tmp_path / "tensorrt_llm"
    pkg.mkdir()
    (pkg / "bindings.cpython-312-x86_64-linux-gnu.so").write_text("")
    (pkg / "bindings\x1b[2J\n.so").write_text("")
    assert compiled_bindings(str(tmp_path)) == [
        "tensorrt_llm/bindings.cpython-312-x86_64-linux-gnu.so"
    ]


def test_an_array_task_id_is_a_job_id() -> None:
    assert values.JOB_ID.fullmatch("529_0") and values.JOB_ID.fullmatch("12")
    for bad in ("-1", "--user=x", "1 2", "1_", "_1", "1\n"):
        assert not values.JOB_ID.fullmatch(bad)
