/* state.json of a checkpoint (see ckpt_state.h). */
#include "train/ckpt_state.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/file.h"

#define TWO_POW_53 9007199254740992.0

int tri_ckpt_state_parse(const char *json, const char *name, int *step, uint64_t *consumed, tri_config *saved) {
    cJSON *root = cJSON_Parse(json);
    if (root == NULL) return tri_error("%s: not valid JSON", name);
    /* the bounds come before the casts: (int)1e10 is undefined */
    static const struct {
        const char *key;
        double max;
        const char *bound;
    } keys[2] = {{"step", INT_MAX, "2^31"}, {"samples_consumed", TWO_POW_53 - 1, "2^53"}};
    double v[2] = {0, 0};
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, keys[i].key);
        double d = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (!(d >= 0 && d <= keys[i].max) || d != floor(d))
            rc = tri_error("%s: \"%s\" is missing or not an integer in [0, %s)", name, keys[i].key, keys[i].bound);
        v[i] = d;
    }
    const cJSON *c = rc == 0 ? cJSON_GetObjectItemCaseSensitive(root, "config") : NULL;
    char *cs = cJSON_IsObject(c) ? cJSON_PrintUnformatted(c) : NULL;
    if (rc == 0 && cs == NULL) rc = tri_error("%s: no \"config\" object", name);
    cJSON_Delete(root);
    if (rc == 0 && tri_config_load_string(saved, cs, name) != 0) rc = -1;
    free(cs);
    if (rc != 0) return -1;
    *step = (int)v[0];
    *consumed = (uint64_t)v[1];
    return 0;
}

int tri_ckpt_state_read(const char *dir, int *step, uint64_t *consumed, tri_config *saved) {
    char path[TRI_PATH_MAX + 32];
    if (snprintf(path, sizeof path, "%s/state.json", dir) >= (int)sizeof path)
        return tri_error("%s/state.json: path too long", dir);
    char *text = tri_slurp(path, "checkpoint state", (size_t)64 << 20, NULL);
    if (text == NULL) return -1;
    int rc = tri_ckpt_state_parse(text, path, step, consumed, saved);
    free(text);
    return rc;
}

int tri_ckpt_state_scaler(const char *dir, int *updates, double *loss_scale, int *clean_steps) {
    char path[TRI_PATH_MAX + 32];
    if (snprintf(path, sizeof path, "%s/state.json", dir) >= (int)sizeof path)
        return tri_error("%s/state.json: path too long", dir);
    char *text = tri_slurp(path, "checkpoint state", (size_t)64 << 20, NULL);
    if (text == NULL) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (root == NULL) return tri_error("%s: not valid JSON", path);
    int rc = 0;
    const struct {
        const char *key;
        int *i;
        double *d;
    } keys[3] = {{"optimizer_updates", updates, NULL},
                 {"loss_scale", NULL, loss_scale},
                 {"loss_scale_clean_steps", clean_steps, NULL}};
    for (int k = 0; k < 3 && rc == 0; k++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, keys[k].key);
        if (x == NULL) continue;
        double v = cJSON_IsNumber(x) ? x->valuedouble : NAN;
        if (keys[k].i) {
            if (!(v >= 0 && v <= INT_MAX) || v != floor(v))
                rc = tri_error("%s: \"%s\" is not an integer in [0, 2^31)", path, keys[k].key);
            else
                *keys[k].i = (int)v;
        } else {
            if (!(v > 0) || !isfinite(v))
                rc = tri_error("%s: \"%s\" is not a positive number", path, keys[k].key);
            else
                *keys[k].d = v;
        }
    }
    cJSON_Delete(root);
    return rc;
}
