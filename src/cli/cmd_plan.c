/* `trident plan CONFIG [--set k=v]... --gpu h100|a100|cpu [--gpus N] [--json]`:
 * the memory per rank and the step time of a layout, or of every layout of
 * N devices, from the model in src/plan/plan.h (docs/plan.md) and the search
 * in src/plan/search.h, printed. Nothing of the model is allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/json.h"
#include "base/opt.h"
#include "base/size.h"
#include "cli/cli.h"
#include "config/config.h"
#include "model/gpt.h"
#include "plan/devices.h"
#include "plan/plan.h"
#include "plan/probe.h"
#include "plan/search.h"
#include "train/preflight.h"
#include "train/train.h"

/* ------------------------------------------------------------------------ */
/* output                                                                    */

static void human(char *buf, double bytes) { tri_size_human(buf, 32, bytes); }

/* The row's MFU: the model's against the kind's peak, or with `--gpu cpu`
 * (meter non-NULL) against the best sgemm measured by the time of printing
 * (bench's rule), not the first shape's, which a slow phase of the VM may
 * have caught. */
static double row_mfu(const tri_plan_row *r, const tri_sgemm_meter *meter) {
    const tri_config *c = &r->cfg;
    if (!meter || meter->best <= 0) return r->time.mfu;
    double world = (double)c->parallel.tp * c->parallel.cp * c->parallel.pp * c->parallel.dp;
    return r->time.model_flops / r->time.step_s / (world * meter->best);
}

static const char *offload_name(tri_offload o) { return o == TRI_OFFLOAD_OPTIMIZER ? "optimizer" : "none"; }

static void print_row(const tri_plan_row *r, double limit, int world, const tri_sgemm_meter *meter) {
    const tri_config *c = &r->cfg;
    const tri_plan_mem *m = &r->mem;
    const tri_plan_time *t = &r->time;
    char a[32], b[32], d[32], e[32], f[32], g[32], h[32], l[32];
    printf("layout tp=%d cp=%d pp=%d dp=%d vpp=%d micro_batch=%d recompute=%s zero=%d offload=%s "
           "sequence_parallel=%d schedule=%s precision=%s (%d ranks)\n",
           c->parallel.tp, c->parallel.cp, c->parallel.pp, c->parallel.dp, c->parallel.vpp, c->train.micro_batch,
           tri_recompute_name(c->train.recompute), c->parallel.zero, offload_name(c->parallel.offload),
           c->parallel.sequence_parallel, tri_sched_name(c->parallel.schedule), tri_precision_name(c->train.precision),
           world);
    human(a, (double)m->params);
    human(b, (double)m->grads);
    human(d, (double)m->optim);
    human(e, (double)m->saved_act_peak);
    human(f, (double)m->saved_act_alloc);
    human(g, (double)m->workspace);
    human(h, (double)m->total);
    human(l, limit);
    printf("  memory    stage %d (the largest): params %s, grads %s, optimizer %s, saved activations %s at the peak "
           "(%s allocated), workspace %s; total %s of %s%s\n",
           m->stage, a, b, d, e, f, g, h, l, r->fits ? "" : "  OUT OF MEMORY");
    if (m->host) {
        human(a, (double)m->host);
        printf("  host      %s per rank: the optimizer's state offloaded (and its staging copies on a GPU)\n", a);
    }
    printf("  step      %.4g s: compute %.4g, exposed TP %.4g, DP %.4g, PP %.4g, bubble %.4g (%.3f of busy, %d "
           "micro-batches)\n",
           t->step_s, t->compute_s, t->tp_s, t->dp_s, t->pp_s, t->bubble_s, t->bubble, t->m);
    printf("  speed     %.0f tokens/s, %.1f TFLOP/s per device (model FLOPs), MFU %.1f%%\n", t->tokens_per_s,
           t->tflops_per_gpu, 100.0 * row_mfu(r, meter));
    if (t->dp_bytes > 0 || t->cp_bytes > 0 || t->pcie_bytes > 0) {
        human(a, t->dp_bytes);
        human(b, t->cp_bytes);
        human(d, t->pcie_bytes);
        printf("  wire      per rank and step: DP %s (gradients, ZeRO's gathers), CP ring %s, PCIe %s (offload)\n", a,
               b, d);
    }
}

