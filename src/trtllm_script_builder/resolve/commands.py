"""Reading sizes and names out of trtllm-eval, trtllm-bench and custom commands."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from trtllm_script_builder.errors import BuildError
from trtllm_script_builder.model.values import whole_number

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def normalise_name(text: str) -> str:
    """Decision model-name-rules: lower case, every run of other characters to `_`, trimmed."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def words(cmd: str, field: str) -> list[str]:
    try:
        return shlex.split(cmd)
    except ValueError as exc:
        raise BuildError(
            field, f"cannot be split into shell words ({exc})", "balance its quotes"
        ) from None


def option(ws: list[str], names: tuple[str, ...]) -> str | None:
    """The last value of `--name V` or `--name=V` among the words."""
    value = None
    for i, w in enumerate(ws):
        for n in names:
            if w == n and i + 1 < len(ws):
                value = ws[i + 1]
            elif w.startswith(n + "="):
                value = w[len(n) + 1 :]
    return value


def int_option(ws: list[str], names: tuple[str, ...], default: int, field: str) -> int:
    v = option(ws, names)
    if v is None:
        return default
    n = whole_number(v)
    if n is None or n < 1:
        raise BuildError(
            field, f"{names[0]} {v!r} is not a positive whole number", f"fix {names[0]} in {field}"
        )
    return n


def split_and(cmd: str) -> list[str]:
    """Split a command at top-level `&&`, leaving quoted text whole."""
    parts: list[str] = []
    buf: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(cmd):
        c = cmd[i]
        if quote:
            if c == "\\" and quote == '"' and i + 1 < len(cmd):
                buf.append(cmd[i : i + 2])
                i += 2
                continue
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "\\" and i + 1 < len(cmd):
            buf.append(cmd[i : i + 2])
            i += 2
            continue
        elif cmd.startswith("&&", i):
            parts.append("".join(buf).strip())
            buf = []
            i += 2
            continue
        buf.append(c)
        i += 1
    parts.append("".join(buf).strip())
    return parts


# ---------------------------------------------------------------- eval


@dataclass(frozen=True)
class EvalCmd:
    tp: int
    pp: int
    gpus_per_node: int | None
    model: str | None
    task: str | None
    models: tuple[str, ...] = ()  # every --model of every trtllm-eval call

    @property
    def world_size(self) -> int:
        return self.tp * self.pp


def parse_eval(eval_cmd: str) -> EvalCmd:
    """Tasks chained with `&&` each run their own trtllm-eval: the widest one sizes the job."""
    calls = [_parse_eval_call(part) for part in split_and(eval_cmd) if part] or [
        _parse_eval_call(eval_cmd)
    ]
    widest = max(calls, key=lambda c: c.world_size)
    models = tuple(dict.fromkeys(c.model for c in calls if c.model))
    return EvalCmd(widest.tp, widest.pp, widest.gpus_per_node, widest.model, widest.task, models)


def _parse_eval_call(text: str) -> EvalCmd:
    ws = words(text, "eval_cmd")
    tp = int_option(ws, ("--tp_size", "--tp-size"), 1, "eval_cmd")
    pp = int_option(ws, ("--pp_size", "--pp-size"), 1, "eval_cmd")
    gpn_text = option(ws, ("--gpus_per_node", "--gpus-per-node"))
    gpn = (
        int_option(ws, ("--gpus_per_node", "--gpus-per-node"), 1, "eval_cmd") if gpn_text else None
    )
    return EvalCmd(tp, pp, gpn, option(ws, ("--model",)), _eval_task(ws))


def _eval_task(ws: list[str]) -> str | None:
    """The first bare word after the trtllm-eval options is the task subcommand."""
    try:
        start = next(i for i, w in enumerate(ws) if w.endswith("trtllm-eval")) + 1
    except StopIteration:
        return None
    flags_without_value = {
        "--trust_remote_code",
        "--disable_kv_cache_reuse",
        "--telemetry",
        "--no-telemetry",
    }
    i = start
    while i < len(ws):
        w = ws[i]
        if w.startswith("-"):
            i += 1 if ("=" in w or w in flags_without_value) else 2
            continue
        return w
    return None


