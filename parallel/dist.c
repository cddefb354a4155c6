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

#include "src/base/err.h"

#ifdef TRI_HAVE_MPI
#include "parallel/comm_mpi.h"
#endif

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

/* World size and rank from the first launcher whose variables are all set:
 * Open MPI's mpirun, PMI (srun --mpi=pmi2, MPICH's hydra), Slurm's srun.
 * Returns 1 when a launcher was found, 0 otherwise (then 1 and 0). */
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
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        int w = env_int(vars[i][0]), r = env_int(vars[i][1]);
        if (w < 1 || r < 0 || r >= w) continue;
        if (vars[i][2] != NULL && getenv(vars[i][2]) == NULL) continue;
        *world = w;
        *rank = r;
        return 1;
    }
    *world = 1;
    *rank = 0;
    return 0;
}

void tri_dist_env_world(int *world, int *rank) { env_launcher(world, rank); }

static void init_self_groups(tri_dist *d, int world_rank) {
    tri_comm_init_self(&d->world, world_rank);
    tri_comm_init_self(&d->tp, world_rank);
    tri_comm_init_self(&d->dp, world_rank);
    tri_comm_init_self(&d->pp, world_rank);
    tri_comm_init_self(&d->emb, world_rank);
}

/* The groups in a fixed order, with their names for the watchdog's report. */
#define N_GROUPS 5
static const char *const group_names[N_GROUPS] = {"world", "tp", "dp", "pp", "emb"};
static tri_comm *group_at(tri_dist *d, int i) {
    tri_comm *g[N_GROUPS] = {&d->world, &d->tp, &d->dp, &d->pp, &d->emb};
    return g[i];
}

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
}

void tri_dist_progress(tri_dist *d, long step, const char *phase) {
    /* the groups point into *d: a copied or moved tri_dist would report stale steps */
    TRI_CHECK(d->world.progress == &d->progress && d->dp.progress == &d->progress);
    d->progress.step = step;
    d->progress.phase = phase;
}

int tri_dist_init(tri_dist *d, int tp, int pp, int dp, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    int world = 1, rank = 0;
    int launched = env_launcher(&world, &rank);
    init_self_groups(d, rank);

    /* The layout is checked against the launcher's world before anything starts. */
    if (tri_mesh_init(&d->mesh, world, rank, tp, pp, dp, err, errlen) != 0) {
        if (world == 1 && !launched) { /* the usual cause: started without the launcher */
            size_t used = strlen(err);
            snprintf(err + used, errlen - used,
                     " (start %lld ranks with tridentrun, e.g. `tridentrun -- trident train ...`)",
                     (long long)tp * pp * dp);
        }
        return -1;
    }

    watch_groups(d);
    if (!launched && world == 1) return 0; /* a world of one: no transport */

#ifdef TRI_HAVE_MPI
    int mworld = 0, mrank = 0;
    if (tri_mpi_init(&mworld, &mrank) != 0) {
        snprintf(err, errlen, "trident: rank %d of %d: MPI could not start", rank, world);
        return -1;
    }
    d->transport = 1;
    if (mworld != world || mrank != rank) {
        /* The launcher's variables and MPI disagree: the caller must end the
         * job with tri_dist_abort (MPI is running on this rank). */
        snprintf(err, errlen, "trident: the launcher's environment says rank %d of %d, but MPI says rank %d of %d",
                 rank, world, mrank, mworld);
        return -1;
    }
    tri_mpi_world(&d->world);
    /* Every rank takes part in every split, in the same order. key = index in
     * the group, so MPI's group rank equals the mesh's group index. */
    static const tri_group_kind kinds[4] = {TRI_GROUP_TP, TRI_GROUP_DP, TRI_GROUP_PP, TRI_GROUP_EMB};
    tri_comm *outs[4] = {&d->tp, &d->dp, &d->pp, &d->emb};
    int *members = malloc((size_t)world * sizeof *members);
    if (members == NULL) {
        snprintf(err, errlen, "trident: rank %d: out of memory building the groups", rank);
        return -1;
    }
    for (int k = 0; k < 4; k++) {
        int idx = -1;
        tri_mesh_group(&d->mesh, kinds[k], members, &idx);
        tri_mpi_split(outs[k], tri_mesh_color(&d->mesh, kinds[k]), idx < 0 ? 0 : idx);
    }
    free(members);
    watch_groups(d); /* the splits made the groups afresh */
    return 0;
#else
    snprintf(err, errlen,
             "trident: started as rank %d of %d by a launcher, but this build has no MPI "
             "(rebuild with -DTRI_MPI=ON, or run a single process without mpirun)",
             rank, world);
    return -1;
#endif
}

void tri_dist_bind_ctx(tri_dist *d, tri_ctx *ctx) {
    tri_comm *groups[] = {&d->world, &d->tp, &d->dp, &d->pp, &d->emb};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) groups[i]->ctx = ctx;
}

void tri_dist_free(tri_dist *d) {
    if (d == NULL) return;
#ifdef TRI_HAVE_MPI
    if (d->transport == 1 && d->world.progress == &d->progress) {
        /* MPI_Finalize synchronises the ranks without a deadline: meet here first */
        d->progress.phase = "shut-down";
        tri_comm_barrier(&d->world);
    }
#endif
    tri_comm_free(&d->emb);
    tri_comm_free(&d->pp);
    tri_comm_free(&d->dp);
    tri_comm_free(&d->tp);
    tri_comm_free(&d->world);
#ifdef TRI_HAVE_MPI
    if (d->transport == 1) tri_mpi_finalize();
#endif
    memset(d, 0, sizeof *d);
}

void tri_dist_abort(tri_dist *d, int code) {
    fflush(stdout);
    fflush(stderr);
#ifdef TRI_HAVE_MPI
    if (d != NULL && d->transport == 1) tri_mpi_abort(code);
#endif
    (void)d;
    exit(code);
}
