/* The pipeline executor (parallel/pipeline.c) over a fake stage, every
 * stage a thread of this process, against the simulator (parallel/schedule.h).
 *
 * The fake stage (tri_stage_ops) computes nothing: each callback checks what
 * it is given and records what it was asked to do. A chunk boundary is four
 * floats naming what it carries: {model chunk, micro-batch, ACT or GRAD,
 * the stage that wrote it}; a forward learns its micro-batch from its input
 * (or, on the first chunk, from the ids the loader staged), so a message
 * delivered to the wrong chunk or micro-batch shows in the record. The
 * stages talk through an in-process transport (tri_comm_impl) whose sends
 * complete only when their receive has taken them (the strictest an MPI or
 * NCCL send may be), matched in posting order per (sender, receiver, tag).
 *
 * For every schedule kind over several pp, vpp and micro-batch counts, each
 * stage's record (the compute callbacks and the sends and receives it posted,
 * with peer, tag and micro-batch) must equal its list minus the REDUCEs; the
 * saved slots alive per chunk must never exceed (each pool holds exactly the
 * simulator's peak: one more acquire returns NULL and stops the executor)
 * and must reach the simulator's peak_chunk; every slot is released after
 * its last backward; the loss comes back from the last stage only; each
 * chunk's data-parallel reduction (a recording DP group of two) starts in
 * the chunk's last backward (its last W under ZB-H1), once per step, and is
 * waited for at the chunk's REDUCE. Each
 * configuration runs two training steps, an evaluation (the FORWARD list
 * with as many micro-batches and chunks, one slot at a time) and a third
 * step on one executor, as the trainer does. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/ctx.h"
#include "parallel/comm.h"
#include "parallel/grad_sync.h"
#include "parallel/pipeline.h"
#include "parallel/schedule.h"

enum { BOUND = 4, ACT = 1, GRAD = 2, MAX_STAGES = 8, MAX_VPP = 4, WAIT_S = 30, DP_FLOATS = 16 };

/* ---- one stage's record ---- */

typedef struct event {
    tri_act_kind kind;
    int mb, chunk; /* compute; chunk -1 for messages (their tag names it) */
    int peer, tag; /* messages; -1 for compute                          */
} event;

typedef struct record {
    event *e;
    int n, cap;
    char err[512]; /* the first thing a callback found wrong; "" if none */
} record;

static void rec_add(record *r, event e) {
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->e = realloc(r->e, (size_t)r->cap * sizeof *r->e);
        if (!r->e) abort();
    }
    r->e[r->n++] = e;
}

static void rec_fail(record *r, const char *fmt, ...) {
    if (r->err[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

/* ---- the in-process transport: every message of every stage in one hub ---- */

typedef struct message {
    int src, dst, tag, taken;
    float data[BOUND];
} message;

typedef struct hub {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    message *m;
    int n, cap;
    record *rec; /* [pp]: the stage's record, where its posts go */
} hub;

static hub *hub_of(const tri_comm *c) { return c->handle; }

static void deadline(struct timespec *ts) {
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += WAIT_S;
}

/* A wait that does not end is a deadlock of the executor: say so and stop. */
static void hub_wait(hub *h, const tri_comm *c, const tri_req *r) {
    struct timespec ts;
    deadline(&ts);
    if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) == ETIMEDOUT) {
        fprintf(stderr, "test_pipeline: stage %d waited %d s for its %s (peer %d, tag %d)\n", c->rank, WAIT_S, r->op,
                r->peer, r->tag);
        abort();
    }
}

static void fake_isend(tri_comm *c, const void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r) {
    hub *h = hub_of(c);
    if (n != BOUND || t != TRI_F32) abort(); /* (Criterion's asserts belong to the main thread) */
    pthread_mutex_lock(&h->mu);
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 256;
        h->m = realloc(h->m, (size_t)h->cap * sizeof *h->m);
        if (!h->m) abort();
    }
    int id = h->n++;
    message *m = &h->m[id];
    memset(m, 0, sizeof *m);
    m->src = c->rank;
    m->dst = peer;
    m->tag = tag;
    memcpy(m->data, buf, sizeof m->data);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    /* which direction: the executor's tags are 2j (activations) and 2j + 1 (gradients) */
    const float *f = buf;
    tri_act_kind k = tag % 2 == 0 ? TRI_ACT_SEND_ACT : TRI_ACT_SEND_GRAD;
    if (f[2] != (k == TRI_ACT_SEND_ACT ? ACT : GRAD))
        rec_fail(&h->rec[c->rank], "a send with tag %d carries no %s", tag,
                 k == TRI_ACT_SEND_ACT ? "activation" : "gradient");
    rec_add(&h->rec[c->rank], (event){k, (int)f[1], -1, peer, tag});
    memcpy(r->opaque, &id, sizeof id);
    r->active = 1;
    r->op = "send";
    r->peer = peer;
    r->tag = tag;
    r->bytes = n * sizeof(float);
}

