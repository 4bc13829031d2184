"""What jobs, clusters and people other than the user write, read back by the tool: job logs,
JUnit reports, submission.json, verdict.json, jobs.json and a remote host's files. None of it
may put a raw escape sequence on the terminal, a megabyte line in a verdict, a DTD past the
XML reader, a repeated key past the JSON reader, an option into a remote command, or a link
out of the report's folder (docs/errors.md, "The validation layer"; decision shown-never-obeyed)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.values import printable
from trtllm_script_builder.output.report_html import load_report, render_report
from trtllm_script_builder.process.handles import Follower
from trtllm_script_builder.process.junit import JUnitError, parse_junit
from trtllm_script_builder.process.ssh import SshRunner, SshTarget, remote_line
from trtllm_script_builder.process.submission import load_submission
from trtllm_script_builder.process.verdict import LogLine, decide_verdict
from trtllm_script_builder.process.watch import Console, WatchResult, render_verdict

# What a terminal acts on instead of showing: CSI (7-bit and the 8-bit C1 form), OSC 52 (write
# the clipboard), a carriage return that redraws the line, NEL and the line separator.
HOSTILE_LINES = [
    "FAILED \x1b[2J\x1b[Hall clear",
    "Error: \x1b]52;c;cm0gLXJmIH4K\x07 clipboard",
    "Error: \x9b31m eight-bit CSI",
    "Error: ok\rPASSED everything",
    "Error: next\x85line \u2028 sep",
    "Error: bell\x07 backspace\x08 nul\x00",
]
_RAW = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


class _Spec:
    success_patterns: list[str] = []
    failure_patterns = ["FAILED", "Error:"]


@pytest.mark.parametrize("line", HOSTILE_LINES)
def test_printable_escapes_what_a_terminal_would_act_on(line: str) -> None:
    shown = printable(line)
    assert not _RAW.search(shown), shown
    assert "\t" in printable("a\tb")  # a tab is shown as it is
    # the escapes name the characters: unescaped again, the line is the original
    assert shown.encode("ascii", "backslashreplace").decode("unicode_escape") == line


def test_printable_cuts_a_long_line_and_says_how_long_it_was() -> None:
    shown = printable("x" * 10_000_000)
    assert len(shown) < 600 and shown.endswith("... (10000000 characters)")


def _decision(lines: list[str]) -> Any:
    return decide_verdict(
        "FAILED", 1, [LogLine(t, "job_1.out", i + 1) for i, t in enumerate(lines)], _Spec()
    )


def test_hostile_log_lines_reach_neither_the_verdict_nor_the_terminal_raw() -> None:
    decision = _decision([*HOSTILE_LINES, "Error: " + "y" * 10_000_000])
    assert len(decision.evidence) > len(HOSTILE_LINES)
    for line in decision.evidence:
        assert not _RAW.search(line), line
        assert len(line) < 1000
    result = WatchResult(decision, "local_slurm", "/w", job_id="1")
    text = render_verdict(result)
    assert not _RAW.search(text.replace("\n", "")), text
    assert len(text.splitlines()) == 1 + len(decision.evidence)
    # verdict.json keeps the escaped, bounded text
    dumped = json.dumps(result.to_json())
    assert "\\u001b" not in dumped and "\\u009b" not in dumped and len(dumped) < 20_000


def test_the_followed_log_is_printed_with_its_control_characters_escaped() -> None:
    out, err = io.StringIO(), io.StringIO()
    Console(out, err).lines([LogLine(t) for t in HOSTILE_LINES])
    printed = out.getvalue()
    assert len(printed.splitlines()) == len(HOSTILE_LINES)
    assert not _RAW.search(printed.replace("\n", "")), printed
    err_out = io.StringIO()
    Console(io.StringIO(), err_out).say("[watch] job " + HOSTILE_LINES[0])
    assert not _RAW.search(err_out.getvalue().rstrip("\n"))


def test_a_line_with_no_end_is_cut_into_bounded_lines_while_it_is_read() -> None:
    chunk = b"z" * (4 * 1024 * 1024)
    sent = iter([chunk, chunk, chunk, b"\nend\n"])

    def read(path: str, offset: int) -> bytes | None:
        return next(sent, None)

    f = Follower("job.out", read)
    kept = 0
    for _ in range(4):
        lines = f.poll()
        assert all(len(ln.text) <= 1024 * 1024 for ln in lines)
        kept = max(kept, len(f.buf))
    assert kept <= 1024 * 1024  # 12 MiB without a newline never sits in memory whole


# ---------------------------------------------------------------- JUnit XML


_ENTITIES = (
    '<!DOCTYPE t [<!ENTITY a "AAAAAAAAAA"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
    '<testsuite><testcase classname="x" name="&b;"><failure message="m"/></testcase></testsuite>'
)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-16-be", "utf-32"])
@pytest.mark.parametrize(
    "doctype",
    [
        _ENTITIES,
        '<!DOCTYPE t SYSTEM "file:///etc/passwd"><testsuite/>',
        '<!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/hostname">]><testsuite name="&x;"/>',
        "<!DOCTYPE testsuite><testsuite/>",
    ],
)
def test_a_junit_report_with_a_dtd_is_refused_in_any_encoding(encoding: str, doctype: str) -> None:
    head = f'<?xml version="1.0" encoding="{encoding.upper()}"?>'
    data = (head + doctype).encode(encoding)
    if encoding == "utf-16-be":
        data = (head.replace("UTF-16-BE", "UTF-16") + doctype).encode("utf-16-be")
    # expat reads no UTF-32: such a file is refused as not XML at all
    with pytest.raises(JUnitError, match="not well-formed" if encoding == "utf-32" else "DTD"):
        parse_junit(data)


def test_junit_test_ids_and_messages_carry_no_control_characters() -> None:
    doc = (
        '<testsuite><testcase classname="a.b" name="t[&#x9b;31m&#x85;x]">'
        '<failure message="boom &#x9b;2J &#x2028; end"/></testcase></testsuite>'
    )
    report = parse_junit(doc.encode())
    (t,) = report.failing
    assert not _RAW.search(t.id) and not _RAW.search(t.message), t


# ---------------------------------------------------------------- files the tool wrote


def _submission(work: Path, text: str) -> Path:
    work.mkdir(exist_ok=True)
    (work / "submission.json").write_text(text)
    return work


def test_submission_json_with_a_key_written_twice_is_refused(tmp_path: Path) -> None:
    text = (
        '{"scenario": "local_slurm", "work_dir": "/w", "submitted_at": "t", "host": "h",'
        ' "script": "s", "job_id": "12", "job_id": "13"}'
    )
    with pytest.raises(BuildError) as info:
        load_submission(_submission(tmp_path / "w", text))
    assert "written twice" in str(info.value) and "\n" not in str(info.value)


def test_submission_json_nested_deep_is_refused_in_one_line(tmp_path: Path) -> None:
    deep = "[" * 5000 + "]" * 5000
    text = (
        '{"scenario": "local_slurm", "work_dir": "/w", "submitted_at": "t", "host": "h",'
        f' "script": "s", "job_id": "12", "prerequisites": {deep}}}'
    )
    with pytest.raises(BuildError) as info:
        load_submission(_submission(tmp_path / "w", text))
    assert "nests deeper" in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------- remote commands


class _Recorder(SshRunner):
    def __init__(self) -> None:
        super().__init__(SshTarget("gpu-login"))
        self.lines: list[str] = []

    def shell(self, line: str, input: bytes | None = None) -> Any:
        self.lines.append(line)
        from trtllm_script_builder.process.proc import CmdResult

        return CmdResult(0, "", "", b"")


@pytest.mark.parametrize("path", ["--follow=name", "-n", "-c"])
def test_a_remote_log_path_is_never_read_as_an_option(path: str) -> None:
    r = _Recorder()
    r.read_from(path, 0)
    (line,) = r.lines
    # `test -f X` takes X as the operand whatever it is; tail would take it as an option
    assert f"tail -c +1 -- {path} " in line


def test_a_remote_read_is_bounded() -> None:
    r = _Recorder()
    r.read_from("/w/job.out", 10)
    assert "head -c" in r.lines[0]


@pytest.mark.parametrize("cwd", ["-P", "-", "--"])
def test_a_remote_folder_is_never_read_as_an_option(cwd: str) -> None:
    assert remote_line(["sbatch", "x"], cwd).startswith(f"cd -- {cwd} && ")
    r = _Recorder()
    r.copy([], cwd)
    assert f"mkdir -p -- {cwd}" in r.lines[0]


# ---------------------------------------------------------------- the report's links


def _verdict(work: Path, **extra: Any) -> dict[str, Any]:
    v: dict[str, Any] = {"verdict": "PASSED", "job_id": "1", "reason": "ok", "evidence": []}
    v.update(extra)
    return v


def test_report_links_never_leave_the_reports_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.out").write_text("x\n")
    (outside / "verdict.json").write_text(json.dumps(_verdict(outside)))
    root = tmp_path / "batch"
    inside = root / "job"
    inside.mkdir(parents=True)
    (inside / "job_1.out").write_text("log\n")
    logs = [str(outside / "secret.out"), "../../outside/secret.out", "/etc/hostname", "job_1.out"]
    (inside / "verdict.json").write_text(json.dumps(_verdict(inside, log_files=logs)))
    rows = [
        {"line": 1, "entry": "a", "work_dir": str(inside), "status": "built"},
        {"line": 2, "entry": "b", "work_dir": str(outside), "status": "built"},
        {"line": 3, "entry": "c", "work_dir": "../outside", "status": "built"},
    ]
    (root / "jobs.json").write_text(json.dumps(rows))
    page = render_report(load_report(root))
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert "job/" in hrefs and "job/job_1.out" in hrefs
    for href in hrefs:
        assert not href.startswith(("/", "..")) and "/../" not in href and ":" not in href, href


# ---------------------------------------------------------------- a remote cluster's answers


def _hostile_cluster() -> Any:
    from tests.test_probe_check_runner import cluster
    from trtllm_script_builder.process.proc import CmdResult

    sinfo = (
        "batch*|up|4:00:00|3|gpu:h100:8(S:0-1)\n"
        "ev\x1b]0;pwn\x07il|up|4:00:00|1|gpu:8\n"
        "-x|up|1:00:00|1|(null)\n"
        "a b|up|1:00:00|1|(null)\n"
        "gres|up|1:00:00|1|gpu:\x1b[2J:8\n"
    )
    return cluster(
        sinfo=CmdResult(0, sinfo),
        sacctmgr=CmdResult(0, "prj|prj|\nprj|x\x1b[31m|\nprj|-A|\n"),
        **{"srun --mpi=list": CmdResult(1, "", "srun: error: \x1b]52;c;cm0K\x07 bad")},
    )


def test_a_hostile_clusters_names_are_left_out_and_its_words_escaped(tmp_path: Path) -> None:
    from trtllm_script_builder.model.slurm_env import load_slurm_env
    from trtllm_script_builder.process.probe import probe, render_text

    env, rc = probe(host=_hostile_cluster(), user="alice")
    assert rc == 2
    assert [p["name"] for p in env["partitions"]] == ["batch"]
    assert env["accounts"] == ["prj"]
    text = render_text(env)
    assert not _RAW.search(text.replace("\n", "")), text
    for name in ("ev\\x1b]0;pwn\\x07il", "'-x'", "'a b'", "x\\x1b[31m", "'-A'", "\\x1b[2J"):
        assert any(name in e for e in env["errors"]), (name, env["errors"])
    # what probe writes, the build reads back
    path = tmp_path / "slurm_env.json"
    path.write_text(json.dumps(env))
    loaded, _ = load_slurm_env(path)
    assert loaded.partition("batch") is not None


def test_probe_ssh_keeps_no_hostile_login_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from trtllm_script_builder.cli import main
    from trtllm_script_builder.model.slurm_env import load_slurm_env
    from trtllm_script_builder.process import host
    from trtllm_script_builder.process.proc import CmdResult

    fake = _hostile_cluster()
    hello = {"out": "relative/dir\n/home/\x1b[2Jme\nalice\n"}

    class FakeSsh:
        name = ssh_host = "login"
        remote = True

        def __init__(self, target: Any) -> None:
            pass

        def check(self) -> CmdResult:
            return CmdResult(0, hello["out"])

        def __call__(self, argv: Any, cwd: Any = None, **_: Any) -> CmdResult:
            return fake(argv)

    monkeypatch.setattr(host, "OverSsh", FakeSsh)
    out = tmp_path / "env.json"
    res = CliRunner().invoke(main, ["probe", "--ssh", "login", "--output", str(out)])
    assert res.exit_code == 2, res.output
    assert not _RAW.search(res.output.replace("\n", "")), res.output
    env, _ = load_slurm_env(out)  # the file probe wrote is one the build reads
    assert env.remote_cwd is None and env.remote_home is None
    hello["out"] = "/home/alice\n/home/alice\n-oProxyCommand=x\n"
    res = CliRunner().invoke(main, ["probe", "--ssh", "login", "--output", str(out)])
    assert res.exit_code == 3 and "id -un answered '-oProxyCommand=x'" in res.output
    hello["out"] = ""
    monkeypatch.setattr(
        FakeSsh, "check", lambda *a, **k: CmdResult(255, "", "ssh: \x1b]52;c;x\x07")
    )
    res = CliRunner().invoke(main, ["probe", "--ssh", "login", "--output", str(out)])
    assert res.exit_code == 3 and "\x1b" not in res.output and "\\x1b]52" in res.output


# ---------------------------------------------------------------- job_spec.json read back

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compile_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A job built with compile: its job_spec.json has a prerequisite."""
    from click.testing import CliRunner

    from trtllm_script_builder.cli import main

    work = tmp_path_factory.mktemp("spec") / "job"
    request = str(ROOT / "examples" / "requests" / "pytest_local_slurm.yaml")
    args = ["build", request, "--work-dir", str(work), "--compile", "--cuda-arch", "90-real"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return work


def _edited(work: Path, tmp: Path, edit: Any) -> Path:
    spec = json.loads((work / "job_spec.json").read_text())
    edit(spec)
    new = tmp / "job"
    new.mkdir()
    text = spec if isinstance(spec, str) else json.dumps(spec)
    (new / "job_spec.json").write_text(text)
    return new


@pytest.mark.parametrize(
    "edit",
    [
        lambda s: s["prerequisites"][0].update(script_path="--wrap=touch /tmp/pwned"),
        lambda s: s["prerequisites"][0].update(script_path="relative.slurm"),
        lambda s: s["prerequisites"][0].update(remote_script_path="-x"),
        lambda s: s["prerequisites"][0].update(log_file_pattern="a\x1b[2Jb_%j.out"),
        lambda s: s["prerequisites"][0].update(kind="rm"),
        lambda s: s["prerequisites"][0].pop("key"),
        lambda s: s["prerequisites"][0].pop("script_path"),
    ],
    ids=["wrap", "relative", "remote-dash", "escape", "kind", "no-key", "no-script"],
)
def test_an_edited_prerequisite_is_refused_in_one_line(
    compile_spec: Path, tmp_path: Path, edit: Any
) -> None:
    from trtllm_script_builder.process.spec_file import read_job_spec

    with pytest.raises(BuildError) as info:
        read_job_spec(_edited(compile_spec, tmp_path, edit))
    line = str(info.value)
    assert "\n" not in line and "\x1b" not in line and "prerequisites" in line, line


def test_job_spec_json_with_a_key_written_twice_is_refused(
    compile_spec: Path, tmp_path: Path
) -> None:
    from trtllm_script_builder.process.spec_file import read_job_spec

    text = (compile_spec / "job_spec.json").read_text()
    twice = text.replace("{", '{"ssh_host": "a", "ssh_host": "b",', 1)
    new = tmp_path / "job"
    new.mkdir()
    (new / "job_spec.json").write_text(twice)
    with pytest.raises(BuildError, match="written twice"):
        read_job_spec(new)
    read_job_spec(compile_spec)  # the file as built is read


def test_a_log_pattern_with_a_control_character_is_refused(
    compile_spec: Path, tmp_path: Path
) -> None:
    from trtllm_script_builder.process.spec_file import read_job_spec

    new = _edited(compile_spec, tmp_path, lambda s: s.update(log_file_pattern="x\r\x1b[2J_%j.out"))
    with pytest.raises(BuildError, match="log_file_pattern"):
        read_job_spec(new)


_SUB = {
    "scenario": "local_slurm",
    "work_dir": "/w",
    "submitted_at": "t",
    "host": "h",
    "script": "/w/job.slurm",
    "job_id": "12",
}
_PREREQ = {"kind": "compile", "key": "k", "job_id": "11", "log_file": "/w/c_11.out"}


@pytest.mark.parametrize(
    "prereq",
    [
        {**_PREREQ, "job_id": "--user=me"},
        {**_PREREQ, "job_id": "-1"},
        {**_PREREQ, "job_id": 11},
        {k: v for k, v in _PREREQ.items() if k != "job_id"},
        {k: v for k, v in _PREREQ.items() if k != "key"},
        {**_PREREQ, "kind": "rm"},
    ],
    ids=["user", "dash", "int", "no-id", "no-key", "kind"],
)
def test_an_edited_prerequisite_of_submission_json_is_refused(
    tmp_path: Path, prereq: dict[str, Any]
) -> None:
    text = json.dumps({**_SUB, "prerequisites": [prereq]})
    with pytest.raises(BuildError) as info:
        load_submission(_submission(tmp_path / "w", text))
    assert "\n" not in str(info.value) and "prerequisites[0]" in str(info.value)
    good = json.dumps({**_SUB, "prerequisites": [_PREREQ]})
    assert load_submission(_submission(tmp_path / "w", good)) is not None


def _batch_record(tmp_path: Path, **changes: Any) -> Path:
    data: dict[str, Any] = {
        "batch_dir": str(tmp_path),
        "scenario": "local_slurm",
        "submitted_at": "t",
        "host": "h",
        "arrays": [{"job_id": "20", "driver": "/b/array.slurm", "size": 2}],
        "jobs": [
            {"work_dir": "/b/a", "entry": "a", "job_id": "20_0", "array_job_id": "20"},
            {"work_dir": "/b/b", "entry": "b", "job_id": "20_1", "prerequisites": ["11"]},
        ],
        "prerequisites": [_PREREQ],
    }
    data.update(changes)
    (tmp_path / "batch_submission.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize(
    "change",
    [
        {"arrays": [{"job_id": "--user=me", "driver": "/b/d", "size": 1}]},
        {"jobs": [{"work_dir": "/b/a", "entry": "a", "job_id": "-1"}]},
        {"jobs": [{"work_dir": "/b/a", "entry": "a", "job_id": "1", "prerequisites": ["-u"]}]},
        {"prerequisites": [{**_PREREQ, "job_id": "--me"}]},
        {"host": "h\x1b[2J"},
    ],
    ids=["array", "job", "waits-for", "prerequisite", "escape"],
)
def test_an_edited_batch_submission_json_is_refused(tmp_path: Path, change: dict[str, Any]) -> None:
    from trtllm_script_builder.process.slurm_submit import load_batch_submission

    assert load_batch_submission(_batch_record(tmp_path)) is not None
    with pytest.raises(BuildError) as info:
        load_batch_submission(_batch_record(tmp_path, **change))
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


def test_a_tools_complaint_and_progress_lines_are_shown_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from trtllm_script_builder.cli import say
    from trtllm_script_builder.process.probe.collect import first_line
    from trtllm_script_builder.process.proc import CmdResult

    said = first_line(CmdResult(128, "", "\n  fatal: \x1b]52;c;cm0K\x07 repo " + "z" * 5000 + "\n"))
    assert said.startswith("fatal: \\x1b]52;c;cm0K\\x07 repo") and len(said) < 600
    say("pushing to \x1b[2J\x9b31m origin")
    err = capsys.readouterr().err
    assert err == "pushing to \\x1b[2J\\x9b31m origin\n"


def test_a_batchs_summary_shows_what_it_quotes_escaped() -> None:
    from trtllm_script_builder.process.batch_results import BatchResult, render_results

    result = BatchResult(
        "/b\x1b]0;t\x07", [], [], None, ["/b/x.xml not merged: \x9b2J"], False, None, 0.0
    )
    out = render_results(result)
    assert not _RAW.search(out.replace("\n", "")) and "\\x9b2J" in out


def test_check_shows_a_clusters_hostile_words_escaped(tmp_path: Path) -> None:
    from tests.test_probe_check_runner import cluster, job
    from trtllm_script_builder.process.check import check
    from trtllm_script_builder.process.proc import CmdResult

    fake = cluster()
    fake.answers["sbatch --test-only /"] = CmdResult(
        1, "", "allocation failure: \x1b]52;c;cm0K\x07\x1b[2J " + "w" * 5000
    )
    problems, rc = check(job(tmp_path), host=fake, user="alice")
    assert rc == 1 and problems
    for p in problems:
        assert not _RAW.search(p) and len(p) < 700, p
    assert "\\x1b]52;c;cm0K\\x07" in problems[0]


def test_scontrol_values_with_equals_percent_and_pipes_stay_whole() -> None:
    """A work dir may hold `=`, `%` and `|` (no white space: the #SBATCH lines refuse it), and
    the job name is the builder's: StdOut is read whole, and sacct's `-P` rows are split only
    at the columns the tool asks for, none of which is free text."""
    from trtllm_script_builder.process.slurm import sacct_rows, status_from_scontrol

    line = (
        "JobId=12 JobName=custom_custom UserId=u(1) JobState=COMPLETED Reason=None "
        "ExitCode=0:0 RunTime=00:00:05 TimeLimit=00:05:00 "
        "Command=/w/a=b%x|y/job.slurm WorkDir=/w/a=b%x|y "
        "StdErr=/w/a=b%x|y/job_12.err StdIn=/dev/null StdOut=/w/a=b%x|y/job_12.out Power="
    )
    st = status_from_scontrol("12", line)
    assert (st.stdout, st.stderr, st.state) == (
        "/w/a=b%x|y/job_12.out",
        "/w/a=b%x|y/job_12.err",
        "COMPLETED",
    )
    rows = sacct_rows("12|FAILED|1:0|00:00:05|gpunode|12|2026-12-03T09:00:00\n")
    assert rows["12"].exit_code == 1 and rows["12"].nodelist == "gpunode"


# ---------------------------------------------------------------- fuzz over what is read back

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.test_fuzz import PIECES, fuzz_settings, texts, values  # noqa: E402

log_bytes = st.lists(
    st.sampled_from([p.encode("utf-8", "surrogatepass") for p in PIECES])
    | st.sampled_from([b"\xff\xfe", b"\xc2\x9b", b"\x1b]52;c;", b"\x07", b"Error: ", b"FAILED"])
    | st.binary(max_size=6),
    max_size=40,
).map(b"".join)


@fuzz_settings(60)
@given(chunks=st.lists(log_bytes, min_size=1, max_size=4))
def test_any_log_gives_clean_bounded_evidence_and_terminal_lines(chunks: list[bytes]) -> None:
    sent = iter(chunks)
    f = Follower("job.out", lambda path, offset: next(sent, None))
    lines = [ln for _ in chunks for ln in f.poll()] + f.flush()
    out = io.StringIO()
    Console(out, io.StringIO()).lines(lines)
    assert not _RAW.search(out.getvalue().replace("\n", ""))
    assert len(out.getvalue().splitlines()) == len(lines)
    decision = decide_verdict("FAILED", 1, lines, _Spec())
    text = render_verdict(WatchResult(decision, "local_slurm", "/w", job_id="1"))
    assert not _RAW.search(text.replace("\n", ""))
    assert all(len(e) <= 600 for e in decision.evidence)


@fuzz_settings(40)
@given(value=texts)
def test_any_junit_text_gives_clean_ids_and_messages(value: str) -> None:
    from xml.sax.saxutils import quoteattr

    def attr(v: str) -> str:
        return quoteattr(v.encode("utf-8", "replace").decode("utf-8", "replace"))

    doc = (
        f"<testsuite><testcase classname={attr(value)} name={attr(value)}>"
        f"<failure message={attr(value)}/></testcase></testsuite>"
    )
    try:
        report = parse_junit(doc.encode("utf-8", "replace"))
    except JUnitError as e:
        assert "\n" not in str(e)
        return
    for t in report.failing:
        assert not _RAW.search(t.id) and not _RAW.search(t.message)
        assert len(t.id) <= 600 and len(t.message) <= 600


SUBMISSION_KEYS = [
    "job_id", "alloc_job_id", "array_job_id", "container_name", "ssh_host", "host", "log_file",
    "remote_work_dir", "source_commit", "prerequisites",
]  # fmt: skip


@fuzz_settings(60)
@given(key=st.sampled_from(SUBMISSION_KEYS), value=values | st.lists(texts, max_size=2))
def test_any_submission_value_is_read_or_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, key: str, value: Any
) -> None:
    work = tmp_path_factory.mktemp("sub")
    (work / "submission.json").write_text(
        json.dumps({**_SUB, key: value}, ensure_ascii=True)
        if not isinstance(value, str) or "\udc80" not in value
        else json.dumps({**_SUB, key: value.replace("\udc80", "?")})
    )
    try:
        sub = load_submission(work)
    except BuildError as e:
        assert "\n" not in str(e) and e.field == "work_dir"
        return
    assert sub is not None
    for name in ("job_id", "alloc_job_id", "array_job_id"):
        got = getattr(sub, name)
        assert got is None or re.fullmatch(r"[0-9]+(_[0-9]+)?", got), (name, got)
    assert sub.ssh_host is None or not sub.ssh_host.startswith("-")


