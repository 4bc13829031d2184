"""The repo's ``jenkins/scripts/perf/local/submit.py``: its arguments, running it, and moving the
paths it embeds to the remote cluster."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path

from trtllm_script_builder.errors import BuildError, ToolFailed
from trtllm_script_builder.model.values import printable
from trtllm_script_builder.process.proc import run
from trtllm_script_builder.resolve.perf.plan import segment_note

SUBMIT_PY = Path("jenkins") / "scripts" / "perf" / "local" / "submit.py"
DEFAULT_TIMEOUT_SECONDS = 300.0
_TAIL_LINES = 6


def submit_py_path(repo_root: Path) -> Path:
    return repo_root / SUBMIT_PY


def require_submit_py(repo_root: Path) -> Path:
    """The checkout's submit.py, refused on `repo_root` when it has none (a dry run too)."""
    script = submit_py_path(repo_root)
    if not script.is_file():
        raise BuildError(
            "repo_root",
            f"{script} does not exist, so perf-sanity cannot be built from {repo_root}",
            "point repo_root at a TensorRT-LLM checkout that has "
            "jenkins/scripts/perf/local/submit.py",
        )
    return script


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:])


def run_submit_py(
    repo_root: Path,
    args: list[str],
    *,
    python: str = sys.executable,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> list[str]:
    """Run `<repo_root>/jenkins/scripts/perf/local/submit.py args...` in `cwd`; gives what it
    said about the choices it made (`UCX env: ...`, its warnings), escaped, one a line.

    `env` None inherits this process's environment (submit.py reads AGG_CONFIG_FOLDER,
    DISAGG_CONFIG_FOLDER, POST_INSTALL_HOOK, EXTRA_CONTAINER_EXPORTS from it). A missing
    script is a BuildError on `repo_root`; a non-zero exit, a timeout or a failure to start is
    ToolFailed carrying the last lines submit.py printed.
    """
    script = require_submit_py(repo_root)
    # its own group: a child it leaves is stopped with it (decision submit-py-children)
    done = run([python, str(script), *args], cwd=cwd, env=env, timeout=timeout, own_group=True)
    if done.timed_out:
        # the runner's own note is the last line; what submit.py printed before it says why
        said = _tail("\n".join(done.err.splitlines()[:-1]) or done.out)
        raise ToolFailed(
            "submit.py",
            f"did not finish within {timeout:g} s" + (f": {said}" if said else ""),
            "check that the cluster's sinfo/scontrol answer, then build again",
        )
    if not done.found:
        raise ToolFailed(
            "submit.py",
            f"could not be started with {python} ({done.err.partition(': ')[2] or done.err})",
            "run the builder with a working Python interpreter",
        )
    if done.rc != 0:
        # submit.py refuses by raising: of a traceback, its last line says why
        lines = 1 if "Traceback (most recent call last)" in done.err else _TAIL_LINES
        said = _tail(done.err, lines) or _tail(done.out) or "(no output)"
        raise ToolFailed(
            "submit.py",
            f"exited with status {done.rc}: {said}",
            "fix the request or the repo's submit.py (build again with --dry-run for the "
            "command, and run it by hand to see everything it printed)",
        )
    return [
        f"submit.py: {printable(line.strip())}"
        for line in done.out.splitlines()
        if line.strip().startswith(_SAID)
    ][:_TAIL_LINES]


# submit.py's lines that tell which settings it chose (the network pins of a disaggregated
# job) or what it could not do; "Launch script generated at" names the private folder.
_SAID = ("UCX env:", "[WARNING]")
_SEGMENT = re.compile(r"#SBATCH\s+--segment(?:=|\s).*")
# submit.py names the container after the second it ran: the same request would give other
# bytes each time, so the job id (one per job, known when the script runs) takes its place
_CONTAINER = re.compile(r'"--container-name=(aggr|disagg)_test-\d{8}_\d{6}"')


def fit_launch(text: str, slurm_version: str | None) -> tuple[str, list[str]]:
    """The launch script as the target Slurm reads it, and the same bytes for the same
    request: `--segment` left out where the cluster's Slurm predates it, the time-stamped
    container name replaced by one per job."""
    notes: list[str] = []
    text = _CONTAINER.sub(lambda m: f'"--container-name={m.group(1)}_test-${{SLURM_JOB_ID}}"', text)
    note = segment_note(slurm_version)
    if note:
        lines = text.split("\n")
        kept = [ln for ln in lines if not _SEGMENT.fullmatch(ln.strip())]
        if len(kept) != len(lines):
            text = "\n".join(kept)
            notes.append(note)
    return text, notes


_GRES_LINE = re.compile(r"#SBATCH\s+--gres[= ](\S+)")


def script_gres(text: str) -> str | None:
    """The GRES the launch script asks for, as job_spec records it."""
    found = _GRES_LINE.search(text)
    return found.group(1) if found else None


# Characters that continue a path name: a prefix only matches where none of these is next to it.
_NAME_CHAR = r"[A-Za-z0-9_.\-~+@%]"


def _normalise(prefix: str) -> str:
    return prefix if prefix == "/" else prefix.rstrip("/")


def rewrite_remote_paths(
    launch_text: str,
    *,
    repo_root: str,
    remote_repo_path: str,
    work_dir: str,
    remote_work_dir: str,
) -> str:
    """Replace the local `repo_root` and `work_dir` prefixes by their remote counterparts.

    A prefix is replaced only at path boundaries: not preceded by a name character or `/`,
    and followed by `/`, the end, or a character that cannot continue a name (so `/repo`
    leaves `/repo2` and `/data/repo` alone). One pass, longest prefix first, so `work_dir`
    under `repo_root` maps to `remote_work_dir` and replaced text is never replaced again.
    """
    pairs: dict[str, str] = {}
    for local, remote in ((work_dir, remote_work_dir), (repo_root, remote_repo_path)):
        if not local or not remote:
            continue
        local, remote = _normalise(local), _normalise(remote)
        if local == "/":
            raise ValueError("refusing to rewrite the root directory '/'")
        pairs.setdefault(local, remote)  # work_dir wins a tie with repo_root
    pairs = {k: v for k, v in pairs.items() if k != v}
    if not pairs:
        return launch_text
    ordered = sorted(pairs, key=len, reverse=True)
    pattern = re.compile(
        r"(?<![A-Za-z0-9_.\-~+@%/])(?:"
        + "|".join(re.escape(p) for p in ordered)
        + r")(?!"
        + _NAME_CHAR
        + r")"
    )
    return pattern.sub(lambda m: pairs[m.group(0)], launch_text)


_GPU_LINE = re.compile(r"#SBATCH\s+--(?:gpus-per-node|gres)(?:=|\s).*")


def retarget_gpu_lines(launch_text: str, lines: tuple[str, ...]) -> str:
    """The launch script's GPU request as the target partition wants it: submit.py wrote what
    the cluster it ran on has (sinfo), which for a remote job is the wrong cluster."""
    out: list[str] = []
    placed = False
    for line in launch_text.split("\n"):
        if _GPU_LINE.fullmatch(line.strip()):
            if not placed:
                out += [f"#SBATCH {g}" for g in lines]
                placed = True
            continue
        out.append(line)
        if not placed and line.startswith("#SBATCH --ntasks-per-node"):
            out += [f"#SBATCH {g}" for g in lines]
            placed = True
    return "\n".join(out)
