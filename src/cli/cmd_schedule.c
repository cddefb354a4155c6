/* `trident schedule --pp P --micro-batches M [--vpp V] [--schedule S]
 * [--costs F,B,W] [--json]`: builds a pipeline schedule (parallel/schedule.h),
 * plays it with the simulator and prints its timeline, whether it deadlocks,
 * its bubble beside the closed form and the peak in-flight micro-batches per
 * stage. No model, no ranks: pure arithmetic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/opt.h"
#include "cli/cli.h"
#include "parallel/schedule.h"

/* "F,B,W" with three non-negative numbers, F > 0. */
static int parse_costs(const char *v, tri_sim_costs *c) {
    double x[3];
    char *end = NULL;
    const char *p = v;
    for (int i = 0; i < 3; i++) {
        x[i] = strtod(p, &end);
        if (end == p || !(x[i] >= 0.0 && x[i] <= 1e6) || (i < 2 ? *end != ',' : *end != '\0')) {
            tri_error("schedule: --costs: expected three numbers F,B,W in [0, 1e6], got '%s'", v);
            return -1;
        }
        p = end + 1;
    }
    if (x[0] <= 0.0 || x[1] + x[2] <= 0.0) {
        tri_error("schedule: --costs: the forward and the backward (B + W) must take time, got '%s'", v);
        return -1;
    }
    *c = (tri_sim_costs){x[0], x[1], x[2]};
    return 0;
}

int tri_cmd_schedule(int argc, char **argv) {
    long pp = 0, m = 0, vpp = 1;
    const char *sched = NULL, *costs_arg = NULL;
    int json = 0;
    tri_opt_list stray = {0}; /* no positional arguments: named as unknown options, as always */
    const tri_opt opts[] = {
        {"--pp", TRI_OPT_LONG, &pp, "P", 1, 256, .help = "pipeline stages (1 .. 256)"},
        {"--micro-batches", TRI_OPT_LONG, &m, "M", 1, 65536, .help = "micro-batches per step (1 .. 65536)"},
        {"--vpp", TRI_OPT_LONG, &vpp, "V", 1, 64, .help = "model chunks per stage (default 1; > 1: interleaved)"},
        {"--schedule", TRI_OPT_STR, &sched, "S",
         .help = "1f1b (default; interleaved when vpp > 1), interleaved, gpipe, zb-h1,\nforward"},
        {"--costs", TRI_OPT_STR, &costs_arg, "F,B,W",
         .help = "time of a forward, an input-gradient pass (B) and a weight-gradient\n"
                 "pass (W); a full backward costs B + W (default 1,1,1)"},
        {"--json", TRI_OPT_FLAG, &json, .help = "print one JSON object instead of the grid"},
    };
    const tri_cmd_spec spec = {.cmd = "trident schedule",
                               .who = "schedule",
                               .usage = "--pp P --micro-batches M [options]",
                               .opts = opts,
                               .n_opts = TRI_OPT_N(opts),
                               .pos = &stray,
                               .max_pos = -1};
    int rc = tri_opt_parse(&spec, argc, argv);
    const char *first_stray = stray.n ? stray.v[0] : NULL;
    tri_opt_list_free(&stray);
    if (rc != TRI_OPT_GO) return tri_opt_exit(rc);
    if (first_stray) {
        tri_error("schedule: unknown or incomplete option '%s' (try `trident schedule --help`)", first_stray);
        return TRI_EXIT_BAD_INPUT;
    }
    if (sched && tri_sched_parse(sched) < 0) {
        tri_error("schedule: --schedule: expected 1f1b, interleaved, gpipe, zb-h1 or forward, got '%s'", sched);
        return TRI_EXIT_BAD_INPUT;
    }
    tri_sim_costs costs = {1.0, 1.0, 1.0};
    if (costs_arg && parse_costs(costs_arg, &costs)) return TRI_EXIT_BAD_INPUT;
    if (pp < 1 || m < 1) {
        tri_error("schedule: --pp P and --micro-batches M are required");
        return TRI_EXIT_BAD_INPUT;
    }
    if (pp * vpp * m > TRI_SCHED_MAX_UNITS) {
        tri_error("schedule: --pp %ld x --vpp %ld x --micro-batches %ld = %ld units: at most %d (2^22, about 1.2 GB "
                  "to build and simulate)",
                  pp, vpp, m, pp * vpp * m, TRI_SCHED_MAX_UNITS);
        return TRI_EXIT_BAD_INPUT;
    }
    tri_sched_kind kind = sched     ? (tri_sched_kind)tri_sched_parse(sched)
                          : vpp > 1 ? TRI_SCHED_INTERLEAVED
                                    : TRI_SCHED_1F1B;
    if (kind == TRI_SCHED_1F1B && vpp > 1) kind = TRI_SCHED_INTERLEAVED; /* as parallel.schedule does */
    tri_schedule s;
    if (tri_schedule_build(&s, kind, (int)pp, (int)vpp, (int)m) != 0) return TRI_EXIT_BAD_INPUT;
    tri_sim_result r;
    if (tri_schedule_simulate(&s, costs, &r) != 0) {
        tri_schedule_free(&s);
        tri_error("schedule: out of memory simulating pp %ld, %ld micro-batches", pp, m);
        return TRI_EXIT_FAILURE;
    }
    double formula = tri_schedule_bubble_formula(kind, (int)pp, (int)vpp, (int)m, costs);
    int bad = r.deadlock || r.invalid;
    if (json) {
        printf("{\"schedule\": \"%s\", \"pp\": %ld, \"vpp\": %ld, \"micro_batches\": %ld, \"deadlock\": %s, "
               "\"invalid\": %s, \"makespan\": %.17g, \"bubble_ratio\": %.17g, \"bubble_formula\": %.17g, "
               "\"peak_inflight\": [",
               tri_sched_name(kind), pp, vpp, m, r.deadlock ? "true" : "false", r.invalid ? "true" : "false",
               r.makespan, r.bubble, formula);
        for (int q = 0; q < (int)pp; q++) printf("%s%d", q ? ", " : "", r.peak[q]);
        printf("]}\n");
    } else {
        printf("%s schedule, pp %ld, vpp %ld, %ld micro-batches, costs F %g B %g W %g\n", tri_sched_name(kind), pp, vpp,
               m, costs.f, costs.b, costs.w);
        tri_schedule_print_grid(stdout, &s, &r);
        printf("deadlock check: %s\n", r.deadlock  ? "DEADLOCK"
                                       : r.invalid ? "INVALID"
                                                   : "ok, every send meets its receive in order");
        printf("bubble %.6f, closed form %.6f\n", r.bubble, formula);
    }
    tri_sim_result_free(&r);
    tri_schedule_free(&s);
    return bad ? TRI_EXIT_FAILURE : TRI_EXIT_OK; /* 1: it deadlocks or is invalid */
}
