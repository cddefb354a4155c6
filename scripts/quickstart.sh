#!/usr/bin/env bash
# The README's demo: installs dependencies, builds, prepares the bundled corpus,
# trains a small GPT for a few minutes, and prints a text sample from it.
# Extra arguments go to `trident train` (e.g. --set train.steps=100).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
./scripts/prepare_data.sh
echo "== training (configs/quickstart.json); logs in runs/quickstart/"
./build/trident train configs/quickstart.json "$@"
echo
echo "== a sample from the trained model (runs/quickstart/ckpt):"
./build/trident sample --ckpt runs/quickstart/ckpt --prompt "And God said" --tokens 300 --seed 7
