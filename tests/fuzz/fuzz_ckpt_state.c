/* A checkpoint's state.json (src/train/ckpt_state.c): the input is the file's text.
 * An accepted one gives a step and sample count in range and a config that
 * survives its own dump. */
#include <string.h>

#include "train/ckpt_state.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tri_fuzz_quiet();
    char *text = tri_fuzz_cstr(data, size);
    int step = -1;
    uint64_t consumed = UINT64_MAX;
    tri_config cfg;
    if (tri_ckpt_state_parse(text, "state.json", &step, &consumed, &cfg) == 0) {
        FUZZ_ASSERT(step >= 0);
        FUZZ_ASSERT(consumed < ((uint64_t)1 << 53));
        char *dump = tri_config_to_json(&cfg);
        tri_config back;
        FUZZ_ASSERT(dump && tri_config_load_string(&back, dump, "dump") == 0);
        free(dump);
    } else {
        FUZZ_ASSERT(step == -1 && consumed == UINT64_MAX);
    }
    free(text);
    return 0;
}
