/* Byte-level BPE tokenizer (data/tok/tokenizer.h) and `trident tokenize`.
 *
 * Independent references used here:
 *   - pre-token splits and encodings of a hand-made vocab.json/merges.txt,
 *     derived by hand from the GPT-2 pattern and the merge ranks;
 *   - GPT-2's bytes_to_unicode rebuilt from its definition in this file;
 *   - a naive BPE encoder (lowest-rank pair first, leftmost on ties, one
 *     scan per merge) and a naive BPE trainer (all pair counts recomputed
 *     from scratch every step), both written here. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/tok/tokenizer.h"
#include "cli/cmd_tokenize.h"

/* ---- helpers ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static char g_dir[256];

static void make_dir(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/tri_tok_XXXXXX");
    cr_assert(mkdtemp(g_dir) != NULL);
}

static void remove_dir(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (g_dir[0] && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

static const char *path_in(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f != NULL, "cannot create %s", path);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f != NULL, "cannot open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    cr_assert(len >= 0);
    cr_assert_eq(fseek(f, 0, SEEK_SET), 0);
    char *b = malloc((size_t)len + 1);
    cr_assert(b != NULL);
    cr_assert_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

/* Pseudo-English with numbers, punctuation, blank lines and some Greek,
 * Cyrillic, CJK and accented words: n bytes, deterministic in seed. */
static char *make_corpus(size_t n, uint64_t seed) {
    static const char *const words[] = {
        "the",   "of",       "and",   "to",     "in",     "that", "he",    "shall", "unto",  "for",    "his",   "they",
        "be",    "is",       "him",   "LORD",   "not",    "them", "with",  "all",   "thou",  "thy",    "was",   "God",
        "which", "my",       "me",    "said",   "but",    "ye",   "their", "have",  "will",  "thee",   "from",  "as",
        "are",   "when",     "this",  "out",    "were",   "upon", "man",   "you",   "by",    "Israel", "king",  "son",
        "up",    "there",    "hath",  "then",   "people", "came", "had",   "house", "into",  "her",    "come",  "one",
        "we",    "children", "s",     "before", "your",   "also", "day",   "land",  "don't", "it's",   "we'll", "café",
        "naïve", "Ελληνικά", "λόγος", "Привет", "мир",    "中文", "字符",  "1234",  "3.14",  "42",     "2024"};
    static const char *const seps[] = {" ",  " ",  " ",    " ",  " ",  ", ", ". ",  "; ",  ": ", "! ",
                                       "? ", "\n", "\n\n", "  ", " (", ") ", " \"", "\" ", "\t", " -- "};
    static const char *const syl[] = {"ka", "lo", "ri",  "an", "th", "er", "mi", "su", "ve", "on", "qu", "ix",
                                      "ba", "de", "gor", "ul", "tr", "ph", "ne", "sa", "wy", "zo", "ce", "hi"};
    const size_t nw = sizeof words / sizeof words[0], ns = sizeof seps / sizeof seps[0];
    const size_t nsy = sizeof syl / sizeof syl[0];
    char *b = malloc(n + 64);
    cr_assert(b != NULL);
    size_t k = 0;
    uint64_t s = seed * 2654435761u + 1;
    char made[32];
    while (k < n) {
        const char *w = words[rng_next(&s) % nw];
        uint64_t r = rng_next(&s) % 6;
        if (r < 2) { /* Zipf-like: favour the first words */
            w = words[rng_next(&s) % 12];
        } else if (r < 4) {
            /* one of 4096 made-up words of 2-4 syllables, the same for every seed */
            uint64_t id = rng_next(&s) % 4096, h = id * 0x9E3779B97F4A7C15ull + 1;
            size_t ml = 0, ns_ = 2 + id % 3;
            for (size_t j = 0; j < ns_; j++) {
                const char *x = syl[rng_next(&h) % nsy];
                memcpy(made + ml, x, strlen(x));
                ml += strlen(x);
            }
            made[ml] = 0;
            w = made;
        }
        const char *sep = seps[rng_next(&s) % ns];
        size_t lw = strlen(w), ls = strlen(sep);
        if (k + lw + ls > n) break;
        memcpy(b + k, w, lw);
        k += lw;
        memcpy(b + k, sep, ls);
        k += ls;
    }
    b[k] = 0;
    return b;
}

/* GPT-2's bytes_to_unicode from its definition: the bytes '!'..'~',
 * 0xA1..0xAC, 0xAE..0xFF keep their code point and come first; every other
 * byte b, in increasing order, gets 256 + (how many such bytes came before). */
static void ref_byte_map(uint32_t cp_of[256], int order[256]) {
    int printable[256] = {0}, k = 0;
    for (int b = '!'; b <= '~'; b++) printable[b] = 1;
    for (int b = 0xA1; b <= 0xAC; b++) printable[b] = 1;
    for (int b = 0xAE; b <= 0xFF; b++) printable[b] = 1;
    for (int b = 0; b < 256; b++)
        if (printable[b]) {
            cp_of[b] = (uint32_t)b;
            order[k++] = b;
        }
    int extra = 0;
    for (int b = 0; b < 256; b++)
        if (!printable[b]) {
            cp_of[b] = 256u + (uint32_t)extra++;
            order[k++] = b;
        }
}

static size_t utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Splits text with the library's pre-tokenizer; returns the count and
 * fills ends[] (exclusive end offsets). */
static size_t split(const char *text, size_t len, size_t *ends, size_t max) {
    size_t n = 0, pos = 0;
    while (pos < len) {
        size_t e = tri_tokenizer_pretoken_end(text, len, pos);
        cr_assert(e > pos && e <= len, "pre-token end %zu at %zu (len %zu)", e, pos, len);
        cr_assert(n < max);
        ends[n++] = e;
        pos = e;
    }
    return n;
}

/* Asserts that text splits into exactly the NULL-terminated list `want`. */
static void expect_split(const char *text, const char *const *want) {
    size_t len = strlen(text), ends[64];
    size_t n = split(text, len, ends, 64);
    size_t k = 0, start = 0;
    for (; want[k]; k++) {
        cr_assert(k < n, "\"%s\": only %zu pre-tokens, expected more (next \"%s\")", text, n, want[k]);
        size_t l = ends[k] - start;
        cr_assert(l == strlen(want[k]) && memcmp(text + start, want[k], l) == 0,
                  "\"%s\": pre-token %zu is \"%.*s\", expected \"%s\"", text, k, (int)l, text + start, want[k]);
        start = ends[k];
    }
    cr_assert_eq(n, k, "\"%s\": %zu pre-tokens, expected %zu", text, n, k);
}

/* ---- pre-tokenizer ------------------------------------------------------------------ */

