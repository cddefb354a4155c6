/* tokenizer.json of the Llama 3 kind (data/tok/vocab.c loading and saving,
 * data/tok/bpe.c's added-token matching and ignore_merges, data/tok/train.c
 * with the Llama 3 pattern), and the refusal of kinds Trident does not
 * implement.
 *
 * Independent references: a hand-made tokenizer.json whose encodings are
 * derived by hand below from the pattern, the merge ranks and Hugging
 * Face's rules (added tokens found first, leftmost then longest, those with
 * "normalized": false before the others; with ignore_merges a pre-token
 * that is a vocab entry is that entry); GPT-2's bytes_to_unicode rebuilt
 * here from its definition. The comparison with Hugging Face tokenizers
 * itself is tests/scripts/test_hf_tokenizer.py. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cmd_tokenize.h"
#include "data/dataset.h"
#include "data/tok/tokenizer.h"

static char g_dir[256];

static void make_dir(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/tri_vocab_XXXXXX");
    cr_assert(mkdtemp(g_dir) != NULL);
}

static void remove_dir(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (g_dir[0] && system(cmd) != 0) cr_log_warn("could not remove %s", g_dir);
}

static const char *path_in(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert(f != NULL, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    cr_assert_eq(fseek(f, 0, SEEK_SET), 0);
    char *buf = malloc((size_t)len + 1);
    cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    buf[len] = 0;
    fclose(f);
    return buf;
}

static void write_str(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    cr_assert(f != NULL);
    cr_assert_eq(fwrite(s, 1, strlen(s), f), strlen(s));
    cr_assert_eq(fclose(f), 0);
}

/* GPT-2's bytes_to_unicode, from its definition: the printable bytes stand
 * for themselves, in increasing order, then the other 68 bytes become 256,
 * 257, ... in increasing order; ids 0..255 follow that order. */
static void byte_chars(uint8_t byte_of_id[256], uint32_t char_of_id[256]) {
    int k = 0, extra = 0;
    for (int b = 0; b < 256; b++)
        if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
            byte_of_id[k] = (uint8_t)b;
            char_of_id[k++] = (uint32_t)b;
        }
    for (int b = 0; b < 256; b++)
        if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
            byte_of_id[k] = (uint8_t)b;
            char_of_id[k++] = 256u + (uint32_t)extra++;
        }
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Id of byte b (its position in GPT-2's base order). */
static int32_t bid(uint8_t b) {
    uint8_t by[256];
    uint32_t ch[256];
    byte_chars(by, ch);
    for (int i = 0; i < 256; i++)
        if (by[i] == b) return i;
    return -1;
}

#define K_PATTERN                                                                                                    \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+" \
    "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

#define K_PRE_LLAMA3                                                                                           \
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"" K_PATTERN \
    "\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": "    \
    "false, \"trim_offsets\": true, \"use_regex\": false}]}"

#define K_ADDED                                                                                    \
    "{\"id\": 262, \"content\": \"<|begin_of_text|>\", \"special\": true, \"normalized\": false}," \
    "{\"id\": 263, \"content\": \"<|end_of_text|>\", \"special\": true, \"normalized\": false},"   \
    "{\"id\": 264, \"content\": \"<|x|>\", \"special\": false, \"normalized\": false},"            \
    "{\"id\": 265, \"content\": \"<|x|>y\", \"special\": false, \"normalized\": false},"           \
    "{\"id\": 266, \"content\": \"Q<\", \"special\": false, \"normalized\": true}"

/* Writes a tokenizer.json of the Llama 3 kind: the 256 bytes (ids 0..255),
 * merges Ġ t, h e, Ġt he, 1 2, 12 3 (ids 256..260, given as "a b" strings
 * or as pairs), the vocab entry Ġtea (261) that no merge makes, and the
 * added tokens of K_ADDED. Any of the components may be replaced. */
typedef struct hf_parts {
    const char *normalizer, *pre, *decoder, *post, *model_type, *model_extra, *added;
    int pair_merges, ignore_merges;
} hf_parts;

static void write_llama_json(const char *path, const hf_parts *p) {
    uint8_t by[256];
    uint32_t ch[256];
    byte_chars(by, ch);
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n,
                          "{\"version\": \"1.0\", \"added_tokens\": [%s], \"normalizer\": %s, \"pre_tokenizer\": %s, "
                          "\"post_processor\": %s, \"decoder\": %s, \"model\": {\"type\": \"%s\", %s "
                          "\"ignore_merges\": %s, \"vocab\": {",
                          p->added ? p->added : K_ADDED, p->normalizer ? p->normalizer : "null",
                          p->pre ? p->pre : K_PRE_LLAMA3, p->post ? p->post : "null",
                          p->decoder ? p->decoder : "{\"type\": \"ByteLevel\"}", p->model_type ? p->model_type : "BPE",
                          p->model_extra ? p->model_extra : "", p->ignore_merges ? "true" : "false");
    for (int i = 0; i < 256; i++) {
        s[n++] = '"';
        if (ch[i] == '"' || ch[i] == '\\') s[n++] = '\\';
        n += put_utf8(s + n, ch[i]);
        n += (size_t)snprintf(s + n, cap - n, "\": %d, ", i);
    }
    n += (size_t)snprintf(s + n, cap - n,
                          "\"\xC4\xA0t\": 256, \"he\": 257, \"\xC4\xA0the\": 258, \"12\": 259, \"123\": 260, "
                          "\"\xC4\xA0tea\": 261}, \"merges\": %s}}",
                          p->pair_merges ? "[[\"\xC4\xA0\", \"t\"], [\"h\", \"e\"], [\"\xC4\xA0t\", \"he\"], [\"1\", "
                                           "\"2\"], [\"12\", \"3\"]]"
                                         : "[\"\xC4\xA0 t\", \"h e\", \"\xC4\xA0t he\", \"1 2\", \"12 3\"]");
    cr_assert(n < cap);
    write_str(path, s);
    free(s);
}

