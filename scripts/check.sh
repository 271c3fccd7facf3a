#!/usr/bin/env bash
# The main job: install, then `ato check` (every op, both frameworks, against the
# reference and each other).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-cpu.sh
ato check
