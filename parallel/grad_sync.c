#include "parallel/grad_sync.h"
#include "src/base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void start_upto(tri_grad_sync *s, size_t n_final) {
    while (s->next < s->n_buckets && s->bounds[s->next + 1] <= n_final) {
        int b = s->next++;
        tri_comm_iallreduce(s->dp, s->grads + s->bounds[b], s->bounds[b + 1] - s->bounds[b], TRI_F32, TRI_SUM,
                            &s->reqs[b]);
    }
}

void tri_grad_sync_ready(tri_grad_sync *s, size_t n_final) {
    if (s->armed && s->dp->size > 1) start_upto(s, n_final);
}

int tri_grad_sync_init(tri_grad_sync *s, float *grads, size_t n_floats, tri_comm *dp, double bucket_mb) {
    memset(s, 0, sizeof *s);
    s->grads = grads;
    s->n_floats = n_floats;
    s->dp = dp;
    size_t total = n_floats;
    size_t per = bucket_mb > 0 ? (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float)) : total;
    if (per == 0) per = 1;
    s->n_buckets = (int)((total + per - 1) / per);
    if (s->n_buckets == 0) s->n_buckets = 1;
    s->bounds = calloc((size_t)s->n_buckets + 1, sizeof *s->bounds);
    s->reqs = calloc((size_t)s->n_buckets, sizeof *s->reqs);
    if (!s->bounds || !s->reqs) {
        tri_error("out of memory (gradient buckets)");
        tri_grad_sync_free(s);
        return -1;
    }
    for (int b = 0; b < s->n_buckets; b++) s->bounds[b] = (size_t)b * per;
    s->bounds[s->n_buckets] = total;
    return 0;
}

void tri_grad_sync_free(tri_grad_sync *s) {
    if (!s) return;
    free(s->bounds);
    free(s->reqs);
    memset(s, 0, sizeof *s);
}

void tri_grad_sync_begin(tri_grad_sync *s) {
    s->next = 0;
    s->armed = 0;
}

void tri_grad_sync_set_last(tri_grad_sync *s, int last) { s->armed = last != 0; }

void tri_grad_sync_finish(tri_grad_sync *s) {
    if (s->dp->size == 1) return;
    start_upto(s, s->n_floats);
    for (int b = 0; b < s->n_buckets; b++) tri_comm_wait(s->dp, &s->reqs[b]);
    s->armed = 0;
}
