"""Hostile values in every command, path and env field.

The generated script must stay valid (bash -n, shellcheck), running it must execute none of the
values on the host, and each value must reach srun (or docker) unchanged — or the build refuses
it with exit 2 naming the field. `srun` and `docker` here are recording stand-ins: no Slurm
step or container can be started by these tests (the live-cluster tests do that); they only
record their arguments and environment.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trtllm_script_builder.cli import main

from .conftest import SLURM_ENV, make_repo

SHELLCHECK = shutil.which("shellcheck")
RECORDER = """#!/bin/bash
# Recording stand-in for {name}: saves its arguments and environment, runs nothing.
n=$(find "$REC_DIR" -name '{name}.*.args' | wc -l)
printf '%s\\0' "$@" > "$REC_DIR/{name}.$n.args"
env -0 > "$REC_DIR/{name}.$n.env"
exit 0
"""
HOSTILE_BITS = [
    "$(touch CANARY)",
    "`touch CANARY`",
    "'",
    '"',
    "\\",
    " ",
    "\n",
    ";",
    "|",
    "&&",
    "*",
    "!",
    "${HOME}",
    "$0",
    "#",
    "~",
    "%j",
    "\t",
    "é",
]

bits = st.lists(
    st.sampled_from(HOSTILE_BITS) | st.text(alphabet="ab-_./=", min_size=1, max_size=4),
    min_size=1,
    max_size=6,
).map("".join)
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _with_canary(text: str, canary: Path) -> str:
    return text.replace("CANARY", str(canary))


def build(req: dict[str, Any], home: Path) -> tuple[int, str]:
    env = {"HOME": str(home)}
    res = CliRunner().invoke(main, ["build", "-"], input=json.dumps(req), env=env)
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stderr


def test_shellcheck_is_there_to_check_the_scripts() -> None:
    """Without shellcheck every script is still run through `bash -n`; this says so aloud."""
    if SHELLCHECK is None:
        if os.environ.get("TSB_REQUIRE_SLURM"):  # CI installs it: missing there is a failure
            pytest.fail("shellcheck is not installed")
        pytest.skip("shellcheck is not installed: generated scripts get only `bash -n`")


def check_script(path: Path) -> None:
    subprocess.run(["bash", "-n", str(path)], check=True)
    if SHELLCHECK:
        out = subprocess.run([SHELLCHECK, "-f", "gcc", str(path)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout


def run_recorded(
    script: Path, rec: Path, name: str = "srun"
) -> list[tuple[list[str], dict[str, str]]]:
    """Run the script with a recording `srun`/`docker` first on PATH; return what each call got."""
    fake = rec / "bin"
    fake.mkdir(exist_ok=True)
    (fake / name).write_text(RECORDER.format(name=name))
    (fake / name).chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "REC_DIR": str(rec), "HOME": str(rec)}
    subprocess.run(
        ["bash", str(script)],
        check=True,
        env=env,
        cwd=rec,
        stdin=subprocess.DEVNULL,
        capture_output=True,
    )
    calls = []
    for i in range(len(list(rec.glob(f"{name}.*.args")))):
        args = (rec / f"{name}.{i}.args").read_bytes().decode().split("\0")[:-1]
        pairs = (rec / f"{name}.{i}.env").read_bytes().decode().split("\0")[:-1]
        calls.append((args, dict(p.split("=", 1) for p in pairs)))
    return calls


def opt(args: list[str], name: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(name + "="))


class Case:
    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp())
        self.canary = self.tmp / "canary"
        self.home = self.tmp / "home"
        self.home.mkdir()
        self.rec = self.tmp / "rec"
        self.rec.mkdir()

    def close(self) -> None:
        assert not self.canary.exists(), "a hostile value was executed"
        shutil.rmtree(self.tmp, ignore_errors=True)

    def repo(self, name: str = "repo") -> Path:
        return make_repo(self.tmp / name)

    def slurm_env(self) -> Path:
        p = self.tmp / "slurm_env.json"
        p.write_text(json.dumps(SLURM_ENV))
        return p

    def request(self, repo: Path, work: Path, **fields: Any) -> dict[str, Any]:
        req = {
            "execution_scenario": "local_slurm",
            "work_dir": str(work),
            "repo_root": str(repo),
            "llm_models_root": "/models",
            "models_path": str(repo / "models"),
            "partition": "gpu",
            "account": "acct",
            "slurm_env_file": str(self.slurm_env()),
        }
        req.update(fields)
        return req


@pytest.mark.parametrize("field", ["test_cmd", "eval_cmd", "bench_cmd", "custom_cmd"])
@SETTINGS
@given(value=bits)
@example(value='""')  # an empty word selects a folder of tests: sized across nodes
@example(value='. "a"')
def test_hostile_commands_reach_srun_unchanged(field: str, value: str) -> None:
    c = Case()
    try:
        value = _with_canary(value, c.canary)
        prefix = {
            "test_cmd": "pytest accuracy/test_tiny.py::TestTiny::test_one ",
            "eval_cmd": "trtllm-eval --model tiny mmlu ",
            "bench_cmd": "trtllm-bench -m tiny throughput ",
            "custom_cmd": "echo ",
        }[field]
        cmd = prefix + value
        repo, work = c.repo(), c.tmp / "work"
        code, err = build(c.request(repo, work, **{field: cmd}), c.home)
        if code != 0:
            # A word like `.` is a folder of tests since folder selections are sized: a refusal
            # then names required_devices, as decision one-line-errors says sizing errors do.
            named = (field, "required_devices") if field == "test_cmd" else (field,)
            assert code == 2 and err.startswith(tuple(f"error: {f}: " for f in named)), err
            assert not work.exists()
            return
        script = next(work.glob("*.slurm"))
        check_script(script)
        calls = run_recorded(script, c.rec)
        run_args, run_env = calls[-1]
        var = {
            "test_cmd": "TEST_CMD",
            "eval_cmd": "EVAL_CMD",
            "bench_cmd": "BENCH_CMD",
            "custom_cmd": "CUSTOM_COMMAND",
        }[field]
        want = cmd
        if field == "bench_cmd":
            from trtllm_script_builder.resolve.commands import parse_bench

            want = parse_bench(cmd).run
        if "trtllm-llmapi-launch" in script.read_text():
            # across nodes the launcher takes the command as words, each quoted once as
            # shlex writes it (decision launcher-words): `""` reaches it as `''`
            assert shlex.split(run_env[var]) == shlex.split(want)
        else:
            assert run_env[var] == want
        assert opt(run_args, "--container-image") == "nvcr.io#test/trtllm:x86_64-1"
    finally:
        c.close()


@SETTINGS
@given(values=st.lists(bits, min_size=1, max_size=3))
def test_hostile_custom_env_values_stay_literal(values: list[str]) -> None:
    c = Case()
    try:
        values = [_with_canary(v, c.canary) for v in values]
        pairs = {f"V{i}": v for i, v in enumerate(values)}
        custom_env = " ".join(shlex.quote(f"{k}={v}") for k, v in pairs.items())
        repo, work = c.repo(), c.tmp / "work"
        out = c.tmp / "seen.json"
        custom_cmd = (
            f"python3 -c \"import json, os; json.dump(dict(os.environ), open('{out}', 'w'))\""
        )
        code, err = build(
            c.request(repo, work, custom_cmd=custom_cmd, custom_env=custom_env), c.home
        )
        assert code == 0, err
        script = work / "custom_custom.slurm"
        check_script(script)
        check_script(work / "slurm_run_custom.sh")
        (_, _), (run_args, run_env) = run_recorded(script, c.rec)
        assert run_args[-2:] == ["bash", str(work / "slurm_run_custom.sh")]
        # What the container would do with that environment: run the run script.
        subprocess.run(["bash", run_args[-1]], check=True, env=run_env, capture_output=True)
        seen = json.loads(out.read_text())
        for k, v in pairs.items():
            assert seen[k] == v
    finally:
        c.close()


@pytest.mark.parametrize(
    "field", ["repo_root", "work_dir", "models_path", "checkpoint_path", "custom_script"]
)
@SETTINGS
@given(name=bits)
def test_hostile_paths_are_carried_or_refused(field: str, name: str) -> None:
    c = Case()
    try:
        name = _with_canary(name, c.canary).replace("/", "_").replace("\0", "") or "x"
        if name in (".", ".."):
            name = "x" + name
        repo, work = c.tmp / "repo", c.tmp / "work"
        fields: dict[str, Any] = {"custom_cmd": "true"}
        if field == "repo_root":
            repo = c.tmp / name / "repo"
        elif field == "work_dir":
            work = c.tmp / name / "work"
        make_repo(repo)
        if field == "models_path":
            fields["models_path"] = str(c.tmp / name)
        elif field == "checkpoint_path":
            fields["checkpoint_path"] = str(c.tmp / name / "ckpt")
        elif field == "custom_script":
            script = c.tmp / name / "run.sh"
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text("true\n")
            fields = {"custom_script": str(script)}
        code, err = build(c.request(repo, work, **fields), c.home)
        if code != 0:
            assert code == 2 and err.startswith("error: "), err
            assert err.split(":")[1].strip() in (
                field,
                "models_path",
                "checkpoint_path",
                "custom_script",
                "work_dir",
                "repo_root",
                "request",
            ), err
            assert not work.exists() or not any(work.iterdir())
            return
        script_path = next(work.glob("*.slurm"))
        check_script(script_path)
        calls = run_recorded(script_path, c.rec)
        args, envv = calls[-1]
        mounts = opt(args, "--container-mounts")
        assert envv["PROJECT_PATH"] == str(repo)
        assert f"{repo}:{repo}" in mounts.split(",")
        if field == "models_path":
            assert f"{c.tmp / name}:/models" in mounts.split(",")
        if field == "custom_script":
            assert envv["CUSTOM_COMMAND"] == "bash " + shlex.quote(str(c.tmp / name / "run.sh"))
        spec = json.loads((work / "job_spec.json").read_text())
        assert spec["container_mounts"] == mounts
    finally:
        c.close()


@SETTINGS
@given(value=bits)
def test_hostile_docker_command(value: str) -> None:
    c = Case()
    try:
        value = _with_canary(value, c.canary)
        repo, work = c.repo(), c.tmp / "work"
        req = c.request(
            repo,
            work,
            execution_scenario="local_docker",
            custom_cmd="echo " + value,
            custom_env="A='$(touch CANARY)'".replace("CANARY", str(c.canary)),
        )
        req["env_check"] = {"gpus_per_node": 8}
        for k in ("partition", "account", "slurm_env_file"):
            del req[k]
        code, err = build(req, c.home)
        assert code == 0, err
        script = work / "docker_cmd.sh"
        check_script(script)
        ((args, _),) = run_recorded(script, c.rec, "docker")
        spec = json.loads((work / "job_spec.json").read_text())
        assert ["docker", *args] == shlex.split(spec["docker_cmd"])
        assert "RUN_CMD=echo " + value in args
        assert "CUSTOM_ENV=" + shlex.quote(f"A=$(touch {c.canary})") in args
    finally:
        c.close()


def test_examples_pass_shellcheck(tmp_path: Path) -> None:
    """Every bundled example request builds into scripts that bash and shellcheck accept."""
    examples = Path(__file__).resolve().parents[1] / "examples" / "requests"
    for req in sorted(examples.glob("*.yaml")):
        import yaml

        data = yaml.safe_load(req.read_text())
        for k in ("work_dir", "repo_root", "slurm_env_file", "models_path"):
            if k in data and not os.path.isabs(data[k]):
                data[k] = str((req.parent / data[k]).resolve())
        data["work_dir"] = str(tmp_path / req.stem)
        code, err = build(data, tmp_path)
        assert code == 0, (req, err)
        for script in (tmp_path / req.stem).glob("*.s*"):
            check_script(script)


def test_a_value_starting_with_equals_is_quoted(tmp_path: Path) -> None:
    """Found by the property test above: `export X==` is valid bash but shellcheck refuses it."""
    from trtllm_script_builder.render import quote

    script = tmp_path / "s.sh"
    lines = [f"export X{i}={quote(v)}" for i, v in enumerate(["=", "==a", "a=b", "&&="])]
    script.write_text("#!/bin/bash\n" + "\n".join(lines) + '\necho "$X0$X1$X2$X3"\n')
    check_script(script)
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True)
    assert done.stdout == "===aa=b&&=\n"
