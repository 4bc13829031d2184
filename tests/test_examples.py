"""Every example request builds from a clone, and a dry run refuses what the build refuses."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
REQUESTS = sorted((EXAMPLES / "requests").glob("*.yaml"))


def test_there_is_an_example_request_per_workflow() -> None:
    import yaml

    kinds = set()
    for path in REQUESTS:
        req = yaml.safe_load(path.read_text())
        kinds.add(
            req.get("workflow_type")
            or next(k for k in ("test_cmd", "eval_cmd", "bench_cmd", "custom_cmd") if k in req)
        )
    assert kinds >= {"test_cmd", "eval_cmd", "bench_cmd", "custom_cmd", "perf_sanity"}, kinds


@pytest.mark.parametrize("request_file", REQUESTS, ids=lambda p: p.stem)
def test_every_example_request_builds(cli, tmp_path: Path, request_file: Path) -> None:
    work = tmp_path / "work"
    r = cli(["build", str(request_file), "--work-dir", str(work)])
    assert r.code == 0, r.stderr
    spec = (work / "job_spec.json").read_text()
    script = work / __import__("json").loads(spec)["script_name"]
    assert script.is_file()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_a_dry_run_refuses_a_checkout_without_submit_py(cli, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLES / "trtllm_repo", repo)
    (repo / "jenkins/scripts/perf/local/submit.py").unlink(missing_ok=True)
    work = tmp_path / "work"
    args = [str(EXAMPLES / "requests/perf_sanity_local_slurm.yaml"), "--repo-root", str(repo)]
    for extra in (["--dry-run"], []):
        r = cli(["build", *args, "--work-dir", str(work), *extra])
        assert r.code == 2, (extra, r.stdout, r.stderr)
        assert r.stderr.startswith("error: repo_root: ") and "submit.py does not exist" in r.stderr
        assert r.stdout == "" and not work.exists()
