/* trident bench's measurement (src/train/bench.h). */
#include "train/bench.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/exit.h"
#include "model/gpt.h"
#include "parallel/dist.h"
#include "parallel/mesh.h"
#include "plan/probe.h"
#include "plan/stage_plan.h"
#include "train/preflight.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Under pipelining: the measured bubble (the busiest stage's idle time over
 * its busy time, idle = the longest stage's span minus its busy time) beside
 * the simulator's prediction with unit costs for the same schedule (the
 * stage plan's). 0 or -1 (printed). */
static int bubbles(const tri_config *cfg, const tri_run_report *rep, double *bubble, double *bubble_sim) {
    if (cfg->parallel.pp == 1 || rep->stages == 0 || rep->steps == 0) return 0;
    tri_stage_plan plan;
    if (tri_stage_plan_init(&plan, cfg, 0) != 0) return -1;
    *bubble_sim = plan.bubble;
    double span = 0.0, busiest = 0.0;
    for (int i = 0; i < rep->stages; i++) {
        if (rep->stage_span_s[i] > span) span = rep->stage_span_s[i];
        if (rep->stage_busy_s[i] > busiest) busiest = rep->stage_busy_s[i];
    }
    *bubble = busiest > 0 ? (span - busiest) / busiest : 0.0;
    tri_stage_plan_free(&plan);
    return 0;
}

int tri_bench_run(const tri_config *cfg, const tri_bench_opts *o, tri_bench_result *r) {
    memset(r, 0, sizeof *r);
    const long steps = o->steps;
    r->on_cpu = cfg->device != TRI_DEVICE_CUDA;
    tri_set_threads(o->threads);
    r->threads = omp_get_max_threads();
    r->BT = (size_t)cfg->train.micro_batch * (size_t)cfg->model.seq_len;
    r->C = (size_t)cfg->model.n_embd;
    const size_t BT = r->BT, C = r->C;
    /* the sgemm probe is allocated before tri_train's own preflight: check
     * its sizes and this rank's memory with it first (src/train/preflight.h) */
    size_t probe_bytes = 0;
    if (r->on_cpu && tri_sgemm_bytes(BT, 4 * C, C, &probe_bytes) != 0) {
        tri_error("bench: the sgemm probe (train.micro_batch x model.seq_len x 4 model.n_embd) overflows "
                  "64-bit sizes (train.micro_batch %d, model.seq_len %d, model.n_embd %d)",
                  cfg->train.micro_batch, cfg->model.seq_len, cfg->model.n_embd);
        return TRI_EXIT_BAD_INPUT;
    }
    int world, rank;
    tri_mesh mesh;
    char err[256];
    tri_dist_env_world(&world, &rank);
    if (tri_mesh_init_cp(&mesh, world, rank, cfg->parallel.tp, cfg->parallel.cp, cfg->parallel.pp, cfg->parallel.dp,
                         err, sizeof err) == 0 &&
        tri_preflight_model(cfg, (size_t)cfg->train.micro_batch, mesh.tp_rank, mesh.pp_rank, probe_bytes, 1,
                            !o->skip_memory_check, NULL) != 0)
        return TRI_EXIT_BAD_INPUT; /* (a layout that does not fit the world is tri_train's to report) */
    tri_step_probe probe = {0}; /* each step's time and the sgemm speed after it */
    if (tri_step_probe_init(&probe, r->on_cpu ? BT : 0, 4 * C, C, (size_t)steps + 1) != 0) {
        tri_error("bench: out of memory");
        return TRI_EXIT_FAILURE;
    }
    /* GFLOP/s: the sgemm's best of 15 runs (no warm-up), or the given peak */
    double peak = r->on_cpu ? tri_sgemm_best(&probe.sgemm, 0, 15) / 1e9 : o->peak_tflops * 1e3;
    tri_run_opts opts = {0};
    opts.device = cfg->device;
    opts.threads = o->threads;
    opts.synthetic = 1;
    opts.quiet = 1;
    opts.skip_memory_check = o->skip_memory_check;
    opts.profile = o->profile;
    opts.after_step = tri_step_probe_after;
    opts.after_step_ctx = &probe;
    opts.report = &r->rep;
    int rc = tri_train(cfg, &opts);
    if (rc != 0 || r->rep.rank != 0) {
        tri_step_probe_free(&probe);
        return rc;
    }
    double *times = probe.times;
    /* the best sgemm seen at any point: before, after every step, at the end */
    double again = r->on_cpu ? tri_sgemm_best(&probe.sgemm, 0, 15) / 1e9 : 0.0;
    if (again > peak) peak = again;
    for (long i = 1; r->on_cpu && i <= steps; i++)
        if (probe.after[i] / 1e9 > peak) peak = probe.after[i] / 1e9;
    r->peak_gflops = peak;
    /* one rank's best sgemm times the ranks, but ranks that share a machine
     * share its cores: with more local ranks x threads than cores (the
     * oversubscribed quickstart layouts), the machine's cores are the limit */
    double job_peak = peak * r->rep.world;
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int local = ls ? atoi(ls) : 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (r->on_cpu && local > 0 && cores > 0) job_peak *= tri_core_share(local, r->threads, cores);
    r->job_peak_gflops = job_peak;
    r->flops_per_token = tri_gpt_flops_per_token(&cfg->model);
    double flops_step = r->flops_per_token * (double)cfg->train.global_batch * cfg->model.seq_len;
    /* per step: model GFLOP/s over the job's sgemm GFLOP/s right after it (median) */
    double *paired = calloc((size_t)steps, sizeof *paired);
    if (!paired) {
        tri_step_probe_free(&probe);
        tri_error("bench: out of memory");
        return TRI_EXIT_FAILURE;
    }
    for (long i = 1; i <= steps; i++) /* all ranks probed at once; on a GPU, against the given peak */
        paired[i - 1] = flops_step / times[i] / 1e9 / ((r->on_cpu ? probe.after[i] / 1e9 : peak) * r->rep.world);
    qsort(paired, (size_t)steps, sizeof *paired, cmp_double);
    r->mfu_paired = paired[steps / 2];
    free(paired);
    /* the first step warms caches and page-faults the buffers: not counted */
    qsort(times + 1, (size_t)steps, sizeof *times, cmp_double);
    r->step_s = times[1 + steps / 2];
    r->min_s = times[1];
    r->max_s = times[steps];
    r->tokens_per_s = (double)cfg->train.global_batch * cfg->model.seq_len / r->step_s;
    r->gflops = flops_step / r->step_s / 1e9;
    r->mfu = job_peak > 0.0 ? r->gflops / job_peak : 0.0;
    if (!(job_peak > 0.0)) r->mfu_paired = 0.0;
    tri_step_probe_free(&probe);
    if (bubbles(cfg, &r->rep, &r->bubble, &r->bubble_sim) != 0) return TRI_EXIT_FAILURE;
    return TRI_EXIT_OK;
}
