"""Fuzz: hostile values in every request field and in every file the tool reads that another
person may write (slurm_env.json, the allocation state file, the site config, the checkout's
image table, the test files it sizes from), and broken shapes of every JSON and YAML document
(a key written twice, deep nesting, alias bombs).

For each generated value one of two things must happen (decision one-validation-layer):

- refused: exit status 2 and exactly one line on stderr, `error: <field>: ...`, naming the
  field (or a field the value is known to lead to, listed in ALSO), and nothing written; or
- built: the script passes `bash -n`, and run with recording stand-ins on PATH (`srun`,
  `docker`, `scancel`: a small program that writes its argv and environment as JSON and runs
  nothing) the value arrives byte-identical where it belongs. In both cases no value is ever
  executed (a canary file stays absent) and nothing outside the job's folder changes (the
  folder around it is snapshotted before and after).

Reproducible and bounded: hypothesis runs derandomized (the same examples on every run, no
example database) with max_examples and deadline set below; the whole file took 19 s
(45 s while other jobs shared the 2 cores) when it was written.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtllm_script_builder.cli import main
from trtllm_script_builder.model.request import EnvCheck, Request
from trtllm_script_builder.process import persistent
from trtllm_script_builder.resolve.image import enroot_uri

from .conftest import SLURM_ENV, make_repo

IMAGE = "nvcr.io/test/trtllm:x86_64-1"
RECORDER = """#!/usr/bin/env python3
# Recording stand-in for {name}: writes its argv and environment as JSON, runs nothing but
# ssh's check of the log folders, which it runs under sh here as a login node would (this
# machine's folders playing the cluster's, where /remote/... is not made yet).
import json, os, sys
folder = os.environ["REC_DIR"]
n = len([f for f in os.listdir(folder) if f.startswith("{name}.")])
with open(os.path.join(folder, "{name}.%d.json" % n), "w") as f:
    json.dump({{"argv": sys.argv[1:], "env": dict(os.environ)}}, f)
line = (sys.argv[-1:] or [""])[0]
if "sbatch --parsable" in line:
    print("4242")  # as sbatch --parsable answers
if "{name}" == "ssh" and "stat -c" in line:
    os.execvp("sh", ["sh", "-c", line])
