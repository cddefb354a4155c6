/* Bad steps, the trainer's part (declared in src/train/trainer.h, "bad_run.c";
 * the definitions are in src/train/badstep.h): the decision of a step, the
 * fault injection, the log lines, the rollback and the end-of-run check. */
#include "train/trainer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/file.h"
#include "model/ckpt/checkpoint.h"
#include "train/badstep.h"
#include "train/ckpt_async.h"
#include "train/ckpt_state.h"
#include "train/preflight.h"
#include "train/zero.h"

int badstep_setup(trainer *t) {
    tri_badstep_init(&t->bad);
    return tri_badstep_parse_ranges(&t->bad, t->cfg->train.skip_samples, "train.skip_samples");
}

/* <checkpoint.dir>/step_<N> */
static int ckpt_dir(const trainer *t, int step, char *dir, size_t n) {
    char name[32];
    if (tri_ckpt_step_name(step, name, sizeof name) != 0) return -1;
    if (snprintf(dir, n, "%s/%s", t->cfg->checkpoint.dir, name) >= (int)n)
        return tri_error("checkpoint.dir: path too long");
    return 0;
}

/* The bad-step state of the checkpoint dir: counters and mean replace ours,
 * its ranges are added to ours when `ranges`. */
static int read_state(trainer *t, const char *dir, int ranges) {
    char path[TRI_PATH_MAX + 64];
    if (snprintf(path, sizeof path, "%s/state.json", dir) >= (int)sizeof path)
        return tri_error("%s/state.json: path too long", dir);
    char *text = tri_slurp(path, "checkpoint state", (size_t)64 << 20, NULL);
    if (text == NULL) return -1;
    int rc = tri_badstep_from_state(&t->bad, text, path, ranges);
    free(text);
    return rc;
}

int badstep_resume(trainer *t, const char *dir, int step) {
    if (read_state(t, dir, 1) != 0) return -1;
    t->bad.last_ckpt_step = step;
    return 0;
}

void badstep_saved(trainer *t, int step) { t->bad.last_ckpt_step = step; }

void badstep_begin_step(trainer *t) {
    t->bad.steps_run++;
    t->consumed = tri_badstep_position(&t->bad, t->consumed);
    /* the fault follows the data: the windows of steps inject_step ..
     * inject_step + inject_count - 1 of a run without rollbacks (a rollback
     * skips them, and the fault does not come back, as bad data would not) */
    const int s = t->cfg->debug.inject_step, r = t->cfg->debug.inject_rank;
    uint64_t first = (uint64_t)(s > 0 ? s - 1 : 0) * t->G;
    uint64_t end = first + (uint64_t)t->cfg->debug.inject_count * t->G;
    t->bad.inject_now = s > 0 && t->consumed >= first && t->consumed < end && (r < 0 || r == t->dist.mesh.rank);
}

void badstep_inject_grad(trainer *t) {
    if (!t->bad.inject_now) return;
    tri_inject_kind k = t->cfg->debug.inject_kind;
    if (k != TRI_INJECT_NAN_GRAD && k != TRI_INJECT_INF_GRAD) return;
    /* element 0 of the first chunk's gradients (under ZeRO it lies in DP
     * rank 0's shard: on another DP rank the fault is never read) */
    float *g0 = tri_optim_grad0(&t->opt, &t->gpt); /* (ZeRO-2: NULL off the shard that holds it) */
    if (g0) t->ctx.ops->scale(&t->ctx, g0, k == TRI_INJECT_NAN_GRAD ? NAN : INFINITY, 1);
}

/* The smallest loss scale (src/train/step.c halves down to it). */
#define MIN_LOSS_SCALE 1.0

