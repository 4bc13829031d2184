"""STAND-IN for tensorrt_llm/llmapi/mgmn_worker_node.py (NVIDIA/TensorRT-LLM, read at 8f91cff):
a rank other than 0 joins the MPI world, tells the leader where it runs (host, local rank,
visible GPUs; see mgmn_leader_node) and then waits in mpi4py's MPICommExecutor on COMM_WORLD,
as the real module does, until the leader stops; then it exits 0.
STANDIN_WORKER_EXIT_DELAY=<seconds>: after MPI_Finalize (which the leader's own finalize waits
for) it takes that long to end, as a real worker's interpreter does while it unloads torch and
CUDA: a rank 0 that exits non-zero first has srun --kill-on-bad-exit end such a worker by a
signal, whose status is then the step's."""

from __future__ import annotations

import os
import time

from mpi4py import MPI
from mpi4py.futures import MPICommExecutor
from mpi4py.MPI import COMM_WORLD

from tensorrt_llm.llmapi._mgmn import me

COMM_WORLD.allgather({"rank": COMM_WORLD.rank, **me()})
with MPICommExecutor(COMM_WORLD) as executor:
    if executor is not None:
        raise RuntimeError(f"rank{COMM_WORLD.rank} should not have an executor")
print(f"mgmn_worker_node (stand-in): rank {COMM_WORLD.rank} quit", flush=True)
delay = float(os.environ.get("STANDIN_WORKER_EXIT_DELAY", "0"))
if delay:
    MPI.Finalize()
    time.sleep(delay)
