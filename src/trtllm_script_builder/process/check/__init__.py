"""Check a built job (WORK_DIR/job_spec.json) against where it will run.

`check_job()` picks the check of the job's backend: `slurm` runs `sbatch --test-only` on the
scripts and checks partition, account, GRES, node count, time limit and MPI plugin against
what the cluster reports, on the host its tools run on (here or over ssh); `docker` checks
this machine. The click command is in cli/check.py.
"""

from __future__ import annotations

from trtllm_script_builder.process.check.core import (
    EXIT_OK,
    EXIT_PROBLEMS,
    EXIT_UNREACHABLE,
    Checked,
    check,
    check_job,
)

__all__ = ["EXIT_OK", "EXIT_PROBLEMS", "EXIT_UNREACHABLE", "Checked", "check", "check_job"]
