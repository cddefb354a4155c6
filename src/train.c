/* The training loop of one rank: data -> micro-batches -> forward/backward ->
 * gradient reduction over DP -> clipping -> AdamW, with logging, evaluation
 * and checkpoints. Every rank runs this same function; the mesh says which
 * share of the batch and which slice of the model it has. */
#include "src/train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "data/sampler.h"
#include "model/checkpoint.h"
#include "model/gpt.h"
#include "model/optim.h"
#include "model/ckpt_store.h"
#include "parallel/dist.h"
#include "parallel/grad_sync.h"
#include "src/base/file.h"
#include "src/base/fs.h"

/* The one piece of process state outside the context struct: set by the
 * SIGTERM/SIGINT/SIGUSR1 handler, read at step boundaries. */
static volatile sig_atomic_t g_stop_signal = 0;

static void on_signal(int sig) { g_stop_signal = sig; }

typedef struct trainer {
    const tri_config *cfg;
    tri_run_opts opts;
    tri_dist dist;
    const tri_ops *ops;
    tri_gpt gpt;
    tri_acts acts;
    tri_optim opt;
    tri_grad_sync sync;
    tri_sampler train_data, val_data;
    tri_ckpt_store store;       /* open (locked) on world rank 0 while training */
    int has_train_data, has_val;
    int32_t *inputs, *targets;  /* (micro_batch * T) each */
    size_t G, T, mb;            /* global batch, sequence length, micro-batch */
    size_t local_batch;         /* G / dp                                     */
    size_t first_seq;           /* this DP rank's first sequence of a step    */
    int n_micro;                /* local_batch / mb                           */
    int is_logger;              /* world rank 0                               */
    uint64_t consumed;          /* global samples consumed before this step   */
    FILE *metrics;
} trainer;

/* the model's backward reports finished gradient prefixes to the DP buckets */
static void grads_ready(void *ctx, size_t n) { tri_grad_sync_ready(ctx, n); }

void tri_set_threads(int n) {
    tri_ops_cpu()->init(n);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Checks every size that must divide, on every rank, before anything is
 * allocated; the messages name the numbers. Every rank says why in its own
 * log: tridentrun's failure summary shows whichever rank it finds failed first. */
static int check_layout(const tri_config *cfg) {
    const tri_parallel_cfg *p = &cfg->parallel;
    if (tri_gpt_check_layout(&cfg->model, p->tp, p->pp) != 0) return -1;
    long per = (long)cfg->train.micro_batch * p->dp;
    if (cfg->train.global_batch % per) {
        fprintf(stderr,
                "trident: train.global_batch (%d) is not divisible by train.micro_batch (%d) x parallel.dp (%d) = %ld\n",
                cfg->train.global_batch, cfg->train.micro_batch, p->dp, per);
        return -1;
    }
    if (p->pp > 1) {
        fprintf(stderr, "trident: parallel.pp = %d: pipeline parallelism is not implemented yet (use pp = 1)\n",
                p->pp);
        return -1;
    }
    return 0;
}

static void fill_synthetic(int32_t *x, size_t n, uint64_t seed, int vocab) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
}

static void load_batch(trainer *t, int step, int micro) {
    size_t first = t->first_seq + (size_t)micro * t->mb;
    if (t->opts.synthetic) {
        fill_synthetic(t->inputs, t->mb * t->T, ((uint64_t)step << 20) + first, t->cfg->model.vocab_size);
        fill_synthetic(t->targets, t->mb * t->T, ((uint64_t)step << 20) + first + 0x5555, t->cfg->model.vocab_size);
        return;
    }
    tri_sampler_fill_samples(&t->train_data, t->consumed + first, t->mb, t->inputs, t->targets);
}

/* One optimizer step. Returns the global mean loss; *norm gets the global
 * gradient norm before clipping. When either is not finite the parameters are
 * left as they were (no update) and the caller stops. */