"""


def fuzz_settings(n: int) -> Any:
    return settings(
        max_examples=n,
        deadline=None,  # a build is ~50 ms, but the first one imports the world
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


# ---------------------------------------------------------------- the hostile values

CANARY = "CANARY"  # replaced by the case's canary path
PIECES = [
    "\x00", "\x1b[2J", "\r", "\t", "\n", "\u2028", "\u2029", "\x85", "\x9b", "\x7f", "\udc80",
    "'", '"', "$(touch CANARY)", "`touch CANARY`", "%j", "%x", "%%", "${HOME}", "\\", ",",
    ":", " ", "*", ";", "&&", "|", "#", "é", "=", "-", "/",
]  # fmt: skip
plain = st.text(alphabet="abcXYZ019._-/", min_size=1, max_size=8)
mixed = st.lists(st.sampled_from(PIECES) | plain, min_size=1, max_size=5).map("".join)
texts = st.one_of(
    mixed,
    mixed.map(lambda v: v + "\n"),  # a newline at the end
    mixed.map(lambda v: "-" + v),  # an option
    mixed.map(lambda v: "--opt=" + v),
    st.sampled_from(["-oProxyCommand=touch CANARY", "--user=alice", "-v", "--volume=/:/h"]),
    st.sampled_from(["a" * 140_000, "/" + "d" * 5000, "x\n" * 70_000]),  # huge
    st.sampled_from(["/abs/path", "relative", "", " ", "/", "/a,/evil:/b", 'a"b', "é"]),
)
other_types = st.one_of(
    st.sampled_from([None, True, False, 0, -1, 1, 2**70, 1.5, float("inf"), [], {}, ["x"]]),
    st.recursive(st.just("x"), lambda c: st.lists(c, min_size=1, max_size=1), max_leaves=40),
)
values = st.one_of(texts, other_types)
# Raw YAML written where a value goes: aliases, tags, implicit types, flow collections.
yaml_tricks = st.sampled_from(
    [
        "&a x", "*a", "!!binary AAAA", "!!timestamp 2001-12-14", "!!set {a}", "2001-12-14",
        "yes", "~", "0o17", ".inf", '"\\0"', '"\\e[2J"', "[a, b]", "{a: b}", "|\n  two\n  lines",
        "!!python/object:os.system 'touch CANARY'", "4:00:00", "1_000", "0x1F", "-", "'-x'",
    ]
)  # fmt: skip


def with_canary(value: Any, canary: Path) -> Any:
    return value.replace(CANARY, str(canary)) if isinstance(value, str) else value


# ---------------------------------------------------------------- one case's files


class Case:
    """A folder with a checkout, a cluster file, a home, and (outside it) the stand-ins."""

    def __init__(self) -> None:
        self.outer = Path(tempfile.mkdtemp(prefix="tsb-fuzz-"))
        self.tmp = self.outer / "case"  # snapshotted: nothing but the job's folder may change
        self.tmp.mkdir()
        self.rec = self.outer / "rec"
        self.bin = self.outer / "bin"
        self.rec.mkdir()
        self.bin.mkdir()
        for name in ("srun", "docker", "scancel", "ssh"):
            (self.bin / name).write_text(RECORDER.format(name=name))
            (self.bin / name).chmod(0o755)
        self.canary = self.outer / "canary"
        self.home = self.outer / "home"  # the tool's own template cache lives here
        self.home.mkdir()
        self.repo = make_repo(self.tmp / "repo")
        self.work = self.tmp / "work"
        self.slurm_env = self.tmp / "slurm_env.json"
        self.slurm_env.write_text(json.dumps(SLURM_ENV))

    def close(self) -> None:
        assert not self.canary.exists(), "a hostile value was executed"
        shutil.rmtree(self.outer, ignore_errors=True)

    def request(self, scenario: str = "local_slurm", **fields: Any) -> dict[str, Any]:
        req: dict[str, Any] = {
            "execution_scenario": scenario,
            "work_dir": str(self.work),
            "repo_root": str(self.repo),
            "custom_cmd": "echo hi",
            "llm_models_root": "/models",
            "models_path": str(self.repo / "models"),
            "container_image": IMAGE,
            "skip_install": True,
        }
        if scenario == "local_slurm":
            req.update(partition="gpu", account="acct", slurm_env_file=str(self.slurm_env))
        else:
            req["env_check"] = {"gpus_per_node": 8}
        req.update(fields)
        return req

    def snapshot(self) -> dict[str, tuple[int, int]]:
        out = {}
        for dirpath, dirnames, filenames in os.walk(self.tmp):
            for n in dirnames + filenames:
                p = os.path.join(dirpath, n)
                st_ = os.lstat(p)
                out[p] = (st_.st_size, st_.st_mtime_ns)
        return out

    def build(self, request: dict[str, Any] | str, env: dict[str, str] | None = None) -> Built:
        """`build -` with the request on stdin (JSON, or YAML text), from inside the case."""
        text = request if isinstance(request, str) else json.dumps(request)
        before = self.snapshot()
        old = Path.cwd()
        os.chdir(self.tmp)  # a relative work_dir lands in the case, not in the checkout
        try:
            res = CliRunner().invoke(
                main, ["build", "-"], input=text, env={"HOME": str(self.home), **(env or {})}
            )
        finally:
            os.chdir(old)
        if res.exception and not isinstance(res.exception, SystemExit):
            raise res.exception
        return Built(self, res.exit_code, res.stderr, before)

    def run(self, script: Path, name: str) -> list[dict[str, Any]]:
        """Run a generated script with the stand-ins first on PATH; what each call got."""
        for f in self.rec.iterdir():
            f.unlink()
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "REC_DIR": str(self.rec), "HOME": str(self.rec)}
        subprocess.run(
            ["bash", str(script)], check=True, env=env, cwd=self.rec, capture_output=True,
            stdin=subprocess.DEVNULL, timeout=60,
        )  # fmt: skip
        calls = sorted(self.rec.glob(f"{name}.*.json"), key=lambda p: int(p.name.split(".")[1]))
        found = [json.loads(p.read_text()) for p in calls]
        # the steps in the container; the job's end removes it with an srun on the host
        # (decision container-names)
        if name != "srun":
            return found
        return [k for k in found if any(a.startswith("--container-") for a in k["argv"])]


class Built:
    def __init__(self, case: Case, code: int, stderr: str, before: dict[str, Any]) -> None:
        self.case, self.code, self.stderr, self.before = case, code, stderr, before

    def refused(self, *fields: str) -> bool:
        """True for the promised refusal (checked here); False for a build."""
        after = self.case.snapshot()
        if self.code == 0:
            work = self.work_dir()
            changed = {p for p in set(before_after(self.before, after))}
            outside = [p for p in changed if not (p == str(work) or p.startswith(f"{work}/"))]
            assert not outside, f"the build changed files outside its work_dir: {outside}"
            return False
        assert self.code == 2, (self.code, self.stderr)
        lines = self.stderr.splitlines()
        assert len(lines) == 1 and self.stderr.endswith("\n"), self.stderr
        assert lines[0].startswith(tuple(f"error: {f}" for f in fields)), (fields, lines[0])
        assert "; " in lines[0] and len(lines[0]) < 2000, lines[0]
        assert after == self.before, "a refused build changed files"
        return True

    def work_dir(self) -> Path:
        specs = [p for p in self.case.tmp.rglob("job_spec.json")]
        assert len(specs) == 1, specs
        return specs[0].parent

    def spec(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.work_dir() / "job_spec.json").read_text())
        return data

    def script(self) -> Path:
        work = self.work_dir()
        found = list(work.glob("*.slurm")) or [work / "docker_cmd.sh"]
        subprocess.run(["bash", "-n", str(found[0])], check=True)
        return found[0]


def before_after(a: dict[str, Any], b: dict[str, Any]) -> Iterator[str]:
    for p in set(a) | set(b):
        if a.get(p) != b.get(p):
            yield p


@contextlib.contextmanager
def case() -> Iterator[Case]:
    c = Case()
    try:
        yield c
    finally:
        c.close()


def opt(argv: list[str], name: str) -> str:
    return next(a.split("=", 1)[1] for a in argv if a.startswith(name + "="))


# ---------------------------------------------------------------- every request field

# Fields a refusal may name besides the fuzzed one: the value is valid for its own field but
# leads to another's check (a workflow needs its command, a scenario its Slurm fields).
ALSO: dict[str, tuple[str, ...]] = {
    "workflow_type": ("test_cmd", "eval_cmd", "bench_cmd", "custom_cmd", "perf_config_yaml"),
    "execution_scenario": ("partition", "account", "slurm_env_file", "remote_repo_path"),
    "test_cmd": ("required_devices", "custom_cmd"),
    # an empty command is no command: the workflow falls back to pytest, which needs test_cmd
    "eval_cmd": ("required_devices", "custom_cmd", "test_cmd"),
    "bench_cmd": ("required_devices", "custom_cmd", "test_cmd"),
    "custom_script": ("test_cmd",),
    "perf_config_yaml": ("custom_cmd", "test_cmd"),
    "gpus_per_node": ("required_devices",),
    "checkpoint_path": ("llm_models_root",),
    "work_dir": ("request",),
}
# Where a built value must arrive, byte-identical: (field) -> check(value, srun call, built).
ARRIVES = {
    "custom_cmd": lambda v, call, b: call["env"]["CUSTOM_COMMAND"] == v,
    "container_image": lambda v, call, b: opt(call["argv"], "--container-image") == enroot_uri(v),
    "llm_models_root": lambda v, call, b: call["env"]["LLM_MODELS_ROOT"] == v,
    # the job id follows on Slurm (decision container-names); unset outside Slurm, it is 0
    "model_name": lambda v, call, b: opt(call["argv"], "--container-name") == f"{v}_custom_0",
    "mpi_plugin": lambda v, call, b: opt(call["argv"], "--mpi") == v,
    "time_limit": lambda v, call, b: f"#SBATCH --time={v}\n" in b.script().read_text(),
    "models_path": lambda v, call, b: (
        f"{v.rstrip('/')}:/models:ro" in opt(call["argv"], "--container-mounts").split(",")
    ),
}
FIELDS = list(Request.model_fields) + [f"env_check.{k}" for k in EnvCheck.model_fields]


@pytest.mark.parametrize("field", FIELDS)
@fuzz_settings(6)
@given(value=values)
def test_every_request_field(field: str, value: Any) -> None:
    with case() as c:
        value = with_canary(value, c.canary)
        fields: dict[str, Any] = {field: value}
        if field.startswith("env_check."):  # a key of the nested object
            fields = {"env_check": {field.split(".")[1]: value}}
        if field in ("test_cmd", "eval_cmd", "bench_cmd", "custom_script"):
            fields["custom_cmd"] = None  # one command per request
        req = {k: v for k, v in c.request(**fields).items() if v is not None or k == field}
        built = c.build(req)
        if built.refused(field, *ALSO.get(field, ()), *(("env_check",) if "." in field else ())):
            return
        calls = c.run(built.script(), "srun")
        check = ARRIVES.get(field)
        if check is not None and isinstance(value, str):
            assert check(value, calls[-1], built), (field, value)


@pytest.mark.parametrize("field", list(Request.model_fields))
@fuzz_settings(3)
@given(raw=yaml_tricks)
def test_yaml_tricks_in_every_field(field: str, raw: str) -> None:
    with case() as c:
        raw = with_canary(raw, c.canary)
        req = c.request(**({"custom_cmd": None} if field.endswith("_cmd") else {}))
        req.pop(field, None)
        lines = [f"{k}: {json.dumps(v)}" for k, v in req.items() if v is not None]
        text = "\n".join([*lines, f"{field}: {raw}"]) + "\n"
        built = c.build(text)
        if not built.refused("request", field, *ALSO.get(field, ())):
            c.run(built.script(), "srun")


@pytest.mark.parametrize("field", ["custom_cmd", "container_image", "model_name", "models_path"])
@fuzz_settings(5)
@given(value=texts)
def test_docker_values_arrive_unchanged(field: str, value: str) -> None:
    with case() as c:
        value = with_canary(value, c.canary)
        built = c.build(c.request("local_docker", **{field: value}))
        if built.refused(field):
            return
        (call,) = c.run(built.script(), "docker")
        argv = call["argv"]
        if field == "custom_cmd":
            assert "RUN_CMD=" + value in argv
        elif field == "container_image":
            assert value in argv  # one word of its own
        elif field == "model_name":
            assert argv[argv.index("--name") + 1].startswith(f"{value}_custom")
        else:
            src = f"type=bind,source={value.rstrip('/')},target=/models,readonly"
            assert src in argv


# ---------------------------------------------------------------- slurm_env.json

SLURM_ENV_KEYS = [
    "user", "default_account", "default_partition", "cluster_name", "ssh_host", "slurm_user",
    "remote_cwd", "remote_home", "errors", "accounts", "mounts", "partitions.0.name",
    "partitions.0.gres", "partitions.0.arch", "partitions.0.time_limit", "partitions.0.state",
    "pmix.preferred", "pmix.available", "surplus_key",
]  # fmt: skip


def set_key(data: dict[str, Any], key: str, value: Any) -> None:
    *path, last = key.split(".")
    for p in path:
        data = data[int(p)] if p.isdigit() else data[p]  # type: ignore[index]
    data[int(last) if last.isdigit() else last] = value  # type: ignore[index]


@pytest.mark.parametrize("key", SLURM_ENV_KEYS)
@fuzz_settings(5)
@given(value=values | st.lists(texts, min_size=1, max_size=2))
def test_slurm_env_values(key: str, value: Any) -> None:
    with case() as c:
        value = with_canary(value, c.canary)
        env = json.loads(json.dumps(SLURM_ENV))
        set_key(env, key, value)
        c.slurm_env.write_text(json.dumps(env))
        req = c.request()
        if key == "mounts":
            del req["models_path"]  # the cluster file's mounts are the models' then
        built = c.build(req)
        blame = ("slurm_env_file", "partition", "account", "gpus_per_node", "required_devices")
        if built.refused(*blame, "models_path", "time_limit"):
            return
        call = c.run(built.script(), "srun")[-1]
        mounts = opt(call["argv"], "--container-mounts").split(",")
        known = {f"{c.home}:{c.home}", f"{c.repo}:{c.repo}", f"{c.repo}/models:/models:ro"}
        known.add(f"{c.work}:{c.work}")  # a custom job's folder, for its run script
        if key == "mounts":
            # each entry arrives whole, as one element of the list: none adds a mount
            entries = {e + (":ro" if e.endswith(":/models") else "") for e in value}
            known = (known - {f"{c.repo}/models:/models:ro"}) | entries
        assert set(mounts) <= known, (mounts, value)
        if key == "pmix.preferred" and isinstance(value, str):
            assert opt(call["argv"], "--mpi") == value


def test_a_comma_in_a_cluster_file_mount_adds_no_mount() -> None:
    with case() as c:
        env = {**SLURM_ENV, "mounts": ["/a,/evil:/b"]}
        c.slurm_env.write_text(json.dumps(env))
        req = c.request()
        del req["models_path"]
        built = c.build(req)
        assert built.refused("slurm_env_file") and "mounts[0]" in built.stderr


# ---------------------------------------------------------------- the allocation state file

STATE = {
    "job_id": "123",
    "container_name": "m_custom",
    "nodelist": "gpunode",
    "partition": "gpu",
    "account": "acct",
    "nodes": 1,
    "gpus_per_node": 8,
    "docker_image": IMAGE,
    "container_mounts": "/a:/a",
    "allocated_at": "2026-01-01T00:00:00+00:00",
    "time_limit": "04:00:00",
    "installed": False,
}


@pytest.mark.parametrize("key", [*STATE, "surplus"])
@fuzz_settings(5)
@given(value=values)
def test_state_file_values(key: str, value: Any) -> None:
    with case() as c:
        value = with_canary(value, c.canary)
        folder = persistent.state_dir(c.repo)
        folder.mkdir(exist_ok=True)
        state = {**STATE, key: value}
        (folder / persistent.STATE_FILE).write_text(json.dumps(state))
        loaded = persistent.load_state(c.repo)
        if loaded is not None:  # taken: every value as written, each checked
            assert key != "surplus", "an unknown key of our own file was taken"
            assert loaded.model_dump()[key] == value
        old_path = os.environ["PATH"]
        os.environ["PATH"] = f"{c.bin}:{old_path}"
        os.environ["REC_DIR"] = str(c.rec)
        try:
            persistent.release(c.repo)
        finally:
            os.environ["PATH"] = old_path
            del os.environ["REC_DIR"]
        calls = [json.loads(p.read_text()) for p in c.rec.glob("scancel.*.json")]
        for call in calls:  # never an option, always the job id as written
            (job,) = call["argv"]
            assert job.isdigit() and job == str(state["job_id"])


# ---------------------------------------------------------------- the site config

SITE_KEYS = ["default_llm_models_root", "default_models_repo_host", "default_user_root_dir"]


@pytest.mark.parametrize("key", [*SITE_KEYS, "enroot_uri_rewrite", "surplus"])
@fuzz_settings(5)
@given(value=values, raw=st.none() | yaml_tricks)
def test_site_config_values(key: str, value: Any, raw: str | None) -> None:
    with case() as c:
        value = with_canary(value, c.canary)
        config = c.tmp / "config.yaml"
        config.write_text(f"{key}: {raw}\n" if raw is not None else json.dumps({key: value}))
        req = c.request()
        del req["llm_models_root"], req["models_path"]
        built = c.build(req, {"TRTLLM_SCRIPT_BUILDER_CONFIG": str(config)})
        blame = ("site config", "llm_models_root", "models_path", "default_models_repo_host")
        if built.refused(*blame):
            return
        call = c.run(built.script(), "srun")[-1]
        if key == "default_llm_models_root" and raw is None:
            assert call["env"]["LLM_MODELS_ROOT"] == value


# ---------------------------------------------------------------- the image table


@fuzz_settings(30)
@given(value=texts, junk=st.lists(mixed, max_size=3))
def test_properties_file_image(value: str, junk: list[str]) -> None:
    with case() as c:
        value = with_canary(value, c.canary)
        props = c.repo / "jenkins" / "current_image_tags.properties"
        props.write_text("\n".join([*junk, f"LLM_DOCKER_IMAGE={value}", ""]))
        req = c.request()
        del req["container_image"]
        built = c.build(req)
        if built.refused("container_image"):
            return
        call = c.run(built.script(), "srun")[-1]
        # the table's value as a properties file means it (trimmed), not split or run
        from trtllm_script_builder.resolve.image import parse_properties

        image = parse_properties(props.read_text())["LLM_DOCKER_IMAGE"]
        assert opt(call["argv"], "--container-image") == enroot_uri(image)


# ---------------------------------------------------------------- test files

HEAD = "import pytest\n\n"
test_bodies = st.one_of(
    st.sampled_from(
        [
            "N = " + "9" * 5000 + "\n",
            "N = " + "+".join(["1"] * 3000) + "\n",
            "N = " + "(" * 300 + "1" + ")" * 300 + "\n",
            "N = " + "[" * 100 + "]" * 100 + "\n",
            "@pytest.mark.skip_less_device(" + "9" * 40 + ")\n",
            "@pytest.mark.skip_less_device(-1)\n",
            "x = '\x00'\n",
            "def (:\n",
            "x = 1 if 1 else " * 500 + "1\n",
        ]
    ),
    st.text(max_size=200).map(lambda t: t + "\n"),
)


@fuzz_settings(25)
@given(body=test_bodies)
def test_test_files_read_for_sizing(body: str) -> None:
    with case() as c:
        f = c.repo / "tests" / "integration" / "defs" / "accuracy" / "test_fuzz.py"
        f.write_text(HEAD + body + "\n\ndef test_a():\n    pass\n", errors="surrogatepass")
        req = c.request(custom_cmd=None, test_cmd="pytest accuracy/test_fuzz.py::test_a")
        del req["custom_cmd"]
        start = time.process_time()  # CPU time: a busy machine does not stretch it
        built = c.build(req)
        assert time.process_time() - start < 10, "sizing a test file took too long"
        if not built.refused("test_cmd", "required_devices"):
            c.run(built.script(), "srun")


# ---------------------------------------------------------------- the ssh host


@fuzz_settings(25)
@given(host=texts | st.sampled_from(["cluster", "me@login.example.com", "[::1]", "a%b"]))
def test_ssh_host_reaches_ssh_as_the_destination_or_is_refused(host: str) -> None:
    """A remote job submitted with --ssh-host HOST: ssh gets HOST as its destination word
    (right before `--`, or after `-O op`), never as an option; or submit refuses it."""
    with case() as c:
        host = with_canary(host, c.canary)
        req = c.request(remote_repo_path="/remote/repo", remote_work_dir="/remote/work")
        req["execution_scenario"] = "remote_slurm"
        built = c.build(req)
        assert not built.refused("none"), built.stderr
        control = Path(tempfile.mkdtemp(prefix="tsb-fz-", dir="/tmp"))
        env = {
            "PATH": f"{c.bin}:{os.environ['PATH']}",
            "REC_DIR": str(c.rec),
            "HOME": str(c.home),
            "TSB_SSH_CONTROL_DIR": str(control),
        }
        try:
            res = CliRunner().invoke(main, ["submit", str(c.work), "--ssh-host", host], env=env)
        finally:
            shutil.rmtree(control, ignore_errors=True)
        if res.exception and not isinstance(res.exception, SystemExit):
            raise res.exception
        calls = [json.loads(p.read_text())["argv"] for p in c.rec.glob("ssh.*.json")]
        if res.exit_code != 0:
            assert res.exit_code == 2 and not calls, (res.exit_code, res.stderr)
            lines = res.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: ssh_host: "), res.stderr
            return
        assert calls
        host = host or SLURM_ENV["ssh_host"]  # an empty flag is no flag: the cluster file's
        for argv in calls:
            at = argv.index("--") - 1 if "--" in argv else argv.index("-O") + 2
            assert argv[at] == host and not host.startswith("-"), argv
            assert argv.count(host) == 1 or host in ("-O", "--"), argv


# ---------------------------------------------------------------- the shape of every document

# Trouble in a document's structure rather than in one value (decision one-data-reader): a key
# written twice, nesting past the bound, aliases that double at every level, an alias inside itself.
shapes = st.one_of(
    st.tuples(st.just("dup"), st.integers(0, 40)),  # which key is written again
    st.tuples(st.just("deep"), st.integers(33, 3000)),
    st.tuples(st.just("bomb"), st.integers(18, 40)),
    st.tuples(st.just("loop"), st.just(0)),
)


def spoiled(data: dict[str, Any], shape: tuple[str, int], as_yaml: bool) -> str:
    kind, n = shape
    key = list(data)[n % len(data)]
    if not as_yaml:  # JSON has no aliases: their place is taken by deep nesting
        extra = {"dup": json.dumps(data[key]), "deep": "[" * n + "]" * n}.get(kind, "[" * 999)
        name = key if kind == "dup" else "extra"
        return json.dumps(data)[:-1] + f", {json.dumps(name)}: {extra}}}"
    lines = [f"{k}: {json.dumps(v)}" for k, v in data.items()]
    if kind == "dup":
        lines.append(lines[n % len(lines)])
    elif kind == "deep":
        lines.append("extra: " + "[" * n + "]" * n)
    elif kind == "bomb":
        lines += ["b0: &b0 [x, x]", *(f"b{i}: &b{i} [*b{i - 1}, *b{i - 1}]" for i in range(1, n))]
    else:
        lines.append("extra: &me [x, *me]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "document", ["request.json", "request.yaml", "site config", "slurm_env.json", "job_spec"]
)
@fuzz_settings(8)
@given(shape=shapes)
def test_the_shape_of_every_document(document: str, shape: tuple[str, int]) -> None:
    with case() as c:
        req, env = c.request(), None
        if document == "request.json":
            built = c.build(spoiled(req, shape, as_yaml=False))
            assert built.refused("request")
        elif document == "request.yaml":
            built = c.build(spoiled({k: v for k, v in req.items() if v is not None}, shape, True))
            assert built.refused("request")
        elif document == "site config":
            config = c.tmp / "config.yaml"
            config.write_text(spoiled({"default_llm_models_root": "/m", "a": 1}, shape, True))
            env = {"TRTLLM_SCRIPT_BUILDER_CONFIG": str(config)}
            assert c.build(req, env).refused("site config")
        elif document == "slurm_env.json":
            c.slurm_env.write_text(spoiled(SLURM_ENV, shape, as_yaml=False))
            assert c.build(req).refused("slurm_env_file")
        else:
            spec = c.tmp / "job_spec.json"
            spec.write_text(spoiled({"container_image": IMAGE, "a": 1}, shape, as_yaml=False))
            assert c.build({**req, "job_spec_file": str(spec)}).refused("job_spec_file")


@fuzz_settings(10)
@given(shape=shapes)
def test_the_shape_of_a_build_many_list_and_a_perf_config(shape: tuple[str, int]) -> None:
    with case() as c:
        base = c.tmp / "base.json"
        req = c.request()
        del req["custom_cmd"], req["work_dir"]
        base.write_text(json.dumps(req))
        listing = c.tmp / "list.yaml"
        entry = spoiled({"custom_cmd": "echo a", "model_name": "m"}, shape, as_yaml=True)
        listing.write_text("- " + entry.replace("\n", "\n  ").rstrip() + "\n")
        before = c.snapshot()
        res = CliRunner().invoke(
            main, ["build-many", str(listing), "--base", str(base), "--work-dir", str(c.work)]
        )
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
        assert res.exit_code == 2, res.output
        errors = [ln for ln in res.stderr.splitlines() if "error:" in ln]
        assert errors and all(len(ln) < 2000 for ln in errors), res.stderr
        assert not (c.work / "m").exists() and c.snapshot().keys() >= before.keys()
        config = c.tmp / "perf.yaml"
        hardware = {"hardware": {"gpus_per_node": 4}, "server_configs": [{"name": "a"}]}
        config.write_text(spoiled(hardware, shape, as_yaml=True))
        res = CliRunner().invoke(main, ["build", "-"], input=json.dumps(
            c.request(custom_cmd=None, workflow_type="perf_sanity", perf_config_yaml=str(config))
        ))  # fmt: skip
        assert res.exit_code == 2 and len(res.stderr.splitlines()) == 1, res.stderr
        assert res.stderr.startswith("error: perf_config_yaml: perf config"), res.stderr
        assert " is refused: " in res.stderr, res.stderr
