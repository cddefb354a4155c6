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
 *   - no spin-waits on memory, no grid-wide sync, no inline PTX: tensor cores
 *     and asynchronous copies only through the wrappers below (tri_mma_*,
 *     tri_ldmatrix_*, tri_cp_async_*), which the emulation runs as warp
 *     operations; blocks communicate only through atomics or a second
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

/* A host entry point was called against its contract (kernels/cuda/kernels.h):
 * a programming error, reported naming the entry point and fatal. */
static inline void tri_cu_fail(const char *what, const char *why, const char *file, int line) {
    fprintf(stderr, "trident: CUDA kernel %s at %s:%d: %s\n", what, file, line, why);
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

/* ---- tensor cores and asynchronous copies (sm_80 and later) ----
 * Kernels reach mma.sync, ldmatrix and cp.async only through these wrappers:
 * inline PTX under nvcc, warp operations of the emulator under TRI_CUEMU
 * (docs/cuda_emulation.md; the fragment layouts: tests/cuemu/cuemu_tc.h and
 * the PTX ISA's "Matrix Fragments for mma.m16n8k16 with floating point
 * type"). Compiled for an architecture below sm_80 they trap.
 *
 * tri_mma_bf16_16816(d, a, b, c): mma.sync.aligned.m16n8k16.row.col.f32.bf16
 *   .bf16.f32, D (16 x 8, fp32) = A (16 x 16, bf16) B (16 x 8, bf16) + C.
 *   Each lane holds its fragments: a[4] (two bf16 per register, the lower-
 *   numbered element in the lower 16 bits), b[2], c[4] and d[4] (fp32; d may
 *   be c). For lane l, g = l >> 2 and t = l % 4:
 *     a: reg 0 = A[g][2t, 2t+1], reg 1 = A[g+8][2t, 2t+1],
 *        reg 2 = A[g][2t+8, 2t+9], reg 3 = A[g+8][2t+8, 2t+9];
 *     b: reg 0 = B[2t, 2t+1][g], reg 1 = B[2t+8, 2t+9][g]  (B as (k, n));
 *     c, d: [0] = C[g][2t], [1] = C[g][2t+1], [2] = C[g+8][2t], [3] = C[g+8][2t+1].
 *   Every lane of the warp calls it, at one call site (.sync.aligned).
 * tri_ldmatrix_x{1,2,4}[_trans](r, row): ldmatrix.sync.aligned.m8n8.x{1,2,4}
 *   [.trans].shared.b16: 1, 2 or 4 8x8 matrices of 16-bit elements from shared
 *   memory. Row i of matrix j is at `row` of lane 8 j + i (16 bytes, 16-byte
 *   aligned; the other lanes' `row` is ignored). r[j] of lane l: the elements
 *   (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of matrix j, in the lower
 *   and upper half; with _trans those of its transpose. The whole warp calls
 *   it, at one call site.
 * tri_cp_async_{4,8,16}(dst, src) (cp.async.ca.shared.global; _16_cg:
 *   cp.async.cg, which bypasses L1), tri_cp_async_16_zfill(dst, src, n): copy
 *   4, 8 or 16 bytes (both addresses aligned to that) from global `src` to
 *   shared `dst` in the background; _zfill reads only the first n (0 to 16)
 *   bytes and zeroes the rest (n = 0 reads nothing: a guard for rows past the
 *   end). The copy is not complete, and `dst` must not be read, until
 *   tri_cp_async_commit() has closed its group and a tri_cp_async_wait_group
 *   <N>() has waited for it: wait_group<N> waits until at most the N newest
 *   committed groups of this thread are pending; tri_cp_async_wait_all()
 *   commits and waits for everything. A wait covers the calling thread's own
 *   copies only: a __syncthreads() after it makes them visible to the block.
 *   Every copy must be waited for before the kernel ends. */
#if defined(TRI_CUEMU)

static inline void tri_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                                      CUEMU_SITE) {
    cuemu::mma_bf16_16816(d, a, b, c, file_, line_);
}
static inline void tri_ldmatrix_x1(uint32_t r[1], const void *row, CUEMU_SITE) {
    cuemu::ldmatrix(r, row, 1, false, file_, line_);
}
static inline void tri_ldmatrix_x2(uint32_t r[2], const void *row, CUEMU_SITE) {
    cuemu::ldmatrix(r, row, 2, false, file_, line_);
}
static inline void tri_ldmatrix_x4(uint32_t r[4], const void *row, CUEMU_SITE) {
    cuemu::ldmatrix(r, row, 4, false, file_, line_);
}
static inline void tri_ldmatrix_x1_trans(uint32_t r[1], const void *row, CUEMU_SITE) {
    cuemu::ldmatrix(r, row, 1, true, file_, line_);
}
static inline void tri_ldmatrix_x2_trans(uint32_t r[2], const void *row, CUEMU_SITE) {
    cuemu::ldmatrix(r, row, 2, true, file_, line_);
}
static inline void tri_ldmatrix_x4_trans(uint32_t r[4], const void *row, CUEMU_SITE) {
    cuemu::ldmatrix(r, row, 4, true, file_, line_);
}
static inline void tri_cp_async_4(void *dst, const void *src, CUEMU_SITE) {
    cuemu::cp_async(dst, src, 4, 4, false, file_, line_);
}
static inline void tri_cp_async_8(void *dst, const void *src, CUEMU_SITE) {
    cuemu::cp_async(dst, src, 8, 8, false, file_, line_);
}
static inline void tri_cp_async_16(void *dst, const void *src, CUEMU_SITE) {
    cuemu::cp_async(dst, src, 16, 16, false, file_, line_);
}
static inline void tri_cp_async_16_cg(void *dst, const void *src, CUEMU_SITE) {
    cuemu::cp_async(dst, src, 16, 16, true, file_, line_);
}
static inline void tri_cp_async_16_zfill(void *dst, const void *src, int src_bytes, CUEMU_SITE) {
    cuemu::cp_async(dst, src, 16, src_bytes, true, file_, line_);
}
static inline void tri_cp_async_commit(CUEMU_SITE) { cuemu::cp_async_commit(file_, line_); }
template <int N> static inline void tri_cp_async_wait_group(CUEMU_SITE) {
    static_assert(N >= 0, "cp.async.wait_group takes a count of groups left pending, 0 or more");
    cuemu::cp_async_wait(N, file_, line_);
}
static inline void tri_cp_async_wait_all(CUEMU_SITE) {
    cuemu::cp_async_commit(file_, line_);
    cuemu::cp_async_wait(0, file_, line_);
}

