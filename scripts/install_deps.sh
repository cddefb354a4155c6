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
  python3-venv                          # the tests' venvs for HF tokenizers and transformers (tests/scripts)
  python3-torch                         # transformers' torch in test_hf_roundtrip; scripts/bench_torch.py
  clang libclang-rt-14-dev              # ASan/UBSan build and libFuzzer (scripts/test_sanitize.sh, fuzz.sh)
  libomp-14-dev                         # OpenMP for clang
  llvm                                  # llvm-symbolizer: file:line in sanitizer reports
)

# cuobjdump and nvdisasm, for the SASS check of the tensor-core attention
# (CTest attention_sass_hmma), where nvcc exists but its toolkit lacks them:
# NVIDIA's wheels (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm), downloaded
# with pip into build-tools/cuda/ (ignored by git) and unpacked there, giving
# build-tools/cuda/nvidia/cu13/bin, where the CTest looks after PATH and the
# toolkit. Nothing to do when a cuobjdump is found; a failure prints one note
# and the install goes on (the CTest then reports Skipped).
cuda_sass_tools() {
  local root nvcc dir py w
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  nvcc="$(command -v nvcc 2>/dev/null || true)"
  [ -z "$nvcc" ] && [ -n "${CUDACXX:-}" ] && [ -x "${CUDACXX}" ] && nvcc="$CUDACXX"
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  [ -z "$nvcc" ] && return 0
  dir="$root/build-tools/cuda"
  if command -v cuobjdump >/dev/null 2>&1 || [ -x "$(dirname "$(readlink -f "$nvcc")")/cuobjdump" ] ||
     [ -x "$dir/nvidia/cu13/bin/cuobjdump" ]; then
    return 0
  fi
  py="$(command -v python3 2>/dev/null || true)"
  if [ -n "$py" ] && mkdir -p "$dir" &&
     "$py" -m pip download --no-deps -q -d "$dir" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >/dev/null 2>&1; then
    for w in "$dir"/nvidia_cuda_cuobjdump-*.whl "$dir"/nvidia_cuda_nvdisasm-*.whl; do
      [ -f "$w" ] && "$py" -m zipfile -e "$w" "$dir" >/dev/null 2>&1
    done
    chmod +x "$dir"/nvidia/cu13/bin/* 2>/dev/null || true
  fi
  if [ -x "$dir/nvidia/cu13/bin/cuobjdump" ]; then
    echo "install_deps: cuobjdump and nvdisasm (NVIDIA's wheels) in build-tools/cuda/nvidia/cu13/bin"
  else
    echo "install_deps: note: cuobjdump and nvdisasm could not be fetched (pip download nvidia-cuda-cuobjdump" \
         "nvidia-cuda-nvdisasm); the SASS check of the attention (CTest attention_sass_hmma) will be skipped"
  fi
  return 0
}

missing=()
for p in "${PKGS[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all dependencies present"
  cuda_sass_tools
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
cuda_sass_tools
