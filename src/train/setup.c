/* `trident train`, part 1: everything before step 1. See src/train/trainer.h. */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/ckpt/checkpoint.h"
#include "model/cp.h"
#include "model/ckpt/store.h"
#include "base/file.h"
#include "base/fs.h"
#include "train/ckpt_async.h"
#include "train/ckpt_state.h"
#include "train/datafiles.h"
#include "train/preflight.h"
#include "train/zero.h"
#include "plan/stage_plan.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/log.h"

static void grads_ready(void *ctx, size_t n) { tri_grad_sync_ready(ctx, n); }

/* ZeRO: a bucket's shard is updated; its all-gather starts while the
 * optimizer goes on with the next bucket. */
static void shard_done(void *ctx, int chunk, int bucket) {
    tri_grad_sync *sync = ctx;
    tri_grad_sync_gather_start(&sync[chunk], bucket);
}

void tri_set_threads(int n) {
    /* the thread count and FTZ/DAZ are process-wide: a throwaway context sets them */
    tri_ctx c;
    if (tri_ctx_init(&c, "cpu", n) == 0) tri_ctx_free(&c);
}

/* Checks every size that must divide, on every rank, before anything is
 * allocated; the messages name the numbers. Every rank says why in its own
 * log: tridentrun's failure summary shows whichever rank it finds failed first. */
static int check_layout(const tri_config *cfg) {
    const tri_parallel_cfg *p = &cfg->parallel;
    if (p->vpp > TRI_MAX_VPP)
        return tri_error("parallel.vpp = %d: at most %d virtual chunks per stage", p->vpp, TRI_MAX_VPP);
    if (tri_gpt_check_layout(&cfg->model, p->tp, p->pp, p->vpp, p->pp_layout) != 0) return -1;
    long per = (long)cfg->train.micro_batch * p->dp;
    if (cfg->train.global_batch % per) {
        tri_error("train.global_batch (%d) is not divisible by train.micro_batch (%d) x parallel.dp (%d) = %ld",
                  cfg->train.global_batch, cfg->train.micro_batch, p->dp, per);
        return -1;
    }
    return 0;
}

/* A resumed run must have the checkpoint's model shape (a different n_head
 * would load the same tensors and silently compute something else); other
 * changes are allowed and said. Returns 0 or -1 (printed). */
static int check_resume(const tri_config *now, const tri_config *saved, const char *dir, int verbose) {
    struct {
        const char *key;
        int a, b;
    } shape[] = {
        {"model.n_layer", now->model.n_layer, saved->model.n_layer},
        {"model.n_head", now->model.n_head, saved->model.n_head},
        {"model.n_embd", now->model.n_embd, saved->model.n_embd},
        {"model.seq_len", now->model.seq_len, saved->model.seq_len},
        {"model.vocab_size", now->model.vocab_size, saved->model.vocab_size},
    };
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++)
        if (shape[i].a != shape[i].b) {
            tri_error("--resume: %s is %d, but the checkpoint %s was trained with %d", shape[i].key, shape[i].a, dir,
                      shape[i].b);
            return -1;
        }
    if (!verbose) return 0;
    if (now->train.seed != saved->train.seed)
        tri_log_note("train.seed is %llu, the checkpoint's run used %llu (the data order follows the new seed)",
                     (unsigned long long)now->train.seed, (unsigned long long)saved->train.seed);
    if (strcmp(now->data.train, saved->data.train) != 0)
        tri_log_note("data.train is \"%s\", the checkpoint's run used \"%s\"", now->data.train, saved->data.train);
    if (now->train.global_batch != saved->train.global_batch)
        tri_log_note("train.global_batch is %d, the checkpoint's run used %d (samples consumed carry over)",
                     now->train.global_batch, saved->train.global_batch);
    return 0;
}

