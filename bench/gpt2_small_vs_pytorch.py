#!/usr/bin/python3
"""GPT-2 small (124M parameters) in kiln (bench/core/gpt2_small_bench.cpp, models::Gpt) and in
PyTorch (the same model written below, as transformers' GPT2LMHeadModel computes it: tanh GELU,
tied embeddings, a KV cache that grows by torch.cat per token) on the same threads, side by side:
- a training step: forward, backward and AdamW on a batch of 8 sequences of 256 tokens;
- greedy decoding of one token (batch 1) after p cached positions, 32 tokens from each p: equal
  times at p = 0 and p = 960 mean tokens/s stays flat over a 1k-token generation.

usage: /usr/bin/python3 bench/gpt2_small_vs_pytorch.py [--build build/bench] [--threads 2]
           [--device cpu|gpu]   (gpu: kiln on Vulkan, PyTorch on CUDA)
"""
import argparse
import math
import os
import time

from peer import kiln_medians, median_ms

VOCAB, CONTEXT, D, HEADS, LAYERS = 50257, 1024, 768, 12, 12
TRAIN_BATCH, TRAIN_CONTEXT = 8, 256
STARTS, DECODE_TOKENS = (0, 256, 512, 768, 960), 32


def torch_gpt2(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.c_attn, self.attn_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.c_fc, self.mlp_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x, past=None):
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
            q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
            if past is not None:
                k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(D // HEADS)
            if t > 1:
                mask = torch.ones(t, k.shape[2], dtype=torch.bool, device=x.device).triu(k.shape[2] - t + 1)
                att = att.masked_fill(mask, float("-inf"))
            y = att.softmax(-1) @ v
            x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, D))
            x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
            return x, (k, v)

    class Gpt2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(CONTEXT, D)
            self.h = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln_f = nn.LayerNorm(D)

        def forward(self, idx, past=None):
            start = 0 if past is None else past[0][0].shape[2]
            x = self.wte(idx) + self.wpe(torch.arange(start, start + idx.shape[1], device=idx.device))
            cache = []
            for i, block in enumerate(self.h):
                x, kv = block(x, None if past is None else past[i])
                cache.append(kv)
            return self.ln_f(x) @ self.wte.weight.t(), cache

    return Gpt2()


def torch_figures(threads, device):
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    dev = "cuda" if device == "gpu" else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    model = torch_gpt2(torch).to(dev)
    x = torch.randint(0, VOCAB, (TRAIN_BATCH, TRAIN_CONTEXT), device=dev)
    y = torch.randint(0, VOCAB, (TRAIN_BATCH, TRAIN_CONTEXT), device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        logits, _ = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
        loss.backward()
        opt.step()
        return loss.item()

    out = {"train_step": median_ms(step, 3, warmup=1)}
    del opt
    model.eval()
    with torch.no_grad():
        for p in STARTS:
            past = None
            nxt = torch.randint(0, VOCAB, (1, 1), device=dev)
            if p > 0:
                logits, past = model(torch.randint(0, VOCAB, (1, p), device=dev))
                nxt = logits[:, -1:].argmax(-1)
            sync()
            t0 = time.perf_counter()
            for _ in range(DECODE_TOKENS):
                logits, past = model(nxt, past)
                nxt = logits[:, -1:].argmax(-1)
            sync()
            out[f"decode {p}"] = (time.perf_counter() - t0) * 1e3 / DECODE_TOKENS
    return out, torch.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    args = ap.parse_args()
    if args.device == "gpu":
        os.environ["KILN_DEVICE"] = "gpu"
    raw = kiln_medians(args.build, "gpt2_small_bench", args.threads, "BM_kiln_gpt2_small_", repetitions=3,
                       keep_args=True)
    # Google Benchmark's time is per iteration: one token for decode.
    k = {"train_step": raw["train_step"], **{f"decode {p}": raw[f"decode/{p}"] for p in STARTS}}
    t, version = torch_figures(args.threads, args.device)
    print(f"GPT-2 small on {args.device}, {args.threads} threads; PyTorch {version}; medians in ms "
          f"(train step: batch {TRAIN_BATCH} x {TRAIN_CONTEXT}; decode p: one token after p cached positions)")
    first, last = k[f"decode {STARTS[0]}"], k[f"decode {STARTS[-1]}"]
    print(f"{'measure':>12s}{'kiln':>10s}{'PyTorch':>10s}{'kiln/PyTorch':>14s}")
    for name in t:
        kv = k[name]
        print(f"{name:>12s}{kv:10.1f}{t[name]:10.1f}{kv / t[name]:14.2f}")
    print(f"kiln tokens/s: {1e3 / first:.1f} at position {STARTS[0]}, {1e3 / last:.1f} at {STARTS[-1]} "
          f"(ratio {first / last:.2f})")


if __name__ == "__main__":
    main()
