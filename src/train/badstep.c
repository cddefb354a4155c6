/* Bad steps (src/train/badstep.h), the pure part: sample ranges, the
 * running mean, state.json. The trainer's part is src/train/bad_run.c. */
#include "train/badstep.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define TWO_POW_53 9007199254740992.0

void tri_badstep_init(tri_badstep *b) {
    memset(b, 0, sizeof *b);
    b->last_ckpt_step = -1;
}

int tri_badstep_add_range(tri_badstep *b, uint64_t begin, uint64_t end) {
    if (begin >= end) return 0;
    /* merge every range that overlaps or touches [begin, end) into it */
    tri_sample_range out[TRI_BADSTEP_MAX_RANGES + 1];
    int n = 0, placed = 0;
    for (int i = 0; i < b->n_ranges; i++) {
        tri_sample_range r = b->ranges[i];
        if (r.end < begin) {
            out[n++] = r;
        } else if (r.begin > end) {
            if (!placed) out[n++] = (tri_sample_range){begin, end}, placed = 1;
            out[n++] = r;
        } else {
            if (r.begin < begin) begin = r.begin;
            if (r.end > end) end = r.end;
        }
    }
    if (!placed) out[n++] = (tri_sample_range){begin, end};
    if (n > TRI_BADSTEP_MAX_RANGES)
        return tri_error("more than %d ranges of skipped samples: merge some in train.skip_samples",
                         TRI_BADSTEP_MAX_RANGES);
    memcpy(b->ranges, out, (size_t)n * sizeof *out);
    b->n_ranges = n;
    return 0;
}

/* one decimal integer below 2^53 at *p (spaces around skipped); -1 when none */
static int parse_u53(const char **p, uint64_t *v) {
    const char *s = *p;
    while (*s == ' ') s++;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || (double)x >= TWO_POW_53) return -1;
    while (*end == ' ') end++;
    *v = x;
    *p = end;
    return 0;
}

int tri_badstep_parse_ranges(tri_badstep *b, const char *text, const char *key) {
    const char *p = text;
    while (*p == ' ') p++;
    if (*p == '\0') return 0;
    for (;;) {
        const char *piece = p;
        uint64_t lo, hi;
        if (parse_u53(&p, &lo) != 0 || *p++ != '-' || parse_u53(&p, &hi) != 0 || (*p != ',' && *p != '\0') ||
            lo >= hi) {
            int len = (int)strcspn(piece, ",");
            return tri_error("%s: \"%.*s\" is not a range \"b-e\" of global samples with b < e < 2^53 (in \"%s\")", key,
                             len, piece, text);
        }
        if (tri_badstep_add_range(b, lo, hi) != 0) return -1;
        if (*p == '\0') return 0;
        p++;
    }
}

uint64_t tri_badstep_position(const tri_badstep *b, uint64_t pos) {
    /* sorted and merged: one pass (the end of one range never lies in another) */
    for (int i = 0; i < b->n_ranges; i++)
        if (pos >= b->ranges[i].begin && pos < b->ranges[i].end) return b->ranges[i].end;
    return pos;
}

int tri_badstep_is_spike(const tri_badstep *b, double loss, double factor) {
    return b->spike_count >= TRI_BADSTEP_SPIKE_WARMUP && loss > factor * b->spike_mean;
}

void tri_badstep_note_loss(tri_badstep *b, double loss) {
    b->spike_count++;
    int64_t w = b->spike_count < TRI_BADSTEP_SPIKE_N ? b->spike_count : TRI_BADSTEP_SPIKE_N;
    b->spike_mean += (loss - b->spike_mean) / (double)w;
}

const char *tri_skip_reason_name(tri_skip_reason r) {
    switch (r) {
    case TRI_SKIP_FP16_OVERFLOW: return "fp16_overflow";
    case TRI_SKIP_NONFINITE_LOSS: return "nonfinite_loss";
    case TRI_SKIP_NONFINITE_NORM: return "nonfinite_grad_norm";
    case TRI_SKIP_SPIKE: return "loss_spike";
    default: return "none";
    }
}

const char *tri_skip_reason_text(tri_skip_reason r) {
    switch (r) {
    case TRI_SKIP_FP16_OVERFLOW: return "fp16 gradient overflow";
    case TRI_SKIP_NONFINITE_LOSS: return "the loss is not finite";
    case TRI_SKIP_NONFINITE_NORM: return "the gradient norm is not finite";
    case TRI_SKIP_SPIKE: return "loss spike";
    default: return "not skipped";
    }
}

