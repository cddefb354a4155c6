/* The process context (see dist.h): find the world from the launcher's
 * environment, check the layout against it, then either start MPI and split
 * the world into the mesh's groups, or make a world of one with no transport
 * (so `trident train` runs without mpirun and without MPI_Init).
 */
#include "parallel/dist.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/ctx.h"
#include "parallel/heartbeat.h"
#include "parallel/tcp_store.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/exitrec.h"
#include "base/log.h"

#ifdef TRI_HAVE_MPI
#include "parallel/comm_mpi.h"
#endif
#ifdef TRI_HAVE_NCCL
#include "kernels/cuda_module.h"
#include "parallel/comm_nccl.h"
#endif

/* How the ranks were started. */
enum { LAUNCH_NONE = 0, LAUNCH_MPI = 1, LAUNCH_STORE = 2, LAUNCH_BAD = 3 /* store variables in error */ };

/* A non-negative int from the environment variable `name`; -1 when unset or
 * not a plain number. */
static int env_int(const char *name) {
    const char *s = getenv(name);
    if (s == NULL || *s == '\0') return -1;
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 0 || v > INT_MAX) return -1;
    return (int)v;
}

/* Whether Slurm's variables mean an MPI launch (a build with MPI, unless
 * TRIDENT_BOOTSTRAP=store) rather than a world that meets at the TCP store. */
static int slurm_by_mpi(void) {
#ifdef TRI_HAVE_MPI
    const char *boot = getenv("TRIDENT_BOOTSTRAP");
    return !(boot && strcmp(boot, "store") == 0);
#else
    return 0;
#endif
}

/* World size and rank from the first launcher whose variables are all set:
 * Open MPI's mpirun, PMI (srun --mpi=pmi2, MPICH's hydra), Slurm's srun (an
 * MPI launch in a build with MPI unless TRIDENT_BOOTSTRAP=store), then
 * torchrun-style RANK/WORLD_SIZE and, lacking MPI, Slurm's variables (the
 * TCP store). Returns LAUNCH_* (LAUNCH_NONE: 1 and 0). */
static int env_launcher(int *world, int *rank) {
    /* {size, rank, required-as-well (may be NULL)} */
    static const char *const vars[][3] = {
        {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", NULL},
        {"PMI_SIZE", "PMI_RANK", NULL},
        {"SLURM_STEP_NUM_TASKS", "SLURM_PROCID", NULL},
        /* SLURM_NTASKS is also set in an sbatch script's own shell, where the
         * process is not one of the tasks: trust it only inside a job step. */
        {"SLURM_NTASKS", "SLURM_PROCID", "SLURM_STEP_ID"},
    };
    const int by_mpi = slurm_by_mpi();
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        if (i >= 2 && !by_mpi) break;
        int w = env_int(vars[i][0]), r = env_int(vars[i][1]);
        if (w < 1 || r < 0 || r >= w) continue;
        if (vars[i][2] != NULL && getenv(vars[i][2]) == NULL) continue;
        *world = w;
        *rank = r;
        return LAUNCH_MPI;
    }
    tri_launch_env e;
    char why[256]; /* said later, by tri_dist_init */
    int rc = tri_launch_env_read(&e, !by_mpi, NULL, NULL, why, sizeof why);
    if (rc == 1) {
        *world = e.world;
        *rank = e.rank;
        return LAUNCH_STORE;
    }
    *world = 1;
    *rank = 0;
    return rc < 0 ? LAUNCH_BAD : LAUNCH_NONE;
}

/* This rank's index on its node as the launcher says; -1 when none does.
 * The variables in the order the CUDA backend reads them to pick its device
 * (kernels/cuda/cuda_ops.c), so that NCCL picks the same one. */
static int env_local_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK", "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        int v = env_int(vars[i]);
        if (v >= 0) return v;
    }
    return -1;
}

void tri_dist_env_world(int *world, int *rank) { (void)env_launcher(world, rank); }

