/* Host entry points of the emulator's own test kernels (tests/cuemu/selftest.cu). */
#ifndef TRI_CUEMU_SELFTEST_H
#define TRI_CUEMU_SELFTEST_H

#ifdef __cplusplus
extern "C" {
#endif

void tri_cuemu_test_block_sum(float *out, const float *x, int blocks, int n, int threads, int racy);
void tri_cuemu_test_warp(float *out, unsigned *bits, const float *v, const int *arg, int threads, int width);
void tri_cuemu_test_divergent(float *out, int threads, int stop);
void tri_cuemu_test_order(int *ticket, int *counter, int threads, int phases);
void tri_cuemu_test_smem(float *out, int blocks, int threads, int n);
void tri_cuemu_test_atomic(float *out, const float *x, int n, int threads);
void tri_cuemu_test_early_exit_shfl(float *out, int threads, int stop);
void tri_cuemu_test_bad_mask(unsigned *out, int threads);

#ifdef __cplusplus
}
#endif

#endif
