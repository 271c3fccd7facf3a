#!/usr/bin/env bash
# in_copy.sh PATCH COMMAND...: runs COMMAND in a copy of the tree (under /tmp) with PATCH applied,
# so that a device run can time a patched kernel while its carried tree stays as it came.
# Run from the repository root; PYTHONPATH gets /tmp/site (gpu_env.sh's packages) and the copy.
set -uo pipefail
root=$PWD
patch=$1; shift
copy=$(mktemp -d /tmp/ato-copy-XXXX)
cp -r "$root"/ato_core "$root"/ato_torch "$root"/ato_jax "$root"/ato_cli "$root"/benchmarks "$root"/tests "$copy"/
[ -d "$root/.whl" ] && ln -s "$root/.whl" "$copy/.whl"  # gpu_env.sh, sourced by the tools, installs from it
cd "$copy" && git apply "$root/$patch" && PYTHONPATH=/tmp/site:$copy "$@"
