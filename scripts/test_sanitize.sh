#!/usr/bin/env bash
# The checked build CI runs: everything compiled with clang's AddressSanitizer
# + UndefinedBehaviorSanitizer (every UB report fatal) in build-asan/, the
# whole CTest suite run there, then a short fuzzing pass over every harness
# of tests/fuzz (scripts/fuzz.sh, build-fuzz/).
#
# usage: scripts/test_sanitize.sh [FUZZ_SECONDS]   (default 10 s per harness; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_secs=${1:-10}
case "$fuzz_secs" in ''|*[!0-9]*) echo "test_sanitize.sh: FUZZ_SECONDS must be a whole number" >&2; exit 2;; esac

./scripts/install_deps.sh
./scripts/prepare_data.sh >/dev/null
CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRI_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$(nproc)"

# For every process the suite starts (tests, trident, tridentrun, and the
# ranks mpirun starts, which inherit the environment):
#  - ASan: errors are fatal (exit 1). Leak checking stays on everywhere but in
#    MPI ranks: Open MPI leaks by design (its plugins' buffers are never freed
#    and are allocated from dlclose'd modules that no suppression can name), so
#    tests/sanitize/sanitizer_options.c turns it off where OMPI_COMM_WORLD_SIZE
#    is set. Single-rank runs of trident and every test process are checked.
#  - LSan: Criterion's own runner leaks are suppressed (tests/sanitize/lsan.supp).
#  - UBSan: a stack trace with every report; -fno-sanitize-recover makes it fatal.
# (detect_leaks is deliberately not set here: ASAN_OPTIONS would override the
# per-process default that turns it off in MPI ranks; it is on by default.)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}abort_on_error=0"
export LSAN_OPTIONS="suppressions=$(pwd)/tests/sanitize/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir build-asan --output-on-failure

if [ "$fuzz_secs" -gt 0 ]; then
  ./scripts/fuzz.sh "$fuzz_secs"
  echo "test_sanitize.sh: the suite passed under ASan + UBSan; $fuzz_secs s of fuzzing per harness found nothing"
else
  echo "test_sanitize.sh: the suite passed under ASan + UBSan (no fuzzing)"
fi
