#!/usr/bin/python3
"""The PyTorch CPU baseline for `trident bench`: the same GPT-2 (learned
positions, pre-LayerNorm, fused QKV, causal attention, tanh GELU, MLP 4x, tied
LM head, vocab padded to a multiple of 128), the same batch and the same AdamW
(decay on matrices only, grad clipping), on synthetic tokens.

Uses Debian's python3-torch (apt-get install python3-torch); run it with
OMP_WAIT_POLICY=PASSIVE, its fastest setting on these machines, e.g.
    OMP_WAIT_POLICY=PASSIVE scripts/bench_torch.py configs/bench-gpt.json --threads 2
Prints the same figures as `trident bench`, with a last line of JSON.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.H, C // self.H).transpose(1, 2)
        k = k.view(B, T, self.H, C // self.H).transpose(1, 2)
        v = v.view(B, T, self.H, C // self.H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, T, Vp):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        # GPT-2 init, as Trident's: std 0.02, residual projections 0.02/sqrt(2L), zero biases
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    m, t = cfg["model"], cfg["train"]
    L, H, C, T, V = m["n_layer"], m["n_head"], m["n_embd"], m["seq_len"], m["vocab_size"]
    B = t["global_batch"]
    Vp = (V + 127) // 128 * 128
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = GPT(L, H, C, T, Vp)
    decay = [p for p in model.parameters() if p.dim() >= 2 and p is not model.wte.weight and p is not model.wpe.weight]
    other = [p for p in model.parameters() if not any(p is q for q in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(1)
    times = []
    for s in range(a.steps + 1):
        idx = torch.randint(0, V, (B, T), generator=g)
        tgt = torch.randint(0, V, (B, T), generator=g)
        t0 = time.perf_counter()
        loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    print("step times (ms):", " ".join("%.0f" % (x * 1e3) for x in times))
    med = statistics.median(times[1:])  # the first step warms up
    N = sum(p.numel() for p in model.parameters()) - (Vp - V) * C - T * C
    flops_tok = 6 * N + 12 * L * C * T
    tps = B * T / med
    print("torch %s: %d threads, step %.1f ms, %.0f tokens/s, %.1f GFLOP/s" %
          (torch.__version__, a.threads, med * 1e3, tps, flops_tok * tps / 1e9))
    print(json.dumps({"impl": "torch", "threads": a.threads, "step_ms": round(med * 1e3, 2),
                      "tokens_per_s": round(tps, 1), "gflops": round(flops_tok * tps / 1e9, 2)}))


if __name__ == "__main__":
    main()
