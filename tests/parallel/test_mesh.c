/* The mesh (parallel/mesh.c) against an independent construction: coordinates
 * come from enumerating every (tp, cp, dp, pp) tuple in nested loops (tp
 * innermost, then cp: Megatron's tp-cp-dp-pp) and groups from filtering all
 * ranks by shared coordinates, with no division or modulo. Plus the REFERENCE.md example for tp=pp=dp=2 spelled
 * out literally, and the error messages. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "parallel/mesh.h"

typedef struct coord {
    int t, d, p, k; /* k: the context-parallel coordinate */
} coord;

/* coords[r] for every rank r: the r-th tuple when pp is the outer loop, then
 * dp, then cp, and tp the inner one (Megatron order). (world) */
static coord *enumerate(int tp, int cp, int pp, int dp) {
    coord *c = malloc((size_t)tp * cp * pp * dp * sizeof *c);
    cr_assert_not_null(c);
    int r = 0;
    for (int p = 0; p < pp; p++)
        for (int d = 0; d < dp; d++)
            for (int k = 0; k < cp; k++)
                for (int t = 0; t < tp; t++) c[r++] = (coord){t, d, p, k};
    return c;
}

/* Does rank b belong to rank a's group of this kind? (by coordinates only) */
static int same_group(const coord *c, int pp, tri_group_kind kind, int a, int b) {
    switch (kind) {
    case TRI_GROUP_TP: return c[a].k == c[b].k && c[a].d == c[b].d && c[a].p == c[b].p;
    case TRI_GROUP_DP: return c[a].t == c[b].t && c[a].k == c[b].k && c[a].p == c[b].p;
    case TRI_GROUP_PP: return c[a].t == c[b].t && c[a].k == c[b].k && c[a].d == c[b].d;
    case TRI_GROUP_MP: return c[a].k == c[b].k && c[a].d == c[b].d;
    case TRI_GROUP_EMB:
        return c[a].t == c[b].t && c[a].k == c[b].k && c[a].d == c[b].d && (c[b].p == 0 || c[b].p == pp - 1);
    case TRI_GROUP_CP: return c[a].t == c[b].t && c[a].d == c[b].d && c[a].p == c[b].p;
    case TRI_GROUP_DPCP: return c[a].t == c[b].t && c[a].p == c[b].p;
    default: return 0;
    }
}

static int is_emb_member(const coord *c, int pp, int r) { return c[r].p == 0 || c[r].p == pp - 1; }

static const char *kind_name(tri_group_kind k) {
    static const char *const names[] = {"TP", "DP", "PP", "EMB", "MP", "CP", "DPCP"};
    return (int)k >= 0 && k < TRI_GROUP_COUNT ? names[k] : "?";
}

