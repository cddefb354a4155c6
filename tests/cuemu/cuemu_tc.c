/* The tensor-core fragment layouts and the emulated 16x8x16 product
 * (tests/cuemu/cuemu_tc.h; the PTX ISA sections it follows are named there). */
#include "tests/cuemu/cuemu_tc.h"

#include <string.h>

/* "Matrix Fragments for mma.m16n8k16 with floating point type", A:
 *   row = groupID       for a_i where 0 <= i < 2 || 4 <= i < 6
 *         groupID + 8   otherwise
 *   col = threadID_in_group * 2 + (i & 1)       for a_i where i < 4
 *         threadID_in_group * 2 + (i & 1) + 8   for a_i where i >= 4 */
tri_cuemu_rc tri_cuemu_frag_a(int lane, int i) {
    const int group = lane >> 2, tig = lane % 4;
    tri_cuemu_rc p;
    p.row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
    p.col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
    return p;
}

/* B:
 *   row = threadID_in_group * 2 + (i & 1)       for b_i where i < 2
 *         threadID_in_group * 2 + (i & 1) + 8   for b_i where i >= 2
 *   col = groupID */
tri_cuemu_rc tri_cuemu_frag_b(int lane, int i) {
    const int group = lane >> 2, tig = lane % 4;
    tri_cuemu_rc p;
    p.row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
    p.col = group;
    return p;
}

/* C and D:
 *   row = groupID       for c_i where i < 2
 *         groupID + 8   for c_i where i >= 2
 *   col = threadID_in_group * 2 + (i & 1) */
tri_cuemu_rc tri_cuemu_frag_c(int lane, int i) {
    const int group = lane >> 2, tig = lane % 4;
    tri_cuemu_rc p;
    p.row = i < 2 ? group : group + 8;
    p.col = tig * 2 + (i & 1);
    return p;
}

/* ldmatrix: threads 0-7 give the row addresses of the first matrix, 8-15 of
 * the second, 16-23 of the third, 24-31 of the fourth. */
int tri_cuemu_ldmatrix_addr_lane(int matrix, int row) { return 8 * matrix + row; }

/* ldmatrix, the fragment of an 8x8 .b16 matrix: lane `lane` holds row
 * lane / 4, the two elements of columns 2 (lane % 4) and 2 (lane % 4) + 1;
 * with .trans the matrix is read in column-major order, so the lane gets
 * those of the transpose: rows 2 (lane % 4) and + 1 of column lane / 4. */
tri_cuemu_rc tri_cuemu_ldmatrix_elem(int lane, int i, int trans) {
    const int r = lane / 4, c = 2 * (lane % 4) + i;
    tri_cuemu_rc p;
    p.row = trans ? c : r;
    p.col = trans ? r : c;
    return p;
}

static float bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void tri_cuemu_mma_16816_bf16(float *d, const uint16_t *a, const uint16_t *b, const float *c) {
    float out[16 * 8];
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            float acc = c[m * 8 + n];
            /* a bf16 has 8 significant bits: a product has at most 16, exact in fp32 */
            for (int k = 0; k < 16; k++) acc += bf16_to_f32(a[m * 16 + k]) * bf16_to_f32(b[k * 8 + n]);
            out[m * 8 + n] = acc;
        }
    memcpy(d, out, sizeof out);
}
