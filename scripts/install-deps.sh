#!/usr/bin/env bash
# Installs the Debian packages kiln needs, and only those that are missing.
# Usage: scripts/install-deps.sh [--bench]
# When everything is present it makes no apt-get call at all, so `make test` may run it every time.
set -euo pipefail

# One array per group; a new feature adds a group here and a flag below.
base_packages=(
  build-essential cmake ninja-build ccache pkg-config
  libopenblas-dev liblapacke-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libxxhash-dev
  clang-format valgrind
  zlib1g-dev dataset-fashion-mnist
  libhdf5-dev libcereal-dev
  clang libclang-rt-14-dev
  python3-torch python3-h5py python3-numpy
  libvulkan-dev glslang-tools glslang-dev mesa-vulkan-drivers
  libopenmpi-dev openmpi-bin
  libpcre2-dev libutf8proc-dev libsentencepiece-dev python3-sentencepiece
)
# The peers of the benchmarks (python3-torch) are base packages: the PyTorch export test needs them.
bench_packages=()

usage() {
  echo "usage: $0 [--bench]" >&2
  exit 2
}

wanted=("${base_packages[@]}")
for arg in "$@"; do
  case "$arg" in
    --bench) wanted+=("${bench_packages[@]}") ;;
    -h | --help) usage ;;
    *)
      echo "install-deps: unknown option '$arg'" >&2
      usage
      ;;
  esac
done

missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

# env, not an exported variable: sudo drops the caller's environment.
apt=(env DEBIAN_FRONTEND=noninteractive apt-get)
if ((EUID != 0)); then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-deps: missing ${missing[*]}; run as root or install sudo" >&2
    exit 1
  fi
  apt=(sudo "${apt[@]}")
fi

echo "install-deps: installing ${missing[*]}"
"${apt[@]}" update
"${apt[@]}" install -y --no-install-recommends "${missing[@]}"
