"""Values never become options of a program we run: an image, an ssh host or a job id that
starts with `-` is refused before any program sees it."""

from __future__ import annotations

import json

import pytest

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.process.persistent import load_state, state_dir
from trtllm_script_builder.process.ssh import SshTarget

from .conftest import Env


@pytest.mark.parametrize("image", ["--volume=/:/host", "-v", "img\nx", "img\x1b[2J"])
def test_an_image_that_is_an_option_or_holds_control_characters_is_refused(
    env: Env, cli, image: str
) -> None:
    r = cli([], env.request("local_docker", custom_cmd="true", container_image=image))
    assert r.code == 2 and r.stderr.startswith("error: container_image: "), r.stderr
    assert r.stderr.count("\n") == 1 and not env.work.exists()


@pytest.mark.parametrize("host", ["-V", "-oProxyCommand=touch /tmp/x", "host name", "a\nb", ""])
def test_an_ssh_host_that_is_an_option_is_refused(host: str) -> None:
    with pytest.raises(BuildError) as err:
        SshTarget(host)
    assert err.value.field == "ssh_host" and "\n" not in err.value.line()


@pytest.mark.parametrize("host", ["cluster", "me@login.example.com", "login-01", "[::1]"])
def test_ordinary_hosts_pass(host: str) -> None:
    assert SshTarget(host).line_argv("true")[-3:] == [host, "--", "true"]


def test_a_state_file_job_id_that_is_an_option_is_ignored(tmp_path) -> None:
    """`release` would run `scancel <job_id>`: a forged `--user=NAME` must never get there."""
    folder = state_dir(tmp_path)
    folder.mkdir()
    state = {
        "job_id": "--user=alice",
        "partition": "gpu",
        "account": "a",
        "nodes": 1,
        "gpus_per_node": 1,
        "docker_image": "img",
        "allocated_at": "now",
        "time_limit": "1:00:00",
    }
    (folder / ".slurm_alloc.json").write_text(json.dumps(state))
    assert load_state(tmp_path) is None
    (folder / ".slurm_alloc.json").write_text(json.dumps({**state, "job_id": "123"}))
    loaded = load_state(tmp_path)
    assert loaded is not None and loaded.job_id == "123"


def test_a_command_over_the_one_argument_limit_is_refused(env: Env, cli) -> None:
    """srun and docker would fail with "Argument list too long" when the job starts."""
    long = "echo " + "x" * 140_000
    r = cli([], env.request(custom_cmd=long))
    assert r.code == 2 and r.stderr.startswith("error: custom_cmd: is ") and "131072" in r.stderr
    assert not env.work.exists()
    assert cli([], env.request(custom_cmd="echo " + "x" * 100_000)).code == 0


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (BOMB, "aliases"),
        ("custom_cmd: !!binary ZWNobwBoaQ==\n", "binary"),
        ("work_dir: !!binary L3RtcA==\n", "binary"),
        ("model_name: 2026-01-01\n", "timestamp"),
    ],
)
def test_yaml_that_is_no_request_is_refused_quickly(tmp_path, text: str, words: str) -> None:
    import time

    from trtllm_script_builder.model.request import read_request_file

    f = tmp_path / "req.yaml"
    f.write_text(text)
    start = time.process_time()  # this process's CPU time: what a busy machine does not stretch
    with pytest.raises(BuildError) as err:
        read_request_file(str(f))
    assert time.process_time() - start < 2
    assert err.value.field == "request" and words in err.value.line()
    assert "\n" not in err.value.line()


def test_an_error_line_shows_a_long_value_cut_short(env: Env, cli) -> None:
    r = cli([], {**env.request(custom_cmd="true"), "model_name": "x" * 100_000 + "!"})
    assert r.code == 2 and r.stderr.startswith("error: model_name: ") and len(r.stderr) < 500


def test_no_traceback_for_a_lone_surrogate_or_deep_nesting(env: Env, cli, tmp_path) -> None:
    r = cli([], {**env.request(custom_cmd="true"), "custom_cmd": "echo \udc80"})
    assert r.code == 2 and r.stderr.startswith("error: custom_cmd: holds a lone surrogate")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    for field in ("slurm_env_file", "job_spec_file"):
        r = cli([], env.request(custom_cmd="true", **{field: str(deep)}))
        assert r.code == 2 and r.stderr.startswith(f"error: {field}: "), r.stderr
        assert r.stderr.count("\n") == 1
