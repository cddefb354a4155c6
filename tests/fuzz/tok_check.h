/* What every accepted tokenizer must do, shared by the two tokenizer
 * harnesses: encode then decode gives the text back byte for byte (all 256
 * byte tokens are present and every merge result's bytes are its parts'),
 * and a tokenizer saved as tokenizer.json loads back with the same ids. */
#ifndef TRI_FUZZ_TOK_CHECK_H
#define TRI_FUZZ_TOK_CHECK_H

#include <string.h>

#include "data/tok/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

static void round_trip(const tri_tokenizer *tk, const char *text, size_t len, int32_t **ids_out, size_t *n_out) {
    int32_t *ids;
    size_t n = tri_tokenizer_encode(tk, text, len, &ids);
    FUZZ_ASSERT(n != SIZE_MAX);
    for (size_t i = 0; i < n; i++) FUZZ_ASSERT(ids[i] >= 0 && ids[i] < tri_tokenizer_vocab_size(tk));
    char *back;
    size_t m = tri_tokenizer_decode(tk, ids, n, &back);
    FUZZ_ASSERT(m == len && memcmp(back, text, len) == 0);
    free(back);
    *ids_out = ids;
    *n_out = n;
}

/* text: some bytes of the input itself plus fixed text with UTF-8, invalid
 * bytes and the literal <|endoftext|>. */
static void check_tokenizer(const tri_tokenizer *tk, const uint8_t *data, size_t size) {
    static const char fixed[] = "Hello world, it's 2024!\n\tcaf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xff\xfe"
                                "<|endoftext|>  end";
    size_t take = size < 200 ? size : 200;
    char text[sizeof fixed + 200];
    memcpy(text, data, take);
    memcpy(text + take, fixed, sizeof fixed - 1);
    size_t len = take + sizeof fixed - 1;
    int32_t *ids;
    size_t n;
    round_trip(tk, text, len, &ids, &n);

    const char *saved = tri_fuzz_write(3, "saved.json", "", 0);
    FUZZ_ASSERT(tri_tokenizer_save(tk, saved) == 0);
    tri_tokenizer back;
    FUZZ_ASSERT(tri_tokenizer_load(&back, saved) == 0);
    FUZZ_ASSERT(back.vocab_size == tk->vocab_size && back.eot == tk->eot && back.n_merges == tk->n_merges);
    int32_t *ids2;
    size_t n2;
    round_trip(&back, text, len, &ids2, &n2);
    FUZZ_ASSERT(n2 == n && memcmp(ids, ids2, n * sizeof *ids) == 0);
    free(ids2);
    free(ids);
    tri_tokenizer_free(&back);
}

#endif
