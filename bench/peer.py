"""Helpers shared by the scripts that set kiln's benchmark figures beside PyTorch's."""
import json
import os
import statistics
import subprocess
import sys
import time


def median_ms(fn, repeats, warmup=5):
    """Median wall time of fn() in milliseconds, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


def kiln_medians(build, program, threads, prefix, repetitions=5, keep_args=False, filter=None):
    """Runs build/bench/<program> on `threads` threads (only the benchmarks matching `filter`, a
    --benchmark_filter regex, when given); returns {benchmark name without prefix: median ms} (with
    keep_args, the benchmark's arguments stay in its name: "decode/256", "decode_quantized/4/512")."""
    exe = os.path.join(build, "bench", program)
    if not os.path.exists(exe):
        sys.exit(f"{exe} not found: build with `make bench` (or -DKILN_BENCH=ON) first")
    env = dict(os.environ, KILN_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    res = subprocess.run(
        [exe, "--benchmark_format=json", f"--benchmark_repetitions={repetitions}",
         "--benchmark_report_aggregates_only=true"] + ([f"--benchmark_filter={filter}"] if filter else []),
        env=env, check=True, capture_output=True, text=True,
    )
    out = {}
    for b in json.loads(res.stdout)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            parts = b["run_name"].split("/")
            name = parts[0].replace(prefix, "")
            if keep_args:
                name = "/".join([name] + [p for p in parts[1:] if p.isdigit()])
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
            out[name] = b["real_time"] * scale
    return out
