# gpu_check.sh: the GPU checks, in one run on a GPU machine (docs/gpu.md).
#
#   bash benchmarks/gpu_check.sh          (from the repository root; $OUT: where results go)
#   bash benchmarks/gpu_check.sh --dry    (anywhere: the script's own flow, the build and the
#                                          tests, each benchmark stage only parsed and imported)
#
# Installs the wheels in .whl/ if there are any (cffi, pycparser: for a
# machine without network access), builds tapead in place from source, then runs the
# stages, the most important first, each on its own (one failing stage
# stops nothing else): the European Greeks against JAX with the per-call
# breakdown (kernel alone, host before the launch, the rest, JAX), the GPU
# tests, the 52.6k-node workload against the CPU cores, first results, the
# example, math-function differences, NVRTC compile times.  Everything is
# printed as it goes and kept in $OUT/log.txt from the first line on;
# figures go to $OUT/results.json as each stage ends.  The whole run stays
# within LIMIT seconds (270: each stage's limit shrinks to what is left, a
# stage with under 10 s left is skipped); about 3-4 minutes on an H100.
# Ends with "GPU CHECK: PASSED" and status 0, or "GPU CHECK: FAILED" with
# the failed stages and status 1.
DRY=""
[ "${1:-}" = "--dry" ] && DRY=1
LIMIT="${GPU_CHECK_LIMIT:-270}"
OUT="${OUT:-/tmp/gpu_check_out}"
mkdir -p "$OUT" || { echo "GPU CHECK: FAILED: cannot make $OUT"; exit 1; }
exec > >(tee -a "$OUT/log.txt") 2>&1
RES="$OUT/results.json"
T0=$(date +%s)
FAILS=""
echo "=== gpu_check.sh ${DRY:+(dry) }at $(date -u '+%F %T') UTC, in $PWD, results in $OUT"
set -x

# wheels for a machine without network access (cffi, pycparser), if any are in .whl/
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || FAILS="$FAILS wheels"
elif [ -z "$DRY" ]; then
  echo "no .whl/*.whl: going on with what is installed"
fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{ set +x; } 2> /dev/null
elapsed() { echo $(( $(date +%s) - T0 )); }
stage() { echo; echo "=== stage $1 at +$(elapsed) s"; }
# a stage's time limit: its own cap, or what is left of LIMIT, the smaller
cap() { local left=$(( LIMIT - $(elapsed) )); [ "$left" -lt "$1" ] && echo "$left" || echo "$1"; }
# run NAME CAP COMMAND...: the command under its limit; a failure (or a
# timeout, status 124) is noted and printed loudly, never stops the script
run() {
  local name=$1 limit
  limit=$(cap "$2"); shift 2
  if [ "$limit" -lt 10 ]; then
    echo "SKIPPED $name: $limit s left of $LIMIT"; FAILS="$FAILS $name(skipped)"; return
  fi
  echo "+ (limit ${limit} s) $*"
  timeout "$limit" "$@"
  local rc=$?
  if [ $rc -ne 0 ]; then
    [ $rc -eq 124 ] && echo "FAILED $name: timed out after $limit s" || echo "FAILED $name: status $rc"
    FAILS="$FAILS $name"
  fi
}
# a benchmark stage (a dry run parses and imports only)
bench() { local name=$1 limit=$2; shift 2
  run "$name" "$limit" python3 benchmarks/bench_gpu.py "$name" --out "$RES" ${DRY:+--dry} "$@"; }

stage machine
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv \
  || { [ -n "$DRY" ] || FAILS="$FAILS nvidia-smi"; }
nproc; python3 --version; command -v nvcc && nvcc --version | tail -2
python3 -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__); print(cupy.cuda.runtime.getDeviceCount(), 'GPU(s)')" \
  || { [ -n "$DRY" ] || FAILS="$FAILS cupy"; }
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" || FAILS="$FAILS jax"

stage build
# in place (any setuptools), else an editable install (setuptools >= 77); its output in $OUT/build.txt
timeout "$(cap 120)" python3 build_ext.py > "$OUT/build.txt" 2>&1 \
  || { echo "FAILED build: build_ext.py status $? (124: timed out)"; FAILS="$FAILS build"; }
tail -3 "$OUT/build.txt"
IMPORT="import tapead, tapead.cuda as c; print('tapead from', tapead.__file__, 'kernel cache', c.cache_dir())"
if ! python3 -c "$IMPORT"; then
  tail -30 "$OUT/build.txt"
  run build 90 python3 -m pip install -q --no-build-isolation --no-deps -e .
  python3 -c "$IMPORT" || FAILS="$FAILS import"
fi

stage european
bench european 60

stage tests
# (--noconftest: tests/conftest.py needs micrograd, which a GPU machine may lack; test_gpu.py needs none of it)
run tests 90 bash -c 'python3 -m pytest -q --noconftest -p no:cacheprovider -rs tests/test_gpu.py 2>&1 | tee "$0"; exit "${PIPESTATUS[0]}"' "$OUT/tests.txt"
# on the GPU machine the GPU tests must run, not skip
if [ -z "$DRY" ] && grep -q "no CUDA GPU" "$OUT/tests.txt"; then
  echo "FAILED tests: the GPU tests skipped (no CUDA GPU found by CuPy)"; FAILS="$FAILS tests-skipped"
fi

stage big
bench big 60

stage first
bench first 40

stage example
if [ -n "$DRY" ]; then
  run example 30 python3 examples/monte_carlo_greeks.py --help
else
  run example 30 python3 examples/monte_carlo_greeks.py --device cuda --paths 4000000
fi

stage mathdiff
bench mathdiff 40

stage compile
# only with time to spare: what is left, at most 60 s
LEFT=$(cap 60)
if [ "$LEFT" -gt 30 ]; then
  bench compile "$LEFT" --budget $(( LEFT - 10 ))
else
  echo "SKIPPED compile: $LEFT s left (optional)"
fi

stage done
[ -n "$DRY" ] || cat "$RES" || FAILS="$FAILS results"
echo "total $(elapsed) s"
if [ -n "$FAILS" ]; then
  echo "GPU CHECK: FAILED:$FAILS (log: $OUT/log.txt)"
  exit 1
fi
echo "GPU CHECK: PASSED${DRY:+ (dry run: no GPU work was done)} (log: $OUT/log.txt)"
