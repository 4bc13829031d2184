"""Run a built job to a verdict: `submit`, `watch`, `run` and `release` (persistent mode).

`verdict` holds the pure decision (`decide_verdict`), `proc` the one process runner, `host`
this machine or a login node over ssh, `slurm` the Slurm queries, `handles` the jobs the run
loop (`follow`) follows, `slurm_submit` (the Slurm backend's one submit path) and `persistent`
(its held allocations); a job's backend is the one the registry that `backends/` fills holds
for its scenario. This package is the only place that starts processes.
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