tri_skip_reason badstep_judge(trainer *t, double *loss, double *norm) {
    tri_badstep *b = &t->bad;
    if (b->inject_now && t->cfg->debug.inject_kind == TRI_INJECT_NAN_LOSS) *loss = NAN;
    if (b->inject_now && t->cfg->debug.inject_kind == TRI_INJECT_SPIKE) *loss *= 1e4;
    /* every rank decides from the same numbers: the loss lives on the last
     * stage and each rank's norm covers its gradients, a fault may be on
     * one rank only; the maximum over the world of exact values is exact */
    double v[4] = {isfinite(*loss) ? 0.0 : 1.0, isfinite(*norm) ? 0.0 : 1.0, isfinite(*loss) ? *loss : -INFINITY,
                   isfinite(*norm) ? *norm : -INFINITY};
    tri_comm_allreduce_host(&t->dist.world, v, 4, TRI_F64, TRI_MAX);
    *loss = v[0] != 0.0 ? NAN : v[2];
    *norm = v[1] != 0.0 ? NAN : v[3];
    tri_skip_reason r = TRI_SKIP_NONE;
    int counts = 1; /* a bad step of a row */
    if (v[0] != 0.0)
        r = TRI_SKIP_NONFINITE_LOSS;
    else if (v[1] != 0.0 && t->fp16) {
        r = TRI_SKIP_FP16_OVERFLOW; /* the scale's business, unless it cannot go lower */
        counts = t->loss_scale <= MIN_LOSS_SCALE;
    } else if (v[1] != 0.0)
        r = TRI_SKIP_NONFINITE_NORM;
    else if (t->cfg->train.skip_spikes && tri_badstep_is_spike(b, *loss, t->cfg->train.spike_factor))
        r = TRI_SKIP_SPIKE;
    b->reason = r;
    if (r == TRI_SKIP_NONE) {
        tri_badstep_note_loss(b, *loss);
        b->in_a_row = 0;
        b->rollbacks_in_a_row = 0; /* the rollback before, if any, worked */
        b->updates++;
        return r;
    }
    b->skipped++;
    if (counts) {
        if (b->in_a_row == 0) b->streak_begin = t->consumed;
        b->in_a_row++;
    }
    return r;
}

static void json_num(char *buf, size_t n, double v) {
    if (isfinite(v))
        snprintf(buf, n, "%.17g", v);
    else
        snprintf(buf, n, "null");
}

void badstep_log(trainer *t, int done_steps, double loss, double norm) {
    if (!t->is_logger) return;
    const tri_badstep *b = &t->bad;
    tri_skip_reason r = b->reason;
    if (!t->opts.quiet) { /* always said, whatever log.every */
        char extra[160] = "";
        if (r == TRI_SKIP_FP16_OVERFLOW)
            snprintf(extra, sizeof extra, " | loss scale now %g", t->loss_scale);
        else if (r == TRI_SKIP_SPIKE)
            snprintf(extra, sizeof extra, " | above %g x the running mean %.4f", t->cfg->train.spike_factor,
                     b->spike_mean);
        int max = t->cfg->train.max_bad_steps;
        char row[96] = "";
        if (b->in_a_row > 0 && max > 0) snprintf(row, sizeof row, " | %d of %d bad in a row", b->in_a_row, max);
        printf("step %5d/%d | skipped: %s (loss %g, norm %g), no update%s | %" PRId64 " skipped so far%s\n", done_steps,
               t->cfg->train.steps, tri_skip_reason_text(r), loss, norm, extra, b->skipped, row);
        fflush(stdout);
    }
    if (t->metrics) {
        /* (not "loss": a skipped step has no loss on the curve; a non-finite
         * one is null in the JSON and no scalar) */
        char l[40], g[40], reason[48];
        json_num(l, sizeof l, loss);
        json_num(g, sizeof g, norm);
        snprintf(reason, sizeof reason, "\"%s\"", tri_skip_reason_name(r));
        tri_metric f[] = {
            TRI_METRIC_BOOL("skipped", 1),
            TRI_METRIC_JSON("reason", reason),
            isfinite(loss) ? TRI_METRIC_NUM("skipped_loss", "%.17g", loss) : TRI_METRIC_JSON("skipped_loss", l),
            isfinite(norm) ? TRI_METRIC_NUM("skipped_grad_norm", "%.17g", norm) : TRI_METRIC_JSON("skipped_grad_norm", g),
            TRI_METRIC_NUM("skipped_steps", "%.0f", (double)b->skipped),
            TRI_METRIC_NUM("bad_in_a_row", "%.0f", (double)b->in_a_row),
            TRI_METRIC_NUM("loss_scale", "%.17g", t->loss_scale)};
        tri_metrics_write(t->metrics, done_steps, f, t->fp16 ? 7 : 6); /* loss_scale under fp16 */
    }
}

int badstep_reload(trainer *t, const char *dir, int *step) {
    /* the one place a rollback reads a checkpoint: an asynchronous save in
     * flight (the one badstep_saved recorded, perhaps) is committed first */
    if (ckpt_finish(t) != 0) return -1;
    tri_config saved;
    int ck_step;
    uint64_t consumed;
    if (tri_ckpt_state_read(dir, &ck_step, &consumed, &saved) != 0) return -1;
    /* ZeRO-3: loaded into the full buffers, then sharded again (src/train/zero.h) */
    if (zero_params_gather_all(t) != 0 || tri_model_load(dir, &t->gpt, &t->opt, &t->dist) != 0 ||
        zero_params_shard(t) != 0)
        return -1;
    t->opt.t = ck_step;
    double scale = t->fp16 ? t->cfg->train.loss_scale_init : 1.0;
    t->scale_clean = 0;
    if (tri_ckpt_state_scaler(dir, &t->opt.t, &scale, &t->scale_clean) != 0) return -1;
    if (t->fp16) t->loss_scale = scale;
    /* the running mean and counters as they were; our ranges (a superset) stay */
    int64_t skipped = t->bad.skipped;
    int rollbacks = t->bad.rollbacks;
    if (read_state(t, dir, 0) != 0) return -1;
    t->bad.skipped = skipped;
    t->bad.rollbacks = rollbacks;
    t->bad.in_a_row = 0;
    t->consumed = consumed;
    *step = ck_step;
    return 0;
}

