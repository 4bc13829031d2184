"""bench: trtllm-bench's dataset step and run (Category 6), the run on one node or across nodes
(decision launcher-words)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from trtllm_script_builder.model.request import Request
from trtllm_script_builder.resolve import mounts as mnt
from trtllm_script_builder.resolve.backend import queued
from trtllm_script_builder.resolve.commands import (
    add_bench_model_path,
    bench_models_without_path,
    is_hf_id,
    launch_words,
    model_from_path,
    normalise_name,
    parse_bench,
    split_and,
    without_launcher,
    word_spans,
)
from trtllm_script_builder.resolve.job import local_copy
from trtllm_script_builder.resolve.workflow import (
    NUM,
    Draft,
    Sizing,
    Workflow,
    by_world_size,
    devices_note,
)

NAME = "bench"
TOOL = "trtllm-bench"
# enroot mounts a fresh tmpfs on these at every container start, so every srun sees them empty.
_CONTAINER_TMPFS = ("/tmp", "/var/run", "/var/lock")
# trtllm-bench's report lines: `Total Output Throughput (tokens/sec):   1600.0000`
_FIGURE = re.compile(rf"^((?:[\w-]+ )*[\w-]*(?:Throughput|[Ll]atency)) \(([^)]+)\):\s+{NUM}\s*$")
# trtllm-bench options that name a file the call writes.
_BENCH_WRITES = ("--output", "--report_json", "--iteration_log", "--output_json", "--request_json")


def size(req: Request, gpn: int, gpn_source: str) -> Sizing:
    assert req.bench_cmd is not None
    b = parse_bench(req.bench_cmd)
    model = req.model_name or model_from_path(b.model) or NAME
    what = f"tp {b.tp} x pp {b.pp} of the last trtllm-bench call"
    sz = by_world_size(req, b.world_size, gpn, what, model)
    sz.warnings += devices_note(req, b.world_size, what)
    return sz


def _command(d: Draft, mounts: list[mnt.Mount]) -> None:
    b = parse_bench(d.req.bench_cmd or "")
    d.prep_cmd, d.run_cmd = _with_local_model(b.prep, b.run, d, mounts)
    d.run_cmd = without_launcher(d.run_cmd)
    if d.sizing.launcher:
        d.run_cmd = launch_words(d.run_cmd, "bench_cmd", d.warnings)
    d.warnings += _file_warnings(b.files, mounts, queued(d.req))
    if d.prep_cmd:
        d.exports.append(("PREP_CMD", d.prep_cmd))
    d.exports.append(("BENCH_CMD", d.run_cmd))


def _file_warnings(files: list[tuple[str, str]], mounts: list[mnt.Mount], slurm: bool) -> list[str]:
    out = []
    read_only = [m for m in mounts if m.container.endswith(":ro")]
    for opt, path in files:
        # The command runs in the container: its paths are the container's.
        if opt in _BENCH_WRITES and any(mnt.covers(m.target, path) for m in read_only):
            out.append(
                f"{opt} {path} is on a read-only mount (decision read-only-models-mount); write it elsewhere"
            )
            continue
        if mnt.in_a_mount(mounts, path):
            continue
        if not any(mnt.covers(t, path) for t in _CONTAINER_TMPFS):
            out.append(f"{opt} {path} is under no mount, so the container may not see or keep it")
        elif slurm:  # one `docker run` runs both steps: its /tmp lasts
            out.append(
                f"{opt} {path} is on the container's tmpfs, which every srun starts empty, so "
                "a file there does not outlive its step; use a mounted folder"
            )
    return out


def _with_local_model(
    prep: str | None, run: str, d: Draft, mounts: list[mnt.Mount]
) -> tuple[str | None, str]:
    """Decision bench-sizing: every trtllm-bench call naming a Hugging Face id and no --model_path
    gets the local copy's container path, so neither the dataset step nor the run downloads."""
    steps = [s for s in split_and(prep or "") if s] + [run]
    ids = [m for step in steps for _, m in bench_models_without_path(step) if is_hf_id(m)]
    found: dict[str, str] = {}
    for hf_id in dict.fromkeys(ids):
        local = local_copy(hf_id, d.paths, mounts, d.models_root, TOOL, d.warnings)
        if local is not None:
            found[hf_id] = local
    prep_steps = [_local_tokenizer(step, found) for step in steps[:-1]]
    return " && ".join(prep_steps) or None, add_bench_model_path(steps[-1], found)


def _local_tokenizer(step: str, found: dict[str, str]) -> str:
    """The dataset step (`prepare-dataset`, or `dataset` in other versions: the user's word is
    kept) loads its tokenizer from --model before --model_path, so a hub id there downloads
    whatever --model_path says: the local copy (or the step's own --model_path) takes --model's
    place (decision bench-dataset-local-model)."""
    spans = word_spans(step)
    ws = [w for _, _, w in spans]
    own = next((ws[i + 1] for i, w in enumerate(ws[:-1]) if w == "--model_path"), None)
    for i in reversed(range(len(spans))):
        start, end, w = spans[i]
        if w in ("--model", "-m") and i + 1 < len(spans):
            start, end, model = spans[i + 1]
            prefix = ""
        elif w.startswith("--model="):
            model, prefix = w[len("--model=") :], "--model="
        else:
            continue
        local = found.get(model) or (own if is_hf_id(model) else None)
        if local is not None:
            step = f"{step[:start]}{prefix}{shlex.quote(local)}{step[end:]}"
    return step


def figure(line: str) -> tuple[str, float] | None:
    """`<figure>_<unit>` and its value from one of trtllm-bench's report lines."""
    m = _FIGURE.match(line.strip())
    if m is None:
        return None
    return (
        f"{normalise_name(m.group(1))}_{normalise_name(m.group(2).replace('/', ' per '))}",
        float(m.group(3)),
    )


def _job_name(item: dict[str, Any]) -> str | None:
    if not isinstance(item.get("bench_cmd"), str):
        return None
    model = model_from_path(parse_bench(item["bench_cmd"]).model)
    return f"{model}_{NAME}" if model else NAME


BENCH = Workflow(
    name=NAME,
    commands=("bench_cmd",),
    infer_rank=2,
    infers=lambda req: bool(req.bench_cmd),
    suffix=NAME,
    category=6,
    patterns=(("token/s", "throughput", "tokens/sec", "Throughput"), ("Error", "Traceback")),
    size=size,
    aliases=(TOOL, "6"),
    tool=TOOL,
    model_options=("--model", "-m"),
    command=_command,
    results=NAME,  # the verdict's results group of its figures
    figure=figure,
    job_name=_job_name,
)
