/* The closed forms of src/plan/shard.c against the ZeRO paper's per-
 * parameter bytes (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
 * Training Trillion Parameter Models", Figure 1: 2 + 2 + 12/d, 2 + 14/d,
 * 16/d for mixed precision, whose gradients are 2-byte; Trident's are fp32,
 * 2 more bytes a parameter, sharded as the paper's are), the collective
 * volumes written out by hand from ring all-reduce / reduce-scatter /
 * all-gather, the ring of context parallelism counted block by block, and
 * offload's PCIe bytes. */
#include <criterion/criterion.h>

#include <math.h>

#include "plan/shard.h"

static tri_shard_mem mem_of(size_t N, int P, int zero, int d, size_t chunk, int n_chunks, int offload, int staging) {
    tri_shard_in in = {.elems = N,
                       .alloc = N, /* N a multiple of d: no padding */
                       .P = P,
                       .zero = zero,
                       .d = d,
                       .chunk_elems = chunk,
                       .n_chunks = n_chunks,
                       .offload = offload,
                       .staging = staging};
    tri_shard_mem m;
    tri_shard_mem_of(&in, &m);
    return m;
}

/* Bytes per parameter between steps (the working sets of the step taken
 * out: the whole fp32 gradient of stages 2 and 3, 4 a parameter, and stage
 * 3's gathered chunks): the paper's forms with the gradient's 2 bytes made
 * Trident's 4, for d in 1..64, bf16 and fp32 (fp32: no masters, K = 8). */
Test(shard, bytes_per_parameter_are_the_zero_papers_with_fp32_gradients) {
    const size_t N = (size_t)64 * 3 * 5 * 7 * 1024; /* a multiple of every d below */
    const int ds[] = {1, 2, 3, 4, 5, 7, 8, 16, 64};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
        for (int P = 2; P <= 4; P += 2) {
            const double d = ds[i], K = P == 2 ? 12 : 8, G = 4;
            /* the paper (mixed precision, P = 2, G = 2): Psi (2 + 2 + 12/d), Psi (2 + 14/d), Psi 16/d */
            const double want[4] = {P + G + K, P + G + K / d, P + (G + K) / d, (P + G + K) / d};
            if (P == 2) {
                cr_expect_float_eq(want[1] - 2, 2 + 2 + 12 / d, 1e-12); /* the paper's, 2 bytes of gradient less */
                cr_expect_float_eq(want[2] - 2 / d, 2 + 14 / d, 1e-12);
                cr_expect_float_eq(want[3] - 2 / d, 16 / d, 1e-12);
            }
            for (int z = 0; z <= 3; z++) {
                tri_shard_mem m = mem_of(N, P, z, ds[i], 0, 2, 0, 0);
                double held = (double)(m.params + m.grads + m.optim) - (z >= 2 ? 4.0 * N : 0.0);
                cr_expect_float_eq(held / N, want[z], 1e-12, "d %d P %d zero %d: %.6f bytes/param, want %.6f", ds[i], P,
                                   z, held / N, want[z]);
                cr_expect_eq(m.host, 0);
            }
        }
}

/* The step's working sets: the whole fp32 gradient beside the shard at
 * stages 2 and 3 (the backward accumulates into it, reduced once a step),
 * two gathered chunks at stage 3 (one with a single chunk), never more than
 * the whole; and the padding: ZeRO's shard is of the padded count. */
Test(shard, working_sets_and_padding) {
    const size_t N = 1 << 20, U = 5000;
    tri_shard_mem z2 = mem_of(N, 2, 2, 8, U, 4, 0, 0), z3 = mem_of(N, 2, 3, 8, U, 4, 0, 0);
    cr_expect_eq(z2.params, 2 * N);
    cr_expect_eq(z2.grads, 4 * (N / 8 + N), "ZeRO-2: the shard and the whole gradient of the step");
    cr_expect_eq(z3.params, 2 * (N / 8 + 2 * U), "ZeRO-3: the shard and two gathered chunks");
    cr_expect_eq(z3.grads, 4 * (N / 8 + N));
    tri_shard_mem one = mem_of(N, 2, 3, 8, N, 1, 0, 0);
    cr_expect_eq(one.params, 2 * (N / 8 + N), "one chunk: gathered whole, once");
    tri_shard_mem big = mem_of(N, 2, 3, 8, N, 2, 0, 0);
    cr_expect_eq(big.params, 2 * (N / 8 + N), "at most the whole");
    tri_shard_in in = {.elems = 1000, .alloc = 1024, .P = 4, .zero = 1, .d = 4};
    tri_shard_mem m;
    tri_shard_mem_of(&in, &m);
    cr_expect(m.params == 4 * 1024 && m.grads == 4 * 1024 && m.optim == 8 * 256, "%zu %zu %zu", m.params, m.grads,
              m.optim);
}

