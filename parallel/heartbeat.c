/* The progress heartbeat (see heartbeat.h). */
#include "parallel/heartbeat.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"
#include "parallel/tcp_store.h"

/* ------------------------------------------------------------------------ */
/* The judging (pure)                                                       */

void tri_hb_observe(tri_hb_seen *s, const tri_hb_record *r, double now) {
    tri_hb_record none;
    if (r == NULL) {
        memset(&none, 0, sizeof none);
        r = &none;
    }
    if (!s->valid) {
        s->valid = 1;
        s->alive_at = s->progress_at = now;
    } else {
        if (r->seq != s->last.seq) s->alive_at = now;
        if (r->count != s->last.count || r->waiting) s->progress_at = now;
    }
    s->last = *r;
}

int tri_hb_judge(const tri_hb_seen *seen, int n, int self, double now, double silent_s, double progress_s,
                 tri_hb_verdict *v) {
    if (silent_s > progress_s) silent_s = progress_s;
    int found = 0;
    memset(v, 0, sizeof *v);
    v->rank = -1;
    for (int r = 0; r < n; r++) {
        if (r == self || !seen[r].valid) continue;
        double quiet = now - seen[r].alive_at, idle = now - seen[r].progress_at;
        int silent = quiet >= silent_s;
        int stuck = !silent && idle >= progress_s && !seen[r].last.waiting;
        if (!silent && !stuck) continue;
        double f = silent ? quiet : idle;
        v->n_blamed++;
        if (!found || f > v->for_s) {
            v->rank = r;
            v->silent = silent;
            v->for_s = f;
            found = 1;
        }
    }
    return found;
}

