/* The points checked before anything runs, and their run directories:
 * point.json, the done marker, resume states (src/sweep/sweep.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "base/file.h"
#include "base/fs.h"
#include "base/str.h"
#include "config/config.h"
#include "data/sampler.h"
#include "model/gpt.h"
#include "sweep/sweep.h"

#define POINT_JSON_MAX_LEN ((size_t)1 << 20)

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* The point's data files open (data.train, data.val) and its tokenizer file
 * exists, checked before anything runs: a sweep whose data is missing
 * (the example's comes from the quickstart) fails once, at the start, rather
 * than once per point. Points with the data settings of the previous point
 * are not checked again. Returns 0 or -1 (printed: the file, then the point). */
static int check_point_data(const tri_sweep *sw, const tri_sweep_point *p, const tri_sweep_point *prev, int idx) {
    const tri_data_cfg *d = &p->cfg.data;
    if (prev != NULL && !strcmp(d->train, prev->cfg.data.train) && !strcmp(d->val, prev->cfg.data.val) &&
        !strcmp(d->tokenizer, prev->cfg.data.tokenizer) && p->cfg.model.seq_len == prev->cfg.model.seq_len &&
        p->cfg.model.vocab_size == prev->cfg.model.vocab_size)
        return 0;
    const char *specs[2] = {d->train, d->val}, *keys[2] = {"data.train", "data.val"};
    for (int k = 0; k < 2; k++) {
        if (!specs[k][0]) continue;
        tri_sampler s;
        if (tri_sampler_init(&s, specs[k], p->cfg.model.seq_len, p->cfg.model.vocab_size, p->cfg.train.seed) != 0)
            return tri_sweep_error(sw, NULL, "point %d (%s): %s = \"%s\" cannot be read (above); nothing was run%s",
                                   idx + 1, p->name, keys[k], specs[k],
                                   sw->has_description ? " (the sweep's \"description\" says how its data is made)"
                                                       : "");
        tri_sampler_free(&s);
    }
    if (d->tokenizer[0] && !file_exists(d->tokenizer))
        return tri_sweep_error(sw, NULL, "point %d (%s): data.tokenizer = \"%s\": no such file; nothing was run%s",
                               idx + 1, p->name, d->tokenizer,
                               sw->has_description ? " (the sweep's \"description\" says how its data is made)" : "");
    return 0;
}

int tri_sweep_prepare(tri_sweep *sw, int check_data) {
    sw->points = tri_xcalloc((size_t)sw->n_points, sizeof *sw->points);
    for (int i = 0; i < sw->n_points; i++) {
        tri_sweep_point *p = &sw->points[i];
        if (tri_sweep_point_init(sw, i, p) != 0) return -1;
        if (tri_config_load(&p->cfg, sw->base, p->n_sets, (const char *const *)p->sets) != 0)
            return tri_sweep_error(sw, NULL,
                                   "point %d (%s): not a valid config with base %s (the message above names the key)",
                                   i + 1, p->name, sw->base);
        for (int j = 0; j < i; j++)
            if (!strcmp(sw->points[j].name, p->name))
                return tri_sweep_error(sw, NULL,
                                       "points %d and %d get the same run directory name %s (values that differ "
                                       "only in characters a file name cannot hold)",
                                       j + 1, i + 1, p->name);
        if (check_data && check_point_data(sw, p, i > 0 ? &sw->points[i - 1] : NULL, i) != 0) return -1;
        char path[TRI_PATH_MAX + 16], why[512];
        snprintf(path, sizeof path, "%s/done", p->dir);
        int done = file_exists(path);
        snprintf(path, sizeof path, "%s/point.json", p->dir);
        int started = file_exists(path);
        if ((done || started) && !tri_sweep_same_settings(sw, p, why, sizeof why))
            return tri_sweep_error(sw, NULL,
                                   "point %s: %s/point.json was written for other settings (%s); delete %s or "
                                   "choose another \"out\"",
                                   p->name, p->dir, why, p->dir);
        p->state = done ? TRI_POINT_DONE : started ? TRI_POINT_RESUME : TRI_POINT_NEW;
    }
    return 0;
}

