# Thin wrapper over scripts/install-deps.sh and the CMake presets (CMakePresets.json). Every target
# installs what is missing, configures, builds and runs.
#   make demo | test | bench | asan | tsan | tsan-threads | fuzz | format | format-check | clean
# Variables: JOBS (parallel build and test jobs; default: all cores), WERROR=ON (turn compiler
# warnings into errors, as CI does), CMAKE_ARGS (extra configure arguments).

JOBS ?= $(shell nproc 2>/dev/null || echo 2)
WERROR ?= OFF
CMAKE_ARGS ?=

# Lets builds of several clones share one ccache (the release build has no -g, so paths in debug
# info do not get in the way).
export CCACHE_BASEDIR ?= $(CURDIR)
# Sanitizer builds carry -g; without this the build directory is hashed and a fresh clone (as in
# CI) misses the cache. Debug info then names the directory that first built the object.
export CCACHE_NOHASHDIR ?= 1

configure = cmake --preset $(1) -DCMAKE_COMPILE_WARNING_AS_ERROR=$(WERROR) $(CMAKE_ARGS)
build = cmake --build --preset $(1) -j $(JOBS)
test = ctest --preset $(1) -j $(JOBS)

.DEFAULT_GOAL := help
.PHONY: help deps deps-bench demo test isa bench asan tsan tsan-threads fuzz format format-check clean

help:
	@echo "kiln -- make targets:"
	@echo "  make demo          build (release) and train a small CNN on Fashion-MNIST (examples/train_fashion_mnist)"
	@echo "  make test          build (release) and run all tests"
	@echo "  make isa           build (release), run the elementwise suites as a host without AVX-512 does"
	@echo "  make bench         build (release, KILN_BENCH=ON) and run all benchmarks"
	@echo "  make asan          build with AddressSanitizer + UBSan and run all tests"
	@echo "  make tsan          build with ThreadSanitizer and run all tests"
	@echo "  make tsan-threads  build and run only the concurrency tests with ThreadSanitizer (CI)"
	@echo "  make fuzz          build the file-loader fuzz targets (clang, libFuzzer) and run each FUZZ_SECONDS"
	@echo "  make format        clang-format every .h/.cpp in place"
	@echo "  make format-check  fail if a .h/.cpp is not clang-formatted"
	@echo "  make clean         remove build/"
	@echo "Each installs missing Debian packages first (scripts/install-deps.sh)."
	@echo "Variables: JOBS=$(JOBS) WERROR=$(WERROR) CMAKE_ARGS=$(CMAKE_ARGS)"

deps:
	scripts/install-deps.sh

deps-bench:
	scripts/install-deps.sh --bench

demo: deps
	$(call configure,release)
	$(call build,release) --target train_fashion_mnist
	build/release/examples/train_fashion_mnist --model cnn --epochs 3 --out build/fashion_mnist_run

test: deps
	$(call configure,release)
	$(call build,release)
	$(call test,release)

bench: deps-bench
	$(call configure,release) -DKILN_BENCH=ON
	$(call build,release)
	$(call build,release) --target run_benchmarks
	/usr/bin/python3 bench/mlp_vs_pytorch.py --build build/release --threads 2
	/usr/bin/python3 bench/train_vs_pytorch.py --build build/release --threads 2

# Under the sanitizers the op suites' second pass with the GPU as default device (the gpu.* tests)
# is left out: it doubles the run on lavapipe, whose JIT is slow in an instrumented process, and the
# host code it reaches is the tests/vulkan suites' (which still run). `make test` runs that pass.
asan: deps
	$(call configure,asan)
	$(call build,asan)
	$(call test,asan) -E '^gpu\.'

tsan: deps
	$(call configure,tsan)
	$(call build,tsan)
	$(call test,tsan)

# The concurrency tests under ThreadSanitizer, as CI runs them: only their binaries are built (the
# library and the concurrency tests, where `make tsan` builds everything) and any report fails the run
# (halt_on_error). docs/threading.md says what they cover. array_test runs only its thread tests:
# its million-node graphs take half a minute under TSan and have one thread.
TSAN_OPTIONS_CI = halt_on_error=1 second_deadlock_stack=1 history_size=4
tsan-threads: deps
	$(call configure,tsan)
	$(call build,tsan) --target threads_test array_test materialized_module_test layers_attention_test data_loader_test async_eval_test vulkan_runtime_test gpu_eval_test gpu_capture_test gpu_async_test
	TSAN_OPTIONS="$(TSAN_OPTIONS_CI)" build/tsan/tests/threads_test
	TSAN_OPTIONS="$(TSAN_OPTIONS_CI)" build/tsan/tests/materialized_module_test
	TSAN_OPTIONS="$(TSAN_OPTIONS_CI)" build/tsan/tests/layers_attention_test
	TSAN_OPTIONS="$(TSAN_OPTIONS_CI)" build/tsan/tests/data_loader_test
	TSAN_OPTIONS="$(TSAN_OPTIONS_CI)" build/tsan/tests/async_eval_test
	KILN_VULKAN_ALLOW_CPU=1 TSAN_OPTIONS="$(TSAN_OPTIONS_CI)" build/tsan/tests/vulkan/vulkan_runtime_test
	KILN_VULKAN_ALLOW_CPU=1 TSAN_OPTIONS="$(TSAN_OPTIONS_CI)" build/tsan/tests/vulkan/gpu_eval_test
	KILN_VULKAN_ALLOW_CPU=1 TSAN_OPTIONS="$(TSAN_OPTIONS_CI)" build/tsan/tests/vulkan/gpu_capture_test --gtest_filter='GpuCapture.Threads*'
	KILN_VULKAN_ALLOW_CPU=1 TSAN_OPTIONS="$(TSAN_OPTIONS_CI)" build/tsan/tests/vulkan/gpu_async_test --gtest_filter='-*Overlaps*'
	KILN_DEVICE=gpu KILN_VULKAN_ALLOW_CPU=1 TSAN_OPTIONS="$(TSAN_OPTIONS_CI)" build/tsan/tests/async_eval_test --gtest_filter='-*Overlaps*'
	TSAN_OPTIONS="$(TSAN_OPTIONS_CI)" build/tsan/tests/array_test --gtest_filter='ArrayThreads.*'

