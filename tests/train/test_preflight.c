/* The preflight's figures (src/train/preflight.h) against independent ones: the
 * activation and parameter bytes against what model/gpt.c really allocates,
 * the per-rank sum by hand, /proc/meminfo and cgroup parsing on literal
 * texts, the refusal message; the data-file fingerprints (data/dataset.h)
 * and their check on resume (src/train/datafiles.h); the divergence hint. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "data/sampler.h"
#include "helpers/testutil.h"
#include "model/gpt.h"
#include "model/runtime.h"
#include "base/size.h"
#include "config/config.h"
#include "train/datafiles.h"
#include "train/preflight.h"

static tri_config tiny(int L, int NH, int C, int T, int V, int tp) {
    tri_config c;
    tri_config_defaults(&c);
    c.model = (tri_model_cfg){.n_layer = L, .n_head = NH, .n_embd = C, .seq_len = T, .vocab_size = V};
    c.parallel.tp = tp;
    return c;
}

/* ---- sizes ---------------------------------------------------------------- */

Test(preflight, rank_bytes_add_params_grads_and_two_moments) {
    tri_mem_estimate e;
    cr_expect_eq(tri_preflight_rank_bytes(1000, 123, 7, 1, &e), 4000 + 4000 + 8000 + 123 + 7);
    cr_expect_eq(e.params, 4000);
    cr_expect_eq(e.grads, 4000);
    cr_expect_eq(e.optim, 8000);
    cr_expect_eq(tri_preflight_rank_bytes(1000, 123, 7, 0, &e), 4000 + 4000 + 123 + 7, "inference: no moments");
    cr_expect_eq(tri_preflight_rank_bytes(SIZE_MAX / 8, 0, 0, 1, &e), SIZE_MAX, "16 bytes a float overflows");
    cr_expect_eq(tri_preflight_rank_bytes(10, SIZE_MAX - 100, 0, 1, &e), SIZE_MAX);
}

/* the estimate of parameters and activations equals what the model and the
 * stage runtime allocate (the context's accounting), for several shapes, TP
 * ranks and recompute policies */
