/* Context parallelism: the load-balanced split, global positions and ring
 * attention. See model/cp.h. */
#include "model/cp.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

enum { TAG_KV = 71, TAG_DKV = 72 }; /* p2p tags of the ring (the CP group carries nothing else) */

static int on(const tri_gpt *g) { return g->cp > 1; }

int tri_cp_set(tri_gpt *g, tri_comm *comm) {
    g->cp_comm = comm;
    g->cp = comm->size;
    g->cp_rank = comm->rank;
    if (g->cp <= 1) return 0;
    const tri_ops *ops = g->ctx->ops;
    if (!ops->attention_block_fwd || !ops->attention_block_bwd || !ops->attention_kv_copy)
        return tri_error("parallel.cp = %d: the %s backend has no ring attention yet (train with --device cpu, or "
                         "parallel.cp = 1)",
                         g->cp, ops->name);
    /* the ring keeps the log-sum-exp as the state (kernels/ops.h's CPU backend does) */
    if (ops->attention_saved_floats(1, 2, 1, 1, 2) != 2)
        return tri_error("parallel.cp = %d: the %s backend's attention state is not a log-sum-exp per row", g->cp,
                         ops->name);
    return 0;
}

size_t tri_cp_position(size_t i, size_t Tl, int cp, int r) {
    const size_t Tc = Tl / 2;
    return i < Tc ? (size_t)r * Tc + i : (size_t)(2 * cp - 1 - r) * Tc + (i - Tc);
}

void tri_cp_local_tokens(int32_t *x, size_t B, size_t T, int cp, int r) {
    if (cp <= 1) return;
    const size_t Tc = T / (size_t)(2 * cp), Tl = 2 * Tc;
    int32_t *tmp = malloc(Tl * sizeof *tmp);
    if (tmp == NULL) TRI_FAIL("out of host memory (%zu tokens)", Tl);
    /* sequence b's local rows go to [b Tl, b Tl + Tl): never past its own
     * global rows [b T, ...), so b in increasing order reads each before
     * it is overwritten */
    for (size_t b = 0; b < B; b++) {
        memcpy(tmp, x + b * T + (size_t)r * Tc, Tc * sizeof *tmp);
        memcpy(tmp + Tc, x + b * T + (size_t)(2 * cp - 1 - r) * Tc, Tc * sizeof *tmp);
        memcpy(x + b * Tl, tmp, Tl * sizeof *tmp);
    }
    free(tmp);
}

/* ------------------------------------------------------------------------ */
/* positions                                                                 */

static char *at(const void *p, size_t elems, size_t esz) { return (char *)p + elems * esz; }

void tri_cp_embedding_fwd(tri_gpt *g, void *out, const int32_t *ids, const void *wte, const void *wpe, size_t B,
                          size_t T) {
    tri_ctx *c = g->ctx;
    if (!on(g)) {
        c->ops->embedding_fwd(c, out, ids, wte, wpe, B, T, g->C, g->vstart, g->Vl);
        return;
    }
    const size_t Tc = T / 2, A = tri_dtype_size(c->act_dtype), P = tri_dtype_size(c->param_dtype);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < 2; h++) {
            const size_t row = b * T + h * Tc, pos = tri_cp_position(h * Tc, T, g->cp, g->cp_rank);
            c->ops->embedding_fwd(c, at(out, row * g->C, A), ids + row, wte, wpe ? at(wpe, pos * g->C, P) : NULL, 1, Tc,
                                  g->C, g->vstart, g->Vl);
        }
}

void tri_cp_embedding_bwd(tri_gpt *g, float *dwte, float *dwpe, const void *dout, const int32_t *ids, size_t B,
                          size_t T) {
    tri_ctx *c = g->ctx;
    if (!on(g)) {
        c->ops->embedding_bwd(c, dwte, dwpe, dout, ids, B, T, g->C, g->vstart, g->Vl);
        return;
    }
    const size_t Tc = T / 2, A = tri_dtype_size(c->act_dtype);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < 2; h++) {
            const size_t row = b * T + h * Tc, pos = tri_cp_position(h * Tc, T, g->cp, g->cp_rank);
            c->ops->embedding_bwd(c, dwte, dwpe ? dwpe + pos * g->C : NULL, at(dout, row * g->C, A), ids + row, 1, Tc,
                                  g->C, g->vstart, g->Vl);
        }
}

