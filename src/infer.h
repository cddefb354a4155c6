/* A model loaded from a checkpoint for inference on one rank (sample, eval). */
#ifndef TRI_INFER_H
#define TRI_INFER_H

#include "model/gpt.h"
#include "src/config.h"

typedef struct tri_infer {
    tri_config cfg;           /* the run's config from state.json, or defaults + config.json */
    char dir[TRI_PATH_MAX];   /* the resolved checkpoint directory */
    tri_comm self;            /* a TP group of one */
    tri_gpt gpt;
    tri_acts acts;
} tri_infer;

/* Resolves `ckpt` (a checkpoint root or a step directory), reads its config
 * and loads the weights, with activations for micro-batches of B sequences.
 * Returns 0, or -1 after a message naming the file at fault. */
int tri_infer_open(tri_infer *m, const char *ckpt, size_t B);
void tri_infer_close(tri_infer *m); /* NULL-safe */

#endif
