/* The token files a run reads, recorded in every checkpoint's state.json, so
 * that `train --resume` notices a file that changed since the checkpoint was
 * saved (the sample stream is a pure function of the files' contents: a
 * changed file silently changes what the resumed run trains on).
 *
 * state.json gets
 *   "data_files": [{"role": "train", "path": "data/x.bin", "bytes": 123456,
 *                   "fingerprint": "0123456789abcdef"}, ...]
 * one entry per file actually read (a Megatron pair gives its .bin and its
 * .idx), the fingerprint being tri_dataset's (data/dataset.h: size, both
 * ends and 64 evenly spread blocks; not a full checksum). */
#ifndef TRI_DATAFILES_H
#define TRI_DATAFILES_H

#include <cjson/cJSON.h>

#include "data/sampler.h"

/* Adds "data_files" to the state object for the files of train and val
 * (either may be NULL; a file in both is listed once, with role "train"). */
void tri_datafiles_to_state(cJSON *state, const tri_sampler *train, const tri_sampler *val);

/* Compares the files recorded in <ckpt_dir>/state.json with the ones open
 * now, by path: a file whose size or fingerprint differs is refused (one
 * line naming the file, the checkpoint and what changed, and the flag that
 * overrides; returns -1) unless allow_change, in which case it is only said
 * (when verbose). Files recorded but not used now, or used now but not
 * recorded (the spec changed), are not compared. A state.json without
 * "data_files" (an older trident) is accepted with a note. Returns 0 or -1. */
int tri_datafiles_check_resume(const char *ckpt_dir, const tri_sampler *train, const tri_sampler *val, int allow_change,
                               int verbose);

#endif