Test(preflight, estimate_matches_what_the_model_allocates) {
    struct {
        int L, NH, C, T, V, tp, tp_rank, B;
        const char *recompute;
    } cases[] = {
        {2, 2, 32, 16, 256, 1, 0, 2, "none"},
        {3, 4, 48, 20, 300, 2, 1, 3, "selective"},
        {1, 6, 96, 33, 1000, 3, 2, 1, "full"},
        {4, 4, 64, 64, 50257, 4, 0, 2, "none"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tri_config c = tiny(cases[k].L, cases[k].NH, cases[k].C, cases[k].T, cases[k].V, cases[k].tp);
        c.train.recompute = (tri_recompute)tri_recompute_parse(cases[k].recompute);
        tri_mem_estimate e;
        cr_assert_eq(tri_preflight_model(&c, (size_t)cases[k].B, cases[k].tp_rank, 0, 0, 1, 0, &e), 0, "case %zu", k);
        tri_ctx ctx;
        cr_assert_eq(tri_ctx_init(&ctx, "cpu", 2), 0);
        tri_comm self;
        tri_comm_init_self(&self, 0);
        tri_gpt g;
        tri_slot_pool pool;
        tri_workspace ws;
        tri_recompute pol = (tri_recompute)tri_recompute_parse(cases[k].recompute);
        cr_assert_eq(tri_gpt_init_single(&g, &c.model, &ctx, &self, cases[k].tp, cases[k].tp_rank), 0);
        cr_assert_eq(tri_slot_pool_init(&pool, &g, 0, (size_t)cases[k].B, (size_t)cases[k].T, pol, 1, 0), 0);
        cr_assert_eq(tri_workspace_init(&ws, &g, (size_t)cases[k].B, (size_t)cases[k].T, pol), 0);
        const tri_mem_stats *m = &ctx.mem;
        cr_expect_eq(e.params, m->bytes[TRI_MEM_PARAMS], "case %zu: params %zu vs %zu", k, e.params,
                     m->bytes[TRI_MEM_PARAMS]);
        size_t acts = m->bytes[TRI_MEM_SAVED] + m->bytes[TRI_MEM_WORKSPACE];
        cr_expect_eq(e.acts, acts, "case %zu: activations %zu vs allocated %zu", k, e.acts, acts);
        cr_expect_eq(e.optim, 2 * e.params);
        cr_expect(e.total > e.params + e.grads + e.optim + e.acts, "the table and batch buffers count too");
        tri_slot_pool_free(&pool, &g);
        tri_workspace_free(&ws, &g);
        tri_gpt_free(&g);
        tri_ctx_free(&ctx);
    }
}

/* under pp = 2 with an uneven parallel.pp_layout, each stage's estimate is
 * its own chunk's parameters and workspace plus 1F1B's min(pp - s, m) saved
 * micro-batches, against what the model and the stage runtime allocate for
 * the hand-written layer ranges */
Test(preflight, estimate_under_pp_counts_the_stage_and_its_slots) {
    tri_config c = tiny(4, 2, 32, 16, 256, 1);
    c.parallel.pp = 2;
    c.train.micro_batch = 2;
    c.train.global_batch = 8; /* m = 4 micro-batches per step */
    snprintf(c.parallel.pp_layout, sizeof c.parallel.pp_layout, "1,3");
    int l0[1] = {0}, l1[3] = {1, 2, 3};
    tri_chunk_spec specs[2] = {{1, l0, 1, 0}, {3, l1, 0, 1}};
    size_t first = 0;
    for (int s = 0; s < 2; s++) {
        tri_mem_estimate e;
        cr_assert_eq(tri_preflight_model(&c, 2, 0, s, 0, 1, 0, &e), 0, "stage %d", s);
        tri_ctx ctx;
        cr_assert_eq(tri_ctx_init(&ctx, "cpu", 2), 0);
        tri_comm self;
        tri_comm_init_self(&self, 0);
        tri_gpt g;
        tri_slot_pool pool;
        tri_workspace ws;
        cr_assert_eq(tri_gpt_init(&g, &c.model, &ctx, &self, 1, 0, &specs[s], 1), 0);
        cr_assert_eq(tri_slot_pool_init(&pool, &g, 0, 2, 16, TRI_RECOMPUTE_NONE, 2 - s, 0), 0);
        cr_assert_eq(tri_workspace_init(&ws, &g, 2, 16, TRI_RECOMPUTE_NONE), 0);
        const tri_mem_stats *m = &ctx.mem;
        cr_expect_eq(e.params, m->bytes[TRI_MEM_PARAMS], "stage %d: params %zu vs %zu", s, e.params,
                     m->bytes[TRI_MEM_PARAMS]);
        size_t acts = m->bytes[TRI_MEM_SAVED] + m->bytes[TRI_MEM_WORKSPACE];
        /* and the pipeline's mailbox (parallel/pipeline.h), which the training
         * estimate counts: whole boundary buffers of B x T x C fp32, at
         * least one (the stage sends to or receives from its neighbour)
         * and at most one per micro-batch and direction */
        size_t box = 2 * 16 * 32 * sizeof(float), extra = e.acts - acts;
        cr_expect(e.acts > acts && extra % box == 0 && extra / box <= 8,
                  "stage %d: activations %zu vs allocated %zu (%d slots) plus whole mailbox buffers of %zu", s, e.acts,
                  acts, 2 - s, box);
        if (s == 0) first = e.acts;
        tri_slot_pool_free(&pool, &g);
        tri_workspace_free(&ws, &g);
        tri_gpt_free(&g);
        tri_ctx_free(&ctx);
    }
    cr_expect_gt(first, 0);
    /* evaluation (training 0) keeps one micro-batch: less than stage 0's two */
    tri_mem_estimate e;
    cr_assert_eq(tri_preflight_model(&c, 2, 0, 0, 0, 0, 0, &e), 0);
    cr_expect_lt(e.acts, first);
    /* a layout that does not fit is refused before anything is estimated */
    snprintf(c.parallel.pp_layout, sizeof c.parallel.pp_layout, "1,2");
    tt_capture cap;
    tt_capture_begin(&cap, "/tmp/tri_preflight_err3.txt");
    int rc = tri_preflight_model(&c, 2, 0, 1, 0, 1, 0, NULL);
    char *err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1);
    cr_expect(strstr(err, "sums to 3 layers, model.n_layer is 4"), "%s", err);
    free(err);
}

