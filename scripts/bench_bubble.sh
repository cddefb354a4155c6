#!/bin/sh
# Measured pipeline bubble against the simulator's prediction.
#
#   scripts/bench_bubble.sh [ROUNDS] [SCHEDULE]
#
# Runs `trident bench configs/bench-pipe.json` (8 layers, C=256, T=128,
# micro-batch 2, synthetic tokens) through tridentrun at pp=2 with m=8
# micro-batches and at pp=4 with m=16 (m = 4p), one thread per rank,
# alternating the two layouts ROUNDS times (default 3), and prints for each
# run the measured bubble (idle / busy of the busiest stage over the pipeline
# phase of each step) beside the simulator's (unit costs). SCHEDULE is
# parallel.schedule (default 1f1b). On a 2-core machine pp=4 oversubscribes
# the cores (4 ranks): stages that wait give their core to the others.
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SCHED=${2:-1f1b}
[ -x build/trident ] || ./scripts/build.sh
run() { # pp global_batch
    OMP_NUM_THREADS=1 ./build/tridentrun -- ./build/trident bench configs/bench-pipe.json --steps 6 \
        --set parallel.pp="$1" --set train.global_batch="$2" --set parallel.schedule="$SCHED" 2>&1 |
        sed -n 's/.*"step_ms": \([0-9.]*\).*"bubble": \([0-9.]*\), "bubble_sim": \([0-9.]*\).*/\1 \2 \3/p' |
        awk -v pp="$1" '{printf "pp=%d  step %8.1f ms  bubble measured %.3f  simulated %.3f  ratio %.2f\n", pp, $1, $2, $3, ($3 > 0 ? $2 / $3 : 0)}'
}
i=1
while [ "$i" -le "$ROUNDS" ]; do
    run 2 16
    run 4 32
    i=$((i + 1))
done