static void init_self_groups(tri_dist *d, int world_rank) {
    tri_comm_init_self(&d->world, world_rank);
    tri_comm_init_self(&d->tp, world_rank);
    tri_comm_init_self(&d->dp, world_rank);
    tri_comm_init_self(&d->pp, world_rank);
    tri_comm_init_self(&d->emb, world_rank);
    tri_comm_init_self(&d->cp, world_rank);
    tri_comm_init_self(&d->dpcp, world_rank);
}

/* The groups in a fixed order, with their names for the watchdog's report. */
#define N_GROUPS 7
static const char *const group_names[N_GROUPS] = {"world", "tp", "dp", "pp", "emb", "cp", "dpcp"};
static tri_comm *group_at(tri_dist *d, int i) {
    tri_comm *g[N_GROUPS] = {&d->world, &d->tp, &d->dp, &d->pp, &d->emb, &d->cp, &d->dpcp};
    return g[i];
}

tri_comm *tri_dist_grad_group(tri_dist *d) { return d->mesh.cp > 1 ? &d->dpcp : &d->dp; }

/* Names every group and points it at d->progress, with the default deadline. */
static void watch_groups(tri_dist *d) {
    d->progress.step = 0;
    d->progress.phase = "set-up";
    d->progress.action[0] = '\0';
    for (int i = 0; i < N_GROUPS; i++) {
        tri_comm *c = group_at(d, i);
        snprintf(c->name, sizeof c->name, "%s", group_names[i]);
        c->progress = &d->progress;
        c->timeout_s = TRI_WD_DEFAULT_TIMEOUT_S;
    }
}

void tri_dist_set_timeout(tri_dist *d, double timeout_s) {
    for (int i = 0; i < N_GROUPS; i++) group_at(d, i)->timeout_s = timeout_s;
    if (d->store) d->store->timeout_s = timeout_s;
}

#ifdef TRI_HAVE_NCCL
/* ------------------------------------------------------------------------ */
/* Groups waiting for NCCL (TRI_TRANSPORT_STORE before tri_dist_use_nccl)   */

_Noreturn static void no_transport(tri_comm *c, const char *op) {
    tri_error_rank(c->world_rank,
                   "%s over %s before the group has a transport: ranks launched without MPI communicate through "
                   "NCCL, which tri_dist_use_nccl starts with the CUDA backend (--device cuda)",
                   op, c->name);
    exit(TRI_EXIT_FAILURE);
}
static void pend_allreduce(tri_comm *c, void *b, size_t n, tri_dtype t, tri_redop op) { no_transport(c, "all-reduce"); }
static void pend_iallreduce(tri_comm *c, void *b, size_t n, tri_dtype t, tri_redop op, tri_req *r) {
    no_transport(c, "all-reduce");
}
static void pend_reduce_scatter(tri_comm *c, void *r, const void *s, size_t n, tri_dtype t) {
    no_transport(c, "reduce-scatter");
}
static void pend_allgather(tri_comm *c, void *r, const void *s, size_t n, tri_dtype t) {
    no_transport(c, "all-gather");
}
static void pend_broadcast(tri_comm *c, void *b, size_t n, tri_dtype t, int root) { no_transport(c, "broadcast"); }
static void pend_isend(tri_comm *c, const void *b, size_t n, tri_dtype t, int p, int tag, tri_req *r) {
    no_transport(c, "send");
}
static void pend_irecv(tri_comm *c, void *b, size_t n, tri_dtype t, int p, int tag, tri_req *r) {
    no_transport(c, "receive");
}
static void pend_wait(tri_comm *c, tri_req *r) { no_transport(c, "wait"); }
static int pend_test(tri_comm *c, tri_req *r) { no_transport(c, "test"); }
static void pend_barrier(tri_comm *c) { no_transport(c, "barrier"); }
static void pend_free(tri_comm *c) { c->handle = NULL; }

static const tri_comm_impl pending_impl = {
    .name = "pending",
    .allreduce = pend_allreduce,
    .iallreduce = pend_iallreduce,
    .reduce_scatter = pend_reduce_scatter,
    .allgather = pend_allgather,
    .broadcast = pend_broadcast,
    .isend = pend_isend,
    .irecv = pend_irecv,
    .wait = pend_wait,
    .test = pend_test,
    .barrier = pend_barrier,
    .free = pend_free,
};

