/* The progress heartbeat: a rank that stops making progress while its peers
 * wait for it is named within seconds, not at the collective timeout.
 *
 * Every rank counts its progress (tri_hb_bump: each phase the trainer enters,
 * each communication wait that completes) and a thread per rank publishes,
 * every beat, a small record (beats so far, progress count, whether the rank
 * is inside a communication wait, its step, phase and host) under
 * "hb/<rank>" in a TCP store (parallel/tcp_store.h): the launch's own store
 * when the ranks met through one, otherwise one that world rank 0 serves on
 * a free port for this purpose. The thread never calls MPI.
 *
 * While its rank has been inside one wait for more than a beat, the thread
 * also reads every peer's record and judges (tri_hb_judge): a peer whose
 * beats stopped for TRI_HB_SILENT_S (or progress_timeout_s when shorter) is
 * stopped or gone (SIGSTOP, a dead host); a peer whose beats go on but whose
 * progress count has not moved for progress_timeout_s while it is not waiting
 * itself is stuck outside communication (data loading, I/O); a store that
 * does not answer for the silent threshold means world rank 0 (its server
 * under MPI) is stopped or gone. The verdict, confirmed at the next beat,
 * goes to the waiting (main) thread, which reports it and ends the job as
 * the watchdog does (exit 124). Staleness is counted on the watching
 * thread's own running clock (tri_wd_clock), and a stop of this process seen
 * by either thread (the main thread's polls, tri_hb_poll) restarts the look
 * from zero: a suspension of the whole job blames nobody.
 *
 * The judging is pure (tri_hb_observe, tri_hb_judge): tested with made-up
 * records and clocks in tests/parallel/test_heartbeat.c.
 */
#ifndef TRI_HEARTBEAT_H
#define TRI_HEARTBEAT_H

#include <stddef.h>
#include <stdint.h>

#include "parallel/watchdog.h"

/* A peer whose heartbeat is silent this long is named (when
 * progress_timeout_s is not shorter). */
#define TRI_HB_SILENT_S 5.0

/* One rank's record, as published (same layout on every rank). */
typedef struct tri_hb_record {
    uint64_t seq;   /* beats so far (0: none yet)             */
    uint64_t count; /* progress events so far                 */
    int32_t waiting; /* inside a communication wait             */
    int32_t step;   /* the trainer's step (tri_progress.step)  */
    char phase[16]; /* the trainer's phase                     */
    char host[48];  /* gethostname                             */
} tri_hb_record;

/* The watcher's view of one rank. */
typedef struct tri_hb_seen {
    tri_hb_record last;
    int valid;
    double alive_at;    /* watcher's running time when its beats last moved */
    double progress_at; /* ... when its progress count last moved or it waited */
} tri_hb_seen;

/* Takes in rank's record r (NULL: not published yet) at running time now. */
void tri_hb_observe(tri_hb_seen *s, const tri_hb_record *r, double now);

typedef struct tri_hb_verdict {
    int rank;      /* the rank named                        */
    int silent;    /* 1: its heartbeat stopped; 0: no progress */
    double for_s;  /* how long                              */
    int n_blamed;  /* ranks that met the condition           */
} tri_hb_verdict;

/* Whether some rank but `self` of seen[0..n) is silent for silent_s or
 * without progress (and not waiting) for progress_s at running time now; the
 * longest such in *v. Returns 1 when one is named, 0 otherwise. */
int tri_hb_judge(const tri_hb_seen *seen, int n, int self, double now, double silent_s, double progress_s,
                 tri_hb_verdict *v);

/* The verdict as text, e.g. "world rank 1 (host h, last at step 5, train) has
 * sent no heartbeat for 5.0 s: it is stopped or gone". Returns buf. */
char *tri_hb_describe(char *buf, size_t len, const tri_hb_verdict *v, const tri_hb_seen *seen, double progress_s);

/* ------------------------------------------------------------------------ */
/* The running heartbeat                                                    */

typedef struct tri_hb tri_hb;

/* A heartbeat for `rank` of `world`, reading step and phase from *p (which
 * must outlive it). progress_timeout_s > 0. NULL on failure (message). */
tri_hb *tri_hb_create(int rank, int world, double progress_timeout_s, const tri_progress *p);
/* World rank 0 without a launch store: serves one on a free port (*port).
 * Returns 0 or -1 (message). */
int tri_hb_serve(tri_hb *h, int *port);
/* Connects to the store at addr:port and starts the thread. 0 or -1 (message). */
int tri_hb_start(tri_hb *h, const char *addr, int port);
/* Stops the thread, leaves the store; NULL-safe. */
void tri_hb_free(tri_hb *h);

/* The main thread's side (NULL-safe, cheap). */
void tri_hb_bump(tri_hb *h);                 /* one more progress event          */
unsigned long tri_hb_wait_begin(tri_hb *h);  /* entering a wait: its id           */
void tri_hb_poll(tri_hb *h);                 /* each poll of the wait: sees a stop */
void tri_hb_wait_end(tri_hb *h);             /* the wait completed (progress)     */
/* The verdict on wait `id`, or NULL while there is none. */
const char *tri_hb_verdict_on(tri_hb *h, unsigned long id);

#endif
