/* The tensor-core operations of the CUDA emulation (docs/cuda_emulation.md):
 * which element of which matrix each lane's fragment registers hold, and the
 * 16x8x16 product itself. The single place these layouts live: the
 * emulator's mma and ldmatrix (cuemu.cpp) place every element through these
 * functions and nothing else, and tests/cuemu/test_cuemu_tc.c tests them on
 * their own against the PTX ISA's text. C and C++.
 *
 * Sources, NVIDIA's "Parallel Thread Execution ISA" (PTX ISA), in its chapter
 * "Warp Level Matrix Multiply-Accumulate Instructions":
 *   - "Matrix Fragments for mma.m16n8k16 with floating point type" (the
 *     .f16 / .bf16 tables: A, B, C and D of mma.sync.aligned.m16n8k16);
 *   - "Warp-level matrix load instruction: ldmatrix" (.m8n8, .b16, .x1 / .x2
 *     / .x4, .trans).
 * In the ISA's words, for lane `lane`: groupID = lane >> 2 and
 * threadID_in_group = lane % 4. A register of two 16-bit elements holds the
 * lower-numbered element (a0 of a0,a1; the lower column of an ldmatrix pair)
 * in its lower 16 bits. */
#ifndef TRI_CUEMU_TC_H
#define TRI_CUEMU_TC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A position in a matrix: (row, col). For B, row is k and col is n. */
typedef struct tri_cuemu_rc {
    int row, col;
} tri_cuemu_rc;

/* mma.m16n8k16 .bf16, A (16 x 16, .row): element a_i, i in [0, 8), of lane
 * `lane` (register i / 2, half i % 2). */
tri_cuemu_rc tri_cuemu_frag_a(int lane, int i);
/* B (16 x 8, .col), as (k, n): element b_i, i in [0, 4) (register i / 2). */
tri_cuemu_rc tri_cuemu_frag_b(int lane, int i);
/* C and D (16 x 8, .f32): element c_i / d_i, i in [0, 4) (one register each). */
tri_cuemu_rc tri_cuemu_frag_c(int lane, int i);

/* ldmatrix .m8n8 .b16: matrix j (j < 1, 2 or 4 for .x1, .x2, .x4) has its
 * eight rows at the addresses given by lanes 8 j + r, r in [0, 8); lanes
 * beyond the last matrix give no address. This is the lane whose address is
 * row `row` of matrix `matrix`. */
int tri_cuemu_ldmatrix_addr_lane(int matrix, int row);
/* Element i (0: the lower 16 bits, 1: the upper) of the register lane
 * `lane` receives for each matrix: its (row, col) in the matrix as stored
 * (row r at the address lane 8 j + r gave, col the 16-bit element of that
 * row). `trans` nonzero for .trans, which hands out the transpose. */
tri_cuemu_rc tri_cuemu_ldmatrix_elem(int lane, int i, int trans);

/* D = A B + C for one mma.m16n8k16.row.col.f32.bf16.bf16.f32, on whole
 * matrices: a (16 x 16) and b (16 x 8, as (k, n)) row-major bf16 bits, c and
 * d (16 x 8) row-major fp32; d may alias c. The emulator's arithmetic, the
 * accumulation order being part of its contract: every product of two bf16
 * values is exact in fp32, and each d[m][n] is c[m][n] plus the products
 * for k = 0, 1, ..., 15 in that order, rounded to fp32 (nearest even) after
 * every addition. (The GPU's tensor cores add in another order and with
 * other intermediate rounding: results may differ in the last bits.) */
void tri_cuemu_mma_16816_bf16(float *d, const uint16_t *a, const uint16_t *b, const float *c);

#ifdef __cplusplus
}
#endif

#endif
