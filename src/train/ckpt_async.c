/* `trident train`: the loop's saves (see ckpt_async.h). */
#include "train/ckpt_async.h"

#include <stdio.h>

#include "model/ckpt/async.h"
#include "base/clock.h"
#include "train/zero.h"

/* The log line and the metrics.jsonl line of a finished save (world rank 0). */
static void report(trainer *t, const tri_ckpt_done *f, int async) {
    if (!t->is_logger || f->step < 0) return;
    if (!t->opts.quiet) {
        if (async)
            printf("saved checkpoint %s/step_%08ld (blocking %.1f ms, written in the background in %.1f ms)\n",
                   t->cfg->checkpoint.dir, f->step, f->blocking_ms, f->write_ms);
        else
            printf("saved checkpoint %s/step_%08ld (blocking %.1f ms, synchronous)\n", t->cfg->checkpoint.dir, f->step,
                   f->blocking_ms);
        fflush(stdout);
    }
    /* flat keys: each number is also a TensorBoard scalar, checkpoint/<x> */
    tri_metric m[] = {TRI_METRIC_BOOL("checkpoint_async", async),
                      TRI_METRIC_NUM("checkpoint_blocking_ms", "%.3f", f->blocking_ms),
                      TRI_METRIC_NUM("checkpoint_write_ms", "%.3f", f->write_ms),
                      TRI_METRIC_NUM("checkpoint_wait_ms", "%.3f", f->wait_ms),
                      TRI_METRIC_NUM("checkpoint_bytes", "%.0f", (double)f->bytes)};
    tri_metrics_write(t->metrics, (int)f->step, m, sizeof m / sizeof m[0]);
}

static int save(trainer *t, int step, const char *state, int finish);

int ckpt_save(trainer *t, int step, const char *state, int finish) {
    /* ZeRO-3: the whole model gathered for the save (an asynchronous one
     * copies it into its staging memory before this returns), then released */
    if (zero_params_gather_all(t) != 0) return -1;
    int rc = save(t, step, state, finish);
    zero_params_release_all(t);
    return rc;
}

static int save(trainer *t, int step, const char *state, int finish) {
    const tri_ckpt_cfg *c = &t->cfg->checkpoint;
    if (t->is_logger) t->ckpt_last_s = tri_now_s();
    if (!c->async) {
        double t0 = tri_now_s();
        int rc = tri_model_save(&t->store, step, &t->gpt, &t->opt, &t->dist, state, c->keep, c->dtype);
        if (rc != 0) return rc;
        tri_ckpt_done f = {.step = step, .blocking_ms = (tri_now_s() - t0) * 1e3, .bytes = -1};
        if (t->is_logger) {
            char name[64], dir[TRI_CKPT_PATH_MAX + 80];
            tri_ckpt_step_name(step, name, sizeof name);
            snprintf(dir, sizeof dir, "%s/%s", t->store.root, name);
            f.bytes = tri_ckpt_bytes(dir);
        }
        report(t, &f, 0);
        return 0;
    }
    tri_ckpt_done prev, f; /* t->ckpt_async: made by ckpt_setup */
    int rc = tri_ckpt_async_start(t->ckpt_async, &t->store, step, &t->gpt, &t->opt, &t->dist, state, c->keep, c->dtype,
                                  &prev);
    report(t, &prev, 1);
    if (rc != 0) return rc;
    if (!finish) return 0;
    rc = tri_ckpt_async_wait(t->ckpt_async, &t->store, &t->dist, &f);
    report(t, &f, 1);
    return rc;
}

int ckpt_setup(trainer *t) {
    const tri_ckpt_cfg *c = &t->cfg->checkpoint;
    if (!c->async || t->opts.synthetic) return 0;
    t->ckpt_async = tri_ckpt_async_new();
    if (!t->ckpt_async) return -1; /* said */
    /* a run that saves during training: the staging memory allocated and
     * touched in the background while the first steps run, rather than
     * during the first save (a thread that cannot start: the first save
     * allocates it) */
    if (c->every > 0 || c->every_s > 0)
        (void)tri_ckpt_async_reserve(t->ckpt_async, &t->gpt, &t->opt, &t->dist, c->dtype);
    return 0;
}

int ckpt_word(trainer *t) { return tri_ckpt_async_word(t->ckpt_async); }

int ckpt_time_due(trainer *t) {
    double every = t->cfg->checkpoint.every_s;
    if (!(every > 0) || !t->is_logger) return 0;
    double now = tri_now_s();
    if (t->ckpt_last_s == 0) t->ckpt_last_s = now; /* the first interval starts with the first step */
    return now - t->ckpt_last_s >= every;
}

int ckpt_advance(trainer *t, int world_word) {
    tri_ckpt_done f;
    int rc = tri_ckpt_async_advance(t->ckpt_async, &t->store, &t->dist, world_word, &f);
    report(t, &f, 1);
    return rc;
}

int ckpt_finish(trainer *t) {
    tri_ckpt_done f;
    int rc = tri_ckpt_async_wait(t->ckpt_async, &t->store, &t->dist, &f);
    report(t, &f, 1);
    return rc;
}

void ckpt_abandon(trainer *t) {
    tri_ckpt_async_free(t->ckpt_async, &t->store);
    t->ckpt_async = NULL;
}
