"""build-many: one job per test id or per GPU count, jobs.json, errors by line number."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .conftest import Env, materialise_tests, shared_file

IDS = [
    "accuracy/test_tiny.py::TestTiny::test_four[tp4]",
    "accuracy/test_tiny.py::TestTiny::test_one",
    "accuracy/test_tiny.py::TestTiny::test_param[tp2] TIMEOUT (90)",
    "accuracy/test_tiny.py::TestBig::test_method_wins",
]


def base_file(env: Env, tmp_path: Path, **fields: object) -> Path:
    req = env.request(**fields)
    req["work_dir"] = str(env.work)
    f = tmp_path / "base.yaml"
    f.write_text(yaml.safe_dump(req))
    return f


def many(env: Env, tmp_path: Path, lst: Path, *more: str) -> list[str]:
    """build-many of `lst` on the test base request."""
    return ["build-many", str(lst), "--base", str(base_file(env, tmp_path)), *more]


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
            lines.append("accuracy/test_tiny.py::TestBig::test_too_bug")  # no such test
            bad[i] = "has no test TestBig::test_too_bug"
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
    # the two 2-GPU tests: one has a TIMEOUT, the other none, so they are two groups
    assert [row["required_devices"] for row in rows] == [1, 2, 2, 4]
    assert [Path(row["work_dir"]).name for row in rows] == ["gpus1", "gpus2_1", "gpus2_2", "gpus4"]
    timed = (Path(rows[1]["work_dir"]) / "gpus2_1_auto_test.slurm").read_text()
    untimed = (Path(rows[2]["work_dir"]) / "gpus2_2_auto_test.slurm").read_text()
    assert "test_param[tp2] --timeout=5400'" in timed and "test_method_wins" not in timed
    (cmd,) = [ln for ln in untimed.splitlines() if ln.startswith("export TEST_CMD=")]
    assert cmd.endswith("test_method_wins'")


def _test_cmd_and_time(script: Path) -> tuple[str, str]:
    text = script.read_text()
    (cmd,) = [ln for ln in text.splitlines() if ln.startswith("export TEST_CMD=")]
    (time,) = [ln for ln in text.splitlines() if ln.startswith("#SBATCH --time=")]
    return cmd, time


def test_a_test_gets_the_same_timeout_and_time_limit_alone_or_grouped(
    env: Env, cli, tmp_path: Path
) -> None:
    """One TIMEOUT rule (decision batch-names-timeout): pytest's --timeout is the test's own, and
    the time limit is raised to it plus half an hour, whether the test has a job or shares a
    group."""
    lst = tmp_path / "list.txt"
    # three 2-GPU tests: 150, 30 and 150 minutes
    lst.write_text(
        f"{IDS[2].replace('(90)', '(150)')}\n{IDS[3]} TIMEOUT (30)\n"
        "accuracy/test_tiny.py::TestTiny::test_param[tp2] TIMEOUT (150)\n"
    )
    assert cli(many(env, tmp_path, lst, "--work-dir", str(tmp_path / "one"))).code == 0
    assert cli(many(env, tmp_path, lst, "--group-by", "devices", "--work-dir",
                    str(tmp_path / "grp"))).code == 0  # fmt: skip
    alone = json.loads((tmp_path / "one" / "jobs.json").read_text())
    grouped = json.loads((tmp_path / "grp" / "jobs.json").read_text())
    assert [row["lines"] for row in grouped] == [[1, 3], [2]]
    for row in grouped:
        g_cmd, g_time = _test_cmd_and_time(Path(row["script_path"]))
        for line in row["lines"]:
            a_cmd, a_time = _test_cmd_and_time(Path(alone[line - 1]["script_path"]))
            assert a_cmd.rsplit(" ", 1)[1] == g_cmd.rsplit(" ", 1)[1]  # --timeout=...'
            assert a_time == g_time
    assert _test_cmd_and_time(Path(grouped[0]["script_path"]))[1] == "#SBATCH --time=03:00:00"
    assert _test_cmd_and_time(Path(grouped[1]["script_path"]))[1] == "#SBATCH --time=02:00:00"


def test_an_absurd_timeout_is_refused_naming_its_line(env: Env, cli, tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(f"{IDS[1]} TIMEOUT (99999999999999999999)\n{IDS[1]} TIMEOUT (1441)\n"
                   f"{IDS[1]} TIMEOUT ({'9' * 5000})\n{IDS[1]} TIMEOUT (1440)\n")  # fmt: skip
    for group in ([], ["--group-by", "devices"]):
        work = tmp_path / ("grp" if group else "one")
        r = cli(many(env, tmp_path, lst, *group, "--work-dir", str(work)))
        assert r.code == 2
        errs = [ln for ln in r.stderr.splitlines() if " error: " in ln]
        assert errs[0] == (
            f"{lst}:1: error: test_cmd: TIMEOUT (99999999999999999999) is over the maximum of "
            "1440 minutes (a day); give the test's timeout in minutes, at most 1440"
        )
        assert errs[1].startswith(f"{lst}:2: error: test_cmd: TIMEOUT (1441) is over")
        assert errs[2].startswith(f"{lst}:3: error: test_cmd: TIMEOUT (99999999999999999999...")
        assert len(errs) == 3 and len(errs[2]) < 300
        (row,) = [r for r in json.loads((work / "jobs.json").read_text()) if r["status"] == "built"]
        assert "--timeout=86400" in Path(row["script_path"]).read_text()


def test_yaml_list_of_requests(env: Env, cli, tmp_path: Path) -> None:
    items = [
        {"eval_cmd": "trtllm-eval --model org/Tiny-Model mmlu"},
        {"bench_cmd": "trtllm-bench -m x throughput --tp 9"},  # 9 ranks do not spread over 2 nodes
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
    """Every id of the real QA list builds (its files written into the fixture repo, unmarked)."""
    real = shared_file("tests/integration/test_lists/qa/llm_function_sanity.txt")
    materialise_tests(env.repo, real.read_text().splitlines())
    r = cli(["build-many", str(real), "--base", str(base_file(env, tmp_path))])
    assert r.code == 0, r.stderr
    rows = json.loads((env.work / "jobs.json").read_text())
    n = sum(1 for ln in real.read_text().splitlines() if ln.strip() and not ln.startswith("#"))
    assert len(rows) == n and all(row["status"] == "built" for row in rows)


def test_an_id_whose_file_is_missing_fails_its_line_only(env: Env, cli, tmp_path: Path) -> None:
    """The id is checked against the repo: its line fails with the reason, the rest build."""
    lst = tmp_path / "list.txt"
    lst.write_text(IDS[1] + "\naccuracy/test_missing.py::TestGone::test_x\n")
    r = cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))])
    assert r.code == 2
    rows = json.loads((env.work / "jobs.json").read_text())
    assert rows[0]["status"] == "built" and "warnings" not in rows[0]
    assert rows[1]["status"] == "error" and "test_missing.py is not under" in rows[1]["error"]
    assert "built 1 job(s), 1 failed" in r.stdout
    assert f"{lst}:2: error: test_cmd: " in r.stderr


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
    assert rows[0]["work_dir"] == str(tmp_path / "from_base" / "tiny_one")

    r = cli(["build-many", str(lst), "--base", str(conf / "base.yaml"), "--work-dir", "out"])
    assert r.code == 0, r.stderr
    rows = json.loads((here / "out" / "jobs.json").read_text())
    assert rows[0]["work_dir"] == str(here / "out" / "tiny_one")


def test_list_lines_as_real_lists_write_them(env: Env, cli, tmp_path: Path) -> None:
    """A BOM, CRLF, trailing `# comments`, a lowercase timeout; bad bytes and control characters
    are refused by line."""
    lst = tmp_path / "list.txt"
    lst.write_bytes(
        b"\xef\xbb\xbf"
        + IDS[1].encode()
        + b" # 2 mins\r\n"
        + IDS[0].encode()
        + b" TIMEOUT (90) # failed\r\n"
        + b"accuracy/test_tiny.py::TestTiny::test_one timeout (5)\n"
        + b"accuracy/test_tiny.py::TestTiny::test_\xff\n"
        + b"accuracy/test_tiny.py::TestTiny::test_one\x00x\n"
    )
    r = cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))])
    assert r.code == 2
    rows = json.loads((env.work / "jobs.json").read_text())
    assert [row["status"] for row in rows] == ["built", "built", "built", "error", "error"]
    assert rows[0]["required_devices"] == 1 and "warnings" not in rows[0]
    scripts = [(Path(row["work_dir"]) / "tiny_auto_test.slurm").read_text() for row in rows[:3]]
    assert "export TEST_CMD=pytest\\ -v" not in scripts[0]
    assert "TEST_CMD='pytest -v accuracy/test_tiny.py::TestTiny::test_one'" in scripts[0]
    assert (
        "test_four[tp4] --timeout=5400'" in scripts[1]
        and "#" not in scripts[1].split("TEST_CMD=")[1].splitlines()[0]
    )
    assert "test_one --timeout=300'" in scripts[2]
    assert "is not UTF-8 text" in rows[3]["error"]
    assert "control character" in rows[4]["error"]
    assert f"{lst}:4: error: test_cmd: is not UTF-8 text" in r.stderr


def test_a_timeout_longer_than_the_time_limit_raises_it(env: Env, cli, tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(f"{IDS[1]} TIMEOUT (180)\n{IDS[1]} TIMEOUT (30)\n")
    assert cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))]).code == 0
    rows = json.loads((env.work / "jobs.json").read_text())
    texts = [(Path(row["work_dir"]) / "tiny_auto_test.slurm").read_text() for row in rows]
    assert "#SBATCH --time=03:30:00" in texts[0]  # 180 minutes and half an hour to install
    assert "#SBATCH --time=02:00:00" in texts[1]


def test_build_takes_a_pasted_list_line_and_warns_on_a_short_time_limit(env: Env, cli) -> None:
    r = cli([], env.request(test_cmd=f"pytest -v {IDS[1]} TIMEOUT (150)"))
    assert r.code == 0, r.stderr
    text = (env.work / "tiny_auto_test.slurm").read_text()
    assert "test_one --timeout=9000'" in text and "TIMEOUT" not in text
    spec = json.loads((env.work / "job_spec.json").read_text())
    assert any("--timeout=9000" in w and "--time-limit" in w for w in spec["warnings"])


def test_refusals_are_one_line_and_leave_no_index(env: Env, cli, tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(IDS[1] + "\n")
    base = str(base_file(env, tmp_path))
    afile = tmp_path / "afile"
    afile.write_text("")
    for work, why in ((afile, "cannot make"), (afile / "sub", "is not a folder")):
        r = cli(["build-many", str(lst), "--base", base, "--work-dir", str(work)])
        assert r.code == 2 and r.stderr.count("\n") == 1 and why in r.stderr, r.stderr
    bad_yaml = tmp_path / "reqs.yaml"
    bad_yaml.write_bytes(b"- custom_cmd: \xff\n")
    r = cli(["build-many", str(bad_yaml), "--base", base, "--work-dir", str(tmp_path / "y")])
    assert r.code == 2 and "is not UTF-8 text" in r.stderr and not (tmp_path / "y").exists()
    requests = tmp_path / "reqs2.yaml"
    requests.write_text("- custom_cmd: 'true'\n- custom_cmd: 'false'\n")
    r = cli(["build-many", str(requests), "--base", base, "--group-by", "devices"])
    assert r.code == 2 and r.stderr.count("\n") == 1 and "--group-by" in r.stderr
    assert not env.work.exists()


def test_an_earlier_build_many_is_not_overwritten(env: Env, cli, tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(IDS[1] + "\n")
    args = ["build-many", str(lst), "--base", str(base_file(env, tmp_path))]
    assert cli(args).code == 0
    assert oct((env.work / "jobs.json").stat().st_mode & 0o777) == oct(0o644 & ~current_umask())
    r = cli(args)
    assert r.code == 2 and "is not empty" in r.stderr and "--force" in r.stderr
    assert cli([*args, "--force"]).code == 0  # asked for: the jobs are built again


def current_umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_an_interrupted_run_leaves_whole_jobs_and_no_index(
    env: Env, cli, tmp_path: Path, monkeypatch
) -> None:
    from trtllm_script_builder import build as build_module

    real, calls = build_module.build, []

    def build_then_stop(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(build_module, "build", build_then_stop)
    lst = tmp_path / "list.txt"
    lst.write_text("\n".join([IDS[1]] * 5) + "\n")
    r = cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))])
    assert r.code == 130 and r.stderr.endswith("error: interrupted\n"), r
    assert sorted(p.name for p in env.work.iterdir()) == ["tiny_one", "tiny_one_2"]
    for job in env.work.iterdir():
        assert sorted(p.name for p in job.iterdir()) == ["job_spec.json", "tiny_auto_test.slurm"]


def test_yaml_items_paths_from_the_list_folder_and_one_folder_each(
    env: Env, cli, tmp_path: Path, monkeypatch
) -> None:
    lists = tmp_path / "lists"
    lists.mkdir()
    items = [
        {"custom_cmd": "true", "work_dir": "jobs/one"},
        {"custom_cmd": "false", "work_dir": "jobs/../jobs/one"},  # the same folder
    ]
    (lists / "reqs.yaml").write_text(yaml.safe_dump(items))
    monkeypatch.chdir(tmp_path)
    r = cli(["build-many", str(lists / "reqs.yaml"), "--base", str(base_file(env, tmp_path))])
    assert r.code == 2
    rows = json.loads((env.work / "jobs.json").read_text())
    assert rows[0]["status"] == "built" and rows[0]["work_dir"] == str(lists / "jobs" / "one")
    assert "is already the folder of line 1" in rows[1]["error"]


def test_group_by_keeps_options_to_their_lines_and_names_every_line(
    env: Env, cli, tmp_path: Path
) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(
        f"{IDS[1]} -k nothing\n{IDS[1]}\naccuracy/test_tiny.py::TestBig::test_too_big\n"
        "accuracy/test_tiny.py::TestBig::test_too_big[x]\n"
    )
    # 16 GPUs on nodes of 6 do not spread evenly over 3 nodes: that group is refused
    base = str(base_file(env, tmp_path, partition="cpu", gpus_per_node=6))
    r = cli(["build-many", str(lst), "--base", base, "--group-by", "devices"])
    rows = json.loads((env.work / "jobs.json").read_text())
    built = {row["work_dir"].rsplit("/", 1)[1]: row for row in rows if row["status"] == "built"}
    assert sorted(built) == ["gpus1_1", "gpus1_2"]
    cmds = sorted(
        next(
            ln
            for ln in (env.work / name / f"{name}_auto_test.slurm").read_text().splitlines()
            if ln.startswith("export TEST_CMD=")
        )
        for name in built
    )
    assert cmds[0].endswith("test_one -k nothing'") and cmds[1].endswith("test_one'")
    assert r.code == 2 and f"{lst}:3,4: error: required_devices" in r.stderr  # the group's lines


def test_a_large_group_is_split_below_the_environment_limit(env: Env, cli, tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    ids = [f"accuracy/test_unknown.py::TestMany::test_{i:04d}_{'x' * 60}" for i in range(2000)]
    materialise_tests(env.repo, ids)
    lst.write_text("\n".join(ids) + "\n")
    args = many(env, tmp_path, lst, "--group-by", "devices")
    assert cli(args).code == 0
    rows = json.loads((env.work / "jobs.json").read_text())
    names = [Path(row["work_dir"]).name for row in rows]
    assert len(names) > 2 and names == [f"gpus1_{i}" for i in range(1, len(names) + 1)]
    assert sum(len(row["lines"]) for row in rows) == 2000
    for row in rows:
        text = Path(row["script_path"]).read_text()
        (line,) = [ln for ln in text.splitlines() if ln.startswith("export TEST_CMD=")]
        assert len(line) < 64 * 1024


def test_a_test_db_file_builds_its_tests_with_their_lines(env: Env, cli, tmp_path: Path) -> None:
    """TensorRT-LLM's test-db YAML: `<name>: [{condition: ..., tests: [ids]}, ...]`."""
    db = tmp_path / "l0_tiny.yml"
    db.write_text(
        "version: 0.0.1\n"
        "l0_tiny:\n"
        "- condition:\n"
        "    terms: {stage: pre_merge}\n"
        "  tests:\n"
        "  # a comment\n"
        f"  - {IDS[1]} # 2 mins\n"
        f"  - {IDS[2]}\n"
        "- condition:\n"
        "    terms: {stage: post_merge}\n"
        "  tests:\n"
        f"  - {IDS[0]}\n"
    )
    r = cli(
        ["build-many", str(db), "--base", str(base_file(env, tmp_path)), "--group-by", "devices"]
    )
    assert r.code == 0, r.stderr
    rows = json.loads((env.work / "jobs.json").read_text())
    assert [(row["required_devices"], row["lines"]) for row in rows] == [
        (1, [7]),
        (2, [8]),
        (4, [12]),
    ]


