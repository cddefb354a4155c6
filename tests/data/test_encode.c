/* data/tok/encode: the encode pipeline against the single-call encoder
 * (tri_tokenizer_encode on each document, the separator placed by hand),
 * the same bytes for any thread count, and nothing written on bad input. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/exit.h"
#include "data/dataset.h"
#include "data/tok/encode.h"
#include "data/tok/tokenizer.h"
#include "helpers/testutil.h"

static char *g_dir;

static void setup(void) { g_dir = tt_mkdtemp(); }
static void teardown(void) {
    tt_rmrf(g_dir);
    free(g_dir);
}

static const char *in_dir(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(text, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* About n bytes of words, spaces, punctuation and newlines. */
static char *text_of(size_t n, uint64_t seed) {
    static const char *const w[] = {"the ",  "and ", "of ", "LORD ", "café ", "Ελληνικά ", "42 ",
                                    "it's ", "\n",   ", ",  ".\n",   "  ",    "unto ",     "thee "};
    char *t = malloc(n + 16);
    cr_assert_not_null(t);
    size_t k = 0;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    while (k < n) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const char *x = w[(s >> 33) % (sizeof w / sizeof w[0])];
        memcpy(t + k, x, strlen(x));
        k += strlen(x);
    }
    t[k] = 0;
    return t;
}

/* A small tokenizer: a few merges over GPT-2's base ids, <|endoftext|> last. */
static void small_tokenizer(tri_tokenizer *tk) {
    tri_tokenizer base;
    cr_assert_eq(tri_tokenizer_from_merges(&base, NULL, 0, 0), 0);
    const int *id = base.byte_id;
    /* th, the, " the", an, and */
    const int32_t pairs[][2] = {{id['t'], id['h']}, {256, id['e']}, {id[' '], 257}, {id['a'], id['n']}, {259, id['d']}};
    tri_tokenizer_free(&base);
    cr_assert_eq(tri_tokenizer_from_merges(tk, &pairs[0][0], 5, 1), 0);
}

/* A whole file (malloc'd), *n its size. */
static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    *n = (size_t)ftell(f);
    rewind(f);
    char *b = malloc(*n + 1);
    cr_assert_not_null(b);
    cr_assert_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

/* The whole token stream of a token file. */
static int32_t *tokens_of(const char *path, size_t *n, size_t *docs) {
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, path, 0), 0, "%s", path);
    int32_t *t = malloc((ds.n_tokens + 1) * sizeof *t);
    cr_assert_not_null(t);
    cr_assert_eq(tri_dataset_read(&ds, 0, ds.n_tokens, t), 0);
    *n = ds.n_tokens;
    *docs = ds.n_docs;
    tri_dataset_close(&ds);
    return t;
}

static int encode(const tri_tokenizer *tk, const char *format, const char *prefix, int threads, int jsonl,
                  const char *const *files, int n, tri_encode_stats *st) {
    tri_encode_cfg cfg = {
        .tk = tk, .out_prefix = prefix, .format = format, .jsonl = jsonl, .n_threads = threads, .quiet = 1};
    return tri_encode_files(&cfg, files, n, st);
}

Test(encode, documents_are_the_single_call_encoding_with_separators, .init = setup, .fini = teardown) {
    tri_tokenizer tk;
    small_tokenizer(&tk);
    int eot = tri_tokenizer_eot(&tk);
    char p0[4200], p1[4200], p2[4200], out[4200], bin[4300];
    char *big = text_of((size_t)3 << 20, 1), *s1 = text_of(5000, 2), *s2 = text_of(300, 3); /* big: split blocks */
    write_file(in_dir(p0, sizeof p0, "small1.txt"), s1, strlen(s1));
    write_file(in_dir(p1, sizeof p1, "big.txt"), big, strlen(big));
    write_file(in_dir(p2, sizeof p2, "small2.txt"), s2, strlen(s2));
    const char *files[] = {p0, p1, p2};
    const char *docs[] = {s1, big, s2};
    int32_t *want[3];
    size_t nwant[3], total = 0;
    for (int d = 0; d < 3; d++) {
        nwant[d] = tri_tokenizer_encode(&tk, docs[d], strlen(docs[d]), &want[d]);
        total += nwant[d] + 1;
    }
    for (int megatron = 0; megatron < 2; megatron++) {
        snprintf(out, sizeof out, "%s/out%d", g_dir, megatron);
        tri_encode_stats st;
        cr_assert_eq(encode(&tk, megatron ? "megatron" : "llmc", out, 3, 0, files, 3, &st), TRI_EXIT_OK);
        cr_assert_eq(st.n_docs, 3u);
        cr_assert_eq(st.n_tokens, total);
        cr_assert_eq(st.bytes, strlen(s1) + strlen(big) + strlen(s2));
        cr_assert_eq(st.n_threads, 3);
        snprintf(bin, sizeof bin, "%s.bin", out);
        size_t n, nd;
        int32_t *got = tokens_of(bin, &n, &nd);
        cr_assert_eq(n, total);
        cr_assert_eq(nd, megatron ? 3u : 1u);
        size_t k = 0;
        for (int d = 0; d < 3; d++) {
            if (!megatron) cr_assert_eq(got[k++], eot, "llm.c: EOT before document %d", d);
            cr_assert_eq(memcmp(got + k, want[d], nwant[d] * sizeof *got), 0, "document %d", d);
            k += nwant[d];
            if (megatron) cr_assert_eq(got[k++], eot, "Megatron: EOT after document %d", d);
        }
        free(got);
    }
    for (int d = 0; d < 3; d++) free(want[d]);
    free(big), free(s1), free(s2);
    tri_tokenizer_free(&tk);
}

