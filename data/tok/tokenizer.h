/* Byte-level BPE tokenizer of two kinds, GPT-2's and Llama 3's (GPT-4's
 * cl100k split): pre-tokenizer, encode, decode, training, and the Hugging
 * Face tokenizer.json / GPT-2 vocab.json + merges.txt file formats.
 * docs/tokenizer.md has the choices in detail.
 *
 * Text is bytes. Every byte sequence, valid UTF-8 or not, encodes, and
 * decode(encode(x)) == x byte for byte. The pre-tokenizer has the semantics
 * of the kind's split pattern (TRI_TOK_PAT_*) written by hand (no regex
 * library): letters and numbers are the Unicode 16.0 general categories L*
 * and N*, \s is the Unicode White_Space property, and a byte that is not
 * part of a well-formed UTF-8 sequence is one character of its own that is
 * neither (it groups with punctuation). Merges never cross pre-token
 * boundaries. The GPT-2 kind encodes the literal string <|endoftext|> as
 * ordinary text (callers insert tri_tokenizer_eot() themselves); the
 * Llama 3 kind finds its added tokens (<|begin_of_text|>, ...) in the text
 * first, as Hugging Face tokenizers does (match_added).
 *
 * Ids of a tokenizer Trident trains: 0..255 are the single bytes in GPT-2's
 * base order (the bytes ! .. ~, the bytes 0xA1 .. 0xAC, 0xAE .. 0xFF, then
 * the remaining 68 bytes in increasing order, so that id 188 + b is byte b
 * for b <= 32), then one id per merge in merge order, and <|endoftext|> last
 * (id vocab_size - 1); the Llama 3 kind ends with <|begin_of_text|> and
 * <|end_of_text|> instead. The trivial byte tokenizer has id == byte value.
 *
 * Errors print one line "trident: FILE: ..." to stderr and return -1; the
 * library never exits. A tri_tokenizer is read-only after load/train, so
 * encode and decode may run concurrently on one tokenizer from many threads.
 */
#ifndef TRI_DATA_TOKENIZER_H
#define TRI_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

/* Flags of one id (tri_tokenizer.flags). */
enum {
    TRI_TOK_PRESENT = 1,   /* the id has a token (every id of a loaded file does) */
    TRI_TOK_ADDED = 2,     /* an "added_tokens" entry: bytes are its raw content */
    TRI_TOK_SPECIAL = 4,   /* ... marked "special": true                          */
    TRI_TOK_NORMALIZED = 8 /* ... marked "normalized": true (matched second)      */
};

/* The split pattern of the pre-tokenizer (tri_tokenizer.pattern). */
enum {
    TRI_TOK_PAT_GPT2 = 0,  /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    TRI_TOK_PAT_LLAMA3 = 1 /* Llama 3 / GPT-4 (cl100k):
                            * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
                            *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+              */
};

typedef struct tri_tokenizer {
    int vocab_size;     /* ids are 0 .. vocab_size - 1                          */
    int eot;            /* id of <|endoftext|>, or -1                           */
    int n_merges;       /* merge ranks are 0 .. n_merges - 1                    */
    int byte_id[256];   /* id of the one-byte token of each byte value          */
    uint8_t *flags;     /* (vocab_size) TRI_TOK_* bits                           */
    size_t *tok_off;    /* (vocab_size + 1) token i is tok_bytes[tok_off[i] .. tok_off[i+1]) */
    uint8_t *tok_bytes; /* (tok_off[vocab_size]) the bytes of every token        */
    int32_t *merges;    /* (n_merges, 3) left id, right id, result id; row = rank */
    /* pair -> rank: open addressing, key (left << 32 | right), empty = UINT64_MAX */
    uint64_t *pair_key; /* (pair_cap) */
    int32_t *pair_rank; /* (pair_cap) */
    size_t pair_cap;    /* power of two, or 0 when there are no merges         */
    int pattern;        /* TRI_TOK_PAT_*                                         */
    /* Hugging Face's ignore_merges: a pre-token that is a vocab entry as a
     * whole is that token, without BPE. Needs the bytes -> id table. */
    int ignore_merges;
    int32_t *word_id; /* (word_cap) open addressing over ids of regular tokens, -1 empty */
    size_t word_cap;  /* power of two, or 0 */
    /* match_added: the added tokens are found in the text before
     * pre-tokenization (leftmost, then longest; those with "normalized":
     * false first, then the others in the gaps), as Hugging Face does. Set
     * for the Llama 3 kind; the GPT-2 kind encodes <|endoftext|> as text. */
    int match_added;
    int split_special;     /* tri_tokenizer_split_special: specials are not matched */
    int n_added;           /* matched added tokens                            */
    int32_t *added_ord;    /* (n_added) their ids: by set, first byte, longest first */
    uint32_t *added_start; /* (2 * 257) set k's tokens with first byte b are
                               added_ord[added_start[257k + b] .. added_start[257k + b + 1]) */
    uint8_t *added_pairs;  /* (2 * 8192) bit (b0 << 8 | b1) of set k: a token of
                              the set may start with bytes b0 b1 */
} tri_tokenizer;

