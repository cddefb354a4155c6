/* `trident plan CONFIG [--set k=v]... --gpu h100|a100|cpu [--gpus N] [--json]`:
 * the memory per rank and the step time of a layout, or of every layout of
 * N devices, from the model in src/plan/plan.h (docs/plan.md). Nothing of the
 * model is allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gpt.h"
#include "base/err.h"
#include "base/size.h"
#include "cli/cli.h"
#include "config/config.h"
#include "plan/plan.h"
#include "train/preflight.h"
#include "train/train.h"

/* ------------------------------------------------------------------------ */
/* output                                                                    */

typedef struct plan_row {
    tri_config cfg;
    tri_plan_mem mem;
    tri_plan_time time;
    int fits;
} plan_row;

static void human(char *buf, double bytes) { tri_size_human(buf, 32, bytes); }

/* The row's MFU: the model's against the kind's peak, or with `--gpu cpu`
 * (meter non-NULL) against the best sgemm measured by the time of printing
 * (bench's rule), not the first shape's, which a slow phase of the VM may
 * have caught. */
static double row_mfu(const plan_row *r, const tri_sgemm_meter *meter) {
    const tri_config *c = &r->cfg;
    if (!meter || meter->best <= 0) return r->time.mfu;
    double world = (double)c->parallel.tp * c->parallel.pp * c->parallel.dp;
    return r->time.model_flops / r->time.step_s / (world * meter->best);
}

static void print_row(const plan_row *r, double limit, int world, const tri_sgemm_meter *meter) {
    const tri_config *c = &r->cfg;
    const tri_plan_mem *m = &r->mem;
    const tri_plan_time *t = &r->time;
    char a[32], b[32], d[32], e[32], f[32], g[32], h[32], l[32];
    printf("layout tp=%d pp=%d dp=%d vpp=%d micro_batch=%d recompute=%s zero=%d sequence_parallel=%d schedule=%s "
           "precision=%s (%d ranks)\n",
           c->parallel.tp, c->parallel.pp, c->parallel.dp, c->parallel.vpp, c->train.micro_batch,
           tri_recompute_name(c->train.recompute), c->parallel.zero, c->parallel.sequence_parallel,
           tri_sched_name(c->parallel.schedule), tri_precision_name(c->train.precision), world);
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
    printf("  step      %.4g s: compute %.4g, exposed TP %.4g, DP %.4g, PP %.4g, bubble %.4g (%.3f of busy, %d "
           "micro-batches)\n",
           t->step_s, t->compute_s, t->tp_s, t->dp_s, t->pp_s, t->bubble_s, t->bubble, t->m);
    printf("  speed     %.0f tokens/s, %.1f TFLOP/s per device (model FLOPs), MFU %.1f%%\n", t->tokens_per_s,
           t->tflops_per_gpu, 100.0 * row_mfu(r, meter));
}

static void print_json(const plan_row *r, const tri_sgemm_meter *meter) {
    const tri_config *c = &r->cfg;
    const tri_plan_mem *m = &r->mem;
    const tri_plan_time *t = &r->time;
    printf(
        "{\"tp\": %d, \"pp\": %d, \"dp\": %d, \"vpp\": %d, \"micro_batch\": %d, \"recompute\": \"%s\", \"zero\": %d, "
        "\"sequence_parallel\": %d, \"schedule\": \"%s\", \"precision\": \"%s\", \"fits\": %s, "
        "\"mem\": {\"params\": %zu, \"grads\": %zu, \"optim\": %zu, \"saved_act_peak\": %zu, \"saved_act_alloc\": "
        "%zu, \"workspace\": %zu}, \"mem_total\": %zu, \"mem_stage\": %d, \"step_s\": %.6g, \"compute_s\": %.6g, "
        "\"tp_s\": %.6g, \"dp_s\": %.6g, \"pp_s\": %.6g, \"bubble_s\": %.6g, \"bubble\": %.6g, \"tokens_per_s\": "
        "%.6g, \"tflops_per_gpu\": %.6g, \"hw_tflops_per_gpu\": %.6g, \"mfu\": %.6g}\n",
        c->parallel.tp, c->parallel.pp, c->parallel.dp, c->parallel.vpp, c->train.micro_batch,
        tri_recompute_name(c->train.recompute), c->parallel.zero, c->parallel.sequence_parallel,
        tri_sched_name(c->parallel.schedule), tri_precision_name(c->train.precision), r->fits ? "true" : "false",
        m->params, m->grads, m->optim, m->saved_act_peak, m->saved_act_alloc, m->workspace, m->total, m->stage,
        t->step_s, t->compute_s, t->tp_s, t->dp_s, t->pp_s, t->bubble_s, t->bubble, t->tokens_per_s, t->tflops_per_gpu,
        t->hw_flops / t->step_s / (double)(c->parallel.tp * c->parallel.pp * c->parallel.dp) / 1e12, row_mfu(r, meter));
}

