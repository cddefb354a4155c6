/* The metrics sink (train/metrics.h): metrics.jsonl and TensorBoard scalars
 * from one list of fields. */
#include "train/metrics.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/tfevents.h"
#include "config/config.h"

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
    {"val_", "val/"},   {"ckpt_", "checkpoint/"}, {"checkpoint_", "checkpoint/"},
    {"perf_", "perf/"}, {"elastic_", "elastic/"},
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

/* The event lines of metrics.jsonl at path (those the sink wrote with
 * "event" first), concatenated; "" when none or no file (malloc'd; NULL out
 * of memory, said). */
static char *event_lines(const char *path) {
    char *kept = NULL, *line = NULL;
    size_t len = 0, cap = 0;
    FILE *o = open_memstream(&kept, &len);
    if (!o) {
        tri_error("%s: out of memory", path);
        return NULL;
    }
    FILE *f = fopen(path, "r");
    while (f && getline(&line, &cap, f) > 0)
        if (strncmp(line, "{\"step\": ", 9) == 0 && strstr(line, ", \"event\": ") && strchr(line, '\n')) fputs(line, o);
    if (f) fclose(f);
    free(line);
    if (fclose(o) != 0) {
        free(kept);
        tri_error("%s: out of memory", path);
        return NULL;
    }
    return kept;
}

tri_metrics *tri_metrics_open(const char *dir, tri_metrics_mode mode, int resume_step, int tensorboard) {
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
    const int resume = mode == TRI_METRICS_RESUME;
    char *kept = mode == TRI_METRICS_RESTART ? event_lines(m->jsonl_path) : NULL;
    if (mode == TRI_METRICS_RESTART && !kept) {
        free(m);
        return NULL;
    }
    m->jsonl = fopen(m->jsonl_path, resume ? "a" : "w");
    if (!m->jsonl) {
        tri_error("%s: cannot open: %s", m->jsonl_path, strerror(errno));
        free(kept);
        free(m);
        return NULL;
    }
    if (kept) { /* a restart from step 0: the launcher's events stay */
        fputs(kept, m->jsonl);
        fflush(m->jsonl);
        free(kept);
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

/* One event line of the launcher (a JSON object) through the sink at step:
 * 1 written, 0 out of memory (said), -1 not an object. */
static int write_event(tri_metrics *m, int step, const char *text) {
    cJSON *o = cJSON_Parse(text);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return -1;
    }
    int n = cJSON_GetArraySize(o), k = 0;
    tri_metric *f = calloc((size_t)(n ? n : 1), sizeof *f);
    char **json = calloc((size_t)(n ? n : 1), sizeof *json);
    int rc = f && json ? 0 : -1;
    for (cJSON *it = o->child; rc == 0 && it; it = it->next) {
        if (!it->string || strcmp(it->string, "step") == 0) continue; /* the trainer's step */
        if (cJSON_IsNumber(it))
            f[k++] = TRI_METRIC_NUM(it->string, "%.17g", it->valuedouble);
        else if (cJSON_IsBool(it))
            f[k++] = TRI_METRIC_BOOL(it->string, cJSON_IsTrue(it));
        else if ((json[k] = cJSON_PrintUnformatted(it)) != NULL) {
            f[k] = TRI_METRIC_JSON(it->string, json[k]);
            k++;
        } else
            rc = -1;
    }
    if (rc == 0)
        tri_metrics_write(m, step, f, (size_t)k);
    else
        tri_error("out of memory for a launcher's event: %s", text);
    for (int i = 0; json && i < n; i++) free(json[i]);
    free(json);
    free(f);
    cJSON_Delete(o);
    return rc == 0;
}

int tri_metrics_take_events(tri_metrics *m, const char *dir, int step, int take) {
    char *path = malloc(strlen(dir) + sizeof TRI_LOG_PENDING_EVENTS + 1);
    if (!path) {
        tri_error("%s: out of memory", dir);
        return 0;
    }
    sprintf(path, "%s/%s", dir, TRI_LOG_PENDING_EVENTS);
    int n = 0, lineno = 0;
    FILE *f = NULL;
    if (take && m && (f = fopen(path, "r")) == NULL && errno != ENOENT)
        tri_warn("%s: cannot read: %s; its events are not in metrics.jsonl", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    while (f && getline(&line, &cap, f) > 0) {
        lineno++;
        line[strcspn(line, "\n")] = '\0';
        if (!line[0]) continue;
        int rc = write_event(m, step, line);
        if (rc < 0) tri_warn("%s: line %d is not a JSON object; skipped: %s", path, lineno, line);
        n += rc > 0;
    }
    free(line);
    if (f) fclose(f);
    if (take && !m) { /* not the logger: the file is its */
        free(path);
        return 0;
    }
    if (unlink(path) != 0 && errno != ENOENT) /* (a relaunch would write these again) */
        tri_warn("%s: cannot remove: %s", path, strerror(errno));
    free(path);
    return n;
}

const char *tri_metrics_tb_path(const tri_metrics *m) { return m && m->tb_on ? m->tb.path : ""; }

void tri_metrics_close(tri_metrics *m) {
    if (!m) return;
    if (m->jsonl) fclose(m->jsonl);
    tri_tfevents_close(&m->tb);
    free(m);
}
