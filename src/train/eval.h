/* The mean token loss of a checkpoint on a token file (`trident eval`): the
 * file's windows in order, from the first, in batches of the model's B
 * sequences (src/train/infer.h), each window at most once. */
#ifndef TRI_TRAIN_EVAL_H
#define TRI_TRAIN_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "data/sampler.h"
#include "train/infer.h"

typedef struct tri_eval_result {
    double loss;     /* mean token loss over the windows evaluated        */
    uint64_t tokens; /* tokens whose loss is in the mean: windows * seq_len */
    size_t batches;  /* batches run; the last may hold fewer than B        */
} tri_eval_result;

/* Evaluates windows [0, windows) of s (windows <= s->total_windows, > 0;
 * s built for the model's seq_len and vocabulary) in ceil(windows / m->B)
 * batches, the last one partial when B does not divide windows. Between
 * batches a stop request (SIGTERM, SIGINT; base/stop.h, installed here with
 * TRI_STOP_SECOND_KILLS) ends the pass without a result. Returns the exit
 * code (base/exit.h): TRI_EXIT_OK with *r filled, TRI_EXIT_FAILURE (out of
 * memory, a token file that could not be read; said), or
 * tri_exit_signal(sig) (said). */
int tri_eval_run(tri_infer *m, const tri_sampler *s, uint64_t windows, tri_eval_result *r);

#endif
