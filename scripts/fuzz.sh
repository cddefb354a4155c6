#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, ASan + UBSan, in
# build-fuzz/) and runs each for SECONDS seconds, one after the other.
#
# usage: scripts/fuzz.sh [SECONDS] [HARNESS...]     (default: 60 s, every harness)
#
# Each run starts from the committed corpus (tests/fuzz/corpus/<harness>/:
# seeds and the regression inputs of past findings) plus what earlier runs on
# this machine found (build-fuzz/corpus/<harness>/, not committed). Any
# finding (a crash, a sanitizer report, a FUZZ_ASSERT, a leak, a timeout of
# 10 s on one input, more than 2 GiB of memory) fails the script; the input
# that caused it is left in build-fuzz/findings/ and its path printed. Fix
# the bug, then commit that input as tests/fuzz/corpus/<harness>/regress-<what>
# so that tri_fuzz_corpus (ctest -L fuzz) replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
secs=${1:-60}
shift $(( $# > 0 ? 1 : 0 ))
case "$secs" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got '$secs'" >&2; exit 2;; esac

command -v clang >/dev/null || { echo "fuzz.sh: clang is missing (scripts/install_deps.sh installs it)" >&2; exit 2; }
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRI_FUZZ=ON >/dev/null
cmake --build build-fuzz --target tri_fuzz -j"$(nproc)" >/dev/null

if [ $# -gt 0 ]; then
  harnesses=("$@")
else
  mapfile -t harnesses < <(grep -o 'X([a-z0-9_]*)' tests/fuzz/harnesses.h | sed 's/X(\(.*\))/\1/')
fi

# One thread per harness process (the token scans use OpenMP); sanitizer
# reports are fatal and symbolized; leaks are findings (libFuzzer checks them
# after each input that allocated more than it freed).
export OMP_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1"
mkdir -p build-fuzz/findings
failed=()
for h in "${harnesses[@]}"; do
  bin="$root/build-fuzz/tests/fuzz/fuzz_$h"
  [ -x "$bin" ] || { echo "fuzz.sh: no harness '$h' (see tests/fuzz/harnesses.h)" >&2; exit 2; }
  work="$root/build-fuzz/corpus/$h"
  mkdir -p "$work"
  log="$root/build-fuzz/findings/$h.log"
  dict=()  # the harness's keys and magic values, when it has a dictionary
  [ -f "tests/fuzz/dict/$h.dict" ] && dict=(-dict="$root/tests/fuzz/dict/$h.dict")
  echo "== fuzz_$h: ${secs} s"
  set +e
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 -use_value_profile=1 \
    "${dict[@]}" -print_final_stats=1 -artifact_prefix="$root/build-fuzz/findings/$h-" \
    "$work" "$root/tests/fuzz/corpus/$h" >"$log" 2>&1
  rc=$?
  set -e
  grep -E '^stat::number_of_executed_units|^#[0-9]+ +DONE' "$log" | tail -n 1 || true
  if [ $rc -ne 0 ]; then
    failed+=("$h")
    if grep -q 'Test unit written' "$log"; then
      echo "fuzz.sh: fuzz_$h found a bug (exit $rc); the report:"
      grep -E 'ERROR|runtime error|FUZZ_ASSERT|SUMMARY|Test unit written' "$log" | head -n 20
      echo "   reproduce: $bin <the test unit above>"
    else
      echo "fuzz.sh: fuzz_$h did not run (exit $rc):"
      tail -n 5 "$log"
    fi
    echo "   full log: $log"
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: findings in ${failed[*]}"
  exit 1
fi
echo "fuzz.sh: ${#harnesses[@]} harnesses, ${secs} s each, no findings"