/* bf16 and ZeRO-1 change a training estimate as the allocator lays the
 * buffers out: against the model's own tables (tri_gpt_describe's
 * elements per chunk) and the bytes per parameter written out here: fp32
 * 4 + 4 + 8; bf16 2 + 4 + (8 + 4 master); ZeRO-1 over dp: every chunk
 * padded to a multiple of dp x 16 elements, the moments (and master) a 1/dp
 * shard. Activations in bf16 take less than in fp32. */
Test(preflight, estimate_follows_precision_and_zero) {
    tri_config c = tiny(3, 4, 48, 20, 300, 1);
    c.parallel.dp = 2;
    c.train.micro_batch = 2;
    c.train.global_batch = 8;
    int layers[3] = {0, 1, 2};
    tri_chunk_spec spec = {3, layers, 1, 1};
    tri_gpt g;
    cr_assert_eq(tri_gpt_describe(&g, &c.model, 1, 0, &spec, 1), 0);
    size_t n = tri_gpt_local_elems(&g);
    size_t unit = 2 * 16, padded = 0;
    for (int k = 0; k < g.n_chunks; k++) padded += (g.chunks[k].n_elems + unit - 1) / unit * unit;
    tri_gpt_free(&g);
    cr_assert_gt(padded, n, "300 x 48 and the layers are not all multiples of 32 elements");

    tri_mem_estimate f32, b16, z1, bz1;
    cr_assert_eq(tri_preflight_model(&c, 2, 0, 0, 0, 1, 0, &f32), 0);
    cr_expect_eq(f32.params, 4 * n);
    cr_expect_eq(f32.grads, 4 * n);
    cr_expect_eq(f32.optim, 8 * n);

    c.train.precision = (tri_dtype)tri_precision_parse("bf16");
    cr_assert_eq(tri_preflight_model(&c, 2, 0, 0, 0, 1, 0, &b16), 0);
    cr_expect_eq(b16.params, 2 * n, "bf16 parameters: %zu bytes for %zu elements", b16.params, n);
    cr_expect_eq(b16.grads, 4 * n, "gradients stay fp32");
    cr_expect_eq(b16.optim, 12 * n, "two fp32 moments and fp32 master weights");
    cr_expect_lt(b16.acts, f32.acts, "bf16 activations: %zu vs fp32 %zu", b16.acts, f32.acts);
    cr_expect_eq(b16.other, f32.other);
    cr_expect_eq(b16.total, b16.params + b16.grads + b16.optim + b16.acts + b16.other);

    c.parallel.zero = 1;
    cr_assert_eq(tri_preflight_model(&c, 2, 0, 0, 0, 1, 0, &bz1), 0);
    cr_expect_eq(bz1.params, 2 * padded);
    cr_expect_eq(bz1.grads, 4 * padded);
    cr_expect_eq(bz1.optim, padded / 2 * 12, "bf16 ZeRO-1 over 2: %zu vs %zu", bz1.optim, padded / 2 * 12);

    c.train.precision = (tri_dtype)tri_precision_parse("fp32");
    cr_assert_eq(tri_preflight_model(&c, 2, 0, 0, 0, 1, 0, &z1), 0);
    cr_expect_eq(z1.params, 4 * padded);
    cr_expect_eq(z1.grads, 4 * padded);
    cr_expect_eq(z1.optim, padded / 2 * 8, "fp32 ZeRO-1 over 2: %zu vs %zu", z1.optim, padded / 2 * 8);
    cr_expect_eq(z1.acts, f32.acts, "ZeRO does not change the activations");
    cr_expect_lt(z1.total, f32.total);

    /* the refusal names the figures of the estimate in use: the bf16 one */
    tri_mem_avail a = {b16.total - 1, SIZE_MAX, SIZE_MAX, b16.total - 1, 0};
    char want[32];
    tri_size_human(want, 32, (double)b16.params);
    tt_capture cap;
    tt_capture_begin(&cap, "/tmp/tri_preflight_err5.txt");
    int rc = tri_preflight_check_memory(&b16, 1, &a);
    char *err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1);
    char part[64];
    snprintf(part, sizeof part, "parameters %s", want);
    cr_expect(strstr(err, part) && strstr(err, "--skip-memory-check"), "%s", err);
    free(err);
}

