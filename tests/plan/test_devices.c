/* The device table and the measured CPU (src/plan/devices.h): the table's
 * kinds by name with their datasheet constants (docs/plan.md), and `--gpu
 * cpu`'s kind built from the machine: the memory and cores shared by the
 * ranks, the GEMM speeds through the meter. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/devices.h"

Test(devices, the_table_has_h100_and_a100_by_name) {
    const tri_gpu_kind *h = tri_gpu_lookup("h100"), *a = tri_gpu_lookup("a100");
    cr_assert(h && a);
    cr_expect_null(tri_gpu_lookup("cpu"));
    cr_expect_null(tri_gpu_lookup("v100"));
    cr_expect_str_eq(h->desc, "NVIDIA H100 SXM5 80GB");
    /* (the constants as the table writes them: a datasheet figure times 1e12 or 1e9) */
    const double TB = 1e12, GB = 1e9;
    cr_expect(h->peak_16 == 989 * TB && h->peak_32 == 494.5 * TB && h->mem_bytes == 80 * GB && h->mem_bw == 3.35 * TB);
    cr_expect(h->intra_bw == 450 * GB && h->inter_bw == 50 * GB && h->per_node == 8 && h->flash == 1);
    cr_expect(h->gemm_eff == 0.80 && h->gemm_half == 96.0 && h->attn_eff == 0.45 && h->link_eff == 0.80);
    cr_expect(a->peak_16 == 312 * TB && a->peak_32 == 156 * TB && a->mem_bw == 2.039 * TB && a->inter_bw == 25 * GB);
    cr_expect(a->gemm_eff == 0.85 && a->gemm_half == 64.0 && a->attn_eff == 0.50);
    /* a device of its own: nothing measured, no oversubscription */
    cr_expect(h->gemm_flops == NULL && h->share == 0 && h->sync_s == 0 && a->gemm_flops == NULL);
}

Test(devices, the_cpu_kind_is_this_machine_shared_by_the_ranks) {
    tri_sgemm_meter *m = malloc(sizeof *m);
    tri_gpu_kind k;
    tri_cpu_setup s = {.ranks = 4, .threads = 1, .cores = 2, .avail_bytes = 8e9, .sync_s = -1, .ref = {32, 128, 32}};
    tri_gpu_kind_cpu(&k, m, &s);
    cr_expect_str_eq(k.name, "cpu");
    cr_expect_eq(k.per_node, 4);
    cr_expect_eq(k.mem_bytes, 2e9);
    cr_expect_eq(k.share, 0.5);
    cr_expect_eq(m->share, 0.5);
    cr_expect(m->ref[0] == 32 && m->ref[1] == 128 && m->ref[2] == 32);
    cr_expect(k.peak_16 > 0 && k.peak_16 == m->ref_best && k.peak_32 == k.peak_16);
    cr_expect(k.mem_bw > 0 && isfinite(k.mem_bw));
    cr_expect(k.gemm_flops == tri_sgemm_meter_flops && k.gemm_ctx == m);
    cr_expect_eq(k.sync_s, 0.7e-3); /* the measured constant, docs/plan.md */
    cr_expect(k.flash == 0 && k.gemm_eff == 1.0 && k.latency_s == 20e-6);
    double f = k.gemm_flops(k.gemm_ctx, 16, 16, 16);
    cr_expect(f > 0 && m->n == 1);

    s.ranks = 2;
    s.sync_s = 2e-3;
    tri_gpu_kind_cpu(&k, m, &s);
    cr_expect(k.share == 1.0 && k.sync_s == 2e-3 && k.mem_bytes == 4e9 && m->n == 0);
    free(m);
}
