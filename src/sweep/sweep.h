/* The sweep wing: `trident sweep SWEEP.json` runs a grid of `trident train`
 * runs, one run directory each, and summarises them.
 *
 * A sweep file names a base config, fixed overrides, a grid of values for any
 * config keys and an output directory:
 *
 *   {"description": "what it measures and how to prepare its data",
 *    "base": "configs/quickstart.json",          (relative to the working directory, like every path)
 *    "out": "runs/scaling",                       (--out DIR instead)
 *    "set":  {"train.steps": 200},               (optional: every point)
 *    "grid": {"train.lr": [1e-3, 3e-3]},         (optional: one axis per key)
 *    "zip":  [{"model.n_embd": [64, 128], "model.n_head": [2, 4]}],  (optional: keys that vary together)
 *    "threads": 2,                               (optional: `trident train --threads`)
 *    "plot": true}                               (optional: scripts/plot.py on the summary at the end)
 *
 * The points are the Cartesian product of the axes (the grid's keys, then the
 * zip groups, in file order; the last varies fastest). Each point is one
 * `trident train BASE --set ...` (through tridentrun, found next to this
 * program, when tp*pp*dp > 1) in OUT/<name>, its run directory: log.dir =
 * OUT/<name>, checkpoint.dir = OUT/<name>/ckpt, its output in train.log,
 * point.json (the settings) written before it starts and `done` after it
 * succeeded. The name is made of the point's values (n_embd=64_n_head=2).
 *
 * Resuming: a point with `done` is not rerun; a point that started but has no
 * `done` (a crash, a stop) runs again with --resume, from its newest complete
 * checkpoint. A point.json written for other settings is refused (the run
 * directory belongs to another experiment). Every point is validated before
 * the first runs, so a typo in the last point does not waste the others.
 *
 * After each point OUT/summary.jsonl is rewritten (atomically) with one line
 * per point, from its point.json and metrics.jsonl: the point's keys, params,
 * flops_per_token (tri_gpt_flops_per_token), tokens seen, total FLOPs (their
 * product), final train loss, final and best validation loss, median step
 * time, tokens/s and MFU, the layout, and status (ok | failed | incomplete |
 * pending).
 *
 * The modules, in the order a sweep uses them:
 *   grammar.c  reading and checking the sweep file, expanding the points
 *   rundir.c   every point's config and data checked, the run directories'
 *              point.json and done markers, resume states
 *   run.c      each point as a child `trident train` with its log, signals
 *              passed on to it
 *   summary.c  the figures of a run, OUT/summary.jsonl, the plot
 * The command (src/cli/cmd_sweep.c) parses the options, calls these in that
 * order, prints and picks the exit code: 0 every point ok, 1 a point failed,
 * 2 bad sweep file or config, 128+signal when stopped by SIGINT/SIGTERM
 * (passed on to the running point, which saves a checkpoint and stops).
 *
 * Every user-facing failure prints one line through tri_error and returns -1;
 * messages about the sweep file read "trident: FILE: KEY: what" (tri_sweep_error). */
#ifndef TRI_SWEEP_H
#define TRI_SWEEP_H

#include <stddef.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "config/config.h"

#define TRI_SWEEP_MAX_POINTS 4096
#define TRI_SWEEP_MAX_KEYS   64  /* varying keys over all axes, and axes */
#define TRI_SWEEP_MAX_SETS   256 /* overrides of one point */
#define TRI_SWEEP_NAME_MAX   200 /* a point's name (its run directory's) */

/* One axis of the grid: one key ("grid"), or several that vary together
 * ("zip"). keys and lists point into the sweep's parsed file (tri_sweep.root);
 * every list has len scalar values. */
typedef struct tri_sweep_axis {
    int n_keys;
    const char *keys[TRI_SWEEP_MAX_KEYS];
    const cJSON *lists[TRI_SWEEP_MAX_KEYS];
    int len;
} tri_sweep_axis;

/* What a run directory says about its point. */
typedef enum tri_point_state {
    TRI_POINT_NEW,    /* nothing there: run it                                */
    TRI_POINT_RESUME, /* point.json without done: it started, run it --resume  */
    TRI_POINT_DONE    /* done: it succeeded, do not rerun                      */
} tri_point_state;

