"""Run a built job to a verdict: `submit`, `watch`, `run` and `release` (persistent mode).

`verdict` holds the pure decision (`decide_verdict`), `proc` the one process runner, `host`
this machine or a login node over ssh, `slurm` the Slurm queries, `handles` the jobs the run
loop (`follow`) follows, `docker_backend` and `slurm_backend` (with `slurm_submit`, its one
submit path, and `persistent`, its held allocations) the two backends `submit` and `watch`
ask. This package is the only place that starts processes.
"""

from __future__ import annotations

from trtllm_script_builder.process.verdict import (
    VERDICT_EXIT,
    Decision,
    LogLine,
    Verdict,
    decide_verdict,
)

__all__ = ["VERDICT_EXIT", "Decision", "LogLine", "Verdict", "decide_verdict"]
