/* A run's figures from its metrics.jsonl, OUT/summary.jsonl, and the plot
 * of it (src/sweep/sweep.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "base/fs.h"
#include "model/gpt.h"
#include "sweep/sweep.h"
#include "train/plot.h"

/* ------------------------------------------------------------------------ */
/* A run's figures, from its metrics.jsonl                                   */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n-1] (sorted in place), NAN when n is 0. */
static double median(double *v, int n) {
    if (n == 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* o[key] when it is a number, else NAN. */
static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

void tri_sweep_read_stats(const char *dir, tri_sweep_stats *s) {
    s->last_step = 0;
    s->final_loss = s->final_val = s->best_val = s->step_ms = s->tokens_per_s = s->mfu = NAN;
    char path[TRI_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    int cap = 256, n = 0, first = 1;
    double *ms = malloc((size_t)cap * sizeof *ms), *tps = malloc((size_t)cap * sizeof *tps),
           *mfu = malloc((size_t)cap * sizeof *mfu);
    int val_step = 0;
    char line[4096];
    while (ms && tps && mfu && fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        if (o == NULL) continue; /* a line cut by a crash */
        double step = num(o, "step"), loss = num(o, "loss"), vl = num(o, "val_loss");
        if (!isnan(loss) && !isnan(step)) {
            if ((int)step >= s->last_step) {
                s->last_step = (int)step;
                s->final_loss = loss;
            }
            if (!first) { /* the first logged step includes the warm-up */
                if (n == cap) {
                    cap *= 2;
                    double *a = realloc(ms, (size_t)cap * sizeof *ms),
                           *b = a ? realloc(tps, (size_t)cap * sizeof *tps) : NULL,
                           *c = b ? realloc(mfu, (size_t)cap * sizeof *mfu) : NULL;
                    if (!a || !b || !c) TRI_FAIL("out of memory");
                    ms = a;
                    tps = b;
                    mfu = c;
                }
                ms[n] = num(o, "ms");
                tps[n] = num(o, "tokens_per_s");
                mfu[n] = num(o, "mfu");
                n++;
            }
            first = 0;
        }
        if (!isnan(vl) && !isnan(step)) {
            if ((int)step >= val_step) {
                val_step = (int)step;
                s->final_val = vl;
            }
            if (isnan(s->best_val) || vl < s->best_val) s->best_val = vl;
        }
        cJSON_Delete(o);
    }
    fclose(f);
    if (ms && tps && mfu) {
        s->step_ms = median(ms, n);
        s->tokens_per_s = median(tps, n);
        s->mfu = median(mfu, n);
    }
    free(ms);
    free(tps);
    free(mfu);
}

/* ------------------------------------------------------------------------ */
/* The summary                                                              */

/* A number that reads back exactly (cJSON prints 15 digits when they are
 * within an epsilon), or null for NAN. */
static void add_num(cJSON *o, const char *key, double v) {
    if (!isfinite(v)) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    cJSON_AddRawToObject(o, key, buf);
}

static const char *status_of(const tri_sweep_point *p) {
    if (p->state == TRI_POINT_DONE) return "ok";
    if (p->ran && p->exit_code != 0) return "failed";
    if (p->state == TRI_POINT_RESUME || p->ran) return "incomplete";
    return "pending";
}

cJSON *tri_sweep_summary_line(const tri_sweep_point *p) {
    tri_sweep_stats s;
    tri_sweep_read_stats(p->dir, &s);
    const tri_config *c = &p->cfg;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "point", p->name);
    cJSON_AddStringToObject(o, "run_dir", p->dir);
    for (const cJSON *v = p->values->child; v; v = v->next) {
        if (cJSON_IsNumber(v))
            add_num(o, v->string, v->valuedouble);
        else
            cJSON_AddItemToObject(o, v->string, cJSON_Duplicate(v, 1));
    }
    cJSON_AddStringToObject(o, "status", status_of(p));
    if (p->ran && p->exit_code != 0) add_num(o, "exit_code", p->exit_code);
    double fpt = tri_gpt_flops_per_token(&c->model);
    double tps_step = (double)c->train.global_batch * c->model.seq_len;
    double tokens = (double)s.last_step * tps_step;
    add_num(o, "params", (double)tri_gpt_num_params(&c->model));
    add_num(o, "flops_per_token", fpt);
    add_num(o, "tokens_per_step", tps_step);
    add_num(o, "steps", s.last_step);
    add_num(o, "tokens", tokens);
    add_num(o, "flops", fpt * tokens);
    add_num(o, "final_loss", s.final_loss);
    add_num(o, "final_val_loss", s.final_val);
    add_num(o, "best_val_loss", s.best_val);
    add_num(o, "step_ms", s.step_ms);
    add_num(o, "tokens_per_s", s.tokens_per_s);
    add_num(o, "mfu", s.mfu);
    add_num(o, "n_layer", c->model.n_layer);
    add_num(o, "n_embd", c->model.n_embd);
    add_num(o, "n_head", c->model.n_head);
    add_num(o, "seq_len", c->model.seq_len);
    add_num(o, "vocab_size", c->model.vocab_size);
    add_num(o, "global_batch", c->train.global_batch);
    add_num(o, "train_steps", c->train.steps);
    add_num(o, "lr", c->train.lr);
    add_num(o, "tp", c->parallel.tp);
    add_num(o, "pp", c->parallel.pp);
    add_num(o, "dp", c->parallel.dp);
    add_num(o, "ranks", tri_sweep_ranks(c));
    /* not run now: the run's own time, from its done marker */
    double wall = p->ran ? p->wall_s : p->state == TRI_POINT_DONE ? tri_sweep_done_wall_s(p) : NAN;
    add_num(o, "wall_s", wall);
    return o;
}

int tri_sweep_write_summary(const tri_sweep *sw) {
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL) TRI_FAIL("out of memory");
    for (int i = 0; i < sw->n_points; i++) {
        cJSON *o = tri_sweep_summary_line(&sw->points[i]);
        char *s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (s == NULL) TRI_FAIL("out of memory");
        size_t n = strlen(s);
        if (len + n + 2 > cap) {
            while (len + n + 2 > cap) cap *= 2;
            char *nb = realloc(buf, cap);
            if (nb == NULL) TRI_FAIL("out of memory");
            buf = nb;
        }
        memcpy(buf + len, s, n);
        len += n;
        buf[len++] = '\n';
        free(s);
    }
    char path[TRI_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/summary.jsonl", sw->out);
    int rc = tri_write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}

void tri_sweep_plot(const tri_sweep *sw) {
    char summary[TRI_PATH_MAX + 32];
    snprintf(summary, sizeof summary, "%s/summary.jsonl", sw->out);
    const char *args[] = {"--out", sw->out, summary, NULL};
    tri_plot_run("sweep plot", args);
}
