"""Shell completion: the scripts are valid shell and a real bash completes from them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from trtllm_script_builder.cli import main

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture()
def program(tmp_path: Path) -> Path:
    """A `trtllm-script-builder` on PATH that runs this checkout (installed or not)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "trtllm-script-builder"
    exe.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(SRC)!r})\n"
        "from trtllm_script_builder.cli import main\nmain()\n"
    )
    exe.chmod(0o755)
    return exe


def source(shell: str) -> str:
    r = CliRunner().invoke(main, ["completion", shell])
    assert r.exit_code == 0, r.output
    return r.stdout


def complete_in_bash(program: Path, script: Path, words: list[str]) -> list[str]:
    """Source the script in a real bash and run its completion function on `words`."""
    line = " ".join(words)
    driver = (
        f"source {script}\n"
        f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMPREPLY=()\n"
        "_trtllm_script_builder_completion trtllm-script-builder\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{program.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", driver], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [w for w in done.stdout.splitlines() if w]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_prints_a_script_naming_the_program(shell: str) -> None:
    text = source(shell)
    assert "_TRTLLM_SCRIPT_BUILDER_COMPLETE" in text
    assert "trtllm-script-builder" in text
    if shell == "zsh":
        assert text.startswith("#compdef trtllm-script-builder")


def test_bash_script_is_valid_bash(tmp_path: Path) -> None:
    script = tmp_path / "c.bash"
    script.write_text(source("bash"))
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_zsh_script_is_valid_zsh(tmp_path: Path) -> None:
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed")
    script = tmp_path / "c.zsh"
    script.write_text(source("zsh"))
    done = subprocess.run(["zsh", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_completion_is_what_clicks_environment_variable_gives(program: Path) -> None:
    env = {**os.environ, "_TRTLLM_SCRIPT_BUILDER_COMPLETE": "bash_source"}
    done = subprocess.run([str(program)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == source("bash").strip()


def test_bash_completes_commands_options_and_choices(program: Path, tmp_path: Path) -> None:
    script = tmp_path / "c.bash"
    script.write_text(source("bash"))
    assert "build" in complete_in_bash(program, script, ["trtllm-script-builder", "bu"])
    assert complete_in_bash(program, script, ["trtllm-script-builder", "compl"]) == ["completion"]
    assert "--execution-scenario" in complete_in_bash(
        program, script, ["trtllm-script-builder", "build", "--exec"]
    )
    assert complete_in_bash(program, script, ["trtllm-script-builder", "schema", "job"]) == [
        "job-spec"
    ]


def test_unknown_shell_is_a_usage_error() -> None:
    r = CliRunner().invoke(main, ["completion", "fish"])
    assert r.exit_code == 2
    assert "bash" in r.stderr and "zsh" in r.stderr


def test_bash_completes_the_request_choices(program: Path, tmp_path: Path) -> None:
    script = tmp_path / "c.bash"
    script.write_text(source("bash"))
    words = ["trtllm-script-builder", "build", "--execution-scenario", "local_"]
    assert complete_in_bash(program, script, words) == ["local_docker", "local_slurm"]
    words = ["trtllm-script-builder", "build", "--workflow-type", "pe"]
    assert complete_in_bash(program, script, words) == ["perf_sanity"]


def test_the_request_file_and_path_fields_complete_as_files() -> None:
    from click.shell_completion import ShellComplete

    complete = ShellComplete(main, {}, "trtllm-script-builder", "_X").get_completions
    assert {c.type for c in complete(["build"], "exa")} == {"file"}
    assert {c.type for c in complete(["build", "--repo-root"], "exa")} == {"file"}
    assert {c.type for c in complete(["build-many", "l.txt", "--work-dir"], "/t")} == {"file"}


def test_flag_choices_and_paths_are_the_models() -> None:
    """Completion offers exactly the model's closed sets and completes its host paths as files."""
    import typing

    from click.shell_completion import ShellComplete

    from trtllm_script_builder.model import request

    complete = ShellComplete(main, {}, "trtllm-script-builder", "_X").get_completions
    for name, info in request.Request.model_fields.items():
        flag = "--" + name.replace("_", "-")
        annotation = info.annotation
        if typing.get_origin(annotation) is not typing.Literal:  # Optional[Literal[...]]
            literal = [a for a in typing.get_args(annotation) if typing.get_args(a)]
            annotation = literal[0] if literal else None
        offered = [c.value for c in complete(["build", flag], "")]
        if info.choices is not None:  # a registry's names: the workflows registered
            assert tuple(offered) == info.choices(), name
        elif annotation is not None:
            assert tuple(offered) == typing.get_args(annotation), name
        elif name in request.PATH_FIELDS:
            assert {c.type for c in complete(["build", flag], "exa")} == {"file"}, name
        elif info.annotation not in (bool, bool | None):  # a switch takes no value to complete
            assert offered == [], name
