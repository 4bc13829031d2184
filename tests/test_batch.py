"""build-many: one job per test id or per GPU count, jobs.json, errors by line number."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .conftest import Env, shared_file

IDS = [
    "accuracy/test_tiny.py::TestTiny::test_four[tp4]",
    "accuracy/test_tiny.py::TestTiny::test_one",
    "accuracy/test_tiny.py::TestTiny::test_param[tp2] TIMEOUT (90)",
    "accuracy/test_tiny.py::TestBig::test_method_wins",
]


def base_file(env: Env, tmp_path: Path) -> Path:
    req = env.request()
    req["work_dir"] = str(env.work)
    f = tmp_path / "base.yaml"
    f.write_text(yaml.safe_dump(req))
    return f


def test_one_job_per_id_and_index(env: Env, cli, tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text("# a comment\n\n" + "\n".join(IDS) + "\n")
    r = cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))])
    assert r.code == 0, r.stderr
    rows = json.loads((env.work / "jobs.json").read_text())
    assert [row["line"] for row in rows] == [3, 4, 5, 6]
    assert [row["required_devices"] for row in rows] == [4, 1, 2, 2]
    assert all(row["status"] == "built" for row in rows)
    third = Path(rows[2]["work_dir"])
    spec = json.loads((third / "job_spec.json").read_text())
    assert "--timeout=5400" in (third / "tiny_auto_test.slurm").read_text()
    assert spec["script_path"] == rows[2]["script_path"]
    assert "built 4 job(s), 0 failed" in r.stdout


def test_malformed_lines_reported_rest_built(env: Env, cli, tmp_path: Path) -> None:
    """The issue's case at its size: a 10,000-line list with some malformed lines."""
    n = 10_000
    lines = []
    bad = {}
    for i in range(1, n + 1):
        if i % 97 == 0:
            lines.append("accuracy/test_tiny.py::TestTiny::test_four[tp4")  # unbalanced
            bad[i] = "unbalanced"
        elif i % 101 == 0:
            lines.append("accuracy/test_tiny.py::TestBig::test_too_big")  # 16 GPUs: refused
            bad[i] = "maximum of 8"
        elif i % 103 == 0:
            lines.append("'unterminated")
            bad[i] = "cannot be split"
        else:
            lines.append(IDS[i % len(IDS)])
    lst = tmp_path / "list.txt"
    lst.write_text("\n".join(lines) + "\n")
    r = cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))])
    assert r.code == 2
    rows = json.loads((env.work / "jobs.json").read_text())
    assert len(rows) == n
    errors = {row["line"]: row["error"] for row in rows if row["status"] == "error"}
    assert set(errors) == set(bad)
    for line, why in bad.items():
        assert why in errors[line]
        assert f"{lst}:{line}: error: " in r.stderr
    assert sum(row["status"] == "built" for row in rows) == n - len(bad)
    assert f"built {n - len(bad)} job(s), {len(bad)} failed" in r.stdout
    assert len(list(env.work.iterdir())) == n - len(bad) + 1  # the job folders and jobs.json


def test_group_by_devices(env: Env, cli, tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text("\n".join(IDS) + "\n")
    r = cli(
        ["build-many", str(lst), "--base", str(base_file(env, tmp_path)), "--group-by", "devices"]
    )
    assert r.code == 0, r.stderr
    rows = json.loads((env.work / "jobs.json").read_text())
    assert [row["required_devices"] for row in rows] == [1, 2, 4]
    two = (Path(rows[1]["work_dir"]) / "gpus2_auto_test.slurm").read_text()
    assert "test_param[tp2]" in two and "test_method_wins" in two and "test_four" not in two


def test_a_group_runs_with_its_longest_timeout(env: Env, cli, tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(f"{IDS[2]}\n{IDS[3]} TIMEOUT (30)\n")  # both 2 GPUs: 90 and 30 minutes
    args = [
        "build-many",
        str(lst),
        "--base",
        str(base_file(env, tmp_path)),
        "--group-by",
        "devices",
    ]
    assert cli(args).code == 0
    two = (env.work / "gpus2" / "gpus2_auto_test.slurm").read_text()
    (line,) = [ln for ln in two.splitlines() if ln.startswith("export TEST_CMD=")]
    assert line.count("--timeout") == 1 and "--timeout=5400" in line, line


def test_yaml_list_of_requests(env: Env, cli, tmp_path: Path) -> None:
    items = [
        {"eval_cmd": "trtllm-eval --model org/Tiny-Model mmlu"},
        {"bench_cmd": "trtllm-bench -m x throughput --tp 16"},  # wider than a node
        {"custom_cmd": "true", "work_dir": str(tmp_path / "own")},
    ]
    lst = tmp_path / "reqs.yaml"
    lst.write_text(yaml.safe_dump(items))
    r = cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))])
    assert r.code == 2
    rows = json.loads((env.work / "jobs.json").read_text())
    assert [row["status"] for row in rows] == ["built", "error", "built"]
    assert rows[1]["line"] == 2 and "required_devices" in rows[1]["error"]
    assert (tmp_path / "own" / "job_spec.json").exists()


def test_real_qa_list_builds(env: Env, cli, tmp_path: Path) -> None:
    """Every id of the real QA list builds (the fixture repo lacks the files: sized from defaults)."""
    real = shared_file("tests/integration/test_lists/qa/llm_function_sanity.txt")
    r = cli(["build-many", str(real), "--base", str(base_file(env, tmp_path))])
    assert r.code == 0, r.stderr
    rows = json.loads((env.work / "jobs.json").read_text())
    n = sum(1 for ln in real.read_text().splitlines() if ln.strip() and not ln.startswith("#"))
    assert len(rows) == n and all(row["status"] == "built" for row in rows)


def test_jobs_sized_without_their_test_file_are_flagged(env: Env, cli, tmp_path: Path) -> None:
    """Built, but the GPU count is a default: the row carries the warning, the summary counts it."""
    lst = tmp_path / "list.txt"
    lst.write_text(IDS[1] + "\naccuracy/test_missing.py::TestGone::test_x\n")
    r = cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))])
    assert r.code == 0, r.stderr
    rows = json.loads((env.work / "jobs.json").read_text())
    assert "warnings" not in rows[0]
    assert "test_missing.py not found" in rows[1]["warnings"][0]
    assert "built 2 job(s), 1 with warnings, 0 failed" in r.stdout


def test_work_dir_from_a_flag_is_taken_from_the_current_folder(
    env: Env, cli, tmp_path: Path, monkeypatch
) -> None:
    """As for `build`: a flag's relative path from the current folder, the file's from its folder."""
    conf = tmp_path / "conf"
    conf.mkdir()
    req = {**env.request(), "work_dir": "../from_base"}
    (conf / "base.yaml").write_text(yaml.safe_dump(req))
    lst = tmp_path / "list.txt"
    lst.write_text(IDS[1] + "\n")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)

    r = cli(["build-many", str(lst), "--base", str(conf / "base.yaml")])
    assert r.code == 0, r.stderr
    rows = json.loads((tmp_path / "from_base" / "jobs.json").read_text())
    assert rows[0]["work_dir"] == str(tmp_path / "from_base" / "00001_tiny")

    r = cli(["build-many", str(lst), "--base", str(conf / "base.yaml"), "--work-dir", "out"])
    assert r.code == 0, r.stderr
    rows = json.loads((here / "out" / "jobs.json").read_text())
    assert rows[0]["work_dir"] == str(here / "out" / "00001_tiny")
