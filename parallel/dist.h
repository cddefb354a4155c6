/* The process context of a run: this rank's place in the mesh and one
 * communicator per group. Started once at start-up, freed at exit.
 *
 * Launched by mpirun/tridentrun/srun (an MPI environment is present and
 * Trident was built with MPI): the MPI transport, one rank of many.
 * Launched with torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT) and no MPI launcher, or by srun in a build without MPI (or
 * with TRIDENT_BOOTSTRAP=store): the world meets through the TCP store
 * (parallel/tcp_store.h), which bootstraps NCCL; until tri_dist_use_nccl the
 * world group's collectives of host values go through the store
 * (tri_store_comm_world) and the other groups have no transport (any call on
 * them ends the job, saying so). A
 * build without NCCL refuses such a world of several ranks: the CPU ops'
 * transport is MPI ("launch with tridentrun/mpirun, or build with CUDA for
 * NCCL").
 * Otherwise: a world of one rank, no transport at all.
 *
 * Host and device memory (docs/cuda.md "Multi-GPU"). NCCL reads device
 * memory only. Before tri_dist_use_nccl every group takes host memory (MPI;
 * under TRI_TRANSPORT_STORE only the world group, through the store); from it on every group is
 * device_only (parallel/comm.h): activations, gradients, parameters and
 * pipeline buffers are backend memory already, and the few host values the
 * trainer exchanges (the step's loss and gradient norm, the stop flag, the
 * validation sums, the pipeline timings, the checkpoint's agreement flag and
 * directory) go through the _host calls, which stage them through a backend
 * buffer on such a group. There is no second, host-side communicator: one
 * set of groups, one transport at a time. The trainer switches after the
 * preflight checks (src/train/setup.c), so what runs before (the checkpoint
 * store's opening, the preflight agreement: world collectives of host
 * values) is on MPI or the store.
 */
#ifndef TRI_DIST_H
#define TRI_DIST_H

#include "parallel/comm.h"
#include "parallel/mesh.h"
#include "parallel/watchdog.h"

/* How the ranks of a run reach each other before tri_dist_use_nccl (the
 * numbers are written by tests/tools/mpi_probe.c: they stay). */
typedef enum tri_transport {
    TRI_TRANSPORT_NONE = 0,  /* a world of one rank: nothing to reach            */
    TRI_TRANSPORT_MPI = 1,   /* MPI (mpirun, tridentrun, srun in a build with MPI) */
    TRI_TRANSPORT_STORE = 2, /* the TCP store, which bootstraps NCCL (RANK/WORLD_SIZE,
                                or srun without MPI): only the world group of host values */
} tri_transport;

typedef struct tri_dist {
    tri_mesh mesh;
    tri_comm world, tp, dp, pp, emb;
    /* context parallelism (parallel.cp > 1): the CP group (the ring of
     * attention) and the dp x cp group that reduces the gradients of
     * replicated parameters; groups of one when cp == 1 (then the gradient
     * group is dp: tri_dist_grad_group) */
    tri_comm cp, dpcp;
    tri_transport transport;
    int nccl;                /* the groups are NCCL communicators (tri_dist_use_nccl) */
    int local_rank;          /* this rank's index on its node from the launcher; -1: unknown */
    struct tri_store *store; /* TRI_TRANSPORT_STORE: the rendezvous store (owned) */
    /* Where this rank is (step, phase), for the watchdog's report: every
     * group's `progress` points here, so a tri_dist must not be copied or
     * moved after tri_dist_init (tri_dist_progress checks it). */
    tri_progress progress;
} tri_dist;

/* Validates tp*pp*dp against the world size before anything is allocated.
 * Returns 0, or -1 after a message naming the numbers (base/err.h; bad
 * input: the caller exits with TRI_EXIT_BAD_INPUT). Every group gets its
 * name, the deadline TRI_WD_DEFAULT_TIMEOUT_S for each wait, and phase
 * "set-up". */
int tri_dist_init(tri_dist *d, int tp, int pp, int dp);
/* tri_dist_init with the run's deadline: the rendezvous at the TCP store
 * (ranks launched by RANK/WORLD_SIZE or Slurm without MPI) waits for the
 * missing ranks at most timeout_s (parallel.timeout_s; 0: forever), not
 * TRI_WD_DEFAULT_TIMEOUT_S; and with store_ok 0 (the CPU backend, whose
 * transport is MPI) such a launch is refused at once, before waiting for any
 * peer. The groups' own deadlines are tri_dist_set_timeout's. */
int tri_dist_init_with(tri_dist *d, int tp, int pp, int dp, double timeout_s, int store_ok);
/* tri_dist_init_with with a context-parallel axis of cp ranks (the mesh's
 * rank order tp-cp-dp-pp, parallel/mesh.h): with cp > 1 the cp and dp x cp
 * groups are made too (MPI splits; through the store, pending until
 * tri_dist_use_nccl makes them NCCL communicators). */
int tri_dist_init_cp(tri_dist *d, int tp, int cp, int pp, int dp, double timeout_s, int store_ok);
/* The group over which the gradients of replicated parameters are summed
 * (and ZeRO shards them): dp, or dp x cp under context parallelism, where
 * the CP ranks of a replica each hold part of every sequence (Megatron's
 * combined data-and-context-parallel group). */
tri_comm *tri_dist_grad_group(tri_dist *d);
/* Moves every group onto NCCL (CUDA device local_rank % devices): rank 0's
 * ncclUniqueId goes to the others through MPI or the store, then
 * tri_nccl_init makes the communicators (collective over the world). Call
 * after tri_dist_bind_ctx with the CUDA backend's context. A world of one:
 * nothing to do. Returns 0, or -1 after a message naming the rank (no NCCL
 * in this build, no CUDA device). */
int tri_dist_use_nccl(tri_dist *d);
/* For tests, in place of tri_dist_use_nccl where there is no GPU: every
 * group keeps its transport (MPI) but becomes device_only, so every later
 * call checks that its buffers are backend memory and ends the job naming
 * the call when one is not. Needs a bound context that knows its allocations
 * ("cpu-guard"); returns 0, or -1 after a message naming the rank. */
int tri_dist_check_device_memory(tri_dist *d);
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
/* Starts the progress heartbeat (parallel/heartbeat.h) on every rank:
 * collective over the world (under MPI, world rank 0 serves the heartbeat's
 * store and sends its address). progress_timeout_s <= 0, a world of one or
 * no transport: nothing. Returns 0, or -1 after a warning when some rank
 * could not start it (the run goes on without it, on every rank). */
int tri_dist_start_heartbeat(tri_dist *d, double progress_timeout_s);
/* NULL-safe; finalises the transport (after a watched barrier, so that no
 * rank waits forever in MPI_Finalize for a peer that never gets there). */
void tri_dist_free(tri_dist *d);
/* Ends the whole job from any rank after an error (MPI_Abort under MPI, exit
 * otherwise), first recording `code` as this rank's end for tridentrun
 * (base/exitrec.h). */
void tri_dist_abort(tri_dist *d, int code);

/* World size and rank from the launcher's environment, before any transport
 * is started (1 and 0 when not launched by an MPI launcher). */
void tri_dist_env_world(int *world, int *rank);

#endif
