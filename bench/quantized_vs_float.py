#!/usr/bin/python3
"""Issue 32's CPU figures for quantized weights, side by side on the same threads, with ratios:
- quantized_matmul (int8, int4; groups of 64) on a 4096 x 4096 weight against the float32 product,
  OpenBLAS's cblas_sgemm called directly and kiln's float32 linear, at batch 1 (memory-bound) and 64
  (bench/core/quantized_matmul_bench.cpp);
- GPT-2 small (124M parameters) decoding one token after 0 and 512 cached positions in float32,
  int8 and int4 (nn::quantize), with its weights' size (bench/core/gpt2_small_bench.cpp).

usage: /usr/bin/python3 bench/quantized_vs_float.py [--build build/bench] [--threads 2]
"""
import argparse
import json
import os
import subprocess

from peer import kiln_medians


def weights_mb(build, threads):
    """The weights' size each decode_quantized benchmark reports, by bits."""
    exe = os.path.join(build, "bench", "gpt2_small_bench")
    env = dict(os.environ, KILN_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    res = subprocess.run([exe, "--benchmark_format=json", "--benchmark_filter=decode_quantized/.*/0/"], env=env,
                         check=True, capture_output=True, text=True)
    return {int(b["run_name"].split("/")[1]): b["weights_MB"] for b in json.loads(res.stdout)["benchmarks"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/bench")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    mm = kiln_medians(args.build, "quantized_matmul_bench", args.threads, "BM_", repetitions=3, keep_args=True)
    print(f"quantized_matmul, 4096 x 4096 weight, {args.threads} threads; medians in ms; ratio: the float32 "
          "cblas_sgemm time over this one")
    print(f"{'product':>28s}{'batch 1':>10s}{'ratio':>8s}{'batch 64':>10s}{'ratio':>8s}")
    rows = [("cblas_sgemm float32", "cblas_sgemm_f32/{}"), ("kiln linear float32", "kiln_linear_f32/{}"),
            ("kiln quantized_matmul int8", "kiln_quantized_matmul/{}/8"),
            ("kiln quantized_matmul int4", "kiln_quantized_matmul/{}/4")]
    for label, key in rows:
        line = f"{label:>28s}"
        for m in (1, 64):
            t = mm[key.format(m)]
            line += f"{t:10.2f}{mm['cblas_sgemm_f32/' + str(m)] / t:8.2f}"
        print(line)

    dec = kiln_medians(args.build, "gpt2_small_bench", args.threads, "BM_kiln_gpt2_small_", repetitions=3,
                       filter="decode_quantized", keep_args=True)
    sizes = weights_mb(args.build, args.threads)
    print(f"\nGPT-2 small greedy decoding, {args.threads} threads; ms per token; ratio: float32's time over "
          "this one (the tokens/s gain)")
    print(f"{'weights':>10s}{'MB':>8s}{'p = 0':>9s}{'ratio':>8s}{'p = 512':>9s}{'ratio':>8s}")
    for bits, label in ((32, "float32"), (8, "int8"), (4, "int4")):
        line = f"{label:>10s}{sizes[bits]:8.0f}"
        for p in (0, 512):
            t = dec[f"decode_quantized/{bits}/{p}"]
            line += f"{t:9.2f}{dec[f'decode_quantized/32/{p}'] / t:8.2f}"
        print(line)


if __name__ == "__main__":
    main()