static void check_layout_cp(int tp, int cp, int pp, int dp) {
    int world = tp * cp * pp * dp;
    coord *c = enumerate(tp, cp, pp, dp);
    int *ranks = malloc((size_t)world * sizeof *ranks);
    int *expect = malloc((size_t)world * sizeof *expect);
    int *seen = malloc((size_t)world * sizeof *seen);
    cr_assert(ranks && expect && seen);
    char err[256];

    for (int r = 0; r < world; r++) {
        tri_mesh m;
        err[0] = '\0';
        int rc = tri_mesh_init_cp(&m, world, r, tp, cp, pp, dp, err, sizeof err);
        cr_assert_eq(rc, 0, "tp=%d cp=%d pp=%d dp=%d rank %d: %s", tp, cp, pp, dp, r, err);
        cr_assert_eq(m.world, world);
        cr_assert_eq(m.rank, r);
        cr_assert(m.tp == tp && m.cp == cp && m.pp == pp && m.dp == dp);
        cr_assert_eq(m.cp_rank, c[r].k, "tp=%d cp=%d pp=%d dp=%d rank %d: cp_rank %d, expected %d", tp, cp, pp, dp, r,
                     m.cp_rank, c[r].k);
        cr_assert_eq(tri_mesh_rank_of_cp(&m, c[r].t, c[r].k, c[r].d, c[r].p), r);
        cr_assert(m.tp_rank == c[r].t && m.dp_rank == c[r].d && m.pp_rank == c[r].p,
                  "tp=%d pp=%d dp=%d rank %d: got (%d,%d,%d), expected (%d,%d,%d)", tp, pp, dp, r, m.tp_rank, m.dp_rank,
                  m.pp_rank, c[r].t, c[r].d, c[r].p);
        cr_assert_eq(tri_mesh_rank_of(&m, c[r].t, c[r].d, c[r].p), r);

        for (int k = 0; k < TRI_GROUP_COUNT; k++) {
            /* expected members: every rank sharing the coordinates, in rank order
             * (which is group order: within one group the varying coordinate
             * grows with the global rank) */
            int ne = 0;
            for (int s = 0; s < world; s++)
                if (same_group(c, pp, (tri_group_kind)k, r, s)) expect[ne++] = s;
            int my = -2;
            for (int i = 0; i < world; i++) ranks[i] = -7;
            int n = tri_mesh_group(&m, (tri_group_kind)k, ranks, &my);
            cr_assert_eq(n, ne, "tp=%d pp=%d dp=%d rank %d %s: %d members, expected %d", tp, pp, dp, r, kind_name(k), n,
                         ne);
            for (int i = 0; i < n; i++)
                cr_assert_eq(ranks[i], expect[i], "tp=%d pp=%d dp=%d rank %d %s member %d: %d vs %d", tp, pp, dp, r,
                             kind_name(k), i, ranks[i], expect[i]);
            int exp_idx = -1;
            for (int i = 0; i < ne; i++)
                if (expect[i] == r) exp_idx = i;
            cr_assert_eq(my, exp_idx, "tp=%d pp=%d dp=%d rank %d %s: index %d, expected %d", tp, pp, dp, r,
                         kind_name(k), my, exp_idx);
            /* NULL my_index is allowed */
            cr_assert_eq(tri_mesh_group(&m, (tri_group_kind)k, ranks, NULL), ne);
        }
    }

    /* Colors: equal exactly for ranks of one group; -1 only outside EMB. And
     * every rank is in exactly one group of each kind (EMB: members only). */
    for (int k = 0; k < TRI_GROUP_COUNT; k++) {
        int *color = malloc((size_t)world * sizeof *color);
        cr_assert_not_null(color);
        for (int r = 0; r < world; r++) {
            tri_mesh m;
            cr_assert_eq(tri_mesh_init_cp(&m, world, r, tp, cp, pp, dp, err, sizeof err), 0);
            color[r] = tri_mesh_color(&m, (tri_group_kind)k);
            int member = k != TRI_GROUP_EMB || is_emb_member(c, pp, r);
            if (member)
                cr_assert_geq(color[r], 0, "%s rank %d color %d", kind_name(k), r, color[r]);
            else
                cr_assert_eq(color[r], -1, "%s rank %d color %d", kind_name(k), r, color[r]);
        }
        for (int a = 0; a < world; a++)
            for (int b = 0; b < world; b++) {
                if (color[a] < 0 || color[b] < 0) continue;
                int same = same_group(c, pp, (tri_group_kind)k, a, b);
                cr_assert_eq(color[a] == color[b], same,
                             "tp=%d pp=%d dp=%d %s: ranks %d,%d colors %d,%d, same group %d", tp, pp, dp, kind_name(k),
                             a, b, color[a], color[b], same);
            }
        /* partition: count, over all groups listed by their members, how often each rank appears */
        memset(seen, 0, (size_t)world * sizeof *seen);
        for (int r = 0; r < world; r++) {
            tri_mesh m;
            cr_assert_eq(tri_mesh_init_cp(&m, world, r, tp, cp, pp, dp, err, sizeof err), 0);
            int my;
            int n = tri_mesh_group(&m, (tri_group_kind)k, ranks, &my);
            if (my < 0) continue;
            if (my != 0) continue; /* count each group once, from its first member */
            for (int i = 0; i < n; i++) seen[ranks[i]]++;
        }
        for (int r = 0; r < world; r++) {
            int member = k != TRI_GROUP_EMB || is_emb_member(c, pp, r);
            cr_assert_eq(seen[r], member, "tp=%d pp=%d dp=%d %s: rank %d in %d groups", tp, pp, dp, kind_name(k), r,
                         seen[r]);
        }
        free(color);
    }
    free(seen);
    free(expect);
    free(ranks);
    free(c);
}

static void check_layout(int tp, int pp, int dp) { check_layout_cp(tp, 1, pp, dp); }

/* {tp, pp, dp} */
static const int layouts[][3] = {
    {1, 1, 1}, {2, 1, 1}, {1, 1, 2}, {1, 2, 1}, {2, 2, 2}, {4, 2, 1}, {1, 2, 4}, {2, 1, 4}, {8, 1, 1},
    {1, 8, 1}, {1, 1, 8}, {3, 2, 2}, {2, 4, 3}, {3, 3, 1}, {1, 3, 3}, {5, 1, 3}, {2, 3, 2}, {1, 4, 2},
};

