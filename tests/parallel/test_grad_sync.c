/* Data-parallel gradient buckets, in process, with a recording comm group:
 * buckets start during the last micro-batch's backward, each only once its
 * gradients are final, every element is covered exactly once, and with
 * several micro-batches nothing starts before the last one. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ctx.h"
#include "model/gpt.h"
#include "model/runtime.h"
#include "parallel/grad_sync.h"

enum { MAX_CALLS = 4096 };

/* A group of 2 whose all-reduces leave the data alone and record what they
 * saw at launch: the buffer's contents, and whether backward had finished. */
typedef struct recorder {
    int n;
    float *start[MAX_CALLS];
    size_t len[MAX_CALLS];
    float *snapshot[MAX_CALLS];
    int backward_done;
    int launched_during_backward;
} recorder;

static recorder g_rec; /* the impl callbacks get only the comm: test-only state */

static void rec_iallreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op, tri_req *r) {
    (void)c;
    (void)t;
    (void)op;
    cr_assert(g_rec.n < MAX_CALLS);
    g_rec.start[g_rec.n] = buf;
    g_rec.len[g_rec.n] = n;
    g_rec.snapshot[g_rec.n] = malloc(n * sizeof(float));
    memcpy(g_rec.snapshot[g_rec.n], buf, n * sizeof(float));
    if (!g_rec.backward_done) g_rec.launched_during_backward++;
    g_rec.n++;
    r->active = 1;
}

static void rec_wait(tri_comm *c, tri_req *r) {
    (void)c;
    r->active = 0;
}

static const tri_comm_impl REC = {.name = "recorder", .iallreduce = rec_iallreduce, .wait = rec_wait};

static void wire(void *ctx, size_t n) { tri_grad_sync_ready(ctx, n); }

static void run(int n_micro, double bucket_mb) {
    memset(&g_rec, 0, sizeof g_rec);
    tri_model_cfg cfg = {.n_layer = 3, .n_head = 2, .n_embd = 32, .seq_len = 8, .vocab_size = 256};
    tri_comm self, dp = {.size = 2, .rank = 0, .impl = &REC};
    tri_comm_init_self(&self, 0);
    tri_ctx ctx;
    cr_assert_eq(tri_ctx_init(&ctx, "cpu", 0), 0);
    tri_gpt g;
    cr_assert_eq(tri_gpt_init_single(&g, &cfg, &ctx, &self, 1, 0), 0);
    cr_assert_eq(tri_gpt_init_params(&g, 1), 0);
    tri_chunk *ch = &g.chunks[0];
    tri_slot_pool pool;
    tri_workspace ws;
    cr_assert_eq(tri_slot_pool_init(&pool, &g, 0, 2, 8, TRI_RECOMPUTE_NONE, 1, 0), 0);
    cr_assert_eq(tri_workspace_init(&ws, &g, 2, 8, TRI_RECOMPUTE_NONE), 0);
    tri_grad_sync s;
    cr_assert_eq(tri_grad_sync_init(&s, ch->grad_mem, ch->n_elems, &dp, bucket_mb), 0);
    ch->grads_ready = wire;
    ch->grads_ready_ctx = &s;
    int32_t ids[16], tg[16];
    for (int i = 0; i < 16; i++) {
        ids[i] = (i * 37) % 256;
        tg[i] = (i * 91 + 5) % 256;
    }
    ctx.ops->zero(&ctx, ch->grad_mem, ch->n_elems * sizeof(float));
    tri_grad_sync_begin(&s);
    for (int m = 0; m < n_micro; m++) {
        tri_slot *sl = tri_slot_acquire(&pool, &g);
        tri_slot_stage(&g, &pool, sl, ids, tg);
        tri_chunk_forward(&g, &pool, sl, &ws, NULL, TRI_FWD_TRAIN, 1.0f / 64);
        tri_grad_sync_set_last(&s, m == n_micro - 1);
        tri_chunk_backward(&g, &pool, sl, &ws, NULL);
        tri_slot_release(&pool, &g, sl);
        if (m < n_micro - 1) cr_expect_eq(g_rec.n, 0, "a bucket started before the last micro-batch");
    }
    g_rec.backward_done = 1;
    tri_grad_sync_finish(&s);

    cr_expect(s.n_buckets > 4, "the test needs several buckets, got %d", s.n_buckets);
    cr_expect_eq(g_rec.n, s.n_buckets);
    /* all but the embedding's buckets are final before backward ends */
    cr_expect(g_rec.launched_during_backward >= s.n_buckets - 3, "only %d of %d buckets started during backward",
              g_rec.launched_during_backward, s.n_buckets);
    /* in order, contiguous, covering the buffer once; contents at launch final */
    size_t next = 0;
    for (int k = 0; k < g_rec.n; k++) {
        cr_expect_eq(g_rec.start[k], ch->grad_mem + next, "bucket %d does not start where %d ended", k, k - 1);
        cr_expect(memcmp(g_rec.snapshot[k], g_rec.start[k], g_rec.len[k] * sizeof(float)) == 0,
                  "bucket %d (floats %zu..%zu) changed after its all-reduce started", k, next, next + g_rec.len[k]);
        next += g_rec.len[k];
        free(g_rec.snapshot[k]);
    }
    cr_expect_eq(next, ch->n_elems);
    tri_grad_sync_free(&s);
    tri_slot_pool_free(&pool, &g);
    tri_workspace_free(&ws, &g);
    tri_gpt_free(&g);
    tri_ctx_free(&ctx);
}

