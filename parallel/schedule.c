/* Pipeline schedules as data (see schedule.h): the generators, and the
 * simulator that plays every rank's list together.
 *
 * Every generator first decides the order of the compute actions on each
 * stage; communication is then placed the same way for all of them (see
 * place_comm): the receive a compute needs goes right before it, the send of
 * what it produced right after it, so that the sends of one compute and the
 * receives of the next are consecutive and form one batch (Megatron's
 * send_forward_recv_backward / send_backward_recv_forward). Sends are
 * asynchronous (see schedule.h): only a batch's receives hold its rank. */
#include "parallel/schedule.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

static const char *const sched_names[] = {"1f1b", "interleaved", "gpipe", "zb-h1", "forward"};
static const char *const act_names[] = {"forward",  "backward",  "B",         "W",     "send-act",
                                        "recv-act", "send-grad", "recv-grad", "reduce"};

int tri_sched_parse(const char *s) {
    if (!s) return -1;
    for (int k = 0; k < (int)(sizeof sched_names / sizeof *sched_names); k++)
        if (!strcmp(s, sched_names[k])) return k;
    return -1;
}

const char *tri_sched_name(tri_sched_kind k) {
    return (int)k >= 0 && (int)k < (int)(sizeof sched_names / sizeof *sched_names) ? sched_names[k] : "?";
}

const char *tri_act_name(tri_act_kind k) {
    return (int)k >= 0 && (int)k < (int)(sizeof act_names / sizeof *act_names) ? act_names[k] : "?";
}

char *tri_action_str(const tri_action *a, char *buf, size_t n) {
    if (!buf || n == 0) return buf;
    switch (a->kind) {
    case TRI_ACT_SEND_ACT:
    case TRI_ACT_SEND_GRAD:
        snprintf(buf, n, "%s mb %d chunk %d to stage %d", tri_act_name(a->kind), a->mb, a->chunk, a->peer);
        break;
    case TRI_ACT_RECV_ACT:
    case TRI_ACT_RECV_GRAD:
        snprintf(buf, n, "%s mb %d chunk %d from stage %d", tri_act_name(a->kind), a->mb, a->chunk, a->peer);
        break;
    case TRI_ACT_REDUCE: snprintf(buf, n, "reduce chunk %d", a->chunk); break;
    default: snprintf(buf, n, "%s mb %d chunk %d", tri_act_name(a->kind), a->mb, a->chunk); break;
    }
    return buf;
}

static int is_comm(tri_act_kind k) { return k >= TRI_ACT_SEND_ACT && k <= TRI_ACT_RECV_GRAD; }
static int is_compute(tri_act_kind k) { return k <= TRI_ACT_BWD_W; }

/* ---- building ---------------------------------------------------------- */

typedef struct alist {
    tri_action *a;
    int n, cap;
} alist;

static int push(alist *l, tri_act_kind kind, int mb, int chunk, int peer) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        tri_action *a = realloc(l->a, (size_t)cap * sizeof *a);
        if (!a) return -1;
        l->a = a;
        l->cap = cap;
    }
    l->a[l->n++] = (tri_action){kind, mb, chunk, peer};
    return 0;
}

/* Flags a generator may set in a compute's `peer` field (the compute-order
 * lists have no peers): HOIST posts the next compute's receives in the batch
 * before this one; DEFER posts this one's sends after the next compute, with
 * that one's (Megatron's interleaved steady state: one batch of four after
 * each forward-backward pair). */
enum { HOIST = 1, DEFER = 2 };

/* Megatron's interleaved order: virtual micro-batch k of a stage's m*vpp is
 * micro-batch (k / (pp*vpp))*pp + k % pp of forward chunk (k / pp) % vpp;
 * the backward of k runs chunk vpp-1 minus that. */
static int vmb(int k, int pp, int vpp) { return (k / (pp * vpp)) * pp + k % pp; }
static int vchunk_fwd(int k, int pp, int vpp) { return (k / pp) % vpp; }