void trainer_free(trainer *t) {
    tri_profile_stop(t->prof); /* the real op table back before anything is freed through it */
    t->prof = NULL;
    free(t->inputs);
    free(t->targets);
    tri_metrics_close(t->metrics);
    t->metrics = NULL;
    zero_free(t); /* ZeRO-2/3: the shard buffers, before their buckets */
    for (int k = 0; k < t->gpt.n_chunks; k++) {
        if (t->sync) tri_grad_sync_free(&t->sync[k]);
        if (t->pools) tri_slot_pool_free(&t->pools[k], &t->gpt);
    }
    free(t->sync);
    free(t->pools);
    tri_pipe_free(&t->pipe);
    tri_schedule_free(&t->sched);
    tri_schedule_free(&t->eval_sched);
    tri_stage_plan_free(&t->plan);
    tri_optim_free(&t->opt, &t->gpt);
    tri_workspace_free(&t->ws, &t->gpt);
    tri_gpt_free(&t->gpt);
    tri_ctx_free(&t->ctx);
    if (t->has_train_data) tri_sampler_free(&t->train_data);
    if (t->has_val) tri_sampler_free(&t->val_data);
    tri_ckpt_store_close(&t->store);
}

/* With the CUDA backend and several ranks, every group moves onto NCCL, which
 * reads device memory only: from here on the groups take backend memory, and
 * host values go through the _host calls (parallel/dist.h). Before it (the
 * checkpoint store, the preflight checks) they ran on MPI with host values.
 * Returns 0, or -1 after a message naming the rank. */
static int device_groups(trainer *t, const tri_run_opts *opts) {
    if (t->dist.mesh.world == 1) return 0;
    if (opts->device == TRI_DEVICE_CUDA) return tri_dist_use_nccl(&t->dist);
    /* test-only (model/debug.h): no host buffer reaches a collective from here on */
    if (t->debug.check_device_memory) return tri_dist_check_device_memory(&t->dist);
    return 0;
}

/* Everything before step 1, on every rank: layout checks, the mesh, the
 * backend, data, model, optimizer, gradient buckets, resume or init, metrics
 * file and banner. Returns 0, or the exit code (TRI_EXIT_BAD_INPUT,
 * TRI_EXIT_FAILURE for a runtime failure; base/exit.h); the
 * caller frees with trainer_free whatever was set up. *start gets the first
 * step to run. */
