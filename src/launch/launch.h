/* The launch wing: tridentrun, the launcher users see (torchrun-like), built
 * on Open MPI's mpirun. src/cli/tridentrun.c parses the options into a
 * tri_launch_opts and calls in here.
 *
 *   tridentrun [--nproc-per-node N] [--hostfile FILE] [--log-dir DIR] [--tee]
 *              [--dry-run] [--max-restarts K] [--restart-backoff-s S]
 *              [--elastic] [--elastic-after K] [--grace-s S] [--mpirun PATH]
 *              [--mpirun-arg ARG]... -- COMMAND [ARGS...]
 *
 * What it does, in order:
 *  1. (placement.c) When COMMAND is `trident train CONFIG [--set k=v]...`, it
 *     loads CONFIG with the overrides (src/config/config.h) and checks
 *     tp*cp*pp*dp against the number of ranks before anything starts. Ranks per
 *     host: --nproc-per-node N on every host (a host file's slots=N below N is
 *     an error); else the host file's slots=N, filled in file order (tp*pp*dp
 *     ranks for the trainer, every slot for another COMMAND); else tp*pp*dp /
 *     hosts for the trainer and 1 per host for another COMMAND
 *     (tri_launch_place_ranks).
 *  2. (runner.c) It builds one mpirun command (printed by --dry-run with the
 *     rank map, dryrun.c): -np W, -H host:N,... for a host file (N: the ranks
 *     placed there, so the ranks of each host are consecutive),
 *     --allow-run-as-root as root, --oversubscribe when ranks per node exceed
 *     this machine's cores, --bind-to none when ranks are oversubscribed or use
 *     more than one thread, -x OMP_NUM_THREADS=max(1, cores/ranks per node)
 *     (the user's value wins) and -x OMP_WAIT_POLICY=PASSIVE (idle OpenMP
 *     workers sleep instead of spinning on a shared core).
 *  3. (supervisor.c) Each rank runs through `tridentrun --rank-exec`, a thin
 *     wrapper that forks COMMAND with its stdout and stderr going (through
 *     pipes) to DIR/rank_<r>.log, and ends the way COMMAND ended (same exit
 *     code, or the same signal), so mpirun sees COMMAND's fate. Rank 0's
 *     output is also shown on the console; with --tee every rank's is, each
 *     line prefixed "[rank r] ". The wrapper also writes DIR/rank_<r>.status
 *     (its pid and host while COMMAND runs, then "<time> exit <code>" or
 *     "<time> signal <n>", plus the time of COMMAND's first error line), and
 *     names DIR/rank_<r>.exit to COMMAND in TRIDENT_EXIT_RECORD: a trainer
 *     rank that ends the job itself (the watchdog, the heartbeat, an abort
 *     after an error) records its exit code and its one-line reason there
 *     before MPI_Abort (base/exitrec.h), which survives a teardown that kills
 *     the wrapper before it records the exit. mpirun's own messages go to stderr and to DIR/mpirun.log. A bare
 *     `trident` not on $PATH is taken from the directory of this tridentrun.
 *  4. (runner.c) When a rank fails, mpirun stops the others (Open MPI's
 *     default for a non-zero exit, a signal, MPI_Abort or an exit without
 *     MPI_Finalize). tridentrun names the rank that failed first: by the
 *     status files, the earliest of each failed rank's first error line and
 *     exit (mpirun's report when no status file shows a failure), and prints
 *     the last 20 lines of that rank's log. A rank that dies (a signal, or
 *     exit 3 or 124) is seen in the status files within ~10 ms and the local
 *     ranks are killed at once; mpirun gets odls_base_sigkill_timeout 0 (by
 *     the environment, unless set). With --max-restarts K it relaunches up to
 *     K times, appending --resume to COMMAND's arguments (unless present),
 *     except after a refusal (exit 2); failures in a burst back off
 *     (restart.c); --elastic drops a data-parallel replica when one rank slot
 *     keeps failing (the event handed to the relaunched trainer through
 *     log.dir/pending_events.jsonl: src/train/metrics.h). The exit code is
 *     the failing rank's: the code it recorded for itself, else its exit
 *     (128+signal for a signal), else mpirun's report (1 when unknown).
 *  5. (runner.c, sigfwd.c) The first SIGINT/SIGTERM/SIGHUP is passed to
 *     mpirun (which runs in its own process group, so a terminal's Ctrl-C
 *     reaches it only through us) as SIGUSR1, which mpirun forwards to every
 *     rank: the trainer saves a checkpoint and stops (mpirun would answer
 *     SIGTERM itself by killing the ranks a second later). A second signal
 *     goes to mpirun as it is, a hard stop. Ranks still running --grace-s
 *     seconds after the first signal (a rank stopped, wedged, or ignoring it)
 *     are SIGKILLed on this host, and mpirun is told to end the rest (and
 *     killed 10 s later if it does not). tridentrun exits 128+signal after
 *     mpirun has stopped the ranks. If tridentrun itself is killed, mpirun
 *     gets SIGTERM (PR_SET_PDEATHSIG).
 * Argument errors: one line "tridentrun: ...", exit 2 (TRI_EXIT_BAD_INPUT).
 *
 * Errors are printed through base/err.h (the "tridentrun: " prefix is the
 * program's). Functions that can fail return 0 or -1 after printing one line,
 * unless they say otherwise. Calls go one way: dryrun -> runner ->
 * supervisor -> placement, runner -> restart, and runner and supervisor ->
 * sigfwd. */
