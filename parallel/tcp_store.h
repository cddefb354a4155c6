/* Rendezvous without MPI: a small TCP key-value store, and the launcher
 * environment that says where it is.
 *
 * Ranks started by torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT) or by Slurm's srun (SLURM_PROCID, SLURM_NTASKS,
 * SLURM_LOCALID) have no MPI to meet through. Rank 0 serves this store on
 * MASTER_PORT (every IPv4 interface); every rank, rank 0 included, connects to
 * MASTER_ADDR:MASTER_PORT and exchanges a few small values (NCCL's unique id,
 * "I am here" marks) before the NCCL communicators exist. It carries no
 * training traffic.
 *
 * Protocol: one request, one answer, on a TCP connection per rank:
 *   request  op (1 byte: 'S' set, 'G' get), key length, value length (u32,
 *            network order), key, value;
 *   answer   status (1 byte: 'K' stored, 'V' value follows, 'N' not set),
 *            value length (u32), value.
 * A key is set once per value (a later set replaces it); waits poll `get`
 * with a growing pause (1 ms to 50 ms) until the deadline.
 *
 * Nothing waits forever: connecting, every request and every wait end after
 * the store's timeout_s, with a message naming the rank, the store's address
 * and the key (and for a rendezvous, the ranks that never arrived).
 *
 * Pure C and POSIX sockets, one server thread on rank 0; no CUDA, no MPI.
 * Tested on 127.0.0.1 with forked ranks (tests/parallel/test_tcp_store.c).
 */
#ifndef TRI_TCP_STORE_H
#define TRI_TCP_STORE_H

#include <stddef.h>

#define TRI_STORE_MAX_KEY      256        /* bytes of a key             */
#define TRI_STORE_MAX_VALUE    (1u << 20) /* bytes of a value           */
#define TRI_STORE_ADDR_LEN     256        /* MASTER_ADDR's longest form */
#define TRI_STORE_DEFAULT_PORT 29500      /* torchrun's, for Slurm without MASTER_PORT */

struct tri_store_server;

typedef struct tri_store {
    int rank, world;
    char addr[TRI_STORE_ADDR_LEN]; /* MASTER_ADDR as given             */
    int port;
    double timeout_s;                /* every connect, request and wait      */
    int fd;                          /* this rank's connection to the server */
    unsigned long seq;               /* rendezvous made so far (keys of the next one are fresh) */
    struct tri_store_server *server; /* rank 0: the serving thread; NULL elsewhere */
    int quiet;                       /* 1: a failed connect, request or wait
                                        returns -1 without a message (set after
                                        init: the heartbeat's thread, which
                                        says what a silent store means) */
} tri_store;

/* Joins the store at addr:port as `rank` of `world`. Rank 0 first starts the
 * server (listening on every IPv4 interface at `port`); every rank then
 * connects to addr:port, retrying until timeout_s (the server may start after
 * the others). Returns 0, or -1 after a message naming the rank and the
 * address: an address that does not resolve, a port rank 0 cannot listen on,
 * a server not reached in time. */
int tri_store_init(tri_store *s, const char *addr, int port, int rank, int world, double timeout_s);
/* Port 0 with rank 0: serve on any free port, which s->port then holds (the
 * progress heartbeat's store under MPI, whose address rank 0 sends to the
 * others over MPI). */

/* As tri_store_init, but never serves (whatever the rank): another
 * connection to a store served elsewhere, e.g. a second thread's. */
int tri_store_join(tri_store *s, const char *addr, int port, int rank, int world, double timeout_s);

/* NULL-safe; leaves the store. Rank 0 keeps serving until every other rank
 * has disconnected (at most timeout_s), so a late rank still gets its answers.
 * Zeroes *s. */
void tri_store_free(tri_store *s);

/* Stores len bytes (<= TRI_STORE_MAX_VALUE) under key. Returns 0 or -1 (message). */
int tri_store_set(tri_store *s, const char *key, const void *val, size_t len);

