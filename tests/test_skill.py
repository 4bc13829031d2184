"""The agent skill: an agent that follows SKILL.md gets what the CLI gives with flags.

Every ```json request in SKILL.md is built as the skill says (`build - --json`, the JSON on
standard input) in a temporary tree where /home/alice is a temporary folder, and the files
are compared with a build of the same fields given as flags. The tables the skill shows
(request fields, job_spec fields, exit codes, the error line) are checked against the code.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from trtllm_script_builder.cli import main
from trtllm_script_builder.errors import EXIT_INVALID, EXIT_TOOL_FAILED
from trtllm_script_builder.model.jobspec import JobSpec, SlurmParams
from trtllm_script_builder.model.request import Request

ROOT = Path(__file__).resolve().parents[1]
SKILL = ROOT / "skills" / "trtllm-test-script-builder" / "SKILL.md"
EXAMPLES = ROOT / "examples"
HOME = "/home/alice"  # the home folder the skill's examples are written for


def skill_text() -> str:
    return SKILL.read_text()


def fenced(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", skill_text(), re.M | re.S)


def section(title: str) -> str:
    text = skill_text()
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def first_column(table_text: str) -> list[str]:
    """The backticked names in the first column of the first table in `table_text`."""
    rows = [ln for ln in table_text.splitlines() if ln.startswith("| `")]
    return [re.match(r"\| `([^`]+)`", ln).group(1) for ln in rows]  # type: ignore[union-attr]


def requests() -> list[dict[str, Any]]:
    return [json.loads(block) for block in fenced("json")]


def files_in(path: Path) -> dict[str, tuple[bytes, bool]]:
    return {
        p.name: (p.read_bytes(), bool(p.stat().st_mode & 0o100))
        for p in sorted(path.iterdir())
        if p.is_file() and p.name != "slurm_env.json"
    }


def to_flags(fields: dict[str, Any]) -> list[str]:
    """The same request as `build` flags, the way a person would type them."""
    args: list[str] = []
    for key, value in fields.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else f"--no-{key.replace('_', '-')}")
        elif isinstance(value, dict):
            args += [flag, json.dumps(value)]
        else:
            args += [flag, str(value)]
    return args


class Tree:
    """A temporary home holding a TensorRT-LLM-shaped checkout, models and cluster files."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home" / "alice"
        shutil.copytree(EXAMPLES / "trtllm_repo", self.home / "TensorRT-LLM")
        shutil.copytree(EXAMPLES / "trtllm_repo" / "models", self.home / "llm-models")

    def place(self, value: Any) -> Any:
        """The skill's /home/alice paths moved into this tree."""
        if isinstance(value, str):
            return value.replace(HOME, str(self.home))
        if isinstance(value, dict):
            return {k: self.place(v) for k, v in value.items()}
        return value

    def prepare(self, request: dict[str, Any]) -> dict[str, Any]:
        """The request with its paths in this tree, and the slurm_env.json a probe would leave."""
        req: dict[str, Any] = self.place(request)
        if req["execution_scenario"] != "local_docker":
            remote = req["execution_scenario"] == "remote_slurm"
            env = json.loads(
                (EXAMPLES / f"slurm_env{'_remote' if remote else ''}.json").read_text()
            )
            env["partitions"][0]["name"] = env["default_partition"] = req["partition"]
            env["accounts"] = [req["account"]]
            env["default_account"] = req["account"]
            path = Path(req["slurm_env_file"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(env, indent=2))
        return req


@pytest.fixture()
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tree:
    t = Tree(tmp_path)
    monkeypatch.setenv("HOME", str(t.home))
    monkeypatch.delenv("TRTLLM_SCRIPT_BUILDER_CONFIG", raising=False)
    return t


def invoke(args: list[str], stdin: str | None = None) -> Any:
    result = CliRunner().invoke(main, args, input=stdin)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_skill_has_the_front_matter_an_agent_loader_reads() -> None:
    m = re.match(r"^---\n(.*?)\n---\n", skill_text(), re.S)
    assert m, "SKILL.md starts with a YAML front matter block"
    meta = yaml.safe_load(m.group(1))
    assert meta["name"] == "trtllm-test-script-builder"
    assert "trtllm-script-builder" in meta["description"]


def test_skill_examples_cover_every_scenario() -> None:
    assert {r["execution_scenario"] for r in requests()} == {
        "local_docker",
        "local_slurm",
        "remote_slurm",
    }


@pytest.mark.parametrize("index", range(len(requests())))
def test_an_agent_following_the_skill_gets_what_the_flags_give(tree: Tree, index: int) -> None:
    req = tree.prepare(requests()[index])
    work = Path(req["work_dir"])

    # The agent: the request as JSON on standard input, the job_spec read back with --json.
    r = invoke(["build", "-", "--json"], json.dumps(req))
    assert r.exit_code == 0, r.stderr
    spec = json.loads(r.stdout)
    assert r.stdout == (work / "job_spec.json").read_text()
    assert spec["execution_scenario"] == req["execution_scenario"]
    assert spec["workflow_type"] == req["workflow_type"]
    assert Path(spec["script_path"]).is_file()
    by_agent = files_in(work)

    for p in work.iterdir():
        if p.name == ".tsb-sets":  # the sets of a folder that existed before its first build
            shutil.rmtree(p)
        elif p.name != "slurm_env.json":
            p.unlink()

    # A person: the same fields as flags, the report on standard output.
    r = invoke(["build", *to_flags(req)])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("Generated:")
    assert files_in(work) == by_agent


def test_the_error_line_the_skill_shows_is_what_the_tool_prints(tree: Tree) -> None:
    shown = [b.strip() for b in fenced("text") if re.match(r"error: [a-z_]+: ", b)]
    assert shown, "SKILL.md shows a real error line"
    for line in shown:
        field = line.split(":")[1].strip()
        req = tree.prepare(requests()[0])
        del req[field]
        r = invoke(["build", "-", "--json"], json.dumps(req))
        assert r.exit_code == EXIT_INVALID
        assert r.stderr.strip() == line
        assert r.stdout == ""
        assert not (Path(req["work_dir"]) / "job_spec.json").exists()


def test_the_error_line_format_is_the_one_the_code_uses() -> None:
    assert "error: <field>: <what is wrong>; <what to do>" in [b.strip() for b in fenced("text")]


def test_the_request_table_lists_every_request_field() -> None:
    assert sorted(first_column(section("The request"))) == sorted(Request.model_fields)


def test_fields_the_skill_says_to_leave_out_are_refused(tree: Tree) -> None:
    text = section("The request")
    leave_out = re.search(
        r"leave\s+out orchestrator-only fields such as (.*?),\s+and pass", text, re.S
    )
    assert leave_out
    names = re.findall(r"`([a-z_]+)`", leave_out.group(1))
    assert "total_required_devices" in text and len(names) >= 5
    for name in [*names, "total_required_devices"]:
        req = {**tree.prepare(requests()[0]), name: "x"}
        r = invoke(["build", "-", "--json"], json.dumps(req))
        assert r.exit_code == EXIT_INVALID
        assert r.stderr.startswith(f"error: {name}: is not a request field")


def test_the_job_spec_table_names_real_fields() -> None:
    text = section("What the executors read from job_spec.json")
    names = first_column(text)
    assert set(names) <= set(JobSpec.model_fields), set(names) - set(JobSpec.model_fields)
    row = next(ln for ln in text.splitlines() if ln.startswith("| `slurm_params`"))
    assert set(re.findall(r"`([a-z_]+)`", row)) - {"slurm_params"} == set(SlurmParams.model_fields)


def test_the_exit_table_matches_the_code() -> None:
    rows = {
        int(m.group(1)): m.group(0)
        for m in re.finditer(r"^\| (\d) \|.*$", section("The answer"), re.M)
    }
    assert set(rows) == {0, EXIT_INVALID, EXIT_TOOL_FAILED}


@pytest.mark.parametrize(
    "check",
    [
        lambda text: "build - --json" in text,
        lambda text: "check WORK_DIR" in text,
        lambda text: "submit WORK_DIR" in text,
        lambda text: "watch WORK_DIR" in text,
    ],
)
def test_the_skill_names_the_commands(check: Callable[[str], bool]) -> None:
    assert check(skill_text())


def test_the_commands_the_skill_calls_exist() -> None:
    import click

    ctx = click.Context(main)
    for name in ("build", "check", "probe"):
        assert main.get_command(ctx, name) is not None


def test_the_round_trip_rules_the_skill_gives_hold(tree: Tree) -> None:
    """What cost an agent a round trip, stated in the skill and true of the tool."""
    rules = " ".join(section("Rules that save a round trip").split())
    for said in ("one `error:` line per problem", '"required_devices": 4', '"01:30:00"'):
        assert said in rules, said
    assert "no `pytest ` prefix is needed" in rules and "a single word is refused" in rules
    req = tree.prepare(requests()[0])
    # a bare test id builds as with the prefix
    bare = {**req, "test_cmd": req["test_cmd"].removeprefix("pytest ")}
    r = invoke(["build", "-", "--json", "--dry-run"], json.dumps(bare))
    assert r.exit_code == 0, r.stderr
    # every problem at once: a quoted number, H:MM, a keyword for a command
    bad = {**req, "required_devices": "4", "time_limit": "1:30"}
    r = invoke(["build", "-", "--json"], json.dumps(bad))
    fields = [line.split(":")[1].strip() for line in r.stderr.splitlines()]
    assert r.exit_code == EXIT_INVALID and fields == ["required_devices", "time_limit"], r.stderr
    del req["test_cmd"], req["workflow_type"]
    r = invoke(["build", "-", "--json"], json.dumps({**req, "eval_cmd": "accuracy"}))
    assert r.exit_code == EXIT_INVALID and r.stderr.startswith("error: eval_cmd: is one word")
