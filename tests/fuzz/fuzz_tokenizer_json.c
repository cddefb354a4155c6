/* Hugging Face tokenizer.json loading (data/tok/vocab.c): the input is the
 * whole file. See tok_check.h for what an accepted tokenizer must do. */
#include "tests/fuzz/tok_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tri_fuzz_quiet();
    const char *path = tri_fuzz_write(0, "tokenizer.json", data, size);
    tri_tokenizer tk;
    if (tri_tokenizer_load(&tk, path) != 0) return 0;
    check_tokenizer(&tk, data, size);
    tri_tokenizer_free(&tk);
    return 0;
}
