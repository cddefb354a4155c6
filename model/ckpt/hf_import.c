/* Starting a model from a Hugging Face directory (`trident train --init-from`,
 * and `trident eval`/`sample` of a directory without state.json): see
 * tri_model_import in checkpoint.h.
 *
 * Validation runs on world rank 0 alone (one message, naming the file and
 * the key or tensor at fault), then every rank opens the files and reads its
 * own slices through the checkpoint reader (model/ckpt/checkpoint.c), so any
 * tp/pp/dp and ZeRO load the directory the way a checkpoint resumes. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"
#include "base/log.h"
#include "model/ckpt/checkpoint.h"

#define HF_MAX_SHARDS 4096
#define HF_MAX_LISTED 5 /* mismatches listed before "and N more" */

static void fmt_shape(char *buf, size_t n, int ndim, const size_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, "%s%zu", d ? ", " : "", shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static void set_close(tri_st_set *s) {
    for (int i = 0; i < s->n; i++) tri_st_close(&s->files[i]);
    free(s->files);
    memset(s, 0, sizeof *s);
}

/* The shard file names of an index (weight_map's values, each once), into
 * names[*n] (malloc'd). Checks that every name is a plain file name. */
static int index_shards(const char *ipath, char ***names, int *n, cJSON **map_out, cJSON **root_out) {
    char *text = tri_slurp(ipath, "safetensors index", (size_t)256 << 20, NULL);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return tri_error("%s: not valid JSON", ipath);
    cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map) || !map->child) {
        cJSON_Delete(root);
        return tri_error("%s: no \"weight_map\" object naming the tensors' files", ipath);
    }
    char **v = NULL;
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, map) {
        if (!cJSON_IsString(it) || !it->valuestring[0] || strchr(it->valuestring, '/') ||
            strcmp(it->valuestring, "..") == 0 || strcmp(it->valuestring, ".") == 0) {
            tri_error("%s: weight_map[\"%s\"]: expected the name of a .safetensors file in this directory", ipath,
                      it->string);
            goto fail;
        }
        int seen = 0;
        for (int i = 0; i < k && !seen; i++) seen = strcmp(v[i], it->valuestring) == 0;
        if (seen) continue;
        if (k == HF_MAX_SHARDS) {
            tri_error("%s: more than %d shard files", ipath, HF_MAX_SHARDS);
            goto fail;
        }
        char **nv = realloc(v, (size_t)(k + 1) * sizeof *v);
        if (!nv) goto fail;
        v = nv;
        v[k++] = it->valuestring;
    }
    *names = v, *n = k, *map_out = map, *root_out = root;
    return 0;
fail:
    free(v);
    cJSON_Delete(root);
    return -1;
}

/* Opens the weights of dir into s: the shards of model.safetensors.index.json
 * (each tensor in the file the index names), or model.safetensors. */
static int set_open(const char *dir, tri_st_set *s) {
    memset(s, 0, sizeof *s);
    char ipath[TRI_CKPT_PATH_MAX + 64], path[TRI_CKPT_PATH_MAX + 600];
    snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir);
    if (access(ipath, F_OK) != 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (access(path, F_OK) != 0)
            return tri_error("%s: neither model.safetensors nor model.safetensors.index.json (a Hugging Face model "
                             "saved with safetensors; pytorch_model.bin is not read)",
                             dir);
        s->files = calloc(1, sizeof *s->files);
        if (!s->files || tri_st_open(&s->files[0], path) != 0) {
            free(s->files);
            s->files = NULL;
            return -1;
        }
        s->n = 1;
        return 0;
    }
    char **names = NULL;
    int n = 0;
    cJSON *map = NULL, *root = NULL;
    if (index_shards(ipath, &names, &n, &map, &root) != 0) return -1;
    int rc = 0;
    s->files = calloc((size_t)n, sizeof *s->files);
    if (!s->files) rc = tri_error("out of memory: %d shard files", n);
    for (int i = 0; i < n && rc == 0; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (tri_st_open(&s->files[i], path) != 0)
            rc = -1;
        else
            s->n++;
    }
    /* every tensor where the index says, and no tensor in two files */
    const cJSON *it;
    cJSON_ArrayForEach(it, map) {
        if (rc != 0) break;
        int e, fi = -1;
        for (int i = 0; i < s->n && fi < 0; i++)
            if (strcmp(strrchr(s->files[i].path, '/') + 1, it->valuestring) == 0) fi = i;
        if (tri_st_layout_find(&s->files[fi].layout, it->string) < 0)
            rc = tri_error("%s: tensor %s: the index names %s, which does not hold it", ipath, it->string,
                           it->valuestring);
        for (int i = 0; i < s->n && rc == 0; i++)
            if (i != fi && (e = tri_st_layout_find(&s->files[i].layout, it->string)) >= 0)
                rc = tri_error("%s: tensor %s is in both %s and %s", ipath, it->string, s->files[fi].path,
                               s->files[i].path);
    }
    /* and no tensor the index does not list */
    for (int i = 0; i < s->n && rc == 0; i++)
        for (size_t e = 0; e < s->files[i].layout.n && rc == 0; e++)
            if (!cJSON_GetObjectItemCaseSensitive(map, s->files[i].layout.entries[e].name))
                rc = tri_error("%s: tensor %s is not in %s's weight_map", s->files[i].path,
                               s->files[i].layout.entries[e].name, ipath);
    free(names);
    cJSON_Delete(root);
    if (rc != 0) set_close(s);
    return rc;
}

