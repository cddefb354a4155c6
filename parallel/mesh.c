/* The parallel mesh (see mesh.h): pure arithmetic on (world, rank, tp, cp,
 * pp, dp), no process group involved.
 *
 * Megatron order (tp-cp-ep-dp-pp, no expert axis), tensor-parallel fastest:
 *   rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
 */
#include "parallel/mesh.h"

#include <stdio.h>
#include <string.h>

int tri_mesh_init(tri_mesh *m, int world, int rank, int tp, int pp, int dp, char *err, size_t errlen) {
    return tri_mesh_init_cp(m, world, rank, tp, 1, pp, dp, err, errlen);
}

int tri_mesh_init_cp(tri_mesh *m, int world, int rank, int tp, int cp, int pp, int dp, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    if (tp < 1 || cp < 1 || pp < 1 || dp < 1) {
        snprintf(err, errlen,
                 "parallel sizes must be >= 1, got parallel.tp (%d), parallel.cp (%d), parallel.pp (%d), "
                 "parallel.dp (%d)",
                 tp, cp, pp, dp);
        return -1;
    }
    if (world < 1) {
        snprintf(err, errlen, "the world must have >= 1 rank, got %d", world);
        return -1;
    }
    /* widened: four ints can overflow an int */
    long long prod = (long long)tp * cp * pp * dp;
    if (prod != (long long)world) {
        if (cp == 1)
            snprintf(err, errlen,
                     "parallel.tp (%d) x parallel.pp (%d) x parallel.dp (%d) = %lld, but the world has %d rank%s", tp,
                     pp, dp, prod, world, world == 1 ? "" : "s");
        else
            snprintf(err, errlen,
                     "parallel.tp (%d) x parallel.cp (%d) x parallel.pp (%d) x parallel.dp (%d) = %lld, but the "
                     "world has %d rank%s",
                     tp, cp, pp, dp, prod, world, world == 1 ? "" : "s");
        return -1;
    }
    if (rank < 0 || rank >= world) {
        snprintf(err, errlen, "rank %d is out of range for a world of %d rank%s", rank, world, world == 1 ? "" : "s");
        return -1;
    }
    m->world = world;
    m->rank = rank;
    m->tp = tp;
    m->cp = cp;
    m->pp = pp;
    m->dp = dp;
    m->tp_rank = rank % tp;
    m->cp_rank = (rank / tp) % cp;
    m->dp_rank = (rank / (tp * cp)) % dp;
    m->pp_rank = rank / (tp * cp * dp);
    return 0;
}

int tri_mesh_rank_of_cp(const tri_mesh *m, int tp_rank, int cp_rank, int dp_rank, int pp_rank) {
    return tp_rank + m->tp * (cp_rank + m->cp * (dp_rank + m->dp * pp_rank));
}

int tri_mesh_rank_of(const tri_mesh *m, int tp_rank, int dp_rank, int pp_rank) {
    return tri_mesh_rank_of_cp(m, tp_rank, m->cp_rank, dp_rank, pp_rank);
}

int tri_mesh_group(const tri_mesh *m, tri_group_kind kind, int *ranks, int *my_index) {
    int n = 0, me = -1;
    switch (kind) {
    case TRI_GROUP_TP:
        for (int t = 0; t < m->tp; t++) ranks[n++] = tri_mesh_rank_of(m, t, m->dp_rank, m->pp_rank);
        me = m->tp_rank;
        break;
    case TRI_GROUP_DP:
        for (int d = 0; d < m->dp; d++) ranks[n++] = tri_mesh_rank_of(m, m->tp_rank, d, m->pp_rank);
        me = m->dp_rank;
        break;
    case TRI_GROUP_PP:
        for (int p = 0; p < m->pp; p++) ranks[n++] = tri_mesh_rank_of(m, m->tp_rank, m->dp_rank, p);
        me = m->pp_rank;
        break;
    case TRI_GROUP_EMB:
        /* first stage, then last stage (only one when pp == 1) */
        ranks[n++] = tri_mesh_rank_of(m, m->tp_rank, m->dp_rank, 0);
        if (m->pp > 1) ranks[n++] = tri_mesh_rank_of(m, m->tp_rank, m->dp_rank, m->pp - 1);
        if (m->pp_rank == 0)
            me = 0;
        else if (m->pp_rank == m->pp - 1)
            me = 1;
        else
            me = -1;
        break;
    case TRI_GROUP_MP:
        /* tp x pp ranks of this dp and cp index, in global-rank order (tp fastest) */
        for (int p = 0; p < m->pp; p++)
            for (int t = 0; t < m->tp; t++) ranks[n++] = tri_mesh_rank_of(m, t, m->dp_rank, p);
        me = m->tp_rank + m->tp * m->pp_rank;
        break;
    case TRI_GROUP_CP:
        for (int c = 0; c < m->cp; c++) ranks[n++] = tri_mesh_rank_of_cp(m, m->tp_rank, c, m->dp_rank, m->pp_rank);
        me = m->cp_rank;
        break;
    case TRI_GROUP_DPCP:
        /* cp fastest, as in the global order: consecutive global ranks */
        for (int d = 0; d < m->dp; d++)
            for (int c = 0; c < m->cp; c++) ranks[n++] = tri_mesh_rank_of_cp(m, m->tp_rank, c, d, m->pp_rank);
        me = m->cp_rank + m->cp * m->dp_rank;
        break;
    default: me = -1; break;
    }
    if (my_index) *my_index = me;
    return n;
}

int tri_mesh_color(const tri_mesh *m, tri_group_kind kind) {
    /* the coordinates other than the group's own, as one number */
    const int tp = m->tp, cp = m->cp, dp = m->dp;
    switch (kind) {
    case TRI_GROUP_TP: return m->cp_rank + cp * (m->dp_rank + dp * m->pp_rank);
    case TRI_GROUP_DP: return m->tp_rank + tp * (m->cp_rank + cp * m->pp_rank);
    case TRI_GROUP_PP: return m->tp_rank + tp * (m->cp_rank + cp * m->dp_rank);
    case TRI_GROUP_EMB:
        if (m->pp_rank == 0 || m->pp_rank == m->pp - 1) return m->tp_rank + tp * (m->cp_rank + cp * m->dp_rank);
        return -1;
    case TRI_GROUP_MP: return m->cp_rank + cp * m->dp_rank;
    case TRI_GROUP_CP: return m->tp_rank + tp * (m->dp_rank + dp * m->pp_rank);
    case TRI_GROUP_DPCP: return m->tp_rank + tp * m->pp_rank;
    default: return -1;
    }
}
