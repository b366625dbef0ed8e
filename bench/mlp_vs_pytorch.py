#!/usr/bin/python3
"""Forward + backward of a 784-512-512-10 MLP at batch 128: kiln (bench/core/mlp_bench.cpp) and
PyTorch (Debian's python3-torch) on the same shapes and the same number of threads, side by side.

usage: /usr/bin/python3 bench/mlp_vs_pytorch.py (Debian's python, which has python3-torch)
      bench/mlp_vs_pytorch.py [--build build/release] [--threads 2]
"""
import argparse

from peer import kiln_medians, median_ms


def torch_times(threads, repeats=50):
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )
    x = torch.randn(128, 784)
    y = torch.randint(0, 10, (128,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def fwd():
        with torch.no_grad():
            return loss_fn(model(x), y)

    def fwd_bwd():
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss

    out = {name: median_ms(fn, repeats) for name, fn in (("forward", fwd), ("forward_backward", fwd_bwd))}
    return out, torch.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    k = kiln_medians(args.build, "mlp_bench", args.threads, "BM_kiln_mlp_")
    t, version = torch_times(args.threads)
    print(f"MLP 784-512-512-10, batch 128, {args.threads} threads; PyTorch {version}; medians in ms")
    print(f"{'':18s}{'kiln':>10s}{'PyTorch':>10s}{'kiln/PyTorch':>14s}")
    for name in ("forward", "forward_backward"):
        print(f"{name:18s}{k[name]:10.3f}{t[name]:10.3f}{k[name] / t[name]:14.2f}")


if __name__ == "__main__":
    main()