/* Buffers Hugging Face saved with some older models, not parameters:
 * GPT-2's causal mask (attn.bias, attn.masked_bias) and Llama's
 * rotary_emb.inv_freq (recomputed from rope_theta). */
static int is_buffer(const char *name) {
    static const char *suffix[] = {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
        size_t k = strlen(suffix[i]);
        if (n > k && strcmp(name + n - k, suffix[i]) == 0) return 1;
    }
    return 0;
}

/* Every tensor of the model in s with its shape; nothing else in s. */
static int check_tensors(const char *dir, const tri_st_set *s, const tri_model_cfg *cfg) {
    tri_st_layout L;
    tri_st_layout_init(&L);
    if (tri_model_layout(cfg, &L) != 0) return -1;
    int bad = 0;
    const char *what = cfg->arch == TRI_ARCH_LLAMA ? "Llama" : "GPT-2";
    char want[128], got[128];
    for (size_t i = 0; i < L.n; i++) {
        const tri_st_entry *x = &L.entries[i];
        int e, fi = tri_st_set_find(s, x->name, &e);
        fmt_shape(want, sizeof want, x->ndim, x->shape);
        if (fi < 0) {
            if (bad++ < HF_MAX_LISTED)
                tri_error("%s: tensor %s is missing (expected shape %s)%s", dir, x->name, want,
                          strcmp(x->name, "lm_head.weight") == 0
                              ? ": the run's model has an LM head of its own (model.tie_embeddings false)"
                              : "");
            continue;
        }
        const tri_st_entry *y = &s->files[fi].layout.entries[e];
        int same = y->ndim == x->ndim;
        for (int d = 0; same && d < x->ndim; d++) same = y->shape[d] == x->shape[d];
        if (!same && bad++ < HF_MAX_LISTED) {
            fmt_shape(got, sizeof got, y->ndim, y->shape);
            tri_error("%s: tensor %s has shape %s, the run's model expects %s", s->files[fi].path, y->name, got, want);
        }
    }
    for (int i = 0; i < s->n; i++)
        for (size_t e = 0; e < s->files[i].layout.n; e++) {
            const tri_st_entry *y = &s->files[i].layout.entries[e];
            char full[160];
            snprintf(full, sizeof full, "%s%s",
                     s->gpt2_bare && strncmp(y->name, "transformer.", 12) != 0 && strncmp(y->name, "lm_head.", 8) != 0
                         ? "transformer."
                         : "",
                     y->name);
            if (tri_st_layout_find(&L, full) >= 0 || is_buffer(y->name)) continue;
            if (bad++ < HF_MAX_LISTED) {
                fmt_shape(got, sizeof got, y->ndim, y->shape);
                tri_error("%s: unexpected tensor %s %s: the run's %s model has no such parameter%s", s->files[i].path,
                          y->name, got, what,
                          strcmp(y->name, "lm_head.weight") == 0 ? " (its LM head is the token embedding: tied)" : "");
            }
        }
    if (bad > HF_MAX_LISTED) tri_error("%s: and %d more tensor mismatches", dir, bad - HF_MAX_LISTED);
    tri_st_layout_free(&L);
    return bad ? -1 : 0;
}

typedef struct key_check {
    const char *key;
    double want; /* the run's value */
    const char *run_key;
} key_check;

/* A number of config.json against the run's: absent keys take HF's default
 * `dflt` (NAN: required). `rel` > 0: a relative tolerance (eps, theta). */
