#!/usr/bin/python3
"""Hugging Face round trip against transformers itself (CTest `hf_roundtrip`).

usage: test_hf_roundtrip.py BUILD_DIR

Export: a llama-tiny-like run (configs/llama-tiny.json, shrunk: GQA, untied
head, byte vocabulary) trains a few steps with trident; its checkpoint
directory is loaded as it is by transformers.LlamaForCausalLM.from_pretrained,
which must give the same loss on a token file as `trident eval` and the same
greedy continuation as `trident sample --temperature 0` (generate with
do_sample=False).

Import: transformers writes a random LlamaForCausalLM (GQA, untied; weights
drawn wide enough that the loss is far from the uniform ln V, so a wrong
layout shows) with save_pretrained, whole, sharded (max_shard_size small
enough for several shards) and in bf16, and a tied MQA Llama in fp16; `trident
eval` of each directory and
`trident train --init-from` (steps 0, then eval of the checkpoint it wrote; at
one rank and at tp2 pp2) give transformers' loss on the same windows. The same
for a GPT2LMHeadModel. Mismatched directories are refused naming the tensor
or key.

torch is Debian's python3-torch (scripts/install_deps.sh installs it; PyPI's
wheel drags in 5 GB of CUDA libraries); transformers and safetensors live in
a venv under BUILD_DIR/hf_venv that sees the system's packages, made once,
with transformers pinned to the releases that still run on Debian 12's torch
1.13 and already read Llama 3.1's RoPE scaling. Where torch or they cannot
be had, the test is skipped (exit 77, one line).

Tolerances: trident and torch both compute in fp32 with different
summation orders; over a 2-layer model the mean loss agrees to ~1e-7
relative (e.g. 6.983064 vs 6.9830640; `trident eval --json` prints 7
digits), so 2e-5 relative is a wide
margin for float error, while q/k_proj in the interleaved RoPE order (the
control below) moves the loss by far more than 100x the tolerance: the
wide random weights make every tensor matter.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
RTOL = 2e-5
SKIP = 77


TRANSFORMERS = "transformers>=4.43,<4.45"


def venv_python(build):
    venv = os.path.join(build, "hf_venv")
    py = os.path.join(venv, "bin", "python")
    probe = [py, "-c", "import torch, transformers, safetensors, numpy"]
    if os.path.exists(py) and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
        print("hf_roundtrip tests skipped: /usr/bin/python3 has no torch (Debian's python3-torch; "
              "scripts/install_deps.sh installs it)")
        sys.exit(SKIP)
    log = os.path.join(build, "hf_venv.log")
    shutil.rmtree(venv, ignore_errors=True)
    with open(log, "w") as f:
        ok = subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], stdout=f,
                            stderr=f).returncode == 0
        if ok:
            ok = subprocess.run([py, "-m", "pip", "install", "--progress-bar", "off", TRANSFORMERS, "safetensors"],
                                stdout=f, stderr=f).returncode == 0
    if ok and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    print("hf_roundtrip tests skipped: %s and safetensors could not be installed in %s (see %s)" %
          (TRANSFORMERS, venv, log))
    sys.exit(SKIP)


# ---------------------------------------------------------------- helpers

FAILS = []


def check(cond, msg):
    print(("ok:   " if cond else "FAIL: ") + msg)
    if not cond:
        FAILS.append(msg)


def close(a, b):
    return abs(a - b) <= RTOL * abs(b)


def run(cmd, expect_ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=WORK)
    if expect_ok and p.returncode != 0:
        raise SystemExit("command failed (%d): %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout, p.stderr))
    return p


def write_llmc(path, tokens):
    import numpy as np
    h = np.zeros(256, dtype="<i4")
    h[0], h[1], h[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(h.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def trident_eval(ckpt, data, batches, batch):
    p = run([TRIDENT, "eval", "--ckpt", ckpt, "--data", data, "--batches", str(batches), "--batch", str(batch),
             "--json", "--threads", "2"])
    return json.loads(p.stdout.strip().splitlines()[-1])["loss"]


def hf_loss(model, tokens, T, windows):
    """Mean next-token loss over windows w = 0..windows-1, tokens [wT, wT + T + 1),
    the windows `trident eval` takes in order."""
    import torch
    x = torch.tensor([tokens[w * T:w * T + T] for w in range(windows)], dtype=torch.long)
    y = torch.tensor([tokens[w * T + 1:w * T + T + 1] for w in range(windows)], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=x).logits.double()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()


def data_tokens():
    """Byte tokens of this repository's text (README, docs): real text, vocab 256."""
    text = b""
    for name in ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(SRC, "docs"))):
        if name.endswith(".md"):
            with open(os.path.join(SRC, name), "rb") as f:
                text += f.read()
    return list(text)


