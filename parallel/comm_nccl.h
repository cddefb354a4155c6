/* The NCCL transport's start-up, for parallel/dist.c only.
 *
 * Declarations only: no NCCL or CUDA type appears here. Compiled only when
 * Trident is built with CUDA and NCCL was found (TRI_HAVE_NCCL), into the
 * CUDA module (see tri_nccl_transport below); the logic that needs no NCCL is
 * in parallel/nccl_plan.h (and tested on any machine).
 *
 * Design (parallel/comm_nccl.c, docs/parallelism.md "Launching"):
 *  - one world communicator from one ncclUniqueId (made by rank 0, handed to
 *    the others by the caller's `bcast`: MPI under mpirun/tridentrun, the TCP
 *    store otherwise), then one ncclCommSplit per group (TP, DP, PP,
 *    embedding, and with context parallelism CP and DP x CP) in which every
 *    rank takes part;
 *  - each group runs on its own communication stream; a call first makes that
 *    stream wait for an event recorded on the compute stream (c->ctx->stream),
 *    so it sees every kernel queued before it; its completion is an event on
 *    the communication stream, which the compute stream in turn waits for
 *    (right after a blocking call, at the wait or test of a request) before
 *    anything queued on it reads, overwrites or frees the call's buffers:
 *    ordered both ways on the GPU, not only by the host's waits
 *    (nccl_plan.h);
 *  - consecutive isend/irecv form one ncclGroupStart/End, closed at the first
 *    wait or test, at any collective, or at a p2p call on another group
 *    (nccl_plan.h);
 *  - every wait polls that event and ncclCommGetAsyncError under the group's
 *    watchdog (c->timeout_s); past it, the rank prints the watchdog's line
 *    (rank, step, group, operation, bytes, peer or members as world ranks),
 *    aborts its communicators (ncclCommAbort) and exits with
 *    TRI_EXIT_TIMEOUT. Every NCCL and CUDA call is checked: a failure prints
 *    "trident: rank R: CALL failed at FILE:LINE (group G): WHY", aborts the
 *    communicators and exits 1 (under mpirun the other ranks are then ended
 *    by the launcher; without it, their own watchdogs end them).
 */
#ifndef TRI_COMM_NCCL_H
#define TRI_COMM_NCCL_H

#include <stddef.h>

#include "parallel/comm.h"
#include "parallel/mesh.h"

/* Hands rank 0's len bytes at buf to every rank (collective). 0 or -1. */
typedef int (*tri_nccl_bcast_fn)(void *ctx, void *buf, size_t len);

/* The groups tri_nccl_init makes, in the order of its `groups` array: world,
 * tp, dp, pp, emb, cp, dpcp (parallel/dist.c's order). */
#define TRI_NCCL_GROUPS 7

/* Collective over the mesh's whole world. Selects the CUDA device
 * local_rank % (devices on this node) (local_rank < 0: the world rank's), makes
 * the world communicator and the groups of m, and overwrites groups[0..4]
 * (world, tp, dp, pp, emb) and, when m->cp > 1, groups[5..6] (cp, dp x cp;
 * with cp == 1 they are left as they are: groups of one, and dp x cp is dp):
 * a group of one where the rank is alone or in none, as tri_mpi_split does.
 * Returns 0, or -1 after a message naming the rank (no device, the id
 * exchange failed); NCCL failures themselves are fatal as above. */
int tri_nccl_init(const tri_mesh *m, int local_rank, tri_nccl_bcast_fn bcast, void *bctx,
                  tri_comm groups[TRI_NCCL_GROUPS]);

/* The transport as the CUDA module hands it out. comm_nccl.c is compiled into
 * the module libtri_cuda.so (kernels/cuda_module.h), not into the programs,
 * and exports one function of its own under the name TRI_NCCL_ENTRY:
 *   const tri_nccl_transport *tri_nccl_entry(void);
 * parallel/dist.c looks that name up in the module (tri_cuda_module_symbol)
 * and checks the sizes before calling init; a module built without NCCL has
 * no such symbol. */
#define TRI_NCCL_ENTRY "tri_nccl_entry"
typedef struct tri_nccl_transport {
    size_t comm_size, mesh_size; /* sizeof tri_comm and tri_mesh where the module was built */
    size_t n_groups;             /* TRI_NCCL_GROUPS where the module was built                */
    int (*init)(const tri_mesh *m, int local_rank, tri_nccl_bcast_fn bcast, void *bctx,
                tri_comm groups[TRI_NCCL_GROUPS]); /* tri_nccl_init */
} tri_nccl_transport;

#endif
