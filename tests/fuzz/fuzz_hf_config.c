/* A checkpoint's Hugging Face config.json (model/ckpt/checkpoint.c:
 * tri_hf_config_parse), as `trident sample` reads it: the input is the
 * file's text. An accepted one gives positive sizes, and the config.json
 * Trident writes for that shape parses back to the same shape. */
#include <string.h>

#include "model/ckpt/checkpoint.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tri_fuzz_quiet();
    char *text = tri_fuzz_cstr(data, size);
    tri_model_cfg cfg = {0};
    if (tri_hf_config_parse(text, "config.json", &cfg) == 0) {
        FUZZ_ASSERT(cfg.n_embd > 0 && cfg.n_head > 0 && cfg.n_layer > 0 && cfg.seq_len > 0 && cfg.vocab_size > 0);
        char *out = tri_hf_config_json(&cfg);
        FUZZ_ASSERT(out != NULL);
        tri_model_cfg back = {0};
        FUZZ_ASSERT(tri_hf_config_parse(out, "written config.json", &back) == 0);
        FUZZ_ASSERT(memcmp(&back, &cfg, sizeof cfg) == 0);
        free(out);
    }
    free(text);
    return 0;
}
