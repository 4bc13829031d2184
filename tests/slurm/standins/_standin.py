"""Shared by the Python stand-ins in this folder (tests/slurm/test_e2e_build.py puts the folder
first on PATH of the sbatch submission). They run under the system /usr/bin/python3, which has
mpi4py and OpenMPI 4.1 (tests/slurm/cluster.sh installs them), on the host: pyxis is faked.

- dump_env: when STANDIN_ENV_DUMP_DIR is set (the e2e test sets it to the job's work_dir),
  every call writes <dir>/<tool>.rank<SLURM_PROCID>.<pid>.json with the tool name, argv, cwd
  and the whole environment of the process, exactly as the real tool would have received them.
- check_model: the model must be a local folder. Compute nodes have no network, so the
  stand-ins run as with HF_HUB_OFFLINE=1 (set here unless the job set it): a Hugging Face id
  fails with huggingface_hub's offline error, as TensorRT-LLM's model download
  (tensorrt_llm/llmapi/utils.py download_hf_model -> snapshot_download) does on such a node.
- check_gpus: the GPUs Slurm exposed (CUDA_VISIBLE_DEVICES, from the job's --gres=gpu:N) must
  cover the world size: fewer fails as CUDA does for a missing device ordinal; more prints a
  warning line (WASTED_GPUS) that the tests assert absent.
- start_mpi: the MPI start-up TensorRT-LLM does, with real mpi4py (see its docstring).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading


def rank() -> int:
    """The rank as trtllm-llmapi-launch computes it (SLURM_PROCID first)."""
    for name in ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMI_ID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def dump_env(tool: str) -> None:
    folder = os.environ.get("STANDIN_ENV_DUMP_DIR")
    if not folder:
        return
    path = os.path.join(folder, f"{tool}.rank{rank()}.{os.getpid()}.json")
    record = {"tool": tool, "argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}
    with open(path, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)


def option(args: list[str], *names: str, default: str | None = None) -> str | None:
    """The last value of `--name V` or `--name=V`."""
    value = default
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                value = args[i + 1]
            elif a.startswith(n + "="):
                value = a[len(n) + 1 :]
    return value


def subcommands(args: list[str], flags: set[str]) -> list[str]:
    """The bare words of a click command line (options with a value skip that value)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            i += 1 if ("=" in a or a in flags) else 2
            continue
        out.append(a)
        i += 1
    return out


def world_size() -> int:
    """tllm_mpi_size (set by trtllm-llmapi-launch) as TensorRT-LLM reads it, else 1."""
    value = os.environ.get("tllm_mpi_size", "1")  # noqa: SIM112 (the real, lower-case name)
    return int(value) if value.isdigit() else 1


WASTED_GPUS = "GPUs that it does not use"  # the warning's words, asserted absent by the tests
MPI_TIMEOUT = float(os.environ.get("STANDIN_MPI_TIMEOUT", "30"))  # a hang becomes a failure
LOG = "[TRT-LLM]"


def fail(message: str, code: int = 1) -> None:
    print(message, file=sys.stderr, flush=True)
    sys.exit(code)


def host_path(path: str) -> str:
    """A path inside the (fake) container as a host path: pyxis runs no container here, so a
    --container-mounts SRC:DST (FAKE_PYXIS_MOUNTS, set by the fake pyxis plugin) is mapped
    back from DST to SRC."""
    for mount in os.environ.get("FAKE_PYXIS_MOUNTS", "").split(","):
        src, _, rest = mount.partition(":")
        dst = rest.split(":")[0] or src
        if src and (path == dst or path.startswith(dst.rstrip("/") + "/")):
            return os.path.join(src, os.path.relpath(path, dst))
    return path


