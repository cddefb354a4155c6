#!/usr/bin/python3
"""An independent GPT-2 forward pass in numpy (float64), for tests.

Reads a Hugging Face style checkpoint directory (config.json and
model.safetensors, parsed here byte by byte, no safetensors library) and an
llm.c token file, and prints the mean next-token loss over the windows given,
as JSON. Nothing here shares code with Trident: it checks the checkpoint's
names, shapes and layouts (Conv1D [in, out], q|k|v columns, tied head) and the
model's forward at once.

usage: gpt2_numpy.py CKPT_DIR TOKENS.bin START [START ...]
  each START is the token offset of a window of n_positions + 1 tokens
"""
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"]).astype(np.float64)
    return out


def read_llmc(path):
    with open(path, "rb") as f:
        raw = f.read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    assert h[0] == 20240520 and h[1] == 1, "not an llm.c token file"
    return np.frombuffer(raw[1024:1024 + 2 * int(h[2])], dtype="<u2").astype(np.int64)


def layernorm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward_loss(P, cfg, ids, targets):
    T = len(ids)
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    hs = C // H
    x = P["transformer.wte.weight"][ids] + P["transformer.wpe.weight"][:T]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    for i in range(L):
        p = lambda s: P["transformer.h.%d.%s" % (i, s)]
        h = layernorm(x, p("ln_1.weight"), p("ln_1.bias"))
        qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = qkv[:, :C], qkv[:, C:2 * C], qkv[:, 2 * C:]
        q = q.reshape(T, H, hs).transpose(1, 0, 2)
        k = k.reshape(T, H, hs).transpose(1, 0, 2)
        v = v.reshape(T, H, hs).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hs)
        s[:, mask] = -np.inf
        s = s - s.max(-1, keepdims=True)
        a = np.exp(s)
        a /= a.sum(-1, keepdims=True)
        y = (a @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = layernorm(x, p("ln_2.weight"), p("ln_2.bias"))
        m = gelu_tanh(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"))
        x = x + m @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = layernorm(x, P["transformer.ln_f.weight"], P["transformer.ln_f.bias"])
    logits = x @ P["transformer.wte.weight"].T
    mx = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - mx).sum(-1)) + mx[:, 0]
    return float((lse - logits[np.arange(T), targets]).sum())


def main():
    ckpt, tokfile, starts = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3:]]
    cfg = json.load(open(ckpt + "/config.json"))
    assert cfg["model_type"] == "gpt2"
    P = read_safetensors(ckpt + "/model.safetensors")
    C, V, T = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    expect = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C)}
    for i in range(cfg["n_layer"]):
        pre = "transformer.h.%d." % i
        expect.update({pre + "attn.c_attn.weight": (C, 3 * C), pre + "attn.c_proj.weight": (C, C),
                       pre + "mlp.c_fc.weight": (C, 4 * C), pre + "mlp.c_proj.weight": (4 * C, C)})
    for name, shape in expect.items():
        assert P[name].shape == shape, (name, P[name].shape, shape)
    toks = read_llmc(tokfile)
    total, count = 0.0, 0
    for s in starts:
        w = toks[s:s + T + 1]
        total += forward_loss(P, cfg, w[:-1], w[1:])
        count += T
    print(json.dumps({"loss": total / count, "tokens": count, "tensors": len(P)}))


if __name__ == "__main__":
    main()
