/* The emulation layer's controls, callable from C tests (tests/cuemu/).
 * See docs/cuda_emulation.md. */
#ifndef TRI_CUEMU_API_H
#define TRI_CUEMU_API_H

#include <stddef.h>
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
    uint64_t switches;      /* fiber switches into CUDA threads */
    uint64_t barriers;      /* __syncthreads released (per block) */
    uint64_t warp_ops;      /* warp intrinsics computed (per mask group; mma and ldmatrix included) */
    uint64_t mma, ldmatrix; /* tensor-core operations computed (per warp) */
    uint64_t async_copies;  /* cp.async copies queued (per thread) */
} tri_cuemu_stats;
void tri_cuemu_stats_get(tri_cuemu_stats *s);

/* What a pointer is to the emulated runtime (cuemu_rt.c), for the
 * emulator's checks of kernel launches and cp.async sources: inside a live
 * allocation (its end included, so that an empty slice at the end passes),
 * inside one freed earlier (the last 4096 frees are remembered), or neither
 * (host memory, or never allocated). Thread-safe. */
typedef enum tri_cuemu_rt_ptr { TRI_CUEMU_PTR_NONE = 0, TRI_CUEMU_PTR_LIVE, TRI_CUEMU_PTR_FREED } tri_cuemu_rt_ptr;
tri_cuemu_rt_ptr tri_cuemu_rt_pointer_kind(const void *p);
/* Whether [p, p + bytes) lies inside one live allocation. */
int tri_cuemu_rt_range_live(const void *p, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
