// Kernels that test the tensor-core wrappers of kernels/cuda/common.cuh
// under the emulator (tests/cuemu/test_cuemu_tc.c). Written by the rules of
// a kernel file; the fragment layouts are written out here from the PTX
// ISA's tables, as a kernel would, and not taken from the emulator (whose
// tables, tests/cuemu/cuemu_tc.c, these kernels check from the outside).
// Some kernels plant faults on purpose, said at each.
#include "kernels/cuda/common.cuh"

#include "tests/cuemu/tcself.h"

// 16 bytes: one row of an 8x8 b16 matrix, the unit of ldmatrix and of a
// 16-byte cp.async (aligned so, in both compilations).
struct alignas(16) Row8 {
    uint16_t h[8];
};

DEVFN uint32_t pack2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

// Lane l of a warp, g = l >> 2, t = l % 4 (the ISA's groupID and
// threadID_in_group). A is 16 x lda row-major (the k-tile starting at column
// k0), B is (k, n) with row stride 8, C and D 16 x 8 row-major.
DEVFN void load_a(uint32_t ra[4], const uint16_t *A, int lda, int k0, int g, int t) {
    ra[0] = pack2(A[g * lda + k0 + 2 * t], A[g * lda + k0 + 2 * t + 1]);
    ra[1] = pack2(A[(g + 8) * lda + k0 + 2 * t], A[(g + 8) * lda + k0 + 2 * t + 1]);
    ra[2] = pack2(A[g * lda + k0 + 2 * t + 8], A[g * lda + k0 + 2 * t + 9]);
    ra[3] = pack2(A[(g + 8) * lda + k0 + 2 * t + 8], A[(g + 8) * lda + k0 + 2 * t + 9]);
}

DEVFN void load_b(uint32_t rb[2], const uint16_t *B, int k0, int g, int t) {
    rb[0] = pack2(B[(k0 + 2 * t) * 8 + g], B[(k0 + 2 * t + 1) * 8 + g]);
    rb[1] = pack2(B[(k0 + 2 * t + 8) * 8 + g], B[(k0 + 2 * t + 9) * 8 + g]);
}

DEVFN void store_cd(float *D, const float rd[4], int g, int t) {
    D[g * 8 + 2 * t] = rd[0];
    D[g * 8 + 2 * t + 1] = rd[1];
    D[(g + 8) * 8 + 2 * t] = rd[2];
    D[(g + 8) * 8 + 2 * t + 1] = rd[3];
}

