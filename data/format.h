/* What the token-file formats share: the token dtypes and format codes,
 * the on-disk constants of llm.c token files and Megatron indexed datasets,
 * unaligned little-endian loads, and the layout a format's parser finds.
 *
 * The bottom of the token-file modules: data/llmc.c and data/megatron.c
 * (one format each) use only this, and data/dataset.c (the reader) and
 * data/tokwriter.c (the writer) use those, so the dependencies go one way:
 * dataset, tokwriter -> llmc, megatron -> format. The formats themselves
 * are described in data/dataset.h. */
#ifndef TRI_DATA_FORMAT_H
#define TRI_DATA_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TRI_DATA_PATH_MAX 1024

/* Token-file formats (tri_dataset.format). */
enum { TRI_DATA_LLMC = 1, TRI_DATA_MEGATRON = 2 };

/* Token dtypes: Megatron's codes, plus one of our own for llm.c's uint32
 * variant (Megatron has no uint32). Float codes 6 and 7 exist in Megatron's
 * table but are not token types: opening such a file is an error. */
enum {
    TRI_DT_U8 = 1,
    TRI_DT_I8 = 2,
    TRI_DT_I16 = 3,
    TRI_DT_I32 = 4,
    TRI_DT_I64 = 5,
    TRI_DT_F64 = 6,
    TRI_DT_F32 = 7,
    TRI_DT_U16 = 8,
    TRI_DT_U32 = 100
};

/* llm.c: a header of 256 little-endian int32 (magic, version, token count,
 * the rest zero), then the tokens. */
#define TRI_LLMC_MAGIC        20240520 /* uint16 tokens (GPT-2)     */
#define TRI_LLMC_VERSION      1
#define TRI_LLMC_MAGIC_U32    20240801 /* uint32 tokens (llm.c's LLaMA-3 files) */
#define TRI_LLMC_VERSION_U32  7
#define TRI_LLMC_HEADER_INTS  256
#define TRI_LLMC_HEADER_BYTES (TRI_LLMC_HEADER_INTS * 4)

/* Megatron .idx: magic, uint64 version, uint8 dtype, uint64 N, uint64 D at
 * the byte offsets below, then the arrays (data/megatron.c). */
#define TRI_MMIDX_MAGIC        "MMIDIDX\0\0"
#define TRI_MMIDX_MAGIC_LEN    9
#define TRI_MMIDX_VERSION      1
#define TRI_MMIDX_OFF_VERSION  9
#define TRI_MMIDX_OFF_DTYPE    17
#define TRI_MMIDX_OFF_N        18
#define TRI_MMIDX_OFF_D        26
#define TRI_MMIDX_HEADER_BYTES 34 /* magic 9 + version 8 + dtype 1 + N 8 + D 8 */

/* Unaligned little-endian loads (the index arrays start at byte 34). The
 * host is little-endian (tri_dataset_open checks). */
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

/* Where the tokens of a checked file lie, as a format's parser finds them
 * (tri_llmc_parse, tri_megatron_parse). The pointers point into the
 * caller's mappings and live as long as they do. */
typedef struct tri_token_layout {
    int dtype;                    /* TRI_DT_*                                  */
    int token_bytes;              /* 1, 2, 4 or 8                              */
    size_t n_tokens;              /* tokens in the concatenated stream         */
    size_t n_docs, n_seqs;        /* llm.c: 1 and 1                            */
    size_t data_offset;           /* byte offset of token 0 in the .bin        */
    const unsigned char *tokens;  /* token 0 (NULL for an empty Megatron .bin) */
    const unsigned char *seq_ptr; /* Megatron int64 pointers [n_seqs], unaligned; llm.c: NULL */
    const unsigned char *doc_idx; /* Megatron int64 indices [n_docs + 1], unaligned; llm.c: NULL */
} tri_token_layout;

/* Bytes per token of a TRI_DT_* code; 0 for codes that are not token types
 * (floats) or unknown. */
int tri_dtype_bytes(int dtype);

/* Largest id a dtype can hold (INT64_MAX for int64); 0 for codes that are
 * not token types. */
int64_t tri_dtype_max(int dtype);

/* "uint16", "int32", ... for a TRI_DT_* code; "unknown" otherwise. */
const char *tri_dtype_name(int dtype);

/* "llm.c" or "megatron" for a TRI_DATA_* format; "unknown" otherwise. */
const char *tri_data_format_name(int format);

#endif
