#!/usr/bin/env bash
# Issue 9's H200 run: builds kiln here (release, with the benchmarks), packs gpu_bench, the training
# examples, the Vulkan test binaries, the shared libraries the device image lacks and the raw
# Fashion-MNIST files into xz archives under .gpu_carry/ (ignored by git; one big dictionary, so
# the binaries' common code is stored once), beside Debian's Vulkan loader (the device tool's
# recipe). The device tool carries at most 64 MiB a call (the working tree included), so each part
# has its own archives: bin-tests (the Vulkan tests), bin-train (the examples) with base-data (the
# data), bin-bench (the benchmarks), each beside base-lib (the libraries). On the device it runs the Vulkan tests, the table of kiln beside PyTorch on the same GPU
# (bench/gpu_vs_pytorch.py) with the synchronous vs asynchronous training loops
# (bench/core/async_loop_bench.cpp), and training on the GPU through the examples.
#   bench/gpu_vs_pytorch.sh prepare             # here
#   bench/gpu_vs_pytorch.sh device [parts...]   # there; parts: tests ops table gemm barrier gpt2 train (default:
#                                               # tests table train; gemm: the GPT's GEMMs by shape;
#                                               # barrier: what a dependent dispatch costs; gpt2: GPT-2 small
#                                               # beside PyTorch, CPU and GPU)
# e.g. run(command='bash bench/gpu_vs_pytorch.sh device tests',
#          carry=['.gpu_carry/gl', '.gpu_carry/base-lib.tar.xz', '.gpu_carry/bin-tests.tar.xz']), then
#      run(command='rm -rf /tmp/kiln; bash bench/gpu_vs_pytorch.sh device train', carry=['.gpu_carry/gl',
#          '.gpu_carry/base-lib.tar.xz', '.gpu_carry/base-data.tar.xz', '.gpu_carry/bin-train.tar.xz']) and
#      run(command='rm -rf /tmp/kiln; bash bench/gpu_vs_pytorch.sh device table',
#          carry=['.gpu_carry/gl', '.gpu_carry/base-lib.tar.xz', '.gpu_carry/bin-bench.tar.xz'])
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
carry=.gpu_carry
build=build/release
tests=(vulkan_runtime_test vulkan_kernels_test elementwise_kernel_test glsl_compiler_test gpu_eval_test
  gpu_elementwise_test gpu_reduce_test gpu_index_test gpu_linalg_test gpu_random_test gpu_compile_test
  gpu_scan_test gpu_sort_test gpu_gather_test gpu_conv_test gpu_pool_test gpu_float64_math_test
  gpu_matmul_half_test gpu_norm_test gpu_training_memory_test gpu_capture_test gpu_attention_test
  gpu_arange_test gpu_masked_grad_test gpu_transfer_counter_test gpu_async_test gpu_kv_cache_test)
# The op suites of tests/core run with the GPU as the default device (their gpu. pass in ctest), on
# NVIDIA's driver: the `ops` part (archive bin-ops).
ops=(unary_test binary_test ternary_test transforms_test linalg_decomp_test shape_more_test einsum_test
  conv_transpose_test array_test dtype_test int_dtypes_test compile_test linalg_test conv_test)

