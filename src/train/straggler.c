/* Straggler reports (see straggler.h). */
#include "train/straggler.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tri_straggler_median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* The median of sorted m[0..n) without one element equal to x (n >= 2). */
static double median_without(const double *m, int n, double x) {
    int lo = 0, hi = n; /* the first position of x */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (m[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    const int pos = lo, k = n - 1;
#define REST(j) ((j) < pos ? m[(j)] : m[(j) + 1])
    double med = k % 2 ? REST(k / 2) : 0.5 * (REST(k / 2 - 1) + REST(k / 2));
#undef REST
    return med;
}

int tri_straggler_judge(const double *fig, int world, double factor, double *median, int *slow, double *base,
                        int max_slow) {
    double *m = malloc((size_t)world * sizeof *m);
    if (m == NULL) return 0;
    for (int r = 0; r < world; r++) m[r] = fig[(size_t)r * TRI_SG_N + TRI_SG_MEDIAN];
    *median = tri_straggler_median(m, world); /* sorts m */
    int n = 0;
    for (int r = 0; r < world && world >= 2; r++) {
        double x = fig[(size_t)r * TRI_SG_N + TRI_SG_MEDIAN];
        double others = median_without(m, world, x);
        if (!(x > factor * others && x - others >= TRI_STRAGGLER_MIN_EXCESS_S)) continue;
        /* insert by ratio, slowest first; beyond max_slow only counted */
        double ratio = others > 0 ? x / others : 1e300;
        int at = n < max_slow ? n : max_slow;
        while (at > 0) {
            int q = slow[at - 1];
            double qo = base[at - 1], qx = fig[(size_t)q * TRI_SG_N + TRI_SG_MEDIAN];
            if ((qo > 0 ? qx / qo : 1e300) >= ratio) break;
            if (at < max_slow) {
                slow[at] = q;
                base[at] = qo;
            }
            at--;
        }
        if (at < max_slow) {
            slow[at] = r;
            base[at] = others;
        }
        n++;
    }
    free(m);
    return n;
}

int tri_straggler_init(tri_straggler *s, tri_dist *d, int every, double factor, int quiet) {
    memset(s, 0, sizeof *s);
    if (every <= 0 || d->mesh.world < 2) return 0; /* one rank: nobody to compare with */
    s->compute = calloc((size_t)every, sizeof *s->compute);
    s->comm = calloc((size_t)every, sizeof *s->comm);
    s->all = calloc((size_t)d->mesh.world * TRI_SG_N, sizeof *s->all);
    char(*hosts)[64] = calloc((size_t)d->mesh.world, sizeof *hosts);
    if (s->compute == NULL || s->comm == NULL || s->all == NULL || hosts == NULL) {
        free(s->compute);
        free(s->comm);
        free(s->all);
        free(hosts);
        memset(s, 0, sizeof *s);
        return tri_error_rank(d->mesh.rank, "out of memory for the straggler reports");
    }
    char mine[64] = "";
    if (gethostname(mine, sizeof mine - 1) != 0) snprintf(mine, sizeof mine, "?");
    tri_comm_allgather_host(&d->world, hosts, mine, sizeof mine, TRI_U8);
    if (d->mesh.rank == 0)
        s->hosts = hosts;
    else
        free(hosts);
    s->every = every;
    s->factor = factor;
    s->quiet = quiet;
    return 0;
}

double tri_straggler_comm_s(const tri_dist *d) {
    return d->world.stats.seconds + d->tp.stats.seconds + d->dp.stats.seconds + d->pp.stats.seconds +
           d->emb.stats.seconds + d->cp.stats.seconds + d->dpcp.stats.seconds;
}

void tri_straggler_step(tri_straggler *s, double step_s, double blocked) {
    if (s->every <= 0 || s->n >= s->every) return;
    if (blocked < 0) blocked = 0;
    double compute = step_s - blocked;
    s->compute[s->n] = compute > 0 ? compute : 0;
    s->comm[s->n] = blocked;
    s->n++;
}

/* Appends to buf (capacity cap, length *len) as snprintf would. */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    if (*len >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (k > 0) *len += (size_t)k;
}

/* A JSON array of fig[.][k] in milliseconds. */
static void json_ms(char *buf, size_t cap, size_t *len, const char *name, const double *fig, int world, int k) {
    put(buf, cap, len, ", \"%s\": [", name);
    for (int r = 0; r < world; r++) put(buf, cap, len, "%s%.3f", r ? ", " : "", 1e3 * fig[(size_t)r * TRI_SG_N + k]);
    put(buf, cap, len, "]");
}

void tri_straggler_check(tri_straggler *s, tri_dist *d, tri_metrics *metrics, int step) {
    if (s->every <= 0 || s->n < s->every) return;
    const int world = d->mesh.world, n = s->n;
    double mine[TRI_SG_N];
    double lo = s->compute[0], hi = s->compute[0];
    for (int i = 1; i < n; i++) {
        if (s->compute[i] < lo) lo = s->compute[i];
        if (s->compute[i] > hi) hi = s->compute[i];
    }
    mine[TRI_SG_MIN] = lo;
    mine[TRI_SG_MAX] = hi;
    mine[TRI_SG_MEDIAN] = tri_straggler_median(s->compute, n);
    mine[TRI_SG_COMM] = tri_straggler_median(s->comm, n);
    mine[TRI_SG_TP] = d->mesh.tp_rank;
    mine[TRI_SG_PP] = d->mesh.pp_rank;
    mine[TRI_SG_DP] = d->mesh.dp_rank;
    s->n = 0;
    double *all = s->all;
    tri_comm_allgather_host(&d->world, all, mine, TRI_SG_N, TRI_F64);
    if (d->mesh.rank != 0) return;
    enum { MAX_SLOW = 8 };
    int slow[MAX_SLOW];
    double med = 0, base[MAX_SLOW];
    int n_slow = tri_straggler_judge(all, world, s->factor, &med, slow, base, MAX_SLOW);
    for (int i = 0; i < n_slow && i < MAX_SLOW && !s->quiet; i++) {
        const double *f = all + (size_t)slow[i] * TRI_SG_N;
        tri_log_note("rank %d (host %.63s, stage %d, dp %d, tp %d) is slow: compute %.1fx the median over the last %d "
                     "steps (%.1f ms a step against %.1f ms, the median of the other ranks)",
                     slow[i], s->hosts[slow[i]], (int)f[TRI_SG_PP], (int)f[TRI_SG_DP], (int)f[TRI_SG_TP],
                     base[i] > 0 ? f[TRI_SG_MEDIAN] / base[i] : 0.0, n, 1e3 * f[TRI_SG_MEDIAN], 1e3 * base[i]);
    }
    if (n_slow > MAX_SLOW && !s->quiet) tri_log_note("... and %d more slow ranks", n_slow - MAX_SLOW);
    if (metrics) {
        /* every rank's figures as one JSON object; the spread of the ranks'
         * median compute (slowest over fastest) and the count of slow ranks
         * as numbers, so TensorBoard charts them (perf/compute_spread, perf/slow_ranks) */
        const size_t cap = 256 + (size_t)world * 4 * 24;
        char *obj = malloc(cap);
        if (!obj) return;
        size_t len = 0;
        put(obj, cap, &len, "{\"window\": %d, \"median_compute_ms\": %.3f", n, 1e3 * med);
        json_ms(obj, cap, &len, "compute_ms_min", all, world, TRI_SG_MIN);
        json_ms(obj, cap, &len, "compute_ms_median", all, world, TRI_SG_MEDIAN);
        json_ms(obj, cap, &len, "compute_ms_max", all, world, TRI_SG_MAX);
        json_ms(obj, cap, &len, "comm_ms_median", all, world, TRI_SG_COMM);
        put(obj, cap, &len, ", \"slow\": [");
        for (int i = 0; i < n_slow && i < MAX_SLOW; i++) put(obj, cap, &len, "%s%d", i ? ", " : "", slow[i]);
        put(obj, cap, &len, "]}");
        double fast = all[TRI_SG_MEDIAN], slowest = fast;
        for (int r = 1; r < world; r++) {
            double m = all[(size_t)r * TRI_SG_N + TRI_SG_MEDIAN];
            if (m < fast) fast = m;
            if (m > slowest) slowest = m;
        }
        tri_metric f[] = {TRI_METRIC_JSON("straggler", obj),
                          TRI_METRIC_NUM("perf_compute_spread", "%.4f", fast > 0 ? slowest / fast : 1.0),
                          TRI_METRIC_NUM("perf_slow_ranks", "%.0f", (double)n_slow)};
        tri_metrics_write(metrics, step, f, 3);
        free(obj);
    }
}

void tri_straggler_free(tri_straggler *s) {
    free(s->compute);
    free(s->comm);
    free(s->hosts);
    free(s->all);
    memset(s, 0, sizeof *s);
}