/* The groups of the mesh with their sizes and indices, no transport yet. */
static void pending_groups(tri_dist *d) {
    static const tri_group_kind kinds[6] = {TRI_GROUP_TP,  TRI_GROUP_DP, TRI_GROUP_PP,
                                            TRI_GROUP_EMB, TRI_GROUP_CP, TRI_GROUP_DPCP};
    tri_comm *outs[6] = {&d->tp, &d->dp, &d->pp, &d->emb, &d->cp, &d->dpcp};
    int *members = malloc((size_t)d->mesh.world * sizeof *members);
    TRI_CHECK(members != NULL);
    d->world.size = d->mesh.world;
    d->world.rank = d->mesh.rank;
    d->world.impl = &pending_impl;
    const int n_kinds = d->mesh.cp > 1 ? 6 : 4; /* the cp groups only with context parallelism */
    for (int k = 0; k < n_kinds; k++) {
        int idx = -1, n = tri_mesh_group(&d->mesh, kinds[k], members, &idx);
        if (idx < 0 || n < 2) continue; /* a group of one */
        outs[k]->size = n;
        outs[k]->rank = idx;
        outs[k]->impl = &pending_impl;
    }
    free(members);
}

/* Forms a world of several ranks through the TCP store: every rank checks in
 * with its layout, which must agree. Returns 0, or -1 after a message. */
static int store_world(tri_dist *d, int tp, int cp, int pp, int dp, double timeout_s) {
    tri_launch_env e;
    const int use_slurm = !slurm_by_mpi();
    char why[512];
    if (tri_launch_env_read(&e, use_slurm, NULL, NULL, why, sizeof why) != 1) return tri_error("%s", why);
    d->store = malloc(sizeof *d->store);
    if (d->store == NULL) return tri_error_rank(e.rank, "out of memory for the store");
    if (tri_store_init(d->store, e.master_addr, e.master_port, e.rank, e.world, timeout_s) != 0) {
        free(d->store);
        d->store = NULL;
        return tri_error("rank %d of %d: could not join the store at %s:%d (%s launch)", e.rank, e.world, e.master_addr,
                         e.master_port, e.source);
    }
    d->transport = TRI_TRANSPORT_STORE;
    if (e.local_rank >= 0) d->local_rank = e.local_rank;
    int mine[4] = {tp, cp, pp, dp};
    int *all = malloc((size_t)e.world * sizeof mine);
    if (all == NULL || tri_store_allgather(d->store, "layout", mine, sizeof mine, all) != 0) {
        free(all);
        return tri_error("rank %d of %d: the ranks did not all meet at the store %s:%d", e.rank, e.world, e.master_addr,
                         e.master_port);
    }
    for (int r = 0; r < e.world; r++)
        if (memcmp(all + 4 * r, mine, sizeof mine) != 0) {
            tri_error("rank %d has tp=%d cp=%d pp=%d dp=%d but rank %d has tp=%d cp=%d pp=%d dp=%d", e.rank, tp, cp, pp,
                      dp, r, all[4 * r], all[4 * r + 1], all[4 * r + 2], all[4 * r + 3]);
            free(all);
            return -1;
        }
    free(all);
    pending_groups(d);
    /* host values before NCCL (the checkpoint store, the preflight) go through the store */
    tri_store_comm_world(&d->world, d->store);
    return 0;
}
#endif

void tri_dist_progress(tri_dist *d, long step, const char *phase) {
    /* the groups point into *d: a copied or moved tri_dist would report stale steps */
    TRI_CHECK(d->world.progress == &d->progress && d->dp.progress == &d->progress);
    __atomic_store_n(&d->progress.step, step, __ATOMIC_RELAXED);
    __atomic_store_n(&d->progress.phase, phase, __ATOMIC_RELAXED);
    tri_hb_bump(d->progress.hb);
}