// One product per warp, fragments straight from global memory; the
// accumulator stays in registers across the k-tiles (d aliases c).
// TRI_TC_SWAP_A_REGS swaps A's registers 1 and 2 (a planted wrong mapping).
KERNEL mma_kernel(float *d, const uint16_t *a, const uint16_t *b, const float *c, int ktiles, int fault) {
    const int lane = threadIdx.x % 32, g = lane >> 2, t = lane % 4;
    const size_t p = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int K = 16 * ktiles;
    const uint16_t *A = a + p * 16 * K, *B = b + p * K * 8;
    const float *C = c + p * 128;
    float acc[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
    for (int kt = 0; kt < ktiles; kt++) {
        uint32_t ra[4], rb[2];
        load_a(ra, A, K, 16 * kt, g, t);
        load_b(rb, B, 16 * kt, g, t);
        if (fault == TRI_TC_SWAP_A_REGS) {
            const uint32_t x = ra[1];
            ra[1] = ra[2];
            ra[2] = x;
        }
        tri_mma_bf16_16816(acc, ra, rb, acc);
    }
    store_cd(d + p * 128, acc, g, t);
}

void tri_cuemu_test_mma(float *d, const uint16_t *a, const uint16_t *b, const float *c, int products, int warps,
                        int ktiles, int fault) {
    LAUNCH(mma_kernel, (unsigned)(products / warps), (unsigned)(32 * warps), 0, nullptr, d, a, b, c, ktiles, fault);
}

// One warp, one product, through shared memory: k-tile kt of A (16 rows of
// 16) and of B (16 k-rows of 8, or 8 n-rows of 16) copied with 16-byte
// cp.async into buffer kt % 2 while the warp multiplies the other one.
KERNEL mma_smem_kernel(float *d, const uint16_t *a, const uint16_t *b, int ktiles, int b_n_major, int fault) {
    SHARED(Row8, sa, 2 * 32); // [buf][row 16][half 2]
    SHARED(Row8, sb, 2 * 16); // [buf][k 16] or [buf][n 8][half 2]
    const int lane = threadIdx.x, g = lane >> 2, t = lane % 4, K = 16 * ktiles;
    // lane l copies A's row l / 2, columns 8 (l % 2) .. +8; lanes 0-15 one row of B
    auto issue = [&](int kt) {
        const int buf = kt % 2;
        tri_cp_async_16(&sa[buf * 32 + lane], a + (lane / 2) * K + 16 * kt + 8 * (lane % 2));
        if (lane < 16) {
            const uint16_t *src = b_n_major ? b + (lane / 2) * K + 16 * kt + 8 * (lane % 2) : b + (16 * kt + lane) * 8;
            tri_cp_async_16_cg(&sb[buf * 16 + lane], src);
        }
        tri_cp_async_commit();
    };
    issue(0);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int kt = 0; kt < ktiles; kt++) {
        if (kt + 1 < ktiles) issue(kt + 1);
        if (fault == TRI_TC_WAIT_TOO_FEW)
            tri_cp_async_wait_group<2>();
        else if (fault != TRI_TC_NO_WAIT && kt + 1 < ktiles)
            tri_cp_async_wait_group<1>();
        else if (fault != TRI_TC_NO_WAIT)
            tri_cp_async_wait_group<0>();
        __syncthreads(); // the rows other lanes copied
        const int buf = kt % 2;
        uint32_t ra[4], rb[2];
        // A: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)
        tri_ldmatrix_x4(ra, &sa[buf * 32 + (lane % 16) * 2 + lane / 16]);
        if (b_n_major) // matrices (n 0-7, k 0-7), (n 0-7, k 8-15)
            tri_ldmatrix_x2(rb, &sb[buf * 16 + (lane % 8) * 2 + (lane / 8) % 2]);
        else // matrices (k 0-7, n), (k 8-15, n), transposed
            tri_ldmatrix_x2_trans(rb, &sb[buf * 16 + lane % 16]);
        tri_mma_bf16_16816(acc, ra, rb, acc);
        __syncthreads(); // before buffer kt % 2 is refilled
    }
    if (fault == TRI_TC_NO_WAIT || fault == TRI_TC_WAIT_TOO_FEW) tri_cp_async_wait_all();
    store_cd(d, acc, g, t);
}

void tri_cuemu_test_mma_smem(float *d, const uint16_t *a, const uint16_t *b, int ktiles, int b_n_major, int fault) {
    LAUNCH(mma_smem_kernel, 1, 32, 0, nullptr, d, a, b, ktiles, b_n_major, fault);
}

// ldmatrix on its own: 32 rows in shared memory, lane l points at row
// perm[l] (or nowhere, beyond the lanes that give addresses).
KERNEL ldmatrix_kernel(uint32_t *out, const uint16_t *src, const int *perm, int num, int trans) {
    SHARED(Row8, s, 32);
    const int lane = threadIdx.x;
    for (int i = 0; i < 8; i++) s[lane].h[i] = src[lane * 8 + i];
    __syncthreads();
    uint32_t r[4] = {0xdeadbeefu, 0xdeadbeefu, 0xdeadbeefu, 0xdeadbeefu};
    const void *row = lane < 8 * num ? &s[perm[lane]] : nullptr;
    switch (num * 2 + (trans != 0)) {
    case 2: tri_ldmatrix_x1(r, row); break;
    case 3: tri_ldmatrix_x1_trans(r, row); break;
    case 4: tri_ldmatrix_x2(r, row); break;
    case 5: tri_ldmatrix_x2_trans(r, row); break;
    case 8: tri_ldmatrix_x4(r, row); break;
    case 9: tri_ldmatrix_x4_trans(r, row); break;
    default: break;
    }
    for (int j = 0; j < 4; j++) out[lane * 4 + j] = r[j];
}

void tri_cuemu_test_ldmatrix(uint32_t *out, const uint16_t *src, const int *perm, int num, int trans) {
    LAUNCH(ldmatrix_kernel, 1, 32, 0, nullptr, out, src, perm, num, trans);
}