case "${1:-}" in
  prepare)
    cmake --preset release -DKILN_BENCH=ON >/dev/null
    cmake --build "$build" -j "$(nproc)" --target gpu_bench barrier_bench async_loop_bench gpt2_small_bench \
      train_fashion_mnist train_char_gpt \
      "${tests[@]}" "${ops[@]}"
    # Two archives: the binaries (packed again each time) and the libraries and data (kept when
    # present; `rm -rf .gpu_carry` to rebuild them). One big dictionary stores the binaries' common
    # code once.
    stage=$(mktemp -d)
    mkdir -p "$carry/gl" "$stage/tests/bin" "$stage/ops/bin" "$stage/train/bin" "$stage/bench/bin" "$stage/lib" "$stage/data"
    for t in "${tests[@]}"; do strip -o "$stage/tests/bin/$t" "$build/tests/vulkan/$t"; done
    for t in "${ops[@]}"; do strip -o "$stage/ops/bin/$t" "$build/tests/$t"; done
    for e in train_fashion_mnist train_char_gpt; do strip -o "$stage/train/bin/$e" "$build/examples/$e"; done
    for b in gpu_bench barrier_bench async_loop_bench gpt2_small_bench; do strip -o "$stage/bench/bin/$b" "$build/bench/$b"; done
    rm -f "$carry/bin.tar.xz" "$carry/base.tar.xz"
    for part in tests ops train bench; do
      tar cf - -C "$stage/$part" bin | xz -T2 --lzma2=preset=6,dict=256MiB >"$carry/bin-$part.tar.xz"
    done
    if [ ! -f "$carry/base-lib.tar.xz" ] || [ ! -f "$carry/base-data.tar.xz" ]; then
      # Every shared library but glibc's and the Vulkan loader's (the loader and libglvnd, which
      # NVIDIA's Vulkan driver needs, come as .debs).
      ldd "$stage"/*/bin/* | awk '/=> \//{print $3}' | sort -u |
        grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libvulkan)\.so' |
        xargs -r cp -L -t "$stage/lib"
      for f in /usr/share/datasets/fashion-mnist/*.gz; do
        gunzip -c "$f" >"$stage/data/$(basename "$f" .gz)"
      done
      cp /usr/share/common-licenses/GPL-3 "$stage/data/"
      tar cf - -C "$stage" lib | xz -T1 --lzma2=preset=6,dict=64MiB >"$carry/base-lib.tar.xz"
      tar cf - -C "$stage" data | xz -T1 --lzma2=preset=6,dict=64MiB >"$carry/base-data.tar.xz"
    fi
    rm -rf "$stage"
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")"
    grep -qxF "/$carry/" "$exclude" 2>/dev/null || echo "/$carry/" >>"$exclude"
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    mkdir -p /tmp/amd64/partial
    # shellcheck disable=SC2086
    ls "$carry"/gl/libvulkan1_*.deb >/dev/null 2>&1 || (apt-get $o update >/dev/null && cd "$carry/gl" &&
      apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)
    du -sh "$carry"
    echo "now: run(command='bash bench/gpu_vs_pytorch.sh device tests', carry=['$carry/gl', '$carry/base-lib.tar.xz', '$carry/bin-tests.tar.xz'])"
    echo "then: run(command='rm -rf /tmp/kiln; bash bench/gpu_vs_pytorch.sh device train', carry=['$carry/gl', '$carry/base-lib.tar.xz', '$carry/base-data.tar.xz', '$carry/bin-train.tar.xz'])"
    echo "and: run(command='rm -rf /tmp/kiln; bash bench/gpu_vs_pytorch.sh device table', carry=['$carry/gl', '$carry/base-lib.tar.xz', '$carry/bin-bench.tar.xz'])"
    ;;
  device)
    shift
    parts=("$@")
    [ ${#parts[@]} -gt 0 ] || parts=(tests table train)
    for f in "$carry"/gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    k=/tmp/kiln
    if [ ! -d "$k" ]; then
      mkdir -p "$k"
      for a in "$carry"/bin-*.tar.xz "$carry"/base-*.tar.xz; do
        if [ -f "$a" ]; then xz -dc "$a" | tar xf - -C "$k"; fi
      done
    fi
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    export LD_LIBRARY_PATH="$k/lib:${LD_LIBRARY_PATH:-}" KILN_CACHE_DIR=/tmp/kiln-cache KILN_REQUIRE_VULKAN=1
    out=${OUT:-/tmp/kiln-out}
    mkdir -p "$out"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
    for part in "${parts[@]}"; do
      case "$part" in
        tests)
          failed=()
          for t in "${tests[@]}"; do
            if timeout 240 "$k/bin/$t" --gtest_brief=1 >"$out/tests.log.tmp" 2>&1; then
              echo "PASS $t"
            else
              echo "FAIL $t" && failed+=("$t") && tail -40 "$out/tests.log.tmp"
            fi
            cat "$out/tests.log.tmp" >>"$out/tests.log"
          done
          rm -f "$out/tests.log.tmp"
          echo "Vulkan tests on the GPU: ${#failed[@]} binaries failed: ${failed[*]:-none}"
          ;;
        ops)
          failed=()
          for t in "${ops[@]}"; do
            if KILN_DEVICE=gpu timeout 240 "$k/bin/$t" --gtest_brief=1 >"$out/ops.log.tmp" 2>&1; then
              echo "PASS gpu.$t"
            else
              echo "FAIL gpu.$t" && failed+=("$t") && tail -40 "$out/ops.log.tmp"
            fi
            cat "$out/ops.log.tmp" >>"$out/ops.log"
          done
          rm -f "$out/ops.log.tmp"
          echo "Op suites with the GPU as default device: ${#failed[@]} binaries failed: ${failed[*]:-none}"
          ;;
        table)
          python3 bench/gpu_vs_pytorch.py --kiln "$k/bin/gpu_bench" | tee "$out/table.txt" || echo "table failed"
          # Issue 10: synchronous vs asynchronous training loops (steps/s, bytes moved per step).
          KILN_BENCH_DEVICE=gpu timeout 300 "$k/bin/async_loop_bench" --benchmark_min_time=1 \
            --benchmark_out="$out/async_loop.json" --benchmark_out_format=json 2>&1 |
            tee "$out/async_loop.txt" || echo "async_loop_bench failed"
          ;;
        gemm)
          # The GPT step's float32 products, shape by shape, beside cuBLAS's.
          python3 bench/gpu_gemm_vs_pytorch.py --kiln "$k/bin/gpu_bench" --step | tee "$out/gemm.txt" ||
            echo "gemm failed"
          ;;
        barrier)
          # What a dependent dispatch costs by how the dependency is expressed (bench/gpu/barrier_bench.cpp),
          # beside kiln's own chain, replayed and through the recorder.
          timeout 300 "$k/bin/barrier_bench" --benchmark_min_time=0.3 | tee "$out/barrier.txt" ||
            echo "barrier_bench failed"
          timeout 200 "$k/bin/gpu_bench" --benchmark_filter='chain_1000_replayed|recorder_chain_1000' \
            --benchmark_repetitions=3 --benchmark_report_aggregates_only=true | tee -a "$out/barrier.txt" ||
            echo "gpu_bench chains failed"
          ;;
        gpt2)
          # Issue 31: GPT-2 small's training step and per-token decode at positions 0..960, beside
          # PyTorch: on the CPU with the host's threads, then on the GPU (Vulkan beside CUDA).
          ln -sfn "$k/bin" "$k/bench"
          PYTHONUNBUFFERED=1 timeout 280 python3 bench/gpt2_small_vs_pytorch.py --build "$k" --device gpu |
            tee "$out/gpt2_gpu.txt" || echo "gpt2 gpu failed"
          PYTHONUNBUFFERED=1 timeout 280 python3 bench/gpt2_small_vs_pytorch.py --build "$k" --threads "$(nproc)" |
            tee "$out/gpt2_cpu.txt" || echo "gpt2 cpu failed"
          ;;
        train)
          export KILN_DEVICE=gpu
          (cd /tmp && time "$k/bin/train_fashion_mnist" --model mlp --epochs 2 --data "$k/data" --out /tmp/fm) || true
          (cd /tmp && time "$k/bin/train_fashion_mnist" --model cnn --epochs 1 --data "$k/data" --out /tmp/fm-cnn) || true
          cp /tmp/fm/metrics.csv "$out/fashion_mnist_metrics.csv" || true
          # Issue 10: seconds per epoch of the MLP, eager or compiled, overlapped (async) or --sync.
          for flags in "" "--sync" "--compiled" "--compiled --sync"; do
            echo "train_fashion_mnist --model mlp --bench $flags"
            # shellcheck disable=SC2086
            (cd /tmp && timeout 120 "$k/bin/train_fashion_mnist" --model mlp --epochs 3 --data "$k/data" --bench $flags) ||
              true
          done
          (cd /tmp && time "$k/bin/train_char_gpt" --text "$k/data/GPL-3" --out /tmp/gpt --steps 300 \
            --eval-every 100) || true
          ;;
        *) echo "unknown part $part" >&2 && exit 2 ;;
      esac
    done
    ;;
  *)
    echo "usage: $0 prepare | device [tests|table|gemm|barrier|gpt2|train ...]" >&2
    exit 2
    ;;
esac
