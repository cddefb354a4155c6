/* Megatron token files (data/megatron.c through tri_dataset_open): the input
 * is a 4-byte little-endian length L, then L bytes of PREFIX.idx, then
 * PREFIX.bin. Opened by prefix and by PREFIX.idx; an accepted pair must read
 * back every token and every document inside the stream, and its vocabulary
 * check must agree with the largest id. */
#include <limits.h>
#include <string.h>

#include "data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

static void check_pair(const char *path) {
    tri_dataset ds;
    if (tri_dataset_open(&ds, path, 0) != 0) return;
    int64_t mn = 0, mx = 0;
    tri_dataset_minmax(&ds, &mn, &mx);
    FUZZ_ASSERT(mn <= mx);
    int fits = mn >= INT32_MIN && mx <= INT32_MAX; /* see fuzz_tokens_llmc.c */
    int32_t buf[256];
    for (size_t d = 0; d < ds.n_docs && d < 256; d++) {
        size_t start, len;
        FUZZ_ASSERT(tri_dataset_doc(&ds, d, &start, &len) == 0);
        FUZZ_ASSERT(start <= ds.n_tokens && len <= ds.n_tokens - start);
        size_t n = len < 256 ? len : 256;
        FUZZ_ASSERT(tri_dataset_read(&ds, start, n, buf) == 0);
        for (size_t i = 0; i < n; i++) FUZZ_ASSERT(!fits || (buf[i] >= mn && buf[i] <= mx));
    }
    if (ds.n_tokens > 0) {
        FUZZ_ASSERT(tri_dataset_read(&ds, ds.n_tokens - 1, 1, buf) == 0);
        FUZZ_ASSERT(!fits || (buf[0] >= mn && buf[0] <= mx));
    }
    size_t n_tokens = ds.n_tokens;
    tri_dataset_close(&ds);
    if (n_tokens > 0 && mn >= 0 && mx >= 1 && mx < INT_MAX - 1) {
        FUZZ_ASSERT(tri_dataset_open(&ds, path, (int)mx + 1) == 0);
        tri_dataset_close(&ds);
        FUZZ_ASSERT(tri_dataset_open(&ds, path, (int)mx) != 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tri_fuzz_quiet();
    if (size < 4) return 0;
    uint32_t idx_len;
    memcpy(&idx_len, data, 4);
    data += 4, size -= 4;
    if (idx_len > size) idx_len = (uint32_t)size;
    const char *idx = tri_fuzz_write(0, "corpus.idx", data, idx_len);
    tri_fuzz_write(1, "corpus.bin", data + idx_len, size - idx_len);
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/corpus", tri_fuzz_dir());
    check_pair(prefix);
    check_pair(idx);
    return 0;
}
