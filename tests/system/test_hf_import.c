/* `trident train --init-from DIR` and `trident eval` of Hugging Face
 * directories, without transformers (tests/scripts/test_hf_roundtrip.py
 * checks the same against transformers itself, where it can be installed).
 *
 * The directories are made here from a trained checkpoint's model.safetensors
 * (HF names and layouts): re-split into shards with a
 * model.safetensors.index.json as save_pretrained writes them, GPT-2 names
 * without their "transformer." prefix as the original GPT-2 files have them,
 * with an old transformers' buffer added, or broken on purpose. The reference
 * is `trident eval` of the checkpoint itself: the same fp32 values, so the
 * same loss to the last bit. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"
#include "model/ckpt/safetensors.h"

#define LLAMA "--set model.arch=llama --set model.n_head=4 --set model.n_kv_head=2 --set model.ffn_hidden=64"

static int train(const char *dir, const char *name, const char *extra, char **out) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "%s train %s/configs/tiny-test.json --threads 1 --set data.train=%s/train.bin --set data.val=%s/val.bin "
             "--set checkpoint.dir=%s/%s --set log.dir=%s/log_%s %s",
             tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir, name, dir, name, extra);
    return tt_run(cmd, out);
}

static char *make_run_dir(void) {
    char *dir = tt_mkdtemp();
    char p[4200];
    snprintf(p, sizeof p, "%s/train.bin", dir);
    tt_write_llmc_random(p, 20000, 256, 1);
    snprintf(p, sizeof p, "%s/val.bin", dir);
    tt_write_llmc_random(p, 4000, 256, 2);
    return dir;
}

static double eval_loss(const char *dir, const char *ckpt) {
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s eval --ckpt %s --data %s/val.bin --batches 2 --batch 2 --json --threads 1",
             tt_bin("trident"), ckpt, dir);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    char *p = strstr(out, "\"loss\":");
    cr_assert(p, "%s", out);
    double l = strtod(p + 7, NULL);
    free(out);
    return l;
}

/* The step dir under dir/name (its latest). */
static void step_dir(const char *dir, const char *name, char *buf, size_t n) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s/latest", dir, name);
    char *l = tt_read(p);
    cr_assert_not_null(l);
    l[strcspn(l, "\n")] = '\0';
    snprintf(buf, n, "%s/%s/%s", dir, name, l);
    free(l);
}

typedef struct shard_opts {
    int shards;       /* 0: one model.safetensors, no index */
    const char *drop; /* a tensor left out */
    const char *add;  /* an extra tensor (a copy of the first one) under this name */
    int strip_gpt2;   /* names without "transformer." */
    int index_lies;   /* the index names the wrong shard for the first tensor */
} shard_opts;

/* Writes the HF directory out/ from step dir src: config.json and the
 * tensors of src/model.safetensors as o says. */
