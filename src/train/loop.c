/* `trident train`, part 3: the cadence around the steps of one rank (logging,
 * evaluation, signals, checkpoints, the run report). Every rank runs this same
 * function; the mesh says which share of the batch and which slice of the
 * model it has. Set-up is in setup.c, the step in step.c (src/train/trainer.h). */
#include "train/trainer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/ckpt/checkpoint.h"
#include "model/ckpt/store.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/stop.h"
#include "train/ckpt_async.h"
#include "train/datafiles.h"
#include "train/plot.h"
#include "train/preflight.h"
#include "train/straggler.h"

static char *state_json(const trainer *t, int step, double loss) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "step", step);
    cJSON_AddNumberToObject(root, "samples_consumed", (double)t->consumed);
    cJSON_AddNumberToObject(root, "tokens_consumed", (double)t->consumed * (double)t->T);
    cJSON_AddNumberToObject(root, "loss", loss);
    /* AdamW's step count (fp16 skips steps without an update) and the loss scale */
    cJSON_AddNumberToObject(root, "optimizer_updates", t->opt.t);
    if (t->fp16) {
        cJSON_AddNumberToObject(root, "loss_scale", t->loss_scale);
        cJSON_AddNumberToObject(root, "loss_scale_clean_steps", t->scale_clean);
    }
    cJSON *rng = cJSON_AddObjectToObject(root, "rng");
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->cfg->train.seed);
    cJSON_AddStringToObject(rng, "seed", seed);
    cJSON_AddStringToObject(rng, "data",
                            "global sample k is a pure function of (seed, k, data files): resuming after "
                            "samples_consumed reads exactly what an uninterrupted run reads");
    char *cfgjson = tri_config_to_json(t->cfg);
    cJSON *c = cfgjson ? cJSON_Parse(cfgjson) : NULL;
    free(cfgjson);
    if (c) cJSON_AddItemToObject(root, "config", c);
    tri_datafiles_to_state(root, t->has_train_data ? &t->train_data : NULL, t->has_val ? &t->val_data : NULL);
    tri_badstep_to_state(&t->bad, root); /* skipped samples, the spike mean, counters */
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

/* finish: wait until the save is committed (checkpoint.async; src/train/ckpt_async.c) */
static int save(trainer *t, int step, double loss, int finish) {
    tri_dist_progress(&t->dist, step, "save");
    char *st = state_json(t, step, loss);
    int rc = ckpt_save(t, step, st, finish);
    free(st);
    if (rc == 0) badstep_saved(t, step); /* what a rollback returns to (it waits for an async save first) */
    return rc;
}

/* log.plot: the run's curves as PNGs in log.dir (after MPI is shut down, so
 * that the fork does not happen under MPI). Failures are warnings. */
static void plot_run(const tri_config *cfg) {
    char tps[32], fpt[32];
    snprintf(tps, sizeof tps, "%.0f", (double)cfg->train.global_batch * (double)cfg->model.seq_len);
    snprintf(fpt, sizeof fpt, "%.17g", tri_gpt_flops_per_token(&cfg->model));
    const char *args[] = {"--tokens-per-step", tps, "--flops-per-token", fpt, "--out", cfg->log.dir,
                          cfg->log.dir,        NULL};
    tri_plot_run("log.plot", args);
}

