/* Tensor and data parallelism through tridentrun, proven by equivalence with
 * one rank: losses and parameters, resharding a checkpoint, failure and
 * restart, SIGTERM, and layouts that do not divide.
 *
 * Tolerances (float reduction order is the only allowed difference):
 *   - losses: 1e-6 relative. Measured: at most 9e-9 over 10 steps for every
 *     layout below. A missing or doubled all-reduce changes a loss by 1e-3 or
 *     more.
 *   - parameters after 10 AdamW steps: 1e-5 absolute. TP splits the sums of
 *     row-parallel matmuls and DP adds gradient partials in another order, so
 *     gradients differ by ~1e-7 relative; Adam divides each gradient by its
 *     running RMS, so elements with small gradients carry that difference into
 *     their update; measured at most 1.8e-6 after 10 steps at lr 1e-3. A wrong
 *     shard or a lost gradient moves an element by ~lr = 1e-3 per step.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers/equiv.h"
#include "helpers/testutil.h"
#include "model/ckpt/safetensors.h"

#define LOSS_RTOL  1e-6
#define PARAM_ATOL 1e-5

/* One run of the tiny config (4 heads, so tp can be 1, 2 or 4) in dir with
 * tp x dp ranks through tridentrun (tests/helpers/equiv.h). `ck` names the
 * checkpoint root under dir. */
#define HEADS "--set model.n_head=4"

static int run(const char *dir, int tp, int dp, const char *ck, const char *extra, char **out) {
    char sets[4096];
    snprintf(sets, sizeof sets, HEADS " %s", extra);
    return tt_equiv_run(dir, tp, dp, ck, sets, out);
}

static char *make_dir(void) { return tt_equiv_dir(); }

static int losses(const char *dir, const char *ck, double **out) { return tt_equiv_losses(dir, ck, out); }

static void expect_losses_close(const double *a, const double *b, int n, const char *what) {
    tt_equiv_expect_losses(a, b, n, LOSS_RTOL, what);
}

/* Every tensor of the latest checkpoint under dir/ck_b against dir/ck_a. */
static void expect_params_close(const char *dir, const char *ck_a, const char *ck_b, const char *what) {
    tt_equiv_expect_params(dir, ck_a, ck_b, PARAM_ATOL, what);
}

/* The run under dir/ck followed the reference run ref_ck (losses ref[0..10)):
 * its 10 losses and its final parameters. */
static void expect_follows(const char *dir, const double *ref, const char *ref_ck, const char *ck, const char *what) {
    double *l;
    cr_assert_eq(losses(dir, ck, &l), 10, "%s", what);
    expect_losses_close(ref, l, 10, what);
    expect_params_close(dir, ref_ck, ck, what);
    free(l);
}

/* A layout to compare with the reference run: tp, dp and more settings. */
typedef tt_layout layout;

/* Runs each layout (with the settings `base` first) as checkpoint root
 * "<prefix>_<i>" and checks that it follows the reference run ref_ck. */
static void expect_layouts_follow(const char *dir, const double *ref, const char *ref_ck, const char *prefix,
                                  const char *base, const layout *L, size_t n) {
    char sets[4096];
    snprintf(sets, sizeof sets, HEADS " %s", base); /* as run() */
    tt_equiv_expect_layouts_follow(dir, ref, ref_ck, 10, prefix, sets, "", L, n, "", LOSS_RTOL, PARAM_ATOL);
}