Test(tok_pretokenizer, contractions) {
    expect_split("I'm don't we'll they're you've he'd it's",
                 (const char *[]){"I", "'m", " don", "'t", " we", "'ll", " they", "'re", " you", "'ve", " he", "'d",
                                  " it", "'s", NULL});
    /* upper case is not a contraction: "'" is punctuation, then letters */
    expect_split("IT'S", (const char *[]){"IT", "'", "S", NULL});
    /* "'tis": the contraction 't comes first */
    expect_split("'tis", (const char *[]){"'t", "is", NULL});
    /* a punctuation run swallows the apostrophe */
    expect_split("...'s", (const char *[]){"...'", "s", NULL});
    expect_split(" 's", (const char *[]){" '", "s", NULL});
}

Test(tok_pretokenizer, numbers_and_punctuation) {
    expect_split("abc123 456.78x", (const char *[]){"abc", "123", " 456", ".", "78", "x", NULL});
    expect_split("Hi!!! ...what?", (const char *[]){"Hi", "!!!", " ...", "what", "?", NULL});
    expect_split("a+b=c", (const char *[]){"a", "+", "b", "=", "c", NULL});
    /* U+00BD (No), U+00B2 (No), U+216B (Nl) are numbers; U+0663 (Nd) too */
    expect_split("x\xC2\xBD\xC2\xB2 \xE2\x85\xAB\xD9\xA3",
                 (const char *[]){"x", "\xC2\xBD\xC2\xB2", " \xE2\x85\xAB\xD9\xA3", NULL});
}

Test(tok_pretokenizer, white_space) {
    expect_split("a   b", (const char *[]){"a", "  ", " b", NULL});
    expect_split("a\n\nb", (const char *[]){"a", "\n", "\n", "b", NULL});
    expect_split("a \n b", (const char *[]){"a", " \n", " b", NULL});
    expect_split("a\t b", (const char *[]){"a", "\t", " b", NULL});
    expect_split("  a", (const char *[]){" ", " a", NULL});
    expect_split("a  ", (const char *[]){"a", "  ", NULL});
    expect_split("a \n", (const char *[]){"a", " \n", NULL});
    expect_split("x\r\ny", (const char *[]){"x", "\r", "\n", "y", NULL});
    /* U+00A0 and U+3000 are white space (but only U+0020 joins a word) */
    expect_split("a\xC2\xA0"
                 "b",
                 (const char *[]){"a", "\xC2\xA0", "b", NULL});
    expect_split("a \xE3\x80\x80"
                 "b",
                 (const char *[]){"a", " ", "\xE3\x80\x80", "b", NULL});
    expect_split(" ", (const char *[]){" ", NULL});
}

Test(tok_pretokenizer, non_ascii_letters) {
    expect_split("Привет мир", (const char *[]){"Привет", " мир", NULL});
    expect_split("καλημέρα κόσμε", (const char *[]){"καλημέρα", " κόσμε", NULL});
    expect_split("中文 字符。", (const char *[]){"中文", " 字符", "。", NULL});
    expect_split("naïve café", (const char *[]){"naïve", " café", NULL});
    expect_split("Ωmega2π", (const char *[]){"Ωmega", "2", "π", NULL});
    expect_split("日本語とカタカナ", (const char *[]){"日本語とカタカナ", NULL});
    /* an emoji (So) groups with punctuation */
    expect_split("hi \xF0\x9F\x98\x80\xF0\x9F\x98\x80!",
                 (const char *[]){"hi", " \xF0\x9F\x98\x80\xF0\x9F\x98\x80!", NULL});
    /* a combining mark (Mn) is not a letter: it splits a word */
    expect_split("e\xCC\x81x", (const char *[]){"e", "\xCC\x81", "x", NULL});
}

Test(tok_pretokenizer, invalid_utf8) {
    /* each stray byte is a punctuation-like character of its own */
    expect_split("a\xFF\xFE"
                 "b",
                 (const char *[]){"a", "\xFF\xFE", "b", NULL});
    expect_split(" \x80x", (const char *[]){" \x80", "x", NULL});
    /* truncated 3-byte sequence, overlong encoding, surrogate */
    expect_split("a\xE4\xB8", (const char *[]){"a", "\xE4\xB8", NULL});
    expect_split("\xC0\xAFz", (const char *[]){"\xC0\xAF", "z", NULL});
    expect_split("q\xED\xA0\x80", (const char *[]){"q", "\xED\xA0\x80", NULL});
}

Test(tok_pretokenizer, cut_points_preserve_splits) {
    uint64_t s = 7;
    static const char alphabet[][5] = {"a", "b", " ", " ",  "\n",       "\t",   "1", ".",
                                       "'", "s", "é", "中", "\xC2\xA0", "\xFF", "!", "  "};
    for (int trial = 0; trial < 200; trial++) {
        char text[400];
        size_t len = 0;
        while (len < 300) {
            const char *p = alphabet[rng_next(&s) % (sizeof alphabet / sizeof alphabet[0])];
            memcpy(text + len, p, strlen(p));
            len += strlen(p);
        }
        size_t whole[400];
        size_t nw = split(text, len, whole, 400);
        for (size_t pos = 0; pos < len; pos += 1 + rng_next(&s) % 40) {
            size_t c = tri_tokenizer_cut_after(text, len, pos);
            size_t c2 = tri_tokenizer_cut_before(text, len, pos);
            cr_assert(c >= pos && c <= len);
            cr_assert(c2 <= pos);
            for (int k = 0; k < 2; k++) {
                size_t cut = k ? c2 : c;
                if (cut == 0 || cut == len) continue;
                /* the cut must be a boundary of the whole text's split ... */
                int found = 0;
                for (size_t i = 0; i < nw; i++) found |= whole[i] == cut;
                cr_assert(found, "cut %zu is not a pre-token boundary", cut);
                /* ... and the right part alone must split the same way */
                size_t right[400];
                size_t nr = split(text + cut, len - cut, right, 400);
                size_t i0 = 0;
                while (whole[i0] != cut) i0++;
                cr_assert_eq(nr, nw - i0 - 1);
                for (size_t i = 0; i < nr; i++) cr_assert_eq(right[i] + cut, whole[i0 + 1 + i]);
                size_t left[400];
                size_t nl = split(text, cut, left, 400);
                cr_assert_eq(nl, i0 + 1);
                for (size_t i = 0; i < nl; i++) cr_assert_eq(left[i], whole[i]);
            }
        }
    }
}

