/* The pipeline executor's stage (parallel/pipeline.h, tri_stage_ops) over
 * the runtime (model/runtime.h): this rank's chunks of a model, their pools
 * of saved slots and the stage's workspace.
 *
 *   acquire / release      tri_slot_acquire / tri_slot_release on chunk c's pool;
 *   stage_batch            tri_slot_stage;
 *   forward                tri_chunk_forward (TRI_PIPE_LOSS: TRI_FWD_LOSS,
 *                          TRI_PIPE_TRAIN: TRI_FWD_TRAIN); output in ws->out;
 *   backward, _input, _weight   tri_chunk_backward, _input, _weight; the
 *                          input gradient in ws->dres;
 *   copy_act / copy_grad   the backend's copy of ws->out / ws->dres, one
 *                          chunk boundary (tri_chunk_boundary_elems of the
 *                          activation dtype).
 * A chunk is TRI_PIPE_FIRST when it has the embedding, TRI_PIPE_LAST when it
 * has the head. */
#ifndef TRI_STAGE_H
#define TRI_STAGE_H

#include "model/gpt.h"
#include "model/runtime.h"
#include "parallel/pipeline.h"

typedef struct tri_stage {
    tri_gpt *g;            /* not owned */
    tri_slot_pool *pools;  /* [g->n_chunks], not owned; every pool of one B x T */
    tri_workspace *ws;     /* not owned */
    size_t boundary_bytes; /* one chunk boundary of one micro-batch */
} tri_stage;

/* Binds st to g's chunks, their pools and the workspace (all must outlive
 * st) and returns the executor's view of it, to give tri_pipe_init; st must
 * outlive the executor. g->n_chunks <= TRI_PIPE_MAX_CHUNKS. */
tri_pipe_stage tri_stage_bind(tri_stage *st, tri_gpt *g, tri_slot_pool *pools, tri_workspace *ws);
/* ends[c] = TRI_PIPE_FIRST | TRI_PIPE_LAST of g's local chunk c, for
 * c < g->n_chunks (a described model will do: tri_pipe_box_need's input). */
void tri_stage_ends(const tri_gpt *g, unsigned char *ends);

#endif
