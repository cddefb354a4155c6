/* `trident bench CONFIG [--steps N] [--threads K] [--set ...]`: training
 * throughput on synthetic tokens, and the machine's sgemm speed on the
 * model's own GEMM shape, so that MFU can be read against what this machine
 * can do rather than a datasheet. Works under tridentrun too (rank 0 prints). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gpt.h"
#include "parallel/dist.h"
#include "parallel/mesh.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/opt.h"
#include "base/size.h"
#include "cli/cli.h"
#include "config/config.h"
#include "train/preflight.h"
#include "plan/probe.h"
#include "plan/stage_plan.h"
#include "train/train.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Under pipelining: each stage's compute (busy), idle and p2p time per
 * step, and the measured bubble (the busiest stage's idle time over its busy
 * time, idle = the longest stage's span minus its busy time) beside the
 * simulator's prediction with unit costs for the same schedule (the stage
 * plan's, src/plan/stage_plan.h). Returns 0 or -1 (printed). */
static int pipeline_report(const tri_config *cfg, const tri_run_report *rep, double *bubble, double *bubble_sim) {
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
    printf("  pipeline    %s, pp=%d vpp=%d, %d micro-batches per step; per step:\n", tri_sched_name(plan.kind), plan.pp,
           plan.vpp, plan.m);
    for (int i = 0; i < rep->stages; i++)
        printf("    stage %-3d busy %8.1f ms  idle %8.1f ms  p2p wait %8.1f ms\n", i,
               1e3 * rep->stage_busy_s[i] / rep->steps, 1e3 * (span - rep->stage_busy_s[i]) / rep->steps,
               1e3 * rep->stage_p2p_s[i] / rep->steps);
    printf("  bubble      measured %.3f (idle / busy of the busiest stage), simulated %.3f (unit costs, "
           "`trident schedule`)\n",
           *bubble, *bubble_sim);
    tri_stage_plan_free(&plan);
    return 0;
}

/* --profile: rank 0's time per op kind per step (the mean over the measured
 * steps, so that the rows add up to the mean step), communication per group
 * from the groups' own timers, and "other", the rest of the step (host work,
 * waits: step minus the rest; on a GPU it may go below zero where a group's
 * wait overlaps ops still queued on the stream). Printed as a table, and
 * into json[n] as `, "profile": {...}, "profile_gemm_ms": {...}` for the
 * JSON line. */
static void profile_report(const tri_run_report *rep, char *json, size_t n) {
    const tri_prof_totals *p = &rep->profile;
    const double steps = rep->steps > 0 ? rep->steps : 1, step_ms = 1e3 * rep->seconds / steps;
    const double share = step_ms > 0 ? 100.0 / step_ms : 0.0;
    const char *comm[3] = {"tp", "dp", "pp"};
    const double comm_ms[3] = {1e3 * rep->tp.seconds / steps, 1e3 * rep->dp.seconds / steps,
                               1e3 * rep->pp.seconds / steps};
    double other = step_ms;
    size_t len = (size_t)snprintf(json, n, ", \"profile\": {\"step_ms\": %.3f", step_ms);
    printf("  profile     per step, the mean of %d steps (%.1f ms), rank 0; ops timed %s\n", rep->steps, step_ms,
           p->marks ? "by CUDA events around each op on the compute stream" : "by the clock around each op");
    printf("    %-22s %9s %7s %9s\n", "kind", "ms/step", "share", "ops/step");
    for (int k = 0; k < TRI_PROF_KINDS; k++) {
        const double ms = p->ms[k] / steps;
        other -= ms;
        printf("    %-22s %9.2f %6.1f%% %9.0f\n", tri_prof_kind_label((tri_prof_kind)k), ms, ms * share,
               (double)p->calls[k] / steps);
        len += (size_t)snprintf(json + len, len < n ? n - len : 0, ", \"%s_ms\": %.3f",
                                tri_prof_kind_key((tri_prof_kind)k), ms);
    }
    for (int g = 0; g < 3; g++) {
        other -= comm_ms[g];
        printf("    comm %-17s %9.2f %6.1f%%\n", comm[g], comm_ms[g], comm_ms[g] * share);
        len += (size_t)snprintf(json + len, len < n ? n - len : 0, ", \"comm_%s_ms\": %.3f", comm[g], comm_ms[g]);
    }
    printf("    %-22s %9.2f %6.1f%%            (host work and waits outside the ops)\n", "other", other, other * share);
    len += (size_t)snprintf(json + len, len < n ? n - len : 0, ", \"other_ms\": %.3f}, \"profile_gemm_ms\": {", other);
    printf("    GEMMs by layer part    %9s %11s %12s   (ms/step)\n", "forward", "input grad", "weight grad");
    for (int r = 0; r < TRI_PROF_ROLES; r++) {
        const double *ms = p->gemm_ms[r];
        const unsigned long long *c = p->gemm_calls[r];
        if (r != TRI_PROF_UNKNOWN || c[0] + c[1] + c[2] > 0)
            printf("      %-20s %9.2f %11.2f %12.2f\n", r == TRI_PROF_HEAD ? "head (LM head)" : tri_prof_role_key(r),
                   ms[0] / steps, ms[1] / steps, ms[2] / steps);
        len += (size_t)snprintf(json + len, len < n ? n - len : 0,
                                "%s\"%s\": {\"fwd\": %.3f, \"dinp\": %.3f, \"dweight\": %.3f}", r ? ", " : "",
                                tri_prof_role_key(r), ms[0] / steps, ms[1] / steps, ms[2] / steps);
    }
    snprintf(json + len, len < n ? n - len : 0, "}");
}