# ---------------------------------------------------------------- numbers a log or file holds


def test_figures_too_long_for_a_float_or_an_int_are_no_figures() -> None:
    from trtllm_script_builder.process.figures import figures
    from trtllm_script_builder.process.junit import summary_report
    from trtllm_script_builder.process.perf_sanity import benchmark_figures

    big = "9" * 5000
    got = figures(
        [
            f"Total Output Throughput (tokens/sec):   {big}",
            f"lm-eval gsm8k average accuracy: {big}",
            f"MMLU weighted average accuracy: 75.00 ({big})",
        ]
    )
    assert got == {"mmlu": {"accuracy": 75.0}}
    json.dumps(got, allow_nan=False)  # what verdict.json gets is JSON
    assert benchmark_figures(f"Request throughput (req/s): {big}\n") == {}
    found = summary_report([f"==== {big} passed in 1.0s ===="])
    assert found is not None and found[0].passed == 0


@pytest.mark.parametrize("number", ["9" * 5000, "-" + "9" * 70])
def test_the_json_reader_refuses_whole_numbers_int_cannot_take(number: str) -> None:
    from trtllm_script_builder.model.datafile import DataError, parse_json

    with pytest.raises(DataError, match="digits, more than 64"):
        parse_json(f'{{"elapsed_seconds": {number}}}')


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_a_verdict_with_numbers_json_has_not_is_reported_without_them(
    tmp_path: Path, number: str
) -> None:
    from trtllm_script_builder.output.report_html import load_report

    bench = {"total_output_throughput_tokens_per_sec": number, "token_throughput": 5.0}
    body = json.dumps({"verdict": "PASSED", "job_id": "1", "results": {"bench": bench}})
    text = body.replace(f'"{number}"', number)[:-1] + f', "elapsed_seconds": {number}}}'
    (tmp_path / "verdict.json").write_text(text)
    page = render_report(load_report(tmp_path))  # int(round(inf)) ended it in a traceback
    body_text = page[page.index("<body") :]
    assert not re.search(r">\s*-?(inf|nan)\b", body_text, re.I), body_text
    assert "token_throughput" in page