/* Offload: the optimizer's bytes move to the host, and a GPU stages the
 * shard's gradients (4) and parameters (P) there; the device keeps nothing
 * of the optimizer and the rest as it was. */
Test(shard, offload_moves_the_optimizer_to_the_host) {
    const size_t N = 1 << 20;
    for (int z = 0; z <= 3; z++)
        for (int P = 2; P <= 4; P += 2)
            for (int staging = 0; staging <= 1; staging++) {
                tri_shard_mem a = mem_of(N, P, z, 4, 100, 2, 0, staging);
                tri_shard_mem b = mem_of(N, P, z, 4, 100, 2, 1, staging);
                size_t S = z ? N / 4 : N, K = P == 2 ? 12 : 8;
                cr_expect(b.params == a.params && b.grads == a.grads && b.optim == 0);
                cr_expect_eq(b.host, K * S + (staging ? S * (4 + (size_t)P) : 0), "zero %d P %d staging %d", z, P,
                             staging);
                cr_expect_eq(a.optim, K * S);
            }
    cr_expect_float_eq(tri_shard_pcie_bytes(1000, 2), 6000.0, 1e-9);  /* 4 down, 2 up */
    cr_expect_float_eq(tri_shard_pcie_bytes(1000, 4), 12000.0, 1e-9); /* 4 + 4 down, 4 up */
}

/* Ring collectives over d ranks move (d-1)/d of the buffer per pass: an
 * all-reduce two passes, reduce-scatter and all-gather one each. */
Test(shard, dp_bytes_per_step_are_ring_passes) {
    const double N = 1e6;
    for (int d = 1; d <= 16; d++)
        for (int m = 1; m <= 4; m++)
            for (int P = 2; P <= 4; P += 2) {
                const double f = d > 1 ? (double)(d - 1) / d : 0, G = 4 * N, W = P * N;
                const double want_rs[4] = {2 * f * G, f * G, f * G, f * G};
                const double want_ag[4] = {0, f * W, f * W, 2 * m * f * W};
                for (int z = 0; z <= 3; z++) {
                    double rs, ag, tot = tri_shard_dp_bytes(z, d, m, P, N, &rs, &ag);
                    cr_expect(fabs(rs - want_rs[z]) <= 1e-6 * G && fabs(ag - want_ag[z]) <= 1e-6 * G &&
                                  fabs(tot - rs - ag) <= 1e-6,
                              "d %d m %d P %d zero %d: rs %g ag %g", d, m, P, z, rs, ag);
                }
                /* stage 1 and 2 move an all-reduce's volume when P = 4 and m = 1;
                 * stage 3 one all-gather more */
                if (P == 4 && m == 1) {
                    double z0 = tri_shard_dp_bytes(0, d, 1, 4, N, NULL, NULL);
                    cr_expect_float_eq(tri_shard_dp_bytes(1, d, 1, 4, N, NULL, NULL), z0, 1e-6);
                    cr_expect_float_eq(tri_shard_dp_bytes(2, d, 1, 4, N, NULL, NULL), z0, 1e-6);
                    cr_expect_float_eq(tri_shard_dp_bytes(3, d, 1, 4, N, NULL, NULL), z0 + f * W, 1e-6);
                }
            }
}

/* The ring of context parallelism, block by block: each of the cp - 1
 * forward passes sends the K and V of the B x T/cp tokens the rank holds
 * (block bytes B (T/cp) w A each); the backward's passes the blocks again
 * and their fp32 gradients (B (T/cp) w 4 each). */
Test(shard, cp_ring_sends_cp_minus_one_kv_blocks_per_layer) {
    cr_expect_eq(tri_shard_cp_ring_bytes(1, 4, 8192, 128, 2, 0), 0.0);
    cr_expect_eq(tri_shard_cp_ring_bytes(1, 4, 8192, 128, 2, 1), 0.0);
    for (int cp = 2; cp <= 16; cp *= 2) {
        const double B = 2, T = 32768, w = 1024, A = 2;
        double block = B * (T / cp) * w * A, grad = B * (T / cp) * w * 4, fwd = 0, bwd = 0;
        for (int pass = 1; pass < cp; pass++) {
            fwd += 2 * block;          /* K and V */
            bwd += 2 * (block + grad); /* K and V, dK and dV */
        }
        cr_expect_float_eq(tri_shard_cp_ring_bytes(cp, B, T, w, A, 0), fwd, 1e-6 * fwd, "cp %d", cp);
        cr_expect_float_eq(tri_shard_cp_ring_bytes(cp, B, T, w, A, 1), bwd, 1e-6 * bwd, "cp %d", cp);
    }
}
