/* Bad input found by fuzzing (tests/fuzz) and by hand, one regression test
 * per finding: the parsers refuse it with one line naming the file, key or
 * number, and never reach undefined behaviour (the sanitizer build,
 * scripts/test_sanitize.sh, runs these under ASan + UBSan). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "data/tok/tokenizer.h"
#include "helpers/testutil.h"
#include "model/ckpt/checkpoint.h"
#include "train/ckpt_state.h"

/* Runs tri_hf_config_parse on json with stderr captured; returns its result
 * and the message (malloc'd) in *err. */
static int hf_parse(const char *json, tri_model_cfg *cfg, char **err) {
    char *dir = tt_mkdtemp(), cap[4200];
    snprintf(cap, sizeof cap, "%s/stderr", dir);
    tt_capture c;
    tt_capture_begin(&c, cap);
    int rc = tri_hf_config_parse(json, "ck/config.json", cfg);
    *err = tt_capture_end(&c);
    tt_rmrf(dir);
    free(dir);
    return rc;
}

#define HF_SHAPE(embd) "{\"n_embd\": " embd ", \"n_head\": 2, \"n_layer\": 3, \"n_positions\": 64, \"vocab_size\": 300}"

Test(hf_config, reads_the_shape) {
    tri_model_cfg cfg = {0};
    char *err;
    cr_assert_eq(hf_parse(HF_SHAPE("16"), &cfg, &err), 0, "%s", err);
    cr_expect_eq(cfg.n_embd, 16);
    cr_expect_eq(cfg.n_head, 2);
    cr_expect_eq(cfg.n_layer, 3);
    cr_expect_eq(cfg.seq_len, 64);
    cr_expect_eq(cfg.vocab_size, 300);
    cr_expect_str_empty(err);
    free(err);
    /* the largest int is still an int */
    cr_assert_eq(hf_parse(HF_SHAPE("2147483647"), &cfg, &err), 0, "%s", err);
    cr_expect_eq(cfg.n_embd, 2147483647);
    free(err);
}

/* Fuzzing found `"n_embd": 1e10` cast to int before the range check
 * (UBSan: float-cast-overflow), reachable from `trident sample`. */
Test(hf_config, values_outside_int_are_refused_before_the_cast) {
    struct {
        const char *value, *shown;
    } bad[] = {
        {"1e10", "got 10000000000"},
        {"2147483648", "got 2147483648"},
        {"-1e300", "got -1.0000000000000001e+300"},
        {"1e400", "got inf"},
        {"0", "got 0"},
        {"2.5", "got 2.5"},
        {"\"16\"", "got not a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 "{\"n_embd\": %s, \"n_head\": 2, \"n_layer\": 3, \"n_positions\": 64, \"vocab_size\": 300}",
                 bad[i].value);
        tri_model_cfg cfg = {0};
        char *err;
        cr_expect_eq(hf_parse(json, &cfg, &err), -1, "%s was accepted", bad[i].value);
        cr_expect(strstr(err, "trident: ck/config.json: n_embd: expected a positive integer below 2^31") == err,
                  "%s: %s", bad[i].value, err);
        cr_expect(strstr(err, bad[i].shown) != NULL, "%s: want \"%s\" in %s", bad[i].value, bad[i].shown, err);
        free(err);
    }
    tri_model_cfg cfg = {0};
    char *err;
    cr_expect_eq(hf_parse("{\"n_embd\": 16}", &cfg, &err), -1);
    cr_expect(strstr(err, "n_head: expected a positive integer below 2^31, got missing") != NULL, "%s", err);
    free(err);
}

/* ---- token files ------------------------------------------------------------------ */

/* A Megatron index of `docs` empty documents (N = 0 sequences, D = docs + 1). */
static void write_empty_megatron(const char *prefix, int docs) {
    char p[4200];
    snprintf(p, sizeof p, "%s.idx", prefix);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f);
    uint64_t version = 1, n = 0, d = (uint64_t)docs + 1;
    unsigned char dtype = 8; /* uint16 */
    fwrite("MMIDIDX\0\0", 1, 9, f);
    fwrite(&version, 8, 1, f);
    fwrite(&dtype, 1, 1, f);
    fwrite(&n, 8, 1, f);
    fwrite(&d, 8, 1, f);
    for (uint64_t j = 0; j < d; j++) {
        int64_t zero = 0;
        fwrite(&zero, 8, 1, f);
    }
    cr_assert_eq(fclose(f), 0);
    snprintf(p, sizeof p, "%s.bin", prefix);
    f = fopen(p, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fclose(f), 0);
}

/* Fuzzing found tri_dataset_read computing NULL + 0 for an empty Megatron
 * .bin (an empty file has no mapping; UBSan: pointer-overflow); the read of
 * nothing now returns first. */
