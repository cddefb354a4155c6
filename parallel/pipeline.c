/* The pipeline executor. See parallel/pipeline.h. */
#include "parallel/pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"

/* ---- where a message goes: model chunks and tags ----
 * Local chunk c of stage s is model chunk j = c * n_stages + s. A message is
 * named by the model chunk that receives it and its direction: activations
 * into chunk j have tag 2j, gradients into chunk j tag 2j + 1. Both sides
 * derive the same tag, and MPI matches by (peer, tag) in posting order, so
 * the order in which a batch posts its messages cannot cross them. */

static int model_chunk(const tri_pipe *p, int c) { return c * p->n_stages + p->stage; }

static int msg_tag(const tri_pipe *p, const tri_action *a) {
    int j = model_chunk(p, a->chunk);
    switch (a->kind) {
    case TRI_ACT_RECV_ACT: return 2 * j;
    case TRI_ACT_SEND_ACT: return 2 * (j + 1);
    case TRI_ACT_RECV_GRAD: return 2 * j + 1;
    case TRI_ACT_SEND_GRAD: return 2 * (j - 1) + 1;
    default: return -1;
    }
}

static int is_comm(tri_act_kind k) { return k >= TRI_ACT_SEND_ACT && k <= TRI_ACT_RECV_GRAD; }
static int is_send(tri_act_kind k) { return k == TRI_ACT_SEND_ACT || k == TRI_ACT_SEND_GRAD; }

/* A mailbox entry's key: the message (tag and direction) and micro-batch. */
static int box_key(const tri_pipe *p, const tri_action *a) {
    return ((msg_tag(p, a) * 2 + is_send(a->kind)) << 20) | a->mb;
}

static void reap_sends(tri_pipe *p, int wait);

/* ---- the mailbox ----
 * Boxes are addressed by index (the array grows when every box is taken). */

static int box_find(tri_pipe *p, int key) {
    for (int i = 0; i < p->n_box; i++)
        if (p->box[i].key == key) return i;
    return -1;
}

/* A free box for key: a completed send's, else a new one (sends complete
 * when their receiver gets to them, which no schedule bounds). -1: out of
 * memory (printed). */
static int box_take(tri_pipe *p, int key) {
    TRI_CHECK(box_find(p, key) < 0);
    int i = box_find(p, -1);
    if (i < 0) {
        reap_sends(p, 0);
        i = box_find(p, -1);
    }
    if (i < 0) {
        tri_pipe_box *nb = realloc(p->box, ((size_t)p->n_box + 1) * sizeof *nb);
        if (!nb) TRI_FAIL("out of memory (pipeline mailbox)");
        p->box = nb;
        i = p->n_box;
        p->box[i].key = -1;
        p->box[i].mem = tri_ctx_alloc(p->st.ctx, p->box_bytes, TRI_MEM_WORKSPACE, "pipeline p2p buffer");
        if (!p->box[i].mem) TRI_FAIL("out of memory (pipeline p2p buffer of %zu bytes)", p->box_bytes);
        p->n_box++;
    }
    p->box[i].key = key;
    return i;
}

/* Does local chunk c receive its input from, or send its output to, another stage? */
static int has_input_msg(const unsigned char *ends, int c) { return !(ends[c] & TRI_PIPE_FIRST); }
static int has_output_msg(const unsigned char *ends, int c) { return !(ends[c] & TRI_PIPE_LAST); }

int tri_pipe_box_need(const tri_action *a, int n, const unsigned char *ends) {
    int live = 0, peak = 0, pending_sends = 0;
    for (int i = 0; i < n; i++) {
        const tri_action *x = &a[i];
        if (is_comm(x->kind)) {
            if (is_send(x->kind))
                pending_sends++;
            else
                live++;
            if (live > peak) peak = live;
            if (i + 1 == n || !is_comm(a[i + 1].kind)) { /* the batch completes */
                live -= pending_sends;
                pending_sends = 0;
            }
            continue;
        }
        int c = x->chunk;
        if (x->kind == TRI_ACT_FWD) {
            if (has_output_msg(ends, c)) live++;
            if (live > peak) peak = live;
            if (has_input_msg(ends, c)) live--;
        } else if (x->kind == TRI_ACT_BWD || x->kind == TRI_ACT_BWD_IN) {
            if (has_input_msg(ends, c)) live++;
            if (live > peak) peak = live;
            if (has_output_msg(ends, c)) live--;
        }
    }
    return peak;
}

