"""Mistakes a first-time user makes, each refused with one line naming the field (exit 2)
or warned on stderr when the tool cannot be sure."""

from __future__ import annotations

import json

import pytest

from .conftest import Env
from .test_refusals import PYTEST_4, refused

MODEL = "org/Tiny-Model"


@pytest.mark.parametrize(
    ("field", "cmd", "contains"),
    [
        ("test_cmd", f"{PYTEST_4} && {PYTEST_4}", "runs pytest 2 times"),
        ("test_cmd", "pytets accuracy/test_tiny.py::TestTiny::test_four[tp4]", "mean pytest?"),
        ("eval_cmd", f"trtllm_eval --model {MODEL} mmlu", "did you mean trtllm-eval?"),
        ("eval_cmd", "trtllm-eval --tp_size 2 mmlu", "names no --model"),
        ("eval_cmd", f"trtllm-eval --model {MODEL} mmlu && trtllm-eval gsm8k", "no --model"),
        ("bench_cmd", f"trtllm-bnech -m {MODEL} throughput --dataset /d.json", "trtllm-bench?"),
        ("bench_cmd", "trtllm-bench throughput --dataset /d.json --tp 2", "names no --model"),
    ],
)
def test_a_command_must_run_its_tool(env: Env, cli, field: str, cmd: str, contains: str) -> None:
    refused(cli, env, env.request(**{field: cmd}), field, contains=contains)


@pytest.mark.parametrize(
    ("field", "cmd"),
    [
        ("test_cmd", f"python -m {PYTEST_4}"),
        ("eval_cmd", f"trtllm-eval --model={MODEL} mmlu"),
        ("bench_cmd", f"trtllm-bench -m {MODEL} throughput --dataset /models/d.json"),
        # Another program altogether is the user's choice (decision command-runs-its-tool): warned,
        # not refused.
        ("eval_cmd", "python run_eval.py --tp_size 2"),
    ],
)
def test_a_command_that_runs_its_tool_builds(env: Env, cli, field: str, cmd: str) -> None:
    r = cli([], env.request(**{field: cmd}))
    assert r.code == 0, r.stderr


@pytest.mark.parametrize("mode", [[], ["--json"], ["--dry-run"]])
def test_a_warning_is_a_line_on_stderr_in_every_mode(env: Env, cli, mode: list[str]) -> None:
    """Decision warnings-to-stderr: a time limit past the partition's (it may be allowed by a QOS)
    is warned."""
    r = cli(mode, env.request(test_cmd=PYTEST_4, time_limit="1-00:00:00"))
    assert r.code == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("warning: ")]
    assert len(lines) == 1 and "time_limit 1-00:00:00" in lines[0], r.stderr
    if not mode:  # the report does not repeat it
        assert "time_limit 1-00:00:00" not in r.stdout


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("required_devices", "2", "write 2 without quotes"),
        ("gpus_per_node", " 8", "write 8 without quotes"),
        ("skip_install", "yes", "write true or false"),
        ("persistent_mode", "no", "write true or false"),
        ("skip_install", 1, "write true or false"),
        ("execution_scenario", "local-slurm", "did you mean local_slurm?"),
        ("execution_scenario", "docker", "did you mean local_docker?"),
    ],
)
def test_a_value_in_another_type_than_the_schema_says_is_refused(
    env: Env, cli, field: str, value: object, fix: str
) -> None:
    """Decision strict-request-types: what the tool takes is what its JSON Schema takes."""
    line = refused(cli, env, env.request(test_cmd=PYTEST_4, **{field: value}), field)
    assert line.endswith(f"; {fix}") or f"; {fix}" in line, line


def test_a_time_limit_in_minutes_is_still_a_number(env: Env, cli) -> None:
    r = cli([], env.request(test_cmd=PYTEST_4, time_limit=90))
    assert r.code == 0, r.stderr


@pytest.mark.parametrize(
    ("image", "partition", "ok"),
    [
        ("nvcr.io/nvidia/tensorrt-llm/release:1.0.0-aarch64", "gpu", False),
        ("reg.example.com/trtllm:pytorch-py3-sbsa-ubuntu24.04", "gpu", False),
        ("reg.example.com/trtllm:pytorch-py3-x86_64-ubuntu24.04", "gb", False),
        ("reg.example.com/trtllm:pytorch-py3-x86_64-ubuntu24.04", "gpu", True),
        ("nvcr.io/nvidia/tensorrt-llm/release:1.0.0", "gb", True),  # multi-arch: not judged
    ],
)
def test_an_image_named_for_the_other_arch_is_refused(
    env: Env, cli, image: str, partition: str, ok: bool
) -> None:
    """Decision image-arch-mismatch (the test cluster's gpu partition is x86_64, gb aarch64)."""
    req = env.request(
        test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_one",
        container_image=image,
        partition=partition,
    )
    if ok:
        r = cli([], req)
        assert r.code == 0, r.stderr
    else:
        refused(cli, env, req, "container_image", contains="is named for")


