/* The trainer's state.json in a checkpoint directory: what a resumed run
 * needs besides the tensors.
 *
 *   {"step": S, "samples_consumed": K, ..., "config": {the run's config}}
 *
 * step and samples_consumed are non-negative integers (step fits an int,
 * samples_consumed is below 2^53, the largest integer a JSON number keeps
 * exactly); config is the object tri_config_to_json wrote, loaded and
 * validated like a config file. Errors print one line naming the file and
 * the key ("trident: ck/step_00000010/state.json: \"step\": ...") and return
 * -1; nothing is written to the outputs then. */
#ifndef TRI_CKPT_STATE_H
#define TRI_CKPT_STATE_H

#include <stdint.h>

#include "config/config.h"

/* Parses state.json text; `name` stands for the file in messages. */
int tri_ckpt_state_parse(const char *json, const char *name, int *step, uint64_t *consumed, tri_config *saved);

/* Reads <dir>/state.json (a regular file of at most 64 MiB: src/base/file.h)
 * and parses it. */
int tri_ckpt_state_read(const char *dir, int *step, uint64_t *consumed, tri_config *saved);

/* The optional numbers of <dir>/state.json written by mixed-precision runs:
 * "optimizer_updates" (AdamW's step count; fp16 skips steps without an
 * update), "loss_scale" and "loss_scale_clean_steps" (fp16). Each output is
 * left as it was when its key is absent (older checkpoints, other
 * precisions). Returns 0, or -1 (printed) when the file cannot be read or a
 * key is present but not a finite number in range (updates and clean steps:
 * integers in [0, 2^31); the scale: > 0). */
int tri_ckpt_state_scaler(const char *dir, int *updates, double *loss_scale, int *clean_steps);

#endif
