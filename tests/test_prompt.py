"""DESIGN decision 9: a missing value is asked for on a terminal, and refused without one."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

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


def _build_on_a_terminal(env: Env, tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A build whose request lacks llm_models_root, its stdin and stderr on a pseudo-terminal."""
    req = env.request(test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one")
    del req["llm_models_root"]
    f = tmp_path / "req.json"
    f.write_text(json.dumps(req))
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trtllm_script_builder", "build", str(f)],
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
        out, _ = proc.communicate(timeout=30)
    finally:
        os.close(master)
    assert proc.returncode == 0
    assert (
        json.loads((env.work / "job_spec.json").read_text())["llm_models_root"] == "/asked/models"
    )
    assert b"Generated:" in out


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