# ---------------------------------------------------------------- export

def test_export():
    import torch
    from transformers import LlamaForCausalLM
    T = 32
    run([TRIDENT, "train", os.path.join(SRC, "configs", "llama-tiny.json"),
         "--set", "model.n_layer=2", "--set", "model.n_embd=64", "--set", "model.n_head=4",
         "--set", "model.n_kv_head=2", "--set", "model.ffn_hidden=96", "--set", "model.seq_len=%d" % T,
         "--set", "model.vocab_size=256", "--set", "model.rope_theta=500", "--set", "model.rope_scaling_factor=4",
         "--set", "model.rope_original_seq_len=8", "--set", "train.steps=150", "--set", "train.global_batch=8",
         "--set", "train.micro_batch=4", "--set", "train.lr=1e-2", "--set", "train.warmup_steps=3",
         "--set", "train.eval_every=0", "--set", "data.train=train.bin", "--set", "data.val=val.bin",
         "--set", "data.tokenizer=", "--set", "checkpoint.dir=export/ck", "--set", "checkpoint.every=0",
         "--set", "log.dir=export", "--threads", "2"])
    with open(os.path.join(WORK, "export", "ck", "latest")) as f:
        ck = os.path.join(WORK, "export", "ck", f.read().strip())
    with open(os.path.join(ck, "config.json")) as f:
        hc = json.load(f)
    floats = [hc["rope_theta"], hc["rms_norm_eps"]] + [hc["rope_scaling"][k] for k in
                                                       ("factor", "low_freq_factor", "high_freq_factor")]
    check(all(isinstance(v, float) for v in floats),
          "export: config.json's RoPE and norm numbers are floats, as transformers validates them: %s" % floats)
    model = LlamaForCausalLM.from_pretrained(ck, attn_implementation="eager").float().eval()
    ours = trident_eval(ck, "val.bin", 2, 4)
    ref = hf_loss(model, VAL, T, 8)
    check(close(ours, ref), "export: trident eval %.8f, transformers %.8f (from_pretrained of the checkpoint)" % (ours, ref))
    # greedy: trident sample --temperature 0 (argmax, the first of equals) vs generate(do_sample=False)
    # prompt and continuation within one window (T): trident slides its
    # context past T tokens, transformers would not
    prompt = "A checkpoint"
    n = T + 1 - len(prompt)
    ids = list(prompt.encode())
    with torch.no_grad():
        gen = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    hf = bytes(gen[0, len(ids):].tolist())
    raw = subprocess.run([TRIDENT, "sample", "--ckpt", ck, "--prompt", prompt, "--tokens", str(n),
                          "--temperature", "0", "--threads", "2"], capture_output=True, cwd=WORK).stdout
    ours_txt = raw[len(prompt):len(prompt) + n]
    check(ours_txt == hf, "export: greedy continuation, trident %r, transformers %r" % (ours_txt, hf))
    return ck


# ---------------------------------------------------------------- import