def check_model(model: str) -> None:
    """Refuse to download: a model that is not a local folder fails like huggingface_hub's
    snapshot_download with HF_HUB_OFFLINE=1 (huggingface_hub/_snapshot_download.py raises
    LocalEntryNotFoundError; documented under HF_HUB_OFFLINE in huggingface_hub's environment
    variables guide). Without HF_HUB_OFFLINE it would try the network, which a compute node lacks.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if os.path.isdir(host_path(model)):
        return
    if os.environ["HF_HUB_OFFLINE"] not in ("0", "false", "False"):
        fail(
            "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached "
            "snapshot folder for the specified revision on the local disk and outgoing traffic "
            f"has been disabled. To enable repo look-ups and downloads online, pass "
            f"'local_files_only=False' as input. (model {model!r} is not a local path; "
            "HF_HUB_OFFLINE=1 on this node)"
        )
    fail(
        'requests.exceptions.ConnectionError: (MaxRetryError("HTTPSConnectionPool(host='
        f"'huggingface.co', port=443): Max retries exceeded with url: /api/models/{model}\"))"
    )


def visible_gpus() -> list[str]:
    return [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]


def check_gpus(tool: str, need: int) -> None:
    """A world of `need` ranks on one node uses GPUs 0..need-1 of what Slurm exposed (each rank
    sets its device from its local rank, tensorrt_llm/_utils.py local_mpi_rank). Too few: CUDA's
    invalid device ordinal (every rank sees the job's GPUs). Too many: a warning line."""
    gpus = visible_gpus()
    if len(gpus) < need:
        fail(
            f"RuntimeError: CUDA error: invalid device ordinal ({tool} needs {need} GPU(s) for "
            f"tp x pp = {need}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r} "
            f"shows {len(gpus)})"
        )
    if len(gpus) > need:
        print(
            f"{LOG} [W] {tool} (stand-in): {len(gpus)} GPUs visible "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}) but tp x pp = "
            f"{need}: the job holds {len(gpus) - need} {WASTED_GPUS}",
            flush=True,
        )


def _spawn_workers(n: int) -> None:
    """Child process: MPI_Init, then n workers through mpi4py's MPIPoolExecutor (which calls
    MPI_Comm_spawn). A failed spawn kills mpi4py's manager thread and leaves the future pending
    for ever (the hang seen on real clusters): the thread's exception ends this process."""

    def died(args: threading.ExceptHookArgs) -> None:
        print(f"{args.exc_type.__name__}: {args.exc_value}", file=sys.stderr, flush=True)
        os._exit(3)

    threading.excepthook = died
    from mpi4py import MPI
    from mpi4py.futures import MPIPoolExecutor

    print(f"MPI_COMM_WORLD size {MPI.COMM_WORLD.Get_size()}", flush=True)
    with MPIPoolExecutor(max_workers=n) as pool:
        pids = {
            f.result(timeout=MPI_TIMEOUT) for f in [pool.submit(os.getpid) for _ in range(4 * n)]
        }
    print(f"spawned {n} worker(s), pids {sorted(pids)}", flush=True)


def launched() -> bool:
    """Under trtllm-llmapi-launch, which exports tllm_mpi_size (the real name, lower case)."""
    return "tllm_mpi_size" in os.environ


