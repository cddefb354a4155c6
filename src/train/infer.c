#include "train/infer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/ckpt/checkpoint.h"
#include "model/ckpt/store.h"
#include "base/file.h"
#include "train/preflight.h"
#include "base/err.h"

/* The run config stored in state.json, or the model shape of a Hugging Face
 * config.json (everything else at its default). */
static int read_config(tri_infer *m) {
    char path[TRI_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/state.json", m->dir);
    if (access(path, F_OK) == 0) {
        char *text = tri_slurp(path, "checkpoint state", (size_t)64 << 20, NULL);
        if (!text) return -1;
        cJSON *root = cJSON_Parse(text);
        free(text);
        cJSON *c = root ? cJSON_GetObjectItemCaseSensitive(root, "config") : NULL;
        char *cs = cJSON_IsObject(c) ? cJSON_PrintUnformatted(c) : NULL;
        cJSON_Delete(root);
        if (!cs) {
            tri_error("%s: no \"config\" object", path);
            return -1;
        }
        int rc = tri_config_load_string(&m->cfg, cs, path);
        free(cs);
        return rc;
    }
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    char *text = tri_slurp(path, "checkpoint config", (size_t)16 << 20, NULL);
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
    if (tri_ctx_init(&m->ctx, "cpu", 0) != 0) return -1;
    tri_comm_init_self(&m->self, 0);
    m->self.ctx = &m->ctx;
    m->B = B;
    size_t T = (size_t)m->cfg.model.seq_len;
    /* a checkpoint's config.json may hold any shape: every size checked
     * before anything is allocated (src/train/preflight.h) */
    tri_config one = m->cfg; /* inference runs the whole model on this rank */
    one.parallel.tp = one.parallel.pp = one.parallel.dp = one.parallel.vpp = one.parallel.cp = 1;
    one.parallel.pp_layout[0] = '\0'; /* the training run's pipeline split does not apply */
    if (tri_preflight_model(&one, B, 0, 0, 0, 0, 0, NULL) != 0) goto fail;
    if (tri_gpt_init_single(&m->gpt, &m->cfg.model, &m->ctx, &m->self, 1, 0) != 0) goto fail;
    if (tri_slot_pool_init(&m->pool, &m->gpt, 0, B, T, TRI_RECOMPUTE_NONE, 1, 0) != 0) goto fail;
    if (tri_workspace_init(&m->ws, &m->gpt, B, T, TRI_RECOMPUTE_NONE) != 0) goto fail;
    /* a Trident checkpoint (state.json), or a Hugging Face directory:
     * checked tensor by tensor, sharded or not */
    char state[TRI_PATH_MAX + 32];
    snprintf(state, sizeof state, "%s/state.json", m->dir);
    if (access(state, F_OK) == 0 ? tri_model_load(m->dir, &m->gpt, NULL, NULL) != 0
                                 : tri_model_import(m->dir, &m->gpt, NULL, NULL, 0) != 0)
        goto fail;
    return 0;
fail:
    tri_infer_close(m);
    return -1;
}

void tri_infer_close(tri_infer *m) {
    if (!m) return;
    tri_slot_pool_free(&m->pool, &m->gpt);
    tri_workspace_free(&m->ws, &m->gpt);
    tri_gpt_free(&m->gpt);
    tri_ctx_free(&m->ctx);
    memset(m, 0, sizeof *m);
}

double tri_infer_forward(tri_infer *m, const int32_t *ids, const int32_t *targets) {
    tri_slot *s = tri_slot_acquire(&m->pool, &m->gpt);
    tri_slot_stage(&m->gpt, &m->pool, s, ids, targets);
    double sum = tri_chunk_forward(&m->gpt, &m->pool, s, &m->ws, NULL, targets ? TRI_FWD_LOSS : TRI_FWD_LOGITS, 0.0f);
    tri_slot_release(&m->pool, &m->gpt, s);
    return sum;
}

double tri_infer_loss(tri_infer *m, const int32_t *ids, const int32_t *targets, size_t rows) {
    TRI_CHECK(targets != NULL && rows <= m->B);
    double sum = tri_infer_forward(m, ids, targets);
    if (rows == m->B) return sum;
    /* the per-token losses of the forward stay in the workspace: (B*T), row-major by sequence */
    return m->ctx.ops->sum(&m->ctx, m->ws.losses, rows * (size_t)m->cfg.model.seq_len);
}

void tri_infer_logits(tri_infer *m, size_t row, float *host) {
    size_t V = (size_t)m->cfg.model.vocab_size;
    tri_ctx_to_host(&m->ctx, host, (const float *)m->ws.logits + row * m->gpt.Vl, V * sizeof(float));
}