/* Context parallelism: a CP rank holds its parameters whole (the position
 * embedding has all seq_len rows) and the activations of seq_len / cp
 * positions, plus the ring's buffers, in closed form: b s (2 A KVW + 4 (3 KVW
 * + C + QKV)) bytes with KVW = 2 C (two key/value blocks in the activation
 * dtype; three fp32 key/value gradients, the fp32 output and qkv gradient).
 * A rank's own address-space limit refuses it, naming the limit and cp. */
Test(preflight, context_parallel_holds_seq_len_over_cp_and_a_rank_limit_refuses) {
    tri_config c = tiny(2, 4, 64, 64, 256, 1), h = tiny(2, 4, 64, 32, 256, 1);
    tri_mem_estimate one, cp2, half;
    cr_assert_eq(tri_preflight_model(&c, 2, 0, 0, 0, 1, 0, &one), 0);
    cr_assert_eq(tri_preflight_model(&h, 2, 0, 0, 0, 1, 0, &half), 0);
    c.parallel.cp = 2;
    cr_assert_eq(tri_preflight_model(&c, 2, 0, 0, 0, 1, 0, &cp2), 0);
    cr_expect_eq(cp2.params, one.params);
    cr_expect_eq(cp2.optim, one.optim);
    const size_t bs = 2 * 32, KVW = 2 * 64, ring = bs * (2 * 4 * KVW + 4 * (3 * KVW + 64 + 3 * 64));
    cr_expect_eq(cp2.acts, half.acts + ring, "cp2 %zu, seq_len/2 %zu + ring %zu", cp2.acts, half.acts, ring);
    cr_expect_lt(cp2.acts, one.acts);
    tri_mem_avail a = {SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX, cp2.total};
    cr_expect_eq(tri_preflight_check_memory(&cp2, 4, &a), 0, "at the limit: fits");
    a.as_limit = cp2.total - 1;
    tt_capture cap;
    tt_capture_begin(&cap, "/tmp/tri_preflight_err_as.txt");
    int rc = tri_preflight_check_memory(&cp2, 4, &a);
    char *err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1);
    cr_expect(strstr(err, "address-space limit") && strstr(err, "parallel.cp") && strstr(err, "--skip-memory-check"),
              "%s", err);
    free(err);
}

