#include "src/infer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/checkpoint.h"
#include "parallel/ckptdir.h"
#include "src/preflight.h"

/* The run config stored in state.json, or the model shape of a Hugging Face
 * config.json (everything else at its default). */
static int read_config(tri_infer *m) {
    char path[TRI_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/state.json", m->dir);
    if (access(path, F_OK) == 0) {
        char *text = tri_read_file(path, NULL);
        if (!text) return -1;
        cJSON *root = cJSON_Parse(text);
        free(text);
        cJSON *c = root ? cJSON_GetObjectItemCaseSensitive(root, "config") : NULL;
        char *cs = cJSON_IsObject(c) ? cJSON_PrintUnformatted(c) : NULL;
        cJSON_Delete(root);
        if (!cs) {
            fprintf(stderr, "trident: %s: no \"config\" object\n", path);
            return -1;
        }
        int rc = tri_config_load_string(&m->cfg, cs, path);
        free(cs);
        return rc;
    }
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    char *text = tri_read_file(path, NULL);
    if (!text) return -1;
    tri_config_defaults(&m->cfg);
    int rc = tri_hf_config_parse(text, path, &m->cfg.model);
    free(text);
    snprintf(m->cfg.source, sizeof m->cfg.source, "%.*s", (int)sizeof m->cfg.source - 1, path);
    return rc;
}

int tri_infer_open(tri_infer *m, const char *ckpt, size_t B) {
    memset(m, 0, sizeof *m);
    if (tri_ckpt_resolve(ckpt, m->dir, sizeof m->dir) != 0) return -1;
    if (read_config(m) != 0) return -1;
    const tri_ops *ops = tri_ops_get("cpu");
    if (!ops) return -1;
    tri_comm_init_self(&m->self, 0);
    /* a checkpoint's config.json may hold any shape: every size checked
     * before anything is allocated (src/preflight.h) */
    tri_config one = m->cfg; /* inference runs the whole model on this rank */
    one.parallel.tp = one.parallel.pp = one.parallel.dp = 1;
    if (tri_preflight_model(&one, B, 0, 0, 0, 0, 0, NULL) != 0) return -1;
    if (tri_gpt_init(&m->gpt, &m->cfg.model, ops, &m->self, 1, 0, 1, 0) != 0) return -1;
    if (tri_acts_init(&m->acts, &m->gpt, B, (size_t)m->cfg.model.seq_len) != 0) goto fail;
    if (tri_model_load(m->dir, &m->gpt, NULL, NULL) != 0) goto fail;
    return 0;
fail:
    tri_infer_close(m);
    return -1;
}

void tri_infer_close(tri_infer *m) {
    if (!m) return;
    tri_acts_free(&m->acts, &m->gpt);
    tri_gpt_free(&m->gpt);
    memset(m, 0, sizeof *m);
}
