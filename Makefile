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
.PHONY: help deps deps-bench demo test bench asan tsan tsan-threads fuzz format format-check clean

help:
	@echo "kiln -- make targets:"
	@echo "  make demo          build (release) and train a small CNN on Fashion-MNIST (examples/train_fashion_mnist)"
	@echo "  make test          build (release) and run all tests"
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

asan: deps
	$(call configure,asan)
	$(call build,asan)
	$(call test,asan)

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