static void expect_ids(const tri_tokenizer *tk, const char *text, const int32_t *want, size_t nwant) {
    int32_t *ids;
    size_t n = tri_tokenizer_encode(tk, text, strlen(text), &ids);
    cr_assert_eq(n, nwant, "\"%s\": %zu tokens, expected %zu", text, n, nwant);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], want[i], "\"%s\": token %zu is %d, expected %d", text, i, ids[i], want[i]);
    char *back;
    size_t m = tri_tokenizer_decode(tk, ids, n, &back);
    cr_assert(m == strlen(text) && memcmp(back, text, m) == 0, "\"%s\" decodes to \"%s\"", text, back);
    free(back);
    free(ids);
}

/* The encodings of the hand-made file, derived by hand:
 *  - "<|begin_of_text|>" is found first (262); the gap " the 123" is
 *    pre-tokenized " the" | " " | "123" (a space before a number stands
 *    alone), BPE gives Ġthe (258; ranks Ġ t, h e, Ġt he), Ġ (byte 0x20),
 *    123 (260); then "<|x|>y" (265) beats "<|x|>" (264) at the same place
 *    (longest), and "4" is its byte;
 *  - "Q<|x|>z": "<|x|>" (normalized: false) is taken before "Q<"
 *    (normalized: true) can be, so Q | <|x|> | z; in "Q<|x" only "Q<" is there;
 *  - " tea": with ignore_merges the whole pre-token is the entry Ġtea (261);
 *    without, BPE gives Ġt e a. */
