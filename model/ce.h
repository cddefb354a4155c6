/* Combining the vocab-parallel cross-entropy statistics over TP ranks. */
#ifndef TRI_CE_H
#define TRI_CE_H

#include <stddef.h>

#include "parallel/comm.h"

/* stats (N, 3): this rank's (max m, sum of exp(l - m), target logit or 0),
 * from ops->crossentropy_stats. gather (tp, N, 3): scratch.
 * On return every rank's stats hold the global (M, S, target):
 *   M = max_r m_r, S = sum_r S_r exp(m_r - M) in rank order, target = sum_r t_r.
 * One all-gather; the combination is done identically on every rank, so all
 * ranks hold bitwise equal results. A group of one leaves stats unchanged.
 * A NaN on any rank's slice propagates into the loss, as it would at tp = 1. */
void tri_ce_combine(tri_comm *tp, float *stats, float *gather, size_t N);

#endif
