"""build-many over TensorRT-LLM's test-db files builds every kind of line as CI runs it, on its
block's GPU count, and chooses blocks by the target GPU (decision test-db-lines)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

from .conftest import Env, materialise_tests, shared_file
from .test_batch import many

UNIT = "pytest -v --timeout=1600 --timeout-method=thread --test-prefix=unittest -p no:xdist --ignore=integration"


def _exports(script: Path) -> dict[str, str]:
    out = {}
    for ln in script.read_text().splitlines():
        if ln.startswith("export ") and "=" in ln:
            key, _, value = ln.removeprefix("export ").partition("=")
            out[key] = shlex.split(value)[0] if value else ""
    return out


def _materialise_real(repo: Path, db: Path) -> None:
    """The files the real list names: unit tests under tests/, the rest under the defs."""
    lines = [ln.strip()[2:] for ln in db.read_text().splitlines() if ln.strip().startswith("- ")]
    ids = [ln.split(" #")[0] for ln in lines if not ln.startswith("'")]
    materialise_tests(repo, [i for i in ids if not i.startswith("unittest/")])
    for i in ids:
        if i.startswith("unittest/"):
            path = repo / "tests" / i.split()[0]
            if path.suffix == ".py":
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("import pytest\n\n\n@pytest.mark.gpu4\ndef test_x():\n    pass\n")
            else:
                path.mkdir(parents=True, exist_ok=True)


def test_the_real_h100_file_runs_unit_lines_as_ci_does(env: Env, cli, tmp_path: Path) -> None:
    real = shared_file("tests/integration/test_lists/test-db/l0_dgx_h100.yml")
    _materialise_real(env.repo, real)
    r = cli(many(env, tmp_path, real, "--gpu-type", "h100", "--gpu-count", "4"))
    assert r.code == 0, r.stderr
    rows = json.loads((env.work / "jobs.json").read_text())
    assert rows and all(row["status"] == "built" for row in rows)
    # every block of the file is a 4-GPU H100 one: every job gets the 4 GPUs CI runs it on
    assert {row["required_devices"] for row in rows} == {4}
    by_line = {row["line"]: row for row in rows}
    folder = _exports(Path(by_line[18]["script_path"]))
    assert folder["TEST_CMD"] == f"{UNIT} unittest/_torch/multi_gpu"
    assert folder["TEST_WORKDIR"].endswith("/tests")
    marked = _exports(Path(by_line[20]["script_path"]))
    assert marked["TEST_CMD"] == f"{UNIT} unittest/llmapi/test_llm_multi_gpu_pytorch.py -m gpu4"
    assert marked["TEST_WORKDIR"].endswith("/tests")
    accuracy = _exports(Path(by_line[21]["script_path"]))
    assert accuracy["TEST_WORKDIR"].endswith("/tests/integration/defs")
    assert accuracy["TEST_CMD"].startswith("pytest -v accuracy/test_llm_api_pytorch.py::")
    # five lines of one file, told apart by their -m
    names = {Path(row["work_dir"]).name for row in rows if row["line"] in range(150, 156)}
    assert "llm_multi_gpu_gpu2_and_part0" in names and len(names) == 6


def test_blocks_are_chosen_by_gpu_and_count(env: Env, cli, tmp_path: Path) -> None:
    materialise_tests(env.repo, ["accuracy/test_a.py::test_one", "accuracy/test_b.py::test_two"])
    db = tmp_path / "l0_mixed.yml"
    db.write_text(
        "version: 0.0.1\n"
        "l0_mixed:\n"
        "- condition:\n"
        "    ranges: {system_gpu_count: {gte: 2, lte: 2}}\n"
        "    wildcards: {gpu: ['*h100*', '*h200*']}\n"
        "  tests:\n"
        "  - accuracy/test_a.py::test_one\n"
        "- condition:\n"
        "    ranges: {system_gpu_count: {gte: 4, lte: 8}}\n"
        "    wildcards: {gpu: ['*b200*']}\n"
        "  tests:\n"
        "  - accuracy/test_b.py::test_two\n"
    )

    def built(*opts: str) -> list[tuple[int, int]]:
        out = tmp_path / "w" / "_".join(opts or ("all",))
        r = cli(many(env, tmp_path, db, "--work-dir", str(out), *opts))
        assert r.code == 0, r.stderr
        rows = json.loads((out / "jobs.json").read_text())
        return [(row["line"], row["required_devices"]) for row in rows]

    assert built() == [(7, 2), (12, 4)]  # each block's own count, the lowest of its range
    assert built("--gpu-type", "H200") == [(7, 2)]
    assert built("--gpu-type", "dgx_b200", "--gpu-count", "8") == [(12, 4)]
    assert built("--gpu-count", "2") == [(7, 2)]
    r = cli(many(env, tmp_path, db, "--work-dir", str(tmp_path / "none"), "--gpu-type", "a100"))
    assert r.code == 2 and "LIST: no block of" in r.stderr and "--gpu-type a100" in r.stderr
    assert not (tmp_path / "none").exists()
    r = cli(many(env, tmp_path, db, "--work-dir", str(tmp_path / "bad"), "--gpu-type", "h100;x"))
    assert r.code == 2 and "is not a GPU name" in r.stderr


def test_every_kind_of_line(env: Env, cli, tmp_path: Path) -> None:
    materialise_tests(env.repo, ["accuracy/test_a.py::test_one", "accuracy/test_a.py::test_two"])
    unit = env.repo / "tests" / "unittest" / "llmapi" / "test_llm.py"
    unit.parent.mkdir(parents=True)
    unit.write_text("import pytest\n\n\n@pytest.mark.gpu2\ndef test_x():\n    pass\n")
    lst = tmp_path / "list.txt"
    lst.write_text(
        "accuracy/test_a.py::test_one ISOLATION\n"  # 1: run alone, as CI does
        "accuracy/test_a.py::test_two TIMEOUT (90),ISOLATION\n"  # 2
        "accuracy/test_a.py::test_one XFAIL (https://nvbugs/1)\n"  # 3: CI runs it
        "accuracy/test_a.py::test_two SKIP (https://nvbugs/2)\n"  # 4: CI does not
        "full:H100/accuracy/test_a.py::test_two\n"  # 5
        'unittest/llmapi/test_llm.py -k "not fp8" TIMEOUT (300)\n'  # 6: bounds the whole run
    )
    r = cli(many(env, tmp_path, lst))
    assert r.code == 2
    assert (
        f"{lst}:4: error: test_cmd: is marked SKIP (https://nvbugs/2), so CI does not run it"
        in r.stderr
    )
    rows = {row["line"]: row for row in json.loads((env.work / "jobs.json").read_text())}
    cmds = {n: _exports(Path(row["script_path"]))["TEST_CMD"] for n, row in rows.items() if n != 4}
    assert cmds == {
        1: "pytest -v accuracy/test_a.py::test_one",
        2: "pytest -v accuracy/test_a.py::test_two --timeout=5400",
        3: "pytest -v accuracy/test_a.py::test_one",
        5: "pytest -v accuracy/test_a.py::test_two",
        6: f"{UNIT} unittest/llmapi/test_llm.py -k 'not fp8'",
    }
    unit_script = Path(rows[6]["script_path"]).read_text()
    assert "#SBATCH --time=05:30:00" in unit_script  # 300 minutes and the install
    assert rows[6]["required_devices"] == 2  # its gpu2 mark
    # grouped: the ISOLATION lines each alone, the plain ones together
    r = cli(many(env, tmp_path, lst, "--group-by", "devices", "--work-dir", str(tmp_path / "g")))
    groups = [row["lines"] for row in json.loads((tmp_path / "g" / "jobs.json").read_text())
              if row["status"] == "built"]  # fmt: skip
    assert sorted(groups) == [[1], [2], [3, 5], [6]]


def test_real_lists_hold_only_kinds_that_are_handled(tmp_path: Path) -> None:
    """Every line of every test-db file and test list in the shared data is a kind built above."""
    from trtllm_script_builder.batch import Bad, read_entries

    folder = shared_file("tests/integration/test_lists")
    files = sorted(folder.rglob("*.yml")) + sorted(folder.rglob("*.txt"))
    assert len(files) >= 4
    for f in files:
        for e in read_entries(f):
            assert not isinstance(e, Bad), (f, e.line, e.error.line())
            assert "TIMEOUT" not in e.fields["test_cmd"] and "ISOLATION" not in e.fields["test_cmd"]
    data = yaml.safe_load((folder / "test-db" / "l0_dgx_h100.yml").read_text())
    assert data["l0_dgx_h100"][0]["condition"]["ranges"]["system_gpu_count"] == {"gte": 4, "lte": 4}


def test_a_perf_sanity_line_keeps_its_config_sizing(env: Env, cli, tmp_path: Path) -> None:
    """A perf-sanity id runs through submit.py, sized by its config, not by its block."""
    req = env.request(partition="gb")
    req["work_dir"] = str(env.work)
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(req))
    db = tmp_path / "l0_perf.yml"
    db.write_text(
        "l0_perf:\n"
        "- condition:\n"
        "    ranges: {system_gpu_count: {gte: 8, lte: 8}}\n"
        "  tests:\n"
        "  - perf/test_perf_sanity.py::test_e2e[aggr_upload-tiny_cfg-tiny_tp2pp3] TIMEOUT (60)\n"
    )
    r = cli(["build-many", str(db), "--base", str(base)])
    assert r.code == 0, r.stderr
    (row,) = json.loads((env.work / "jobs.json").read_text())
    assert row["category"] == 4 and row["required_devices"] == 6
