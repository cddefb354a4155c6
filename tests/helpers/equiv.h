/* Equivalence runs through tridentrun, shared by the system tests that
 * prove a parallel layout follows one rank (tests/system/test_parallel*.c):
 * the tiny config trained in a temporary directory on random llm.c token
 * files, its losses read back from metrics.jsonl, and two checkpoints
 * compared tensor by tensor. The tolerances are the callers' (each test
 * justifies its own). */
#ifndef TT_EQUIV_H
#define TT_EQUIV_H

#include "model/ckpt/safetensors.h"

/* A fresh directory with train.bin (20,000 tokens) and val.bin (4,000), ids
 * below 256 (malloc'd path; tt_rmrf it). */
char *tt_equiv_dir(void);

/* `trident train configs/tiny-test.json` in dir with tp x dp ranks through
 * tridentrun (2 minutes at most), reading dir's token files, its checkpoints
 * under dir/ck, its logs in dir/log_ck and its ranks' in dir/ranks_ck; sets
 * are more arguments (--set ...). Returns the exit code; *out the output. */
int tt_equiv_run(const char *dir, int tp, int dp, const char *ck, const char *sets, char **out);

/* The losses of run ck, in order (tt_losses of dir/log_ck/metrics.jsonl). */
int tt_equiv_losses(const char *dir, const char *ck, double **out);

/* Each b[i] within rtol of a[i] (relative), i < n; a failure names the step. */
void tt_equiv_expect_losses(const double *a, const double *b, int n, double rtol, const char *what);

/* One step of a run as metrics.jsonl logged it: its loss (NaN when the step
 * was skipped or logged none), whether it was skipped, and the loss scale
 * after it (fp16; 0 when not logged). */
typedef struct tt_step {
    double loss, scale;
    int skipped;
} tt_step;

/* The steps of run ck (dir/log_ck/metrics.jsonl) into rows[s - 1], s <= max
 * (asserts the file reads and every step line's number is in range).
 * Returns the last step seen. */
int tt_equiv_steps(const char *dir, const char *ck, tt_step *rows, int max);

/* model.safetensors of the latest checkpoint under dir/ck (malloc'd path). */
char *tt_equiv_latest_model(const char *dir, const char *ck);

/* Every tensor of the latest checkpoint under dir/ck_b against dir/ck_a: the
 * same names and shapes, every value within atol. Returns the largest
 * difference seen. */
double tt_equiv_expect_params(const char *dir, const char *ck_a, const char *ck_b, double atol, const char *what);

/* Runs ck at tp x dp with sets (tt_equiv_run; asserts it succeeds and its
 * output holds `banner`), then expects its n losses within rtol of ref's and
 * its final parameters within atol of run ref_ck's. */
void tt_equiv_expect_follows(const char *dir, const double *ref, const char *ref_ck, int n, const char *ck, int tp,
                             int dp, const char *sets, const char *banner, double rtol, double atol, const char *what);

/* Every tensor of the safetensors file dir/file as fp32 (16-bit ones
 * widened), in header order (asserts it reads). */
typedef struct tt_tensors {
    tri_st_file f;
    float **v; /* [f.layout.n] */
} tt_tensors;
void tt_tensors_load(tt_tensors *t, const char *dir, const char *file);
void tt_tensors_free(tt_tensors *t);

/* dir_a/file and dir_b/file hold the same tensors, in the same order, bit
 * for bit (their metadata, e.g. the optimizer file's step, aside); a failure
 * names `what` and the first tensors that differ. */
void tt_expect_same_tensors(const char *dir_a, const char *dir_b, const char *file, const char *what);

#endif