Test(preflight, sizes_that_overflow_are_refused_naming_the_keys) {
    tt_capture cap;
    tri_config c = tiny(2, 2, 1000000000, 16, 256, 1);
    tt_capture_begin(&cap, "/tmp/tri_preflight_err1.txt");
    int rc = tri_preflight_model(&c, 2, 0, 0, 0, 1, 0, NULL);
    char *err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1);
    cr_expect(strstr(err, "model.n_embd") && strstr(err, "model.n_layer") && strstr(err, "overflows"), "%s", err);
    free(err);
    /* the logits of 7 x 2^31 positions over 2e9 tokens (the attention's
     * T x T scores, which once overflowed here with 256 tokens, are gone) */
    c = tiny(2, 2, 32, 2147483582, 2000000000, 1);
    tt_capture_begin(&cap, "/tmp/tri_preflight_err2.txt");
    rc = tri_preflight_model(&c, 7, 0, 0, 0, 1, 0, NULL);
    err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1);
    cr_expect(strstr(err, "model.seq_len") && strstr(err, "train.micro_batch 7"), "%s", err);
    free(err);
}

Test(preflight, checkpoint_bytes_cover_both_files) {
    tri_config c = tiny(4, 4, 64, 32, 1000, 1);
    size_t n = tri_gpt_num_params(&c.model), b = tri_preflight_checkpoint_bytes(&c.model);
    cr_expect(b >= 12 * n && b <= 12 * n + ((size_t)1 << 20), "%zu bytes for %zu parameters", b, n);
    c = tiny(2000000000, 4, 2000000000, 32, 1000, 1);
    cr_expect_eq(tri_preflight_checkpoint_bytes(&c.model), SIZE_MAX);
}

/* ---- available memory ------------------------------------------------------ */

Test(preflight, meminfo_and_cgroup_texts) {
    size_t v = 0;
    cr_expect_eq(tri_preflight_parse_meminfo("MemTotal:       24000000 kB\nMemFree:  100 kB\n"
                                             "MemAvailable:   12345678 kB\nBuffers: 1 kB\n",
                                             &v),
                 0);
    cr_expect_eq(v, (size_t)12345678 * 1024);
    cr_expect_eq(tri_preflight_parse_meminfo("MemTotal: 1 kB\nMemFree: 1 kB\n", &v), -1, "no MemAvailable");
    cr_expect_eq(tri_preflight_parse_meminfo("XMemAvailable: 5 kB\n", &v), -1, "not at a line start");
    cr_expect_eq(tri_preflight_parse_cgroup("max\n", &v), 0);
    cr_expect_eq(v, SIZE_MAX);
    cr_expect_eq(tri_preflight_parse_cgroup("8589934592\n", &v), 0);
    cr_expect_eq(v, (size_t)8 << 30);
    cr_expect_eq(tri_preflight_parse_cgroup("lots\n", &v), -1);
    tri_mem_avail a;
    tri_preflight_available(&a);
    cr_expect(a.available <= a.meminfo && a.available <= a.cg_free);
    cr_expect(a.meminfo != SIZE_MAX, "this machine has /proc/meminfo");
}

Test(preflight, memory_refusal_gives_both_figures_and_the_override) {
    tri_mem_estimate e;
    tri_preflight_rank_bytes((size_t)1 << 28, (size_t)1 << 30, 0, 1, &e); /* 4 GiB + 1 GiB */
    tri_mem_avail a = {(size_t)3 << 30, SIZE_MAX, SIZE_MAX, (size_t)3 << 30, 0};
    tt_capture cap;
    tt_capture_begin(&cap, "/tmp/tri_preflight_err3.txt");
    int rc = tri_preflight_check_memory(&e, 1, &a);
    char *err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1);
    cr_expect(strstr(err, "5.00 GiB") && strstr(err, "3.00 GiB") && strstr(err, "--skip-memory-check"), "%s", err);
    cr_expect(strchr(err, '\n') == err + strlen(err) - 1, "one line: %s", err);
    free(err);
    a.available = a.meminfo = (size_t)6 << 30;
    cr_expect_eq(tri_preflight_check_memory(&e, 1, &a), 0);
    tt_capture_begin(&cap, "/tmp/tri_preflight_err4.txt");
    rc = tri_preflight_check_memory(&e, 2, &a); /* two ranks on this machine: 10 GiB */
    err = tt_capture_end(&cap);
    cr_expect_eq(rc, -1);
    cr_expect(strstr(err, "2 ranks") && strstr(err, "10.00 GiB"), "%s", err);
    free(err);
    a.available = a.meminfo = SIZE_MAX; /* unknown: not refused */
    cr_expect_eq(tri_preflight_check_memory(&e, 1, &a), 0);
}