def find_model_dir(models_host: Path, hf_id: str, max_depth: int = 3) -> Path | None:
    """A directory named like the id's last component (case-insensitive), at most 3 levels down."""
    want = hf_id.rstrip("/").split("/")[-1].lower()
    if not models_host.is_dir():
        return None
    frontier = [models_host]
    for _ in range(max_depth):
        nxt: list[Path] = []
        for d in frontier:
            try:
                entries = sorted(os.scandir(d), key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                if e.is_dir():
                    if e.name.lower() == want:
                        return Path(e.path)
                    nxt.append(Path(e.path))
        frontier = nxt
    return None


def replace_option(cmd: str, name: str, old: str, new: str) -> str:
    """Rewrite the value of option `name` where it is `old`, as shell words: `name old` and
    `name=old` are matched whole (a longer value, or the text inside a quoted word, is left
    alone), and the new value is shell-quoted; the rest of the text is kept as written."""
    words = word_spans(cmd)
    edits: list[tuple[int, int, str]] = []
    for k, (start, end, value) in enumerate(words):
        raw = cmd[start:end]  # the option's name itself is written unquoted, as options are
        if raw == name and k + 1 < len(words) and words[k + 1][2] == old:
            edits.append((words[k + 1][0], words[k + 1][1], shlex.quote(new)))
        elif raw.startswith(f"{name}=") and value == f"{name}={old}":
            edits.append((start, end, f"{name}={shlex.quote(new)}"))
    for start, end, text in reversed(edits):
        cmd = cmd[:start] + text + cmd[end:]
    return cmd


# ---------------------------------------------------------------- bench


@dataclass(frozen=True)
class BenchCmd:
    prep: str | None
    run: str
    tp: int
    pp: int
    ep: int
    model: str | None
    files: list[tuple[str, str]]  # (option, absolute path) of the files the calls read or write

    @property
    def world_size(self) -> int:
        return self.tp * self.pp


# trtllm-bench options that name a file or folder (prepare-dataset, throughput, latency).
BENCH_FILE_OPTIONS = (
    "--output",
    "--dataset",
    "--model_path",
    "--extra_llm_api_options",
    "--report_json",
    "--iteration_log",
    "--output_json",
    "--request_json",
)


def parse_bench(bench_cmd: str) -> BenchCmd:
    steps = [s for s in split_and(bench_cmd) if s]
    if not steps:
        raise BuildError("bench_cmd", "is empty", "give the trtllm-bench command")
    run = steps[-1]
    prep = " && ".join(steps[:-1]) or None
    ws = words(bench_cmd, "bench_cmd")
    calls = [i for i, w in enumerate(ws) if w.endswith("trtllm-bench")]
    last = ws[calls[-1] :] if calls else ws
    last = last[: last.index("&&")] if "&&" in last else last
    tp = int_option(last, ("--tp",), 1, "bench_cmd")
    pp = int_option(last, ("--pp",), 1, "bench_cmd")
    ep_text = option(last, ("--ep",))
    ep = whole_number(ep_text) or 0
    model = option(last, ("--model", "-m")) or option(last, ("--model_path",))
    files = [(n, v) for n in BENCH_FILE_OPTIONS if (v := option(ws, (n,))) and v.startswith("/")]
    return BenchCmd(prep, run, tp, pp, ep, model, files)


# An `org/name` Hugging Face id; a path has a leading `/`, `.` or `~`, or more components.
_HF_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
CALL_ENDS = {";", "|", "||", "&&", "&"}


def is_hf_id(value: str) -> bool:
    return bool(_HF_ID.fullmatch(value))


def word_spans(text: str) -> list[tuple[int, int, str]]:
    """Each shell word of the text: where it starts and ends in the text, and its value."""
    spans: list[tuple[int, int, str]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\n":
            i += 1
        if i >= n:
            break
        start = i
        value: list[str] = []
        quote: str | None = None
        while i < n and (quote or text[i] not in " \t\n"):
            c = text[i]
            if quote == "'":
                if c == "'":
                    quote = None
                else:
                    value.append(c)
            elif quote == '"':
                if c == '"':
                    quote = None
                elif c == "\\" and i + 1 < n and text[i + 1] in '"\\$`':
                    i += 1
                    value.append(text[i])
                else:
                    value.append(c)
            elif c in "'\"":
                quote = c
            elif c == "\\" and i + 1 < n:
                i += 1
                value.append(text[i])
            else:
                value.append(c)
            i += 1
        spans.append((start, i, "".join(value)))
    return spans


def bench_models_without_path(step: str) -> list[tuple[int, str]]:
    """Each trtllm-bench call in the step that names a --model/-m but no --model_path: the
    end of its model word in the text, and the model."""
    out: list[tuple[int, str]] = []
    spans = word_spans(step)
    starts = [i for i, (_, _, w) in enumerate(spans) if w.endswith("trtllm-bench")]
    for k, first in enumerate(starts):
        stop = starts[k + 1] if k + 1 < len(starts) else len(spans)
        call = spans[first + 1 : stop]
        end = next((j for j, (_, _, w) in enumerate(call) if w in CALL_ENDS), len(call))
        call = call[:end]
        ws = [w for _, _, w in call]
        if any(w == "--model_path" or w.startswith("--model_path=") for w in ws):
            continue
        for j, w in enumerate(ws):
            if w in ("--model", "-m") and j + 1 < len(ws):
                out.append((call[j + 1][1], ws[j + 1]))
                break
            if w.startswith("--model="):
                out.append((call[j][1], w[len("--model=") :]))
                break
    return out


def add_bench_model_path(step: str, paths: dict[str, str]) -> str:
    """The step with `--model_path <path>` after each call's model that `paths` maps; the
    rest of the text is kept byte for byte and the path is one quoted word."""
    for end, model in reversed(bench_models_without_path(step)):
        if model in paths:
            step = f"{step[:end]} --model_path {shlex.quote(paths[model])}{step[end:]}"
    return step


# ---------------------------------------------------------------- custom


def parse_custom_env(custom_env: str | None) -> list[tuple[str, str]]:
    """Decision custom-env-literal: shell words, each KEY=VALUE with a valid name, values
    literal."""
    if not custom_env:
        return []
    pairs = []
    for w in words(custom_env, "custom_env"):
        key, eq, value = w.partition("=")
        if not eq or not _ENV_NAME.fullmatch(key):
            raise BuildError(
                "custom_env",
                f"{w!r} is not KEY=VALUE with a valid variable name",
                "write KEY=VALUE pairs separated by spaces, quoting values with spaces",
            )
        pairs.append((key, value))
    return pairs


def model_from_path(path: str | None) -> str | None:
    if not path:
        return None
    name = normalise_name(Path(path.rstrip("/")).name)
    return name or None


_LAUNCHER = "trtllm-llmapi-launch"
# What the shell would read as more than one plain command (decision launcher-words).
_OPERATOR_CHARS = frozenset("();<>|&")


def without_launcher(cmd: str) -> str:
    """The command without a leading trtllm-llmapi-launch: on one node the program spawns its
    own workers, and across nodes the script calls its launcher (decision launcher-words)."""
    head, _, rest = cmd.strip().partition(" ")
    return rest.strip() if head == _LAUNCHER and rest.strip() else cmd


def launch_words(cmd: str, field: str, warnings: list[str], ids: bool = False) -> str:
    """The command as the plain words a launcher is called with (decision launcher-words):
    one program and its arguments, no shell syntax; a launcher the user wrote is dropped, as
    the script calls its own. With `ids`, a pytest test id's `[...]` is no warning: the
    re-split leaves a pattern that matches no file as it is (decision multi-node-pytest)."""
    lex = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = ""  # a `#` is a character of a word, as in shlex.split, never a comment
    try:
        ws = list(lex)
    except ValueError as exc:
        raise BuildError(
            field, f"cannot be split into shell words ({exc})", "balance its quotes"
        ) from None
    # punctuation_chars splits operators out of words; any run of them (`;;`, `>|`, `|&`) is one
    bad = [w for w in ws if w and set(w) <= _OPERATOR_CHARS or "$" in w or "`" in w]
    if not ws or bad or _ENV_NAME.fullmatch(ws[0].partition("=")[0]) and "=" in ws[0]:
        raise BuildError(
            field,
            f"across nodes runs under trtllm-llmapi-launch as one program with its arguments, "
            f"and {cmd!r} is not one plain command{f' ({bad[0]!r})' if bad else ''}",
            "give one call of the program, without &&, pipes, redirections, variables or "
            "VAR=value prefixes",
        )
    split = [
        w
        for w in ws
        if any(c.isspace() for c in w) or any(c in w for c in "*?[") and not (ids and "::" in w)
    ]
    if split:
        warnings.append(
            f"{field}: {split[0]!r} does not survive the installed trtllm-llmapi-launch, which "
            "joins its arguments and splits them again; it reaches the program whole only when "
            "the checkout has jenkins/scripts/trtllm-llmapi-launch"
        )
    return shlex.join(ws)
