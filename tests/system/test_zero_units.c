/* ZeRO-3 gathering layer units (src/train/zero_units.c,
 * parallel.zero_unit_layers) through tridentrun: equivalence with one rank,
 * the parameter memory of a step and the bytes gathered against closed
 * forms.
 *
 * Tolerances: tests/system/test_zero.c's, for its reasons. A unit's gather
 * copies the same updated shards into a smaller buffer, and the layers read
 * the same values from it; the sums and updates are ZeRO-1's. So losses 1e-6
 * relative (a missing or doubled reduction moves a loss by 1e-3; a layer run
 * on a stale or unfilled unit by far more) and parameters after 10 AdamW
 * steps 1e-5 absolute (a shard updated from a wrong gradient moves ~lr =
 * 1e-3 a step). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/equiv.h"
#include "helpers/testutil.h"

#define LOSS_RTOL  1e-6
#define PARAM_ATOL 1e-5

#define MODEL      "--set model.n_head=4 --set model.n_layer=4 --set train.steps=10"
#define ZERO3      "--set parallel.zero=3"

/* Every layout as run "u_<i>" against the one-rank run "ref". */
static void expect_follow(const char *dir, const double *ref, const int (*tpdp)[2], const char *const *more, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char ck[32], what[1024], sets[1024];
        snprintf(ck, sizeof ck, "u_%zu", i);
        snprintf(what, sizeof what, "tp=%d dp=%d %s", tpdp[i][0], tpdp[i][1], more[i]);
        snprintf(sets, sizeof sets, MODEL " " ZERO3 " %s", more[i]);
        tt_equiv_expect_follows(dir, ref, "ref", 10, ck, tpdp[i][0], tpdp[i][1], sets,
                                "ZeRO-3 parameters within a step", LOSS_RTOL, PARAM_ATOL, what);
    }
}

/* Units of one layer (the default) and of several, with TP, small buckets
 * (a unit of many buckets; at dp 4 the layer edges fall inside an alignment
 * unit, so two units share a bucket), both recompute policies (full reruns
 * each layer's forward inside backward, from the unit gathered for it),
 * keeping the forward's units, the guarded backend (a layer reading a
 * released unit faults), pipelines (the tied embedding on two stages, the
 * next chunk's first units started early with vpp 2, zb-h1's split backward
 * whose weight half gathers nothing). */
Test(zero3_units, layer_units_follow_the_single_rank_run, .timeout = 900) {
    char *dir = tt_equiv_dir(), *out = NULL;
    cr_assert_eq(tt_equiv_run(dir, 1, 1, "ref", MODEL, &out), 0, "%s", out);
    free(out);
    double *ref;
    cr_assert_eq(tt_equiv_losses(dir, "ref", &ref), 10);
    const int tpdp[][2] = {{1, 2}, {1, 4}, {2, 2}, {1, 2}, {1, 2}, {1, 2}, {1, 2}, {2, 2}, {1, 2}, {1, 2}, {1, 2}};
    const char *const more[] = {
        "",
        "--set parallel.bucket_mb=0.01",
        "--set parallel.zero_unit_layers=3",
        "--set train.recompute=selective",
        "--set train.recompute=full --set parallel.zero_unit_layers=2",
        "--set parallel.zero_keep_params=true",
        "--device cpu-guard --set parallel.bucket_mb=0.01",
        "--set parallel.pp=2",
        "--set parallel.pp=2 --set parallel.vpp=2 --set parallel.bucket_mb=0.01",
        "--set parallel.pp=2 --set parallel.schedule=zb-h1 --set train.recompute=full",
        "--set parallel.pp=2 --set parallel.schedule=zb-h1 --device cpu-guard",
    };
    _Static_assert(sizeof tpdp / sizeof tpdp[0] == sizeof more / sizeof more[0], "one layout per line");
    expect_follow(dir, ref, tpdp, more, sizeof more / sizeof more[0]);
    free(ref);
    tt_rmrf(dir);
    free(dir);
}

