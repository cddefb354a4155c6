/* The process context of a run: this rank's place in the mesh and one
 * communicator per group. Started once at start-up, freed at exit.
 *
 * Launched by mpirun/tridentrun/srun (an MPI environment is present and
 * Trident was built with MPI): the MPI transport, one rank of many.
 * Otherwise: a world of one rank, no transport at all.
 */
#ifndef TRI_DIST_H
#define TRI_DIST_H

#include "parallel/comm.h"
#include "parallel/mesh.h"
#include "parallel/watchdog.h"

typedef struct tri_dist {
    tri_mesh mesh;
    tri_comm world, tp, dp, pp, emb;
    int transport; /* 0: single process, 1: MPI */
    /* Where this rank is (step, phase), for the watchdog's report: every
     * group's `progress` points here, so a tri_dist must not be copied or
     * moved after tri_dist_init (tri_dist_progress checks it). */
    tri_progress progress;
} tri_dist;

/* Validates tp*pp*dp against the world size before anything is allocated.
 * Returns 0, or -1 with a message naming the numbers in err. Every group
 * gets its name, the deadline TRI_WD_DEFAULT_TIMEOUT_S for each wait, and
 * phase "set-up". */
int tri_dist_init(tri_dist *d, int tp, int pp, int dp, char *err, size_t errlen);
/* Every group's calls touch the memory of this backend context (its stream,
 * its guard); set once the context exists. */
void tri_dist_bind_ctx(tri_dist *d, tri_ctx *ctx);
/* Every later wait on any group of d ends after timeout_s (<= 0: no deadline):
 * the waiting rank reports and aborts the job (see parallel/watchdog.h). */
void tri_dist_set_timeout(tri_dist *d, double timeout_s);
/* Tells the watchdog's report where this rank is: step (1-based; 0 before the
 * first) and phase (a static string, e.g. "train", "eval", "save"). Cheap: two
 * stores. */
void tri_dist_progress(tri_dist *d, long step, const char *phase);
/* NULL-safe; finalises the transport (after a watched barrier, so that no
 * rank waits forever in MPI_Finalize for a peer that never gets there). */
void tri_dist_free(tri_dist *d);
/* Ends the whole job from any rank after an error (MPI_Abort under MPI, exit otherwise). */
void tri_dist_abort(tri_dist *d, int code);

/* World size and rank from the launcher's environment, before any transport
 * is started (1 and 0 when not launched by an MPI launcher). */
void tri_dist_env_world(int *world, int *rank);

#endif
