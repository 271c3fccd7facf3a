# One diagnostic visit to the GPU machine (see benchmarks/diagnose.py); logs under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
D=benchmarks/diagnose.py
JAX_TRITON_DUMP_DIR=/tmp/jtdump timeout 120 python3 $D ptx $OUT > $OUT/ptx-log.txt 2>&1
ls $OUT; diff $OUT/torch.ttgir $OUT/jax.ttgir | head -60; diff $OUT/torch.ptx $OUT/jax.ptx | head -80
