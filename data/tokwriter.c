/* Streaming token-file writer (llm.c or Megatron), used by `trident tokenize`.
 * Tokens go to <prefix>.bin.tmp (and <prefix>.idx.tmp) and are renamed into
 * place only when close succeeds. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "data/dataset.h"
#include "data/format.h"
#include "data/llmc.h"
#include "data/megatron.h"

#define TRI_TOKW_BUF 65536 /* tokens encoded per write */

struct tri_tokwriter {
    int format;             /* TRI_DATA_LLMC / TRI_DATA_MEGATRON      */
    int vocab_size;         /* 0: only the dtype range is checked     */
    int dtype, token_bytes; /* stored token type                      */
    char bin_path[TRI_DATA_PATH_MAX + 8], bin_tmp[TRI_DATA_PATH_MAX + 16];
    char idx_path[TRI_DATA_PATH_MAX + 8], idx_tmp[TRI_DATA_PATH_MAX + 16];
    FILE *bin; /* the .bin.tmp being written             */
    size_t n_tokens, n_docs;
    int32_t *lens;
    size_t lens_cap;    /* Megatron: sequence lengths [n_docs]    */
    unsigned char *buf; /* encode buffer: TRI_TOKW_BUF tokens     */
    int failed;         /* poisoned by an error                   */
};

int tri_tokwriter_open(tri_tokwriter **out, const char *out_prefix, const char *format, int vocab_size) {
    TRI_CHECK(out != NULL);
    *out = NULL;
    const char *name = out_prefix && out_prefix[0] ? out_prefix : "(empty prefix)";
    if (!out_prefix || !out_prefix[0] || strlen(out_prefix) + 5 > TRI_DATA_PATH_MAX) {
        tri_error("%s: output prefix must be 1 to %d bytes", name, TRI_DATA_PATH_MAX - 5);
        return -1;
    }
    int fmt;
    if (format && strcmp(format, "llmc") == 0) {
        fmt = TRI_DATA_LLMC;
    } else if (format && strcmp(format, "megatron") == 0) {
        fmt = TRI_DATA_MEGATRON;
    } else {
        tri_error("%s: unknown token-file format \"%s\" (expected llmc or megatron)", name, format ? format : "(null)");
        return -1;
    }
    if (vocab_size < 0) {
        tri_error("%s: vocab_size %d is negative", name, vocab_size);
        return -1;
    }
    tri_tokwriter *w = calloc(1, sizeof *w);
    if (!w) {
        tri_error("%s: out of memory", name);
        return -1;
    }
    w->format = fmt;
    w->vocab_size = vocab_size;
    if (fmt == TRI_DATA_LLMC)
        w->dtype = vocab_size <= 65536 ? TRI_DT_U16 : TRI_DT_U32;
    else
        w->dtype = vocab_size > 0 && vocab_size < 65500 ? TRI_DT_U16 : TRI_DT_I32;
    w->token_bytes = tri_dtype_bytes(w->dtype);
    snprintf(w->bin_path, sizeof w->bin_path, "%s.bin", out_prefix);
    snprintf(w->bin_tmp, sizeof w->bin_tmp, "%s.bin.tmp", out_prefix);
    if (fmt == TRI_DATA_MEGATRON) {
        snprintf(w->idx_path, sizeof w->idx_path, "%s.idx", out_prefix);
        snprintf(w->idx_tmp, sizeof w->idx_tmp, "%s.idx.tmp", out_prefix);
    }
    w->buf = malloc((size_t)TRI_TOKW_BUF * 4);
    if (!w->buf) {
        tri_error("%s: out of memory", name);
        free(w);
        return -1;
    }
    w->bin = fopen(w->bin_tmp, "wb");
    if (!w->bin) {
        tri_error("%s: cannot create: %s", w->bin_tmp, strerror(errno));
        free(w->buf);
        free(w);
        return -1;
    }
    if (fmt == TRI_DATA_LLMC) {
        /* Placeholder header; close writes the real one. */
        static const unsigned char zeros[TRI_LLMC_HEADER_BYTES];
        if (fwrite(zeros, 1, sizeof zeros, w->bin) != sizeof zeros) {
            tri_error("%s: cannot write: %s", w->bin_tmp, strerror(errno));
            w->failed = 1;
            tri_tokwriter_close(w);
            return -1;
        }
    }
    *out = w;
    return 0;
}

/* Encodes tokens[0..n) (n <= TRI_TOKW_BUF) into w->buf; -1 on an id the
 * vocabulary or the dtype cannot hold. */
