/* mpi_probe: a small program run by tests/parallel/test_comm.c under mpirun (or alone)
 * that exercises every comm op through tri_dist and writes what it received to
 * OUTDIR/probe_<world rank>.txt, one "key v1 v2 ..." line per result. It does
 * not check anything itself: the test computes the expected values in closed
 * form and compares.
 *
 *   mpi_probe OUTDIR TP PP DP
 *   mpi_probe OUTDIR TP PP DP --stall OP TIMEOUT_S
 *
 * Inputs are rank-dependent and exact in floating point (small integers and
 * halves), so sums are exact whatever the reduction order.
 * Exit: 0 on success, 2 when tri_dist_init refuses the layout (message on stderr).
 *
 * --stall: the watchdog. The last world rank never joins: it sleeps 30 s.
 * Every other rank, at "step 7 (probe)", runs OP on its DP group with the
 * deadline TIMEOUT_S: allreduce, iallreduce (then wait), reduce_scatter,
 * allgather, ireduce_scatter and iallgather (in place, then wait), broadcast (root: the last DP rank), barrier, recv (DP rank 0
 * from the last DP rank) or send (DP rank 0 sends 4 MiB, too large to go
 * out eagerly, to the last DP rank). Ranks of the other DP groups, whose OP
 * completes, then wait in a world barrier with a 10x longer deadline, so the
 * stalled group's report comes first. The watchdog must end the job, exit
 * code 124, with its report on stderr; reaching the end prints "not stopped"
 * and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/half.h"
#include "parallel/comm.h"
#include "parallel/dist.h"

static void put_f32(FILE *f, const char *key, const float *v, size_t n) {
    fprintf(f, "%s", key);
    for (size_t i = 0; i < n; i++) fprintf(f, " %.9g", (double)v[i]);
    fputc('\n', f);
}

static void put_f64(FILE *f, const char *key, const double *v, size_t n) {
    fprintf(f, "%s", key);
    for (size_t i = 0; i < n; i++) fprintf(f, " %.17g", v[i]);
    fputc('\n', f);
}

static void put_i32(FILE *f, const char *key, const int *v, size_t n) {
    fprintf(f, "%s", key);
    for (size_t i = 0; i < n; i++) fprintf(f, " %d", v[i]);
    fputc('\n', f);
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes);
    if (p == NULL) {
        fprintf(stderr, "mpi_probe: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* Writes samples (at the fixed indices the test knows) and the double sum of
 * a large vector (n). */
static void put_big(FILE *f, const char *key, const float *v, size_t n) {
    const size_t idx[] = {0, 1, 6, 7, 999, 1000, 123457, n - 2, n - 1};
    fprintf(f, "%s", key);
    for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++) fprintf(f, " %.9g", (double)v[idx[i]]);
    double s = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    fprintf(f, " %.17g\n", s);
}

