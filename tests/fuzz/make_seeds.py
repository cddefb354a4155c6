#!/usr/bin/python3
"""Writes the seed inputs of tests/fuzz/corpus/<harness>/seed-* (small,
valid files of each format, so that the fuzzer starts from what the parsers
accept). Standard library only; deterministic; rerun after changing a format.
Regression inputs (regress-*) are not touched: they are written by hand, one
per finding."""
import json, os, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- safetensors: u64 header length, JSON header padded to 8, F32 data
def safetensors(tensors, metadata=None):
    header, off, blob = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, shape, values in tensors:
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blob += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + blob


put("safetensors", "two-tensors", safetensors(
    [("wte.weight", [3, 2], [0.5, -1, 2, 3, 4, 5]), ("ln_f.bias", [2], [1, 2])],
    {"format": "pt", "producer": "trident"}))
put("safetensors", "scalar-and-empty", safetensors([("s", [], [7.0]), ("e", [0, 4], [])]))
put("safetensors", "3d", safetensors([("t", [2, 2, 2], list(range(8)))]))

# ---- llm.c token files: 256 int32 header (magic, version, count), tokens
def llmc(tokens, wide=False):
    magic, version, fmt = (20240801, 7, "<%dI") if wide else (20240520, 1, "<%dH")
    h = struct.pack("<256i", magic, version, len(tokens), *([0] * 253))
    return h + struct.pack(fmt % len(tokens), *tokens)


put("tokens_llmc", "u16", llmc([72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 10, 50256]))
put("tokens_llmc", "u32", llmc([1, 128000, 5, 70000, 2], wide=True))
put("tokens_llmc", "empty", llmc([]))

# ---- Megatron: "MMIDIDX\0\0", u64 version, u8 dtype, u64 N, u64 D,
# i32 lengths[N], i64 pointers[N], i64 doc_idx[D]; the .bin holds the tokens
def megatron(docs, dtype=8):
    size, code = {8: (2, "H"), 4: (4, "i"), 1: (1, "B"), 5: (8, "q")}[dtype]
    seqs = [s for d in docs for s in d]
    lens = [len(s) for s in seqs]
    ptrs, p = [], 0
    for n in lens:
        ptrs.append(p)
        p += n * size
    doc_idx, k = [0], 0
    for d in docs:
        k += len(d)
        doc_idx.append(k)
    idx = b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, dtype, len(seqs), len(doc_idx))
    idx += struct.pack("<%di" % len(lens), *lens) + struct.pack("<%dq" % len(ptrs), *ptrs)
    idx += struct.pack("<%dq" % len(doc_idx), *doc_idx)
    binary = b"".join(struct.pack("<%d%s" % (len(s), code), *s) for s in seqs)
    return struct.pack("<I", len(idx)) + idx + binary


put("tokens_megatron", "u16-two-docs", megatron([[[1, 2, 3], [4]], [[5, 6, 7, 8]]]))
put("tokens_megatron", "i32-one-doc", megatron([[[100000, 7, 9]]], dtype=4))
put("tokens_megatron", "u8", megatron([[[1, 2], [3]], [[4]], [[5, 6]]], dtype=1))

# ---- config + --set overrides (NUL-separated)
with open(os.path.join(HERE, "..", "..", "configs", "tiny-test.json"), "rb") as f:
    tiny = f.read()
put("config", "tiny-test", tiny)
put("config", "tiny-test-with-overrides", tiny + b"\0model.n_layer=3\0train.lr=0.01\0data.val=\0train.seed=18446744073709551615")
put("config", "sections", json.dumps({
    "model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "seq_len": 4, "vocab_size": 300},
    "train": {"global_batch": 4, "micro_batch": 2, "steps": 0, "seed": "12345", "eval_every": 2},
    "data": {"train": "0.5:a.bin,0.5:b.bin", "split": 0.1},
    "parallel": {"tp": 2, "dp": 2, "bucket_mb": 1.5},
    "checkpoint": {"dir": "ck", "every": 5, "keep": 2},
    "log": {"every": 1, "dir": "log", "peak_gflops": 100},
    "debug": {"fail_step": -1, "fail_rank": -1}}))

# ---- tokenizers: the 256 byte characters (GPT-2's bytes_to_unicode), a few merges
def byte_chars():
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}, bs


chars, order = byte_chars()
def tok(s):
    return "".join(chars[b] for b in s.encode())


