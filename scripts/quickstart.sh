#!/usr/bin/env bash
# The README's demo: installs dependencies, builds, prepares the bundled corpus
# (the King James Bible), trains a byte-level BPE tokenizer on it, trains a small
# GPT for a few minutes on 4 ranks (tensor-parallel 2 x data-parallel 2, through
# tridentrun), and prints a text sample from it.
# Extra arguments go to `trident train` (e.g. --set train.steps=100, or
# --set parallel.tp=1 --set parallel.dp=1 for one rank).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
./scripts/prepare_bpe.sh
T=./build/trident
echo "== training configs/quickstart.json on 4 ranks (tp=2 x dp=2); logs in runs/quickstart/"
rm -rf runs/quickstart
./build/tridentrun --log-dir runs/quickstart/ranks -- \
  $T train configs/quickstart.json --set parallel.tp=2 --set parallel.dp=2 "$@"
echo
echo "== a sample from the trained model (runs/quickstart/ckpt):"
$T sample --ckpt runs/quickstart/ckpt --prompt "And God said" --tokens 120 --seed 7
