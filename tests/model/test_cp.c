/* Context parallelism's split (model/cp.c): each CP rank's local rows
 * against the load-balanced layout built here by enumeration (the 2 cp
 * chunks dealt out as r and 2cp-1-r, Megatron's), and the positions against
 * the tokens they carry. The ring itself is proven end to end in
 * tests/system/test_parallel_cp.c and block by block in
 * tests/kernels/test_attention_ring.c. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "model/cp.h"

Test(cp_split, local_tokens_are_chunks_r_and_2cp_minus_1_minus_r) {
    for (int cp = 1; cp <= 8; cp++) {
        const size_t B = 3, Tc = 5, T = 2 * (size_t)cp * Tc, Tl = T / (size_t)cp;
        int *seen = calloc(B * T, sizeof *seen);
        cr_assert_not_null(seen);
        for (int r = 0; r < cp; r++) {
            int32_t *x = malloc(B * T * sizeof *x);
            cr_assert_not_null(x);
            for (size_t i = 0; i < B * T; i++) x[i] = (int32_t)i; /* token = its global index */
            tri_cp_local_tokens(x, B, T, cp, r);
            /* which chunks rank r holds, by dealing them out: chunk k to
             * rank k for k < cp, to rank 2cp-1-k after */
            int mine[2], n = 0;
            for (int k = 0; k < 2 * cp; k++)
                if ((k < cp ? k : 2 * cp - 1 - k) == r) mine[n++] = k;
            cr_assert_eq(n, 2);
            for (size_t b = 0; b < B; b++)
                for (size_t i = 0; i < Tl; i++) {
                    size_t pos = (size_t)mine[i / Tc] * Tc + i % Tc;
                    cr_assert_eq(x[b * Tl + i], (int32_t)(b * T + pos), "cp %d rank %d seq %zu row %zu", cp, r, b, i);
                    cr_assert_eq(tri_cp_position(i, Tl, cp, r), pos, "cp %d rank %d row %zu", cp, r, i);
                    seen[b * T + pos]++;
                }
            free(x);
        }
        for (size_t i = 0; i < B * T; i++) cr_assert_eq(seen[i], 1, "cp %d: token %zu held %d times", cp, i, seen[i]);
        free(seen);
    }
}
