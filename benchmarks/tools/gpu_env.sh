# Sourced by the GPU-machine scripts (gpu_run.sh, gpu_tier_sharded.sh) and by the commands of a device run, from the repository root
# with .whl carried (../shared/gpu/prepare.sh array-api-compat==1.16.0 fills it): installs the
# wheels, sets the environment, creates $OUT and records the GPU in $OUT/gpu.txt.
# The device's git history is the checkout's base, not this session's commits (its work tree is
# this machine's): record the commit a run measured here, not with git on the device.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt"
