/* The straggler report's arithmetic (src/train/straggler.c) against a brute
 * force: the median of the other ranks by copying and sorting. The report
 * itself (a rank slowed by debug.sleep_ms named, a healthy run naming
 * nobody) is tested end to end in tests/fault/test_hang.c. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "train/straggler.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) but index skip (-1: none), by sorting a copy. */
static double brute_median(const double *v, int n, int skip) {
    double c[64];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (i != skip) c[k++] = v[i];
    qsort(c, (size_t)k, sizeof *c, cmp);
    return k % 2 ? c[k / 2] : 0.5 * (c[k / 2 - 1] + c[k / 2]);
}

Test(straggler, median_of_odd_and_even_counts) {
    double a[] = {5, 1, 4, 2, 3};
    cr_expect_eq(tri_straggler_median(a, 5), 3);
    double b[] = {10, 2, 8, 4};
    cr_expect_eq(tri_straggler_median(b, 4), 6);
    double c[] = {7};
    cr_expect_eq(tri_straggler_median(c, 1), 7);
}

/* Random worlds of 2..40 ranks with a few slowed ranks: the ranks named are
 * exactly those the brute force names, the largest ratio first, each with
 * the median of the others as its base. */
Test(straggler, judge_names_exactly_the_ranks_above_factor_times_the_others_median) {
    srand(7);
    for (int trial = 0; trial < 500; trial++) {
        int world = 2 + rand() % 39;
        double fig[40 * TRI_SG_N], med[40];
        memset(fig, 0, sizeof fig);
        for (int r = 0; r < world; r++) {
            double x = 0.020 * (1.0 + 0.1 * rand() / RAND_MAX); /* 20-22 ms */
            if (rand() % 8 == 0) x *= 1.2 + 2.0 * rand() / RAND_MAX; /* a slowed rank */
            if (trial % 50 == 0) x = 0.0001 * (1 + r % 3); /* tiny steps: under the floor */
            med[r] = fig[r * TRI_SG_N + TRI_SG_MEDIAN] = x;
        }
        const double factor = 1.5;
        int slow[8];
        double base[8], median = -1;
        int n = tri_straggler_judge(fig, world, factor, &median, slow, base, 8);
        cr_assert_float_eq(median, brute_median(med, world, -1), 1e-15);
        int expect = 0;
        double prev_ratio = 1e300;
        for (int r = 0; r < world; r++) {
            double others = brute_median(med, world, r);
            int is_slow = med[r] > factor * others && med[r] - others >= TRI_STRAGGLER_MIN_EXCESS_S;
            expect += is_slow;
            int listed = -1;
            for (int i = 0; i < n && i < 8; i++)
                if (slow[i] == r) listed = i;
            if (n <= 8) cr_assert_eq(listed >= 0, is_slow, "trial %d rank %d of %d", trial, r, world);
            if (listed >= 0) cr_assert_float_eq(base[listed], others, 1e-15);
        }
        cr_assert_eq(n, expect, "trial %d: %d named, %d expected", trial, n, expect);
        for (int i = 0; i < n && i < 8; i++) {
            double ratio = med[slow[i]] / base[i];
            cr_assert(ratio <= prev_ratio + 1e-12, "trial %d: not the largest ratio first", trial);
            prev_ratio = ratio;
        }
    }
}

Test(straggler, two_ranks_compare_each_with_the_other) {
    /* with the median of all (their mean, 60 ms) rank 1 at 80 ms would be 1.33x:
     * against the other rank it is 2x */
    double fig[2 * TRI_SG_N] = {0};
    fig[TRI_SG_MEDIAN] = 0.040;
    fig[TRI_SG_N + TRI_SG_MEDIAN] = 0.080;
    int slow[2];
    double base[2], median;
    cr_assert_eq(tri_straggler_judge(fig, 2, 1.5, &median, slow, base, 2), 1);
    cr_expect_eq(slow[0], 1);
    cr_expect_float_eq(base[0], 0.040, 1e-15);
    cr_expect_float_eq(median, 0.060, 1e-15);
    /* a rank 1.4x the other: nobody */
    fig[TRI_SG_N + TRI_SG_MEDIAN] = 0.056;
    cr_expect_eq(tri_straggler_judge(fig, 2, 1.5, &median, slow, base, 2), 0);
    /* 4.9 ms against 0.9 ms (5.4x), a rank preempted once a step: under the floor */
    fig[TRI_SG_MEDIAN] = 0.0009;
    fig[TRI_SG_N + TRI_SG_MEDIAN] = 0.0049;
    cr_expect_eq(tri_straggler_judge(fig, 2, 1.5, &median, slow, base, 2), 0);
}

Test(straggler, compute_is_the_step_less_its_blocked_time) {
    tri_straggler s;
    memset(&s, 0, sizeof s);
    double compute[3], comm[3];
    s.every = 3;
    s.compute = compute;
    s.comm = comm;
    tri_straggler_step(&s, 0.010, 0.004);
    tri_straggler_step(&s, 0.010, 0.012); /* (clock granularity: never negative) */
    tri_straggler_step(&s, 0.010, -1.0);
    tri_straggler_step(&s, 0.010, 0.0); /* the window is full: ignored until checked */
    cr_expect_eq(s.n, 3);
    cr_expect_float_eq(compute[0], 0.006, 1e-15);
    cr_expect_float_eq(compute[1], 0.0, 1e-15);
    cr_expect_float_eq(comm[1], 0.012, 1e-15);
    cr_expect_float_eq(compute[2], 0.010, 1e-15);
    cr_expect_float_eq(comm[2], 0.0, 1e-15);
}

/* The blocked time is every group's: with context parallelism the ring (cp)
 * and the gradients' dp x cp group too, else a rank blocked in the ring
 * would count that time as compute. Powers of two: the sum is exact. */
Test(straggler, blocked_time_counts_every_group_cp_and_dp_x_cp_included) {
    tri_dist d;
    memset(&d, 0, sizeof d);
    tri_comm *g[7] = {&d.world, &d.tp, &d.dp, &d.pp, &d.emb, &d.cp, &d.dpcp};
    double want = 0;
    for (int i = 0; i < 7; i++) {
        g[i]->stats.seconds = (double)(1u << i) / 128;
        want += g[i]->stats.seconds;
    }
    cr_expect_eq(tri_straggler_comm_s(&d), want, "%.9g vs %.9g", tri_straggler_comm_s(&d), want);
    d.cp.stats.seconds = 0;
    d.dpcp.stats.seconds = 0;
    cr_expect_eq(tri_straggler_comm_s(&d), want - 96.0 / 128);
}