Test(grad_sync, buckets_start_during_backward_once_final) { run(1, 0.004); }

Test(grad_sync, with_accumulation_only_the_last_micro_batch_starts_buckets) { run(3, 0.004); }

/* ---- ZeRO-2: the reduce-scatter writes this rank's shards into their own
 * buffer (tri_grad_sync_set_shard), bucket b's at bounds[b] / dp ---- */

typedef struct rs_call {
    const float *send;
    float *recv;
    size_t n;
} rs_call;

static struct {
    int n;
    rs_call calls[MAX_CALLS];
} g_rs; /* test-only state, as g_rec */

/* rank 1 of 2 whose peer contributes zeros: the sum is this rank's own part */
static void rs_ireduce_scatter(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t, tri_req *r) {
    (void)t;
    cr_assert(g_rs.n < MAX_CALLS);
    g_rs.calls[g_rs.n++] = (rs_call){send, recv, n};
    memcpy(recv, (const float *)send + (size_t)c->rank * n, n * sizeof(float));
    r->active = 1;
}

static const tri_comm_impl RS = {.name = "rs-recorder", .ireduce_scatter = rs_ireduce_scatter, .wait = rec_wait};

/* n_floats floats of which n_real are the model's (the rest padding), in
 * buckets of about bucket_mb MiB, over dp: the shard buffer afterwards holds
 * this rank's slice of every bucket, in bucket order, and every bucket went
 * straight from the gradient buffer into its place there. */
static void zero2_case(tri_comm *dp, size_t n_real, size_t n_floats, double bucket_mb) {
    memset(&g_rs, 0, sizeof g_rs);
    float *grads = malloc(n_floats * sizeof(float)), *params = calloc(n_floats, sizeof(float));
    size_t n_shard = n_floats / (size_t)dp->size;
    float *shard = malloc(n_shard * sizeof(float));
    for (size_t i = 0; i < n_floats; i++) grads[i] = i < n_real ? (float)i * 0.5f + 1.0f : 0.0f;
    for (size_t i = 0; i < n_shard; i++) shard[i] = -1.0f;
    tri_grad_sync s;
    cr_assert_eq(tri_grad_sync_init_zero(&s, grads, params, TRI_F32, n_real, n_floats, dp, bucket_mb), 0);
    tri_grad_sync_set_shard(&s, shard);
    cr_assert_eq(tri_grad_sync_shard_floats(&s), n_shard);
    tri_grad_sync_begin(&s);
    tri_grad_sync_set_last(&s, 1);
    tri_grad_sync_ready(&s, n_real / 2); /* a prefix first, as backward reports */
    tri_grad_sync_ready(&s, n_real);
    tri_grad_sync_finish(&s);
    if (dp->size > 1) {
        cr_expect(s.n_buckets > 2, "the test needs several buckets, got %d", s.n_buckets);
        cr_expect_eq(g_rs.n, s.n_buckets);
        for (int k = 0; k < g_rs.n; k++) {
            cr_expect_eq(g_rs.calls[k].send, grads + s.bounds[k], "bucket %d's input", k);
            cr_expect_eq(g_rs.calls[k].recv, shard + s.bounds[k] / (size_t)dp->size, "bucket %d's output", k);
        }
    }
    /* the shard buffer against the slices computed here */
    size_t at = 0;
    for (int b = 0; b < s.n_buckets; b++) {
        size_t lo, hi;
        tri_grad_sync_shard(&s, b, &lo, &hi);
        for (size_t i = lo; i < hi; i++, at++)
            if (shard[at] != grads[i]) {
                cr_expect(0, "shard element %zu (bucket %d, element %zu) is %g, not %g", at, b, i, shard[at], grads[i]);
                b = s.n_buckets;
                break;
            }
    }
    cr_expect_eq(at, n_shard);
    tri_grad_sync_free(&s);
    free(grads);
    free(params);
    free(shard);
}