@pytest.mark.parametrize(
    ("limit", "spellings"),
    [
        ("4:00", "04:00:00 for 4 h 0 min, or 0:04:00"),
        ("1:30", "01:30:00 for 1 h 30 min, or 0:01:30"),
    ],
)
def test_a_time_limit_of_minutes_and_seconds_is_refused_with_both_spellings(
    env: Env, cli, limit: str, spellings: str
) -> None:
    """Decision ambiguous-time-limit: Slurm reads `4:00` as four minutes, a person four hours."""
    line = refused(cli, env, env.request(test_cmd=PYTEST_4, time_limit=limit), "time_limit")
    assert f"; write {spellings} for " in line, line


@pytest.mark.parametrize(("limit", "warned"), [("0", True), (0, True), ("04:00:00", False)])
def test_a_time_limit_of_zero_is_warned_as_no_limit(
    env: Env, cli, limit: object, warned: bool
) -> None:
    r = cli([], env.request(test_cmd=PYTEST_4, time_limit=limit))
    assert r.code == 0, r.stderr
    assert ("asks Slurm for no time limit" in r.stderr) == warned, r.stderr


@pytest.mark.parametrize(
    "line",
    [
        "accuracy/test_tiny.py::TestTiny::test_four[tp4]",
        "accuracy/test_tiny.py::TestTiny::test_four[tp4] TIMEOUT (90)",
        "FOO=1 accuracy/test_tiny.py::TestTiny::test_four[tp4]",
    ],
)
def test_a_bare_test_id_runs_with_pytest(env: Env, cli, line: str) -> None:
    """Decision bare-test-id: a test list's line is what test_cmd takes too."""
    r = cli(["--dry-run"], env.request(test_cmd=line))
    assert r.code == 0, r.stderr
    assert "TEST_CMD='pytest accuracy/test_tiny.py::TestTiny::test_four[tp4]" in r.stdout or (
        "TEST_CMD='FOO=1 pytest accuracy/" in r.stdout
    ), r.stdout
    assert "#SBATCH --gres=gpu:4" in r.stdout


@pytest.mark.parametrize(
    ("field", "word", "form"),
    [
        ("eval_cmd", "accuracy", "write trtllm-eval --model "),
        ("bench_cmd", "throughput", "write trtllm-bench --model "),
    ],
)
def test_a_keyword_for_a_command_is_refused_with_the_tools_form(
    env: Env, cli, field: str, word: str, form: str
) -> None:
    line = refused(cli, env, env.request(**{field: word}), field, contains="one word")
    assert form in line, line


@pytest.mark.parametrize("path", ["C:\\Users\\me\\w", "c:/work", "\\\\server\\share\\w"])
def test_a_windows_path_is_named_as_one(env: Env, cli, path: str) -> None:
    refused(
        cli,
        env,
        env.request(test_cmd=PYTEST_4, work_dir=path),
        "work_dir",
        contains="is a Windows path",
    )


def test_node_count_below_what_the_job_needs_is_refused_naming_the_need(env: Env, cli) -> None:
    cmd = "trtllm-eval --model org/Tiny-Model --tp_size 16 mmlu"
    r = cli(["--dry-run"], env.request(eval_cmd=cmd))
    assert r.code == 0, r.stderr  # two nodes of eight
    line = refused(cli, env, env.request(eval_cmd=cmd, node_count=1), "node_count")
    assert "needs 2 nodes" in line and "--node-count 2" in line, line


def test_no_command_names_every_command_field(env: Env, cli) -> None:
    line = refused(cli, env, env.request(), "test_cmd", contains="no command given")
    for field in ("test_cmd", "eval_cmd", "bench_cmd", "custom_cmd"):
        assert field in line, line


def test_missing_partition_and_account_are_named_at_once_with_the_cluster_files_names(
    env: Env, cli
) -> None:
    req = env.request(test_cmd=PYTEST_4)
    del req["partition"], req["account"]
    r = cli([], req)
    assert r.code == 2
    lines = r.stderr.strip().splitlines()
    assert [x.split(":")[1].strip() for x in lines] == ["partition", "account"], lines
    assert "with one of: gpu" in lines[0] and "with one of: acct, other" in lines[1], lines


