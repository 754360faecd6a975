python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
# gpu_check.sh: the GPU checks of issue 27, in one run on a GPU machine (docs/gpu.md).
#
#   bash benchmarks/gpu_check.sh          (from the repository root; $OUT: where results go)
#
# The first line installs the wheels carried in .whl/ (cffi, pycparser: the
# GPU machines have no network).  Then: build tapead in place from source,
# the GPU tests (tests/test_gpu.py), and the benchmark stages of
# benchmarks/bench_gpu.py, each on its own, so that one failing stage stops
# nothing else.  Everything is printed as it goes and kept in $OUT/log.txt;
# figures go to $OUT/results.json as each stage ends.  About 3-5 minutes;
# never more than 7 (each stage's limit shrinks to what is left).
set -x
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/gpu_check_out}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
RES="$OUT/results.json"
T0=$(date +%s)
stage() { echo "=== stage $1 at +$(( $(date +%s) - T0 )) s"; }
# each stage's time limit: its own cap, or what is left of 7 minutes, the smaller
cap() { local left=$(( 420 - ($(date +%s) - T0) )); [ "$left" -lt "$1" ] && echo $(( left > 5 ? left : 5 )) || echo "$1"; }

stage machine
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv || echo FAILED nvidia-smi
nproc; python3 --version; which nvcc && nvcc --version | tail -2
python3 -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__); print(cupy.cuda.runtime.getDeviceCount(), 'GPU(s)')" || echo FAILED cupy
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" || echo FAILED jax

stage build
# in place (any setuptools), else an editable install (setuptools >= 77)
( timeout 150 python3 build_ext.py > "$OUT/build.txt" 2>&1 && python3 -c "import tapead; print('tapead from', tapead.__file__)" ) \
  || ( tail -30 "$OUT/build.txt"; python3 -m pip install -q --no-build-isolation --no-deps -e . ) \
  || echo FAILED build
tail -3 "$OUT/build.txt"
python3 -c "import tapead, tapead.cuda as c; print(tapead.__file__, c.cache_dir())" || echo FAILED import

stage tests
# (--noconftest: tests/conftest.py needs micrograd, which the GPU machines lack; test_gpu.py needs none of it)
timeout $(cap 120) python3 -m pytest -q --noconftest -p no:cacheprovider -rs tests/test_gpu.py || echo FAILED tests

stage example
timeout $(cap 45) python3 examples/monte_carlo_greeks.py --device cuda --paths 4000000 || echo FAILED example

stage european
timeout $(cap 75) python3 benchmarks/bench_gpu.py european --out "$RES" || echo FAILED european

stage big
timeout $(cap 75) python3 benchmarks/bench_gpu.py big --out "$RES" || echo FAILED big

stage mathdiff
timeout $(cap 50) python3 benchmarks/bench_gpu.py mathdiff --out "$RES" || echo FAILED mathdiff

stage first
timeout $(cap 60) python3 benchmarks/bench_gpu.py first --out "$RES" || echo FAILED first

stage compile
# what is left of 7 minutes, at most 150 s
LEFT=$(cap 150)
if [ "$LEFT" -gt 30 ]; then
  timeout "$LEFT" python3 benchmarks/bench_gpu.py compile --budget $(( LEFT - 15 )) --out "$RES" \
    || echo FAILED compile
else
  echo "SKIPPED compile: $LEFT s left"
fi

stage done
cat "$RES" || echo FAILED no results
echo "total $(( $(date +%s) - T0 )) s"
