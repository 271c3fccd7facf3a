#!/usr/bin/env bash
# Installs ato with both frameworks on a CPU-only machine. torch comes first, pinned to
# its CPU build, so that nothing later pulls the multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q "torch==2.13.0"
python3 -m pip install -q -e ".[torch,jax,test]"