static void world_ops(FILE *f, tri_comm *c) {
    const int r = c->rank, size = c->size;

    /* all-reduce SUM and MAX over the three dtypes, n = 7 */
    enum { N = 7 };
    float f32[N];
    double f64[N];
    int i32[N];
    for (int i = 0; i < N; i++) {
        f32[i] = (float)r + 0.25f * (float)i;
        f64[i] = 0.5 * r + 1024.0 * i;
        i32[i] = r * (i + 1) - i;
    }
    tri_comm_allreduce(c, f32, N, TRI_F32, TRI_SUM);
    tri_comm_allreduce(c, f64, N, TRI_F64, TRI_SUM);
    tri_comm_allreduce(c, i32, N, TRI_I32, TRI_SUM);
    put_f32(f, "ar_sum_f32", f32, N);
    put_f64(f, "ar_sum_f64", f64, N);
    put_i32(f, "ar_sum_i32", i32, N);
    for (int i = 0; i < N; i++) {
        f32[i] = (float)((r + 3 * i) % size) - 0.5f * (float)i;
        f64[i] = -(double)r * i;
        i32[i] = (r * 7 + i * 5) % 11 - 5;
    }
    tri_comm_allreduce(c, f32, N, TRI_F32, TRI_MAX);
    tri_comm_allreduce(c, f64, N, TRI_F64, TRI_MAX);
    tri_comm_allreduce(c, i32, N, TRI_I32, TRI_MAX);
    put_f32(f, "ar_max_f32", f32, N);

    /* 16-bit sums: the wrappers widen to fp32, reduce, and round once */
    {
        uint16_t h[N], hs[4 * N], hr[N];
        float w[N];
        for (int i = 0; i < N; i++) h[i] = tri_f32_to_bf16(1.0f + (float)((r + 1) * (i + 1)) * 0.00390625f);
        tri_comm_allreduce(c, h, N, TRI_BF16, TRI_SUM);
        for (int i = 0; i < N; i++) w[i] = tri_bf16_to_f32(h[i]);
        put_f32(f, "ar_sum_bf16", w, N);
        for (int j = 0; j < size * N && j < 4 * N; j++)
            hs[j] = tri_f32_to_f16(0.1f * (float)(r + 1) + 0.01f * (float)j);
        if (size <= 4) {
            tri_comm_reduce_scatter(c, hr, hs, N, TRI_F16);
            for (int i = 0; i < N; i++) w[i] = tri_f16_to_f32(hr[i]);
            put_f32(f, "rs_sum_f16", w, N);
        }
    }
    put_f64(f, "ar_max_f64", f64, N);
    put_i32(f, "ar_max_i32", i32, N);

    /* a large all-reduce (4 MiB: the transport's large-message path) */
    const size_t nb = (size_t)1 << 20;
    float *big = xmalloc(nb * sizeof *big); /* (nb) */
    for (size_t i = 0; i < nb; i++) big[i] = (float)(r + 1) * (float)(i % 1000);
    tri_comm_allreduce(c, big, nb, TRI_F32, TRI_SUM);
    put_big(f, "ar_big", big, nb);

    /* two non-blocking all-reduces in flight at once, waited in reverse order */
    const size_t ni = 300001;
    float *ia = xmalloc(ni * sizeof *ia); /* (ni) */
    float *ib = xmalloc(ni * sizeof *ib); /* (ni) */
    for (size_t i = 0; i < ni; i++) {
        ia[i] = (float)r - (float)(i % 7);
        ib[i] = (float)((r * 13 + i) % 17);
    }
    tri_req qa, qb;
    tri_comm_iallreduce(c, ia, ni, TRI_F32, TRI_SUM, &qa);
    tri_comm_iallreduce(c, ib, ni, TRI_F32, TRI_MAX, &qb);
    tri_comm_wait(c, &qb);
    tri_comm_wait(c, &qa);
    fprintf(f, "iar_active %d %d\n", qa.active, qb.active);
    put_big(f, "iar_sum", ia, ni);
    put_big(f, "iar_max", ib, ni);
    free(ib);
    free(ia);
    free(big);

    /* reduce-scatter: send (size*5), recv (5) */
    enum { RS = 5 };
    int *rs_send = xmalloc((size_t)size * RS * sizeof *rs_send);
    int rs_recv[RS];
    for (int j = 0; j < size * RS; j++) rs_send[j] = r * 1000 + j;
    for (int i = 0; i < RS; i++) rs_recv[i] = -12345;
    tri_comm_reduce_scatter(c, rs_recv, rs_send, RS, TRI_I32);
    put_i32(f, "rs_i32", rs_recv, RS);
    float *rsf_send = xmalloc((size_t)size * RS * sizeof *rsf_send);
    float rsf_recv[RS];
    for (int j = 0; j < size * RS; j++) rsf_send[j] = 0.5f * (float)(r + j);
    tri_comm_reduce_scatter(c, rsf_recv, rsf_send, RS, TRI_F32);
    put_f32(f, "rs_f32", rsf_recv, RS);
    free(rsf_send);
    free(rs_send);

    /* non-blocking reduce-scatter (F32), all in flight at once and waited in
     * reverse order: out of place (the inputs of rs_f32), in place (recv =
     * this rank's slot of send), and a larger in-place one (M per rank) */
    {
        enum { M = 70001 };
        float *a_send = xmalloc((size_t)size * RS * sizeof *a_send), a_recv[RS];
        float *b = xmalloc((size_t)size * RS * sizeof *b);
        float *big_rs = xmalloc((size_t)size * M * sizeof *big_rs);
        for (int j = 0; j < size * RS; j++) {
            a_send[j] = 0.5f * (float)(r + j);
            b[j] = 0.25f * (float)(3 * r + j);
        }
        for (size_t j = 0; j < (size_t)size * M; j++) big_rs[j] = (float)(r + 1) * (float)(j % 7);
        tri_req q1, q2, q3;
        tri_comm_ireduce_scatter(c, a_recv, a_send, RS, TRI_F32, &q1);
        tri_comm_ireduce_scatter(c, b + (size_t)r * RS, b, RS, TRI_F32, &q2);
        tri_comm_ireduce_scatter(c, big_rs + (size_t)r * M, big_rs, M, TRI_F32, &q3);
        tri_comm_wait(c, &q3);
        tri_comm_wait(c, &q2);
        tri_comm_wait(c, &q1);
        fprintf(f, "irs_active %d %d %d\n", q1.active, q2.active, q3.active);
        put_f32(f, "irs_f32", a_recv, RS);
        put_f32(f, "irs_inplace_f32", b + (size_t)r * RS, RS);
        const float *mine = big_rs + (size_t)r * M;
        float samples[5] = {mine[0], mine[1], mine[2], mine[M / 2], mine[M - 1]};
        put_f32(f, "irs_inplace_big", samples, 5);
        free(big_rs);
        free(b);
        free(a_send);
    }

    /* non-blocking all-gather (F32): out of place and in place, both in flight */
    {
        enum { IG = 3 };
        float g_send[IG];
        float *g1 = xmalloc((size_t)size * IG * sizeof *g1), *g2 = xmalloc((size_t)size * IG * sizeof *g2);
        for (int i = 0; i < IG; i++) g_send[i] = (float)(r * 10 + i);
        for (int j = 0; j < size * IG; j++) g1[j] = g2[j] = -1.0f;
        for (int i = 0; i < IG; i++) g2[r * IG + i] = (float)(r * 10 + i);
        tri_req q1, q2;
        tri_comm_iallgather(c, g1, g_send, IG, TRI_F32, &q1);
        tri_comm_iallgather(c, g2, g2 + (size_t)r * IG, IG, TRI_F32, &q2);
        tri_comm_wait(c, &q2);
        tri_comm_wait(c, &q1);
        fprintf(f, "iag_active %d %d\n", q1.active, q2.active);
        put_f32(f, "iag_f32", g1, (size_t)size * IG);
        put_f32(f, "iag_inplace_f32", g2, (size_t)size * IG);
        free(g2);
        free(g1);
    }

    /* all-gather: send (3), recv (size*3); then the in-place form */
    enum { AG = 3 };
    double ag_send[AG];
    double *ag_recv = xmalloc((size_t)size * AG * sizeof *ag_recv);
    for (int i = 0; i < AG; i++) ag_send[i] = r * 10.0 + i;
    for (int j = 0; j < size * AG; j++) ag_recv[j] = -1.0;
    tri_comm_allgather(c, ag_recv, ag_send, AG, TRI_F64);
    put_f64(f, "ag_f64", ag_recv, (size_t)size * AG);
    for (int j = 0; j < size * AG; j++) ag_recv[j] = -1.0;
    for (int i = 0; i < AG; i++) ag_recv[r * AG + i] = r * 10.0 + i;
    tri_comm_allgather(c, ag_recv, ag_recv + (size_t)r * AG, AG, TRI_F64);
    put_f64(f, "ag_inplace_f64", ag_recv, (size_t)size * AG);
    free(ag_recv);
    unsigned char u8s[2] = {(unsigned char)(r + 1), (unsigned char)(200 + r)};
    unsigned char *u8r = xmalloc((size_t)size * 2);
    tri_comm_allgather(c, u8r, u8s, 2, TRI_U8);
    fprintf(f, "ag_u8");
    for (int j = 0; j < size * 2; j++) fprintf(f, " %d", u8r[j]);
    fputc('\n', f);
    free(u8r);

    /* broadcast from the last rank (I32) and from rank 0 (F64) */
    int bc[4];
    double bcd[2];
    const int root = size - 1;
    for (int i = 0; i < 4; i++) bc[i] = r == root ? 42 + i * root : -999;
    bcd[0] = r == 0 ? 3.5 : -1.0;
    bcd[1] = r == 0 ? -2.25 : -1.0;
    tri_comm_broadcast(c, bc, 4, TRI_I32, root);
    tri_comm_broadcast(c, bcd, 2, TRI_F64, 0);
    put_i32(f, "bc_i32", bc, 4);
    put_f64(f, "bc_f64", bcd, 2);

    /* ring: send to the next rank, receive from the previous one */
    if (size > 1) {
        enum { RG = 6 };
        float out[RG], in[RG];
        for (int i = 0; i < RG; i++) {
            out[i] = (float)(r * 100 + i);
            in[i] = -1.0f;
        }
        tri_req rq, sq;
        tri_comm_irecv(c, in, RG, TRI_F32, (r - 1 + size) % size, 7, &rq);
        tri_comm_isend(c, out, RG, TRI_F32, (r + 1) % size, 7, &sq);
        tri_comm_wait(c, &sq);
        tri_comm_wait(c, &rq);
        put_f32(f, "ring_f32", in, RG);
    }
    tri_comm_barrier(c);
    fprintf(f, "barrier_done 1\n");
}