#ifndef TRI_LAUNCH_LAUNCH_H
#define TRI_LAUNCH_LAUNCH_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "base/exitrec.h"

struct tri_config;

/* ------------------------------------------------------------------------ */
/* The options (src/cli/tridentrun.c fills them from its option table). The
 * strings are borrowed (argv), never freed here.                            */

typedef struct tri_launch_opts {
    int nproc;                /* ranks on every host; 0: not given              */
    int max_per_host;         /* ranks a host without slots=N may run; 0: TRI_LAUNCH_MAX_PER_HOST */
    const char *hostfile;     /* NULL: this machine only                        */
    const char *log_dir;      /* rank r's log: <log_dir>/rank_<r>.log; not ""   */
    int tee;                  /* every rank's output on the console, prefixed   */
    int dry_run;              /* print the plan and the command, start nothing  */
    int max_restarts;         /* relaunches with --resume after a failure       */
    double grace_s;           /* after a stop request, SIGKILL the ranks then   */
    const char *mpirun;       /* the mpirun to run (searched on $PATH); not ""  */
    const char *const *extra; /* --mpirun-arg values, in order (n_extra)        */
    int n_extra;
    const char *const *cmd;   /* COMMAND and its arguments (cmd_argc >= 1)      */
    int cmd_argc;
    double backoff_s;         /* first delay of a relaunch in a burst (restart.c) */
    int elastic;              /* shrink dp after this many failures in a row of
                                 one rank slot; 0: never (--elastic)            */
} tri_launch_opts;

/* ------------------------------------------------------------------------ */
/* placement.c: options -> plan (hosts, ranks, layout, environment)          */

#define TRI_LAUNCH_MAX_HOSTS 4096
/* Most ranks on one host whose slots=N do not say otherwise (no host file,
 * or --nproc-per-node): 256, a rank per core of the largest CPU hosts and far
 * above the GPUs of any node; --max-ranks-per-host raises it. */
#define TRI_LAUNCH_MAX_PER_HOST 256