static void fake_irecv(tri_comm *c, void *buf, size_t n, tri_dtype t, int peer, int tag, tri_req *r) {
    hub *h = hub_of(c);
    if (n != BOUND || t != TRI_F32) abort();
    record *rec = &h->rec[c->rank];
    /* which direction: the executor's tags are 2j (activations) and 2j + 1 (gradients) */
    rec_add(rec, (event){tag % 2 == 0 ? TRI_ACT_RECV_ACT : TRI_ACT_RECV_GRAD, -1, -1, peer, tag});
    int at = rec->n - 1; /* its micro-batch is known when it arrives */
    memcpy(r->opaque, &buf, sizeof buf);
    memcpy(r->opaque + sizeof buf, &at, sizeof at);
    r->active = 1;
    r->op = "receive";
    r->peer = peer;
    r->tag = tag;
    r->bytes = n * sizeof(float);
}

/* The first message from peer to this rank with tag that no receive took. */
static message *oldest(hub *h, const tri_comm *c, const tri_req *r) {
    for (int i = 0; i < h->n; i++) {
        message *m = &h->m[i];
        if (!m->taken && m->src == r->peer && m->dst == c->rank && m->tag == r->tag) return m;
    }
    return NULL;
}

static void fake_wait(tri_comm *c, tri_req *r) {
    hub *h = hub_of(c);
    pthread_mutex_lock(&h->mu);
    if (strcmp(r->op, "send") == 0) {
        int id;
        memcpy(&id, r->opaque, sizeof id);
        while (!h->m[id].taken) hub_wait(h, c, r);
    } else {
        float *buf;
        int at;
        memcpy(&buf, r->opaque, sizeof buf);
        memcpy(&at, r->opaque + sizeof buf, sizeof at);
        message *m;
        while ((m = oldest(h, c, r)) == NULL) hub_wait(h, c, r);
        m->taken = 1;
        memcpy(buf, m->data, sizeof m->data);
        h->rec[c->rank].e[at].mb = (int)m->data[1];
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    r->active = 0;
}

/* The executor tests only its sends. */
static int fake_test(tri_comm *c, tri_req *r) {
    hub *h = hub_of(c);
    if (strcmp(r->op, "send") != 0) abort();
    int id;
    memcpy(&id, r->opaque, sizeof id);
    pthread_mutex_lock(&h->mu);
    int done = h->m[id].taken;
    pthread_mutex_unlock(&h->mu);
    if (done) r->active = 0;
    return done;
}

static const tri_comm_impl FAKE = {
    .name = "in-process", .isend = fake_isend, .irecv = fake_irecv, .wait = fake_wait, .test = fake_test};

/* ---- the fake stage ---- */

typedef struct fake_slot {
    int chunk, in_use;
    int ids_mb, tg_mb; /* what stage_batch staged, -1 for none          */
    int mb;            /* set by the forward                             */
    int b_done, w_done;
} fake_slot;

typedef struct fake_stage {
    int stage, pp, vpp;
    unsigned char ends[MAX_VPP];
    fake_slot slots[MAX_VPP][64]; /* chunk c's pool: its first cap[c] */
    int cap[MAX_VPP];
    int live[MAX_VPP], peak[MAX_VPP];
    tri_pipe_mode mode; /* what the run in progress must pass */
    float dscale;
    float out[BOUND], dx[BOUND]; /* what the last forward and backward left */
    int32_t ids[1], targets[1];  /* the host batch the loader fills      */
    int loads, fail_at;          /* load calls; the micro-batch whose load fails (-1: none) */
    record *rec;
    /* each chunk's DP reduction: one bucket over a recording group */
    tri_grad_sync *sync;                       /* [vpp]; NULL: none (evaluation) */
    int dp_starts[MAX_VPP], dp_after[MAX_VPP]; /* starts this step; the record index of the event it followed */
} fake_stage;

static int model_chunk(const fake_stage *f, int c) { return c * f->pp + f->stage; }

static void *fake_acquire(void *stage, int c) {
    fake_stage *f = stage;
    for (int i = 0; i < f->cap[c]; i++) {
        fake_slot *s = &f->slots[c][i];
        if (s->in_use) continue;
        memset(s, 0, sizeof *s);
        s->chunk = c;
        s->in_use = 1;
        s->ids_mb = s->tg_mb = s->mb = -1;
        if (++f->live[c] > f->peak[c]) f->peak[c] = f->live[c];
        return s;
    }
    return NULL; /* the executor stops here: more alive than the simulator's peak */
}

static void fake_release(void *stage, int c, void *slot) {
    fake_stage *f = stage;
    fake_slot *s = slot;
    if (s->chunk != c || !s->in_use) rec_fail(f->rec, "release of a slot not taken from chunk %d", c);
    int done = f->mode == TRI_PIPE_LOSS || s->w_done || s->mb < 0;
    if (!done) rec_fail(f->rec, "chunk %d mb %d: slot released before its backward finished", c, s->mb);
    s->in_use = 0;
    f->live[c]--;
}

static void fake_stage_batch(void *stage, int c, void *slot, const int32_t *ids, const int32_t *targets) {
    fake_stage *f = stage;
    fake_slot *s = slot;
    int first = (f->ends[c] & TRI_PIPE_FIRST) != 0, last = (f->ends[c] & TRI_PIPE_LAST) != 0;
    if ((ids != NULL) != first || (targets != NULL) != last)
        rec_fail(f->rec, "chunk %d: ids %s and targets %s staged", c, ids ? "were" : "not", targets ? "were" : "not");
    s->ids_mb = ids ? ids[0] : -1;
    s->tg_mb = targets ? targets[0] : -1;
}

/* The loss of micro-batch mb at the last chunk: a sum of them is exact. */
static double loss_of(int mb) { return 1.0 + mb; }

static double fake_forward(void *stage, int c, void *slot, const void *x, tri_pipe_mode mode, float dscale) {
    fake_stage *f = stage;
    fake_slot *s = slot;
    int j = model_chunk(f, c), mb;
    if (mode != f->mode || dscale != f->dscale) rec_fail(f->rec, "forward of chunk %d: wrong mode or dscale", c);
    if (f->ends[c] & TRI_PIPE_FIRST) {
        if (x) rec_fail(f->rec, "forward of first chunk %d given an input", c);
        mb = s->ids_mb;
    } else {
        const float *in = x;
        if (!in || in[0] != j - 1 || in[2] != ACT)
            rec_fail(f->rec, "forward of model chunk %d: input is not model chunk %d's output", j, j - 1);
        mb = in ? (int)in[1] : -1;
    }
    if ((f->ends[c] & TRI_PIPE_LAST) && s->tg_mb != mb)
        rec_fail(f->rec, "forward of chunk %d mb %d: targets of mb %d staged", c, mb, s->tg_mb);
    s->mb = mb;
    rec_add(f->rec, (event){TRI_ACT_FWD, mb, c, -1, -1});
    float out[BOUND] = {(float)j, (float)mb, ACT, (float)f->stage};
    memcpy(f->out, out, sizeof out);
    return (f->ends[c] & TRI_PIPE_LAST) ? loss_of(mb) : 0.0;
}

static void backward_common(fake_stage *f, int c, fake_slot *s, const void *dy, tri_act_kind k) {
    int j = model_chunk(f, c);
    if (f->mode != TRI_PIPE_TRAIN || s->b_done || s->mb < 0)
        rec_fail(f->rec, "%s of chunk %d mb %d: not after one training forward", tri_act_name(k), c, s->mb);
    if (f->ends[c] & TRI_PIPE_LAST) {
        if (dy) rec_fail(f->rec, "backward of last chunk %d given an output gradient", c);
    } else {
        const float *g = dy;
        if (!g || g[0] != j + 1 || g[1] != s->mb || g[2] != GRAD)
            rec_fail(f->rec, "%s of model chunk %d mb %d: output gradient is not model chunk %d's of that mb",
                     tri_act_name(k), j, s->mb, j + 1);
    }
    s->b_done = 1;
    rec_add(f->rec, (event){k, s->mb, c, -1, -1});
    float dx[BOUND] = {(float)j, (float)s->mb, GRAD, (float)f->stage};
    memcpy(f->dx, dx, sizeof dx);
}

/* A full backward and a W finish the chunk's gradients (as the runtime's
 * grads_ready hook reports them); B never does. */
static void grads_final(fake_stage *f, int c) {
    if (f->sync) tri_grad_sync_ready(&f->sync[c], DP_FLOATS);
}

static void fake_backward(void *stage, int c, void *slot, const void *dy) {
    fake_slot *s = slot;
    backward_common(stage, c, s, dy, TRI_ACT_BWD);
    s->w_done = 1;
    grads_final(stage, c);
}

static void fake_backward_input(void *stage, int c, void *slot, const void *dy) {
    backward_common(stage, c, slot, dy, TRI_ACT_BWD_IN);
}

static void fake_backward_weight(void *stage, int c, void *slot) {
    fake_stage *f = stage;
    fake_slot *s = slot;
    if (!s->b_done || s->w_done) rec_fail(f->rec, "W of chunk %d mb %d: not once after its B", c, s->mb);
    s->w_done = 1;
    rec_add(f->rec, (event){TRI_ACT_BWD_W, s->mb, c, -1, -1});
    grads_final(f, c);
}

static void fake_copy_act(void *stage, void *dst) {
    fake_stage *f = stage;
    memcpy(dst, f->out, sizeof f->out);
}

static void fake_copy_grad(void *stage, void *dst) {
    fake_stage *f = stage;
    memcpy(dst, f->dx, sizeof f->dx);
}

static const tri_stage_ops FAKE_STAGE = {
    .acquire = fake_acquire,
    .release = fake_release,
    .stage_batch = fake_stage_batch,
    .forward = fake_forward,
    .backward = fake_backward,
    .backward_input = fake_backward_input,
    .backward_weight = fake_backward_weight,
    .copy_act = fake_copy_act,
    .copy_grad = fake_copy_grad,
};

/* ---- the DP group of one chunk: records when its reduction starts and ends ---- */

typedef struct dp_group {
    fake_stage *f;
    int chunk;
} dp_group;

static void dp_iallreduce(tri_comm *c, void *buf, size_t n, tri_dtype t, tri_redop op, tri_req *r) {
    dp_group *g = c->handle;
    g->f->dp_starts[g->chunk]++;
    g->f->dp_after[g->chunk] = g->f->rec->n - 1;
    r->active = 1;
}

/* The wait is the REDUCE of the list. */
static void dp_wait(tri_comm *c, tri_req *r) {
    dp_group *g = c->handle;
    rec_add(g->f->rec, (event){TRI_ACT_REDUCE, -1, g->chunk, -1, -1});
    r->active = 0;
}

static const tri_comm_impl DP_RECORDER = {.name = "dp-recorder", .iallreduce = dp_iallreduce, .wait = dp_wait};

static int fake_load(void *ctx, int mb) {
    fake_stage *f = ctx;
    f->loads++;
    if (mb == f->fail_at) return -1;
    f->ids[0] = f->targets[0] = mb;
    return 0;
}

/* ---- checking a record against a list ---- */

/* The tag of a message action of stage s (docs/parallelism.md): 2j for the
 * activation into model chunk j, 2j + 1 for the gradient of chunk j's output. */
static int want_tag(const tri_action *a, int s, int pp) {
    int j = a->chunk * pp + s;
    switch (a->kind) {
    case TRI_ACT_SEND_ACT: return 2 * (j + 1);
    case TRI_ACT_RECV_ACT: return 2 * j;
    case TRI_ACT_SEND_GRAD: return 2 * (j - 1) + 1;
    case TRI_ACT_RECV_GRAD: return 2 * j + 1;
    default: return -1;
    }
}

/* "" when record r is stage s's list a[0..n), else the first difference. */
static void compare(const record *r, const tri_action *a, int n, int s, int pp, char *why, size_t len) {
    why[0] = '\0';
    int k = 0;
    char want[128], got[128];
    for (int i = 0; i < n; i++) {
        const tri_action *x = &a[i];
        tri_action_str(x, want, sizeof want);
        if (k == r->n) {
            snprintf(why, len, "action %d (%s) never ran", i, want);
            return;
        }
        const event *e = &r->e[k++];
        int msg = x->kind >= TRI_ACT_SEND_ACT && x->kind <= TRI_ACT_RECV_GRAD;
        int same = e->kind == x->kind && e->mb == x->mb &&
                   (msg ? e->peer == x->peer && e->tag == want_tag(x, s, pp) : e->chunk == x->chunk);
        if (!same) {
            tri_action got_a = {e->kind, e->mb, e->chunk < 0 ? x->chunk : e->chunk, e->peer};
            tri_action_str(&got_a, got, sizeof got);
            snprintf(why, len, "action %d: the list has %s (tag %d), the executor did %s (tag %d)", i, want,
                     want_tag(x, s, pp), got, e->tag);
            return;
        }
    }
    if (k < r->n) snprintf(why, len, "%d actions more than the list", r->n - k);
}

/* "" when each chunk's DP reduction started once, in its last backward (the
 * chunk's last BWD or BWD_W in list a[0..n), which the record equals entry
 * for entry), else what went wrong. */
static void compare_dp(const fake_stage *f, const tri_action *a, int n, char *why, size_t len) {
    why[0] = '\0';
    for (int c = 0; c < f->vpp; c++) {
        int last = -1;
        for (int i = 0; i < n; i++)
            if ((a[i].kind == TRI_ACT_BWD || a[i].kind == TRI_ACT_BWD_W) && a[i].chunk == c) last = i;
        if (f->dp_starts[c] != 1) {
            snprintf(why, len, "chunk %d: its DP reduction started %d times in the step", c, f->dp_starts[c]);
            return;
        }
        if (f->dp_after[c] != last) {
            snprintf(why, len, "chunk %d: its DP reduction started after action %d, not in its last backward (%d)", c,
                     f->dp_after[c], last);
            return;
        }
    }
}

/* ---- one configuration: every stage a thread ---- */

typedef struct config {
    tri_sched_kind kind;
    int pp, vpp, m;
    int short_pool; /* test only: stage 0's chunk 0 pool one slot below the peak */
} config;

typedef struct stage_run {
    const config *cf;
    const tri_schedule *train, *eval;
    const tri_sim_result *sim_train;
    tri_comm comm;
    tri_ctx ctx;
    fake_stage f; /* f.rec: the hub's record of this stage */
    char err[1024];
    double loss_train[2], loss_eval;
    int boxes_left; /* mailbox entries still taken after a run */
} stage_run;

static void check_run(stage_run *sr, const tri_pipe *p, const tri_schedule *s, const char *what) {
    fake_stage *f = &sr->f;
    if (sr->err[0]) return;
    if (f->rec->err[0]) {
        snprintf(sr->err, sizeof sr->err, "%s: %s", what, f->rec->err);
        return;
    }
    char why[512];
    compare(f->rec, s->a[f->stage], s->n[f->stage], f->stage, f->pp, why, sizeof why);
    if (!why[0] && f->sync) compare_dp(f, s->a[f->stage], s->n[f->stage], why, sizeof why);
    if (why[0]) {
        snprintf(sr->err, sizeof sr->err, "%s: %s", what, why);
        return;
    }
    for (int c = 0; c < f->vpp; c++)
        if (f->live[c] != 0) {
            snprintf(sr->err, sizeof sr->err, "%s: chunk %d: %d slots never released", what, c, f->live[c]);
            return;
        }
    for (int i = 0; i < p->n_box; i++)
        if (p->box[i].key != -1) sr->boxes_left++;
}

static void *stage_main(void *arg) {
    stage_run *sr = arg;
    fake_stage *f = &sr->f;
    tri_pipe_stage view = {
        .ops = &FAKE_STAGE, .stage = f, .n_chunks = f->vpp, .ctx = &sr->ctx, .boundary_elems = BOUND, .dtype = TRI_F32};
    memcpy(view.ends, f->ends, sizeof f->ends);
    tri_progress progress = {0};
    /* each chunk's gradients, reduced over a DP group of two that records */
    float grads[MAX_VPP][DP_FLOATS];
    dp_group groups[MAX_VPP];
    tri_comm dp[MAX_VPP];
    tri_grad_sync sync[MAX_VPP];
    for (int c = 0; c < f->vpp; c++) {
        groups[c] = (dp_group){f, c};
        dp[c] = (tri_comm){.size = 2, .rank = 0, .world_rank = f->stage, .impl = &DP_RECORDER, .handle = &groups[c]};
        if (tri_grad_sync_init(&sync[c], grads[c], DP_FLOATS, &dp[c], 0.0) != 0) abort();
    }
    tri_pipe p;
    const tri_schedule *scheds[2] = {sr->train, sr->eval};
    if (tri_pipe_init(&p, &view, &sr->comm, &progress, scheds, 2) != 0) {
        snprintf(sr->err, sizeof sr->err, "tri_pipe_init failed");
        return NULL;
    }
    /* two training steps, an evaluation, a third step: the executor's state
     * (slots, mailbox, pending sends) must carry nothing from one to the next */
    tri_pipe_mode modes[4] = {TRI_PIPE_TRAIN, TRI_PIPE_TRAIN, TRI_PIPE_LOSS, TRI_PIPE_TRAIN};
    for (int r = 0; r < 4; r++) {
        const tri_schedule *s = modes[r] == TRI_PIPE_TRAIN ? sr->train : sr->eval;
        f->rec->n = 0;
        memset(f->peak, 0, sizeof f->peak);
        f->mode = modes[r];
        f->dscale = modes[r] == TRI_PIPE_TRAIN ? 0.25f : 0.0f;
        f->sync = modes[r] == TRI_PIPE_TRAIN ? sync : NULL;
        memset(f->dp_starts, 0, sizeof f->dp_starts);
        for (int c = 0; f->sync && c < f->vpp; c++) tri_grad_sync_begin(&sync[c]);
        double loss = tri_pipe_run(&p, s, modes[r], f->dscale, f->sync, fake_load, f, f->ids, f->targets);
        char what[64];
        snprintf(what, sizeof what, "run %d (%s)", r + 1, modes[r] == TRI_PIPE_TRAIN ? "train" : "eval");
        check_run(sr, &p, s, what);
        if (r == 0 || r == 1) sr->loss_train[r] = loss;
        if (r == 2) sr->loss_eval = loss;
        if (modes[r] == TRI_PIPE_TRAIN)
            for (int c = 0; c < f->vpp && !sr->err[0]; c++) {
                int want = sr->sim_train->peak_chunk[f->stage * f->vpp + c];
                if (f->peak[c] != want)
                    snprintf(sr->err, sizeof sr->err, "%s: chunk %d: %d slots alive at the peak, the simulator says %d",
                             what, c, f->peak[c], want);
            }
        if (r == 2)
            for (int c = 0; c < f->vpp && !sr->err[0]; c++)
                if (f->peak[c] != 1)
                    snprintf(sr->err, sizeof sr->err, "eval: chunk %d: %d slots alive at once", c, f->peak[c]);
    }
    tri_pipe_free(&p);
    for (int c = 0; c < f->vpp; c++) tri_grad_sync_free(&sync[c]);
    return NULL;
}

/* Runs cf on pp threads and checks each stage. */
static void run_config(const config *cf) {
    char name[96];
    snprintf(name, sizeof name, "%s pp %d vpp %d m %d", tri_sched_name(cf->kind), cf->pp, cf->vpp, cf->m);
    cr_assert(cf->pp <= MAX_STAGES && cf->vpp <= MAX_VPP);
    tri_schedule train, eval;
    cr_assert_eq(tri_schedule_build(&train, cf->kind, cf->pp, cf->vpp, cf->m), 0, "%s", name);
    cr_assert_eq(tri_schedule_build(&eval, TRI_SCHED_FORWARD, cf->pp, cf->vpp, cf->m), 0, "%s", name);
    tri_sim_result sim;
    tri_sim_costs unit = {1.0, 1.0, 1.0};
    cr_assert_eq(tri_schedule_simulate(&train, unit, &sim), 0);
    cr_assert(!sim.deadlock && !sim.invalid, "%s: %s", name, sim.why);

    hub h;
    memset(&h, 0, sizeof h);
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    stage_run *sr = calloc((size_t)cf->pp, sizeof *sr);
    h.rec = calloc((size_t)cf->pp, sizeof *h.rec);
    cr_assert(sr && h.rec);
    for (int s = 0; s < cf->pp; s++) {
        stage_run *x = &sr[s];
        x->cf = cf;
        x->train = &train;
        x->eval = &eval;
        x->sim_train = &sim;
        x->comm = (tri_comm){.size = cf->pp, .rank = s, .world_rank = s, .impl = &FAKE, .handle = &h};
        cr_assert_eq(tri_ctx_init(&x->ctx, "cpu", 1), 0);
        fake_stage *f = &x->f;
        f->stage = s;
        f->pp = cf->pp;
        f->vpp = cf->vpp;
        f->fail_at = -1;
        f->rec = &h.rec[s];
        for (int c = 0; c < cf->vpp; c++) {
            int j = c * cf->pp + s;
            f->ends[c] =
                (unsigned char)((j == 0 ? TRI_PIPE_FIRST : 0) | (j == cf->pp * cf->vpp - 1 ? TRI_PIPE_LAST : 0));
            /* the trainer's pools: the simulator's peak of the training list (>= 1) */
            int peak = sim.peak_chunk[s * cf->vpp + c];
            f->cap[c] = peak > 1 ? peak : 1;
            cr_assert(f->cap[c] <= 64);
        }
        if (cf->short_pool && s == 0) f->cap[0]--;
    }
    pthread_t th[MAX_STAGES];
    for (int s = 0; s < cf->pp; s++) cr_assert_eq(pthread_create(&th[s], NULL, stage_main, &sr[s]), 0);
    for (int s = 0; s < cf->pp; s++) pthread_join(th[s], NULL);

    for (int s = 0; s < cf->pp; s++) {
        stage_run *x = &sr[s];
        cr_expect(x->err[0] == '\0', "%s, stage %d: %s", name, s, x->err);
        cr_expect_eq(x->boxes_left, 0, "%s, stage %d: %d mailbox entries left taken after the runs", name, s,
                     x->boxes_left);
        /* the loss comes from the stage holding the last model chunk only */
        double want = 0.0;
        if (s == cf->pp - 1)
            for (int mb = 0; mb < cf->m; mb++) want += loss_of(mb);
        for (int r = 0; r < 2; r++)
            cr_expect(x->loss_train[r] == want, "%s, stage %d, step %d: loss %g, want %g", name, s, r + 1,
                      x->loss_train[r], want);
        cr_expect(x->loss_eval == want, "%s, stage %d, eval: loss %g, want %g", name, s, x->loss_eval, want);
        /* the loader runs once per forward of a first or last chunk */
        int ends = 0;
        for (int c = 0; c < cf->vpp; c++) ends += x->f.ends[c] != 0;
        cr_expect_eq(x->f.loads, 4 * cf->m * ends, "%s, stage %d: %d loads", name, s, x->f.loads);
        free(h.rec[s].e);
        tri_ctx_free(&x->ctx);
    }
    free(sr);
    free(h.rec);
    free(h.m);
    pthread_mutex_destroy(&h.mu);
    pthread_cond_destroy(&h.cv);
    tri_sim_result_free(&sim);
    tri_schedule_free(&train);
    tri_schedule_free(&eval);
}

static void sweep(tri_sched_kind kind) {
    static const int ms[] = {1, 2, 3, 4, 5, 8};
    for (int pp = 1; pp <= 4; pp++)
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) run_config(&(config){kind, pp, 1, ms[i], 0});
}

