/* The CUDA emulation layer tested on its own kernels (tests/cuemu/selftest.cu):
 * reductions right for every seed, a planted missing barrier caught, warp
 * intrinsics against plain loops, a barrier divergence reported, the run
 * order seeded and shuffled at every barrier, shared memory poisoned, a
 * host pointer or a freed buffer refused at the launch. What the kernels
 * see is emulated device memory (dev_mem.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cuemu/cuemu_api.h"
#include "tests/cuemu/dev_mem.h"
#include "tests/cuemu/selftest.h"
#include "tests/cuemu/run_child.h"

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Small integers: every partial sum is exact in fp32, so the block sums must
 * equal the reference bit for bit whatever the order of the additions. */
static void fill_ints(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) x[i] = (float)((int)(rng_next(&seed) % 101) - 50);
}

/* Runs the block-sum kernel under `seed`; returns how many of the blocks'
 * sums differ from the reference (NaN counts as differing). */
static int block_sum_wrong(const float *x, int blocks, int n, int threads, int racy, uint64_t seed) {
    float *out = dev_alloc(sizeof(float) * 16);
    for (int b = 0; b < blocks; b++) out[b] = NAN;
    tri_cuemu_set_seed(seed);
    tri_cuemu_test_block_sum(out, x, blocks, n, threads, racy);
    int wrong = 0;
    for (int b = 0; b < blocks; b++) {
        double ref = 0;
        for (int i = 0; i < n; i++) ref += x[(size_t)b * n + i];
        if (!(out[b] == (float)ref)) wrong++;
    }
    dev_free(out);
    return wrong;
}

Test(cuemu, block_reduction_is_right_for_every_seed) {
    enum { B = 5, N = 1000 };
    float *x = dev_alloc(sizeof(float) * B * N);
    fill_ints(x, (size_t)B * N, 7);
    const int threads[] = {32, 96, 256, 1024};
    for (int t = 0; t < 4; t++)
        for (uint64_t seed = 1; seed <= 60; seed++)
            cr_assert_eq(block_sum_wrong(x, B, N, threads[t], 0, seed), 0, "threads %d seed %llu", threads[t],
                         (unsigned long long)seed);
    tri_cuemu_stats st;
    tri_cuemu_stats_get(&st);
    cr_expect_gt(st.barriers, 0);
    cr_expect_gt(st.warp_ops, 0);
    dev_free(x);
}

/* The same kernel without the barrier between the warps' writes to shared
 * memory and warp 0's reads: warp 0 reads a slot before its warp wrote it
 * (and finds the NaN poison) unless, by chance, every writer ran first. */
Test(cuemu, missing_barrier_is_caught_for_most_seeds) {
    enum { B = 3, N = 777, SEEDS = 100 };
    float *x = dev_alloc(sizeof(float) * B * N);
    fill_ints(x, (size_t)B * N, 11);
    int caught = 0;
    for (uint64_t seed = 1; seed <= SEEDS; seed++) caught += block_sum_wrong(x, B, N, 256, 1, seed) > 0;
    cr_expect_geq(caught, 95, "the missing barrier changed the result for only %d of %d seeds", caught, SEEDS);
    dev_free(x);
}

/* CUDA's rules for the shuffles, as a plain loop over the lanes of one warp
 * segment (lanes [w0, w0 + lanes) of the block). */
static void warp_reference(float *out, unsigned *bits, const float *v, const int *arg, int n, int width) {
    for (int i = 0; i < n; i++) {
        const int w0 = i & ~31, lane = i & 31, seg = w0 + (lane & ~(width - 1));
        const int lanes = n - w0 < 32 ? n - w0 : 32;
        out[0 * n + i] = v[seg + arg[i] % width];
        const int d = arg[i] % 8;
        out[1 * n + i] = i - d >= seg ? v[i - d] : v[i];
        out[2 * n + i] = i + d < seg + width ? v[i + d] : v[i];
        out[3 * n + i] = v[seg + ((lane ^ (arg[i] % width)) & (width - 1))];
        unsigned ballot = 0, half = 0;
        for (int k = 0; k < lanes; k++) {
            if (v[w0 + k] > 0.0f) ballot |= 1u << k;
            if (k < 16 && v[w0 + k] > 0.0f) half |= 1u << k;
        }
        const unsigned full = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
        bits[0 * n + i] = ballot;
        bits[1 * n + i] = ballot != 0;
        bits[2 * n + i] = ballot == full;
        bits[3 * n + i] = lane < 16 && lanes >= 16 ? half : 0xdeadbeefu;
    }
}