static void print_json(const tri_plan_row *r, const tri_sgemm_meter *meter) {
    const tri_config *c = &r->cfg;
    const tri_plan_mem *m = &r->mem;
    const tri_plan_time *t = &r->time;
    printf("{\"tp\": %d, \"cp\": %d, \"pp\": %d, \"dp\": %d, \"vpp\": %d, \"micro_batch\": %d, \"recompute\": \"%s\", "
           "\"zero\": %d, \"offload\": \"%s\", "
           "\"sequence_parallel\": %d, \"schedule\": \"%s\", \"precision\": \"%s\", \"fits\": %s, "
           "\"mem\": {\"params\": %zu, \"grads\": %zu, \"optim\": %zu, \"saved_act_peak\": %zu, \"saved_act_alloc\": "
           "%zu, \"workspace\": %zu, \"host\": %zu}, \"mem_total\": %zu, \"mem_stage\": %d, \"step_s\": %.6g, "
           "\"compute_s\": %.6g, "
           "\"tp_s\": %.6g, \"dp_s\": %.6g, \"pp_s\": %.6g, \"bubble_s\": %.6g, \"bubble\": %.6g, \"tokens_per_s\": "
           "%.6g, \"tflops_per_gpu\": %.6g, \"hw_tflops_per_gpu\": %.6g, \"mfu\": %.6g, \"dp_bytes\": %.6g, "
           "\"cp_bytes\": %.6g, \"pcie_bytes\": %.6g}\n",
           c->parallel.tp, c->parallel.cp, c->parallel.pp, c->parallel.dp, c->parallel.vpp, c->train.micro_batch,
           tri_recompute_name(c->train.recompute), c->parallel.zero, offload_name(c->parallel.offload),
           c->parallel.sequence_parallel, tri_sched_name(c->parallel.schedule), tri_precision_name(c->train.precision),
           r->fits ? "true" : "false", m->params, m->grads, m->optim, m->saved_act_peak, m->saved_act_alloc,
           m->workspace, m->host, m->total, m->stage, t->step_s, t->compute_s, t->tp_s, t->dp_s, t->pp_s, t->bubble_s,
           t->bubble, t->tokens_per_s, t->tflops_per_gpu,
           t->hw_flops / t->step_s / ((double)c->parallel.tp * c->parallel.cp * c->parallel.pp * c->parallel.dp) / 1e12,
           row_mfu(r, meter), t->dp_bytes, t->cp_bytes, t->pcie_bytes);
}

/* ------------------------------------------------------------------------ */
/* the search (src/plan/search.h), printed                                    */

/* Prints the outcome of a search over gpus devices: the best top layouts
 * and why the others were refused. */