@pytest.mark.parametrize("number", ["inf", "nan", "1e999", "-inf", "9" * 5000])
def test_a_junit_suite_with_hostile_counts_is_merged_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: str
) -> None:
    import xml.etree.ElementTree as ET

    from tests.test_batch_submit_watch import FakeSlurm, make_batch, run_watch, write_logs

    folder = make_batch(tmp_path, [("test_ok", "7"), ("test_bad", "7")])
    write_logs(folder, "test_ok", "8", ok=True)
    write_logs(folder, "test_bad", "9", ok=True)
    bad = folder / "test_bad" / "tiny_auto_test_9_junit.xml"
    bad.write_text(
        bad.read_text().replace('tests="1"', f'tests="{number}"').replace('"1.5"', f'"{number}"')
    )
    fake = FakeSlurm({"7_0": ["COMPLETED"], "7_1": ["COMPLETED"]}, {"7_0": "8", "7_1": "9"})
    result, _ = run_watch(folder, fake, monkeypatch)
    merged = ET.parse(folder / "junit.xml").getroot()
    assert merged.get("tests") == "1" and merged.get("time") == "1.500"  # the bad suite adds 0
    assert result.exit_status == 0


BIG = "9" * 5000


@pytest.mark.parametrize(
    ("field", "cmd"),
    [
        ("bench_cmd", "trtllm-bench --model m throughput --tp ²"),
        ("bench_cmd", "trtllm-bench --model m throughput --tp ٣"),
        ("bench_cmd", f"trtllm-bench --model m throughput --tp {BIG}"),
        ("bench_cmd", "trtllm-bench --model m throughput --pp ¹"),
    ],
)
def test_a_number_in_a_command_that_is_no_ascii_number_is_refused_in_one_line(
    tmp_path: Path, field: str, cmd: str
) -> None:
    from click.testing import CliRunner

    from trtllm_script_builder.cli import main

    request = str(ROOT / "examples" / "requests" / "bench_local_slurm.yaml")
    args = ["build", request, "--work-dir", str(tmp_path / "w"), f"--{field.replace('_', '-')}"]
    res = CliRunner().invoke(main, [*args, cmd])
    assert res.exit_code == 2 and not isinstance(res.exception, ValueError), res.output[-300:]
    assert len(res.stderr.splitlines()) == 1 and "is not a positive whole number" in res.stderr