/* The compute order of stage s (no communication yet). */
static int compute_order(alist *l, tri_sched_kind kind, int pp, int vpp, int m, int s) {
    int rc = 0;
    switch (kind) {
    case TRI_SCHED_FORWARD:
        for (int c = 0; c < vpp; c++)
            for (int i = 0; i < m; i++) rc |= push(l, TRI_ACT_FWD, i, c, -1);
        break;
    case TRI_SCHED_GPIPE:
        for (int i = 0; i < m; i++) rc |= push(l, TRI_ACT_FWD, i, 0, -1);
        for (int i = 0; i < m; i++) rc |= push(l, TRI_ACT_BWD, i, 0, -1);
        break;
    case TRI_SCHED_1F1B: {
        int w = pp - s - 1 < m ? pp - s - 1 : m;
        for (int i = 0; i < w; i++) rc |= push(l, TRI_ACT_FWD, i, 0, -1);
        for (int i = 0; i < m - w; i++) {
            rc |= push(l, TRI_ACT_FWD, w + i, 0, -1);
            rc |= push(l, TRI_ACT_BWD, i, 0, -1);
        }
        for (int i = m - w; i < m; i++) rc |= push(l, TRI_ACT_BWD, i, 0, -1);
        break;
    }
    case TRI_SCHED_INTERLEAVED: {
        int total = m * vpp, w = (pp - s - 1) * 2 + (vpp - 1) * pp;
        if (w > total) w = total;
        for (int k = 0; k < w; k++) rc |= push(l, TRI_ACT_FWD, vmb(k, pp, vpp), vchunk_fwd(k, pp, vpp), -1);
        for (int i = 0; i < total - w; i++) {
            int k = w + i;
            rc |= push(l, TRI_ACT_FWD, vmb(k, pp, vpp), vchunk_fwd(k, pp, vpp), HOIST | DEFER);
            rc |= push(l, TRI_ACT_BWD, vmb(i, pp, vpp), vpp - 1 - vchunk_fwd(i, pp, vpp), -1);
        }
        for (int k = total - w; k < total; k++)
            rc |= push(l, TRI_ACT_BWD, vmb(k, pp, vpp), vpp - 1 - vchunk_fwd(k, pp, vpp), -1);
        break;
    }
    case TRI_SCHED_ZBH1: {
        /* 1F1B's forwards and input-gradient passes (B), each B's gradient
         * sent right after it; stage s holds its first W back for s steady
         * iterations, so that every stage has pp micro-batches in flight
         * counted until their W (stage 0's peak, the same as 1F1B's) and
         * p - s until their B. In the cooldown each B is followed by one W,
         * and the s held-back W's close the list: with sends that do not
         * block, the B's reach stage 0 back to back and every stage idles
         * (p-1)(F+B-W) when W <= min(F, B) (Qi et al. 2024, ZB-H1). */
        int w = pp - s - 1 < m ? pp - s - 1 : m, nw = 0;
        for (int i = 0; i < w; i++) rc |= push(l, TRI_ACT_FWD, i, 0, -1);
        for (int i = 0; i < m - w; i++) {
            rc |= push(l, TRI_ACT_FWD, w + i, 0, -1);
            rc |= push(l, TRI_ACT_BWD_IN, i, 0, -1);
            if (i >= s) rc |= push(l, TRI_ACT_BWD_W, nw++, 0, -1);
        }
        for (int i = m - w; i < m; i++) {
            rc |= push(l, TRI_ACT_BWD_IN, i, 0, -1);
            rc |= push(l, TRI_ACT_BWD_W, nw++, 0, -1);
        }
        while (nw < m) rc |= push(l, TRI_ACT_BWD_W, nw++, 0, -1);
        break;
    }
    }
    return rc;
}

/* Inserts the communication around each compute of stage s and the REDUCE's
 * at the end: the receive of a compute's input right before it, the send of
 * its output right after it. */
static int push_recvs(alist *out, const tri_action *a, int pp, int V, int s) {
    int X = a->chunk * pp + s; /* model chunk */
    if (a->kind == TRI_ACT_FWD && X > 0) return push(out, TRI_ACT_RECV_ACT, a->mb, a->chunk, (s - 1 + pp) % pp);
    if ((a->kind == TRI_ACT_BWD || a->kind == TRI_ACT_BWD_IN) && X < V - 1)
        return push(out, TRI_ACT_RECV_GRAD, a->mb, a->chunk, (s + 1) % pp);
    return 0;
}

static int push_sends(alist *out, const tri_action *a, int pp, int V, int s) {
    int X = a->chunk * pp + s;
    if (a->kind == TRI_ACT_FWD && X < V - 1) return push(out, TRI_ACT_SEND_ACT, a->mb, a->chunk, (s + 1) % pp);
    if ((a->kind == TRI_ACT_BWD || a->kind == TRI_ACT_BWD_IN) && X > 0)
        return push(out, TRI_ACT_SEND_GRAD, a->mb, a->chunk, (s - 1 + pp) % pp);
    return 0;
}

/* Inserts the communication around each compute of stage s and the REDUCE's
 * at the end: by default the receive of a compute's input right before it,
 * the send of its output right after it. */