Test(encode, the_output_is_the_same_for_any_thread_count, .init = setup, .fini = teardown) {
    tri_tokenizer tk;
    small_tokenizer(&tk);
    char p0[4200], p1[4200], out[4200], bin[4300];
    char *big = text_of((size_t)2 << 20, 4), *jl = malloc(200000);
    cr_assert_not_null(jl);
    size_t k = 0;
    for (int i = 0; i < 2000; i++)
        k += (size_t)sprintf(jl + k, "{\"text\": \"line %d the and of\"}\n%s", i, i % 7 ? "" : "\n");
    write_file(in_dir(p0, sizeof p0, "big.txt"), big, strlen(big));
    write_file(in_dir(p1, sizeof p1, "docs.jsonl"), jl, k);
    for (int jsonl = 0; jsonl < 2; jsonl++) {
        char *first[2] = {NULL, NULL};
        size_t first_n[2] = {0, 0};
        for (int threads = 1; threads <= 4; threads++) {
            snprintf(out, sizeof out, "%s/t%d", g_dir, threads);
            const char *files[] = {jsonl ? p1 : p0};
            tri_encode_stats st;
            cr_assert_eq(encode(&tk, "megatron", out, threads, jsonl, files, 1, &st), TRI_EXIT_OK);
            cr_assert_eq(st.n_docs, jsonl ? 2000u : 1u);
            for (int part = 0; part < 2; part++) {
                snprintf(bin, sizeof bin, "%s%s", out, part ? ".idx" : ".bin");
                size_t n;
                char *data = read_all(bin, &n);
                if (threads == 1) {
                    first[part] = data;
                    first_n[part] = n;
                    continue;
                }
                cr_assert_eq(n, first_n[part], "threads %d, %s", threads, bin);
                cr_assert_eq(memcmp(data, first[part], n), 0, "threads %d, jsonl %d, %s", threads, jsonl, bin);
                free(data);
            }
        }
        free(first[0]), free(first[1]);
    }
    free(big), free(jl);
    tri_tokenizer_free(&tk);
}

Test(encode, bad_input_writes_nothing, .init = setup, .fini = teardown) {
    tri_tokenizer tk;
    small_tokenizer(&tk);
    char p0[4200], p1[4200], out[4200], f[4300];
    write_file(in_dir(p0, sizeof p0, "ok.txt"), "the end\n", 8);
    write_file(in_dir(p1, sizeof p1, "bad.jsonl"), "{\"text\": \"ok\"}\n[1, 2]\n", 22);
    snprintf(out, sizeof out, "%s/o", g_dir);
    tri_encode_stats st;
    const char *jfiles[] = {p1};
    cr_assert_eq(encode(&tk, "megatron", out, 2, 1, jfiles, 1, &st), TRI_EXIT_BAD_INPUT);
    const char *missing[] = {p0, "/nonexistent/x.txt"};
    cr_assert_eq(encode(&tk, "llmc", out, 2, 0, missing, 2, &st), TRI_EXIT_BAD_INPUT);
    static const char *const names[] = {".bin", ".idx", ".bin.tmp", ".idx.tmp"};
    for (int i = 0; i < 4; i++) {
        snprintf(f, sizeof f, "%s%s", out, names[i]);
        cr_assert_neq(access(f, F_OK), 0, "%s is left behind", f);
    }
    tri_tokenizer_free(&tk);
}
