/* The config file and `--set` overrides (src/config/config.c): the input is the JSON
 * text, then NUL-separated overrides ("section.key=value"). An accepted
 * config must survive its own dump: tri_config_to_json, loaded back, gives
 * the same dump. */
#include <string.h>

#include "config/config.h"
#include "tests/fuzz/fuzz_util.h"

#define MAX_OVERRIDES 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tri_fuzz_quiet();
    const uint8_t *rest;
    size_t rest_len, json_len = tri_fuzz_split(data, size, &rest, &rest_len);
    const char *path = tri_fuzz_write(0, "config.json", data, json_len);
    char *ovbuf = tri_fuzz_cstr(rest, rest_len);
    const char *ov[MAX_OVERRIDES];
    int n_ov = 0;
    for (char *p = ovbuf; rest_len > 0 && n_ov < MAX_OVERRIDES;) {
        ov[n_ov++] = p;
        char *nul = memchr(p, '\0', (size_t)(ovbuf + rest_len - p));
        if (!nul || nul == ovbuf + rest_len) break;
        p = nul + 1;
    }
    tri_config cfg;
    if (tri_config_load(&cfg, path, n_ov, ov) == 0) {
        char *dump = tri_config_to_json(&cfg);
        FUZZ_ASSERT(dump != NULL);
        tri_config back;
        FUZZ_ASSERT(tri_config_load_string(&back, dump, "dump") == 0);
        char *again = tri_config_to_json(&back);
        FUZZ_ASSERT(again != NULL && strcmp(dump, again) == 0);
        static FILE *null;
        if (!null) null = fopen("/dev/null", "w");
        if (null) tri_config_print(&back, null);
        free(again);
        free(dump);
    }
    free(ovbuf);
    return 0;
}
