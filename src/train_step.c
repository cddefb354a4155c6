/* `trident train`, part 2: one optimizer step and the validation pass.
 * See src/trainer.h. */
#include "src/trainer.h"

#include <math.h>
#include <string.h>

#include "src/base/err.h"
#include "src/base/stop.h"

static void fill_synthetic(int32_t *x, size_t n, uint64_t seed, int vocab) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
}

/* 0, or -1 when a token file could not be read (printed) */
static int load_batch(trainer *t, int step, int micro) {
    size_t first = t->first_seq + (size_t)micro * t->mb;
    if (t->opts.synthetic) {
        fill_synthetic(t->inputs, t->mb * t->T, ((uint64_t)step << 20) + first, t->cfg->model.vocab_size);
        fill_synthetic(t->targets, t->mb * t->T, ((uint64_t)step << 20) + first + 0x5555, t->cfg->model.vocab_size);
        return 0;
    }
    return tri_sampler_fill_samples(&t->train_data, t->consumed + first, t->mb, t->inputs, t->targets);
}

/* One micro-batch through every chunk of this rank, in order (without
 * pipelining the chunks follow each other on one rank): forward in `mode`;
 * with TRI_FWD_TRAIN also backward, the chunks in reverse. Each chunk keeps
 * the micro-batch in one slot of its pool from its forward to its backward.
 * Returns the loss sum (head chunk), else 0. */
static double run_micro_batch(trainer *t, tri_fwd_mode mode, float dscale, int last) {
    tri_gpt *g = &t->gpt;
    int n = g->n_chunks;
    tri_slot *slots[8];
    TRI_CHECK(n <= 8);
    double loss = 0.0;
    const void *x = NULL;
    for (int k = 0; k < n; k++) {
        slots[k] = tri_slot_acquire(&t->pools[k], g);
        TRI_CHECK(slots[k] != NULL);
        tri_slot_stage(g, &t->pools[k], slots[k], t->inputs, t->targets);
        loss += tri_chunk_forward(g, &t->pools[k], slots[k], &t->ws, x, mode, dscale);
        x = t->ws.out;
    }
    if (mode == TRI_FWD_TRAIN) {
        const void *dy = NULL;
        for (int k = n - 1; k >= 0; k--) {
            tri_grad_sync_set_last(&t->sync[k], last);
            tri_chunk_backward(g, &t->pools[k], slots[k], &t->ws, dy);
            dy = t->ws.dres;
        }
    }
    for (int k = 0; k < n; k++) tri_slot_release(&t->pools[k], g, slots[k]);
    return loss;
}

double train_step(trainer *t, int step, double *norm) {
    tri_gpt *g = &t->gpt;
    float dscale = (float)(1.0 / ((double)t->G * (double)t->T));
    for (int k = 0; k < g->n_chunks; k++) {
        t->ctx.ops->zero(&t->ctx, g->chunks[k].grad_mem, g->chunks[k].n_elems * sizeof(float));
        tri_grad_sync_begin(&t->sync[k]);
    }
    double loss_sum = 0.0;
    for (int m = 0; m < t->n_micro; m++) {
        if (load_batch(t, step, m) != 0) {
            t->data_error = 1;
            *norm = NAN;
            return NAN;
        }
        loss_sum += run_micro_batch(t, TRI_FWD_TRAIN, dscale, m == t->n_micro - 1);
    }
    for (int k = 0; k < g->n_chunks; k++) tri_grad_sync_finish(&t->sync[k]);
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

double evaluate(trainer *t) {
    double sum = 0.0;
    size_t count = 0;
    int dp = t->dist.mesh.dp, dpr = t->dist.mesh.dp_rank, n = t->eval_batches;
    for (int round = 0; round * dp < n; round++) {
        /* every rank (with a batch this round or not) takes part, so all
         * leave together and none waits in a collective for the others */
        int stop = tri_stop_signal();
        tri_comm_allreduce(&t->dist.world, &stop, 1, TRI_I32, TRI_MAX);
        if (stop) {
            t->stop = stop;
            return NAN;
        }
        int i = round * dp + dpr;
        if (i >= n) continue;
        if (tri_sampler_fill_eval(&t->val_data, (size_t)i, t->mb, t->inputs, t->targets) != 0) {
            t->data_error = 1;
            return NAN;
        }
        sum += run_micro_batch(t, TRI_FWD_LOSS, 0.0f, 0);
        count += t->mb * t->T;
    }
    double buf[2] = {sum, (double)count};
    tri_comm_allreduce(&t->dist.dp, buf, 2, TRI_F64, TRI_SUM);
    tri_comm_allreduce(&t->dist.pp, buf, 2, TRI_F64, TRI_SUM);
    /* count is added on every PP stage: the loss only on the last one */
    return buf[1] > 0 ? buf[0] / (buf[1] / t->dist.mesh.pp) : NAN;
}