typedef struct tri_sweep_point {
    char name[TRI_SWEEP_NAME_MAX + 1]; /* "n_embd=64_n_head=2", or "base" without axes */
    char dir[TRI_PATH_MAX];            /* OUT/<name>                                  */
    /* "key=value", malloc'd: the fixed ones, the point's own, log.dir, checkpoint.dir */
    char *sets[TRI_SWEEP_MAX_SETS];
    int n_sets;
    cJSON *values; /* {key: value} of the point's varying keys, for the summary (owned) */
    tri_config cfg;        /* loaded by tri_sweep_prepare                       */
    tri_point_state state; /* set by tri_sweep_prepare, moved on by tri_sweep_run */
    int ran, exit_code;    /* this invocation: ran it, and how it ended        */
    double wall_s;         /* this invocation's run time                       */
} tri_sweep_point;

typedef struct tri_sweep {
    const char *file; /* the sweep file's path, as given: named in every message */
    cJSON *root;      /* the parsed file (owned); keys and lists point into it   */
    const char *base, *out; /* the base config, the output directory             */
    int threads;            /* `trident train --threads` (0: not passed)         */
    int plot;               /* "plot": true                                      */
    int has_description;    /* the file has a "description" (where its data comes from) */
    char *fixed[TRI_SWEEP_MAX_SETS]; /* "key=value" for every point (malloc'd): "set", then --set */
    int n_fixed;
    char *cli_keys[TRI_SWEEP_MAX_SETS]; /* the keys of the command line's --set (malloc'd) */
    int n_cli_keys;
    tri_sweep_axis axes[TRI_SWEEP_MAX_KEYS]; /* grid keys, then zip groups, in file order */
    int n_axes;
    tri_sweep_point *points; /* n_points of them once tri_sweep_prepare ran (owned) */
    int n_points;            /* the product of the axes' lengths (1 without axes) */
    char self[TRI_PATH_MAX];           /* this program (tri_sweep_find_programs) */
    char runner[TRI_PATH_MAX + 16];    /* tridentrun beside it                  */
} tri_sweep;

/* The ranks of a point's layout: tp * pp * dp (more than 1: run through tridentrun). */
static inline int tri_sweep_ranks(const tri_config *c) { return c->parallel.tp * c->parallel.pp * c->parallel.dp; }

/* ---- grammar.c: the sweep file ------------------------------------------ */

/* Zeroes *sw and keeps the command line's choices, which win over the
 * file's: file (the path, kept as a pointer), out (NULL: the file's "out"),
 * threads (0: the file's "threads", if any). Pair with tri_sweep_free. */
void tri_sweep_init(tri_sweep *sw, const char *file, const char *out, int threads);

/* Reads and checks sw->file (at most 1 MiB) and the command line's --set
 * overrides (sets[0..n_sets-1], "section.key=value"; they replace the file's
 * "set" of the same key): fills base, out, threads, plot, fixed, axes and
 * n_points; no point is made yet. 0, or -1 after one line naming the file
 * and the key ("trident: s.json: grid: model.n_embdd: unknown config key ...").
 * On failure *sw may hold part of the file: tri_sweep_free it. */
int tri_sweep_read(tri_sweep *sw, int n_sets, const char *const *sets);

/* The same on a file's text already in memory: text NUL-terminated, len
 * bytes (messages still name sw->file). */
int tri_sweep_parse(tri_sweep *sw, const char *text, size_t len, int n_sets, const char *const *sets);

/* Expands point idx (0 <= idx < sw->n_points; the last axis varies fastest)
 * into *p, which it zeroes first: its overrides (the fixed ones, the point's
 * values in axis order, log.dir, checkpoint.dir), values, name and run
 * directory; its config is not loaded (tri_sweep_prepare does). Touches no
 * file. 0, or -1 after printing (more than TRI_SWEEP_MAX_SETS overrides);
 * tri_sweep_point_free it either way. */
int tri_sweep_point_init(const tri_sweep *sw, int idx, tri_sweep_point *p);

/* Frees what the point owns and zeroes it (NULL-safe). */
void tri_sweep_point_free(tri_sweep_point *p);

/* Frees the points, the overrides and the parsed file, and zeroes *sw (NULL-safe). */
void tri_sweep_free(tri_sweep *sw);

/* Prints "trident: FILE: KEY: <fmt...>" (or "trident: FILE: <fmt...>" when
 * key is NULL), the one shape of a message about the sweep; returns -1. */