static void print_search(const tri_search_result *r, int gpus, double limit, int top, int json,
                         const tri_sgemm_meter *meter) {
    const tri_search_reasons *rej = &r->refused;
    char lim[32], ov[32];
    human(lim, limit);
    if (!json) {
        printf("search over %d devices: %d layouts tried, %zu fit in %s, %d out of memory, %d invalid\n", gpus,
               r->tried, r->n, lim, r->oom, r->tried - (int)r->n - r->oom);
        if (r->n == 0) printf("no layout fits\n");
        for (size_t i = 0; i < r->n && (int)i < top; i++) {
            printf("\n#%zu ", i + 1);
            print_row(&r->rows[i], limit, gpus, meter);
        }
        printf("\nrejected:\n");
        if (r->oom) {
            human(ov, r->closest_over);
            const tri_config *c = &r->closest.cfg;
            printf("  %d out of memory; the closest, tp=%d cp=%d pp=%d dp=%d vpp=%d micro_batch=%d recompute=%s "
                   "zero=%d offload=%s, needs %s more than %s\n",
                   r->oom, c->parallel.tp, c->parallel.cp, c->parallel.pp, c->parallel.dp, c->parallel.vpp,
                   c->train.micro_batch, tri_recompute_name(c->train.recompute), c->parallel.zero,
                   offload_name(c->parallel.offload), ov, lim);
        }
        for (int i = 0; i < rej->n; i++) printf("  %d: %s\n", rej->count[i], rej->text[i]);
        if (rej->other) printf("  %d for other reasons\n", rej->other);
    } else {
        for (size_t i = 0; i < r->n && (int)i < top; i++) print_json(&r->rows[i], meter);
        printf("{\"rejected\": {\"tried\": %d, \"fit\": %zu, \"out_of_memory\": %d, \"closest_over_bytes\": %.0f, "
               "\"invalid\": [",
               r->tried, r->n, r->oom, r->closest_over > 0 ? r->closest_over : 0.0);
        for (int i = 0; i < rej->n; i++) {
            printf("%s{\"count\": %d, \"why\": ", i ? ", " : "", rej->count[i]);
            tri_json_fputs(stdout, rej->text[i]);
            printf("}");
        }
        printf("]}}\n");
    }
}

/* ------------------------------------------------------------------------ */
/* the command                                                               */

/* `--gpu cpu`: this machine as gpus ranks, measured into *kind (seconds of
 * sgemm); *meter holds the GEMM speeds kind reads. threads, cores: 0 for
 * the defaults (cores / gpus threads, the cores online); sync_ms < 0: the
 * measured constant. */
static void measure_cpu(tri_gpu_kind *kind, tri_sgemm_meter *meter, const tri_config *cfg, long gpus, long threads,
                        long cores, double sync_ms) {
    if (!cores) cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    int t = threads ? (int)threads : (int)(cores / gpus > 0 ? cores / gpus : 1);
    tri_set_threads(t);
    tri_mem_avail av;
    tri_preflight_available(&av);
    size_t BT = (size_t)cfg->train.micro_batch * (size_t)cfg->model.seq_len, C = (size_t)cfg->model.n_embd;
    tri_cpu_setup setup = {.ranks = (int)gpus,
                           .threads = t,
                           .cores = cores,
                           .avail_bytes = av.available == SIZE_MAX ? 1e18 : (double)av.available,
                           .sync_s = sync_ms >= 0 ? sync_ms * 1e-3 : -1.0,
                           .ref = {BT, 4 * C, C}};
    tri_gpu_kind_cpu(kind, meter, &setup);
}

/* The --set values into the config's sets, except train.precision (kept in
 * precision: modelled for every dtype, whatever the trainer accepts yet);
 * the layout dimensions given mark fx. */
static int split_sets(const tri_opt_list *set, const char **sets, char *precision, size_t n, tri_search_fixed *fx) {
    int n_sets = 0;
    for (int i = 0; i < set->n; i++) {
        const char *v = set->v[i];
        if (!strncmp(v, "train.precision=", 16)) {
            snprintf(precision, n, "%s", v + 16);
            continue;
        }
        fx->tp |= !strncmp(v, "parallel.tp=", 12);
        fx->pp |= !strncmp(v, "parallel.pp=", 12);
        fx->dp |= !strncmp(v, "parallel.dp=", 12);
        fx->vpp |= !strncmp(v, "parallel.vpp=", 13);
        fx->mb |= !strncmp(v, "train.micro_batch=", 18);
        fx->recompute |= !strncmp(v, "train.recompute=", 16);
        fx->zero |= !strncmp(v, "parallel.zero=", 14);
        fx->cp |= !strncmp(v, "parallel.cp=", 12);
        fx->offload |= !strncmp(v, "parallel.offload=", 17);
        fx->sp |= !strncmp(v, "parallel.sequence_parallel=", 27);
        sets[n_sets++] = v;
    }
    return n_sets;
}

