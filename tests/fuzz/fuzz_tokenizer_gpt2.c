/* GPT-2 vocab.json + merges.txt loading (data/tok/vocab.c): the input is the
 * vocab.json text, a NUL byte, then merges.txt. Loaded through the prefix
 * form (PREFIXvocab.json + PREFIXmerges.txt, as Megatron names them). See
 * tok_check.h for what an accepted tokenizer must do. */
#include "tests/fuzz/tok_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tri_fuzz_quiet();
    const uint8_t *merges;
    size_t merges_len, vocab_len = tri_fuzz_split(data, size, &merges, &merges_len);
    tri_fuzz_write(0, "gpt2-vocab.json", data, vocab_len);
    tri_fuzz_write(1, "gpt2-merges.txt", merges, merges_len);
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/gpt2-", tri_fuzz_dir());
    tri_tokenizer tk;
    if (tri_tokenizer_load(&tk, prefix) != 0) return 0;
    check_tokenizer(&tk, data, size);
    tri_tokenizer_free(&tk);
    return 0;
}