def test_the_real_test_db_file_builds(env: Env, cli, tmp_path: Path) -> None:
    real = shared_file("tests/integration/test_lists/test-db/l0_dgx_h100.yml")
    materialise_tests(
        env.repo,
        [ln.strip()[2:] for ln in real.read_text().splitlines() if ln.strip().startswith("- ")],
    )
    r = cli(["build-many", str(real), "--base", str(base_file(env, tmp_path))])
    assert r.code == 0, r.stderr
    rows = json.loads((env.work / "jobs.json").read_text())
    data = yaml.safe_load(real.read_text())
    tests = [
        t
        for blocks in data.values()
        if isinstance(blocks, list)
        for b in blocks
        for t in b["tests"]
    ]
    assert len(rows) == len(tests) > 100 and all(row["status"] == "built" for row in rows)
    assert all(
        real.read_text().splitlines()[row["line"] - 1].strip().startswith("- ") for row in rows
    )


def test_request_items_are_validated_and_get_a_folder_each(env: Env, cli, tmp_path: Path) -> None:
    """Items of a request list go through the full validation, never the test-list fast path."""
    items = [
        {"test_cmd": f"pytest -v {IDS[1]}", "model_name": "../../evil"},
        {"test_cmd": f"pytest -v {IDS[1]}", "work_dir": 5},
        {"test_cmd": f"pytest -v {IDS[1]}"},  # tiny_one
        {"test_cmd": f"pytest -v {IDS[1]}", "work_dir": str(env.work / "tiny_one")},
        {"test_cmd": f"pytest -v {IDS[1]}", "work_dir": str(env.work)},
    ]
    lst = tmp_path / "reqs.yaml"
    lst.write_text(yaml.safe_dump(items))
    r = cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))])
    assert r.code == 2
    rows = json.loads((env.work / "jobs.json").read_text())
    assert [row["status"] for row in rows] == ["error", "error", "built", "error", "error"]
    assert rows[0]["error"].startswith("error: model_name: ")
    assert "must be a path" in rows[1]["error"]
    assert "already the folder of line" in rows[3]["error"]
    assert "folder of the whole list" in rows[4]["error"]
    assert not list(tmp_path.rglob("evil*"))


