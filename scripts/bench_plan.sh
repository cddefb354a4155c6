#!/usr/bin/env bash
# The planner's step time for the CPU backend (`trident plan --gpu cpu`,
# this machine's measured sgemm) against `trident bench` through tridentrun,
# on tp/pp/dp layouts of 1 to 4 ranks (docs/plan.md has the results).
#
#   scripts/bench_plan.sh [ROUNDS] [CONFIG]
#
# Timing-sensitive: each run waits until the 1-minute load average is below
# 2 (the machine is shared), gives up on a layout after 10 minutes of
# waiting, and ROUNDS (default 2) alternates plan and bench per layout so
# that slow phases of the VM hit both. Prints a markdown table: planned and
# measured step time (median of the rounds) and the error.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
CONFIG=${2:-configs/bench-gpt.json}
[ -x build/trident ] || ./scripts/build.sh
PY=/usr/bin/python3

wait_load() {
    local waited=0
    while :; do
        local l
        l=$(cut -d' ' -f1 /proc/loadavg)
        if $PY -c "import sys; sys.exit(0 if float('$l') < 2.0 else 1)"; then return 0; fi
        [ "$waited" -ge 600 ] && return 1
        sleep 10
        waited=$((waited + 10))
    done
}

# The oversubscription constants (docs/plan.md, "Oversubscribed cores"):
# tests/tools/sched_probe.c at 2, 3 and 4 single-thread ranks, ROUNDS times each,
# alternating; its delay_ms at 3-4 ranks is what `trident plan --sync-ms`
# takes (the default is the figure docs/plan.md records).
echo "sched_probe (one JSON line per run):"
for r in $(seq "$ROUNDS"); do
    for n in 2 3 4; do
        wait_load || { echo "load stayed >= 2, probe at $n ranks skipped"; continue; }
        timeout 300 ./build/tridentrun --nproc-per-node "$n" --log-dir /tmp/bench_plan_logs -- \
            ./build/tests/sched_probe 2>&1 | grep '"delay_ms"' || echo "probe at $n ranks failed"
    done
done
echo

# tp pp dp (6 heads and 6 layers: tp 1, 2, 3; pp 1, 2, 3; global batch 8)
LAYOUTS="1 1 1
2 1 1
1 2 1
1 1 2
2 2 1
2 1 2
1 2 2
1 1 4
3 1 1
1 3 1"

echo "| tp | pp | dp | ranks | planned step (s) | compute / TP / DP / PP / bubble (s) | measured step (s) | error |"
echo "|---|---|---|---|---|---|---|---|"
while read -r tp pp dp; do
    n=$((tp * pp * dp))
    mb=$((8 / dp))
    [ "$pp" -gt 1 ] && mb=$((8 / dp / 4 > 0 ? 8 / dp / 4 : 1))
    sets="--set parallel.tp=$tp --set parallel.pp=$pp --set parallel.dp=$dp --set train.micro_batch=$mb"
    plans=""
    benches=""
    for r in $(seq "$ROUNDS"); do
        wait_load || { echo "| $tp | $pp | $dp | $n | load stayed >= 2, skipped | | | |"; continue 2; }
        # shellcheck disable=SC2086
        p=$(./build/trident plan "$CONFIG" --gpu cpu --json $sets)
        plans="$plans$p"$'\n'
        wait_load || { echo "| $tp | $pp | $dp | $n | load stayed >= 2, skipped | | | |"; continue 2; }
        # shellcheck disable=SC2086
        b=$(timeout 600 ./build/tridentrun --nproc-per-node "$n" --log-dir /tmp/bench_plan_logs -- \
            ./build/trident bench "$CONFIG" --steps 4 $sets 2>&1 | grep '"step_ms"' | tail -1)
        benches="$benches$b"$'\n'
    done
    $PY - "$tp" "$pp" "$dp" "$n" "$plans" "$benches" <<'EOF'
import json, statistics, sys
tp, pp, dp, n, plans, benches = sys.argv[1:]
P = [json.loads(l) for l in plans.splitlines() if l.strip()]
B = [json.loads(l) for l in benches.splitlines() if l.strip()]
ps = statistics.median(p["step_s"] for p in P)
bs = statistics.median(b["step_ms"] / 1000 for b in B)
p = P[len(P) // 2]
parts = f"{p['compute_s']:.3f} / {p['tp_s']:.3f} / {p['dp_s']:.3f} / {p['pp_s']:.3f} / {p['bubble_s']:.3f}"
print(f"| {tp} | {pp} | {dp} | {n} | {ps:.3f} | {parts} | {bs:.3f} | {100 * (ps - bs) / bs:+.0f}% |")
EOF
done <<<"$LAYOUTS"