Test(grad_sync, zero2_reduce_scatters_into_the_shard_buffer) {
    tri_comm dp = {.size = 2, .rank = 1, .impl = &RS};
    /* 10,000 floats padded to 10,016 (2 x 16 x 313), buckets of ~1,024 floats */
    zero2_case(&dp, 10000, 10016, 0.004);
}

Test(grad_sync, zero2_at_one_rank_copies_the_whole_buffer) {
    tri_comm self;
    tri_comm_init_self(&self, 0);
    zero2_case(&self, 1000, 1008, 0.001);
}

/* ---- ZeRO-3: the all-gather fills the full parameter buffer from the
 * shard buffer (tri_grad_sync_set_pshard), bucket b's shard at bounds[b] / dp ---- */

static struct {
    int n;
    rs_call calls[MAX_CALLS];
} g_ag; /* test-only state, as g_rec */

/* rank r of a group whose peers' shards are all 7: recv gets them, and this rank's own */
static void ag_iallgather(tri_comm *c, void *recv, const void *send, size_t n, tri_dtype t, tri_req *r) {
    (void)t;
    cr_assert(g_ag.n < MAX_CALLS);
    g_ag.calls[g_ag.n++] = (rs_call){send, recv, n};
    float *out = recv;
    for (int q = 0; q < c->size; q++)
        for (size_t i = 0; i < n; i++) out[(size_t)q * n + i] = q == c->rank ? ((const float *)send)[i] : 7.0f;
    r->active = 1;
}

static const tri_comm_impl AG = {.name = "ag-recorder", .iallgather = ag_iallgather, .wait = rec_wait};

static void zero3_case(tri_comm *dp, size_t n_floats, double bucket_mb) {
    memset(&g_ag, 0, sizeof g_ag);
    size_t n_shard = n_floats / (size_t)dp->size;
    float *grads = calloc(n_floats, sizeof(float)), *params = malloc(n_floats * sizeof(float));
    float *pshard = malloc(n_shard * sizeof(float));
    for (size_t i = 0; i < n_shard; i++) pshard[i] = (float)i + 0.25f;
    for (size_t i = 0; i < n_floats; i++) params[i] = -1.0f;
    tri_grad_sync s;
    cr_assert_eq(tri_grad_sync_init_zero(&s, grads, NULL, TRI_F32, n_floats, n_floats, dp, bucket_mb), 0);
    tri_grad_sync_set_pshard(&s, pshard);
    tri_grad_sync_set_params(&s, params);
    for (int b = 0; b < s.n_buckets; b++) tri_grad_sync_gather_start(&s, b);
    tri_grad_sync_gather_wait(&s);
    if (dp->size > 1) {
        cr_expect(s.n_buckets > 2, "the test needs several buckets, got %d", s.n_buckets);
        cr_expect_eq(g_ag.n, s.n_buckets);
        for (int k = 0; k < g_ag.n; k++) {
            cr_expect_eq(g_ag.calls[k].recv, params + s.bounds[k], "bucket %d's output", k);
            cr_expect_eq(g_ag.calls[k].send, pshard + s.bounds[k] / (size_t)dp->size, "bucket %d's input", k);
        }
    }
    /* this rank's slices of the full buffer hold its shards in order; the rest the peers' */
    size_t at = 0;
    for (int b = 0; b < s.n_buckets; b++) {
        size_t lo, hi;
        tri_grad_sync_shard(&s, b, &lo, &hi);
        for (size_t i = s.bounds[b]; i < s.bounds[b + 1]; i++) {
            float want = i >= lo && i < hi ? pshard[at + (i - lo)] : 7.0f;
            if (params[i] != want) {
                cr_expect(0, "element %zu (bucket %d) is %g, not %g", i, b, params[i], want);
                b = s.n_buckets;
                break;
            }
        }
        at += hi - lo;
    }
    tri_grad_sync_free(&s);
    free(grads);
    free(params);
    free(pshard);
}