Test(parallel, every_layout_follows_the_single_rank_run, .timeout = 300) {
    char *dir = make_dir(), *out = NULL;
    double *ref = tt_equiv_reference(dir, "ck_1_1", HEADS " --set train.steps=10", 10);
    /* tp, dp, gradient bucket size, more: the 1x2 run with 0.01 MiB buckets
     * cuts the 136 KB of gradients into ~14 buckets, each all-reduced while
     * backward goes on; recompute (whose forward rerun includes the TP
     * collectives) and the guarded backend (host access to backend memory
     * faults, also around the MPI transport) must follow the same curve */
    struct {
        int tp, dp;
        const char *bucket_mb, *more;
    } layouts[] = {{2, 1, "25", ""},
                   {1, 2, "25", ""},
                   {2, 2, "25", ""},
                   {4, 1, "25", ""},
                   {1, 4, "25", ""},
                   {1, 2, "0.01", ""},
                   {2, 1, "25", "--set train.recompute=full"},
                   {2, 2, "25", "--set train.recompute=selective --device cpu-guard"}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        int tp = layouts[i].tp, dp = layouts[i].dp;
        char ck[64], what[160], extra[256];
        snprintf(ck, sizeof ck, "ck_%d_%d_%zu", tp, dp, i);
        snprintf(what, sizeof what, "tp=%d dp=%d bucket_mb=%s %s", tp, dp, layouts[i].bucket_mb, layouts[i].more);
        snprintf(extra, sizeof extra, "--set train.steps=10 --set parallel.bucket_mb=%s %s", layouts[i].bucket_mb,
                 layouts[i].more);
        cr_assert_eq(run(dir, tp, dp, ck, extra, &out), 0, "%s: %s", what, out);
        cr_expect(strstr(out, "tp=") != NULL, "%s", out);
        free(out);
        expect_follows(dir, ref, "ck_1_1", ck, what);
    }
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* The allocator's peak of saved activations (bytes) that run ck logged. */
static double saved_peak(const char *dir, const char *ck) { return tt_equiv_metric(dir, ck, "saved_act_peak"); }

/* Sequence parallelism (seq_len 16 divides by tp 2 and 4): every run follows
 * the same tp without it and one rank, within the tolerances above (a
 * reduce-scatter and an all-gather sum in the same order as the all-reduce
 * they replace; the row-wise gradients are summed over TP ranks' rows in
 * another order, a rounding of ~1e-7 relative). Recompute full reruns the
 * layer's gathers and scatters; selective on the guarded backend checks host
 * access around the new collectives; dp 2 adds the DP reduction. */
Test(parallel, sequence_parallel_follows_tp_and_one_rank, .timeout = 600) {
    char *dir = make_dir(), *out = NULL;
    double *ref = tt_equiv_reference(dir, "sp_ref", HEADS " --set train.steps=10", 10);
    struct {
        int tp, dp;
        const char *more;
    } layouts[] = {{2, 1, ""},
                   {4, 1, ""},
                   {2, 1, "--set train.recompute=full"},
                   {4, 1, "--set train.recompute=full"},
                   {2, 2, "--set train.recompute=selective --device cpu-guard"}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        int tp = layouts[i].tp, dp = layouts[i].dp;
        char ck[64], ck_tp[64], what[256], extra[512];
        /* the same layout without sequence parallelism */
        snprintf(ck_tp, sizeof ck_tp, "tp_%zu", i);
        snprintf(extra, sizeof extra, "--set train.steps=10 %s", layouts[i].more);
        cr_assert_eq(run(dir, tp, dp, ck_tp, extra, &out), 0, "%s", out);
        free(out);
        snprintf(ck, sizeof ck, "sp_%zu", i);
        snprintf(what, sizeof what, "sequence_parallel tp=%d dp=%d %s", tp, dp, layouts[i].more);
        snprintf(extra, sizeof extra, "--set train.steps=10 --set parallel.sequence_parallel=true %s", layouts[i].more);
        cr_assert_eq(run(dir, tp, dp, ck, extra, &out), 0, "%s: %s", what, out);
        free(out);
        double *l, *lt;
        cr_assert_eq(losses(dir, ck, &l), 10, "%s", what);
        cr_assert_eq(losses(dir, ck_tp, &lt), 10, "%s", what);
        expect_losses_close(ref, l, 10, what);
        expect_losses_close(lt, l, 10, what);
        expect_params_close(dir, "sp_ref", ck, what);
        expect_params_close(dir, ck_tp, ck, what);
        if (tp == 2 && dp == 1) {
            /* measured saved bytes against docs/performance.md's closed form
             * (tiny: L 2, b 2, s 16, h 32, a 4; fp32): per layer
             * none [4 sb (16h + 4) + 4 a s b] / t, full 4 sbh / t, and the
             * ends 8 sb + (8 sbh + 8 sb) / t; plain TP keeps t times the
             * replicated parts */
            double sb = 32, h = 32, a = 4, s = 16, t = 2, L = 2;
            int full = strstr(layouts[i].more, "full") != NULL;
            double layer = full ? 4 * sb * h / t : (4 * sb * (16 * h + 4) + 4 * a * s * 2) / t;
            double want = L * layer + 8 * sb + (8 * sb * h + 8 * sb) / t;
            double repl = L * (full ? 4 * sb * h : 4 * sb * (4 * h + 4)) + 8 * sb * h + 8 * sb;
            cr_expect(saved_peak(dir, ck) == want, "%s: saved_act_peak %.0f, closed form %.0f", what,
                      saved_peak(dir, ck), want);
            cr_expect(saved_peak(dir, ck_tp) - saved_peak(dir, ck) == repl * (t - 1) / t,
                      "%s: saved %.0f without, %.0f with", what, saved_peak(dir, ck_tp), saved_peak(dir, ck));
        }
        free(l);
        free(lt);
    }
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* Each TP rank's LayerNorm (and row-parallel bias) gradients cover only its
 * rows under sequence parallelism: without their sum over TP the run leaves
 * the single-rank curve (measured: ~5e-4 relative by step 10). */
Test(parallel, sequence_parallel_without_the_row_gradient_reduction_diverges, .timeout = 300) {
    char *dir = make_dir();
    double *ref = tt_equiv_reference(dir, "nr_ref", HEADS " --set train.steps=10", 10);
    tt_equiv_expect_diverges(dir, ref, 10, "TRIDENT_DEBUG_SKIP_SP_GRAD_REDUCE", "nr_sp", 2, 1,
                             HEADS " --set train.steps=10 --set parallel.sequence_parallel=true", 100 * LOSS_RTOL,
                             "the reduction");
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* Saved after 5 of 10 steps with one layout, resumed with another: steps
 * 6..10 follow the uninterrupted single-rank run. Each pair crosses TP sizes
 * both ways (2 -> 1, 2 -> 4, 1 -> 2, 4 -> 2) and DP sizes. */
Test(parallel, checkpoints_reshard_between_tp1_tp2_and_tp4, .timeout = 300) {
    char *dir = make_dir();
    double *ref = tt_equiv_reference(dir, "full", HEADS " --set train.steps=10", 10);
    /* save tp, save dp, resume tp, resume dp */
    int pairs[][4] = {{2, 2, 1, 1}, {2, 2, 4, 1}, {1, 1, 2, 2}, {4, 1, 2, 1}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        int stp = pairs[i][0], sdp = pairs[i][1], rtp = pairs[i][2], rdp = pairs[i][3];
        char ck[64], what[128];
        snprintf(ck, sizeof ck, "re_%d_%d_to_%d_%d", stp, sdp, rtp, rdp);
        snprintf(what, sizeof what, "saved at tp=%d dp=%d, resumed at tp=%d dp=%d", stp, sdp, rtp, rdp);
        /* (the resumed run must not see the first run's log lines: moved away) */
        tt_equiv_save_at(dir, ck, stp, sdp, HEADS " --set train.steps=10", 5);
        tt_equiv_expect_resumed(dir, ref, 5, 10, ck, rtp, rdp, HEADS " --set train.steps=10", LOSS_RTOL, what);
    }
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* ---- pipelines: the same model (4 layers) over tp x pp x dp ----
 * Same tolerances as above: a pipeline changes no sum's order inside a
 * stage; what differs is where the tied embedding's two gradient parts (the
 * input embedding's and the LM head's) are added: in one buffer on one rank,
 * or on two stages and then all-reduced, a rounding of ~1e-7 relative. */

#define PIPE_MODEL "--set model.n_layer=4 --set train.steps=10"

static double *pipeline_reference(const char *dir) {
    return tt_equiv_reference(dir, "pipe_ref", HEADS " " PIPE_MODEL, 10);
}

Test(parallel, every_pipeline_layout_follows_the_single_rank_run, .timeout = 600) {
    char *dir = make_dir(), *out = NULL;
    double *ref = pipeline_reference(dir);
    /* 4 micro-batches of 2 per step (global batch 8) on each DP rank, 2 with dp = 2 */
    const layout layouts[] = {
        {1, 1, "--set parallel.pp=2"},
        {1, 1, "--set parallel.pp=4"},
        {1, 1, "--set parallel.pp=2 --set parallel.vpp=2"},
        {1, 1, "--set parallel.pp=2 --set parallel.schedule=zb-h1"},
        {1, 1, "--set parallel.pp=2 --set parallel.schedule=gpipe"},
        {1, 1, "--set parallel.pp=3 --set parallel.pp_layout=2,1,1"},
        {2, 2, "--set parallel.pp=2"},
        {1, 1, "--set parallel.pp=2 --set train.recompute=full"},
        {1, 1, "--set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.recompute=full"},
        {1, 2,
         "--set parallel.pp=2 --set parallel.vpp=2 --set train.recompute=selective --device cpu-guard "
         "--set parallel.bucket_mb=0.01"},
        /* sequence parallel: the boxes between stages carry the (T/tp)-row shard */
        {2, 1, "--set parallel.pp=2 --set parallel.sequence_parallel=true"},
        {2, 1,
         "--set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.recompute=full "
         "--set parallel.sequence_parallel=true"},
        {2, 1, "--set parallel.pp=2 --set parallel.vpp=2 --set parallel.sequence_parallel=true --device cpu-guard"},
    };
    expect_layouts_follow(dir, ref, "pipe_ref", "pipe", PIPE_MODEL, layouts, sizeof layouts / sizeof layouts[0]);
    /* a chunk without layers: refused, naming the chunk */
    int rc = run(dir, 1, 1, "pipe_empty",
                 PIPE_MODEL " --set parallel.pp=2 --set parallel.vpp=2 --set parallel.pp_layout=1,2,0,1", &out);
    cr_expect(rc != 0 && strstr(out, "empty") != NULL, "%s", out);
    free(out);
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* Without the tied embedding's reduction over the first and last stage the
 * two copies drift apart: the run leaves the single-rank curve. */
Test(parallel, a_pipeline_without_the_embedding_reduction_diverges, .timeout = 300) {
    char *dir = make_dir();
    double *ref = pipeline_reference(dir);
    tt_equiv_expect_diverges(dir, ref, 10, "TRIDENT_DEBUG_SKIP_TIED_REDUCE", "pipe_noreduce", 1, 1,
                             HEADS " " PIPE_MODEL " --set parallel.pp=2", 100 * LOSS_RTOL, "the reduction");
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* Saved after 5 of 10 steps at tp2 pp2 dp2, resumed at one rank and at pp 4:
 * steps 6..10 follow the uninterrupted single-rank run. */
Test(parallel, pipeline_checkpoints_reshard_to_one_rank_and_pp4, .timeout = 300) {
    char *dir = make_dir();
    double *ref = pipeline_reference(dir);
    tt_equiv_save_at(dir, "re_3d", 2, 2, HEADS " " PIPE_MODEL " --set parallel.pp=2", 5);
    const char *resume[] = {HEADS " " PIPE_MODEL, HEADS " " PIPE_MODEL " --set parallel.pp=4"};
    for (int i = 0; i < 2; i++) {
        char ck[64];
        snprintf(ck, sizeof ck, "re_3d_%d", i);
        tt_equiv_copy_run(dir, "re_3d", ck);
        tt_equiv_expect_resumed(dir, ref, 5, 10, ck, 1, 1, resume[i], LOSS_RTOL,
                                i == 0 ? "tp2 pp2 dp2 -> 1 rank" : "tp2 pp2 dp2 -> pp4");
    }
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

Test(parallel, a_failing_rank_tears_down_all_and_a_restart_completes_the_run, .timeout = 300) {
    char *dir = make_dir(), *out = NULL;
    cr_assert_eq(run(dir, 2, 2, "clean", "--set train.steps=8 --set checkpoint.every=2", &out), 0, "%s", out);
    free(out);
    /* rank 1 exits with code 3 at step 5 (0-based step index 4) */
    time_t t0 = time(NULL);
    int rc = run(dir, 2, 2, "fail",
                 "--set train.steps=8 --set checkpoint.every=2 --set debug.fail_step=4 "
                 "--set debug.fail_rank=1",
                 &out);
    time_t took = time(NULL) - t0;
    cr_expect(rc != 0, "a failing rank must make tridentrun fail: %s", out);
    cr_expect(took < 60, "teardown took %lds", (long)took);
    cr_expect(strstr(out, "rank 1") != NULL, "the summary names rank 1: %s", out);
    cr_expect(strstr(out, "fault injection") != NULL, "the summary shows the tail of rank 1's log: %s", out);
    free(out);
    /* the same with one restart: it resumes from step 4's checkpoint and finishes */
    char extra[512];
    /* (a synchronous save: the injected _exit comes right after step 4's save
     * began, which an asynchronous save may not have committed yet, and then
     * rightly loses; tests/fault/test_async_ckpt.c covers that case) */
    snprintf(extra, sizeof extra,
             "--set train.steps=8 --set checkpoint.every=2 --set debug.fail_step=4 "
             "--set debug.fail_rank=1 --set checkpoint.async=false");
    char cmd[8192];
    snprintf(
        cmd, sizeof cmd,
        "cd %s && timeout 120 %s --max-restarts 1 --log-dir %s/ranks_restart -- %s train %s/configs/tiny-test.json "
        "--set data.train=%s/train.bin --set data.val= --set model.n_head=4 --set parallel.tp=2 --set parallel.dp=2 "
        "--set checkpoint.dir=%s/restart --set log.dir=%s/log_restart %s",
        dir, tt_bin("tridentrun"), dir, tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir, extra);
    rc = tt_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "restart 1 of 1") != NULL, "%s", out);
    free(out);
    double *a, *b;
    int na = losses(dir, "clean", &a), nb = losses(dir, "restart", &b);
    cr_assert_eq(na, 8);
    cr_assert(nb >= 8, "%d loss lines", nb);
    /* the same layout, resumed exactly: the final loss is bit-identical */
    cr_expect(a[na - 1] == b[nb - 1], "final loss %.17g vs %.17g", a[na - 1], b[nb - 1]);
    free(a);
    free(b);
    tt_rmrf(dir);
    free(dir);
}

Test(parallel, sigterm_saves_a_checkpoint_before_exiting, .timeout = 120) {
    char *dir = make_dir(), cmd[8192], *out = NULL;
    snprintf(
        cmd, sizeof cmd,
        "cd %s && (%s --log-dir %s/ranks -- %s train %s/configs/tiny-test.json --set data.train=%s/train.bin "
        "--set data.val= --set model.n_head=4 --set parallel.dp=2 --set train.steps=1000000 --set checkpoint.dir=%s/ck "
        "--set log.dir=%s/log > %s/console.txt 2>&1; echo $? > %s/rc) & "
        "for i in $(seq 1 600); do grep -q '\"step\": 3,' %s/log/metrics.jsonl 2>/dev/null && break; sleep 0.05; done; "
        "pkill -TERM -f '^%s --log-dir %s/ranks' ; "
        "for i in $(seq 1 600); do [ -f %s/rc ] && break; sleep 0.05; done; cat %s/rc",
        dir, tt_bin("tridentrun"), dir, tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir, dir, dir, dir,
        tt_bin("tridentrun"), dir, dir, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    int rc = atoi(out);
    free(out);
    cr_expect(rc == 143, "exit code after SIGTERM: %d (128 + 15 expected)", rc);
    snprintf(cmd, sizeof cmd, "cat %s/ck/latest && cat %s/ck/$(cat %s/ck/latest)/state.json", dir, dir, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "no checkpoint after SIGTERM: %s", out);
    cr_expect(strstr(out, "\"step\":") != NULL, "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* ---- layouts that do not divide: a non-zero exit naming the numbers, no hang ---- */

Test(parallel_errors, tp_that_does_not_divide_the_heads, .timeout = 60) {
    char *dir = make_dir(), *out = NULL;
    /* tiny-test has 2 heads when n_head is not overridden: force 4 heads, tp = 3 */
    int rc = run(dir, 3, 1, "x", "", &out);
    cr_expect(rc != 0, "%s", out);
    cr_expect(strstr(out, "n_head (4)") != NULL && strstr(out, "tp (3)") != NULL, "%s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

Test(parallel_errors, world_size_that_is_not_tp_x_pp_x_dp, .timeout = 60) {
    char *dir = make_dir(), cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 60 %s --nproc-per-node 3 -- %s train %s/configs/tiny-test.json "
             "--set data.train=%s/train.bin --set parallel.tp=2",
             dir, tt_bin("tridentrun"), tt_bin("trident"), TRI_SOURCE_DIR, dir);
    int rc = tt_run(cmd, &out);
    cr_expect(rc != 0, "%s", out);
    cr_expect(strstr(out, "parallel.tp (2)") != NULL && strstr(out, "= 2") != NULL && strstr(out, "3 ranks") != NULL,
              "the message names the numbers: %s", out);
    cr_expect(strstr(out, "step ") == NULL, "training must not start: %s", out);
    free(out);
    tt_rmrf(dir);
    free(dir);
}

/* ---- the distributed optimizer (parallel.zero = 1) ----
 * Same tolerances as above: ZeRO changes only where the DP sum is taken (a
 * reduce-scatter instead of an all-reduce: another reduction order) and, with
 * pipelines, the order of the tied embedding's two sums (embedding group,
 * then DP); the update of each element is the same AdamW on the same values.
 * A shard updated from the wrong gradient or the wrong moments, or not
 * gathered back, moves elements by ~lr = 1e-3 per step. */

#define ZERO "--set parallel.zero=1"

Test(zero, every_layout_follows_the_single_rank_run, .timeout = 600) {
    char *dir = make_dir();
    double *ref = tt_equiv_reference(dir, "ck_1_1", HEADS " --set train.steps=10", 10);
    /* 0.01 MiB buckets cut the 136 KB of gradients into ~14 buckets, so
     * shards start and end inside tensors (and rows) */
    const layout layouts[] = {{1, 1, ""},
                              {1, 2, ""},
                              {1, 4, ""},
                              {1, 2, "--set parallel.bucket_mb=0.01"},
                              {1, 4, "--set parallel.bucket_mb=0.01"},
                              {2, 2, ""},
                              {2, 2, "--set parallel.bucket_mb=0.01 --device cpu-guard"}};
    expect_layouts_follow(dir, ref, "ck_1_1", "z", "--set train.steps=10 " ZERO, layouts,
                          sizeof layouts / sizeof layouts[0]);
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* The tied embedding's buckets wait for the embedding-group sum (with 0.01
 * MiB buckets the embedding spans several, among others that went early). */
Test(zero, pipelines_follow_the_single_rank_run, .timeout = 600) {
    char *dir = make_dir();
    double *ref = pipeline_reference(dir);
    const layout layouts[] = {
        {2, 2, "--set parallel.pp=2"},
        {1, 2, "--set parallel.pp=2 --set parallel.bucket_mb=0.01"},
        {1, 2, "--set parallel.pp=2 --set parallel.vpp=2 --set parallel.bucket_mb=0.01"},
    };
    expect_layouts_follow(dir, ref, "pipe_ref", "zpipe", PIPE_MODEL " " ZERO, layouts,
                          sizeof layouts / sizeof layouts[0]);
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* Without the all-gather each DP rank keeps only its own shard updated: the
 * replicas drift apart and the run leaves the single-rank curve. */
Test(zero, a_run_without_the_parameter_all_gather_diverges, .timeout = 300) {
    char *dir = make_dir();
    double *ref = tt_equiv_reference(dir, "ck_1_1", HEADS " --set train.steps=10", 10);
    tt_equiv_expect_diverges(dir, ref, 10, "TRIDENT_DEBUG_SKIP_ZERO_GATHER", "z_nogather", 1, 2,
                             HEADS " --set train.steps=10 " ZERO, 100 * LOSS_RTOL, "the all-gather");
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* The optimizer state is one global file whichever ranks wrote it: a
 * checkpoint saved with zero=1 at dp=4 (every DP rank writing its slices,
 * cut through rows by 0.01 MiB buckets) resumes at dp=2, at dp=1 and with
 * zero=0; ones saved without ZeRO or at dp=2 resume at dp=4 with it. Wrong
 * moments would change the updates of steps 6..10 by ~lr. */
Test(zero, checkpoints_reshard_between_dp_sizes_and_zero, .timeout = 600) {
    char *dir = make_dir();
    double *ref = tt_equiv_reference(dir, "full", HEADS " --set train.steps=10", 10);
    const char *m = HEADS " --set train.steps=10", *small = "--set parallel.bucket_mb=0.01";
    const int from_z4[][3] = {{1, 2, 1}, {1, 1, 1}, {1, 2, 0}, {1, 1, 0}};
    tt_equiv_expect_reshard(dir, ref, m, 1, 4, 1, small, from_z4, 4, "", LOSS_RTOL);
    const int to_z4[][3] = {{1, 4, 1}};
    tt_equiv_expect_reshard(dir, ref, m, 1, 2, 0, "", to_z4, 1, small, LOSS_RTOL);
    tt_equiv_expect_reshard(dir, ref, m, 1, 1, 0, "", to_z4, 1, "", LOSS_RTOL);
    const int from_z2[][3] = {{1, 4, 1}, {2, 1, 0}};
    tt_equiv_expect_reshard(dir, ref, m, 2, 2, 1, small, from_z2, 2, "", LOSS_RTOL);
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* With pipelines: tp2 pp2 dp2 zero=1 saved, resumed at one rank; one rank
 * saved, resumed at pp2 dp2 zero=1. */
Test(zero, pipeline_checkpoints_reshard, .timeout = 600) {
    char *dir = make_dir();
    double *ref = pipeline_reference(dir);
    const int to_one[][3] = {{1, 1, 0}};
    tt_equiv_expect_reshard(dir, ref, HEADS " " PIPE_MODEL " --set parallel.pp=2", 2, 2, 1, "", to_one, 1,
                            "--set parallel.pp=1", LOSS_RTOL);
    const int to_pp2[][3] = {{1, 2, 1}};
    tt_equiv_expect_reshard(dir, ref, HEADS " " PIPE_MODEL, 1, 1, 0, "", to_pp2, 1,
                            "--set parallel.pp=2 --set parallel.bucket_mb=0.01", LOSS_RTOL);
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* Where NCCL would take over (src/train/setup.c), the test-only switch makes
 * every group device only on MPI: from then on each collective and send
 * checks, on the guarded backend, that its buffers are backend memory, and a
 * host buffer ends the job (tests/parallel/test_comm.c shows that it does). Training
 * with validation and checkpoints at tp2 dp2 pp2, ZeRO on a pipeline and
 * sequence parallelism then runs to the end, following one rank: no host
 * buffer reaches a collective after the switch, and the host values (loss,
 * norm, stop flag, validation sums, checkpoint agreement and directory)
 * arrive intact through their staging. */
Test(parallel, after_the_nccl_switch_every_collective_takes_backend_memory, .timeout = 600) {
    char *dir = make_dir(), *out = NULL;
    const char *base = PIPE_MODEL " --set train.eval_every=5 --set checkpoint.every=5";
    cr_assert_eq(run(dir, 1, 1, "dev_ref", base, &out), 0, "%s", out);
    free(out);
    double *ref;
    cr_assert_eq(losses(dir, "dev_ref", &ref), 10);
    /* the check needs a backend that knows its allocations */
    cr_assert_eq(setenv("TRIDENT_DEBUG_CHECK_DEVICE_MEMORY", "1", 1), 0);
    int rc = run(dir, 1, 2, "dev_cpu", base, &out);
    cr_expect(rc != 0 && strstr(out, "cpu-guard") != NULL, "a check that cannot check was accepted: %s", out);
    free(out);
    const layout layouts[] = {
        {2, 2, "--set parallel.pp=2"},
        {1, 2, "--set parallel.pp=2 --set parallel.zero=true --set parallel.bucket_mb=0.01"},
        {2, 1, "--set parallel.pp=2 --set parallel.vpp=2 --set parallel.sequence_parallel=true"},
    };
    char more[512];
    snprintf(more, sizeof more, "%s --device cpu-guard", base);
    expect_layouts_follow(dir, ref, "dev_ref", "dev", more, layouts, sizeof layouts / sizeof layouts[0]);
    /* a resume loads the checkpoint after the switch (its agreement flags staged too) */
    char extra[1024];
    snprintf(extra, sizeof extra, "%s --set parallel.pp=2 --stop-at-step 5", more);
    cr_assert_eq(run(dir, 2, 2, "dev_resume", extra, &out), 0, "%s", out);
    free(out);
    snprintf(extra, sizeof extra, "%s --set parallel.pp=2 --resume", more);
    cr_assert_eq(run(dir, 2, 2, "dev_resume", extra, &out), 0, "%s", out);
    cr_expect(strstr(out, "resumed from") != NULL, "%s", out);
    free(out);
    expect_follows(dir, ref, "dev_ref", "dev_resume", "resumed tp=2 dp=2 pp=2");
    /* bf16: the TP activations' 16-bit reductions take backend memory too
     * (the curve is bf16's, not the reference's: only that it completes) */
    snprintf(extra, sizeof extra,
             "%s --set parallel.pp=2 --set parallel.sequence_parallel=true --set "
             "train.precision=bf16",
             more);
    cr_expect_eq(run(dir, 2, 1, "dev_bf16", extra, &out), 0, "%s", out);
    free(out);
    double *l = NULL;
    cr_expect_eq(losses(dir, "dev_bf16", &l), 10);
    free(l);
    unsetenv("TRIDENT_DEBUG_CHECK_DEVICE_MEMORY");
    /* the validation losses arrived too */
    char p[4200], *val = NULL;
    snprintf(p, sizeof p, "grep -c val_loss %s/log_dev_0/metrics.jsonl", dir);
    cr_expect_eq(tt_run(p, &val), 0);
    cr_expect(val && atoi(val) == 2, "validation lines: %s", val ? val : "");
    free(val);
    free(ref);
    tt_rmrf(dir);
    free(dir);
}