static int place_comm(alist *out, const alist *cmp, int pp, int vpp, int s, int backward) {
    int V = pp * vpp, rc = 0, hoisted = 0;
    alist pend = {0};
    for (int i = 0; i < cmp->n; i++) {
        tri_action a = cmp->a[i];
        int flags = a.peer > 0 ? a.peer : 0; /* -1: none */
        a.peer = -1;
        if (!hoisted) rc |= push_recvs(out, &a, pp, V, s);
        hoisted = 0;
        if ((flags & HOIST) && i + 1 < cmp->n) {
            rc |= push_recvs(out, &cmp->a[i + 1], pp, V, s);
            hoisted = 1;
        }
        rc |= push(out, a.kind, a.mb, a.chunk, -1);
        rc |= push_sends(&pend, &a, pp, V, s);
        if (!(flags & DEFER) || i + 1 == cmp->n) {
            for (int j = 0; j < pend.n; j++)
                rc |= push(out, pend.a[j].kind, pend.a[j].mb, pend.a[j].chunk, pend.a[j].peer);
            pend.n = 0;
        }
    }
    free(pend.a);
    if (!backward) return rc;
    /* one REDUCE per chunk, in the order in which the chunks' last backward work ends */
    int *last = calloc((size_t)vpp, sizeof *last);
    if (!last) return -1;
    for (int c = 0; c < vpp; c++) last[c] = -1;
    for (int i = 0; i < cmp->n; i++)
        if (cmp->a[i].kind == TRI_ACT_BWD || cmp->a[i].kind == TRI_ACT_BWD_W) last[cmp->a[i].chunk] = i;
    for (int i = 0; i < cmp->n; i++)
        for (int c = 0; c < vpp; c++)
            if (last[c] == i) rc |= push(out, TRI_ACT_REDUCE, -1, c, -1);
    free(last);
    return rc;
}

void tri_schedule_free(tri_schedule *s) {
    if (!s) return;
    if (s->a)
        for (int r = 0; r < s->pp; r++) free(s->a[r]);
    free(s->a);
    free(s->n);
    memset(s, 0, sizeof *s);
}


int tri_schedule_check(tri_sched_kind kind, int pp, int vpp, int m, char *why, size_t n) {
    const char *name = tri_sched_name(kind);
    if ((int)kind < 0 || (int)kind > TRI_SCHED_FORWARD)
        return tri_why(why, n, "unknown pipeline schedule kind %d", (int)kind);
    if (pp < 1) return tri_why(why, n, "pipeline schedule %s: pp must be >= 1, got %d", name, pp);
    if (vpp < 1) return tri_why(why, n, "pipeline schedule %s: vpp must be >= 1, got %d", name, vpp);
    if (m < 1) return tri_why(why, n, "pipeline schedule %s: micro-batches must be >= 1, got %d", name, m);
    if (kind == TRI_SCHED_INTERLEAVED) {
        if (pp < 2) return tri_why(why, n, "pipeline schedule interleaved needs pp >= 2, got pp %d", pp);
        if (vpp < 2)
            return tri_why(why, n,
                          "pipeline schedule interleaved needs vpp >= 2 chunks per stage, got vpp %d (use 1f1b)", vpp);
        if (m < pp)
            return tri_why(why, n,
                          "pipeline schedule interleaved: micro-batches %d < pp %d (micro-batches go in groups "
                          "of pp)",
                          m, pp);
        if (m % pp != 0)
            return tri_why(why, n,
                          "pipeline schedule interleaved: micro-batches %d is not a multiple of pp %d (%d %% %d = "
                          "%d; micro-batches go in groups of pp)",
                          m, pp, m, pp, m % pp);
    } else if (vpp != 1 && kind != TRI_SCHED_FORWARD) {
        return tri_why(why, n, "pipeline schedule %s takes vpp 1, got vpp %d (vpp > 1 needs interleaved)", name, vpp);
    }
    return 0;
}

int tri_schedule_build(tri_schedule *s, tri_sched_kind kind, int pp, int vpp, int m) {
    memset(s, 0, sizeof *s);
    const char *name = tri_sched_name(kind);
    char why[256];
    if (tri_schedule_check(kind, pp, vpp, m, why, sizeof why) != 0) return tri_error("%s", why);
    s->kind = kind;
    s->pp = pp;
    s->vpp = vpp;
    s->m = m;
    s->group = kind == TRI_SCHED_INTERLEAVED ? pp : 0;
    s->n = calloc((size_t)pp, sizeof *s->n);
    s->a = calloc((size_t)pp, sizeof *s->a);
    if (!s->n || !s->a) {
        tri_schedule_free(s);
        return tri_error("pipeline schedule %s: out of memory", name);
    }
    for (int r = 0; r < pp; r++) {
        alist cmp = {0}, out = {0};
        int rc = 0;
        if (pp == 1 && kind != TRI_SCHED_FORWARD) {
            /* the trivial list: each micro-batch forward then backward */
            for (int i = 0; i < m; i++) {
                rc |= push(&cmp, TRI_ACT_FWD, i, 0, -1);
                if (kind == TRI_SCHED_ZBH1) {
                    rc |= push(&cmp, TRI_ACT_BWD_IN, i, 0, -1);
                    rc |= push(&cmp, TRI_ACT_BWD_W, i, 0, -1);
                } else {
                    rc |= push(&cmp, TRI_ACT_BWD, i, 0, -1);
                }
            }
        } else {
            rc = compute_order(&cmp, kind, pp, vpp, m, r);
        }
        if (rc == 0) rc = place_comm(&out, &cmp, pp, vpp, r, kind != TRI_SCHED_FORWARD);
        free(cmp.a);
        s->a[r] = out.a;
        s->n[r] = out.n;
        if (rc != 0) {
            tri_schedule_free(s);
            return tri_error("pipeline schedule %s: out of memory", name);
        }
    }
    return 0;
}

