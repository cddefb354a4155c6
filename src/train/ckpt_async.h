/* `trident train`: how the loop saves checkpoints (src/train/loop.c calls
 * these): synchronously (checkpoint.async = false, tri_model_save) or
 * through the background writer of model/ckpt/async.h, the figures of every
 * save in the log line "saved checkpoint ..." and in metrics.jsonl, and
 * checkpoint.every_s's clock. Every function is collective over the world
 * but ckpt_time_due and ckpt_abandon. */
#ifndef TRI_TRAIN_CKPT_ASYNC_H
#define TRI_TRAIN_CKPT_ASYNC_H

#include "train/trainer.h"

/* Saves step `step` with state.json text `state`: the synchronous save, or
 * the snapshot of an asynchronous one (after waiting for the save in
 * flight); finish: wait until it is committed (SIGTERM's save, the end of
 * the run). Returns 0 or -1 on every rank. */
int ckpt_save(trainer *t, int step, const char *state, int finish);

/* Not collective, at the end of trainer_setup (the model and optimizer
 * built, a resume loaded): with checkpoint.async (and not synthetic) the
 * background writer's state, and in a run that saves during training
 * (checkpoint.every or every_s) a thread that allocates and touches the
 * staging memory while the first steps run, so that neither the loop nor
 * the first save allocates. Returns 0, or -1 out of memory (said; the
 * caller ends the run as for any set-up failure). */
int ckpt_setup(trainer *t);

/* Not collective: this rank's word of the background save's state, for the
 * loop's per-step all-reduce (MAX; model/ckpt/async.h). Allocates nothing. */
int ckpt_word(trainer *t);

/* Not collective: on world rank 0, 1 when checkpoint.every_s seconds have
 * passed since the last save (or the start), else 0; the loop's all-reduce
 * (MAX) makes it every rank's decision at the same step. */
int ckpt_time_due(trainer *t);

/* With the world's MAX of ckpt_word: moves the save in flight on (a
 * finished one is logged). Returns 0 or -1 on every rank (the save failed). */
int ckpt_advance(trainer *t, int world_word);

/* Waits until the save in flight (if any) is committed, and logs it: what a
 * rollback (src/train/bad_run.c) does before it reads the last checkpoint.
 * Returns 0 or -1 on every rank. */
int ckpt_finish(trainer *t);

/* Not collective, for every exit of tri_train: a save in flight that is not
 * committed is given up (its temp dir removed), the writer freed. */
void ckpt_abandon(trainer *t);

#endif
