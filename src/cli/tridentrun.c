/* tridentrun: the launcher users see (torchrun-like), built on Open MPI's
 * mpirun. This file reads the options (one table: parser and --help); the
 * launch wing does the work (src/launch/launch.h says what, in order).
 *
 *   tridentrun [options] -- COMMAND [ARGS...]
 *   tridentrun --rank-exec --log-dir DIR [--tee] [--attempt N] -- COMMAND...
 *       (the rank wrapper mpirun runs in each rank's place; internal)
 *
 * Exit code: 0, 2 (TRI_EXIT_BAD_INPUT) for bad arguments with one line
 * "tridentrun: ...", else the failing rank's (src/launch/runner.c). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/opt.h"
#include "launch/launch.h"

#define RANK_EXEC_ARGS "--log-dir DIR [--tee] [--attempt N] -- COMMAND..."

/* `tridentrun --rank-exec ...` (argv[0] is "--rank-exec"): any error ends
 * with the usage line (after the table's own line for a bad option);
 * COMMAND must follow "--". */
static int rank_exec(int argc, char **argv) {
    tri_rank_exec_opts o = {0};
    tri_opt_list cmd = {0};
    const tri_opt opts[] = {
        {"--log-dir", TRI_OPT_STR, &o.log_dir, "DIR", .help = "where rank_<r>.log and rank_<r>.status go"},
        {"--tee", TRI_OPT_FLAG, &o.tee, .help = "show this rank's output on the console, as \"[rank r] ...\""},
        {"--attempt", TRI_OPT_INT, &o.attempt, "N", 0, INT_MAX, .help = "the attempt (0: the first); later ones append"},
    };
    tri_cmd_spec spec = {.cmd = "tridentrun --rank-exec",
                         .usage = RANK_EXEC_ARGS,
                         .about = "the rank wrapper that tridentrun has mpirun run in each rank's place\n",
                         .opts = opts,
                         .n_opts = TRI_OPT_N(opts),
                         .pos = &cmd,
                         .max_pos = -1,
                         .pos_name = "COMMAND",
                         .pos_ends_options = 1};
    int rc = tri_opt_parse(&spec, argc, argv);
    if (rc == TRI_OPT_HELP) return TRI_EXIT_OK;
    /* COMMAND is cmd.v[0] == argv[k]: argv[k - 1] must be "--" */
    int k = 1;
    while (rc == TRI_OPT_GO && cmd.n > 0 && k < argc && argv[k] != cmd.v[0]) k++;
    if (rc != TRI_OPT_GO || o.log_dir == NULL || cmd.n == 0 || k >= argc || strcmp(argv[k - 1], "--") != 0) {
        tri_opt_list_free(&cmd);
        tri_error("--rank-exec: usage: --rank-exec " RANK_EXEC_ARGS);
        return TRI_EXIT_BAD_INPUT;
    }
    o.cmd = argv + k;
    tri_opt_list_free(&cmd);
    return tri_launch_rank_exec(&o);
}

/* The values the table takes as text, checked in the launcher's wording
 * (nproc, grace: NULL when not given). 0 or -1 after one line. */
