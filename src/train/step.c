/* `trident train`, part 2: one optimizer step and the validation pass.
 * See src/train/trainer.h. */
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/stop.h"
#include "train/zero.h"
#include "model/cp.h"

static void fill_synthetic(int32_t *x, size_t n, uint64_t seed, int vocab) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
}

/* Context parallelism: this CP rank's two chunks of each sequence, inputs
 * and targets alike (model/cp.h); nothing without it. */
static int local_share(trainer *t, int rc) {
    const tri_mesh *m = &t->dist.mesh;
    tri_cp_local_tokens(t->inputs, t->mb, t->T, m->cp, m->cp_rank);
    tri_cp_local_tokens(t->targets, t->mb, t->T, m->cp, m->cp_rank);
    return rc;
}

/* 0, or -1 when a token file could not be read (printed) */
static int load_batch(trainer *t, int step, int micro) {
    size_t first = t->first_seq + (size_t)micro * t->mb;
    if (t->opts.synthetic) {
        fill_synthetic(t->inputs, t->mb * t->T, ((uint64_t)step << 20) + first, t->cfg->model.vocab_size);
        fill_synthetic(t->targets, t->mb * t->T, ((uint64_t)step << 20) + first + 0x5555, t->cfg->model.vocab_size);
        return local_share(t, 0);
    }
    int rc = tri_sampler_fill_samples(&t->train_data, t->consumed + first, t->mb, t->inputs, t->targets);
    return rc == 0 ? local_share(t, 0) : rc;
}

/* The executor's loaders: micro-batch mb of this step, or of validation. */
typedef struct loader {
    trainer *t;
    int step, eval_index;
    int failed;
} loader;

static int load_train(void *ctx, int mb) {
    loader *l = ctx;
    if (load_batch(l->t, l->step, mb) == 0) return 0;
    l->failed = 1;
    return -1;
}

static int load_eval(void *ctx, int mb) {
    loader *l = ctx;
    (void)mb; /* one micro-batch per run */
    if (tri_sampler_fill_eval(&l->t->val_data, (size_t)l->eval_index, l->t->mb, l->t->inputs, l->t->targets) == 0)
        return local_share(l->t, 0);
    l->failed = 1;
    return -1;
}

/* A token file could not be read (printed). Without pipelining the caller
 * ends the run; with it, the other stages of this pipeline wait for this
 * rank's messages: the job is ended at once instead of by the watchdog. */
static void data_failed(trainer *t) {
    t->data_error = 1;
    if (t->dist.mesh.pp > 1) {
        tri_error_rank(t->dist.mesh.rank, "a token file could not be read; ending the job");
        tri_dist_abort(&t->dist, TRI_EXIT_FAILURE);
    }
}

/* The first and the last stage each hold the token embedding (input and
 * tied LM head); after the DP reduction their gradients are summed over the
 * embedding group so that both copies take the same update. With ZeRO this
 * comes before the DP reduction instead (the two copies lie in differently
 * cut buffers, so their shards would not match): the buckets holding the
 * embedding wait for it (tri_grad_sync_defer), and summing over the
 * embedding group then over DP gives the same total. */
static void reduce_tied_embedding(trainer *t) {
    tri_gpt *g = &t->gpt;
    /* (a test-only fault leaves it out: model/debug.h) */
    if (t->dist.mesh.pp == 1 || t->debug.skip_tied_reduce) return;
    if (!g->tied) return; /* an untied LM head (Llama): no second copy, no embedding group */
    for (int k = 0; k < g->n_chunks; k++) {
        tri_chunk *ch = &g->chunks[k];
        if (ch->has_embedding || ch->has_head)
            tri_comm_allreduce(&t->dist.emb, ch->g.wte, g->Vl * g->C, TRI_F32, TRI_SUM);
    }
}

/* The smallest loss scale: halving stops here (Megatron's default min_loss_scale). */
#define MIN_LOSS_SCALE 1.0

