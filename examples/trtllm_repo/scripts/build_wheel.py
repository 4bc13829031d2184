#!/usr/bin/env python3
"""Placeholder for TensorRT-LLM's scripts/build_wheel.py in this example tree.

A build with `compile` reads the checkout's build_wheel.py only to see which options it
defines, so this file names the ones the builder may pass. It builds nothing: the compile job
runs the real script of a real checkout.
"""

import sys
from argparse import ArgumentParser

OPTIONS = (
    "--cuda_architectures",
    "--dist_dir",
    "--use_ccache",
    "--benchmarks",
    "--nvtx",
    "--configure_cmake",
    "--job_count",
)

if __name__ == "__main__":
    parser = ArgumentParser()
    for name in OPTIONS:
        parser.add_argument(name)
    parser.parse_args()
    sys.exit("this example tree has no sources to build; use a TensorRT-LLM checkout")
