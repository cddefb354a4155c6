/* Deterministic, layout-independent sampling of token windows; see
 * data/sampler.h for the contract and docs/data.md for the reasoning. */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "data/dataset.h"
#include "data/sampler.h"

/* ---- keyed permutation -------------------------------------------------- */

/* SplitMix64's output function: a bijective 64-bit mixer. */
static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define FEISTEL_ROUNDS 6

/* Image of i under a key-dependent bijection of [0, n): a balanced Feistel
 * network on the smallest even-width power-of-two domain >= n, with cycle
 * walking (re-encrypt until the value lands inside [0, n)). Since the domain
 * is < 4n, a walk takes fewer than 4 steps on average. */
static uint64_t permute(uint64_t i, uint64_t n, uint64_t key) {
    if (n <= 1) return 0;
    int bits = 64 - __builtin_clzll(n - 1); /* ceil(log2 n), >= 1 */
    int half = (bits + 1) / 2;
    uint64_t mask = (half >= 64) ? ~0ull : ((1ull << half) - 1);
    uint64_t round_key[FEISTEL_ROUNDS];
    for (int r = 0; r < FEISTEL_ROUNDS; r++) round_key[r] = mix64(key ^ (0xD1B54A32D192ED03ull * (uint64_t)(r + 1)));
    uint64_t x = i;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (int k = 0; k < FEISTEL_ROUNDS; k++) {
            uint64_t t = l ^ (mix64(r ^ round_key[k]) & mask);
            l = r;
            r = t;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}

static uint64_t epoch_key(uint64_t seed, int source, uint64_t epoch) {
    return mix64(mix64(mix64(seed) ^ (uint64_t)source) ^ epoch);
}

/* ---- spec parsing -------------------------------------------------------- */

typedef struct spec_entry {
    char path[TRI_DATA_PATH_MAX];
    double weight; /* 0 when not given */
} spec_entry;

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

/* Splits "w:path,w:path" or "path,path" into entries (*n of them). */
static int parse_spec(const char *spec, spec_entry *e, int *n) {
    char *copy = strdup(spec);
    if (!copy) {
        tri_error("%s: out of memory", spec);
        return -1;
    }
    int count = 0, with_weight = 0;
    int rc = 0;
    /* strtok would skip empty entries; walk by hand so "a,,b" is an error. */
    char *item = copy;
    for (;;) {
        char *comma = strchr(item, ',');
        if (comma) *comma = '\0';
        char *t = trim(item);
        if (count == TRI_SAMPLER_MAX_DATASETS) {
            tri_error("%s: more than %d datasets in one blend", spec, TRI_SAMPLER_MAX_DATASETS);
            rc = -1;
            break;
        }
        if (!*t) {
            tri_error("%s: entry %d is empty", spec, count + 1);
            rc = -1;
            break;
        }
        double w = 0.0;
        const char *path = t;
        char *colon = strchr(t, ':');
        if (colon) {
            char *end = NULL;
            *colon = '\0';
            double v = strtod(t, &end);
            if (end != t && *trim(end) == '\0') {
                if (!(v > 0.0) || !isfinite(v)) {
                    tri_error("%s: entry %d: weight %s must be a finite number > 0", spec, count + 1, t);
                    rc = -1;
                    break;
                }
                w = v;
                path = trim(colon + 1);
            } else {
                *colon = ':'; /* not a weight: the colon is part of the path */
            }
        }
        if (!*path) {
            tri_error("%s: entry %d has a weight but no file", spec, count + 1);
            rc = -1;
            break;
        }
        if (strlen(path) + 5 > TRI_DATA_PATH_MAX) {
            tri_error("%s: entry %d: path longer than %d bytes", spec, count + 1, TRI_DATA_PATH_MAX - 5);
            rc = -1;
            break;
        }
        if (count > 0 && (w > 0.0) != with_weight) {
            tri_error("%s: entry %d (%s): give a weight to every entry or to none", spec, count + 1, path);
            rc = -1;
            break;
        }
        with_weight = w > 0.0;
        snprintf(e[count].path, sizeof e[count].path, "%s", path);
        e[count].weight = w;
        count++;
        if (!comma) break;
        item = comma + 1;
    }
    free(copy);
    *n = count;
    return rc;
}

/* ---- blend schedule ----------------------------------------------------- */

/* Integer samples per period W[i] (sum S = *period) for normalised weights w. */
static void quantise_weights(const double *w, int n, uint64_t *W, uint64_t *period) {
    for (uint64_t S = 1; S <= TRI_SAMPLER_MAX_PERIOD; S++) {
        uint64_t sum = 0;
        int exact = 1;
        for (int i = 0; i < n && exact; i++) {
            double x = w[i] * (double)S;
            double r = floor(x + 0.5);
            if (!(fabs(x - r) <= 1e-6) || r < 1.0) exact = 0;
            W[i] = (uint64_t)r;
            sum += W[i];
        }
        if (exact && sum == S) {
            *period = S;
            return;
        }
    }
    /* No small denominator: largest-remainder rounding to 1/S_max, each >= 1. */
    uint64_t S = TRI_SAMPLER_MAX_PERIOD, sum = 0;
    double rem[TRI_SAMPLER_MAX_DATASETS];
    for (int i = 0; i < n; i++) {
        double x = w[i] * (double)S;
        W[i] = (uint64_t)floor(x);
        rem[i] = x - floor(x);
        if (W[i] == 0) {
            W[i] = 1;
            rem[i] = -1.0;
        }
        sum += W[i];
    }
    while (sum < S) {
        int b = 0;
        for (int i = 1; i < n; i++)
            if (rem[i] > rem[b]) b = i;
        W[b]++;
        rem[b] = -2.0;
        sum++;
    }
    while (sum > S) {
        int b = 0;
        for (int i = 1; i < n; i++)
            if (W[i] > W[b]) b = i;
        W[b]--;
        sum--;
    }
    *period = S;
}

/* Fills slot_source/slot_rank for one period: at slot K (1-based) the
 * m-th sample of dataset i may be placed once m <= ceil(K W_i / S) (upper
 * quota) and must be by K = ceil(m S / W_i) (lower quota); among the
 * datasets whose next sample is released, the earliest deadline m / W_i goes
 * first (ties: lower index). Earliest-deadline-first meets every deadline
 * when any schedule can, and a quota schedule exists, so every prefix gets
 * floor or ceil of its share; this is verified below, never assumed. */
static int build_schedule(tri_sampler *s, const uint64_t *W) {
    int n = s->n_sources;
    uint64_t S = s->period;
    s->slot_source = malloc((size_t)S * sizeof *s->slot_source);
    s->slot_rank = malloc((size_t)S * sizeof *s->slot_rank);
    if (!s->slot_source || !s->slot_rank) {
        tri_error("sampler: out of memory for a blend period of %llu samples", (unsigned long long)S);
        return -1;
    }
    uint64_t c[TRI_SAMPLER_MAX_DATASETS] = {0};
    for (uint64_t K = 1; K <= S; K++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            uint64_t m = c[i] + 1;
            if ((m - 1) * S >= K * W[i]) continue; /* not released yet */
            if (best < 0 || m * W[best] < (c[best] + 1) * W[i]) best = i;
        }
        TRI_CHECK(best >= 0);
        s->slot_source[K - 1] = (uint16_t)best;
        s->slot_rank[K - 1] = (uint32_t)c[best];
        c[best]++;
        for (int i = 0; i < n; i++) /* |c_i - K W_i / S| < 1 */
            TRI_CHECK(c[i] * S + S > K * W[i] && c[i] * S < K * W[i] + S);
    }
    for (int i = 0; i < n; i++) TRI_CHECK(c[i] == W[i]);
    return 0;
}

