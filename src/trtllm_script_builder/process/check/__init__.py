"""Check a built job (WORK_DIR/job_spec.json) against the live Slurm cluster.

`check()` runs `sbatch --test-only` on the script and checks partition, account, GRES, node
count, time limit and MPI plugin against what the cluster reports; a remote_slurm job is
checked on its cluster through ssh (`check_job`). The click command is in cli/check.py.
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
