/* The emulation layer's controls, callable from C tests (tests/cuemu/).
 * See docs/cuda_emulation.md. */
#ifndef TRI_CUEMU_API_H
#define TRI_CUEMU_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The scheduling seed of the launches that follow: it picks the order in
 * which blocks start and, at every sync point of every block, the order in
 * which the released threads run. Each launch also mixes in its sequence
 * number, so two launches of one test differ. Default 1. */
void tri_cuemu_set_seed(uint64_t seed);

/* OS threads that run the blocks of a launch (default 2; 1 runs every block
 * on the calling thread). */
void tri_cuemu_set_workers(int n);

/* Counters since the start of the process (for tests and the docs). */
typedef struct tri_cuemu_stats {
    uint64_t launches, blocks, threads;
    uint64_t switches; /* fiber switches into CUDA threads */
    uint64_t barriers; /* __syncthreads released (per block) */
    uint64_t warp_ops; /* warp intrinsics computed (per mask group) */
} tri_cuemu_stats;
void tri_cuemu_stats_get(tri_cuemu_stats *s);

#ifdef __cplusplus
}
#endif

#endif