typedef struct tri_launch_plan {
    char **hosts; /* (nhosts); "localhost" when no host file                  */
    int nhosts;
    int *slots;       /* (nhosts) the host file's slots=N; 0: not given       */
    int *lines;       /* (nhosts) the host's line in the host file            */
    int *ranks;       /* (nhosts) ranks placed on each host; the ranks of
                         host h follow those of hosts 0..h-1                  */
    int nproc, world; /* most ranks on one host, ranks in all                 */
    int have_layout;  /* tp/pp/dp known (COMMAND is `trident train|bench`)    */
    int tp, pp, dp;
    int cp;               /* context-parallel ranks (1 without)               */
    int cores;            /* usable cores on this machine                     */
    int threads;          /* OMP_NUM_THREADS per rank                         */
    int user_threads;     /* 1 when the user set OMP_NUM_THREADS              */
    int user_wait_policy; /* 1 when the user set OMP_WAIT_POLICY              */
    int as_root;          /* running as root (mpirun needs to be told)        */
    int oversub, bind_none;
    char log_dir[PATH_MAX]; /* absolute                                       */
    char self[PATH_MAX];    /* this executable (the rank wrapper)             */
    char *cmd0;             /* the program to run (COMMAND[0], resolved)      */
    struct tri_config *train_cfg; /* `trident train CONFIG`: the loaded config; else NULL */
    int dp_override;        /* elastic shrink: COMMAND gets --set parallel.dp=N; 0: none */
} tri_launch_plan;

/* The whole plan for o: the hosts (o->hostfile, else "localhost"), the
 * trainer's layout when COMMAND is `trident train|bench CONFIG` (CONFIG
 * loaded with its --set overrides), the ranks placed on the hosts, threads
 * and binding for this machine, the absolute log directory (created, unless
 * o->dry_run), this executable, and COMMAND[0] as the ranks will run it.
 * On failure the plan may be partly filled: tri_launch_plan_free it. */
int tri_launch_plan_make(tri_launch_plan *p, const tri_launch_opts *o);

/* Frees what the plan owns; NULL-safe; zeroes *p. */
void tri_launch_plan_free(tri_launch_plan *p);

/* Reads a host file into p->hosts, p->slots, p->lines, p->nhosts (p zeroed
 * before): per line a host name and optionally slots=N ('#' starts a
 * comment), as in Open MPI's host files; anything else on a line is an error
 * (tridentrun places the ranks itself and passes mpirun an explicit -H list,
 * so a key it does not honour must not be ignored silently). A host listed
 * twice, more than TRI_LAUNCH_MAX_HOSTS hosts, or none at all are errors.
 * Errors name the file and line ("hosts:2: host 'nodeA' is listed twice"). */
int tri_launch_hostfile_read(tri_launch_plan *p, const char *path);

/* How many ranks each host runs (p->ranks, allocated by the caller for
 * p->nhosts), the world, and the most on one host (p->nproc), from
 * p->slots and, when p->have_layout, tp x pp x dp:
 *  - o->nproc N > 0: N ranks on every host (torchrun's meaning); a host
 *    whose slots are fewer than N is an error.
 *  - otherwise, when every host has slots=N: the ranks fill the hosts in
 *    file order up to their slots (Open MPI's default by-slot placement):
 *    all the slots for a command that is not the trainer (as mpirun without
 *    -np), tp x pp x dp ranks for the trainer (an error if they exceed the
 *    slots).
 *  - otherwise (no slots anywhere): tp x pp x dp spread evenly over the hosts
 *    for the trainer, 1 rank per host for any other command.
 * Some hosts with slots=N and some without is an error (ambiguous), and so
 * is a world other than tp x pp x dp for the trainer, and so are more ranks
 * on a host than its slots=N or, without them, than o->max_per_host
 * (TRI_LAUNCH_MAX_PER_HOST when 0), or more than TRI_CONFIG_MAX_WORLD (2^20)
 * ranks in all: refused before anything starts. Only
 * o->nproc, o->max_per_host and o->hostfile (named in the messages) are read. */
int tri_launch_place_ranks(tri_launch_plan *p, const tri_launch_opts *o);

/* The host that runs rank r ("?" past the world). */
const char *tri_launch_host_of(const tri_launch_plan *p, int r);

/* A decimal integer in [min, max] that is all of s (after strtol's leading
 * blanks and sign); 0, or -1 on anything else, *out untouched (nothing
 * printed): host files' slots=N, the environment. */
