"""Slurm's tools that never answer (a PATH stand-in that sleeps for squeue, sacct, scontrol and
scancel): `watch --timeout` still ends within its timeout and the documented time after it,
instead of a tool timeout per call (decision timeout-bounds-wall-time)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import make_repo
from tests.slurm.test_submit_watch import cli, probed_env, write_request
from trtllm_script_builder.process import follow

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm

HUNG = ("squeue", "sacct", "scontrol", "scancel")


def test_watch_with_hung_slurm_tools_ends_within_its_timeout(
    slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    env = probed_env(tmp_path)
    req = write_request(tmp_path, "hung", repo, env, custom_cmd="sleep 120")
    assert cli("build", str(req)).code == 0
    res = cli("submit", str(tmp_path / "hung"), "--json")
    assert res.code == 0, res.stderr
    job = json.loads(res.stdout)["job_id"]
    shims = tmp_path / "shims"
    shims.mkdir()
    for tool in HUNG:
        (shims / tool).write_text("#!/bin/sh\nexec sleep 1000\n")
        (shims / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("TSB_SLURM_TOOL_TIMEOUT", raising=False)  # 120 s a call
    monkeypatch.setattr(follow, "AFTER_TIMEOUT", 4.0)  # the 90 s after the timeout, shortened
    try:
        start = time.monotonic()
        res = cli("watch", str(tmp_path / "hung"), "--timeout", "2", "--poll", "0.5")
        took = time.monotonic() - start
    finally:
        monkeypatch.undo()
        subprocess.run(["scancel", job], check=False)
    assert took < 2 + 4 + 20, took  # a generous margin for a loaded machine; it was 360 s
    assert res.code == 11, res.stderr
    assert f"verdict: TIMEOUT (job {job}: the watch timeout ran out" in res.stdout
    assert f"[watch] no answer within 4s after the timeout: job {job} may still be running" in (
        res.stderr
    )
