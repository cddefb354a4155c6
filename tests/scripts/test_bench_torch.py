#!/usr/bin/python3
"""Tests of scripts/bench_torch.py's Llama (--arch llama, run by CTest as
`bench_torch`), each against an independent numpy computation in float64:

- RMSNorm: x / sqrt(mean(x^2) + eps) * w;
- RoPE: the contract's rotate-half pairing (docs: element i pairs with
  i + HS/2, angle pos * theta^(-2i/HS)), written as the explicit rotation;
- a whole block (RMSNorm, q/k/v, RoPE, causal grouped-query attention where
  query head h reads KV head h // (NH / NKV), o_proj, residual, SwiGLU MLP)
  against a loop over heads, for MHA, GQA and MQA;
- the parameter count of the model against the closed form, untied and tied;
- the script itself on a small config: it runs, says arch llama, and its
  model FLOPs per token are 6 (params but the untied embedding) + 12 L C T.

Skipped (exit 0 with a message) where /usr/bin/python3 has no torch
(apt-get install python3-torch).
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "bench_torch.py")
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
try:
    import torch
except ImportError:
    print("test_bench_torch: skipped: no torch for /usr/bin/python3 (apt-get install python3-torch)")
    sys.exit(0)
import bench_torch  # noqa: E402

FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL:", msg)


def close(a, b, tol):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30)) < tol


def np_rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def np_rope(x, theta):  # x (T, NH, HS): the explicit rotation of pairs (i, i + HS/2)
    T, _, HS = x.shape
    out = x.copy()
    for t in range(T):
        for i in range(HS // 2):
            a = t * theta ** (-2.0 * i / HS)
            c, s = math.cos(a), math.sin(a)
            x0, x1 = x[t, :, i], x[t, :, i + HS // 2]
            out[t, :, i] = x0 * c - x1 * s
            out[t, :, i + HS // 2] = x1 * c + x0 * s
    return out


def np_block(blk, x, theta, eps):
    W = {n: p.detach().double().numpy() for n, p in blk.named_parameters()}
    H, KV, HS = blk.H, blk.KV, blk.HS
    T, C = x.shape
    h = np_rms(x, W["input_layernorm"], eps)
    q = np_rope((h @ W["q_proj.weight"].T).reshape(T, H, HS), theta)
    k = np_rope((h @ W["k_proj.weight"].T).reshape(T, KV, HS), theta)
    v = (h @ W["v_proj.weight"].T).reshape(T, KV, HS)
    y = np.zeros((T, H, HS))
    for hd in range(H):
        g = hd // (H // KV)
        for t in range(T):
            s = q[t, hd] @ k[: t + 1, g].T / math.sqrt(HS)
            p = np.exp(s - s.max())
            y[t, hd] = (p / p.sum()) @ v[: t + 1, g]
    x = x + y.reshape(T, C) @ W["o_proj.weight"].T
    h = np_rms(x, W["post_attention_layernorm"], eps)
    gate, up = h @ W["gate_proj.weight"].T, h @ W["up_proj.weight"].T
    return x + (gate / (1 + np.exp(-gate)) * up) @ W["down_proj.weight"].T


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    # RMSNorm
    x = rng.standard_normal((5, 24))
    w = rng.standard_normal(24)
    got = bench_torch.rms_norm(torch.tensor(x), torch.tensor(w), 1e-5).numpy()
    check(close(got, np_rms(x, w, 1e-5), 1e-12), "rms_norm")
    # blocks: MHA, GQA, MQA
    T, C, NH, Fh, theta, eps = 7, 48, 4, 40, 10000.0, 1e-5
    for KV in (4, 2, 1):
        m = bench_torch.Llama(1, NH, KV, C, Fh, T, 128, theta, eps, False).double()
        blk = m.layers[0]
        for p in blk.parameters():  # norms away from 1, so that their weights count
            torch.nn.init.normal_(p, 0.0, 0.3 if p.dim() == 1 else 0.1)
        x = rng.standard_normal((T, C))
        got = blk(torch.tensor(x)[None], m.cos.double(), m.sin.double())[0].detach().numpy()
        # the script's cos/sin tables are fp32 (angles and values, as HF's), the rest float64 here
        check(close(got, np_block(blk, x, theta, eps), 1e-6), "block NH %d NKV %d" % (NH, KV))
    # RoPE alone, on a head size where the pairing is visible
    q = rng.standard_normal((6, 3, 8))
    m = bench_torch.Llama(1, 3, 3, 24, 16, 6, 128, 500000.0, eps, False).double()
    qt = torch.tensor(q).transpose(0, 1)  # (NH, T, HS)
    got = (qt * m.cos + bench_torch.rotate_half(qt) * m.sin).transpose(0, 1).numpy()
    check(close(got, np_rope(q, 500000.0), 1e-6), "rope rotate-half")  # cos/sin tables are fp32
    # parameter counts
    L, C, NH, KV, Fh, Vp = 3, 64, 8, 2, 96, 256
    for tied in (False, True):
        m = bench_torch.Llama(L, NH, KV, C, Fh, 16, Vp, theta, eps, tied)
        n = sum(p.numel() for p in m.parameters())
        HS = C // NH
        want = L * (2 * C * C + 2 * C * KV * HS + 3 * C * Fh + 2 * C) + C + Vp * C * (1 if tied else 2)
        check(n == want, "params tied=%d: %d, want %d" % (tied, n, want))
    # the script on a small Llama
    cfg = {"model": {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_embd": 64, "ffn_hidden": 160,
                     "seq_len": 32, "vocab_size": 300, "tie_embeddings": False},
           "train": {"global_batch": 2, "micro_batch": 2}}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "c.json")
        json.dump(cfg, open(path, "w"))
        r = subprocess.run([sys.executable, SCRIPT, path, "--steps", "2", "--threads", "1"], capture_output=True,
                           text=True, timeout=300)
        check(r.returncode == 0, "bench_torch.py exit %d: %s" % (r.returncode, r.stderr[-500:]))
        if r.returncode == 0:
            out = json.loads(r.stdout.strip().splitlines()[-1])
            check(out.get("arch") == "llama", "arch %r" % out.get("arch"))
            Lh, C, HS, KVh, Fh, V, T = 2, 64, 16, 2, 160, 300, 32
            fpt = 6 * (Lh * (2 * C * C + 2 * C * KVh * HS + 3 * C * Fh + 2 * C) + C + V * C) + 12 * Lh * C * T
            got = out.get("flops_per_token")
            check(got == fpt, "FLOPs per token %s, want %d" % (got, fpt))
    if FAILS:
        print("test_bench_torch: %d failure(s)" % len(FAILS))
        sys.exit(1)
    print("test_bench_torch: all passed")


if __name__ == "__main__":
    main()
