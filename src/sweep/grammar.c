/* `trident sweep SWEEP.json [--dry-run] [--threads N] [--set section.key=value]...`
 *
 * A sweep file names a base config, fixed overrides, a grid of values for any
 * config keys and an output directory:
 *
 *   {"description": "what it measures and how to prepare its data",
 *    "base": "configs/quickstart.json",          (relative to the working directory, like every path)
 *    "out": "runs/scaling",                       (--out DIR instead)
 *    "set":  {"train.steps": 200},               (optional: every point)
 *    "grid": {"train.lr": [1e-3, 3e-3]},         (optional: one axis per key)
 *    "zip":  [{"model.n_embd": [64, 128], "model.n_head": [2, 4]}],  (optional: keys that vary together)
 *    "threads": 2,                               (optional: `trident train --threads`)
 *    "plot": true}                               (optional: scripts/plot.py on the summary at the end)
 *
 * The points are the Cartesian product of the axes (the grid's keys, then the
 * zip groups, in file order; the last varies fastest). Each point is one
 * `trident train BASE --set ...` (through tridentrun, found next to this
 * program, when tp*pp*dp > 1) in OUT/<name>, its run directory: log.dir =
 * OUT/<name>, checkpoint.dir = OUT/<name>/ckpt, its output in train.log,
 * point.json (the settings) written before it starts and `done` after it
 * succeeded. The name is made of the point's values (n_embd=64_n_head=2).
 *
 * Resuming: a point with `done` is not rerun; a point that started but has no
 * `done` (a crash, a stop) runs again with --resume, from its newest complete
 * checkpoint. A point.json written for other settings is refused (the run
 * directory belongs to another experiment). Every point is validated before
 * the first runs, so a typo in the last point does not waste the others.
 *
 * After each point OUT/summary.jsonl is rewritten (atomically) with one line
 * per point, from its point.json and metrics.jsonl: the point's keys, params,
 * flops_per_token (tri_gpt_flops_per_token), tokens seen, total FLOPs (their
 * product), final train loss, final and best validation loss, median step
 * time, tokens/s and MFU, the layout, and status (ok | failed | incomplete |
 * pending).
 *
 * Exit code: 0 every point ok, 1 a point failed, 2 bad sweep file or config,
 * 128+signal when stopped by SIGINT/SIGTERM (passed on to the running point,
 * which saves a checkpoint and stops). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "model/gpt.h"
#include "cli/cli.h"
#include "config/config.h"
#include "train/plot.h"
#include "data/sampler.h"
#include "base/err.h"
#include "base/file.h"
#include "base/fs.h"

#define MAX_POINTS    4096
#define MAX_KEYS      64 /* varying keys over all axes */
#define MAX_SETS      256
#define NAME_MAX_LEN  200
#define TAIL_LINES    15
#define SWEEP_MAX_LEN ((size_t)1 << 20)

/* One axis of the grid: one key ("grid"), or several that vary together ("zip"). */
typedef struct axis {
    int n_keys;
    const char *keys[MAX_KEYS];
    const cJSON *lists[MAX_KEYS];
    int len;
} axis;

typedef enum point_state { P_NEW, P_RESUME, P_DONE } point_state;

typedef struct point {
    char name[NAME_MAX_LEN + 1];
    char dir[TRI_PATH_MAX];
    char *sets[MAX_SETS]; /* "key=value", malloc'd: fixed, the point's, log.dir, checkpoint.dir */
    int n_sets;
    cJSON *values; /* the point's varying keys and values, for the summary */
    tri_config cfg;
    point_state state;
    int ran, exit_code; /* this invocation: ran it, and how it ended */
    double wall_s;
} point;

typedef struct sweep {
    const char *file;
    cJSON *root;
    const char *base, *out;
    int threads, plot, dry_run;
    int has_description; /* the file has a "description" (where its data comes from) */
    char *fixed[MAX_SETS];
    int n_fixed;
    char *cli_keys[MAX_SETS]; /* the keys of the command line's --set */
    int n_cli_keys;
    axis axes[MAX_KEYS];
    int n_axes;
    point *points;
    int n_points;
    char self[TRI_PATH_MAX], runner[TRI_PATH_MAX + 16];
} sweep;

/* ------------------------------------------------------------------------ */
/* Signals: passed on to the running point                                   */

