#!/usr/bin/python3
"""An independent Llama forward pass in numpy (float64), for tests.

Hugging Face's LlamaForCausalLM as its modeling_llama.py computes it, written
here from that description: RMSNorm (x / sqrt(mean(x^2) + eps) * w), nn.Linear
weights stored (out, in), q/k/v_proj then RoPE with rotate_half (element i
pairs with i + d/2, inv_freq = 1 / theta^(2i/d), Llama 3.1's "llama3"
rope_scaling when set), grouped-query attention by repeating each KV head
over its n_head / n_kv_head query heads, o_proj, down_proj(silu(gate_proj(x))
* up_proj(x)), the final norm and lm_head (or the tied embed_tokens).

Reads a checkpoint directory (config.json and model.safetensors, parsed here
byte by byte, no safetensors library) and an llm.c token file, and prints the
mean next-token loss over the windows given, as JSON. Nothing here shares
code with Trident: it checks the checkpoint's config, names, shapes and
layouts and the model's forward at once.

usage: llama_numpy.py CKPT_DIR TOKENS.bin START [START ...]
  each START is the token offset of a window of max_position_embeddings + 1 tokens
"""
import json
import math
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


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def inv_freq(cfg, d):
    f = 1.0 / (cfg["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d))
    rs = cfg.get("rope_scaling")
    if rs:
        assert rs.get("rope_type", rs.get("type")) == "llama3", rs
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        out = []
        for x in f:
            wl = 2 * math.pi / x
            if wl < hi_wl:
                out.append(x)
            elif wl > lo_wl:
                out.append(x / factor)
            else:
                s = (old / wl - lo) / (hi - lo)
                out.append((1 - s) * x / factor + s * x)
        f = np.array(out)
    return f


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def forward_loss(P, cfg, ids, targets):
    T = len(ids)
    C, H, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    K = cfg.get("num_key_value_heads", H)
    d = C // H
    eps = cfg["rms_norm_eps"]
    ang = np.arange(T, dtype=np.float64)[:, None] * inv_freq(cfg, d)[None, :]
    emb = np.concatenate([ang, ang], -1)
    cos, sin = np.cos(emb), np.sin(emb)
    x = P["model.embed_tokens.weight"][ids]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    for i in range(L):
        p = lambda s: P["model.layers.%d.%s" % (i, s)]
        h = rmsnorm(x, p("input_layernorm.weight"), eps)
        q = (h @ p("self_attn.q_proj.weight").T).reshape(T, H, d).transpose(1, 0, 2)
        k = (h @ p("self_attn.k_proj.weight").T).reshape(T, K, d).transpose(1, 0, 2)
        v = (h @ p("self_attn.v_proj.weight").T).reshape(T, K, d).transpose(1, 0, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, H // K, axis=0)
        v = np.repeat(v, H // K, axis=0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        s[:, mask] = -np.inf
        s = s - s.max(-1, keepdims=True)
        a = np.exp(s)
        a /= a.sum(-1, keepdims=True)
        y = (a @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ p("self_attn.o_proj.weight").T
        h = rmsnorm(x, p("post_attention_layernorm.weight"), eps)
        g = h @ p("mlp.gate_proj.weight").T
        u = h @ p("mlp.up_proj.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ p("mlp.down_proj.weight").T
    x = rmsnorm(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else P["lm_head.weight"]
    logits = x @ head.T
    mx = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - mx).sum(-1)) + mx[:, 0]
    return float((lse - logits[np.arange(T), targets]).sum())


def main():
    ckpt, tokfile, starts = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3:]]
    cfg = json.load(open(ckpt + "/config.json"))
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"], cfg
    assert cfg["hidden_act"] == "silu" and not cfg["attention_bias"] and not cfg["mlp_bias"], cfg
    P = read_safetensors(ckpt + "/model.safetensors")
    C, V, T, F = cfg["hidden_size"], cfg["vocab_size"], cfg["max_position_embeddings"], cfg["intermediate_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H) * (C // H)
    expect = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not cfg["tie_word_embeddings"]:
        expect["lm_head.weight"] = (V, C)
    for i in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d." % i
        expect.update({pre + "self_attn.q_proj.weight": (C, C), pre + "self_attn.k_proj.weight": (KV, C),
                       pre + "self_attn.v_proj.weight": (KV, C), pre + "self_attn.o_proj.weight": (C, C),
                       pre + "mlp.gate_proj.weight": (F, C), pre + "mlp.up_proj.weight": (F, C),
                       pre + "mlp.down_proj.weight": (C, F), pre + "input_layernorm.weight": (C,),
                       pre + "post_attention_layernorm.weight": (C,)})
    assert set(P) == set(expect), sorted(set(P) ^ set(expect))
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
