/* AdamW over a model's parameter tables: learning-rate schedule, global
 * gradient norm and clipping, and the update. The moments live in flat
 * buffers laid out like each chunk's parameters (fp32, the master dtype). */
#ifndef TRI_OPTIM_H
#define TRI_OPTIM_H

#include "model/gpt.h"

typedef struct tri_adamw_cfg {
    double lr, min_lr;
    int warmup_steps, total_steps;
    double beta1, beta2, eps, weight_decay, grad_clip;
} tri_adamw_cfg;

typedef struct tri_optim {
    tri_adamw_cfg cfg;
    int n_chunks;
    float **m, **v; /* [n_chunks] of (chunk n_elems): exp_avg, exp_avg_sq; backend memory */
    int t;          /* updates done so far                                     */
} tri_optim;

int tri_optim_init(tri_optim *o, const tri_gpt *g, const tri_adamw_cfg *cfg);
void tri_optim_free(tri_optim *o, const tri_gpt *g); /* NULL-safe */

/* Learning rate for 0-based step s: linear warmup from lr/warmup to lr over
 * warmup_steps, then cosine decay to min_lr at total_steps (min_lr after). */
double tri_lr_at(const tri_adamw_cfg *cfg, int s);

/* Sum of squares of this rank's gradients over every chunk, counting each
 * replicated tensor only on TP rank 0 (it is identical on every TP rank) and
 * the tied token embedding only in the chunk that holds the embedding (the
 * head stage's copy has the same, reduced gradient), so that the sum over the
 * TP and PP groups is the sum over the global model. */
double tri_grad_sumsq_local(const tri_gpt *g);

/* One AdamW update of every parameter of every chunk with the given lr, after
 * scaling the gradients by clip_scale (1 when not clipping). Biases, LayerNorm
 * weights and embeddings take no weight decay. */
void tri_optim_step(tri_optim *o, tri_gpt *g, double lr, float clip_scale);

#endif