Test(tok_bytelevel, mapping_matches_gpt2_definition) {
    uint32_t cp_of[256];
    int order[256];
    ref_byte_map(cp_of, order);
    for (int b = 0; b < 256; b++) cr_assert_eq(tri_tokenizer_byte_char((uint8_t)b), cp_of[b], "byte %d", b);
    cr_assert_eq(tri_tokenizer_byte_char(' '), 0x120u);  /* 'Ġ' */
    cr_assert_eq(tri_tokenizer_byte_char('\n'), 0x10Au); /* 'Ċ' */
    /* a trained / merge-built tokenizer numbers the bytes in GPT-2's order */
    tri_tokenizer tk;
    cr_assert_eq(tri_tokenizer_from_merges(&tk, NULL, 0, 1), 0);
    cr_assert_eq(tk.vocab_size, 257);
    cr_assert_eq(tk.eot, 256);
    for (int i = 0; i < 256; i++) {
        cr_assert_eq(tk.byte_id[order[i]], i);
        cr_assert_eq(tk.tok_off[i + 1] - tk.tok_off[i], 1u);
        cr_assert_eq(tk.tok_bytes[tk.tok_off[i]], (uint8_t)order[i]);
    }
    tri_tokenizer_free(&tk);
    tri_tokenizer_free(&tk); /* twice: zeroed, still safe */
    tri_tokenizer_free(NULL);
}

/* ---- a hand-made GPT-2 vocab.json + merges.txt ------------------------------------ */

/* merges in rank order, as byte-level strings, and the id each result gets */
static const char *const k_hand_merges[][2] = {
    {"h", "e"},     /* 0 -> 256 he     */
    {"l", "l"},     /* 1 -> 257 ll     */
    {"Ġ", "t"},     /* 2 -> 258 Ġt     */
    {"Ġt", "he"},   /* 3 -> 259 Ġthe   */
    {"he", "ll"},   /* 4 -> 260 hell   */
    {"hell", "o"},  /* 5 -> 261 hello  */
    {"Ã", "©"},     /* 6 -> 262 é (C3 A9) */
    {"f", "Ã©"},    /* 7 -> 263 fé     */
    {"Ġ", "c"},     /* 8 -> 264 Ġc     */
    {"Ġc", "a"},    /* 9 -> 265 Ġca    */
    {"Ġca", "fÃ©"}, /* 10 -> 266 Ġcafé */
    {"e", "l"},     /* 11 -> 267 el    */
    {"e", "Ġ"},     /* 12 -> 268 "e "  (can never apply: crosses a pre-token boundary) */
};
#define N_HAND   ((int)(sizeof k_hand_merges / sizeof k_hand_merges[0]))
#define HAND_EOT (256 + N_HAND)

static void json_escape(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
}

/* Writes vocab.json (256 bytes in GPT-2 order, the merge results, EOT) and
 * merges.txt into dir with the given file name prefix. */
static void write_hand_gpt2(const char *prefix) {
    uint32_t cp_of[256];
    int order[256];
    ref_byte_map(cp_of, order);
    char path[512];
    snprintf(path, sizeof path, "%svocab.json", prefix);
    FILE *f = fopen(path, "wb");
    cr_assert(f != NULL);
    fputc('{', f);
    for (int i = 0; i < 256; i++) {
        char u[5] = {0};
        utf8_put(u, cp_of[order[i]]);
        fputs(i ? ", \"" : "\"", f);
        json_escape(f, u);
        fprintf(f, "\": %d", i);
    }
    for (int k = 0; k < N_HAND; k++) {
        fputs(", \"", f);
        json_escape(f, k_hand_merges[k][0]);
        json_escape(f, k_hand_merges[k][1]);
        fprintf(f, "\": %d", 256 + k);
    }
    fprintf(f, ", \"<|endoftext|>\": %d}\n", HAND_EOT);
    cr_assert_eq(fclose(f), 0);
    snprintf(path, sizeof path, "%smerges.txt", prefix);
    f = fopen(path, "wb");
    cr_assert(f != NULL);
    fputs("#version: 0.2\n", f);
    for (int k = 0; k < N_HAND; k++) fprintf(f, "%s %s\n", k_hand_merges[k][0], k_hand_merges[k][1]);
    cr_assert_eq(fclose(f), 0);
}

/* The same as a tokenizer.json; pairs: merges as ["a", "b"] arrays. */
static void write_hand_hf(const char *path, int pairs) {
    uint32_t cp_of[256];
    int order[256];
    ref_byte_map(cp_of, order);
    FILE *f = fopen(path, "wb");
    cr_assert(f != NULL);
    fprintf(f,
            "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": %d, \"content\": \"<|endoftext|>\", "
            "\"special\": true}], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
            "\"add_prefix_space\": false, \"use_regex\": true}, \"model\": {\"type\": \"BPE\", \"vocab\": {",
            HAND_EOT);
    for (int i = 0; i < 256; i++) {
        char u[5] = {0};
        utf8_put(u, cp_of[order[i]]);
        fputs(i ? ", \"" : "\"", f);
        json_escape(f, u);
        fprintf(f, "\": %d", i);
    }
    for (int k = 0; k < N_HAND; k++) {
        fputs(", \"", f);
        json_escape(f, k_hand_merges[k][0]);
        json_escape(f, k_hand_merges[k][1]);
        fprintf(f, "\": %d", 256 + k);
    }
    fprintf(f, ", \"<|endoftext|>\": %d}, \"merges\": [", HAND_EOT);
    for (int k = 0; k < N_HAND; k++) {
        fputs(k ? ", " : "", f);
        if (pairs) {
            fputs("[\"", f);
            json_escape(f, k_hand_merges[k][0]);
            fputs("\", \"", f);
            json_escape(f, k_hand_merges[k][1]);
            fputs("\"]", f);
        } else {
            fputc('"', f);
            json_escape(f, k_hand_merges[k][0]);
            fputc(' ', f);
            json_escape(f, k_hand_merges[k][1]);
            fputc('"', f);
        }
    }
    fputs("]}}\n", f);
    cr_assert_eq(fclose(f), 0);
}

static void expect_ids(const tri_tokenizer *tk, const char *text, const int32_t *want, size_t nwant) {
    int32_t *ids;
    size_t n = tri_tokenizer_encode(tk, text, strlen(text), &ids);
    cr_assert_neq(n, SIZE_MAX);
    int same = n == nwant;
    for (size_t i = 0; same && i < n; i++) same = ids[i] == want[i];
    if (!same) {
        char got[512] = "";
        for (size_t i = 0; i < n && strlen(got) < 480; i++) snprintf(got + strlen(got), 32, " %d", ids[i]);
        cr_assert_fail("\"%s\": got ids%s", text, got);
    }
    free(ids);
}

/* The expected ids, derived by hand from the merge ranks above. byte(b) is
 * the id of byte b in GPT-2's order. */