Test(grad_sync, zero3_gathers_the_parameters_from_the_shard_buffer) {
    tri_comm dp = {.size = 4, .rank = 2, .impl = &AG};
    zero3_case(&dp, 10240, 0.004); /* 4 x 16 x 160 floats, buckets of ~1,088 */
}

Test(grad_sync, zero3_at_one_rank_copies_the_shards) {
    tri_comm self;
    tri_comm_init_self(&self, 0);
    zero3_case(&self, 1008, 0.001);
}

/* ---- The bucket hook (tri_grad_sync_on_bucket, the offloaded optimizer's
 * overlap): told once a step per bucket, in bucket order, as soon as its
 * reduction is known complete ---- */

static struct {
    int n;         /* all-reduces started                          */
    int done_upto; /* the first n of them have completed (tests)   */
    int told[MAX_CALLS];
    int n_told;
    int started_at_tell[MAX_CALLS]; /* all-reduces started when told */
} g_slow;

/* an all-reduce that completes when the test says (done_upto) or is waited for */
static void slow_iallreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op, tri_req *r) {
    (void)c, (void)buf, (void)n, (void)t, (void)op;
    cr_assert(g_slow.n < MAX_CALLS);
    memcpy(r->opaque, &g_slow.n, sizeof g_slow.n);
    g_slow.n++;
    r->active = 1;
}

static int slow_test(tri_comm *c, tri_req *r) {
    (void)c;
    int i;
    memcpy(&i, r->opaque, sizeof i);
    return i < g_slow.done_upto;
}

static const tri_comm_impl SLOW = {.name = "slow", .iallreduce = slow_iallreduce, .wait = rec_wait, .test = slow_test};

static void hook(void *ctx, int b) {
    (void)ctx;
    cr_assert(g_slow.n_told < MAX_CALLS);
    g_slow.started_at_tell[g_slow.n_told] = g_slow.n;
    g_slow.told[g_slow.n_told++] = b;
}

/* told so far, in order, are buckets first, first + 1, ... */
static void expect_told(const char *when, int first, int count) {
    cr_expect_eq(g_slow.n_told, count, "%s: %d buckets told, want %d", when, g_slow.n_told, count);
    for (int i = 0; i < g_slow.n_told && i < count; i++)
        cr_expect_eq(g_slow.told[i], first + i, "%s: told %d-th bucket %d, want %d", when, i, g_slow.told[i],
                     first + i);
}

Test(grad_sync, the_bucket_hook_is_told_once_each_reduction_is_done_in_bucket_order) {
    memset(&g_slow, 0, sizeof g_slow);
    enum { N = 4096 };
    float *grads = calloc(N, sizeof(float));
    tri_comm dp = {.size = 2, .rank = 0, .impl = &SLOW};
    tri_grad_sync s;
    cr_assert_eq(tri_grad_sync_init(&s, grads, N, &dp, 0.001), 0); /* buckets of 262 floats */
    cr_assert_eq(tri_grad_sync_on_bucket(&s, hook, NULL), 0);
    cr_assert_gt(s.n_buckets, 10);
    int half = 0; /* the buckets inside the first half */
    while (s.bounds[half + 1] <= N / 2) half++;
    for (int step = 0; step < 2; step++) {
        g_slow.n = g_slow.done_upto = g_slow.n_told = 0;
        tri_grad_sync_begin(&s);
        tri_grad_sync_ready(&s, N); /* not the last micro-batch: nothing */
        expect_told("before the last micro-batch", 0, 0);
        tri_grad_sync_set_last(&s, 1);
        tri_grad_sync_ready(&s, N / 2);
        cr_expect_eq(g_slow.n, half);
        expect_told("started, none done", 0, 0);
        g_slow.done_upto = 3;
        tri_grad_sync_ready(&s, N / 2);
        expect_told("three done", 0, 3);
        tri_grad_sync_ready(&s, N); /* the rest start; none of them done yet */
        cr_expect_eq(g_slow.n, s.n_buckets);
        expect_told("all started, three done", 0, 3);
        tri_grad_sync_finish(&s); /* waits: the rest told, in order */
        expect_told("finished", 0, s.n_buckets);
        for (int i = 0; i < g_slow.n_told; i++)
            cr_expect_gt(g_slow.started_at_tell[i], g_slow.told[i], "bucket %d told before its all-reduce started",
                         g_slow.told[i]);
        for (int b = 0; b < s.n_buckets; b++) cr_expect(tri_grad_sync_told(&s, b));
    }
    tri_grad_sync_free(&s);
    free(grads);
}

