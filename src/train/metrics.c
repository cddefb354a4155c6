/* The metrics sink (train/metrics.h): metrics.jsonl and TensorBoard scalars
 * from one list of fields. */
#include "train/metrics.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/tfevents.h"

struct tri_metrics {
    FILE *jsonl;
    char jsonl_path[1100];
    int tb_on; /* log.tensorboard and the event file still writable */
    tri_tfevents tb;
};

/* The known keys and their tags: train/ for what the optimiser sees, val/
 * for validation, perf/ for speed. */
static const struct {
    const char *key, *tag;
} tags[] = {
    {"loss", "train/loss"},
    {"val_loss", "val/loss"},
    {"lr", "train/lr"},
    {"grad_norm", "train/grad_norm"},
    {"loss_scale", "train/loss_scale"},
    {"skipped", "train/skipped"},
    {"skipped_steps", "train/skipped_steps"},
    {"ms", "perf/step_ms"},
    {"tokens_per_s", "perf/tokens_per_s"},
    {"mfu", "perf/mfu"},
};

/* the other keys by their prefix */
static const struct {
    const char *prefix, *group;
} prefixes[] = {
    {"val_", "val/"},
    {"ckpt_", "checkpoint/"},
    {"checkpoint_", "checkpoint/"},
    {"perf_", "perf/"},
};

const char *tri_metrics_tag(const char *key, char *out, size_t n) {
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++)
        if (strcmp(key, tags[i].key) == 0) {
            snprintf(out, n, "%s", tags[i].tag);
            return out;
        }
    if (strchr(key, '/')) {
        snprintf(out, n, "%s", key);
        return out;
    }
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t len = strlen(prefixes[i].prefix);
        if (strncmp(key, prefixes[i].prefix, len) == 0 && key[len]) {
            snprintf(out, n, "%s%s", prefixes[i].group, key + len);
            return out;
        }
    }
    snprintf(out, n, "train/%s", key);
    return out;
}

tri_metrics *tri_metrics_open(const char *dir, int resume, int resume_step, int tensorboard) {
    tri_metrics *m = calloc(1, sizeof *m);
    if (!m) {
        tri_error("%s: out of memory for the metrics files", dir);
        return NULL;
    }
    int len = snprintf(m->jsonl_path, sizeof m->jsonl_path, "%s/metrics.jsonl", dir);
    if (len < 0 || (size_t)len >= sizeof m->jsonl_path) {
        tri_error("log.dir: %s: name too long", dir);
        free(m);
        return NULL;
    }
    m->jsonl = fopen(m->jsonl_path, resume ? "a" : "w");
    if (!m->jsonl) {
        tri_error("%s: cannot open: %s", m->jsonl_path, strerror(errno));
        free(m);
        return NULL;
    }
    if (tensorboard) {
        double now = tri_wall_s();
        if (tri_tfevents_open(&m->tb, dir, now) != 0 ||
            tri_tfevents_session_start(&m->tb, now, (int64_t)(resume ? resume_step : 0) + 1) != 0) {
            tri_metrics_close(m);
            return NULL;
        }
        m->tb_on = 1;
    }
    return m;
}

/* simple_value is a float: beyond its range the value is an infinity (a
 * plain conversion would be undefined behaviour), NaN stays NaN */
static float to_float(double v) {
    if (v > FLT_MAX) return INFINITY;
    if (v < -FLT_MAX) return -INFINITY;
    return (float)v;
}

static void write_scalars(tri_metrics *m, int step, const tri_metric *f, size_t n) {
    enum { TAG_MAX = 128 };
    char(*tagbuf)[TAG_MAX] = malloc((n ? n : 1) * sizeof *tagbuf);
    const char **tagp = malloc((n ? n : 1) * sizeof *tagp);
    float *vals = malloc((n ? n : 1) * sizeof *vals);
    int rc = -1;
    if (tagbuf && tagp && vals) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (f[i].kind == TRI_METRIC_JSON) continue;
            tagp[k] = tri_metrics_tag(f[i].key, tagbuf[k], TAG_MAX);
            vals[k] = to_float(f[i].value);
            k++;
        }
        rc = k ? tri_tfevents_scalars(&m->tb, tri_wall_s(), step, tagp, vals, k) : 0;
    } else {
        tri_error("%s: out of memory for an event", m->tb.path);
    }
    free(tagbuf);
    free(tagp);
    free(vals);
    if (rc != 0) { /* said; the run goes on with metrics.jsonl */
        tri_warn("log.tensorboard: no more TensorBoard events after step %d (%s); metrics.jsonl goes on", step,
                 m->tb.path);
        tri_tfevents_close(&m->tb);
        m->tb_on = 0;
    }
}

void tri_metrics_write(tri_metrics *m, int step, const tri_metric *f, size_t n) {
    if (!m) return;
    FILE *o = m->jsonl;
    fprintf(o, "{\"step\": %d", step);
    for (size_t i = 0; i < n; i++) {
        fprintf(o, ", \"%s\": ", f[i].key);
        switch (f[i].kind) {
        case TRI_METRIC_NUM: fprintf(o, f[i].fmt, f[i].value); break;
        case TRI_METRIC_BOOL: fputs(f[i].value != 0.0 ? "true" : "false", o); break;
        case TRI_METRIC_JSON: fputs(f[i].json, o); break;
        }
    }
    fputs("}\n", o);
    fflush(o);
    if (m->tb_on) write_scalars(m, step, f, n);
}

const char *tri_metrics_tb_path(const tri_metrics *m) { return m && m->tb_on ? m->tb.path : ""; }

void tri_metrics_close(tri_metrics *m) {
    if (!m) return;
    if (m->jsonl) fclose(m->jsonl);
    tri_tfevents_close(&m->tb);
    free(m);
}