int trainer_setup(trainer *t, const tri_config *cfg, const tri_run_opts *opts, int *start) {
    t->boot_t0 = tri_now_s();
    t->cfg = cfg;
    t->opts = *opts;
    tri_debug_from_env(&t->debug);
    if (check_layout(cfg) != 0 || badstep_setup(t) != 0) return TRI_EXIT_BAD_INPUT;
    /* the store's rendezvous waits parallel.timeout_s, and only for the CUDA backend (NCCL) */
    if (tri_dist_init_cp(&t->dist, cfg->parallel.tp, cfg->parallel.cp, cfg->parallel.pp, cfg->parallel.dp,
                         cfg->parallel.timeout_s, opts->device == TRI_DEVICE_CUDA) != 0)
        return TRI_EXIT_BAD_INPUT;
    tri_dist_set_timeout(&t->dist, cfg->parallel.timeout_s);
    t->boot_dist_s = tri_now_s() - t->boot_t0;
    if (t->dist.transport == TRI_TRANSPORT_STORE && opts->device != TRI_DEVICE_CUDA) {
        /* the store bootstraps NCCL only: the CPU ops' transport is MPI */
        tri_error_rank(t->dist.mesh.rank,
                       "ranks launched without MPI (RANK/WORLD_SIZE or srun) communicate through NCCL, which needs "
                       "--device cuda (device is %s); on the CPU launch with tridentrun/mpirun",
                       tri_device_name(opts->device));
        return TRI_EXIT_BAD_INPUT;
    }
    const tri_mesh *mesh = &t->dist.mesh;
    t->is_logger = mesh->rank == 0;
    int rc = TRI_EXIT_BAD_INPUT;
    /* the checkpoint store before anything else: validated, locked, and the
     * checkpoint to resume from found (a fresh start on a store holding one is refused) */
    char ckpt[TRI_PATH_MAX + 32] = ""; /* checkpoint.dir + "/step_<N>" */
    if (!opts->synthetic && tri_model_ckpt_open(&t->store, cfg->checkpoint.dir, "checkpoint.dir", opts->resume,
                                                &t->dist, ckpt, sizeof ckpt, t->is_logger && !opts->quiet) != 0)
        return rc;
    int have_ckpt = ckpt[0] != '\0';
    if (tri_ctx_init(&t->ctx, tri_device_name(opts->device), opts->threads) != 0) return rc;
    /* mixed precision: 16-bit parameters and activations */
    if (tri_ctx_set_precision(&t->ctx, cfg->train.precision) != 0) {
        tri_error("train.precision=%s is not available with --device %s", tri_precision_name(cfg->train.precision),
                  tri_device_name(opts->device));
        return rc;
    }
    t->fp16 = cfg->train.precision == TRI_F16;
    t->loss_scale = t->fp16 ? cfg->train.loss_scale_init : 1.0;
    tri_dist_bind_ctx(&t->dist, &t->ctx);
    t->policy = cfg->train.recompute;
    t->G = (size_t)cfg->train.global_batch;
    t->T = (size_t)cfg->model.seq_len;
    t->Tl = t->T / (size_t)mesh->cp; /* this CP rank's positions of each sequence (model/cp.h) */
    t->mb = (size_t)cfg->train.micro_batch;
    t->local_batch = t->G / (size_t)mesh->dp;
    t->first_seq = (size_t)mesh->dp_rank * t->local_batch;
    t->n_micro = (int)(t->local_batch / t->mb);

    if (!opts->synthetic) {
        const tri_data_cfg *dc = &cfg->data;
        int T = cfg->model.seq_len, V = cfg->model.vocab_size;
        uint64_t seed = cfg->train.seed;
        if (tri_sampler_init_split(&t->train_data, dc->train, T, V, seed, dc->split, TRI_SPLIT_TRAIN) != 0) return rc;
        t->has_train_data = 1;
        if (cfg->train.eval_every > 0 && (dc->val[0] || dc->split > 0)) {
            int vrc = dc->val[0]
                          ? tri_sampler_init(&t->val_data, dc->val, T, V, seed)
                          : tri_sampler_init_split(&t->val_data, dc->train, T, V, seed, dc->split, TRI_SPLIT_VAL);
            if (vrc != 0) return rc;
            t->has_val = 1;
        } else if (cfg->train.eval_every > 0 && mesh->rank == 0) {
            tri_log_note("train.eval_every is %d but there is no validation data (data.val is empty and data.split "
                         "is 0): no validation loss",
                         cfg->train.eval_every);
        }
    }

    /* everything the run will need, before the model is allocated (src/train/preflight.h) */
    tri_preflight pf = {.cfg = cfg,
                        .dist = &t->dist,
                        .synthetic = opts->synthetic,
                        .skip_memory_check = opts->skip_memory_check,
                        .verbose = t->is_logger && !opts->quiet,
                        .val = t->has_val ? &t->val_data : NULL};
    if (tri_preflight_run(&pf) != 0) return rc;
    t->eval_batches = pf.eval_batches;
    if (device_groups(t, opts) != 0) return TRI_EXIT_FAILURE;

    /* this stage's chunks, the schedule and the slots it keeps alive */
    if (tri_stage_plan_init(&t->plan, cfg, mesh->pp_rank) != 0) return rc;
    if (tri_gpt_init(&t->gpt, &cfg->model, &t->ctx, &t->dist.tp, mesh->tp, mesh->tp_rank, t->plan.specs,
                     t->plan.n_chunks) != 0)
        return rc;
    t->gpt.debug = t->debug;
    if (t->gpt.kv_rep > 1 && mesh->rank == 0)
        tri_log_note("model.n_kv_head (%d) < parallel.tp (%d): each key/value head is replicated over %d TP ranks "
                     "(as Megatron does); their k/v weight gradients are summed over the copies",
                     t->gpt.NKV, mesh->tp, t->gpt.kv_rep);
    if (tri_gpt_set_sequence_parallel(&t->gpt, cfg->parallel.sequence_parallel) != 0) return rc;
    if (tri_cp_set(&t->gpt, &t->dist.cp) != 0) return rc;
    /* the gradients of replicated parameters are summed (and ZeRO-sharded)
     * over dp, or dp x cp under context parallelism: one group, chosen here */
    tri_comm *grad_group = tri_dist_grad_group(&t->dist);
    rc = TRI_EXIT_FAILURE;
    /* ZeRO: every bucket (the last one padded) cuts into dp aligned shards */
    if (cfg->parallel.zero && tri_gpt_pad(&t->gpt, (size_t)grad_group->size * TRI_ZERO_ALIGN) != 0) return rc;
    t->pools = calloc((size_t)t->gpt.n_chunks, sizeof *t->pools);
    t->sync = calloc((size_t)t->gpt.n_chunks, sizeof *t->sync);
    if (!t->pools || !t->sync) return rc;
    for (int k = 0; k < t->gpt.n_chunks; k++)
        if (tri_slot_pool_init(&t->pools[k], &t->gpt, k, t->mb, t->Tl, t->policy, t->plan.slots[k], t->plan.split) != 0)
            return rc;
    if (tri_workspace_init(&t->ws, &t->gpt, t->mb, t->Tl, t->policy) != 0) return rc;
    if (tri_schedule_build(&t->sched, t->plan.kind, mesh->pp, t->plan.vpp, t->n_micro) != 0 ||
        tri_schedule_build(&t->eval_sched, TRI_SCHED_FORWARD, mesh->pp, t->plan.vpp, 1) != 0)
        return TRI_EXIT_BAD_INPUT;
    const tri_schedule *scheds[2] = {&t->sched, &t->eval_sched};
    tri_pipe_stage view = tri_stage_bind(&t->stage, &t->gpt, t->pools, &t->ws);
    if (zero_wrap_stage(t, &view) != 0) return rc; /* ZeRO-3: chunks gathered around their compute */
    if (tri_pipe_init(&t->pipe, &view, &t->dist.pp, &t->dist.progress, scheds, 2) != 0) return rc;
    tri_adamw_cfg oc = {.lr = cfg->train.lr,
                        .min_lr = cfg->train.min_lr,
                        .warmup_steps = cfg->train.warmup_steps,
                        .total_steps = cfg->train.steps,
                        .beta1 = cfg->train.beta1,
                        .beta2 = cfg->train.beta2,
                        .eps = cfg->train.eps,
                        .weight_decay = cfg->train.weight_decay,
                        .grad_clip = cfg->train.grad_clip,
                        .offload = cfg->parallel.offload};
    for (int k = 0; k < t->gpt.n_chunks; k++) {
        tri_chunk *ch = &t->gpt.chunks[k];
        if (!cfg->parallel.zero) {
            if (tri_grad_sync_init(&t->sync[k], ch->grad_mem, ch->n_elems, grad_group, cfg->parallel.bucket_mb) != 0)
                return rc;
        } else {
            if (tri_grad_sync_init_zero(&t->sync[k], ch->grad_mem, ch->param_mem, ch->param_dtype, ch->n_elems,
                                        ch->n_alloc, grad_group, cfg->parallel.bucket_mb) != 0)
                return rc;
        }
        /* the tied embedding's gradient is summed over the embedding group
         * (train_step): under ZeRO before its buckets are reduce-scattered;
         * without, after the reduction (its buckets are then not told to the
         * offloaded optimizer's hook, tri_grad_sync_defer) */
        for (int i = 0; i < ch->n_params && mesh->pp > 1 && t->gpt.tied; i++) {
            const tri_param *p = &ch->params[i];
            if (p->kind == TRI_P_WTE) tri_grad_sync_defer(&t->sync[k], p->offset, p->offset + p->numel);
        }
        if (grad_group->size > 1) {
            ch->grads_ready = grads_ready;
            ch->grads_ready_ctx = &t->sync[k];
        }
    }
    if (zero_split_units(t) != 0) return rc; /* ZeRO-3: buckets cut on the units' edges, before the shards */
    if (!cfg->parallel.zero) {
        if (tri_optim_init(&t->opt, &t->gpt, &oc) != 0) return rc;
    } else {
        if (tri_optim_init_zero(&t->opt, &t->gpt, &oc, t->sync) != 0) return rc;
        if (!t->debug.skip_zero_gather) { /* (a test-only fault leaves it out: model/debug.h) */
            t->opt.shard_done = shard_done;
            t->opt.shard_done_ctx = t->sync;
        }
    }
    /* offloaded on a GPU: each bucket's gradients leave for the host as it
     * is reduced, during the backward (ZeRO-Offload; model/optim.h) */
    if (tri_optim_offload_overlap(&t->opt, &t->gpt, t->sync) != 0) return rc;
    for (int k = 0; t->opt.host_step && k < t->gpt.n_chunks; k++) {
        t->gpt.chunks[k].grads_ready = grads_ready;
        t->gpt.chunks[k].grads_ready_ctx = &t->sync[k];
    }
    if (zero_setup(t) != 0) return rc; /* ZeRO-2/3: gradient shards (src/train/zero.h) */
    t->inputs = malloc(t->mb * t->T * sizeof(int32_t));
    t->targets = malloc(t->mb * t->T * sizeof(int32_t));
    if (!t->inputs || !t->targets) return rc;

    *start = 0;
    if (have_ckpt) {
        tri_config saved;
        if (tri_ckpt_state_read(ckpt, start, &t->consumed, &saved) != 0) return TRI_EXIT_BAD_INPUT;
        if (check_resume(cfg, &saved, ckpt, t->is_logger && !opts->quiet) != 0) return TRI_EXIT_BAD_INPUT;
        if (tri_datafiles_check_resume(ckpt, t->has_train_data ? &t->train_data : NULL,
                                       t->has_val ? &t->val_data : NULL, opts->allow_data_change,
                                       t->is_logger && !opts->quiet) != 0)
            return TRI_EXIT_BAD_INPUT;
        double load_s = tri_now_s();
        if (tri_model_load(ckpt, &t->gpt, &t->opt, &t->dist) != 0) return TRI_EXIT_BAD_INPUT;
        load_s = tri_now_s() - load_s;
        t->boot_load_s = load_s;
        t->opt.t = *start;
        /* fp16 skips steps: AdamW's count and the loss scale come from state.json */
        double scale = t->loss_scale;
        if (tri_ckpt_state_scaler(ckpt, &t->opt.t, &scale, &t->scale_clean) != 0) return TRI_EXIT_BAD_INPUT;
        if (t->fp16) t->loss_scale = scale;
        if (badstep_resume(t, ckpt, *start) != 0) return TRI_EXIT_BAD_INPUT; /* skipped samples, spike mean */
        if (t->is_logger && !opts->quiet)
            printf("resumed from %s at step %d (%llu samples consumed): checkpoint found and verified in %.1f ms, "
                   "loaded in %.1f ms\n",
                   ckpt, *start, (unsigned long long)t->consumed, t->store.find_ms, load_s * 1e3);
    } else {
        if (opts->resume && t->is_logger && !opts->synthetic)
            printf("resume: no checkpoint in %s yet, starting from step 0\n", cfg->checkpoint.dir);
        if (opts->init_from) {
            /* a Hugging Face directory's weights: step 0, fresh optimizer; the
             * masters are set from the fp32 values read */
            if (tri_model_import(opts->init_from, &t->gpt, &t->opt, &t->dist, t->is_logger && !opts->quiet) != 0)
                return TRI_EXIT_BAD_INPUT;
        } else {
            if (tri_gpt_init_params(&t->gpt, cfg->train.seed) != 0) return TRI_EXIT_FAILURE;
            tri_optim_master_from_params(&t->opt, &t->gpt); /* 16-bit parameters: their fp32 masters */
        }
    }

    if (zero_params_shard(t) != 0) return TRI_EXIT_FAILURE; /* ZeRO-3: each rank keeps its shards only */

    /* checkpoint.async: the writer's state and its staging memory (in the
     * background), so that the loop allocates nothing (src/train/ckpt_async.h) */
    if (ckpt_setup(t) != 0) return TRI_EXIT_FAILURE;

    /* bench --profile: the ops timed from the first step on, GEMMs by the weight they read */
    if (opts->profile) {
        t->prof = tri_profile_start(&t->ctx, 0);
        if (t->prof == NULL || tri_gpt_profile_roles(&t->gpt, t->prof) != 0) return TRI_EXIT_FAILURE;
    }

    if (t->is_logger && !opts->synthetic) {
        if (tri_mkdir_p(cfg->log.dir) != 0) {
            tri_error("log.dir: cannot create %s: %s", cfg->log.dir, strerror(errno));
            return TRI_EXIT_BAD_INPUT;
        }
        tri_metrics_mode mode = *start > 0 ? TRI_METRICS_RESUME : opts->resume ? TRI_METRICS_RESTART : TRI_METRICS_NEW;
        t->metrics = tri_metrics_open(cfg->log.dir, mode, *start, cfg->log.tensorboard);
        if (!t->metrics) return TRI_EXIT_BAD_INPUT; /* said */
        /* what tridentrun hands a relaunch (an elastic shrink), at the step
         * it resumes from; a new run drops an earlier job's */
        (void)tri_metrics_take_events(t->metrics, cfg->log.dir, *start, opts->resume);
    }
    if (t->is_logger && !opts->quiet) {
        printf("config %s:\n", cfg->source);
        tri_config_print(cfg, stdout);
        char cp[48] = ""; /* said only with context parallelism */
        if (mesh->cp > 1) snprintf(cp, sizeof cp, " cp=%d (%zu positions per rank)", mesh->cp, t->Tl);
        printf("trident: %zu parameters, tp=%d%s pp=%d dp=%d, %d micro-batches of %zu per rank, %d threads\n",
               tri_gpt_num_params(&cfg->model), mesh->tp, cp, mesh->pp, mesh->dp, t->n_micro, t->mb,
               omp_get_max_threads());
        char mem[256];
        tri_mem_line(&t->ctx.mem, mem, sizeof mem);
        printf("trident: memory per rank (recompute %s): %s\n", tri_recompute_name(cfg->train.recompute), mem);
        fflush(stdout);
    }
    zero_report(t);
    return 0;
}