static void make_hf(const char *src, const char *out, const shard_opts *o) {
    char p[4400], q[4400];
    snprintf(p, sizeof p, "mkdir -p %s && cp %s/config.json %s/", out, src, out);
    cr_assert_eq(tt_run(p, NULL), 0);
    tri_st_file in;
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    cr_assert_eq(tri_st_open(&in, p), 0);
    int S = o->shards > 0 ? o->shards : 1;
    tri_st_layout L[8];
    int *where = calloc(in.layout.n + 1, sizeof *where);
    for (int s = 0; s < S; s++) tri_st_layout_init(&L[s]);
    char name[256];
    size_t n_out = 0;
    for (size_t e = 0; e <= in.layout.n; e++) {
        const tri_st_entry *x = &in.layout.entries[e < in.layout.n ? e : 0];
        if (e == in.layout.n && !o->add) break;
        const char *nm = e == in.layout.n ? o->add : x->name;
        if (o->drop && strcmp(nm, o->drop) == 0) {
            where[e] = -1;
            continue;
        }
        if (o->strip_gpt2 && strncmp(nm, "transformer.", 12) == 0) nm += 12;
        snprintf(name, sizeof name, "%s", nm);
        where[e] = (int)(n_out++ % (size_t)S);
        cr_assert(tri_st_layout_add_dtype(&L[where[e]], name, x->dtype, x->ndim, x->shape) >= 0);
    }
    FILE *idx = NULL;
    if (o->shards > 0) {
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", out);
        idx = fopen(p, "w");
        cr_assert_not_null(idx);
        fprintf(idx, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    }
    int first = 1;
    for (int s = 0; s < S; s++) {
        char file[64];
        if (o->shards > 0)
            snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", s + 1, S);
        else
            snprintf(file, sizeof file, "model.safetensors");
        snprintf(q, sizeof q, "%s/%s", out, file);
        cr_assert_eq(tri_st_create(q, &L[s], "{\"format\": \"pt\"}"), 0);
        FILE *f = fopen(q, "r+");
        cr_assert_not_null(f);
        for (size_t e = 0; e <= in.layout.n; e++) {
            if (e == in.layout.n && !o->add) break;
            if (where[e] != s) continue;
            const tri_st_entry *x = &in.layout.entries[e < in.layout.n ? e : 0];
            const char *nm = e == in.layout.n ? o->add : x->name;
            if (o->strip_gpt2 && strncmp(nm, "transformer.", 12) == 0) nm += 12;
            float *buf = malloc(x->rows * x->cols * sizeof(float));
            tri_st_piece pc = {0, 0, x->rows, x->cols, buf, x->cols, 0};
            cr_assert_eq(tri_st_read_piece(in.fd, &in.layout, (int)(e < in.layout.n ? e : 0), &pc), 0);
            cr_assert_eq(tri_st_write_piece(fileno(f), &L[s], tri_st_layout_find(&L[s], nm), &pc), 0);
            free(buf);
            if (idx) {
                int lie = o->index_lies && first;
                fprintf(idx, "%s\"%s\": \"model-%05d-of-%05d.safetensors\"", first ? "" : ", ", nm,
                        (lie ? (s + 1) % S : s) + 1, S);
                first = 0;
            }
        }
        fclose(f);
        tri_st_layout_free(&L[s]);
    }
    if (idx) {
        fprintf(idx, "}}\n");
        fclose(idx);
    }
    free(where);
    tri_st_close(&in);
}

/* train --init-from hf with `extra`: the exit code, the output in *out. */
static int init_from(const char *dir, const char *hf, const char *name, const char *extra, char **out) {
    char ex[8192];
    snprintf(ex, sizeof ex, "--init-from %s --set train.steps=0 %s", hf, extra);
    return train(dir, name, ex, out);
}

static void expect_refused(const char *dir, const char *hf, const char *name, const char *extra, const char *msg) {
    char *out = NULL;
    int rc = init_from(dir, hf, name, extra, &out);
    cr_expect_eq(rc, 2, "%s: exit %d\n%s", name, rc, out);
    cr_expect(strstr(out, msg) != NULL, "%s: expected \"%s\" in:\n%s", name, msg, out);
    free(out);
}

Test(hf_import, llama_directories_whole_sharded_and_at_tp2_give_the_checkpoints_loss, .timeout = 240) {
    char *dir = make_run_dir(), *out = NULL, src[4400], hf[4400], ck[4400];
    cr_assert_eq(train(dir, "ck", LLAMA " --set train.steps=8 --set train.lr=1e-2", &out), 0, "%s", out);
    free(out);
    step_dir(dir, "ck", src, sizeof src);
    double ref = eval_loss(dir, src);
    /* a copy with config.json and model.safetensors only: an HF directory */
    snprintf(hf, sizeof hf, "%s/hf_whole", dir);
    make_hf(src, hf, &(shard_opts){0});
    cr_expect(eval_loss(dir, hf) == ref, "whole: %.17g vs %.17g", eval_loss(dir, hf), ref);
    /* 3 shards and an index, and an old transformers' rotary buffer (ignored) */
    snprintf(hf, sizeof hf, "%s/hf_sharded", dir);
    make_hf(src, hf, &(shard_opts){.shards = 3, .add = "model.layers.0.self_attn.rotary_emb.inv_freq"});
    double sh = eval_loss(dir, hf);
    cr_expect(sh == ref, "sharded: %.17g vs %.17g", sh, ref);
    /* --init-from the shards at tp2 (each rank its slices), 0 steps: the
     * checkpoint it writes is the same model */
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd %s && %s --log-dir %s/ranks -- %s train %s/configs/tiny-test.json --threads 1 --set "
             "data.train=%s/train.bin "
             "--set data.val=%s/val.bin --set checkpoint.dir=%s/tp2 --set log.dir=%s/log_tp2 " LLAMA
             " --set parallel.tp=2 --set train.steps=0 --init-from %s",
             dir, tt_bin("tridentrun"), dir, tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, dir, dir, hf);
    cr_assert_eq(tt_run(cmd, &out), 0, "%s", out);
    free(out);
    step_dir(dir, "tp2", ck, sizeof ck);
    double tp2 = eval_loss(dir, ck);
    cr_expect(tp2 == ref, "init-from at tp2: %.17g vs %.17g", tp2, ref);
    tt_rmrf(dir);
    free(dir);
}

