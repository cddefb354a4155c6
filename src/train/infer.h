/* A model loaded from a checkpoint for inference on one rank (sample, eval). */
#ifndef TRI_INFER_H
#define TRI_INFER_H

#include "model/gpt.h"
#include "model/runtime.h"
#include "config/config.h"

typedef struct tri_infer {
    tri_config cfg;         /* the run's config from state.json, or defaults + config.json */
    char dir[TRI_PATH_MAX]; /* the resolved checkpoint directory */
    tri_comm self;          /* a TP group of one */
    tri_ctx ctx;            /* the CPU backend */
    tri_gpt gpt;            /* the whole model as one chunk */
    tri_slot_pool pool;     /* one slot of B sequences */
    tri_workspace ws;
    size_t B;
} tri_infer;

/* Resolves `ckpt` (a checkpoint root or a step directory), reads its config
 * and loads the weights, with activations for micro-batches of B sequences.
 * Returns 0, or -1 after a message naming the file at fault. */
int tri_infer_open(tri_infer *m, const char *ckpt, size_t B);
void tri_infer_close(tri_infer *m); /* NULL-safe */

/* Forward of B sequences of ids (host, B*T). targets (host, B*T) NULL: the
 * logits only (read them with tri_infer_logits), returns 0; else the sum of
 * the token losses. */
double tri_infer_forward(tri_infer *m, const int32_t *ids, const int32_t *targets);
/* Forward of B sequences of ids and targets (host, B*T each; every id a
 * valid token, whether counted or not): the sum of the token losses of the
 * first `rows` sequences (rows <= B), for a last batch with fewer sequences
 * than B (the other rows are computed, not counted). rows == B: exactly
 * tri_infer_forward's sum. */
double tri_infer_loss(tri_infer *m, const int32_t *ids, const int32_t *targets, size_t rows);
/* Copies the logits of row (b*T + t) of the last forward to host (V floats:
 * the real vocabulary). */
void tri_infer_logits(tri_infer *m, size_t row, float *host);

#endif
