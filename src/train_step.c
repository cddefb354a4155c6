/* `trident train`, part 2: one optimizer step and the validation pass.
 * See src/trainer.h. */
#include "src/trainer.h"

#include <math.h>
#include <string.h>

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

double train_step(trainer *t, int step, double *norm) {
    tri_gpt *g = &t->gpt;
    float dscale = (float)(1.0 / ((double)t->G * (double)t->T));
    t->ops->zero(g->grad_mem, g->n_floats * sizeof(float));
    tri_grad_sync_begin(&t->sync);
    double loss_sum = 0.0;
    for (int m = 0; m < t->n_micro; m++) {
        if (load_batch(t, step, m) != 0) {
            t->data_error = 1;
            *norm = NAN;
            return NAN;
        }
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
        sum += tri_gpt_forward(&t->gpt, &t->acts, t->inputs, NULL, t->targets, 0.0f);
        count += t->mb * t->T;
    }
    double buf[2] = {sum, (double)count};
    tri_comm_allreduce(&t->dist.dp, buf, 2, TRI_F64, TRI_SUM);
    tri_comm_allreduce(&t->dist.pp, buf, 2, TRI_F64, TRI_SUM);
    /* count is added on every PP stage: the loss only on the last one */
    return buf[1] > 0 ? buf[0] / (buf[1] / t->dist.mesh.pp) : NAN;
}