void tri_badstep_to_state(const tri_badstep *b, cJSON *root) {
    cJSON *o = cJSON_AddObjectToObject(root, "bad_steps");
    if (o == NULL) return;
    cJSON_AddNumberToObject(o, "skipped_steps", (double)b->skipped);
    cJSON_AddNumberToObject(o, "bad_in_a_row", b->in_a_row);
    cJSON_AddNumberToObject(o, "streak_begin", (double)b->streak_begin);
    cJSON_AddNumberToObject(o, "rollbacks", b->rollbacks);
    cJSON_AddNumberToObject(o, "spike_mean", b->spike_mean); /* cJSON prints doubles so they read back exactly */
    cJSON_AddNumberToObject(o, "spike_count", (double)b->spike_count);
    cJSON *a = cJSON_AddArrayToObject(o, "skip_samples");
    for (int i = 0; a && i < b->n_ranges; i++) {
        double pair[2] = {(double)b->ranges[i].begin, (double)b->ranges[i].end};
        cJSON_AddItemToArray(a, cJSON_CreateDoubleArray(pair, 2));
    }
}

/* a non-negative integer below 2^53 under key of o, into *v */
static int get_count(const cJSON *o, const char *key, const char *name, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    double d = cJSON_IsNumber(x) ? x->valuedouble : -1;
    if (!(d >= 0 && d < TWO_POW_53) || d != floor(d))
        return tri_error("%s: \"bad_steps\".\"%s\" is missing or not an integer in [0, 2^53)", name, key);
    *v = d;
    return 0;
}

int tri_badstep_from_state(tri_badstep *b, const char *json, const char *name, int ranges) {
    cJSON *root = cJSON_Parse(json);
    if (root == NULL) return tri_error("%s: not valid JSON", name);
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "bad_steps");
    int rc = 0;
    if (o == NULL) goto out;
    double skipped = 0, in_a_row = 0, streak = 0, rollbacks = 0, count = 0;
    if (!cJSON_IsObject(o)) {
        rc = tri_error("%s: \"bad_steps\" is not an object", name);
        goto out;
    }
    if (get_count(o, "skipped_steps", name, &skipped) || get_count(o, "bad_in_a_row", name, &in_a_row) ||
        get_count(o, "streak_begin", name, &streak) || get_count(o, "rollbacks", name, &rollbacks) ||
        get_count(o, "spike_count", name, &count)) {
        rc = -1;
        goto out;
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "spike_mean");
    if (!cJSON_IsNumber(m) || !isfinite(m->valuedouble)) {
        rc = tri_error("%s: \"bad_steps\".\"spike_mean\" is missing or not a finite number", name);
        goto out;
    }
    if (in_a_row > 1e9 || rollbacks > 1e9) {
        rc = tri_error("%s: \"bad_steps\": bad_in_a_row or rollbacks above 10^9", name);
        goto out;
    }
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "skip_samples");
    if (!cJSON_IsArray(a)) {
        rc = tri_error("%s: \"bad_steps\".\"skip_samples\" is missing or not an array", name);
        goto out;
    }
    tri_badstep nb = *b;
    const cJSON *pair;
    cJSON_ArrayForEach(pair, a) {
        const cJSON *lo = cJSON_GetArrayItem(pair, 0), *hi = cJSON_GetArrayItem(pair, 1);
        double l = cJSON_IsNumber(lo) ? lo->valuedouble : -1, h = cJSON_IsNumber(hi) ? hi->valuedouble : -1;
        if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 || !(l >= 0 && l < h && h < TWO_POW_53) ||
            l != floor(l) || h != floor(h)) {
            rc = tri_error("%s: \"bad_steps\".\"skip_samples\": every entry must be [b, e], integers with "
                           "0 <= b < e < 2^53",
                           name);
            goto out;
        }
        if (ranges && tri_badstep_add_range(&nb, (uint64_t)l, (uint64_t)h) != 0) {
            rc = -1;
            goto out;
        }
    }
    nb.skipped = (int64_t)skipped;
    nb.in_a_row = (int)in_a_row;
    nb.streak_begin = (uint64_t)streak;
    nb.rollbacks = (int)rollbacks;
    nb.spike_count = (int64_t)count;
    nb.spike_mean = m->valuedouble;
    *b = nb;
out:
    cJSON_Delete(root);
    return rc;
}