/* rollbacks without a good step between them before the run gives up: the
 * bad rows came back on fresh data, so the data is not the cause */
#define MAX_ROLLBACKS_IN_A_ROW 2

int badstep_after_skip(trainer *t, int *step, int *rolled) {
    *rolled = 0;
    tri_badstep *b = &t->bad;
    int max = t->cfg->train.max_bad_steps;
    if (max <= 0 || b->in_a_row < max) return TRI_EXIT_OK;
    int done_steps = *step + 1;
    uint64_t begin = b->streak_begin, end = t->consumed; /* the samples of the bad row */
    if (b->last_ckpt_step < 0 || t->opts.synthetic) {
        if (t->is_logger) {
            char hint[1024];
            tri_error("step %d: %d bad steps in a row (train.max_bad_steps) and no checkpoint to roll back to yet "
                      "in %s (checkpoint.every = %d): stopping. %s",
                      done_steps, b->in_a_row, t->cfg->checkpoint.dir, t->cfg->checkpoint.every,
                      tri_preflight_divergence_hint(t->cfg, t->opt.t, hint, sizeof hint));
        }
        return TRI_EXIT_FAILURE;
    }
    if (b->rollbacks_in_a_row >= MAX_ROLLBACKS_IN_A_ROW) {
        if (t->is_logger) {
            char hint[1024];
            tri_error("step %d: %d bad steps in a row again, after %d rollbacks without a good step between them: "
                      "the data is not the cause; stopping (the saved checkpoints hold no update of a bad step). %s",
                      done_steps, b->in_a_row, b->rollbacks_in_a_row,
                      tri_preflight_divergence_hint(t->cfg, t->opt.t, hint, sizeof hint));
        }
        return TRI_EXIT_FAILURE;
    }
    if (tri_badstep_add_range(b, begin, end) != 0) return TRI_EXIT_FAILURE;
    char dir[TRI_PATH_MAX + 64];
    if (ckpt_dir(t, b->last_ckpt_step, dir, sizeof dir) != 0) return TRI_EXIT_FAILURE;
    int bad = b->in_a_row, ck_step;
    if (badstep_reload(t, dir, &ck_step) != 0) {
        if (t->is_logger) tri_error("step %d: rolling back to %s failed (above)", done_steps, dir);
        return TRI_EXIT_FAILURE;
    }
    b->rollbacks++;
    b->rollbacks_in_a_row++;
    if (t->is_logger) {
        if (!t->opts.quiet) {
            printf("step %5d/%d | %d bad steps in a row: rolled back to %s (step %d); global samples [%" PRIu64
                   ", %" PRIu64 ") are skipped from now on\n",
                   done_steps, t->cfg->train.steps, bad, dir, ck_step, begin, end);
            fflush(stdout);
        }
        char range[64];
        snprintf(range, sizeof range, "[%" PRIu64 ", %" PRIu64 "]", begin, end);
        tri_metric f[] = {TRI_METRIC_BOOL("rollback", 1), TRI_METRIC_NUM("to_step", "%.0f", (double)ck_step),
                          TRI_METRIC_JSON("skip_samples", range),
                          TRI_METRIC_NUM("rollbacks", "%.0f", (double)b->rollbacks)};
        tri_metrics_write(t->metrics, done_steps, f, 4);
    }
    *step = ck_step - 1; /* the loop's step++ makes it the step after the checkpoint */
    *rolled = 1;
    return TRI_EXIT_OK;
}

int badstep_check_end(trainer *t) {
    if (t->bad.steps_run == 0 || t->bad.updates > 0) return TRI_EXIT_OK;
    if (t->is_logger)
        tri_error("every one of the %" PRId64 " steps run was skipped (%s last): no optimizer update, so no final "
                  "checkpoint; the run failed",
                  t->bad.steps_run, tri_skip_reason_text(t->bad.reason));
    return TRI_EXIT_FAILURE;
}