static void check_hand(const tri_tokenizer *tk, int ignore_merges) {
    cr_assert_eq(tk->pattern, TRI_TOK_PAT_LLAMA3);
    cr_assert_eq(tk->vocab_size, 267);
    cr_assert_eq(tri_tokenizer_eot(tk), 263, "the EOT is <|end_of_text|>");
    expect_ids(tk, "<|begin_of_text|> the 123<|x|>y4", (const int32_t[]){262, 258, bid(' '), 260, 265, bid('4')}, 6);
    expect_ids(tk, "Q<|x|>z", (const int32_t[]){bid('Q'), 264, bid('z')}, 3);
    expect_ids(tk, "Q<|x", (const int32_t[]){266, bid('|'), bid('x')}, 3);
    expect_ids(tk, "<|end_of_text|><|end_of_text|>", (const int32_t[]){263, 263}, 2);
    if (ignore_merges)
        expect_ids(tk, " tea", (const int32_t[]){261}, 1);
    else
        expect_ids(tk, " tea", (const int32_t[]){256, bid('e'), bid('a')}, 3);
    /* an unfinished special token is text: "<|" "end" ... */
    int32_t *ids;
    size_t n = tri_tokenizer_encode(tk, "<|end_of_text|", 14, &ids);
    cr_assert(n > 1);
    for (size_t i = 0; i < n; i++) cr_assert(ids[i] < 256, "a partial added token gave id %d", ids[i]);
    free(ids);
}

Test(tok_llama3_json, hand_made_file_encodes_as_derived, .init = make_dir, .fini = remove_dir) {
    char p[400];
    for (int form = 0; form < 4; form++) {
        hf_parts parts = {.pair_merges = form & 1, .ignore_merges = (form >> 1) & 1};
        write_llama_json(path_in(p, sizeof p, "tokenizer.json"), &parts);
        tri_tokenizer tk;
        cr_assert_eq(tri_tokenizer_load(&tk, p), 0, "form %d", form);
        cr_assert_eq(tk.ignore_merges, parts.ignore_merges);
        check_hand(&tk, parts.ignore_merges);
        /* saved by Trident, loaded again: the same kind and encodings */
        char q[400];
        cr_assert_eq(tri_tokenizer_save(&tk, path_in(q, sizeof q, "saved.json")), 0);
        tri_tokenizer tk2;
        cr_assert_eq(tri_tokenizer_load(&tk2, q), 0);
        check_hand(&tk2, parts.ignore_merges);
        char *txt = read_all(q);
        cr_assert(strstr(txt, "\"type\": \"Split\"") && strstr(txt, K_PATTERN), "the saved file has the pattern");
        cr_assert_eq(strstr(txt, "\"ignore_merges\": true") != NULL, parts.ignore_merges);
        free(txt);
        tri_tokenizer_free(&tk2);
        tri_tokenizer_free(&tk);
    }
}

/* With the special tokens split (Hugging Face's split_special_tokens), the
 * text of <|begin_of_text|> is pre-tokenized and merged like any text:
 * "<|" | "begin" | "_of" | "_text" | "|>" | " the" (punctuation runs, and
 * "_" prefixing letters), no merge applies but Ġ t, Ġt he; the non-special
 * <|x|> is still one id (264). */
Test(tok_llama3_json, split_special_tokens, .init = make_dir, .fini = remove_dir) {
    char p[400];
    hf_parts parts = {.ignore_merges = 1};
    write_llama_json(path_in(p, sizeof p, "tokenizer.json"), &parts);
    tri_tokenizer tk;
    cr_assert_eq(tri_tokenizer_load(&tk, p), 0);
    cr_assert_eq(tri_tokenizer_bos(&tk), 262);
    cr_assert_eq(tri_tokenizer_split_special(&tk, 1), 0);
    const char *text = "<|begin_of_text|> the<|x|>";
    int32_t want[32];
    size_t n = 0;
    for (const char *c = "<|begin_of_text|>"; *c; c++) want[n++] = bid((uint8_t)*c);
    want[n++] = 258;
    want[n++] = 264;
    expect_ids(&tk, text, want, n);
    cr_assert_eq(tri_tokenizer_split_special(&tk, 0), 0);
    expect_ids(&tk, text, (const int32_t[]){262, 258, 264}, 3);
    tri_tokenizer_free(&tk);
}

/* Sends stderr to a file (each Criterion test is a process of its own). */
static char g_err[400];

static void capture_stderr(void) {
    path_in(g_err, sizeof g_err, "stderr.txt");
    fflush(stderr);
    cr_assert(freopen(g_err, "w", stderr) != NULL);
}

static int stderr_has(const char *needle) {
    fflush(stderr);
    char *buf = read_all(g_err);
    int found = strstr(buf, needle) != NULL;
    free(buf);
    return found;
}

