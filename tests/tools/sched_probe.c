/* sched_probe: what oversubscribing the cores costs a blocking collective
 * (the constants of `trident plan --gpu cpu`, docs/plan.md "Oversubscribed
 * cores"). Run under tridentrun with R ranks:
 *
 *   tridentrun --nproc-per-node R -- build/tests/sched_probe [WORK [ITERS]]
 *
 * Every rank runs ITERS (default 40) rounds of WORK (default 2e7) dependent
 * multiply-adds (pure CPU, no memory traffic), in blocks of 4 rounds that
 * alternate two ways (a slow phase of the machine hits both):
 *   A. the work alone, no communication: the wall time of a round against
 *      the thread's CPU time gives the share of a core a rank gets;
 *   B. the work, then an all-reduce of one float over every rank, as the
 *      trainer's layers and stages synchronise: wall B - wall A is the
 *      delay one blocking collective adds;
 * then C. the all-reduce alone: its round trip when no rank computes.
 * Rank 0 prints one JSON line: ranks, cores, work_ms (CPU time of a round),
 * share (work / wall of A: the fluid share, cores / ranks when quiet),
 * lock_share (work / wall of B: the share of ranks in lockstep),
 * lock_model (the planner's 1 / ceil(ranks / cores)), round_ms_a,
 * round_ms_b (means of the slowest rank's), b_minus_a_ms (the median over
 * the blocks of B - A per round), delay_ms (B's round beyond
 * ceil(ranks / cores) x work: what a blocking collective adds beyond the
 * lockstep share, the planner's --sync-ms) and rtt_us (C).
 * Not a test: it measures; scripts/bench_plan.sh runs it. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "parallel/comm.h"
#include "parallel/dist.h"

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile double sink;

/* n dependent multiply-adds: CPU time only */
static void work(long n) {
    double x = 1.0;
    for (long i = 0; i < n; i++) x = x * 0.999999 + 1e-7;
    sink = x;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? (long)atof(argv[1]) : 20000000L;
    int iters = argc > 2 ? atoi(argv[2]) : 40;
    if (n < 1 || iters < 1) {
        fprintf(stderr, "sched_probe: usage: sched_probe [WORK [ITERS]]\n");
        return 2;
    }
    tri_dist d;
    int world = 1, rank = 0;
    tri_dist_env_world(&world, &rank);
    if (tri_dist_init(&d, 1, 1, world) != 0) return 2; /* said */
    float one = 1.0f;
    work(n / 4); /* warm-up */

    /* A and B alternate in blocks of `per` rounds, so that a slow phase of
     * the machine (seconds long) hits both; the delay is the median over the
     * blocks of (B - A) per round, the slowest rank's walls */
    int per = 4, blocks = (iters + per - 1) / per;
    double *dl = calloc((size_t)blocks, sizeof *dl);
    double sa = 0, sb = 0, cpu = 0;
    if (!dl) return 2;
    for (int k = 0; k < blocks; k++) {
        double w[2];
        tri_comm_barrier(&d.world);
        double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        for (int i = 0; i < per; i++) work(n);
        w[0] = (clock_s(CLOCK_MONOTONIC) - w0) / per;
        cpu += (clock_s(CLOCK_THREAD_CPUTIME_ID) - c0) / per;
        tri_comm_barrier(&d.world);
        w0 = clock_s(CLOCK_MONOTONIC);
        for (int i = 0; i < per; i++) {
            work(n);
            tri_comm_allreduce(&d.world, &one, 1, TRI_F32, TRI_SUM);
        }
        w[1] = (clock_s(CLOCK_MONOTONIC) - w0) / per;
        tri_comm_allreduce(&d.world, w, 2, TRI_F64, TRI_MAX);
        sa += w[0];
        sb += w[1];
        dl[k] = w[1] - w[0];
    }
    for (int i = 1; i < blocks; i++) /* insertion sort: a few blocks */
        for (int j = i; j > 0 && dl[j] < dl[j - 1]; j--) {
            double x = dl[j];
            dl[j] = dl[j - 1];
            dl[j - 1] = x;
        }
    double delay = dl[blocks / 2], wa = sa / blocks, wb = sb / blocks, ca = cpu / blocks;
    free(dl);
    tri_comm_barrier(&d.world);

    /* C: the all-reduce alone */
    int reps = 200;
    double w0 = clock_s(CLOCK_MONOTONIC);
    for (int i = 0; i < reps; i++) tri_comm_allreduce(&d.world, &one, 1, TRI_F32, TRI_SUM);
    double wc = (clock_s(CLOCK_MONOTONIC) - w0) / reps;

    /* over the ranks: the mean CPU time of a round; the slowest round trip */
    double v[2] = {ca, 0};
    tri_comm_allreduce(&d.world, v, 1, TRI_F64, TRI_SUM);
    tri_comm_allreduce(&d.world, &wc, 1, TRI_F64, TRI_MAX);
    if (d.mesh.rank == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        double work_s = v[0] / world, per_core = (double)((world + cores - 1) / (cores > 0 ? cores : 1));
        printf("{\"ranks\": %d, \"cores\": %ld, \"work_ms\": %.3f, \"share\": %.4f, \"lock_share\": %.4f, "
               "\"lock_model\": %.4f, \"round_ms_a\": %.3f, \"round_ms_b\": %.3f, \"b_minus_a_ms\": %.3f, "
               "\"delay_ms\": %.3f, \"rtt_us\": %.1f}\n",
               world, cores, 1e3 * work_s, work_s / wa, work_s / wb, 1.0 / per_core, 1e3 * wa, 1e3 * wb, 1e3 * delay,
               1e3 * (wb - per_core * work_s), 1e6 * wc);
    }
    tri_dist_free(&d);
    return 0;
}