int tri_dist_start_heartbeat(tri_dist *d, double progress_timeout_s) {
    if (progress_timeout_s <= 0 || d->mesh.world == 1 || d->progress.hb != NULL) return 0;
    if (d->transport != TRI_TRANSPORT_MPI && d->transport != TRI_TRANSPORT_STORE) return 0;
    const int rank = d->mesh.rank;
    tri_hb *h = tri_hb_create(rank, d->mesh.world, progress_timeout_s, &d->progress);
    /* where the store is: the launch's, or one world rank 0 serves now */
    struct {
        char host[TRI_STORE_ADDR_LEN];
        int32_t port;
    } at;
    memset(&at, 0, sizeof at);
    at.port = -1;
    if (d->transport == TRI_TRANSPORT_STORE) {
        snprintf(at.host, sizeof at.host, "%s", d->store->addr);
        at.port = d->store->port;
    } else {
        if (rank == 0) {
            int port = -1;
            if (h != NULL && gethostname(at.host, sizeof at.host - 1) == 0 && tri_hb_serve(h, &port) == 0)
                at.port = port;
        }
        tri_comm_broadcast_host(&d->world, &at, sizeof at, TRI_U8, 0);
    }
    char mine[TRI_STORE_ADDR_LEN] = "";
    const char *addr = at.host;
    if (d->transport == TRI_TRANSPORT_MPI && (rank == 0 || (gethostname(mine, sizeof mine - 1) == 0 &&
                                                           strcmp(mine, at.host) == 0)))
        addr = "127.0.0.1"; /* on rank 0's host */
    int failed = !(h != NULL && at.port > 0 && tri_hb_start(h, addr, at.port) == 0);
    /* all or none: a rank without a heartbeat would look stopped to the others */
    tri_comm_allreduce_host(&d->world, &failed, 1, TRI_I32, TRI_MAX);
    int ok = !failed;
    if (!ok) {
        tri_hb_free(h);
        if (rank == 0) tri_warn("the progress heartbeat could not start on every rank: running without it");
        return -1;
    }
    d->progress.hb = h;
    return 0;
}

int tri_dist_init(tri_dist *d, int tp, int pp, int dp) {
    return tri_dist_init_with(d, tp, pp, dp, TRI_WD_DEFAULT_TIMEOUT_S, 1);
}

int tri_dist_init_with(tri_dist *d, int tp, int pp, int dp, double timeout_s, int store_ok) {
    return tri_dist_init_cp(d, tp, 1, pp, dp, timeout_s, store_ok);
}

