/* Host entry points of the kernels that test the tensor-core wrappers of
 * kernels/cuda/common.cuh under the emulator (tests/cuemu/tcself.cu, tested
 * by tests/cuemu/test_cuemu_tc.c). Every pointer is device memory of the
 * emulated runtime. bf16 values are their 16 bits. */
#ifndef TRI_CUEMU_TCSELF_H
#define TRI_CUEMU_TCSELF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Faults the kernels can plant (argument `fault`). */
enum {
    TRI_TC_OK = 0,
    TRI_TC_SWAP_A_REGS,    /* A's registers 1 and 2 swapped: a wrong lane mapping */
    TRI_TC_NO_WAIT,        /* no cp.async.wait_group before the reads (a wait_all at the end) */
    TRI_TC_WAIT_TOO_FEW,   /* wait_group<2> where <1> is needed (a wait_all at the end) */
    TRI_TC_NO_BARRIER,     /* no __syncthreads between the waits and the reads of other threads' copies */
    TRI_TC_NEVER_WAIT,     /* no wait at all: copies still queued when the kernel ends */
    TRI_TC_LAST_WAIT_SHORT /* wait_group<1> at the last tile too (<0> needed; a wait_all at the end) */
};

/* `products` independent products, `warps` per block (one per warp): for
 * product p, d[p] (16 x 8 fp32, row-major) = a[p] (16 x K, row-major)
 * b[p] (K x 8, row-major, as (k, n)) + c[p] (16 x 8), K = 16 ktiles, through
 * ktiles chained mma (the accumulator in place), fragments loaded straight
 * from global memory by the PTX ISA's tables. */
void tri_cuemu_test_mma(float *d, const uint16_t *a, const uint16_t *b, const float *c, int products, int warps,
                        int ktiles, int fault);

/* One product d (16 x 8) = a (16 x K, row-major) b, K = 16 ktiles, by one
 * warp through shared memory: every k-tile copied with cp.async (double
 * buffered), A read with ldmatrix.x4, B with ldmatrix.x2 (b_n_major: b
 * stored as (n, k), 8 x K row-major) or ldmatrix.x2.trans (b stored as
 * (k, n), K x 8 row-major). fault: TRI_TC_OK, TRI_TC_NO_WAIT or
 * TRI_TC_WAIT_TOO_FEW. */
void tri_cuemu_test_mma_smem(float *d, const uint16_t *a, const uint16_t *b, int ktiles, int b_n_major, int fault);

/* src: 32 rows of 8 bf16, copied to shared memory; lane l gives the address
 * of shared row perm[l] (lanes l >= 8 num give a null address), then
 * ldmatrix .x<num> (.trans if `trans`); out[4 l + j] = lane l's register j
 * (registers j >= num keep 0xdeadbeef). */
void tri_cuemu_test_ldmatrix(uint32_t *out, const uint16_t *src, const int *perm, int num, int trans);

/* out[i] = 2 in[i] + 1 for i < n through shared memory: tiles of `threads`
 * chunks of `bytes` (4, 8 or 16) copied with cp.async, double buffered, each
 * thread reading the chunk its neighbour copied. bytes 16 copies a partial
 * last chunk with the zero-fill form; 4 and 8 need n to be a multiple of the
 * chunk. fault: any but TRI_TC_SWAP_A_REGS. */
void tri_cuemu_test_cp_async(float *out, const float *in, int n, int threads, int bytes, int fault);

/* Misuses of the tensor-core operations, each fatal (the emulator reports
 * it): `what` selects one (TRI_TC_MISUSE_*), `lane` the lane that breaks
 * ranks. d: 32 * 4 floats of device memory. */
enum {
    TRI_TC_MISUSE_MMA_EXIT = 0,       /* one lane returns before the mma */
    TRI_TC_MISUSE_MMA_OTHER_SITE,     /* one lane runs an mma at another call site */
    TRI_TC_MISUSE_MMA_VS_LDMATRIX,    /* one lane runs an ldmatrix where the others run an mma */
    TRI_TC_MISUSE_LDMATRIX_VARIANT,   /* one lane runs ldmatrix.x2 where the others run .x4 */
    TRI_TC_MISUSE_MMA_PARTIAL_WARP,   /* an mma in a block of 48 threads */
    TRI_TC_MISUSE_LDMATRIX_GLOBAL,    /* ldmatrix from global memory */
    TRI_TC_MISUSE_CP_ASYNC_TO_GLOBAL, /* cp.async into global memory */
    TRI_TC_MISUSE_MMA_BARRIER         /* one lane waits at __syncthreads while the others wait at an mma */
};
void tri_cuemu_test_tc_misuse(float *d, int what, int lane);

#ifdef __cplusplus
}
#endif

#endif