int tri_launch_parse_int(const char *s, long min, long max, long *out);

/* ------------------------------------------------------------------------ */
/* runner.c: the mpirun command, running it, naming the failing rank         */

/* A NULL-terminated argument vector that owns its strings. */
typedef struct tri_launch_argv {
    char **v; /* (n + 1), v[n] == NULL */
    int n, cap;
} tri_launch_argv;

/* The mpirun command of attempt `attempt` (0: the first run): mpirun's
 * options (see step 2 above), o->extra, then this executable as the rank
 * wrapper (`--rank-exec --log-dir DIR [--tee] [--attempt N] --`) and COMMAND
 * with p->cmd0 in front; attempts after the first append --resume unless
 * COMMAND has it. Reads nothing but o and p. *a is overwritten:
 * tri_launch_argv_free it. */
void tri_launch_command_build(tri_launch_argv *a, const tri_launch_opts *o, const tri_launch_plan *p, int attempt);

/* Frees the strings and the vector; NULL-safe; zeroes *a. */
void tri_launch_argv_free(tri_launch_argv *a);

/* How a rank failed, as mpirun's report or the status files say. */
typedef struct tri_launch_failure {
    int rank;     /* -1: none found                                          */
    int code;     /* its exit code; -1: unknown or it was a signal           */
    int signo;    /* the signal that ended it; -1: none or unknown           */
    int improper; /* it exited 0 without finalising MPI (code is then 0)     */
    int torn;     /* it wrote the first error line, then the teardown ended
                     it (code, signo: another rank's end, or unknown)         */
    int recorded; /* code is what the rank recorded for itself before it
                     ended (base/exitrec.h), not its exit as seen            */
    char reason[sizeof(((tri_exit_rec *)0)->reason)]; /* the record's line; "" */
} tri_launch_failure;

/* The first failing rank as Open MPI 4 or 5 reports it in mpirun's stderr
 * (report: NUL-ended, may be NULL): MPI_ABORT with its errorcode, a process
 * that "exited on signal", "Process name: [...] ... Exit code: N" (a
 * non-zero exit), or a process "exiting improperly". Line breaks and runs of
 * blanks count as one space (mpirun wraps its messages). Returns 1 when found
 * (*f filled), else 0 (f->rank == -1). */
int tri_launch_report_parse(const char *report, tri_launch_failure *f);

/* The last `lines` lines of a rank's log at path, of its last attempt only
 * (after the last "----- tridentrun: attempt N -----" line), each as
 * "  | <line>\n", into *out (malloc'd; NULL unless TRI_TAIL_OK). */
enum {
    TRI_TAIL_OK,       /* *out holds the lines                               */
    TRI_TAIL_NO_LOG,   /* path cannot be opened (errno says why)             */
    TRI_TAIL_EMPTY,    /* the file is empty                                  */
    TRI_TAIL_NO_OUTPUT /* nothing after the last attempt's header            */
};
int tri_launch_log_tail(const char *path, int lines, char **out);

/* Runs the job: installs the signal forwarding (sigfwd.c), then for each
 * attempt (1 + o->max_restarts at most) runs mpirun with the ranks under
 * the wrapper, relaying its output (its stderr also to DIR/mpirun.log), and
 * on a failure names the rank that failed first with its log's tail.
 * Returns tridentrun's exit code: 0, the failing rank's code (128+signal
 * for a signal; 1 when unknown), 128+signal when stopped by a signal, or
 * 127 (TRI_EXIT_EXEC) when mpirun cannot be started. */
int tri_launch_run(const tri_launch_opts *o, const tri_launch_plan *p);

/* ------------------------------------------------------------------------ */
/* restart.c: the restart policy (pure functions)                           */

/* Failures closer together than this are a burst (seconds). */
#define TRI_RESTART_BURST_S 10.0
/* The longest wait before a relaunch (seconds). */
#define TRI_RESTART_MAX_BACKOFF_S 60.0

