#!/usr/bin/python3
"""Trident's tokenizer against Hugging Face `tokenizers` (the reference).

  1. HF trains byte-level BPE tokenizers on the bundled corpus (the King James
     Bible) plus generated multilingual text: the Llama 3 kind (Split by the
     Llama 3 / GPT-4 pattern, then ByteLevel; special tokens; ignore_merges,
     with whole-word vocab entries added that BPE would not produce) and the
     GPT-2 kind (ByteLevel). Trident loads each tokenizer.json and encodes the
     test documents (hand-written hard cases: CJK, combining marks, emoji,
     RTL, mixed scripts, long digit runs, white-space runs, newlines,
     contractions in mixed case, special tokens; and random strings of many
     scripts): the ids must equal HF's encode(add_special_tokens=False), and
     Trident's decode must equal HF's decode (skip_special_tokens=False).
  2. `trident tokenize train --pattern llama3` writes a tokenizer.json; HF
     loads it and must encode every document to the same ids as Trident.
  3. Tokenizers of kinds Trident does not implement, written by HF (Unigram,
     WordPiece, WordLevel models, Metaspace / Whitespace pre-tokenizers, an
     NFC normalizer, another Split pattern), are refused with exit code 2 and
     a message naming the file and the model, pre-tokenizer or normalizer.

The reference runs in a virtualenv under the build directory
(BUILD/hf_tok_venv, `pip install tokenizers`, made once and reused). Where it
cannot be made (no network, no venv module), the test is skipped (exit 77)
with a message saying why.

With --big it also checks a tokenizer of Llama 3's size and shape (see big()).

usage: test_hf_tokenizer.py TRIDENT SOURCE_DIR BUILD_DIR [--big]
"""
import json
import lzma
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

SKIP = 77


def ensure_venv(build):
    venv = os.path.join(build, "hf_tok_venv")
    py = os.path.join(venv, "bin", "python")
    ok = os.path.join(venv, ".tokenizers_ok")
    if os.path.exists(ok):
        return py
    try:
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "tokenizers"], check=True, capture_output=True,
                       timeout=600)
        subprocess.run([py, "-c", "import tokenizers"], check=True, capture_output=True)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        err = getattr(e, "stderr", b"") or b""
        print("SKIP: cannot install Hugging Face tokenizers into %s: %s %s" %
              (venv, e, err.decode(errors="replace")[-300:]))
        sys.exit(SKIP)
    open(ok, "w").close()
    return py


# ---- the test text ---------------------------------------------------------------------

HARD = [
    "Hello world! I'm here, you're there; they'll come, we've seen, she'd go, it's HIS.",
    "CONTRACTIONS: I'M, YOU'RE, THEY'LL, WE'VE, SHE'D, IT'S, DON'T; Mixed: I'm I'M i'M You'Re They'LL We'vE",
    "apostrophes 'tis 'twas 'hello' ''s 's 'S 'ſ x'ſ x'ſa 'ſſ 'ﬅ 'İs don\u2019t 'Sa 'LLama 'Dx",
    "numbers: 1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 -42 +7 0x1F 2024-11-27 12:30:45",
    "digits 98765432109876543210 and ٠١٢٣٤٥٦٧٨٩ and १२३४ and １２３４５ and ²³ ½ Ⅻ",
    "white   space\t\ttabs \t mixed  \n\n\n  \r\n\r\n lines\n \n\t\n    indented\n",
    "trailing spaces   ",
    "   leading spaces",
    "\n\n\nonly newlines then text\n",
    "punct!!! ...\n(parens)\n[brackets]\r\n{braces}\n\n\"quotes\"\n#include <stdio.h>\n",
    "code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; }\n\treturn x;\n",
    "中文文本，包含标点。日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다.",
    "combining: e\u0301 a\u0300 n\u0303 o\u0308 Z\u0351\u0352\u0353a\u0354l\u0355g\u0356o\u0357 \u0915\u093f \u0928\u092e\u0938\u094d\u0924\u0947",
    "emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇩🇪 ❤️ 🏳️‍🌈 ✈️  ☕ smile😀word",
    "RTL: שלום עולם، مرحبا بالعالم! العربية ١٢٣ עברית 456 mixed עם English",
    "mixed: Ελληνικά Русский ไทย ગુજરાતી தமிழ் ქართული Հայերեն አማርኛ",
    "nbsp\u00a0here\u2003em\u2009thin\u3000ideographic \u00a0\u00a0double",
    "specials: <|begin_of_text|>Hello<|end_of_text|> <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "partial <|begin_of_text| <|begin_of_text|><|begin_of_text|> <|eot_id|>x<|eot_id|>",
    "\u2028line sep\u2029para sep\u0085nel\x0bvt\x0cff",
    "AbCdEfG HIJKLmnop QRS'S tuv'T",
    "added: Q<tool>x Q<tool Q<<tool>> <tool><tool>Q<Q< a@b @@ <@tool> email@example.com @",
    "GPT-2's: a<|endoftext|>b <|endoftext|>\n<|endoftext|",
]

