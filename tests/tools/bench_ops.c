/* bench_ops: per-op timings of the CPU backend at one model's shapes (by
 * default configs/bench-gpt.json: L=6 C=384 NH=6 V=8192 T=256 B=8), to find
 * where the non-GEMM time of a training step goes and to compare two builds.
 * Not a test: it asserts nothing and is not run by CTest.
 *
 *   ./build/tests/bench_ops [--threads K] [--reps N] [--only NAME] [--cpu]
 *
 * --cpu times with the process's CPU clock instead of the wall clock: with
 * one thread on a machine shared with other jobs, time spent descheduled is
 * then not counted (with more threads it adds their times, spinning included).
 *
 * The ops are the CPU backend's fp32 functions (tri_cpu_*, cpu_internal.h),
 * called directly. Each op runs N times on the same buffers (inputs of in-place ops restored
 * from a copy outside the timed region); the minimum and the median are
 * printed, with the calls per training step and min x calls. On a loaded
 * machine compare minima, and alternate the two builds being compared. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/ctx.h"

static clockid_t clock_id = CLOCK_MONOTONIC;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(clock_id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float *buf(size_t n, uint64_t seed, float lo, float hi) {
    float *p = tri_cpu_alloc(n * sizeof(float));
    if (p == NULL) {
        fprintf(stderr, "bench_ops: out of memory (%zu floats)\n", n);
        exit(1);
    }
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17; /* xorshift64 */
        p[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
    return p;
}

typedef struct shapes {
    size_t B, T, C, V, L, F, BT, n_params;
    int NH, HS;
} shapes;

/* All buffers, made once. */
typedef struct bufs {
    float *x, *x2, *dx, *w, *b, *dw, *db, *mean, *rstd; /* (BT, C), (C), (BT) */
    float *qkv, *atty, *lse, *dqkv, *scr;               /* attention */
    float *inv_freq;                                    /* RoPE's (HS / 2) */
    float *h, *hg, *dh;                                 /* (BT, F) */
    float *logits, *logits0, *stats, *losses;           /* (BT, V) */
    int32_t *targets;
    float *p, *m, *v, *g; /* (n_params) */
} bufs;

typedef struct op {
    const char *name;
    int calls; /* per training step */
} op;

static const op OPS[] = {
    {"layernorm_fwd", 13},
    {"layernorm_bwd", 13},
    {"attention_fwd", 6},
    {"attention_bwd", 6},
    {"gelu_fwd", 6},
    {"gelu_bwd", 6},
    {"residual_fwd", 12},
    {"bias_bwd_C", 12},
    {"bias_bwd_3C", 6},
    {"bias_bwd_4C", 6},
    {"ce_stats", 1},
    {"ce_bwd_inplace", 1},
    {"adamw", 1},
    {"sumsq", 1},
    /* the Llama ops at the same shapes (not in the GPT-2 step: 0 calls):
     * grouped-query attention with NH / 2 key/value heads, RoPE on its q
     * and k heads, SwiGLU over (BT, F / 2) from (BT, F) */
    {"attention_fwd_gqa", 0},
    {"attention_bwd_gqa", 0},
    {"rmsnorm_fwd", 0},
    {"rmsnorm_bwd", 0},
    {"rope_fwd", 0},
    {"rope_bwd", 0},
    {"swiglu_fwd", 0},
    {"swiglu_bwd", 0},
    /* the GEMMs, for scale: (N, C) -> (N, OC) forward and backward */
    {"mm_fwd_qkv", 6},
    {"mm_bwd_qkv", 6},
    {"mm_fwd_proj", 6},
    {"mm_bwd_proj", 6},
    {"mm_fwd_fc", 6},
    {"mm_bwd_fc", 6},
    {"mm_fwd_fcproj", 6},
    {"mm_bwd_fcproj", 6},
    {"mm_fwd_lmhead", 1},
    {"mm_bwd_lmhead", 1},
};

/* The linear layer named by the suffix of an mm_* op: its C and OC, and
 * whether it has a bias (the LM head, tied to the embedding, has none). */
static void mm_shape(const char *name, const shapes *s, size_t *C, size_t *OC, int *bias) {
    const char *l = strchr(name + 3, '_') + 1;
    *bias = 1;
    if (!strcmp(l, "qkv"))
        *C = s->C, *OC = 3 * s->C;
    else if (!strcmp(l, "proj"))
        *C = s->C, *OC = s->C;
    else if (!strcmp(l, "fc"))
        *C = s->C, *OC = s->F;
    else if (!strcmp(l, "fcproj"))
        *C = s->F, *OC = s->C;
    else
        *C = s->C, *OC = s->V, *bias = 0;
}

