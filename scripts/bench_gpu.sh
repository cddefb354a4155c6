#!/usr/bin/env bash
# GPT-2 training throughput on one GPU: `trident bench --device cuda` and the
# PyTorch baseline (scripts/bench_torch.py --device cuda: the same model,
# batch, precision and optimizer, nanoGPT-style: bf16 autocast, fused AdamW,
# F.scaled_dot_product_attention, torch.compile where it works) in the same
# run on the same device. Prints tokens/s and MFU of each, MFU against the
# device's dense bf16 peak (docs/performance.md), trident's time per op kind
# (a second run with --profile), and writes the JSON lines of every run to
# build/bench_gpu/results.jsonl.
#
#   scripts/bench_gpu.sh [CONFIG...]       (default: configs/bench-gpt2-124m.json
#                                           configs/bench-gpt2-350m.json)
# Environment: STEPS (counted steps, default 10), PEAK_TFLOPS (the device's
# dense bf16 peak when its name is not in the table below), PYTHON (a Python
# with torch and CUDA; default python3, then /usr/bin/python3), COMPILE=0
# (no torch.compile), TRIDENT_SET (one extra --set for trident, e.g.
# train.precision=fp32; give the torch run the same with TORCH_ARGS, e.g.
# "--precision fp32").
# Exit codes: 0 every run done; 1 a run failed (the others still run);
# 2 no usable GPU here, or no build to run (the message says which).
set -uo pipefail
cd "$(dirname "$0")/.."

die2() {
    echo "bench_gpu.sh: $*" >&2
    exit 2
}

STEPS=${STEPS:-10}
COMPILE=${COMPILE:-1}
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(configs/bench-gpt2-124m.json configs/bench-gpt2-350m.json)
for c in "${configs[@]}"; do [ -f "$c" ] || die2 "no config $c"; done

# A Python with torch (for the baseline, and to name the GPU without nvidia-smi).
py=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch' >/dev/null 2>&1; then
        py=$p
        break
    fi
done

# The GPU: its name from nvidia-smi, else from torch.
gpu=""
why_smi="nvidia-smi not found"
if command -v nvidia-smi >/dev/null 2>&1; then
    if out=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>&1) && [ -n "$out" ]; then
        gpu=$(echo "$out" | head -n 1)
    else
        why_smi="nvidia-smi: $(echo "$out" | head -n 1)"
    fi
fi
why_torch="no Python with torch (set PYTHON)"
if [ -z "$gpu" ] && [ -n "$py" ]; then
    if out=$("$py" -c 'import torch, sys
if not torch.cuda.is_available(): sys.exit("torch %s: torch.cuda.is_available() is False" % torch.__version__)
print(torch.cuda.get_device_name(0))' 2>&1); then
        gpu=$out
    else
        why_torch=$(echo "$out" | tail -n 1)
    fi
fi
[ -n "$gpu" ] || die2 "no CUDA GPU on this machine ($why_smi; $why_torch): nothing to measure"
[ -n "$py" ] || die2 "GPU $gpu, but no Python with torch for the baseline (set PYTHON)"

# The device's dense bf16 peak, TFLOP/s (NVIDIA datasheets, without 2:4 sparsity).
peak=${PEAK_TFLOPS:-}
if [ -z "$peak" ]; then
    case "$gpu" in
    *H100*PCIe*) peak=756 ;;
    *H100*NVL*) peak=835 ;;
    *H100* | *H200* | *GH200*) peak=989 ;;
    *A100*) peak=312 ;;
    *) die2 "GPU $gpu: its dense bf16 peak is not in this script's table; give it as PEAK_TFLOPS=..." ;;
    esac
fi

# The build: trident and the CUDA module (scripts/build.sh where they are missing).
if [ ! -x build/trident ] || [ ! -f build/libtri_cuda.so ]; then
    echo "bench_gpu.sh: building (scripts/build.sh)"
    ./scripts/build.sh >/dev/null || die2 "the build failed (./scripts/build.sh)"
fi
[ -f build/libtri_cuda.so ] || die2 "build/libtri_cuda.so is missing: the build has no CUDA backend (needs nvcc; see docs/cuda.md)"

outdir=build/bench_gpu
mkdir -p "$outdir"
results=$outdir/results.jsonl
: >"$results"
echo "bench_gpu.sh: $gpu, dense bf16 peak $peak TFLOP/s, $STEPS steps per run; $($py -c 'import torch; print("torch", torch.__version__)')"