/* ------------------------------------------------------------------------ */
/* the search                                                                */

/* Dimensions the user fixed with --set: the search keeps them. */
typedef struct fixed {
    int tp, pp, dp, vpp, mb, recompute, zero, sp;
} fixed;

typedef struct reasons {
    int n;
    char text[32][512];
    int count[32];
    int other;
} reasons;

static void reason_add(reasons *r, const char *why) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->text[i], why)) {
            r->count[i]++;
            return;
        }
    if (r->n < 32) {
        snprintf(r->text[r->n], sizeof r->text[0], "%s", why);
        r->count[r->n++] = 1;
    } else {
        r->other++;
    }
}

static int cmp_rows(const void *a, const void *b) {
    const plan_row *x = a, *y = b;
    return (x->time.step_s > y->time.step_s) - (x->time.step_s < y->time.step_s);
}

/* Memory and time of one layout; 0, or -1 with the reason in why (empty:
 * printed, out of memory; tri_plan_memory_why). */
static int evaluate(tri_planner *pl, plan_row *row, const tri_gpu_kind *gpu, int cpu, double limit, char *why,
                    size_t n) {
    if (tri_plan_memory_why(pl, &row->cfg, cpu ? NULL : gpu, &row->mem, why, n) != 0) return -1;
    if (tri_plan_time_step_why(pl, &row->cfg, gpu, &row->time, why, n) != 0) return -1;
    row->fits = (double)row->mem.total <= limit;
    return 0;
}