int tri_pipe_init(tri_pipe *p, const tri_pipe_stage *st, tri_comm *pp, tri_progress *progress,
                  const tri_schedule *const *scheds, int n_scheds) {
    memset(p, 0, sizeof *p);
    TRI_CHECK(st->n_chunks >= 1 && st->n_chunks <= TRI_PIPE_MAX_CHUNKS);
    p->st = *st;
    p->pp = pp;
    p->progress = progress;
    p->stage = pp->rank;
    p->n_stages = pp->size;
    p->box_bytes = st->boundary_elems * tri_dtype_size(st->dtype);
    for (int i = 0; i < n_scheds; i++) {
        const tri_schedule *s = scheds[i];
        TRI_CHECK(s->pp == p->n_stages && s->vpp == st->n_chunks);
        int need = tri_pipe_box_need(s->a[p->stage], s->n[p->stage], st->ends);
        if (need > p->n_box) p->n_box = need;
        if (s->m > p->m_cap) p->m_cap = s->m;
    }
    p->box = calloc((size_t)p->n_box + 1, sizeof *p->box);
    p->slot_of = calloc((size_t)p->m_cap * (size_t)st->n_chunks + 1, sizeof *p->slot_of);
    if (!p->box || !p->slot_of) {
        tri_pipe_free(p);
        return tri_error("out of memory (pipeline mailbox)");
    }
    for (int i = 0; i < p->n_box; i++) {
        p->box[i].key = -1;
        p->box[i].mem = tri_ctx_alloc(st->ctx, p->box_bytes, TRI_MEM_WORKSPACE, "pipeline p2p buffer");
        if (!p->box[i].mem) {
            tri_pipe_free(p);
            return -1;
        }
    }
    return 0;
}

void tri_pipe_free(tri_pipe *p) {
    if (!p) return;
    if (p->box)
        for (int i = 0; i < p->n_box; i++) tri_ctx_release(p->st.ctx, p->box[i].mem, p->box_bytes, TRI_MEM_WORKSPACE);
    free(p->box);
    free(p->sends);
    free(p->slot_of);
    memset(p, 0, sizeof *p);
}

/* ---- running a list ---- */

/* Finishes the pending sends that are done (wait: all of them, waiting),
 * freeing their boxes. */
static void reap_sends(tri_pipe *p, int wait) {
    int kept = 0;
    for (int i = 0; i < p->n_send; i++) {
        tri_pipe_send *x = &p->sends[i];
        int done;
        if (wait) {
            if (p->progress) snprintf(p->progress->action, sizeof p->progress->action, "%s", x->what);
            tri_comm_wait(p->pp, &x->req);
            done = 1;
        } else {
            done = tri_comm_test(p->pp, &x->req);
        }
        if (done)
            p->box[x->box].key = -1;
        else
            p->sends[kept++] = *x;
    }
    p->n_send = kept;
    if (wait && p->progress) p->progress->action[0] = '\0';
}

/* Posts the batch a[0..n) of communication actions together, then waits for
 * its receives; its sends complete later (reap_sends), whenever their
 * receivers get to them, so a send never holds its stage up. The watchdog's
 * report names the action waited for. */
static void run_batch(tri_pipe *p, const tri_action *a, int n) {
    enum { MAX_BATCH = 16 };
    TRI_CHECK(n <= MAX_BATCH);
    tri_req req[MAX_BATCH];
    size_t count = p->st.boundary_elems;
    tri_dtype dt = p->st.dtype;
    for (int i = 0; i < n; i++) {
        memset(&req[i], 0, sizeof req[i]);
        int key = box_key(p, &a[i]), tag = msg_tag(p, &a[i]);
        if (is_send(a[i].kind)) {
            int b = box_find(p, key);
            TRI_CHECK(b >= 0); /* the forward or backward before it filled it */
            if (p->n_send == p->cap_send) {
                int cap = p->cap_send ? 2 * p->cap_send : 16;
                tri_pipe_send *ns = realloc(p->sends, (size_t)cap * sizeof *ns);
                if (!ns) TRI_FAIL("out of memory (pipeline sends)");
                p->sends = ns;
                p->cap_send = cap;
            }
            tri_pipe_send *x = &p->sends[p->n_send++];
            memset(x, 0, sizeof *x);
            x->box = b;
            tri_action_str(&a[i], x->what, sizeof x->what);
            tri_comm_isend(p->pp, p->box[b].mem, count, dt, a[i].peer, tag, &x->req);
            p->box[b].key = -2 - b; /* taken until the send completes, no longer found by its message */
        } else {
            int b = box_take(p, key);
            tri_comm_irecv(p->pp, p->box[b].mem, count, dt, a[i].peer, tag, &req[i]);
        }
    }
    for (int i = 0; i < n; i++) {
        if (is_send(a[i].kind)) continue;
        if (p->progress) tri_action_str(&a[i], p->progress->action, sizeof p->progress->action);
        tri_comm_wait(p->pp, &req[i]);
    }
    if (p->progress) p->progress->action[0] = '\0';
    reap_sends(p, 0);
}