static void check_hand_encodings(const tri_tokenizer *tk) {
    uint32_t cp_of[256];
    int order[256], id_of[256];
    ref_byte_map(cp_of, order);
    for (int i = 0; i < 256; i++) id_of[order[i]] = i;
    cr_assert_eq(tri_tokenizer_vocab_size(tk), HAND_EOT + 1);
    cr_assert_eq(tri_tokenizer_eot(tk), HAND_EOT);
    cr_assert(tk->flags[HAND_EOT] & TRI_TOK_SPECIAL);
    /* h e l l o: (h,e) rank 0, then (l,l) 1, (he,ll) 4, (hell,o) 5 */
    expect_ids(tk, "hello", (int32_t[]){261}, 1);
    /* Ġ t h e: (h,e) 0 before (Ġ,t) 2, then (Ġt,he) 3 */
    expect_ids(tk, " the", (int32_t[]){259}, 1);
    expect_ids(tk, "the", (int32_t[]){id_of['t'], 256}, 2);
    /* e l l: (l,l) rank 1 beats (e,l) rank 11, and (e,ll) is no merge */
    expect_ids(tk, "ell", (int32_t[]){id_of['e'], 257}, 2);
    expect_ids(tk, "el", (int32_t[]){267}, 1);
    /* Ġ c a f C3 A9: (Ã,©) 6, (f,Ã©) 7, (Ġ,c) 8, (Ġc,a) 9, (Ġca,fÃ©) 10 */
    expect_ids(tk, " café", (int32_t[]){266}, 1);
    expect_ids(tk, "é", (int32_t[]){262}, 1);
    /* ü = C3 BC: no merge */
    expect_ids(tk, "ü", (int32_t[]){id_of[0xC3], id_of[0xBC]}, 2);
    /* two pre-tokens; "e Ġ" (rank 12) would cross their boundary */
    expect_ids(tk, "hello the", (int32_t[]){261, 259}, 2);
    /* Ġ c a t: (Ġ,c) 8, (Ġc,a) 9 */
    expect_ids(tk, "the cat", (int32_t[]){id_of['t'], 256, 265, id_of['t']}, 4);
    /* every occurrence of the best pair merges, left to right */
    expect_ids(tk, "hellhello", (int32_t[]){260, 261}, 2);
    /* the literal special string is text */
    expect_ids(tk, "<|endoftext|>",
               (int32_t[]){id_of['<'], id_of['|'], id_of['e'], id_of['n'], id_of['d'], id_of['o'], id_of['f'],
                           id_of['t'], id_of['e'], id_of['x'], id_of['t'], id_of['|'], id_of['>']},
               13);
    expect_ids(tk, "", NULL, 0);
    /* decode of EOT gives its content */
    char *text;
    int32_t e = HAND_EOT;
    size_t n = tri_tokenizer_decode(tk, &e, 1, &text);
    cr_assert_eq(n, 13u);
    cr_assert_str_eq(text, "<|endoftext|>");
    free(text);
}

Test(tok_hand_vocab, gpt2_files_directory_prefix_and_vocab_path, .init = make_dir, .fini = remove_dir) {
    char pre[400], p[400];
    snprintf(pre, sizeof pre, "%s/", g_dir);
    write_hand_gpt2(pre);
    tri_tokenizer tk;
    /* a directory */
    cr_assert_eq(tri_tokenizer_load(&tk, g_dir), 0);
    check_hand_encodings(&tk);
    tri_tokenizer_free(&tk);
    /* the vocab.json path */
    cr_assert_eq(tri_tokenizer_load(&tk, path_in(p, sizeof p, "vocab.json")), 0);
    check_hand_encodings(&tk);
    tri_tokenizer_free(&tk);
    /* a prefix, Megatron style */
    snprintf(pre, sizeof pre, "%s/gpt2-", g_dir);
    write_hand_gpt2(pre);
    cr_assert_eq(tri_tokenizer_load(&tk, pre), 0);
    check_hand_encodings(&tk);
    tri_tokenizer_free(&tk);
}

Test(tok_hand_vocab, tokenizer_json_string_and_pair_merges, .init = make_dir, .fini = remove_dir) {
    char p[400];
    tri_tokenizer tk;
    write_hand_hf(path_in(p, sizeof p, "a.json"), 0);
    cr_assert_eq(tri_tokenizer_load(&tk, p), 0);
    check_hand_encodings(&tk);
    cr_assert(tk.flags[HAND_EOT] & TRI_TOK_SPECIAL);
    tri_tokenizer_free(&tk);
    write_hand_hf(path_in(p, sizeof p, "b.json"), 1);
    cr_assert_eq(tri_tokenizer_load(&tk, p), 0);
    check_hand_encodings(&tk);
    /* save -> load keeps everything */
    cr_assert_eq(tri_tokenizer_save(&tk, path_in(p, sizeof p, "c.json")), 0);
    tri_tokenizer tk2;
    cr_assert_eq(tri_tokenizer_load(&tk2, p), 0);
    check_hand_encodings(&tk2);
    cr_assert_eq(tk2.n_merges, N_HAND);
    cr_assert_eq(memcmp(tk.merges, tk2.merges, 3 * sizeof(int32_t) * N_HAND), 0);
    tri_tokenizer_free(&tk2);
    tri_tokenizer_free(&tk);
}

/* ---- naive references ------------------------------------------------------------------ */

/* Naive BPE of one pre-token with tk's merges: each round scans for the
 * lowest-rank adjacent pair (leftmost on ties) by a linear search of the
 * merge list, merges that one pair, and repeats. */
static size_t naive_word(const tri_tokenizer *tk, const uint8_t *w, size_t n, int32_t *out) {
    size_t m = n;
    for (size_t i = 0; i < n; i++) out[i] = tk->byte_id[w[i]];
    for (;;) {
        int best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++)
            for (int r = 0; r < tk->n_merges && (best < 0 || r < best); r++)
                if (tk->merges[3 * r] == out[i] && tk->merges[3 * r + 1] == out[i + 1]) {
                    best = r;
                    at = i;
                    break;
                }
        if (best < 0) return m;
        out[at] = tk->merges[3 * best + 2];
        memmove(out + at + 1, out + at + 2, (m - at - 2) * sizeof *out);
        m--;
    }
}

static int32_t *naive_encode(const tri_tokenizer *tk, const char *text, size_t len, size_t *n) {
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    cr_assert(ids != NULL);
    size_t k = 0, pos = 0;
    while (pos < len) {
        size_t e = tri_tokenizer_pretoken_end(text, len, pos);
        k += naive_word(tk, (const uint8_t *)text + pos, e - pos, ids + k);
        pos = e;
    }
    *n = k;
    return ids;
}