int tri_cmd_bench(int argc, char **argv) {
    long steps = 10, threads = 0;
    const char *device = NULL; /* --device, else the config's "device" */
    const char *peak_arg = NULL;
    int skip_memory_check = 0, profile = 0;
    tri_opt_list pos = {0}, set = {0};
    const tri_opt table[] = {
        {"--steps", TRI_OPT_LONG, &steps, "N", 1, 1000000, .help = "training steps to time (default 10)"},
        {"--threads", TRI_OPT_LONG, &threads, "K", 1, 1024, .help = "threads per rank"},
        {"--device", TRI_OPT_STR, &device, "cpu|cuda",
         .help = "cuda: train on one GPU per rank; no sgemm is measured: MFU is against\n"
                 "--peak-tflops, the device's peak TFLOP/s in the run's precision\n"
                 "(dense bf16: 989 on H100 SXM and H200, 312 on A100; scripts/bench_gpu.sh)"},
        {"--peak-tflops", TRI_OPT_STR, &peak_arg, "P", .help = "the device's peak TFLOP/s (--device cuda)"},
        {"--set", TRI_OPT_LIST, &set, "section.key=value", .help = "a config key (repeatable)"},
        {"--skip-memory-check", TRI_OPT_FLAG, &skip_memory_check,
         .help = "start even if a rank's memory estimate exceeds the memory available"},
        {"--profile", TRI_OPT_FLAG, &profile,
         .help = "time every op (CUDA events on a GPU, the clock on the CPU) and print\n"
                 "the time per op kind per step: GEMMs by direction and layer part,\n"
                 "attention, LayerNorm, GELU, cross-entropy, optimizer, communication"},
    };
    const tri_cmd_spec spec = {
        .cmd = "trident bench",
        .who = "bench",
        .usage = "CONFIG [--steps N] [--threads K] [--device cpu|cuda] [--peak-tflops P]\n"
                 "                     [--profile] [--set section.key=value]...",
        .about = "  runs N training steps (after one warm-up step) on synthetic tokens and prints tokens/s,\n"
                 "  model GFLOP/s, MFU against this machine's measured sgemm speed, communication per group\n"
                 "  (under tridentrun), and a last line of JSON.\n",
        .opts = table,
        .n_opts = TRI_OPT_N(table),
        .pos = &pos,
        .max_pos = -1, /* one CONFIG; the message for more is the command's own */
        .pos_name = "CONFIG",
    };
    int rc = tri_opt_parse(&spec, argc, argv);
    if (rc != TRI_OPT_GO) {
        tri_opt_list_free(&pos);
        tri_opt_list_free(&set);
        return tri_opt_exit(rc);
    }
    rc = TRI_EXIT_BAD_INPUT;
    tri_step_probe probe = {0}; /* each step's time and the sgemm speed after it */
    /* the data files are not read: synthetic tokens; then --set, the steps, the device */
    const char **sets = calloc((size_t)set.n + 3, sizeof *sets);
    int n_sets = 0;
    char device_set[64];
    double peak_tflops = 0.0;
    if (!sets) {
        tri_error("bench: out of memory");
        goto out;
    }
    sets[n_sets++] = "data.train=synthetic";
    for (int i = 0; i < set.n; i++) sets[n_sets++] = set.v[i];
    if (peak_arg) {
        char *end;
        peak_tflops = strtod(peak_arg, &end);
        if (end == peak_arg || *end != '\0' || !(peak_tflops > 0.0 && peak_tflops < 1e9)) {
            tri_error("bench: --peak-tflops '%s' is not a positive number of TFLOP/s", peak_arg);
            goto out;
        }
    }
    if (pos.n > 1) {
        tri_error("bench: unexpected argument '%s'", pos.v[1]);
        goto out;
    }
    const char *path = pos.n ? pos.v[0] : NULL;
    if (!path) {
        tri_error("bench: missing CONFIG");
        goto out;
    }
    char steps_set[64];
    snprintf(steps_set, sizeof steps_set, "train.steps=%ld", steps + 1);
    sets[n_sets++] = steps_set;
    tri_config cfg;
    if (device) { /* the config's top-level "device", overridden last */
        snprintf(device_set, sizeof device_set, "device=%s", device);
        sets[n_sets++] = device_set;
    }
    if (tri_config_load(&cfg, path, n_sets, sets) != 0) goto out;
    device = tri_device_name(cfg.device);
    /* on the CPU the peak is measured (sgemm); elsewhere it is given */
    const int on_cpu = cfg.device != TRI_DEVICE_CUDA;
    if (on_cpu && peak_tflops > 0.0) {
        tri_error("bench: --peak-tflops is for --device cuda (on the CPU the peak is measured)");
        goto out;
    }
    tri_set_threads((int)threads);
    int nthreads = omp_get_max_threads();
    size_t BT = (size_t)cfg.train.micro_batch * (size_t)cfg.model.seq_len, C = (size_t)cfg.model.n_embd;
    /* the sgemm probe is allocated before tri_train's own preflight: check
     * its sizes and this rank's memory with it first (src/train/preflight.h) */
    size_t probe_bytes = 0;
    if (on_cpu && tri_sgemm_bytes(BT, 4 * C, C, &probe_bytes) != 0) {
        tri_error("bench: the sgemm probe (train.micro_batch x model.seq_len x 4 model.n_embd) overflows "
                  "64-bit sizes (train.micro_batch %d, model.seq_len %d, model.n_embd %d)",
                  cfg.train.micro_batch, cfg.model.seq_len, cfg.model.n_embd);
        goto out;
    }
    int world, rank;
    tri_mesh mesh;
    char err[256];
    tri_dist_env_world(&world, &rank);
    if (tri_mesh_init(&mesh, world, rank, cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.dp, err, sizeof err) == 0 &&
        tri_preflight_model(&cfg, (size_t)cfg.train.micro_batch, mesh.tp_rank, mesh.pp_rank, probe_bytes, 1,
                            !skip_memory_check, NULL) != 0)
        goto out; /* (a layout that does not fit the world is tri_train's to report) */
    rc = TRI_EXIT_FAILURE;
    if (tri_step_probe_init(&probe, on_cpu ? BT : 0, 4 * C, C, (size_t)steps + 1) != 0) {
        tri_error("bench: out of memory");
        goto out;
    }
    /* GFLOP/s: the sgemm's best of 15 runs (no warm-up), or the given peak */
    double peak = on_cpu ? tri_sgemm_best(&probe.sgemm, 0, 15) / 1e9 : peak_tflops * 1e3;
    tri_run_opts opts = {0};
    opts.device = cfg.device;
    opts.threads = (int)threads;
    opts.synthetic = 1;
    opts.quiet = 1;
    opts.skip_memory_check = skip_memory_check;
    opts.after_step = tri_step_probe_after;
    opts.after_step_ctx = &probe;
    opts.profile = profile;
    tri_run_report rep = {0};
    opts.report = &rep;
    rc = tri_train(&cfg, &opts);
    if (rc != 0 || rep.rank != 0) goto out;
    double *times = probe.times;

    /* the best sgemm seen at any point: before, after every step, at the end */
    double again = on_cpu ? tri_sgemm_best(&probe.sgemm, 0, 15) / 1e9 : 0.0;
    if (again > peak) peak = again;
    for (long i = 1; on_cpu && i <= steps; i++)
        if (probe.after[i] / 1e9 > peak) peak = probe.after[i] / 1e9;
    /* one rank's best sgemm times the ranks, but ranks that share a machine
     * share its cores: with more local ranks x threads than cores (the
     * oversubscribed quickstart layouts), the machine's cores are the limit */
    double job_peak = peak * rep.world;
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int local = ls ? atoi(ls) : 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (on_cpu && local > 0 && cores > 0) job_peak *= tri_core_share(local, nthreads, cores);
    double flops_step = tri_gpt_flops_per_token(&cfg.model) * (double)cfg.train.global_batch * cfg.model.seq_len;
    /* per step: model GFLOP/s over the job's sgemm GFLOP/s right after it (median) */
    double *paired = calloc((size_t)steps, sizeof *paired);
    if (!paired) {
        tri_error("bench: out of memory");
        rc = TRI_EXIT_FAILURE;
        goto out;
    }
    for (long i = 1; i <= steps; i++) /* all ranks probed at once; on a GPU, against the given peak */
        paired[i - 1] = flops_step / times[i] / 1e9 / ((on_cpu ? probe.after[i] / 1e9 : peak) * rep.world);
    qsort(paired, (size_t)steps, sizeof *paired, cmp_double);
    double mfu_paired = paired[steps / 2];
    free(paired);
    /* the first step warms caches and page-faults the buffers: not counted */
    qsort(times + 1, (size_t)steps, sizeof *times, cmp_double);
    double med = times[1 + steps / 2];
    double tps = (double)cfg.train.global_batch * cfg.model.seq_len / med;
    double gflops = flops_step / med / 1e9;
    double mfu = job_peak > 0.0 ? gflops / job_peak : 0.0;
    if (!(job_peak > 0.0)) mfu_paired = 0.0;

    printf("bench %s: %zu params, B=%d T=%d, %d rank(s) (tp=%d pp=%d dp=%d) x %d threads, device %s, %s\n", path,
           tri_gpt_num_params(&cfg.model), cfg.train.global_batch, cfg.model.seq_len, rep.world, cfg.parallel.tp,
           cfg.parallel.pp, cfg.parallel.dp, nthreads, device, tri_precision_name(cfg.train.precision));
    printf("  step time   %.1f ms (median of %ld; min %.1f, max %.1f)\n", med * 1e3, steps, times[1] * 1e3,
           times[steps] * 1e3);
    printf("  throughput  %.0f tokens/s, %.1f GFLOP/s of model FLOPs (%.1f MFLOP/token)\n", tps, gflops,
           tri_gpt_flops_per_token(&cfg.model) / 1e6);
    if (on_cpu) {
        printf("  sgemm       best %.1f GFLOP/s per rank (%zux%zux%zu, %d threads), %.1f for the job's %d rank(s)\n",
               peak, BT, C, 4 * C, nthreads, job_peak, rep.world);
        printf("  MFU         %.1f%% of the best sgemm speed; %.1f%% of the sgemm speed measured right after\n"
               "              each step (median; cancels this VM's slow phases)\n",
               100.0 * mfu, 100.0 * mfu_paired);
    } else if (job_peak > 0.0) {
        printf("  MFU         %.1f%% of the given peak, %.1f TFLOP/s per device (%.1f for the job's %d rank(s))\n",
               100.0 * mfu, peak / 1e3, job_peak / 1e3, rep.world);
    } else {
        printf("  MFU         not computed: give the device's peak with --peak-tflops\n");
    }
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
    double bubble = 0.0, bubble_sim = 0.0;
    if (pipeline_report(&cfg, &rep, &bubble, &bubble_sim) != 0) {
        rc = TRI_EXIT_FAILURE;
        goto out;
    }
    char memline[512], memjson[512];
    tri_mem_line(&rep.mem, memline, sizeof memline);
    tri_mem_json(&rep.mem, memjson, sizeof memjson);
    printf("  memory      rank 0, recompute %s: %s; saved activations in use at most %.2f MiB\n",
           tri_recompute_name(cfg.train.recompute),
           memline, (double)rep.mem.saved_in_use_peak / (1024.0 * 1024.0));
    char profjson[2048] = "";
    if (profile) profile_report(&rep, profjson, sizeof profjson);
    printf("{\"config\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", \"ranks\": %d, \"tp\": %d, \"dp\": %d, "
           "\"threads\": %d, \"recompute\": \"%s\", "
           "\"step_ms\": %.2f, \"tokens_per_s\": %.1f, \"gflops\": %.2f, \"sgemm_gflops\": %.2f, \"mfu\": %.4f, "
           "\"mfu_paired\": %.4f, \"tp_comm_share\": %.4f, \"dp_comm_share\": %.4f, \"pp\": %d, \"vpp\": %d, "
           "\"schedule\": \"%s\", \"bubble\": %.4f, \"bubble_sim\": %.4f, \"mem\": %s%s}\n",
           path, device, tri_precision_name(cfg.train.precision), rep.world, cfg.parallel.tp, cfg.parallel.dp, nthreads,
           tri_recompute_name(cfg.train.recompute), med * 1e3, tps, gflops, job_peak, mfu, mfu_paired, share[0],
           share[1], cfg.parallel.pp, cfg.parallel.vpp, tri_sched_name(cfg.parallel.schedule), bubble, bubble_sim,
           memjson, profjson);
out:
    tri_step_probe_free(&probe);
    free(sets);
    tri_opt_list_free(&pos);
    tri_opt_list_free(&set);
    return rc;
}