Test(mesh, layouts_match_enumeration) {
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        check_layout(layouts[i][0], layouts[i][1], layouts[i][2]);
}

/* With a context-parallel axis: {tp, cp, pp, dp} */
static const int cp_layouts[][4] = {
    {1, 2, 1, 1}, {1, 4, 1, 1}, {2, 2, 1, 1}, {1, 2, 2, 1}, {1, 2, 1, 2}, {2, 2, 2, 2}, {3, 2, 1, 2}, {1, 3, 2, 2},
};

Test(mesh, cp_layouts_match_enumeration) {
    for (size_t i = 0; i < sizeof cp_layouts / sizeof cp_layouts[0]; i++)
        check_layout_cp(cp_layouts[i][0], cp_layouts[i][1], cp_layouts[i][2], cp_layouts[i][3]);
}

/* REFERENCE.md: tp=pp=dp=2 on 8 ranks, spelled out. */
static const int ref_tp[4][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
static const int ref_dp[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
static const int ref_pp[4][2] = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
static const int ref_mp[2][4] = {{0, 1, 4, 5}, {2, 3, 6, 7}};

static void expect_in_listed(int r, const tri_mesh *m, tri_group_kind k, const int *groups, int ngroups, int gsize) {
    int ranks[8], my;
    int n = tri_mesh_group(m, k, ranks, &my);
    cr_assert_eq(n, gsize);
    int found = 0;
    for (int g = 0; g < ngroups; g++) {
        const int *grp = groups + (size_t)g * gsize;
        int has = 0;
        for (int i = 0; i < gsize; i++) has |= grp[i] == r;
        if (!has) continue;
        found++;
        for (int i = 0; i < gsize; i++)
            cr_assert_eq(ranks[i], grp[i], "rank %d %s member %d: %d vs %d", r, kind_name(k), i, ranks[i], grp[i]);
        cr_assert_eq(ranks[my], r);
    }
    cr_assert_eq(found, 1, "rank %d is in %d listed %s groups", r, found, kind_name(k));
}

Test(mesh, reference_example_2x2x2) {
    char err[256];
    for (int r = 0; r < 8; r++) {
        tri_mesh m;
        cr_assert_eq(tri_mesh_init(&m, 8, r, 2, 2, 2, err, sizeof err), 0);
        expect_in_listed(r, &m, TRI_GROUP_TP, &ref_tp[0][0], 4, 2);
        expect_in_listed(r, &m, TRI_GROUP_DP, &ref_dp[0][0], 4, 2);
        expect_in_listed(r, &m, TRI_GROUP_PP, &ref_pp[0][0], 4, 2);
        expect_in_listed(r, &m, TRI_GROUP_MP, &ref_mp[0][0], 2, 4);
        /* pp == 2: the embedding group is the whole PP group */
        expect_in_listed(r, &m, TRI_GROUP_EMB, &ref_pp[0][0], 4, 2);
    }
    tri_mesh m;
    cr_assert_eq(tri_mesh_init(&m, 8, 6, 2, 2, 2, err, sizeof err), 0);
    cr_assert(m.tp_rank == 0 && m.dp_rank == 1 && m.pp_rank == 1);
    cr_assert_eq(tri_mesh_rank_of(&m, 1, 0, 1), 5);
}

/* tp=2, cp=2, dp=2 on 8 ranks (Megatron's tp-cp-dp order), spelled out: the
 * CP ring joins the ranks a tp apart, the gradient group dp x cp. */
Test(mesh, cp_example_2x2x2) {
    static const int cp_groups[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
    static const int dp_groups[4][2] = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
    static const int tp_groups[4][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
    static const int dpcp[2][4] = {{0, 2, 4, 6}, {1, 3, 5, 7}};
    char err[256];
    for (int r = 0; r < 8; r++) {
        tri_mesh m;
        cr_assert_eq(tri_mesh_init_cp(&m, 8, r, 2, 2, 1, 2, err, sizeof err), 0, "%s", err);
        expect_in_listed(r, &m, TRI_GROUP_CP, &cp_groups[0][0], 4, 2);
        expect_in_listed(r, &m, TRI_GROUP_DP, &dp_groups[0][0], 4, 2);
        expect_in_listed(r, &m, TRI_GROUP_TP, &tp_groups[0][0], 4, 2);
        expect_in_listed(r, &m, TRI_GROUP_DPCP, &dpcp[0][0], 2, 4);
    }
    tri_mesh m;
    cr_assert_eq(tri_mesh_init_cp(&m, 8, 6, 2, 2, 1, 2, err, sizeof err), 0);
    cr_assert(m.tp_rank == 0 && m.cp_rank == 1 && m.dp_rank == 1 && m.pp_rank == 0);
    /* the world check names all four sizes */
    cr_assert_eq(tri_mesh_init_cp(&m, 6, 0, 2, 2, 1, 2, err, sizeof err), -1);
    cr_assert(strstr(err, "parallel.cp (2)") && strstr(err, "= 8") && strstr(err, "6 ranks"), "%s", err);
}

Test(mesh, embedding_group_first_and_last_stage) {
    /* tp=1, pp=4, dp=2: ranks 0,1 on stage 0 ... 6,7 on stage 3 */
    char err[256];
    static const int expect[8][2] = {{0, 6}, {1, 7}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {0, 6}, {1, 7}};
    static const int expect_idx[8] = {0, 0, -1, -1, -1, -1, 1, 1};
    for (int r = 0; r < 8; r++) {
        tri_mesh m;
        cr_assert_eq(tri_mesh_init(&m, 8, r, 1, 4, 2, err, sizeof err), 0);
        int ranks[8], my = -5;
        int n = tri_mesh_group(&m, TRI_GROUP_EMB, ranks, &my);
        cr_assert_eq(n, 2);
        cr_assert_eq(my, expect_idx[r], "rank %d emb index %d", r, my);
        if (my >= 0) {
            cr_assert(ranks[0] == expect[r][0] && ranks[1] == expect[r][1], "rank %d emb group [%d,%d]", r, ranks[0],
                      ranks[1]);
            cr_assert_geq(tri_mesh_color(&m, TRI_GROUP_EMB), 0);
        } else {
            cr_assert_eq(tri_mesh_color(&m, TRI_GROUP_EMB), -1);
        }
    }
    /* pp == 1: one member, itself */
    tri_mesh m;
    cr_assert_eq(tri_mesh_init(&m, 4, 3, 2, 1, 2, err, sizeof err), 0);
    int ranks[4], my;
    cr_assert_eq(tri_mesh_group(&m, TRI_GROUP_EMB, ranks, &my), 1);
    cr_assert(ranks[0] == 3 && my == 0);
}

Test(mesh, world_mismatch_names_the_numbers) {
    tri_mesh m;
    char err[256] = "";
    cr_assert_eq(tri_mesh_init(&m, 4, 0, 2, 1, 3, err, sizeof err), -1);
    cr_assert(err[0] && strstr(err, "trident: ") == NULL, "the reason, without the prefix tri_error adds: %s", err);
    cr_assert(strstr(err, "parallel.tp (2)") && strstr(err, "parallel.pp (1)") && strstr(err, "parallel.dp (3)") &&
                  strstr(err, "= 6") && strstr(err, "4 ranks"),
              "%s", err);
}

Test(mesh, zero_or_negative_size_is_an_error) {
    tri_mesh m;
    char err[256] = "";
    cr_assert_eq(tri_mesh_init(&m, 1, 0, 0, 1, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "parallel.tp (0)"), "%s", err);
    err[0] = '\0';
    cr_assert_eq(tri_mesh_init(&m, 1, 0, 1, -1, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "parallel.pp (-1)"), "%s", err);
    err[0] = '\0';
    cr_assert_eq(tri_mesh_init(&m, 0, 0, 1, 1, 1, err, sizeof err), -1);
    cr_assert(err[0] && strstr(err, "trident: ") == NULL, "the reason, without the prefix tri_error adds: %s", err);
}

Test(mesh, rank_out_of_range_is_an_error) {
    tri_mesh m;
    char err[256] = "";
    cr_assert_eq(tri_mesh_init(&m, 4, 4, 2, 2, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "rank 4") && strstr(err, "4 ranks"), "%s", err);
    err[0] = '\0';
    cr_assert_eq(tri_mesh_init(&m, 4, -1, 2, 2, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "rank -1"), "%s", err);
}

Test(mesh, huge_sizes_do_not_overflow_into_a_match) {
    /* 65536^3 wraps to 0 in 32-bit arithmetic; must not be taken for world 0 or any int */
    tri_mesh m;
    char err[256] = "";
    cr_assert_eq(tri_mesh_init(&m, 1, 0, 65536, 65536, 65536, err, sizeof err), -1);
    cr_assert(strstr(err, "281474976710656"), "%s", err);
}