/* Per-group results: size, rank, the sum and max of the members' world
 * ranks, and the members' world ranks gathered in group order. */
static void group_ops(FILE *f, const char *name, tri_comm *g, int world_rank) {
    char key[64];
    int sm[2] = {world_rank, world_rank};
    tri_comm_allreduce(g, &sm[0], 1, TRI_I32, TRI_SUM);
    tri_comm_allreduce(g, &sm[1], 1, TRI_I32, TRI_MAX);
    int *members = xmalloc((size_t)g->size * sizeof *members);
    tri_comm_allgather(g, members, &world_rank, 1, TRI_I32);
    snprintf(key, sizeof key, "%s_size_rank", name);
    int sr[2] = {g->size, g->rank};
    put_i32(f, key, sr, 2);
    snprintf(key, sizeof key, "%s_sum_max", name);
    put_i32(f, key, sm, 2);
    snprintf(key, sizeof key, "%s_members", name);
    put_i32(f, key, members, (size_t)g->size);
    free(members);
}

/* --stall OP: see the top of the file. */
static int stall(tri_dist *d, const char *op, double timeout_s) {
    tri_dist_set_timeout(d, timeout_s);
    tri_dist_progress(d, 7, "probe");
    tri_comm *c = &d->dp;
    if (d->mesh.rank == d->mesh.world - 1) {
        sleep(30);
        return 1;
    }
    const int last = c->size - 1;
    const size_t big = (size_t)1 << 20;
    float *buf = xmalloc(big * (size_t)c->size * sizeof *buf); /* (size * big) */
    for (size_t i = 0; i < big * (size_t)c->size; i++) buf[i] = 1.0f;
    tri_req r = {0};
    if (!strcmp(op, "allreduce")) {
        tri_comm_allreduce(c, buf, 2, TRI_F32, TRI_SUM);
    } else if (!strcmp(op, "iallreduce")) {
        tri_comm_iallreduce(c, buf, 3, TRI_F32, TRI_SUM, &r);
        tri_comm_wait(c, &r);
    } else if (!strcmp(op, "reduce_scatter")) {
        tri_comm_reduce_scatter(c, buf + big * (size_t)(c->size - 1), buf, 4, TRI_F32);
    } else if (!strcmp(op, "allgather")) {
        tri_comm_allgather(c, buf + 16, buf, 5, TRI_F32);
    } else if (!strcmp(op, "ireduce_scatter")) {
        tri_comm_ireduce_scatter(c, buf + 4 * (size_t)c->rank, buf, 4, TRI_F32, &r);
        tri_comm_wait(c, &r);
    } else if (!strcmp(op, "iallgather")) {
        tri_comm_iallgather(c, buf, buf + 5 * (size_t)c->rank, 5, TRI_F32, &r);
        tri_comm_wait(c, &r);
    } else if (!strcmp(op, "broadcast")) {
        tri_comm_broadcast(c, buf, 6, TRI_F32, last);
    } else if (!strcmp(op, "barrier")) {
        tri_comm_barrier(c);
    } else if (!strcmp(op, "recv") && c->rank == 0) {
        tri_comm_irecv(c, buf, 7, TRI_F32, last, 5, &r);
        tri_comm_wait(c, &r);
    } else if (!strcmp(op, "send") && c->rank == 0) {
        tri_comm_isend(c, buf, big, TRI_F32, last, 5, &r);
        tri_comm_wait(c, &r);
    } else if (strcmp(op, "recv") != 0 && strcmp(op, "send") != 0) {
        fprintf(stderr, "mpi_probe: unknown --stall op '%s'\n", op);
        free(buf);
        return 2;
    }
    free(buf);
    int *members = xmalloc((size_t)d->mesh.world * sizeof *members), me = -1;
    int n = tri_mesh_group(&d->mesh, TRI_GROUP_DP, members, &me);
    int stalled_group = 0;
    for (int i = 0; i < n; i++) stalled_group |= members[i] == d->mesh.world - 1;
    free(members);
    if (!stalled_group) {
        d->world.timeout_s = 10 * timeout_s;
        tri_comm_barrier(&d->world);
    }
    fprintf(stderr, "mpi_probe: rank %d: %s was not stopped by the watchdog\n", d->mesh.rank, op);
    return 1;
}