def wide_random(model, seed):
    """Weights far from the default 0.02 init, norms around 1: a loss well away from ln V."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g) if "weight" in name
                        else 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / p.shape[-1] ** 0.5))
    return model


# Llama 3.1's RoPE scaling, biting at T = 32 (original length 8), with a small
# theta: RoPE's numbers all matter (transformers 5 writes them as
# "rope_parameters", older versions as rope_theta and rope_scaling)
ROPE_SCALING = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8}


def llama_dirs():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                      rms_norm_eps=1e-5, rope_theta=500.0, tie_word_embeddings=False, rope_scaling=ROPE_SCALING)
    torch.manual_seed(0)
    model = wide_random(LlamaForCausalLM(cfg), 1).eval()
    model.config._attn_implementation = "eager"
    model.save_pretrained(os.path.join(WORK, "hf_llama"))
    model.save_pretrained(os.path.join(WORK, "hf_llama_sharded"), max_shard_size="60KB")
    bf = LlamaForCausalLM(cfg)
    bf.load_state_dict(model.state_dict())
    bf.to(torch.bfloat16).save_pretrained(os.path.join(WORK, "hf_llama_bf16"))
    # the bf16 weights widened, with fp32 RoPE frequencies (a model cast to
    # bf16 keeps its inv_freq buffer in bf16 too)
    bf = LlamaForCausalLM.from_pretrained(os.path.join(WORK, "hf_llama_bf16"), torch_dtype=torch.float32,
                                          attn_implementation="eager")
    return model, bf.eval()


def import_cfg(arch):
    """A trident config for the HF models written here."""
    m = {"n_layer": 2, "n_head": 4, "n_embd": 64, "seq_len": 32, "vocab_size": 256}
    if arch == "llama":
        m.update({"arch": "llama", "n_kv_head": 2, "ffn_hidden": 96, "norm_eps": 1e-5, "rope_theta": 500,
                  "rope_scaling_factor": 4, "rope_low_freq_factor": 1, "rope_high_freq_factor": 4,
                  "rope_original_seq_len": 8, "tie_embeddings": False})
    c = {"model": m,
         "train": {"global_batch": 4, "micro_batch": 1, "steps": 0, "lr": 1e-3, "eval_every": 0},
         "data": {"train": "train.bin", "val": "val.bin"},
         "checkpoint": {"dir": "unused"}, "log": {"dir": "unused"}}
    path = os.path.join(WORK, "import_%s.json" % arch)
    with open(path, "w") as f:
        json.dump(c, f)
    return path


def train_from(cfg, hf_dir, name, ranks=1, extra=()):
    """trident train --init-from hf_dir into WORK/name (checkpoints in ck/, metrics every step)."""
    sets = ["--set", "checkpoint.dir=%s/ck" % name, "--set", "log.dir=%s" % name, "--set", "log.every=1"]
    for x in extra:
        sets += ["--set", x]
    if ranks == 1:
        run([TRIDENT, "train", cfg, "--init-from", hf_dir, "--threads", "2"] + sets)
    else:
        run([TRIDENTRUN, "--log-dir", os.path.join(WORK, name, "ranks"), "--", TRIDENT, "train", cfg,
             "--init-from", hf_dir, "--threads", "1"] + sets)
    losses = []
    with open(os.path.join(WORK, name, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "loss" in m:
                losses.append(m["loss"])
    with open(os.path.join(WORK, name, "ck", "latest")) as f:
        return os.path.join(WORK, name, "ck", f.read().strip()), losses


def init_from(cfg, hf_dir, name, tp=1, pp=1):
    """train --init-from with steps 0 (the final checkpoint is the imported model), then eval of it."""
    train_from(cfg, hf_dir, name, tp * pp, ["parallel.tp=%d" % tp, "parallel.pp=%d" % pp])
    return trident_eval(os.path.join(WORK, name, "ck"), "val.bin", 2, 4)


def test_import_llama():
    import torch
    model, bf = llama_dirs()
    shards = [f for f in os.listdir(os.path.join(WORK, "hf_llama_sharded")) if f.endswith(".safetensors")]
    check(len(shards) >= 3 and os.path.exists(os.path.join(WORK, "hf_llama_sharded", "model.safetensors.index.json")),
          "import: save_pretrained(max_shard_size=60KB) wrote %d shards and an index" % len(shards))
    ref = hf_loss(model, VAL, 32, 8)
    check(ref > 6.0, "import: transformers' loss %.4f is far from ln 256 = 5.545 (the weights matter)" % ref)
    for d in ("hf_llama", "hf_llama_sharded"):
        ours = trident_eval(os.path.join(WORK, d), "val.bin", 2, 4)
        check(close(ours, ref), "import: trident eval of %s %.8f, transformers %.8f" % (d, ours, ref))
    ref_bf = hf_loss(bf, VAL, 32, 8)
    ours = trident_eval(os.path.join(WORK, "hf_llama_bf16"), "val.bin", 2, 4)
    check(close(ours, ref_bf), "import: trident eval of the bf16 directory %.8f, transformers %.8f" % (ours, ref_bf))
    # the control: q/k_proj rows in Meta's interleaved RoPE order (what HF's
    # conversion script undoes) must NOT give transformers' loss, so the
    # comparisons above see the RoPE convention
    from safetensors.torch import load_file, save_file
    perm_dir = os.path.join(WORK, "hf_llama_interleaved")
    shutil.copytree(os.path.join(WORK, "hf_llama"), perm_dir)
    sd = load_file(os.path.join(perm_dir, "model.safetensors"))
    hs = 16
    for name in list(sd):
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            w = sd[name]
            sd[name] = w.view(-1, 2, hs // 2, w.shape[1]).transpose(1, 2).reshape(w.shape).contiguous()
    save_file(sd, os.path.join(perm_dir, "model.safetensors"), metadata={"format": "pt"})
    wrong = trident_eval(perm_dir, "val.bin", 2, 4)
    check(abs(wrong - ref) > 100 * RTOL * ref,
          "import: the interleaved (un-HF) q/k layout gives %.8f, off transformers' %.8f by %.1e, > 100x the "
          "tolerance" % (wrong, ref, abs(wrong - ref)))
    cfg = import_cfg("llama")
    ours = init_from(cfg, os.path.join(WORK, "hf_llama"), "init1")
    check(close(ours, ref), "import: train --init-from hf_llama (1 rank, 0 steps) then eval %.8f, transformers %.8f"
          % (ours, ref))
    ours = init_from(cfg, os.path.join(WORK, "hf_llama_sharded"), "init_tp2pp2", tp=2, pp=2)
    check(close(ours, ref), "import: train --init-from the sharded directory at tp2 pp2, then eval %.8f, "
          "transformers %.8f" % (ours, ref))
    # training on from the import: ZeRO-1 at tp2 dp2 follows one rank (the
    # masters and shards set from the directory, the optimizer fresh). fp32
    # runs of the same model at other layouts agree to ~1e-7 (sums in
    # another order): 1e-5 relative is the margin, while a wrong master or
    # shard shows from step 2 on at the size of a step's change (~1e-2).
    _, one = train_from(cfg, os.path.join(WORK, "hf_llama"), "steps1", 1, ["train.steps=6"])
    _, four = train_from(cfg, os.path.join(WORK, "hf_llama_sharded"), "steps_zero", 4,
                         ["train.steps=6", "parallel.tp=2", "parallel.dp=2", "parallel.zero=true"])
    check(len(one) == 6 and len(four) == 6 and all(abs(a - b) <= 1e-5 * a for a, b in zip(one, four))
          and abs(one[5] - one[0]) > 1e-3,
          "import: 6 steps from the import at one rank %s and at tp2 dp2 ZeRO-1 %s" % (one, four))
    # bf16 parameters: the imported fp32 values are the masters exactly
    # (optimizer.safetensors master.*), the parameters their bf16 rounding
    ck, _ = train_from(cfg, os.path.join(WORK, "hf_llama"), "bf16_zero", 2,
                       ["parallel.dp=2", "parallel.zero=true", "train.precision=bf16", "train.global_batch=4"])
    from safetensors.torch import load_file as lf
    hf_sd = {k: v for k, v in model.state_dict().items() if "rotary" not in k}
    opt, mod = lf(os.path.join(ck, "optimizer.safetensors")), lf(os.path.join(ck, "model.safetensors"))
    same_master = all(torch.equal(opt["master." + k], v) for k, v in hf_sd.items())
    same_param = all(torch.equal(mod[k], v.to(torch.bfloat16).float()) for k, v in hf_sd.items())
    check(same_master and same_param and len(hf_sd) == len(mod),
          "import: bf16 at dp2 ZeRO-1: master weights = the directory's %d tensors exactly (%s), parameters their "
          "bf16 rounding (%s)" % (len(hf_sd), same_master, same_param))
    # refusals, each naming what is at fault
    p = run([TRIDENT, "train", cfg, "--init-from", os.path.join(WORK, "hf_llama"), "--threads", "2",
             "--set", "model.ffn_hidden=128", "--set", "checkpoint.dir=bad1/ck", "--set", "log.dir=bad1"], False)
    check(p.returncode != 0 and "intermediate_size is 96" in p.stderr and "model.ffn_hidden is 128" in p.stderr,
          "import: a config.json that disagrees is refused naming the key: %s" % p.stderr.strip()[-200:])
    p = run([TRIDENT, "train", cfg, "--init-from", os.path.join(WORK, "hf_llama"), "--threads", "2",
             "--set", "model.rope_theta=10000", "--set", "checkpoint.dir=bad3/ck", "--set", "log.dir=bad3"], False)
    check(p.returncode != 0 and "rope_theta is 500, but the run's model.rope_theta is 10000" in p.stderr,
          "import: a RoPE base that disagrees is refused naming it: %s" % p.stderr.strip()[-200:])
    bad = os.path.join(WORK, "hf_llama_extra")
    shutil.copytree(os.path.join(WORK, "hf_llama"), bad)
    sd = load_file(os.path.join(bad, "model.safetensors"))
    sd["model.layers.1.self_attn.k_proj.weight"] = sd["model.layers.1.self_attn.k_proj.weight"][:16].contiguous()
    sd["model.extra.weight"] = sd["model.norm.weight"].clone()
    del sd["model.layers.0.mlp.up_proj.weight"]
    save_file(sd, os.path.join(bad, "model.safetensors"), metadata={"format": "pt"})
    p = run([TRIDENT, "train", cfg, "--init-from", bad, "--threads", "2", "--set", "checkpoint.dir=bad2/ck",
             "--set", "log.dir=bad2"], False)
    e = p.stderr
    check(p.returncode != 0 and "model.layers.0.mlp.up_proj.weight is missing" in e
          and "k_proj.weight has shape [16, 64], the run's model expects [32, 64]" in e
          and "unexpected tensor model.extra.weight" in e,
          "import: missing, misshapen and unexpected tensors are each named: %s" % e.strip())
    p = run([TRIDENT, "train", cfg, "--init-from", os.path.join(WORK, "hf_llama"), "--resume"], False)
    check(p.returncode != 0 and "--init-from" in p.stderr and "--resume" in p.stderr,
          "import: --init-from with --resume is refused: %s" % p.stderr.strip())


def test_import_llama_tied_mqa_fp16():
    """A tied Llama (no lm_head, as Llama 3.2 1B and SmolLM save) with one KV head (MQA), in fp16 on disk."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=32,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = wide_random(LlamaForCausalLM(cfg), 3).eval()
    d = os.path.join(WORK, "hf_llama_tied_fp16")
    model.to(torch.float16).save_pretrained(d)
    with open(os.path.join(d, "config.json")) as f:
        saved = json.load(f)
    from safetensors import safe_open
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        names = list(f.keys())
    ref_model = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").eval()
    ref = hf_loss(ref_model, VAL, 32, 8)
    ours = trident_eval(d, "val.bin", 2, 4)
    check(saved.get("tie_word_embeddings") is True and "lm_head.weight" not in names and close(ours, ref),
          "tied MQA fp16: no lm_head in the file; trident eval %.8f, transformers %.8f" % (ours, ref))