#else /* nvcc */

/* Inline PTX where the architecture has it (sm_80 and later); elsewhere,
 * including nvcc's host pass, which never runs a device function, a trap. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TRI_CU_HAVE_SM80 1
#else
#define TRI_CU_HAVE_SM80 0
#endif

DEVFN uint32_t tri_cu_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

DEVFN void tri_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#if TRI_CU_HAVE_SM80
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
#else
    __trap();
#endif
}

#if TRI_CU_HAVE_SM80
#define TRI_CU_LDMATRIX(shape, r, a) \
    asm volatile("ldmatrix.sync.aligned.m8n8." shape ".shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a) : "memory")
#define TRI_CU_LDMATRIX2(shape, r, a)                                                \
    asm volatile("ldmatrix.sync.aligned.m8n8." shape ".shared.b16 {%0, %1}, [%2];\n" \
                 : "=r"(r[0]), "=r"(r[1])                                            \
                 : "r"(a)                                                            \
                 : "memory")
#define TRI_CU_LDMATRIX4(shape, r, a)                                                        \
    asm volatile("ldmatrix.sync.aligned.m8n8." shape ".shared.b16 {%0, %1, %2, %3}, [%4];\n" \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                            \
                 : "r"(a)                                                                    \
                 : "memory")
#else
#define TRI_CU_LDMATRIX(shape, r, a)  __trap()
#define TRI_CU_LDMATRIX2(shape, r, a) __trap()
#define TRI_CU_LDMATRIX4(shape, r, a) __trap()
#endif

DEVFN void tri_ldmatrix_x1(uint32_t r[1], const void *row) { TRI_CU_LDMATRIX("x1", r, tri_cu_smem_addr(row)); }
DEVFN void tri_ldmatrix_x2(uint32_t r[2], const void *row) { TRI_CU_LDMATRIX2("x2", r, tri_cu_smem_addr(row)); }
DEVFN void tri_ldmatrix_x4(uint32_t r[4], const void *row) { TRI_CU_LDMATRIX4("x4", r, tri_cu_smem_addr(row)); }
DEVFN void tri_ldmatrix_x1_trans(uint32_t r[1], const void *row) {
    TRI_CU_LDMATRIX("x1.trans", r, tri_cu_smem_addr(row));
}
DEVFN void tri_ldmatrix_x2_trans(uint32_t r[2], const void *row) {
    TRI_CU_LDMATRIX2("x2.trans", r, tri_cu_smem_addr(row));
}
DEVFN void tri_ldmatrix_x4_trans(uint32_t r[4], const void *row) {
    TRI_CU_LDMATRIX4("x4.trans", r, tri_cu_smem_addr(row));
}
#undef TRI_CU_LDMATRIX
#undef TRI_CU_LDMATRIX2
#undef TRI_CU_LDMATRIX4

#if TRI_CU_HAVE_SM80
#define TRI_CU_CP_ASYNC(cache, n, dst, src)                                                                      \
    asm volatile("cp.async." cache ".shared.global [%0], [%1], " #n ";\n" ::"r"(tri_cu_smem_addr(dst)), "l"(src) \
                 : "memory")
#else
#define TRI_CU_CP_ASYNC(cache, n, dst, src) __trap()
#endif

DEVFN void tri_cp_async_4(void *dst, const void *src) { TRI_CU_CP_ASYNC("ca", 4, dst, src); }
DEVFN void tri_cp_async_8(void *dst, const void *src) { TRI_CU_CP_ASYNC("ca", 8, dst, src); }
DEVFN void tri_cp_async_16(void *dst, const void *src) { TRI_CU_CP_ASYNC("ca", 16, dst, src); }
DEVFN void tri_cp_async_16_cg(void *dst, const void *src) { TRI_CU_CP_ASYNC("cg", 16, dst, src); }
#undef TRI_CU_CP_ASYNC

DEVFN void tri_cp_async_16_zfill(void *dst, const void *src, int src_bytes) {
#if TRI_CU_HAVE_SM80
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tri_cu_smem_addr(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
#else
    __trap();
#endif
}

DEVFN void tri_cp_async_commit() {
#if TRI_CU_HAVE_SM80
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
    __trap();
#endif
}

template <int N> DEVFN void tri_cp_async_wait_group() {
    static_assert(N >= 0, "cp.async.wait_group takes a count of groups left pending, 0 or more");
#if TRI_CU_HAVE_SM80
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#else
    __trap();
#endif
}

DEVFN void tri_cp_async_wait_all() {
#if TRI_CU_HAVE_SM80
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#else
    __trap();
#endif
}

#endif /* TRI_CUEMU / nvcc */

/* Two fp32 values rounded to bf16 (to nearest, ties to even) in one 32-bit
 * register, `lo` in the lower half: an mma operand made of fp32 results (the
 * probabilities of a flash attention, reused as the A operand of P V).
 * cvt.rn.bf16x2.f32 under nvcc; tri_cu_st's rounding under the emulation (the
 * same value for every finite input). */
#if defined(TRI_CUEMU)
DEVFN uint32_t tri_cu_pack_bf16x2(float lo, float hi) {
    tri_cu_bf16 r[2];
    tri_cu_st(r, 0, lo);
    tri_cu_st(r, 1, hi);
    return (uint32_t)r[0].bits | (uint32_t)r[1].bits << 16;
}
#else
#include <cuda_bf16.h>
DEVFN uint32_t tri_cu_pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x = lo: the lower half */
    uint32_t r;
    memcpy(&r, &v, sizeof r);
    return r;
}
#endif

/* Full-warp mask of the *_sync intrinsics. */
#define FULL_MASK 0xffffffffu

/* Ceiling division of sizes, for grid dimensions. */
static inline unsigned tri_cu_blocks(size_t n, unsigned per_block) {
    return (unsigned)((n + per_block - 1) / per_block);
}

#endif
