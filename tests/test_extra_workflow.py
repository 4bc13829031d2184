"""A workflow from outside src: `serve` (trtllm-serve plus a client) registered by this test
suite builds, renders, runs, gets a verdict with its figures and a report, through the
registry alone. Its command is read from an existing request field, custom_cmd: adding a
field would change the request model and the shipped schema, which a plug-in must not do.

Stand-ins, named as such: `srun` runs its payload on this machine (no Slurm, no container),
and `trtllm-serve` is a small HTTP server answering the two routes the client uses; the
client is real `curl`.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import Env, Run
from tests.test_shell_safety import check_script
from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.registry import WORKFLOWS
from trtllm_script_builder.model.request import Request
from trtllm_script_builder.process.spec_file import read_job_spec
from trtllm_script_builder.process.verdict import decide_verdict
from trtllm_script_builder.process.watch import VERDICT_FILE, WatchResult
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.commands import model_from_path
from trtllm_script_builder.resolve.workflow import Draft, Sizing, Workflow, one_node, register

TEMPLATE = Path(__file__).with_name("fixtures") / "serve.slurm.j2"
REQUESTS = 4


def _option(words: list[str], name: str, default: str) -> str:
    for i, w in enumerate(words):
        if w == name and i + 1 < len(words):
            return words[i + 1]
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return default


def _model(words: list[str]) -> str:
    """trtllm-serve's positional model: the first word after the tool that is no option."""
    rest = words[words.index("trtllm-serve") + 1 :] if "trtllm-serve" in words else words
    return next((w for w in rest if not w.startswith("-")), "")


def _size(req: Request, gpn: int, gpn_source: str) -> Sizing:
    words = shlex.split(req.custom_cmd or "")
    tp = int(_option(words, "--tp_size", "1"))
    if tp > gpn:
        raise BuildError(
            "custom_cmd",
            f"--tp_size {tp} is more than the {gpn} GPUs per node of {gpn_source}",
            "lower --tp_size",
        )
    one_node(req, "trtllm-serve")
    model = req.model_name or model_from_path(_model(words)) or "serve"
    return Sizing(tp, 1, 1, model)  # one server process starts its own workers


def _command(d: Draft, mounts: list[mnt.Mount]) -> None:
    cmd = d.req.custom_cmd or ""
    words = shlex.split(cmd)
    d.run_cmd = cmd
    d.exports += [
        ("SERVE_CMD", cmd),
        ("SERVE_PORT", _option(words, "--port", "8000")),
        ("SERVE_MODEL", _model(words)),
        ("SERVE_REQUESTS", str(REQUESTS)),
        ("SERVE_WAIT_SECONDS", "60"),
    ]


_ANSWERED = re.compile(r"serve client: (\d+) requests answered in (\d+) ms")


def _figure(line: str) -> tuple[str, float] | None:
    """The client's mean request latency, under the name the perf-sanity test gives it."""
    m = _ANSWERED.search(line)
    return ("mean_e2el", int(m.group(2)) / int(m.group(1))) if m and int(m.group(1)) else None


SERVE = Workflow(
    name="serve",
    commands=("custom_cmd",),
    infer_rank=50,
    infers=lambda req: False,  # only when asked for by name
    suffix="serve",
    category=3,  # job_spec's categories are a closed set: the custom command script's
    patterns=(("requests answered",), ("Traceback", "exited before it answered")),
    size=_size,
    template=TEMPLATE,
    command=_command,
    results="serve",
    figure=_figure,
)

