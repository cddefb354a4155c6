#!/usr/bin/python3
"""The PyTorch baseline for `trident bench`: the same GPT-2 (learned
positions, pre-LayerNorm, fused QKV, causal attention, tanh GELU, MLP 4x, tied
LM head, vocab padded to a multiple of 128), the same batch and the same AdamW
(decay on matrices only, grad clipping), on synthetic tokens.

--arch llama (the default when the config's model.arch is llama): the same
Llama as Trident's (model/llama.c), written as Hugging Face's LlamaModel is:
RMSNorm (fp32 statistics), rotate-half RoPE (rope_theta, no scaling),
grouped-query attention (K/V of n_kv_head heads, repeated per query group for
the product as HF's repeat_kv does), SwiGLU MLP of ffn_hidden, no biases, an
untied LM head (tie_embeddings true ties it); Trident's init (0.02, o_proj and
down_proj 0.02/sqrt(2L), norms 1) and decay (linears and lm_head only), e.g.
    OMP_WAIT_POLICY=PASSIVE scripts/bench_torch.py configs/bench-llama.json --threads 2

On the CPU (the default) it uses Debian's python3-torch (apt-get install
python3-torch); run it with OMP_WAIT_POLICY=PASSIVE, its fastest setting on
these machines, e.g.
    OMP_WAIT_POLICY=PASSIVE scripts/bench_torch.py configs/bench-gpt.json --threads 2
On a GPU, nanoGPT-style (scripts/bench_gpu.sh runs it next to `trident bench
--device cuda`):
    scripts/bench_torch.py configs/bench-gpt2-124m.json --device cuda --compile --peak-tflops 989
with bf16 autocast when the config's train.precision is bf16 (or --precision
bf16), fused AdamW, the causal attention through
F.scaled_dot_product_attention (--attn naive: the explicit softmax of the CPU
runs), and fp32 matmuls without TF32 (as Trident's) when the precision is
fp32. --compile wraps the model in torch.compile; the first --warmup steps
(default 1, 3 with --compile) are not counted.
Prints the same figures as `trident bench`, with a last line of JSON; MFU
(model FLOPs/s over --peak-tflops) when a peak is given.
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
    def __init__(self, C, H, sdpa=False):
        super().__init__()
        self.H = H
        self.sdpa = sdpa
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
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, T, Vp, sdpa=False):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, sdpa) for _ in range(L))
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
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def rms_norm(x, w, eps):
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x  # 16-bit: fp32 statistics, as HF
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, C, H, KV, Fh, eps, sdpa=False):
        super().__init__()
        self.H, self.KV, self.HS, self.eps, self.sdpa = H, KV, C // H, eps, sdpa
        self.input_layernorm = nn.Parameter(torch.ones(C))
        self.q_proj = nn.Linear(C, C, bias=False)
        self.k_proj = nn.Linear(C, KV * self.HS, bias=False)
        self.v_proj = nn.Linear(C, KV * self.HS, bias=False)
        self.o_proj = nn.Linear(C, C, bias=False)
        self.post_attention_layernorm = nn.Parameter(torch.ones(C))
        self.gate_proj = nn.Linear(C, Fh, bias=False)
        self.up_proj = nn.Linear(C, Fh, bias=False)
        self.down_proj = nn.Linear(Fh, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = rms_norm(x, self.input_layernorm, self.eps)
        q = self.q_proj(h).view(B, T, self.H, self.HS).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.KV, self.HS).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.KV, self.HS).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.H // self.KV
        if rep > 1:  # HF's repeat_kv: query head i reads KV head i // rep
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.HS))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        x = x + self.o_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        h = rms_norm(x, self.post_attention_layernorm, self.eps)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, L, H, KV, C, Fh, T, Vp, theta, eps, tied, sdpa=False):
        super().__init__()
        self.eps, self.tied = eps, tied
        self.embed_tokens = nn.Embedding(Vp, C)
        self.layers = nn.ModuleList(LlamaBlock(C, H, KV, Fh, eps, sdpa) for _ in range(L))
        self.norm = nn.Parameter(torch.ones(C))
        self.lm_head = None if tied else nn.Linear(C, Vp, bias=False)
        HS = C // H
        inv = 1.0 / theta ** (torch.arange(0, HS, 2, dtype=torch.float32) / HS)
        ang = torch.outer(torch.arange(T, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)  # rotate-half: channel i pairs with i + HS/2
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        for name, p in self.named_parameters():  # Trident's init (model/gpt.c build_llama_table)
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        for b in self.layers:
            x = b(x, cos, sin)
        x = rms_norm(x, self.norm, self.eps)
        logits = x @ self.embed_tokens.weight.t() if self.tied else self.lm_head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default=None,
                    help="default: the config's train.precision (fp32 when absent)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--attn", choices=["sdpa", "naive"], default=None,
                    help="causal attention: F.scaled_dot_product_attention (default on cuda) or explicit softmax")
    ap.add_argument("--warmup", type=int, default=None, help="steps not counted (default 1, 3 with --compile)")
    ap.add_argument("--arch", choices=["gpt2", "llama"], default=None, help="default: the config's model.arch")
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="the device's peak, for MFU")
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    m, t = cfg["model"], cfg["train"]
    L, H, C, T, V = m["n_layer"], m["n_head"], m["n_embd"], m["seq_len"], m["vocab_size"]
    B = t["global_batch"]
    Vp = (V + 127) // 128 * 128
    precision = a.precision or t.get("precision", "fp32")
    if precision not in ("fp32", "bf16"):
        raise SystemExit("bench_torch.py: precision %s is not fp32 or bf16" % precision)
    warmup = a.warmup if a.warmup is not None else (3 if a.compile else 1)
    if a.steps < 1 or warmup < 0:
        raise SystemExit("bench_torch.py: --steps must be >= 1 and --warmup >= 0")
    dev = torch.device(a.device)
    if a.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("bench_torch.py: --device cuda, but torch %s sees no CUDA device" % torch.__version__)
        # fp32 as Trident computes it: no TF32 in the matmuls
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    else:
        torch.set_num_threads(a.threads)
    if a.compile and not hasattr(torch, "compile"):
        raise SystemExit("bench_torch.py: --compile: torch %s has no torch.compile (2.0 or later)" % torch.__version__)
    sdpa = (a.attn or ("sdpa" if a.device == "cuda" else "naive")) == "sdpa"
    if sdpa and not hasattr(F, "scaled_dot_product_attention"):
        if a.attn == "sdpa":
            raise SystemExit("bench_torch.py: --attn sdpa: torch %s has no F.scaled_dot_product_attention (2.0 or later)"
                             % torch.__version__)
        print("bench_torch.py: torch %s has no F.scaled_dot_product_attention: the explicit softmax instead"
              % torch.__version__)
        sdpa = False
    torch.manual_seed(0)
    arch = a.arch or m.get("arch", "gpt2")
    if arch == "llama":
        KV = m.get("n_kv_head", 0) or H
        Fh = m.get("ffn_hidden", 0)
        if not Fh:  # Llama's rule: int(2/3 * 4C) rounded up to ffn_multiple_of
            mult = m.get("ffn_multiple_of", 256)
            Fh = (int(2 * 4 * C / 3) + mult - 1) // mult * mult
        if m.get("rope_scaling_factor", 0):
            raise SystemExit("bench_torch.py: --arch llama: rope scaling is not modelled here")
        tie = m.get("tie_embeddings", -1)
        tied = tie is True or tie == 1
        model = Llama(L, H, KV, C, Fh, T, Vp, m.get("rope_theta", 10000.0), m.get("norm_eps", 1e-5), tied, sdpa).to(dev)
        emb = model.embed_tokens.weight
        decay = [p for p in model.parameters() if p.dim() >= 2 and p is not emb]
        # model FLOPs as Trident counts them: every parameter but a lookup-only (untied) embedding
        N = sum(p.numel() for p in model.parameters()) - (Vp - V) * C - (0 if tied else Vp * C)
    else:
        model = GPT(L, H, C, T, Vp, sdpa).to(dev)
        decay = [p for p in model.parameters()
                 if p.dim() >= 2 and p is not model.wte.weight and p is not model.wpe.weight]
        N = sum(p.numel() for p in model.parameters()) - (Vp - V) * C - T * C
    other = [p for p in model.parameters() if not any(p is q for q in decay)]
    def adamw(**kw):  # (fresh groups: the optimizer writes its defaults into them)
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                                 lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **kw)

    try:  # fused AdamW on the GPU where this torch has it (nanoGPT's choice)
        opt = adamw(**({"fused": True} if a.device == "cuda" else {}))
    except (TypeError, RuntimeError):
        opt = adamw()
    fwd = torch.compile(model) if a.compile else model
    g = torch.Generator().manual_seed(1)

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    times = []
    for s in range(a.steps + warmup):
        idx = torch.randint(0, V, (B, T), generator=g).to(dev)
        tgt = torch.randint(0, V, (B, T), generator=g).to(dev)
        sync()
        t0 = time.perf_counter()
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = fwd(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        times.append(time.perf_counter() - t0)
    print("step times (ms):", " ".join("%.0f" % (x * 1e3) for x in times))
    med = statistics.median(times[warmup:])  # the first steps warm up (and compile)
    flops_tok = 6 * N + 12 * L * C * T
    tps = B * T / med
    gflops = flops_tok * tps / 1e9
    mfu = gflops / (a.peak_tflops * 1e3) if a.peak_tflops > 0 else None
    where = (torch.cuda.get_device_name(dev) if a.device == "cuda" else "%d threads" % a.threads)
    print("torch %s: %s, %s, %s%s, B=%d T=%d, step %.1f ms, %.0f tokens/s, %.1f GFLOP/s%s" %
          (torch.__version__, arch, where, precision, ", compiled" if a.compile else "", B, T, med * 1e3, tps, gflops,
           ", MFU %.1f%% of %g TFLOP/s" % (100 * mfu, a.peak_tflops) if mfu is not None else ""))
    out = {"impl": "torch", "arch": arch, "device": a.device, "precision": precision, "compile": a.compile,
           "attn": "sdpa" if sdpa else "naive", "step_ms": round(med * 1e3, 2),
           "tokens_per_s": round(tps, 1), "gflops": round(gflops, 2), "flops_per_token": flops_tok}
    if a.device == "cpu":
        out["threads"] = a.threads
    if mfu is not None:
        out["mfu"] = round(mfu, 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
