/* Data-parallel gradient reduction in buckets, overlapped with backward.
 *
 * The gradient buffer is cut into contiguous buckets of about bucket_mb MiB,
 * front to back (the model lays gradients out in the order backward finishes
 * them). During the last micro-batch's backward, the caller reports each time
 * a prefix of the buffer is final (tri_grad_sync_ready, wired to the model's
 * grads_ready hook); every bucket that lies wholly inside that prefix starts a
 * non-blocking all-reduce (sum) over the DP group at once.
 * tri_grad_sync_finish starts what is left and waits for all of them, before
 * clipping and the optimizer step. With dp = 1 nothing is sent.
 *
 * Gradients are pre-scaled by the model (1 / (global_batch * T) per token),
 * so the sum over DP ranks is the global-mean gradient. */
#ifndef TRI_GRAD_SYNC_H
#define TRI_GRAD_SYNC_H

#include <stddef.h>

#include "parallel/comm.h"

typedef struct tri_grad_sync {
    float *grads; /* (n_floats), not owned */
    size_t n_floats;
    tri_comm *dp;   /* not owned */
    size_t *bounds; /* (n_buckets + 1) bucket edges in floats */
    tri_req *reqs;  /* (n_buckets)                            */
    int n_buckets;
    int next;  /* first bucket not started yet           */
    int armed; /* the current backward is the last micro-batch's */
} tri_grad_sync;

/* bucket_mb <= 0: one bucket. */
int tri_grad_sync_init(tri_grad_sync *s, float *grads, size_t n_floats, tri_comm *dp, double bucket_mb);
void tri_grad_sync_free(tri_grad_sync *s); /* NULL-safe */

/* At the start of a step. */
void tri_grad_sync_begin(tri_grad_sync *s);
/* Before each micro-batch's backward: last != 0 for the final one, whose
 * backward starts the bucket all-reduces. */
void tri_grad_sync_set_last(tri_grad_sync *s, int last);
/* grads[0, n_final) will not change any more in this step (ignored unless
 * the current backward is the last micro-batch's). */
void tri_grad_sync_ready(tri_grad_sync *s, size_t n_final);
/* Starts the remaining buckets and waits for every one. */
void tri_grad_sync_finish(tri_grad_sync *s);

#endif
