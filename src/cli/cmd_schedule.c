/* `trident schedule --pp P --micro-batches M [--vpp V] [--schedule S]
 * [--costs F,B,W] [--json]`: builds a pipeline schedule (parallel/schedule.h),
 * plays it with the simulator and prints its timeline, whether it deadlocks,
 * its bubble beside the closed form and the peak in-flight micro-batches per
 * stage. No model, no ranks: pure arithmetic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/schedule.h"
#include "base/err.h"
#include "cli/cli.h"

static void schedule_usage(FILE *f) {
    fprintf(f, "usage: trident schedule --pp P --micro-batches M [options]\n"
               "  --pp P              pipeline stages (1 .. 256)\n"
               "  --micro-batches M   micro-batches per step (1 .. 65536)\n"
               "  --vpp V             model chunks per stage (default 1; > 1: interleaved)\n"
               "  --schedule S        1f1b (default; interleaved when vpp > 1), interleaved, gpipe, zb-h1,\n"
               "                      forward\n"
               "  --costs F,B,W       time of a forward, an input-gradient pass (B) and a weight-gradient\n"
               "                      pass (W); a full backward costs B + W (default 1,1,1)\n"
               "  --json              print one JSON object instead of the grid\n");
}

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
    const char *sched = NULL;
    tri_sim_costs costs = {1.0, 1.0, 1.0};
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            schedule_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--pp") && v) {
            if (tri_arg_int(a, v, 1, 256, &pp)) return 2;
            i++;
        } else if (!strcmp(a, "--micro-batches") && v) {
            if (tri_arg_int(a, v, 1, 65536, &m)) return 2;
            i++;
        } else if (!strcmp(a, "--vpp") && v) {
            if (tri_arg_int(a, v, 1, 64, &vpp)) return 2;
            i++;
        } else if (!strcmp(a, "--schedule") && v) {
            if (tri_sched_parse(v) < 0) {
                tri_error("schedule: --schedule: expected 1f1b, interleaved, gpipe, zb-h1 or forward, got '%s'", v);
                return 2;
            }
            sched = v;
            i++;
        } else if (!strcmp(a, "--costs") && v) {
            if (parse_costs(v, &costs)) return 2;
            i++;
        } else if (!strcmp(a, "--json"))
            json = 1;
        else {
            tri_error("schedule: unknown or incomplete option '%s' (try `trident schedule --help`)", a);
            return 2;
        }
    }
    if (pp < 1 || m < 1) {
        tri_error("schedule: --pp P and --micro-batches M are required");
        return 2;
    }
    tri_sched_kind kind = sched     ? (tri_sched_kind)tri_sched_parse(sched)
                          : vpp > 1 ? TRI_SCHED_INTERLEAVED
                                    : TRI_SCHED_1F1B;
    if (kind == TRI_SCHED_1F1B && vpp > 1) kind = TRI_SCHED_INTERLEAVED; /* as parallel.schedule does */
    tri_schedule s;
    if (tri_schedule_build(&s, kind, (int)pp, (int)vpp, (int)m) != 0) return 2;
    tri_sim_result r;
    if (tri_schedule_simulate(&s, costs, &r) != 0) {
        tri_schedule_free(&s);
        tri_error("schedule: out of memory simulating pp %ld, %ld micro-batches", pp, m);
        return 1;
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
    return bad ? 1 : 0;
}