static int check_num(const cJSON *c, const char *path, const key_check *k, double dflt, double rel) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, k->key);
    double x = cJSON_IsNumber(v) ? v->valuedouble : dflt;
    if (v && !cJSON_IsNumber(v) && !cJSON_IsNull(v)) return tri_error("%s: %s: expected a number", path, k->key);
    if (isnan(x)) return tri_error("%s: %s is missing (the run's %s is %.9g)", path, k->key, k->run_key, k->want);
    int same = rel > 0 ? fabs(x - k->want) <= rel * fabs(k->want) : x == k->want;
    if (!same) return tri_error("%s: %s is %.9g, but the run's %s is %.9g", path, k->key, x, k->run_key, k->want);
    return 0;
}

static int check_str(const cJSON *c, const char *path, const char *key, const char *want, const char *dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    const char *x = cJSON_IsString(v) ? v->valuestring : dflt;
    if (!x || strcmp(x, want) != 0)
        return tri_error("%s: %s is \"%s\": Trident's model needs \"%s\"", path, key, x ? x : "(not a string)", want);
    return 0;
}

static int check_false(const cJSON *c, const char *path, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    if (v && !cJSON_IsFalse(v) && !cJSON_IsNull(v))
        return tri_error("%s: %s is not false: Trident's Llama has no biases", path, key);
    return 0;
}

/* config.json against the run's model config, key by key. */
static int check_config(const char *dir, const tri_model_cfg *cfg) {
    char path[TRI_CKPT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = tri_slurp(path, "Hugging Face config", (size_t)16 << 20, NULL);
    if (!text) return -1;
    cJSON *c = cJSON_Parse(text);
    free(text);
    if (!c) return tri_error("%s: not valid JSON", path);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c, "model_type");
    const char *type = cJSON_IsString(mt) ? mt->valuestring : NULL;
    int llama = cfg->arch == TRI_ARCH_LLAMA;
    int rc = 0;
    if (!type || strcmp(type, llama ? "llama" : "gpt2") != 0) {
        rc = tri_error("%s: model_type is %s%s%s, but the run's model.arch is %s (\"%s\" directories only)", path,
                       type ? "\"" : "", type ? type : "missing", type ? "\"" : "", llama ? "llama" : "gpt2",
                       llama ? "llama" : "gpt2");
    } else if (llama) {
        double nan = NAN, C = cfg->n_embd, NH = cfg->n_head;
        const key_check k[] = {
            {"hidden_size", C, "model.n_embd"},
            {"num_attention_heads", NH, "model.n_head"},
            {"num_hidden_layers", cfg->n_layer, "model.n_layer"},
            {"vocab_size", cfg->vocab_size, "model.vocab_size"},
            {"intermediate_size", tri_model_ffn_hidden(cfg), "model.ffn_hidden"},
            {"num_key_value_heads", tri_model_n_kv_head(cfg), "model.n_kv_head"},
            {"head_dim", C / NH, "head size (model.n_embd / model.n_head)"},
            {"rms_norm_eps", cfg->norm_eps > 0 ? cfg->norm_eps : 1e-5, "model.norm_eps"},
        };
        double dflt[] = {nan, nan, nan, nan, nan, NH, C / NH, 1e-6};
        for (size_t i = 0; i < sizeof k / sizeof k[0] && rc == 0; i++)
            rc = check_num(c, path, &k[i], dflt[i], i >= 7 ? 1e-6 : 0);
        const cJSON *tie = cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings");
        int tied = cJSON_IsBool(tie) ? cJSON_IsTrue(tie) : 0;
        if (rc == 0 && tied != tri_model_tied(cfg))
            rc = tri_error("%s: tie_word_embeddings is %s, but the run's model.tie_embeddings is %s", path,
                           tied ? "true" : "false", tied ? "false" : "true");
        const cJSON *mp = cJSON_GetObjectItemCaseSensitive(c, "max_position_embeddings");
        if (rc == 0 && cJSON_IsNumber(mp) && mp->valuedouble < cfg->seq_len)
            rc = tri_error("%s: max_position_embeddings is %.9g, below the run's model.seq_len %d", path,
                           mp->valuedouble, cfg->seq_len);
        if (rc == 0) rc = check_str(c, path, "hidden_act", "silu", "silu");
        if (rc == 0) rc = check_false(c, path, "attention_bias");
        if (rc == 0) rc = check_false(c, path, "mlp_bias");
        if (rc == 0) {
            /* rope_theta and rope_scaling (top-level, or transformers 5's
             * rope_parameters): parsed as config.json readers do, then compared */
            tri_model_cfg hf = *cfg;
            char *s = cJSON_PrintUnformatted(c);
            rc = s && tri_hf_config_parse(s, path, &hf) == 0 ? 0 : -1;
            free(s);
            double theta = cfg->rope_theta > 0 ? cfg->rope_theta : 10000.0;
            if (rc == 0 && !(fabs(hf.rope_theta - theta) <= 1e-6 * theta))
                rc = tri_error("%s: rope_theta is %.9g, but the run's model.rope_theta is %.9g", path, hf.rope_theta,
                               theta);
            if (rc == 0 && (hf.rope_scaling_factor != cfg->rope_scaling_factor ||
                            (cfg->rope_scaling_factor > 0 && (hf.rope_low_freq_factor != cfg->rope_low_freq_factor ||
                                                              hf.rope_high_freq_factor != cfg->rope_high_freq_factor ||
                                                              hf.rope_original_seq_len != cfg->rope_original_seq_len))))
                rc = tri_error("%s: rope_scaling (factor %g, low/high frequency factors %g/%g, original length %d) "
                               "differs from the run's model.rope_scaling_factor %g, rope_low_freq_factor %g, "
                               "rope_high_freq_factor %g, rope_original_seq_len %d",
                               path, hf.rope_scaling_factor, hf.rope_low_freq_factor, hf.rope_high_freq_factor,
                               hf.rope_original_seq_len, cfg->rope_scaling_factor, cfg->rope_low_freq_factor,
                               cfg->rope_high_freq_factor, cfg->rope_original_seq_len);
        }
    } else {
        double nan = NAN, C = cfg->n_embd;
        const key_check k[] = {
            {"n_embd", C, "model.n_embd"},
            {"n_head", cfg->n_head, "model.n_head"},
            {"n_layer", cfg->n_layer, "model.n_layer"},
            {"vocab_size", cfg->vocab_size, "model.vocab_size"},
            {"n_positions", cfg->seq_len, "model.seq_len"},
            {"n_inner", 4 * C, "MLP width (4 * model.n_embd)"},
            {"layer_norm_epsilon", 1e-5, "LayerNorm epsilon"},
        };
        double dflt[] = {nan, nan, nan, nan, nan, 4 * C, 1e-5};
        for (size_t i = 0; i < sizeof k / sizeof k[0] && rc == 0; i++)
            rc = check_num(c, path, &k[i], dflt[i], i == 6 ? 1e-6 : 0);
        if (rc == 0) rc = check_str(c, path, "activation_function", "gelu_new", "gelu_new");
        const cJSON *tie = cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings");
        if (rc == 0 && cJSON_IsFalse(tie))
            rc = tri_error("%s: tie_word_embeddings is false: Trident's GPT-2 ties its LM head to wte", path);
    }
    cJSON_Delete(c);
    return rc;
}