Test(token_files, empty_megatron_file_reads_nothing) {
    char *dir = tt_mkdtemp(), prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/empty", dir);
    write_empty_megatron(prefix, 2);
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, prefix, 256), 0);
    cr_expect_eq(ds.n_tokens, 0);
    cr_expect_eq(ds.n_docs, 2);
    int32_t out[1] = {-7};
    cr_expect_eq(tri_dataset_read(&ds, 0, 0, out), 0);
    cr_expect_eq(out[0], -7, "a read of 0 tokens wrote");
    size_t start = 1, len = 1;
    cr_expect_eq(tri_dataset_doc(&ds, 1, &start, &len), 0);
    cr_expect_eq(start, 0);
    cr_expect_eq(len, 0);
    int64_t mn = 1, mx = 1;
    tri_dataset_minmax(&ds, &mn, &mx);
    cr_expect(mn == 0 && mx == 0);
    tri_dataset_close(&ds);
    tt_rmrf(dir);
    free(dir);
}

/* ---- tokenizer ids ------------------------------------------------------------------- */

/* GPT-2's byte-level character of byte b (its bytes_to_unicode), as UTF-8. */
static void byte_char(int b, char out[3]) {
    int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    unsigned cp = (unsigned)b;
    if (!printable) { /* the 68 others, in increasing order, become U+0100, U+0101, ... */
        cp = 256;
        for (int x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) cp++;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
    }
}

/* Writes a tokenizer.json: the 256 byte tokens with id = byte value,
 * `extra_vocab` appended inside model.vocab (e.g. ", \"<|endoftext|>\": 256"),
 * and `added` as the added_tokens array text. */
static void write_tokenizer(const char *path, const char *extra_vocab, const char *added) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fprintf(f, "{\"added_tokens\": %s, \"model\": {\"type\": \"BPE\", \"vocab\": {", added);
    for (int b = 0; b < 256; b++) {
        char c[3];
        byte_char(b, c);
        fprintf(f, "%s\"%s%s\": %d", b ? ", " : "", (c[0] == '"' || c[0] == '\\') ? "\\" : "", c, b);
    }
    fprintf(f, "%s}, \"merges\": []}}\n", extra_vocab);
    cr_assert_eq(fclose(f), 0);
}

/* Loads path with stderr captured; returns the result and the message. */
static int load_tok(const char *dir, const char *path, tri_tokenizer *tk, char **err) {
    char cap[4200];
    snprintf(cap, sizeof cap, "%s/stderr", dir);
    tt_capture c;
    tt_capture_begin(&c, cap);
    int rc = tri_tokenizer_load(tk, path);
    *err = tt_capture_end(&c);
    return rc;
}

Test(tokenizer_ids, gpt2_style_end_of_text_in_vocab_and_added_tokens_loads) {
    char *dir = tt_mkdtemp(), p[4200], *err;
    snprintf(p, sizeof p, "%s/tok.json", dir);
    write_tokenizer(p, ", \"<|endoftext|>\": 256",
                    "[{\"id\": 256, \"content\": \"<|endoftext|>\", \"special\": true}]");
    tri_tokenizer tk;
    cr_assert_eq(load_tok(dir, p, &tk, &err), 0, "%s", err);
    cr_expect_eq(tri_tokenizer_vocab_size(&tk), 257);
    cr_expect_eq(tri_tokenizer_eot(&tk), 256);
    tri_tokenizer_free(&tk);
    free(err);
    tt_rmrf(dir);
    free(dir);
}

/* Item 7 of issue 13: an end-of-text id of 500000000 sized a dense table by
 * the id (20 GB for a 100 KB file). Any id that leaves a gap is refused now,
 * naming it, before anything is sized by it (the fault test
 * tokenizer_memory::huge_end_of_text_id_is_refused_within_a_memory_cap
 * runs the 500000000 case under a memory cap). */
Test(tokenizer_ids, an_id_that_leaves_a_gap_is_refused_naming_it) {
    char *dir = tt_mkdtemp(), p[4200], *err;
    snprintf(p, sizeof p, "%s/tok.json", dir);
    tri_tokenizer tk;
    /* an added token past the end */
    write_tokenizer(p, "", "[{\"id\": 300, \"content\": \"<|endoftext|>\", \"special\": true}]");
    cr_expect_eq(load_tok(dir, p, &tk, &err), -1, "id 300 of 257 entries was accepted");
    cr_expect(strstr(err, "added_tokens[0]: id 300 leaves a gap") != NULL, "%s", err);
    cr_expect(strstr(err, p) != NULL, "%s", err);
    free(err);
    /* a vocab entry past the end */
    write_tokenizer(p, ", \"<|endoftext|>\": 1000", "[]");
    cr_expect_eq(load_tok(dir, p, &tk, &err), -1);
    cr_expect(strstr(err, "model.vocab[\"<|endoftext|>\"]: id 1000 leaves a gap") != NULL, "%s", err);
    free(err);
    /* a hole below the largest id: 258 entries (one counted twice), ids 0..255 and 257 */
    write_tokenizer(p, ", \"<|endoftext|>\": 257", "[{\"id\": 257, \"content\": \"<|endoftext|>\"}]");
    cr_expect_eq(load_tok(dir, p, &tk, &err), -1);
    cr_expect(strstr(err, "no token has id 256, but ids go up to 257") != NULL, "%s", err);
    free(err);
    tt_rmrf(dir);
    free(dir);
}