/* Loads a byte-level BPE tokenizer into *tk (overwritten; free it with
 * tri_tokenizer_free). `path` is
 *   - a Hugging Face tokenizer.json: model.type "BPE", model.vocab, and
 *     model.merges as "a b" strings or as ["a", "b"] pairs; pre_tokenizer
 *     null or ByteLevel without add_prefix_space; no normalizer;
 *     "added_tokens" entries keep their raw content as their bytes;
 *   - a GPT-2 style vocab.json (merges.txt beside it, the same name with
 *     "vocab.json" replaced by "merges.txt"),
 *   - a directory holding tokenizer.json, or else vocab.json and merges.txt,
 *   - or a prefix P such that Pvocab.json and Pmerges.txt exist (Megatron's
 *     gpt2-vocab.json / gpt2-merges.txt).
 * Every one of the 256 byte-level characters must be in the vocab. Ids must
 * be 0 .. N-1 without gaps: an id at or above the number of entries in the
 * file is refused, naming it, before anything is sized by it, so memory
 * follows the file's size, not its largest id. An added token may share its
 * id with a vocab entry only when both are the same token (GPT-2's
 * <|endoftext|>); otherwise the clash is an error naming the id. Errors
 * (unreadable file, bad JSON, a merge whose parts or result are not in the
 * vocab, a vocab string outside the byte-level alphabet, ...) name the file
 * and the entry. Returns 0, or -1 with *tk zeroed. */
int tri_tokenizer_load(tri_tokenizer *tk, const char *path);

/* The trivial byte tokenizer: id = byte value, vocab 256, no merges, no
 * <|endoftext|>. Cannot fail. */
void tri_tokenizer_bytes(tri_tokenizer *tk);

/* Frees everything and zeroes *tk. NULL-safe; safe on a zeroed tokenizer. */
void tri_tokenizer_free(tri_tokenizer *tk);

int tri_tokenizer_vocab_size(const tri_tokenizer *tk);
int tri_tokenizer_eot(const tri_tokenizer *tk); /* id of <|endoftext|> (Llama 3: <|end_of_text|>), or -1 */
int tri_tokenizer_bos(const tri_tokenizer *tk); /* id of the added token <|begin_of_text|>, or -1 */

/* split = 1: the special added tokens (TRI_TOK_SPECIAL) in a text are
 * encoded as text, as Hugging Face's split_special_tokens (llm.c's data
 * scripts, tiktoken's encode_ordinary) does; the other added tokens are
 * still found. split = 0: as loaded. No effect on tokenizers that do not
 * match added tokens (the GPT-2 kind). Call before sharing tk between
 * threads. Returns 0, or -1 when out of memory (printed). */
int tri_tokenizer_split_special(tri_tokenizer *tk, int split);

/* Encodes len bytes of text (may contain NUL bytes and invalid UTF-8). Sets
 * *ids to a malloc'd array (caller frees; never NULL on success, even for 0
 * tokens) and returns the token count. On allocation failure prints, sets
 * *ids = NULL and returns SIZE_MAX. Thread-safe (tk is only read). */
size_t tri_tokenizer_encode(const tri_tokenizer *tk, const char *text, size_t len, int32_t **ids);

/* Concatenates the bytes of n tokens. Sets *text to a malloc'd buffer
 * (caller frees; one extra NUL byte after the returned count, not counted)
 * and returns the byte count. The bytes need not be valid UTF-8 when the
 * ids are a partial sequence. An id outside [0, vocab_size) or a hole
 * prints "trident: token id X at position i is not in the vocabulary",
 * sets *text = NULL and returns SIZE_MAX; so does allocation failure. */
