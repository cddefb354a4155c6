/* data/llmc: the header check on a file in memory (what tri_dataset_open
 * maps), and the header the writer puts in front of the tokens. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/llmc.h"
#include "helpers/testutil.h"

/* An llm.c file of n tokens in memory: header (magic, version, count) then
 * n tokens of `bytes` bytes (0x01 each) and `extra` stray bytes. */
static unsigned char *file_of(int32_t magic, int32_t version, int32_t count, size_t n, int bytes, size_t extra,
                              size_t *size) {
    *size = 1024 + n * (size_t)bytes + extra;
    unsigned char *f = calloc(1, *size);
    cr_assert_not_null(f);
    memcpy(f, &magic, 4);
    memcpy(f + 4, &version, 4);
    memcpy(f + 8, &count, 4);
    memset(f + 1024, 1, n * (size_t)bytes + extra);
    return f;
}

/* tri_llmc_parse with stderr captured; returns the rc, *msg what it said. */
static int parse(const unsigned char *f, size_t size, tri_token_layout *lay, char **msg) {
    tt_capture c;
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/err", dir);
    tt_capture_begin(&c, path);
    int rc = tri_llmc_parse("t.bin", f, size, lay);
    *msg = tt_capture_end(&c);
    tt_rmrf(dir);
    free(dir);
    return rc;
}

Test(llmc, uint16_and_uint32_files_give_their_layout) {
    size_t size;
    char *msg;
    tri_token_layout lay;
    unsigned char *f = file_of(20240520, 1, 5, 5, 2, 0, &size);
    cr_assert_eq(parse(f, size, &lay, &msg), 0, "%s", msg);
    cr_assert_eq(lay.dtype, TRI_DT_U16);
    cr_assert_eq(lay.token_bytes, 2);
    cr_assert_eq(lay.n_tokens, 5u);
    cr_assert_eq(lay.n_docs, 1u);
    cr_assert_eq(lay.n_seqs, 1u);
    cr_assert_eq(lay.data_offset, 1024u);
    cr_assert_eq(lay.tokens, f + 1024);
    cr_assert_null(lay.seq_ptr);
    cr_assert_null(lay.doc_idx);
    free(msg);
    free(f);
    f = file_of(20240801, 7, 3, 3, 4, 0, &size);
    cr_assert_eq(parse(f, size, &lay, &msg), 0, "%s", msg);
    cr_assert_eq(lay.dtype, TRI_DT_U32);
    cr_assert_eq(lay.n_tokens, 3u);
    free(msg);
    free(f);
}

Test(llmc, bad_headers_are_refused_naming_the_offset) {
    static const struct {
        int32_t magic, version, count;
        size_t n, extra;
        const char *says;
    } cases[] = {
        {20240521, 1, 0, 0, 0, "bad magic 20240521 at byte offset 0"},
        {20240520, 7, 0, 0, 0, "unsupported version 7 at byte offset 4"},
        {20240520, 1, -3, 0, 0, "negative token count -3 at byte offset 8"},
        {20240520, 1, 10, 9, 0, "the header says 10 tokens (1044 bytes with the header) but the file holds 1042"},
        {20240520, 1, 2, 2, 3, "3 stray bytes after the 2 tokens"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t size;
        char *msg;
        tri_token_layout lay;
        unsigned char *f =
            file_of(cases[k].magic, cases[k].version, cases[k].count, cases[k].n, 2, cases[k].extra, &size);
        cr_assert_eq(parse(f, size, &lay, &msg), -1, "case %zu", k);
        cr_assert(strstr(msg, "trident: t.bin: ") == msg, "case %zu: %s", k, msg);
        cr_assert(strstr(msg, cases[k].says) != NULL, "case %zu: %s", k, msg);
        free(msg);
        free(f);
    }
    char *msg;
    tri_token_layout lay;
    cr_assert_eq(parse(NULL, 0, &lay, &msg), -1);
    cr_assert(strstr(msg, "truncated header: the file holds 0 bytes") != NULL, "%s", msg);
    free(msg);
}

Test(llmc, the_written_header_parses_back) {
    for (int u32 = 0; u32 < 2; u32++) {
        FILE *f = tmpfile();
        cr_assert_not_null(f);
        unsigned char tokens[1024 + 12];
        memset(tokens, 0xAB, sizeof tokens);
        cr_assert_eq(fwrite(tokens, 1, sizeof tokens, f), sizeof tokens);
        size_t n = u32 ? 3 : 6;
        cr_assert_eq(tri_llmc_write_header(f, "t.bin", u32 ? TRI_DT_U32 : TRI_DT_U16, n), 0);
        unsigned char back[sizeof tokens];
        rewind(f);
        cr_assert_eq(fread(back, 1, sizeof back, f), sizeof back);
        fclose(f);
        cr_assert_eq(tri_ld_i32(back), u32 ? 20240801 : 20240520);
        cr_assert_eq(tri_ld_i32(back + 4), u32 ? 7 : 1);
        cr_assert_eq(tri_ld_i32(back + 8), (int32_t)n);
        for (int i = 12; i < 1024; i++) cr_assert_eq(back[i], 0, "header byte %d", i);
        cr_assert_eq(back[1024], 0xAB, "the tokens are left as they were");
        tri_token_layout lay;
        cr_assert_eq(tri_llmc_parse("t.bin", back, sizeof back, &lay), 0);
        cr_assert_eq(lay.n_tokens, n);
    }
}