failed=0
summary=()
for cfg in "${configs[@]}"; do
    name=$(basename "$cfg" .json)
    # Trident
    tset=()
    [ -n "${TRIDENT_SET:-}" ] && tset=(--set "$TRIDENT_SET")
    log=$outdir/$name.trident.log
    echo "== $name: trident bench --device cuda"
    if ./build/trident bench "$cfg" --device cuda --peak-tflops "$peak" --steps "$STEPS" "${tset[@]}" >"$log" 2>&1; then
        grep -v '^{' "$log"
        json=$(grep '^{' "$log" | tail -n 1)
        echo "{\"run\": \"trident\", \"gpu\": \"$gpu\", \"result\": $json}" >>"$results"
        summary+=("$(echo "$json" | $py -c 'import json,sys; r=json.load(sys.stdin)
print("%-22s %-14s %-5s %10.0f %8.1f%% %9.1f" % (sys.argv[1], "trident", r["precision"], r["tokens_per_s"], 100*r["mfu"], r["step_ms"]))' "$name")")
    else
        rc=$?
        failed=1
        tail -n 5 "$log"
        summary+=("$(printf '%-22s %-14s failed (exit %d): %s' "$name" trident "$rc" "$(grep -m1 'trident:' "$log")")")
    fi
    # Trident again with --profile: where the GPU time goes, per op kind
    # (CUDA events around each op; a run of its own, so that the timed run
    # above carries no events)
    log=$outdir/$name.trident-profile.log
    echo "== $name: trident bench --device cuda --profile"
    if ./build/trident bench "$cfg" --device cuda --peak-tflops "$peak" --steps "$STEPS" --profile "${tset[@]}" \
        >"$log" 2>&1; then
        sed -n '/^  profile /,/^{/p' "$log" | grep -v '^{'
        echo "{\"run\": \"trident-profile\", \"gpu\": \"$gpu\", \"result\": $(grep '^{' "$log" | tail -n 1)}" >>"$results"
    else
        rc=$?
        failed=1
        tail -n 5 "$log"
        summary+=("$(printf '%-22s %-14s failed (exit %d), see %s' "$name" trident-profile "$rc" "$log")")
    fi
    # PyTorch, compiled where torch.compile works, else eager
    modes=(eager)
    [ "$COMPILE" = 1 ] && modes=(compile eager)
    for mode in "${modes[@]}"; do
        flag=()
        [ "$mode" = compile ] && flag=(--compile)
        log=$outdir/$name.torch-$mode.log
        echo "== $name: bench_torch.py --device cuda ${flag[*]}"
        # shellcheck disable=SC2086
        if "$py" scripts/bench_torch.py "$cfg" --device cuda "${flag[@]}" --steps "$STEPS" --peak-tflops "$peak" \
            ${TORCH_ARGS:-} >"$log" 2>&1; then
            grep -v '^{' "$log"
            json=$(grep '^{' "$log" | tail -n 1)
            echo "{\"run\": \"torch-$mode\", \"gpu\": \"$gpu\", \"result\": $json}" >>"$results"
            summary+=("$(echo "$json" | $py -c 'import json,sys; r=json.load(sys.stdin)
print("%-22s %-14s %-5s %10.0f %8.1f%% %9.1f" % (sys.argv[1], sys.argv[2], r["precision"], r["tokens_per_s"], 100*r["mfu"], r["step_ms"]))' "$name" "torch-$mode")")
            break # compiled worked: no eager run needed
        else
            rc=$?
            tail -n 5 "$log"
            if [ "$mode" = compile ]; then
                echo "bench_gpu.sh: torch.compile failed (exit $rc, $log); the eager model instead"
                summary+=("$(printf '%-22s %-14s failed (exit %d), see %s' "$name" torch-compile "$rc" "$log")")
            else
                failed=1
                summary+=("$(printf '%-22s %-14s failed (exit %d), see %s' "$name" torch-eager "$rc" "$log")")
            fi
        fi
    done
done

echo
echo "GPT-2 training on one $gpu (MFU: model FLOPs/s over $peak TFLOP/s dense bf16)"
printf '%-22s %-14s %-5s %10s %9s %9s\n' config impl prec tokens/s MFU step_ms
printf '%s\n' "${summary[@]}"
echo "(JSON lines: $results)"
exit $failed