/* Without ZeRO a range given to tri_grad_sync_defer (the tied embedding,
 * summed over the embedding group after the reduction) changes nothing in
 * the reduction, and its buckets are never told. */
Test(grad_sync, held_buckets_are_reduced_but_never_told_without_zero) {
    memset(&g_slow, 0, sizeof g_slow);
    enum { N = 4096 };
    float *grads = calloc(N, sizeof(float));
    tri_comm dp = {.size = 2, .rank = 0, .impl = &SLOW};
    tri_grad_sync s;
    cr_assert_eq(tri_grad_sync_init(&s, grads, N, &dp, 0.001), 0);
    cr_assert_eq(tri_grad_sync_on_bucket(&s, hook, NULL), 0);
    tri_grad_sync_defer(&s, s.bounds[2] + 5, s.bounds[4] - 5); /* buckets 2 and 3 */
    tri_grad_sync_begin(&s);
    tri_grad_sync_set_last(&s, 1);
    g_slow.done_upto = MAX_CALLS;
    tri_grad_sync_ready(&s, N);
    tri_grad_sync_finish(&s);
    tri_grad_sync_finish_deferred(&s);
    cr_expect_eq(g_slow.n, s.n_buckets, "every bucket is all-reduced");
    cr_expect_eq(g_slow.n_told, s.n_buckets - 2);
    for (int i = 0; i < g_slow.n_told; i++) {
        cr_expect(g_slow.told[i] != 2 && g_slow.told[i] != 3, "held bucket %d told", g_slow.told[i]);
        cr_expect(i == 0 || g_slow.told[i] > g_slow.told[i - 1], "out of order");
    }
    tri_grad_sync_free(&s);
    free(grads);
}

/* At dp = 1 nothing is sent: each bucket is told as the backward reports it
 * final; under ZeRO a deferred bucket only by tri_grad_sync_finish_deferred. */
Test(grad_sync, at_one_rank_buckets_are_told_as_they_become_final) {
    memset(&g_slow, 0, sizeof g_slow);
    enum { N = 4096 };
    float *grads = calloc(N, sizeof(float)), *params = calloc(N, sizeof(float));
    tri_comm self;
    tri_comm_init_self(&self, 0);
    for (int zero = 0; zero < 2; zero++) {
        g_slow.n_told = 0;
        tri_grad_sync s;
        if (zero)
            cr_assert_eq(tri_grad_sync_init_zero(&s, grads, params, TRI_F32, N - 16, N, &self, 0.001), 0);
        else
            cr_assert_eq(tri_grad_sync_init(&s, grads, N, &self, 0.001), 0);
        cr_assert_eq(tri_grad_sync_on_bucket(&s, hook, NULL), 0);
        if (zero) tri_grad_sync_defer(&s, s.bounds[s.n_buckets - 1], N); /* the last bucket */
        tri_grad_sync_begin(&s);
        tri_grad_sync_set_last(&s, 1);
        for (int b = 0; b < s.n_buckets - 1; b++) {
            tri_grad_sync_ready(&s, s.bounds[b + 1] - 1);
            expect_told("one float short of the next bucket", 0, b);
            tri_grad_sync_ready(&s, s.bounds[b + 1]);
            expect_told("a bucket final", 0, b + 1);
        }
        tri_grad_sync_ready(&s, zero ? N - 16 : N); /* (ZeRO: the model's length; the padding is final too) */
        tri_grad_sync_finish(&s);
        expect_told("finished", 0, s.n_buckets - zero);
        tri_grad_sync_finish_deferred(&s);
        expect_told("deferred finished", 0, s.n_buckets);
        tri_grad_sync_free(&s);
    }
    free(grads);
    free(params);
}