@pytest.mark.parametrize(
    ("field", "extra"),
    [
        ("bench_cmd", "trtllm-bench --model m throughput --tp 1 --ep ²"),
        ("test_cmd", f"--timeout={BIG}"),
        ("test_cmd", "--timeout=٣٣٣٣٣"),
    ],
)
def test_a_number_the_build_only_reads_for_a_hint_never_ends_in_a_traceback(
    tmp_path: Path, field: str, extra: str
) -> None:
    from click.testing import CliRunner

    from trtllm_script_builder.cli import main

    name = "bench_local_slurm.yaml" if field == "bench_cmd" else "pytest_local_slurm.yaml"
    request = ROOT / "examples" / "requests" / name
    if field == "test_cmd":
        test_cmd = next(
            line.split(": ", 1)[1] for line in request.read_text().splitlines()
            if line.startswith("test_cmd:")
        )  # fmt: skip
        extra = f"{test_cmd} {extra}"
    args = ["build", str(request), "--work-dir", str(tmp_path / "w"), "--dry-run"]
    res = CliRunner().invoke(main, [*args, f"--{field.replace('_', '-')}", extra])
    assert res.exit_code == 0, (res.exception, res.output[-300:])


@pytest.mark.parametrize("count", ["²", "٣", BIG])
def test_a_clusters_counts_that_are_no_ascii_numbers_count_nothing(count: str) -> None:
    from trtllm_script_builder.process.probe import parse

    assert parse.gpu_count(f"gpu:h100:{count}") == parse.gpu_count("gpu:h100") == 0
    assert parse.parse_sinfo(f"p|up|1:00:00|{count}|gpu:8\n")[0].nodes is None