int main(int argc, char **argv) {
    int stalling = argc == 8 && !strcmp(argv[5], "--stall");
    if (argc != 5 && !stalling) {
        fprintf(stderr, "usage: mpi_probe OUTDIR TP PP DP [--stall OP TIMEOUT_S]\n");
        return 2;
    }
    const int tp = atoi(argv[2]), pp = atoi(argv[3]), dp = atoi(argv[4]);
    tri_dist d;
    if (tri_dist_init(&d, tp, pp, dp) != 0) tri_dist_abort(&d, 2); /* said */
    if (stalling) tri_dist_abort(&d, stall(&d, argv[6], atof(argv[7])));
    const int wr = d.mesh.rank;
    char path[4096];
    snprintf(path, sizeof path, "%s/probe_%d.txt", argv[1], wr);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        tri_dist_abort(&d, 1);
    }
    fprintf(f, "world %d %d %d\n", d.mesh.world, wr, (int)d.transport);
    fprintf(f, "coords %d %d %d\n", d.mesh.tp_rank, d.mesh.dp_rank, d.mesh.pp_rank);

    world_ops(f, &d.world);
    group_ops(f, "tp", &d.tp, wr);
    group_ops(f, "dp", &d.dp, wr);
    group_ops(f, "pp", &d.pp, wr);
    int emb_idx = -1;
    int *tmp = xmalloc((size_t)d.mesh.world * sizeof *tmp);
    tri_mesh_group(&d.mesh, TRI_GROUP_EMB, tmp, &emb_idx);
    free(tmp);
    fprintf(f, "emb_member %d\n", emb_idx >= 0);
    if (emb_idx >= 0) group_ops(f, "emb", &d.emb, wr);

    /* pipeline p2p: stage s sends its world rank to stage s+1 (not cyclic) */
    if (d.pp.size > 1) {
        int got = -1, mine = wr;
        tri_req rq = {0}, sq = {0};
        if (d.pp.rank > 0) tri_comm_irecv(&d.pp, &got, 1, TRI_I32, d.pp.rank - 1, 3, &rq);
        if (d.pp.rank < d.pp.size - 1) tri_comm_isend(&d.pp, &mine, 1, TRI_I32, d.pp.rank + 1, 3, &sq);
        tri_comm_wait(&d.pp, &sq);
        tri_comm_wait(&d.pp, &rq);
        fprintf(f, "pp_recv %d\n", got);
    }
    fprintf(f, "done 1\n");
    if (fclose(f) != 0) {
        perror(path);
        tri_dist_abort(&d, 1);
    }
    tri_dist_free(&d);
    return 0;
}