/* Does not wait: 1 when key is set (its value, at most cap bytes, in buf and
 * its full length in *len; buf may be NULL when cap is 0), 0 when it is not
 * set yet, -1 after a message (the server is gone, the value exceeds cap). */
int tri_store_get(tri_store *s, const char *key, void *buf, size_t cap, size_t *len);

/* Waits until key is set, then gets it as tri_store_get. timeout_s <= 0: the
 * store's. Returns 0, or -1 after "rank R: store at ADDR:PORT: key 'K' was not
 * set within T s" (or the I/O error). */
int tri_store_wait(tri_store *s, const char *key, void *buf, size_t cap, size_t *len, double timeout_s);

/* Collective over the store's ranks (each calls it, in the same order): every
 * rank publishes len bytes of `mine`; all (world * len bytes) receives them in
 * rank order. Each call uses fresh keys "<prefix>#<n>/<rank>". Returns 0, or
 * -1 after a message naming the ranks that did not arrive within timeout_s
 * and the key each one should have set. */
int tri_store_allgather(tri_store *s, const char *prefix, const void *mine, size_t len, void *all);

/* A rendezvous of every rank (tri_store_allgather of nothing). */
int tri_store_barrier(tri_store *s, const char *name);

/* The world group over the store (parallel/comm_store.c): a tri_comm of
 * s->world ranks whose all-reduce (f32, f64, i32, u8), all-gather, broadcast
 * and barrier go through tri_store_allgather, for the few host values a
 * store-launched world exchanges before NCCL exists (the checkpoint store's
 * opening, the preflight agreement). Any other call, or a rank missing past
 * the store's deadline, ends the job naming the rank and the call. s must
 * outlive c; tri_comm_free(c) leaves s alone. A world of one: a group of one. */
struct tri_comm;
void tri_store_comm_world(struct tri_comm *c, tri_store *s);

/* ------------------------------------------------------------------------ */
/* The launcher's environment                                               */

typedef struct tri_launch_env {
    const char *source; /* "torchrun" (RANK, WORLD_SIZE, ...) or "slurm" */
    int rank, world;
    int local_rank; /* LOCAL_RANK / SLURM_LOCALID; -1 when not given */
    char master_addr[TRI_STORE_ADDR_LEN];
    int master_port;
} tri_launch_env;

/* How the environment is read: getenv, or a table in the tests. */
typedef const char *(*tri_getenv_fn)(const char *name, void *ctx);

/* Reads the torchrun-style variables (RANK and WORLD_SIZE both set) or, when
 * use_slurm is non-zero and they are absent, Slurm's (SLURM_PROCID and
 * SLURM_NTASKS). MASTER_ADDR: the variable, else (Slurm) the first host of
 * SLURM_JOB_NODELIST / SLURM_NODELIST when it is a simple list; MASTER_PORT:
 * the variable, else (Slurm) TRI_STORE_DEFAULT_PORT + SLURM_JOB_ID % 1000
 * (two jobs sharing a node get different ports). A world of one needs no
 * address. get NULL: getenv.
 * Returns 1 when found (*e filled), 0 when neither set is present, -1 with the
 * reason in err naming the variable and its value (not a number, rank out of
 * range, MASTER_ADDR missing, a node list too complex to read), without the
 * program's prefix: a caller that reports it does so through tri_error. */
int tri_launch_env_read(tri_launch_env *e, int use_slurm, tri_getenv_fn get, void *ctx, char *err, size_t errlen);

/* The first host of a Slurm node list: "n1,n2" -> "n1", "gpu[07-09,12],cpu1"
 * -> "gpu07", "a-[3]" -> "a-3". Returns 0, or -1 when the list is empty or not
 * of these forms (nested or unbalanced brackets, a bracket not starting with a
 * number) or the host does not fit in n bytes. */
int tri_slurm_first_host(const char *nodelist, char *out, size_t n);

#endif
