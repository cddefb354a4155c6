#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite through CTest.
# The suite is one Criterion executable, so the run closes with Criterion's summary.
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
grep -h 'Synthesis: Tested' "$log" | sed 's/^[0-9]*: //' | tail -n 1
exit $rc