/* Each kind Trident does not implement is refused, the message naming the
 * file and the component at fault. */
Test(tok_llama3_json, other_kinds_are_refused_by_name, .init = make_dir, .fini = remove_dir) {
    capture_stderr();
    struct {
        const char *name;
        hf_parts parts;
        const char *want;
    } cases[] = {
        {"unigram", {.model_type = "Unigram"}, "model.type is \"Unigram\""},
        {"wordpiece", {.model_type = "WordPiece"}, "model.type is \"WordPiece\""},
        {"nfc", {.normalizer = "{\"type\": \"NFC\"}"}, "normalizer \"NFC\""},
        {"metaspace", {.pre = "{\"type\": \"Metaspace\", \"replacement\": \"_\"}"}, "pre_tokenizer \"Metaspace\""},
        {"digits",
         {.pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\"}, {\"type\": \"ByteLevel\"}]}"},
         "Sequence of [Digits, ByteLevel]"},
        {"otherregex",
         {.pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                 "\"\\\\p{L}+\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}"},
         "Regex \"\\p{L}+\" is not a split pattern"},
        {"removed",
         {.pre =
              "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"" K_PATTERN
              "\"}, \"behavior\": \"Removed\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}"},
         "behavior \"Isolated\""},
        {"doubleregex",
         {.pre =
              "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"" K_PATTERN
              "\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}"},
         "use_regex: only false"},
        {"decoder", {.decoder = "{\"type\": \"WordPiece\"}"}, "decoder \"WordPiece\""},
        {"post", {.post = "{\"type\": \"BertProcessing\"}"}, "post_processor \"BertProcessing\""},
        {"fallback", {.model_extra = "\"byte_fallback\": true,"}, "byte_fallback"},
        {"lstrip",
         {.added = "{\"id\": 262, \"content\": \"<|a|>\", \"special\": true, \"lstrip\": true}"},
         "(\"<|a|>\"): lstrip"},
        {"idorder",
         {.added = "{\"id\": 263, \"content\": \"<|a|>\", \"special\": true}, {\"id\": 262, \"content\": "
                   "\"<|b|>\", \"special\": true}"},
         "(\"<|a|>\") has id 263, but Hugging Face tokenizers gives it id 262"},
        {"wsinside",
         {.added = "{\"id\": 262, \"content\": \"<|a b|>\", \"special\": true}"},
         "white space after another character"},
    };
    char p[400];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "refuse_%s.json", cases[i].name);
        write_llama_json(path_in(p, sizeof p, name), &cases[i].parts);
        tri_tokenizer tk;
        cr_assert_eq(tri_tokenizer_load(&tk, p), -1, "%s is loaded", cases[i].name);
        cr_assert_eq(tk.vocab_size, 0);
        char want[600];
        snprintf(want, sizeof want, "%s: ", p);
        cr_assert(stderr_has(want), "%s: the message does not name the file", cases[i].name);
        cr_assert(stderr_has(cases[i].want), "%s: the message does not say \"%s\"", cases[i].name, cases[i].want);
    }
    /* control: the same writer with nothing replaced loads */
    hf_parts ok = {0};
    write_llama_json(path_in(p, sizeof p, "ok.json"), &ok);
    tri_tokenizer tk;
    cr_assert_eq(tri_tokenizer_load(&tk, p), 0);
    tri_tokenizer_free(&tk);
}

/* Does any token of tk hold both byte a and byte b? */
static int has_token_with(const tri_tokenizer *tk, uint8_t a, uint8_t b) {
    for (int i = 0; i < tk->vocab_size; i++) {
        const uint8_t *t = tk->tok_bytes + tk->tok_off[i];
        size_t n = tk->tok_off[i + 1] - tk->tok_off[i];
        if (!(tk->flags[i] & TRI_TOK_ADDED) && memchr(t, a, n) && memchr(t, b, n)) return 1;
    }
    return 0;
}

/* Training with the Llama 3 pattern: the two special tokens come last, and
 * merges follow that pattern's pre-tokens: ".\n\n" is one pre-token there
 * (so "." and "\n" merge), never under GPT-2's ("." and "\n" apart); GPT-2
 * keeps 4-digit runs whole, Llama 3 cuts them in threes. */