static void run_op(const char *name, const shapes *s, bufs *b) {
    const size_t BT = s->BT, C = s->C;
    if (!strcmp(name, "layernorm_fwd"))
        tri_cpu_layernorm_fwd(b->x2, b->mean, b->rstd, b->x, b->w, b->b, BT, C);
    else if (!strcmp(name, "layernorm_bwd"))
        tri_cpu_layernorm_bwd(b->dx, b->dw, b->db, b->x2, b->x, b->w, b->mean, b->rstd, BT, C);
    else if (!strcmp(name, "attention_fwd"))
        tri_cpu_attention_fwd(b->atty, b->lse, b->qkv, s->B, s->T, s->NH, s->NH, s->HS);
    else if (!strcmp(name, "attention_bwd"))
        tri_cpu_attention_bwd(b->dqkv, b->scr, b->x2, b->qkv, b->atty, b->lse, s->B, s->T, s->NH, s->NH, s->HS);
    else if (!strcmp(name, "attention_fwd_gqa"))
        tri_cpu_attention_fwd(b->atty, b->lse, b->qkv, s->B, s->T, s->NH, s->NH / 2, s->HS);
    else if (!strcmp(name, "attention_bwd_gqa"))
        tri_cpu_attention_bwd(b->dqkv, b->scr, b->x2, b->qkv, b->atty, b->lse, s->B, s->T, s->NH, s->NH / 2, s->HS);
    else if (!strcmp(name, "rmsnorm_fwd"))
        tri_cpu_rmsnorm_fwd(b->x2, b->rstd, b->x, b->w, BT, C, 1e-5f);
    else if (!strcmp(name, "rmsnorm_bwd"))
        tri_cpu_rmsnorm_bwd(b->dx, b->dw, b->x2, b->x, b->w, b->rstd, BT, C);
    else if (!strcmp(name, "rope_fwd"))
        tri_cpu_rope_fwd(b->dqkv, b->inv_freq, s->B, s->T, s->NH, s->NH / 2, s->HS, 0);
    else if (!strcmp(name, "rope_bwd"))
        tri_cpu_rope_bwd(b->dqkv, b->inv_freq, s->B, s->T, s->NH, s->NH / 2, s->HS, 0);
    else if (!strcmp(name, "swiglu_fwd"))
        tri_cpu_swiglu_fwd(b->hg, b->h, BT, s->F / 2);
    else if (!strcmp(name, "swiglu_bwd"))
        tri_cpu_swiglu_bwd(b->hg, b->h, b->dh, BT, s->F / 2);
    else if (!strcmp(name, "gelu_fwd"))
        tri_cpu_gelu_fwd(b->hg, b->h, BT * s->F);
    else if (!strcmp(name, "gelu_bwd"))
        tri_cpu_gelu_bwd(b->dh, b->h, b->dh, BT * s->F);
    else if (!strcmp(name, "residual_fwd"))
        tri_cpu_residual_fwd(b->x2, b->x, b->dx, b->b, BT, C);
    else if (!strcmp(name, "bias_bwd_C"))
        tri_cpu_bias_bwd(b->db, b->x, BT, C);
    else if (!strcmp(name, "bias_bwd_3C"))
        tri_cpu_bias_bwd(b->dw, b->qkv, BT, 3 * C);
    else if (!strcmp(name, "bias_bwd_4C"))
        tri_cpu_bias_bwd(b->dw, b->h, BT, 4 * C);
    else if (!strcmp(name, "ce_stats"))
        tri_cpu_crossentropy_stats(b->stats, b->logits, b->targets, BT, s->V, 0, s->V);
    else if (!strcmp(name, "ce_bwd_inplace"))
        tri_cpu_crossentropy_bwd(b->losses, b->logits, b->logits, b->stats, b->targets, 1.0f / (float)BT, BT, s->V, 0,
                                 s->V);
    else if (!strcmp(name, "adamw"))
        tri_cpu_adamw(b->p, b->m, b->v, b->g, s->n_params, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
    else if (!strcmp(name, "sumsq"))
        (void)tri_cpu_sumsq(b->g, s->n_params);
    else if (!strncmp(name, "mm_", 3)) {
        size_t Ci, OC;
        int bias;
        mm_shape(name, s, &Ci, &OC, &bias);
        /* inp (BT, Ci) and dinp in the (BT, F) buffers, out/dout in logits,
         * weight and its gradient in the optimizer's (n_params) buffers */
        if (!strncmp(name, "mm_fwd", 6))
            tri_cpu_matmul_fwd(b->logits, b->h, b->p, bias ? b->g : NULL, BT, Ci, OC);
        else
            tri_cpu_matmul_bwd(b->dh, b->m, bias ? b->dw : NULL, b->logits0, b->h, b->p, BT, Ci, OC);
    }
}

int main(int argc, char **argv) {
    int threads = 2, reps = 20;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--cpu"))
            clock_id = CLOCK_PROCESS_CPUTIME_ID;
        else {
            fprintf(stderr, "usage: bench_ops [--threads K] [--reps N] [--only NAME] [--cpu]\n");
            return 2;
        }
    }
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "bench_ops: --threads and --reps must be >= 1\n");
        return 2;
    }
    tri_ctx ctx; /* the CPU backend's set-up: threads, flush-to-zero */
    if (tri_ctx_init(&ctx, "cpu", threads) != 0) return 1;
    shapes s = {.B = 8, .T = 256, .C = 384, .V = 8192, .L = 6, .NH = 6, .HS = 64};
    s.F = 4 * s.C, s.BT = s.B * s.T;
    s.n_params = 13891584;
    const size_t BT = s.BT, C = s.C;
    bufs b = {0};
    b.x = buf(BT * C, 1, -2, 2), b.x2 = buf(BT * C, 2, -1, 1), b.dx = buf(BT * C, 3, -1, 1);
    b.w = buf(C, 4, 0.5f, 1.5f), b.b = buf(C, 5, -0.5f, 0.5f);
    b.dw = buf(4 * C, 6, 0, 0), b.db = buf(C, 7, 0, 0);
    b.mean = buf(BT, 8, 0, 0), b.rstd = buf(BT, 9, 0, 0);
    b.qkv = buf(BT * 3 * C, 10, -1.5f, 1.5f), b.atty = buf(BT * C, 11, 0, 0);
    b.lse = buf(s.B * (size_t)s.NH * s.T, 12, 0, 0);
    b.dqkv = buf(BT * 3 * C, 13, 0, 0);
    /* the scratch of the GQA attention's backward covers the MHA one's */
    b.scr = buf(tri_cpu_attention_scratch_floats(s.B, s.T, s.NH, s.NH / 2, s.HS) + 1, 14, 0, 0);
    b.inv_freq = buf((size_t)s.HS / 2, 15, 0, 0);
    for (int i = 0; i < s.HS / 2; i++) b.inv_freq[i] = powf(10000.0f, -2.0f * (float)i / (float)s.HS);
    b.h = buf(BT * s.F, 17, -4, 4), b.hg = buf(BT * s.F, 18, 0, 0), b.dh = buf(BT * s.F, 19, -1, 1);
    b.logits0 = buf(BT * s.V, 20, -8, 8), b.logits = buf(BT * s.V, 21, 0, 0);
    b.stats = buf(3 * BT, 22, 0, 0), b.losses = buf(BT, 23, 0, 0);
    b.targets = malloc(BT * sizeof(int32_t));
    for (size_t i = 0; i < BT; i++) b.targets[i] = (int32_t)((i * 7919) % s.V);
    b.p = buf(s.n_params, 24, -0.1f, 0.1f), b.m = buf(s.n_params, 25, -0.01f, 0.01f);
    b.v = buf(s.n_params, 26, 0, 0.001f), b.g = buf(s.n_params, 27, -0.01f, 0.01f);
    memcpy(b.logits, b.logits0, BT * s.V * sizeof(float));
    /* inputs the timed ops read: a forward's outputs, as in a step */
    tri_cpu_attention_fwd(b.atty, b.lse, b.qkv, s.B, s.T, s.NH, s.NH, s.HS);
    tri_cpu_layernorm_fwd(b.x2, b.mean, b.rstd, b.x, b.w, b.b, BT, C);
    tri_cpu_crossentropy_stats(b.stats, b.logits, b.targets, BT, s.V, 0, s.V);

    printf("bench_ops: B=%zu T=%zu C=%zu NH=%d V=%zu, %d threads, %d reps, %s clock\n", s.B, s.T, s.C, s.NH, s.V,
           omp_get_max_threads(), reps, clock_id == CLOCK_MONOTONIC ? "wall" : "process CPU");
    printf("%-16s %10s %10s %6s %12s\n", "op", "min ms", "median ms", "calls", "ms/step(min)");
    double *t = malloc((size_t)reps * sizeof(double));
    double total = 0, total_mm = 0;
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
        const char *name = OPS[k].name;
        if (only != NULL && strstr(name, only) == NULL) continue;
        const int inplace = !strcmp(name, "ce_bwd_inplace");
        run_op(name, &s, &b); /* warm-up */
        for (int r = 0; r < reps; r++) {
            if (inplace) memcpy(b.logits, b.logits0, BT * s.V * sizeof(float));
            const double t0 = now_s();
            run_op(name, &s, &b);
            t[r] = now_s() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        if (!strncmp(name, "mm_", 3))
            total_mm += t[0] * OPS[k].calls;
        else
            total += t[0] * OPS[k].calls;
        printf("%-16s %10.3f %10.3f %6d %12.2f\n", name, t[0] * 1e3, t[reps / 2] * 1e3, OPS[k].calls,
               t[0] * OPS[k].calls * 1e3);
    }
    printf("%-16s %10s %10s %6s %12.2f\n", "total non-GEMM", "", "", "", total * 1e3);
    printf("%-16s %10s %10s %6s %12.2f\n", "total GEMM", "", "", "", total_mm * 1e3);
    free(t);
    tri_ctx_free(&ctx);
    return 0;
}
