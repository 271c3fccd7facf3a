# One diagnostic visit to the GPU machine (see benchmarks/diagnose.py); logs under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD TRITON_CACHE_DIR=/tmp/triton-cache PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
D=benchmarks/diagnose.py
timeout 200 python3 $D profile $OUT 2>&1 | grep -v Warn > $OUT/profile.txt
cat $OUT/profile.txt
