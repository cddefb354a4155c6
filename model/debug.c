/* The test-only switches, read once (see debug.h). */
#include "model/debug.h"

#include <stdlib.h>
#include <string.h>

static int on(const char *name) {
    const char *e = getenv(name);
    return e != NULL && e[0] == '1';
}

void tri_debug_from_env(tri_debug *d) {
    memset(d, 0, sizeof *d);
    d->skip_sp_grad_reduce = on("TRIDENT_DEBUG_SKIP_SP_GRAD_REDUCE");
    d->skip_tied_reduce = on("TRIDENT_DEBUG_SKIP_TIED_REDUCE");
    d->skip_zero_gather = on("TRIDENT_DEBUG_SKIP_ZERO_GATHER");
    d->check_device_memory = on("TRIDENT_DEBUG_CHECK_DEVICE_MEMORY");
    const char *step = getenv("TRIDENT_DEBUG_FP16_OVERFLOW_STEP");
    d->fp16_overflow_step = step != NULL ? atoi(step) : 0;
    const char *ms = getenv("TRIDENT_DEBUG_CKPT_WRITE_SLEEP_MS");
    d->ckpt_write_sleep_ms = ms != NULL ? atoi(ms) : 0;
}