/* Random text: UTF-8 from many scripts (valid), or arbitrary bytes. */
static size_t random_text(char *buf, size_t max, uint64_t *s, int valid) {
    static const uint32_t starts[] = {0x20,   0x41,   0x61,    0x30,   0xC0,  0x391, 0x410,  0x4E00,
                                      0x3040, 0xAC00, 0x1F600, 0x2000, 0x600, 0x900, 0x10000};
    size_t len = 0, target = 1 + rng_next(s) % (max - 8);
    while (len < target) {
        if (!valid) {
            buf[len++] = (char)(rng_next(s) & 0xFF);
            continue;
        }
        uint64_t r = rng_next(s);
        uint32_t cp;
        if (r % 4 == 0) {
            static const char common[] = "  \n\t'.,!0123456789ethaoinsr";
            cp = (uint32_t)common[(r >> 8) % (sizeof common - 1)];
        } else {
            cp = starts[(r >> 8) % (sizeof starts / sizeof starts[0])] + (uint32_t)((r >> 20) % 96);
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
        char u[4];
        size_t ul = utf8_put(u, cp);
        if (len + ul > target) break;
        memcpy(buf + len, u, ul);
        len += ul;
    }
    return len;
}

static void check_round_trip_and_reference(const tri_tokenizer *tk, const char *text, size_t len) {
    int32_t *ids;
    size_t n = tri_tokenizer_encode(tk, text, len, &ids);
    cr_assert_neq(n, SIZE_MAX);
    for (size_t i = 0; i < n; i++) cr_assert(ids[i] >= 0 && ids[i] < tk->vocab_size);
    char *back;
    size_t bl = tri_tokenizer_decode(tk, ids, n, &back);
    cr_assert_eq(bl, len);
    cr_assert(memcmp(back, text, len) == 0, "round trip changed the bytes");
    size_t rn;
    int32_t *ref = naive_encode(tk, text, len, &rn);
    cr_assert_eq(n, rn, "token count %zu, naive reference %zu", n, rn);
    cr_assert(memcmp(ids, ref, n * sizeof *ids) == 0, "ids differ from the naive reference");
    free(ref);
    free(back);
    free(ids);
}

/* Naive trainer: word counts from the pre-tokenizer, then every step counts
 * all adjacent pairs afresh (sorting them), takes the highest count, ties to
 * the smaller (left bytes, right bytes), and rewrites every word. Writes the
 * merges as byte strings "left\0right" into out[k] (caller frees). */
typedef struct nword {
    int32_t sym[64];
    int n;
    long count;
} nword;

typedef struct ntok {
    uint8_t b[64];
    int n;
} ntok;

static int ntok_cmp(const ntok *x, const ntok *y) {
    int m = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->b, y->b, (size_t)m);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

typedef struct npair {
    int32_t a, b;
    long count;
} npair;

static int npair_by_ids(const void *x, const void *y) {
    const npair *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    return (p->b > q->b) - (p->b < q->b);
}

static int naive_train(const char *text, size_t len, int n_merges, ntok (*merged)[2]) {
    nword *words = calloc(len, sizeof *words);
    ntok *toks = calloc(256 + (size_t)n_merges, sizeof *toks);
    npair *pairs = malloc(len * sizeof *pairs);
    cr_assert(words && toks && pairs);
    int nt = 256, nw = 0;
    for (int i = 0; i < 256; i++) {
        toks[i].b[0] = (uint8_t)i;
        toks[i].n = 1;
    }
    for (size_t pos = 0; pos < len;) {
        size_t e = tri_tokenizer_pretoken_end(text, len, pos);
        cr_assert(e - pos < 64, "test corpus word too long");
        int found = -1;
        for (int w = 0; w < nw && found < 0; w++) {
            if ((size_t)words[w].n != e - pos) continue;
            int same = 1;
            for (int j = 0; j < words[w].n && same; j++) same = words[w].sym[j] == (uint8_t)text[pos + j];
            if (same) found = w;
        }
        if (found < 0) {
            found = nw++;
            words[found].n = (int)(e - pos);
            for (int j = 0; j < words[found].n; j++) words[found].sym[j] = (uint8_t)text[pos + j];
        }
        words[found].count++;
        pos = e;
    }
    int done = 0;
    for (; done < n_merges; done++) {
        size_t np = 0;
        for (int w = 0; w < nw; w++)
            for (int j = 0; j + 1 < words[w].n; j++)
                pairs[np++] = (npair){words[w].sym[j], words[w].sym[j + 1], words[w].count};
        if (!np) break;
        qsort(pairs, np, sizeof *pairs, npair_by_ids);
        npair best = {-1, -1, 0};
        for (size_t i = 0; i < np;) {
            npair sum = pairs[i];
            size_t j = i + 1;
            for (; j < np && pairs[j].a == sum.a && pairs[j].b == sum.b; j++) sum.count += pairs[j].count;
            i = j;
            int take = sum.count > best.count;
            if (sum.count == best.count) {
                int c = ntok_cmp(&toks[sum.a], &toks[best.a]);
                if (!c) c = ntok_cmp(&toks[sum.b], &toks[best.b]);
                take = c < 0;
            }
            if (take) best = sum;
        }
        ntok joined = toks[best.a];
        memcpy(joined.b + joined.n, toks[best.b].b, (size_t)toks[best.b].n);
        joined.n += toks[best.b].n;
        int x = -1;
        for (int t = 0; t < nt && x < 0; t++)
            if (!ntok_cmp(&toks[t], &joined)) x = t;
        if (x < 0) {
            x = nt;
            toks[nt++] = joined;
        }
        merged[done][0] = toks[best.a];
        merged[done][1] = toks[best.b];
        for (int w = 0; w < nw; w++) {
            int o = 0;
            for (int j = 0; j < words[w].n;) {
                if (j + 1 < words[w].n && words[w].sym[j] == best.a && words[w].sym[j + 1] == best.b) {
                    words[w].sym[o++] = x;
                    j += 2;
                } else {
                    words[w].sym[o++] = words[w].sym[j++];
                }
            }
            words[w].n = o;
        }
    }
    free(words);
    free(toks);
    free(pairs);
    return done;
}

/* ---- training --------------------------------------------------------------------------- */

static void train_on(tri_tokenizer *tk, const char *path, int vocab, int threads) {
    const char *files[1] = {path};
    cr_assert_eq(tri_tokenizer_train(tk, files, 1, vocab, threads), 0);
}

Test(tok_train, matches_naive_trainer, .init = make_dir, .fini = remove_dir) {
    char p[400];
    char *corpus = make_corpus(30000, 1);
    size_t len = strlen(corpus);
    write_file(path_in(p, sizeof p, "c.txt"), corpus, len);
    const int n_merges = 300;
    tri_tokenizer tk;
    train_on(&tk, p, 257 + n_merges, 2);
    ntok(*ref)[2] = calloc((size_t)n_merges, sizeof *ref);
    cr_assert(ref != NULL);
    int nref = naive_train(corpus, len, n_merges, ref);
    cr_assert_eq(nref, n_merges);
    cr_assert_eq(tk.n_merges, n_merges);
    cr_assert_eq(tk.vocab_size, 257 + n_merges, "no id was reused on this corpus");
    cr_assert_eq(tk.eot, tk.vocab_size - 1);
    for (int k = 0; k < n_merges; k++)
        for (int side = 0; side < 2; side++) {
            int id = tk.merges[3 * k + side];
            size_t l = tk.tok_off[id + 1] - tk.tok_off[id];
            cr_assert(l == (size_t)ref[k][side].n && memcmp(tk.tok_bytes + tk.tok_off[id], ref[k][side].b, l) == 0,
                      "merge %d side %d: \"%.*s\" vs naive \"%.*s\"", k, side, (int)l, tk.tok_bytes + tk.tok_off[id],
                      ref[k][side].n, ref[k][side].b);
        }
    free(ref);
    tri_tokenizer_free(&tk);
    free(corpus);
}

Test(tok_train, deterministic_and_thread_independent, .init = make_dir, .fini = remove_dir) {
    char p[400], q1[400], q2[400];
    char *corpus = make_corpus(200000, 2);
    write_file(path_in(p, sizeof p, "c.txt"), corpus, strlen(corpus));
    tri_tokenizer a, b, c;
    train_on(&a, p, 1000, 1);
    train_on(&b, p, 1000, 2);
    train_on(&c, p, 1000, 3);
    cr_assert_eq(a.n_merges, b.n_merges);
    cr_assert_eq(a.n_merges, c.n_merges);
    cr_assert_eq(memcmp(a.merges, b.merges, 3 * sizeof(int32_t) * (size_t)a.n_merges), 0);
    cr_assert_eq(memcmp(a.merges, c.merges, 3 * sizeof(int32_t) * (size_t)a.n_merges), 0);
    cr_assert_eq(tri_tokenizer_save(&a, path_in(q1, sizeof q1, "a.json")), 0);
    cr_assert_eq(tri_tokenizer_save(&c, path_in(q2, sizeof q2, "c.json")), 0);
    size_t l1, l2;
    char *f1 = read_file(q1, &l1), *f2 = read_file(q2, &l2);
    cr_assert(l1 == l2 && memcmp(f1, f2, l1) == 0, "saved files differ");
    free(f1), free(f2);
    tri_tokenizer_free(&a), tri_tokenizer_free(&b), tri_tokenizer_free(&c);
    free(corpus);
}

Test(tok_train, merges_reduce_tokens_and_round_trip, .init = make_dir, .fini = remove_dir) {
    char p[400], q[400];
    char *corpus = make_corpus(200000, 3);
    write_file(path_in(p, sizeof p, "c.txt"), corpus, strlen(corpus));
    tri_tokenizer tk;
    train_on(&tk, p, 2000, 2);
    cr_assert_eq(tk.vocab_size, 2000);
    cr_assert_eq(tri_tokenizer_eot(&tk), 1999);
    char *held = make_corpus(50000, 4); /* same distribution, other text */
    size_t hl = strlen(held);
    int32_t *ids;
    size_t n = tri_tokenizer_encode(&tk, held, hl, &ids);
    cr_assert(n < hl / 2, "%zu tokens for %zu bytes", n, hl);
    free(ids);
    check_round_trip_and_reference(&tk, held, hl);
    /* save -> load -> identical encodings */
    cr_assert_eq(tri_tokenizer_save(&tk, path_in(q, sizeof q, "tok.json")), 0);
    tri_tokenizer tk2;
    cr_assert_eq(tri_tokenizer_load(&tk2, q), 0);
    cr_assert_eq(tk2.vocab_size, tk.vocab_size);
    cr_assert_eq(tk2.eot, tk.eot);
    cr_assert_eq(tk2.n_merges, tk.n_merges);
    cr_assert_eq(memcmp(tk.merges, tk2.merges, 3 * sizeof(int32_t) * (size_t)tk.n_merges), 0);
    cr_assert_eq(memcmp(tk.tok_off, tk2.tok_off, ((size_t)tk.vocab_size + 1) * sizeof *tk.tok_off), 0);
    cr_assert_eq(memcmp(tk.tok_bytes, tk2.tok_bytes, tk.tok_off[tk.vocab_size]), 0);
    int32_t *i1, *i2;
    size_t n1 = tri_tokenizer_encode(&tk, held, hl, &i1), n2 = tri_tokenizer_encode(&tk2, held, hl, &i2);
    cr_assert_eq(n1, n2);
    cr_assert_eq(memcmp(i1, i2, n1 * sizeof *i1), 0);
    free(i1), free(i2);
    tri_tokenizer_free(&tk2);
    tri_tokenizer_free(&tk);
    free(held);
    free(corpus);
}

Test(tok_train, small_corpus_stops_early_and_xz_input, .init = make_dir, .fini = remove_dir) {
    char p[400], cmd[900];
    write_file(path_in(p, sizeof p, "tiny.txt"), "abab abab", 9);
    tri_tokenizer tk;
    train_on(&tk, p, 5000, 1);
    /* words "abab" x1, " abab" x1: merges run out long before 5000 */
    cr_assert(tk.vocab_size < 270 && tk.vocab_size > 257);
    cr_assert_eq(tk.eot, tk.vocab_size - 1);
    tri_tokenizer_free(&tk);
    /* an .xz corpus gives the same tokenizer as the plain text */
    char *corpus = make_corpus(20000, 5);
    write_file(path_in(p, sizeof p, "c.txt"), corpus, strlen(corpus));
    snprintf(cmd, sizeof cmd, "xz -1 -k -c '%s' > '%s.xz'", p, p);
    if (system(cmd) != 0) {
        cr_log_warn("xz not available: skipping the .xz part");
    } else {
        tri_tokenizer a, b;
        train_on(&a, p, 400, 2);
        strcat(p, ".xz");
        train_on(&b, p, 400, 2);
        cr_assert_eq(a.n_merges, b.n_merges);
        cr_assert_eq(memcmp(a.merges, b.merges, 3 * sizeof(int32_t) * (size_t)a.n_merges), 0);
        tri_tokenizer_free(&a), tri_tokenizer_free(&b);
    }
    free(corpus);
}

/* ---- round trips ------------------------------------------------------------------------- */

Test(tok_roundtrip, random_utf8_and_random_bytes, .init = make_dir, .fini = remove_dir) {
    char p[400];
    char *corpus = make_corpus(100000, 6);
    write_file(path_in(p, sizeof p, "c.txt"), corpus, strlen(corpus));
    tri_tokenizer trained, bytes;
    train_on(&trained, p, 800, 2);
    tri_tokenizer_bytes(&bytes);
    cr_assert_eq(tri_tokenizer_vocab_size(&bytes), 256);
    cr_assert_eq(tri_tokenizer_eot(&bytes), -1);
    uint64_t s = 12345;
    char buf[600];
    for (int i = 0; i < 600; i++) {
        size_t len = random_text(buf, sizeof buf, &s, i % 2);
        check_round_trip_and_reference(&trained, buf, len);
        int32_t *ids;
        size_t n = tri_tokenizer_encode(&bytes, buf, len, &ids);
        cr_assert_eq(n, len);
        for (size_t k = 0; k < n; k++) cr_assert_eq(ids[k], (int32_t)(uint8_t)buf[k]);
        free(ids);
    }
    /* long pre-tokens (heap path, no cache) and a long text (cached path) */
    char *big = malloc(300000);
    cr_assert(big != NULL);
    size_t bl = 0;
    for (int k = 0; k < 3000; k++) big[bl++] = ' ';
    big[bl++] = 'x';
    for (int k = 0; k < 2000; k++) big[bl++] = "the"[k % 3];
    for (int k = 0; k < 500; k++) big[bl++] = "!.,"[k % 3];
    memcpy(big + bl, corpus, 90000);
    bl += 90000;
    check_round_trip_and_reference(&trained, big, bl);
    /* long words (> 64 bytes: the heap path) glued from the corpus' letters,
     * where merges interleave in every way */
    size_t nl = 0;
    for (size_t k = 0; corpus[k] && nl < 20000; k++)
        if ((corpus[k] >= 'a' && corpus[k] <= 'z') || (corpus[k] >= 'A' && corpus[k] <= 'Z')) big[nl++] = corpus[k];
    for (size_t off = 0; off + 200 < nl && off < 4000; off += 200)
        check_round_trip_and_reference(&trained, big + off, 65 + off % 130);
    free(big);
    tri_tokenizer_free(&trained);
    tri_tokenizer_free(&bytes);
    free(corpus);
}

/* ---- errors -------------------------------------------------------------------------------- */

/* Sends stderr to a file of the test's directory (each Criterion test is a
 * process of its own, so it is never restored). */
static char g_err[400];

static void capture_stderr(void) {
    path_in(g_err, sizeof g_err, "stderr.txt");
    fflush(stderr);
    cr_assert(freopen(g_err, "w", stderr) != NULL);
}

static int stderr_has(const char *needle) {
    fflush(stderr);
    size_t n;
    char *buf = read_file(g_err, &n);
    int found = strstr(buf, needle) != NULL;
    free(buf);
    return found;
}

static void write_str(const char *path, const char *s) { write_file(path, s, strlen(s)); }

Test(tok_errors, load_failures_name_the_file, .init = make_dir, .fini = remove_dir) {
    capture_stderr();
    char p[400];
    tri_tokenizer tk;
    cr_assert_eq(tri_tokenizer_load(&tk, path_in(p, sizeof p, "missing.json")), -1);
    cr_assert_eq(tk.vocab_size, 0);
    write_str(path_in(p, sizeof p, "bad.json"), "{\"model\": {\"type\": \"BPE\", ");
    cr_assert_eq(tri_tokenizer_load(&tk, p), -1);
    write_str(path_in(p, sizeof p, "wordpiece.json"), "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
    cr_assert_eq(tri_tokenizer_load(&tk, p), -1);
    /* a vocab without all 256 byte characters */
    write_str(path_in(p, sizeof p, "few.json"),
              "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}");
    cr_assert_eq(tri_tokenizer_load(&tk, p), -1);
    /* a merge whose parts are not in the vocab */
    write_hand_hf(path_in(p, sizeof p, "hand.json"), 0);
    size_t n;
    char *txt = read_file(p, &n);
    char *m = strstr(txt, "\"h e\"");
    cr_assert(m != NULL);
    memcpy(m, "\"h Z\"", 5); /* "hZ" is no token */
    write_file(path_in(p, sizeof p, "badmerge.json"), txt, n);
    free(txt);
    cr_assert_eq(tri_tokenizer_load(&tk, p), -1);
    cr_assert(stderr_has("badmerge.json: model.merges[0]"));
}

Test(tok_errors, train_and_decode_failures, .init = make_dir, .fini = remove_dir) {
    capture_stderr();
    tri_tokenizer tk;
    const char *files[1] = {"/nonexistent/corpus.txt"};
    cr_assert_eq(tri_tokenizer_train(&tk, files, 1, 256, 1), -1);
    cr_assert_eq(tri_tokenizer_train(&tk, files, 1, 300, 1), -1);
    cr_assert_eq(tk.vocab_size, 0);
    tri_tokenizer_bytes(&tk);
    char *text = (char *)1;
    int32_t bad[2] = {65, 256};
    cr_assert_eq(tri_tokenizer_decode(&tk, bad, 2, &text), SIZE_MAX);
    cr_assert_null(text);
    tri_tokenizer_free(&tk);
    cr_assert(stderr_has("/nonexistent/corpus.txt"));
    cr_assert(stderr_has("token id 256 at position 1"));
}

/* ---- the CLI ------------------------------------------------------------------------------- */

static int run_cli(int argc, const char **argv) { return tri_cmd_tokenize(argc, (char **)argv); }

/* The tokens of a whole token file. */
static int32_t *read_tokens(const char *path, size_t *n, size_t *n_docs) {
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, path, 0), 0, "cannot open %s", path);
    int32_t *t = malloc((ds.n_tokens + 1) * sizeof *t);
    cr_assert(t != NULL);
    tri_dataset_read(&ds, 0, ds.n_tokens, t);
    *n = ds.n_tokens;
    *n_docs = ds.n_docs;
    tri_dataset_close(&ds);
    return t;
}

