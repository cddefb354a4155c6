/* Asynchronous checkpoints (checkpoint.async): a save blocks the step only
 * while every rank copies its tensors into host staging memory
 * (tri_model_snapshot); a background thread per rank then writes them into
 * the save's temporary directory, and world rank 0's thread checksums,
 * fsyncs and commits the checkpoint (model/ckpt/store.h: manifest last,
 * rename), while training goes on. At most one save is in flight.
 *
 * The background threads never communicate: MPI may be initialised without
 * MPI_THREAD_MULTIPLE, and the comm layer is not thread-safe. The one piece
 * of agreement a commit needs, "every rank's part is written", is reached on
 * the main threads: each rank's state is one int (tri_ckpt_async_word), the
 * world's maximum of which the trainer computes once per step inside the
 * all-reduce it already does for the stop flag (so a save in flight costs no
 * extra collective), and hands to tri_ckpt_async_advance. When every rank's
 * part is written, rank 0's thread is told to commit; when it has, the save
 * is done (in a world of one there is nothing to agree on: the thread
 * commits as soon as its part is written). A failure anywhere fails the
 * save on every rank, at the same
 * step, as a synchronous save does. The temporary directory is renamed into
 * place only by the commit, so a kill at any moment of a background write
 * leaves the previous complete checkpoint as the one --resume takes.
 *
 * Every function but tri_ckpt_async_word, _abandon and _free is collective
 * over the world, called at the same step by every rank. */
#ifndef TRI_MODEL_CKPT_ASYNC_H
#define TRI_MODEL_CKPT_ASYNC_H

#include "model/ckpt/checkpoint.h"

typedef struct tri_ckpt_async tri_ckpt_async;

/* The figures of a finished save (step -1: none finished). */
typedef struct tri_ckpt_done {
    long step;
    double wait_ms;     /* blocked for the previous save still in flight  */
    double blocking_ms; /* blocked for this one (the snapshot)            */
    double write_ms;    /* world rank 0's background write and commit      */
    long long bytes;    /* world rank 0: the checkpoint's files, in bytes   */
} tri_ckpt_done;

/* NULL when out of memory (printed). */
tri_ckpt_async *tri_ckpt_async_new(void);

/* Waits for the save in flight, if any (its figures into *prev, step -1 if
 * none), then snapshots step `step` and starts writing it in the
 * background. The snapshot's blocking time is kept for the save's figures.
 * Returns 0 on every rank, or -1 on every rank (this save or the one waited
 * for failed: printed; the checkpoints before are intact). */
int tri_ckpt_async_start(tri_ckpt_async *a, tri_ckpt_store *store, long step, const tri_gpt *g, const tri_optim *o,
                         tri_dist *d, const char *state_json, int keep, tri_dtype model_dtype, tri_ckpt_done *prev);

/* Not collective: allocates the staging memory of this rank's snapshots
 * and touches every page, in a background thread, so that the first save
 * does not pay for it while training waits (tri_ckpt_async_start waits for
 * it). Call it with no save in flight; once is enough. Returns 0, or -1 when
 * the thread cannot start (then the first save allocates). */
int tri_ckpt_async_reserve(tri_ckpt_async *a, const tri_gpt *g, const tri_optim *o, const tri_dist *d,
                           tri_dtype model_dtype);

/* Not collective: this rank's state, for an all-reduce (MAX) over the world:
 * 0 nothing to wait for here, 1 still writing or committing, 2 failed. */
int tri_ckpt_async_word(const tri_ckpt_async *a);

/* Whether a save is in flight (the same answer on every rank). NULL-safe. */
int tri_ckpt_async_busy(const tri_ckpt_async *a);

/* Acts on the world's maximum of the words: starts the commit when every
 * part is written, finishes the save when it is committed (its figures into
 * *done; done->step -1 when none finished), fails it on every rank when any
 * rank failed. Returns 0, or -1 on every rank. NULL-safe. */
int tri_ckpt_async_advance(tri_ckpt_async *a, tri_ckpt_store *store, tri_dist *d, int world_word, tri_ckpt_done *done);

/* Until no save is in flight (polling the words every half millisecond).
 * Returns 0 (the finished save's figures into *done) or -1 on every rank.
 * NULL-safe. */
int tri_ckpt_async_wait(tri_ckpt_async *a, tri_ckpt_store *store, tri_dist *d, tri_ckpt_done *done);

/* Not collective, for error exits (other ranks may be gone): lets this
 * rank's thread finish; a save whose commit has not begun is not committed
 * (world rank 0 removes its temporary directory), one whose commit has begun
 * is completed. Either way the newest checkpoint in the store is complete.
 * NULL-safe, idempotent. */
void tri_ckpt_async_abandon(tri_ckpt_async *a, tri_ckpt_store *store);

/* NULL-safe: abandons a save in flight, frees the staging memory. */
void tri_ckpt_async_free(tri_ckpt_async *a, tri_ckpt_store *store);

#endif
