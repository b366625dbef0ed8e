#!/usr/bin/python3
"""One training step (forward, backward, Adam) of the 784-512-512-10 MLP and of LeNet-5, batch 128:
kiln (bench/core/train_step_bench.cpp) and PyTorch (Debian's python3-torch) on the same shapes,
optimizer and number of threads, side by side.

usage: /usr/bin/python3 bench/train_vs_pytorch.py [--build build/release] [--threads 2]
"""
import argparse

from peer import kiln_medians, median_ms


def torch_models(torch):
    nn = torch.nn
    mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    lenet = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    return {"mlp": (mlp, torch.randn(128, 784)), "lenet": (lenet, torch.randn(128, 1, 28, 28))}


def torch_times(threads, repeats=40):
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    out = {}
    for name, (model, x) in torch_models(torch).items():
        y = torch.randint(0, 10, (128,))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss.item()

        out[name] = median_ms(step, repeats)
    return out, torch.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    k = kiln_medians(args.build, "train_step_bench", args.threads, "BM_kiln_")
    k = {name.replace("_adam_step", ""): ms for name, ms in k.items()}
    t, version = torch_times(args.threads)
    print(f"Adam training step, batch 128, {args.threads} threads; PyTorch {version}; medians in ms")
    print(f"{'':10s}{'kiln':>10s}{'PyTorch':>10s}{'kiln/PyTorch':>14s}")
    for name in ("mlp", "lenet"):
        print(f"{name:10s}{k[name]:10.3f}{t[name]:10.3f}{k[name] / t[name]:14.2f}")


if __name__ == "__main__":
    main()