Test(tok_cli, train_encode_decode, .init = make_dir, .fini = remove_dir) {
    char corpus_p[400], tok_p[400], d1[400], d2[400], jl[400], out[400], bin[420], txt[400];
    char *corpus = make_corpus(1500000, 7); /* > 1 MB: the parallel split path */
    write_file(path_in(corpus_p, sizeof corpus_p, "corpus.txt"), corpus, strlen(corpus));
    path_in(tok_p, sizeof tok_p, "tok.json");
    const char *targv[] = {"tokenize", "train", "--vocab-size", "600", "--out", tok_p, "--threads", "2", corpus_p};
    cr_assert_eq(run_cli(9, targv), 0);
    tri_tokenizer tk;
    cr_assert_eq(tri_tokenizer_load(&tk, tok_p), 0);
    cr_assert_eq(tk.vocab_size, 600);
    int eot = tri_tokenizer_eot(&tk);
    cr_assert_eq(eot, 599);

    const char *doc1 = "In the beginning was the word.\n", *doc2 = "Ελληνικά και \"quotes\" 42\tend";
    write_file(path_in(d1, sizeof d1, "d1.txt"), doc1, strlen(doc1));
    write_file(path_in(d2, sizeof d2, "d2.txt"), doc2, strlen(doc2));
    FILE *f = fopen(path_in(jl, sizeof jl, "docs.jsonl"), "wb");
    cr_assert(f != NULL);
    fprintf(f, "{\"text\": \"In the beginning was the word.\\n\", \"id\": 1}\n\n");
    fprintf(f, "{\"id\": 2, \"text\": \"\\u0395\\u03bb\\u03bb\\u03b7\\u03bd\\u03b9\\u03ba\\u03ac \\u03ba\\u03b1\\u03b9 "
               "\\\"quotes\\\" 42\\tend\"}\n");
    cr_assert_eq(fclose(f), 0);

    int32_t *e1, *e2;
    size_t n1 = tri_tokenizer_encode(&tk, doc1, strlen(doc1), &e1),
           n2 = tri_tokenizer_encode(&tk, doc2, strlen(doc2), &e2);
    for (int mode = 0; mode < 4; mode++) {
        int megatron = mode & 1, jsonl = mode >> 1;
        snprintf(out, sizeof out, "%s/out%d", g_dir, mode);
        const char *eargv[12] = {"tokenize", "encode", "--tokenizer", tok_p, "--format", megatron ? "megatron" : "llmc",
                                 "--out",    out,      "--quiet"};
        int ea = 9;
        if (jsonl) {
            eargv[ea++] = "--jsonl";
            eargv[ea++] = jl;
        } else {
            eargv[ea++] = d1;
            eargv[ea++] = d2;
        }
        cr_assert_eq(run_cli(ea, eargv), 0, "encode mode %d", mode);
        snprintf(bin, sizeof bin, "%s.bin", out);
        size_t n, nd;
        int32_t *got = read_tokens(bin, &n, &nd);
        /* llm.c: EOT before each document; Megatron: after each, one sequence per document */
        cr_assert_eq(n, n1 + n2 + 2, "mode %d", mode);
        size_t k = 0;
        if (!megatron) cr_assert_eq(got[k++], eot);
        cr_assert_eq(memcmp(got + k, e1, n1 * sizeof *e1), 0, "mode %d doc 1", mode);
        k += n1;
        cr_assert_eq(got[k++], eot);
        cr_assert_eq(memcmp(got + k, e2, n2 * sizeof *e2), 0, "mode %d doc 2", mode);
        k += n2;
        if (megatron) {
            cr_assert_eq(got[k], eot);
            cr_assert_eq(nd, 2u);
        }
        free(got);
        /* decode to a file through stdout */
        path_in(txt, sizeof txt, "decoded.txt");
        fflush(stdout);
        int saved = dup(1);
        cr_assert(saved >= 0);
        cr_assert(freopen(txt, "wb", stdout) != NULL);
        const char *dargv[] = {"tokenize", "decode", "--tokenizer", tok_p, "--format", megatron ? "megatron" : "llmc",
                               bin};
        int rc = run_cli(7, dargv);
        fflush(stdout);
        cr_assert(dup2(saved, 1) >= 0);
        close(saved);
        cr_assert_eq(rc, 0);
        size_t tl;
        char *dec = read_file(txt, &tl);
        char want[256];
        snprintf(want, sizeof want, megatron ? "%s<|endoftext|>%s<|endoftext|>" : "<|endoftext|>%s<|endoftext|>%s",
                 doc1, doc2);
        cr_assert_eq(tl, strlen(want));
        cr_assert_str_eq(dec, want);
        free(dec);
    }
    free(e1), free(e2);

    /* one big document: the parallel split gives the single-call encoding */
    snprintf(out, sizeof out, "%s/big", g_dir);
    const char *bargv[] = {"tokenize", "encode", "--tokenizer", tok_p, "--format", "megatron",
                           "--out",    out,      "--threads",   "2",   "--quiet",  corpus_p};
    cr_assert_eq(run_cli(12, bargv), 0);
    snprintf(bin, sizeof bin, "%s.bin", out);
    size_t n, nd;
    int32_t *got = read_tokens(bin, &n, &nd), *want;
    size_t nw = tri_tokenizer_encode(&tk, corpus, strlen(corpus), &want);
    cr_assert_eq(n, nw + 1);
    cr_assert_eq(memcmp(got, want, nw * sizeof *want), 0);
    cr_assert_eq(got[nw], eot);
    free(got);
    /* the same through xz -dc, block by block */
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "xz -1 -k -c '%s' > '%s.xz'", corpus_p, corpus_p);
    if (system(cmd) != 0) {
        cr_log_warn("xz not available: skipping the .xz part");
    } else {
        strcat(corpus_p, ".xz");
        snprintf(out, sizeof out, "%s/bigxz", g_dir);
        const char *xargv[] = {"tokenize", "encode", "--tokenizer", tok_p,     "--format",
                               "llmc",     "--out",  out,           "--quiet", corpus_p};
        cr_assert_eq(run_cli(10, xargv), 0);
        snprintf(bin, sizeof bin, "%s.bin", out);
        got = read_tokens(bin, &n, &nd);
        cr_assert_eq(n, nw + 1);
        cr_assert_eq(got[0], eot);
        cr_assert_eq(memcmp(got + 1, want, nw * sizeof *want), 0);
        free(got);
    }
    free(want);
    tri_tokenizer_free(&tk);
    free(corpus);
}