def test_check_of_a_folder_never_built_is_refused_like_submit(tmp_path, cli) -> None:
    """Nothing built there is the user's input (exit 2, one line), not a cluster problem."""
    r = cli(["check", str(tmp_path)])
    assert r.code == 2, (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines() == [
        f"error: work_dir: {tmp_path} holds no job_spec.json; build the job first "
        "(trtllm-script-builder build ...)"
    ]
    assert r.stdout == ""


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_request_file_with_a_byte_order_mark_is_read(env: Env, cli, suffix: str) -> None:
    """Windows editors start a UTF-8 file with U+FEFF; it is no part of the request."""

    req = env.request(test_cmd=PYTEST_4)
    path = env.root / f"req{suffix}"
    text = json.dumps(req, indent=1).replace("\n", "\r\n")  # JSON is YAML too
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    r = cli(["build", str(path)])
    assert r.code == 0, r.stderr


def test_remote_slurm_with_the_local_cluster_file_names_the_file(env: Env, cli) -> None:
    """The file `probe` wrote without --ssh has no ssh_host: it is not the remote cluster's."""
    env.write_env(ssh_host=None, remote_cwd=None, remote_home=None)
    refused(
        cli,
        env,
        env.request("remote_slurm", test_cmd=PYTEST_4),
        "slurm_env_file",
        contains="probe --ssh HOST",
    )


@pytest.mark.parametrize(
    ("scenario", "field", "value"),
    [
        ("local_docker", "partition", "gpu"),
        ("local_docker", "slurm_env_file", "/x/slurm_env.json"),
        ("local_docker", "remote_repo_path", "/lustre/x"),
        ("local_slurm", "remote_work_dir", "/lustre/x/w"),
        ("local_docker", "persistent_mode", True),
    ],
)
def test_a_field_the_scenario_never_reads_is_warned(
    env: Env, cli, scenario: str, field: str, value: object
) -> None:
    """Decision unread-field-warning."""
    r = cli([], env.request(scenario, test_cmd=PYTEST_4, **{field: value}))
    assert r.code == 0, r.stderr
    assert f"warning: {field} is not used by {scenario} jobs" in r.stderr, r.stderr


@pytest.mark.parametrize("command", ["build", "build-many"])
def test_a_work_dir_whose_parent_is_missing_is_refused(
    env: Env, cli, tmp_path, command: str
) -> None:
    """Decision work-dir-parent-made: a typo in work_dir's path is said: the folders above it are
    made (as the job folder always was), with a warning naming the first one that did not exist."""
    work = tmp_path / "wrok" / "job"
    if command == "build":
        r = cli([], env.request(test_cmd=PYTEST_4, work_dir=str(work)))
    else:
        import json

        listing = tmp_path / "list.txt"
        listing.write_text("accuracy/test_tiny.py::TestTiny::test_one\n")
        base = tmp_path / "base.json"
        base.write_text(json.dumps(env.request()))
        r = cli(["build-many", str(listing), "--base", str(base), "--work-dir", str(work)])
    assert r.code == 0, (r.stdout, r.stderr)
    warning = f"warning: work_dir: '{tmp_path / 'wrok'}' did not exist and is made with job; "
    assert r.stderr.startswith(warning), r.stderr
    assert (work / "job_spec.json").is_file() or (work / "jobs.json").is_file()
    again = cli([], env.request(test_cmd=PYTEST_4, work_dir=str(tmp_path / "wrok" / "two")))
    assert again.code == 0 and "did not exist" not in again.stderr  # the folder is there now


def test_the_checkouts_work_dirs_folder_is_made(env: Env, cli) -> None:
    """Decision work-dir-parent-made: <repo_root>/work_dirs/ is the tool's own folder, made when
    missing."""
    work = env.repo / "work_dirs" / "job"
    assert not work.parent.exists()
    r = cli([], env.request(test_cmd=PYTEST_4, work_dir=str(work)))
    assert r.code == 0, r.stderr
    assert (work / "job_spec.json").is_file()


def test_run_force_builds_over_another_jobs_folder(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run --force` did not reach the build, whose refusal told the user to pass --force."""
    from trtllm_script_builder.errors import BuildError
    from trtllm_script_builder.process import submit

    def no_submit(*args: object, **kwargs: object) -> None:
        raise BuildError("sbatch", "not submitted by this test", "none")

    monkeypatch.setattr(submit, "submit", no_submit)
    assert cli([], env.request(test_cmd=PYTEST_4)).code == 0
    custom = env.request(custom_cmd="echo hi", model_name="other")
    path = env.root / "custom.json"

    path.write_text(json.dumps(custom))
    refused_line = cli(["run", str(path)]).stderr
    assert "holds another job" in refused_line
    r = cli(["run", str(path), "--force"])
    assert r.code == 2 and "error: sbatch: not submitted by this test" in r.stderr, r.stderr
    assert (env.work / "other_custom.slurm").is_file()


def test_probe_of_a_misspelt_partition_names_the_nearest() -> None:
    from trtllm_script_builder.process.probe import probe

    from .test_probe_check_runner import cluster

    env, rc = probe(["bacth"], host=cluster(), user="alice")
    assert rc == 2
    assert any(e.startswith("partition bacth: not found") for e in env["errors"]), env["errors"]
    assert any(e.endswith("; did you mean batch?") for e in env["errors"]), env["errors"]


def test_a_parameter_id_the_test_cannot_have_is_refused(env: Env, cli) -> None:
    """Decision parameter-id-check: test_four's ids are tp4 and tp2pp2, from literal ids covering
    its args."""
    refused(
        cli,
        env,
        env.request(test_cmd="pytest accuracy/test_tiny.py::TestTiny::test_four[tp8]"),
        "test_cmd",
        contains="did you mean [tp4]?",
    )


@pytest.mark.parametrize(
    ("field", "value", "near"), [("partition", "GPU", "gpu"), ("account", "ACCT", "acct")]
)
def test_a_name_in_the_wrong_case_names_the_right_one(
    env: Env, cli, field: str, value: str, near: str
) -> None:
    refused(
        cli,
        env,
        env.request(test_cmd=PYTEST_4, **{field: value}),
        field,
        contains=f"did you mean {near}?",
    )


def test_a_pmix_plugin_the_cluster_lacks_is_refused(env: Env, cli) -> None:
    env.write_env(pmix={"available": ["pmix", "pmix_v4"], "preferred": "pmix_v4"})
    refused(
        cli,
        env,
        env.request(test_cmd=PYTEST_4, mpi_plugin="pmix_v5"),
        "mpi_plugin",
        contains="did you mean pmix_v4?",
    )
    r = cli([], env.request(test_cmd=PYTEST_4, mpi_plugin="pmi2"))  # not a PMIx: not judged
    assert r.code == 0, r.stderr


def test_a_repo_root_inside_the_checkout_names_the_top(env: Env, cli) -> None:
    inner = env.repo / "tests" / "integration" / "defs"
    line = refused(cli, env, env.request(test_cmd=PYTEST_4, repo_root=str(inner)), "repo_root")
    assert f"--repo-root {env.repo}" in line


def test_a_missing_argument_is_one_line(cli) -> None:
    r = cli(["schema"])
    assert r.code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: name: Missing argument")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["build", "req.yaml", "--skip-install", "yes"],
            "error: skip_install: is a switch and takes no value (got 'yes'); "
            "pass --skip-install alone for true or --no-skip-install for false",
        ),
        (
            ["build", "req.yaml", "--compile=true"],
            "error: compile: is a switch and takes no value (got 'true'); "
            "pass --compile alone for true or --no-compile for false",
        ),
        (
            ["watch", "w", "--json", "yes"],
            "error: as_json: is a switch and takes no value (got 'yes'); pass --json alone for true",
        ),
    ],
)
def test_a_switch_given_a_value_is_named(cli, args: list[str], line: str) -> None:
    r = cli(args)
    assert r.code == 2
    assert r.stderr.strip() == line


@pytest.mark.parametrize(
    ("args", "near"),
    [
        (["build", "x", "--execution-scenario", "docker"], "local_docker"),
        (["schema", "slurm_env"], "slurm-env"),
        (["schema", "requests"], "request"),
    ],
)
def test_a_flag_choice_near_a_valid_one_is_named(cli, args: list[str], near: str) -> None:
    r = cli(args)
    assert r.code == 2 and f"; did you mean {near}? see " in r.stderr, r.stderr


@pytest.mark.parametrize("command", ["check", "submit", "watch"])
def test_ssh_host_on_a_job_that_runs_here_is_refused(env: Env, cli, command: str) -> None:
    """It would be ignored without a word."""
    assert cli([], env.request(test_cmd=PYTEST_4)).code == 0
    r = cli([command, str(env.work), "--ssh-host", "far.example.com"])
    assert r.code == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ssh_host: the job is local_slurm"), r.stderr
    assert not (env.work / "submission.json").exists()


def test_a_gpus_per_node_the_partition_overrides_is_warned(env: Env, cli) -> None:
    r = cli([], env.request(test_cmd=PYTEST_4, gpus_per_node=16))
    assert r.code == 0, r.stderr
    assert "warning: gpus_per_node 16 is not used: partition gpu reports 8" in r.stderr


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("repo_root", "~/TensorRT-LLM", "starts with ~, which is not expanded"),
        ("models_path", "$HOME/models", "holds $HOME, which is not expanded"),
        ("checkpoint_path", "${SCRATCH}/ckpt", "holds $SCRATCH, which is not expanded"),
        ("llm_models_root", "~/models", "starts with ~, which is not expanded"),
    ],
)
def test_a_path_with_a_shell_expansion_is_refused(
    env: Env, cli, monkeypatch: pytest.MonkeyPatch, field: str, value: str, problem: str
) -> None:
    """No shell reads a request: `~/x` would be a folder named `~` below the request's."""
    monkeypatch.setenv("HOME", "/home/me")
    line = refused(cli, env, env.request(test_cmd=PYTEST_4, **{field: value}), field)
    assert problem in line
    if field == "repo_root":
        assert line.endswith("; write the full path, e.g. /home/me/TensorRT-LLM")
    if field == "llm_models_root":  # a path in the container: no home of this machine
        assert line.endswith("; write the full path")


def test_a_parameter_id_pytest_makes_from_an_expression_is_not_refused(env: Env, cli) -> None:
    """Decision parameter-id-check refuses an id only when every id is known: an `ids` element that
    is an expression, or `pytest.param(..., id=None)` (pytest's own id), must not make a real id
    look impossible."""
    defs = env.repo / "tests" / "integration" / "defs" / "accuracy"
    (defs / "test_ids.py").write_text(
        "import pytest\n"
        "SUFFIX = 'fp8'\n\n"
        "@pytest.mark.parametrize('tp', [1, 2], ids=['tp1', 'tp2_' + SUFFIX])\n"
        "def test_expr(tp):\n    pass\n\n"
        "@pytest.mark.parametrize('n', [pytest.param(1, id=None), pytest.param(2, id='two')])\n"
        "def test_none(n):\n    pass\n"
    )
    for i, tid in enumerate(("test_expr[tp2_fp8]", "test_none[1]", "test_none[two]")):
        work = str(env.work.parent / f"ids{i}")
        r = cli([], env.request(test_cmd=f"pytest accuracy/test_ids.py::{tid}", work_dir=work))
        assert r.code == 0, (tid, r.stderr)
    refused(
        cli,
        env,
        env.request(test_cmd="pytest accuracy/test_ids.py::test_none[three]"),
        "test_cmd",
        contains="has no parameter id [three] (its ids: 1, two)",
    )


def test_build_many_refuses_a_tilde_work_dir_before_making_anything(
    env: Env, cli, tmp_path
) -> None:

    base = tmp_path / "base.json"
    base.write_text(json.dumps({**env.request(), "work_dir": "~/tsb-jobs"}))
    listing = tmp_path / "list.txt"
    listing.write_text("accuracy/test_tiny.py::TestTiny::test_one\n")
    r = cli(["build-many", str(listing), "--base", str(base)])
    assert r.code == 2 and r.stderr.startswith("error: work_dir: starts with ~"), r.stderr
    assert not (tmp_path / "~").exists()


def test_a_forwarded_job_spec_adds_no_remote_field_to_a_local_job(env: Env, cli, tmp_path) -> None:
    """Decision unread-field-warning warns of fields a scenario never reads; the forwarding of an
    earlier job_spec.json must not put them there itself."""

    spec = tmp_path / "job_spec.json"
    spec.write_text(json.dumps({"remote_repo_path": "/lustre/me/TRT", "remote_work_dir": "/x"}))
    r = cli([], env.request(test_cmd=PYTEST_4, job_spec_file=str(spec)))
    assert r.code == 0, r.stderr
    assert "remote_repo_path" not in r.stderr and "remote_work_dir" not in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("execution_scenario: local_slurm\n\twork_dir: w\n", ":2:1", "a tab, which YAML"),
        ("execution_scenario: local_slurm\nwork_dir: [w\n", ":3:1", "expected ',' or ']'"),
        ("a: 1\n b: 2\n", ":2:3", "mapping values are not allowed here"),
    ],
)
def test_a_yaml_error_names_file_line_and_column(
    tmp_path, cli, text: str, where: str, what: str
) -> None:
    path = tmp_path / "req.yaml"
    path.write_text(text)
    r = cli(["build", str(path)])
    assert r.code == 2
    assert r.stderr.startswith(f"error: request: {path}{where} cannot be parsed: {what}"), r.stderr
    assert list(tmp_path.iterdir()) == [path]


def test_build_many_without_a_base_says_so_once_and_writes_nothing(env: Env, cli, tmp_path) -> None:
    ids = [f"accuracy/test_tiny.py::TestTiny::test_four[tp{n}]" for n in (1, 2, 4)]
    listing = tmp_path / "list.txt"
    listing.write_text("\n".join(ids) + "\n")
    work = tmp_path / "batch"
    r = cli(["build-many", str(listing), "--work-dir", str(work)])
    assert r.code == 2
    lines = r.stderr.strip().splitlines()
    assert lines == [
        "error: execution_scenario: is required; add it to the request or pass "
        "--execution-scenario",
        "error: repo_root: is required; add it to the request or pass --repo-root",
    ], r.stderr
    assert not work.exists()


def test_build_many_that_builds_no_job_leaves_no_index(env: Env, cli, tmp_path) -> None:
    import yaml

    listing = tmp_path / "list.txt"
    listing.write_text("accuracy/test_tiny.py::TestTiny::test_four[tp4\n")
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(env.request()))
    work = tmp_path / "batch"
    args = ["build-many", str(listing), "--base", str(base), "--work-dir", str(work)]
    r = cli(args)
    assert r.code == 2 and "nothing written" in r.stdout, (r.stdout, r.stderr)
    assert not work.exists()
    listing.write_text("accuracy/test_tiny.py::TestTiny::test_four[tp4]\n")
    r = cli(args)  # the corrected run is not refused as "not empty"
    assert r.code == 0, r.stderr
    assert (work / "jobs.json").is_file()


# `nvidia-smi -L` as the driver's tool prints it: one line per GPU, `GPU <index>: <name>
# (UUID: GPU-<uuid>)` (NVIDIA's nvidia-smi documentation, the -L/--list-gpus option).
NVIDIA_SMI_L = """#!/bin/sh
[ "$1" = "-L" ] || { echo "stand-in takes -L only" >&2; exit 2; }
for i in 0 1 2 3; do
  echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-5f3a0c1e-0000-0000-0000-00000000000$i)"
done
"""


def _path_with(tmp_path, monkeypatch, smi: str | None) -> None:
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if smi is not None:
        (bin_dir / "nvidia-smi").write_text(smi)
        (bin_dir / "nvidia-smi").chmod(0o755)
    keep = [p for p in os.environ["PATH"].split(":") if not os.path.exists(f"{p}/nvidia-smi")]
    monkeypatch.setenv("PATH", ":".join([str(bin_dir), *keep]))


def test_local_docker_without_env_check_counts_the_gpus_here(
    env: Env, cli, tmp_path, monkeypatch
) -> None:
    _path_with(tmp_path, monkeypatch, NVIDIA_SMI_L)
    req = env.request("local_docker", test_cmd=PYTEST_4)
    req.pop("env_check", None)
    r = cli([], req)
    assert r.code == 0, r.stderr
    assert "warning: gpus_per_node 4: nvidia-smi -L on this machine lists 4" in r.stderr


def test_local_docker_with_no_gpu_count_anywhere_names_env_check(
    env: Env, cli, tmp_path, monkeypatch
) -> None:
    _path_with(tmp_path, monkeypatch, None)
    req = env.request("local_docker", test_cmd=PYTEST_4)
    req.pop("env_check", None)
    line = refused(cli, env, req, "gpus_per_node", contains="nvidia-smi -L lists no GPU")
    assert "--env-check" in line and "--gpus-per-node N" in line


def test_an_empty_flag_clears_the_files_value(env: Env, cli, tmp_path) -> None:
    """Documented (README, build --help): `--test-cmd ""` is the field not given."""
    import yaml

    path = tmp_path / "req.yaml"
    path.write_text(yaml.safe_dump(env.request(test_cmd=PYTEST_4)))
    r = cli(["build", str(path), "--test-cmd", "", "--custom-cmd", "echo hi", "--json"])
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["workflow_type"] == "custom"
    r = cli(["build", str(path), "--test-cmd", ""])
    assert r.code == 2 and r.stderr.startswith("error: test_cmd: no command given"), r.stderr


def test_paths_partition_and_account_are_refused_at_once(env: Env, cli) -> None:
    req = env.request(test_cmd=PYTEST_4, partition="nope", account="nobody")
    req.update(repo_root=str(env.root / "no-checkout"), models_path=str(env.root / "no-models"))
    r = cli([], req)
    assert r.code == 2 and r.stdout == ""
    fields = [line.split(":")[1].strip() for line in r.stderr.splitlines()]
    assert fields == ["repo_root", "partition", "account", "models_path"], r.stderr


# ---------------------------------------------------------------- a second newcomer's hour


def test_a_refused_value_and_the_builds_own_checks_come_in_one_answer(env: Env, cli) -> None:
    """A wrong type, a partition typo and a missing models folder: three lines, one round trip."""
    req = env.request(
        test_cmd=PYTEST_4,
        required_devices="4",
        partition="gpus",
        models_path=str(env.root / "no-models"),
    )
    env.work.mkdir(parents=True, exist_ok=True)
    r = cli([], req)
    assert r.code == 2 and r.stdout == ""
    fields = [line.split(":")[1].strip() for line in r.stderr.splitlines()]
    assert fields == ["required_devices", "partition", "models_path"], r.stderr
    assert "did you mean gpu?" in r.stderr
    assert list(env.work.iterdir()) == []


def test_a_refused_command_is_not_also_called_missing(env: Env, cli) -> None:
    r = cli([], env.request(eval_cmd="accuracy", partition="gpus"))
    assert r.code == 2
    fields = [line.split(":")[1].strip() for line in r.stderr.splitlines()]
    assert fields == ["eval_cmd", "partition"], r.stderr


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("required_devices", 4.0, "write 4, a whole number"),
        ("required_devices", 2.5, "write a whole number, e.g. 4"),
        ("required_devices", -2, "write a whole number of at least 1, or leave the field out"),
        ("node_count", 0, "write a whole number of at least 1, or leave the field out"),
        ("partition", ["gpu"], "write one value, not a list: gpu"),
        ("partition", "gpu ", "write 'gpu'"),
        ("mpi_plugin", " pmix", "write 'pmix'"),
        ("account", "", "write the name, or leave the field out"),
        ("time_limit", 1.5, "write whole minutes (90) or HH:MM:SS (01:30:00)"),
        ("time_limit", "2h", "write 02:00:00 for 2 h"),
        ("time_limit", "120min", "write 120 (a bare number is minutes)"),
        ("time_limit", "1d", "write 1-00:00:00 for 1 days"),
        ("time_limit", "1:06:00:00", "write 1-06:00:00 (days-hours:minutes:seconds)"),
        ("time_limit", -1, "a time limit is not negative; write minutes (90)"),
        ("model_name", "meta-llama/Llama-3.1-8B", "write Llama-3.1-8B"),
        ("model_name", "my model", "write my_model"),
        ("cuda_arch", "sm_90a", "write 90a-real"),
        ("cuda_arch", "9.0", "write 90-real"),
        ("cuda_arch", "90,100", "write 90-real;100-real"),
        ("env_check", "gpus_per_node=4", "write a mapping of its fields, e.g. {gpus_per_node: 8"),
    ],
)
def test_a_refused_value_gets_the_value_to_write(
    env: Env, cli, field: str, value: object, fix: str
) -> None:
    """`correct the value` told nobody what to write."""
    line = refused(cli, env, env.request(test_cmd=PYTEST_4, **{field: value}), field)
    assert f"; {fix}" in line, line
    assert "correct the value" not in line and "EnvCheck" not in line, line


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("nvcr.io/nvidia/tensorrt-llm/release:", "ends with ':' and no tag"),
        ("nvcr.io/NVIDIA/TensorRT-LLM:1.0", "has capitals in its repository path"),
        ("nvcr.io/nvidia/x:1.0:2", "has more than one tag"),
        ("nvcr.io/nvidia/x:.1", "has a tag docker refuses"),
    ],
)
def test_an_image_reference_docker_refuses_is_refused(
    env: Env, cli, image: str, problem: str
) -> None:
    line = refused(
        cli, env, env.request(test_cmd=PYTEST_4, container_image=image), "container_image"
    )
    assert problem in line, line
    if "capitals" in line:
        assert line.endswith("write it in lower case: 'nvcr.io/nvidia/tensorrt-llm:1.0'"), line