void trainer_startup_report(trainer *t, int step, double first_step_s) {
    if (!t->is_logger) return;
    const double total = tri_now_s() - t->boot_t0, find = t->store.find_ms * 1e-3;
    double rest = total - t->boot_dist_s - find - t->boot_load_s - first_step_s;
    if (rest < 0) rest = 0;
    if (!t->opts.quiet) {
        printf("restart: %.2f s from set-up to the end of step %d: MPI and groups %.2f s, checkpoint found and "
               "verified %.1f ms, loaded %.1f ms, data, preflight and model %.2f s, the first step %.2f s\n",
               total, step, t->boot_dist_s, find * 1e3, t->boot_load_s * 1e3, rest, first_step_s);
        fflush(stdout);
    }
    tri_metric f[] = {TRI_METRIC_NUM("perf_startup_s", "%.4f", total),
                      TRI_METRIC_NUM("perf_startup_dist_s", "%.4f", t->boot_dist_s),
                      TRI_METRIC_NUM("perf_startup_ckpt_find_ms", "%.3f", find * 1e3),
                      TRI_METRIC_NUM("perf_startup_ckpt_load_ms", "%.3f", t->boot_load_s * 1e3),
                      TRI_METRIC_NUM("perf_startup_other_s", "%.4f", rest),
                      TRI_METRIC_NUM("perf_startup_first_step_s", "%.4f", first_step_s)};
    tri_metrics_write(t->metrics, step, f, sizeof f / sizeof f[0]);
}