# Code point ranges to draw random text from: Latin, Greek, Cyrillic, Hebrew,
# Arabic, Devanagari, Thai, CJK, Hangul, combining marks, emoji, symbols,
# punctuation, digits of several scripts, white space of several kinds.
RANGES = [(0x20, 0x7E), (0xA0, 0x17F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF),
          (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x2000, 0x206F), (0x3000, 0x30FF),
          (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF), (0xFF00, 0xFFEF)]
WS = [" ", " ", " ", "  ", "\n", "\n\n", "\t", "\r\n", " \n", "\u00a0", "\u3000", "   "]


def random_doc(rng, n):
    out = []
    while len(out) < n:
        r = rng.random()
        if r < 0.25:
            out.append(rng.choice(WS))
        elif r < 0.3:
            out.append(rng.choice(["'s", "'T", "'re", "'VE", "'m", "'Ll", "'d", "'x"]))
        elif r < 0.35:
            out.append(str(rng.randrange(10 ** rng.randrange(1, 12))))
        else:
            a, b = rng.choice(RANGES)
            k = rng.randrange(1, 8)
            out.append("".join(chr(rng.randrange(a, b + 1)) for _ in range(k)))
    return "".join(out)


def corpus_text(src, rng):
    with lzma.open(os.path.join(src, "data", "corpus", "kjv.txt.xz"), "rt", encoding="utf-8") as f:
        kjv = f.read(1 << 20)
    multi = "".join(random_doc(rng, 200) + "\n" for _ in range(600))
    return kjv + "\n" + multi + "\n".join(HARD[:-4]) + "\n"


# ---- running Trident --------------------------------------------------------------------


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, **kw)


