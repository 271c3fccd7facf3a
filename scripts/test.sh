#!/usr/bin/env bash
# The test command: install, then the CPU tier (GPU tests are collected and skipped
# without CUDA; on a GPU machine they run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-cpu.sh
python3 -m pytest -q -rs -n auto tests