int tri_sweep_error(const tri_sweep *sw, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- rundir.c: the points and their run directories ----------------------- */

/* Makes every point (sw->points) and checks it before anything runs: its
 * config loads, no two share a run directory, its data files open and its
 * tokenizer exists (when check_data; points with the previous point's data
 * settings are not checked again), and an existing run directory was made
 * for the same settings; sets each point's state from its run directory.
 * Writes nothing. 0, or -1 after printing (the culprit, then the point). */
int tri_sweep_prepare(tri_sweep *sw, int check_data);

/* point.json of a point: its name, the sweep file, the base, its overrides,
 * values, params, flops_per_token and tokens_per_step (caller deletes). */
cJSON *tri_sweep_point_json(const tri_sweep *sw, const tri_sweep_point *p);

/* Whether p->dir/point.json was written for the same base and the same
 * overrides (in any order); when not, why[n] says how it differs. */
int tri_sweep_same_settings(const tri_sweep *sw, const tri_sweep_point *p, char *why, size_t n);

/* Makes the point's run directory and, for a point that has not started
 * (not TRI_POINT_RESUME), writes its point.json. 0, or -1 after printing. */
int tri_sweep_rundir_open(const tri_sweep *sw, const tri_sweep_point *p);

/* Writes p->dir/done, {"wall_s": <p->wall_s>}: the point succeeded. 0, or -1 after printing. */
int tri_sweep_rundir_done(const tri_sweep_point *p);

/* The run time p->dir/done recorded, or NAN when it cannot be read. */
double tri_sweep_done_wall_s(const tri_sweep_point *p);

/* ---- run.c: running the points -------------------------------------------- */

/* This program (sw->self) and tridentrun beside it (sw->runner), as
 * tridentrun finds trident. 0, or -1 after printing. */
int tri_sweep_find_programs(tri_sweep *sw);

/* When a point needs more than one rank, that tridentrun can be run. 0, or
 * -1 after printing. */
int tri_sweep_check_runner(const tri_sweep *sw);

/* The space tri_sweep_point_argv needs. */
#define TRI_SWEEP_ARGV_MAX (2 * TRI_SWEEP_MAX_SETS + 16)

/* The command line of a point into av[TRI_SWEEP_ARGV_MAX], NULL-terminated:
 * `[RUNNER --log-dir DIR/ranks --] SELF train BASE --set k=v ... [--threads N]
 * [--resume]`. The words point into sw, p, ranks_dir[TRI_PATH_MAX + 16] and
 * threads[16] (filled here). Returns the number of words. */
int tri_sweep_point_argv(const tri_sweep *sw, const tri_sweep_point *p, int resume, const char **av, char *ranks_dir,
                         char *threads);

/* Prints argv as one shell line: words of plain characters as they are,
 * others in single quotes. */
void tri_sweep_print_argv(FILE *f, const char *const *av);

/* What a sweep's run did. */
typedef struct tri_sweep_result {
    int n_run, n_skip, n_fail, n_pending; /* ran now, done before, failed now, not run */
    int signal;                           /* the SIGINT or SIGTERM that stopped it, or 0 */
    int failed;                           /* a point could not start or a summary was not written (printed) */
} tri_sweep_result;

/* Runs every point not done, in order, each to its end, printing a line
 * before and after each ("[i/n] name: ..."); a failed point's log tail goes
 * to stderr. SIGINT and SIGTERM are passed on to the running point and stop
 * the sweep after it. OUT/summary.jsonl is rewritten after each point and at
 * the end. Returns 0 with *r filled, or -1 after printing when OUT cannot be
 * made (nothing ran). */
int tri_sweep_run(tri_sweep *sw, tri_sweep_result *r);

/* ---- summary.c: the figures and the summary ------------------------------- */

/* A run's figures, from its metrics.jsonl (NAN: none). */
typedef struct tri_sweep_stats {
    int last_step; /* the highest step with a train loss (0: none) */
    double final_loss;
    double final_val, best_val;
    double step_ms, tokens_per_s, mfu; /* medians over the logged steps after the first */
} tri_sweep_stats;

/* Reads dir/metrics.jsonl into *s; lines that do not parse (a line cut by a
 * crash) are skipped, a missing file leaves every figure NAN. */
void tri_sweep_read_stats(const char *dir, tri_sweep_stats *s);

/* The summary line of a point (caller deletes): its name, run directory,
 * values, status, sizes, figures, layout and run time. */
cJSON *tri_sweep_summary_line(const tri_sweep_point *p);

/* Rewrites OUT/summary.jsonl atomically, one line per point. 0, or -1 after printing. */
int tri_sweep_write_summary(const tri_sweep *sw);

/* scripts/plot.py on OUT/summary.jsonl, PNGs into OUT; a failure is a warning. */
void tri_sweep_plot(const tri_sweep *sw);

#endif
