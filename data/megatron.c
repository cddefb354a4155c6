/* Megatron-LM indexed datasets (PREFIX.bin + PREFIX.idx, "MMIDIDX").
 *
 * .idx, little-endian, no padding:
 *   byte 0   "MMIDIDX\0\0"                       (9 bytes)
 *   byte 9   uint64 version = 1
 *   byte 17  uint8 dtype code (TRI_DT_*, Megatron's numbering)
 *   byte 18  uint64 N, sequences
 *   byte 26  uint64 D, document indices (documents + 1)
 *   byte 34  int32 lengths[N] (tokens), int64 pointers[N] (bytes into .bin),
 *            int64 document indices[D] (0, then the end of each document)
 *   (multimodal files append int8 modes[N]; tolerated, ignored)
 * .bin: the tokens of the sequences, back to back, no header.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/dataset_internal.h"

int tri_megatron_parse(tri_dataset *ds) {
    const char *fi = ds->idx_path;
    const unsigned char *x = ds->idx_map;
    if (ds->idx_size < TRI_MMIDX_HEADER_BYTES) {
        tri_data_err(fi,
                     "truncated header: the file holds %zu bytes, a Megatron index "
                     "header has %d",
                     ds->idx_size, TRI_MMIDX_HEADER_BYTES);
        return -1;
    }
    if (memcmp(x, TRI_MMIDX_MAGIC, TRI_MMIDX_MAGIC_LEN) != 0) {
        tri_data_err(fi, "bad magic at byte offset 0 (a Megatron index starts with "
                         "\"MMIDIDX\\0\\0\")");
        return -1;
    }
    uint64_t version = tri_ld_u64(x + 9);
    if (version != TRI_MMIDX_VERSION) {
        tri_data_err(fi, "unsupported version %llu at byte offset 9 (expected %d)", (unsigned long long)version,
                     TRI_MMIDX_VERSION);
        return -1;
    }
    int code = x[17];
    int tb = tri_dtype_bytes(code);
    if (tb == 0) {
        tri_data_err(fi,
                     "unsupported dtype code %d (%s) at byte offset 17: tokens must be "
                     "an integer type (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, "
                     "8 uint16)",
                     code, tri_dtype_name(code));
        return -1;
    }
    ds->dtype = code;
    ds->token_bytes = tb;
    uint64_t n = tri_ld_u64(x + 18), d = tri_ld_u64(x + 26);
    /* N <= size/12 and D <= size/8 keep the byte count below from overflowing. */
    uint64_t avail = ds->idx_size - TRI_MMIDX_HEADER_BYTES;
    if (n > avail / 12 || d > avail / 8 || 12 * n + 8 * d > avail) {
        tri_data_err(fi,
                     "truncated: the header announces %llu sequences and %llu document "
                     "indices but the file holds only %zu bytes",
                     (unsigned long long)n, (unsigned long long)d, ds->idx_size);
        return -1;
    }
    const unsigned char *lens = x + TRI_MMIDX_HEADER_BYTES;
    const unsigned char *ptrs = lens + 4 * n;
    const unsigned char *docs = ptrs + 8 * n;
    size_t docs_off = (size_t)(docs - x);

    /* Document indices: 0, non-decreasing, ending at N. */
    if (d == 0) {
        tri_data_err(fi,
                     "the document index is empty (it must start with 0 and end with "
                     "the sequence count %llu)",
                     (unsigned long long)n);
        return -1;
    }
    int64_t prev = 0;
    for (uint64_t j = 0; j < d; j++) {
        int64_t v = tri_ld_i64(docs + 8 * j);
        if ((j == 0 && v != 0) || v < prev || (uint64_t)v > n) {
            tri_data_err(fi,
                         "document index %llu is %lld at byte offset %zu (expected "
                         "%s, at most the sequence count %llu)",
                         (unsigned long long)j, (long long)v, docs_off + 8 * (size_t)j,
                         j == 0 ? "0" : "non-decreasing values", (unsigned long long)n);
            return -1;
        }
        prev = v;
    }
    if ((uint64_t)prev != n) {
        tri_data_err(fi,
                     "the last document index is %lld at byte offset %zu but there are "
                     "%llu sequences",
                     (long long)prev, docs_off + 8 * (size_t)(d - 1), (unsigned long long)n);
        return -1;
    }

    /* Sequences: lengths >= 0, pointers contiguous from 0, inside the .bin. */
    uint64_t expect = 0;
    for (uint64_t i = 0; i < n; i++) {
        int32_t len = tri_ld_i32(lens + 4 * i);
        int64_t ptr = tri_ld_i64(ptrs + 8 * i);
        if (len < 0) {
            tri_data_err(fi, "sequence %llu has negative length %d (byte offset %zu)", (unsigned long long)i, (int)len,
                         (size_t)TRI_MMIDX_HEADER_BYTES + 4 * (size_t)i);
            return -1;
        }
        uint64_t bytes = (uint64_t)len * (uint64_t)tb;
        if (ptr < 0 || (uint64_t)ptr > ds->bin_size || bytes > ds->bin_size - (uint64_t)ptr) {
            tri_data_err(fi,
                         "sequence %llu (pointer %lld at byte offset %zu, %d tokens) runs "
                         "past the end of %s (%zu bytes)",
                         (unsigned long long)i, (long long)ptr, (size_t)(ptrs - x) + 8 * (size_t)i, (int)len,
                         ds->bin_path, ds->bin_size);
            return -1;
        }
        if ((uint64_t)ptr != expect) {
            tri_data_err(fi,
                         "sequence %llu: pointer %lld at byte offset %zu does not follow "
                         "the previous sequence (expected %llu); only contiguous .bin "
                         "files are supported",
                         (unsigned long long)i, (long long)ptr, (size_t)(ptrs - x) + 8 * (size_t)i,
                         (unsigned long long)expect);
            return -1;
        }
        expect += bytes;
    }
    if (expect != ds->bin_size) {
        tri_data_err(ds->bin_path,
                     "holds %zu bytes but its index %s describes %llu: the "
                     "two files do not belong together",
                     ds->bin_size, fi, (unsigned long long)expect);
        return -1;
    }
    ds->n_seqs = (size_t)n;
    ds->n_docs = (size_t)(d - 1);
    ds->n_tokens = (size_t)(expect / (uint64_t)tb);
    ds->data_offset = 0;
    ds->tokens = ds->bin_map;
    ds->seq_ptr = ptrs;
    ds->doc_idx = docs;
    return 0;
}

