"""Run a built job to a verdict: `submit`, `watch`, `run` and `release` (persistent mode).

`verdict` holds the pure decision (`decide_verdict`), `proc` the one process runner, `slurm`
the Slurm queries, `ssh` the OpenSSH runner, `handles` the jobs `watch` follows,
`submit`/`watch`/`persistent` the procedures. This package is the only place that starts
processes.
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
