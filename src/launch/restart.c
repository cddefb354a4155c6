/* The restart policy of tridentrun --max-restarts (src/launch/launch.h): which
 * failures are relaunched, how long to wait before a relaunch, and the data
 * parallel size after an elastic shrink. Pure functions of their arguments. */
#include "base/exit.h"
#include "launch/launch.h"

int tri_restart_is_refusal(int code) { return code == TRI_EXIT_BAD_INPUT; }

double tri_restart_backoff(tri_restart_state *s, double t_fail, double base_s) {
    /* a failure within TRI_RESTART_BURST_S of the previous one is part of a
     * burst: its delay doubles; one after a quiet spell starts over at 0 */
    if (s->n_failures > 0 && t_fail - s->t_last < TRI_RESTART_BURST_S)
        s->burst++;
    else
        s->burst = 0;
    s->n_failures++;
    s->t_last = t_fail;
    if (s->burst == 0 || base_s <= 0) return 0;
    double d = base_s;
    for (int i = 1; i < s->burst && d < TRI_RESTART_MAX_BACKOFF_S; i++) d *= 2;
    return d < TRI_RESTART_MAX_BACKOFF_S ? d : TRI_RESTART_MAX_BACKOFF_S;
}

int tri_restart_same_place(tri_restart_state *s, int rank) {
    if (rank >= 0 && rank == s->last_rank)
        s->same++;
    else
        s->same = rank >= 0 ? 1 : 0;
    s->last_rank = rank;
    return s->same;
}

int tri_restart_shrunk_dp(int dp, int global_batch, int micro_batch) {
    if (dp <= 1 || micro_batch <= 0 || global_batch <= 0) return 0;
    for (int d = dp - 1; d >= 1; d--)
        if (global_batch % ((long)micro_batch * d) == 0) return d;
    return 0;
}
