/* What the pieces of the tokenizer (data/tok/unicode.c, bpe.c, vocab.c)
 * share; not part of the interface (that is data/tok/tokenizer.h). */
#ifndef TRI_DATA_TOK_INTERNAL_H
#define TRI_DATA_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "data/tok/tokenizer.h"

/* The text of the end-of-text token. */
#define TRI_TOK_EOT_TEXT "<|endoftext|>"

/* A code point that stands for a byte outside any well-formed UTF-8
 * sequence (one character of its own, of class "other"). */
#define TRI_TOK_INVALID_CP UINT32_MAX

/* ---- data/tok/unicode.c ---------------------------------------------------- */

/* The byte whose id is i (0..255) in GPT-2's base order
 * (data/tok/tokenizer.h: the ids of a tokenizer Trident trains). */
uint8_t tri_tok_base_byte(int i);

/* Decodes a byte-level string (n bytes of UTF-8 characters of GPT-2's
 * bytes_to_unicode) into out (room for n bytes). Returns the byte count,
 * or -1 if a character is not one of the 256. */
long tri_tok_bytelevel_decode(const char *str, size_t n, uint8_t *out);

/* Writes code point cp (< 0x110000) as UTF-8 into o (room for 4); returns
 * its length, 1..4. */
size_t tri_tok_put_utf8(char *o, uint32_t cp);

/* ---- data/tok/bpe.c -------------------------------------------------------- */

/* Fills tk's pair -> rank table from tk->merges (n_merges rows); a repeated
 * pair keeps its first rank. Returns 0, or -1 when out of memory (not
 * printed; the caller names the file). */
int tri_tok_build_pair_table(tri_tokenizer *tk);

/* Fills tk's bytes -> id table (word_id) of its regular tokens, for
 * ignore_merges. Returns 0, or -1 when out of memory (not printed). */
int tri_tok_build_word_table(tri_tokenizer *tk);

/* Fills tk's table of added tokens to match in text (added_ord,
 * added_start) from the TRI_TOK_ADDED ids. Returns 0, or -1 when out of
 * memory (not printed). */
int tri_tok_build_added(tri_tokenizer *tk);

/* Appends an added token with the raw bytes s (NUL-terminated) as the next
 * id; special sets TRI_TOK_SPECIAL. Returns the id, or -1 when out of
 * memory (not printed). The match tables are not rebuilt. */
int tri_tok_append_added(tri_tokenizer *tk, const char *s, int special);

/* The texts of Llama 3's first two special tokens. */
#define TRI_TOK_BOT_TEXT  "<|begin_of_text|>"
#define TRI_TOK_EOT3_TEXT "<|end_of_text|>"

/* The two split patterns as Hugging Face's tokenizer.json writes them
 * (the "Regex" of a Split pre-tokenizer). */
extern const char tri_tok_pattern_gpt2[];
extern const char tri_tok_pattern_llama3[];

#endif