SERVER = """#!{python}
# trtllm-serve STAND-IN for tests. Behaviours copied from TensorRT-LLM's
# tensorrt_llm/serve/openai_server.py (commit 00057725d9a6591f033e44f31c219e2426827bb7):
# GET /health answers 200 with an empty body once the model is up; POST /v1/completions takes
# a JSON body naming `model` and `prompt`, and a request that fails validation gets 400 with
# {"error": ...}; any other route is 404. It serves until stopped, on --port.
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

port = int(sys.argv[sys.argv.index("--port") + 1])

class Handler(BaseHTTPRequestHandler):
    def _send(self, body, status=200):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path != "/health":
            self.send_error(404)
            return
        self._send(None)

    def do_POST(self):
        if self.path != "/v1/completions":
            self.send_error(404)
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ok = isinstance(body, dict) and body.get("prompt") and body.get("model")
        except ValueError as exc:
            body, ok = str(exc), False
        if not ok:
            self._send({"error": f"invalid request: {body!r}"}, 400)
            return
        self._send({"choices": [{"text": " world"}], "model": body["model"]})

    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""

# srun STAND-IN: drops srun's and pyxis's options and runs the payload here.
SRUN = """#!/bin/bash
while [ $# -gt 0 ] && [ "$1" != bash ]; do shift; done
exec "$@"
"""


@pytest.fixture()
def serve() -> Iterator[Workflow]:
    register(SERVE)
    yield SERVE
    WORKFLOWS.unregister(SERVE.name)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(env: Env, port: int = 8123) -> dict[str, object]:
    cmd = f"trtllm-serve /models/TinyLlama-1.1B --tp_size 2 --port {port}"
    return env.request(workflow_type="serve", custom_cmd=cmd, skip_install=True)


def test_an_unregistered_workflow_is_refused(env: Env, cli: Callable[..., Run]) -> None:
    res = cli([], request=_request(env))
    assert res.code == 2
    assert "workflow_type" in res.stderr
    assert not env.work.exists() or not any(env.work.iterdir())


def test_the_schema_made_while_it_is_registered_names_it(serve: Workflow) -> None:
    enum = Request.model_json_schema()["properties"]["workflow_type"]["anyOf"][0]["enum"]
    assert enum[-1] == "serve" and "pytest" in enum


def test_it_builds_and_renders_from_its_own_template(
    serve: Workflow, env: Env, cli: Callable[..., Run]
) -> None:
    res = cli([], request=_request(env))
    assert res.code == 0, res.stderr
    script = env.work / "tinyllama_1_1b_serve.slurm"
    text = script.read_text()
    assert "--gres=gpu:2" in text
    assert "export SERVE_CMD='trtllm-serve /models/TinyLlama-1.1B --tp_size 2 --port 8123'" in text
    assert "export SERVE_PORT=8123" in text
    assert "pip install" not in text  # skip_install
    spec = json.loads((env.work / "job_spec.json").read_text())
    assert spec["workflow_type"] == "serve"
    assert spec["category"] == 3 and spec["required_devices"] == 2
    assert spec["success_patterns"] == ["requests answered"]
    check_script(script)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the client is curl")
def test_it_runs_and_its_verdict_and_report_carry_its_figures(
    serve: Workflow, env: Env, cli: Callable[..., Run], tmp_path: Path
) -> None:
    port = _free_port()
    assert cli([], request=_request(env, port)).code == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (
        ("srun", SRUN),
        ("trtllm-serve", SERVER.replace("{python}", sys.executable)),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    script = env.work / "tinyllama_1_1b_serve.slurm"
    done = subprocess.run(
        ["bash", str(script)],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(env.home), "SLURM_JOB_ID": "7"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    log = env.work / "tinyllama_1_1b_serve_7.out"
    log.write_text(done.stdout)

    spec = read_job_spec(env.work)
    decision = decide_verdict("COMPLETED", 0, done.stdout.splitlines(), spec)
    assert decision.verdict.value == "PASSED", decision.evidence
    assert set(decision.results) == {"serve"}
    assert decision.results["serve"]["mean_e2el"] >= 0
    result = WatchResult(decision, "local_slurm", str(env.work), job_id="7", log_files=[str(log)])
    (env.work / VERDICT_FILE).write_text(json.dumps(result.to_json()))

    report = cli(["report", str(env.work)])
    assert report.code == 0, report.stderr
    page = (env.work / "report.html").read_text()
    assert "PASSED" in page
    assert "mean_e2el" in page  # its figures table
    assert "Mean request latency" in page  # and the chart the report draws for that figure
