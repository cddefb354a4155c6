#include "train/datafiles.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"
#include "base/log.h"

typedef struct datafile {
    const char *role, *path;
    size_t bytes;
    uint64_t fingerprint;
} datafile;

#define MAX_FILES (4 * TRI_SAMPLER_MAX_DATASETS) /* train + val, .bin + .idx each */

static void add(datafile *f, int *n, const char *role, const char *path, size_t bytes, uint64_t fp) {
    for (int i = 0; i < *n; i++)
        if (strcmp(f[i].path, path) == 0) return; /* the same file serves train and val (data.split) */
    TRI_CHECK(*n < MAX_FILES);
    f[(*n)++] = (datafile){role, path, bytes, fp};
}

static int collect(const tri_sampler *train, const tri_sampler *val, datafile *f) {
    int n = 0;
    const tri_sampler *s[2] = {train, val};
    const char *role[2] = {"train", "val"};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; s[k] && i < s[k]->n_sources; i++) {
            const tri_dataset *ds = &s[k]->src[i].ds;
            add(f, &n, role[k], ds->bin_path, ds->bin_size, ds->bin_fingerprint);
            if (ds->format == TRI_DATA_MEGATRON) add(f, &n, role[k], ds->idx_path, ds->idx_size, ds->idx_fingerprint);
        }
    }
    return n;
}

void tri_datafiles_to_state(cJSON *state, const tri_sampler *train, const tri_sampler *val) {
    datafile f[MAX_FILES];
    int n = collect(train, val, f);
    cJSON *arr = cJSON_AddArrayToObject(state, "data_files");
    for (int i = 0; arr && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o) return;
        char fp[24];
        snprintf(fp, sizeof fp, "%016" PRIx64, f[i].fingerprint);
        cJSON_AddStringToObject(o, "role", f[i].role);
        cJSON_AddStringToObject(o, "path", f[i].path);
        cJSON_AddNumberToObject(o, "bytes", (double)f[i].bytes);
        cJSON_AddStringToObject(o, "fingerprint", fp);
        cJSON_AddItemToArray(arr, o);
    }
}

/* Entry i of "data_files" into *out; -1 after naming what is wrong. */
static int parse_entry(const cJSON *e, int i, const char *file, datafile *out) {
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(e, "path");
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(e, "bytes");
    const cJSON *hex = cJSON_GetObjectItemCaseSensitive(e, "fingerprint");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role");
    int ok = cJSON_IsString(path) && cJSON_IsNumber(bytes) && bytes->valuedouble >= 0 &&
             bytes->valuedouble == floor(bytes->valuedouble) && bytes->valuedouble <= 9007199254740992.0 &&
             cJSON_IsString(hex) && strlen(hex->valuestring) == 16 &&
             strspn(hex->valuestring, "0123456789abcdefABCDEF") == 16;
    if (!ok)
        return tri_error("%s: data_files[%d]: expected {\"path\": string, \"bytes\": integer >= 0, "
                         "\"fingerprint\": 16 hex digits}",
                         file, i);
    out->role = cJSON_IsString(role) ? role->valuestring : "data";
    out->path = path->valuestring;
    out->bytes = (size_t)bytes->valuedouble;
    out->fingerprint = (uint64_t)strtoull(hex->valuestring, NULL, 16);
    return 0;
}

int tri_datafiles_check_resume(const char *ckpt_dir, const tri_sampler *train, const tri_sampler *val, int allow_change,
                               int verbose) {
    char file[4200];
    snprintf(file, sizeof file, "%s/state.json", ckpt_dir);
    char *text = tri_slurp(file, "checkpoint state", (size_t)64 << 20, NULL);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return tri_error("%s: not valid JSON", file);
    int rc = 0;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "data_files");
    if (!arr) {
        if (verbose)
            tri_log_note("%s records no data files (saved by an older trident): their contents are not checked", file);
        cJSON_Delete(root);
        return 0;
    }
    if (!cJSON_IsArray(arr)) {
        cJSON_Delete(root);
        return tri_error("%s: \"data_files\" is not an array", file);
    }
    datafile now[MAX_FILES];
    int n_now = collect(train, val, now);
    int n_changed = 0;
    char first[2048] = "";
    int i = 0;
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        datafile was = {0};
        if (parse_entry(e, i, file, &was) != 0) {
            rc = -1;
            break;
        }
        const datafile *cur = NULL;
        for (int k = 0; k < n_now && !cur; k++)
            if (strcmp(now[k].path, was.path) == 0) cur = &now[k];
        if (!cur || (cur->bytes == was.bytes && cur->fingerprint == was.fingerprint)) continue;
        char what[1024];
        if (cur->bytes != was.bytes)
            snprintf(what, sizeof what, "%s (data.%s) held %zu bytes then and %zu now", was.path, cur->role, was.bytes,
                     cur->bytes);
        else
            snprintf(what, sizeof what,
                     "%s (data.%s) has the same size (%zu bytes) but other contents (fingerprint %016" PRIx64
                     " then, %016" PRIx64 " now)",
                     was.path, cur->role, was.bytes, was.fingerprint, cur->fingerprint);
        if (allow_change && verbose) tri_log_note("--allow-data-change: %s; resuming with the file as it is now", what);
        if (n_changed++ == 0) snprintf(first, sizeof first, "%s", what);
    }
    if (rc == 0 && n_changed > 0 && !allow_change) {
        char more[64] = "";
        if (n_changed > 1)
            snprintf(more, sizeof more, " (and %d more file%s)", n_changed - 1, n_changed > 2 ? "s" : "");
        rc = tri_error("--resume: a data file changed since the checkpoint %s was saved: %s%s. The resumed run "
                       "would read other samples than the interrupted one; restore the file, or pass "
                       "--allow-data-change to resume with it as it is",
                       ckpt_dir, first, more);
    }
    cJSON_Delete(root);
    return rc;
}