int tri_dist_init_cp(tri_dist *d, int tp, int cp, int pp, int dp, double timeout_s, int store_ok) {
    memset(d, 0, sizeof *d);
    int world = 1, rank = 0;
    int launched = env_launcher(&world, &rank);
    init_self_groups(d, rank);
    d->local_rank = env_local_rank();
    char why[512] = "";
    if (launched == LAUNCH_BAD) { /* say what is wrong with RANK, WORLD_SIZE, MASTER_* */
        tri_launch_env e;
        tri_launch_env_read(&e, 1, NULL, NULL, why, sizeof why);
        return tri_error("%s", why);
    }

    /* The layout is checked against the launcher's world before anything starts. */
    if (tri_mesh_init_cp(&d->mesh, world, rank, tp, cp, pp, dp, why, sizeof why) != 0) {
        if (world == 1 && !launched) /* the usual cause: started without the launcher */
            return tri_error("%s (start %lld ranks with tridentrun, e.g. `tridentrun -- trident train ...`)", why,
                             (long long)tp * cp * pp * dp);
        return tri_error("%s", why);
    }

    watch_groups(d);
    if (world == 1 && launched != LAUNCH_MPI) return 0; /* a world of one: no transport */
    if (launched == LAUNCH_STORE) {
        if (!store_ok) /* said before waiting for any peer at the store */
            return tri_error_rank(rank,
                                  "ranks launched without MPI (RANK/WORLD_SIZE or srun) communicate through NCCL, "
                                  "which needs --device cuda; on the CPU launch with tridentrun/mpirun");
#ifdef TRI_HAVE_NCCL
        if (store_world(d, tp, cp, pp, dp, timeout_s) != 0) return -1;
        watch_groups(d);
        return 0;
#else
        return tri_error("started as rank %d of %d by RANK/WORLD_SIZE (or Slurm) without an MPI launcher: the CPU "
                         "transport is MPI; launch with tridentrun/mpirun, or build with CUDA for NCCL",
                         rank, world);
#endif
    }

#ifdef TRI_HAVE_MPI
    int mworld = 0, mrank = 0;
    if (tri_mpi_init(&mworld, &mrank) != 0) return tri_error("rank %d of %d: MPI could not start", rank, world);
    d->transport = TRI_TRANSPORT_MPI;
    if (mworld != world || mrank != rank) {
        /* The launcher's variables and MPI disagree: the caller must end the
         * job with tri_dist_abort (MPI is running on this rank). */
        return tri_error("the launcher's environment says rank %d of %d, but MPI says rank %d of %d", rank, world,
                         mrank, mworld);
    }
    tri_mpi_world(&d->world);
    /* Every rank takes part in every split, in the same order. key = index in
     * the group, so MPI's group rank equals the mesh's group index. */
    static const tri_group_kind kinds[6] = {TRI_GROUP_TP,  TRI_GROUP_DP, TRI_GROUP_PP,
                                            TRI_GROUP_EMB, TRI_GROUP_CP, TRI_GROUP_DPCP};
    tri_comm *outs[6] = {&d->tp, &d->dp, &d->pp, &d->emb, &d->cp, &d->dpcp};
    int *members = malloc((size_t)world * sizeof *members);
    if (members == NULL) return tri_error_rank(rank, "out of memory building the groups");
    /* the cp and dp x cp groups only with context parallelism: without it
     * the splits (and the communicators) are those of the three-axis mesh */
    const int n_kinds = cp > 1 ? 6 : 4;
    for (int k = 0; k < n_kinds; k++) {
        int idx = -1;
        tri_mesh_group(&d->mesh, kinds[k], members, &idx);
        tri_mpi_split(outs[k], tri_mesh_color(&d->mesh, kinds[k]), idx < 0 ? 0 : idx);
    }
    free(members);
    watch_groups(d); /* the splits made the groups afresh */
    return 0;
#else
    return tri_error("started as rank %d of %d by a launcher, but this build has no MPI "
                     "(rebuild with -DTRI_MPI=ON, or run a single process without mpirun)",
                     rank, world);
#endif
}

#ifdef TRI_HAVE_NCCL
/* Rank 0's bytes to every rank: over MPI's world, or through the store. */
static int bcast_id(void *ctx, void *buf, size_t len) {
    tri_dist *d = ctx;
    if (d->transport == TRI_TRANSPORT_STORE) {
        if (d->mesh.rank == 0) return tri_store_set(d->store, "nccl/unique_id", buf, len);
        size_t got = 0;
        if (tri_store_wait(d->store, "nccl/unique_id", buf, len, &got, 0) != 0) return -1;
        return got == len ? 0
                          : tri_error("rank %d: NCCL's unique id has %zu bytes, expected %zu", d->mesh.rank, got, len);
    }
    tri_ctx *saved = d->world.ctx; /* the id is host memory */
    d->world.ctx = NULL;
    tri_comm_broadcast(&d->world, buf, len, TRI_U8, 0);
    d->world.ctx = saved;
    return 0;
}
#endif