# The elementwise suites again as a host without AVX-512 runs them (CI's isa phase, after make test):
# a result of kiln must not depend on the host's vector extensions. On the CPU, under valgrind,
# which reports no AVX-512 to the program, so the target_clones resolver picks the AVX2 loops
# (core/cpu/simd.h; the sanitizer builds run the baseline loops). On lavapipe, with Mesa's
# GALLIUM_OVERRIDE_CPU_CAPS=avx, so its JIT emits AVX2 code: that reproduced the AVX2-only host's
# round of doubles (0.5, 1.5, 2.5 -> 0, 1, 2) that LP_NATIVE_VECTOR_WIDTH did not. Mesa's shader
# cache is off so no kernel compiled for the host's own extensions is reused.
ISA_CPU_SUITES = unary_test binary_test ternary_test fused_norm_test fusion_tiles_test fused_adam_test quantized_test
ISA_GPU_SUITES = unary_test binary_test ternary_test vulkan/gpu_float64_math_test vulkan/elementwise_kernel_test
isa: deps
	$(call configure,release)
	$(call build,release)
	printf '#include <stdio.h>\nint main(void) { __builtin_cpu_init(); int v3 = __builtin_cpu_supports("x86-64-v3"), v4 = __builtin_cpu_supports("avx512f"); printf("isa: under valgrind x86-64-v3 %%d, avx512f %%d\\n", !!v3, !!v4); return !(v3 && !v4); }\n' | cc -x c - -o build/release/isa_probe
	valgrind --tool=none -q build/release/isa_probe  # the AVX2 loops, not the baseline ones, are chosen
	GALLIUM_OVERRIDE_CPU_CAPS=avx GALLIUM_DUMP_CPU=1 KILN_DEVICE=gpu KILN_VULKAN_ALLOW_CPU=1 \
	  build/release/tests/ternary_test --gtest_filter='Where.SelectsWithBroadcasting' 2>&1 | grep -q 'has_avx512f = 0'
	set -e; for t in $(ISA_CPU_SUITES); do \
	  echo "isa: $$t on the CPU without AVX-512 (valgrind)"; \
	  valgrind --tool=none --error-exitcode=1 -q build/release/tests/$$t --gtest_brief=1; \
	done
	set -e; for t in $(ISA_GPU_SUITES); do \
	  echo "isa: $$t on lavapipe without AVX-512"; \
	  GALLIUM_OVERRIDE_CPU_CAPS=avx MESA_SHADER_CACHE_DISABLE=true KILN_DEVICE=gpu KILN_VULKAN_ALLOW_CPU=1 \
	    build/release/tests/$$t --gtest_brief=1; \
	done

# Each fuzz/*_fuzz.cpp target first writes its seed corpus (valid files, KILN_FUZZ_WRITE_SEEDS) into
# build/fuzz/corpus/<target>, then fuzzes from it; any crash, sanitizer report or leak fails the run.
FUZZ_SECONDS ?= 60
fuzz: deps
	$(call configure,fuzz)
	$(call build,fuzz)
	set -e; for target in build/fuzz/fuzz/*_fuzz; do \
	  name=$$(basename $$target); corpus=build/fuzz/corpus/$$name; mkdir -p $$corpus; \
	  KILN_FUZZ_WRITE_SEEDS=$$corpus $$target; \
	  echo "fuzz: $$name for $(FUZZ_SECONDS) s from $$(ls $$corpus | wc -l) inputs"; \
	  UBSAN_OPTIONS=print_stacktrace=1 $$target -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	    -artifact_prefix=build/fuzz/$$name- $$corpus; \
	done

SOURCES = find . \( -path './build*' -o -path './.*' \) -prune -o \
	-type f \( -name '*.h' -o -name '*.cpp' \) -print0

format:
	$(SOURCES) | xargs -0 -r clang-format -i

format-check:
	$(SOURCES) | xargs -0 -r clang-format --dry-run -Werror

clean:
	rm -rf build