static int search(tri_planner *pl, const tri_config *base, const tri_gpu_kind *gpu, const tri_sgemm_meter *meter,
                  int gpus, double limit, int top, int json, const fixed *fx) {
    int cpu = meter != NULL;
    const tri_model_cfg *m = &base->model;
    size_t cap = 256, n = 0;
    plan_row *rows = malloc(cap * sizeof *rows);
    if (!rows) return tri_error("out of memory");
    reasons rej = {0};
    int n_oom = 0, n_tried = 0;
    plan_row closest_oom;
    double closest_over = -1;
    char why[512];
    for (int tp = 1; tp <= gpus && tp <= gpu->per_node; tp++) {
        if (gpus % tp || (fx->tp && tp != base->parallel.tp)) continue;
        for (int pp = 1; pp <= gpus / tp; pp++) {
            if ((gpus / tp) % pp || (fx->pp && pp != base->parallel.pp)) continue;
            int dp = gpus / tp / pp;
            if (fx->dp && dp != base->parallel.dp) continue;
            for (int vpp = 1; vpp <= (pp > 1 ? 16 : 1); vpp++) {
                if (fx->vpp && vpp != base->parallel.vpp) continue;
                if (!fx->vpp && vpp > 1 && (m->n_layer % pp != 0 || (m->n_layer / pp) % vpp != 0)) continue;
                for (int mb = 1; mb <= 16; mb++) {
                    if (fx->mb && mb != base->train.micro_batch) continue;
                    if (base->train.global_batch % dp != 0 || (base->train.global_batch / dp) % mb != 0) {
                        if (mb == 1) {
                            snprintf(why, sizeof why, "global_batch %d is not divisible by dp %d",
                                     base->train.global_batch, dp);
                            reason_add(&rej, why);
                        }
                        continue;
                    }
                    for (int rc = TRI_RECOMPUTE_NONE; rc <= TRI_RECOMPUTE_FULL; rc++) {
                        if (fx->recompute && (tri_recompute)rc != base->train.recompute) continue;
                        for (int zero = 0; zero <= (dp > 1); zero++) {
                            if (fx->zero && zero != base->parallel.zero) continue;
                            plan_row row;
                            memset(&row, 0, sizeof row);
                            row.cfg = *base;
                            tri_config *c = &row.cfg;
                            c->parallel.tp = tp;
                            c->parallel.pp = pp;
                            c->parallel.dp = dp;
                            c->parallel.vpp = vpp;
                            c->parallel.pp_layout[0] = '\0';
                            c->parallel.zero = zero;
                            /* sequence parallelism: on wherever it applies on GPUs (same traffic,
                             * less memory), as configured on the CPU or when given */
                            int sp_ok = tp > 1 && m->seq_len % tp == 0;
                            c->parallel.sequence_parallel =
                                (cpu || fx->sp) ? (base->parallel.sequence_parallel && sp_ok) : sp_ok;
                            if (vpp > 1 && c->parallel.schedule == TRI_SCHED_ZBH1) continue;
                            if (vpp == 1 && c->parallel.schedule == TRI_SCHED_INTERLEAVED)
                                c->parallel.schedule = TRI_SCHED_1F1B;
                            c->train.micro_batch = mb;
                            c->train.recompute = (tri_recompute)rc;
                            n_tried++;
                            if (tri_plan_check(c, gpu, why, sizeof why) != 0) {
                                reason_add(&rej, why);
                                continue;
                            }
                            if (evaluate(pl, &row, gpu, cpu, limit, why, sizeof why) != 0) {
                                if (!why[0]) { /* not the layout's fault: printed */
                                    free(rows);
                                    return -1;
                                }
                                reason_add(&rej, why);
                                continue;
                            }
                            if (!row.fits) {
                                n_oom++;
                                double over = (double)row.mem.total - limit;
                                if (closest_over < 0 || over < closest_over) {
                                    closest_over = over;
                                    closest_oom = row;
                                }
                                continue;
                            }
                            if (n == cap) {
                                plan_row *nr = realloc(rows, 2 * cap * sizeof *rows);
                                if (!nr) {
                                    free(rows);
                                    return tri_error("out of memory");
                                }
                                rows = nr;
                                cap *= 2;
                            }
                            rows[n++] = row;
                        }
                    }
                }
            }
        }
    }
    qsort(rows, n, sizeof *rows, cmp_rows);
    char lim[32], ov[32];
    human(lim, limit);
    if (!json) {
        printf("search over %d devices: %d layouts tried, %zu fit in %s, %d out of memory, %d invalid\n", gpus, n_tried,
               n, lim, n_oom, n_tried - (int)n - n_oom);
        if (n == 0) printf("no layout fits\n");
        for (size_t i = 0; i < n && (int)i < top; i++) {
            printf("\n#%zu ", i + 1);
            print_row(&rows[i], limit, gpus, meter);
        }
        printf("\nrejected:\n");
        if (n_oom) {
            human(ov, closest_over);
            const tri_config *c = &closest_oom.cfg;
            printf("  %d out of memory; the closest, tp=%d pp=%d dp=%d vpp=%d micro_batch=%d recompute=%s zero=%d, "
                   "needs %s more than %s\n",
                   n_oom, c->parallel.tp, c->parallel.pp, c->parallel.dp, c->parallel.vpp, c->train.micro_batch,
                   tri_recompute_name(c->train.recompute), c->parallel.zero, ov, lim);
        }
        for (int i = 0; i < rej.n; i++) printf("  %d: %s\n", rej.count[i], rej.text[i]);
        if (rej.other) printf("  %d for other reasons\n", rej.other);
    } else {
        for (size_t i = 0; i < n && (int)i < top; i++) print_json(&rows[i], meter);
        printf("{\"rejected\": {\"tried\": %d, \"fit\": %zu, \"out_of_memory\": %d, \"closest_over_bytes\": %.0f, "
               "\"invalid\": [",
               n_tried, n, n_oom, closest_over > 0 ? closest_over : 0.0);
        for (int i = 0; i < rej.n; i++) {
            printf("%s{\"count\": %d, \"why\": \"", i ? ", " : "", rej.count[i]);
            for (const char *p = rej.text[i]; *p; p++) {
                if (*p == '"' || *p == '\\') putchar('\\');
                putchar(*p);
            }
            printf("\"}");
        }
        printf("]}}\n");
    }
    free(rows);
    return n > 0 ? 0 : 1;
}