/* ---- init / free ----------------------------------------------------------- */

int tri_sampler_init_split(tri_sampler *s, const char *spec, int seq_len, int vocab_size, uint64_t seed,
                           double val_fraction, int part) {
    TRI_CHECK(s != NULL);
    memset(s, 0, sizeof *s);
    if (!spec || !spec[0]) {
        tri_error("(empty): no token file given for the data");
        return -1;
    }
    if (seq_len < 1) {
        tri_error("%s: seq_len %d must be >= 1", spec, seq_len);
        return -1;
    }
    if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
        tri_error("%s: split fraction %g must be in [0, 1)", spec, val_fraction);
        return -1;
    }
    if (part != TRI_SPLIT_TRAIN && part != TRI_SPLIT_VAL) {
        tri_error("%s: unknown split part %d", spec, part);
        return -1;
    }
    if (part == TRI_SPLIT_VAL && val_fraction == 0.0) {
        tri_error("%s: a validation part needs a split fraction > 0", spec);
        return -1;
    }
    spec_entry *e = calloc(TRI_SAMPLER_MAX_DATASETS, sizeof *e);
    if (!e) {
        tri_error("%s: out of memory", spec);
        return -1;
    }
    int n = 0;
    if (parse_spec(spec, e, &n) != 0) {
        free(e);
        return -1;
    }
    s->src = calloc((size_t)n, sizeof *s->src);
    if (!s->src) {
        tri_error("%s: out of memory", spec);
        free(e);
        return -1;
    }
    s->seq_len = seq_len;
    s->seed = seed;
    double w[TRI_SAMPLER_MAX_DATASETS], wsum = 0.0;
    for (int i = 0; i < n; i++) {
        tri_sampler_source *src = &s->src[i];
        if (tri_dataset_open(&src->ds, e[i].path, vocab_size) != 0) goto fail;
        s->n_sources = i + 1; /* so that free closes it */
        size_t nt = src->ds.n_tokens;
        uint64_t nw = nt >= 1 ? (uint64_t)(nt - 1) / (uint64_t)seq_len : 0;
        if (nw == 0) {
            tri_error("%s: %zu tokens hold no window of seq_len + 1 = %d tokens", e[i].path, nt, seq_len + 1);
            goto fail;
        }
        uint64_t n_val = 0;
        if (val_fraction > 0.0) {
            n_val = (uint64_t)llround((double)nw * val_fraction);
            if (n_val < 1) n_val = 1;
            if (n_val >= nw) {
                tri_error("%s: %llu windows of %d tokens cannot be split into a "
                          "train and a val part with fraction %g",
                          e[i].path, (unsigned long long)nw, seq_len + 1, val_fraction);
                goto fail;
            }
        }
        if (part == TRI_SPLIT_TRAIN) {
            src->first_window = 0;
            src->n_windows = nw - n_val;
        } else {
            src->first_window = nw - n_val;
            src->n_windows = n_val;
        }
        s->total_windows += src->n_windows;
        w[i] = e[i].weight > 0.0 ? e[i].weight : (double)src->n_windows;
        wsum += w[i];
    }
    for (int i = 0; i < n; i++) w[i] /= wsum;
    uint64_t W[TRI_SAMPLER_MAX_DATASETS];
    quantise_weights(w, n, W, &s->period);
    for (int i = 0; i < n; i++) {
        s->src[i].per_period = W[i];
        s->src[i].weight = (double)W[i] / (double)s->period;
    }
    if (build_schedule(s, W) != 0) goto fail;
    free(e);
    return 0;