char *tri_hb_describe(char *buf, size_t len, const tri_hb_verdict *v, const tri_hb_seen *seen, double progress_s) {
    const tri_hb_record *r = &seen[v->rank].last;
    char where[160];
    if (r->seq == 0)
        snprintf(where, sizeof where, "no heartbeat yet");
    else
        snprintf(where, sizeof where, "host %.48s, last at step %d, %.16s", r->host, (int)r->step, r->phase);
    char others[48] = "";
    if (v->n_blamed > 1) snprintf(others, sizeof others, " (and %d more rank%s)", v->n_blamed - 1,
                                  v->n_blamed > 2 ? "s" : "");
    if (v->silent)
        snprintf(buf, len, "world rank %d (%s) has sent no heartbeat for %.1f s: it is stopped or gone%s", v->rank,
                 where, v->for_s, others);
    else
        snprintf(buf, len,
                 "world rank %d (%s) has made no progress for %.1f s outside any communication "
                 "(parallel.progress_timeout_s = %g)%s",
                 v->rank, where, v->for_s, progress_s, others);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* The thread                                                               */

struct tri_hb {
    int rank, world;
    double progress_s, silent_s, beat_s;
    const tri_progress *p;
    tri_store server; /* rank 0 under MPI: the store it serves (server.server != NULL) */
    tri_store conn;   /* the thread's connection */
    int connected;
    char addr[TRI_STORE_ADDR_LEN];
    int port;
    char host[48];
    pthread_t thread;
    int running;
    int started; /* connected once: later failures are quiet (the verdict speaks) */
    /* shared with the main thread (__atomic) */
    int quit;
    unsigned long count;   /* progress events            */
    unsigned long wait_id; /* the current or last wait   */
    int waiting;
    tri_wd_clock main_clock;   /* the main thread's, over the current wait */
    unsigned long main_pauses; /* stops the main thread saw while waiting */
    unsigned long verdict_id; /* the wait the verdict is about; 0: none */
    char verdict[512];
    tri_hb_seen *seen;
};

tri_hb *tri_hb_create(int rank, int world, double progress_timeout_s, const tri_progress *p) {
    tri_hb *h = calloc(1, sizeof *h);
    tri_hb_seen *seen = calloc((size_t)world, sizeof *seen);
    if (h == NULL || seen == NULL) {
        free(h);
        free(seen);
        tri_error_rank(rank, "out of memory for the progress heartbeat");
        return NULL;
    }
    h->rank = rank;
    h->world = world;
    h->p = p;
    h->seen = seen;
    h->progress_s = progress_timeout_s;
    h->silent_s = progress_timeout_s < TRI_HB_SILENT_S ? progress_timeout_s : TRI_HB_SILENT_S;
    h->beat_s = h->silent_s / 10;
    if (h->beat_s > 0.25) h->beat_s = 0.25;
    if (h->beat_s < 0.02) h->beat_s = 0.02;
    h->conn.fd = h->server.fd = -1;
    if (gethostname(h->host, sizeof h->host) != 0) snprintf(h->host, sizeof h->host, "?");
    h->host[sizeof h->host - 1] = '\0';
    return h;
}

int tri_hb_serve(tri_hb *h, int *port) {
    if (tri_store_init(&h->server, "127.0.0.1", 0, 0, h->world, 10 * h->silent_s) != 0) return -1;
    *port = h->server.port;
    return 0;
}

/* (Re)connects the thread's connection; quiet about nothing (the store says why). */
static int hb_connect(tri_hb *h) {
    if (h->connected) return 0;
    if (tri_store_join(&h->conn, h->addr, h->port, h->rank, h->world, h->silent_s / 2) != 0) return -1;
    h->conn.quiet = h->started; /* the first connection says why it failed; later ones are the verdict's */
    h->connected = 1;
    return 0;
}

static void hb_disconnect(tri_hb *h) {
    if (h->connected) tri_store_free(&h->conn);
    h->connected = 0;
}

static void sleep_for(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* This rank's record now. */
static void my_record(tri_hb *h, tri_hb_record *r, uint64_t seq) {
    memset(r, 0, sizeof *r);
    r->seq = seq;
    r->count = __atomic_load_n(&h->count, __ATOMIC_RELAXED);
    r->waiting = __atomic_load_n(&h->waiting, __ATOMIC_RELAXED);
    r->step = (int32_t)__atomic_load_n(&h->p->step, __ATOMIC_RELAXED);
    const char *ph = __atomic_load_n(&h->p->phase, __ATOMIC_RELAXED);
    snprintf(r->phase, sizeof r->phase, "%s", ph ? ph : "?");
    memcpy(r->host, h->host, sizeof r->host);
}

/* Reads every peer's record into h->seen at running time now. Returns 0, or
 * -1 when the store did not answer. */
static int read_peers(tri_hb *h, double now) {
    for (int r = 0; r < h->world; r++) {
        if (r == h->rank) continue;
        char key[32];
        snprintf(key, sizeof key, "hb/%d", r);
        tri_hb_record rec;
        size_t n = 0;
        int rc = tri_store_get(&h->conn, key, &rec, sizeof rec, &n);
        if (rc < 0) return -1;
        tri_hb_observe(&h->seen[r], rc == 1 && n == sizeof rec ? &rec : NULL, now);
    }
    return 0;
}

/* The thread: publishes this rank's record every beat; while the rank has
 * been inside one wait for a whole beat, reads the peers' and judges. A
 * verdict stands only when the next beat, in the same wait, confirms it and
 * neither this thread nor the waiting main thread saw this process stopped
 * meanwhile (a whole-job suspension restarts the look from zero). */
static void *beat(void *arg) {
    tri_hb *h = arg;
    tri_wd_clock k; /* a request may block up to silent_s: not a stop */
    tri_wd_clock_start(&k, tri_now_s(), h->beat_s + h->silent_s + TRI_WD_PAUSE_GAP_S);
    uint64_t seq = 0;
    unsigned long watched = 0;  /* the wait whose peers are being watched; 0: none */
    unsigned long prev_wait = 0; /* the wait seen at the previous beat */
    unsigned long pending = 0;   /* the wait of an unconfirmed verdict; 0: none */
    double seen_paused = 0, failing_s = 0; /* how long the store has not answered */
    int claimed = 0;                       /* this rank claimed the pending verdict */
    double claim_at = 0;
    unsigned long seen_main = 0;
    char key[32], text[sizeof h->verdict];
    snprintf(key, sizeof key, "hb/%d", h->rank);
    for (int first = 1; !__atomic_load_n(&h->quit, __ATOMIC_ACQUIRE); first = 0) {
        if (!first) sleep_for(h->beat_s); /* the first record at once */
        double now = tri_wd_clock_tick(&k, tri_now_s());
        tri_hb_record me;
        my_record(h, &me, ++seq);
        unsigned long id = __atomic_load_n(&h->wait_id, __ATOMIC_ACQUIRE);
        int in_wait = me.waiting && id == prev_wait && __atomic_load_n(&h->verdict_id, __ATOMIC_ACQUIRE) == 0;
        prev_wait = me.waiting ? id : 0;
        if (!in_wait) watched = pending = 0;
        if (in_wait && watched != id) { /* a fresh look for each wait */
            memset(h->seen, 0, (size_t)h->world * sizeof *h->seen);
            watched = id;
            pending = 0;
        }
        double t_ask = tri_now_s();
        int rc = hb_connect(h);
        if (rc == 0) rc = tri_store_set(&h->conn, key, &me, sizeof me);
        if (rc == 0 && in_wait) rc = read_peers(h, now);
        double asked = tri_now_s() - t_ask;
        now = tri_wd_clock_tick(&k, tri_now_s());
        if (rc != 0) hb_disconnect(h);
        failing_s = rc != 0 ? failing_s + asked : 0;
        unsigned long main_pauses = __atomic_load_n(&h->main_pauses, __ATOMIC_ACQUIRE);
        if (k.paused != seen_paused || main_pauses != seen_main) { /* this process was stopped */
            seen_paused = k.paused;
            seen_main = main_pauses;
            watched = pending = 0;
            failing_s = 0;
            continue;
        }
        if (!in_wait) continue;
        tri_hb_verdict v;
        int named = 0;
        if (rc != 0) {
            /* no answer for silent_s (requests of silent_s / 2 each) while waiting:
             * the store's rank (0) is stopped or gone; that is its own confirmation */
            if (h->rank != 0 && failing_s >= 0.9 * h->silent_s) {
                snprintf(text, sizeof text,
                         "world rank 0 (which serves the heartbeat store) has not answered for %.1f s: it is "
                         "stopped or gone",
                         failing_s);
                named = 1;
                pending = id;
            }
        } else if (tri_hb_judge(h->seen, h->world, h->rank, now, h->silent_s, h->progress_s, &v)) {
            tri_hb_describe(text, sizeof text, &v, h->seen, h->progress_s);
            named = 1;
        }
        if (!named) {
            pending = 0;
            claimed = 0;
            continue;
        }
        if (pending != id) {
            pending = id; /* confirmed at the next beat */
            claimed = 0;
            continue;
        }
        /* Several watchers reach the same verdict at the same beat, and Open
         * MPI mangles simultaneous MPI_Aborts (exit 1, not 124): one reports.
         * Through the store, the last rank to claim it (read back a beat
         * later); without the store, staggered by rank. A claimant that has
         * not ended the job within 2 s is taken over. */
        if (rc != 0) {
            sleep_for(0.1 * (double)((h->rank - 1) % 8));
        } else if (!claimed) {
            int32_t me32 = h->rank;
            if (tri_store_set(&h->conn, "hb/claim", &me32, sizeof me32) != 0) hb_disconnect(h);
            claimed = 1;
            claim_at = now;
            continue;
        } else {
            int32_t owner = -1;
            size_t got = 0;
            int g = tri_store_get(&h->conn, "hb/claim", &owner, sizeof owner, &got);
            if (g < 0) hb_disconnect(h);
            if (g == 1 && got == sizeof owner && owner != h->rank && now - claim_at < 2.0 + 4 * h->beat_s) continue;
        }
        memcpy(h->verdict, text, sizeof text);
        __atomic_store_n(&h->verdict_id, id, __ATOMIC_RELEASE);
    }
    return NULL;
}

int tri_hb_start(tri_hb *h, const char *addr, int port) {
    snprintf(h->addr, sizeof h->addr, "%s", addr);
    h->port = port;
    if (hb_connect(h) != 0) return -1;
    h->started = 1;
    h->conn.quiet = 1;
    int rc = pthread_create(&h->thread, NULL, beat, h);
    if (rc != 0) return tri_error_rank(h->rank, "cannot start the heartbeat thread: %s", strerror(rc));
    h->running = 1;
    return 0;
}

void tri_hb_free(tri_hb *h) {
    if (h == NULL) return;
    if (h->running) {
        __atomic_store_n(&h->quit, 1, __ATOMIC_RELEASE);
        pthread_join(h->thread, NULL);
    }
    hb_disconnect(h);
    if (h->server.server != NULL) tri_store_free(&h->server);
    free(h->seen);
    free(h);
}

void tri_hb_bump(tri_hb *h) {
    if (h) __atomic_add_fetch(&h->count, 1, __ATOMIC_RELAXED);
}

unsigned long tri_hb_wait_begin(tri_hb *h) {
    if (h == NULL) return 0;
    tri_wd_clock_start(&h->main_clock, tri_now_s(), TRI_WD_PAUSE_GAP_S);
    unsigned long id = __atomic_add_fetch(&h->wait_id, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&h->waiting, 1, __ATOMIC_RELEASE);
    return id;
}

void tri_hb_poll(tri_hb *h) {
    if (h == NULL) return;
    double before = h->main_clock.paused;
    tri_wd_clock_tick(&h->main_clock, tri_now_s());
    if (h->main_clock.paused != before) __atomic_add_fetch(&h->main_pauses, 1, __ATOMIC_RELEASE);
}

void tri_hb_wait_end(tri_hb *h) {
    if (h == NULL) return;
    __atomic_store_n(&h->waiting, 0, __ATOMIC_RELEASE);
    __atomic_add_fetch(&h->count, 1, __ATOMIC_RELAXED);
}

const char *tri_hb_verdict_on(tri_hb *h, unsigned long id) {
    if (h == NULL || id == 0) return NULL;
    return __atomic_load_n(&h->verdict_id, __ATOMIC_ACQUIRE) == id ? h->verdict : NULL;
}