Test(cuemu, warp_intrinsics_match_a_plain_loop) {
    /* (threads, width): full warps for width 32; with a last warp of 16
     * lanes, widths that fit in it */
    const int cases[][2] = {{64, 32}, {96, 32}, {80, 16}, {80, 8}, {48, 4}, {32, 1}};
    float *v = dev_alloc(sizeof(float) * 96), *out = dev_alloc(sizeof(float) * 4 * 96);
    int *arg = dev_alloc(sizeof(int) * 96);
    unsigned *bits = dev_alloc(sizeof(unsigned) * 4 * 96);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c][0], width = cases[c][1];
        for (uint64_t seed = 1; seed <= 8; seed++) {
            float ref[4 * 96];
            unsigned rbits[4 * 96];
            uint64_t s = seed * 1000 + c;
            for (int i = 0; i < n; i++) {
                v[i] = (float)((int)(rng_next(&s) % 200) - 100 + (seed == 1 ? 200 : 0)); /* seed 1: all > 0 */
                arg[i] = (int)(rng_next(&s) % 32);
            }
            for (int i = 0; i < 4 * n; i++) {
                out[i] = NAN;
                bits[i] = 0xdeadbeefu;
            }
            tri_cuemu_set_seed(seed);
            tri_cuemu_test_warp(out, bits, v, arg, n, width);
            warp_reference(ref, rbits, v, arg, n, width);
            for (int i = 0; i < 4 * n; i++) {
                cr_assert_eq(out[i], ref[i], "threads %d width %d seed %llu: shuffle %d of thread %d", n, width,
                             (unsigned long long)seed, i / n, i % n);
                cr_assert_eq(bits[i], rbits[i], "threads %d width %d seed %llu: vote %d of thread %d", n, width,
                             (unsigned long long)seed, i / n, i % n);
            }
        }
    }
    dev_free(v), dev_free(out), dev_free(arg), dev_free(bits);
}

static void divergent_child(void) {
    float *out = dev_alloc(sizeof(float) * 64);
    tri_cuemu_set_workers(1);
    tri_cuemu_test_divergent(out, 64, 40);
}

Test(cuemu, barrier_divergence_is_reported) {
    int status = 0;
    char *msg = run_child(divergent_child, &status);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status %d, stderr: %s", status, msg);
    cr_expect(strstr(msg, "barrier divergence") != NULL, "%s", msg);
    cr_expect(strstr(msg, "divergent_kernel") != NULL, "names the kernel: %s", msg);
    cr_expect(strstr(msg, "selftest.cu:") != NULL, "names the barrier's line: %s", msg);
    cr_expect(strstr(msg, "40 threads wait") != NULL, "counts the waiting threads: %s", msg);
    free(msg);
}

static void early_exit_child(void) {
    float *out = dev_alloc(sizeof(float) * 64);
    tri_cuemu_set_workers(1);
    tri_cuemu_test_early_exit_shfl(out, 64, 20);
}

static void bad_mask_child(void) {
    unsigned *out = dev_alloc(sizeof(unsigned) * 32);
    tri_cuemu_set_workers(1);
    tri_cuemu_test_bad_mask(out, 32);
}

/* A shuffle whose mask names lanes that returned early, and a mask without
 * the caller's own lane: fatal, with the thread, the intrinsic and the line. */
Test(cuemu, warp_intrinsic_misuse_is_reported) {
    int status = 0;
    char *msg = run_child(early_exit_child, &status);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status %d, stderr: %s", status, msg);
    cr_expect(strstr(msg, "deadlock") != NULL && strstr(msg, "__shfl_xor_sync(mask 0xffffffff)") != NULL, "%s", msg);
    cr_expect(strstr(msg, "which has exited") != NULL && strstr(msg, "selftest.cu:") != NULL, "%s", msg);
    free(msg);
    msg = run_child(bad_mask_child, &status);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "status %d, stderr: %s", status, msg);
    cr_expect(strstr(msg, "__ballot_sync") != NULL && strstr(msg, "does not name its own lane") != NULL, "%s", msg);
    free(msg);
}

/* The run order: a permutation of the threads in each phase between
 * barriers, the same for the same seed, another for another seed, and
 * reshuffled at every barrier. */
Test(cuemu, run_order_is_seeded_and_reshuffled_at_every_barrier) {
    enum { T = 100, P = 4 };
    int *a = dev_alloc(sizeof(int) * P * T), *b = dev_alloc(sizeof(int) * P * T), *c = dev_alloc(sizeof(int) * P * T);
    int *counter = dev_alloc(sizeof(int));
    tri_cuemu_set_workers(1);
    tri_cuemu_set_seed(5);
    *counter = 0;
    tri_cuemu_test_order(a, counter, T, P);
    tri_cuemu_set_seed(5);
    *counter = 0;
    tri_cuemu_test_order(b, counter, T, P);
    tri_cuemu_set_seed(6);
    *counter = 0;
    tri_cuemu_test_order(c, counter, T, P);
    cr_expect(memcmp(a, b, sizeof(int) * P * T) == 0, "the same seed gave another order");
    cr_expect(memcmp(a, c, sizeof(int) * P * T) != 0, "another seed gave the same order");
    for (int p = 0; p < P; p++) {
        int seen[T] = {0};
        for (int i = 0; i < T; i++) {
            cr_assert(a[p * T + i] >= 0 && a[p * T + i] < T);
            seen[a[p * T + i]]++;
        }
        for (int i = 0; i < T; i++) cr_assert_eq(seen[i], 1, "phase %d is not a permutation", p);
        if (p > 0) cr_expect(memcmp(a + p * T, a + (p - 1) * T, sizeof(int) * T) != 0, "phase %d kept the order", p);
    }
    tri_cuemu_set_workers(2);
    dev_free(a), dev_free(b), dev_free(c), dev_free(counter);
}

