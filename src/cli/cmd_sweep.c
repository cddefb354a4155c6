/* `trident sweep SWEEP.json [--dry-run] [--threads N] [--set section.key=value]... [--out DIR]`:
 * the options, then the sweep wing (src/sweep/sweep.h: the file's format,
 * the run directories, the summary), what it did, and the exit code:
 * TRI_EXIT_OK every point ok, TRI_EXIT_FAILURE a point failed (or this
 * program, tridentrun or a summary write failed), TRI_EXIT_BAD_INPUT a bad
 * option, sweep file, config or data, tri_exit_signal(S) when stopped by
 * SIGINT/SIGTERM (passed on to the running point, which saves a checkpoint
 * and stops). */
#include <stdio.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/opt.h"
#include "cli/cli.h"
#include "model/gpt.h"
#include "sweep/sweep.h"

/* The plan of a dry run: every point, what would happen to it, its command. */
static void print_dry_run(const tri_sweep *sw) {
    for (int i = 0; i < sw->n_points; i++) {
        const tri_sweep_point *p = &sw->points[i];
        const char *av[TRI_SWEEP_ARGV_MAX];
        char ranks_dir[TRI_PATH_MAX + 16], threads[16];
        tri_sweep_point_argv(sw, p, p->state == TRI_POINT_RESUME, av, ranks_dir, threads);
        int ranks = tri_sweep_ranks(&p->cfg);
        printf("[%d/%d] %s: %s, %zu parameters, %d rank%s\n  ", i + 1, sw->n_points, p->name,
               p->state == TRI_POINT_DONE     ? "done (would be skipped)"
               : p->state == TRI_POINT_RESUME ? "would resume"
                                              : "would run",
               tri_gpt_num_params(&p->cfg.model), ranks, ranks > 1 ? "s" : "");
        tri_sweep_print_argv(stdout, av);
    }
}

/* Runs the sweep of the parsed options; returns the exit code. */
static int sweep(const char *file, const char *out, int threads, int dry_run, const tri_opt_list *sets) {
    tri_sweep sw;
    tri_sweep_init(&sw, file, out, threads);
    int rc = TRI_EXIT_BAD_INPUT;
    if (tri_sweep_read(&sw, sets->n, sets->v) != 0) goto done;
    if (tri_sweep_find_programs(&sw) != 0) {
        rc = TRI_EXIT_FAILURE;
        goto done;
    }
    if (tri_sweep_prepare(&sw, !dry_run) != 0) goto done; /* a dry run needs no data */
    if (tri_sweep_check_runner(&sw) != 0) {
        rc = TRI_EXIT_FAILURE;
        goto done;
    }
    printf("sweep %s: %d point%s of base %s, out %s\n", sw.file, sw.n_points, sw.n_points == 1 ? "" : "s", sw.base,
           sw.out);
    if (dry_run) {
        print_dry_run(&sw);
        rc = TRI_EXIT_OK;
        goto done;
    }
    tri_sweep_result r;
    if (tri_sweep_run(&sw, &r) != 0) goto done; /* OUT cannot be made */
    printf("sweep: %d points: %d run, %d already done, %d failed, %d not run; summary %s/summary.jsonl\n", sw.n_points,
           r.n_run, r.n_skip, r.n_fail, r.n_pending, sw.out);
    if (r.signal) {
        tri_error("sweep: stopped by signal %d (run it again to resume)", r.signal);
        rc = tri_exit_signal(r.signal);
    } else {
        rc = r.failed || r.n_fail > 0 ? TRI_EXIT_FAILURE : TRI_EXIT_OK;
    }
    if (sw.plot && !r.signal) tri_sweep_plot(&sw);
done:
    tri_sweep_free(&sw);
    return rc;
}

int tri_cmd_sweep(int argc, char **argv) {
    const char *out = NULL;
    int threads = 0, dry_run = 0;
    tri_opt_list sets = {0}, pos = {0};
    const tri_opt opts[] = {
        {"--dry-run", TRI_OPT_FLAG, &dry_run, .help = "validate every point and print its command; run nothing"},
        {"--threads", TRI_OPT_INT, &threads, "N", 1, 1024,
         .help = "`trident train --threads N` for every point (overrides the file's \"threads\")"},
        {"--set", TRI_OPT_LIST, &sets, "k=v",
         .help = "a fixed override for every point, over the file's \"set\" (repeatable)"},
        {"--out", TRI_OPT_STR, &out, "DIR", .help = "the output directory instead of the file's \"out\""},
    };
    tri_cmd_spec spec = {
        .cmd = "trident sweep",
        .who = "sweep",
        .usage = "SWEEP.json [options]",
        .about = "  runs a grid of `trident train` runs, one run directory each, and writes OUT/summary.jsonl\n"
                 "  (the sweep file's format: docs/scaling.md; an example: configs/sweeps/scaling.json)\n",
        .opts = opts,
        .n_opts = TRI_OPT_N(opts),
        .pos = &pos,
        .max_pos = 1,
        .pos_name = "SWEEP.json",
    };
    int parsed = tri_opt_parse(&spec, argc, argv), rc;
    if (parsed != TRI_OPT_GO) {
        rc = tri_opt_exit(parsed);
    } else if (pos.n == 0) {
        tri_error("sweep: missing SWEEP.json (e.g. configs/sweeps/scaling.json)");
        rc = TRI_EXIT_BAD_INPUT;
    } else {
        rc = sweep(pos.v[0], out, threads, dry_run, &sets);
    }
    tri_opt_list_free(&sets);
    tri_opt_list_free(&pos);
    return rc;
}