/* ---- ZeRO-3's units (src/train/zero_units.c): the buckets cut again on
 * given offsets, and a run of whole buckets gathered into its own buffer ---- */

Test(grad_sync, recut_puts_bucket_edges_around_every_cut) {
    memset(&g_ag, 0, sizeof g_ag);
    tri_comm dp = {.size = 4, .rank = 1, .impl = &AG};
    const size_t a = 4 * TRI_ZERO_ALIGN, n_floats = 100 * a, n_shard = n_floats / 4;
    float *grads = calloc(n_floats, sizeof(float)), *pshard = malloc(n_shard * sizeof(float));
    for (size_t i = 0; i < n_shard; i++) pshard[i] = (float)i + 0.5f;
    tri_grad_sync s;
    cr_assert_eq(tri_grad_sync_init_zero(&s, grads, NULL, TRI_F32, n_floats, n_floats, &dp, 0.004), 0);
    const size_t per = 1088; /* 0.004 MiB = 1048.6 floats, up to a multiple of 64 */
    const size_t cuts[] = {3000, 100, 1280, n_floats, 0, 1281};
    cr_assert_eq(tri_grad_sync_recut(&s, cuts, 6, 0.004), 0);
    cr_expect_eq(s.bounds[0], 0);
    cr_expect_eq(s.bounds[s.n_buckets], n_floats);
    for (int b = 0; b < s.n_buckets; b++) {
        size_t len = s.bounds[b + 1] - s.bounds[b];
        cr_expect(len > 0 && len % a == 0 && len <= per, "bucket %d: [%zu, %zu)", b, s.bounds[b], s.bounds[b + 1]);
    }
    /* each cut's aligned neighbours are edges (1280 is aligned: one edge) */
    for (int i = 0; i < 6; i++) {
        size_t want[2] = {cuts[i] / a * a, (cuts[i] + a - 1) / a * a};
        for (int j = 0; j < 2; j++) {
            int found = 0;
            for (int b = 0; b <= s.n_buckets; b++) found |= s.bounds[b] == want[j];
            cr_expect(found, "no bucket edge at %zu (around the cut %zu)", want[j], cuts[i]);
        }
    }
    /* edges 0, 64, 128, 1280, 1344, 2944, 3008, 6400 and buckets of 1088
     * between: 1 + 1 + 2 (1152) + 1 + 2 (1600) + 1 + 4 (3392) */
    cr_expect_eq(s.n_buckets, 12);
    /* a window [64, 3008): its buckets gathered into a buffer of its own,
     * each bucket where a full gather would put it */
    int b0 = -1, b1 = -1;
    for (int b = 0; b <= s.n_buckets; b++) {
        if (s.bounds[b] == 64) b0 = b;
        if (s.bounds[b] == 3008) b1 = b;
    }
    cr_assert(b0 >= 0 && b1 > b0);
    tri_grad_sync_set_pshard(&s, pshard);
    float *win = malloc((3008 - 64) * sizeof(float));
    tri_req reqs[16] = {0};
    for (int b = b0; b < b1; b++) tri_grad_sync_gather_into(&s, b, win + (s.bounds[b] - 64), &reqs[b - b0]);
    for (int b = b0; b < b1; b++) tri_comm_wait(&dp, &reqs[b - b0]);
    cr_expect_eq(g_ag.n, b1 - b0);
    size_t at = 0;
    for (int b = 0; b < s.n_buckets; b++) {
        size_t lo, hi;
        tri_grad_sync_shard(&s, b, &lo, &hi);
        if (b >= b0 && b < b1) {
            cr_expect_eq(g_ag.calls[b - b0].send, pshard + s.bounds[b] / 4, "bucket %d's input", b);
            for (size_t i = s.bounds[b]; i < s.bounds[b + 1]; i++) {
                float want = i >= lo && i < hi ? pshard[at + (i - lo)] : 7.0f;
                if (win[i - 64] != want) {
                    cr_expect(0, "element %zu (bucket %d) is %g, not %g", i, b, win[i - 64], want);
                    break;
                }
            }
        }
        at += hi - lo;
    }
    tri_grad_sync_free(&s);
    free(win);
    free(grads);
    free(pshard);
}