def test_a_stray_timeout_and_a_base_of_another_workflow_are_refused(
    env: Env, cli, tmp_path: Path
) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(f"{IDS[1]} TIMEOUT (90) -v\n{IDS[1]} TIMEOUT (x)\n")
    r = cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))])
    lines = r.stderr.strip().splitlines()
    assert r.code == 2 and len(lines) == 2 and all("trailing TIMEOUT (N)" in x for x in lines)
    assert not (env.work / "jobs.json").exists()  # no job built: nothing written
    base = yaml.safe_load(base_file(env, tmp_path).read_text())
    base["eval_cmd"] = "trtllm-eval --model org/Tiny-Model mmlu"
    other = tmp_path / "eval_base.yaml"
    other.write_text(yaml.safe_dump(base))
    r = cli(["build-many", str(lst), "--base", str(other), "--work-dir", str(tmp_path / "e")])
    assert r.code == 2 and r.stderr.startswith("error: eval_cmd: is set by the base")
    assert not (tmp_path / "e").exists()


def test_request_items_read_times_as_request_files_do(env: Env, cli, tmp_path: Path) -> None:
    """YAML 1.1 would read an unquoted 4:00:00 as 14400 (then minutes: ten days)."""
    lst = tmp_path / "reqs.yaml"
    lst.write_text(f"- test_cmd: pytest -v {IDS[1]}\n  time_limit: 4:00:00\n")
    assert cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))]).code == 0
    row = json.loads((env.work / "jobs.json").read_text())[0]
    assert "#SBATCH --time=4:00:00" in Path(row["script_path"]).read_text()