double tri_pipe_run(tri_pipe *p, const tri_schedule *s, tri_pipe_mode mode, float dscale, tri_grad_sync *sync,
                    tri_pipe_loader load, void *load_ctx, const int32_t *ids, const int32_t *targets) {
    const tri_stage_ops *ops = p->st.ops;
    void *stage = p->st.stage;
    const unsigned char *ends = p->st.ends;
    const tri_action *a = s->a[p->stage];
    int n = s->n[p->stage], nc = p->st.n_chunks;
    TRI_CHECK(s->m <= p->m_cap && s->vpp == nc);
    /* the last backward of each chunk (BWD_W for a split backward) starts the
     * chunk's DP reduction */
    int last_bwd[TRI_PIPE_MAX_CHUNKS];
    for (int c = 0; c < nc; c++) last_bwd[c] = -1;
    for (int i = 0; i < n; i++)
        if (a[i].kind == TRI_ACT_BWD || a[i].kind == TRI_ACT_BWD_W) last_bwd[a[i].chunk] = i;

    double loss = 0.0, t0 = tri_now_s(), busy = 0.0, wait = 0.0, last_compute = t0;
    for (int i = 0; i < n;) {
        const tri_action *x = &a[i];
        if (is_comm(x->kind)) {
            int e = i;
            while (e < n && is_comm(a[e].kind)) e++;
            double w0 = tri_now_s();
            run_batch(p, x, e - i);
            wait += tri_now_s() - w0;
            i = e;
            continue;
        }
        int c = x->chunk, mb = x->mb;
        int first = (ends[c] & TRI_PIPE_FIRST) != 0, last = (ends[c] & TRI_PIPE_LAST) != 0;
        void **slotp = mb >= 0 ? &p->slot_of[(size_t)mb * (size_t)nc + (size_t)c] : NULL;
        double c0 = tri_now_s();
        switch (x->kind) {
        case TRI_ACT_FWD: {
            void *slot = ops->acquire(stage, c);
            TRI_CHECK(slot != NULL); /* the pool holds the schedule's peak */
            if ((first || last) && load && load(load_ctx, mb) != 0) {
                ops->release(stage, c, slot);
                return NAN;
            }
            ops->stage_batch(stage, c, slot, first ? ids : NULL, last ? targets : NULL);
            int in = -1;
            if (has_input_msg(ends, c)) {
                tri_action r = {TRI_ACT_RECV_ACT, mb, c, -1};
                in = box_find(p, box_key(p, &r));
                TRI_CHECK(in >= 0); /* received before */
            }
            loss += ops->forward(stage, c, slot, in >= 0 ? p->box[in].mem : NULL, mode, dscale);
            if (in >= 0) p->box[in].key = -1;
            if (has_output_msg(ends, c)) {
                tri_action snd = {TRI_ACT_SEND_ACT, mb, c, -1};
                int out = box_take(p, box_key(p, &snd));
                ops->copy_act(stage, p->box[out].mem);
            }
            if (mode == TRI_PIPE_TRAIN)
                *slotp = slot;
            else
                ops->release(stage, c, slot);
            break;
        }
        case TRI_ACT_BWD:
        case TRI_ACT_BWD_IN: {
            void *slot = *slotp;
            TRI_CHECK(slot != NULL);
            int in = -1;
            if (has_output_msg(ends, c)) {
                tri_action r = {TRI_ACT_RECV_GRAD, mb, c, -1};
                in = box_find(p, box_key(p, &r));
                TRI_CHECK(in >= 0); /* received before */
            }
            const void *dy = in >= 0 ? p->box[in].mem : NULL;
            if (x->kind == TRI_ACT_BWD) {
                if (sync) tri_grad_sync_set_last(&sync[c], i == last_bwd[c]);
                ops->backward(stage, c, slot, dy);
            } else {
                if (sync) tri_grad_sync_set_last(&sync[c], 0);
                ops->backward_input(stage, c, slot, dy);
            }
            if (in >= 0) p->box[in].key = -1;
            if (has_input_msg(ends, c)) {
                tri_action snd = {TRI_ACT_SEND_GRAD, mb, c, -1};
                int out = box_take(p, box_key(p, &snd));
                ops->copy_grad(stage, p->box[out].mem);
            }
            if (x->kind == TRI_ACT_BWD) {
                ops->release(stage, c, slot);
                *slotp = NULL;
            }
            break;
        }
        case TRI_ACT_BWD_W: {
            void *slot = *slotp;
            TRI_CHECK(slot != NULL);
            if (sync) tri_grad_sync_set_last(&sync[c], i == last_bwd[c]);
            ops->backward_weight(stage, c, slot);
            ops->release(stage, c, slot);
            *slotp = NULL;
            break;
        }
        case TRI_ACT_REDUCE:
            reap_sends(p, 1); /* every message of the step has left */
            if (sync) tri_grad_sync_finish(&sync[c]);
            i++;
            continue;
        default: TRI_CHECK(0);
        }
        last_compute = tri_now_s();
        busy += last_compute - c0;
        i++;
    }
    reap_sends(p, 1); /* a list without REDUCE (forward only) */
    p->stats.busy_s = busy;
    p->stats.p2p_s = wait;
    p->stats.span_s = last_compute - t0;
    return loss;
}
