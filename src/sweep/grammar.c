/* Reading and checking a sweep file, and expanding its points (src/sweep/sweep.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "base/file.h"
#include "base/json.h"
#include "base/str.h"
#include "config/config.h"
#include "sweep/sweep.h"

#define SWEEP_MAX_LEN ((size_t)1 << 20)

int tri_sweep_error(const tri_sweep *sw, const char *key, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (key)
        return tri_error("%s: %s: %s", sw->file, key, msg);
    else
        return tri_error("%s: %s", sw->file, msg);
}

/* A scalar JSON value as --set takes it: numbers shortest-exact, strings
 * verbatim, booleans true/false. 0, or -1 for arrays, objects, null. */
static int scalar_text(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0) {
            snprintf(buf, n, "%.0f", d);
            return 0;
        }
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, n, "%.*g", prec, d);
            if (strtod(buf, NULL) == d) break;
        }
        return 0;
    }
    if (cJSON_IsString(v)) {
        snprintf(buf, n, "%s", v->valuestring);
        return 0;
    }
    if (cJSON_IsBool(v)) {
        snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
        return 0;
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Reading the sweep file                                                   */

static const char *const top_keys[] = {"description", "base", "out", "set", "grid", "zip", "threads", "plot"};

/* Every key the sweep sets (fixed or varying), once; the run directories belong to the sweep. */
static int check_key(const tri_sweep *sw, const char *where, const char *key, const char **seen, int *n_seen) {
    if (!tri_config_has_key(key))
        return tri_sweep_error(sw, where, "%s: unknown config key (see `trident config-help`)", key);
    if (!strcmp(key, "log.dir") || !strcmp(key, "checkpoint.dir"))
        return tri_sweep_error(sw, where, "%s: set by the sweep for each point (OUT/<point>), not settable", key);
    for (int i = 0; i < *n_seen; i++)
        if (!strcmp(seen[i], key))
            return tri_sweep_error(sw, where, "%s: given twice (in set, grid, zip or --set)", key);
    if (*n_seen >= TRI_SWEEP_MAX_SETS) return tri_sweep_error(sw, where, "more than %d keys", TRI_SWEEP_MAX_SETS);
    seen[(*n_seen)++] = key;
    return 0;
}

static int add_fixed(tri_sweep *sw, const char *where, const char *key, const cJSON *v, const char **seen,
                     int *n_seen) {
    if (check_key(sw, where, key, seen, n_seen) != 0) return -1;
    char val[TRI_PATH_MAX];
    if (scalar_text(v, val, sizeof val) != 0)
        return tri_sweep_error(sw, where, "%s: expected a number, string or boolean, got %s", key, tri_json_kind(v));
    sw->fixed[sw->n_fixed++] = tri_xprintf("%s=%s", key, val);
    return 0;
}

/* One varying key's list: a non-empty array of scalars. */
static int check_list(const tri_sweep *sw, const char *where, const char *key, const cJSON *list) {
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
        return tri_sweep_error(sw, where, "%s: expected a non-empty array of values, got %s", key,
                               cJSON_IsArray(list) ? "an empty array" : tri_json_kind(list));
    int i = 0;
    char buf[TRI_PATH_MAX];
    for (const cJSON *v = list->child; v; v = v->next, i++)
        if (scalar_text(v, buf, sizeof buf) != 0)
            return tri_sweep_error(sw, where, "%s[%d]: expected a number, string or boolean, got %s", key, i,
                                   tri_json_kind(v));
    return 0;
}

void tri_sweep_init(tri_sweep *sw, const char *file, const char *out, int threads) {
    memset(sw, 0, sizeof *sw);
    sw->file = file;
    sw->out = out;
    sw->threads = threads;
}

int tri_sweep_read(tri_sweep *sw, int n_sets, const char *const *sets) {
    size_t len = 0;
    char *text = tri_slurp(sw->file, "sweep file", SWEEP_MAX_LEN, &len);
    if (text == NULL) return -1;
    int rc = tri_sweep_parse(sw, text, len, n_sets, sets);
    free(text);
    return rc;
}

int tri_sweep_parse(tri_sweep *sw, const char *text, size_t len, int n_sets, const char *const *sets) {
    const char *end = NULL;
    sw->root = cJSON_ParseWithOpts(text, &end, 1);
    if (sw->root == NULL) {
        size_t off = end ? (size_t)(end - text) : 0, line = 1;
        for (size_t i = 0; i < off && i < len; i++) line += text[i] == '\n';
        return tri_sweep_error(sw, NULL, "JSON syntax error at line %zu (byte %zu)", line, off);
    }
    if (!cJSON_IsObject(sw->root))
        return tri_sweep_error(sw, NULL, "expected a JSON object at the top level, got %s", tri_json_kind(sw->root));
    for (const cJSON *k = sw->root->child; k; k = k->next) {
        int known = 0;
        for (size_t i = 0; i < sizeof top_keys / sizeof top_keys[0]; i++) known |= !strcmp(k->string, top_keys[i]);
        if (!known)
            return tri_sweep_error(sw, k->string,
                                   "unknown key (expected description, base, out, set, grid, zip, threads or plot)");
        for (const cJSON *p = sw->root->child; p != k; p = p->next)
            if (!strcmp(p->string, k->string)) return tri_sweep_error(sw, k->string, "given twice");
    }
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(sw->root, "base");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(sw->root, "out");
    if (!cJSON_IsString(base) || !base->valuestring[0])
        return tri_sweep_error(sw, "base", "expected the path of a config file (a non-empty string), got %s",
                               base ? tri_json_kind(base) : "nothing");
    if (sw->out == NULL && (!cJSON_IsString(out) || !out->valuestring[0]))
        return tri_sweep_error(sw, "out", "expected an output directory (a non-empty string), got %s",
                               out ? tri_json_kind(out) : "nothing");
    sw->base = base->valuestring;
    if (sw->out == NULL) sw->out = out->valuestring;
    if (strlen(sw->out) > TRI_PATH_MAX - TRI_SWEEP_NAME_MAX - 64)
        return tri_sweep_error(sw, "out", "longer than %d bytes", TRI_PATH_MAX - TRI_SWEEP_NAME_MAX - 64);
    const cJSON *thr = cJSON_GetObjectItemCaseSensitive(sw->root, "threads");
    if (thr && sw->threads == 0) {
        if (!cJSON_IsNumber(thr) || thr->valuedouble != floor(thr->valuedouble) || thr->valuedouble < 1 ||
            thr->valuedouble > 1024)
            return tri_sweep_error(sw, "threads", "expected an integer in [1, 1024], got %s", tri_json_kind(thr));
        sw->threads = (int)thr->valuedouble;
    }
    const cJSON *plot = cJSON_GetObjectItemCaseSensitive(sw->root, "plot");
    if (plot) {
        if (!cJSON_IsBool(plot))
            return tri_sweep_error(sw, "plot", "expected true or false, got %s", tri_json_kind(plot));
        sw->plot = cJSON_IsTrue(plot);
    }
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(sw->root, "description");
    if (desc && !cJSON_IsString(desc) && !cJSON_IsArray(desc))
        return tri_sweep_error(sw, "description", "expected a string or an array of strings, got %s",
                               tri_json_kind(desc));
    for (const cJSON *d = cJSON_IsArray(desc) ? desc->child : NULL; d; d = d->next)
        if (!cJSON_IsString(d))
            return tri_sweep_error(sw, "description", "expected a string or an array of strings, got %s in the array",
                                   tri_json_kind(d));
    sw->has_description = desc != NULL;

    const char *seen[TRI_SWEEP_MAX_SETS];
    int n_seen = 0;
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(sw->root, "set");
    if (set) {
        if (!cJSON_IsObject(set))
            return tri_sweep_error(sw, "set", "expected an object {\"section.key\": value}, got %s",
                                   tri_json_kind(set));
        for (const cJSON *kv = set->child; kv; kv = kv->next)
            if (add_fixed(sw, "set", kv->string, kv, seen, &n_seen) != 0) return -1;
    }
    for (int i = 0; i < n_sets; i++) {
        const char *eq = strchr(sets[i], '=');
        if (eq == NULL) return tri_error("sweep: --set %s: expected section.key=value", sets[i]);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
        int replaced = 0; /* the command line wins over the file's "set", a later --set over an earlier one */
        for (int j = 0; j < sw->n_fixed && !replaced; j++) {
            size_t kl = strlen(key);
            if (!strncmp(sw->fixed[j], key, kl) && sw->fixed[j][kl] == '=') {
                free(sw->fixed[j]);
                sw->fixed[j] = tri_xstrdup(sets[i]);
                replaced = 1;
            }
        }
        if (replaced) continue; /* a repeated key takes no slot: only distinct keys count */
        if (sw->n_cli_keys >= TRI_SWEEP_MAX_SETS || sw->n_fixed >= TRI_SWEEP_MAX_SETS)
            return tri_error("sweep: more than %d distinct keys in \"set\" and --set", TRI_SWEEP_MAX_SETS);
        char *k = sw->cli_keys[sw->n_cli_keys++] = tri_xstrdup(key);
        if (check_key(sw, "--set", k, seen, &n_seen) != 0) return -1;
        sw->fixed[sw->n_fixed++] = tri_xstrdup(sets[i]);
    }
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(sw->root, "grid");
    if (grid) {
        if (!cJSON_IsObject(grid))
            return tri_sweep_error(sw, "grid", "expected an object {\"section.key\": [values]}, got %s",
                                   tri_json_kind(grid));
        for (const cJSON *kv = grid->child; kv; kv = kv->next) {
            if (check_key(sw, "grid", kv->string, seen, &n_seen) != 0) return -1;
            if (check_list(sw, "grid", kv->string, kv) != 0) return -1;
            if (sw->n_axes >= TRI_SWEEP_MAX_KEYS)
                return tri_sweep_error(sw, "grid", "more than %d axes", TRI_SWEEP_MAX_KEYS);
            tri_sweep_axis *a = &sw->axes[sw->n_axes++];
            a->n_keys = 1;
            a->keys[0] = kv->string;
            a->lists[0] = kv;
            a->len = cJSON_GetArraySize(kv);
        }
    }
    const cJSON *zip = cJSON_GetObjectItemCaseSensitive(sw->root, "zip");
    if (zip) {
        if (!cJSON_IsArray(zip))
            return tri_sweep_error(sw, "zip", "expected an array of objects {\"section.key\": [values], ...}, got %s",
                                   tri_json_kind(zip));
        int g = 0;
        for (const cJSON *grp = zip->child; grp; grp = grp->next, g++) {
            char where[32];
            snprintf(where, sizeof where, "zip[%d]", g);
            if (!cJSON_IsObject(grp) || grp->child == NULL)
                return tri_sweep_error(sw, where,
                                       "expected a non-empty object {\"section.key\": [values], ...}, got %s",
                                       tri_json_kind(grp));
            if (sw->n_axes >= TRI_SWEEP_MAX_KEYS)
                return tri_sweep_error(sw, "zip", "more than %d axes", TRI_SWEEP_MAX_KEYS);
            tri_sweep_axis *a = &sw->axes[sw->n_axes++];
            memset(a, 0, sizeof *a);
            for (const cJSON *kv = grp->child; kv; kv = kv->next) {
                if (check_key(sw, where, kv->string, seen, &n_seen) != 0) return -1;
                if (check_list(sw, where, kv->string, kv) != 0) return -1;
                if (a->n_keys >= TRI_SWEEP_MAX_KEYS)
                    return tri_sweep_error(sw, where, "more than %d keys", TRI_SWEEP_MAX_KEYS);
                int n = cJSON_GetArraySize(kv);
                if (a->n_keys > 0 && n != a->len)
                    return tri_sweep_error(sw, where,
                                           "%s has %d values but %s has %d (keys that vary together need lists "
                                           "of the same length)",
                                           kv->string, n, a->keys[0], a->len);
                a->keys[a->n_keys] = kv->string;
                a->lists[a->n_keys++] = kv;
                a->len = n;
            }
        }
    }
    long long n = 1;
    for (int i = 0; i < sw->n_axes; i++) {
        n *= sw->axes[i].len;
        if (n > TRI_SWEEP_MAX_POINTS) return tri_sweep_error(sw, "grid", "more than %d points", TRI_SWEEP_MAX_POINTS);
    }
    sw->n_points = (int)n;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The points                                                               */

/* The short name of a key (after its dot) unless another varying key has the same one. */
static const char *short_key(const tri_sweep *sw, const char *key) {
    const char *dot = strrchr(key, '.'), *s = dot ? dot + 1 : key;
    for (int a = 0; a < sw->n_axes; a++)
        for (int k = 0; k < sw->axes[a].n_keys; k++) {
            const char *o = sw->axes[a].keys[k], *od = strrchr(o, '.');
            if (o != key && !strcmp(od ? od + 1 : o, s)) return key;
        }
    return s;
}

/* Appends text to a point's name, bytes a file name should not hold as '_',
 * up to TRI_SWEEP_NAME_MAX. */
static void append_name(char *name, const char *text) {
    size_t n = strlen(name);
    for (const char *p = text; *p && n < TRI_SWEEP_NAME_MAX; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
                 c == '_' || c == '=' || c == '+';
        name[n++] = ok ? c : '_';
    }
    name[n] = '\0';
}

static int push_set(tri_sweep_point *p, const char *key, const char *val) {
    if (p->n_sets >= TRI_SWEEP_MAX_SETS) return -1;
    p->sets[p->n_sets++] = tri_xprintf("%s=%s", key, val);
    return 0;
}

int tri_sweep_point_init(const tri_sweep *sw, int idx, tri_sweep_point *p) {
    memset(p, 0, sizeof *p);
    p->values = cJSON_CreateObject();
    if (p->values == NULL) TRI_FAIL("out of memory");
    for (int i = 0; i < sw->n_fixed; i++) p->sets[p->n_sets++] = tri_xstrdup(sw->fixed[i]);
    int rest = idx;
    int pos[TRI_SWEEP_MAX_KEYS];
    for (int a = sw->n_axes - 1; a >= 0; a--) {
        pos[a] = rest % sw->axes[a].len;
        rest /= sw->axes[a].len;
    }
    for (int a = 0; a < sw->n_axes; a++)
        for (int k = 0; k < sw->axes[a].n_keys; k++) {
            const cJSON *v = cJSON_GetArrayItem(sw->axes[a].lists[k], pos[a]);
            char val[TRI_PATH_MAX];
            scalar_text(v, val, sizeof val); /* checked in tri_sweep_parse */
            if (push_set(p, sw->axes[a].keys[k], val) != 0)
                return tri_sweep_error(sw, "grid", "more than %d overrides", TRI_SWEEP_MAX_SETS);
            cJSON_AddItemToObject(p->values, sw->axes[a].keys[k], cJSON_Duplicate(v, 1));
            if (p->name[0]) append_name(p->name, "_");
            append_name(p->name, short_key(sw, sw->axes[a].keys[k]));
            append_name(p->name, "=");
            append_name(p->name, val);
        }
    if (!p->name[0]) snprintf(p->name, sizeof p->name, "base");
    snprintf(p->dir, sizeof p->dir, "%s/%s", sw->out, p->name);
    char ck[TRI_PATH_MAX + 8];
    snprintf(ck, sizeof ck, "%s/ckpt", p->dir);
    if (push_set(p, "log.dir", p->dir) != 0 || push_set(p, "checkpoint.dir", ck) != 0)
        return tri_sweep_error(sw, "grid", "more than %d overrides", TRI_SWEEP_MAX_SETS);
    return 0;
}

void tri_sweep_point_free(tri_sweep_point *p) {
    if (p == NULL) return;
    for (int i = 0; i < p->n_sets; i++) free(p->sets[i]);
    cJSON_Delete(p->values);
    memset(p, 0, sizeof *p);
}

void tri_sweep_free(tri_sweep *sw) {
    if (sw == NULL) return;
    for (int i = 0; sw->points && i < sw->n_points; i++) tri_sweep_point_free(&sw->points[i]);
    free(sw->points);
    for (int i = 0; i < sw->n_fixed; i++) free(sw->fixed[i]);
    for (int i = 0; i < sw->n_cli_keys; i++) free(sw->cli_keys[i]);
    cJSON_Delete(sw->root);
    memset(sw, 0, sizeof *sw);
}
