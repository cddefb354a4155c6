// The CUDA emulation layer: what a kernel file of kernels/cuda/ sees when it
// is compiled as host C++ with TRI_CUEMU defined (kernels/cuda/common.cuh
// includes this header). Test code only; docs/cuda_emulation.md describes how
// it works, the rules it puts on kernel code and its limits.
//
// In short: a launch runs its blocks on a few OS threads; inside a block,
// every CUDA thread is a fiber (its own stack, switched by hand-written code
// in cuemu.cpp). A fiber runs until it reaches __syncthreads, a warp
// intrinsic or its end; the block's scheduler then computes the warp
// intrinsics whose lanes have all arrived, releases barriers that every
// thread reached, and runs the released fibers again in a new random order
// (seeded). Shared memory is per block and filled with NaN when a block
// starts. Misuse (a barrier some threads skip, a mask naming missing lanes,
// lanes of one mask at different intrinsics) stops the program with a
// message naming the kernel, the block and the source lines.
#ifndef TRI_CUEMU_H
#define TRI_CUEMU_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tests/cuemu/cuemu_api.h"

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef void *cudaStream_t;

namespace cuemu {

// What the current fiber and its block see (set by the scheduler; a fiber
// never leaves the OS thread that runs its block).
struct Env {
    uint3 tid, bid;
    dim3 bdim, gdim;
};
extern thread_local const Env *cur;

// The warp-collective operations: the shuffles and votes, and the
// tensor-core ones (MMA_BF16, LDMATRIX), which need every lane of a full warp
// at one call site.
enum WarpOp { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, BALLOT, ANY, ALL, SYNCWARP, MMA_BF16, LDMATRIX };

// Runs body(arg) as every thread of every block of the grid; returns when all
// have finished (a launch is synchronous).
void run(const char *kernel, const char *file, int line, dim3 grid, dim3 block, size_t smem, void (*body)(void *),
         void *arg);
void syncthreads(const char *file, int line);
uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char *file, int line);
void *shared_static(size_t bytes, size_t align, const char *file, int line);
void *shared_dynamic(size_t align);
void atomic_lock();
void atomic_unlock();

// The tensor-core operations behind the wrappers of kernels/cuda/common.cuh
// (tri_mma_bf16_16816, tri_ldmatrix_*, tri_cp_async_*); the fragment layouts
// are those of cuemu_tc.h.
//   mma: lane's d[4] = its part of A B + C, from every lane's a[4], b[2], c[4]
//     (d may alias c); a rendezvous of the whole warp;
//   ldmatrix: `num` (1, 2, 4) 8x8 b16 matrices from shared memory, row r of
//     matrix j at lane 8 j + r's `row`; r[j] the lane's part; a rendezvous;
//   cp_async: queues a copy of `bytes` (4, 8, 16; 16 only for .cg) from
//     global `src` to shared `dst`, of which the first `src_bytes` are read
//     and the rest zeroed; dst reads as the NaN poison until the copy is
//     performed, at the cp_async_wait that covers its group;
//   cp_async_commit: the thread's queued copies become its newest group;
//   cp_async_wait: performs the copies of every group but the newest
//     `pending` (all: cp.async.wait_all = commit + wait 0).
void mma_bf16_16816(float *d, const uint32_t *a, const uint32_t *b, const float *c, const char *file, int line);
void ldmatrix(uint32_t *r, const void *row, int num, bool trans, const char *file, int line);
void cp_async(void *dst, const void *src, int bytes, int src_bytes, bool cg, const char *file, int line);
void cp_async_commit(const char *file, int line);
void cp_async_wait(int pending, const char *file, int line);

// A launch's pointer argument `index` (counted from 1) must be null or lie
// inside a live allocation of the emulated runtime (cuemu_rt.h); otherwise
// the launch fails naming the kernel, the launch site and the argument.
void check_launch_pointer(const char *kernel, const char *file, int line, int index, const void *p);

template <class T> void check_launch_arg(const char *kernel, const char *file, int line, int index, const T &v) {
    if constexpr (std::is_pointer<T>::value && !std::is_function<typename std::remove_pointer<T>::type>::value)
        check_launch_pointer(kernel, file, line, index, (const void *)v);
}

