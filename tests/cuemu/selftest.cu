// Kernels that test the emulation layer itself (tests/cuemu/test_cuemu.c).
// Written by the rules of kernels/cuda/common.cuh, as a kernel file is; a
// few break one rule on purpose, as said at each.
#include "kernels/cuda/common.cuh"

#include "tests/cuemu/selftest.h"

// The sum of the block's threads' v, in every thread: warp sums by
// butterfly shuffles, one value per warp through shared memory, and a second
// warp sum. `racy` leaves out the barrier between writing the warp sums and
// reading them (a planted race); the trailing barrier keeps a later call from
// overwriting `red` while slow warps still read it.
DEVFN float block_sum(float v, float *red, bool racy) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(FULL_MASK, v, o);
    if (lane == 0) red[warp] = v;
    if (!racy) __syncthreads();
    float s = lane < nw ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(FULL_MASK, s, o);
    __syncthreads();
    return s;
}

// out[b] = sum of x[b * n, (b + 1) * n); blockDim.x a multiple of 32.
KERNEL block_sum_kernel(float *out, const float *x, int n, int racy) {
    SHARED(float, red, 32);
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[(size_t)blockIdx.x * n + i];
    const float s = block_sum(v, red, racy != 0);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}

void tri_cuemu_test_block_sum(float *out, const float *x, int blocks, int n, int threads, int racy) {
    LAUNCH(block_sum_kernel, blocks, threads, 0, nullptr, out, x, n, racy);
}

// Per thread i (of a block of `threads`, any count): the warp intrinsics on
// v[i] with the parameters of case i; results into out[k * threads + i].
KERNEL warp_kernel(float *out, unsigned *bits, const float *v, const int *arg, int width) {
    const int i = threadIdx.x;
    const int lanes = (int)blockDim.x - (i & ~31) < 32 ? (int)blockDim.x - (i & ~31) : 32;
    const unsigned mask = lanes == 32 ? FULL_MASK : (1u << lanes) - 1u;
    const int n = blockDim.x;
    out[0 * n + i] = __shfl_sync(mask, v[i], arg[i], width);
    out[1 * n + i] = __shfl_up_sync(mask, v[i], (unsigned)arg[i] % 8u, width);
    out[2 * n + i] = __shfl_down_sync(mask, v[i], (unsigned)arg[i] % 8u, width);
    out[3 * n + i] = __shfl_xor_sync(mask, v[i], arg[i] % width, width);
    const int pred = v[i] > 0.0f;
    bits[0 * n + i] = __ballot_sync(mask, pred);
    bits[1 * n + i] = (unsigned)__any_sync(mask, pred);
    bits[2 * n + i] = (unsigned)__all_sync(mask, pred);
    // a half-warp mask: only the lower 16 lanes of each warp take part
    if ((i & 31) < 16 && lanes >= 16) bits[3 * n + i] = __ballot_sync(0x0000ffffu, pred);
}

void tri_cuemu_test_warp(float *out, unsigned *bits, const float *v, const int *arg, int threads, int width) {
    LAUNCH(warp_kernel, 1, threads, 0, nullptr, out, bits, v, arg, width);
}

// Breaks the barrier rule: threads with threadIdx.x >= stop return before
// the barrier the others wait at.
KERNEL divergent_kernel(float *out, int stop) {
    if ((int)threadIdx.x >= stop) return;
    out[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] += 1.0f;
}

void tri_cuemu_test_divergent(float *out, int threads, int stop) {
    LAUNCH(divergent_kernel, 1, threads, 0, nullptr, out, stop);
}

// Each thread takes a ticket from a global counter after each of `phases`
// barriers: ticket[p * n + thread] is its place in the run order of phase p.
KERNEL order_kernel(int *ticket, int *counter, int phases) {
    const int n = blockDim.x;
    for (int p = 0; p < phases; p++) {
        ticket[p * n + threadIdx.x] = atomicAdd(counter, 1) - p * n;
        __syncthreads();
    }
}

void tri_cuemu_test_order(int *ticket, int *counter, int threads, int phases) {
    LAUNCH(order_kernel, 1, threads, 0, nullptr, ticket, counter, phases);
}

// out[i] = the static and the dynamic shared memory as a block finds them
// (read before any write: breaks the rule that shared memory is written
// before it is read, to show the poison).
KERNEL smem_kernel(float *out, int n) {
    SHARED(float, s, 64);
    DYN_SMEM(float, d);
    const int i = threadIdx.x;
    if (i < 64) out[i] = s[i];
    if (i < n) out[64 + i] = d[i];
    __syncthreads();
    if (i < 64) s[i] = (float)i;
    __syncthreads();
}

void tri_cuemu_test_smem(float *out, int blocks, int threads, int n) {
    LAUNCH(smem_kernel, blocks, threads, (size_t)n * sizeof(float), nullptr, out, n);
}

// Float atomics from every thread of every block: out[0] += x[i] for all i.
KERNEL atomic_kernel(float *out, const float *x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}

void tri_cuemu_test_atomic(float *out, const float *x, int n, int threads) {
    LAUNCH(atomic_kernel, tri_cu_blocks((size_t)n, (unsigned)threads), threads, 0, nullptr, out, x, n);
}

// Breaks the warp rule: lanes from `stop` on return before a full-mask shuffle.
KERNEL early_exit_shfl_kernel(float *out, int stop) {
    if ((int)threadIdx.x % 32 >= stop) return;
    out[threadIdx.x] = __shfl_xor_sync(FULL_MASK, 1.0f, 1);
}

void tri_cuemu_test_early_exit_shfl(float *out, int threads, int stop) {
    LAUNCH(early_exit_shfl_kernel, 1, threads, 0, nullptr, out, stop);
}

// Breaks the mask rule: every lane votes with a mask that names lane 0 only.
KERNEL bad_mask_kernel(unsigned *out) { out[threadIdx.x] = __ballot_sync(0x1u, 1); }

void tri_cuemu_test_bad_mask(unsigned *out, int threads) { LAUNCH(bad_mask_kernel, 1, threads, 0, nullptr, out); }