Test(tok_llama3_train, specials_last_and_merges_follow_the_pattern, .init = make_dir, .fini = remove_dir) {
    capture_stderr();
    char p[400];
    const char *line = "The end.\n\nAnd 2024 then 1999 and more.\n\n";
    size_t cap = 200 * strlen(line) + 1, n = 0;
    char *corpus = malloc(cap);
    for (int i = 0; i < 200; i++) n += (size_t)snprintf(corpus + n, cap - n, "%s", line);
    write_str(path_in(p, sizeof p, "c.txt"), corpus);
    const char *files[] = {p};
    tri_tokenizer l3, g2;
    cr_assert_eq(tri_tokenizer_train_pat(&l3, files, 1, 300, 1, TRI_TOK_PAT_LLAMA3), 0);
    cr_assert_eq(tri_tokenizer_train_pat(&g2, files, 1, 300, 1, TRI_TOK_PAT_GPT2), 0);
    cr_assert_eq(l3.pattern, TRI_TOK_PAT_LLAMA3);
    int v = l3.vocab_size;
    cr_assert(v > 258 && v <= 300);
    cr_assert_eq(tri_tokenizer_eot(&l3), v - 1);
    const char *names[2] = {"<|begin_of_text|>", "<|end_of_text|>"};
    for (int k = 0; k < 2; k++) {
        int id = v - 2 + k;
        size_t len = l3.tok_off[id + 1] - l3.tok_off[id];
        cr_assert(len == strlen(names[k]) && !memcmp(l3.tok_bytes + l3.tok_off[id], names[k], len));
        cr_assert_eq(l3.flags[id] & (TRI_TOK_ADDED | TRI_TOK_SPECIAL), TRI_TOK_ADDED | TRI_TOK_SPECIAL);
    }
    cr_assert(has_token_with(&l3, '.', '\n'), "Llama 3: \".\" and \"\\n\" never merged");
    cr_assert(!has_token_with(&g2, '.', '\n'), "GPT-2: \".\" and \"\\n\" merged across pre-tokens");
    /* GPT-2's pre-tokens here need at most 26 merges to become whole words
     * (The, " end", And, " 2024", " then", " 1999", " and", " more"), fewer
     * than the 43 trained, so " 2024" is one token; Llama 3 cuts it into at
     * least " ", "202", "4" */
    int32_t *ids;
    size_t m = tri_tokenizer_encode(&g2, " 2024", 5, &ids);
    cr_assert_eq(m, 1, "GPT-2 keeps \" 2024\" whole");
    free(ids);
    m = tri_tokenizer_encode(&l3, " 2024", 5, &ids);
    cr_assert_geq(m, 3, "Llama 3 cuts \" 2024\" into \" \", \"202\", \"4\"");
    free(ids);
    /* the trained tokenizer finds its special tokens in text */
    m = tri_tokenizer_encode(&l3, "<|begin_of_text|>The end.", 25, &ids);
    cr_assert(m >= 2 && ids[0] == v - 2);
    free(ids);
    /* saved and loaded: the same tokenizer */
    cr_assert_eq(tri_tokenizer_save(&l3, path_in(p, sizeof p, "l3.json")), 0);
    tri_tokenizer back;
    cr_assert_eq(tri_tokenizer_load(&back, p), 0);
    cr_assert_eq(back.vocab_size, v);
    cr_assert_eq(back.pattern, TRI_TOK_PAT_LLAMA3);
    cr_assert_eq(tri_tokenizer_eot(&back), v - 1);
    int32_t *a, *b;
    size_t na = tri_tokenizer_encode(&l3, corpus, n, &a), nb = tri_tokenizer_encode(&back, corpus, n, &b);
    cr_assert(na == nb && !memcmp(a, b, na * sizeof *a));
    free(a), free(b);
    cr_assert_eq(tri_tokenizer_train_pat(&back, files, 1, 257, 1, TRI_TOK_PAT_LLAMA3), -1, "257 < 258");
    cr_assert(stderr_has("vocab size 257 is too small (>= 258"));
    tri_tokenizer_free(&back);
    tri_tokenizer_free(&l3);
    tri_tokenizer_free(&g2);
    free(corpus);
}

