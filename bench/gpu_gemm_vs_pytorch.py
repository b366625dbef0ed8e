#!/usr/bin/python3
"""The small GPT's float32 products, shape by shape: kiln's GPU time for each (gpu_bench's
BM_gpu_matmul_shape under KILN_VULKAN_PROFILE=1, the split-K reduction included) beside cuBLAS's
through PyTorch on the same GPU (CUDA events around back-to-back products, TF32 off), weighted by how
many a training step has. It says which shapes the step's GEMM time is lost on. Runs on the H200
through bench/gpu_vs_pytorch.sh (`device gemm`); here (no CUDA) PyTorch runs on the CPU and kiln on
lavapipe (with KILN_VULKAN_ALLOW_CPU=1), which checks the script, not the figures. The two sides
are timed differently: kiln's figure is its dispatches' GPU timestamps, PyTorch's the CUDA events
around 20 products launched back to back (so it includes what launching them leaves between kernels).

With --step it also profiles PyTorch's own GPT step (torch.profiler over 5 steps on the GPU): its
kernels a step, their summed time, and the GEMMs' share.

usage: python3 bench/gpu_gemm_vs_pytorch.py --kiln build/release/bench/gpu_bench [--step]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer import median_ms  # noqa: E402


# Layout bits: 1 a transposed, 2 b transposed, 4 b a head view, 8 a a head view (gpu_bench.cpp).
def form(layout):
    a = ("a^T" if layout & 1 else "a") + ("'" if layout & 8 else "")
    b = ("b^T" if layout & 2 else "b") + ("'" if layout & 4 else "")
    return f"{a} @ {b}"


def kiln_shapes(exe):
    """{(m, n, k, batch, layout, count): GPU us per product} from gpu_bench."""
    env = dict(os.environ, KILN_VULKAN_PROFILE="1")
    res = subprocess.run([exe, "--benchmark_filter=^BM_gpu_matmul_shape/", "--benchmark_format=json",
                          "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true"],
                         env=env, check=True, capture_output=True, text=True)
    out = {}
    for b in json.loads(res.stdout)["benchmarks"]:
        if b.get("aggregate_name") != "median" or "gpu_us" not in b:
            continue
        args = tuple(int(x) for x in b["run_name"].split("/")[1:] if x.isdigit())
        out[args] = b["gpu_us"]
    return out


def torch_us(torch, m, n, k, batch, layout, cuda, repeats=20):
    """Time of one product in microseconds: the median of 5 runs of `repeats` back to back."""
    dev = "cuda" if cuda else "cpu"

    def operand(rows, cols, transposed, heads):
        if transposed:
            rows, cols = cols, rows
        if heads:  # the [B, 4, rows, cols] view of a [B, rows, 4, cols] array
            v = torch.rand(batch // 4, rows, 4, cols, device=dev).transpose(1, 2)
        else:
            lead = (batch // 4, 4) if layout & 12 else (batch,) if batch > 1 else ()
            v = torch.rand(*lead, rows, cols, device=dev)
        return v.transpose(-1, -2) if transposed else v

    a, b = operand(m, k, layout & 1, layout & 8), operand(k, n, layout & 2, layout & 4)
    for _ in range(3):
        a @ b
    if not cuda:
        return median_ms(lambda: [a @ b for _ in range(repeats)], 5, warmup=0) * 1e3 / repeats
    samples = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            a @ b
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / repeats)
    return statistics.median(samples)


def torch_step_profile(torch, steps=5):
    """PyTorch's GPT step (bench/gpt_vs_pytorch.py's model, AdamW) under torch.profiler."""
    from gpt_vs_pytorch import BATCH, CONTEXT, VOCAB, torch_gpt
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    gpt = torch_gpt(torch).to("cuda")
    opt = torch.optim.AdamW(gpt.parameters(), lr=3e-4, capturable=True)
    x = torch.randint(0, VOCAB, (BATCH, CONTEXT), device="cuda")
    y = torch.randint(0, VOCAB, (BATCH, CONTEXT), device="cuda")

    def step():
        opt.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(gpt(x).view(-1, VOCAB), y.view(-1)).backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    def us(e):  # device_time from PyTorch 2.4 on, cuda_time before
        return getattr(e, "device_time", None) or getattr(e, "cuda_time", 0)

    total = sum(us(e) for e in kernels) / steps
    gemm = sum(us(e) for e in kernels if "gemm" in e.name.lower() or "splitk" in e.name.lower()) / steps
    print(f"PyTorch's GPT step: {len(kernels) / steps:.0f} device operations (kernels, copies, memsets), "
          f"{total:.0f} us of them in all, {gemm:.0f} us GEMMs (and their split-K reductions)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="the gpu_bench executable")
    ap.add_argument("--step", action="store_true", help="profile PyTorch's GPT step too (CUDA only)")
    args = ap.parse_args()
    k = kiln_shapes(args.kiln)
    if not k:
        sys.exit("gpu_bench reported no GPU times (no timestamps on this device?)")
    try:
        import torch
    except ImportError:
        sys.exit(f"no PyTorch here (python3-torch); kiln alone: {k}")
    cuda = torch.cuda.is_available()
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"float32 GEMMs of the GPT step: kiln Vulkan vs PyTorch {torch.__version__} "
          f"({torch.cuda.get_device_name() if cuda else 'CPU'}), microseconds per product")
    print(f"{'M x N x K':>18s} {'batch':>5s} {'form':>12s} {'/step':>5s} {'kiln':>8s} {'peer':>8s} {'ratio':>6s}"
          f" {'kiln/step':>9s} {'peer/step':>9s} {'TFLOP/s':>8s}")
    total_k = total_p = 0.0
    for (m, n, kk, batch, layout, count), kus in sorted(k.items(), key=lambda kv: -kv[1] * kv[0][5]):
        pus = torch_us(torch, m, n, kk, batch, layout, cuda)
        total_k += count * kus
        total_p += count * pus
        tflops = 2 * m * n * kk * batch / kus * 1e-6
        print(f"{f'{m} x {n} x {kk}':>18s} {batch:5d} {form(layout):>12s} {count:5d} {kus:8.1f} {pus:8.1f}"
              f" {kus / pus:6.2f} {count * kus:9.1f} {count * pus:9.1f} {tflops:8.1f}")
    print(f"the GPT step's products in all: kiln {total_k:.0f} us, peer {total_p:.0f} us, "
          f"ratio {total_k / total_p:.2f} (count 0: not in the sum; a' b': heads read in place)")
    if args.step and cuda:
        torch_step_profile(torch)


if __name__ == "__main__":
    main()
