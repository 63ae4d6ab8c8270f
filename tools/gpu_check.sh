#!/usr/bin/env bash
# The GPU check: one script for a GPU machine without network (run tools/gpu_prepare.sh on a
# networked machine first and carry .gpu-deps/ along). Builds against the torch that `python3`
# imports, runs the gpu-labelled tests and the CPU C++ tests, the CUDA demo, and the GPU
# benchmarks, then prints one short table. Exit 0 only when everything passed. Whole run under
# AMPSCOPE_GPU_CHECK_LIMIT seconds (default 470: under 8 minutes).
#
#   AMPSCOPE_GPU_BUILD   build folder (default build-gpu)
#   AMPSCOPE_DEPS_DIR    header copies / GoogleTest sources (default .gpu-deps)
#   AMPSCOPE_GPU_DRY_RUN=1  take nlohmann/GoogleTest only from AMPSCOPE_DEPS_DIR (as if the
#                        system had none) and run what needs no GPU: proves the build path here
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIMIT=${AMPSCOPE_GPU_CHECK_LIMIT:-470}
if [ -z "${AMPSCOPE_GPU_CHECK_INNER:-}" ]; then  # the hard limit, on the whole script
  AMPSCOPE_GPU_CHECK_INNER=$(($(date +%s) + LIMIT)) exec timeout --kill-after=10 "$LIMIT" "$0" "$@"
fi
DEADLINE=$AMPSCOPE_GPU_CHECK_INNER
START=$(date +%s)
cd "$ROOT" || exit 2
BUILD=${AMPSCOPE_GPU_BUILD:-$ROOT/build-gpu}
DEPS=${AMPSCOPE_DEPS_DIR:-$ROOT/.gpu-deps}
DRY=${AMPSCOPE_GPU_DRY_RUN:-0}
LOG=$BUILD/gpu-check-logs
JOBS=$(nproc 2>/dev/null || echo 4)
[ "$DRY" = 1 ] && JOBS=2  # a shared CPU machine
FAILED=0
declare -a ROWS=()

left() { local s=$((DEADLINE - $(date +%s) - 5)); echo $((s > 1 ? s : 1)); }
row() { ROWS+=("$(printf '%-22s %s' "$1" "$2")"); }
fail() { FAILED=1; row "$1" "FAIL: $2"; }

# --- environment
export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc >/dev/null && export CUDACXX=${CUDACXX:-$(command -v nvcc)}
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') || {
  echo "gpu_check: error: python3 cannot import torch" >&2; exit 2; }
TORCH_INFO=$(python3 -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no-cuda")')
GPU=$(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null | head -1)
ARCH=$(echo "$GPU" | sed -n 's/.*, *\([0-9]*\)\.\([0-9]*\)$/\1\2/p')
mkdir -p "$LOG"
echo "gpu_check: torch $TORCH_INFO; GPU: ${GPU:-none}; build $BUILD; limit ${LIMIT}s"

# --- configure + build
CMAKE_ARGS=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DPython3_EXECUTABLE="$(command -v python3)"
  -DAMPSCOPE_DEPS_DIR="$DEPS" -DAMPSCOPE_FMT_HEADER_ONLY=ON)
[ -n "$ARCH" ] && CMAKE_ARGS+=(-DAMPSCOPE_CUDA_ARCHITECTURES="$ARCH")
[ "$DRY" = 1 ] && CMAKE_ARGS+=(-DAMPSCOPE_DEPS_ONLY=ON)
t0=$(date +%s)
if ! timeout "$(left)" cmake "${CMAKE_ARGS[@]}" >"$LOG/configure.log" 2>&1; then
  tail -20 "$LOG/configure.log"; echo "gpu_check: configure failed" >&2; exit 1
fi
if ! timeout "$(left)" cmake --build "$BUILD" -j "$JOBS" >"$LOG/build.log" 2>&1; then
  grep -E "error|FAILED" "$LOG/build.log" | head -20; echo "gpu_check: build failed" >&2; exit 1
fi
FROM=$(sed -n 's/^-- ampscope: \(.*\) from \(.*\)$/\1 (\2)/p' "$LOG/configure.log" | sed 's/ built//' |
  paste -sd ';' -)
row "build" "ok, $(($(date +%s) - t0)) s${FROM:+; $FROM}"