/* The tokens of a whole token file. */
static int32_t *read_tokens(const char *path, size_t *n) {
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, path, 0), 0, "cannot open %s", path);
    int32_t *t = malloc((ds.n_tokens + 1) * sizeof *t);
    cr_assert(t != NULL);
    tri_dataset_read(&ds, 0, ds.n_tokens, t);
    *n = ds.n_tokens;
    tri_dataset_close(&ds);
    return t;
}

/* `trident tokenize train --pattern llama3` writes the Llama 3 kind, and
 * `encode` with it finds special tokens in the text and puts <|end_of_text|>
 * between documents (llm.c: before each); a pattern it does not know is
 * refused with exit code 2. */
Test(tok_llama3_cli, train_and_encode, .init = make_dir, .fini = remove_dir) {
    capture_stderr();
    char corpus_p[400], tok_p[400], doc_p[400], out_p[400], bin_p[420];
    const char *line = "Hello there, world.\n\nIt's 2024: numbers 1234567 and MORE'S.\n";
    size_t cap = 300 * strlen(line) + 1, n = 0;
    char *corpus = malloc(cap);
    for (int i = 0; i < 300; i++) n += (size_t)snprintf(corpus + n, cap - n, "%s", line);
    write_str(path_in(corpus_p, sizeof corpus_p, "corpus.txt"), corpus);
    path_in(tok_p, sizeof tok_p, "l3.json");
    const char *targv[] = {"tokenize", "train", "--vocab-size", "400", "--pattern", "llama3", "--out", tok_p, corpus_p};
    cr_assert_eq(tri_cmd_tokenize(9, (char **)targv), 0);
    tri_tokenizer tk;
    cr_assert_eq(tri_tokenizer_load(&tk, tok_p), 0);
    cr_assert_eq(tk.pattern, TRI_TOK_PAT_LLAMA3);
    int v = tk.vocab_size; /* the corpus may run out of pairs before 400 */
    cr_assert(v > 258 && v <= 400);
    cr_assert_eq(tri_tokenizer_eot(&tk), v - 1);

    const char *doc = "<|begin_of_text|>Hello there, world.<|end_of_text|> 1234567";
    write_str(path_in(doc_p, sizeof doc_p, "doc.txt"), doc);
    path_in(out_p, sizeof out_p, "out");
    const char *eargv[] = {"tokenize", "encode", "--tokenizer", tok_p,     "--format",
                           "llmc",     "--out",  out_p,         "--quiet", doc_p};
    cr_assert_eq(tri_cmd_tokenize(10, (char **)eargv), 0);
    snprintf(bin_p, sizeof bin_p, "%s.bin", out_p);
    size_t nt;
    int32_t *got = read_tokens(bin_p, &nt);
    int32_t *want;
    size_t nw = tri_tokenizer_encode(&tk, doc, strlen(doc), &want);
    cr_assert_eq(nt, nw + 1);
    cr_assert_eq(tri_tokenizer_bos(&tk), v - 2);
    cr_assert_eq(got[0], v - 2, "llm.c's Llama 3 files: <|begin_of_text|> first");
    cr_assert_eq(got[1], v - 2, "<|begin_of_text|> found in the text");
    cr_assert(!memcmp(got + 1, want, nw * sizeof *want));
    int found_eot = 0;
    for (size_t i = 2; i < nt; i++) found_eot += got[i] == v - 1;
    cr_assert_eq(found_eot, 1, "<|end_of_text|> in the text is one id");
    free(got), free(want), free(corpus);
    tri_tokenizer_free(&tk);

    const char *bargv[] = {"tokenize", "train", "--vocab-size", "400", "--pattern", "cl100k", "--out", tok_p, corpus_p};
    cr_assert_eq(tri_cmd_tokenize(9, (char **)bargv), 2);
    cr_assert(stderr_has("cl100k"));
}