def test_build_many_prints_the_warnings_with_their_lines(env: Env, cli, tmp_path: Path) -> None:
    """A summary that only counts warnings hides what they say: each is printed with its line."""
    lst = tmp_path / "list.txt"
    # A fixture may add the id (decision parameter-id-check): warned, not refused.
    (env.repo / "tests/integration/defs/accuracy/test_fixture.py").write_text(
        "import pytest\n@pytest.mark.parametrize('tp', [1, 2])\ndef test_x(tp, llm_root): pass\n"
    )
    lst.write_text(IDS[1] + "\naccuracy/test_fixture.py::test_x[tp9]\n")
    r = cli(["build-many", str(lst), "--base", str(base_file(env, tmp_path))])
    assert r.code == 0, r.stderr
    assert f"{lst}:2: warning: [tp9] is not a parameter id" in r.stderr
    assert f"{lst}:1: warning" not in r.stderr
    assert "built 2 job(s), 1 with warnings, 0 failed" in r.stdout


def test_job_folders_are_named_after_the_test_or_model_uniquely(
    env: Env, cli, tmp_path: Path
) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(f"{IDS[1]}\n{IDS[2]}\n{IDS[1]} -k one\n{IDS[1]}\n")
    assert cli(many(env, tmp_path, lst)).code == 0
    names = [Path(r["work_dir"]).name for r in json.loads((env.work / "jobs.json").read_text())]
    assert names == ["tiny_one", "tiny_param_tp2", "tiny_one_2", "tiny_one_3"]

    items = [
        {"test_cmd": f"pytest -v {IDS[1]}", "model_name": "My.Model"},
        {"eval_cmd": "trtllm-eval --model /models/Tiny-Model mmlu"},
        {"custom_cmd": "true"},
        {"custom_cmd": "true"},
        {"custom_cmd": "true", "work_dir": str(tmp_path / "reqs" / "custom_3")},
        {"test_cmd": f"pytest -v {IDS[1]}"},
    ]
    reqs = tmp_path / "reqs.yaml"
    reqs.write_text(yaml.safe_dump(items))
    work = tmp_path / "reqs"
    assert cli(many(env, tmp_path, reqs, "--work-dir", str(work))).code == 0
    rows = json.loads((work / "jobs.json").read_text())
    names = [Path(r["work_dir"]).name for r in rows]
    # an item's own work_dir is never given to a later item without one
    assert names == ["My.Model", "tiny_model_eval", "custom", "custom_2", "custom_3", "tiny_one"]
    assert not [n for n in names if n[:1].isdigit()]