double train_step(trainer *t, int step, double *norm) {
    tri_gpt *g = &t->gpt;
    float dscale = (float)(1.0 / ((double)t->G * (double)t->T));
    /* fp16: the loss gradient scaled by S keeps small gradients out of the
     * fp16 subnormals; every gradient is S times too large until unscaled */
    const double S = t->fp16 ? t->loss_scale : 1.0;
    if (t->fp16) dscale = (float)(S / ((double)t->G * (double)t->T));
    t->skipped = TRI_SKIP_NONE;
    badstep_begin_step(t); /* past skipped samples; a test fault armed */
    /* ZeRO-2/3: this step's full gradient buffers (src/train/zero.h) */
    if (zero_step_begin(t) != 0) TRI_FAIL("rank %d: no memory for the step's gradients", t->dist.mesh.rank);
    for (int k = 0; k < g->n_chunks; k++) {
        t->ctx.ops->zero(&t->ctx, g->chunks[k].grad_mem, g->chunks[k].n_alloc * sizeof(float));
        tri_grad_sync_begin(&t->sync[k]);
    }
    loader l = {t, step, 0, 0};
    double loss_sum =
        tri_pipe_run(&t->pipe, &t->sched, TRI_PIPE_TRAIN, dscale, t->sync, load_train, &l, t->inputs, t->targets);
    if (l.failed) {
        data_failed(t);
        *norm = NAN;
        return NAN;
    }
    reduce_tied_embedding(t);
    int zero = t->cfg->parallel.zero;
    /* ZeRO: the tied embedding's buckets, now summed over the embedding group */
    for (int k = 0; zero && k < g->n_chunks; k++) tri_grad_sync_finish_deferred(&t->sync[k]);
    zero_step_reduced(t); /* ZeRO-2: the shards hold the step's gradient; the full buffers go */
    /* (element 0 lies in DP rank 0's first shard under ZeRO: counted once) */
    /* test-only fault (model/debug.h): one non-finite element, as an fp16
     * overflow would make (tests/system/test_mixed_precision.c: the step is
     * skipped, the scale halves) */
    float *g0 = tri_optim_grad0(&t->opt, g);
    if (t->debug.fp16_overflow_step == step + 1 && g0) t->ctx.ops->scale(&t->ctx, g0, INFINITY, 1);
    badstep_inject_grad(t); /* test-only: debug.inject_kind nan-grad | inf-grad */
    /* the loss lives on the head stage; identical on every TP rank */
    tri_comm_allreduce_host(&t->dist.dp, &loss_sum, 1, TRI_F64, TRI_SUM);
    tri_comm_allreduce_host(&t->dist.pp, &loss_sum, 1, TRI_F64, TRI_SUM);
    /* context parallelism: each CP rank's sum covers its share of the tokens */
    tri_comm_allreduce_host(&t->dist.cp, &loss_sum, 1, TRI_F64, TRI_SUM);
    /* ZeRO: each DP rank holds its shards of the reduced gradient: every
     * element is counted on exactly one of them */
    double sumsq = zero ? tri_grad_sumsq_shards(&t->opt, g) : tri_grad_sumsq_local(g);
    if (zero) tri_comm_allreduce_host(tri_dist_grad_group(&t->dist), &sumsq, 1, TRI_F64, TRI_SUM);
    tri_comm_allreduce_host(&t->dist.tp, &sumsq, 1, TRI_F64, TRI_SUM);
    tri_comm_allreduce_host(&t->dist.pp, &sumsq, 1, TRI_F64, TRI_SUM);
    *norm = sqrt(sumsq);
    if (t->fp16) *norm /= S;
    double loss = loss_sum / ((double)t->G * (double)t->T);
    /* before any update: a non-finite loss or norm, or a spike, skips the
     * step in every precision; all ranks decide alike (badstep.h) */
    t->skipped = badstep_judge(t, &loss, norm);
    if (t->skipped != TRI_SKIP_NONE) {
        /* no update (AdamW's step count stays); the batch is consumed and the
         * learning-rate schedule moves on, as in Megatron. fp16: a gradient
         * overflow halves the scale */
        if (t->fp16 && !isfinite(*norm)) {
            t->loss_scale = S / 2 < MIN_LOSS_SCALE ? MIN_LOSS_SCALE : S / 2;
            t->scale_clean = 0;
        }
        t->consumed += t->G;
        return loss;
    }
    float clip = 1.0f;
    double max_norm = t->cfg->train.grad_clip;
    if (max_norm > 0.0 && *norm > max_norm) clip = (float)(max_norm / (*norm + 1e-6));
    if (t->fp16) { /* unscale and clip in one pass over the gradients */
        double c = max_norm > 0.0 && *norm > max_norm ? max_norm / (*norm + 1e-6) : 1.0;
        clip = (float)(c / S);
    }
    tri_optim_step(&t->opt, g, tri_lr_at(&t->opt.cfg, step), clip);
    /* ZeRO: the all-gathers started bucket by bucket during the update */
    for (int k = 0; zero && k < g->n_chunks; k++) tri_grad_sync_gather_wait(&t->sync[k]);
    t->consumed += t->G;
    if (t->fp16 && ++t->scale_clean >= t->cfg->train.loss_scale_window) {
        t->loss_scale = S * 2;
        t->scale_clean = 0;
    }
    return loss;
}

double evaluate(trainer *t) {
    double sum = 0.0;
    size_t count = 0;
    int dp = t->dist.mesh.dp, dpr = t->dist.mesh.dp_rank, n = t->eval_batches;
    for (int round = 0; round * dp < n; round++) {
        /* every rank (with a batch this round or not) takes part, so all
         * leave together and none waits in a collective for the others */
        int stop = tri_stop_signal();
        tri_comm_allreduce_host(&t->dist.world, &stop, 1, TRI_I32, TRI_MAX);
        if (stop) {
            t->stop = stop;
            return NAN;
        }
        int i = round * dp + dpr;
        if (i >= n) continue;
        loader l = {t, 0, i, 0};
        sum += tri_pipe_run(&t->pipe, &t->eval_sched, TRI_PIPE_LOSS, 0.0f, NULL, load_eval, &l, t->inputs, t->targets);
        if (l.failed) {
            data_failed(t);
            return NAN;
        }
        count += t->mb * t->Tl;
    }
    double buf[2] = {sum, (double)count};
    tri_comm_allreduce_host(&t->dist.cp, buf, 2, TRI_F64, TRI_SUM);
    tri_comm_allreduce_host(&t->dist.dp, buf, 2, TRI_F64, TRI_SUM);
    tri_comm_allreduce_host(&t->dist.pp, buf, 2, TRI_F64, TRI_SUM);
    /* count is added on every PP stage: the loss only on the last one */
    return buf[1] > 0 ? buf[0] / (buf[1] / t->dist.mesh.pp) : NAN;
}
