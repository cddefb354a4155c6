#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite through CTest.
# The suite is a few Criterion executables (tri_tests; tri_fault_tests for the
# fault tests, CTest label `fault`; test_ops_avx2 and test_ops_scalar, the op
# tests on the CPU kernels' other vector paths; tri_cuemu_tests, the CUDA
# kernels under emulation, label `cuemu`; tri_gpu_tests, the same op-table
# tests on a real GPU, label `gpu`, skipped where there is none); the run
# closes with their summaries and one total line, which counts the CTest
# tests skipped and says why.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
./scripts/prepare_data.sh >/dev/null
log=build/test.log
set +e
ctest --test-dir build --output-on-failure -V >"$log" 2>&1
rc=$?
set -e
# Criterion's own lines (test results and its summary), without CTest's prefix.
sed -n 's/^[0-9]*: //p' "$log" | grep -v '^Test command' || true
tail -n 3 "$log"
syn=$(grep -h 'Synthesis: Tested' "$log" | sed 's/^[0-9]*: //')
echo "$syn"
# Criterion: "[====] Synthesis: Tested: N | Passing: P | Failing: F | Crashing: C"
echo "$syn" | awk -F'|' '{ for (i = 1; i <= NF; i++) { split($i, kv, ":"); k = kv[length(kv) - 1]; v = kv[length(kv)] + 0;
  if ($i ~ /Passing/) p += v; if ($i ~ /Failing/) f += v; if ($i ~ /Crashing/) f += v } }
  END { printf "%d passed, %d failed", p, f }'
# CTest tests that did not run (exit code 77: "gpu tests skipped: no CUDA device (...)")
skipped=$(grep -c '\*\*\*Skipped' "$log" || true)
if [ "$skipped" -gt 0 ]; then
  why=$(sed -n 's/^[0-9]*: \(.* tests skipped: .*\)$/\1/p' "$log" | paste -sd ';' -)
  echo ", $skipped skipped (${why:-see $log})"
else
  echo
fi
exit $rc