fail:
    free(e);
    tri_sampler_free(s);
    return -1;
}

int tri_sampler_init(tri_sampler *s, const char *spec, int seq_len, int vocab_size, uint64_t seed) {
    return tri_sampler_init_split(s, spec, seq_len, vocab_size, seed, 0.0, TRI_SPLIT_TRAIN);
}

void tri_sampler_free(tri_sampler *s) {
    if (!s) return;
    for (int i = 0; i < s->n_sources; i++) tri_dataset_close(&s->src[i].ds);
    free(s->src);
    free(s->slot_source);
    free(s->slot_rank);
    memset(s, 0, sizeof *s);
}

/* ---- sampling --------------------------------------------------------------- */

void tri_sampler_locate(const tri_sampler *s, uint64_t k, int *source, uint64_t *window) {
    TRI_CHECK(s != NULL && s->n_sources > 0);
    uint64_t q = k / s->period, p = k % s->period;
    int d = s->slot_source[p];
    const tri_sampler_source *src = &s->src[d];
    uint64_t i = q * src->per_period + s->slot_rank[p]; /* d's own sample counter */
    uint64_t epoch = i / src->n_windows, r = i % src->n_windows;
    if (source) *source = d;
    if (window) *window = src->first_window + permute(r, src->n_windows, epoch_key(s->seed, d, epoch));
}

/* inputs/targets rows (seq_len,) of window w of source d; 0 or -1 (printed:
 * the file was truncated under the job). */
static int read_window(const tri_sampler *s, int d, uint64_t w, int32_t *in, int32_t *tg) {
    const tri_dataset *ds = &s->src[d].ds;
    size_t T = (size_t)s->seq_len;
    size_t start = (size_t)w * T;
    if (tri_dataset_read(ds, start, T, in) != 0) return -1;
    return tri_dataset_read(ds, start + 1, T, tg);
}

int tri_sampler_fill_samples(const tri_sampler *s, uint64_t first_sample, size_t count, int32_t *inputs,
                             int32_t *targets) {
    TRI_CHECK(s != NULL && s->n_sources > 0);
    TRI_CHECK(count == 0 || (inputs != NULL && targets != NULL));
    size_t T = (size_t)s->seq_len;
    for (size_t r = 0; r < count; r++) {
        int d;
        uint64_t w;
        tri_sampler_locate(s, first_sample + r, &d, &w);
        if (read_window(s, d, w, inputs + r * T, targets + r * T) != 0) return -1;
    }
    return 0;
}

int tri_sampler_fill(const tri_sampler *s, uint64_t step, size_t global_batch, size_t first, size_t count,
                     int32_t *inputs, int32_t *targets) {
    TRI_CHECK(first <= global_batch && count <= global_batch - first);
    return tri_sampler_fill_samples(s, step * (uint64_t)global_batch + (uint64_t)first, count, inputs, targets);
}

int tri_sampler_fill_eval(const tri_sampler *s, size_t batch_index, size_t batch, int32_t *inputs, int32_t *targets) {
    TRI_CHECK(s != NULL && s->n_sources > 0);
    TRI_CHECK(batch == 0 || (inputs != NULL && targets != NULL));
    size_t T = (size_t)s->seq_len;
    uint64_t total = s->total_windows;
    uint64_t g = (uint64_t)(((unsigned __int128)batch_index * batch) % total);
    for (size_t r = 0; r < batch; r++, g = (g + 1) % total) {
        uint64_t local = g;
        int d = 0;
        while (local >= s->src[d].n_windows) {
            local -= s->src[d].n_windows;
            d++;
        }
        if (read_window(s, d, s->src[d].first_window + local, inputs + r * T, targets + r * T) != 0) return -1;
    }
    return 0;
}

size_t tri_sampler_eval_batches(const tri_sampler *s, size_t batch) {
    TRI_CHECK(s != NULL && batch > 0);
    return (size_t)((s->total_windows + batch - 1) / batch);
}