static volatile sig_atomic_t g_signal = 0;
static volatile sig_atomic_t g_child = 0;

static void on_signal(int sig) {
    g_signal = sig;
    pid_t pid = (pid_t)g_child;
    if (pid > 0) kill(pid, sig);
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *xstrdup(const char *s) {
    char *d = strdup(s);
    if (d == NULL) TRI_FAIL("out of memory");
    return d;
}

static const char *json_kind(const cJSON *v) {
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an unknown value";
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

/* "sweep file: key: message": one line naming the file and the key. */
static int sweep_error(const sweep *sw, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sweep_error(const sweep *sw, const char *key, const char *fmt, ...) {
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

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* ------------------------------------------------------------------------ */
/* Reading the sweep file                                                   */

static const char *const top_keys[] = {"description", "base", "out", "set", "grid", "zip", "threads", "plot"};

/* Every key the sweep sets (fixed or varying), once; the run directories belong to the sweep. */
static int check_key(sweep *sw, const char *where, const char *key, const char **seen, int *n_seen) {
    if (!tri_config_has_key(key))
        return sweep_error(sw, where, "%s: unknown config key (see `trident config-help`)", key);
    if (!strcmp(key, "log.dir") || !strcmp(key, "checkpoint.dir"))
        return sweep_error(sw, where, "%s: set by the sweep for each point (OUT/<point>), not settable", key);
    for (int i = 0; i < *n_seen; i++)
        if (!strcmp(seen[i], key)) return sweep_error(sw, where, "%s: given twice (in set, grid, zip or --set)", key);
    if (*n_seen >= MAX_SETS) return sweep_error(sw, where, "more than %d keys", MAX_SETS);
    seen[(*n_seen)++] = key;
    return 0;
}

static int add_fixed(sweep *sw, const char *where, const char *key, const cJSON *v, const char **seen, int *n_seen) {
    if (check_key(sw, where, key, seen, n_seen) != 0) return -1;
    char val[TRI_PATH_MAX];
    if (scalar_text(v, val, sizeof val) != 0)
        return sweep_error(sw, where, "%s: expected a number, string or boolean, got %s", key, json_kind(v));
    char *s = malloc(strlen(key) + strlen(val) + 2);
    if (s == NULL) TRI_FAIL("out of memory");
    sprintf(s, "%s=%s", key, val);
    sw->fixed[sw->n_fixed++] = s;
    return 0;
}

/* One varying key's list: a non-empty array of scalars. */
static int check_list(sweep *sw, const char *where, const char *key, const cJSON *list) {
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
        return sweep_error(sw, where, "%s: expected a non-empty array of values, got %s", key,
                           cJSON_IsArray(list) ? "an empty array" : json_kind(list));
    int i = 0;
    char buf[TRI_PATH_MAX];
    for (const cJSON *v = list->child; v; v = v->next, i++)
        if (scalar_text(v, buf, sizeof buf) != 0)
            return sweep_error(sw, where, "%s[%d]: expected a number, string or boolean, got %s", key, i, json_kind(v));
    return 0;
}

/* Parses the file and the command line's --set into sw (no points yet). */
static int read_sweep(sweep *sw, int n_cli_sets, const char *const *cli_sets) {
    size_t len = 0;
    char *text = tri_slurp(sw->file, "sweep file", SWEEP_MAX_LEN, &len);
    if (text == NULL) return -1;
    const char *end = NULL;
    sw->root = cJSON_ParseWithOpts(text, &end, 1);
    if (sw->root == NULL) {
        size_t off = end ? (size_t)(end - text) : 0, line = 1;
        for (size_t i = 0; i < off && i < len; i++) line += text[i] == '\n';
        free(text);
        return sweep_error(sw, NULL, "JSON syntax error at line %zu (byte %zu)", line, off);
    }
    free(text);
    if (!cJSON_IsObject(sw->root))
        return sweep_error(sw, NULL, "expected a JSON object at the top level, got %s", json_kind(sw->root));
    for (const cJSON *k = sw->root->child; k; k = k->next) {
        int known = 0;
        for (size_t i = 0; i < sizeof top_keys / sizeof top_keys[0]; i++) known |= !strcmp(k->string, top_keys[i]);
        if (!known)
            return sweep_error(sw, k->string,
                               "unknown key (expected description, base, out, set, grid, zip, threads or plot)");
        for (const cJSON *p = sw->root->child; p != k; p = p->next)
            if (!strcmp(p->string, k->string)) return sweep_error(sw, k->string, "given twice");
    }
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(sw->root, "base");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(sw->root, "out");
    if (!cJSON_IsString(base) || !base->valuestring[0])
        return sweep_error(sw, "base", "expected the path of a config file (a non-empty string), got %s",
                           base ? json_kind(base) : "nothing");
    if (sw->out == NULL && (!cJSON_IsString(out) || !out->valuestring[0]))
        return sweep_error(sw, "out", "expected an output directory (a non-empty string), got %s",
                           out ? json_kind(out) : "nothing");
    sw->base = base->valuestring;
    if (sw->out == NULL) sw->out = out->valuestring;
    if (strlen(sw->out) > TRI_PATH_MAX - NAME_MAX_LEN - 64)
        return sweep_error(sw, "out", "longer than %d bytes", TRI_PATH_MAX - NAME_MAX_LEN - 64);
    const cJSON *thr = cJSON_GetObjectItemCaseSensitive(sw->root, "threads");
    if (thr && sw->threads == 0) {
        if (!cJSON_IsNumber(thr) || thr->valuedouble != floor(thr->valuedouble) || thr->valuedouble < 1 ||
            thr->valuedouble > 1024)
            return sweep_error(sw, "threads", "expected an integer in [1, 1024], got %s", json_kind(thr));
        sw->threads = (int)thr->valuedouble;
    }
    const cJSON *plot = cJSON_GetObjectItemCaseSensitive(sw->root, "plot");
    if (plot) {
        if (!cJSON_IsBool(plot)) return sweep_error(sw, "plot", "expected true or false, got %s", json_kind(plot));
        sw->plot = cJSON_IsTrue(plot);
    }
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(sw->root, "description");
    if (desc && !cJSON_IsString(desc) && !cJSON_IsArray(desc))
        return sweep_error(sw, "description", "expected a string or an array of strings, got %s", json_kind(desc));
    for (const cJSON *d = cJSON_IsArray(desc) ? desc->child : NULL; d; d = d->next)
        if (!cJSON_IsString(d))
            return sweep_error(sw, "description", "expected a string or an array of strings, got %s in the array",
                               json_kind(d));
    sw->has_description = desc != NULL;

    const char *seen[MAX_SETS];
    int n_seen = 0;
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(sw->root, "set");
    if (set) {
        if (!cJSON_IsObject(set))
            return sweep_error(sw, "set", "expected an object {\"section.key\": value}, got %s", json_kind(set));
        for (const cJSON *kv = set->child; kv; kv = kv->next)
            if (add_fixed(sw, "set", kv->string, kv, seen, &n_seen) != 0) return -1;
    }
    for (int i = 0; i < n_cli_sets; i++) {
        const char *eq = strchr(cli_sets[i], '=');
        if (eq == NULL) return tri_error("sweep: --set %s: expected section.key=value", cli_sets[i]);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(eq - cli_sets[i]), cli_sets[i]);
        char *k = sw->cli_keys[sw->n_cli_keys++] = xstrdup(key);
        int replaced = 0; /* the command line wins over the file's "set" */
        for (int j = 0; j < sw->n_fixed && !replaced; j++) {
            size_t kl = strlen(k);
            if (!strncmp(sw->fixed[j], k, kl) && sw->fixed[j][kl] == '=') {
                free(sw->fixed[j]);
                sw->fixed[j] = xstrdup(cli_sets[i]);
                replaced = 1;
            }
        }
        if (replaced) continue;
        if (check_key(sw, "--set", k, seen, &n_seen) != 0) return -1;
        sw->fixed[sw->n_fixed++] = xstrdup(cli_sets[i]);
    }
    const cJSON *grid = cJSON_GetObjectItemCaseSensitive(sw->root, "grid");
    if (grid) {
        if (!cJSON_IsObject(grid))
            return sweep_error(sw, "grid", "expected an object {\"section.key\": [values]}, got %s", json_kind(grid));
        for (const cJSON *kv = grid->child; kv; kv = kv->next) {
            if (check_key(sw, "grid", kv->string, seen, &n_seen) != 0) return -1;
            if (check_list(sw, "grid", kv->string, kv) != 0) return -1;
            if (sw->n_axes >= MAX_KEYS) return sweep_error(sw, "grid", "more than %d axes", MAX_KEYS);
            axis *a = &sw->axes[sw->n_axes++];
            a->n_keys = 1;
            a->keys[0] = kv->string;
            a->lists[0] = kv;
            a->len = cJSON_GetArraySize(kv);
        }
    }
    const cJSON *zip = cJSON_GetObjectItemCaseSensitive(sw->root, "zip");
    if (zip) {
        if (!cJSON_IsArray(zip))
            return sweep_error(sw, "zip", "expected an array of objects {\"section.key\": [values], ...}, got %s",
                               json_kind(zip));
        int g = 0;
        for (const cJSON *grp = zip->child; grp; grp = grp->next, g++) {
            char where[32];
            snprintf(where, sizeof where, "zip[%d]", g);
            if (!cJSON_IsObject(grp) || grp->child == NULL)
                return sweep_error(sw, where, "expected a non-empty object {\"section.key\": [values], ...}, got %s",
                                   json_kind(grp));
            if (sw->n_axes >= MAX_KEYS) return sweep_error(sw, "zip", "more than %d axes", MAX_KEYS);
            axis *a = &sw->axes[sw->n_axes++];
            memset(a, 0, sizeof *a);
            for (const cJSON *kv = grp->child; kv; kv = kv->next) {
                if (check_key(sw, where, kv->string, seen, &n_seen) != 0) return -1;
                if (check_list(sw, where, kv->string, kv) != 0) return -1;
                if (a->n_keys >= MAX_KEYS) return sweep_error(sw, where, "more than %d keys", MAX_KEYS);
                int n = cJSON_GetArraySize(kv);
                if (a->n_keys > 0 && n != a->len)
                    return sweep_error(sw, where,
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
        if (n > MAX_POINTS) return sweep_error(sw, "grid", "more than %d points", MAX_POINTS);
    }
    sw->n_points = (int)n;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The points                                                               */

/* The short name of a key (after its dot) unless another varying key has the same one. */
static const char *short_key(const sweep *sw, const char *key) {
    const char *dot = strrchr(key, '.'), *s = dot ? dot + 1 : key;
    for (int a = 0; a < sw->n_axes; a++)
        for (int k = 0; k < sw->axes[a].n_keys; k++) {
            const char *o = sw->axes[a].keys[k], *od = strrchr(o, '.');
            if (o != key && !strcmp(od ? od + 1 : o, s)) return key;
        }
    return s;
}

static void append_name(char *name, const char *text) {
    size_t n = strlen(name);
    for (const char *p = text; *p && n < NAME_MAX_LEN; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
                 c == '_' || c == '=' || c == '+';
        name[n++] = ok ? c : '_';
    }
    name[n] = '\0';
}

static int push_set(point *p, const char *key, const char *val) {
    if (p->n_sets >= MAX_SETS) return -1;
    char *s = malloc(strlen(key) + strlen(val) + 2);
    if (s == NULL) TRI_FAIL("out of memory");
    sprintf(s, "%s=%s", key, val);
    p->sets[p->n_sets++] = s;
    return 0;
}

/* Builds point idx: its overrides, name, run directory; loads its config. */
static int make_point(sweep *sw, int idx, point *p) {
    memset(p, 0, sizeof *p);
    p->values = cJSON_CreateObject();
    for (int i = 0; i < sw->n_fixed; i++) p->sets[p->n_sets++] = xstrdup(sw->fixed[i]);
    int rest = idx;
    int pos[MAX_KEYS];
    for (int a = sw->n_axes - 1; a >= 0; a--) {
        pos[a] = rest % sw->axes[a].len;
        rest /= sw->axes[a].len;
    }
    for (int a = 0; a < sw->n_axes; a++)
        for (int k = 0; k < sw->axes[a].n_keys; k++) {
            const cJSON *v = cJSON_GetArrayItem(sw->axes[a].lists[k], pos[a]);
            char val[TRI_PATH_MAX];
            scalar_text(v, val, sizeof val); /* checked in read_sweep */
            if (push_set(p, sw->axes[a].keys[k], val) != 0)
                return sweep_error(sw, "grid", "more than %d overrides", MAX_SETS);
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
        return sweep_error(sw, "grid", "more than %d overrides", MAX_SETS);
    if (tri_config_load(&p->cfg, sw->base, p->n_sets, (const char *const *)p->sets) != 0)
        return sweep_error(sw, NULL, "point %d (%s): not a valid config with base %s (the message above names the key)",
                           idx + 1, p->name, sw->base);
    return 0;
}

static void free_point(point *p) {
    for (int i = 0; i < p->n_sets; i++) free(p->sets[i]);
    cJSON_Delete(p->values);
    memset(p, 0, sizeof *p);
}

static int ranks_of(const tri_config *c) { return c->parallel.tp * c->parallel.pp * c->parallel.dp; }

/* The point's data files open (data.train, data.val) and its tokenizer file
 * exists, checked before anything runs: a sweep whose data is missing
 * (the example's comes from the quickstart) fails once, at the start, rather
 * than once per point. Points with the data settings of the previous point
 * are not checked again. Returns 0 or -1 (printed: the file, then the point). */
static int check_point_data(const sweep *sw, const point *p, const point *prev, int idx) {
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
            return sweep_error(sw, NULL, "point %d (%s): %s = \"%s\" cannot be read (above); nothing was run%s",
                               idx + 1, p->name, keys[k], specs[k],
                               sw->has_description ? " (the sweep's \"description\" says how its data is made)" : "");
        tri_sampler_free(&s);
    }
    if (d->tokenizer[0] && !file_exists(d->tokenizer))
        return sweep_error(sw, NULL, "point %d (%s): data.tokenizer = \"%s\": no such file; nothing was run%s", idx + 1,
                           p->name, d->tokenizer,
                           sw->has_description ? " (the sweep's \"description\" says how its data is made)" : "");
    return 0;
}

/* point.json: the settings a run directory was made for. */
static cJSON *point_json(const sweep *sw, const point *p) {
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

/* Whether an existing point.json was written for the same base and overrides. */
static int same_settings(const sweep *sw, const point *p, char *why, size_t n) {
    char path[TRI_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/point.json", p->dir);
    size_t len;
    char *text = tri_slurp(path, "point.json", SWEEP_MAX_LEN, &len);
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

/* ------------------------------------------------------------------------ */
/* A run's figures, from its metrics.jsonl                                   */

typedef struct run_stats {
    int last_step;
    double final_loss; /* NAN: none */
    double final_val, best_val;
    double step_ms, tokens_per_s, mfu; /* medians over the logged steps after the first */
} run_stats;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    if (n == 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void read_stats(const char *dir, run_stats *s) {
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

static const char *status_of(const point *p) {
    if (p->state == P_DONE) return "ok";
    if (p->ran && p->exit_code != 0) return "failed";
    if (p->state == P_RESUME || p->ran) return "incomplete";
    return "pending";
}

static cJSON *summary_line(const point *p) {
    run_stats s;
    read_stats(p->dir, &s);
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
    add_num(o, "ranks", ranks_of(c));
    double wall = p->ran ? p->wall_s : NAN;
    if (!p->ran && p->state == P_DONE) { /* the run's own time, from its done marker */
        char path[TRI_PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/done", p->dir);
        char *text = tri_slurp(path, "done marker", 4096, NULL);
        cJSON *d = text ? cJSON_Parse(text) : NULL;
        wall = num(d, "wall_s");
        cJSON_Delete(d);
        free(text);
    }
    add_num(o, "wall_s", wall);
    return o;
}

static int write_summary(const sweep *sw) {
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL) TRI_FAIL("out of memory");
    for (int i = 0; i < sw->n_points; i++) {
        cJSON *o = summary_line(&sw->points[i]);
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

/* ------------------------------------------------------------------------ */
/* Running one point                                                        */

/* The command line of a point (argv, NULL-terminated; pointers into p and sw). */
static int point_argv(const sweep *sw, const point *p, int resume, const char **av, char *ranks_dir, char *threads) {
    int n = 0;
    if (ranks_of(&p->cfg) > 1) {
        snprintf(ranks_dir, TRI_PATH_MAX + 16, "%s/ranks", p->dir);
        av[n++] = sw->runner;
        av[n++] = "--log-dir";
        av[n++] = ranks_dir;
        av[n++] = "--";
    }
    av[n++] = sw->self;
    av[n++] = "train";
    av[n++] = sw->base;
    for (int i = 0; i < p->n_sets; i++) {
        av[n++] = "--set";
        av[n++] = p->sets[i];
    }
    if (sw->threads > 0) {
        snprintf(threads, 16, "%d", sw->threads);
        av[n++] = "--threads";
        av[n++] = threads;
    }
    if (resume) av[n++] = "--resume";
    av[n] = NULL;
    return n;
}

static void print_argv(FILE *f, const char *const *av) {
    for (int i = 0; av[i]; i++) {
        const char *a = av[i];
        int plain = a[0] != '\0';
        for (const char *c = a; *c; c++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+=/,:", *c)) plain = 0;
        fprintf(f, plain ? "%s%s" : "%s'%s'", i ? " " : "", a);
    }
    fprintf(f, "\n");
}

/* The last `lines` lines of a file to stderr. */
static void print_tail(const char *path, int lines) {
    size_t len = 0;
    char *text = tri_slurp(path, "log", 0, &len);
    if (text == NULL) return;
    size_t start = len > 0 && text[len - 1] == '\n' ? len - 1 : len;
    for (int seen = 0; start > 0; start--)
        if (text[start - 1] == '\n' && ++seen == lines) break;
    fprintf(stderr, "%s", text + start);
    free(text);
}

/* Runs the point to its end. Returns 0 when it ran (p->exit_code says how it
 * ended), -1 when it could not be started. */
static int run_point(sweep *sw, point *p) {
    if (tri_mkdir_p_named("sweep run directory", p->dir) != 0) return -1;
    int resume = p->state == P_RESUME;
    char pj[TRI_PATH_MAX + 16];
    snprintf(pj, sizeof pj, "%s/point.json", p->dir);
    if (!resume) {
        cJSON *o = point_json(sw, p);
        char *s = cJSON_Print(o);
        cJSON_Delete(o);
        int rc = s ? tri_write_file_atomic(pj, s, strlen(s)) : -1;
        free(s);
        if (rc != 0) return -1;
    }
    const char *av[2 * MAX_SETS + 16];
    char ranks_dir[TRI_PATH_MAX + 16], threads[16];
    point_argv(sw, p, resume, av, ranks_dir, threads);
    char log[TRI_PATH_MAX + 16];
    snprintf(log, sizeof log, "%s/train.log", p->dir);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return tri_error("%s: cannot open: %s", log, strerror(errno));
    FILE *lf = fdopen(dup(fd), "a");
    if (lf) {
        time_t now = time(NULL);
        char ts[64];
        strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", localtime(&now));
        fprintf(lf, "== trident sweep %s, %s: ", sw->file, ts);
        print_argv(lf, av);
        fclose(lf);
    }
    fflush(NULL);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        close(fd);
        return tri_error("sweep: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        setpgid(0, 0); /* a terminal's Ctrl-C reaches the point once, through us */
        dup2(fd, 1);
        dup2(fd, 2);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execv(av[0], (char *const *)av);
        fprintf(stderr, "trident: sweep: cannot run %s: %s\n", av[0], strerror(errno));
        _exit(127);
    }
    close(fd);
    g_child = pid;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    g_child = 0;
    p->ran = 1;
    p->wall_s = now_s() - t0;
    p->exit_code = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
    if (p->exit_code == 0) {
        char done[TRI_PATH_MAX + 16], msg[128];
        snprintf(done, sizeof done, "%s/done", p->dir);
        int n = snprintf(msg, sizeof msg, "{\"wall_s\": %.3f}\n", p->wall_s);
        if (tri_write_file_atomic(done, msg, (size_t)n) != 0) {
            p->exit_code = 1;
            return 0;
        }
        p->state = P_DONE;
    } else {
        p->state = P_RESUME; /* it started: the next sweep resumes it */
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The command                                                              */

static void sweep_usage(FILE *f) {
    fprintf(f, "usage: trident sweep SWEEP.json [options]\n"
               "  runs a grid of `trident train` runs, one run directory each, and writes OUT/summary.jsonl\n"
               "  (the sweep file's format: docs/scaling.md; an example: configs/sweeps/scaling.json)\n"
               "  --dry-run        validate every point and print its command; run nothing\n"
               "  --threads N      `trident train --threads N` for every point (overrides the file's \"threads\")\n"
               "  --set k=v        a fixed override for every point, over the file's \"set\" (repeatable)\n"
               "  --out DIR        the output directory instead of the file's \"out\"\n");
}

int tri_cmd_sweep(int argc, char **argv) {
    sweep sw;
    memset(&sw, 0, sizeof sw);
    const char **cli_sets = calloc((size_t)argc, sizeof *cli_sets);
    const char *cli_out = NULL;
    int n_cli = 0, rc = 2;
    if (cli_sets == NULL) TRI_FAIL("out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            sweep_usage(stdout);
            rc = 0;
            goto out;
        } else if (!strcmp(a, "--dry-run")) {
            sw.dry_run = 1;
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            long v;
            if (tri_arg_int("--threads", argv[++i], 1, 1024, &v) != 0) goto out;
            sw.threads = (int)v;
        } else if (!strcmp(a, "--set") && i + 1 < argc) {
            cli_sets[n_cli++] = argv[++i];
        } else if (!strcmp(a, "--out") && i + 1 < argc) {
            cli_out = argv[++i];
        } else if (a[0] == '-') {
            tri_error("sweep: unknown or incomplete option '%s' (try `trident sweep --help`)", a);
            goto out;
        } else if (!sw.file) {
            sw.file = a;
        } else {
            tri_error("sweep: unexpected argument '%s' (one SWEEP.json only)", a);
            goto out;
        }
    }
    if (!sw.file) {
        tri_error("sweep: missing SWEEP.json (e.g. configs/sweeps/scaling.json)");
        goto out;
    }
    sw.out = cli_out; /* NULL: the file's */
    if (read_sweep(&sw, n_cli, cli_sets) != 0) goto out;
    /* this program, and tridentrun beside it (as tridentrun finds trident) */
    ssize_t self_len = readlink("/proc/self/exe", sw.self, sizeof sw.self - 1);
    char *slash = self_len > 0 ? (sw.self[self_len] = '\0', strrchr(sw.self, '/')) : NULL;
    if (slash == NULL) {
        tri_error("sweep: cannot find this program (/proc/self/exe)");
        rc = 1;
        goto out;
    }
    snprintf(sw.runner, sizeof sw.runner, "%.*s/tridentrun", (int)(slash - sw.self), sw.self);

    /* every point, validated before the first runs */
    sw.points = calloc((size_t)sw.n_points, sizeof *sw.points);
    if (sw.points == NULL) TRI_FAIL("out of memory");
    int need_runner = 0;
    for (int i = 0; i < sw.n_points; i++) {
        point *p = &sw.points[i];
        if (make_point(&sw, i, p) != 0) goto out;
        for (int j = 0; j < i; j++)
            if (!strcmp(sw.points[j].name, p->name)) {
                sweep_error(&sw, NULL,
                            "points %d and %d get the same run directory name %s (values that differ only "
                            "in characters a file name cannot hold)",
                            j + 1, i + 1, p->name);
                goto out;
            }
        if (!sw.dry_run && check_point_data(&sw, p, i > 0 ? &sw.points[i - 1] : NULL, i) != 0) goto out;
        need_runner |= ranks_of(&p->cfg) > 1;
        char path[TRI_PATH_MAX + 16], why[512];
        snprintf(path, sizeof path, "%s/done", p->dir);
        int done = file_exists(path);
        snprintf(path, sizeof path, "%s/point.json", p->dir);
        int started = file_exists(path);
        if ((done || started) && !same_settings(&sw, p, why, sizeof why)) {
            sweep_error(&sw, NULL,
                        "point %s: %s/point.json was written for other settings (%s); delete %s or choose another "
                        "\"out\"",
                        p->name, p->dir, why, p->dir);
            goto out;
        }
        p->state = done ? P_DONE : started ? P_RESUME : P_NEW;
    }
    if (need_runner && access(sw.runner, X_OK) != 0) {
        tri_error("%s: points with tp*pp*dp > 1 run through tridentrun, but %s is missing (%s)", sw.file, sw.runner,
                  strerror(errno));
        rc = 1;
        goto out;
    }
    printf("sweep %s: %d point%s of base %s, out %s\n", sw.file, sw.n_points, sw.n_points == 1 ? "" : "s", sw.base,
           sw.out);
    if (sw.dry_run) {
        for (int i = 0; i < sw.n_points; i++) {
            point *p = &sw.points[i];
            const char *av[2 * MAX_SETS + 16];
            char ranks_dir[TRI_PATH_MAX + 16], threads[16];
            point_argv(&sw, p, p->state == P_RESUME, av, ranks_dir, threads);
            printf("[%d/%d] %s: %s, %zu parameters, %d rank%s\n  ", i + 1, sw.n_points, p->name,
                   p->state == P_DONE     ? "done (would be skipped)"
                   : p->state == P_RESUME ? "would resume"
                                          : "would run",
                   tri_gpt_num_params(&p->cfg.model), ranks_of(&p->cfg), ranks_of(&p->cfg) > 1 ? "s" : "");
            print_argv(stdout, av);
        }
        rc = 0;
        goto out;
    }
    if (tri_mkdir_p_named("out", sw.out) != 0) goto out;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int n_run = 0, n_skip = 0, n_fail = 0;
    rc = 0;
    for (int i = 0; i < sw.n_points && !g_signal; i++) {
        point *p = &sw.points[i];
        if (p->state == P_DONE) {
            printf("[%d/%d] %s: done already, not rerun\n", i + 1, sw.n_points, p->name);
            n_skip++;
            continue;
        }
        printf("[%d/%d] %s: %s (%zu parameters, %d rank%s; output in %s/train.log)\n", i + 1, sw.n_points, p->name,
               p->state == P_RESUME ? "resuming" : "running", tri_gpt_num_params(&p->cfg.model), ranks_of(&p->cfg),
               ranks_of(&p->cfg) > 1 ? "s" : "", p->dir);
        fflush(stdout);
        if (run_point(&sw, p) != 0) {
            rc = 1;
            break;
        }
        n_run++;
        run_stats s;
        read_stats(p->dir, &s);
        if (p->exit_code == 0) {
            printf("[%d/%d] %s: ok in %.1f s: step %d, loss %.4f", i + 1, sw.n_points, p->name, p->wall_s, s.last_step,
                   s.final_loss);
            if (!isnan(s.final_val)) printf(", val loss %.4f", s.final_val);
            printf("\n");
        } else {
            n_fail++;
            fprintf(stderr,
                    "trident: sweep: point %s failed with exit code %d after %.1f s; the end of %s/train.log:\n",
                    p->name, p->exit_code, p->wall_s, p->dir);
            char log[TRI_PATH_MAX + 16];
            snprintf(log, sizeof log, "%s/train.log", p->dir);
            print_tail(log, TAIL_LINES);
        }
        if (write_summary(&sw) != 0) rc = 1;
    }
    if (write_summary(&sw) != 0) rc = 1;
    int n_pending = 0;
    for (int i = 0; i < sw.n_points; i++) n_pending += sw.points[i].state != P_DONE && !sw.points[i].ran;
    printf("sweep: %d points: %d run, %d already done, %d failed, %d not run; summary %s/summary.jsonl\n", sw.n_points,
           n_run, n_skip, n_fail, n_pending, sw.out);
    if (g_signal) {
        fprintf(stderr, "trident: sweep: stopped by signal %d (run it again to resume)\n", (int)g_signal);
        rc = 128 + g_signal;
    } else if (n_fail > 0 && rc == 0) {
        rc = 1;
    }
    if (sw.plot && !g_signal) {
        char summary[TRI_PATH_MAX + 32];
        snprintf(summary, sizeof summary, "%s/summary.jsonl", sw.out);
        const char *args[] = {"--out", sw.out, summary, NULL};
        tri_plot_run("sweep plot", args);
    }
out:
    for (int i = 0; sw.points && i < sw.n_points; i++) free_point(&sw.points[i]);
    free(sw.points);
    for (int i = 0; i < sw.n_fixed; i++) free(sw.fixed[i]);
    for (int i = 0; i < sw.n_cli_keys; i++) free(sw.cli_keys[i]);
    cJSON_Delete(sw.root);
    free(cli_sets);
    return rc;
}
