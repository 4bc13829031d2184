"""Shared by the stand-in mgmn_leader_node and mgmn_worker_node (see their docstrings), and by
the trtllm-eval/trtllm-bench stand-ins that reach the leader as the real LLM's proxy does.

The real leader serves TensorRT-LLM's RemoteMpiCommSessionServer at
TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR (tcp://127.0.0.1:<port>, exported by trtllm-llmapi-launch);
here the same address takes one request line: `world` (answered with the ranks the MPI world
has: host, node, local rank, visible GPUs) or `stop` (the leader ends and releases its workers).
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import sys
import time
from typing import Any


def address() -> tuple[str, int]:
    addr = os.environ.get("TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR", "")
    host, _, port = addr.removeprefix("tcp://").rpartition(":")
    if not host or not port.isdigit():
        print(
            f"RuntimeError: TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR {addr!r} is not tcp://HOST:PORT",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(1)
    return host, int(port)


def me() -> dict[str, Any]:
    env = os.environ
    return {
        "host": env.get("SLURMD_NODENAME") or socket.gethostname(),
        "local_rank": int(env.get("SLURM_LOCALID") or env.get("OMPI_COMM_WORLD_LOCAL_RANK") or 0),
        "gpus": [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()],
    }


def ask(request: str, timeout: float = 30) -> str:
    """One request to the leader; its one-line answer ("" when no leader answers in time).
    Connecting is retried until then, as the real client's ZeroMQ socket waits for a server
    that has not bound its address yet (the leader may still be starting MPI)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(address(), timeout=timeout) as s:
                s.sendall(request.encode() + b"\n")
                return s.makefile().readline().strip()
        except OSError:
            if time.monotonic() >= deadline:
                return ""
            time.sleep(0.2)


def serve(world: list[dict[str, Any]]) -> None:
    """Answer requests until one says stop."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            line = self.rfile.readline().decode().strip()
            if line == "world":
                self.wfile.write(json.dumps(world).encode() + b"\n")
            elif line == "stop":
                self.wfile.write(b"stopping\n")
                self.server.stopped = True  # type: ignore[attr-defined]
            else:
                self.wfile.write(b"unknown request\n")

    socketserver.TCPServer.allow_reuse_address = True
    with socketserver.TCPServer(address(), Handler) as server:
        server.stopped = False  # type: ignore[attr-defined]
        while not server.stopped:  # type: ignore[attr-defined]
            server.handle_request()
