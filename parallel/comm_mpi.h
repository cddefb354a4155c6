/* The MPI transport's start-up functions, for parallel/dist.c only.
 *
 * Declarations only: no MPI type appears here, so including this header does
 * not pull in <mpi.h> (parallel/comm_mpi.c is the one file that includes it).
 * Compiled only when Trident is built with MPI (TRI_HAVE_MPI).
 *
 * Every MPI call inside is checked: a failure prints the world rank, the call,
 * file:line and MPI's error string, then aborts the whole job (MPI_Abort).
 */
#ifndef TRI_COMM_MPI_H
#define TRI_COMM_MPI_H

#include "parallel/comm.h"

/* Starts MPI (thread level FUNNELED: only the thread that called this makes
 * MPI calls), sets MPI_ERRORS_RETURN on MPI_COMM_WORLD, and reports the world
 * size and this process's rank. Returns 0, or -1 after a message when MPI
 * could not start. Call once per process. */
int tri_mpi_init(int *world, int *rank);

/* Collective over MPI_COMM_WORLD (every rank must call it, in the same order).
 * Ranks passing the same color >= 0 form one group, ordered by key (ties by
 * world rank). color -1: this rank joins no group (MPI_UNDEFINED) and *out
 * becomes a group of one. A group of size 1 is also returned as a group of one
 * (no transport). Overwrites *out; release with tri_comm_free. Returns 0. */
int tri_mpi_split(tri_comm *out, int color, int key);

/* *out = all ranks of the job (a duplicate of MPI_COMM_WORLD, a group of one
 * when the world has one rank). Collective. Release with tri_comm_free. Returns 0. */
int tri_mpi_world(tri_comm *out);

/* Finalises MPI if it was started and not yet finalised. Every group made
 * above must have been freed before. */
void tri_mpi_finalize(void);

/* Flushes stdout/stderr and ends every rank of the job with `code`. Does not
 * return. Works before tri_mpi_init too (then it simply exits). */
void tri_mpi_abort(int code);

#endif
