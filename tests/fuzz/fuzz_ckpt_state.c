/* A checkpoint's state.json (src/train/ckpt_state.c): the input is the file's text.
 * An accepted one gives a step and sample count in range and a config that
 * survives its own dump. Its "bad_steps" (src/train/badstep.h): accepted, the
 * ranges stay sorted, disjoint and below 2^53; refused, nothing changes. */
#include <string.h>

#include "train/badstep.h"
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
    tri_badstep b, before;
    tri_badstep_init(&b);
    before = b;
    if (tri_badstep_from_state(&b, text, "state.json", 1) == 0) {
        for (int i = 0; i < b.n_ranges; i++) {
            FUZZ_ASSERT(b.ranges[i].begin < b.ranges[i].end && b.ranges[i].end < ((uint64_t)1 << 53));
            FUZZ_ASSERT(i == 0 || b.ranges[i - 1].end < b.ranges[i].begin);
        }
        FUZZ_ASSERT(b.in_a_row >= 0 && b.rollbacks >= 0 && b.skipped >= 0);
    } else {
        FUZZ_ASSERT(memcmp(&b, &before, sizeof b) == 0);
    }
    free(text);
    return 0;
}
