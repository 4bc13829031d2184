"""The benchmark runs end to end (tiny sizes; its figures are not judged here, only that it works)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_runs_and_reports_every_measure() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--runs", "1", "--jobs", "20", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.splitlines()[-1])
    for name in (
        "build: wall ms",
        "build: peak MiB",
        "floor: interpreter alone: wall ms",
        "floor: interpreter + libraries: wall ms",
        "floor: interpreter + PyYAML + stdlib: wall ms",
        "build-many: jobs/s (20 ids)",
        "build-many: peak MiB (20 ids)",
    ):
        assert figures[name] > 0, name
    assert figures["group: 2N / N time ratio"] > 0
    # A 10,000-line test file that 1,000 ids point at is parsed once.
    assert figures["inspect: parses of that file"] == 1
    # The run loop asks Slurm a fixed number of times per poll, whatever the batch's size.
    for n in (1000, 10000):
        assert figures[f"run loop: sacct calls per poll, most ({n} jobs)"] == 1
        assert figures[f"run loop: squeue + scontrol per poll, most ({n} jobs)"] == 1