static double train_step(trainer *t, int step, double *norm) {
    tri_gpt *g = &t->gpt;
    float dscale = (float)(1.0 / ((double)t->G * (double)t->T));
    t->ops->zero(g->grad_mem, g->n_floats * sizeof(float));
    tri_grad_sync_begin(&t->sync);
    double loss_sum = 0.0;
    for (int m = 0; m < t->n_micro; m++) {
        load_batch(t, step, m);
        loss_sum += tri_gpt_forward(g, &t->acts, t->inputs, NULL, t->targets, dscale);
        tri_grad_sync_set_last(&t->sync, m == t->n_micro - 1);
        tri_gpt_backward(g, &t->acts, t->inputs, NULL, NULL);
    }
    tri_grad_sync_finish(&t->sync);
    /* the loss lives on the head stage; identical on every TP rank */
    tri_comm_allreduce(&t->dist.dp, &loss_sum, 1, TRI_F64, TRI_SUM);
    tri_comm_allreduce(&t->dist.pp, &loss_sum, 1, TRI_F64, TRI_SUM);
    double sumsq = tri_grad_sumsq_local(g);
    tri_comm_allreduce(&t->dist.tp, &sumsq, 1, TRI_F64, TRI_SUM);
    tri_comm_allreduce(&t->dist.pp, &sumsq, 1, TRI_F64, TRI_SUM);
    *norm = sqrt(sumsq);
    double loss = loss_sum / ((double)t->G * (double)t->T);
    /* every rank holds the same all-reduced values, so all decide alike */
    if (!isfinite(loss) || !isfinite(*norm)) return loss;
    float clip = 1.0f;
    double max_norm = t->cfg->train.grad_clip;
    if (max_norm > 0.0 && *norm > max_norm) clip = (float)(max_norm / (*norm + 1e-6));
    tri_optim_step(&t->opt, g, tri_lr_at(&t->opt.cfg, step), clip);
    t->consumed += t->G;
    return loss;
}

/* Mean loss over eval_batches micro-batches of the validation data. */
static double evaluate(trainer *t) {
    double sum = 0.0;
    size_t count = 0;
    int dp = t->dist.mesh.dp, dpr = t->dist.mesh.dp_rank;
    for (int i = dpr; i < t->cfg->train.eval_batches; i += dp) {
        tri_sampler_fill_eval(&t->val_data, (size_t)i, t->mb, t->inputs, t->targets);
        sum += tri_gpt_forward(&t->gpt, &t->acts, t->inputs, NULL, t->targets, 0.0f);
        count += t->mb * t->T;
    }
    double buf[2] = {sum, (double)count};
    tri_comm_allreduce(&t->dist.dp, buf, 2, TRI_F64, TRI_SUM);
    tri_comm_allreduce(&t->dist.pp, buf, 2, TRI_F64, TRI_SUM);
    /* count is added on every PP stage: the loss only on the last one */
    return buf[1] > 0 ? buf[0] / (buf[1] / t->dist.mesh.pp) : NAN;
}

static char *state_json(const trainer *t, int step, double loss) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "step", step);
    cJSON_AddNumberToObject(root, "samples_consumed", (double)t->consumed);
    cJSON_AddNumberToObject(root, "tokens_consumed", (double)t->consumed * (double)t->T);
    cJSON_AddNumberToObject(root, "loss", loss);
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
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

static int save(trainer *t, int step, double loss) {
    char *st = state_json(t, step, loss);
    double t0 = now_s();
    int rc = tri_model_save(&t->store, step, &t->gpt, &t->opt, &t->dist, st, t->cfg->checkpoint.keep);
    free(st);
    if (rc == 0 && t->is_logger && !t->opts.quiet)
        printf("saved checkpoint %s/step_%08d (%.2f s)\n", t->cfg->checkpoint.dir, step, now_s() - t0);
    return rc;
}

