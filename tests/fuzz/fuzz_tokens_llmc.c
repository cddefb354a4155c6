/* llm.c token files (data/llmc.c through tri_dataset_open): the input is the
 * whole file. An accepted file must read back every token, and its vocabulary
 * check must agree with the file's largest id: opening with vocab_size =
 * max + 1 succeeds, with vocab_size = max fails. */
#include <limits.h>

#include "data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

/* Reads every token and checks them against tri_dataset_minmax. */
static void check_tokens(const tri_dataset *ds) {
    int64_t mn = 0, mx = 0;
    tri_dataset_minmax(ds, &mn, &mx);
    FUZZ_ASSERT(mn <= mx);
    /* ids outside int32 (uint32 and int64 files) are only read exactly after
     * an open with vocab_size > 0 (dataset.h) */
    int fits = mn >= INT32_MIN && mx <= INT32_MAX;
    int32_t buf[256];
    for (size_t at = 0; at < ds->n_tokens;) {
        size_t n = ds->n_tokens - at < 256 ? ds->n_tokens - at : 256;
        FUZZ_ASSERT(tri_dataset_read(ds, at, n, buf) == 0);
        for (size_t i = 0; i < n; i++) FUZZ_ASSERT(!fits || (buf[i] >= mn && buf[i] <= mx));
        at += n;
    }
    FUZZ_ASSERT(tri_dataset_read(ds, ds->n_tokens, 0, buf) == 0);
    for (size_t d = 0; d < ds->n_docs && d < 64; d++) {
        size_t start, len;
        FUZZ_ASSERT(tri_dataset_doc(ds, d, &start, &len) == 0);
        FUZZ_ASSERT(start <= ds->n_tokens && len <= ds->n_tokens - start);
    }
    size_t s, l;
    FUZZ_ASSERT(tri_dataset_doc(ds, ds->n_docs, &s, &l) == -1);
}

/* The vocabulary check agrees with the largest id. */
static void check_vocab(const char *path) {
    tri_dataset ds;
    if (tri_dataset_open(&ds, path, 0) != 0) return;
    check_tokens(&ds);
    int64_t mn, mx;
    tri_dataset_minmax(&ds, &mn, &mx);
    size_t n_tokens = ds.n_tokens;
    tri_dataset_close(&ds);
    if (n_tokens > 0 && mn >= 0 && mx < INT_MAX - 1 && mx >= 1) {
        FUZZ_ASSERT(tri_dataset_open(&ds, path, (int)mx + 1) == 0);
        tri_dataset_close(&ds);
        FUZZ_ASSERT(tri_dataset_open(&ds, path, (int)mx) != 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tri_fuzz_quiet();
    check_vocab(tri_fuzz_write(0, "tokens.bin", data, size));
    return 0;
}