/* Buffered little-endian writes to f; *ok becomes 0 on the first error. */
static void put(FILE *f, const void *p, size_t n, int *ok) {
    if (*ok && n > 0 && fwrite(p, 1, n, f) != n) *ok = 0;
}

int tri_megatron_write_index(struct tri_tokwriter *w) {
    FILE *f = fopen(w->idx_tmp, "wb");
    if (!f) {
        tri_data_err(w->idx_tmp, "cannot create: %s", strerror(errno));
        return -1;
    }
    int ok = 1;
    uint64_t n = w->n_docs, d = w->n_docs + 1, version = TRI_MMIDX_VERSION;
    unsigned char code = (unsigned char)w->dtype;
    put(f, TRI_MMIDX_MAGIC, TRI_MMIDX_MAGIC_LEN, &ok);
    put(f, &version, 8, &ok);
    put(f, &code, 1, &ok);
    put(f, &n, 8, &ok);
    put(f, &d, 8, &ok);
    put(f, w->lens, 4 * (size_t)n, &ok); /* int32 lengths [N]   */
    int64_t chunk[1024];
    int64_t ptr = 0;
    for (size_t i = 0; i < n;) { /* int64 pointers [N]  */
        size_t m = 0;
        for (; m < 1024 && i < n; m++, i++) {
            chunk[m] = ptr;
            ptr += (int64_t)w->lens[i] * w->token_bytes;
        }
        put(f, chunk, 8 * m, &ok);
    }
    for (size_t i = 0; i < d;) { /* int64 doc idx [N+1] */
        size_t m = 0;
        for (; m < 1024 && i < d; m++, i++) chunk[m] = (int64_t)i;
        put(f, chunk, 8 * m, &ok);
    }
    if (ok && fflush(f) != 0) ok = 0;
    if (ok && fsync(fileno(f)) != 0) ok = 0;
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (!ok) {
        tri_data_err(w->idx_tmp, "cannot write: %s", strerror(saved));
        return -1;
    }
    return 0;
}