size_t tri_tokenizer_decode(const tri_tokenizer *tk, const int32_t *ids, size_t n, char **text);

/* tri_tokenizer_train with a split pattern (TRI_TOK_PAT_*). The Llama 3
 * kind ends with two special added tokens, <|begin_of_text|> and
 * <|end_of_text|> (the EOT), and vocab_size (>= 258) counts both; it
 * matches added tokens in the text (match_added). */
int tri_tokenizer_train_pat(tri_tokenizer *tk, const char *const *files, int n_files, int vocab_size, int n_threads,
                            int pattern);

/* Trains a tokenizer on the concatenated text of the files (".xz" files are
 * read through `xz -dc`) into *tk (overwritten). vocab_size (>= 257) counts
 * the 256 bytes and <|endoftext|>; training stops early, with a smaller
 * vocabulary, when no pair of adjacent tokens is left to merge. Each step
 * merges the adjacent pair with the highest count in the corpus; ties go to
 * the pair whose (left bytes, right bytes) is smallest in lexicographic byte
 * order, so the result depends only on the corpus. A merge whose result
 * equals an existing token's bytes reuses that id. n_threads <= 0 uses
 * omp_get_max_threads(). A stop request (tri_stop_signal(), src/base/stop.h:
 * SIGTERM/SIGINT once a handler is installed) ends it between blocks of text
 * or merges. Returns 0, or -1 (message printed, *tk zeroed). */
int tri_tokenizer_train(tri_tokenizer *tk, const char *const *files, int n_files, int vocab_size, int n_threads);

/* Builds *tk (overwritten) from n merges given as id pairs (pairs: (n, 2)).
 * Ids 0..255 are the bytes in GPT-2's base order; merge k joins the bytes
 * of its two ids into a token that gets the next free id (256, 257, ...),
 * or the id of an existing token with the same bytes. with_eot appends
 * <|endoftext|> as the last id. A pair naming an id that does not exist yet
 * is an error (printed, -1); returns 0 otherwise. */
int tri_tokenizer_from_merges(tri_tokenizer *tk, const int32_t *pairs, int n, int with_eot);

/* Writes a Hugging Face tokenizer.json (model BPE with "a b" merges,
 * ByteLevel pre-tokenizer/decoder/post-processor, <|endoftext|> in
 * added_tokens) through path.tmp renamed into place. Returns 0 or -1. */
int tri_tokenizer_save(const tri_tokenizer *tk, const char *path);

/* ---- pieces for the encode pipeline, BPE training and the tests -------- */

/* Byte b's character in GPT-2's bytes_to_unicode mapping (a code point,
 * 33..255 or 256..323). */
uint32_t tri_tokenizer_byte_char(uint8_t b);

/* End (exclusive) of the pre-token that starts at byte offset pos < len
 * (the GPT-2 pattern). */
size_t tri_tokenizer_pretoken_end(const char *text, size_t len, size_t pos);
/* The same for a pattern TRI_TOK_PAT_*. */
size_t tri_tokenizer_pretoken_end_pat(int pattern, const char *text, size_t len, size_t pos);

/* A safe place to cut text for independent encoding: the smallest p with
 * pos <= p < len such that pre-tokenizing [0, p) and [p, len) separately
 * gives the same pre-tokens as the whole, with either pattern (a
 * non-white-space character ends at p and an ASCII white-space byte starts
 * there; a \r or \n only after a letter or a number). Added tokens never
 * hold such a place (the loader refuses those that would). Returns len if
 * none. */
size_t tri_tokenizer_cut_after(const char *text, size_t len, size_t pos);
/* The largest such p with 0 < p <= pos, or 0 if none. */
size_t tri_tokenizer_cut_before(const char *text, size_t len, size_t pos);

/* A per-thread cache of encoded words, for repeated encode calls. */
typedef struct tri_tokcache tri_tokcache;
tri_tokcache *tri_tokcache_new(void);    /* NULL on allocation failure (printed) */
void tri_tokcache_free(tri_tokcache *c); /* NULL-safe */

/* Appends the ids of text to (*ids, *n, *cap), a malloc'd growable array
 * (start with NULL, 0, 0). cache may be NULL; one cache must not be used by
 * two threads at once. Returns 0, or -1 on allocation failure (printed). */
int tri_tokenizer_encode_append(const tri_tokenizer *tk, tri_tokcache *cache, const char *text, size_t len,
                                int32_t **ids, size_t *n, size_t *cap);

#endif
