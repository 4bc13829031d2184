"""A live job whose log is hostile (escape sequences that clear the screen and set the
clipboard, a carriage return that rewrites a line, a 3 MB line): `run` follows it on the test
cluster and neither the terminal nor verdict.json gets a raw control character or the
megabytes (decision shown-never-obeyed)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import make_repo
from tests.slurm.test_submit_watch import POLL, cli, probed_env, write_request

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm

_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
HOSTILE = (
    r"printf 'Error: \033]52;c;cm0gLXJmIH4K\007 clipboard\n\033[2J\033[Hcleared\n"
    r"ok\rPASSED\n\302\233"
    "31m eight-bit\n'; "
    "head -c 3000000 /dev/zero | tr '\\0' y; echo; exit 3"
)


def test_a_hostile_log_reaches_the_terminal_and_the_verdict_escaped(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    env = probed_env(tmp_path)
    req = write_request(tmp_path, "hostile", repo, env, custom_cmd=HOSTILE)
    res = cli("run", str(req), "--poll", POLL, "--json")
    verdict = json.loads((tmp_path / "hostile" / "verdict.json").read_text())
    assert (res.code, verdict["verdict"], verdict["exit_code"]) == (1, "FAILED", 3), verdict
    for text in (res.stdout, res.stderr):
        assert not _RAW.search(text.replace("\n", "")), text[:2000]
    assert "\\x1b]52;c;cm0gLXJmIH4K\\x07 clipboard" in res.stdout  # followed, shown escaped
    assert "ok\\rPASSED" in res.stdout and "\\x9b31m" in res.stdout
    evidence = verdict["evidence"]
    assert any("Error: \\x1b]52;c;" in e for e in evidence), evidence
    assert all(len(e) < 1000 and not _RAW.search(e) for e in evidence), evidence
    assert len((tmp_path / "hostile" / "verdict.json").read_bytes()) < 50_000


def test_a_work_dir_with_pipes_equals_and_dollars_is_watched_at_its_log(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """scontrol's StdOut and sacct's `|`-separated rows around a folder named with `|`, `=`,
    `$(...)` and a backquote: the job runs there, and watch reads its real log."""
    repo = make_repo(tmp_path / "repo")
    env = probed_env(tmp_path)
    name = "a|b=c$(>x)`id`;x&"  # $(>x) would make a file x if a shell ever ran it
    req = write_request(tmp_path, name, repo, env, custom_cmd="echo hello from the job")
    res = cli("run", str(req), "--poll", POLL, "--json")
    assert res.code == 0, res.stderr
    v = res.json
    assert v["verdict"] == "PASSED" and "hello from the job" in res.stdout
    assert v["log_files"][0].startswith(str(tmp_path / name) + "/")
    assert not (tmp_path / name / "x").exists() and not Path("x").exists()
