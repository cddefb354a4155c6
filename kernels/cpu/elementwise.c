/* Memory, residual + bias, bias gradient, reductions and small elementwise
 * helpers of the CPU backend. Contracts in kernels/ops.h. */
#include "kernels/cpu/cpu_internal.h"

#include <omp.h>

/* ---- memory: host memory; copies are synchronous, sync is a no-op ---- */

/* Zero-filled, 64-byte aligned block of at least `bytes` (a valid unique
 * pointer even for 0 bytes); NULL when out of memory. Free with tri_cpu_free. */
void *tri_cpu_alloc(size_t bytes) {
    if (bytes > SIZE_MAX - 63) return NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (p != NULL) memset(p, 0, rounded);
    return p;
}

void tri_cpu_free(void *p) /* NULL-safe */
{
    free(p);
}

/* dst and src must not overlap. */
/* A large copy (a checkpoint snapshot's, a ZeRO shard's) is split over the
 * threads in page-aligned parts: one core's memcpy does not reach the
 * memory bandwidth of two. */
#define COPY_PAR_MIN (256u << 10)
#define COPY_ALIGN 4096u

void tri_cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    if (bytes < COPY_PAR_MIN) {
        memcpy(dst, src, bytes);
        return;
    }
#pragma omp parallel
    {
        size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        size_t part = (bytes / nt + COPY_ALIGN - 1) / COPY_ALIGN * COPY_ALIGN;
        size_t a = t * part < bytes ? t * part : bytes, e = a + part < bytes ? a + part : bytes;
        if (e > a) memcpy((char *)dst + a, (const char *)src + a, e - a);
    }
}

void tri_cpu_zero(void *p, size_t bytes) {
    if (bytes > 0) memset(p, 0, bytes);
}

void tri_cpu_sync(void) {}

/* ---- residual with a bias ---- */

/* out (N, C) = res + x + bias (C)   [overwrite; bias may be NULL; out may alias res or x] */
void tri_cpu_residual_fwd(float *out, const float *res, const float *x, const float *bias, size_t N, size_t C) {
#pragma omp parallel for schedule(static) if (N * C >= TRI_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        float *o = out + n * C;
        const float *r = res + n * C, *xx = x + n * C;
        if (bias != NULL) {
            for (size_t c = 0; c < C; c++) o[c] = r[c] + xx[c] + bias[c];
        } else {
            for (size_t c = 0; c < C; c++) o[c] = r[c] + xx[c];
        }
    }
}

/* Columns per block of the column-sum reduction: 64 floats = 4 AVX-512
 * registers of accumulators, 256 contiguous bytes read per row. */
enum { COLSUM_BLOCK = 64 };

void tri_cpu_colsum_acc(float *dsum, const float *x, size_t N, size_t C) {
    const size_t nblk = (C + COLSUM_BLOCK - 1) / COLSUM_BLOCK;
#pragma omp parallel for schedule(static) if (N * C >= TRI_CPU_PAR_MIN)
    for (size_t bk = 0; bk < nblk; bk++) {
        const size_t c0 = bk * COLSUM_BLOCK;
        float acc[COLSUM_BLOCK] = {0}; /* (width) running sums of this block */
        if (C - c0 >= COLSUM_BLOCK) {
            for (size_t n = 0; n < N; n++) {
                const float *row = x + n * C + c0;
                for (size_t j = 0; j < COLSUM_BLOCK; j++) acc[j] += row[j];
            }
            for (size_t j = 0; j < COLSUM_BLOCK; j++) dsum[c0 + j] += acc[j];
        } else {
            const size_t width = C - c0;
            for (size_t n = 0; n < N; n++) {
                const float *row = x + n * C + c0;
                for (size_t j = 0; j < width; j++) acc[j] += row[j];
            }
            for (size_t j = 0; j < width; j++) dsum[c0 + j] += acc[j];
        }
    }
}

/* dbias (C) += column sums of dout (N, C)                    [accumulate] */
void tri_cpu_bias_bwd(float *dbias, const float *dout, size_t N, size_t C) { tri_cpu_colsum_acc(dbias, dout, N, C); }

/* ---- reductions and elementwise helpers ---- */

/* Sums are cut into this many fixed chunks whatever the thread count; their
 * double sums are added in chunk order: bitwise reproducible. */
enum { SUM_CHUNKS = 64 };

/* sum of x[i] (square = 0) or of x[i]^2 (square = 1), in double */
static inline double chunked_sum(const float *x, size_t n, int square) {
    double part[SUM_CHUNKS]; /* per-chunk sums */
    const size_t chunk = (n + SUM_CHUNKS - 1) / SUM_CHUNKS;
#pragma omp parallel for schedule(static) if (n >= TRI_CPU_PAR_MIN)
    for (int c = 0; c < SUM_CHUNKS; c++) {
        size_t lo = (size_t)c * chunk, hi = lo + chunk;
        if (lo > n) lo = n;
        if (hi > n) hi = n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++) s += square ? (double)x[i] * (double)x[i] : (double)x[i];
        part[c] = s;
    }
    double total = 0.0;
    for (int c = 0; c < SUM_CHUNKS; c++) total += part[c];
    return total;
}

double tri_cpu_sumsq(const float *x, size_t n) { return chunked_sum(x, n, 1); }

double tri_cpu_sum(const float *x, size_t n) { return chunked_sum(x, n, 0); }

/* x (n) *= s                                                          [in place] */
void tri_cpu_scale(float *x, float s, size_t n) {
#pragma omp parallel for schedule(static) if (n >= TRI_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* y (n) += x (n)                                                      [accumulate] */
void tri_cpu_add(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= TRI_CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}
