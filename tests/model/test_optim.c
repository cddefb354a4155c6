/* The optimizer (model/optim.c) with its state offloaded
 * (parallel.offload = optimizer) on the CPU backends: the same losses and
 * parameters, bit for bit, as without (on the CPU the option moves only the
 * accounting: the state stays where the ops read it), and the allocator's
 * accounting of where the state lives against the closed form: AdamW's two
 * fp32 moments, 8 bytes per parameter, plus the fp32 master weights, 4 more,
 * when the parameters are 16-bit, all under host memory and none under the
 * backend's optimizer bytes; parameters and gradients unchanged. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/tiny_steps.h"
#include "kernels/ctx.h"

/* `steps` steps of the tiny GPT on a fresh context of `device`. */
static void tiny(const char *device, tri_dtype precision, int offload, int steps, tt_tiny_run *r) {
    tri_ctx ctx;
    cr_assert_eq(tri_ctx_init(&ctx, device, 0), 0);
    tt_tiny_steps_offload(&ctx, precision, steps, offload, r);
    tri_ctx_free(&ctx);
}

static void expect_same_bits(const tt_tiny_run *a, const tt_tiny_run *b, int steps, const char *what) {
    for (int s = 0; s < steps; s++)
        cr_expect(memcmp(&a->loss[s], &b->loss[s], sizeof(double)) == 0, "%s: step %d loss %.17g vs %.17g", what, s,
                  a->loss[s], b->loss[s]);
    cr_assert_eq(a->n, b->n);
    size_t diff = 0, first = a->n;
    for (size_t i = 0; i < a->n; i++)
        if (memcmp(&a->params[i], &b->params[i], sizeof(float)) != 0) {
            diff++;
            if (first == a->n) first = i;
        }
    cr_expect_eq(diff, 0, "%s: %zu of %zu parameters differ (the first at %zu: %.9g vs %.9g)", what, diff, a->n, first,
                 first < a->n ? a->params[first] : 0.0f, first < b->n ? b->params[first] : 0.0f);
}

/* Six steps with clipping, weight decay and warmup: every loss and every
 * final fp32 weight (the masters in bf16) identical with and without
 * offload, in fp32 and bf16, on "cpu" and on the guarded backend (whose
 * faults would show any host access to the state outside an op). */
Test(optim, offload_keeps_the_cpu_numbers_bit_for_bit) {
    const char *devices[2] = {"cpu", "cpu-guard"};
    const tri_dtype dts[2] = {TRI_F32, TRI_BF16};
    for (int d = 0; d < 2; d++)
        for (int p = 0; p < 2; p++) {
            tt_tiny_run off, on;
            tiny(devices[d], dts[p], 0, 6, &off);
            tiny(devices[d], dts[p], 1, 6, &on);
            char what[64];
            snprintf(what, sizeof what, "%s %s", devices[d], tri_precision_name(dts[p]));
            expect_same_bits(&off, &on, 6, what);
            /* and the updates moved the weights (the parameters after one step are not those
             * after six), or the comparison would prove nothing */
            tt_tiny_run one;
            tiny(devices[d], dts[p], 1, 1, &one);
            cr_expect(memcmp(one.params, on.params, on.n * sizeof(float)) != 0, "%s: the weights did not move", what);
            free(one.params);
            free(off.params);
            free(on.params);
        }
}

/* The accounting: the backend's optimizer bytes go to host memory, all of
 * them (8 bytes a parameter in fp32, 12 in bf16), nothing else moves. */
Test(optim, offload_moves_the_state_to_host_memory) {
    const tri_dtype dts[2] = {TRI_F32, TRI_BF16};
    for (int p = 0; p < 2; p++) {
        tt_tiny_run off, on;
        tiny("cpu", dts[p], 0, 1, &off);
        tiny("cpu", dts[p], 1, 1, &on);
        const size_t n = off.n, per = dts[p] == TRI_F32 ? 8 : 12;
        const char *dt = tri_precision_name(dts[p]);
        cr_expect_eq(off.mem.peak[TRI_MEM_OPTIM], per * n, "%s: %zu optimizer bytes for %zu parameters", dt,
                     off.mem.peak[TRI_MEM_OPTIM], n);
        cr_expect_eq(off.mem.host_peak[TRI_MEM_OPTIM], 0);
        cr_expect_eq(on.mem.peak[TRI_MEM_OPTIM], 0, "%s: %zu optimizer bytes left on the backend", dt,
                     on.mem.peak[TRI_MEM_OPTIM]);
        cr_expect_eq(on.mem.host_peak[TRI_MEM_OPTIM], per * n, "%s: %zu host bytes for %zu parameters", dt,
                     on.mem.host_peak[TRI_MEM_OPTIM], n);
        for (int k = 0; k < TRI_MEM_KINDS; k++) {
            if (k == TRI_MEM_OPTIM) continue;
            cr_expect_eq(on.mem.peak[k], off.mem.peak[k], "%s: kind %d: %zu vs %zu", dt, k, on.mem.peak[k],
                         off.mem.peak[k]);
            cr_expect_eq(on.mem.host_peak[k], 0, "%s: kind %d: %zu host bytes (no staging on the CPU)", dt, k,
                         on.mem.host_peak[k]);
        }
        /* the report says where it is */
        char line[512], json[512];
        tri_mem_line(&on.mem, line, sizeof line);
        tri_mem_json(&on.mem, json, sizeof json);
        cr_expect(strstr(line, "; host: optimizer ") != NULL, "%s", line);
        char want[64];
        snprintf(want, sizeof want, "\"host_optim\": %zu,", per * n);
        cr_expect(strstr(json, want) != NULL && strstr(json, "\"optim\": 0,") != NULL, "%s", json);
        tri_mem_line(&off.mem, line, sizeof line);
        cr_expect(strstr(line, "host") == NULL, "%s", line);
        free(off.params);
        free(on.params);
    }
}

/* Through the distributed optimizer (ZeRO-1 over a group of one, a dozen
 * buckets): offloaded or not, the same bits as the plain optimizer, and the
 * shard hook once per bucket and step either way. */
Test(optim, offload_under_zero_keeps_the_numbers_and_the_shard_hooks) {
    tri_ctx c;
    tt_tiny_run on, off, plain;
    cr_assert_eq(tri_ctx_init(&c, "cpu", 0), 0);
    tt_tiny_steps_zero(&c, TRI_BF16, 4, 1, 0.01, &on);
    tri_ctx_free(&c);
    cr_assert_eq(tri_ctx_init(&c, "cpu", 0), 0);
    tt_tiny_steps_zero(&c, TRI_BF16, 4, 0, 0.01, &off);
    tri_ctx_free(&c);
    tiny("cpu", TRI_BF16, 0, 4, &plain);
    expect_same_bits(&on, &off, 4, "ZeRO offloaded vs not");
    expect_same_bits(&on, &plain, 4, "ZeRO offloaded vs the plain optimizer");
    cr_expect(on.shards_done == off.shards_done && on.shards_done >= 4 * 3, "shard hooks %d vs %d", on.shards_done,
              off.shards_done);
    cr_expect(on.mem.peak[TRI_MEM_OPTIM] == 0 && on.mem.host_peak[TRI_MEM_OPTIM] == off.mem.peak[TRI_MEM_OPTIM]);
    free(on.params), free(off.params), free(plain.params);
}