Test(tok_cli, bad_input_exits_2, .init = make_dir, .fini = remove_dir) {
    capture_stderr();
    char corpus_p[400], tok_p[400], jl[400], out[400], bin[420];
    write_str(path_in(corpus_p, sizeof corpus_p, "c.txt"), "some text here");
    path_in(tok_p, sizeof tok_p, "tok.json");
    const char *a1[] = {"tokenize", "train", "--vocab-size", "256", "--out", tok_p, corpus_p};
    cr_assert_eq(run_cli(7, a1), 2);
    const char *a2[] = {"tokenize", "train", "--vocab-size", "300", "--out", tok_p, "/nonexistent/x.txt"};
    cr_assert_eq(run_cli(7, a2), 2);
    cr_assert(stderr_has("/nonexistent/x.txt"));
    const char *a3[] = {"tokenize", "train", "--vocab-size", "300", "--out", tok_p, corpus_p};
    cr_assert_eq(run_cli(7, a3), 0);
    snprintf(out, sizeof out, "%s/o", g_dir);
    const char *a4[] = {"tokenize", "encode", "--tokenizer", "/nonexistent/tok.json", "--format", "llmc",
                        "--out",    out,      corpus_p};
    cr_assert_eq(run_cli(9, a4), 2);
    const char *a5[] = {"tokenize", "encode", "--tokenizer", tok_p, "--format", "parquet", "--out", out, corpus_p};
    cr_assert_eq(run_cli(9, a5), 2);
    /* a bad JSON line: exit 2 and no output file left behind */
    write_str(path_in(jl, sizeof jl, "bad.jsonl"), "{\"text\": \"ok\"}\n{\"text\": oops}\n");
    const char *a6[] = {"tokenize", "encode", "--tokenizer", tok_p,     "--format", "megatron",
                        "--out",    out,      "--jsonl",     "--quiet", jl};
    cr_assert_eq(run_cli(11, a6), 2);
    cr_assert(stderr_has("bad.jsonl: line 2"));
    snprintf(bin, sizeof bin, "%s.bin", out);
    cr_assert_neq(access(bin, F_OK), 0);
    snprintf(bin, sizeof bin, "%s.bin.tmp", out);
    cr_assert_neq(access(bin, F_OK), 0);
    const char *a7[] = {"tokenize", "frobnicate"};
    cr_assert_eq(run_cli(2, a7), 2);
}