/* Every block finds its static and dynamic shared memory full of NaN, even
 * after earlier blocks on the same OS thread wrote to theirs. */
Test(cuemu, shared_memory_is_poisoned_at_every_block_start) {
    enum { B = 6, T = 96, N = 80 };
    float *out = dev_alloc(sizeof(float) * (64 + N));
    for (int w = 1; w <= 2; w++) {
        tri_cuemu_set_workers(w);
        for (int b = 1; b <= B; b++) {
            for (int i = 0; i < 64 + N; i++) out[i] = 0.0f;
            tri_cuemu_test_smem(out, b, T, N);
            for (int i = 0; i < 64 + N; i++) cr_assert(isnan(out[i]), "blocks %d: slot %d read %g", b, i, out[i]);
        }
    }
    tri_cuemu_set_workers(2);
    dev_free(out);
}

Test(cuemu, float_atomics_from_many_blocks_lose_nothing) {
    enum { N = 20000 };
    float *x = dev_alloc(sizeof(float) * N), *out = dev_alloc(sizeof(float));
    fill_ints(x, N, 3);
    double ref = 0;
    for (int i = 0; i < N; i++) ref += x[i];
    for (uint64_t seed = 1; seed <= 4; seed++) {
        *out = 0.0f;
        tri_cuemu_set_seed(seed);
        tri_cuemu_test_atomic(out, x, N, 128);
        cr_expect_eq(*out, (float)ref, "seed %llu", (unsigned long long)seed);
    }
    dev_free(x), dev_free(out);
}

/* The launch check: every pointer argument null or inside a live device
 * allocation (its end included). A host pointer and a freed buffer each stop
 * the launch with a message naming the kernel, its launch site and the
 * argument (counted from 1). */
static void host_pointer_child(void) {
    float host[4], *x = dev_alloc(sizeof(float) * 64);
    tri_cuemu_test_block_sum(host, x, 1, 64, 32, 0); /* out: argument 1 */
}

static void freed_buffer_child(void) {
    float *out = dev_alloc(sizeof(float) * 4), *x = dev_alloc(sizeof(float) * 64);
    dev_free(x);
    tri_cuemu_test_block_sum(out, x, 1, 64, 32, 0); /* x: argument 2 */
}

Test(cuemu, launch_pointer_arguments_must_be_live_device_memory) {
    int status = 0;
    char *msg = run_child(host_pointer_child, &status);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "host pointer: status %d, stderr: %s", status, msg);
    cr_expect(strstr(msg, "launch of block_sum_kernel at ") != NULL && strstr(msg, "selftest.cu:") != NULL,
              "names the kernel and the launch: %s", msg);
    cr_expect(strstr(msg, "argument 1 (") != NULL && strstr(msg, "lies in no live device allocation") != NULL, "%s",
              msg);
    free(msg);
    msg = run_child(freed_buffer_child, &status);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "freed buffer: status %d, stderr: %s", status, msg);
    cr_expect(strstr(msg, "launch of block_sum_kernel at ") != NULL, "names the kernel: %s", msg);
    cr_expect(strstr(msg, "argument 2 (") != NULL && strstr(msg, "has been freed") != NULL, "%s", msg);
    free(msg);
    /* passes: an offset inside an allocation, its end (an empty slice), null */
    float *x = dev_alloc(sizeof(float) * 64), *out = dev_alloc(sizeof(float) * 3);
    fill_ints(x, 64, 5);
    tri_cuemu_test_block_sum(out + 1, x + 32, 1, 32, 32, 0);
    double ref = 0;
    for (int i = 32; i < 64; i++) ref += x[i];
    cr_expect_eq(out[1], (float)ref);
    tri_cuemu_test_block_sum(out + 2, x + 64, 1, 0, 32, 0); /* n = 0: reads nothing, writes out[2] = 0 */
    cr_expect_eq(out[2], 0.0f);
    out[2] = 1.0f;
    tri_cuemu_test_block_sum(out + 2, NULL, 1, 0, 32, 0);
    cr_expect_eq(out[2], 0.0f);
    dev_free(x), dev_free(out);
}