def test_import_gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=32, activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = wide_random(GPT2LMHeadModel(cfg), 2).eval()
    model.config._attn_implementation = "eager"
    model.save_pretrained(os.path.join(WORK, "hf_gpt2"))
    model.save_pretrained(os.path.join(WORK, "hf_gpt2_sharded"), max_shard_size="60KB")
    ref = hf_loss(model, VAL, 32, 8)
    check(ref > 6.0, "gpt2: transformers' loss %.4f is far from ln 256" % ref)
    for d in ("hf_gpt2", "hf_gpt2_sharded"):
        ours = trident_eval(os.path.join(WORK, d), "val.bin", 2, 4)
        check(close(ours, ref), "gpt2: trident eval of %s %.8f, transformers %.8f" % (d, ours, ref))
    cfg_path = import_cfg("gpt2")
    ours = init_from(cfg_path, os.path.join(WORK, "hf_gpt2"), "g_init1")
    check(close(ours, ref), "gpt2: train --init-from (1 rank) then eval %.8f, transformers %.8f" % (ours, ref))
    ours = init_from(cfg_path, os.path.join(WORK, "hf_gpt2_sharded"), "g_init_tp2pp2", tp=2, pp=2)
    check(close(ours, ref), "gpt2: train --init-from the sharded directory at tp2 pp2, then eval %.8f, "
          "transformers %.8f" % (ours, ref))


def main():
    global WORK, TRIDENT, TRIDENTRUN, VAL
    build = os.path.abspath(sys.argv[1])
    py = venv_python(build)
    if os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(build, "hf_venv")):
        os.execv(py, [py] + sys.argv)
    TRIDENT, TRIDENTRUN = os.path.join(build, "trident"), os.path.join(build, "tridentrun")
    WORK = tempfile.mkdtemp(prefix="tri_hf_")
    try:
        toks = data_tokens()
        cut = len(toks) * 9 // 10
        write_llmc(os.path.join(WORK, "train.bin"), toks[:cut])
        VAL = toks[cut:]
        write_llmc(os.path.join(WORK, "val.bin"), VAL)
        test_export()
        test_import_llama()
        test_import_llama_tied_mqa_fp16()
        test_import_gpt2()
    finally:
        if not FAILS and not os.environ.get("TRI_HF_KEEP"):
            shutil.rmtree(WORK, ignore_errors=True)
        else:
            print("work directory kept: " + WORK)
    print("%d failed" % len(FAILS))
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