Test(hf_import, bad_directories_are_refused_naming_the_tensor_or_key, .timeout = 240) {
    char *dir = make_run_dir(), *out = NULL, src[4400], hf[4400];
    cr_assert_eq(train(dir, "ck", LLAMA " --set train.steps=1", &out), 0, "%s", out);
    free(out);
    step_dir(dir, "ck", src, sizeof src);
    snprintf(hf, sizeof hf, "%s/hf_drop", dir);
    make_hf(src, hf, &(shard_opts){.shards = 2, .drop = "model.layers.1.mlp.up_proj.weight"});
    expect_refused(dir, hf, "r1", LLAMA,
                   "tensor model.layers.1.mlp.up_proj.weight is missing (expected shape [64, 32])");
    snprintf(hf, sizeof hf, "%s/hf_extra", dir);
    make_hf(src, hf, &(shard_opts){.add = "model.layers.0.self_attn.q_proj.bias"});
    expect_refused(dir, hf, "r2", LLAMA, "unexpected tensor model.layers.0.self_attn.q_proj.bias");
    snprintf(hf, sizeof hf, "%s/hf_lie", dir);
    make_hf(src, hf, &(shard_opts){.shards = 2, .index_lies = 1});
    expect_refused(dir, hf, "r3", LLAMA, "the index names model-00002-of-00002.safetensors, which does not hold it");
    /* config.json against the run's config, naming the key and both numbers */
    snprintf(hf, sizeof hf, "%s/hf_whole", dir);
    make_hf(src, hf, &(shard_opts){0});
    expect_refused(dir, hf, "r4", LLAMA " --set model.n_layer=3",
                   "num_hidden_layers is 2, but the run's model.n_layer is 3");
    expect_refused(dir, hf, "r5", LLAMA " --set model.n_kv_head=1",
                   "num_key_value_heads is 2, but the run's model.n_kv_head is 1");
    expect_refused(dir, hf, "r6", "", "model_type is \"llama\", but the run's model.arch is gpt2");
    expect_refused(dir, hf, "r7", LLAMA " --set model.tie_embeddings=true",
                   "tie_word_embeddings is false, but the run's model.tie_embeddings is true");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/hf_none && cp %s/config.json %s/hf_none/", dir, src, dir);
    cr_assert_eq(tt_run(cmd, NULL), 0);
    snprintf(hf, sizeof hf, "%s/hf_none", dir);
    expect_refused(dir, hf, "r8", LLAMA, "neither model.safetensors nor model.safetensors.index.json");
    snprintf(hf, sizeof hf, "%s/hf_whole", dir);
    expect_refused(dir, hf, "r9", LLAMA " --resume", "--init-from starts a new run and --resume continues one");
    tt_rmrf(dir);
    free(dir);
}

Test(hf_import, gpt2_directories_with_or_without_the_transformer_prefix, .timeout = 240) {
    char *dir = make_run_dir(), *out = NULL, src[4400], hf[4400], ck[4400];
    cr_assert_eq(train(dir, "ck", "--set train.steps=8 --set train.lr=1e-2", &out), 0, "%s", out);
    free(out);
    step_dir(dir, "ck", src, sizeof src);
    double ref = eval_loss(dir, src);
    /* the original GPT-2 files' names (h.0..., wte) with their causal-mask buffer */
    snprintf(hf, sizeof hf, "%s/hf_bare", dir);
    make_hf(src, hf, &(shard_opts){.shards = 2, .strip_gpt2 = 1, .add = "transformer.h.0.attn.bias"});
    double bare = eval_loss(dir, hf);
    cr_expect(bare == ref, "bare names: %.17g vs %.17g", bare, ref);
    cr_assert_eq(init_from(dir, hf, "g1", "", &out), 0, "%s", out);
    free(out);
    step_dir(dir, "g1", ck, sizeof ck);
    cr_expect(eval_loss(dir, ck) == ref);
    expect_refused(dir, hf, "g2", "--set model.n_embd=64", "n_embd is 32, but the run's model.n_embd is 64");
    tt_rmrf(dir);
    free(dir);
}
