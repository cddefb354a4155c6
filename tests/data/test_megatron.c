/* data/megatron: the index check on files in memory (what tri_dataset_open
 * maps), and the index the writer puts beside the tokens, read back byte
 * by byte against the layout written out here independently. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/megatron.h"
#include "helpers/testutil.h"

/* A little-endian index: header, lens[n], pointers[n] (contiguous unless
 * gap), docs[d]. Returns its size. */
static size_t make_index(unsigned char *x, int code, const int32_t *lens, size_t n, const int64_t *docs, size_t d,
                         int64_t gap) {
    size_t o = 0;
    memcpy(x, "MMIDIDX\0\0", 9);
    o = 9;
    uint64_t v = 1, nn = n, dd = d;
    memcpy(x + o, &v, 8), o += 8;
    x[o++] = (unsigned char)code;
    memcpy(x + o, &nn, 8), o += 8;
    memcpy(x + o, &dd, 8), o += 8;
    memcpy(x + o, lens, 4 * n), o += 4 * n;
    int64_t p = 0, tb = code == 4 ? 4 : 2;
    for (size_t i = 0; i < n; i++) {
        int64_t q = p + (i == 1 ? gap : 0);
        memcpy(x + o, &q, 8), o += 8;
        p += lens[i] * tb;
    }
    memcpy(x + o, docs, 8 * d), o += 8 * d;
    return o;
}

static int parse(const unsigned char *x, size_t xs, size_t bin_size, tri_token_layout *lay, char **msg) {
    static unsigned char bin[4096];
    tt_capture c;
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/err", dir);
    tt_capture_begin(&c, path);
    int rc = tri_megatron_parse("m.idx", x, xs, "m.bin", bin_size ? bin : NULL, bin_size, lay);
    *msg = tt_capture_end(&c);
    tt_rmrf(dir);
    free(dir);
    return rc;
}

Test(megatron, a_good_index_gives_documents_of_sequences) {
    unsigned char x[512];
    const int32_t lens[3] = {4, 0, 6};
    const int64_t docs[3] = {0, 2, 3}; /* documents: sequences [0, 2) and [2, 3) */
    size_t xs = make_index(x, 8, lens, 3, docs, 3, 0);
    tri_token_layout lay;
    char *msg;
    cr_assert_eq(parse(x, xs, 20, &lay, &msg), 0, "%s", msg);
    cr_assert_eq(lay.dtype, TRI_DT_U16);
    cr_assert_eq(lay.token_bytes, 2);
    cr_assert_eq(lay.n_seqs, 3u);
    cr_assert_eq(lay.n_docs, 2u);
    cr_assert_eq(lay.n_tokens, 10u);
    cr_assert_eq(lay.data_offset, 0u);
    cr_assert_eq(lay.seq_ptr, x + 34 + 12);
    cr_assert_eq(lay.doc_idx, x + 34 + 36);
    free(msg);
}

Test(megatron, bad_indices_are_refused_naming_the_offset) {
    unsigned char x[512];
    const int32_t lens[2] = {3, 2}, neg[2] = {3, -1};
    const int64_t docs[2] = {0, 2}, bad_first[2] = {1, 2}, short_end[2] = {0, 1};
    tri_token_layout lay;
    char *msg;
    size_t xs = make_index(x, 8, lens, 2, docs, 2, 0);
    struct {
        size_t size, bin;
        const char *says;
    } cut[] = {{20, 10, "truncated header: the file holds 20 bytes"},
               {xs - 1, 10, "truncated: the header announces 2 sequences and 2 document indices"},
               {xs, 12, "holds 12 bytes but its index m.idx describes 10"},
               {xs, 8, "runs past the end of m.bin (8 bytes)"}};
    for (size_t k = 0; k < sizeof cut / sizeof cut[0]; k++) {
        cr_assert_eq(parse(x, cut[k].size, cut[k].bin, &lay, &msg), -1, "case %zu", k);
        cr_assert(strstr(msg, cut[k].says) != NULL, "case %zu: %s", k, msg);
        free(msg);
    }
    xs = make_index(x, 7, lens, 2, docs, 2, 0);
    cr_assert_eq(parse(x, xs, 10, &lay, &msg), -1);
    cr_assert(strstr(msg, "m.idx: unsupported dtype code 7 (float32) at byte offset 17") != NULL, "%s", msg);
    free(msg);
    xs = make_index(x, 8, lens, 2, bad_first, 2, 0);
    cr_assert_eq(parse(x, xs, 10, &lay, &msg), -1);
    cr_assert(strstr(msg, "document index 0 is 1 at byte offset 58") != NULL, "%s", msg);
    free(msg);
    xs = make_index(x, 8, lens, 2, short_end, 2, 0);
    cr_assert_eq(parse(x, xs, 10, &lay, &msg), -1);
    cr_assert(strstr(msg, "the last document index is 1 at byte offset 66 but there are 2 sequences") != NULL, "%s",
              msg);
    free(msg);
    xs = make_index(x, 8, neg, 2, docs, 2, 0);
    cr_assert_eq(parse(x, xs, 6, &lay, &msg), -1);
    cr_assert(strstr(msg, "sequence 1 has negative length -1 (byte offset 38)") != NULL, "%s", msg);
    free(msg);
    xs = make_index(x, 8, lens, 2, docs, 2, 2);
    cr_assert_eq(parse(x, xs, 12, &lay, &msg), -1);
    cr_assert(strstr(msg, "sequence 1: pointer 8 at byte offset 50 does not follow the previous sequence") != NULL,
              "%s", msg);
    free(msg);
}

Test(megatron, the_written_index_is_the_layout_megatron_reads) {
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/m.idx", dir);
    const int32_t lens[3] = {5, 0, 7};
    cr_assert_eq(tri_megatron_write_index(path, TRI_DT_I32, lens, 3), 0);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    unsigned char got[512];
    size_t n = fread(got, 1, sizeof got, f);
    fclose(f);
    unsigned char want[512];
    const int64_t docs[4] = {0, 1, 2, 3}; /* one document per sequence */
    size_t wn = make_index(want, 4, lens, 3, docs, 4, 0);
    cr_assert_eq(n, wn);
    cr_assert_eq(memcmp(got, want, wn), 0);
    tri_token_layout lay;
    char *msg;
    cr_assert_eq(parse(got, n, 48, &lay, &msg), 0, "%s", msg);
    cr_assert_eq(lay.n_docs, 3u);
    cr_assert_eq(lay.n_tokens, 12u);
    free(msg);
    tt_rmrf(dir);
    free(dir);
}
