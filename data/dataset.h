/* Token files: one read-only, memory-mapped view over the two on-disk
 * formats Trident reads, and a streaming writer for both.
 *
 *   llm.c     one file: a header of 256 little-endian int32 (magic 20240520,
 *             version 1, token count at [2]) followed by uint16 tokens.
 *             The uint32 variant llm.c uses for LLaMA-3 (magic 20240801,
 *             version 7) is read and written too. One document per file.
 *   Megatron  a pair PREFIX.bin (raw tokens, no header) + PREFIX.idx
 *             ("MMIDIDX\0\0", uint64 version 1, uint8 dtype code, uint64
 *             sequence count N, uint64 document-index count D, int32
 *             lengths[N], int64 byte pointers[N], int64 document
 *             indices[D] starting at 0 and ending at N). Documents are the
 *             D - 1 ranges of sequences between consecutive indices.
 *
 * Either way the dataset is one concatenated token stream of n_tokens ids
 * (Megatron: the sequences in index order) plus document boundaries.
 * The format is found from the file contents (magic numbers), never from
 * the name; see tri_dataset_open for which paths are accepted.
 *
 * Errors in library functions print one line "trident: FILE: ..." to stderr
 * naming the file at fault and the offset/number involved, and return -1;
 * they never exit. Little-endian hosts only (checked at open).
 */
#ifndef TRI_DATA_DATASET_H
#define TRI_DATA_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "data/format.h" /* TRI_DATA_*, TRI_DT_*, TRI_DATA_PATH_MAX, tri_dtype_name */

typedef struct tri_dataset {
    /* public, read-only after open */
    char path[TRI_DATA_PATH_MAX];     /* the path as given to open            */
    char bin_path[TRI_DATA_PATH_MAX]; /* the file that holds the tokens       */
    char idx_path[TRI_DATA_PATH_MAX]; /* Megatron index; "" for llm.c         */
    int format;                       /* TRI_DATA_LLMC or TRI_DATA_MEGATRON                  */
    int dtype;                        /* TRI_DT_*                                            */
    int token_bytes;                  /* bytes per stored token: 1, 2, 4 or 8                */
    size_t n_tokens;                  /* tokens in the concatenated stream                   */
    size_t n_docs;                    /* documents (llm.c: 1)                                */
    size_t n_seqs;                    /* Megatron sequences (llm.c: 1)                       */
    size_t data_offset;               /* byte offset of token 0 in bin_path (llm.c: 1024)    */
    /* Fingerprints of bin_path and idx_path (0 for llm.c) as opened: a hash
     * of the file's size, its first and last 64 KiB and 64 blocks of 4 KiB
     * spread evenly between them (about 400 KiB read whatever the size).
     * It notices truncation, appending, re-tokenising and most in-place
     * edits, not every changed byte; the trainer records it in state.json
     * so that --resume can tell a changed file (docs/data.md). */
    uint64_t bin_fingerprint, idx_fingerprint;
    /* private */
    const unsigned char *tokens; /* token 0 inside the .bin mapping         */
    void *bin_map;
    size_t bin_size; /* whole-file mappings (NULL if empty); */
    void *idx_map;
    size_t idx_size;              /* the sizes may be read: bytes at open */
    const unsigned char *seq_ptr; /* Megatron int64 pointers [n_seqs], unaligned */
    const unsigned char *doc_idx; /* Megatron int64 indices [n_docs + 1], unaligned */
} tri_dataset;

/* Opens a token file read-only (memory-mapped). `path` may name
 *   - an llm.c token file,
 *   - a Megatron PREFIX.idx or PREFIX.bin (the other file is found beside it),
 *   - or the common PREFIX of a Megatron pair (neither PREFIX itself exists).
 * Validates the header, sizes, the index arrays (document indices ordered,
 * from 0 to N; sequence pointers contiguous from 0, as Megatron writes them;
 * nothing past the end of either file). When vocab_size > 0 it also rejects
 * a dtype that cannot hold ids up to vocab_size - 1 and scans every token
 * (in parallel) for the first id outside [0, vocab_size), reporting its
 * value, token index and byte offset in the file. vocab_size == 0 skips both.
 * Returns 0, or -1 (message printed, *ds zeroed). */
