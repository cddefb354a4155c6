#!/usr/bin/env bash
# The planner against Megatron-LM's published throughput, row by row
# (docs/plan.md). For each row: the model and its tp/pp/dp fixed, the rest
# (vpp, micro-batch, recompute, ZeRO) searched by `trident plan --search`
# unless the publication states it (the A100 rows give micro-batch and
# interleaving: that layout is planned, the search's best printed beside it);
# prints markdown tables with the planner's figure, the published one and the
# relative error.
#
#   ./scripts/plan_megatron.sh [path/to/trident]
set -euo pipefail
cd "$(dirname "$0")/.."
TRIDENT=${1:-./build/trident}
PY=/usr/bin/python3

# The Megatron-LM README's H100 weak-scaling table (images/model_table.png,
# added at commit f2e5db40, the same blob at d98e8a64):
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
# Narayanan et al. 2021 (arXiv 2104.04473), Table 1: A100 80GB (Selene), seq
# 2048, vocab 51200, fp16. The achieved TFLOP/s per GPU are the README image
# images/cases_april2021.png of github.com/NVIDIA/Megatron-LM (added at commit
# 50a4b5fa, removed at f2e5db40; they count recompute). Heads, tp, pp, micro-batch,
# interleaving and the full recompute of every layer are the authors' script for
# this table, examples/sc21/run_table_1.sh at commit 6985e589 (now
# examples/academic_paper_scripts/sc21/): --micro-batch-size, --num-layers-per-
# virtual-pipeline-stage (vpp = layers / pp / that), --activations-checkpoint-method
# uniform (one layer per checkpoint), NNODES x 8 GPUs; no distributed optimizer,
# no sequence parallelism (neither existed then).
# name heads hidden layers tp pp dp gpus batch mb vpp achieved_tflops_per_gpu
A100_ROWS="
1.7B 24 2304 24 1 1 32 32 512 16 1 137
3.6B 32 3072 30 2 1 32 64 512 16 1 138
7.5B 32 4096 36 4 1 32 128 512 16 1 142
18B 48 6144 40 8 1 32 256 1024 8 1 135
39B 64 8192 48 8 2 32 512 1536 4 1 138
76B 80 10240 60 8 4 32 1024 1792 2 3 140
145B 96 12288 80 8 8 24 1536 2304 2 2 148
310B 128 16384 96 8 16 15 1920 2160 1 2 155
530B 128 20480 105 8 35 9 2520 2520 1 3 163
1T 160 25600 128 8 64 6 3072 3072 1 1 163
"

args() { # gpu precision seq vocab heads hidden layers tp pp dp batch
    echo configs/tiny-test.json --gpu "$1" --json \
        --set model.seq_len="$3" --set model.vocab_size="$4" --set model.n_head="$5" \
        --set model.n_embd="$6" --set model.n_layer="$7" --set parallel.tp="$8" \
        --set parallel.pp="$9" --set parallel.dp="${10}" --set train.global_batch="${11}" \
        --set train.precision="$2"
}
plan() { # the best layout the search finds: gpu precision seq vocab heads hidden layers tp pp dp batch extra...
    local a
    a=$(args "${@:1:11}")
    shift 11
    # shellcheck disable=SC2086
    "$TRIDENT" plan $a --search --top 1 "$@" | sed -n 1p
}
plan_fixed() { # exactly the layout given: the same arguments
    local a
    a=$(args "${@:1:11}")
    shift 11
    # shellcheck disable=SC2086
    "$TRIDENT" plan $a "$@" | sed -n 1p
}

echo "### H100 (Megatron-LM README, weak scaling; MFU of 989 TFLOP/s)"
echo
echo "| model | tp | pp | dp | GPUs | batch | planned layout (vpp, mb, recompute, zero) | planned MFU | published MFU | error |"
echo "|---|---|---|---|---|---|---|---|---|---|"
while read -r name heads hidden layers tp pp dp gpus batch tfl _mfu; do
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
echo "| model | tp | pp | dp | GPUs | batch | published mb, vpp | planned TFLOP/s | published | error | planner's own best (vpp, mb): TFLOP/s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
while read -r name heads hidden layers tp pp dp gpus batch mb vpp tfl; do
    [ -z "$name" ] && continue
    fixed="--set train.recompute=full --set parallel.zero=0 --set parallel.sequence_parallel=false"
    # shellcheck disable=SC2086
    j=$(plan_fixed a100 fp16 2048 51200 "$heads" "$hidden" "$layers" "$tp" "$pp" "$dp" "$batch" \
        $fixed --set train.micro_batch="$mb" --set parallel.vpp="$vpp")
    # shellcheck disable=SC2086
    b=$(plan a100 fp16 2048 51200 "$heads" "$hidden" "$layers" "$tp" "$pp" "$dp" "$batch" $fixed)
    $PY - "$name" "$tp" "$pp" "$dp" "$gpus" "$batch" "$mb" "$vpp" "$tfl" "$j" "$b" <<'EOF'
import json, sys
name, tp, pp, dp, gpus, batch, mb, vpp, tfl, j, b = sys.argv[1:]
d = json.loads(j)
pub = float(tfl)
err = (d["hw_tflops_per_gpu"] - pub) / pub
fits = "" if d["fits"] else " (does not fit: %.1f GB)" % (d["mem_total"] / 1e9)
e = json.loads(b)
best = (f"vpp {e['vpp']}, mb {e['micro_batch']}: {e['hw_tflops_per_gpu']:.0f}"
        if "hw_tflops_per_gpu" in e else "no layout fits")
print(f"| {name} | {tp} | {pp} | {dp} | {gpus} | {batch} | mb {mb}, vpp {vpp} | "
      f"{d['hw_tflops_per_gpu']:.0f}{fits} | {pub:.0f} | {100*err:+.0f}% | {best} |")
EOF
done <<<"$A100_ROWS"