void tri_cp_rope(tri_gpt *g, void *qkv, size_t B, size_t T, int inverse) {
    tri_ctx *c = g->ctx;
    void (*rope)(tri_ctx *, void *, const float *, size_t, size_t, int, int, int, size_t) =
        inverse ? c->ops->rope_bwd : c->ops->rope_fwd;
    if (!on(g)) {
        rope(c, qkv, g->inv_freq, B, T, g->NHl, g->NKVl, g->HS, 0);
        return;
    }
    const size_t Tc = T / 2, A = tri_dtype_size(c->act_dtype);
    for (size_t b = 0; b < B; b++)
        for (size_t h = 0; h < 2; h++) {
            const size_t row = b * T + h * Tc, pos = tri_cp_position(h * Tc, T, g->cp, g->cp_rank);
            rope(c, at(qkv, row * g->QKVl, A), g->inv_freq, 1, Tc, g->NHl, g->NKVl, g->HS, pos);
        }
}

/* ------------------------------------------------------------------------ */
/* the ring                                                                  */

/* The block that arrives at step s (1 <= s < cp) comes from rank src = r - s:
 * which of this rank's queries see which of its rows (model/cp.h): every
 * query its first chunk (src < r: *q0 = 0, *tk = T / 2 keys), or the second
 * chunk's queries both its chunks (src > r: *q0 = T / 2, *tk = T keys). */
static void visible(const tri_gpt *g, int s, size_t T, size_t *q0, size_t *tk) {
    const int src = (g->cp_rank - s + g->cp) % g->cp;
    *q0 = src < g->cp_rank ? 0 : T / 2;
    *tk = src < g->cp_rank ? T / 2 : T;
}

/* Starts the transfers of one step: buf to the next rank, into nbuf from the
 * previous one (n elements of t each; either may be NULL). The test that
 * follows makes them start now, before the block's compute is queued: NCCL
 * launches a batch of p2p calls only at its first wait or test
 * (parallel/nccl_plan.h), and MPI moves a message along inside its calls. */
static void ring_post(tri_gpt *g, const void *buf, void *nbuf, size_t n, tri_dtype t, int tag, tri_req *send,
                      tri_req *recv) {
    const int next = (g->cp_rank + 1) % g->cp, prev = (g->cp_rank - 1 + g->cp) % g->cp;
    if (nbuf) tri_comm_irecv(g->cp_comm, nbuf, n, t, prev, tag, recv);
    if (buf) tri_comm_isend(g->cp_comm, buf, n, t, next, tag, send);
    (void)tri_comm_test(g->cp_comm, nbuf ? recv : send);
}

void tri_cp_attention_fwd(tri_gpt *g, tri_workspace *ws, void *out, float *state, const void *qkv, size_t B, size_t T) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    const int NH = g->NHl, NKV = g->NKVl, HS = g->HS;
    if (!on(g)) {
        ops->attention_fwd(c, out, state, qkv, B, T, NH, NKV, HS);
        return;
    }
    const tri_dtype A = c->act_dtype;
    const size_t A_sz = tri_dtype_size(A), KW = (size_t)(2 * NKV * HS), W = g->QKVl;
    const size_t nkv = B * T * KW, C = (size_t)NH * (size_t)HS;
    ops->attention_kv_copy(c, ws->cp_kv[0], qkv, A, B, T, NH, NKV, HS, 0);
    for (int s = 0; s < g->cp; s++) {
        void *kv = ws->cp_kv[s % 2];
        tri_req send = {0}, recv = {0};
        /* the next block travels while this one is computed */
        if (s + 1 < g->cp) ring_post(g, kv, ws->cp_kv[(s + 1) % 2], nkv, A, TAG_KV, &send, &recv);
        if (s == 0) {
            ops->attention_block_fwd(c, ws->cp_o, state, qkv, kv, B, T, T, 0, 1, 0, NH, NKV, HS);
        } else {
            size_t q0, tk;
            visible(g, s, T, &q0, &tk);
            for (size_t b = 0; b < B; b++) /* each sequence: its rows of the block, the first tk */
                ops->attention_block_fwd(c, ws->cp_o + b * T * C, state + b * (size_t)NH * T, at(qkv, b * T * W, A_sz),
                                         at(kv, b * T * KW, A_sz), 1, T, tk, q0, 0, 1, NH, NKV, HS);
        }
        tri_comm_wait(g->cp_comm, &send);
        tri_comm_wait(g->cp_comm, &recv);
    }
    ops->cast(c, out, A, ws->cp_o, TRI_F32, B * T * C);
}