/* ---- simulating -------------------------------------------------------- */

/* One message as the sender or the receiver sees it: direction (0 activation
 * forward, 1 gradient backward), micro-batch, and the boundary it crosses
 * (model chunk X's output, i.e. between X and X + 1). */
typedef struct msg_id {
    int dir, mb, boundary;
} msg_id;

static msg_id msg_of(const tri_action *a, int pp, int s) {
    int X = a->chunk * pp + s;
    switch (a->kind) {
    case TRI_ACT_SEND_ACT: return (msg_id){0, a->mb, X};
    case TRI_ACT_RECV_ACT: return (msg_id){0, a->mb, X - 1};
    case TRI_ACT_SEND_GRAD: return (msg_id){1, a->mb, X - 1};
    default: return (msg_id){1, a->mb, X}; /* RECV_GRAD */
    }
}

static int is_send(tri_act_kind k) { return k == TRI_ACT_SEND_ACT || k == TRI_ACT_SEND_GRAD; }

typedef struct post {
    int rank, idx;
    double t;
} post;

/* messages from stage src to stage dst, matched in posting order */
typedef struct chan {
    post *snd, *rcv;
    int ns, nr;
} chan;

enum { ST_F = 1, ST_RA = 2, ST_RG = 4, ST_B = 8, ST_W = 16 };

typedef struct sim {
    const tri_schedule *s;
    tri_sim_result *r;
    chan *ch;          /* [pp * pp] at [src * pp + dst] */
    int **slot;        /* [pp][n]: channel position of a posted comm action */
    unsigned char *st; /* [pp][m][vpp] ST_* bits */
    int *alive, *alive_in, *pc, *posted;
    double *clock;
} sim;

