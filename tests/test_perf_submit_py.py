from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trtllm_script_builder.errors import EXIT_TOOL_FAILED, BuildError, ToolFailed
from trtllm_script_builder.process.submit_py import (
    SUBMIT_PY,
    rewrite_remote_paths,
    run_submit_py,
)
from trtllm_script_builder.resolve.perf.plan import submit_args

STAND_IN = Path(__file__).resolve().parent / "fixtures" / "submit_stand_in.py"
# /work/<clone>/tests/this_file.py -> /work/shared/data/trtllm (a copy of the repo's layout)
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "trtllm"
UCX = "gb200_deepseek-r1-fp4_1k1k_con2048_ctx2_dep4_gen1_dep16_eplb0_mtp3_ccb-UCX"

AGG_CFG = """\
metadata: {model_name: tiny}
hardware: {gpus_per_node: 4}
server_configs:
  - name: tiny_tp2pp3
    model_name: tiny
    tensor_parallel_size: 2
    pipeline_parallel_size: 3
    client_configs: [{name: c, concurrency: 1, iterations: 1, isl: 8, osl: 8}]
  - name: tiny_tp1
    model_name: tiny
"""


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A fake TensorRT-LLM checkout: the stand-in as submit.py plus one aggregated config."""
    root = tmp_path / "repo"
    script = root / SUBMIT_PY
    script.parent.mkdir(parents=True)
    shutil.copy(STAND_IN, script)
    agg = root / "tests" / "scripts" / "perf-sanity" / "aggregated"
    agg.mkdir(parents=True)
    (agg / "tiny_cfg.yaml").write_text(AGG_CFG, encoding="utf-8")
    return root


def args_for(
    repo: Path,
    work_dir: Path,
    *,
    test_id: str | None = None,
    config_file: str | None = None,
    test_name: str | None = None,
) -> list[str]:
    return submit_args(
        test_id=test_id,
        config_file=config_file,
        test_name=test_name,
        benchmark_mode=None,
        partition="batch",
        account="acct",
        job_name="tiny_perf",
        image="nvcr.io#nvidia/x:1",
        mounts=[f"{repo}:{repo}", "/models:/models"],
        work_dir=str(work_dir),
        llm_src=str(repo),
        llm_models_root="/models",
        launch_sh=str(work_dir / "slurm_launch.sh"),
        time="01:00:00",
    )


def run(repo: Path, args: list[str], **env: str) -> None:
    run_submit_py(repo, args, cwd=repo.parent, env={**os.environ, **env})


def sbatch(text: str, flag: str) -> str:
    match = re.search(rf"^#SBATCH {re.escape(flag)}[= ](.*)$", text, flags=re.MULTILINE)
    assert match, f"no #SBATCH {flag}"
    return match.group(1)


# ---- submit_args ------------------------------------------------------------------------


def test_args_with_a_test_id() -> None:
    args = submit_args(
        test_id="perf/test_perf_sanity.py::test_e2e[aggr-c-s]",
        config_file="/ignored.yaml",
        test_name="ignored",
        benchmark_mode="e2e",
        partition="p",
        account="a",
        job_name="j",
        image="i",
        mounts="/a:/a,/b:/b",
        work_dir="/w",
        llm_src="/r",
        llm_models_root="/m",
        launch_sh="/w/slurm_launch.sh",
        time="02:00:00",
    )
    assert args == [
        "--test-list",
        "perf/test_perf_sanity.py::test_e2e[aggr-c-s]",
        "--partition",
        "p",
        "--account",
        "a",
        "--job-name",
        "j",
        "--image",
        "i",
        "--mounts",
        "/a:/a,/b:/b",
        "--work-dir",
        "/w",
        "--llm-src",
        "/r",
        "--llm-models-root",
        "/m",
        "--launch-sh",
        "/w/slurm_launch.sh",
        "--time",
        "02:00:00",
    ]


def test_args_with_a_config_file() -> None:
    args = submit_args(
        test_id=None,
        config_file="/c/x.yaml",
        test_name="s",
        benchmark_mode=None,
        partition="p",
        account="a",
        job_name="j",
        image="i",
        mounts=["/a:/a", "", "/b:/b"],
        work_dir="/w",
        llm_src="/r",
        llm_models_root="/m",
        launch_sh="/w/l.sh",
        time="t",
    )
    assert args[:4] == ["--config-file", "/c/x.yaml", "--test-name", "s"]
    assert args[args.index("--mounts") + 1] == "/a:/a,/b:/b"
    disagg = submit_args(
        test_id=None,
        config_file="/c/d.yaml",
        test_name=None,
        benchmark_mode="gen_only",
        partition="p",
        account="a",
        job_name="j",
        image="i",
        mounts="",
        work_dir="/w",
        llm_src="/r",
        llm_models_root="/m",
        launch_sh="/w/l.sh",
        time="t",
    )
    assert disagg[:4] == ["--config-file", "/c/d.yaml", "--benchmark-mode", "gen_only"]
    with pytest.raises(BuildError) as err:
        submit_args(
            test_id=None,
            config_file=None,
            test_name=None,
            benchmark_mode=None,
            partition="p",
            account="a",
            job_name="j",
            image="i",
            mounts="",
            work_dir="/w",
            llm_src="/r",
            llm_models_root="/m",
            launch_sh="/w/l.sh",
            time="t",
        )
    assert err.value.field == "perf_config_yaml"


# ---- run_submit_py with the stand-in ---------------------------------------------------------


def test_stand_in_aggregated_by_test_id(repo: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    tid = "perf/test_perf_sanity.py::test_e2e[aggr_upload-tiny_cfg-tiny_tp2pp3]"
    args = args_for(repo, work, test_id=tid)
    run(repo, args)
    record = json.loads((work / "submit_args.json").read_text(encoding="utf-8"))
    assert record["argv"] == args
    assert record["args"]["partition"] == "batch"
    assert record["cwd"] == str(repo.parent)
    assert (work / "test_list.txt").read_text(encoding="utf-8") == (
        "perf/test_perf_sanity.py::test_e2e[aggr-tiny_cfg-tiny_tp2pp3]\n"
    )
    launch = work / "slurm_launch.sh"
    assert stat.S_IMODE(launch.stat().st_mode) == 0o755
    text = launch.read_text(encoding="utf-8")
    # TP2 x PP3 = 6 GPUs at 4 per node: 2 whole nodes, 8 tasks
    assert (
        sbatch(text, "--nodes"),
        sbatch(text, "--ntasks"),
        sbatch(text, "--ntasks-per-node"),
    ) == ("2", "8", "4")
    assert sbatch(text, "--partition") == "batch" and sbatch(text, "--account") == "acct"
    assert sbatch(text, "-o") == f"{work}/slurm-%j.out"
    assert '"--container-image=nvcr.io#nvidia/x:1"' in text
    assert f'"--container-workdir={work}"' in text
    assert f"export llmSrcNode='{repo}'" in text


def test_stand_in_config_file_and_record_env(repo: Path, tmp_path: Path) -> None:
    work = tmp_path / "w2"
    record = tmp_path / "record.json"
    cfg = repo / "tests/scripts/perf-sanity/aggregated/tiny_cfg.yaml"
    args = args_for(repo, work, config_file=str(cfg), test_name="tiny_tp1")
    run(repo, args, SUBMIT_STAND_IN_RECORD=str(record))
    assert json.loads(record.read_text(encoding="utf-8"))["args"]["test_name"] == "tiny_tp1"
    assert not (work / "submit_args.json").exists()
    text = (work / "slurm_launch.sh").read_text(encoding="utf-8")
    assert sbatch(text, "--nodes") == "1" and sbatch(text, "--ntasks") == "4"


def test_stand_in_real_ucx_config(repo: Path, tmp_path: Path) -> None:
    folder = DATA / "tests" / "scripts" / "perf-sanity" / "disaggregated"
    if not (folder / f"{UCX}.yaml").is_file():
        pytest.skip("shared data files are not present")
    work = tmp_path / "w3"
    tid = f"perf/test_perf_sanity.py::test_e2e[disagg_upload-gen_only-{UCX}] TIMEOUT (120)"
    args = args_for(repo, work, test_id=tid)
    run(repo, args, DISAGG_CONFIG_FOLDER=str(folder))
    text = (work / "slurm_launch.sh").read_text(encoding="utf-8")
    assert (sbatch(text, "--nodes"), sbatch(text, "--ntasks")) == ("6", "24")


def test_unknown_server_is_tool_failed_with_its_text(repo: Path, tmp_path: Path) -> None:
    tid = "perf/test_perf_sanity.py::test_e2e[aggr-tiny_cfg-zz]"
    args = args_for(repo, tmp_path / "w4", test_id=tid)
    with pytest.raises(ToolFailed) as err:
        run(repo, args)
    assert err.value.field == "submit.py"
    assert err.value.exit_code == EXIT_TOOL_FAILED
    assert "exited with status 1" in err.value.problem
    assert "ValueError: Server config not found for test_name: zz" in err.value.problem
    assert "\n" not in err.value.line()


def test_missing_config_and_missing_flag(repo: Path, tmp_path: Path) -> None:
    tid = "perf/test_perf_sanity.py::test_e2e[disagg-e2e-nope]"
    args = args_for(repo, tmp_path / "w5", test_id=tid)
    with pytest.raises(ToolFailed, match="FileNotFoundError: Config file not found"):
        run(repo, args)
    without_account = [a for a in args if a not in ("--account", "acct")]
    with pytest.raises(ToolFailed, match="--account"):
        run(repo, without_account)


def test_missing_submit_py(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as err:
        run_submit_py(tmp_path, ["--help"], cwd=tmp_path)
    assert err.value.field == "repo_root"
    assert not isinstance(err.value, ToolFailed)
    assert "jenkins/scripts/perf/local/submit.py" in err.value.problem


def test_hanging_submit_py_times_out(tmp_path: Path) -> None:
    script = tmp_path / SUBMIT_PY
    script.parent.mkdir(parents=True)
    script.write_text(
        "import sys, time\nprint('asking sinfo', flush=True)\ntime.sleep(30)\n", encoding="utf-8"
    )
    with pytest.raises(ToolFailed, match="did not finish within 0.5 s"):
        run_submit_py(tmp_path, [], cwd=tmp_path, timeout=0.5)


def test_bad_interpreter(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(ToolFailed, match="could not be started"):
        run_submit_py(repo, [], cwd=tmp_path, python=str(tmp_path / "no-python"))


def test_stand_in_output_rewritten_for_the_remote_side(repo: Path, tmp_path: Path) -> None:
    work = repo / "work_dirs" / "job1"  # work_dir under repo_root, as for remote runs
    tid = "perf/test_perf_sanity.py::test_e2e[aggr-tiny_cfg-tiny_tp1]"
    args = args_for(repo, work, test_id=tid)
    run(repo, args)
    text = (work / "slurm_launch.sh").read_text(encoding="utf-8")
    out = rewrite_remote_paths(
        text,
        repo_root=str(repo),
        remote_repo_path="/lustre/u/trtllm",
        work_dir=str(work),
        remote_work_dir="/lustre/u/runs/job1",
    )
    assert str(tmp_path) not in out
    assert sbatch(out, "-o") == "/lustre/u/runs/job1/slurm-%j.out"
    assert '"--container-workdir=/lustre/u/runs/job1"' in out
    assert "export llmSrcNode='/lustre/u/trtllm'" in out
    assert "/lustre/u/trtllm:/lustre/u/trtllm" in out


# ---- rewrite_remote_paths ----------------------------------------------------------------


def rw(
    text: str,
    repo: str = "/repo",
    remote_repo: str = "/remote/repo",
    work: str = "/repo/w",
    remote_work: str = "/remote/work",
) -> str:
    return rewrite_remote_paths(
        text,
        repo_root=repo,
        remote_repo_path=remote_repo,
        work_dir=work,
        remote_work_dir=remote_work,
    )


@pytest.mark.parametrize(
    "text, want",
    [
        ("/repo", "/remote/repo"),
        ("cd /repo && ls /repo/", "cd /remote/repo && ls /remote/repo/"),
        ("/repo2 /repo-old /repo.bak /repo_x", "/repo2 /repo-old /repo.bak /repo_x"),
        ("/data/repo /x/repo/w //repo", "/data/repo /x/repo/w //repo"),
        (
            "--container-mounts=/repo:/repo,/m:/m",
            "--container-mounts=/remote/repo:/remote/repo,/m:/m",
        ),
        ('export jobWorkspace="/repo/w"', 'export jobWorkspace="/remote/work"'),
        ("-o /repo/w/slurm-%j.out", "-o /remote/work/slurm-%j.out"),
        ("/repo/w2/x /repo/wx", "/remote/repo/w2/x /remote/repo/wx"),
        ("a=/repo/w;b=/repo\n/repo/w/t", "a=/remote/work;b=/remote/repo\n/remote/work/t"),
        ("'/repo/w'", "'/remote/work'"),
    ],
)
def test_rewrite_boundaries(text: str, want: str) -> None:
    assert rw(text) == want


def test_rewrite_trailing_slashes_and_no_ops() -> None:
    assert rw("/repo/w/x", repo="/repo/", work="/repo/w/", remote_work="/remote/work/") == (
        "/remote/work/x"
    )
    assert rw("/repo/x", remote_repo="/repo", work="", remote_work="") == "/repo/x"
    with pytest.raises(ValueError):
        rw("/x", repo="/")


def test_rewrite_never_rewrites_its_own_output() -> None:
    # the remote paths contain the local prefix: one pass, nothing replaced twice
    out = rw("/repo/w /repo", remote_repo="/repo/remote", remote_work="/repo/w/remote")
    assert out == "/repo/w/remote /repo/remote"


_seg = st.text(alphabet="abcdefghij0123456789_-.", min_size=1, max_size=6)


def _expected(token: str, repo: str, work: str) -> str:
    for local, remote in ((work, "/remote/work"), (repo, "/remote/repo")):
        if token == local or token.startswith(local + "/"):
            return remote + token[len(local) :]
    return token


@given(
    repo_segs=st.lists(_seg, min_size=1, max_size=3),
    work_segs=st.lists(_seg, min_size=1, max_size=2),
    suffix=_seg,
    tails=st.lists(st.lists(_seg, max_size=2), min_size=4, max_size=4),
)
def test_rewrite_properties(
    repo_segs: list[str], work_segs: list[str], suffix: str, tails: list[list[str]]
) -> None:
    repo = "/" + "/".join(repo_segs)
    work = repo + "/" + "/".join(work_segs)
    rest = ["".join("/" + t for t in tail) for tail in tails]
    # repo, work, a sibling whose name merely starts with repo's name, and repo not at a start
    tokens = [repo + rest[0], work + rest[1], repo + suffix + rest[2], "X" + repo + rest[3]]
    text = " ".join(tokens)
    out = rw(text, repo=repo, work=work)
    assert out.split(" ") == [_expected(t, repo, work) for t in tokens[:3]] + [tokens[3]]
    # identity mapping changes nothing
    assert rw(text, repo=repo, remote_repo=repo, work=work, remote_work=work) == text