def _through_leader(tool: str, need: int) -> None:
    """Under the launcher the command is rank 0's, its MPI environment removed, and reaches
    the MPI world through the leader at TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR (the real LLM's
    proxy: tensorrt_llm/executor/executor.py with TLLM_SPAWN_PROXY_PROCESS=1). That world must
    have tp x pp ranks (tensorrt_llm/_utils.py mpi_world_size), and each rank needs the GPU of
    its local rank among those Slurm gave its node, else CUDA's invalid device ordinal."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
    from tensorrt_llm.llmapi._mgmn import ask

    left = sorted(v for v in os.environ if v.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_")))
    if left:
        fail(f"RuntimeError: {tool} (stand-in): MPI environment left for the proxy process: {left}")
    if world_size() != need:
        fail(
            f"RuntimeError: tp x pp = {need} needs an MPI world of {need} ranks, but "
            f"trtllm-llmapi-launch set up {world_size()}"
        )
    answer = ask("world", timeout=MPI_TIMEOUT)
    if not answer:
        fail(
            f"RuntimeError: {tool} (stand-in): no MPI leader answers at "
            f"{os.environ.get('TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR')}"
        )
    world = json.loads(answer)
    if len(world) != need:
        fail(f"RuntimeError: the MPI leader has {len(world)} ranks, tp x pp = {need}")
    for r in world:
        if r["local_rank"] >= len(r["gpus"]):
            fail(
                f"RuntimeError: CUDA error: invalid device ordinal (rank {r['rank']} on "
                f"{r['host']} is local rank {r['local_rank']}, its node shows GPUs {r['gpus']})"
            )
    hosts = sorted({r["host"] for r in world})
    for r in world:
        print(
            f"{LOG} [I] {tool} (stand-in): rank {r['rank']} of a real MPI world of {need} "
            f"on {r['host']} (GPU {r['gpus'][r['local_rank']]})",
            flush=True,
        )
    print(f"{LOG} [I] {tool} (stand-in): MPI world of {need} ranks on {len(hosts)} node(s)")


def shutdown() -> None:
    """The LLM's shutdown, which under the launcher leaves the MPI leader running:
    RemoteMpiCommSessionClient.shutdown does nothing (tensorrt_llm/llmapi/mpi_session.py at
    cc4777e94ddab84b0e2676f1dbcc91b86060329f; its one client serves every LLM of the process).
    The installed launcher (cbe4c0a) sends no stop either: only what runs it can (CI's copy of
    the launcher, or the script's wrapper, decision launcher-stop)."""
    return None


def start_mpi(tool: str, need: int) -> int:
    """The MPI start-up of the LLM API (tensorrt_llm/executor/executor.py
    GenerationExecutor.create, tensorrt_llm/llmapi/mpi_session.py), with real OpenMPI + mpi4py;
    returns 0 (the command runs on one process, whatever the world).

    Under trtllm-llmapi-launch: through its leader (_through_leader). Otherwise an MPI world of
    1 (tensorrt_llm/_utils.py mpi_world_size): the program spawns its tp x pp executor workers
    with MPIPoolExecutor (MpiPoolSession), i.e. MPI_Comm_spawn, and needs that many GPUs in
    CUDA_VISIBLE_DEVICES (check_gpus). Done here in a child process with a deadline, so what
    OpenMPI 4.1 does on this cluster becomes a bounded failure with a clear line instead of a
    hang or a bare abort:
      * srun --mpi=pmix: MPI_Init works, MPI_Comm_spawn fails with MPI_ERR_SPAWN (Slurm's PMIx
        server does not implement spawn; OpenMPI 4.1 FAQ "Running MPI jobs with Slurm": direct
        launch supports no dynamic processes) and mpi4py's pool hangs;
      * srun without --mpi, the step's PMI/SLURM environment left: MPI_Init aborts ("The
        application appears to have been direct launched using "srun", but OMPI was not
        built with SLURM's PMI support"; OpenMPI's ess/schizo slurm sees SLURM_STEP_ID);
      * the job's SLURM environment left without the step's: the singleton's daemon start goes
        through Slurm and the spawn hangs;
      * the MPI/PMI/SLURM environment cleared (SLURM_PROCID/LOCALID may stay): singleton
        MPI_Init, the spawn works.
    This machine has two cores where a GPU node has dozens: the spawned workers may
    oversubscribe them (OMPI_MCA_rmaps_base_oversubscribe in the child only).
    """
    if launched():
        _through_leader(tool, need)
        return 0
    check_gpus(tool, need)
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--spawn-workers", str(need)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a hang is killed whole
        env={**os.environ, "OMPI_MCA_rmaps_base_oversubscribe": "1"},
    )
    try:
        out, _ = child.communicate(timeout=MPI_TIMEOUT + 5)
        code = child.returncode
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, _ = child.communicate()
        out += f"\nno answer within {MPI_TIMEOUT + 5:.0f}s"
        code = -1
    if code != 0 or "spawned" not in out:
        sys.stderr.write(out)
        why = "MPI_ERR_SPAWN" if "MPI_ERR_SPAWN" in out else "MPI start-up failed"
        fail(
            f"RuntimeError: {tool} (stand-in) could not start its executor workers with "
            f"MPI_Comm_spawn ({why}; the real tool aborts or hangs here). A run on one node "
            "needs no --mpi and an environment without PMI*/PMIX*/OMPI*/MPI*/SLURM* variables."
        )
    print(f"{LOG} [I] {tool} (stand-in): MPI world 1, {out.strip().splitlines()[-1]}")
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--spawn-workers"]:
    _spawn_workers(int(sys.argv[2]))
