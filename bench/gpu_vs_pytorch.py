#!/usr/bin/python3
"""Issue 9's GPU figures: kiln's Vulkan backend (bench/gpu/gpu_bench.cpp) beside PyTorch on the same
GPU, in one table of kiln, peer, ratio and target. Runs on the H200 through bench/gpu_vs_pytorch.sh;
here (no CUDA) the peer runs on the CPU and kiln on lavapipe with small sizes, which checks the
script, not the figures.

usage: python3 bench/gpu_vs_pytorch.py --kiln build/bench/bench/gpu_bench [--small]
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_vs_pytorch import BATCH, CONTEXT, VOCAB, torch_gpt  # noqa: E402


def kiln_figures(exe, small):
    env = dict(os.environ)
    if small:
        env["KILN_GPU_BENCH_SMALL"] = "1"
    res = subprocess.run([exe, "--benchmark_format=json", "--benchmark_repetitions=3",
                          "--benchmark_report_aggregates_only=true"],
                         env=env, check=True, capture_output=True, text=True)
    out = {}
    for b in json.loads(res.stdout)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        parts = b["run_name"].split("/")
        name = parts[0].replace("BM_gpu_", "")
        if name == "recorder_chain_1000" and parts[1] == "0":
            name += "_independent"
        if name == "recorder_chain_1000_addressed" and parts[1:3] != ["1", "0"]:
            continue  # the dependent chain of the minimal kernel is the one to report
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        out[name] = {"ms": b["real_time"] * scale, **{k: v for k, v in b.items() if "/" in k}}
    return out


def timed(fn, sync, repeats=20, warmup=3):
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t)
    samples.sort()
    return samples[len(samples) // 2]


def graph_step(torch, cuda, step):
    """`step` captured once as a CUDA graph and replayed (the peer of a recorded, replayed step)."""
    if not cuda:
        return step
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    return g.replay


def torch_figures(small):
    import torch

    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    out = {"device": torch.cuda.get_device_name() if cuda else "cpu", "version": torch.__version__}

    n = 512 if small else 4096
    a, b = torch.rand(n, n, device=dev), torch.rand(n, n, device=dev)
    out["matmul_f32"] = 2 * n**3 / timed(lambda: a @ b, sync) * 1e-12
    if cuda:
        a16, b16 = a.half(), b.half()
        out["matmul_f16"] = 2 * n**3 / timed(lambda: a16 @ b16, sync) * 1e-12
    elems = (1 << 24 if small else 1 << 30) // 4
    x, y = torch.rand(elems, device=dev), torch.rand(elems, device=dev)
    dst = torch.empty_like(x)
    out["copy_1gib"] = 8 * elems / timed(lambda: dst.copy_(x), sync) * 1e-9
    out["add_1gib"] = 12 * elems / timed(lambda: torch.add(x, y, out=dst), sync) * 1e-9
    v = torch.rand(1024, device=dev)

    def chain():
        z = v
        for i in range(1000):
            z = z * 0.999 if i % 2 else z + 0.001
        return z

    out["chain_1000"] = timed(chain, sync, repeats=10) / 1000 * 1e6
    # The same 1000 kernels captured once as a CUDA graph and replayed: the peer of kiln's replayed
    # chain (what a dependent kernel costs the GPU with no host work).
    out["chain_1000_graph"] = timed(graph_step(torch, cuda, chain), sync, repeats=10) / 1000 * 1e6

    # MLP 784-512-512-10, Adam, batch 128.
    nn = torch.nn
    mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(dev)
    opt = torch.optim.Adam(mlp.parameters(), lr=1e-3, capturable=cuda)
    xb, yb = torch.rand(128, 784, device=dev), torch.randint(0, 10, (128,), device=dev)

    def mlp_step():
        opt.zero_grad(set_to_none=False)
        nn.functional.cross_entropy(mlp(xb), yb).backward()
        opt.step()

    out["mlp_adam_step"] = timed(graph_step(torch, cuda, mlp_step), sync) * 1e3

    batch, context = (4, 32) if small else (BATCH, CONTEXT)
    gpt = torch_gpt(torch).to(dev)
    gopt = torch.optim.AdamW(gpt.parameters(), lr=3e-4, capturable=cuda)
    xi, yi = (torch.randint(0, VOCAB, (batch, context), device=dev) for _ in range(2))

    def gpt_step():
        gopt.zero_grad(set_to_none=False)
        nn.functional.cross_entropy(gpt(xi).view(-1, VOCAB), yi.view(-1)).backward()
        gopt.step()

    try:
        out["gpt_adamw_step"] = timed(graph_step(torch, cuda, gpt_step), sync, repeats=10) * 1e3
    except RuntimeError as e:  # e.g. an op that a CUDA graph cannot capture
        print(f"GPT step not captured ({e}); eager instead", file=sys.stderr)
        out["gpt_adamw_step"] = timed(gpt_step, sync, repeats=10) * 1e3
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="the gpu_bench executable")
    ap.add_argument("--small", action="store_true", help="small sizes (lavapipe / CPU smoke test)")
    args = ap.parse_args()
    k = kiln_figures(args.kiln, args.small)
    print("kiln:", json.dumps(k), flush=True)
    try:
        t = torch_figures(args.small)
    except ImportError:
        sys.exit(f"no PyTorch here (python3-torch); kiln alone: {json.dumps(k, indent=1)}")
    print(f"kiln Vulkan vs PyTorch {t['version']} on {t['device']}{' (small sizes)' if args.small else ''}")
    rows = [  # name, kiln figure, peer figure, unit, higher is better, target
        ("GEMM 4096^3 float32", k.get("matmul_f32", {}).get("TFLOP/s"), t["matmul_f32"], "TFLOP/s", True,
         ">= 0.8x cuBLAS, TF32 off"),
        ("GEMM 4096^3 float16", k.get("matmul_f16", {}).get("TFLOP/s"), t.get("matmul_f16"), "TFLOP/s", True,
         ">= 0.35x cuBLAS"),
        ("add 1 GiB vs d2d copy", k.get("add_1gib", {}).get("GB/s"), t["copy_1gib"], "GB/s", True, ">= 0.9x"),
        ("dispatch, 1000-op chain", k.get("chain_1000", {}).get("us/op"), t["chain_1000"], "us/op", False,
         "<= 2 us (peer: eager)"),
        ("  same, captured, replayed", k.get("chain_1000_replayed", {}).get("us/op"),
         t["chain_1000_graph"], "us/op", False, "<= 2 us (peer: CUDA graph)"),
        ("  same, vk::Recorder alone", k.get("recorder_chain_1000", {}).get("us/op"), t["chain_1000"], "us/op",
         False, "<= 2 us (no graph: a recording's cost)"),
        ("MLP Adam step, eager", k.get("mlp_adam_step", {}).get("ms"), t["mlp_adam_step"], "ms", False,
         "<= 1.3x (peer: CUDA graph)"),
        ("MLP Adam step, compiled", k.get("mlp_adam_step_compiled", {}).get("ms"), t["mlp_adam_step"], "ms",
         False, "<= 1.3x (peer: CUDA graph)"),
        ("GPT AdamW step, eager", k.get("gpt_adamw_step", {}).get("ms"), t["gpt_adamw_step"], "ms", False,
         "<= 1.3x (peer: CUDA graph)"),
        ("GPT AdamW step, compiled", k.get("gpt_adamw_step_compiled", {}).get("ms"), t["gpt_adamw_step"], "ms",
         False, "<= 1.3x (peer: CUDA graph)"),
    ]
    print(f"{'':26s}{'kiln':>10s}{'peer':>10s}{'unit':>9s}{'kiln/peer':>11s}  target")
    for name, kv, pv, unit, _, target in rows:
        ks = f"{kv:10.3g}" if kv is not None else f"{'-':>10s}"
        ps = f"{pv:10.3g}" if pv is not None else f"{'-':>10s}"
        ratio = f"{kv / pv:11.2f}" if kv is not None and pv else f"{'-':>11s}"
        print(f"{name:26s}{ks}{ps}{unit:>9s}{ratio}  {target}")


if __name__ == "__main__":
    main()
