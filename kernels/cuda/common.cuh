/* What every kernel file of kernels/cuda/ includes first: the few macros
 * through which a kernel source reaches CUDA, so that the same .cu file
 * compiles two ways:
 *   - with nvcc (__CUDACC__): real CUDA, for sm_80/sm_90;
 *   - with TRI_CUEMU defined (tests only): as host C++ (g++ -x c++) against the
 *     emulation layer "cuemu.h", which runs the kernels on the CPU with CUDA
 *     threads as fibers (docs/cuda_emulation.md). The emulated build
 *     (tests/cuemu/CMakeLists.txt) defines TRI_CUEMU and puts the layer's
 *     folder on its include path: a kernel file never names a test file.
 *
 * The rules a kernel file follows (the emulation relies on them):
 *   - launch only through LAUNCH(kernel, grid, block, smem, stream, args...),
 *     never with <<< >>>;
 *   - static shared memory only through SHARED(type, name, count) (an array of
 *     `count` elements, one per block; declare it at the top of the kernel),
 *     dynamic shared memory only through DYN_SMEM(type, name) (the launch's
 *     smem bytes); never `__shared__` directly;
 *   - threads of a warp exchange values only through the *_sync intrinsics
 *     with an explicit mask (__shfl_sync, __shfl_xor_sync, __shfl_down_sync,
 *     __shfl_up_sync, __ballot_sync, __any_sync, __all_sync, __syncwarp);
 *     every lane named in the mask calls the same intrinsic; no implicit warp
 *     synchrony, no __activemask;
 *   - __syncthreads() only where every thread of the block reaches the same
 *     call (no thread returns early while others still wait at a barrier);
 *   - no spin-waits on memory, no grid-wide sync, no inline PTX without a
 *     portable fallback; blocks communicate only through atomics or a second
 *     launch;
 *   - device functions are KERNEL (a __global__ entry) or DEVFN (a __device__
 *     helper), so that the host compilation sees plain inline functions.
 * Every launch is followed by a check of the launch status (file:line and
 * the kernel's name on failure). */
#ifndef TRI_CUDA_COMMON_CUH
#define TRI_CUDA_COMMON_CUH

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The name of an exported host entry point of a kernel file: tri_cuda_<name>
 * in the real build, tri_cuemu_<name> under the emulation (so that both can
 * sit in one program without clashing). kernels/cuda/kernels.h declares them. */
#include "kernels/cuda/kernels.h"

#if defined(TRI_CUEMU)

#include "cuemu.h" /* from the emulated build's include path (above) */

#define KERNEL static void
#define DEVFN  static inline
#define LAUNCH(kernel, grid, block, smem, stream, ...) \
    cuemu::launch(#kernel, __FILE__, __LINE__, (grid), (block), (smem), (stream), kernel, __VA_ARGS__)
#define SHARED(type, name, count)                           \
    type(&name)[count] = *reinterpret_cast<type(*)[count]>( \
        cuemu::shared_static(sizeof(type) * (count), alignof(type), __FILE__, __LINE__))
#define DYN_SMEM(type, name) type *name = reinterpret_cast<type *>(cuemu::shared_dynamic(alignof(type)))

#elif defined(__CUDACC__)

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"

#define KERNEL __global__ static void
#define DEVFN  __device__ static __forceinline__
#define LAUNCH(kernel, grid, block, smem, stream, ...)                                \
    do {                                                                              \
        kernel<<<(grid), (block), (smem), (cudaStream_t)(stream)>>>(__VA_ARGS__);     \
        tri_cuda_check(cudaGetLastError(), "launch of " #kernel, __FILE__, __LINE__); \
    } while (0)
#define SHARED(type, name, count) __shared__ type name[count]
#define DYN_SMEM(type, name)                                     \
    extern __shared__ __align__(16) unsigned char name##_raw_[]; \
    type *name = reinterpret_cast<type *>(name##_raw_)

#else
#error "kernels/cuda/*.cu compile with nvcc, or as host C++ with -DTRI_CUEMU (tests/cuemu)"
#endif

/* ---- storage types of the compute dtype ----
 * The tensors that kernels/ops.h passes as `void *` (activations, and
 * parameters as the ops read them) are stored as ctx->act_dtype: float
 * (TRI_F32) or bf16 (TRI_BF16). A kernel is a template on that storage type
 * T; it reads with tri_cu_ld (exact widening to fp32), computes and
 * accumulates in fp32, and writes with tri_cu_st (one rounding to nearest,
 * ties to even; NaN quieted with its sign kept, as kernels/half.h, so a bf16
 * kernel stores the bits the CPU's bf16 emulation would store for the same
 * fp32 value). bf16 is held as its 16 bits, the layout of CUDA's
 * __nv_bfloat16, so cuBLASLt reads the same memory as CUDA_R_16BF.
 * A host entry point takes the dtype and instantiates the kernel through
 * TRI_CU_DTYPE_SWITCH. */
typedef struct tri_cu_bf16 {
    uint16_t bits;
} tri_cu_bf16;

DEVFN float tri_cu_ld(const float *p, size_t i) { return p[i]; }
DEVFN void tri_cu_st(float *p, size_t i, float v) { p[i] = v; }

DEVFN float tri_cu_ld(const tri_cu_bf16 *p, size_t i) {
    const uint32_t u = (uint32_t)p[i].bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

DEVFN void tri_cu_st(tri_cu_bf16 *p, size_t i, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        p[i].bits = (uint16_t)((u >> 16) | 0x0040u); /* NaN: quiet, keep the sign */
    } else {
        u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; a carry may reach the exponent or infinity */
        p[i].bits = (uint16_t)(u >> 16);
    }
}

/* A host entry point was given a dtype it has no kernel for: a programming
 * error (the op table admits only fp32 and bf16), reported and fatal. */
static inline void tri_cu_bad_dtype(const char *what, int dt, const char *file, int line) {
    fprintf(stderr, "trident: CUDA kernel %s at %s:%d: dtype %d is neither fp32 nor bf16\n", what, file, line, dt);
    abort();
}

/* Runs `body` (a statement list) with T the storage type of dtype `dt`
 * (TRI_F32 or TRI_BF16); any other dtype aborts naming the entry point. */
#define TRI_CU_DTYPE_SWITCH(dt, what, T, ...)                                                         \
    do {                                                                                              \
        if ((dt) == TRI_BF16) {                                                                       \
            typedef tri_cu_bf16 T;                                                                    \
            __VA_ARGS__                                                                               \
        } else if ((dt) == TRI_F32) {                                                                 \
            typedef float T;                                                                          \
            __VA_ARGS__                                                                               \
        } else {                                                                                      \
            tri_cu_bad_dtype((what), (int)(dt), __FILE__, __LINE__);                                  \
        }                                                                                             \
    } while (0)

/* Full-warp mask of the *_sync intrinsics. */
#define FULL_MASK 0xffffffffu

/* Ceiling division of sizes, for grid dimensions. */
static inline unsigned tri_cu_blocks(size_t n, unsigned per_block) {
    return (unsigned)((n + per_block - 1) / per_block);
}

#endif
