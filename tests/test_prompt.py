"""A missing value is asked for on a terminal, and refused without one.

`build` and `run` share one prompter: end of input at the prompt (Ctrl-D, a closed stdin) is
the field's refusal with exit 2, and an empty answer is asked again a few times.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from trtllm_script_builder.cli import main
from trtllm_script_builder.cli import prompt as prompt_module

from .conftest import Env


def _read_until(fd: int, text: bytes, timeout: float = 20) -> bytes:
    seen = b""
    end = time.monotonic() + timeout
    while text not in seen and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return seen


def _request_without_models_root(env: Env, tmp_path: Path) -> Path:
    req = env.request(test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one")
    del req["llm_models_root"]
    f = tmp_path / "req.json"
    f.write_text(json.dumps(req))
    return f


def _build_on_a_terminal(
    env: Env, tmp_path: Path, command: str = "build"
) -> tuple[subprocess.Popen[bytes], int]:
    """A build (or run) whose request lacks llm_models_root, stdin and stderr on a pseudo-terminal."""
    f = _request_without_models_root(env, tmp_path)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trtllm_script_builder", command, str(f)],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
        env={**os.environ, "HOME": str(env.home)},
    )
    os.close(slave)
    return proc, master


def test_models_root_is_asked_on_a_terminal(env: Env, tmp_path: Path) -> None:
    proc, master = _build_on_a_terminal(env, tmp_path)
    try:
        prompt = _read_until(master, b"[llm_models_root]")
        assert b"Models root inside the container" in prompt
        os.write(master, b"/asked/models\n")
        offer = _read_until(master, b"[y/N]")
        assert b"Save default_llm_models_root: /asked/models to " in offer
        os.write(master, b"n\n")
        out, _ = proc.communicate(timeout=30)
    finally:
        os.close(master)
    assert proc.returncode == 0
    assert (
        json.loads((env.work / "job_spec.json").read_text())["llm_models_root"] == "/asked/models"
    )
    assert b"Generated:" in out
    assert not (env.home / ".config").exists()  # declined: nothing saved


def test_without_a_terminal_it_names_field_flag_and_key(env: Env, tmp_path: Path) -> None:
    req = env.request(test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one")
    del req["llm_models_root"]
    f = tmp_path / "req.json"
    f.write_text(json.dumps(req))
    done = subprocess.run(
        [sys.executable, "-m", "trtllm_script_builder", "build", str(f)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(env.home)},
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: llm_models_root: ")
    assert "--llm-models-root" in done.stderr and "default_llm_models_root" in done.stderr


def test_end_of_input_at_the_prompt_is_the_same_refusal(env: Env, tmp_path: Path) -> None:
    proc, master = _build_on_a_terminal(env, tmp_path)
    try:
        _read_until(master, b"[llm_models_root]")
        os.write(master, b"\x04")  # Ctrl-D
        proc.communicate(timeout=30)
        said = _read_until(master, b"site config", timeout=5)
    finally:
        os.close(master)
    assert proc.returncode == 2
    assert b"error: llm_models_root: is not given" in said
    assert not env.work.exists()


def test_end_of_input_at_the_run_prompt_is_the_same_refusal(env: Env, tmp_path: Path) -> None:
    proc, master = _build_on_a_terminal(env, tmp_path, "run")
    try:
        _read_until(master, b"[llm_models_root]")
        os.write(master, b"\x04")  # Ctrl-D
        proc.communicate(timeout=30)
        said = _read_until(master, b"site config", timeout=5)
    finally:
        os.close(master)
    assert proc.returncode == 2
    assert b"error: llm_models_root: is not given" in said
    assert not env.work.exists()


# In process, with click's runner: stdin is declared a terminal, and the input is what a person
# would type (or nothing, for end of input).


@pytest.fixture()
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prompt_module, "stdin_is_terminal", lambda: True)


@pytest.mark.parametrize("command", ["build", "run"])
@pytest.mark.parametrize("typed", ["", "\n", "\n \n"], ids=["eof", "empty-eof", "blank-eof"])
def test_end_of_input_is_the_field_refusal(
    env: Env, tmp_path: Path, terminal: None, command: str, typed: str
) -> None:
    f = _request_without_models_root(env, tmp_path)
    r = CliRunner().invoke(main, [command, str(f)], input=typed)
    assert r.exit_code == 2, r.output
    last = r.stderr.splitlines()[-1]
    assert last.startswith("error: llm_models_root: is not given")
    assert "--llm-models-root" in last and "default_llm_models_root" in last
    assert "Aborted" not in r.output
    assert not env.work.exists()


@pytest.mark.parametrize("command", ["build", "run"])
def test_only_empty_answers_are_refused_after_a_few(
    env: Env, tmp_path: Path, terminal: None, command: str
) -> None:
    f = _request_without_models_root(env, tmp_path)
    typed = "\n" * prompt_module.ATTEMPTS + "/too/late\n"
    r = CliRunner().invoke(main, [command, str(f)], input=typed)
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines()[-1].startswith("error: llm_models_root: is not given")
    assert r.stderr.count("llm_models_root needs a value") == prompt_module.ATTEMPTS - 1
    assert not env.work.exists()


def test_an_empty_answer_is_asked_again(env: Env, tmp_path: Path, terminal: None) -> None:
    f = _request_without_models_root(env, tmp_path)
    r = CliRunner().invoke(main, ["build", str(f)], input="\n   \n /asked/models \n")
    assert r.exit_code == 0, r.output
    assert r.stderr.count("llm_models_root needs a value") == 2
    spec = json.loads((env.work / "job_spec.json").read_text())
    assert spec["llm_models_root"] == "/asked/models"


def test_a_request_on_stdin_is_never_prompted(env: Env, tmp_path: Path, terminal: None) -> None:
    f = _request_without_models_root(env, tmp_path)
    r = CliRunner().invoke(main, ["build", "-"], input=f.read_text())
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error: llm_models_root: is not given")
    assert "[llm_models_root]" not in r.output


# A bad answer is asked again with its reason; at the end the site-wide answers may be saved.

CONFIG = Path(".config") / "trtllm-script-builder" / "config.yaml"


def _request_without_models(env: Env, tmp_path: Path) -> Path:
    """Neither the models root nor the host's models folder: both are asked, in this order."""
    req = env.request(test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one")
    del req["llm_models_root"], req["models_path"]
    f = tmp_path / "req.json"
    f.write_text(json.dumps(req))
    return f


@pytest.mark.parametrize("command", ["build", "run"])
def test_a_bad_answer_is_asked_again_with_why(
    env: Env, tmp_path: Path, terminal: None, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if command == "run":  # the build is what is tested: stop at submit
        from trtllm_script_builder.process import submit as submit_module

        def no_submit(*_a: object, **_k: object) -> None:
            raise SystemExit(0)

        monkeypatch.setattr(submit_module, "submit", no_submit)
    f = _request_without_models_root(env, tmp_path)
    r = CliRunner().invoke(main, [command, str(f)], input="models\n/asked/models\nn\n")
    assert r.exit_code == 0, r.output
    said = [ln for ln in r.stderr.splitlines() if "absolute" in ln]
    assert said == ["llm_models_root: 'models' is not an absolute path; give the full path"]
    assert r.stderr.count("[llm_models_root]") == 2
    spec = json.loads((env.work / "job_spec.json").read_text())
    assert spec["llm_models_root"] == "/asked/models"
    assert not (env.home / CONFIG).exists()


def test_bad_answers_until_the_last_attempt_refuse_with_the_reason(
    env: Env, tmp_path: Path, terminal: None
) -> None:
    f = _request_without_models_root(env, tmp_path)
    typed = "a,b\n" * prompt_module.ATTEMPTS + "/too/late\n"
    r = CliRunner().invoke(main, ["build", str(f)], input=typed)
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines()[-1] == (
        "error: llm_models_root: 'a,b' holds ',', which pyxis/docker mount lists cannot carry; "
        "use a path without it (a symlink works)"
    )
    assert not env.work.exists()


def test_earlier_answers_are_kept_and_saved_merged_into_the_site_config(
    env: Env, tmp_path: Path, terminal: None
) -> None:
    config = env.home / CONFIG
    config.parent.mkdir(parents=True)
    config.write_text("# my site\nenroot_uri_rewrite: false\ndefault_llm_models_root: /old\n")
    f = _request_without_models(env, tmp_path)
    # the config supplies the models root: only the host folder is asked, bad then good
    typed = "/host/a:b\n/host/models\ny\n"
    r = CliRunner().invoke(main, ["build", str(f)], input=typed)
    assert r.exit_code == 0, r.output
    assert r.stderr.count("[models_path]") == 2 and "[llm_models_root]" not in r.stderr
    assert f"saved to {config}" in r.stderr
    assert config.read_text() == (
        "# my site\nenroot_uri_rewrite: false\ndefault_llm_models_root: /old\n"
        'default_models_repo_host: "/host/models"\n'
    )

    # both asked: the first answer is kept while the second is asked again
    config.unlink()
    typed = "/root/models\nrelative\n/host/models\ny\n"
    r = CliRunner().invoke(main, ["build", str(f), "--force"], input=typed)
    assert r.exit_code == 0, r.output
    assert r.stderr.count("[llm_models_root]") == 1 and r.stderr.count("[models_path]") == 2
    spec = json.loads((env.work / "job_spec.json").read_text())
    assert spec["llm_models_root"] == "/root/models"
    import yaml

    from trtllm_script_builder.model.site_config import load_site_config

    assert yaml.safe_load(config.read_text()) == {
        "default_llm_models_root": "/root/models",
        "default_models_repo_host": "/host/models",
    }
    site = load_site_config()
    assert (site.default_llm_models_root, site.default_models_repo_host) == (
        "/root/models",
        "/host/models",
    )
    # saved: the next build asks nothing
    r = CliRunner().invoke(main, ["build", str(f), "--force"], input="")
    assert r.exit_code == 0, r.output
    assert "[" not in r.stderr


@pytest.mark.parametrize("typed", ["n\n", "\n", ""], ids=["no", "default", "eof"])
def test_declining_or_ctrl_d_saves_nothing(
    env: Env, tmp_path: Path, terminal: None, typed: str
) -> None:
    f = _request_without_models_root(env, tmp_path)
    r = CliRunner().invoke(main, ["build", str(f)], input="/asked/models\n" + typed)
    assert r.exit_code == 0, r.output
    assert "Save default_llm_models_root: /asked/models to " in r.stderr
    assert not (env.home / ".config").exists()
    assert "saved" not in r.stderr


def test_nothing_typed_nothing_offered(env: Env, tmp_path: Path, terminal: None) -> None:
    f = tmp_path / "req.json"
    f.write_text(
        json.dumps(env.request(test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one"))
    )
    r = CliRunner().invoke(main, ["build", str(f)], input="y\n")
    assert r.exit_code == 0, r.output
    assert "Save" not in r.stderr and not (env.home / ".config").exists()


def test_a_dry_run_offers_no_save(env: Env, tmp_path: Path, terminal: None) -> None:
    f = _request_without_models_root(env, tmp_path)
    r = CliRunner().invoke(main, ["build", str(f), "--dry-run"], input="/asked/models\ny\n")
    assert r.exit_code == 0, r.output
    assert "Save" not in r.stderr and not (env.home / ".config").exists()


def test_a_merge_is_checked_as_the_site_config_is_read(tmp_path: Path) -> None:
    """What the save would write must load: a file the loader refuses is refused here too."""
    from trtllm_script_builder.errors import BuildError
    from trtllm_script_builder.model.site_config import merged_site_config

    path = tmp_path / "config.yaml"
    ok = merged_site_config("# mine\n", {"default_llm_models_root": "/models"}, path)
    assert ok == '# mine\ndefault_llm_models_root: "/models"\n'
    for existing in ("a: &x 1\nb: *x\n", "no_such_key: 1\n", "default_user_root_dir: rel\n"):
        with pytest.raises(BuildError):
            merged_site_config(existing, {"default_llm_models_root": "/models"}, path)