@pytest.mark.parametrize(
    "image",
    [
        "docker://nvcr.io#nvidia/tensorrt-llm/release:1.0.0",
        "localhost:5000/trt/llm:1",
        "Registry.Example.com:5000/trt/llm",  # the host may have capitals
        "nvcr.io/nvidia/tensorrt-llm/release@sha256:" + "a" * 64,
        "/images/TRT-LLM.sqsh",
    ],
)
def test_an_image_reference_docker_takes_builds(env: Env, cli, image: str) -> None:
    r = cli([], env.request(test_cmd=PYTEST_4, container_image=image))
    assert r.code == 0, r.stderr


def test_a_work_dir_that_is_the_checkout_is_refused(env: Env, cli) -> None:
    before = sorted(p.name for p in env.repo.iterdir())
    r = cli([], env.request(custom_cmd="echo hi", work_dir=str(env.repo)))
    assert r.code == 2 and r.stderr.startswith(f"error: work_dir: is the checkout {env.repo}")
    assert f"e.g. {env.repo}/work_dirs/<name>" in r.stderr
    assert sorted(p.name for p in env.repo.iterdir()) == before


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        (
            {"eval_cmd": f"trtllm-eval --model {MODEL} --tp_size 16 --pp_size 2 mmlu"},
            "required_devices",
        ),
        (
            {
                "bench_cmd": f"trtllm-bench -m {MODEL} throughput --dataset /d.json --tp 24",
                "node_count": 3,
            },
            "node_count",
        ),
    ],
)
def test_a_job_wider_than_its_partition_is_refused(env: Env, cli, fields: dict, field: str) -> None:
    """The test cluster file's gpu partition has 2 nodes of 8 GPUs."""
    line = refused(cli, env, env.request(**fields), field)
    assert "but partition gpu has 2" in line and "ask for at most 16 GPUs (2 nodes)" in line, line
    two = cli([], env.request(eval_cmd=f"trtllm-eval --model {MODEL} --tp_size 16 mmlu"))
    assert two.code == 0, two.stderr


