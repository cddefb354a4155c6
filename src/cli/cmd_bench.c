/* `trident bench CONFIG [--steps N] [--threads K] [--set ...]`: the options,
 * the config, then the measurement (src/train/bench.h: training throughput
 * on synthetic tokens against the machine's sgemm speed on the model's own
 * GEMM shape) and its printing. Works under tridentrun too (rank 0 prints). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/opt.h"
#include "cli/cli.h"
#include "config/config.h"
#include "kernels/blas.h"
#include "plan/stage_plan.h"
#include "train/bench.h"
#include "train/train.h"

/* Under pipelining: each stage's compute (busy), idle and p2p time per
 * step, and the measured bubble beside the simulator's (src/train/bench.h).
 * Returns 0 or -1 (printed). */
static int pipeline_report(const tri_config *cfg, const tri_bench_result *r) {
    const tri_run_report *rep = &r->rep;
    if (cfg->parallel.pp == 1 || rep->stages == 0 || rep->steps == 0) return 0;
    tri_stage_plan plan;
    if (tri_stage_plan_init(&plan, cfg, 0) != 0) return -1;
    double span = 0.0;
    for (int i = 0; i < rep->stages; i++)
        if (rep->stage_span_s[i] > span) span = rep->stage_span_s[i];
    printf("  pipeline    %s, pp=%d vpp=%d, %d micro-batches per step; per step:\n", tri_sched_name(plan.kind), plan.pp,
           plan.vpp, plan.m);
    for (int i = 0; i < rep->stages; i++)
        printf("    stage %-3d busy %8.1f ms  idle %8.1f ms  p2p wait %8.1f ms\n", i,
               1e3 * rep->stage_busy_s[i] / rep->steps, 1e3 * (span - rep->stage_busy_s[i]) / rep->steps,
               1e3 * rep->stage_p2p_s[i] / rep->steps);
    printf("  bubble      measured %.3f (idle / busy of the busiest stage), simulated %.3f (unit costs, "
           "`trident schedule`)\n",
           r->bubble, r->bubble_sim);
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
    /* (cp and dp x cp: context parallelism's ring and gradient groups, rows
     * only under it, keys always) */
    const char *comm[5] = {"tp", "dp", "pp", "cp", "dpcp"}, *label[5] = {"tp", "dp", "pp", "cp", "dp x cp"};
    const double comm_ms[5] = {1e3 * rep->tp.seconds / steps, 1e3 * rep->dp.seconds / steps,
                               1e3 * rep->pp.seconds / steps, 1e3 * rep->cp.seconds / steps,
                               1e3 * rep->dpcp.seconds / steps};
    const int comm_used[5] = {1, 1, 1, rep->cp.calls > 0, rep->dpcp.calls > 0};
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
    for (int g = 0; g < 5; g++) {
        other -= comm_ms[g];
        if (comm_used[g]) printf("    comm %-17s %9.2f %6.1f%%\n", label[g], comm_ms[g], comm_ms[g] * share);
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
    /* the data files are not read: synthetic tokens; then --set, the steps, the device */
    const char **sets = calloc((size_t)set.n + 3, sizeof *sets);
    int n_sets = 0;
    char device_set[64];
    tri_bench_opts bo = {.steps = steps, .threads = (int)threads, .skip_memory_check = skip_memory_check,
                         .profile = profile};
    if (!sets) {
        tri_error("bench: out of memory");
        goto out;
    }
    sets[n_sets++] = "data.train=synthetic";
    for (int i = 0; i < set.n; i++) sets[n_sets++] = set.v[i];
    if (peak_arg) {
        char *end;
        bo.peak_tflops = strtod(peak_arg, &end);
        if (end == peak_arg || *end != '\0' || !(bo.peak_tflops > 0.0 && bo.peak_tflops < 1e9)) {
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
    if (cfg.device != TRI_DEVICE_CUDA && bo.peak_tflops > 0.0) {
        tri_error("bench: --peak-tflops is for --device cuda (on the CPU the peak is measured)");
        goto out;
    }
    tri_bench_result r;
    rc = tri_bench_run(&cfg, &bo, &r);
    if (rc != TRI_EXIT_OK || r.rep.rank != 0) goto out;
    const tri_run_report rep = r.rep;

    printf("bench %s: %zu params, B=%d T=%d, %d rank(s) (tp=%d cp=%d pp=%d dp=%d) x %d threads, device %s, %s\n", path,
           tri_gpt_num_params(&cfg.model), cfg.train.global_batch, cfg.model.seq_len, rep.world, cfg.parallel.tp,
           cfg.parallel.cp, cfg.parallel.pp, cfg.parallel.dp, r.threads, device,
           tri_precision_name(cfg.train.precision));
    printf("  step time   %.1f ms (median of %ld; min %.1f, max %.1f)\n", r.step_s * 1e3, steps, r.min_s * 1e3,
           r.max_s * 1e3);
    printf("  throughput  %.0f tokens/s, %.1f GFLOP/s of model FLOPs (%.1f MFLOP/token)\n", r.tokens_per_s, r.gflops,
           r.flops_per_token / 1e6);
    if (r.on_cpu) {
        printf("  sgemm       best %.1f GFLOP/s per rank (%zux%zux%zu, %d threads, OpenBLAS %s kernels), %.1f for the "
               "job's %d rank(s)\n",
               r.peak_gflops, r.BT, r.C, 4 * r.C, r.threads, tri_blas_kernels(), r.job_peak_gflops, rep.world);
        printf("  MFU         %.1f%% of the best sgemm speed; %.1f%% of the sgemm speed measured right after\n"
               "              each step (median; cancels this VM's slow phases)\n",
               100.0 * r.mfu, 100.0 * r.mfu_paired);
    } else if (r.job_peak_gflops > 0.0) {
        printf("  MFU         %.1f%% of the given peak, %.1f TFLOP/s per device (%.1f for the job's %d rank(s))\n",
               100.0 * r.mfu, r.peak_gflops / 1e3, r.job_peak_gflops / 1e3, rep.world);
    } else {
        printf("  MFU         not computed: give the device's peak with --peak-tflops\n");
    }
    /* rank 0's view of communication: per step, and its share of step time;
     * under context parallelism also the ring (cp: its sends, K/V blocks
     * and fp32 dK/dV, docs/parallelism.md) and the gradients' dp x cp group */
    const char *names[5] = {"tp    ", "dp    ", "pp    ", "cp    ", "dp x cp"},
               *keys[5] = {"tp", "dp", "pp", "cp", "dpcp"};
    const char *what[5] = {"", "", "", ", the K/V ring's sends", ", the gradients' reduction"};
    const tri_comm_stats *st[5] = {&rep.tp, &rep.dp, &rep.pp, &rep.cp, &rep.dpcp};
    double share[5] = {0, 0, 0, 0, 0};
    char comm_json[640];
    size_t cj = 0;
    for (int g = 0; g < 5; g++) {
        const double steps_d = rep.steps > 0 ? rep.steps : 1;
        /* exact per-step figures for scripts (every measured step moves the same bytes) */
        cj += (size_t)snprintf(comm_json + cj, cj < sizeof comm_json ? sizeof comm_json - cj : 0,
                               "%s\"%s\": {\"bytes\": %.1f, \"calls\": %.1f}", g ? ", " : "", keys[g],
                               (double)st[g]->bytes / steps_d, (double)st[g]->calls / steps_d);
        if (st[g]->calls == 0 || rep.steps == 0) continue;
        share[g] = st[g]->seconds / rep.seconds;
        printf("  comm %s %.2f MB/step in %.0f calls, %.1f ms/step blocked (%.1f%% of step time)%s\n", names[g],
               (double)st[g]->bytes / rep.steps / 1e6, (double)st[g]->calls / rep.steps,
               1e3 * st[g]->seconds / rep.steps, 100.0 * share[g], what[g]);
    }
    if (pipeline_report(&cfg, &r) != 0) {
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
           "\"threads\": %d, \"blas\": \"%s\", \"recompute\": \"%s\", "
           "\"step_ms\": %.2f, \"tokens_per_s\": %.1f, \"gflops\": %.2f, \"sgemm_gflops\": %.2f, \"mfu\": %.4f, "
           "\"mfu_paired\": %.4f, \"tp_comm_share\": %.4f, \"dp_comm_share\": %.4f, \"pp\": %d, \"vpp\": %d, "
           "\"schedule\": \"%s\", \"bubble\": %.4f, \"bubble_sim\": %.4f, \"mem\": %s, \"cp\": %d, "
           "\"cp_comm_share\": %.4f, \"dpcp_comm_share\": %.4f, \"comm_per_step\": {%s}%s}\n",
           path, device, tri_precision_name(cfg.train.precision), rep.world, cfg.parallel.tp, cfg.parallel.dp,
           r.threads, tri_blas_kernels(), tri_recompute_name(cfg.train.recompute), r.step_s * 1e3, r.tokens_per_s, r.gflops,
           r.job_peak_gflops, r.mfu, r.mfu_paired, share[0], share[1], cfg.parallel.pp, cfg.parallel.vpp,
           tri_sched_name(cfg.parallel.schedule), r.bubble, r.bubble_sim, memjson, cfg.parallel.cp, share[3], share[4],
           comm_json, profjson);
out:
    free(sets);
    tri_opt_list_free(&pos);
    tri_opt_list_free(&set);
    return rc;
}