# --- tests: "P passed, F failed, S skipped" from ctest's output
ctest_counts() {
  local out=$1
  local passed skipped total
  passed=$(grep -c ' Passed ' "$out")
  skipped=$(grep -c 'Skipped ' "$out")
  total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$out" | tail -1)
  echo "$passed passed, $((${total:-0} - passed - skipped)) failed, $skipped skipped"
}
run_ctest() {  # NAME LOGFILE ctest-args...
  local name=$1 out=$LOG/$2; shift 2
  timeout "$(left)" ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure --timeout 180 "$@" \
    >"$out" 2>&1
  local rc=$? counts
  counts=$(ctest_counts "$out")
  if [ $rc -ne 0 ]; then fail "$name" "$counts (see $out)"; else row "$name" "$counts"; fi
}
run_ctest "ctest -L gpu" ctest-gpu.log -L gpu
run_ctest "ctest C++ cpu" ctest-cpu.log -L cpu -LE python
if python3 -c 'import pytest' 2>/dev/null; then  # gpu-marked Python tests (torch's GradScaler on CUDA)
  out=$LOG/pytest-gpu.log
  if timeout "$(left)" env AMPSCOPE_BUILD_DIR="$BUILD" python3 -m pytest -q -rs -m gpu -p no:cacheprovider \
       "$ROOT/tests/python/test_grad_scaler.py" >"$out" 2>&1; then
    row "pytest -m gpu" "$(tail -1 "$out")"
  else
    fail "pytest -m gpu" "$(tail -1 "$out") (see $out)"
  fi
else
  row "pytest -m gpu" "skipped (no pytest)"
fi

# --- the CUDA demo: loss-scale history and the planted overflow of blocks.1.ffn.wo
if [ "$DRY" = 1 ] || ! python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
  row "cuda demo" "skipped (no CUDA device)"
else
  # Under a shim that counts the CUDA calls that block the host (tools/bench/sync_count.c).
  rm -rf "$BUILD/gpu-demo" "$LOG/syncs.json"
  SHIM=$BUILD/libsync_count.so
  cc -shared -fPIC -O2 "$ROOT/tools/bench/sync_count.c" -o "$SHIM" -ldl 2>"$LOG/shim.log" || SHIM=
  demo() { timeout "$(left)" env ${SHIM:+LD_PRELOAD=$SHIM AMPSCOPE_SYNC_COUNT_OUT=$LOG/syncs.json} \
    "$BUILD/bin/ampscope" demo --device cuda --dtype float16 --steps 24 --quiet \
    --out "$BUILD/gpu-demo" >"$LOG/demo.log" 2>&1; }
  demo || { SHIM=; demo; }  # a shim that fails is not the demo's failure
  rc=$?
  SYNC_ARGS=()
  [ -s "$LOG/syncs.json" ] && SYNC_ARGS=(--syncs "$LOG/syncs.json" 24)
  if [ $rc -eq 0 ]; then
    if verdict=$(python3 "$ROOT/tools/gpu_check_report.py" "$BUILD/gpu-demo/report.json" "${SYNC_ARGS[@]}"); then
      row "cuda demo" "$verdict"
    else
      fail "cuda demo" "$verdict"
    fi
  else
    fail "cuda demo" "exit $rc (see $LOG/demo.log)"
  fi
fi

# --- benchmarks (ratios; bars from SPEC)
bench() {  # NAME BINARY ARGS...
  local name=$1 exe=$BUILD/bin/$2; shift 2
  if [ ! -x "$exe" ]; then row "$name" "not built (no target $(basename "$exe"))"; return; fi
  if [ "$DRY" = 1 ]; then row "$name" "skipped (dry run)"; return; fi
  local out=$LOG/$(basename "$exe").log
  if timeout "$(left)" "$exe" "$@" >"$out" 2>&1; then
    row "$name" "$(python3 "$ROOT/tools/gpu_check_report.py" --bench "$out" "$LOG/$(basename "$exe").json")"
  else
    fail "$name" "exit $? (see $out)"
  fi
}
bench "bench stats cuda" ampscope-bench-stats-cuda --sizes 1M,64M,256M --reps 10 \
  --json "$LOG/ampscope-bench-stats-cuda.json"
bench "bench overhead cuda" ampscope-bench-overhead --device cuda --dtype float16 --rounds 5 \
  --parts b --json "$LOG/ampscope-bench-overhead.json"

# --- the table
echo
echo "== ampscope GPU check: ${GPU:-no GPU}, torch $TORCH_INFO =="
printf '%s\n' "${ROWS[@]}"
result=PASS
[ $FAILED -ne 0 ] && result=FAIL
printf '%-22s %s\n' "total" "$result in $(($(date +%s) - START)) s (logs: $LOG)"
exit $FAILED
