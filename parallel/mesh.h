/* The parallel mesh: which (tp, cp, dp, pp) coordinates a rank has and which
 * ranks form each group. A pure function of (world, rank, tp, cp, pp, dp),
 * tested without any process group.
 *
 * Rank order is Megatron's tp-cp-ep-dp-pp (no expert axis here): tensor-parallel
 * fastest, then context, then data, then pipeline:
 *   rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank))
 * With cp = 1 this is the order of the three-axis mesh, rank for rank.
 */
#ifndef TRI_MESH_H
#define TRI_MESH_H

#include <stddef.h>

typedef enum {
    TRI_GROUP_TP = 0, /* same dp, pp; ordered by tp_rank            */
    TRI_GROUP_DP,     /* same tp, pp; ordered by dp_rank            */
    TRI_GROUP_PP,     /* same tp, dp; ordered by pp_rank            */
    TRI_GROUP_EMB,    /* first and last pp stage with the same tp, dp
                          (one member when pp == 1)                  */
    TRI_GROUP_MP,     /* model parallel: same dp, cp (tp x pp ranks) */
    TRI_GROUP_CP,     /* same tp, dp, pp; ordered by cp_rank        */
    TRI_GROUP_DPCP,   /* same tp, pp: the dp x cp ranks that reduce the
                          gradients of replicated parameters together,
                          ordered by cp_rank + cp * dp_rank          */
    TRI_GROUP_COUNT
} tri_group_kind;

typedef struct tri_mesh {
    int world, rank;
    int tp, pp, dp;                /* sizes; world == tp * cp * pp * dp */
    int tp_rank, dp_rank, pp_rank; /* this rank's coordinates       */
    int cp, cp_rank;               /* context parallelism (1, 0 without) */
} tri_mesh;

/* Fills *m for `rank` of `world`. Returns 0, or -1 with the reason in err
 * (naming the numbers; without the program's prefix: a caller that reports
 * it does so through tri_error) when a size is < 1, tp*pp*dp != world, or
 * rank is out of range. */
int tri_mesh_init(tri_mesh *m, int world, int rank, int tp, int pp, int dp, char *err, size_t errlen);
/* The same with a context-parallel axis of cp ranks (tri_mesh_init is cp = 1):
 * tp*cp*pp*dp must equal world. */
int tri_mesh_init_cp(tri_mesh *m, int world, int rank, int tp, int cp, int pp, int dp, char *err, size_t errlen);

/* Global rank of the given coordinates (cp_rank: this rank's own). */
int tri_mesh_rank_of(const tri_mesh *m, int tp_rank, int dp_rank, int pp_rank);
/* Global rank of the given coordinates, the context-parallel one included. */
int tri_mesh_rank_of_cp(const tri_mesh *m, int tp_rank, int cp_rank, int dp_rank, int pp_rank);

/* Members of this rank's group of the given kind, in group-rank order, into
 * ranks[] (room for m->world entries). Returns the member count; *my_index
 * (may be NULL) receives this rank's position in the group, or -1 when this
 * rank is not a member (TRI_GROUP_EMB on a middle stage). */
int tri_mesh_group(const tri_mesh *m, tri_group_kind kind, int *ranks, int *my_index);

/* A "color" that is equal exactly for the ranks of one group of this kind, for
 * MPI_Comm_split; -1 for a rank outside every group of that kind. */
int tri_mesh_color(const tri_mesh *m, tri_group_kind kind);

#endif