/* ---- the divergence hint ---------------------------------------------------- */

Test(preflight, divergence_hint_names_the_settings_that_can_cause_it) {
    tri_config c;
    tri_config_defaults(&c);
    char h[1024];
    tri_preflight_divergence_hint(&c, 5, h, sizeof h);
    cr_expect(strstr(h, "train.lr = 0.001") != NULL, "%s", h);
    cr_expect(strstr(h, "beta") == NULL && strstr(h, "grad_clip") == NULL, "defaults are not blamed: %s", h);
    c.train.beta2 = 0.9999;
    c.train.grad_clip = 0;
    tri_preflight_divergence_hint(&c, 5, h, sizeof h);
    cr_expect(strstr(h, "train.beta2 = 0.9999") && strstr(h, "train.grad_clip = 0"), "%s", h);
    c.train.beta2 = 0.95;
    c.train.beta1 = 0.99; /* 0.99^2 > 0.95 */
    tri_preflight_divergence_hint(&c, 5, h, sizeof h);
    cr_expect(strstr(h, "train.beta1 = 0.99") && strstr(h, "sqrt(train.beta2)"), "%s", h);
    c.train.beta1 = 0.9;
    c.train.lr = 10;
    c.train.weight_decay = 0.5;
    tri_preflight_divergence_hint(&c, 5, h, sizeof h);
    cr_expect(strstr(h, "weight_decay") != NULL, "lr x wd = 5: %s", h);
    tri_preflight_divergence_hint(&c, 0, h, sizeof h);
    cr_expect(strstr(h, "No update") && !strstr(h, "train.lr"), "before any update: %s", h);
}

/* ---- data-file fingerprints ------------------------------------------------- */

static uint64_t fp_of(const char *path) {
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, path, 0), 0, "%s", path);
    uint64_t fp = ds.bin_fingerprint;
    tri_dataset_close(&ds);
    return fp;
}

/* one byte of a file at offset off replaced by v */
static void poke(const char *path, long off, unsigned char v) {
    FILE *f = fopen(path, "r+b");
    cr_assert(f);
    fseek(f, off, SEEK_SET);
    fputc(v, f);
    fclose(f);
}

Test(datafiles, fingerprint_follows_contents_not_names) {
    char *dir = tt_mkdtemp(), a[4200], b[4200], cmd[9000];
    snprintf(a, sizeof a, "%s/a.bin", dir);
    snprintf(b, sizeof b, "%s/b.bin", dir);
    tt_write_llmc_random(a, 1000000, 256, 3); /* 2 MB: sampled, not hashed whole */
    snprintf(cmd, sizeof cmd, "cp %s %s", a, b);
    cr_assert_eq(system(cmd), 0);
    uint64_t fa = fp_of(a);
    cr_expect_eq(fp_of(b), fa, "a copy has the same fingerprint");
    poke(b, 2000, 0x55); /* first 64 KiB */
    cr_expect_neq(fp_of(b), fa);
    cr_assert_eq(system(cmd), 0);
    poke(b, 1024 + 2 * 999990, 0x55); /* last 64 KiB */
    cr_expect_neq(fp_of(b), fa);
    cr_assert_eq(system(cmd), 0);
    /* the 64 sampled blocks start at 64 KiB + k * span / 63: k = 10 */
    long size = 1024 + 2 * 1000000, span = size - 2 * 65536 - 4096;
    poke(b, 65536 + span * 10 / 63 + 100, 0x55);
    cr_expect_neq(fp_of(b), fa);
    tt_rmrf(dir);
    free(dir);
}

