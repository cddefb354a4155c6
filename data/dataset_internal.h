/* Shared by data/dataset.c, data/llmc.c, data/megatron.c and
 * data/tokwriter.c; not part of the public interface. */
#ifndef TRI_DATA_DATASET_INTERNAL_H
#define TRI_DATA_DATASET_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "base/err.h"

#define TRI_LLMC_MAGIC         20240520
#define TRI_LLMC_VERSION       1
#define TRI_LLMC_MAGIC_U32     20240801 /* llm.c's LLaMA-3 token files */
#define TRI_LLMC_VERSION_U32   7
#define TRI_LLMC_HEADER_INTS   256
#define TRI_LLMC_HEADER_BYTES  (TRI_LLMC_HEADER_INTS * 4)

#define TRI_MMIDX_MAGIC        "MMIDIDX\0\0"
#define TRI_MMIDX_MAGIC_LEN    9
#define TRI_MMIDX_VERSION      1
#define TRI_MMIDX_HEADER_BYTES 34 /* magic 9 + version 8 + dtype 1 + N 8 + D 8 */

/* Prints "trident: FILE: <message>\n" to stderr. */
void tri_data_err(const char *file, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Unaligned little-endian loads (the index arrays start at byte 34). */
static inline int32_t tri_ld_i32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline int64_t tri_ld_i64(const unsigned char *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline uint64_t tri_ld_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Bytes per token of a TRI_DT_* code; 0 for codes that are not token types
 * (floats) or unknown. */
int tri_dtype_bytes(int dtype);

/* Largest id a dtype can hold (INT64_MAX for int64). */
int64_t tri_dtype_max(int dtype);

/* Format-specific parts of tri_dataset_open: ds->path/bin_path/idx_path and
 * the mappings are set; they fill the rest or print and return -1 (the
 * caller closes). */
int tri_llmc_parse(tri_dataset *ds);
int tri_megatron_parse(tri_dataset *ds);

/* Writer state, shared by the format-specific writer halves. */
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
#define TRI_TOKW_BUF 65536

/* llm.c: writes the final header into the open .bin.tmp (at offset 0). */
int tri_llmc_write_header(struct tri_tokwriter *w);
/* Megatron: writes <prefix>.idx.tmp from w->lens (fsynced, closed). */
int tri_megatron_write_index(struct tri_tokwriter *w);

#endif