int tri_dist_use_nccl(tri_dist *d) {
    if (d->mesh.world == 1 || d->nccl) return 0;
#ifdef TRI_HAVE_NCCL
    /* NCCL lives in the CUDA module (kernels/cuda_module.h), loaded here;
     * the transport's entry is its own symbol there (comm_nccl.h) */
    char why[4608];
    const tri_nccl_transport *nccl = NULL;
    if (tri_cuda_module_get(why, sizeof why) != NULL) {
        const tri_nccl_transport *(*entry)(void) = NULL;
        *(void **)&entry = tri_cuda_module_symbol(TRI_NCCL_ENTRY);
        nccl = entry != NULL ? entry() : NULL;
        if (nccl == NULL || nccl->comm_size != sizeof(tri_comm) || nccl->mesh_size != sizeof(tri_mesh) ||
            nccl->n_groups != TRI_NCCL_GROUPS) {
            snprintf(why, sizeof why, "the CUDA backend module %s",
                     nccl == NULL ? "was built without NCCL" : "was built from another version of Trident");
            nccl = NULL;
        }
    }
    if (nccl == NULL) {
        tri_error_rank(d->mesh.rank, "%s", why);
        return tri_error_rank(d->mesh.rank, "the NCCL transport could not start");
    }
    tri_comm fresh[N_GROUPS];
    for (int i = 5; i < N_GROUPS; i++) fresh[i] = *group_at(d, i); /* cp == 1: groups of one, kept */
    _Static_assert(N_GROUPS == TRI_NCCL_GROUPS, "the NCCL transport makes every group of the mesh");
    /* the CUDA context's device: local rank % devices, device 0 when the
     * launcher gives no local rank (as kernels/cuda/cuda_ops.c chooses) */
    int local = d->local_rank >= 0 ? d->local_rank : 0;
    if (nccl->init(&d->mesh, local, bcast_id, d, fresh) != 0)
        return tri_error_rank(d->mesh.rank, "the NCCL transport could not start");
    double timeout = d->world.timeout_s;
    tri_ctx *ctx = d->world.ctx;
    for (int i = 0; i < N_GROUPS; i++) {
        tri_comm_free(group_at(d, i)); /* the MPI (or pending) group it replaces */
        *group_at(d, i) = fresh[i];
    }
    tri_dist_bind_ctx(d, ctx);
    tri_progress keep = d->progress;
    watch_groups(d);
    d->progress = keep;
    tri_dist_set_timeout(d, timeout);
    for (int i = 0; i < N_GROUPS; i++) group_at(d, i)->device_only = 1;
    d->nccl = 1;
    return 0;
#else
    return tri_error_rank(d->mesh.rank, "this build has no NCCL transport (built without CUDA, or NCCL was not found)");
#endif
}

int tri_dist_check_device_memory(tri_dist *d) {
    int probe = 0;
    if (d->world.ctx == NULL || tri_ctx_owns(d->world.ctx, &probe, sizeof probe) < 0)
        return tri_error_rank(d->mesh.rank,
                              "checking that every collective takes backend memory needs a backend that knows its "
                              "allocations (--device cpu-guard), bound to the groups (device %s)",
                              d->world.ctx && d->world.ctx->ops ? d->world.ctx->ops->name : "none");
    for (int i = 0; i < N_GROUPS; i++) group_at(d, i)->device_only = 1;
    return 0;
}

void tri_dist_bind_ctx(tri_dist *d, tri_ctx *ctx) {
    for (int i = 0; i < N_GROUPS; i++) group_at(d, i)->ctx = ctx;
}

void tri_dist_free(tri_dist *d) {
    if (d == NULL) return;
#ifdef TRI_HAVE_MPI
    if (d->transport == TRI_TRANSPORT_MPI && d->world.progress == &d->progress) {
        /* MPI_Finalize synchronises the ranks without a deadline: meet here first */
        tri_dist_progress(d, d->progress.step, "shut-down");
        tri_comm_barrier(&d->world);
    }
#endif
    /* every rank is past its last wait: the heartbeat's watching is over */
    tri_hb_free(d->progress.hb);
    d->progress.hb = NULL;
    tri_comm_free(&d->dpcp);
    tri_comm_free(&d->cp);
    tri_comm_free(&d->emb);
    tri_comm_free(&d->pp);
    tri_comm_free(&d->dp);
    tri_comm_free(&d->tp);
    tri_comm_free(&d->world);
#ifdef TRI_HAVE_MPI
    if (d->transport == TRI_TRANSPORT_MPI) tri_mpi_finalize();
#endif
    if (d->store) {
        tri_store_free(d->store);
        free(d->store);
    }
    memset(d, 0, sizeof *d);
}

void tri_dist_abort(tri_dist *d, int code) {
    fflush(stdout);
    fflush(stderr);
    /* the code this rank ends the job with, where tridentrun reads it: the
     * teardown may kill the rank's wrapper before it records the exit */
    (void)tri_exit_record(code, NULL);
#ifdef TRI_HAVE_MPI
    if (d != NULL && d->transport == TRI_TRANSPORT_MPI) tri_mpi_abort(code);
#endif
    (void)d;
    exit(code);
}
