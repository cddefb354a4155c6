#!/bin/sh
# Turns the bundled corpus (data/corpus/kjv.txt.xz, the King James Bible) into
# byte-level llm.c token files: OUTDIR/train.bin (the first ~95% of the bytes,
# cut at a line boundary) and OUTDIR/val.bin (the rest), vocabulary 256
# (token id = byte value), and the same split as text, OUTDIR/train.txt and
# OUTDIR/val.txt, for `trident tokenize`. Needs only /usr/bin/python3's
# standard library.
#
# usage: scripts/prepare_data.sh [OUTDIR]     (default: data/kjv in the repo)
# Idempotent: does nothing when both outputs are newer than the corpus and
# this script. Outputs are written under temporary names and renamed.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/data/corpus/kjv.txt.xz"
out="${1:-$root/data/kjv}"

if [ ! -f "$src" ]; then
    echo "trident: $src: corpus missing" >&2
    exit 2
fi
if [ -f "$out/train.bin" ] && [ -f "$out/val.bin" ] && [ -f "$out/val.txt" ] &&
   [ "$out/train.bin" -nt "$src" ] && [ "$out/val.bin" -nt "$src" ] &&
   [ "$out/train.bin" -nt "$0" ] && [ "$out/val.bin" -nt "$0" ]; then
    echo "prepare_data: $out/train.bin and $out/val.bin are up to date"
    exit 0
fi
mkdir -p "$out"

/usr/bin/python3 - "$src" "$out" <<'PY'
import lzma, os, struct, sys

src, out = sys.argv[1], sys.argv[2]
MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256  # llm.c token file, uint16 tokens
VAL_FRACTION = 0.05

try:
    with lzma.open(src, "rb") as f:
        text = f.read()
except (OSError, lzma.LZMAError) as e:
    sys.exit(f"trident: {src}: cannot decompress: {e}")

# Validation = the last ~5% of the bytes, starting at a line boundary.
cut = text.find(b"\n", int(len(text) * (1.0 - VAL_FRACTION)))
cut = len(text) if cut < 0 else cut + 1
parts = {"train.bin": text[:cut], "val.bin": text[cut:]}

def write_tokens(path, data):
    tokens = bytearray(2 * len(data))  # little-endian uint16, id = byte value
    tokens[0::2] = data
    header = struct.pack("<%di" % HEADER_INTS, MAGIC, VERSION, len(data),
                         *([0] * (HEADER_INTS - 3)))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(tokens)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)

for name, data in parts.items():
    write_tokens(os.path.join(out, name), data)
    print(f"prepare_data: {os.path.join(out, name)}: {len(data):,} tokens (bytes)")
    # the same split as text, for `trident tokenize` (BPE tokenizer and token files)
    txt = os.path.join(out, name.replace(".bin", ".txt"))
    with open(txt + ".tmp", "wb") as f:
        f.write(data)
    os.replace(txt + ".tmp", txt)
PY