int tri_train(const tri_config *cfg, const tri_run_opts *opts) {
    trainer tr;
    memset(&tr, 0, sizeof tr);
    trainer *t = &tr;
    tri_straggler sg; /* train/straggler.h: every log.straggler_every steps, the slow ranks */
    memset(&sg, 0, sizeof sg);
    int start = 0;
    int rc = trainer_setup(t, cfg, opts, &start);
    if (rc != TRI_EXIT_OK) goto done;
    const tri_mesh *mesh = &t->dist.mesh;

    if (cfg->debug.fail_start_rank == mesh->rank) { /* a rank slot that fails at every start (elastic tests) */
        tri_error_rank(mesh->rank, "debug.fail_start_rank: exiting with code %d at start-up (fault injection)",
                       TRI_EXIT_INJECTED);
        fflush(NULL);
        _exit(TRI_EXIT_INJECTED);
    }
    tri_stop_install(0); /* SIGTERM, SIGINT, SIGUSR1 (tridentrun's and Slurm's --signal "save and stop") */
    (void)tri_dist_start_heartbeat(&t->dist, cfg->parallel.progress_timeout_s); /* parallel/heartbeat.h */
    if (tri_straggler_init(&sg, &t->dist, cfg->log.straggler_every, cfg->log.straggler_factor, opts->quiet) != 0) {
        rc = TRI_EXIT_FAILURE;
        goto done;
    }

    double flops_tok = tri_gpt_flops_per_token(&cfg->model);
    double tokens_step = (double)t->G * (double)t->T;
    double loss = NAN, measured = 0.0; /* seconds of the steps after the first */
    int step = start;
    rc = TRI_EXIT_OK;
    for (; step < cfg->train.steps; step++) {
        if (cfg->debug.fail_rank == mesh->rank && cfg->debug.fail_step == step && !opts->resume) {
            tri_error_rank(mesh->rank, "debug.fail_step %d reached, exiting with code %d (fault injection)", step,
                           TRI_EXIT_INJECTED);
            fflush(NULL);
            _exit(TRI_EXIT_INJECTED);
        }
        if (step == start + 1) { /* measure from the second step on */
            memset(&t->dist.tp.stats, 0, sizeof t->dist.tp.stats);
            memset(&t->dist.dp.stats, 0, sizeof t->dist.dp.stats);
            memset(&t->dist.pp.stats, 0, sizeof t->dist.pp.stats);
            memset(&t->dist.cp.stats, 0, sizeof t->dist.cp.stats);
            memset(&t->dist.dpcp.stats, 0, sizeof t->dist.dpcp.stats);
            if (t->prof) tri_profile_reset(t->prof);
        }
        double t0 = tri_now_s(), comm0 = tri_straggler_comm_s(&t->dist);
        double norm;
        if (cfg->debug.sleep_rank == mesh->rank && cfg->debug.sleep_ms > 0) { /* test only: a slow rank */
            tri_dist_progress(&t->dist, step + 1, "data");
            struct timespec nap = {cfg->debug.sleep_ms / 1000, (long)(cfg->debug.sleep_ms % 1000) * 1000000L};
            while (nanosleep(&nap, &nap) != 0 && errno == EINTR) {}
        }
        tri_dist_progress(&t->dist, step + 1, "train");
        loss = train_step(t, step, &norm);
        double dt = tri_now_s() - t0;
        if (t->prof) tri_profile_step(t->prof); /* (one wait on a GPU, outside the step's time) */
        if (t->data_error) {
            rc = TRI_EXIT_FAILURE;
            goto done;
        } /* said: a token file shrank under the job */
        if (opts->after_step) opts->after_step(opts->after_step_ctx, step, dt);
        if (step == start && start > 0) trainer_startup_report(t, step + 1, dt); /* a resumed run */
        if (step == start && t->metrics) { /* every buffer is in use after one step: the peak */
            char mem[512];
            tri_mem_json(&t->ctx.mem, mem, sizeof mem);
            tri_metrics_write(t->metrics, step + 1, &TRI_METRIC_JSON("mem", mem), 1);
        }
        if (step > start) { /* (the first step warms up: not a straggler's figure) */
            tri_straggler_step(&sg, dt, tri_straggler_comm_s(&t->dist) - comm0);
            tri_straggler_check(&sg, &t->dist, t->metrics, step + 1);
            measured += dt;
            t->pipe_total.busy_s += t->pipe.stats.busy_s;
            t->pipe_total.p2p_s += t->pipe.stats.p2p_s;
            t->pipe_total.span_s += t->pipe.stats.span_s;
        }
        int done_steps = step + 1;
        if (t->skipped) { /* said whatever log.every; enough in a row: roll back */
            badstep_log(t, done_steps, loss, norm);
            int rolled = 0;
            if ((rc = badstep_after_skip(t, &step, &rolled)) != TRI_EXIT_OK) goto done;
            if (rolled) continue;
        } else if (t->is_logger && (done_steps % cfg->log.every == 0 || done_steps == cfg->train.steps)) {
            double tps = tokens_step / dt;
            double mfu = flops_tok * tps / (cfg->log.peak_gflops * 1e9);
            double lr = tri_lr_at(&t->opt.cfg, step);
            if (!opts->quiet) {
                printf("step %5d/%d | loss %.4f | lr %.3e | norm %.3f | %7.1f ms | %8.0f tok/s | MFU %5.1f%%\n",
                       done_steps, cfg->train.steps, loss, lr, norm, dt * 1e3, tps, 100.0 * mfu);
                fflush(stdout);
            }
            tri_metric f[] = {TRI_METRIC_NUM("loss", "%.17g", loss),
                              TRI_METRIC_NUM("lr", "%.6e", lr),
                              TRI_METRIC_NUM("grad_norm", "%.17g", norm),
                              TRI_METRIC_NUM("ms", "%.3f", dt * 1e3),
                              TRI_METRIC_NUM("tokens_per_s", "%.1f", tps),
                              TRI_METRIC_NUM("mfu", "%.5f", mfu),
                              TRI_METRIC_NUM("loss_scale", "%.17g", t->loss_scale)};
            tri_metrics_write(t->metrics, done_steps, f, t->fp16 ? 7 : 6); /* loss_scale under fp16 */
        }
        if (t->has_val && done_steps % cfg->train.eval_every == 0) {
            tri_dist_progress(&t->dist, done_steps, "eval");
            double vl = evaluate(t);
            if (t->data_error) {
                rc = TRI_EXIT_FAILURE;
                goto done;
            }
            if (t->stop && t->is_logger)
                tri_error("%s during validation after step %d: validation abandoned", tri_stop_name(t->stop),
                          done_steps);
            if (t->is_logger && !t->stop) {
                if (!opts->quiet) printf("step %5d/%d | val loss %.4f\n", done_steps, cfg->train.steps, vl);
                tri_metrics_write(t->metrics, done_steps, &TRI_METRIC_NUM("val_loss", "%.6f", vl), 1);
            }
        }
        /* every rank must agree on stopping, or the save below would hang; the same all-reduce carries
         * the background save's state and rank 0's checkpoint.every_s clock (src/train/ckpt_async.h) */
        int flags[3] = {tri_stop_signal(), ckpt_word(t), ckpt_time_due(t)};
        tri_comm_allreduce_host(&t->dist.world, flags, 3, TRI_I32, TRI_MAX);
        int stop = flags[0];
        if (ckpt_advance(t, flags[1]) != 0) {
            rc = TRI_EXIT_FAILURE;
            goto done;
        }
        if (stop) {
            if (t->is_logger) tri_error("signal %d: saving a checkpoint at step %d", stop, done_steps);
            if (!opts->synthetic && save(t, done_steps, loss, 1) != 0)
                rc = TRI_EXIT_FAILURE;
            else
                rc = tri_exit_signal(stop);
            goto done;
        }
        if (opts->stop_at > 0 && done_steps == opts->stop_at && done_steps < cfg->train.steps) {
            if (!opts->synthetic && save(t, done_steps, loss, 1) != 0)
                rc = TRI_EXIT_FAILURE;
            else if (t->is_logger && !opts->quiet)
                printf("stopped at step %d (--stop-at-step)\n", done_steps);
            goto done;
        }
        int every = cfg->checkpoint.every;
        int due = (every > 0 && done_steps % every == 0) || flags[2];
        if (!opts->synthetic && due && done_steps < cfg->train.steps) {
            if (save(t, done_steps, loss, 0) != 0) {
                rc = TRI_EXIT_FAILURE;
                goto done;
            }
        }
    }
    if (opts->report) {
        tri_run_report *r = opts->report;
        r->world = mesh->world;
        r->rank = mesh->rank;
        r->steps = step > start ? step - start - 1 : 0;
        r->seconds = measured;
        r->tp = t->dist.tp.stats;
        r->dp = t->dist.dp.stats;
        r->pp = t->dist.pp.stats;
        r->cp = t->dist.cp.stats;
        r->dpcp = t->dist.dpcp.stats;
        r->mem = t->ctx.mem;
        if (t->prof) r->profile = *tri_profile_totals(t->prof);
        /* every stage's pipeline figures, on every rank of the pipeline */
        double mine[3] = {t->pipe_total.busy_s, t->pipe_total.p2p_s, t->pipe_total.span_s};
        int np = mesh->pp < TRI_REPORT_MAX_STAGES ? mesh->pp : TRI_REPORT_MAX_STAGES;
        double *all = calloc((size_t)mesh->pp * 3, sizeof *all);
        if (all) {
            tri_comm_allgather_host(&t->dist.pp, all, mine, 3, TRI_F64);
            r->stages = np;
            for (int s = 0; s < np; s++) {
                r->stage_busy_s[s] = all[3 * s];
                r->stage_p2p_s[s] = all[3 * s + 1];
                r->stage_span_s[s] = all[3 * s + 2];
            }
            free(all);
        }
    }
    /* a run that made no update is no success, and saves nothing */
    if ((rc = badstep_check_end(t)) != TRI_EXIT_OK) goto done;
    /* the final checkpoint (with train.steps = 0: the freshly initialised model) */
    if (!opts->synthetic && save(t, step, loss, 1) != 0) rc = TRI_EXIT_FAILURE;
    if (t->is_logger && !opts->quiet && !isnan(loss)) printf("final loss %.6f\n", loss);
done:
    tri_straggler_free(&sg);
    ckpt_abandon(t); /* an error exit: a save in flight is not committed unless its commit began */
    fflush(NULL);
    trainer_free(t);
    if (rc != TRI_EXIT_OK && rc < TRI_EXIT_SIGNAL_BASE && t->dist.mesh.world > 1) {
        fflush(NULL);
        tri_dist_abort(&t->dist, rc);
    }
    tri_dist_free(&t->dist);
    if (rc == TRI_EXIT_OK && cfg->log.plot && t->is_logger && !opts->synthetic) plot_run(cfg);
    return rc;
}