// cp.async alone, double buffered: tile i is the floats [i tile, (i + 1)
// tile), tile = threads * chunk; thread t copies chunk t of it and, after the
// wait and the barrier, reads chunk t + 1 (its neighbour's copy).
KERNEL cp_async_kernel(float *out, const float *in, int n, int bytes, int fault) {
    DYN_SMEM(float, buf); // [2][tile]
    const int T = blockDim.x, tid = threadIdx.x, chunk = bytes / 4, tile = T * chunk;
    const int ntiles = (n + tile - 1) / tile;
    auto issue = [&](int i) {
        const int at = i * tile + tid * chunk; // the first float of this thread's chunk
        float *dst = buf + (i % 2) * tile + tid * chunk;
        if (bytes == 16) {
            const int left = n - at, valid = left >= chunk ? chunk : left > 0 ? left : 0;
            // rows past the end read nothing (and point at the start of `in`)
            tri_cp_async_16_zfill(dst, valid > 0 ? in + at : in, 4 * valid);
        } else if (at < n) {
            if (bytes == 8)
                tri_cp_async_8(dst, in + at);
            else
                tri_cp_async_4(dst, in + at);
        }
        tri_cp_async_commit();
    };
    issue(0);
    for (int i = 0; i < ntiles; i++) {
        if (i + 1 < ntiles) issue(i + 1);
        if (fault == TRI_TC_WAIT_TOO_FEW)
            tri_cp_async_wait_group<2>();
        else if (fault == TRI_TC_NO_WAIT || fault == TRI_TC_NEVER_WAIT) {
        } else if (i + 1 < ntiles || fault == TRI_TC_LAST_WAIT_SHORT)
            tri_cp_async_wait_group<1>();
        else
            tri_cp_async_wait_group<0>();
        if (fault != TRI_TC_NO_BARRIER) __syncthreads(); // the neighbour's copy
        const int nb = (tid + 1) % T;
        for (int j = 0; j < chunk; j++) {
            const int at = i * tile + nb * chunk + j;
            if (at < n) out[at] = 2.0f * buf[(i % 2) * tile + nb * chunk + j] + 1.0f;
        }
        __syncthreads(); // before buffer i % 2 is refilled
    }
    if (fault == TRI_TC_NO_WAIT || fault == TRI_TC_WAIT_TOO_FEW || fault == TRI_TC_LAST_WAIT_SHORT)
        tri_cp_async_wait_all();
}

void tri_cuemu_test_cp_async(float *out, const float *in, int n, int threads, int bytes, int fault) {
    LAUNCH(cp_async_kernel, 1, (unsigned)threads, 2 * (size_t)threads * (size_t)bytes, nullptr, out, in, n, bytes,
           fault);
}

// The misuses of tri_cuemu_test_tc_misuse (tcself.h), each fatal.
KERNEL tc_misuse_kernel(float *d, int what, int bad) {
    SHARED(Row8, s, 32);
    const int lane = threadIdx.x % 32;
    for (int i = 0; i < 8; i++) s[lane].h[i] = 0;
    __syncthreads();
    uint32_t ra[4] = {0, 0, 0, 0}, rb[2] = {0, 0};
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    switch (what) {
    case TRI_TC_MISUSE_MMA_EXIT:
        if (lane == bad) return;
        tri_mma_bf16_16816(acc, ra, rb, acc);
        break;
    case TRI_TC_MISUSE_MMA_OTHER_SITE:
        if (lane == bad)
            tri_mma_bf16_16816(acc, ra, rb, acc);
        else
            tri_mma_bf16_16816(acc, ra, rb, acc);
        break;
    case TRI_TC_MISUSE_MMA_VS_LDMATRIX:
        if (lane == bad)
            tri_ldmatrix_x4(ra, &s[lane]);
        else
            tri_mma_bf16_16816(acc, ra, rb, acc);
        break;
    case TRI_TC_MISUSE_LDMATRIX_VARIANT:
        if (lane == bad)
            tri_ldmatrix_x2(ra, &s[lane]);
        else
            tri_ldmatrix_x4(ra, &s[lane]);
        break;
    case TRI_TC_MISUSE_MMA_PARTIAL_WARP: tri_mma_bf16_16816(acc, ra, rb, acc); break;
    case TRI_TC_MISUSE_LDMATRIX_GLOBAL: tri_ldmatrix_x1(ra, d + 4 * lane); break;
    case TRI_TC_MISUSE_CP_ASYNC_TO_GLOBAL:
        tri_cp_async_16(d + 4 * lane, &s[lane]);
        tri_cp_async_wait_all();
        break;
    case TRI_TC_MISUSE_MMA_BARRIER:
        if (lane == bad)
            __syncthreads();
        else
            tri_mma_bf16_16816(acc, ra, rb, acc);
        break;
    default: break;
    }
    for (int i = 0; i < 4; i++) d[4 * lane + i] = acc[i] + (float)ra[0];
}

void tri_cuemu_test_tc_misuse(float *d, int what, int lane) {
    LAUNCH(tc_misuse_kernel, 1, what == TRI_TC_MISUSE_MMA_PARTIAL_WARP ? 48u : 32u, 0, nullptr, d, what, lane);
}
