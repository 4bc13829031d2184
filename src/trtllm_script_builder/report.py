"""The Step 6 report: what was built, for people."""

from __future__ import annotations

from pathlib import Path

from .jobspec import JobSpec

CATEGORY_TITLES = {
    1: "local Docker command",
    2: "pytest Slurm script",
    3: "custom command Slurm script",
    4: "perf-sanity launch script (the repo's submit.py)",
    5: "trtllm-eval Slurm script",
    6: "trtllm-bench Slurm script",
}


def report_rows(spec: JobSpec, files: list[str], work_dir: Path) -> list[tuple[str, str]]:
    s = spec
    plural = lambda n, word: f"{n} {word}{'s' if n != 1 else ''}"  # noqa: E731
    rows = [
        ("Generated", f"{', '.join(files)} in {work_dir}"),
        ("Script", s.script_path),
        ("Workflow", f"{s.workflow_type} (category {s.category}: {CATEGORY_TITLES[s.category]})"),
        ("Model", s.model_name),
        ("Docker image", s.container_image),
        ("Devices", f"{plural(s.required_devices, 'GPU')} across {plural(s.node_count, 'node')}"),
    ]
    if s.slurm_params:
        p = s.slurm_params
        rows.append(
            (
                "Slurm",
                f"partition {p.partition}, account {p.account}, time {p.time_limit}, gres {p.gres or 'none'}, mpi {p.mpi_plugin}",
            )
        )
    run = (
        f"bash {s.script_path}"
        if s.category == 1
        else f"sbatch {s.remote_script_path or s.script_path}"
    )
    rows.append(("Run", run))
    rows += [("Warning", w) for w in s.warnings]
    return rows


def render_report(spec: JobSpec, files: list[str], work_dir: Path) -> str:
    return "".join(
        f"{label + ':':<14}{value}\n" for label, value in report_rows(spec, files, work_dir)
    )
