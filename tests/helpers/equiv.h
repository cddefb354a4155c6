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

/* The reference of an equivalence test: ck at one rank with sets (asserts
 * it succeeds); returns its n losses (asserts there are n; malloc'd). */
double *tt_equiv_reference(const char *dir, const char *ck, const char *sets, int n);

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

/* A layout to compare with a reference run: tp x dp ranks and more
 * settings. */
typedef struct tt_layout {
    int tp, dp;
    const char *more;
} tt_layout;

/* Each layout as run "<prefix>_<i>" with the settings `sets` first (the
 * model, its steps), then L[i].more: tt_equiv_expect_follows against the
 * reference run ref_ck (its n losses ref), each run's output holding
 * `banner` (""; anything). A failure names prefix, the layout and `label`. */
void tt_equiv_expect_layouts_follow(const char *dir, const double *ref, const char *ref_ck, int n, const char *prefix,
                                    const char *sets, const char *label, const tt_layout *L, size_t n_layouts,
                                    const char *banner, double rtol, double atol);

/* Runs ck at tp x dp with sets and --stop-at-step `at` (asserts it
 * succeeds), then moves its metrics.jsonl aside (log_ck/first.jsonl), so
 * that the losses a resumed run logs there are its own. */
void tt_equiv_save_at(const char *dir, const char *ck, int tp, int dp, const char *sets, int at);

/* A copy of run from's checkpoints as run `to` (dir/to, and an empty
 * dir/log_to): each resume of one save from its own copy. */
void tt_equiv_copy_run(const char *dir, const char *from, const char *to);

/* Resumes run ck at tp x dp with sets and --resume (asserts it succeeds,
 * expects "resumed from"), then expects its n - at losses within rtol of
 * ref[at..n). */
void tt_equiv_expect_resumed(const char *dir, const double *ref, int at, int n, const char *ck, int tp, int dp,
                             const char *sets, double rtol, const char *what);

/* Checkpoints across ZeRO stages and layouts: saves after 5 of 10 steps at
 * tp x dp with parallel.zero = zero as run "zs_<tp>_<dp>_<zero>", copies it
 * once per resume layout {tp, dp, zero} and resumes each: steps 6..10 must
 * follow ref[5..10) within rtol. `sets` first in every run (the model, its
 * steps), save_more and resume_more last. */
void tt_equiv_expect_reshard(const char *dir, const double *ref, const char *sets, int tp, int dp, int zero,
                             const char *save_more, const int (*resume)[3], int n_resume, const char *resume_more,
                             double rtol);

/* `trident bench configs/tiny-test.json --steps 2` with sets through
 * tridentrun in dir (2 minutes at most; the ranks' logs in dir/ranks_<tag>).
 * Returns the exit code; *out the output. */
int tt_equiv_bench(const char *dir, const char *tag, const char *sets, char **out);

/* The number after the first `"key": ` in run ck's metrics.jsonl (asserts
 * the file reads and holds it). */
double tt_equiv_metric(const char *dir, const char *ck, const char *key);
/* The whole number after `key` in text (e.g. "bytes=" in a trainer's line),
 * asserting that key is there. */
size_t tt_equiv_field(const char *text, const char *key);
/* Runs tt_equiv_bench at dp 2 with 4 heads and `sets` (tag bench<i>) and
 * checks its data-parallel communication (the `comm dp X MB/step in N calls`
 * line) against a closed form: calls exactly, bytes within the print's
 * 10 kB, beside the 16 bytes of the two host values (the loss and the
 * gradient norm). */
void tt_equiv_expect_dp_comm(const char *dir, size_t i, const char *sets, int calls, double bytes);

/* The control of an equivalence test: run ck at tp x dp with sets and the
 * test fault `fault` (a TRIDENT_DEBUG_* variable, set to 1 for this run
 * only) succeeds but leaves the reference: some of its n losses is more than
 * min_rel (relative) from ref's; else `what` (the mechanism the fault
 * removes) is not tested, and the failure says so. */
void tt_equiv_expect_diverges(const char *dir, const double *ref, int n, const char *fault, const char *ck, int tp,
                              int dp, const char *sets, double min_rel, const char *what);

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