static int encode(tri_tokwriter *w, const int32_t *tokens, size_t n, size_t first) {
    int64_t limit = w->vocab_size > 0 ? w->vocab_size : tri_dtype_max(w->dtype) + 1;
    if (limit > tri_dtype_max(w->dtype) + 1) limit = tri_dtype_max(w->dtype) + 1;
    for (size_t i = 0; i < n; i++) {
        int32_t t = tokens[i];
        if (t < 0 || (int64_t)t >= limit) {
            tri_error("%s: document %zu, token %zu: id %d is outside [0, %lld)", w->bin_path, w->n_docs, first + i,
                      (int)t, (long long)limit);
            return -1;
        }
        if (w->token_bytes == 2) {
            uint16_t v = (uint16_t)t;
            memcpy(w->buf + 2 * i, &v, 2);
        } else {
            memcpy(w->buf + 4 * i, &t, 4); /* int32 or uint32: same bits for t >= 0 */
        }
    }
    return 0;
}

int tri_tokwriter_add_doc(tri_tokwriter *w, const int32_t *tokens, size_t n) {
    TRI_CHECK(w != NULL && (tokens != NULL || n == 0));
    if (w->failed) return -1;
    if (w->format == TRI_DATA_LLMC && n > (size_t)INT32_MAX - w->n_tokens) {
        tri_error("%s: document %zu: more than %d tokens in total, the limit of "
                  "an llm.c token file (use the megatron format)",
                  w->bin_path, w->n_docs, INT32_MAX);
        w->failed = 1;
        return -1;
    }
    if (w->format == TRI_DATA_MEGATRON) {
        if (n > (size_t)INT32_MAX) {
            tri_error("%s: document %zu: %zu tokens, more than a Megatron "
                      "sequence can hold (%d)",
                      w->bin_path, w->n_docs, n, INT32_MAX);
            w->failed = 1;
            return -1;
        }
        if (w->n_docs == w->lens_cap) {
            size_t cap = w->lens_cap ? 2 * w->lens_cap : 1024;
            int32_t *p = realloc(w->lens, cap * sizeof *p);
            if (!p) {
                tri_error("%s: out of memory for %zu document lengths", w->bin_path, cap);
                w->failed = 1;
                return -1;
            }
            w->lens = p;
            w->lens_cap = cap;
        }
    }
    for (size_t off = 0; off < n; off += TRI_TOKW_BUF) {
        size_t m = n - off < TRI_TOKW_BUF ? n - off : TRI_TOKW_BUF;
        if (encode(w, tokens + off, m, off) != 0) {
            w->failed = 1;
            return -1;
        }
        size_t bytes = m * (size_t)w->token_bytes;
        if (fwrite(w->buf, 1, bytes, w->bin) != bytes) {
            tri_error("%s: cannot write: %s", w->bin_tmp, strerror(errno));
            w->failed = 1;
            return -1;
        }
    }
    if (w->format == TRI_DATA_MEGATRON) w->lens[w->n_docs] = (int32_t)n;
    w->n_tokens += n;
    w->n_docs++;
    return 0;
}

/* Flushes, fsyncs and closes w->bin; -1 after printing. */
static int finish_bin(tri_tokwriter *w) {
    int ok = fflush(w->bin) == 0 && fsync(fileno(w->bin)) == 0;
    int saved = errno;
    if (fclose(w->bin) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    w->bin = NULL;
    if (!ok) {
        tri_error("%s: cannot write: %s", w->bin_tmp, strerror(saved));
        return -1;
    }
    return 0;
}

int tri_tokwriter_close(tri_tokwriter *w) {
    if (!w) return 0;
    int rc = w->failed ? -1 : 0;
    if (rc == 0 && w->format == TRI_DATA_LLMC) rc = tri_llmc_write_header(w->bin, w->bin_tmp, w->dtype, w->n_tokens);
    if (w->bin) {
        if (rc == 0)
            rc = finish_bin(w);
        else
            fclose(w->bin); /* discarding anyway */
        w->bin = NULL;
    }
    if (rc == 0 && w->format == TRI_DATA_MEGATRON)
        rc = tri_megatron_write_index(w->idx_tmp, w->dtype, w->lens, w->n_docs);
    if (rc == 0 && rename(w->bin_tmp, w->bin_path) != 0) {
        tri_error("%s: cannot rename %s into place: %s", w->bin_path, w->bin_tmp, strerror(errno));
        rc = -1;
    }
    if (rc == 0 && w->format == TRI_DATA_MEGATRON && rename(w->idx_tmp, w->idx_path) != 0) {
        tri_error("%s: cannot rename %s into place: %s", w->idx_path, w->idx_tmp, strerror(errno));
        unlink(w->bin_path); /* a .bin without its index would be half a dataset */
        rc = -1;
    }
    if (rc != 0) {
        unlink(w->bin_tmp);
        if (w->format == TRI_DATA_MEGATRON) unlink(w->idx_tmp);
    }
    free(w->lens);
    free(w->buf);
    free(w);
    return rc;
}

void tri_tokwriter_abort(tri_tokwriter *w) {
    if (!w) return;
    w->failed = 1; /* close then removes the temporary files instead of renaming */
    tri_tokwriter_close(w);
}

size_t tri_tokwriter_tokens(const tri_tokwriter *w) { return w ? w->n_tokens : 0; }

size_t tri_tokwriter_docs(const tri_tokwriter *w) { return w ? w->n_docs : 0; }
