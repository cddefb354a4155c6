/* The encode pipeline of `trident tokenize encode`: text files -> one token
 * file, llm.c or Megatron (the writer of data/dataset.h).
 *
 * Documents are one per input file, or with jsonl one per non-blank line of
 * each file (its "text" string). When the tokenizer has <|endoftext|> it
 * separates them: the llm.c format puts it before every document (as
 * llm.c's own data scripts do), the Megatron format after every document
 * (Megatron's --append-eod), one sequence per document.
 *
 * How the work is shared: plain files under 1 MB are read whole and encoded
 * many at a time, one document per thread; bigger or compressed (.xz) files
 * are read in 16 MB blocks cut at safe pre-token boundaries (data/text.h),
 * each block cut again into up to four parts per thread, and the parts
 * encoded by all threads at once; JSON Lines files in blocks of whole lines,
 * the lines of a block in parallel. Every thread has its own word cache.
 * Pre-tokens never cross a cut and parts are joined in order, so the output
 * is the same, byte for byte, for any thread count.
 *
 * Output goes to .tmp files renamed into place at the end: a run that fails
 * or is stopped leaves no output file, and an existing one as it was. */
#ifndef TRI_DATA_TOK_ENCODE_H
#define TRI_DATA_TOK_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "data/tok/tokenizer.h"

typedef struct tri_encode_cfg {
    const tri_tokenizer *tk; /* read only, shared by the threads               */
    const char *out_prefix;  /* PREFIX: PREFIX.bin (and PREFIX.idx) are written */
    const char *format;      /* "llmc" or "megatron"                            */
    int jsonl;               /* 1: one document per line ("text"), 0: per file  */
    int n_threads;           /* <= 0: omp_get_max_threads()                     */
    int quiet;               /* 1: no progress lines                            */
    uint64_t total_bytes;    /* size of the inputs, for the progress line's
                                percentage and ETA; 0: unknown (.xz)             */
} tri_encode_cfg;

typedef struct tri_encode_stats {
    size_t n_docs, n_tokens; /* written                                         */
    uint64_t bytes;          /* text bytes read                                 */
    double seconds;          /* from the writer's start until the file is in place */
    int n_threads;           /* threads used                                    */
} tri_encode_stats;

/* (The llm.c format puts the BOS, tri_tokenizer_bos(), before every
 * document instead of the EOT when the tokenizer has one: llm.c's Llama 3
 * files do.)
 *
 * Encodes files[0 .. n_files) into the token file cfg names. Says on stderr
 * "trident: note: ..." when the tokenizer has no <|endoftext|>, and, unless
 * quiet, progress lines (base/status.h: redrawn at most 4 times a second
 * on a terminal, a plain line every 5 s otherwise). A stop request
 * (tri_stop_signal(), base/stop.h) ends it between blocks. Returns
 *   TRI_EXIT_OK          the output is in place and *st filled in;
 *   TRI_EXIT_BAD_INPUT   an input unreadable or malformed, or the output
 *                        cannot be created (said in one line);
 *   TRI_EXIT_FAILURE     out of memory or a write failed (said);
 *   tri_exit_signal(S)   stopped by signal S (not said: the caller knows
 *                        what it asked for).
 * Anything but TRI_EXIT_OK leaves nothing written. */
int tri_encode_files(const tri_encode_cfg *cfg, const char *const *files, int n_files, tri_encode_stats *st);

#endif