merges = [("h", "e"), ("l", "l"), (" ", "t"), (" t", "he"), ("he", "ll"), ("hell", "o")]
vocab = {chars[b]: i for i, b in enumerate(order)}
for a, b in merges:
    vocab[tok(a + b)] = len(vocab)
eot = len(vocab)
vocab["<|endoftext|>"] = eot
merge_strs = ["%s %s" % (tok(a), tok(b)) for a, b in merges]
hf = {"version": "1.0", "added_tokens": [{"id": eot, "content": "<|endoftext|>", "special": True}],
      "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
      "model": {"type": "BPE", "vocab": vocab, "merges": merge_strs}}
put("tokenizer_json", "string-merges", json.dumps(hf, ensure_ascii=False))
hf["model"]["merges"] = [[tok(a), tok(b)] for a, b in merges]
put("tokenizer_json", "pair-merges", json.dumps(hf))
# the Llama 3 kind: Split by the cl100k pattern + ByteLevel, added tokens after
# the vocab (matched in the text), ignore_merges, Llama 3's post-processor
pattern = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
           " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
v3 = {k: i for k, i in vocab.items() if k != "<|endoftext|>"}
l3 = {"version": "1.0",
      "added_tokens": [{"id": len(v3) + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                        "normalized": False, "special": True}
                       for i, c in enumerate(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])],
      "normalizer": None,
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
          {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
      "post_processor": {"type": "Sequence", "processors": [
          {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
          {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                                    {"Sequence": {"id": "A", "type_id": 0}}],
           "pair": [], "special_tokens": {}}]},
      "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
      "model": {"type": "BPE", "ignore_merges": True, "vocab": v3, "merges": merge_strs}}
put("tokenizer_json", "llama3", json.dumps(l3, ensure_ascii=False))
put("tokenizer_gpt2", "hand", json.dumps(vocab, ensure_ascii=False).encode() + b"\0#version: 0.2\n" +
    "\n".join(merge_strs).encode() + b"\n")

# ---- checkpoint pieces
# latest, a NUL, then step_00000012/manifest.json (config.json there is "{}\n")
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def manifest(step, files):
    return json.dumps({"format": "trident-checkpoint", "version": 1, "step": step, "run": "0123456789abcdef",
                       "checksum": "crc32c",
                       "files": [{"name": n, "size": len(d), "crc32c": "%08x" % crc32c(d)} for n, d in files]})


good = manifest(12, [("config.json", b"{}\n")])
put("ckpt_store", "latest-12-verified", b"step_00000012\n\0" + good.encode())
put("ckpt_store", "latest-7-newer-verified", b"step_00000007\n\0" + good.encode())
put("ckpt_store", "latest-7-no-manifest", b"step_00000007\r\n")
put("ckpt_store", "damaged-crc", b"step_00000012\n\0" + manifest(12, [("config.json", b"{}\r")]).encode())
put("ckpt_store", "wrong-step", b"\0" + manifest(11, [("config.json", b"{}\n")]).encode())
cfg = json.loads(tiny)
put("ckpt_state", "trainer", json.dumps({
    "step": 10, "samples_consumed": 80, "tokens_consumed": 1280, "loss": 3.25,
    "rng": {"seed": "1337", "data": "..."}, "config": cfg}, indent=2))
put("ckpt_state", "trainer-bad-steps", json.dumps({
    "step": 10, "samples_consumed": 80, "tokens_consumed": 1280, "loss": 3.25,
    "rng": {"seed": "1337", "data": "..."}, "config": cfg,
    "bad_steps": {"skipped_steps": 3, "bad_in_a_row": 1, "streak_begin": 72, "rollbacks": 1,
                  "spike_mean": 5.5484, "spike_count": 8, "skip_samples": [[48, 64], [96, 104]]}}, indent=2))
put("hf_config", "gpt2", json.dumps({
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768, "n_head": 12,
    "n_layer": 12, "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257,
    "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}, indent=2))

# ---- blend specs: 3 bytes (seq_len, split fraction, part), then the spec
put("blend", "one-file", b"\x0f\x00\x00a.bin")
put("blend", "weighted", b"\x07\x00\x00" + b"0.7:a.bin, 0.3:b.bin")
put("blend", "megatron-prefix-split-val", b"\x03\xa0\x01" + b"m,b.bin")
put("blend", "thirds", b"\x01\x00\x00" + b"1:a.bin,1:m.idx,1:b.bin")
