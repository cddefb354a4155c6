/* Tensor parallelism's f and g (parallel/tensor.c) on a two-rank group whose
 * transport is a stand-in with a closed form: this is rank 1, and rank 0
 * holds ten times this rank's values. So an all-reduce gives 11 x, a
 * reduce-scatter 11 x this rank's rows of the input, an all-gather rank 0's
 * rows (10 x) then this rank's. Each direction is checked for the call it
 * makes, the buffer it returns and the buffers it must not touch (NaN
 * poison). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "parallel/tensor.h"

static int n_allreduce, n_reduce_scatter, n_allgather;

static void fake_allreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op) {
    cr_assert_eq(t, TRI_F32);
    cr_assert_eq(op, TRI_SUM);
    for (size_t i = 0; i < n; i++) ((float *)buf)[i] *= 11.0f;
    n_allreduce++;
}

static void fake_reduce_scatter(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    for (size_t i = 0; i < n; i++) ((float *)recv)[i] = 11.0f * ((const float *)send)[(size_t)c->rank * n + i];
    n_reduce_scatter++;
}

static void fake_allgather(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t) {
    for (size_t i = 0; i < n; i++) {
        ((float *)recv)[i] = 10.0f * ((const float *)send)[i]; /* rank 0's */
        ((float *)recv)[n + i] = ((const float *)send)[i];      /* ours     */
    }
    n_allgather++;
}

static const tri_comm_impl fake = {.name = "fake",
                                   .allreduce = fake_allreduce,
                                   .reduce_scatter = fake_reduce_scatter,
                                   .allgather = fake_allgather};

enum { BT = 6, C = 3, R = BT / 2 };

static tri_comm group(void) {
    tri_comm c;
    memset(&c, 0, sizeof c);
    c.size = 2;
    c.rank = 1;
    c.world_rank = 1;
    c.impl = &fake;
    snprintf(c.name, sizeof c.name, "tp");
    n_allreduce = n_reduce_scatter = n_allgather = 0;
    return c;
}

static void fill(float *x, size_t n, float base) {
    for (size_t i = 0; i < n; i++) x[i] = base + (float)i;
}

static void poison(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

Test(tensor, rows_are_all_or_the_sequence_shard) {
    tri_comm c = group();
    tri_tp_region plain = {.comm = &c, .tp = 2, .sp = 0, .C = C, .dtype = TRI_F32};
    tri_tp_region sp = {.comm = &c, .tp = 2, .sp = 1, .C = C, .dtype = TRI_F32};
    cr_assert_eq(tri_tp_rows(&plain, BT), BT);
    cr_assert_eq(tri_tp_rows(&sp, BT), R);
}

Test(tensor, g_forward_all_reduces_in_place_without_sequence_parallelism) {
    tri_comm c = group();
    tri_tp_region r = {.comm = &c, .tp = 2, .sp = 0, .C = C, .dtype = TRI_F32};
    float full[BT * C], shard[R * C], want[BT * C];
    fill(full, BT * C, 1.0f);
    for (int i = 0; i < BT * C; i++) want[i] = 11.0f * full[i];
    poison(shard, R * C);
    cr_assert_eq(tri_tp_reduce(&r, full, shard, BT), full);
    cr_assert_eq(n_allreduce, 1);
    cr_assert_eq(n_reduce_scatter + n_allgather, 0);
    cr_assert_arr_eq(full, want, sizeof want);
    for (int i = 0; i < R * C; i++) cr_assert(isnan(shard[i]), "shard[%d] was written", i);
}

Test(tensor, g_forward_reduce_scatters_this_ranks_rows_with_sequence_parallelism) {
    tri_comm c = group();
    tri_tp_region r = {.comm = &c, .tp = 2, .sp = 1, .C = C, .dtype = TRI_F32};
    float full[BT * C], shard[R * C];
    fill(full, BT * C, 1.0f);
    poison(shard, R * C);
    cr_assert_eq(tri_tp_reduce(&r, full, shard, BT), shard);
    cr_assert_eq(n_reduce_scatter, 1);
    cr_assert_eq(n_allreduce + n_allgather, 0);
    /* rank 1 keeps rows [R, 2R) */
    for (int i = 0; i < R * C; i++) cr_assert_eq(shard[i], 11.0f * (1.0f + (float)(R * C + i)), "shard[%d]", i);
}

Test(tensor, f_forward_is_the_identity_without_sequence_parallelism) {
    tri_comm c = group();
    tri_tp_region r = {.comm = &c, .tp = 2, .sp = 0, .C = C, .dtype = TRI_F32};
    float full[BT * C], shard[BT * C];
    poison(full, BT * C);
    fill(shard, BT * C, 5.0f);
    cr_assert_eq(tri_tp_gather(&r, full, shard, BT), (const void *)shard);
    cr_assert_eq(n_allreduce + n_reduce_scatter + n_allgather, 0);
    for (int i = 0; i < BT * C; i++) cr_assert(isnan(full[i]), "full[%d] was written", i);
}

Test(tensor, f_forward_all_gathers_every_row_with_sequence_parallelism) {
    tri_comm c = group();
    tri_tp_region r = {.comm = &c, .tp = 2, .sp = 1, .C = C, .dtype = TRI_F32};
    float full[BT * C], shard[R * C];
    poison(full, BT * C);
    fill(shard, R * C, 5.0f);
    cr_assert_eq(tri_tp_gather(&r, full, shard, BT), (const void *)full);
    cr_assert_eq(n_allgather, 1);
    cr_assert_eq(n_allreduce + n_reduce_scatter, 0);
    for (int i = 0; i < R * C; i++) {
        cr_assert_eq(full[i], 10.0f * shard[i], "rank 0's row element %d", i);
        cr_assert_eq(full[R * C + i], shard[i], "this rank's row element %d", i);
    }
}
