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
#include "data/megatron.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"

int tri_megatron_parse(const char *idx_path, const unsigned char *idx, size_t idx_size, const char *bin_path,
                       const unsigned char *bin, size_t bin_size, tri_token_layout *out) {
    const char *fi = idx_path;
    const unsigned char *x = idx;
    memset(out, 0, sizeof *out);
    if (idx_size < TRI_MMIDX_HEADER_BYTES) {
        tri_error("%s: truncated header: the file holds %zu bytes, a Megatron index "
                  "header has %d",
                  fi, idx_size, TRI_MMIDX_HEADER_BYTES);
        return -1;
    }
    if (memcmp(x, TRI_MMIDX_MAGIC, TRI_MMIDX_MAGIC_LEN) != 0) {
        tri_error("%s: bad magic at byte offset 0 (a Megatron index starts with "
                  "\"MMIDIDX\\0\\0\")",
                  fi);
        return -1;
    }
    uint64_t version = tri_ld_u64(x + TRI_MMIDX_OFF_VERSION);
    if (version != TRI_MMIDX_VERSION) {
        tri_error("%s: unsupported version %llu at byte offset 9 (expected %d)", fi, (unsigned long long)version,
                  TRI_MMIDX_VERSION);
        return -1;
    }
    int code = x[TRI_MMIDX_OFF_DTYPE];
    int tb = tri_dtype_bytes(code);
    if (tb == 0) {
        tri_error("%s: unsupported dtype code %d (%s) at byte offset 17: tokens must be "
                  "an integer type (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, "
                  "8 uint16)",
                  fi, code, tri_dtype_name(code));
        return -1;
    }
    out->dtype = code;
    out->token_bytes = tb;
    uint64_t n = tri_ld_u64(x + TRI_MMIDX_OFF_N), d = tri_ld_u64(x + TRI_MMIDX_OFF_D);
    /* N <= size/12 and D <= size/8 keep the byte count below from overflowing. */
    uint64_t avail = idx_size - TRI_MMIDX_HEADER_BYTES;
    if (n > avail / 12 || d > avail / 8 || 12 * n + 8 * d > avail) {
        tri_error("%s: truncated: the header announces %llu sequences and %llu document "
                  "indices but the file holds only %zu bytes",
                  fi, (unsigned long long)n, (unsigned long long)d, idx_size);
        return -1;
    }
    const unsigned char *lens = x + TRI_MMIDX_HEADER_BYTES;
    const unsigned char *ptrs = lens + 4 * n;
    const unsigned char *docs = ptrs + 8 * n;
    size_t docs_off = (size_t)(docs - x);

    /* Document indices: 0, non-decreasing, ending at N. */
    if (d == 0) {
        tri_error("%s: the document index is empty (it must start with 0 and end with "
                  "the sequence count %llu)",
                  fi, (unsigned long long)n);
        return -1;
    }
    int64_t prev = 0;
    for (uint64_t j = 0; j < d; j++) {
        int64_t v = tri_ld_i64(docs + 8 * j);
        if ((j == 0 && v != 0) || v < prev || (uint64_t)v > n) {
            tri_error("%s: document index %llu is %lld at byte offset %zu (expected "
                      "%s, at most the sequence count %llu)",
                      fi, (unsigned long long)j, (long long)v, docs_off + 8 * (size_t)j,
                      j == 0 ? "0" : "non-decreasing values", (unsigned long long)n);
            return -1;
        }
        prev = v;
    }
    if ((uint64_t)prev != n) {
        tri_error("%s: the last document index is %lld at byte offset %zu but there are "
                  "%llu sequences",
                  fi, (long long)prev, docs_off + 8 * (size_t)(d - 1), (unsigned long long)n);
        return -1;
    }

    /* Sequences: lengths >= 0, pointers contiguous from 0, inside the .bin. */
    uint64_t expect = 0;
    for (uint64_t i = 0; i < n; i++) {
        int32_t len = tri_ld_i32(lens + 4 * i);
        int64_t ptr = tri_ld_i64(ptrs + 8 * i);
        if (len < 0) {
            tri_error("%s: sequence %llu has negative length %d (byte offset %zu)", fi, (unsigned long long)i, (int)len,
                      (size_t)TRI_MMIDX_HEADER_BYTES + 4 * (size_t)i);
            return -1;
        }
        uint64_t bytes = (uint64_t)len * (uint64_t)tb;
        if (ptr < 0 || (uint64_t)ptr > bin_size || bytes > bin_size - (uint64_t)ptr) {
            tri_error("%s: sequence %llu (pointer %lld at byte offset %zu, %d tokens) runs "
                      "past the end of %s (%zu bytes)",
                      fi, (unsigned long long)i, (long long)ptr, (size_t)(ptrs - x) + 8 * (size_t)i, (int)len, bin_path,
                      bin_size);
            return -1;
        }
        if ((uint64_t)ptr != expect) {
            tri_error("%s: sequence %llu: pointer %lld at byte offset %zu does not follow "
                      "the previous sequence (expected %llu); only contiguous .bin "
                      "files are supported",
                      fi, (unsigned long long)i, (long long)ptr, (size_t)(ptrs - x) + 8 * (size_t)i,
                      (unsigned long long)expect);
            return -1;
        }
        expect += bytes;
    }
    if (expect != bin_size) {
        tri_error("%s: holds %zu bytes but its index %s describes %llu: the "
                  "two files do not belong together",
                  bin_path, bin_size, fi, (unsigned long long)expect);
        return -1;
    }
    out->n_seqs = (size_t)n;
    out->n_docs = (size_t)(d - 1);
    out->n_tokens = (size_t)(expect / (uint64_t)tb);
    out->data_offset = 0;
    out->tokens = bin;
    out->seq_ptr = ptrs;
    out->doc_idx = docs;
    return 0;
}

/* Buffered little-endian writes to f; *ok becomes 0 on the first error. */
static void put(FILE *f, const void *p, size_t n, int *ok) {
    if (*ok && n > 0 && fwrite(p, 1, n, f) != n) *ok = 0;
}

int tri_megatron_write_index(const char *path, int dtype, const int32_t *lens, size_t n_seqs) {
    int token_bytes = tri_dtype_bytes(dtype);
    TRI_CHECK(token_bytes > 0);
    FILE *f = fopen(path, "wb");
    if (!f) {
        tri_error("%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    int ok = 1;
    uint64_t n = n_seqs, d = n_seqs + 1, version = TRI_MMIDX_VERSION;
    unsigned char code = (unsigned char)dtype;
    put(f, TRI_MMIDX_MAGIC, TRI_MMIDX_MAGIC_LEN, &ok);
    put(f, &version, 8, &ok);
    put(f, &code, 1, &ok);
    put(f, &n, 8, &ok);
    put(f, &d, 8, &ok);
    put(f, lens, 4 * (size_t)n, &ok); /* int32 lengths [N]   */
    int64_t chunk[1024];
    int64_t ptr = 0;
    for (size_t i = 0; i < n;) { /* int64 pointers [N]  */
        size_t m = 0;
        for (; m < 1024 && i < n; m++, i++) {
            chunk[m] = ptr;
            ptr += (int64_t)lens[i] * token_bytes;
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
        tri_error("%s: cannot write: %s", path, strerror(saved));
        return -1;
    }
    return 0;
}
