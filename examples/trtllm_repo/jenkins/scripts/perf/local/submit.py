#!/usr/bin/env python3
"""EXAMPLE STAND-IN for TensorRT-LLM's jenkins/scripts/perf/local/submit.py.

Written for trtllm-script-builder's example checkout, so that the perf-sanity example request
builds from a clone; it shares no code with TensorRT-LLM's script and runs no benchmark. It
takes the options the builder passes, reads the aggregated config the test id or
--config-file names, and writes a launch script whose #SBATCH lines ask for the config's
nodes; the script's body only says that it is an example and fails. A real checkout's
submit.py writes the servers, clients and install steps instead.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import yaml


def fail(message: str) -> None:
    sys.exit(f"Error: {message}")


def main() -> None:
    p = argparse.ArgumentParser(description="example stand-in for submit.py")
    for name in ("test-list", "config-file", "test-name", "mounts", "work-dir", "llm-src"):
        p.add_argument(f"--{name}", default="")
    for name in ("partition", "account", "job-name", "image", "llm-models-root", "launch-sh"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--time", default="02:00:00")
    # Options of newer submit.py versions the builder may pass; this example has no use for them.
    args, _ = p.parse_known_args()
    config, server = args.config_file, args.test_name
    if args.test_list:
        label = re.search(r"test_e2e\[(aggr[^-]*)-([^-\]]+)-?([^\]]*)\]", args.test_list)
        if label is None:
            fail(f"the example stand-in runs aggregated ids only, not {args.test_list}")
        repo = Path(args.llm_src or Path(__file__).resolve().parents[4])
        config = str(repo / "tests/scripts/perf-sanity/aggregated" / f"{label.group(2)}.yaml")
        server = label.group(3)
    if not config or not Path(config).is_file():
        fail(f"no perf config found ({config or 'neither --test-list nor --config-file'})")
    data = yaml.safe_load(Path(config).read_text())
    per_node = int(data["hardware"]["gpus_per_node"])
    chosen = [s for s in data.get("server_configs", []) if not server or s["name"] == server]
    if not chosen:
        fail(f"{config} has no server config named {server}")
    s = chosen[0]
    gpus = s.get("tensor_parallel_size", 1) * s.get("pipeline_parallel_size", 1)
    nodes = math.ceil(gpus / per_node)
    Path(args.launch_sh).write_text(
        "#!/bin/bash\n"
        f"#SBATCH --partition={args.partition}\n#SBATCH --account={args.account}\n"
        f"#SBATCH --job-name={args.job_name}\n#SBATCH --time={args.time}\n"
        f"#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node={per_node}\n"
        "#SBATCH --output=slurm-%j.out\n\n"
        "# Written by the example checkout's submit.py stand-in: no benchmark runs here.\n"
        f"echo 'Error: example stand-in launch script for {s['name']} ({gpus} GPUs); "
        "build from a TensorRT-LLM checkout to run the benchmark'\n"
        "exit 1\n"
    )
    Path(args.launch_sh).chmod(0o755)
    # as the real one: the id it runs, without `_upload`, beside the launch script
    work = Path(args.work_dir) if args.work_dir else Path(args.launch_sh).parent
    case = f"aggr-{Path(config).stem}-{s['name']}"
    (work / "test_list.txt").write_text(f"perf/test_perf_sanity.py::test_e2e[{case}]\n")
    print(f"example launch script written to {args.launch_sh}")


if __name__ == "__main__":
    main()
