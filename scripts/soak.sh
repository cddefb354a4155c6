#!/bin/bash
# Soak benchmark for fast restarts (issue 22; docs/reliability.md, "Restarts
# and goodput"): trains one job twice, without faults and under
# `tridentrun --max-restarts` while a random rank is killed (SIGKILL of its
# trident process) every INTERVAL seconds on average (uniform in 0.5x..1.5x),
# and prints the faults, the restarts, both wall times, the goodput
# (fault-free time / faulty time), the time lost per fault split into lost
# work (steps redone since the last checkpoint) and the restart (death to the
# first new step), and whether the final model.safetensors and
# optimizer.safetensors are byte-identical to the fault-free run's.
# A benchmark, not a test: its figures depend on the machine and its load.
#
# usage: scripts/soak.sh [INTERVAL_S ...]      (default: 60 30)
# environment:
#   STEPS=3000            optimizer steps of the job
#   EVERY=                checkpoint.every in steps; default: Young/Daly,
#                         sqrt(2 x save blocking time x MTBF) / step time, per
#                         interval (the MTBF), from a short calibration run
#   STOP_EVERY=0          every Nth fault is a SIGSTOP instead (the watchdog,
#                         parallel.timeout_s=TIMEOUT_S, must end the job)
#   TIMEOUT_S=10          parallel.timeout_s of the job
#   MAX_RESTARTS=1000     tridentrun --max-restarts
#   TRIDENT=build/trident TRIDENTRUN=build/tridentrun   the binaries under test
#   OUT=/tmp/trident-soak the work directory (removed and recreated)
#   SEED=1                the fault schedule's random seed
# The job: 4 ranks (tp 2, dp 2) on this machine, 4 layers x 128 channels,
# 4 heads, seq_len 64, global batch 8 (micro 2), the bundled corpus
# (scripts/prepare_data.sh).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
TRIDENT=${TRIDENT:-$root/build/trident}
TRIDENTRUN=${TRIDENTRUN:-$root/build/tridentrun}
STEPS=${STEPS:-3000}
EVERY=${EVERY:-}
STOP_EVERY=${STOP_EVERY:-0}
TIMEOUT_S=${TIMEOUT_S:-10}
MAX_RESTARTS=${MAX_RESTARTS:-1000}
OUT=${OUT:-/tmp/trident-soak}
SEED=${SEED:-1}
PY=/usr/bin/python3
intervals=("$@")
[ ${#intervals[@]} -eq 0 ] && intervals=(60 30)

for b in "$TRIDENT" "$TRIDENTRUN"; do
    [ -x "$b" ] || { echo "soak: $b: not built (cmake --build build --target trident tridentrun)" >&2; exit 2; }
done
"$root/scripts/prepare_data.sh" >/dev/null || exit 2
rm -rf "$OUT" && mkdir -p "$OUT" || exit 2
RANDOM=$SEED

# config NAME EVERY STEPS: writes $OUT/NAME.json
config() {
    cat > "$OUT/$1.json" <<EOF
{"model": {"n_layer": 4, "n_head": 4, "n_embd": 128, "seq_len": 64, "vocab_size": 256},
 "train": {"global_batch": 8, "micro_batch": 2, "steps": $3, "lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 20},
 "data": {"train": "$root/data/kjv/train.bin", "val": ""},
 "parallel": {"tp": 2, "dp": 2, "timeout_s": $TIMEOUT_S},
 "checkpoint": {"dir": "$OUT/$1/ckpt", "every": $2, "keep": 2},
 "log": {"dir": "$OUT/$1", "every": 1}}
EOF
}

# run NAME: trains $OUT/NAME.json under tridentrun; prints the wall seconds
run() {
    local t0 t1
    t0=$(date +%s.%N)
    timeout 3600 "$TRIDENTRUN" --log-dir "$OUT/$1/logs" --max-restarts "$MAX_RESTARTS" -- \
        "$TRIDENT" train "$OUT/$1.json" > "$OUT/$1.out" 2> "$OUT/$1.err"
    local rc=$?
    t1=$(date +%s.%N)
    echo "$t0 $t1 $rc"
}

# the trident process of a running rank (the wrapper's child), or nothing
rank_pid() {
    local st="$OUT/$1/logs/rank_$2.status" w
    [ -f "$st" ] || return
    w=$(awk 'NR == 1 && $2 == "running" {print $3}' "$st")
    [ -n "$w" ] && pgrep -P "$w" | head -1
}

# inject NAME INTERVAL TRPID: faults until tridentrun (TRPID) ends
inject() {
    local name=$1 iv=$2 trpid=$3 n=0 log="$OUT/$1.faults"
    : > "$log"
    while kill -0 "$trpid" 2>/dev/null; do
        local wait_us end
        wait_us=$($PY -c "import random; random.seed($SEED * 7919 + $n); print(int($iv * 1e6 * random.uniform(0.5, 1.5)))")
        end=$((${EPOCHREALTIME/./} + wait_us))
        while kill -0 "$trpid" 2>/dev/null && [ "${EPOCHREALTIME/./}" -lt "$end" ]; do sleep 0.2; done
        kill -0 "$trpid" 2>/dev/null || break
        local r=$((RANDOM % 4)) pid="" tries=0
        while [ -z "$pid" ] && [ $tries -lt 40 ] && kill -0 "$trpid" 2>/dev/null; do
            pid=$(rank_pid "$name" "$r")
            [ -z "$pid" ] && sleep 0.05
            tries=$((tries + 1))
        done
        [ -z "$pid" ] && continue
        n=$((n + 1))
        if [ "$STOP_EVERY" -gt 0 ] && [ $((n % STOP_EVERY)) -eq 0 ]; then
            kill -STOP "$pid" && echo "$(date +%s.%N) stop $r $pid" >> "$log"
        else
            local before
            before=$(grep -c '^resumed from' "$OUT/$name/logs/rank_0.log" 2>/dev/null)
            kill -KILL "$pid" && echo "$(date +%s.%N) kill $r $pid" >> "$log"
            # the first step of the relaunched job (rank 0's log: a step line
            # after one more "resumed from" line)
            local k=0
            while kill -0 "$trpid" 2>/dev/null && [ $k -lt 6000 ]; do
                if awk -v n="$before" '/^resumed from/ {r++; s = 0} /^step/ && r > n {s = 1} END {exit !s}' \
                    "$OUT/$name/logs/rank_0.log" 2>/dev/null; then
                    echo "$(date +%s.%N) first_step" >> "$log"
                    break
                fi
                sleep 0.02
                k=$((k + 1))
            done
        fi
    done
}

# Calibration: step time and save blocking time (checkpoint.async, the
# default: the snapshot; a synchronous save blocks for its whole duration)
# from a short run.
if [ -z "$EVERY" ]; then
    config calib 10 60
    read -r _ _ rc < <(run calib)
    [ "$rc" = 0 ] || { echo "soak: the calibration run failed (exit $rc): $OUT/calib.err" >&2; exit 1; }
    read -r STEP_S SAVE_S < <($PY - "$OUT/calib" <<'PY'
import json, re, statistics, sys
d = sys.argv[1]
ms = [json.loads(l)["ms"] for l in open(d + "/metrics.jsonl") if '"ms"' in l][5:]
# every save's blocking time (checkpoint.async: the snapshot only) from its metrics line
saves = [json.loads(l)["checkpoint_blocking_ms"] / 1e3 for l in open(d + "/metrics.jsonl")
         if '"checkpoint_blocking_ms"' in l]
print(statistics.median(ms) / 1e3, statistics.median(saves))
PY
)
    echo "calibration: step $STEP_S s, save (blocking) $SAVE_S s"
fi

printf '%-10s %6s %8s %8s %8s %9s %8s %12s %12s %s\n' interval every faults restarts free_s faulty_s goodput lost/fault work/fault identical
for iv in "${intervals[@]}"; do
    every=$EVERY
    if [ -z "$every" ]; then
        every=$($PY -c "import math; print(max(1, round(math.sqrt(2 * $SAVE_S * $iv) / $STEP_S)))")
    fi
    config "free$iv" "$every" "$STEPS"
    config "soak$iv" "$every" "$STEPS"
    read -r f0 f1 frc < <(run "free$iv")
    [ "$frc" = 0 ] || { echo "soak: the fault-free run failed (exit $frc): $OUT/free$iv.err" >&2; exit 1; }
    t0=$(date +%s.%N)
    timeout 3600 "$TRIDENTRUN" --log-dir "$OUT/soak$iv/logs" --max-restarts "$MAX_RESTARTS" -- \
        "$TRIDENT" train "$OUT/soak$iv.json" > "$OUT/soak$iv.out" 2> "$OUT/soak$iv.err" &
    trpid=$!
    inject "soak$iv" "$iv" "$trpid"
    wait "$trpid"
    src=$?
    t1=$(date +%s.%N)
    $PY - "$OUT" "$iv" "$every" "$f0" "$f1" "$t0" "$t1" "$src" "$STEPS" <<'PY'
import glob, json, os, re, statistics, sys
out, iv, every, f0, f1, t0, t1, rc, steps = sys.argv[1:]
free, faulty = float(f1) - float(f0), float(t1) - float(t0)
events = [l.split() for l in open(f"{out}/soak{iv}.faults")]
faults = [e for e in events if e[1] in ("kill", "stop")]
# death to the first step of the relaunched job, per kill followed by one
to_step = [float(b[0]) - float(a[0]) for a, b in zip(events, events[1:]) if a[1] == "kill" and b[1] == "first_step"]
err = open(f"{out}/soak{iv}.err").read()
restarts = re.findall(r"; restart \d+ of \d+", err)
relaunch = re.findall(r"restart \d+: .* relaunched ([0-9.]+) s after it", err)  # tridentrun's note (issue 22 on)
# lost work: per attempt, the last step logged minus the step the next resumed from
log = open(f"{out}/soak{iv}/logs/rank_0.log").read()
parts = re.split(r"----- tridentrun: attempt \d+ -----\n", log)
last = [max([int(s) for s in re.findall(r"^step +(\d+)/", p, re.M)] or [0]) for p in parts]
resumed = [int(m) if m else 0 for m in
           [(re.search(r"resumed from \S+ at step (\d+)", p) or [None, None])[1] for p in parts]]
redone = sum(max(0, last[i] - resumed[i + 1]) for i in range(len(parts) - 1))
ms = [json.loads(l)["ms"] for l in open(f"{out}/free{iv}/metrics.jsonl") if '"ms"' in l]
ms_faulty = [json.loads(l)["ms"] for l in open(f"{out}/soak{iv}/metrics.jsonl") if '"ms"' in l]
step_s = statistics.median(ms) / 1e3
# wall time outside the steps (start-up, saves, restarts): the load of a
# shared machine changes the step times, this part less
off_free, off_faulty = free - sum(ms) / 1e3, faulty - sum(ms_faulty) / 1e3
nf = max(1, len(faults))
lost = (faulty - free) / nf
work = redone * step_s / nf
def final(d):
    steps_dirs = sorted(glob.glob(f"{d}/ckpt/step_*"))
    return steps_dirs[-1] if steps_dirs else None
a, b = final(f"{out}/free{iv}"), final(f"{out}/soak{iv}")
same = (a is not None and b is not None and os.path.basename(a) == os.path.basename(b) and
        all(open(f"{a}/{n}", "rb").read() == open(f"{b}/{n}", "rb").read()
            for n in ("model.safetensors", "optimizer.safetensors")))
print(f"{iv + ' s':<10} {every:>6} {len(faults):>8} {len(restarts):>8} {free:8.1f} {faulty:9.1f} "
      f"{free / faulty:8.4f} {lost:10.2f} s {work:10.2f} s {'yes' if same else 'NO'}"
      + ("" if rc == "0" else f"  (faulty run exit {rc}: {out}/soak{iv}.err)"))
d = [float(x) for x in relaunch]
print(f"{'':10} " + (f"death to relaunch: median {statistics.median(d):.3f} s, max {max(d):.3f} s; " if d else "")
      + f"steps redone {redone} ({work:.2f} s/fault); restart and the rest {lost - work:.2f} s/fault")
print(f"{'':10} death to the first new step: "
      + (f"median {statistics.median(to_step):.2f} s, max {max(to_step):.2f} s; " if to_step else "not seen; ")
      + f"time outside the steps: fault-free {off_free:.1f} s, faulty {off_faulty:.1f} s "
      + f"({(off_faulty - off_free) / nf:.2f} s/fault); median step {step_s * 1e3:.0f} ms fault-free, "
      + f"{statistics.median(ms_faulty):.0f} ms faulty")
# The faults' own cost, without the machine's speed between the two runs (a
# shared VM's step time moves by 10% from one minute to the next, which the
# wall-time goodput above takes for the faults'): the time outside the steps
# that the faulty run added, plus the steps it redid at the fault-free median.
added = max(0.0, off_faulty - off_free) + work * nf
print(f"{'':10} goodput from the faults' cost: {free / (free + added):.4f} "
      f"({added / nf:.2f} s per fault: {max(0.0, off_faulty - off_free) / nf:.2f} s outside the steps, "
      f"{work:.2f} s redone)")
PY
done