def test_dry_run_checks_every_entry_and_writes_nothing(env: Env, cli, tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(f"{IDS[1]}\n{IDS[0].rstrip(']')}\n{IDS[2]}\n")
    dry = cli(many(env, tmp_path, lst, "--dry-run"))
    assert dry.code == 2 and not env.work.exists()
    assert dry.stdout.splitlines()[:2] == [
        f"{lst}:1: would build {env.work / 'tiny_one'} (1 GPU(s))",
        f"{lst}:3: would build {env.work / 'tiny_param_tp2'} (2 GPU(s))",
    ]
    assert dry.stdout.endswith("would build 2 job(s), 1 failed; nothing written\n")
    assert f"{lst}:2: error: test_cmd: " in dry.stderr
    real = cli(many(env, tmp_path, lst))
    assert real.code == dry.code and real.stderr == dry.stderr
    lst.write_text(f"{IDS[1]}\n")
    ok = cli(many(env, tmp_path, lst, "--dry-run", "--force"))
    assert ok.code == 0 and sorted(p.name for p in env.work.iterdir()) == [
        "jobs.json", "tiny_one", "tiny_param_tp2"
    ]  # fmt: skip


def test_json_ends_stdout_with_the_summary_and_the_rows(env: Env, cli, tmp_path: Path) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text(f"{IDS[1]}\n{IDS[0].rstrip(']')}\n{IDS[2]}\n")
    r = cli(many(env, tmp_path, lst, "--json"))
    assert r.code == 2
    last = json.loads(r.stdout.strip().splitlines()[-1])
    assert (last["built"], last["failed"], last["dry_run"]) == (2, 1, False)
    assert last["jobs_per_gpu_count"] == {"1": 1, "2": 1}
    assert last["index"] == str(env.work / "jobs.json")
    assert last["jobs"] == json.loads((env.work / "jobs.json").read_text())
    assert all("work_dir" in row for row in last["jobs"] if row["status"] == "built")
    dry = cli(many(env, tmp_path, lst, "--json", "--dry-run", "--work-dir", str(tmp_path / "d")))
    last = json.loads(dry.stdout.strip().splitlines()[-1])
    assert (last["would_build"], last["failed"], last["index"]) == (2, 1, None)
    assert [row["status"] for row in last["jobs"]] == ["would build", "error", "would build"]
    assert not (tmp_path / "d").exists()


def test_names_are_unique_deterministic_and_cheap() -> None:
    from trtllm_script_builder.batch import Names, test_job_name

    names = Names()
    got = [names.unique(n) for n in ["a", "a_2", "a", "a", "a_2", "b"]]
    assert got == ["a", "a_2", "a_3", "a_4", "a_2_2", "b"]
    many = Names()
    assert [many.unique("x") for _ in range(20_000)][-1] == "x_20000"  # no rescans: fast
    assert test_job_name("accuracy/test_x.py::TestLlama3_1_8BInstruct::test_fp8[tp2]") == (
        "llama3_1_8binstruct_fp8_tp2"
    )
    assert test_job_name("unittest/test_foo.py::test_bar[a/b c]") == "foo_bar_a_b_c"
    assert test_job_name("unittest/test_foo.py") == "foo"
    weird = test_job_name("t.py::TestX::test_y[" + "../" * 50 + "]")
    assert len(weird) <= 80 and "/" not in weird and "." not in weird


def test_a_compiling_batch_shares_one_wheel_folder_so_one_compile(
    env: Env, cli, tmp_path: Path
) -> None:
    lst = tmp_path / "list.txt"
    lst.write_text("\n".join(IDS) + "\n")
    r = cli(many(env, tmp_path, lst, "--compile", "--device-type", "H100"))
    assert r.code == 0, r.stderr
    rows = json.loads((env.work / "jobs.json").read_text())
    specs = [json.loads((Path(row["work_dir"]) / "job_spec.json").read_text()) for row in rows]
    keys = {p["key"] for s in specs for p in s["prerequisites"]}
    assert len(keys) == 1 and f"--dist_dir {env.work / 'wheel'}" in keys.pop()
    # a wheel_dir of the user's own wins
    r = cli(many(env, tmp_path, lst, "--compile", "--device-type", "H100", "--force",
                 "--wheel-dir", "/lustre/wheels"))  # fmt: skip
    assert r.code == 0, r.stderr
    spec = json.loads((Path(rows[0]["work_dir"]) / "job_spec.json").read_text())
    assert spec["prerequisites"][0]["output"] == "/lustre/wheels"
