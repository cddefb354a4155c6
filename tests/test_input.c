/* Bad input found by fuzzing (tests/fuzz) and by hand, one regression test
 * per finding: the parsers refuse it with one line naming the file, key or
 * number, and never reach undefined behaviour (the sanitizer build,
 * scripts/test_sanitize.sh, runs these under ASan + UBSan). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "helpers/testutil.h"
#include "model/checkpoint.h"

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

#define HF_SHAPE(embd) \
    "{\"n_embd\": " embd ", \"n_head\": 2, \"n_layer\": 3, \"n_positions\": 64, \"vocab_size\": 300}"

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
        {"1e10", "got 10000000000"}, {"2147483648", "got 2147483648"}, {"-1e300", "got -1.0000000000000001e+300"},
        {"1e400", "got inf"},        {"0", "got 0"},                   {"2.5", "got 2.5"},
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
 * .bin (an empty file has no mapping; UBSan: pointer-overflow). */
Test(token_files, empty_megatron_file_reads_nothing) {
    char *dir = tt_mkdtemp(), prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/empty", dir);
    write_empty_megatron(prefix, 2);
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, prefix, 256), 0);
    cr_expect_eq(ds.n_tokens, 0);
    cr_expect_eq(ds.n_docs, 2);
    int32_t out[1] = {-7};
    tri_dataset_read(&ds, 0, 0, out);
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