/* ------------------------------------------------------------------------ */

static void plan_usage(FILE *f) {
    fprintf(f,
            "usage: trident plan CONFIG --gpu h100|a100|cpu [--gpus N] [--search] [--set section.key=value]...\n"
            "                    [--json] [--top K] [--threads K] [--cores C] [--sync-ms D]\n"
            "  predicts, without allocating the model, each rank's memory (parameters, gradients, optimizer,\n"
            "  saved activations at the schedule's peak, workspace) and the step time (compute, exposed TP, DP\n"
            "  and PP communication, pipeline bubble), tokens/s, TFLOP/s per device and MFU (docs/plan.md).\n"
            "  With a layout (parallel.tp/pp/dp/vpp, train.micro_batch, train.recompute, parallel.zero,\n"
            "  train.precision, parallel.sequence_parallel from the config and --set): that layout.\n"
            "  With --search, or --gpus N and no --set parallel.tp/pp/dp when the config's layout is not N\n"
            "  devices: every valid layout of N devices, the best K (--top, default 5) that fit, and why the\n"
            "  others were rejected; parallel.tp/pp/dp/vpp, train.micro_batch/recompute and parallel.zero given\n"
            "  with --set stay fixed in the search. --gpu cpu: this machine, N ranks on it, with its measured sgemm;\n"
            "  --threads K: threads per rank (default: cores / N, as tridentrun); --cores C: the machine's cores\n"
            "  (default: those online); --sync-ms D: what a blocking collective costs when N x K exceeds C\n"
            "  (default: the measured constant, docs/plan.md). --json: one object per line.\n"
            "  train.precision bf16 or fp16 may be set here before the trainer accepts it.\n");
}