static void why_add(tri_sim_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void why_add(tri_sim_result *r, const char *fmt, ...) {
    size_t len = strlen(r->why);
    if (len + 1 >= sizeof r->why) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(r->why + len, sizeof r->why - len, fmt, ap);
    va_end(ap);
    if (k >= 0 && len + (size_t)k >= sizeof r->why) memcpy(r->why + sizeof r->why - 4, "...", 4);
}

static int invalid(sim *S, int rank, int idx, const char *what) {
    char b[96];
    S->r->invalid = 1;
    why_add(S->r, "stage %d action %d (%s): %s", rank, idx, tri_action_str(&S->s->a[rank][idx], b, sizeof b), what);
    return -1;
}

static unsigned char *state(sim *S, int rank, const tri_action *a) {
    return &S->st[((size_t)rank * (size_t)S->s->m + (size_t)a->mb) * (size_t)S->s->vpp + (size_t)a->chunk];
}

/* Checks an action's own numbers and what it needs done before it; 0 ok. */
static int check(sim *S, int rank, int idx) {
    const tri_schedule *s = S->s;
    const tri_action *a = &s->a[rank][idx];
    int V = s->pp * s->vpp, X = a->chunk * s->pp + rank;
    if ((int)a->kind < 0 || a->kind > TRI_ACT_REDUCE) return invalid(S, rank, idx, "unknown action kind");
    if (a->chunk < 0 || a->chunk >= s->vpp) return invalid(S, rank, idx, "chunk out of range");
    if (a->kind == TRI_ACT_REDUCE) {
        for (int mb = 0; mb < s->m; mb++) {
            tri_action t = {.kind = TRI_ACT_FWD, .mb = mb, .chunk = a->chunk, .peer = -1};
            if (s->kind != TRI_SCHED_FORWARD && !(*state(S, rank, &t) & ST_W))
                return invalid(S, rank, idx, "before the chunk's last backward");
        }
        return 0;
    }
    if (a->mb < 0 || a->mb >= s->m) return invalid(S, rank, idx, "micro-batch out of range");
    unsigned st = *state(S, rank, a);
    if (is_comm(a->kind)) {
        int fwd = a->kind == TRI_ACT_SEND_ACT || a->kind == TRI_ACT_RECV_ACT;
        int up = a->kind == TRI_ACT_SEND_ACT || a->kind == TRI_ACT_RECV_GRAD; /* towards X + 1 */
        if (up ? X + 1 >= V : X - 1 < 0)
            return invalid(S, rank, idx,
                           up ? "the last model chunk has no next stage" : "model chunk 0 has no previous stage");
        if (a->peer != (up ? (rank + 1) % s->pp : (rank - 1 + s->pp) % s->pp))
            return invalid(S, rank, idx, "the peer does not hold the neighbouring model chunk");
        if (a->kind == TRI_ACT_SEND_ACT && !(st & ST_F)) return invalid(S, rank, idx, "sent before its forward");
        if (a->kind == TRI_ACT_SEND_GRAD && !(st & ST_B)) return invalid(S, rank, idx, "sent before its backward");
        (void)fwd;
        return 0;
    }
    switch (a->kind) {
    case TRI_ACT_FWD:
        if (st & ST_F) return invalid(S, rank, idx, "forwarded twice");
        if (X > 0 && !(st & ST_RA)) return invalid(S, rank, idx, "runs before its input activation arrived");
        break;
    case TRI_ACT_BWD:
    case TRI_ACT_BWD_IN:
        if (!(st & ST_F)) return invalid(S, rank, idx, "backward before its forward");
        if (st & ST_B) return invalid(S, rank, idx, "backwarded twice");
        if (X < V - 1 && !(st & ST_RG)) return invalid(S, rank, idx, "runs before its output gradient arrived");
        break;
    default: /* BWD_W */
        if (!(st & ST_B)) return invalid(S, rank, idx, "W before its B");
        if (st & ST_W) return invalid(S, rank, idx, "W twice");
        break;
    }
    return 0;
}

/* The partner of posted comm action idx of rank, or NULL if not posted yet. */
static const post *partner(const sim *S, int rank, int idx) {
    const tri_action *a = &S->s->a[rank][idx];
    int pp = S->s->pp, k = S->slot[rank][idx];
    if (is_send(a->kind)) {
        const chan *c = &S->ch[rank * pp + a->peer];
        return k < c->nr ? &c->rcv[k] : NULL;
    }
    const chan *c = &S->ch[a->peer * pp + rank];
    return k < c->ns ? &c->snd[k] : NULL;
}

static int batch_end(const tri_schedule *s, int rank, int i) {
    while (i < s->n[rank] && is_comm(s->a[rank][i].kind)) i++;
    return i;
}

/* Posts the batch at pc of rank; -1 when it is invalid. */
static int post_batch(sim *S, int rank) {
    const tri_schedule *s = S->s;
    int pp = s->pp, b = S->pc[rank], e = batch_end(s, rank, b);
    for (int i = b; i < e; i++) {
        if (check(S, rank, i)) return -1;
        const tri_action *a = &s->a[rank][i];
        int snd = is_send(a->kind);
        chan *c = snd ? &S->ch[rank * pp + a->peer] : &S->ch[a->peer * pp + rank];
        int k = snd ? c->ns++ : c->nr++;
        post *p = snd ? &c->snd[k] : &c->rcv[k];
        *p = (post){rank, i, S->clock[rank]};
        S->slot[rank][i] = k;
        S->r->start[rank][i] = S->clock[rank];
        const post *q = partner(S, rank, i);
        if (q) {
            const tri_action *o = &s->a[q->rank][q->idx];
            msg_id x = msg_of(a, pp, rank), y = msg_of(o, pp, q->rank);
            int kinds = snd ? (o->kind == (a->kind == TRI_ACT_SEND_ACT ? TRI_ACT_RECV_ACT : TRI_ACT_RECV_GRAD))
                            : (a->kind == (o->kind == TRI_ACT_SEND_ACT ? TRI_ACT_RECV_ACT : TRI_ACT_RECV_GRAD));
            if (!kinds || x.dir != y.dir || x.mb != y.mb || x.boundary != y.boundary) {
                char b1[96], b2[96];
                S->r->invalid = 1;
                why_add(S->r, "message %d from stage %d to stage %d: stage %d posts %s but stage %d posts %s", k,
                        snd ? rank : q->rank, snd ? q->rank : rank, rank, tri_action_str(a, b1, sizeof b1), q->rank,
                        tri_action_str(o, b2, sizeof b2));
                return -1;
            }
            /* the message met: the send is complete (its buffer free) when both sides are posted */
            const post *sp = snd ? &c->snd[k] : q;
            S->r->end[sp->rank][sp->idx] = S->clock[rank] > q->t ? S->clock[rank] : q->t;
        }
    }
    S->posted[rank] = e;
    return 0;
}

/* Completes the posted batch of rank if every receive in it met its send
 * (sends do not hold the batch up): 1 if so. The batch ends at the later of
 * its post time and the post times of those sends. */
static int try_complete(sim *S, int rank) {
    const tri_schedule *s = S->s;
    int b = S->pc[rank], e = S->posted[rank];
    double t = S->clock[rank];
    for (int i = b; i < e; i++) {
        if (is_send(s->a[rank][i].kind)) continue;
        const post *q = partner(S, rank, i);
        if (!q) return 0;
        if (q->t > t) t = q->t;
    }
    for (int i = b; i < e; i++) {
        const tri_action *a = &s->a[rank][i];
        if (a->kind == TRI_ACT_RECV_ACT) *state(S, rank, a) |= ST_RA;
        if (a->kind == TRI_ACT_RECV_GRAD) *state(S, rank, a) |= ST_RG;
        if (!is_send(a->kind)) S->r->end[rank][i] = t;
    }
    S->clock[rank] = t;
    S->pc[rank] = e;
    S->posted[rank] = -1;
    return 1;
}

static void alive_add(sim *S, int rank, int chunk, int d, int in_too, int *peak_in_only) {
    tri_sim_result *r = S->r;
    int vpp = S->s->vpp, j = rank * vpp + chunk;
    if (!peak_in_only) {
        S->alive[j] += d;
        if (S->alive[j] > r->peak_chunk[j]) r->peak_chunk[j] = S->alive[j];
        int sum = 0;
        for (int c = 0; c < vpp; c++) sum += S->alive[rank * vpp + c];
        if (sum > r->peak[rank]) r->peak[rank] = sum;
    }
    if (in_too) {
        S->alive_in[rank] += d;
        if (S->alive_in[rank] > r->peak_in[rank]) r->peak_in[rank] = S->alive_in[rank];
    }
}

/* Runs one compute or REDUCE action at pc of rank. */
static int run_compute(sim *S, int rank, tri_sim_costs costs) {
    const tri_schedule *s = S->s;
    int i = S->pc[rank];
    if (check(S, rank, i)) return -1;
    const tri_action *a = &s->a[rank][i];
    double c = 0.0;
    int one = 1;
    switch (a->kind) {
    case TRI_ACT_FWD:
        c = costs.f;
        *state(S, rank, a) |= ST_F;
        alive_add(S, rank, a->chunk, 1, 1, NULL);
        if (s->kind == TRI_SCHED_FORWARD) alive_add(S, rank, a->chunk, -1, 1, NULL);
        break;
    case TRI_ACT_BWD:
        c = costs.b + costs.w;
        *state(S, rank, a) |= ST_B | ST_W;
        alive_add(S, rank, a->chunk, -1, 1, NULL);
        break;
    case TRI_ACT_BWD_IN:
        c = costs.b;
        *state(S, rank, a) |= ST_B;
        alive_add(S, rank, a->chunk, -1, 1, &one); /* freed for peak_in only */
        break;
    case TRI_ACT_BWD_W:
        c = costs.w;
        *state(S, rank, a) |= ST_W;
        alive_add(S, rank, a->chunk, -1, 0, NULL);
        break;
    default: /* REDUCE: a wait, no compute time of its own */ break;
    }
    S->r->start[rank][i] = S->clock[rank];
    S->clock[rank] += c;
    S->r->end[rank][i] = S->clock[rank];
    S->r->busy[rank] += c;
    S->pc[rank]++;
    return 0;
}

/* Where a stuck rank waits, for the deadlock message. */
static void describe_stuck(sim *S, int rank) {
    const tri_schedule *s = S->s;
    char b[96], c[96];
    int b0 = S->pc[rank], e = S->posted[rank];
    for (int i = b0; i < e; i++) {
        const tri_action *a = &s->a[rank][i];
        if (is_send(a->kind) || partner(S, rank, i)) continue;
        int q = a->peer;
        why_add(S->r, "stage %d waits at %s", rank, tri_action_str(a, b, sizeof b));
        if (S->pc[q] >= s->n[q])
            why_add(S->r, " (stage %d has finished); ", q);
        else
            why_add(S->r, " (stage %d is at %s); ", q, tri_action_str(&s->a[q][S->pc[q]], c, sizeof c));
    }
}

void tri_sim_result_free(tri_sim_result *r) {
    if (!r) return;
    free(r->busy);
    free(r->idle);
    free(r->peak);
    free(r->peak_chunk);
    free(r->peak_in);
    if (r->start)
        for (int i = 0; r->start[i]; i++) free(r->start[i]);
    if (r->end)
        for (int i = 0; r->end[i]; i++) free(r->end[i]);
    free(r->start);
    free(r->end);
    memset(r, 0, sizeof *r);
}

int tri_schedule_simulate(const tri_schedule *s, tri_sim_costs costs, tri_sim_result *r) {
    memset(r, 0, sizeof *r);
    int pp = s->pp, vpp = s->vpp, rc = -1;
    sim S = {.s = s, .r = r};
    r->busy = calloc((size_t)pp, sizeof(double));
    r->idle = calloc((size_t)pp, sizeof(double));
    r->peak = calloc((size_t)pp, sizeof(int));
    r->peak_in = calloc((size_t)pp, sizeof(int));
    r->peak_chunk = calloc((size_t)pp * (size_t)vpp, sizeof(int));
    r->start = calloc((size_t)pp + 1, sizeof(double *)); /* NULL-terminated for the free */
    r->end = calloc((size_t)pp + 1, sizeof(double *));
    S.ch = calloc((size_t)pp * (size_t)pp, sizeof *S.ch);
    S.slot = calloc((size_t)pp, sizeof *S.slot);
    S.st = calloc((size_t)pp * (size_t)s->m * (size_t)vpp, 1);
    S.alive = calloc((size_t)pp * (size_t)vpp, sizeof(int));
    S.alive_in = calloc((size_t)pp, sizeof(int));
    S.pc = calloc((size_t)pp, sizeof(int));
    S.posted = calloc((size_t)pp, sizeof(int));
    S.clock = calloc((size_t)pp, sizeof(double));
    if (!r->busy || !r->idle || !r->peak || !r->peak_in || !r->peak_chunk || !r->start || !r->end || !S.ch || !S.slot ||
        !S.st || !S.alive || !S.alive_in || !S.pc || !S.posted || !S.clock)
        goto out;
    for (int q = 0; q < pp; q++) {
        size_t n = s->n[q] > 0 ? (size_t)s->n[q] : 1;
        r->start[q] = calloc(n, sizeof(double));
        r->end[q] = calloc(n, sizeof(double));
        S.slot[q] = calloc(n, sizeof(int));
        if (!r->start[q] || !r->end[q] || !S.slot[q]) goto out;
        S.posted[q] = -1;
    }
    /* channel capacities: every send or receive a list names (a peer out of range is invalid) */
    for (int q = 0; q < pp; q++)
        for (int i = 0; i < s->n[q]; i++) {
            const tri_action *a = &s->a[q][i];
            if (!is_comm(a->kind)) continue;
            if (a->peer < 0 || a->peer >= pp) {
                invalid(&S, q, i, "peer out of range");
                rc = 0;
                goto out;
            }
            chan *c = is_send(a->kind) ? &S.ch[q * pp + a->peer] : &S.ch[a->peer * pp + q];
            if (is_send(a->kind))
                c->ns++;
            else
                c->nr++;
        }
    for (int c = 0; c < pp * pp; c++) {
        S.ch[c].snd = calloc((size_t)S.ch[c].ns + 1, sizeof(post));
        S.ch[c].rcv = calloc((size_t)S.ch[c].nr + 1, sizeof(post));
        if (!S.ch[c].snd || !S.ch[c].rcv) goto out;
        S.ch[c].ns = S.ch[c].nr = 0;
    }
    rc = 0;
    /* Each rank's times depend only on when its partners posted, so the
     * order in which ranks are advanced does not change them. */
    for (int progress = 1; progress && !r->invalid;) {
        progress = 0;
        for (int q = 0; q < pp && !r->invalid; q++) {
            while (S.pc[q] < s->n[q]) {
                const tri_action *a = &s->a[q][S.pc[q]];
                if (!is_comm(a->kind)) {
                    if (run_compute(&S, q, costs)) break;
                } else {
                    if (S.posted[q] < 0) {
                        if (post_batch(&S, q)) break;
                        progress = 1;
                    }
                    if (!try_complete(&S, q)) break;
                }
                progress = 1;
            }
        }
    }
    if (!r->invalid)
        for (int q = 0; q < pp; q++)
            if (S.pc[q] < s->n[q]) r->deadlock = 1;
    if (r->deadlock) {
        why_add(r, "deadlock: ");
        for (int q = 0; q < pp; q++)
            if (S.pc[q] < s->n[q]) describe_stuck(&S, q);
    } else if (!r->invalid) {
        /* every list ran to its end: a send nobody receives would still hold
         * the executor's end-of-step wait forever */
        for (int c = 0; c < pp * pp; c++)
            for (int k = S.ch[c].nr; k < S.ch[c].ns; k++) {
                const post *p = &S.ch[c].snd[k];
                char b[96];
                if (!r->deadlock) why_add(r, "deadlock: ");
                r->deadlock = 1;
                why_add(r, "stage %d's %s is never received (stage %d has finished); ", p->rank,
                        tri_action_str(&s->a[p->rank][p->idx], b, sizeof b), c % pp);
            }
    }
    for (int q = 0; q < pp; q++)
        if (S.clock[q] > r->makespan) r->makespan = S.clock[q];
    int busiest = 0;
    for (int q = 0; q < pp; q++) {
        r->idle[q] = r->makespan - r->busy[q];
        if (r->busy[q] > r->busy[busiest]) busiest = q;
    }
    r->bubble = r->busy[busiest] > 0 ? r->idle[busiest] / r->busy[busiest] : 0.0;
out:
    if (S.ch)
        for (int c = 0; c < pp * pp; c++) {
            free(S.ch[c].snd);
            free(S.ch[c].rcv);
        }
    free(S.ch);
    if (S.slot)
        for (int q = 0; q < pp; q++) free(S.slot[q]);
    free(S.slot);
    free(S.st);
    free(S.alive);
    free(S.alive_in);
    free(S.pc);
    free(S.posted);
    free(S.clock);
    if (rc != 0) tri_sim_result_free(r);
    return rc;
}

double tri_schedule_bubble_formula(tri_sched_kind kind, int pp, int vpp, int m, tri_sim_costs costs) {
    double p1 = (double)(pp - 1);
    switch (kind) {
    case TRI_SCHED_INTERLEAVED:
    case TRI_SCHED_FORWARD: return p1 / ((double)vpp * (double)m);
    case TRI_SCHED_ZBH1: return p1 * (costs.f + costs.b - costs.w) / ((double)m * (costs.f + costs.b + costs.w));
    default: return p1 / (double)m;
    }
}

static int label(const tri_action *a, int vpp, char *b, size_t n) {
    char k = a->kind == TRI_ACT_FWD ? 'F' : a->kind == TRI_ACT_BWD_W ? 'W' : 'B';
    return vpp > 1 ? snprintf(b, n, "%c%d.%d", k, a->mb, a->chunk) : snprintf(b, n, "%c%d", k, a->mb);
}

void tri_schedule_print_grid(FILE *f, const tri_schedule *s, const tri_sim_result *r) {
    /* One column per time unit up to TRI_GRID_MAX_COLS; a longer makespan is
     * scaled (a column then spans `unit` whole time units and shows the last
     * action that runs during it), so the grid stays bounded whatever the costs. */
    double span = r->makespan > 0 ? r->makespan : 0;
    double unit = span > TRI_GRID_MAX_COLS ? ceil(span / TRI_GRID_MAX_COLS) : 1.0; /* whole time units */
    long cols = (long)ceil(span / unit - 1e-9);
    int w = 1;
    char b[32];
    for (int q = 0; q < s->pp; q++)
        for (int i = 0; i < s->n[q]; i++)
            if (is_compute(s->a[q][i].kind)) {
                int k = label(&s->a[q][i], s->vpp, b, sizeof b);
                if (k > w) w = k;
            }
    if (unit > 1.0) {
        if (w < 3) w = 3; /* the column numbers, < TRI_GRID_MAX_COLS */
        fprintf(f, "(makespan %g: one column is %g time units, showing the last action that runs in it)\n", span, unit);
    }
    fprintf(f, "%-8s|", unit > 1.0 ? "column" : "time");
    for (long t = 0; t < cols; t++) fprintf(f, " %*ld", w, t);
    fprintf(f, "\n");
    char *row = malloc((size_t)(cols > 0 ? cols : 1) * 32);
    if (!row) return;
    for (int q = 0; q < s->pp; q++) {
        for (long t = 0; t < cols; t++) strcpy(row + t * 32, ".");
        for (int i = 0; i < s->n[q]; i++) {
            const tri_action *a = &s->a[q][i];
            if (!is_compute(a->kind) || r->end[q][i] <= r->start[q][i]) continue;
            label(a, s->vpp, b, sizeof b);
            double t0d = r->start[q][i] / unit + 1e-9, t1d = r->end[q][i] / unit + 0.999999;
            long t0 = t0d < (double)cols ? (long)t0d : cols, t1 = t1d < (double)cols ? (long)t1d : cols;
            for (long t = t0; t < t1; t++) snprintf(row + t * 32, 32, "%s", b);
        }
        fprintf(f, "stage %-2d|", q);
        for (long t = 0; t < cols; t++) fprintf(f, " %*s", w, row + t * 32);
        fprintf(f, "\n");
    }
    free(row);
    if (r->deadlock || r->invalid) fprintf(f, "%s\n", r->why);
    fprintf(f, "makespan %g, bubble %.4f (idle / busy of the busiest stage)\npeak in flight per stage:", r->makespan,
            r->bubble);
    for (int q = 0; q < s->pp; q++) fprintf(f, " %d", r->peak[q]);
    fprintf(f, "\n");
}