def test_a_hostile_batch_renders_inert_in_headless_chromium(tmp_path: Path) -> None:
    """Folder and log names that try to close the attribute, a `javascript:` log name, and
    markup in the verdict: the browser's DOM holds no element the tool did not write and
    every link stays relative and inside the folder."""
    from tests.test_report_html import _browse, _chromium
    from trtllm_script_builder.output.report_html import write_report

    chromium = _chromium()
    if not chromium:
        pytest.skip("chromium is not installed")
    root = tmp_path / "batch"
    evil = '"><img src=x onerror=alert(1)>'
    work = root / evil
    work.mkdir(parents=True)
    (work / "javascript:alert(1)").write_text("log\n")
    (work / "x' onmouseover='alert(1).out").write_text("log\n")
    verdict = _verdict(
        work,
        verdict="FAILED",
        reason="</td><script>alert(1)</script>",
        evidence=["<iframe src=javascript:alert(1)>", "\x1b[2J"],
        log_files=["javascript:alert(1)", "x' onmouseover='alert(1).out", "/etc/hostname"],
        source_commit='"><svg onload=alert(1)>',
    )
    (work / "verdict.json").write_text(json.dumps(verdict))
    (root / "jobs.json").write_text(
        json.dumps([{"line": 1, "entry": "<b>e</b>", "work_dir": evil, "status": "built"}])
    )
    page = write_report(root)
    dom = _browse(chromium, page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    from html.parser import HTMLParser

    class Elements(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tags: set[str] = set()
            self.handlers: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.tags.add(tag)
            self.handlers += [name for name, _ in attrs if name.startswith("on")]

    seen = Elements()
    seen.feed(text)
    assert not seen.tags & {"img", "script", "iframe", "b", "object", "embed"}, seen.tags
    assert seen.handlers == []
    hrefs = re.findall(r'href="([^"]*)"', text)
    assert len(hrefs) == 3, hrefs  # the folder and its two logs, not /etc/hostname
    for href in hrefs:
        assert not href.startswith(("/", "..", "javascript")) and ":" not in href, href
    assert "Content-Security-Policy" in page.read_text()


@pytest.mark.parametrize(
    "change",
    [{"pid": 0}, {"pid": -1}, {"pid": 1}, {"pid": True}, {"pid": 42, "pid_start": "-1 x"}],
    ids=["zero", "minus-one", "init", "bool", "start"],
)
def test_a_pid_that_would_signal_a_group_not_ours_is_refused(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    data = {k: v for k, v in _SUB.items() if k != "job_id"}
    data.update({"scenario": "local_docker", "pid_start": "123", **change})
    with pytest.raises(BuildError) as info:
        load_submission(_submission(tmp_path / "w", json.dumps(data)))
    assert "pid" in str(info.value) and "\n" not in str(info.value)
    data.update(pid=4242, pid_start="123")
    assert load_submission(_submission(tmp_path / "w", json.dumps(data))) is not None


def test_printable_shows_bidirectional_and_zero_width_characters_escaped() -> None:
    shown = printable("tests/test_a.py::test_\u202egnp.exe\u2066\u200b\ufeff")
    assert shown == "tests/test_a.py::test_\\u202egnp.exe\\u2066\\u200b\\ufeff"
    assert printable("é ü 中文\tok") == "é ü 中文\tok"  # text is text


def test_an_error_line_escapes_what_printable_escapes() -> None:
    err = BuildError("work_dir", "/w/\u202eexe.sh\x1b[2J holds a job", "fix \u2066it")
    assert err.line() == "error: work_dir: /w/\\u202eexe.sh\\x1b[2J holds a job; fix \\u2066it"


def test_a_job_spec_value_over_the_argument_limit_is_refused(
    compile_spec: Path, tmp_path: Path
) -> None:
    from trtllm_script_builder.process.spec_file import read_job_spec

    new = _edited(compile_spec, tmp_path, lambda s: s.update(container_name="c" * 140_000))
    with pytest.raises(BuildError) as info:
        read_job_spec(new)
    assert "container_name" in str(info.value) and len(str(info.value)) < 1200