cJSON *tri_sweep_point_json(const tri_sweep *sw, const tri_sweep_point *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "point", p->name);
    cJSON_AddStringToObject(o, "sweep", sw->file);
    cJSON_AddStringToObject(o, "base", sw->base);
    cJSON *sets = cJSON_AddArrayToObject(o, "sets");
    for (int i = 0; i < p->n_sets; i++) cJSON_AddItemToArray(sets, cJSON_CreateString(p->sets[i]));
    cJSON_AddItemToObject(o, "values", cJSON_Duplicate(p->values, 1));
    cJSON_AddNumberToObject(o, "params", (double)tri_gpt_num_params(&p->cfg.model));
    cJSON_AddNumberToObject(o, "flops_per_token", tri_gpt_flops_per_token(&p->cfg.model));
    cJSON_AddNumberToObject(o, "tokens_per_step", (double)p->cfg.train.global_batch * p->cfg.model.seq_len);
    return o;
}

int tri_sweep_same_settings(const tri_sweep *sw, const tri_sweep_point *p, char *why, size_t n) {
    char path[TRI_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/point.json", p->dir);
    size_t len;
    char *text = tri_slurp(path, "point.json", POINT_JSON_MAX_LEN, &len);
    if (text == NULL) {
        snprintf(why, n, "it is unreadable");
        return 0;
    }
    cJSON *o = cJSON_Parse(text);
    free(text);
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(o, "base");
    const cJSON *sets = cJSON_GetObjectItemCaseSensitive(o, "sets");
    int same = 1;
    if (!cJSON_IsString(base) || strcmp(base->valuestring, sw->base) != 0) {
        snprintf(why, n, "its base was %s", cJSON_IsString(base) ? base->valuestring : "(unreadable)");
        same = 0;
    } else if (!cJSON_IsArray(sets)) {
        snprintf(why, n, "it has no \"sets\"");
        same = 0;
    } else {
        /* the same overrides, in any order */
        int m = cJSON_GetArraySize(sets);
        for (int i = 0; i < p->n_sets && same; i++) {
            int found = 0;
            for (const cJSON *s = sets->child; s && !found; s = s->next)
                found = cJSON_IsString(s) && !strcmp(s->valuestring, p->sets[i]);
            if (!found) {
                snprintf(why, n, "--set %s is new", p->sets[i]);
                same = 0;
            }
        }
        if (same && m != p->n_sets) {
            snprintf(why, n, "it had %d overrides, now %d", m, p->n_sets);
            same = 0;
        }
    }
    cJSON_Delete(o);
    return same;
}

int tri_sweep_rundir_open(const tri_sweep *sw, const tri_sweep_point *p) {
    if (tri_mkdir_p_named("sweep run directory", p->dir) != 0) return -1;
    if (p->state == TRI_POINT_RESUME) return 0; /* its point.json is there, checked by tri_sweep_prepare */
    char pj[TRI_PATH_MAX + 16];
    snprintf(pj, sizeof pj, "%s/point.json", p->dir);
    cJSON *o = tri_sweep_point_json(sw, p);
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    int rc = s ? tri_write_file_atomic(pj, s, strlen(s)) : -1;
    free(s);
    return rc;
}

int tri_sweep_rundir_done(const tri_sweep_point *p) {
    char done[TRI_PATH_MAX + 16], msg[128];
    snprintf(done, sizeof done, "%s/done", p->dir);
    int n = snprintf(msg, sizeof msg, "{\"wall_s\": %.3f}\n", p->wall_s);
    return tri_write_file_atomic(done, msg, (size_t)n);
}

double tri_sweep_done_wall_s(const tri_sweep_point *p) {
    char path[TRI_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/done", p->dir);
    char *text = tri_slurp(path, "done marker", 4096, NULL);
    cJSON *d = text ? cJSON_Parse(text) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, "wall_s");
    double wall = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    cJSON_Delete(d);
    free(text);
    return wall;
}