int tri_cmd_plan(int argc, char **argv) {
    const char *path = NULL, *gpu_name = NULL;
    const char **sets = calloc((size_t)argc + 2, sizeof *sets);
    int n_sets = 0, json = 0, do_search = 0, layout_set = 0, rc = 2;
    fixed fx = {0};
    tri_planner pl = {0};          /* the schedules the layouts share */
    tri_sgemm_meter *meter = NULL; /* --gpu cpu: the GEMM speeds measured */
    long gpus = 0, top = 5, threads = 0, cores_opt = 0;
    double sync_ms = -1;
    char precision[16] = "";
    if (!sets) return tri_error("out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            plan_usage(stdout);
            rc = 0;
            goto out;
        } else if (!strcmp(a, "--gpu") && v) {
            gpu_name = v;
            i++;
        } else if (!strcmp(a, "--gpus") && v) {
            if (tri_arg_int(a, v, 1, 1 << 20, &gpus)) goto out;
            i++;
        } else if (!strcmp(a, "--top") && v) {
            if (tri_arg_int(a, v, 1, 100000000, &top)) goto out;
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            if (tri_arg_int(a, v, 1, 1024, &threads)) goto out;
            i++;
        } else if (!strcmp(a, "--cores") && v) {
            if (tri_arg_int(a, v, 1, 1 << 20, &cores_opt)) goto out;
            i++;
        } else if (!strcmp(a, "--sync-ms") && v) {
            char *end;
            sync_ms = strtod(v, &end);
            if (*end || end == v || !(sync_ms >= 0 && sync_ms < 1e6)) {
                tri_error("plan: --sync-ms %s: not a number of milliseconds >= 0", v);
                goto out;
            }
            i++;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--search")) {
            do_search = 1;
        } else if (!strcmp(a, "--set") && v) {
            /* precision: modelled for every dtype, whatever the trainer accepts yet */
            if (!strncmp(v, "train.precision=", 16)) {
                snprintf(precision, sizeof precision, "%s", v + 16);
            } else {
                fx.tp |= !strncmp(v, "parallel.tp=", 12);
                fx.pp |= !strncmp(v, "parallel.pp=", 12);
                fx.dp |= !strncmp(v, "parallel.dp=", 12);
                fx.vpp |= !strncmp(v, "parallel.vpp=", 13);
                fx.mb |= !strncmp(v, "train.micro_batch=", 18);
                fx.recompute |= !strncmp(v, "train.recompute=", 16);
                fx.zero |= !strncmp(v, "parallel.zero=", 14);
                fx.sp |= !strncmp(v, "parallel.sequence_parallel=", 27);
                layout_set = fx.tp || fx.pp || fx.dp;
                sets[n_sets++] = v;
            }
            i++;
        } else if (a[0] == '-') {
            tri_error("plan: unknown or incomplete option '%s' (try `trident plan --help`)", a);
            goto out;
        } else if (!path) {
            path = a;
        } else {
            tri_error("plan: unexpected argument '%s'", a);
            goto out;
        }
    }
    if (!path) {
        tri_error("plan: missing CONFIG");
        goto out;
    }
    if (!gpu_name) {
        tri_error("plan: missing --gpu (h100, a100 or cpu)");
        goto out;
    }
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
    int world = cfg.parallel.tp * cfg.parallel.pp * cfg.parallel.dp;
    if (!gpus) gpus = world;
    if (!do_search && !layout_set && gpus != world) do_search = 1;
    if (!do_search && gpus != world) {
        tri_error("plan: --gpus %ld but the layout parallel.tp %d x pp %d x dp %d is %d devices", gpus, cfg.parallel.tp,
                  cfg.parallel.pp, cfg.parallel.dp, world);
        goto out;
    }

    tri_gpu_kind kind;
    int cpu = !strcmp(gpu_name, "cpu");
    double limit;
    if (cpu) {
        long cores = cores_opt ? cores_opt : sysconf(_SC_NPROCESSORS_ONLN);
        if (cores < 1) cores = 1;
        int t = threads ? (int)threads : (int)(cores / gpus > 0 ? cores / gpus : 1);
        tri_set_threads(t);
        tri_mem_avail av;
        tri_preflight_available(&av);
        size_t BT = (size_t)cfg.train.micro_batch * (size_t)cfg.model.seq_len, C = (size_t)cfg.model.n_embd;
        tri_cpu_setup setup = {.ranks = (int)gpus,
                               .threads = t,
                               .cores = cores,
                               .avail_bytes = av.available == SIZE_MAX ? 1e18 : (double)av.available,
                               .sync_s = sync_ms >= 0 ? sync_ms * 1e-3 : -1.0,
                               .ref = {BT, 4 * C, C}};
        meter = malloc(sizeof *meter);
        if (!meter) {
            tri_error("out of memory");
            goto out;
        }
        tri_gpu_kind_cpu(&kind, meter, &setup);
    } else {
        const tri_gpu_kind *g = tri_gpu_lookup(gpu_name);
        if (!g) {
            tri_error("plan: --gpu %s: not one of h100, a100, cpu", gpu_name);
            goto out;
        }
        kind = *g;
    }
    limit = kind.mem_bytes;
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
        int r = search(&pl, &cfg, &kind, meter, (int)gpus, limit, (int)top, json, &fx);
        rc = r < 0 ? 2 : r; /* 1: no layout fits */
    } else {
        char why[512];
        if (tri_plan_check(&cfg, &kind, why, sizeof why) != 0) {
            tri_error("plan: the layout is not valid: %s", why);
            goto out;
        }
        plan_row row;
        memset(&row, 0, sizeof row);
        row.cfg = cfg;
        if (evaluate(&pl, &row, &kind, cpu, limit, why, sizeof why) != 0) {
            if (why[0]) tri_error("%s", why);
            goto out;
        }
        if (json)
            print_json(&row, meter);
        else
            print_row(&row, limit, world, meter);
        rc = 0;
    }
out:
    free(meter);
    tri_planner_free(&pl);
    free(sets);
    return rc;
}