/* ---- the closed forms: the tiny GPT-2 with 4 heads, tp = 1 ----
 * A chunk's flat buffer (model/gpt.c): the final LayerNorm (2C, the head's
 * chunk), the layers from last to first (12 C^2 + 13 C each), the position
 * and token embeddings (T C + Vp C, the embedding's chunk; Vp the vocabulary
 * padded to 128), every tensor a multiple of 16 elements here; padded to a
 * multiple of a = 16 d elements. A unit's window is its tensors' range
 * widened to multiples of a (the buckets are cut there). */
enum { C_ = 32, T_ = 16 };

static size_t down(size_t x, size_t a) { return x / a * a; }
static size_t up(size_t x, size_t a) { return (x + a - 1) / a * a; }

typedef struct tiny_units {
    size_t n_alloc, head_w, emb_w; /* elements */
    size_t layer_w[16];            /* unit u's window (layers u L .. u L + L - 1) */
    int n_units;
} tiny_units;

/* A chunk of n_layer layers, with the head (final norm) or not, with the
 * embedding, over d ranks, in units of L layers. */
static tiny_units tiny(int n_layer, int d, int L, int with_head, size_t vp) {
    tiny_units t = {0};
    const size_t a = 16 * (size_t)d, head = with_head ? 2 * C_ : 0, layer = 12 * C_ * C_ + 13 * C_;
    const size_t E = head + (size_t)n_layer * layer, n = E + (T_ + vp) * C_;
    t.n_alloc = up(n, a);
    t.head_w = head ? up(head, a) : 0;
    t.emb_w = t.n_alloc - down(E, a);
    t.n_units = (n_layer + L - 1) / L;
    for (int u = 0; u < t.n_units; u++) {
        int first = u * L, last = first + L - 1 < n_layer - 1 ? first + L - 1 : n_layer - 1;
        /* layer l lies at head + (n_layer - 1 - l) layer */
        size_t lo = head + (size_t)(n_layer - 1 - last) * layer, hi = head + (size_t)(n_layer - first) * layer;
        t.layer_w[u] = up(hi, a) - down(lo, a);
    }
    return t;
}

/* The parameter bytes at most within a step (the allocator's peak of
 * TRI_MEM_PARAMS between the step's start and its reduction, printed at
 * step 1 by world rank 0): this rank's shards, n_alloc P / d, plus what is
 * gathered at once. One chunk (tied: the embedding unit is read at both
 * ends of the forward and stays), n units: the embedding unit with two
 * adjacent layer units (the one computing, the next one's prefetch), or at
 * the last one with the head unit started for the head, so
 *     P (n_alloc / d + emb + max(max_u (unit_u + unit_u+1), unit_n-1 + head))
 * (the backward's head + two units is less), to the byte; below the
 * chunk-wide gather's P (n_alloc / d + n_alloc), which
 * parallel.zero_unit_layers = 0 measures. 8 layers, units of 1 and 3 layers
 * (the last one shorter), dp 2 (the layer edges aligned) and 4 (not: the
 * windows overlap by one bucket), fp32 and bf16, small buckets (more of
 * them, the same windows). And pp 2's first stage (4 layers and the
 * embedding, no head; vocabulary 1024 so that the embedding outweighs a
 * layer): the embedding unit released once the embedding has run,
 *     P (n_alloc / d + max(emb + unit_0, max_u (unit_u + unit_u+1))). */
