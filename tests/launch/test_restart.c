/* src/launch/restart: the restart policy of tridentrun --max-restarts: which
 * failures are refusals, the backoff of relaunches in a burst (against the
 * closed formula base x 2^(k-1), capped), the failures in a row of one rank
 * slot, and the data parallel size after an elastic shrink (hand-computed
 * cases). */
#include <criterion/criterion.h>

#include "base/exit.h"
#include "launch/launch.h"

Test(restart, only_exit_2_is_a_refusal) {
    cr_assert(tri_restart_is_refusal(TRI_EXIT_BAD_INPUT));
    const int others[] = {0, 1, 3, 124, 127, 137, 143};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        cr_assert(!tri_restart_is_refusal(others[i]), "exit %d", others[i]);
}

Test(restart, backoff_doubles_within_a_burst_and_starts_over_after_a_quiet_spell) {
    tri_restart_state s = {0};
    s.last_rank = -1;
    const double base = 0.5;
    /* the first failure and failures >= TRI_RESTART_BURST_S apart: no wait */
    cr_assert_eq(tri_restart_backoff(&s, 1000.0, base), 0.0);
    cr_assert_eq(tri_restart_backoff(&s, 1000.0 + TRI_RESTART_BURST_S, base), 0.0);
    /* then failures 1 s apart: the k-th of the burst after its first waits base x 2^(k-1) */
    double t = 1000.0 + TRI_RESTART_BURST_S;
    for (int k = 1; k <= 12; k++) {
        t += 1.0;
        double want = base;
        for (int i = 1; i < k; i++) want *= 2;
        if (want > TRI_RESTART_MAX_BACKOFF_S) want = TRI_RESTART_MAX_BACKOFF_S;
        double got = tri_restart_backoff(&s, t, base);
        cr_assert_float_eq(got, want, 1e-12, "failure %d of the burst: %g s, expected %g", k, got, want);
    }
    /* a quiet spell ends the burst */
    cr_assert_eq(tri_restart_backoff(&s, t + 3 * TRI_RESTART_BURST_S, base), 0.0);
    double again = tri_restart_backoff(&s, t + 3 * TRI_RESTART_BURST_S + 2, base);
    cr_assert_float_eq(again, base, 1e-12, "a new burst starts at base: %g", again);
    /* base 0: never wait */
    tri_restart_state z = {0};
    for (int k = 0; k < 5; k++) cr_assert_eq(tri_restart_backoff(&z, 5.0 + 0.1 * k, 0.0), 0.0);
}

Test(restart, failures_in_a_row_count_per_rank_slot) {
    tri_restart_state s = {0};
    s.last_rank = -1;
    cr_assert_eq(tri_restart_same_place(&s, 3), 1);
    cr_assert_eq(tri_restart_same_place(&s, 3), 2);
    cr_assert_eq(tri_restart_same_place(&s, 1), 1, "another rank starts over");
    cr_assert_eq(tri_restart_same_place(&s, 1), 2);
    cr_assert_eq(tri_restart_same_place(&s, 1), 3);
    cr_assert_eq(tri_restart_same_place(&s, -1), 0, "an unknown rank is no place");
    cr_assert_eq(tri_restart_same_place(&s, 1), 1);
}

Test(restart, shrunk_dp_is_the_largest_smaller_dp_that_divides_the_global_batch) {
    /* dp, global batch, micro batch -> dp' (by hand: G % (mb x dp') == 0) */
    const int cases[][4] = {
        {2, 8, 2, 1},  /* 8 % 2 */
        {4, 24, 2, 3}, /* 24 % 6 */
        {4, 16, 2, 2}, /* 16 % 6 != 0, 16 % 4 == 0 */
        {8, 56, 1, 7}, /* 56 % 7 */
        {6, 60, 2, 5}, /* 60 % 10 */
        {5, 40, 4, 2}, /* 40 % 16, % 12 != 0; 40 % 8 == 0 */
        {3, 18, 3, 2}, /* 18 % 6 */
        {4, 7, 1, 1},  /* only 1 divides 7 */
        {1, 8, 2, 0},  /* nothing to drop */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = tri_restart_shrunk_dp(cases[i][0], cases[i][1], cases[i][2]);
        cr_assert_eq(got, cases[i][3], "dp %d, global batch %d, micro batch %d: %d, expected %d", cases[i][0],
                     cases[i][1], cases[i][2], got, cases[i][3]);
    }
}
