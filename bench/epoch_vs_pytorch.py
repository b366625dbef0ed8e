#!/usr/bin/python3
"""End-to-end training epochs on Fashion-MNIST: kiln (examples/train_fashion_mnist --bench) and
PyTorch (Debian's python3-torch), side by side, on the same models, batch size, optimizer (Adam with
a per-step cosine decay), input normalization and number of threads, with the data in memory.

An epoch is every step of one pass over the 60000 training images (shuffled, drop_last): gather the
batch, uint8 -> normalized float32, forward, cross-entropy, backward, Adam, and reading the loss
back (as a progress bar does). No evaluation. kiln gathers the next batch on its DataLoader's
prefetch thread while it trains; PyTorch here gathers inline (as a DataLoader with num_workers=0).
The table shows the fastest epoch of each (the first one also pays for warm-up). Run it on an idle
machine: with two threads, PyTorch's OpenMP threads spin at every parallel region and lose many times
their speed to any competing process (measured on a 2-core machine during a compile: a
784-512-512-10 MLP forward went from 3 ms to 44 ms; OMP_WAIT_POLICY=PASSIVE brought it back to 4 ms).
--threads 1 is the figure least disturbed by other load.

usage: /usr/bin/python3 bench/epoch_vs_pytorch.py [--build build/release] [--threads 2] [--epochs 2]
       [--models mlp,lenet,cnn] [--batch-size 128]
Build kiln's side first: cmake --build build/release --target train_fashion_mnist
"""
import argparse
import gzip
import math
import os
import re
import subprocess
import sys
import time

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # as examples/train_fashion_mnist.cpp
LR = 3e-3  # the example's default


def read_idx(path):
    """An IDX file (MNIST's format, gzipped or not) as a uint8 numpy array."""
    import numpy as np

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if data[:2] != b"\0\0" or data[2] != 0x08:
        sys.exit(f"{path}: not an IDX file of uint8")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    sys.exit(f"{stem}[.gz] not found in {data_dir} (install dataset-fashion-mnist or pass --data)")


def torch_model(torch, name):
    """The models of examples/train_fashion_mnist.cpp, layer for layer."""
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    if name == "lenet":
        return nn.Sequential(
            nn.Unflatten(1, (1, 28)), nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    return nn.Sequential(
        nn.Unflatten(1, (1, 28)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def torch_epochs(name, images, labels, args):
    """Seconds of each training epoch in PyTorch."""
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torch_model(torch, name)
    x_all = torch.from_numpy(images.copy())  # (N, 28, 28) uint8
    y_all = torch.from_numpy(labels.astype("int64"))
    steps = len(x_all) // args.batch_size
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    # kiln's cosine_decay(LR, steps * epochs) per step, as a LambdaLR factor.
    total = steps * args.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for e in range(args.epochs):
        order = torch.randperm(len(x_all), generator=torch.Generator().manual_seed(e))
        start = time.perf_counter()
        for b in range(steps):
            idx = order[b * args.batch_size:(b + 1) * args.batch_size]
            x = (x_all[idx].float() * (1 / 255) - MEAN) * (1 / STD)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y_all[idx])
            loss.backward()
            opt.step()
            sched.step()
            loss.item()
        times.append(time.perf_counter() - start)
    return times, torch.__version__


def kiln_epochs(name, args):
    """Seconds of each training epoch in kiln, from the example's `epoch_seconds <e> <s>` lines."""
    exe = os.path.join(args.build, "examples", "train_fashion_mnist")
    if not os.path.exists(exe):
        sys.exit(f"{exe} not found: build it first (cmake --build {args.build} --target train_fashion_mnist)")
    env = dict(os.environ, KILN_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
    cmd = [exe, "--model", name, "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
           "--lr", str(LR), "--schedule", "cosine", "--bench", "--data", args.data]
    res = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    times = [float(m.group(1)) for m in re.finditer(r"^epoch_seconds \d+ ([0-9.]+)$", res.stdout, re.M)]
    if len(times) != args.epochs:
        sys.exit(f"unexpected output of {' '.join(cmd)}:\n{res.stdout}{res.stderr}")
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--models", default="mlp,lenet,cnn")
    ap.add_argument("--data", default=DATA_DIR)
    args = ap.parse_args()
    models = args.models.split(",")
    if any(m not in ("mlp", "lenet", "cnn") for m in models):
        sys.exit("--models: a comma-separated list of mlp, lenet, cnn")
    images = read_idx(find(args.data, "train-images-idx3-ubyte"))
    labels = read_idx(find(args.data, "train-labels-idx1-ubyte"))

    load_before = os.getloadavg()[0]
    if load_before > 0.5:
        # See the docstring: PyTorch's OpenMP threads are the first to suffer from other load.
        print(f"warning: load average {load_before:.2f}; PyTorch's OpenMP threads slow down many times "
              "when other processes compete for the cores, so figures taken now are not comparable",
              file=sys.stderr)
    rows, version = [], "?"
    for name in models:
        k = kiln_epochs(name, args)
        t, version = torch_epochs(name, images, labels, args)
        rows.append((name, k, t))
        print(f"  {name}: kiln epochs {', '.join(f'{s:.2f}' for s in k)} s; "
              f"PyTorch {', '.join(f'{s:.2f}' for s in t)} s", file=sys.stderr)
    load_after = os.getloadavg()[0]

    print(f"Fashion-MNIST training epoch ({len(images)} images, batch {args.batch_size}, Adam + cosine), "
          f"{args.threads} threads; PyTorch {version}; fastest of {args.epochs} epochs, seconds; "
          f"load average {load_before:.2f} before, {load_after:.2f} after")
    print(f"{'':8s}{'kiln':>10s}{'PyTorch':>10s}{'kiln/PyTorch':>14s}")
    for name, k, t in rows:
        print(f"{name:8s}{min(k):10.2f}{min(t):10.2f}{min(k) / min(t):14.2f}")


if __name__ == "__main__":
    main()