Test(zero3_units, the_step_peak_is_the_ends_and_two_units, .timeout = 600) {
    char *dir = tt_equiv_dir();
    const int NL = 8;
    const struct {
        int dp, L, P, pp;
        const char *more;
    } cases[] = {{2, 1, 4, 1, ""},
                 {4, 1, 4, 1, ""},
                 {4, 3, 4, 1, ""},
                 {2, 1, 2, 1, "--set train.precision=bf16"},
                 {4, 1, 4, 1, "--set parallel.bucket_mb=0.01"},
                 {2, 0, 4, 1, ""},
                 {4, 0, 4, 1, ""},
                 {2, 1, 4, 2, "--set parallel.pp=2 --set model.vocab_size=1024"}};
    size_t unit_peak[2] = {0, 0}; /* dp 2, dp 4 at L = 1, fp32 */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int d = cases[i].dp, L = cases[i].L;
        const size_t P = (size_t)cases[i].P;
        char ck[32], sets[1024], *out = NULL, what[1200];
        snprintf(ck, sizeof ck, "m_%zu", i);
        snprintf(sets, sizeof sets,
                 "--set model.n_head=4 --set model.n_layer=%d --set train.steps=2 " ZERO3
                 " --set parallel.zero_unit_layers=%d %s",
                 NL, L, cases[i].more);
        snprintf(what, sizeof what, "dp %d, units of %d layers, %s", d, L, sets);
        cr_assert_eq(tt_equiv_run(dir, 1, d, ck, sets, &out), 0, "%s: %s", what, out);
        const int pp = cases[i].pp;
        tiny_units t = tiny(NL / pp, d, L > 0 ? L : NL, pp == 1, pp == 1 ? 256 : 1024);
        size_t shards = tt_equiv_field(out, " shards="), peak = tt_equiv_field(out, "step_peak_params=");
        cr_expect_eq(shards, t.n_alloc / (size_t)d * P, "%s: shard bytes %zu", what, shards);
        size_t gathered;
        if (L == 0) {
            gathered = t.n_alloc;
        } else {
            size_t pair = 0;
            for (int u = 0; u + 1 < t.n_units; u++)
                if (t.layer_w[u] + t.layer_w[u + 1] > pair) pair = t.layer_w[u] + t.layer_w[u + 1];
            if (pp == 1) {
                size_t last = t.layer_w[t.n_units - 1] + t.head_w;
                gathered = t.emb_w + (pair > last ? pair : last);
            } else {
                size_t first = t.emb_w + t.layer_w[0];
                gathered = first > pair ? first : pair;
            }
        }
        size_t expect = (t.n_alloc / (size_t)d + gathered) * P;
        cr_expect_eq(peak, expect, "%s: parameter bytes within a step %zu, closed form %zu", what, peak, expect);
        if (L == 1 && P == 4 && pp == 1 && !cases[i].more[0]) unit_peak[d == 4] = peak;
        if (L == 0) {
            size_t u = unit_peak[d == 4];
            cr_expect(u > 0 && u < peak, "%s: layer units' peak %zu not below the chunk-wide gather's %zu", what, u,
                      peak);
        }
        free(out);
    }
    tt_rmrf(dir);
    free(dir);
}

/* What crosses the DP group per step (`trident bench`'s comm dp line: a
 * reduce-scatter booked at its whole input, an all-gather at this rank's
 * part), 2 layers, dp 2, fp32, m = 2 micro-batches per rank, one bucket per
 * unit (the default 25 MiB; the layer edges are aligned at dp 2): the
 * reduce-scatter of every bucket once (4 n_alloc bytes, 4 calls), each
 * forward gathers every unit (n_alloc P / 2 bytes, 4 calls), each backward
 * every unit but the embedding's (its backward reads no weights: 3 calls),
 * plus the loss and the norm (two host all-reduces of 8 bytes). With keep,
 * the backward gathers nothing more. */
Test(zero3_units, gathers_per_step_are_the_closed_form, .timeout = 300) {
    char *dir = tt_equiv_dir();
    tiny_units t = tiny(2, 2, 1, 1, 256);
    const double n = (double)t.n_alloc, emb = (double)t.emb_w, m = 2;
    const struct {
        const char *sets;
        int calls;
        double bytes;
    } cases[] = {{ZERO3, 4 + 2 * 4 + 2 * 3 + 2, 4 * n + m * 4 * n / 2 + m * 4 * (n - emb) / 2},
                 {ZERO3 " --set parallel.zero_keep_params=true", 4 + 2 * 4 + 2, 4 * n + m * 4 * n / 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tt_equiv_expect_dp_comm(dir, i, cases[i].sets, cases[i].calls, cases[i].bytes);
    }
    tt_rmrf(dir);
    free(dir);
}
