"""STAND-IN for tensorrt_llm/llmapi/mgmn_leader_node.py (NVIDIA/TensorRT-LLM, read at 1033ea1;
the `--action stop` call is the one jenkins/scripts/trtllm-llmapi-launch makes at 06706a2 and
tensorrt_llm/llmapi/trtllm-llmapi-launch at 020c89e). Run by the trtllm-llmapi-launch
stand-ins on rank 0 with PYTHONPATH naming tests/slurm/standins/py.

Behaviour copied: rank 0 of a real MPI world (OpenMPI + mpi4py, started by `srun --mpi=pmix`)
serves the world to the command at TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR and holds every worker
rank (mgmn_worker_node, in mpi4py's MPICommExecutor on COMM_WORLD) until it is told to stop;
it never stops by itself, so a command that ends without sending the stop leaves the job
running to its time limit. `--action stop` sends that stop; with no leader left (stopped
already) there is nothing to stop and it exits 0 too.
What it serves is not TensorRT-LLM's RPC: one line, `world` or `stop` (see _mgmn.py).
"""

from __future__ import annotations

import sys

from tensorrt_llm.llmapi._mgmn import ask, me, serve

if sys.argv[1:] == ["--action", "stop"]:
    answer = ask("stop", timeout=5)
    print(f"mgmn_leader_node (stand-in): stop -> {answer or 'no leader answered'}", flush=True)
    sys.exit(0)

from mpi4py.futures import MPICommExecutor  # noqa: E402
from mpi4py.MPI import COMM_WORLD  # noqa: E402

world = COMM_WORLD.allgather({"rank": COMM_WORLD.rank, **me()})
print(f"mgmn_leader_node (stand-in): MPI Comm Server with {len(world)} ranks", flush=True)
with MPICommExecutor(COMM_WORLD) as executor:
    serve(world)
print("mgmn_leader_node (stand-in): MPI Comm Server stopped", flush=True)
