"""STAND-IN for tensorrt_llm/llmapi/mgmn_worker_node.py (NVIDIA/TensorRT-LLM, read at 8f91cff):
a rank other than 0 joins the MPI world, tells the leader where it runs (host, local rank,
visible GPUs; see mgmn_leader_node) and then waits in mpi4py's MPICommExecutor on COMM_WORLD,
as the real module does, until the leader stops; then it exits 0."""

from __future__ import annotations

from mpi4py.futures import MPICommExecutor
from mpi4py.MPI import COMM_WORLD

from tensorrt_llm.llmapi._mgmn import me

COMM_WORLD.allgather({"rank": COMM_WORLD.rank, **me()})
with MPICommExecutor(COMM_WORLD) as executor:
    if executor is not None:
        raise RuntimeError(f"rank{COMM_WORLD.rank} should not have an executor")
print(f"mgmn_worker_node (stand-in): rank {COMM_WORLD.rank} quit", flush=True)