int tri_dataset_open(tri_dataset *ds, const char *path, int vocab_size);

/* Unmaps and zeroes *ds. NULL-safe; safe on a zeroed or closed dataset. */
void tri_dataset_close(tri_dataset *ds);

/* Tokens [start, start + n) of the concatenated stream, widened to int32,
 * into out (n entries, overwritten). start + n must be <= n_tokens (checked;
 * a violation is a programming error and aborts). Ids that do not fit in
 * int32 (int64 files) are only safe after an open with vocab_size > 0.
 * Returns 0, or -1 after printing "trident: FILE: truncated under the running
 * job ..." (with its size then and now) when the file shrank below the
 * tokens asked for since it was mapped: the read that would have raised
 * SIGBUS is caught (a SIGBUS handler, installed on first use, jumps out of
 * the copy; it costs no system call per read). Safe from several threads.
 * Reads of the open-time checks (vocabulary scan, tri_dataset_minmax) are not
 * guarded. */
int tri_dataset_read(const tri_dataset *ds, size_t start, size_t n, int32_t *out);

/* Document `doc` (0-based) as a token range [*start, *start + *len) of the
 * stream. Returns 0, or -1 without printing when doc >= n_docs. */
int tri_dataset_doc(const tri_dataset *ds, size_t doc, size_t *start, size_t *len);

/* Smallest and largest token id in the file (a parallel scan; both 0 for an
 * empty file). Either pointer may be NULL. */
void tri_dataset_minmax(const tri_dataset *ds, int64_t *min_id, int64_t *max_id);

/* ---- streaming writer ------------------------------------------------ */

typedef struct tri_tokwriter tri_tokwriter; /* opaque */

/* Starts writing a token file. format "llmc": <out_prefix>.bin, uint16
 * tokens (uint32, llm.c's LLaMA-3 variant, when vocab_size > 65536), the
 * caller's documents simply concatenated (the caller adds any separator
 * such as <|endoftext|>). format "megatron": <out_prefix>.bin and
 * <out_prefix>.idx, uint16 tokens when vocab_size < 65500 else int32, one
 * sequence per document. vocab_size > 0 is the vocabulary every token must
 * lie in; 0 means "check only that tokens fit the dtype" (llm.c: uint16;
 * Megatron: int32). Output goes to <name>.tmp files that close renames into
 * place, so a failed or interrupted run leaves no half-written final file.
 * Returns 0 and sets *w, or -1 (message printed, *w = NULL). */
int tri_tokwriter_open(tri_tokwriter **w, const char *out_prefix, const char *format, int vocab_size);

/* Appends one document of n tokens (n may be 0). Returns 0, or -1 after
 * printing (token out of range, too many tokens for the format, I/O error);
 * after a failure the writer is poisoned: later adds return -1 and close
 * discards the output. */
int tri_tokwriter_add_doc(tri_tokwriter *w, const int32_t *tokens, size_t n);

/* Finalises headers/index, fsyncs, renames the .tmp files into place and
 * frees w. NULL-safe (returns 0). Returns -1 on any earlier or current
 * failure, in which case the temporary files are removed and no final file
 * is created or replaced. */
int tri_tokwriter_close(tri_tokwriter *w);
/* Discards everything written so far (the temporary files are removed, an
 * existing output is left as it was) and frees w. NULL-safe. */
void tri_tokwriter_abort(tri_tokwriter *w);

/* Tokens and documents written so far (for progress messages). */
size_t tri_tokwriter_tokens(const tri_tokwriter *w);
size_t tri_tokwriter_docs(const tri_tokwriter *w);

#endif
