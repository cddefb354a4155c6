#!/usr/bin/env bash
# The BPE data of the quickstart and of the example sweep
# (configs/sweeps/scaling.json): the bundled corpus split by
# scripts/prepare_data.sh, a 4096-token byte-level BPE tokenizer trained on
# its training part (data/kjv/tokenizer.json), and both parts encoded with it
# as llm.c token files (data/kjv/bpe_train.bin, data/kjv/bpe_val.bin).
# Needs the built binary (./scripts/build.sh). Idempotent: does nothing when
# the token files are newer than the text and the binary. Takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
T=./build/trident
D=data/kjv
if [ ! -x $T ]; then
  echo "trident: $T: not built; run ./scripts/build.sh first" >&2
  exit 2
fi
./scripts/prepare_data.sh
if [ -f $D/bpe_val.bin ] && [ $D/bpe_val.bin -nt $D/val.txt ] && [ $D/bpe_val.bin -nt $T ] &&
   [ $D/bpe_train.bin -nt $D/train.txt ] && [ $D/bpe_train.bin -nt $T ]; then
  echo "prepare_bpe: $D/bpe_train.bin and $D/bpe_val.bin are up to date"
  exit 0
fi
echo "== a 4096-token BPE tokenizer and token files ($D/)"
$T tokenize train --vocab-size 4096 --out $D/tokenizer.json $D/train.txt
$T tokenize encode --quiet --tokenizer $D/tokenizer.json --format llmc --out $D/bpe_train $D/train.txt
$T tokenize encode --quiet --tokenizer $D/tokenizer.json --format llmc --out $D/bpe_val $D/val.txt