Test(pipeline, one_f_one_b_follows_the_list_at_the_simulated_peaks) { sweep(TRI_SCHED_1F1B); }

Test(pipeline, gpipe_follows_the_list_at_the_simulated_peaks) { sweep(TRI_SCHED_GPIPE); }

Test(pipeline, zbh1_follows_the_list_at_the_simulated_peaks) { sweep(TRI_SCHED_ZBH1); }

Test(pipeline, interleaved_follows_the_list_at_the_simulated_peaks) {
    for (int pp = 2; pp <= 4; pp++)
        for (int vpp = 2; vpp <= 3; vpp++)
            for (int k = 1; k <= 3; k++) run_config(&(config){TRI_SCHED_INTERLEAVED, pp, vpp, k * pp, 0});
}

/* The pools hold exactly the simulator's peak: one slot fewer and the
 * executor stops at the acquire that finds none (TRI_CHECK: abort). */
Test(pipeline, a_pool_below_the_peak_stops_the_executor, .signal = SIGABRT) {
    run_config(&(config){TRI_SCHED_1F1B, 2, 1, 4, 1});
}

/* A load that fails abandons the rest of the list: NAN, and the slot taken
 * for that forward goes back (one stage, so no peer waits for it). */
Test(pipeline, a_failed_load_returns_nan_and_releases_the_slot) {
    tri_schedule s;
    cr_assert_eq(tri_schedule_build(&s, TRI_SCHED_1F1B, 1, 1, 4), 0);
    tri_ctx ctx;
    cr_assert_eq(tri_ctx_init(&ctx, "cpu", 1), 0);
    record rec = {0};
    fake_stage f = {.stage = 0, .pp = 1, .vpp = 1, .cap = {1}, .fail_at = 2, .rec = &rec, .mode = TRI_PIPE_TRAIN};
    f.ends[0] = TRI_PIPE_FIRST | TRI_PIPE_LAST;
    tri_pipe_stage view = {.ops = &FAKE_STAGE,
                           .stage = &f,
                           .n_chunks = 1,
                           .ends = {TRI_PIPE_FIRST | TRI_PIPE_LAST},
                           .ctx = &ctx,
                           .boundary_elems = BOUND,
                           .dtype = TRI_F32};
    tri_comm self;
    tri_comm_init_self(&self, 0);
    tri_pipe p;
    const tri_schedule *scheds[1] = {&s};
    cr_assert_eq(tri_pipe_init(&p, &view, &self, NULL, scheds, 1), 0);
    double loss = tri_pipe_run(&p, &s, TRI_PIPE_TRAIN, 0.0f, NULL, fake_load, &f, f.ids, f.targets);
    cr_expect(isnan(loss), "loss %g", loss);
    cr_expect_eq(f.loads, 3);
    cr_expect_eq(f.live[0], 0, "the slot of the failed forward was not released");
    cr_expect_str_empty(rec.err, "%s", rec.err);
    /* micro-batches 0 and 1 ran forward and backward, nothing of 2 */
    cr_expect_eq(rec.n, 4);
    tri_pipe_free(&p);
    free(rec.e);
    tri_ctx_free(&ctx);
    tri_schedule_free(&s);
}