static int check_values(tri_launch_opts *o, const char *nproc, const char *grace) {
    if (o->max_per_host == 0) o->max_per_host = TRI_LAUNCH_MAX_PER_HOST;
    if (nproc) {
        long n;
        if (tri_launch_parse_int(nproc, 1, 1 << 20, &n) != 0)
            return tri_error("--nproc-per-node: expected an integer >= 1, got '%s'", nproc);
        o->nproc = (int)n;
    }
    if (grace) {
        char *end = NULL;
        errno = 0;
        double g = strtod(grace, &end);
        if (*grace == '\0' || *end != '\0' || errno != 0 || !(g >= 0 && g <= 1e6))
            return tri_error("--grace-s: expected seconds in [0, 1000000], got '%s'", grace);
        o->grace_s = g;
    }
    if (o->log_dir[0] == '\0') return tri_error("--log-dir: expected a directory, got ''");
    if (o->mpirun[0] == '\0') return tri_error("--mpirun: expected a program, got ''");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--rank-exec")) return rank_exec(argc - 1, argv + 1);

    tri_launch_opts o = {.log_dir = "logs", .mpirun = "mpirun", .grace_s = 60, .backoff_s = 1, .elastic = 2};
    const char *nproc = NULL, *grace = NULL, *backoff = NULL;
    int elastic = 0;
    tri_opt_list extra = {0}, cmd = {0};
    const tri_opt opts[] = {
        {"--nproc-per-node", TRI_OPT_STR, &nproc, "N",
         .help = "ranks on every host (default: the hostfile's slots, else\n"
                 "tp*cp*pp*dp / hosts for `trident train`, else 1)"},
        {"--hostfile", TRI_OPT_STR, &o.hostfile, "FILE",
         .help = "one host per line, optionally \"slots=N\" ('#' comments); without\n"
                 "--nproc-per-node the ranks fill the slots in order; default: this machine"},
        {"--log-dir", TRI_OPT_STR, &o.log_dir, "DIR",
         .help = "rank r's stdout+stderr go to DIR/rank_<r>.log (default: logs)"},
        {"--tee", TRI_OPT_FLAG, &o.tee,
         .help = "show every rank's output on the console, as \"[rank r] ...\"\n(default: rank 0's only)"},
        {"--max-ranks-per-host", TRI_OPT_INT, &o.max_per_host, "N", 1, 1 << 20,
         .help = "most ranks on a host without slots=N (default 256); more is\nrefused before anything starts"},
        {"--dry-run", TRI_OPT_FLAG, &o.dry_run, .help = "print the rank map and the mpirun command, start nothing"},
        {"--max-restarts", TRI_OPT_INT, &o.max_restarts, "K", 0, 1000,
         .help = "after a failure, relaunch up to K times with --resume (default 0)"},
        {"--restart-backoff-s", TRI_OPT_STR, &backoff, "S",
         .help = "a relaunch less than 10 s after the previous failure waits S s,\n"
                 "doubling within a burst, at most 60 s; 0: never wait (default 1)"},
        {"--elastic", TRI_OPT_FLAG, &elastic,
         .help = "with --max-restarts: when one rank slot fails --elastic-after\n"
                 "relaunches in a row, relaunch without it at a smaller parallel.dp\n"
                 "(the global batch kept by more micro-batches per rank)"},
        {"--elastic-after", TRI_OPT_INT, &o.elastic, "K", 1, 1000,
         .help = "failures in a row of one rank slot before --elastic drops it (default 2)"},
        {"--grace-s", TRI_OPT_STR, &grace, "S",
         .help = "after SIGINT/SIGTERM, give the ranks S seconds to save and stop,\n"
                 "then kill them (SIGKILL) (default 60)"},
        {"--mpirun", TRI_OPT_STR, &o.mpirun, "PATH", .help = "the mpirun to use (default: mpirun on PATH)"},
        {"--mpirun-arg", TRI_OPT_LIST, &extra, "ARG",
         .help = "pass ARG to mpirun as is (repeatable), e.g.\n"
                 "--mpirun-arg=--mca --mpirun-arg=btl_vader_single_copy_mechanism\n"
                 "--mpirun-arg=none  (containers that forbid cross-process reads)"},
    };
    tri_cmd_spec spec = {
        .cmd = "tridentrun",
        .usage = "[options] -- COMMAND [ARGS...]",
        .about = "  e.g. tridentrun --nproc-per-node 4 -- trident train configs/x.json --set parallel.tp=2\n"
                 "options:\n",
        .footer = "  -h, --help          this text\n"
                  "Exit code: 0 on success, 2 for bad arguments, else the failing rank's code.\n",
        .opts = opts,
        .n_opts = TRI_OPT_N(opts),
        .pos = &cmd,
        .max_pos = -1,
        .pos_name = "COMMAND",
        .pos_ends_options = 1,
    };
    int rc = tri_opt_parse(&spec, argc, argv);
    if (rc == TRI_OPT_GO) rc = check_values(&o, nproc, grace);
    if (rc == TRI_OPT_GO && backoff) {
        char *end = NULL;
        errno = 0;
        double b = strtod(backoff, &end);
        if (*backoff == '\0' || *end != '\0' || errno != 0 || !(b >= 0 && b <= 3600))
            rc = tri_error("--restart-backoff-s: expected seconds in [0, 3600], got '%s'", backoff);
        else
            o.backoff_s = b;
    }
    if (!elastic) o.elastic = 0;
    if (rc == TRI_OPT_GO && elastic && o.max_restarts == 0)
        rc = tri_error("--elastic: needs --max-restarts K (a shrink is a relaunch)");
    if (rc == TRI_OPT_GO && cmd.n == 0)
        rc = tri_error("missing COMMAND after the options (e.g. -- trident train CONFIG)");
    if (rc != TRI_OPT_GO) {
        tri_opt_list_free(&extra);
        tri_opt_list_free(&cmd);
        return tri_opt_exit(rc);
    }
    o.extra = extra.v;
    o.n_extra = extra.n;
    o.cmd = cmd.v;
    o.cmd_argc = cmd.n;

    tri_launch_plan p;
    rc = tri_launch_plan_make(&p, &o) != 0 ? TRI_EXIT_BAD_INPUT : TRI_EXIT_OK;
    if (rc == TRI_EXIT_OK && o.dry_run)
        rc = tri_launch_dry_run(stdout, &o, &p) != 0 ? TRI_EXIT_BAD_INPUT : TRI_EXIT_OK;
    else if (rc == TRI_EXIT_OK)
        rc = tri_launch_run(&o, &p);
    tri_launch_plan_free(&p);
    tri_opt_list_free(&extra);
    tri_opt_list_free(&cmd);
    return rc;
}