def test_build_many_of_an_empty_list_is_refused(env: Env, cli, tmp_path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("# filled in later\n\n")
    base = tmp_path / "base.json"
    base.write_text(json.dumps(env.request()))
    work = tmp_path / "batch"
    r = cli(["build-many", str(listing), "--base", str(base), "--work-dir", str(work)])
    assert r.code == 2, (r.stdout, r.stderr)
    assert r.stderr.strip() == (
        f"error: LIST: {listing} holds no entry (only comments and blank lines); give a list "
        "with one test id per line, or a YAML list of requests"
    )
    assert not work.exists()


@pytest.mark.parametrize(
    ("text", "where", "fix"),
    [
        ('{"execution_scenario": "local_slurm",\n "work_dir": "w",\n}', ":3:1", "remove the comma"),
        ("{'execution_scenario': 'local_slurm'}", ":1:2", "write strings and keys in double"),
        ("execution_scenario: local_slurm\n", ":1:1", "name the file .yaml"),
        ('{"work_dir": w}', ":1:14", "fix the JSON there"),
    ],
)
def test_a_json_error_names_file_line_and_column(
    tmp_path, cli, text: str, where: str, fix: str
) -> None:
    path = tmp_path / "req.json"
    path.write_text(text)
    r = cli(["build", str(path)])
    assert r.code == 2
    line = r.stderr.strip()
    assert line.startswith(f"error: request: {path}{where} cannot be parsed: "), line
    assert f"; {fix}" in line, line
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize(("typo", "field"), [("test_cmnd", "test_cmd"), ("partiton", "partition")])
def test_a_misspelt_field_is_not_also_called_missing(env: Env, cli, typo: str, field: str) -> None:
    req = env.request(test_cmd=PYTEST_4, time_limit="2h")
    req[typo] = req.pop(field)
    r = cli([], req)
    assert r.code == 2
    fields = [line.split(":")[1].strip() for line in r.stderr.splitlines()]
    assert sorted(fields) == sorted([typo, "time_limit"]), r.stderr


def test_a_repo_root_that_is_no_checkout_is_named(env: Env, cli, tmp_path) -> None:
    other = tmp_path / "somewhere"
    other.mkdir()
    line = refused(cli, env, env.request(custom_cmd="echo hi", repo_root=str(other)), "repo_root")
    assert "is not a TensorRT-LLM checkout" in line, line


@pytest.mark.parametrize("field", ["remote_repo_path", "checkpoint_path"])
def test_a_path_with_a_stray_space_is_named_by_its_own_field(env: Env, cli, field: str) -> None:
    """A remote_repo_path's trailing space was blamed on the remote_work_dir made from it."""
    req = env.request("remote_slurm", custom_cmd="echo hi", **{field: "/lustre/x "})
    line = refused(cli, env, req, field, contains="has white space at its start or end")
    assert line.endswith("; write '/lustre/x'"), line
