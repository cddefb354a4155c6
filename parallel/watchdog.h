/* The watchdog of every communication wait: a deadline, a polite way to poll
 * until it, and the one-line report when it passes.
 *
 * A transport (parallel/comm_mpi.c) issues each collective in its
 * non-blocking form and completes it with tri_wd_wait, which polls the
 * transport's "is it done?" until the group's timeout. Past the deadline the
 * transport prints the report (tri_wd_report: rank, step, group, operation,
 * bytes, the peers it waits for) and aborts the job: a rank whose peer is
 * stopped, wedged or partitioned away must not wait forever. The report also
 * records exit code 124 and its line where tridentrun reads them
 * (base/exitrec.h), before the abort: the code survives a teardown that
 * kills the rank's wrapper first.
 *
 * Polling backs off as the wait grows (tri_wd_pause_ns): back-to-back polls
 * for the first microseconds (latency of a normal collective is untouched),
 * then sched_yield (a rank sharing a core with its peer gives way), then
 * short sleeps that grow with the time already waited (a rank waiting for a
 * stalled peer uses a fraction of a percent of a core, not all of it).
 *
 * Pure logic, no MPI and no global state: unit-tested in tests/parallel/test_watchdog.c.
 */
#ifndef TRI_WATCHDOG_H
#define TRI_WATCHDOG_H

#include <stddef.h>

#include "base/exit.h"

/* parallel.timeout_s's default, also the deadline of a tri_dist that was
 * never told otherwise (tools such as tests/tools/mpi_probe.c). */
#define TRI_WD_DEFAULT_TIMEOUT_S 600.0

struct tri_hb;

/* Where the caller is, for the report: set by the trainer at each phase
 * (tri_dist_progress), read by the transport only when a wait expires and
 * by the progress heartbeat's thread (parallel/heartbeat.h) at every beat. */
typedef struct tri_progress {
    long step;         /* the step being run (1-based); 0: before the first */
    const char *phase; /* static text: "set-up", "train", "eval", "save"; may be NULL */
    char action[96];   /* the pipeline action waited for, e.g. "recv-act mb 3 chunk 0
                          from stage 0"; "" outside the pipeline's p2p waits */
    struct tri_hb *hb; /* the progress heartbeat (parallel/heartbeat.h); NULL: none */
} tri_progress;

/* A clock that counts only the time its owner ran. Polled often (a waiting
 * rank polls at least every few milliseconds), it sees a whole-process stop
 * (SIGSTOP, a Slurm suspend, a paused VM, a debugger) as a gap between two
 * polls far larger than any poll interval, and does not count the gap: a job
 * whose ranks were all stopped for an hour resumes with its deadlines where
 * they were. A rank waiting for a stopped peer keeps polling, so its time
 * counts and the deadline passes as before. */
typedef struct tri_wd_clock {
    double last;      /* the raw time of the last tick                 */
    double run;       /* the time counted so far                       */
    double paused;    /* the gaps not counted                          */
    double max_gap_s; /* a gap longer than this is a stop, not waiting */
} tri_wd_clock;

/* A gap between two polls longer than this is a stop of the whole process
 * (a waiting rank polls every millisecond at most; a rank descheduled on a
 * loaded host still runs several times a second). */
#define TRI_WD_PAUSE_GAP_S 1.0

/* Starts at raw time `now` (e.g. tri_now_s()) with run = 0. */
void tri_wd_clock_start(tri_wd_clock *k, double now, double max_gap_s);
/* Advances to raw time `now`; returns the running time counted since the
 * start (gaps above max_gap_s, and a clock going backwards, count 0). */
double tri_wd_clock_tick(tri_wd_clock *k, double now);

/* How to pause between two polls, by the time waited so far. */
typedef struct tri_wd_policy {
    double spin_s;      /* below: poll again at once                      */
    double yield_s;     /* below: sched_yield between polls               */
    double sleep_frac;  /* beyond: sleep this fraction of the time waited, */
    double min_sleep_s; /*   at least this ...                             */
    double max_sleep_s; /*   and at most this                              */
} tri_wd_policy;

/* 50 us of spinning, yielding up to 50 ms, then sleeps of 1/1000 of the
 * wait so far between 20 us and 1 ms: a wait that has lasted t seconds is
 * lengthened by at most t/1000 per poll the transport needs once the peer
 * arrives. */
extern const tri_wd_policy tri_wd_default_policy;

/* What to do before the next poll after `elapsed_s` of waiting:
 * 0: poll at once; -1: sched_yield; > 0: sleep that many nanoseconds. */
long tri_wd_pause_ns(const tri_wd_policy *p, double elapsed_s);

/* Has a wait of `elapsed_s` passed `timeout_s`? Never when timeout_s <= 0
 * (no deadline). */
int tri_wd_expired(double timeout_s, double elapsed_s);

/* Polls done(ctx) until it returns non-zero, pausing as the policy says
 * (NULL: the default). Returns 0 when done, or -1 once timeout_s (<= 0: no
 * deadline) has passed without it (done is called at least once). *waited_s
 * (may be NULL) gets the time spent, counted on a tri_wd_clock: a stop of
 * the whole process during the wait (every rank suspended) is not counted. */
int tri_wd_wait(double timeout_s, const tri_wd_policy *p, int (*done)(void *ctx), void *ctx, double *waited_s);

/* A wait that expired, as the transport knows it. */
typedef struct tri_wd_site {
    int world_rank;               /* this rank                                  */
    const tri_progress *progress; /* may be NULL: "outside the training loop"   */
    const char *group;            /* "tp", "dp", "pp", "emb", "world"; may be NULL */
    const char *op;               /* "all-reduce", "receive", ...               */
    size_t bytes;                 /* payload of the operation                   */
    int peer;                     /* p2p: the peer's world rank; -1: a collective */
    int tag;                      /* p2p only                                   */
    const int *members;           /* collective: the group's world ranks (n_members) */
    int n_members;
    double waited_s, timeout_s;
} tri_wd_site;

/* The report, one line without the trailing newline, e.g.
 *   trident: rank 0: watchdog: step 7 (train): all-reduce over dp of 8 bytes has
 *   waited 3.0 s (parallel.timeout_s = 3): waiting for world rank 2 (dp = world
 *   ranks 0,2); aborting the job
 * Long member lists are cut after 16 ranks. Returns buf. */
char *tri_wd_describe(char *buf, size_t len, const tri_wd_site *s);
/* Prints the same line through base/err.h ("trident: rank R: ..."), then
 * records it with exit code TRI_EXIT_TIMEOUT as this process's end for its
 * launcher (base/exitrec.h; nothing outside tridentrun): the caller ends the
 * job next. */
void tri_wd_report(const tri_wd_site *s);

/* The progress heartbeat (parallel/heartbeat.h) named a peer while this rank
 * waited in `op` over `group`: the one line both transports print before
 * they end the job, e.g.
 *   trident: rank 0: heartbeat: step 465 (train): all-reduce over dp has
 *   waited 3.5 s: world rank 1 (...) has sent no heartbeat for 3.3 s: it is
 *   stopped or gone; aborting the job
 * and records, as tri_wd_report does (exit code TRI_EXIT_TIMEOUT). */
void tri_wd_report_named(int world_rank, const tri_progress *p, const char *op, const char *group, double waited_s,
                         const char *verdict);
/* That line, as tri_wd_report_named prints and records it, into buf[len]
 * (cut to fit); returns buf. */
char *tri_wd_describe_named(char *buf, size_t len, int world_rank, const tri_progress *p, const char *op,
                            const char *group, double waited_s, const char *verdict);

#endif
