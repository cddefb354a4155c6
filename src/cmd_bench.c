/* `trident bench CONFIG [--steps N] [--threads K] [--set ...]`: training
 * throughput on synthetic tokens, and the machine's sgemm speed on the
 * model's own GEMM shape, so that MFU can be read against what this machine
 * can do rather than a datasheet. */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/gpt.h"
#include "src/cli.h"
#include "src/config.h"
#include "src/train.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Best GFLOP/s over `reps` runs of out (M, N) = A (M, K) @ B (N, K)^T, the
 * shape of the MLP's first GEMM. The best, not the median: it is the
 * denominator of MFU, and this VM has phases of half speed that a median of a
 * short burst can land in (MFU over 100% otherwise). */
static double sgemm_gflops(size_t M, size_t K, size_t N, int reps) {
    float *A = malloc(M * K * sizeof(float)), *B = malloc(N * K * sizeof(float)), *Cm = malloc(M * N * sizeof(float));
    if (!A || !B || !Cm) { free(A); free(B); free(Cm); return 0.0; }
    for (size_t i = 0; i < M * K; i++) A[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < N * K; i++) B[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    double *t = malloc((size_t)reps * sizeof *t);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)K, B, (int)K,
                    0.0f, Cm, (int)N);
        t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    double g = 2.0 * (double)M * (double)N * (double)K / t[0] / 1e9;
    free(t); free(A); free(B); free(Cm);
    return g;
}

int tri_cmd_bench(int argc, char **argv) {
    const char *path = NULL;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    int n_sets = 0;
    long steps = 10, threads = 0;
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: trident bench CONFIG [--steps N] [--threads K] [--set section.key=value]...\n"
                   "  runs N training steps (after one warm-up step) on synthetic tokens and prints\n"
                   "  tokens/s, achieved GFLOP/s, MFU against the measured sgemm GFLOP/s, and a JSON line.\n");
            rc = 0;
            goto out;
        } else if (!strcmp(a, "--steps") && v) { if (tri_arg_int(a, v, 1, 1000000, &steps)) goto out; i++; }
        else if (!strcmp(a, "--threads") && v) { if (tri_arg_int(a, v, 1, 1024, &threads)) goto out; i++; }
        else if (!strcmp(a, "--set") && v) { sets[n_sets++] = v; i++; }
        else if (a[0] == '-') {
            fprintf(stderr, "trident: bench: unknown or incomplete option '%s'\n", a);
            goto out;
        } else if (!path) path = a;
        else {
            fprintf(stderr, "trident: bench: unexpected argument '%s'\n", a);
            goto out;
        }
    }
    if (!path) {
        fprintf(stderr, "trident: bench: missing CONFIG\n");
        goto out;
    }
    tri_config cfg;
    /* the data files are not read: synthetic tokens */
    const char **all = calloc((size_t)n_sets + 2, sizeof *all);
    all[0] = "data.train=synthetic";
    for (int i = 0; i < n_sets; i++) all[i + 1] = sets[i];
    char steps_set[64];
    snprintf(steps_set, sizeof steps_set, "train.steps=%ld", steps + 1);
    all[n_sets + 1] = steps_set;
    int lrc = tri_config_load(&cfg, path, n_sets + 2, all);
    free(all);
    if (lrc != 0) goto out;
    tri_set_threads((int)threads);
    int nthreads = omp_get_max_threads();
    size_t BT = (size_t)cfg.train.micro_batch * (size_t)cfg.model.seq_len;
    size_t C = (size_t)cfg.model.n_embd;
    double peak = sgemm_gflops(BT, C, 4 * C, 15);
    double *times = calloc((size_t)steps + 1, sizeof *times);
    tri_run_opts opts = {0};
    opts.device = "cpu";
    opts.threads = (int)threads;
    opts.synthetic = 1;
    opts.quiet = 1;
    opts.step_times = times;
    tri_run_report rep = {0};
    opts.report = &rep;
    rc = tri_train(&cfg, &opts);
    if (rc == 0 && rep.rank == 0) {
        /* again after the run: the best of both */
        double again = sgemm_gflops(BT, C, 4 * C, 15);
        if (again > peak) peak = again;
        /* the first step warms caches and page-faults the buffers: not counted */
        qsort(times + 1, (size_t)steps, sizeof *times, cmp_double);
        double med = times[1 + steps / 2];
        double tokens = (double)cfg.train.global_batch * cfg.model.seq_len;
        double tps = tokens / med;
        double gflops = tri_gpt_flops_per_token(&cfg.model) * tps / 1e9;
        /* every rank measured sgemm with its own threads at the same moment
         * (they share the machine as the training ranks do): the job's peak is
         * world times that */
        double job_peak = peak * rep.world;
        double mfu = gflops / job_peak;
        printf("bench %s: %zu params, B=%d T=%d, %d rank(s) (tp=%d pp=%d dp=%d) x %d threads\n", path,
               tri_gpt_num_params(&cfg.model), cfg.train.global_batch, cfg.model.seq_len, rep.world,
               cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.dp, nthreads);
        printf("  step time   %.1f ms (median of %ld; min %.1f, max %.1f)\n", med * 1e3, steps, times[1] * 1e3,
               times[steps] * 1e3);
        printf("  throughput  %.0f tokens/s, %.1f GFLOP/s of model FLOPs (%.1f MFLOP/token)\n", tps, gflops,
               tri_gpt_flops_per_token(&cfg.model) / 1e6);
        printf("  sgemm       %.1f GFLOP/s per rank (%zux%dx%d, %d threads), %.1f for %d rank(s)\n", peak, BT,
               cfg.model.n_embd, 4 * cfg.model.n_embd, nthreads, job_peak, rep.world);
        printf("  MFU         %.1f%% of the measured sgemm speed\n", 100.0 * mfu);
        /* rank 0's view of communication: per step, and its share of step time */
        const char *names[3] = {"tp", "dp", "pp"};
        const tri_comm_stats *st[3] = {&rep.tp, &rep.dp, &rep.pp};
        double share[3] = {0, 0, 0};
        for (int g = 0; g < 3; g++) {
            if (st[g]->calls == 0 || rep.steps == 0) continue;
            share[g] = st[g]->seconds / rep.seconds;
            printf("  comm %s     %.2f MB/step in %.0f calls, %.1f ms/step blocked (%.1f%% of step time)\n", names[g],
                   (double)st[g]->bytes / rep.steps / 1e6, (double)st[g]->calls / rep.steps,
                   1e3 * st[g]->seconds / rep.steps, 100.0 * share[g]);
        }
        printf("{\"config\": \"%s\", \"ranks\": %d, \"tp\": %d, \"dp\": %d, \"threads\": %d, \"step_ms\": %.2f, "
               "\"tokens_per_s\": %.1f, \"gflops\": %.2f, \"sgemm_gflops\": %.2f, \"mfu\": %.4f, "
               "\"tp_comm_share\": %.4f, \"dp_comm_share\": %.4f}\n",
               path, rep.world, cfg.parallel.tp, cfg.parallel.dp, nthreads, med * 1e3, tps, gflops, job_peak, mfu,
               share[0], share[1]);
    }
    free(times);
out:
    free(sets);
    return rc;
}
