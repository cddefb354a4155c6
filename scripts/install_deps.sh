#!/usr/bin/env bash
# Installs what Trident needs to build, test and run its quickstart, with
# apt-get, and only what is missing. Idempotent: a second run installs nothing.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config      # compiler, CMake
  libopenblas-openmp-dev                # OpenBLAS sharing one OpenMP pool with our loops
  libcjson-dev                          # configs
  libcriterion-dev                      # tests
  openmpi-bin libopenmpi-dev            # ranks and the CPU transport
  xz-utils                              # tokenize reads .xz text through xz -dc
  python3-numpy                         # scripts and independent checks in tests
  python3-matplotlib                    # scripts/plot.py (loss curves, scaling-law fit)
  clang libclang-rt-14-dev              # ASan/UBSan build and libFuzzer (scripts/test_sanitize.sh, fuzz.sh)
  libomp-14-dev                         # OpenMP for clang
  llvm                                  # llvm-symbolizer: file:line in sanitizer reports
)

missing=()
for p in "${PKGS[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all dependencies present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install_deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