/* The comparison itself catches a list the executor did not follow: the
 * record of a real run against the same list with two computes swapped. */
Test(pipeline, the_record_check_catches_a_swapped_list) {
    tri_schedule s;
    cr_assert_eq(tri_schedule_build(&s, TRI_SCHED_1F1B, 1, 1, 2), 0);
    record rec = {0};
    for (int i = 0; i < s.n[0]; i++) rec_add(&rec, (event){s.a[0][i].kind, s.a[0][i].mb, s.a[0][i].chunk, -1, -1});
    char why[512];
    compare(&rec, s.a[0], s.n[0], 0, 1, why, sizeof why);
    cr_expect_str_empty(why, "%s", why);
    tri_action t = s.a[0][1];
    s.a[0][1] = s.a[0][2];
    s.a[0][2] = t;
    compare(&rec, s.a[0], s.n[0], 0, 1, why, sizeof why);
    cr_expect(strstr(why, "action 1") != NULL, "the swap went unnoticed: \"%s\"", why);
    free(rec.e);
    tri_schedule_free(&s);
}

/* The mailbox a list needs: nothing on a stage that holds the whole model;
 * on the middle stage of three, one box per message in flight. */
Test(pipeline, box_need_is_zero_without_neighbours) {
    tri_schedule s;
    cr_assert_eq(tri_schedule_build(&s, TRI_SCHED_1F1B, 1, 1, 4), 0);
    unsigned char whole = TRI_PIPE_FIRST | TRI_PIPE_LAST;
    cr_expect_eq(tri_pipe_box_need(s.a[0], s.n[0], &whole), 0);
    tri_schedule_free(&s);
    cr_assert_eq(tri_schedule_build(&s, TRI_SCHED_1F1B, 3, 1, 4), 0);
    unsigned char middle = 0;
    cr_expect_gt(tri_pipe_box_need(s.a[1], s.n[1], &middle), 0);
    tri_schedule_free(&s);
}