/* step, samples_consumed and the run's config from a checkpoint's state.json */
static int read_state(const char *dir, int *step, uint64_t *consumed, tri_config *saved) {
    char path[TRI_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/state.json", dir);
    char *buf = tri_slurp(path, "checkpoint state", (size_t)64 << 20, NULL);
    if (!buf) return -1;
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    const char *keys[2] = {"step", "samples_consumed"};
    double v[2];
    int ok = root != NULL;
    if (!ok) fprintf(stderr, "trident: %s: not valid JSON\n", path);
    for (int i = 0; i < 2 && ok; i++) {
        cJSON *x = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
        ok = cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble == floor(x->valuedouble) &&
             x->valuedouble < 9007199254740992.0;
        if (!ok) fprintf(stderr, "trident: %s: \"%s\" is missing or not a non-negative integer\n", path, keys[i]);
        else v[i] = x->valuedouble;
    }
    cJSON *c = ok ? cJSON_GetObjectItemCaseSensitive(root, "config") : NULL;
    char *cs = cJSON_IsObject(c) ? cJSON_PrintUnformatted(c) : NULL;
    if (ok && !cs) {
        fprintf(stderr, "trident: %s: no \"config\" object\n", path);
        ok = 0;
    }
    cJSON_Delete(root);
    if (ok && tri_config_load_string(saved, cs, path) != 0) ok = 0;
    free(cs);
    if (!ok) return -1;
    *step = (int)v[0];
    *consumed = (uint64_t)v[1];
    return 0;
}

/* A resumed run must have the checkpoint's model shape (a different n_head
 * would load the same tensors and silently compute something else); other
 * changes are allowed and said. Returns 0 or -1 (printed). */
static int check_resume(const tri_config *now, const tri_config *saved, const char *dir, int verbose) {
    struct { const char *key; int a, b; } shape[] = {
        {"model.n_layer", now->model.n_layer, saved->model.n_layer},
        {"model.n_head", now->model.n_head, saved->model.n_head},
        {"model.n_embd", now->model.n_embd, saved->model.n_embd},
        {"model.seq_len", now->model.seq_len, saved->model.seq_len},
        {"model.vocab_size", now->model.vocab_size, saved->model.vocab_size},
    };
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++)
        if (shape[i].a != shape[i].b) {
            fprintf(stderr, "trident: --resume: %s is %d, but the checkpoint %s was trained with %d\n", shape[i].key,
                    shape[i].a, dir, shape[i].b);
            return -1;
        }
    if (!verbose) return 0;
    if (now->train.seed != saved->train.seed)
        printf("note: train.seed is %llu, the checkpoint's run used %llu (the data order follows the new seed)\n",
               (unsigned long long)now->train.seed, (unsigned long long)saved->train.seed);
    if (strcmp(now->data.train, saved->data.train) != 0)
        printf("note: data.train is \"%s\", the checkpoint's run used \"%s\"\n", now->data.train, saved->data.train);
    if (now->train.global_batch != saved->train.global_batch)
        printf("note: train.global_batch is %d, the checkpoint's run used %d (samples consumed carry over)\n",
               now->train.global_batch, saved->train.global_batch);
    return 0;
}

static void trainer_free(trainer *t) {
    free(t->inputs);
    free(t->targets);
    if (t->metrics) fclose(t->metrics);
    tri_grad_sync_free(&t->sync);
    tri_optim_free(&t->opt, &t->gpt);
    tri_acts_free(&t->acts, &t->gpt);
    tri_gpt_free(&t->gpt);
    if (t->has_train_data) tri_sampler_free(&t->train_data);
    if (t->has_val) tri_sampler_free(&t->val_data);
    tri_ckpt_store_close(&t->store);
}