void tri_cp_attention_bwd(tri_gpt *g, tri_workspace *ws, void *dqkv, const void *dout, const void *qkv, const void *out,
                          const float *state, size_t B, size_t T) {
    tri_ctx *c = g->ctx;
    const tri_ops *ops = c->ops;
    const int NH = g->NHl, NKV = g->NKVl, HS = g->HS;
    if (!on(g)) {
        ops->attention_bwd(c, dqkv, ws->att_scratch, dout, qkv, out, state, B, T, NH, NKV, HS);
        return;
    }
    const tri_dtype A = c->act_dtype;
    const size_t A_sz = tri_dtype_size(A), KW = (size_t)(2 * NKV * HS), W = g->QKVl;
    const size_t nkv = B * T * KW;
    float *own = ws->cp_dkv[0], *const acc[2] = {ws->cp_dkv[1], ws->cp_dkv[2]};
    ops->zero(c, ws->cp_dqkv, B * T * W * sizeof(float));
    ops->zero(c, own, nkv * sizeof(float));
    ops->attention_kv_copy(c, ws->cp_kv[0], qkv, A, B, T, NH, NKV, HS, 0);
    for (int s = 0; s < g->cp; s++) {
        void *kv = ws->cp_kv[s % 2];
        tri_req send = {0}, recv = {0}, dsend = {0}, drecv = {0};
        if (s + 1 < g->cp) ring_post(g, kv, ws->cp_kv[(s + 1) % 2], nkv, A, TAG_KV, &send, &recv);
        if (s == 0) {
            ops->attention_block_bwd(c, ws->cp_dqkv, own, ws->att_scratch, dout, qkv, kv, out, state, B, T, T, 0, 1, NH,
                                     NKV, HS);
        } else {
            /* the gradient of block src = r - s: started here at s = 1, else
             * the one r - 1 sent at the end of its step s - 1; the next one
             * (at the last step: this rank's own, complete) arrives meanwhile */
            float *dkv = acc[s % 2];
            if (s == 1) ops->zero(c, dkv, nkv * sizeof(float));
            ring_post(g, NULL, acc[(s + 1) % 2], nkv, TRI_F32, TAG_DKV, NULL, &drecv);
            const size_t C = (size_t)NH * (size_t)HS;
            size_t q0, tk;
            visible(g, s, T, &q0, &tk);
            for (size_t b = 0; b < B; b++)
                ops->attention_block_bwd(c, ws->cp_dqkv + b * T * W, dkv + b * T * KW, ws->att_scratch,
                                         at(dout, b * T * C, A_sz),
                                         at(qkv, b * T * W, A_sz), at(kv, b * T * KW, A_sz), at(out, b * T * C, A_sz),
                                         state + b * (size_t)NH * T, 1, T, tk, q0, 0, NH, NKV, HS);
            ring_post(g, dkv, NULL, nkv, TRI_F32, TAG_DKV, &dsend, NULL);
        }
        tri_comm_wait(g->cp_comm, &send);
        tri_comm_wait(g->cp_comm, &recv);
        tri_comm_wait(g->cp_comm, &drecv);
        tri_comm_wait(g->cp_comm, &dsend);
    }
    /* the other ranks' share of this rank's key/value gradients, after its own */
    ops->add(c, own, acc[g->cp % 2], nkv);
    ops->attention_kv_copy(c, ws->cp_dqkv, own, TRI_F32, B, T, NH, NKV, HS, 1);
    ops->cast(c, dqkv, A, ws->cp_dqkv, TRI_F32, B * T * W);
}