int tri_cmd_plan(int argc, char **argv) {
    const char *gpu_name = NULL, *sync_arg = NULL;
    long gpus = 0, top = 5, threads = 0, cores = 0;
    int json = 0, do_search = 0;
    tri_opt_list pos = {0}, set = {0};
    const tri_opt opts[] = {
        {"--gpu", TRI_OPT_STR, &gpu_name, "h100|a100|cpu",
         .help = "the device; cpu: this machine, N ranks on it, with its measured sgemm"},
        {"--gpus", TRI_OPT_LONG, &gpus, "N", 1, 1 << 20, .help = "N devices (default: the config's layout's)"},
        {"--search", TRI_OPT_FLAG, &do_search, .help = "every valid layout of N devices"},
        {"--set", TRI_OPT_LIST, &set, "section.key=value", .help = "a config key (repeatable)"},
        {"--json", TRI_OPT_FLAG, &json, .help = "one object per line"},
        {"--top", TRI_OPT_LONG, &top, "K", 1, 100000000, .help = "the best K that fit (default 5)"},
        {"--threads", TRI_OPT_LONG, &threads, "K", 1, 1024,
         .help = "--gpu cpu: threads per rank (default: cores / N, as tridentrun)"},
        {"--cores", TRI_OPT_LONG, &cores, "C", 1, 1 << 20,
         .help = "--gpu cpu: the machine's cores (default: those online)"},
        {"--sync-ms", TRI_OPT_STR, &sync_arg, "D",
         .help = "--gpu cpu: what a blocking collective costs when N x K exceeds C\n"
                 "(default: the measured constant, docs/plan.md)"},
    };
    const tri_cmd_spec spec = {
        .cmd = "trident plan",
        .who = "plan",
        .usage = "CONFIG --gpu h100|a100|cpu [--gpus N] [--search] [--set section.key=value]...\n"
                 "                    [--json] [--top K] [--threads K] [--cores C] [--sync-ms D]",
        .about = "  predicts, without allocating the model, each rank's memory (parameters, gradients, optimizer,\n"
                 "  saved activations at the schedule's peak, workspace) and the step time (compute, exposed TP, DP\n"
                 "  and PP communication, pipeline bubble), tokens/s, TFLOP/s per device and MFU (docs/plan.md).\n"
                 "  With a layout (parallel.tp/cp/pp/dp/vpp, train.micro_batch, train.recompute, parallel.zero,\n"
                 "  parallel.offload, train.precision, parallel.sequence_parallel from the config and --set):\n"
                 "  that layout.\n"
                 "  With --search, or --gpus N and no --set parallel.tp/pp/dp when the config's layout is not N\n"
                 "  devices: every valid layout of N devices, the best K (--top, default 5) that fit, and why the\n"
                 "  others were rejected; a layout over the memory limit is tried again at ZeRO 2, 3 and with the\n"
                 "  optimizer offloaded. parallel.tp/cp/pp/dp/vpp, train.micro_batch/recompute, parallel.zero and\n"
                 "  parallel.offload given with --set stay fixed in the search.\n",
        .footer = "  train.precision bf16 or fp16 may be set here before the trainer accepts it.\n",
        .opts = opts,
        .n_opts = TRI_OPT_N(opts),
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
    const char **sets = calloc((size_t)set.n + 1, sizeof *sets);
    tri_planner pl = {0};          /* the schedules the layouts share */
    tri_sgemm_meter *meter = NULL; /* --gpu cpu: the GEMM speeds measured */
    tri_search_fixed fx = {0};
    char precision[16] = "";
    double sync_ms = -1;
    if (!sets) {
        tri_error("out of memory");
        goto out;
    }
    if (sync_arg) {
        char *end;
        sync_ms = strtod(sync_arg, &end);
        if (*end || end == sync_arg || !(sync_ms >= 0 && sync_ms < 1e6)) {
            tri_error("plan: --sync-ms %s: not a number of milliseconds >= 0", sync_arg);
            goto out;
        }
    }
    if (pos.n > 1) {
        tri_error("plan: unexpected argument '%s'", pos.v[1]);
        goto out;
    }
    const char *path = pos.n ? pos.v[0] : NULL;
    if (!path) {
        tri_error("plan: missing CONFIG");
        goto out;
    }
    if (!gpu_name) {
        tri_error("plan: missing --gpu (h100, a100 or cpu)");
        goto out;
    }
    int n_sets = split_sets(&set, sets, precision, sizeof precision, &fx);
    int layout_set = fx.tp || fx.pp || fx.dp || fx.cp;
    tri_config cfg;
    if (tri_config_load(&cfg, path, n_sets, sets) != 0) goto out;
    if (precision[0]) {
        int dt = tri_precision_parse(precision);
        if (dt < 0) {
            tri_error("plan: train.precision \"%s\" is not one of fp32, bf16, fp16", precision);
            goto out;
        }
        cfg.train.precision = (tri_dtype)dt;
    }
    int world = cfg.parallel.tp * cfg.parallel.cp * cfg.parallel.pp * cfg.parallel.dp; /* <= 2^20: the config check */
    if (!gpus) gpus = world;
    if (!do_search && !layout_set && gpus != world) do_search = 1;
    if (!do_search && gpus != world) {
        tri_error("plan: --gpus %ld but the layout parallel.tp %d x cp %d x pp %d x dp %d is %d devices", gpus,
                  cfg.parallel.tp, cfg.parallel.cp, cfg.parallel.pp, cfg.parallel.dp, world);
        goto out;
    }

    tri_gpu_kind kind;
    int cpu = !strcmp(gpu_name, "cpu");
    if (cpu) {
        meter = malloc(sizeof *meter);
        if (!meter) {
            tri_error("out of memory");
            goto out;
        }
        measure_cpu(&kind, meter, &cfg, gpus, threads, cores, sync_ms);
    } else {
        const tri_gpu_kind *g = tri_gpu_lookup(gpu_name);
        if (!g) {
            tri_error("plan: --gpu %s: not one of h100, a100, cpu", gpu_name);
            goto out;
        }
        kind = *g;
    }
    double limit = kind.mem_bytes;
    char np[32];
    snprintf(np, sizeof np, "%.3g", (double)tri_gpt_num_params(&cfg.model) / 1e9);
    if (!json) {
        printf("plan %s: %sB parameters (L=%d, C=%d, heads=%d, T=%d, V=%d), global batch %d sequences, %s, on %ld x "
               "%s",
               path, np, cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head, cfg.model.seq_len, cfg.model.vocab_size,
               cfg.train.global_batch, tri_precision_name(cfg.train.precision), gpus, kind.desc);
        if (cpu)
            printf(" (sgemm %.1f GFLOP/s per rank at the MLP's shape, copy %.1f GB/s)", kind.peak_16 / 1e9,
                   kind.mem_bw / 1e9);
        printf("\n");
    }
    if (do_search) {
        tri_search_opts so = {.base = &cfg, .gpu = &kind, .cpu = cpu, .gpus = (int)gpus, .limit = limit, .fixed = fx};
        tri_search_result r;
        if (tri_search_run(&pl, &so, &r) == 0) {
            print_search(&r, (int)gpus, limit, (int)top, json, meter);
            rc = r.n > 0 ? TRI_EXIT_OK : TRI_EXIT_FAILURE; /* 1: no layout fits */
        }
        tri_search_result_free(&r);
    } else {
        char why[TRI_SEARCH_WHY];
        if (tri_plan_check(&cfg, &kind, why, sizeof why) != 0) {
            tri_error("plan: the layout is not valid: %s", why);
            goto out;
        }
        tri_plan_row row;
        memset(&row, 0, sizeof row);
        row.cfg = cfg;
        if (tri_search_evaluate(&pl, &row, &kind, cpu, limit, why, sizeof why) != 0) {
            if (why[0]) tri_error("%s", why);
            goto out;
        }
        if (json)
            print_json(&row, meter);
        else
            print_row(&row, limit, world, meter);
        rc = TRI_EXIT_OK;
    }
out:
    free(meter);
    tri_planner_free(&pl);
    free(sets);
    tri_opt_list_free(&pos);
    tri_opt_list_free(&set);
    return rc;
}