typedef struct tri_restart_state {
    int n_failures; /* failures so far                                     */
    double t_last;  /* when the last one happened (unix time)              */
    int burst;      /* failures in the current burst after its first       */
    int last_rank;  /* the rank that failed last (-1: unknown)             */
    int same;       /* failures in a row of that rank                      */
} tri_restart_state;

/* Whether a failing rank's exit code is a deterministic refusal (exit 2,
 * TRI_EXIT_BAD_INPUT: bad config, bad data, a damaged checkpoint) that a
 * relaunch would only repeat. */
int tri_restart_is_refusal(int code);

/* The delay before relaunching after a failure at t_fail: 0 when it came
 * TRI_RESTART_BURST_S or more after the previous failure (or is the first);
 * otherwise base_s, doubling with each further failure of the burst, at most
 * TRI_RESTART_MAX_BACKOFF_S (base_s <= 0: never wait). Updates *s. */
double tri_restart_backoff(tri_restart_state *s, double t_fail, double base_s);

/* Records that rank failed (-1: unknown); returns how many failures in a row
 * that rank slot has had (0 for an unknown rank). Zero *s and set
 * last_rank = -1 to start. */
int tri_restart_same_place(tri_restart_state *s, int rank);

/* The data parallel size after dropping one replica: the largest dp' < dp
 * such that global_batch divides by micro_batch x dp' (the global batch is
 * kept, each rank runs more micro-batches); 0 when there is none (dp 1). */
int tri_restart_shrunk_dp(int dp, int global_batch, int micro_batch);

/* ------------------------------------------------------------------------ */
/* dryrun.c: what --dry-run prints                                          */

/* Prints to f the rank map (rank, host, tp/dp/pp coordinates, log), for
 * `trident train` each rank's stage, layers and memory (a config the
 * trainer would refuse gets a line saying so, and its reason on stderr),
 * the mpirun command, and with o->max_restarts the command of a restart.
 * Returns 0, or -1 when the trainer would refuse the config (tridentrun then
 * exits 2, as the real run would). */
int tri_launch_dry_run(FILE *f, const tri_launch_opts *o, const tri_launch_plan *p);

/* Prints the arguments of a, separated by spaces and ended by a newline,
 * each quoted so that a POSIX shell reads it back unchanged. */
void tri_launch_print_command(FILE *f, const tri_launch_argv *a);

/* ------------------------------------------------------------------------ */
/* supervisor.c: the rank wrapper (`tridentrun --rank-exec`) and the rank
 * status files                                                             */

typedef struct tri_rank_exec_opts {
    const char *log_dir;    /* DIR (exists)                                    */
    int tee;                /* every rank on the console, "[rank r] " prefixed */
    int attempt;            /* 0: the first (truncate the log), else append    */
    char *const *cmd;       /* COMMAND and its arguments, NULL-terminated      */
} tri_rank_exec_opts;

/* The rank wrapper, run by mpirun in each rank's place. It takes its rank
 * from the environment (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK,
 * SLURM_PROCID), forks COMMAND with stdout and stderr on two pipes, copies
 * both to DIR/rank_<r>.log (and to its own stdout, the console, for rank 0,
 * or for every rank with tee), notes when COMMAND first writes an error line,
 * forwards SIGINT/SIGTERM/SIGHUP/SIGUSR1 to COMMAND, records all that in
 * DIR/rank_<r>.status, and ends the way COMMAND ended: returns its exit code,
 * or raises the signal that killed it (without a core file). COMMAND stays in
 * the wrapper's process group, so mpirun's teardown signals reach both, and
 * dies with the wrapper (PR_SET_PDEATHSIG). Returns 2 (TRI_EXIT_BAD_INPUT)
 * after one line when it cannot start COMMAND (no rank, a log it cannot
 * open); COMMAND that cannot be executed exits 127 (TRI_EXIT_EXEC). */
int tri_launch_rank_exec(const tri_rank_exec_opts *o);