int tri_train(const tri_config *cfg, const tri_run_opts *opts) {
    trainer tr;
    memset(&tr, 0, sizeof tr);
    trainer *t = &tr;
    t->cfg = cfg;
    t->opts = *opts;
    if (check_layout(cfg) != 0) return 2;
    char err[512];
    if (tri_dist_init(&t->dist, cfg->parallel.tp, cfg->parallel.pp, cfg->parallel.dp, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    const tri_mesh *mesh = &t->dist.mesh;
    t->is_logger = mesh->rank == 0;
    int rc = 2;
    /* the checkpoint store before anything else: validated, locked, and the
     * checkpoint to resume from found (a fresh start on a store holding one is refused) */
    char ckpt[TRI_PATH_MAX + 32] = ""; /* checkpoint.dir + "/step_<N>" */
    if (!opts->synthetic && tri_model_ckpt_open(&t->store, cfg->checkpoint.dir, "checkpoint.dir", opts->resume,
                                                &t->dist, ckpt, sizeof ckpt, t->is_logger && !opts->quiet) != 0)
        goto done;
    int have_ckpt = ckpt[0] != '\0';
    t->ops = tri_ops_get(opts->device ? opts->device : "cpu");
    if (!t->ops) goto done;
    t->ops->init(opts->threads);
    t->G = (size_t)cfg->train.global_batch;
    t->T = (size_t)cfg->model.seq_len;
    t->mb = (size_t)cfg->train.micro_batch;
    t->local_batch = t->G / (size_t)mesh->dp;
    t->first_seq = (size_t)mesh->dp_rank * t->local_batch;
    t->n_micro = (int)(t->local_batch / t->mb);

    if (!opts->synthetic) {
        const tri_data_cfg *dc = &cfg->data;
        int T = cfg->model.seq_len, V = cfg->model.vocab_size;
        uint64_t seed = cfg->train.seed;
        if (tri_sampler_init_split(&t->train_data, dc->train, T, V, seed, dc->split, TRI_SPLIT_TRAIN) != 0)
            goto done;
        t->has_train_data = 1;
        if (cfg->train.eval_every > 0 && (dc->val[0] || dc->split > 0)) {
            int vrc = dc->val[0] ? tri_sampler_init(&t->val_data, dc->val, T, V, seed)
                                 : tri_sampler_init_split(&t->val_data, dc->train, T, V, seed, dc->split, TRI_SPLIT_VAL);
            if (vrc != 0) goto done;
            t->has_val = 1;
        } else if (cfg->train.eval_every > 0 && mesh->rank == 0) {
            printf("note: train.eval_every is %d but there is no validation data (data.val is empty and "
                   "data.split is 0): no validation loss\n",
                   cfg->train.eval_every);
        }
    }

    if (tri_gpt_init(&t->gpt, &cfg->model, t->ops, &t->dist.tp, mesh->tp, mesh->tp_rank, mesh->pp,
                     mesh->pp_rank) != 0)
        goto done;
    rc = 1;
    if (tri_acts_init(&t->acts, &t->gpt, t->mb, t->T) != 0) goto done;
    tri_adamw_cfg oc = {cfg->train.lr, cfg->train.min_lr, cfg->train.warmup_steps, cfg->train.steps,
                        cfg->train.beta1, cfg->train.beta2, cfg->train.eps, cfg->train.weight_decay,
                        cfg->train.grad_clip};
    if (tri_optim_init(&t->opt, &t->gpt, &oc) != 0) goto done;
    if (tri_grad_sync_init(&t->sync, t->gpt.grad_mem, t->gpt.n_floats, &t->dist.dp, cfg->parallel.bucket_mb) != 0)
        goto done;
    if (mesh->dp > 1) {
        t->gpt.grads_ready = grads_ready;
        t->gpt.grads_ready_ctx = &t->sync;
    }
    t->inputs = malloc(t->mb * t->T * sizeof(int32_t));
    t->targets = malloc(t->mb * t->T * sizeof(int32_t));
    if (!t->inputs || !t->targets) goto done;

    int start = 0;
    if (have_ckpt) {
        tri_config saved;
        if (read_state(ckpt, &start, &t->consumed, &saved) != 0) { rc = 2; goto done; }
        if (check_resume(cfg, &saved, ckpt, t->is_logger && !opts->quiet) != 0) { rc = 2; goto done; }
        if (tri_model_load(ckpt, &t->gpt, &t->opt, &t->dist) != 0) { rc = 2; goto done; }
        t->opt.t = start;
        if (t->is_logger && !opts->quiet)
            printf("resumed from %s at step %d (%llu samples consumed)\n", ckpt, start, (unsigned long long)t->consumed);
    } else {
        if (opts->resume && t->is_logger && !opts->synthetic)
            printf("resume: no checkpoint in %s yet, starting from step 0\n", cfg->checkpoint.dir);
        tri_gpt_init_params(&t->gpt, cfg->train.seed);
    }

    if (t->is_logger && !opts->synthetic) {
        if (tri_mkdir_p(cfg->log.dir) != 0) {
            fprintf(stderr, "trident: log.dir: cannot create %s: %s\n", cfg->log.dir, strerror(errno));
            rc = 2;
            goto done;
        }
        char mpath[TRI_PATH_MAX + 32];
        snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", cfg->log.dir);
        t->metrics = fopen(mpath, start > 0 ? "a" : "w");
        if (!t->metrics) {
            fprintf(stderr, "trident: %s: cannot open: %s\n", mpath, strerror(errno));
            rc = 2;
            goto done;
        }
    }
    if (t->is_logger && !opts->quiet) {
        printf("config %s:\n", cfg->source);
        tri_config_print(cfg, stdout);
        printf("trident: %zu parameters, tp=%d pp=%d dp=%d, %d micro-batches of %zu per rank, %d threads\n",
               tri_gpt_num_params(&cfg->model), mesh->tp, mesh->pp, mesh->dp, t->n_micro, t->mb,
               omp_get_max_threads());
        fflush(stdout);
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL); /* tridentrun's (and Slurm's --signal) "save and stop" */

    double flops_tok = tri_gpt_flops_per_token(&cfg->model);
    double tokens_step = (double)t->G * (double)t->T;
    double loss = NAN, measured = 0.0; /* seconds of the steps after the first */
    int step = start;
    rc = 0;
    for (; step < cfg->train.steps; step++) {
        if (cfg->debug.fail_rank == mesh->rank && cfg->debug.fail_step == step && !opts->resume) {
            fprintf(stderr, "trident: rank %d: debug.fail_step %d reached, exiting with code 3 (fault injection)\n",
                    mesh->rank, step);
            fflush(NULL);
            _exit(3);
        }
        if (step == start + 1) { /* measure from the second step on */
            memset(&t->dist.tp.stats, 0, sizeof t->dist.tp.stats);
            memset(&t->dist.dp.stats, 0, sizeof t->dist.dp.stats);
            memset(&t->dist.pp.stats, 0, sizeof t->dist.pp.stats);
        }
        double t0 = now_s();
        double norm;
        loss = train_step(t, step, &norm);
        double dt = now_s() - t0;
        if (!isfinite(loss) || !isfinite(norm)) {
            if (t->is_logger)
                fprintf(stderr,
                        "trident: step %d: the loss (%g) or the gradient norm (%g) is not finite; stopping without "
                        "an update or a checkpoint (the saved ones are untouched). Lower train.lr, or set "
                        "train.grad_clip.\n",
                        step + 1, loss, norm);
            rc = 1;
            goto done;
        }
        if (opts->after_step) opts->after_step(opts->after_step_ctx, step, dt);
        if (step > start) measured += dt;
        int done_steps = step + 1;
        if (t->is_logger && (done_steps % cfg->log.every == 0 || done_steps == cfg->train.steps)) {
            double tps = tokens_step / dt;
            double mfu = flops_tok * tps / (cfg->log.peak_gflops * 1e9);
            double lr = tri_lr_at(&t->opt.cfg, step);
            if (!opts->quiet) {
                printf("step %5d/%d | loss %.4f | lr %.3e | norm %.3f | %7.1f ms | %8.0f tok/s | MFU %5.1f%%\n",
                       done_steps, cfg->train.steps, loss, lr, norm, dt * 1e3, tps, 100.0 * mfu);
                fflush(stdout);
            }
            if (t->metrics) {
                fprintf(t->metrics,
                        "{\"step\": %d, \"loss\": %.17g, \"lr\": %.6e, \"grad_norm\": %.17g, \"ms\": %.3f, "
                        "\"tokens_per_s\": %.1f, \"mfu\": %.5f}\n",
                        done_steps, loss, lr, norm, dt * 1e3, tps, mfu);
                fflush(t->metrics);
            }
        }
        if (t->has_val && done_steps % cfg->train.eval_every == 0) {
            double vl = evaluate(t);
            if (t->is_logger) {
                if (!opts->quiet) printf("step %5d/%d | val loss %.4f\n", done_steps, cfg->train.steps, vl);
                if (t->metrics) {
                    fprintf(t->metrics, "{\"step\": %d, \"val_loss\": %.6f}\n", done_steps, vl);
                    fflush(t->metrics);
                }
            }
        }
        /* every rank must agree on stopping, or the save below would hang */
        int stop = g_stop_signal;
        tri_comm_allreduce(&t->dist.world, &stop, 1, TRI_I32, TRI_MAX);
        if (stop) {
            if (t->is_logger) fprintf(stderr, "trident: signal %d: saving a checkpoint at step %d\n", stop, done_steps);
            if (!opts->synthetic && save(t, done_steps, loss) != 0) rc = 1;
            else rc = 128 + stop;
            goto done;
        }
        if (opts->stop_at > 0 && done_steps == opts->stop_at && done_steps < cfg->train.steps) {
            if (!opts->synthetic && save(t, done_steps, loss) != 0) rc = 1;
            else if (t->is_logger && !opts->quiet) printf("stopped at step %d (--stop-at-step)\n", done_steps);
            goto done;
        }
        int every = cfg->checkpoint.every;
        if (!opts->synthetic && every > 0 && done_steps % every == 0 && done_steps < cfg->train.steps) {
            if (save(t, done_steps, loss) != 0) { rc = 1; goto done; }
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
    }
    /* the final checkpoint (with train.steps = 0: the freshly initialised model) */
    if (!opts->synthetic && save(t, step, loss) != 0) rc = 1;
    if (t->is_logger && !opts->quiet && !isnan(loss)) printf("final loss %.6f\n", loss);
done:
    fflush(NULL);
    trainer_free(t);
    if (rc != 0 && rc < 128 && t->dist.mesh.world > 1) {
        fflush(NULL);
        tri_dist_abort(&t->dist, rc);
    }
    tri_dist_free(&t->dist);
    return rc;
}
