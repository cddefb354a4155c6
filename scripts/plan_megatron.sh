#!/usr/bin/env bash
# The planner against Megatron-LM's published throughput, row by row
# (docs/plan.md). For each row: the model and its tp/pp/dp fixed, the rest
# (vpp, micro-batch, recompute, ZeRO) searched by `trident plan --search`
# unless the publication states it; prints a markdown table with the
# planner's figure, the published one and the relative error.
#
#   ./scripts/plan_megatron.sh [path/to/trident]
set -euo pipefail
cd "$(dirname "$0")/.."
TRIDENT=${1:-./build/trident}
PY=/usr/bin/python3

# The Megatron-LM README's H100 weak-scaling table (images/model_table.png):
# name heads hidden layers tp pp dp gpus batch tflops_per_gpu mfu_percent
# seq 4096, vocab 131072, bf16.
H100_ROWS="
1.7B 16 2048 24 1 1 48 48 192 408.8 41
7.1B 32 4096 30 2 1 48 96 192 465.9 47
16B 48 6144 32 4 1 48 192 192 489.1 49
32B 56 7168 48 8 1 48 384 192 459.6 46
70B 64 8192 84 8 2 48 768 384 419.7 42
119B 80 10240 92 8 4 48 1536 768 420.5 43
177B 96 12288 96 8 6 48 2304 1152 432.8 44
314B 128 16384 96 8 8 48 3072 1536 474.4 48
462B 144 18432 112 8 16 48 6144 3072 459.9 47
"
# Narayanan et al. 2021, Table 1 (A100 80GB, Selene; seq 2048, vocab 51200,
# fp16, full recompute; no distributed optimizer, no sequence parallelism):
# name heads hidden layers tp pp dp gpus batch achieved_tflops_per_gpu (with recompute)
A100_ROWS="
1.7B 24 2304 24 1 1 32 32 512 137
3.6B 32 3072 30 2 1 32 64 512 138
7.5B 32 4096 36 4 1 32 128 512 142
18B 48 6144 40 8 1 32 256 1024 135
39B 64 8192 48 8 2 32 512 1536 138
76B 80 10240 60 8 4 32 1024 1792 140
145B 96 12288 80 8 8 24 1536 2304 148
310B 128 16384 96 8 16 15 1920 2160 155
530B 128 20480 105 8 35 9 2520 2520 163
1T 160 25600 128 8 64 6 3072 3072 163
"

plan() { # gpu precision seq vocab heads hidden layers tp pp dp batch extra...
    local gpu=$1 prec=$2 seq=$3 vocab=$4 heads=$5 hidden=$6 layers=$7 tp=$8 pp=$9 dp=${10} batch=${11}
    shift 11
    "$TRIDENT" plan configs/tiny-test.json --gpu "$gpu" --search --json --top 1 \
        --set model.seq_len="$seq" --set model.vocab_size="$vocab" --set model.n_head="$heads" \
        --set model.n_embd="$hidden" --set model.n_layer="$layers" --set parallel.tp="$tp" \
        --set parallel.pp="$pp" --set parallel.dp="$dp" --set train.global_batch="$batch" \
        --set train.precision="$prec" "$@" | sed -n 1p
}

echo "### H100 (Megatron-LM README, weak scaling; MFU of 989 TFLOP/s)"
echo
echo "| model | tp | pp | dp | GPUs | batch | planned layout (vpp, mb, recompute, zero) | planned MFU | published MFU | error |"
echo "|---|---|---|---|---|---|---|---|---|---|"
while read -r name heads hidden layers tp pp dp gpus batch tfl mfu; do
    [ -z "$name" ] && continue
    j=$(plan h100 bf16 4096 131072 "$heads" "$hidden" "$layers" "$tp" "$pp" "$dp" "$batch")
    $PY - "$name" "$tp" "$pp" "$dp" "$gpus" "$batch" "$tfl" "$j" <<'EOF'
import json, sys
name, tp, pp, dp, gpus, batch, tfl, j = sys.argv[1:]
d = json.loads(j)
if "mfu" not in d:
    print(f"| {name} | {tp} | {pp} | {dp} | {gpus} | {batch} | no layout fits | - | {float(tfl)/989*100:.1f}% | - |")
else:
    pub = float(tfl) / 989.0
    err = (d["mfu"] - pub) / pub
    lay = f"vpp {d['vpp']}, mb {d['micro_batch']}, {d['recompute']}, zero {d['zero']}"
    print(f"| {name} | {tp} | {pp} | {dp} | {gpus} | {batch} | {lay} | {100*d['mfu']:.1f}% | {100*pub:.1f}% | {100*err:+.0f}% |")
EOF
done <<<"$H100_ROWS"

echo
echo "### A100 (Narayanan et al. 2021, Table 1; TFLOP/s per GPU with recompute, of 312)"
echo
echo "| model | tp | pp | dp | GPUs | batch | planned layout (vpp, mb) | planned TFLOP/s | published | error |"
echo "|---|---|---|---|---|---|---|---|---|---|"
while read -r name heads hidden layers tp pp dp gpus batch tfl; do
    [ -z "$name" ] && continue
    j=$(plan a100 fp16 2048 51200 "$heads" "$hidden" "$layers" "$tp" "$pp" "$dp" "$batch" \
        --set train.recompute=full --set parallel.zero=0 --set parallel.sequence_parallel=false)
    $PY - "$name" "$tp" "$pp" "$dp" "$gpus" "$batch" "$tfl" "$j" <<'EOF'
import json, sys
name, tp, pp, dp, gpus, batch, tfl, j = sys.argv[1:]
d = json.loads(j)
if "hw_tflops_per_gpu" not in d:
    print(f"| {name} | {tp} | {pp} | {dp} | {gpus} | {batch} | no layout fits | - | {tfl} | - |")
else:
    pub = float(tfl)
    err = (d["hw_tflops_per_gpu"] - pub) / pub
    lay = f"vpp {d['vpp']}, mb {d['micro_batch']}"
    print(f"| {name} | {tp} | {pp} | {dp} | {gpus} | {batch} | {lay} | {d['hw_tflops_per_gpu']:.0f} | {pub:.0f} | {100*err:+.0f}% |")
EOF
done <<<"$A100_ROWS"