/* Item 12: an end-of-text token whose id is already a byte token's was
 * reported as "the vocab has no token for byte 0x26". */
Test(tokenizer_ids, a_clashing_end_of_text_id_is_reported_as_a_clash) {
    char *dir = tt_mkdtemp(), p[4200], *err;
    snprintf(p, sizeof p, "%s/tok.json", dir);
    write_tokenizer(p, "", "[{\"id\": 38, \"content\": \"<|endoftext|>\", \"special\": true}]");
    tri_tokenizer tk;
    cr_expect_eq(load_tok(dir, p, &tk, &err), -1);
    cr_expect(strstr(err, "model.vocab[\"&\"]: id 38 clashes with added_tokens \"<|endoftext|>\"") != NULL, "%s", err);
    cr_expect(strstr(err, "no token for byte") == NULL, "%s", err);
    free(err);
    tt_rmrf(dir);
    free(dir);
}

/* ---- state.json ------------------------------------------------------------------------- */

static int state_parse(const char *json, int *step, uint64_t *consumed, tri_config *cfg, char **err) {
    char *dir = tt_mkdtemp(), cap[4200];
    snprintf(cap, sizeof cap, "%s/stderr", dir);
    tt_capture c;
    tt_capture_begin(&c, cap);
    int rc = tri_ckpt_state_parse(json, "ck/state.json", step, consumed, cfg);
    *err = tt_capture_end(&c);
    tt_rmrf(dir);
    free(dir);
    return rc;
}

Test(state_json, reads_step_samples_and_config) {
    int step = -1;
    uint64_t consumed = 0;
    tri_config cfg;
    char *err;
    cr_assert_eq(state_parse("{\"step\": 2147483647, \"samples_consumed\": 9007199254740991, "
                             "\"config\": {\"data\": {\"train\": \"a.bin\"}, \"model\": {\"n_layer\": 3}}}",
                             &step, &consumed, &cfg, &err),
                 0, "%s", err);
    cr_expect_eq(step, 2147483647);
    cr_expect_eq(consumed, 9007199254740991ull);
    cr_expect_eq(cfg.model.n_layer, 3);
    cr_expect_str_eq(cfg.data.train, "a.bin");
    free(err);
}

/* "step": 1e10 was cast to int before any range check (undefined). */
Test(state_json, out_of_range_numbers_are_refused_naming_the_key) {
    const char *cfg_text = ", \"config\": {\"data\": {\"train\": \"a.bin\"}}}";
    struct {
        const char *head, *want;
    } bad[] = {
        {"{\"step\": 1e10, \"samples_consumed\": 0", "\"step\" is missing or not an integer in [0, 2^31)"},
        {"{\"step\": 2147483648, \"samples_consumed\": 0", "\"step\""},
        {"{\"step\": -1, \"samples_consumed\": 0", "\"step\""},
        {"{\"step\": 1.5, \"samples_consumed\": 0", "\"step\""},
        {"{\"samples_consumed\": 0", "\"step\" is missing"},
        {"{\"step\": 3, \"samples_consumed\": 1e300", "\"samples_consumed\" is missing or not an integer in [0, 2^53)"},
        {"{\"step\": 3, \"samples_consumed\": \"7\"", "\"samples_consumed\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[512];
        snprintf(json, sizeof json, "%s%s", bad[i].head, cfg_text);
        int step = -7;
        uint64_t consumed = 7;
        tri_config cfg;
        char *err;
        cr_expect_eq(state_parse(json, &step, &consumed, &cfg, &err), -1, "accepted: %s", json);
        cr_expect(strncmp(err, "trident: ck/state.json: ", 24) == 0 && strstr(err, bad[i].want) != NULL,
                  "%s: want \"%s\" in %s", json, bad[i].want, err);
        cr_expect(step == -7 && consumed == 7, "outputs written on error");
        free(err);
    }
    int step;
    uint64_t consumed;
    tri_config cfg;
    char *err;
    cr_expect_eq(state_parse("{\"step\": 3, \"samples_consumed\": 5}", &step, &consumed, &cfg, &err), -1);
    cr_expect(strstr(err, "no \"config\" object") != NULL, "%s", err);
    free(err);
    cr_expect_eq(state_parse("{\"step\": 3, \"samples_consumed\": 5, \"config\": {\"model\": {\"n_head\": 0}}}", &step,
                             &consumed, &cfg, &err),
                 -1);
    cr_expect(strstr(err, "ck/state.json") != NULL && strstr(err, "model.n_head") != NULL, "%s", err);
    free(err);
    cr_expect_eq(state_parse("{\"step\": 3,", &step, &consumed, &cfg, &err), -1);
    cr_expect(strstr(err, "not valid JSON") != NULL, "%s", err);
    free(err);
}
