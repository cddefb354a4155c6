/* Asynchronous checkpoints (see async.h). */
#include "model/ckpt/async.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/err.h"

typedef enum { PH_IDLE, PH_WRITING, PH_COMMITTING } phase;

struct tri_ckpt_async {
    tri_ckpt_snapshot snap;
    tri_ckpt_store *store; /* world rank 0's, for the thread's commit */
    int keep, sleep_ms, is_root;
    int solo;       /* a world of one: nothing to agree on, the thread commits at once */
    phase ph;       /* main thread only: the same on every rank */
    int running;    /* a thread to join (a writer, or the reserve's) */
    size_t reserve; /* floats the reserve thread allocates        */
    pthread_t thread;
    double blocking_ms, wait_ms, started_s;
    /* under mu: written by the thread, read by the main thread */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int parts;    /* 0 writing, 1 written, -1 failed            */
    int go;       /* main -> rank 0's thread: 1 commit, -1 abandon */
    int commit;   /* 0 not done, 1 committed, -1 failed          */
    double end_s; /* when the thread finished                    */
};

static void *writer(void *arg) {
    tri_ckpt_async *a = arg;
    int rc = tri_model_snapshot_write(&a->snap, a->sleep_ms);
    pthread_mutex_lock(&a->mu);
    a->parts = rc == 0 ? 1 : -1;
    a->end_s = tri_now_s();
    if (rc != 0 || !a->is_root) {
        pthread_mutex_unlock(&a->mu);
        return NULL;
    }
    if (a->solo && a->go == 0) a->go = 1;
    while (a->go == 0) pthread_cond_wait(&a->cv, &a->mu);
    int go = a->go;
    pthread_mutex_unlock(&a->mu);
    if (go < 0) return NULL; /* abandoned: the main thread removes the temp dir */
    /* > 0: committed, only latest or pruning failed (reported) */
    int crc = tri_model_snapshot_commit(&a->snap, a->store, a->keep);
    long long bytes = -1;
    if (crc >= 0) {
        char name[64], dir[TRI_CKPT_PATH_MAX + 80];
        tri_ckpt_step_name(a->snap.step, name, sizeof name);
        snprintf(dir, sizeof dir, "%s/%s", a->store->root, name);
        bytes = tri_ckpt_bytes(dir);
    }
    pthread_mutex_lock(&a->mu);
    a->snap.bytes = bytes;
    a->commit = crc < 0 ? -1 : 1;
    a->end_s = tri_now_s();
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* The reserve thread: the staging memory, every page touched. */
static void *reserver(void *arg) {
    tri_ckpt_async *a = arg;
    size_t bytes = a->reserve * sizeof(float);
    float *p = malloc(bytes);
    if (p) {
        /* a write to every page, through volatile: a memset to 0 after malloc
         * is turned into calloc by the compiler, which leaves fresh mmap pages
         * untouched (the first snapshot then faulted them in: 90 ms instead
         * of 20 for 167 MB) */
        for (size_t i = 0; i < bytes; i += 4096) ((volatile char *)p)[i] = 0;
        free(a->snap.staging);
        a->snap.staging = p;
        a->snap.cap = a->reserve;
    }
    return NULL;
}

tri_ckpt_async *tri_ckpt_async_new(void) {
    tri_ckpt_async *a = calloc(1, sizeof *a);
    if (!a) {
        tri_error("out of memory: asynchronous checkpoint state");
        return NULL;
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    return a;
}

int tri_ckpt_async_busy(const tri_ckpt_async *a) { return a && a->ph != PH_IDLE; }

int tri_ckpt_async_word(const tri_ckpt_async *a) {
    if (!a || a->ph == PH_IDLE) return 0;
    tri_ckpt_async *m = (tri_ckpt_async *)a; /* the lock only */
    pthread_mutex_lock(&m->mu);
    int w = 0;
    if (a->ph == PH_WRITING && (!a->solo || a->parts != 1))
        w = a->parts == 0 ? 1 : a->parts < 0 ? 2 : 0;
    else if (a->is_root) /* committing (a world of one: as soon as its part is written) */
        w = a->commit == 0 ? 1 : a->commit < 0 ? 2 : 0;
    pthread_mutex_unlock(&m->mu);
    return w;
}

static void join(tri_ckpt_async *a) {
    if (!a->running) return;
    pthread_join(a->thread, NULL);
    a->running = 0;
}

/* Tells a waiting rank-0 thread what to do (1 commit, -1 give up). */
static void tell(tri_ckpt_async *a, int go) {
    pthread_mutex_lock(&a->mu);
    if (a->go == 0) a->go = go;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* Ends the save in flight without committing what is not committed: the
 * thread joined; rank 0 removes the temp dir unless the commit ran. */
static void give_up(tri_ckpt_async *a, tri_ckpt_store *store, int say) {
    tell(a, -1);
    join(a);
    if (a->is_root && a->commit != 1 && a->snap.tmp[0]) {
        tri_ckpt_abort(store, a->snap.tmp);
        if (say)
            tri_error("checkpoint of step %ld not saved (its temporary directory is removed); the checkpoints "
                      "saved before are intact",
                      a->snap.step);
    }
    a->snap.tmp[0] = '\0';
    a->ph = PH_IDLE;
}

int tri_ckpt_async_advance(tri_ckpt_async *a, tri_ckpt_store *store, tri_dist *d, int world_word, tri_ckpt_done *done) {
    (void)d;
    done->step = -1;
    if (!a || a->ph == PH_IDLE || world_word == 1) return 0;
    if (world_word >= 2) {
        give_up(a, store, 1);
        return -1;
    }
    if (a->ph == PH_WRITING && !a->solo) { /* every rank's part is written: rank 0 commits */
        a->ph = PH_COMMITTING;
        if (a->is_root)
            tell(a, 1);
        else
            join(a); /* (done: it returned after its part) */
        return 0;
    }
    join(a); /* committed */
    done->step = a->snap.step;
    done->wait_ms = a->wait_ms;
    done->blocking_ms = a->blocking_ms;
    done->write_ms = (a->end_s - a->started_s) * 1e3;
    done->bytes = a->snap.bytes;
    a->snap.tmp[0] = '\0';
    a->ph = PH_IDLE;
    return 0;
}

int tri_ckpt_async_wait(tri_ckpt_async *a, tri_ckpt_store *store, tri_dist *d, tri_ckpt_done *done) {
    done->step = -1;
    while (a && a->ph != PH_IDLE) {
        int w = tri_ckpt_async_word(a);
        tri_comm_allreduce_host(&d->world, &w, 1, TRI_I32, TRI_MAX);
        if (tri_ckpt_async_advance(a, store, d, w, done) != 0) return -1;
        if (w == 1) usleep(500);
    }
    return 0;
}

int tri_ckpt_async_reserve(tri_ckpt_async *a, const tri_gpt *g, const tri_optim *o, const tri_dist *d,
                           tri_dtype model_dtype) {
    if (a->ph != PH_IDLE || a->running) return 0;
    a->reserve = tri_model_snapshot_floats(g, o, d, model_dtype);
    if (a->reserve <= a->snap.cap) return 0;
    if (pthread_create(&a->thread, NULL, reserver, a) != 0) return -1;
    a->running = 1;
    return 0;
}

int tri_ckpt_async_start(tri_ckpt_async *a, tri_ckpt_store *store, long step, const tri_gpt *g, const tri_optim *o,
                         tri_dist *d, const char *state_json, int keep, tri_dtype model_dtype, tri_ckpt_done *prev) {
    double t0 = tri_now_s();
    if (a->ph == PH_IDLE) join(a); /* the reserve thread, if it still runs */
    if (tri_ckpt_async_wait(a, store, d, prev) != 0) return -1;
    double t1 = tri_now_s();
    if (tri_model_snapshot(&a->snap, store, step, g, o, d, state_json, model_dtype) != 0) return -1;
    a->store = store;
    a->keep = keep;
    a->sleep_ms = g->debug.ckpt_write_sleep_ms;
    a->is_root = d->mesh.rank == 0;
    a->solo = d->mesh.world == 1;
    a->parts = a->go = a->commit = 0;
    a->wait_ms = (t1 - t0) * 1e3;
    a->started_s = tri_now_s();
    a->blocking_ms = (a->started_s - t1) * 1e3;
    a->ph = PH_WRITING;
    int failed = pthread_create(&a->thread, NULL, writer, a) != 0;
    if (failed) tri_error("rank %d: cannot start the checkpoint writer thread", d->mesh.rank);
    a->running = !failed;
    tri_comm_allreduce_host(&d->world, &failed, 1, TRI_I32, TRI_MAX);
    if (failed) {
        give_up(a, store, 1);
        return -1;
    }
    return 0;
}

void tri_ckpt_async_abandon(tri_ckpt_async *a, tri_ckpt_store *store) {
    if (!a || a->ph == PH_IDLE) return;
    /* a commit that has begun is let finish (it is atomic either way) */
    long step = a->snap.step;
    give_up(a, store, 0);
    if (a->is_root && a->commit != 1)
        tri_error("the background save of step %ld was not committed; the checkpoints saved before are intact", step);
}

void tri_ckpt_async_free(tri_ckpt_async *a, tri_ckpt_store *store) {
    if (!a) return;
    tri_ckpt_async_abandon(a, store);
    join(a); /* the reserve thread */
    tri_ckpt_snapshot_free(&a->snap);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
}
