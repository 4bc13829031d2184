"""The test cluster's two GPU nodes run one MPI world under `srun --mpi=pmix` (cluster.sh up).

Both slurmds run on this one machine; without a pmix client folder and a /dev/shm of their own
the ranks of the second node never start, or crash in OpenMPI's shared memory transport.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the fixture's type; conftest is not imported at run time
    from conftest import SlurmCluster

pytestmark = pytest.mark.slurm

# Every rank learns every rank's node through the world communicator: only a world that spans
# both nodes and talks across them prints both names on every rank.
WORLD = """\
import os
from mpi4py import MPI
world = MPI.COMM_WORLD
nodes = world.allgather(os.environ["SLURMD_NODENAME"])
print(f"rank={world.Get_rank()} size={world.Get_size()} "
      f"node={os.environ['SLURMD_NODENAME']} gpus={os.environ.get('CUDA_VISIBLE_DEVICES')} "
      f"world={','.join(sorted(set(nodes)))}", flush=True)
"""

# One rank of the second node dies after the world formed (no MPI_Finalize, which would wait
# for the others); the others wait for it for ever.
ONE_FAILS = """\
import os, time
from mpi4py import MPI
world = MPI.COMM_WORLD
assert world.allreduce(1) == world.Get_size()
print(f"rank={world.Get_rank()} joined", flush=True)
if world.Get_rank() == world.Get_size() - 1:
    os._exit(3)
world.Barrier()
time.sleep(600)
"""


def two_node_job(tmp_path: Path, program: str, srun_options: str = "") -> Path:
    (tmp_path / "prog.py").write_text(program)
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\n#SBATCH --gres=gpu:8\n"
        "#SBATCH --time=00:05:00\n"
        f"srun --mpi=pmix {srun_options}-N2 -n4 /usr/bin/python3 {tmp_path / 'prog.py'}\n"
    )
    return script


def test_one_mpi_world_spans_both_gpu_nodes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = slurm_cluster.run_job(two_node_job(tmp_path, WORLD), timeout=60)
    assert (job.state, job.exit_code) == ("COMPLETED", "0:0"), job.output
    both = ",".join(slurm_cluster.gpu_nodes)
    ranks = sorted(line for line in job.output.splitlines() if line.startswith("rank="))
    # block distribution: ranks 0-1 on the first node, 2-3 on the second; each node has its
    # own eight GPUs, all of them granted
    assert ranks == [
        f"rank={r} size=4 node={slurm_cluster.gpu_nodes[r // 2]} gpus=0,1,2,3,4,5,6,7 world={both}"
        for r in range(4)
    ], job.output


def test_a_failing_rank_ends_the_two_node_job_soon(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    start = time.monotonic()
    job = slurm_cluster.run_job(
        two_node_job(tmp_path, ONE_FAILS, "--kill-on-bad-exit=1 "), timeout=60
    )
    assert time.monotonic() - start < 60
    # srun ends with the worst status of its tasks: the others were ended by SIGTERM
    assert (job.state, job.exit_code) == ("FAILED", "143:0"), job.output
    assert sorted(ln for ln in job.output.splitlines() if ln.endswith(" joined")) == [
        f"rank={r} joined" for r in range(4)
    ], job.output
    assert "task 3: Exited with exit code 3" in job.output, job.output