static void write_state(const char *dir, const tri_sampler *train, const tri_sampler *val) {
    cJSON *root = cJSON_CreateObject();
    tri_datafiles_to_state(root, train, val);
    char *txt = cJSON_Print(root), p[4200];
    snprintf(p, sizeof p, "%s/state.json", dir);
    FILE *f = fopen(p, "w");
    fputs(txt, f);
    fclose(f);
    free(txt);
    cJSON_Delete(root);
}

static int check(const char *dir, const char *train_path, int allow, char **err) {
    tri_sampler s;
    cr_assert_eq(tri_sampler_init(&s, train_path, 16, 256, 1), 0);
    tt_capture cap;
    char p[4200];
    snprintf(p, sizeof p, "%s/err.txt", dir);
    tt_capture_begin(&cap, p);
    int rc = tri_datafiles_check_resume(dir, &s, NULL, allow, 0);
    *err = tt_capture_end(&cap);
    tri_sampler_free(&s);
    return rc;
}

Test(datafiles, resume_refuses_a_changed_file_unless_allowed) {
    char *dir = tt_mkdtemp(), a[4200], v[4200], *err;
    snprintf(a, sizeof a, "%s/a.bin", dir);
    snprintf(v, sizeof v, "%s/v.bin", dir);
    tt_write_llmc_random(a, 5000, 256, 1);
    tt_write_llmc_random(v, 3000, 256, 2);
    tri_sampler s, sv;
    cr_assert_eq(tri_sampler_init(&s, a, 16, 256, 1), 0);
    cr_assert_eq(tri_sampler_init(&sv, v, 16, 256, 1), 0);
    write_state(dir, &s, &sv);
    tri_sampler_free(&s);
    tri_sampler_free(&sv);
    char p[4200];
    snprintf(p, sizeof p, "%s/state.json", dir);
    char *st = tt_read(p);
    cr_expect(strstr(st, "\"role\":\t\"val\"") && strstr(st, "v.bin") && strstr(st, "\"bytes\":\t11024"), "%s", st);
    free(st);
    cr_expect_eq(check(dir, a, 0, &err), 0, "unchanged: %s", err);
    free(err);
    tt_write_llmc_random(a, 5000, 256, 9); /* same size, other tokens */
    cr_expect_eq(check(dir, a, 0, &err), -1);
    cr_expect(strstr(err, "a.bin") && strstr(err, "data.train") && strstr(err, "fingerprint") &&
                  strstr(err, "--allow-data-change"),
              "%s", err);
    free(err);
    cr_expect_eq(check(dir, a, 1, &err), 0, "allowed: %s", err);
    free(err);
    tt_write_llmc_random(a, 4000, 256, 1); /* shorter */
    cr_expect_eq(check(dir, a, 0, &err), -1);
    cr_expect(strstr(err, "11024 bytes then and 9024 now"), "%s", err);
    free(err);
    tt_rmrf(dir);
    free(dir);
}

Test(datafiles, a_state_without_data_files_is_accepted) {
    char *dir = tt_mkdtemp(), a[4200], p[4200], *err;
    snprintf(a, sizeof a, "%s/a.bin", dir);
    tt_write_llmc_random(a, 5000, 256, 1);
    snprintf(p, sizeof p, "%s/state.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"step\": 3}", f);
    fclose(f);
    cr_expect_eq(check(dir, a, 0, &err), 0, "%s", err);
    free(err);
    f = fopen(p, "w");
    fputs("{\"data_files\": [{\"path\": 3}]}", f);
    fclose(f);
    cr_expect_eq(check(dir, a, 0, &err), -1);
    cr_expect(strstr(err, "state.json") && strstr(err, "data_files[0]"), "%s", err);
    free(err);
    tt_rmrf(dir);
    free(dir);
}
