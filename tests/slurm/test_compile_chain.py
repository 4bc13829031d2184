"""Compile and image-import chains on the live test cluster
(decisions compile-chain and image-import-cache): `run` builds the job folder, `submit` starts
import.slurm, compile.slurm and the test job with sbatch dependencies, `watch` follows them to one
verdict.

The jobs are custom jobs on the cpu partition (the fake pyxis runs every task on the host);
the stand-ins in tests/slurm/standins (first on PATH, which sbatch passes to the jobs) play
enroot, pip and the checkout's scripts/build_wheel.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from test_submit_watch import POLL, cli, probed_env, sacct, write_request

from tests.conftest import make_repo
from trtllm_script_builder.resolve.compile import sqsh_name

if TYPE_CHECKING:
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm

STANDINS = Path(__file__).resolve().parent / "standins"
IMAGE = "nvcr.io/test/trtllm:x86_64-1"


@dataclass
class Live:
    root: Path
    repo: Path
    slurm_env: Path
    sqsh_dir: Path
    enroot_record: Path
    pyxis_record: Path

    def request(self, name: str, **fields: Any) -> Path:
        """A custom job with compile (it installs the wheel it builds)."""
        chain = {
            "custom_cmd": "echo the tests ran",
            "container_image": IMAGE,
            "skip_install": None,
            "compile": True,
            "cuda_arch": "90-real",
            "sqsh_cache_dir": str(self.sqsh_dir),
        }
        return write_request(self.root, name, self.repo, self.slurm_env, **{**chain, **fields})

    def imports(self) -> list[dict[str, Any]]:
        if not self.enroot_record.exists():
            return []
        return [json.loads(line) for line in self.enroot_record.read_text().splitlines()]


@pytest.fixture(scope="module")
def live(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("compile_chain")
    repo = make_repo(root / "TensorRT-LLM")
    slurm_env = probed_env(root)
    live = Live(root, repo, slurm_env, root / "sqsh", root / "enroot.jsonl", root / "pyxis.jsonl")
    with pytest.MonkeyPatch.context() as mp:
        # sbatch passes the submitting environment to the jobs
        mp.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
        mp.setenv("STANDIN_ENROOT_RECORD", str(live.enroot_record))
        mp.setenv("STANDIN_ENROOT_SECONDS", "2")  # two imports of one image overlap
        mp.setenv("FAKE_PYXIS_RECORD", str(live.pyxis_record))
        mp.setenv("STANDIN_BUILD_WHEEL_STEP", "0.1")
        yield live


def _cancel(*jobs: str) -> None:
    subprocess.run(["scancel", *jobs], check=False)


def test_two_chains_import_the_image_once_and_install_the_built_wheel(live: Live) -> None:
    subs = []
    try:
        for name in ("pass_a", "pass_b"):  # submitted together: both imports run at once
            assert cli("build", str(live.request(name))).code == 0
            res = cli("submit", str(live.root / name), "--json")
            assert res.code == 0, res.stderr
            subs.append(json.loads(res.stdout))
        results = [cli("watch", str(live.root / n), "--poll", POLL, "--json") for n in ("pass_a", "pass_b")]  # fmt: skip
    finally:
        _cancel(*[s["job_id"] for s in subs])
    sqsh = live.sqsh_dir / sqsh_name(IMAGE)
    for sub, res in zip(subs, results, strict=True):
        v = res.json
        assert (res.code, v["verdict"], v["job_id"]) == (0, "PASSED", sub["job_id"]), res.stdout
        assert [c["kind"] for c in v["chain"]] == ["import", "compile"]
        assert "[compile] [ 50%] Building CXX object" in res.stdout  # streamed, marked
        # the test job ran after both prerequisites and installed the wheel the compile built
        work = Path(sub["work_dir"])
        compile_id = sub["prerequisites"][1]["job_id"]
        wheels = sorted((work / "wheel" / f"job-{compile_id}").glob("tensorrt_llm-*.whl"))
        assert len(wheels) == 1
        log = Path(sub["log_file"]).read_text()
        assert (
            f"pip (stand-in): would run 'pip install --retries 10 --timeout 60 --no-deps "
            f"--force-reinstall {wheels[0]}'" in log
        )
        assert "install -e ." not in log
        deps = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-j", sub["job_id"], "-o", "Start"],
            capture_output=True, text=True, check=False,
        ).stdout.strip()  # fmt: skip
        compile_end = sacct(sub["prerequisites"][1]["job_id"], "State,End")[1]
        assert deps >= compile_end, (deps, compile_end)
    # one import for the two jobs; the other waited on the lock and found the file
    assert [r["output"].rsplit(".partial.", 1)[0] for r in live.imports()] == [str(sqsh)]
    import_logs = [Path(s["prerequisites"][0]["log_file"]).read_text() for s in subs]
    assert sum("Image already imported" in text for text in import_logs) == 1
    assert sqsh.read_bytes().startswith(b"hsqs")
    assert not list(live.sqsh_dir.glob("*.partial.*"))
    # the test and compile steps ran from the imported file (the fake pyxis checks it exists)
    steps = [json.loads(line) for line in live.pyxis_record.read_text().splitlines()]
    mine = {s["job"] for s in steps} & {int(s["job_id"]) for s in subs}
    assert mine and all(s["image"] == str(sqsh) for s in steps if s["job"] in mine)


def test_a_failed_compile_stops_the_chain_before_the_test_job(live: Live) -> None:
    marker = live.repo / "cpp" / "STANDIN_COMPILE_ERROR"
    marker.parent.mkdir(exist_ok=True)
    marker.write_text('no instance of overloaded function "launch" matches the argument list\n')
    imported = len(live.imports())
    try:
        assert cli("build", str(live.request("broken"))).code == 0
        sub = cli("submit", str(live.root / "broken"), "--json")
        assert sub.code == 0, sub.stderr
        test_id = json.loads(sub.stdout)["job_id"]
        # Slurm itself cancels the test job once the compile failed (--kill-on-invalid-dep=yes),
        # before anything watches the chain
        state = sacct(test_id, "State", timeout=60)[0]
        res = cli("watch", str(live.root / "broken"), "--poll", POLL, "--json")
    finally:
        marker.unlink()
    assert state.startswith("CANCELLED"), state
    v = res.json
    assert (res.code, v["verdict"], v["state"], v["exit_code"]) == (
        16,
        "COMPILE_FAILED",
        "FAILED",
        1,
    )
    assert "the test job never started" in v["reason"]
    compile_id = v["job_id"]
    chain = {c["kind"]: c["job_id"] for c in v["chain"]}
    assert chain["compile"] == compile_id
    error = next(e for e in v["evidence"] if "error:" in e)
    assert error.startswith(f"custom_compile_{compile_id}.out:")
    assert error.endswith(
        'error: no instance of overloaded function "launch" matches the argument list'
    )
    assert any(
        e.startswith(f"custom_compile_{compile_id}.out:") and ": FAILED: " in e
        for e in v["evidence"]
    )
    # the test job never ran: cancelled by its dependency, no batch step, no log
    assert chain["test"] == test_id
    assert sacct(test_id, "State")[0].startswith("CANCELLED")
    steps = subprocess.run(
        ["sacct", "-n", "-P", "-j", test_id, "-o", "JobID"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    assert steps == [test_id], steps
    assert not list((live.root / "broken").glob("custom_custom_*.out"))
    # one import per image: an image imported by an earlier test is not imported again
    assert len(live.imports()) == max(imported, 1)
    assert (
        json.loads((live.root / "broken" / "verdict.json").read_text())["verdict"]
        == "COMPILE_FAILED"
    )


def test_run_builds_compiles_and_tests_in_one_go(live: Live) -> None:
    res = cli(
        "run", str(live.request("one_go", custom_cmd="echo one go")), "--poll", POLL, "--json"
    )
    v = res.json
    assert (res.code, v["verdict"], v["state"]) == (0, "PASSED", "COMPLETED"), res.stdout
    assert "one go" in res.stdout and "[compile] Built wheel " in res.stdout
    assert "after import job" in res.stderr and "compile job" in res.stderr  # submitted line
    assert [(c["kind"], c["verdict"]) for c in v["chain"]] == [
        ("import", "PASSED"),
        ("compile", "PASSED"),
    ]


def test_two_submits_sharing_a_wheel_dir_each_test_their_own_wheel(live: Live) -> None:
    """A's compile, B's compile into the same wheel_dir (one after the other: one checkout),
    then each test job: it installs the wheel of its own compile (decision own-wheel-per-chain);
    B's compile once replaced A's wheel, and A's test passed on B's build."""
    shared = live.root / "shared_wheels"
    subs = []
    try:
        for name in ("share_a", "share_b"):
            assert cli("build", str(live.request(name, wheel_dir=str(shared)))).code == 0
            res = cli("submit", str(live.root / name), "--json")
            assert res.code == 0, res.stderr
            subs.append(json.loads(res.stdout))
        results = [cli("watch", s["work_dir"], "--poll", POLL, "--json") for s in subs]
    finally:
        _cancel(*[s["job_id"] for s in subs])
    for sub, res in zip(subs, results, strict=True):
        assert (res.code, res.json["verdict"]) == (0, "PASSED"), res.stdout
        (wheel,) = shared.glob(f"job-{sub['prerequisites'][1]['job_id']}/tensorrt_llm-*.whl")
        assert f"--force-reinstall {wheel}'" in Path(sub["log_file"]).read_text()