/* DIR/rank_<r>.status, one or two lines:
 *   "<unix time> running <wrapper pid> <host>"   while COMMAND runs, then
 *   "<unix time> exit <code>" or "<unix time> signal <n>" when it has ended;
 *   "<unix time> error"   (second line) when COMMAND wrote its first error
 *                          line (tri_launch_err_scan).
 * The launcher blames the rank whose failure came first (the earlier of its
 * first error line and its end; the time of its exit record when neither is
 * known, the wrapper killed first), reports the code the rank recorded for
 * itself before its exit as seen, and kills the ranks on its own host by the
 * wrapper's pid (each wrapper leads its rank's process group) when they
 * outlast --grace-s. Written to a temporary name and renamed, so a reader
 * never sees half a line. */
typedef struct tri_rank_status {
    enum { TRI_RANK_NONE, TRI_RANK_RUNNING, TRI_RANK_EXIT, TRI_RANK_SIGNAL } state;
    double t;           /* when it entered that state (unix time)            */
    long value;         /* running: the wrapper's pid; exit: code; signal: n */
    char host[256];     /* running: the wrapper's host                       */
    double first_error; /* when the rank wrote its first error line; 0: never */
    tri_exit_rec rec;   /* DIR/rank_<r>.exit, the end COMMAND recorded for
                           itself (base/exitrec.h); rec.code -1: none        */
} tri_rank_status;

/* DIR/rank_<r>.exit (malloc'd): where the wrapper tells COMMAND to record
 * its own end (TRIDENT_EXIT_RECORD, base/exitrec.h). The wrapper removes a
 * record left by an earlier attempt before it starts COMMAND. */
char *tri_rank_exit_record_path(const char *dir, int rank);

/* Writes rank's status file in dir: state RUNNING (this process's pid and
 * host, at time `started`), EXIT or SIGNAL (value, at the time of the call),
 * plus the error line when first_error > 0. Best effort: a file that cannot
 * be written is left as it was (nothing printed). */
void tri_rank_status_write(const char *dir, int rank, int state, double started, int value, double first_error);

/* Reads rank's status file in dir into *st; st->state is TRI_RANK_NONE when
 * it is missing or unreadable. Also reads the rank's exit record into
 * st->rec (rec.code -1 when there is none), whatever the status says. */
void tri_rank_status_read(const char *dir, int rank, tri_rank_status *st);

/* Finds the start of each line of COMMAND's stderr, across reads, to tell an
 * error line from the rest: a line starting "trident: " or "tridentrun: "
 * that is not a note or a warning ("trident: note:", "trident: warning:",
 * base/log.h). Zero it to start. */
typedef struct tri_err_scan {
    char head[24]; /* the current line's first bytes     */
    size_t n;
    int decided;   /* the current line is classified     */
} tri_err_scan;

/* Feeds n bytes of stderr; returns 1 when an error line started in them. */
int tri_err_scan_put(tri_err_scan *e, const char *data, size_t n);

/* ------------------------------------------------------------------------ */
/* sigfwd.c: the signal flags and the handler shared by the runner and the
 * rank wrapper (a handler cannot be given a context, so these are the only
 * writable file-scope state of the wing).                                  */

/* Installs the handler for SIGINT, SIGTERM, SIGHUP and SIGUSR1 (no
 * SA_RESTART: poll() returns EINTR) and ignores SIGPIPE. Each signal is
 * counted and passed on to the child (tri_launch_signals_child). graceful
 * (the launcher): mpirun answers SIGTERM by killing the job (SIGKILL one
 * second after SIGTERM), too soon for the ranks to save a checkpoint, but it
 * forwards SIGUSR1 to them; so the first stop request goes to mpirun as
 * SIGUSR1 (the trainer saves and stops), a second one as it is. */
void tri_launch_signals_install(int graceful);

/* Sets the child that signals are passed on to (0: none); a signal that
 * came before the child was known is passed on now. */
void tri_launch_signals_child(pid_t pid);

/* The last signal received (0: none yet). */
int tri_launch_signal_got(void);

/* How many signals have been received. */
int tri_launch_stop_requests(void);

#endif