def trident_encode(trident, tok, docs, tmp, tag, extra=(), fmt="megatron"):
    """Trident's ids for each document (Megatron format, one sequence per
    document, the EOT after each one when the tokenizer has it); with
    fmt="llmc" all the ids of the llm.c file."""
    jl = os.path.join(tmp, tag + ".jsonl")
    with open(jl, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    prefix = os.path.join(tmp, tag)
    r = run([trident, "tokenize", "encode", "--tokenizer", tok, "--format", fmt, "--out", prefix,
             "--jsonl", "--quiet", "--threads", "2", jl] + list(extra))
    if r.returncode != 0:
        sys.exit("FAIL: trident tokenize encode with %s: %s" % (tok, r.stderr.decode(errors="replace")))
    if fmt == "llmc":
        data = open(prefix + ".bin", "rb").read()
        magic, version, n = struct.unpack_from("<3i", data, 0)
        fmt_c = "I" if (magic, version) == (20240801, 7) else "H"
        return list(struct.unpack_from("<%d%s" % (n, fmt_c), data, 1024)), prefix + ".bin"
    idx = open(prefix + ".idx", "rb").read()
    dtype = idx[17]
    n = struct.unpack_from("<Q", idx, 18)[0]
    lens = struct.unpack_from("<%di" % n, idx, 34)
    fmt = {4: "i", 8: "H", 100: "I"}[dtype]
    size = struct.calcsize(fmt)
    data = open(prefix + ".bin", "rb").read()
    allids = list(struct.unpack("<%d%s" % (len(data) // size, fmt), data))
    out, k = [], 0
    for ln in lens:
        out.append(allids[k:k + ln])
        k += ln
    return out, prefix + ".bin"


def trident_decode(trident, tok, binpath):
    r = run([trident, "tokenize", "decode", "--tokenizer", tok, binpath])
    if r.returncode != 0:
        sys.exit("FAIL: trident tokenize decode with %s: %s" % (tok, r.stderr.decode(errors="replace")))
    return r.stdout


FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL: " + msg)


def compare(trident, hf, tokpath, docs, tmp, tag, eot_name, extra=()):
    got, binpath = trident_encode(trident, tokpath, docs, tmp, tag, extra)
    fails0 = len(FAILS)
    eot = hf.token_to_id(eot_name) if eot_name else None
    n_tok = 0
    want_all = []
    for i, d in enumerate(docs):
        want = hf.encode(d, add_special_tokens=False).ids
        if eot is not None:
            want = want + [eot]
        want_all += want
        n_tok += len(want)
        if got[i] != want:
            j = next((k for k in range(min(len(want), len(got[i]))) if want[k] != got[i][k]), None)
            check(False, "%s: document %d (%r...): ids differ at %s: trident %s, HF %s" %
                  (tag, i, d[:60], j, got[i][max(0, (j or 0) - 3):(j or 0) + 5],
                   want[max(0, (j or 0) - 3):(j or 0) + 5]))
    # decode: Trident's text of all ids == HF's decode of the same ids
    text = trident_decode(trident, tokpath, binpath)
    href = hf.decode(want_all, skip_special_tokens=False)
    check(text == href.encode("utf-8"), "%s: trident decode (%d bytes) != HF decode (%d bytes)" %
          (tag, len(text), len(href.encode("utf-8"))))
    print("%s: %d documents, %d tokens, %d bytes decoded: %s" %
          (tag, len(docs), n_tok, len(text), "same as HF" if len(FAILS) == fails0 else "DIFFERENT"))


def hf_train_llama(corpus_path, vocab, specials, ignore_merges):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    pat = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
           "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    t = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t.train([corpus_path], tr)
    return t


def llama_post_processor(t):
    """Llama 3's post-processor: ByteLevel, then a template that puts
    <|begin_of_text|> first (HF applies it only with add_special_tokens)."""
    from tokenizers import processors
    t.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", t.token_to_id("<|begin_of_text|>"))])])


def big(trident, src, tmp, rng):
    """--big: a tokenizer of Llama 3's shape and size (128,000 vocab entries
    with ignore_merges, <|begin_of_text|> and <|end_of_text|> among them, 253
    more special tokens after them, Llama 3's post-processor), trained by HF
    on the corpus plus 3 MB of generated text (about a minute and a half on
    two cores), then the test documents and the whole Bible."""
    from tokenizers import AddedToken
    corpus = os.path.join(tmp, "big_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(corpus_text(src, rng) + "".join(random_doc(rng, 300) + "\n" for _ in range(3000)))
    hf = hf_train_llama(corpus, 128000, ["<|begin_of_text|>", "<|end_of_text|>"], True)
    names = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"] + \
        ["<|reserved_special_token_%d|>" % i for i in range(250)]
    hf.add_special_tokens([AddedToken(n, special=True, normalized=False) for n in names])
    llama_post_processor(hf)
    p = os.path.join(tmp, "big.json")
    hf.save(p)
    docs = HARD + [random_doc(rng, rng.randrange(5, 2000)) for _ in range(500)]
    docs = [d.replace("<|end_of_text|>", "<|reserved_special_token_7|>") for d in docs]
    with lzma.open(os.path.join(src, "data", "corpus", "kjv.txt.xz"), "rt", encoding="utf-8") as f:
        docs.append(f.read())
    compare(trident, hf, p, docs, tmp, "big (vocab %d)" % hf.get_vocab_size(), "<|end_of_text|>")


def add_whole_words(path, out, hf, docs, k):
    """Writes `out`: the tokenizer of `path` with ignore_merges and vocab
    entries for k (None: all) pre-tokens of the documents that BPE splits in
    two or more. Such a pre-token comes out whole (HF's rule), so with all
    of them every pre-token is one id and the ids compare the pre-token
    boundaries themselves, not only the BPE result."""
    import re
    from tokenizers import Tokenizer
    j = json.load(open(path, encoding="utf-8"))
    j["model"]["ignore_merges"] = True
    vocab = j["model"]["vocab"]
    specials = "|".join(re.escape(a["content"]) for a in j["added_tokens"]) or "(?!)"
    seen = []
    for d in docs:
        for piece in re.split(specials, d) if hf.token_to_id("<|begin_of_text|>") is not None else [d]:
            for w, _ in hf.pre_tokenizer.pre_tokenize_str(piece):
                if w in vocab or w in seen or (k and len(w) < 4) or len(hf.model.tokenize(w)) < 2:
                    continue
                seen.append(w)
                if len(seen) == k:
                    break
            if len(seen) == k:
                break
        if len(seen) == k:
            break
    # the new entries take the ids after the vocab; added tokens that are not
    # vocab entries move behind them (HF numbers those after the vocab)
    nxt = len(vocab)
    for w in seen:
        vocab[w] = nxt
        nxt += 1
    for a in j["added_tokens"]:
        if a["content"] not in vocab:
            a["id"] = nxt
            nxt += 1
    json.dump(j, open(out, "w", encoding="utf-8"), ensure_ascii=False)
    return Tokenizer.from_file(out), seen


def refusals(trident, tmp):
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
    small = {"a": 0, "b": 1, "[UNK]": 2}
    cases = []
    t = Tokenizer(models.Unigram([("a", -1.0), ("b", -2.0)], 0, False))
    cases.append(("unigram", t, "Unigram"))
    t = Tokenizer(models.WordPiece(small, unk_token="[UNK]"))
    cases.append(("wordpiece", t, "WordPiece"))
    t = Tokenizer(models.WordLevel(small, unk_token="[UNK]"))
    cases.append(("wordlevel", t, "WordLevel"))
    base = os.path.join(tmp, "hf_llama.json")
    t = Tokenizer.from_file(base)
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    cases.append(("metaspace", t, "Metaspace"))
    t = Tokenizer.from_file(base)
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    cases.append(("whitespace", t, "Whitespace"))
    t = Tokenizer.from_file(base)
    t.normalizer = normalizers.NFC()
    cases.append(("nfc", t, "NFC"))
    t = Tokenizer.from_file(base)
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\\p{N}+|\\p{L}+|[^\\p{L}\\p{N}]+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    cases.append(("otherpattern", t, "is not a split pattern"))
    t = Tokenizer.from_file(base)
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    cases.append(("prefixspace", t, "add_prefix_space"))
    txt = os.path.join(tmp, "refuse.txt")
    open(txt, "w").write("some text\n")
    for name, t, want in cases:
        p = os.path.join(tmp, "refuse_%s.json" % name)
        t.save(p)
        r = run([trident, "tokenize", "encode", "--tokenizer", p, "--format", "llmc", "--out",
                 os.path.join(tmp, "refused"), txt])
        err = r.stderr.decode(errors="replace")
        check(r.returncode == 2 and p in err and want in err,
              "refusal %s: exit %d, message %r (want exit 2 naming %s and %r)" % (name, r.returncode, err, p, want))
        check(not os.path.exists(os.path.join(tmp, "refused.bin")), "refusal %s: an output was written" % name)
    print("refusals: %d kinds refused, each naming the file and the kind" % len(cases))


def main():
    trident, src, build = sys.argv[1:4]
    if os.environ.get("TRI_HF_TOK_IN_VENV") != "1":
        py = ensure_venv(build)
        env = dict(os.environ, TRI_HF_TOK_IN_VENV="1")
        sys.exit(subprocess.run([py] + sys.argv, env=env).returncode)
    import tokenizers
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    print("Hugging Face tokenizers %s" % tokenizers.__version__)
    rng = random.Random(20)
    tmp = tempfile.mkdtemp(prefix="hf_tok_", dir=build)
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(corpus_text(src, rng))
    docs = HARD + [random_doc(rng, rng.randrange(5, 400)) for _ in range(300)]
    docs.append("".join(docs[:40]))  # one long document
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

    # 1a. HF's Llama 3 kind, ignore_merges, with whole-word entries BPE would not make
    hf = hf_train_llama(corpus, 3000, specials, True)
    # added tokens that are not special: "<tool>" and "@" are matched first
    # (normalized: false), "Q<" in the gaps (normalized: true)
    hf.add_tokens([AddedToken("<tool>", normalized=False, special=False),
                   AddedToken("Q<", normalized=True, special=False),
                   AddedToken("@", normalized=False, special=False)])
    llama_post_processor(hf)
    p = os.path.join(tmp, "hf_llama.json")
    hf.save(p)
    hf0 = hf
    hf, words = add_whole_words(p, p, hf, docs, 20)
    print("hf_llama: vocab %d, %d whole-word entries added (e.g. %r)" % (hf.get_vocab_size(), len(words), words[:3]))
    check(len(words) == 20, "could not find 20 words for ignore_merges")
    compare(trident, hf, p, docs, tmp, "hf_llama", "<|end_of_text|>")
    # 1b. the same without ignore_merges, merges written as "a b" strings
    j = json.load(open(p, encoding="utf-8"))
    j["model"]["ignore_merges"] = False
    j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    p2 = os.path.join(tmp, "hf_llama_strmerges.json")
    json.dump(j, open(p2, "w", encoding="utf-8"), ensure_ascii=False)
    compare(trident, Tokenizer.from_file(p2), p2, docs, tmp, "hf_llama_strmerges", "<|end_of_text|>")
    # OLMo 2's form of the same Split: behavior Removed, inverted
    j["pre_tokenizer"]["pretokenizers"][0].update(behavior="Removed", invert=True)
    p3 = os.path.join(tmp, "hf_llama_removed.json")
    json.dump(j, open(p3, "w", encoding="utf-8"), ensure_ascii=False)
    compare(trident, Tokenizer.from_file(p3), p3, docs, tmp, "hf_llama_removed_inverted", "<|end_of_text|>")
    # 1c. every pre-token HF makes is a vocab entry: one id per pre-token
    pw = os.path.join(tmp, "hf_llama_words.json")
    hw, words = add_whole_words(p, pw, hf0, docs, None)
    compare(trident, hw, pw, docs, tmp, "hf_llama_pretokens (%d words)" % len(words), "<|end_of_text|>")
    # 1c'. special tokens' text as text (HF's split_special_tokens; non-special
    #      added tokens are still found); and the llm.c file of llm.c's Llama 3
    #      recipe: <|begin_of_text|>, then encode(doc, add_special_tokens=False,
    #      split_special_tokens=True), for each document
    hf.encode_special_tokens = True
    compare(trident, hf, p, docs, tmp, "hf_llama_split_special", "<|end_of_text|>", ["--split-special-tokens"])
    got, _ = trident_encode(trident, p, docs, tmp, "hf_llama_llmc", ["--split-special-tokens"], "llmc")
    bos = hf.token_to_id("<|begin_of_text|>")
    want = [t for d in docs for t in [bos] + hf.encode(d, add_special_tokens=False).ids]
    check(got == want, "hf_llama_llmc: the llm.c file differs from llm.c's Llama 3 recipe")
    print("hf_llama_llmc: %d tokens, <|begin_of_text|> before each document: %s" %
          (len(got), "same as HF" if got == want else "DIFFERENT"))
    hf.encode_special_tokens = False
    # 1d. the GPT-2 kind (ByteLevel with its own regex; Trident encodes added tokens' text as text,
    #     so the documents here hold none)
    g = Tokenizer(models.BPE())
    g.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    g.decoder = decoders.ByteLevel()
    g.train([corpus], trainers.BpeTrainer(vocab_size=2000, special_tokens=["<|endoftext|>"], show_progress=False,
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    pg = os.path.join(tmp, "hf_gpt2.json")
    g.save(pg)
    plain = [d for d in docs if "<|" not in d]
    compare(trident, g, pg, plain, tmp, "hf_gpt2", "<|endoftext|>")
    # with all the documents: the GPT-2 kind encodes special tokens' text as
    # text, as HF does with split_special_tokens
    g.encode_special_tokens = True
    compare(trident, g, pg, docs, tmp, "hf_gpt2_split_special", "<|endoftext|>")
    g.encode_special_tokens = False
    pgw = os.path.join(tmp, "hf_gpt2_words.json")
    gw, words = add_whole_words(pg, pgw, g, plain, None)
    compare(trident, gw, pgw, plain, tmp, "hf_gpt2_pretokens (%d words)" % len(words), "<|endoftext|>")

    # 2. Trident trains the Llama 3 kind; HF loads its file
    pt = os.path.join(tmp, "trident_llama.json")
    r = run([trident, "tokenize", "train", "--pattern", "llama3", "--vocab-size", "3000", "--out", pt,
             "--threads", "2", corpus])
    if r.returncode != 0:
        sys.exit("FAIL: trident tokenize train --pattern llama3: %s" % r.stderr.decode(errors="replace"))
    ht = Tokenizer.from_file(pt)
    check(ht.get_vocab_size() == 3000, "trident_llama: HF sees vocab %d, not 3000" % ht.get_vocab_size())
    tdocs = [d.replace("<|start_header_id|>", "<|begin_of_text|>").replace("<|end_header_id|>", "<|end_of_text|>")
             .replace("<|eot_id|>", "<|begin_of_text|>") for d in docs]
    compare(trident, ht, pt, tdocs, tmp, "trident_llama", "<|end_of_text|>")
    # the pre-tokens HF finds in the trained file are those of the pattern
    check(ht.pre_tokenizer.pre_tokenize_str("a  1234\n\n b.\n")[1][0] == "Ġ",
          "trident_llama: HF does not read the Split pattern of Trident's file")

    # 3. kinds Trident does not implement
    refusals(trident, tmp)

    if "--big" in sys.argv[4:]:
        big(trident, src, tmp, rng)

    if FAILS:
        print("%d failure(s)" % len(FAILS))
        sys.exit(1)
    shutil.rmtree(tmp)
    print("all equal to Hugging Face tokenizers %s" % tokenizers.__version__)


if __name__ == "__main__":
    main()
