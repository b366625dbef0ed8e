#!/usr/bin/env bash
# Issue 9's H200 table: builds bench/gpu/gpu_bench here, gathers it with the shared libraries the
# device image lacks and Debian's Vulkan loader (the device tool's recipe) into .gpu_carry/ (ignored
# by git), and prints the `run` command that executes bench/gpu_vs_pytorch.py there, kiln and
# PyTorch on the same GPU in one call.
#   bench/gpu_vs_pytorch.sh prepare        # here
#   bench/gpu_vs_pytorch.sh device         # there (the command `prepare` prints runs this)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
carry=.gpu_carry

case "${1:-}" in
  prepare)
    cmake --preset release -DKILN_BENCH=ON -B build/gpu-bench >/dev/null
    cmake --build build/gpu-bench --target gpu_bench -j "$(nproc)"
    rm -rf "$carry" && mkdir -p "$carry/lib" "$carry/gl"
    cp build/gpu-bench/bench/gpu_bench "$carry/"
    # Every shared library but glibc's and the Vulkan loader's (the loader comes as a .deb).
    ldd "$carry/gpu_bench" | awk '/=> \//{print $3}' |
      grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libvulkan)\.so' |
      xargs -r cp -L -t "$carry/lib"
    grep -qxF "/$carry/" .git/info/exclude || echo "/$carry/" >>.git/info/exclude
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    mkdir -p /tmp/amd64/partial
    # shellcheck disable=SC2086
    apt-get $o update >/dev/null && (cd "$carry/gl" && apt-get $o download libvulkan1 >/dev/null)
    du -sh "$carry"
    echo "now: run(command='bash bench/gpu_vs_pytorch.sh device', carry=['$carry'])"
    ;;
  device)
    for f in "$carry"/gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    export LD_LIBRARY_PATH="$PWD/$carry/lib:${LD_LIBRARY_PATH:-}" KILN_CACHE_DIR=/tmp/kiln-cache
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
    python3 bench/gpu_vs_pytorch.py --kiln "$carry/gpu_bench"
    ;;
  *)
    echo "usage: $0 prepare|device" >&2
    exit 2
    ;;
esac
