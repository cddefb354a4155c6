/* A checkpoint root's `latest` and a step dir's manifest.json
 * (model/ckpt/store.c: tri_ckpt_verify, tri_ckpt_find, tri_ckpt_resolve): the
 * input is the `latest` text, a NUL, then manifest.json (none when empty).
 * The root holds step_00000007/ (a checkpoint from before manifests: a
 * state.json only) and step_00000012/ (config.json = "{}\n", and the
 * manifest). Whatever the input, what the store finds must be one of those
 * two, a verified one must be step 12 with a manifest that verifies, and a
 * step 12 that verifies is what it finds. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/ckpt/store.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tri_fuzz_quiet();
    static char root[4200], step12[4300];
    if (!root[0]) {
        snprintf(root, sizeof root, "%s/ckpt", tri_fuzz_dir());
        snprintf(step12, sizeof step12, "%s/step_00000012", root);
        char step7[4300];
        snprintf(step7, sizeof step7, "%s/step_00000007", root);
        FUZZ_ASSERT(mkdir(root, 0755) == 0 && mkdir(step7, 0755) == 0 && mkdir(step12, 0755) == 0);
        tri_fuzz_write(0, "ckpt/step_00000007/state.json", "{}\n", 3);
        tri_fuzz_write(0, "ckpt/step_00000012/config.json", "{}\n", 3);
    }
    const uint8_t *manifest;
    size_t manifest_len, latest_len = tri_fuzz_split(data, size, &manifest, &manifest_len);
    tri_fuzz_write(0, "ckpt/latest", data, latest_len);
    const char *mpath = tri_fuzz_write(1, "ckpt/step_00000012/manifest.json", manifest, manifest_len);
    if (manifest_len == 0) FUZZ_ASSERT(unlink(mpath) == 0);

    char why[8192];
    int v = tri_ckpt_verify(step12, why, sizeof why);
    FUZZ_ASSERT(v == (manifest_len == 0 ? 1 : v) && v >= -1 && v <= 1);
    tri_ckpt_found f;
    memset(&f, 0x5a, sizeof f);
    int rc = tri_ckpt_find(root, &f);
    if (rc == 0 && f.dir[0]) {
        FUZZ_ASSERT(tri_ckpt_step_of(f.dir) == f.step && (f.step == 7 || f.step == 12));
        FUZZ_ASSERT(!f.verified || (f.step == 12 && v == 0));
        char out[4096];
        FUZZ_ASSERT(tri_ckpt_resolve(root, out, sizeof out) == 0 && strcmp(out, f.dir) == 0);
    }
    if (v == 0) FUZZ_ASSERT(rc == 0 && f.step == 12 && f.verified == 1);
    /* the same bytes as a directory name */
    char *name = tri_fuzz_cstr(data, latest_len);
    FUZZ_ASSERT(tri_ckpt_step_of(name) >= -1);
    free(name);
    return 0;
}