template <class K, class... A>
void launch(const char *name, const char *file, int line, dim3 grid, dim3 block, size_t smem, cudaStream_t, K kernel,
            A... args) {
    int index = 0;
    (check_launch_arg(name, file, line, ++index, args), ...);
    auto body = [&]() { kernel(args...); };
    run(
        name, file, line, grid, block, smem, [](void *p) { (*static_cast<decltype(body) *>(p))(); }, &body);
}

template <class T> T warp_value(WarpOp op, unsigned mask, T v, int arg, int width, const char *file, int line) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp intrinsics move up to 8 bytes");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    bits = warp_op(op, mask, bits, arg, width, file, line);
    T r;
    std::memcpy(&r, &bits, sizeof r);
    return r;
}

} // namespace cuemu

#define threadIdx (cuemu::cur->tid)
#define blockIdx  (cuemu::cur->bid)
#define blockDim  (cuemu::cur->bdim)
#define gridDim   (cuemu::cur->gdim)
#define warpSize  32

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

// The intrinsics name their call site (for the error messages) through
// default arguments, as CUDA code never passes more than the documented ones.
#define CUEMU_SITE const char *file_ = __builtin_FILE(), int line_ = __builtin_LINE()

inline void __syncthreads(CUEMU_SITE) { cuemu::syncthreads(file_, line_); }
inline void __syncwarp(unsigned mask = 0xffffffffu, CUEMU_SITE) {
    cuemu::warp_op(cuemu::SYNCWARP, mask, 0, 0, 32, file_, line_);
}
template <class T> T __shfl_sync(unsigned mask, T v, int src, int width = 32, CUEMU_SITE) {
    return cuemu::warp_value(cuemu::SHFL_IDX, mask, v, src, width, file_, line_);
}
template <class T> T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, CUEMU_SITE) {
    return cuemu::warp_value(cuemu::SHFL_UP, mask, v, (int)delta, width, file_, line_);
}
template <class T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, CUEMU_SITE) {
    return cuemu::warp_value(cuemu::SHFL_DOWN, mask, v, (int)delta, width, file_, line_);
}
template <class T> T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, CUEMU_SITE) {
    return cuemu::warp_value(cuemu::SHFL_XOR, mask, v, lane_mask, width, file_, line_);
}
inline unsigned __ballot_sync(unsigned mask, int pred, CUEMU_SITE) {
    return (unsigned)cuemu::warp_op(cuemu::BALLOT, mask, pred != 0, 0, 32, file_, line_);
}
inline int __any_sync(unsigned mask, int pred, CUEMU_SITE) {
    return (int)cuemu::warp_op(cuemu::ANY, mask, pred != 0, 0, 32, file_, line_);
}
inline int __all_sync(unsigned mask, int pred, CUEMU_SITE) {
    return (int)cuemu::warp_op(cuemu::ALL, mask, pred != 0, 0, 32, file_, line_);
}

// Atomics: one lock for every address (fibers of one block never interleave
// inside an atomic; the lock orders blocks running on other OS threads).
template <class T> T atomicAdd(T *p, T v) {
    cuemu::atomic_lock();
    T old = *p;
    *p = old + v;
    cuemu::atomic_unlock();
    return old;
}
template <class T> T atomicMax(T *p, T v) {
    cuemu::atomic_lock();
    T old = *p;
    *p = old < v ? v : old;
    cuemu::atomic_unlock();
    return old;
}
template <class T> T atomicMin(T *p, T v) {
    cuemu::atomic_lock();
    T old = *p;
    *p = v < old ? v : old;
    cuemu::atomic_unlock();
    return old;
}
template <class T> T atomicExch(T *p, T v) {
    cuemu::atomic_lock();
    T old = *p;
    *p = v;
    cuemu::atomic_unlock();
    return old;
}
template <class T> T atomicCAS(T *p, T compare, T v) {
    cuemu::atomic_lock();
    T old = *p;
    if (old == compare) *p = v;
    cuemu::atomic_unlock();
    return old;
}
inline void __threadfence() {}
inline void __threadfence_block() {}

// Device math functions the host library lacks (CUDA's fast versions are
// approximations; here they are the exact ones, so tolerances must allow the
// device's few ulp).
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }

#endif
