#!/usr/bin/python3
"""One GPT training step (forward, backward, AdamW) at 4 layers, d_model 256, 4 heads, context 128,
batch 32, vocabulary 65: kiln (bench/core/gpt_step_bench.cpp, models::Gpt) and PyTorch (Debian's
python3-torch, the same nanoGPT-style model written below) on the same threads, side by side.

usage: /usr/bin/python3 bench/gpt_vs_pytorch.py [--build build/release] [--threads 2]
"""
import argparse
import math

from peer import kiln_medians, median_ms

VOCAB, CONTEXT, D, HEADS, LAYERS, BATCH = 65, 128, 256, 4, 4, 32


def torch_gpt(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.c_attn, self.attn_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.c_fc, self.mlp_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
            q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(D // HEADS)
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
            x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, D))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(CONTEXT, D)
            self.h = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln_f, self.lm_head = nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return Gpt()


def torch_ms(threads, repeats=10):
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch_gpt(torch)
    x = torch.randint(0, VOCAB, (BATCH, CONTEXT))
    y = torch.randint(0, VOCAB, (BATCH, CONTEXT))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x).view(-1, VOCAB), y.view(-1))
        loss.backward()
        opt.step()
        return loss.item()

    return median_ms(step, repeats, warmup=2), torch.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    k = kiln_medians(args.build, "gpt_step_bench", args.threads, "BM_kiln_")["gpt_adamw_step"]
    t, version = torch_ms(args.threads)
    print(f"GPT AdamW training step (L={LAYERS}, d={D}, heads={HEADS}, ctx={CONTEXT}, batch={BATCH}), "
          f"{args.threads} threads; PyTorch {version}; medians in ms")
    print(f"{'kiln':>10s}{'PyTorch':>10s}{'kiln/PyTorch':>14s}")
    print(f"{k:10.1f}{t:10.1f}{k / t:14.2f}")


if __name__ == "__main__":
    main()