static int agree(tri_dist *d, int failed) {
    if (!d) return failed ? -1 : 0;
    tri_comm_allreduce_host(&d->world, &failed, 1, TRI_I32, TRI_MAX);
    return failed ? -1 : 0;
}

int tri_model_import(const char *dir, tri_gpt *g, tri_optim *o, tri_dist *d, int verbose) {
    int rank = d ? d->mesh.rank : 0;
    tri_st_set s;
    int failed = 0;
    if (rank == 0) {
        failed = check_config(dir, &g->cfg) != 0;
        if (!failed) failed = set_open(dir, &s) != 0;
        if (!failed) {
            s.gpt2_bare = g->cfg.arch == TRI_ARCH_GPT2;
            failed = check_tensors(dir, &s, &g->cfg) != 0;
            if (!failed && verbose) {
                size_t n = 0;
                for (int i = 0; i < s.n; i++) n += s.files[i].layout.n;
                tri_log_note("init from %s: %zu tensors in %d file%s match the run's model", dir, n, s.n,
                             s.n == 1 ? "" : "s");
            }
            set_close(&s);
        }
    }
    if (agree(d, failed) != 0) return -1;
    failed = set_open(dir, &s) != 0;
    if (!failed) {
        s.gpt2_bare = g->cfg.arch == TRI_ARCH_GPT2;
        failed = tri_model_read_set(&s, g, o) != 0;
        set_close(&s);
    }
    return agree(d, failed);
}
