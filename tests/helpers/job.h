/* A job under test: tridentrun and everything under it (mpirun, the rank
 * wrappers, the ranks' commands), started in its own process group with
 * capped memory and CPU time, found by pid through /proc and the wrappers'
 * status files, waited for under deadlines and, at the end or on a failed
 * assertion, continued and killed by pid so that nothing is left behind.
 * Used by the fault tests that stop, signal or stall ranks
 * (tests/fault/test_hang.c). */
#ifndef TT_JOB_H
#define TT_JOB_H

#include <criterion/criterion.h>
#include <sys/types.h>

#define TT_JOB_MAX_RANKS 4

typedef struct tt_job {
    char dir[256]; /* the test's directory (logs under dir/ranks) */
    int world;
    pid_t launcher;                                         /* tridentrun, leader of its process group */
    pid_t mpirun;                                           /* 0 until known */
    pid_t wrapper[TT_JOB_MAX_RANKS], cmd[TT_JOB_MAX_RANKS]; /* 0 until known */
    double t_end;                                           /* when the launcher ended */
} tt_job;

/* Fails the test after killing the job. */
#define TT_JOB_ASSERT(j, cond, ...)      \
    do {                                 \
        if (!(cond)) {                   \
            tt_job_kill(j);              \
            cr_assert_fail(__VA_ARGS__); \
        }                                \
    } while (0)

/* The monotonic clock, in seconds. */
double tt_now_s(void);
/* Notes every pid of the job that can be found now. */
void tt_job_scan(tt_job *j);
/* Continues and kills every process of the job (best effort, by pid and
 * process group: ranks lead their own groups under mpirun). */
void tt_job_kill(tt_job *j);
/* Starts argv (tridentrun ...) in dir, in its own process group, output to
 * dir/out.txt, each process capped at 4 GiB of address space and 60 s of CPU. */
void tt_job_start(tt_job *j, const char *dir, int world, char *const argv[]);
/* Waits until every rank's command runs and `ready` (a file under dir, may
 * be NULL) contains `needle`; at most `limit` seconds. */
void tt_job_wait_running(tt_job *j, const char *ready, const char *needle, double limit);
/* Waits at most `limit` seconds for tridentrun to end; returns its exit code
 * (128 + signal). On overrun the job is killed and the test fails. */
int tt_job_wait(tt_job *j, double limit, const char *what);
/* After the job ended: every process of it must be gone within a few
 * seconds (then everything is killed anyway). */
void tt_job_expect_all_gone(tt_job *j);
/* What the job printed (dir/out.txt; malloc'd, "" when none). */
char *tt_job_output(const tt_job *j);

/* Stops the command of `rank` (SIGSTOP), waits at most `limit` seconds for
 * the job to end (tt_job_wait), then continues the command (SIGCONT).
 * Returns the job's exit code; *took the time from the stop to the job's
 * end. */
int tt_job_stop_rank(tt_job *j, int rank, double limit, const char *what, double *took);

/* Sends `sig` to tridentrun and waits at most `limit` seconds for the job
 * to end (tt_job_wait). Returns the job's exit code; *took the time from
 * the signal to the job's end. */
int tt_job_signal(tt_job *j, int sig, double limit, const char *what, double *took);

/* The line of the job's output `out` that holds `head`, from head to its end
 * (out is cut there); fails the test, naming `what`, when there is none. */
char *tt_job_line(tt_job *j, char *out, const char *head, const char *what);

/* The end of a test's job: with expect_gone, every process of it must be
 * gone within a few seconds (tt_job_expect_all_gone); then everything is
 * killed anyway, and the test's directory dir removed and freed. */
void tt_job_end(tt_job *j, char *dir, int expect_gone);

/* The stand-in mpirun's script (below): `fake_mpirun -np N ... --rank-exec
 * CMD...` starts CMD N times with OMPI_COMM_WORLD_RANK 0..N-1, waits for them,
 * prints $FAKE_REPORT (printf %b, when set) to stderr and exits $FAKE_EXIT
 * (1 when unset). */
extern const char tt_fake_mpirun[];
/* Writes text to path as an executable file (mode 0755); asserts. */
void tt_write_exec(const char *path, const char *text);

/* A stand-in for mpirun (tridentrun --mpirun dir/fake_mpirun) that starts the
 * `world` rank wrappers itself, then prints `report` (printf %b) to stderr
 * and exits with `code`: the report of a real mpirun names whichever
 * aborting rank it heard from first, which a test cannot choose. Starts
 * tridentrun with it in dir, each rank running /bin/sh -c script with its
 * OMPI_COMM_WORLD_RANK (the report and code reach it through FAKE_REPORT and
 * FAKE_EXIT in this process's environment). */
void tt_job_start_fake(tt_job *j, const char *dir, int world, const char *report, const char *code, const char *script);

#endif
