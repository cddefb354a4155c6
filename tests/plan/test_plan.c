/* The planner (src/plan/plan.h, `trident plan`): its closed forms against the
 * model's own tables and FLOP count, its memory against what `trident bench`
 * measures with the allocator accounting through tridentrun, and the search
 * against tri_gpt_check_layout, the schedule's rules and the memory limit. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers/testutil.h"
#include "model/gpt.h"
#include "model/runtime.h"
#include "parallel/schedule.h"
#include "config/config.h"
#include "plan/plan.h"
#include "plan/search.h"
#include "train/preflight.h"

/* The planner the tests share, as `trident plan` shares one between its
 * layouts (the schedules and their simulations it keeps); emptied where a
 * test starts a new model (base_cfg) and at a test's end. */
static tri_planner pl;

static void base_cfg(tri_config *c, int L, int NH, int C, int T, int V, int gb, int mb) {
    tri_config_defaults(c);
    c->model.n_layer = L;
    c->model.n_head = NH;
    c->model.n_embd = C;
    c->model.seq_len = T;
    c->model.vocab_size = V;
    c->train.global_batch = gb;
    c->train.micro_batch = mb;
}

static void set_layout(tri_config *c, int tp, int pp, int dp, int vpp, const char *rec, int zero) {
    c->parallel.tp = tp;
    c->parallel.pp = pp;
    c->parallel.dp = dp;
    c->parallel.vpp = vpp;
    c->parallel.zero = zero;
    c->train.recompute = (tri_recompute)tri_recompute_parse(rec);
    c->parallel.schedule = (tri_sched_kind)tri_sched_parse(vpp > 1 ? "interleaved" : "1f1b");
}

/* The closed form of a stage's parameter elements equals the elements of
 * the tables tri_gpt_describe builds, for every stage, over shapes and
 * layouts (padded vocabularies, odd widths, interleaved chunks). */
Test(plan, param_elems_closed_form_equals_describe) {
    const int shapes[][5] = {{4, 4, 64, 32, 256},
                             {6, 6, 384, 256, 8192},
                             {8, 2, 40, 16, 1000},
                             {12, 12, 96, 64, 50257},
                             {16, 8, 136, 24, 333}};
    const int layouts[][3] = {{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {2, 2, 1}, {2, 2, 2}, {4, 4, 1}, {1, 4, 2}};
    int checked = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
            tri_config c;
            base_cfg(&c, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4], 8, 1);
            int tp = layouts[l][0], pp = layouts[l][1], vpp = layouts[l][2];
            if (c.model.n_head % tp || c.model.n_layer % (pp * vpp) || (vpp > 1 && pp < 2)) continue;
            set_layout(&c, tp, pp, 1, vpp, "none", 0);
            for (int st = 0; st < pp; st++) {
                tri_chunk_spec specs[16];
                int *layers = malloc(((size_t)c.model.n_layer + 1) * sizeof *layers);
                cr_assert(tri_chunks_even(&c.model, pp, st, vpp, specs, layers) == 0);
                for (int r = 0; r < tp; r++) {
                    tri_gpt g;
                    cr_assert(tri_gpt_describe(&g, &c.model, tp, r, specs, vpp) == 0);
                    cr_expect_eq(tri_plan_param_elems(&c, st), tri_gpt_local_elems(&g),
                                 "shape %zu tp %d pp %d vpp %d stage %d rank %d: closed form %zu, tables %zu", s, tp,
                                 pp, vpp, st, r, tri_plan_param_elems(&c, st), tri_gpt_local_elems(&g));
                    tri_gpt_free(&g);
                    checked++;
                }
                free(layers);
            }
        }
    }
    cr_expect_gt(checked, 40);
}

/* The GPU path (closed-form parameters, a shell of the stage's chunks)
 * equals the CPU path (tri_gpt_describe, as preflight) when both size
 * attention the CPU's way, over layouts, policies, ZeRO, SP and schedules;
 * and preflight's training estimate is the CPU path's figures. */
Test(plan, gpu_path_equals_describe_path_and_preflight) {
    tri_gpu_kind k = *tri_gpu_lookup("h100");
    k.flash = 0;
    const char *pol[3] = {"none", "selective", "full"};
    const int layouts[][4] = {{1, 1, 1, 1}, {2, 1, 1, 1}, {1, 2, 1, 1}, {1, 1, 2, 1}, {2, 2, 2, 1},
                              {1, 2, 1, 2}, {4, 4, 1, 1}, {2, 4, 2, 2}, {1, 4, 1, 1}};
    int n = 0;
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
        for (int p = 0; p < 3; p++)
            for (int z = 0; z < 2; z++)
                for (int sp = 0; sp < 2; sp++)
                    for (int zb = 0; zb < 2; zb++) {
                        tri_config c;
                        base_cfg(&c, 8, 4, 64, 32, 300, 16, 2);
                        int tp = layouts[l][0], pp = layouts[l][1], dp = layouts[l][2], vpp = layouts[l][3];
                        if ((sp && tp < 2) || (zb && (vpp > 1 || pp < 2))) continue;
                        set_layout(&c, tp, pp, dp, vpp, pol[p], z);
                        c.parallel.sequence_parallel = sp;
                        if (zb) c.parallel.schedule = (tri_sched_kind)tri_sched_parse("zb-h1");
                        for (int st = 0; st < pp; st++) {
                            tri_plan_mem a, b;
                            cr_assert(tri_plan_stage_mem(&pl, &c, NULL, st, &a) == 0);
                            cr_assert(tri_plan_stage_mem(&pl, &c, &k, st, &b) == 0);
                            cr_expect(!memcmp(&a, &b, sizeof a),
                                      "tp %d pp %d dp %d vpp %d %s zero %d sp %d zb %d stage %d: describe %zu/%zu/%zu/"
                                      "%zu/%zu, closed form %zu/%zu/%zu/%zu/%zu",
                                      tp, pp, dp, vpp, pol[p], z, sp, zb, st, a.params, a.optim, a.saved_act_alloc,
                                      a.saved_act_peak, a.workspace, b.params, b.optim, b.saved_act_alloc,
                                      b.saved_act_peak, b.workspace);
                            tri_mem_estimate e;
                            cr_assert(tri_preflight_model(&c, 2, 0, st, 0, 1, 0, &e) == 0);
                            /* preflight's training estimate is this stage's memory */
                            cr_expect_eq(a.params, e.params);
                            cr_expect_eq(a.optim, e.optim);
                            cr_expect_eq(a.saved_act_alloc + a.workspace, e.acts);
                            n++;
                        }
                    }
    tri_planner_free(&pl);
    cr_expect_gt(n, 100);
}

/* Bytes per parameter against Megatron's distributed-optimizer table
 * (/work/shared/REFERENCE.md): fp32 8 + 8/d, bf16 params with fp32 grads
 * 6 + 12/d, without ZeRO 16 and 18; model large enough that padding is
 * noise. */
Test(plan, bytes_per_parameter_match_megatrons_table) {
    const tri_gpu_kind *k = tri_gpu_lookup("h100");
    const int dps[3] = {2, 4, 8};
    for (int i = 0; i < 3; i++)
        for (int bf = 0; bf < 2; bf++)
            for (int z = 0; z < 2; z++) {
                tri_config c;
                base_cfg(&c, 4, 8, 1024, 128, 1000, 64, 1);
                set_layout(&c, 1, 1, dps[i], 1, "none", z);
                c.train.precision = (tri_dtype)tri_precision_parse(bf ? "bf16" : "fp32");
                tri_plan_mem m;
                cr_assert(tri_plan_stage_mem(&pl, &c, k, 0, &m) == 0);
                double n = (double)tri_plan_param_elems(&c, 0), d = dps[i];
                double got = (double)(m.params + m.grads + m.optim) / n;
                double want = bf ? (z ? 6 + 12 / d : 18) : (z ? 8 + 8 / d : 16);
                cr_expect(got > want * 0.999 && got < want * 1.001, "dp %d %s zero %d: %.4f bytes/param, want %.4f",
                          dps[i], bf ? "bf16" : "fp32", z, got, want);
            }
    tri_planner_free(&pl);
}

/* The planner's model FLOPs are the model's own count (tri_gpt_flops_per_token)
 * and, for GPT shapes, Megatron's 72 B s L h^2 (1 + s/6h + V/12hL) within
 * 0.5% (biases, LayerNorms and the position embedding are what differ);
 * recompute adds one forward of the layers (full) or of attention (selective). */
Test(plan, flops_match_the_model_and_megatrons_formula) {
    const int shapes[][5] = {{24, 16, 2048, 4096, 131072}, {96, 96, 12288, 2048, 51200}, {40, 48, 6144, 2048, 51200}};
    const tri_gpu_kind *k = tri_gpu_lookup("a100");
    for (int s = 0; s < 3; s++) {
        tri_config c;
        base_cfg(&c, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4], 64, 1);
        set_layout(&c, 8, 1, 8, 1, "none", 1);
        c.train.precision = (tri_dtype)tri_precision_parse("bf16");
        tri_plan_time t, tf, ts;
        cr_assert(tri_plan_time_step(&pl, &c, k, &t) == 0);
        double B = 64, S = c.model.seq_len, L = c.model.n_layer, h = c.model.n_embd, V = c.model.vocab_size;
        double tokens = B * S;
        cr_expect_float_eq(t.model_flops, tri_gpt_flops_per_token(&c.model) * tokens, 1e-9 * t.model_flops);
        double meg = 72.0 * B * S * L * h * h * (1 + S / (6 * h) + V / (12 * h * L));
        cr_expect(t.model_flops > meg * 0.995 && t.model_flops < meg * 1.005, "shape %d: %.4g vs Megatron %.4g", s,
                  t.model_flops, meg);
        cr_expect_float_eq(t.hw_flops, t.model_flops, 1e-9 * t.model_flops);
        c.train.recompute = (tri_recompute)tri_recompute_parse("full");
        cr_assert(tri_plan_time_step(&pl, &c, k, &tf) == 0);
        double fwd_layers = (24.0 * h * h + 4.0 * h * S) * L * tokens;
        cr_expect_float_eq(tf.hw_flops - tf.model_flops, fwd_layers, 1e-9 * fwd_layers);
        c.train.recompute = (tri_recompute)tri_recompute_parse("selective");
        cr_assert(tri_plan_time_step(&pl, &c, k, &ts) == 0);
        cr_expect_float_eq(ts.hw_flops - ts.model_flops, 4.0 * h * S * L * tokens, 1e-9 * fwd_layers);
        cr_expect_gt(tf.step_s, ts.step_s);
        cr_expect_geq(ts.step_s, t.step_s);
    }
    tri_planner_free(&pl);
}

/* The step's parts: no communication on one device; the bubble is the
 * simulator's (p-1)/m for 1F1B with uniform stages; more micro-batches
 * shrink it. */
Test(plan, step_parts_follow_the_layout) {
    const tri_gpu_kind *k = tri_gpu_lookup("h100");
    tri_config c;
    base_cfg(&c, 32, 16, 2048, 2048, 50000, 64, 1);
    c.train.precision = (tri_dtype)tri_precision_parse("bf16");
    set_layout(&c, 1, 1, 1, 1, "selective", 0);
    tri_plan_time t;
    cr_assert(tri_plan_time_step(&pl, &c, k, &t) == 0);
    cr_expect(t.tp_s == 0 && t.dp_s == 0 && t.pp_s == 0 && t.bubble_s == 0);
    cr_expect(t.mfu > 0.2 && t.mfu < 0.9, "mfu %g", t.mfu);
    set_layout(&c, 2, 4, 8, 1, "selective", 1);
    cr_assert(tri_plan_time_step(&pl, &c, k, &t) == 0);
    cr_expect(t.tp_s > 0 && t.dp_s >= 0 && t.pp_s > 0 && t.bubble_s > 0);
    /* m = 64 / 8 = 8 micro-batches over 4 stages: the simulator gives about
     * (p - 1) / m (the last stage's head makes the stages unequal) */
    cr_expect(t.bubble > 0.30 && t.bubble < 0.45, "bubble %g, (p-1)/m = 0.375", t.bubble);
    tri_planner_free(&pl);
}

/* Oversubscribed CPU ranks (share < 1): each blocking wait costs sync_s.
 * The counts from the runtime: per layer and micro-batch the two forward
 * TP all-reduces (attention and MLP outputs, model/runtime.c) and the two of
 * their inputs' gradients, two more under full recompute (the forward
 * again), one at each end; per micro-batch and chunk a receive each way
 * between stages; the DP buckets' and the step's small reductions. With
 * share = 1 the same kind adds nothing. */
Test(plan, oversubscribed_ranks_pay_a_delay_per_blocking_wait) {
    tri_gpu_kind k = *tri_gpu_lookup("a100");
    tri_config c;
    base_cfg(&c, 6, 6, 384, 256, 8192, 8, 1);
    set_layout(&c, 2, 2, 2, 1, "none", 0);
    c.train.micro_batch = 1; /* m = 8 / (1 x 2) = 4 micro-batches */
    tri_plan_time a, b;
    for (int full = 0; full < 2; full++) {
        c.train.recompute = (tri_recompute)tri_recompute_parse(full ? "full" : "none");
        k.share = 0.5;
        k.sync_s = 0;
        cr_assert(tri_plan_time_step(&pl, &c, &k, &a) == 0);
        k.sync_s = 1e-3;
        cr_assert(tri_plan_time_step(&pl, &c, &k, &b) == 0);
        double m = 4, layers = 3, per = full ? 6 : 4;
        cr_expect(fabs((b.tp_s - a.tp_s) - (m * (layers * per + 2) + 1) * 1e-3) < 1e-9, "tp %g", b.tp_s - a.tp_s);
        cr_expect(fabs((b.pp_s - a.pp_s) - (2 * m + 2) * 1e-3) < 1e-9, "pp %g", b.pp_s - a.pp_s);
        cr_expect(fabs((b.dp_s - a.dp_s) - 3e-3) < 1e-9, "dp %g", b.dp_s - a.dp_s);
        cr_expect(fabs(b.compute_s - a.compute_s) < 1e-12);
        k.share = 1.0;
        cr_assert(tri_plan_time_step(&pl, &c, &k, &a) == 0);
        k.sync_s = 0;
        cr_assert(tri_plan_time_step(&pl, &c, &k, &b) == 0);
        cr_expect(a.step_s == b.step_s, "a device of its own: no delay");
    }
    /* ranks in lockstep (pp = 1): 3 single-thread ranks on 2 cores (share
     * 2/3) run at 1 / ceil(3 / 2) = 1/2 of a core, their compute 4/3 of what
     * the fluid share gives; 4 ranks (share 1/2): unchanged; a pipeline
     * keeps the fluid share */
    k.sync_s = 0;
    c.train.recompute = (tri_recompute)tri_recompute_parse("none");
    const int lay[3][3] = {{3, 1, 1}, {1, 1, 4}, {1, 3, 1}};
    const double sh[3] = {2.0 / 3.0, 0.5, 2.0 / 3.0}, want[3] = {4.0 / 3.0, 1.0, 1.0};
    for (int i = 0; i < 3; i++) {
        set_layout(&c, lay[i][0], lay[i][1], lay[i][2], 1, "none", 0);
        c.model.n_layer = 6;
        c.train.micro_batch = 2;
        k.share = 1.0;
        cr_assert(tri_plan_time_step(&pl, &c, &k, &a) == 0);
        k.share = sh[i];
        cr_assert(tri_plan_time_step(&pl, &c, &k, &b) == 0);
        cr_expect(fabs(b.compute_s / a.compute_s - want[i]) < 1e-9, "tp %d pp %d dp %d: compute x %g, want %g",
                  lay[i][0], lay[i][1], lay[i][2], b.compute_s / a.compute_s, want[i]);
    }
    tri_planner_free(&pl);
}

/* ------------------------------------------------------------------------ */
/* against `trident bench` through tridentrun                                 */

static size_t json_size(cJSON *o, const char *k) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "no %s", k);
    return (size_t)v->valuedouble;
}

/* Rank 0's predicted memory against the allocator's peaks that `trident
 * bench` reports (its last JSON line's "mem"), within 5% per key (the
 * figures are the same functions, so they agree to the byte but for the
 * pipeline's mailboxes, which can grow when sends complete late). */
Test(plan, memory_matches_bench_through_tridentrun, .timeout = 600) {
    /* tp pp dp vpp recompute zero schedule */
    struct {
        int tp, pp, dp, vpp;
        const char *rec;
        int zero;
        const char *sched;
        int off; /* parallel.offload = optimizer: the optimizer's bytes under "host_optim" */
    } grid[] = {
        {1, 1, 1, 1, "none", 0, "1f1b", 0},        {1, 1, 1, 1, "full", 0, "1f1b", 0},
        {2, 1, 1, 1, "selective", 0, "1f1b", 0},   {1, 2, 1, 1, "none", 0, "1f1b", 0},
        {1, 1, 2, 1, "full", 1, "1f1b", 0},        {1, 1, 2, 1, "selective", 0, "1f1b", 0},
        {2, 2, 1, 1, "full", 0, "1f1b", 0},        {2, 1, 2, 1, "none", 1, "1f1b", 0},
        {1, 2, 2, 1, "selective", 1, "1f1b", 0},   {1, 4, 1, 1, "selective", 0, "1f1b", 0},
        {1, 1, 4, 1, "none", 1, "1f1b", 0},        {4, 1, 1, 1, "full", 0, "1f1b", 0},
        {1, 2, 1, 2, "none", 0, "interleaved", 0}, {1, 2, 1, 1, "full", 0, "zb-h1", 0},
        {1, 1, 1, 1, "none", 0, "1f1b", 1},        {1, 1, 2, 1, "full", 1, "1f1b", 1},
    };
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char *dir = tt_mkdtemp();
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++) {
        int n = grid[i].tp * grid[i].pp * grid[i].dp;
        char sets[1024], cmd[4096];
        snprintf(sets, sizeof sets,
                 "--set model.n_layer=4 --set model.n_head=4 --set model.n_embd=64 --set model.seq_len=32 "
                 "--set model.vocab_size=300 --set train.global_batch=8 --set train.micro_batch=2 "
                 "--set parallel.tp=%d --set parallel.pp=%d --set parallel.dp=%d --set parallel.vpp=%d "
                 "--set train.recompute=%s --set parallel.zero=%d --set parallel.schedule=%s "
                 "--set parallel.offload=%s",
                 grid[i].tp, grid[i].pp, grid[i].dp, grid[i].vpp, grid[i].rec, grid[i].zero, grid[i].sched,
                 grid[i].off ? "optimizer" : "none");
        snprintf(
            cmd, sizeof cmd,
            "cd %s && timeout 120 %s --nproc-per-node %d --log-dir %s/logs_%zu -- %s bench %s/configs/tiny-test.json "
            "--steps 1 %s",
            dir, tt_bin("tridentrun"), n, dir, i, tt_bin("trident"), TRI_SOURCE_DIR, sets);
        char *out = NULL;
        int rc = tt_run(cmd, &out);
        cr_assert_eq(rc, 0, "%s\n%s", cmd, out);
        char *last = NULL;
        for (char *q = strstr(out, "{\"config\""); q; q = strstr(q + 1, "{\"config\"")) last = q;
        cJSON *j = last ? cJSON_Parse(last) : NULL;
        cr_assert(j, "no JSON in %s", out);
        cJSON *mem = cJSON_GetObjectItemCaseSensitive(j, "mem");
        cr_assert(mem);
        /* the plan sized as the rank ran: tridentrun's threads per rank */
        omp_set_num_threads((int)(cores / n > 0 ? cores / n : 1));
        tri_config c;
        const char *argv_sets[20];
        int ns = 0;
        char *copy = strdup(sets), *save = NULL;
        for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
            if (strcmp(tok, "--set") != 0) argv_sets[ns++] = tok;
        char cfgpath[1200];
        snprintf(cfgpath, sizeof cfgpath, "%s/configs/tiny-test.json", TRI_SOURCE_DIR);
        cr_assert(tri_config_load(&c, cfgpath, ns, argv_sets) == 0);
        tri_plan_mem p;
        cr_assert(tri_plan_stage_mem(&pl, &c, NULL, 0, &p) == 0);
        const char *keys[6] = {"params", "grads", "optim", "saved_act_peak", "saved_act_alloc", "workspace"};
        size_t pred[6] = {p.params, p.grads, p.optim, p.saved_act_peak, p.saved_act_alloc, p.workspace};
        double got_total = 0, want_total = 0;
        for (int k = 0; k < 6; k++) {
            double got = (double)json_size(mem, keys[k]), want = (double)pred[k];
            if (k != 3) {
                got_total += got;
                want_total += want;
            }
            if (k == 5) continue;
            cr_expect(got >= want * 0.95 && got <= want * 1.05, "%s: %s measured %.0f, planned %.0f", sets, keys[k],
                      got, want);
        }
        /* the workspace: the planned one plus, at most, one mailbox buffer
         * per send of the step that completes late (parallel/pipeline.c adds
         * them then; MPI decides when) */
        double got_ws = (double)json_size(mem, "workspace"), box = 2.0 * 32 * 64 * 4;
        double sends = 2.0 * (8 / (2 * grid[i].dp)) * grid[i].vpp * (grid[i].pp > 1);
        cr_expect(got_ws >= (double)p.workspace && got_ws <= (double)p.workspace + sends * box,
                  "%s: workspace measured %.0f, planned %zu + up to %.0f late sends of %.0f bytes", sets, got_ws,
                  p.workspace, sends, box);
        cr_expect(got_total >= want_total * 0.95 && got_total <= want_total * 1.05,
                  "%s: total measured %.0f, planned %.0f", sets, got_total, want_total);
        /* offloaded: the optimizer's bytes in host memory, to the byte (the
         * CPU stages nothing); none of them on the backend */
        cJSON *host = cJSON_GetObjectItemCaseSensitive(mem, "host_optim");
        if (grid[i].off) {
            cr_expect(host && (size_t)host->valuedouble == p.host && p.host > 0 && p.optim == 0,
                      "%s: host_optim measured %.0f, planned %zu", sets, host ? host->valuedouble : -1.0, p.host);
        } else {
            cr_expect(!host && p.host == 0, "%s: host memory without offload", sets);
        }
        free(copy);
        cJSON_Delete(j);
        free(out);
    }
    tri_planner_free(&pl);
    tt_rmrf(dir);
    free(dir);
}

/* ------------------------------------------------------------------------ */
/* the search                                                                 */

/* Over many shapes and device counts: every layout the search proposes
 * passes tri_gpt_check_layout and the schedule's rules, fills exactly N
 * devices, divides the batch, and fits the device's memory by the
 * planner's own per-stage figures recomputed here for every stage. */
Test(plan, search_proposes_only_valid_layouts_that_fit, .timeout = 300) {
    unsigned seed = 12345;
    int proposals = 0, rejected_oom = 0;
    const int heads[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
    const int ns[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
    for (int it = 0; it < 36; it++) {
        seed = seed * 1103515245u + 12345u;
        int NH = heads[(seed >> 8) % 10], HS = 32 << ((seed >> 12) % 3);
        int L = 1 + (int)((seed >> 16) % 48), T = 256 << ((seed >> 20) % 4);
        int V = 1000 + (int)((seed >> 3) % 60000), N = ns[(seed >> 24) % 12];
        int gb = (it % 3 == 0) ? 96 : (it % 3 == 1 ? 64 : 30);
        /* every third case is far too big for the devices, to exercise the rejections */
        int C = NH * HS * (it % 4 == 3 ? 16 : 1);
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "%s plan %s/configs/tiny-test.json --gpu %s --gpus %d --search --json --top 100000 "
                 "--set model.n_layer=%d --set model.n_head=%d --set model.n_embd=%d --set model.seq_len=%d "
                 "--set model.vocab_size=%d --set train.global_batch=%d --set train.micro_batch=1 "
                 "--set train.precision=bf16",
                 tt_bin("trident"), TRI_SOURCE_DIR, it % 2 ? "h100" : "a100", N, L, NH, C, T, V, gb);
        char *out = NULL;
        int rc = tt_run(cmd, &out);
        cr_assert(rc == 0 || rc == 1, "%s: rc %d\n%s", cmd, rc, out);
        const tri_gpu_kind *k = tri_gpu_lookup(it % 2 ? "h100" : "a100");
        for (char *line = out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
            cJSON *j = cJSON_Parse(line);
            if (!j) {
                char *nl = strchr(line, '\n');
                if (!nl) break;
                continue;
            }
            cJSON *rej = cJSON_GetObjectItemCaseSensitive(j, "rejected");
            if (rej) {
                rejected_oom += (int)json_size(rej, "out_of_memory");
                cJSON_Delete(j);
                continue;
            }
            tri_config c;
            base_cfg(&c, L, NH, C, T, V, gb, (int)json_size(j, "micro_batch"));
            int tp = (int)json_size(j, "tp"), pp = (int)json_size(j, "pp"), dp = (int)json_size(j, "dp"),
                vpp = (int)json_size(j, "vpp");
            set_layout(&c, tp, pp, dp, vpp, cJSON_GetObjectItemCaseSensitive(j, "recompute")->valuestring,
                       (int)json_size(j, "zero"));
            c.parallel.sequence_parallel = (int)json_size(j, "sequence_parallel");
            c.parallel.cp = (int)json_size(j, "cp");
            c.parallel.offload = strcmp(cJSON_GetObjectItemCaseSensitive(j, "offload")->valuestring, "optimizer")
                                     ? TRI_OFFLOAD_NONE
                                     : TRI_OFFLOAD_OPTIMIZER;
            c.train.precision = (tri_dtype)tri_precision_parse("bf16");
            cr_expect_eq(tp * c.parallel.cp * pp * dp, N, "%s", line);
            cr_expect(c.parallel.cp == 1 || T % (2 * c.parallel.cp) == 0, "%s", line);
            cr_expect(tp <= 8 && NH % tp == 0, "%s", line);
            cr_expect_eq(gb % (c.train.micro_batch * dp), 0, "%s", line);
            cr_expect_eq(tri_gpt_check_layout(&c.model, tp, pp, vpp, ""), 0, "%s", line);
            tri_schedule s;
            int kind = vpp > 1 ? TRI_SCHED_INTERLEAVED : TRI_SCHED_1F1B;
            cr_expect_eq(tri_schedule_build(&s, (tri_sched_kind)kind, pp, vpp, gb / (c.train.micro_batch * dp)), 0,
                         "%s", line);
            tri_schedule_free(&s);
            for (int st = 0; st < pp; st++) {
                tri_plan_mem m;
                cr_assert(tri_plan_stage_mem(&pl, &c, k, st, &m) == 0);
                cr_expect_leq((double)m.total, k->mem_bytes, "%s: stage %d needs %zu", line, st, m.total);
            }
            proposals++;
            cJSON_Delete(j);
        }
        free(out);
        tri_planner_free(&pl);
    }
    cr_expect_gt(proposals, 50);
    cr_expect_gt(rejected_oom, 0);
}

/* The human output names the rejections: a shape whose heads do not divide
 * by 2 and a batch that does not divide by 3. */
Test(plan, search_says_why_layouts_were_rejected) {
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "%s plan %s/configs/tiny-test.json --gpu h100 --gpus 6 --set model.n_head=3 --set model.n_embd=96 "
             "--set model.n_layer=4 --set train.global_batch=8 --set train.micro_batch=1",
             tt_bin("trident"), TRI_SOURCE_DIR);
    int rc = tt_run(cmd, &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "n_head 3 is not divisible by tp 2"), "%s", out);
    cr_expect(strstr(out, "global_batch 8 is not divisible by dp 3") ||
                  strstr(out, "global_batch 8 is not divisible by dp 6"),
              "%s", out);
    cr_expect(strstr(out, "#1 layout tp=3"), "%s", out);
    free(out);
}

/* ------------------------------------------------------------------------ */
/* Llama (issue 20)                                                          */

static void llama_cfg(tri_config *c, int L, int NH, int NKV, int C, int Fh, int T, int V, int tied) {
    base_cfg(c, L, NH, C, T, V, 16, 2);
    c->model.arch = TRI_ARCH_LLAMA;
    c->model.n_kv_head = NKV;
    c->model.ffn_hidden = Fh;
    c->model.tie_embeddings = tied;
}

/* Llama shapes: MHA, GQA, MQA, tied and untied, odd ffn widths (the fused
 * gate|up unpadded between its parts), padded vocabularies. */
static const int llama_shapes[][8] = {
    /* L, NH, NKV, C, F, T, V, tied */
    {4, 4, 4, 64, 176, 32, 256, 0},  {4, 4, 2, 64, 176, 32, 300, 0},  {4, 4, 1, 64, 168, 32, 1000, 0},
    {8, 8, 2, 96, 264, 16, 333, 1},  {6, 6, 3, 96, 256, 24, 8192, 0}, {8, 8, 8, 128, 344, 16, 50257, 1},
    {8, 4, 1, 40, 104, 16, 500, 1},
};
#define N_LLAMA_SHAPES (sizeof llama_shapes / sizeof llama_shapes[0])

/* The planner's closed form of a Llama stage's parameters equals the tables
 * tri_gpt_describe builds (model/gpt.c build_llama_table), for every stage
 * and TP rank, including tp above n_kv_head (each KV head's rows whole on
 * its tp / n_kv_head ranks) and interleaved chunks. */
Test(plan, llama_param_elems_closed_form_equals_describe) {
    const int layouts[][3] = {{1, 1, 1}, {2, 1, 1}, {4, 1, 1}, {1, 2, 1}, {2, 2, 1}, {2, 2, 2}, {4, 4, 1}, {1, 4, 2}};
    int checked = 0, replicated = 0;
    for (size_t s = 0; s < N_LLAMA_SHAPES; s++) {
        const int *h = llama_shapes[s];
        for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
            tri_config c;
            llama_cfg(&c, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
            int tp = layouts[l][0], pp = layouts[l][1], vpp = layouts[l][2];
            char why[256];
            if (c.model.n_layer % (pp * vpp) || (vpp > 1 && pp < 2) ||
                tri_gpt_layout_why(&c.model, tp, pp, vpp, "", why, sizeof why) != 0)
                continue;
            set_layout(&c, tp, pp, 1, vpp, "none", 0);
            if (tp > h[2]) replicated++;
            for (int st = 0; st < pp; st++) {
                tri_chunk_spec specs[16];
                int *layers = malloc(((size_t)c.model.n_layer + 1) * sizeof *layers);
                cr_assert(tri_chunks_even(&c.model, pp, st, vpp, specs, layers) == 0);
                for (int r = 0; r < tp; r++) {
                    tri_gpt g;
                    cr_assert(tri_gpt_describe(&g, &c.model, tp, r, specs, vpp) == 0);
                    cr_expect_eq(tri_plan_param_elems(&c, st), tri_gpt_local_elems(&g),
                                 "llama shape %zu tp %d pp %d vpp %d stage %d rank %d: closed form %zu, tables %zu", s,
                                 tp, pp, vpp, st, r, tri_plan_param_elems(&c, st), tri_gpt_local_elems(&g));
                    tri_gpt_free(&g);
                    checked++;
                }
                free(layers);
            }
        }
    }
    cr_expect_gt(checked, 80);
    cr_expect_gt(replicated, 3);
}

/* On one rank the planner's parameters are the model's count (every tensor
 * a multiple of 16 elements, the vocabulary of 128): untied adds a (V, C)
 * head, GQA shrinks k and v to n_kv_head heads. */
Test(plan, llama_param_elems_equal_the_models_count) {
    for (size_t s = 0; s < N_LLAMA_SHAPES; s++) {
        const int *h = llama_shapes[s];
        if (h[6] % 128) continue;
        tri_config c;
        llama_cfg(&c, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
        set_layout(&c, 1, 1, 1, 1, "none", 0);
        double C = h[3], HS = C / h[1], KV = h[2] * HS, F = h[4], V = h[6];
        double want = h[0] * (2 * C * C + 2 * C * KV + 3 * C * F + 2 * C) + C + V * C * (h[7] ? 1 : 2);
        cr_expect_eq((double)tri_plan_param_elems(&c, 0), want, "shape %zu: %zu, want %.0f", s,
                     tri_plan_param_elems(&c, 0), want);
        cr_expect_eq((double)tri_gpt_num_params(&c.model), want);
    }
}

/* The GPU path (closed-form parameters, a shell of sizes from tri_gpt_sizes)
 * equals the CPU path (tri_gpt_describe, as preflight) for Llama shapes:
 * the runtime's size functions get GQA's qkv width and SwiGLU's 2 F/t. */
Test(plan, llama_gpu_path_equals_describe_path) {
    tri_gpu_kind k = *tri_gpu_lookup("h100");
    k.flash = 0;
    const char *pol[3] = {"none", "selective", "full"};
    const int layouts[][4] = {{1, 1, 1, 1}, {2, 1, 1, 1}, {4, 1, 1, 1}, {2, 2, 2, 1}, {1, 2, 1, 2}, {2, 4, 1, 2}};
    int n = 0;
    for (size_t s = 0; s < 3; s++)
        for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++)
            for (int p = 0; p < 3; p++)
                for (int sp = 0; sp < 2; sp++) {
                    const int *h = llama_shapes[s];
                    tri_config c;
                    llama_cfg(&c, 8, h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
                    int tp = layouts[l][0], pp = layouts[l][1], dp = layouts[l][2], vpp = layouts[l][3];
                    if (sp && tp < 2) continue;
                    set_layout(&c, tp, pp, dp, vpp, pol[p], 1);
                    c.parallel.sequence_parallel = sp;
                    for (int st = 0; st < pp; st++) {
                        tri_plan_mem a, b;
                        cr_assert(tri_plan_stage_mem(&pl, &c, NULL, st, &a) == 0);
                        cr_assert(tri_plan_stage_mem(&pl, &c, &k, st, &b) == 0);
                        cr_expect(!memcmp(&a, &b, sizeof a),
                                  "llama shape %zu tp %d pp %d dp %d vpp %d %s sp %d stage %d: describe "
                                  "%zu/%zu/%zu/%zu/%zu, closed form %zu/%zu/%zu/%zu/%zu",
                                  s, tp, pp, dp, vpp, pol[p], sp, st, a.params, a.optim, a.saved_act_alloc,
                                  a.saved_act_peak, a.workspace, b.params, b.optim, b.saved_act_alloc,
                                  b.saved_act_peak, b.workspace);
                        n++;
                    }
                }
    tri_planner_free(&pl);
    cr_expect_gt(n, 60);
}

/* Llama's model FLOPs against a closed form written here from the GEMMs of
 * a token (2 FLOPs a multiply-add, x3 for forward and backward): q|k|v
 * C x (NH + 2 NKV) HS, o C x C, gate|up 2 C F, down F C, an LM head V C
 * (tied or not: the untied embedding is a lookup), attention's QK^T and PV
 * over the T x T square 2 T C a layer; plus the RMSNorm weights, which the
 * model's 6N counts. Full recompute adds the layers' forward on one TP rank
 * times tp, selective attention's. MHA, GQA and MQA, tied and untied. */
Test(plan, llama_flops_match_a_closed_form) {
    const int shapes[][8] = {
        /* L, NH, NKV, C, F, T, V, tied */
        {32, 32, 8, 4096, 14336, 8192, 128256, 0}, /* Llama 3 8B: GQA */
        {16, 16, 16, 2048, 5504, 2048, 32000, 0},  /* MHA */
        {16, 16, 1, 2048, 5632, 2048, 32000, 1},   /* MQA, tied */
        {22, 32, 4, 2048, 5632, 2048, 32000, 1},   /* GQA, tied */
    };
    const tri_gpu_kind *k = tri_gpu_lookup("h100");
    for (int s = 0; s < 4; s++) {
        const int *h = shapes[s];
        tri_config c;
        llama_cfg(&c, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
        int tp = h[2] >= 8 ? 8 : h[2]; /* no KV head replicated: the layers' work is the model's */
        c.train.global_batch = 64;
        c.train.micro_batch = 1;
        set_layout(&c, tp, 1, 64 / tp, 1, "none", 1);
        c.train.precision = (tri_dtype)tri_precision_parse("bf16");
        double L = h[0], C = h[3], HS = C / h[1], KV = h[2] * HS, F = h[4], T = h[5], V = h[6];
        double layer_macs = C * (C + 2 * KV) + C * C + 2 * C * F + F * C;
        double fwd_tok = 2.0 * (L * layer_macs + V * C) + 4.0 * L * T * C;
        double want = 3.0 * fwd_tok + 6.0 * (2 * L * C + C);
        cr_expect_float_eq(tri_gpt_flops_per_token(&c.model), want, 1e-12 * want, "shape %d: %.6g, want %.6g", s,
                           tri_gpt_flops_per_token(&c.model), want);
        tri_plan_time t, tf, ts;
        cr_assert(tri_plan_time_step(&pl, &c, k, &t) == 0);
        double tokens = 64 * T;
        cr_expect_float_eq(t.model_flops, want * tokens, 1e-9 * t.model_flops);
        cr_expect_float_eq(t.hw_flops, t.model_flops, 1e-9 * t.model_flops);
        c.train.recompute = (tri_recompute)tri_recompute_parse("full");
        cr_assert(tri_plan_time_step(&pl, &c, k, &tf) == 0);
        double fwd_layers = (2.0 * layer_macs + 4.0 * T * C) * L * tokens;
        cr_expect_float_eq(tf.hw_flops - tf.model_flops, fwd_layers, 1e-9 * fwd_layers, "shape %d", s);
        c.train.recompute = (tri_recompute)tri_recompute_parse("selective");
        cr_assert(tri_plan_time_step(&pl, &c, k, &ts) == 0);
        cr_expect_float_eq(ts.hw_flops - ts.model_flops, 4.0 * T * C * L * tokens, 1e-9 * fwd_layers);
        /* more work in backward, or as much where the data-parallel
         * reduction it overlaps was exposed by more than what it adds */
        cr_expect_geq(tf.step_s, ts.step_s, "shape %d", s);
        cr_expect_gt(tf.step_s - tf.dp_s, ts.step_s - ts.dp_s, "shape %d", s);
        cr_expect_geq(ts.step_s, t.step_s, "shape %d", s);
    }
    tri_planner_free(&pl);
}

/* The preset shapes (configs/) give the published parameter totals, as
 * Hugging Face's safetensors of the released models count them: Llama 3 8B
 * 8,030,261,248, 70B 70,553,706,496, 3.1 405B 405,853,388,800, TinyLlama
 * 1.1B 1,100,048,384; the planner's closed form on one rank is the same
 * number (no padding at these shapes), and `trident plan` accepts each. */
Test(plan, llama_presets_give_the_published_totals) {
    const char *names[4] = {"llama3-8b", "llama3-70b", "llama3-405b", "tinyllama-1.1b"};
    const double published[4] = {8030261248.0, 70553706496.0, 405853388800.0, 1100048384.0};
    for (int i = 0; i < 4; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/configs/%s.json", TRI_SOURCE_DIR, names[i]);
        tri_config c;
        cr_assert(tri_config_load(&c, path, 0, NULL) == 0, "%s", path);
        cr_expect_eq(c.model.arch, TRI_ARCH_LLAMA);
        cr_expect_eq((double)tri_gpt_num_params(&c.model), published[i], "%s: %zu, published %.0f", names[i],
                     tri_gpt_num_params(&c.model), published[i]);
        tri_config one = c;
        set_layout(&one, 1, 1, 1, 1, "none", 0);
        one.parallel.pp_layout[0] = '\0';
        cr_expect_eq((double)tri_plan_param_elems(&one, 0), published[i], "%s", names[i]);
        char why[1024];
        cr_expect(tri_plan_check(&c, tri_gpu_lookup("h100"), why, sizeof why) == 0, "%s: %s", names[i], why);
    }
}

/* ------------------------------------------------------------------------ */
/* ZeRO 2 and 3, optimizer offload, context parallelism (issue 21)          */

/* Bytes per parameter per rank at the step's peak (parameters, gradients,
 * optimizer) against the closed forms of docs/parallelism.md with bf16
 * parameters and fp32 gradients: 18; 6 + 12/d; 6 + 16/d (the whole fp32
 * gradient of the step beside its 1/d shard); and at zero 3 with whole
 * chunks (parallel.zero_unit_layers = 0), one chunk per rank, 6 + 18/d (the
 * chunk gathered whole beside the shards), with layer units (the default,
 * one layer each) 4 + 18/d + 2 (E + 2 L) / N: the embedding and head units E
 * (wte, wpe, ln_f; the head is tied) and two layers L = 12 C^2 + 13 C in
 * flight. Within the padding to d x 128 elements (1e-3). */
Test(plan, zero_stages_bytes_per_parameter_follow_the_closed_forms) {
    const tri_gpu_kind *k = tri_gpu_lookup("h100");
    const double C = 2048;
    const int ds[3] = {2, 8, 64};
    for (int i = 0; i < 3; i++)
        for (int z = 0; z <= 4; z++) { /* 4: zero 3 with layer units */
            tri_config c;
            base_cfg(&c, 8, 16, (int)C, 1024, 1000, 512, 1);
            set_layout(&c, 1, 1, ds[i], 1, "full", z < 4 ? z : 3);
            c.parallel.zero_unit_layers = z == 4 ? 1 : 0;
            c.train.precision = (tri_dtype)tri_precision_parse("bf16");
            tri_plan_mem m;
            cr_assert(tri_plan_stage_mem(&pl, &c, k, 0, &m) == 0);
            double n = (double)tri_plan_param_elems(&c, 0), d = ds[i];
            double E = (double)tri_padded_vocab(1000, 1) * C + 1024 * C + 2 * C, L = 12 * C * C + 13 * C;
            double want[5] = {18, 6 + 12 / d, 6 + 16 / d, 6 + 18 / d, 4 + 18 / d + 2 * (E + 2 * L) / n};
            double got = (double)(m.params + m.grads + m.optim) / n;
            cr_expect(fabs(got - want[z]) <= 1e-3 * want[z], "dp %d zero %d%s: %.5f bytes/param, want %.5f", ds[i],
                      z < 4 ? z : 3, z == 4 ? " (layer units)" : "", got, want[z]);
            if (z == 4) continue; /* the wire below is the whole chunks' (units gather the same bytes but E's backward) */
            cr_expect_eq(m.host, 0);
            /* the wire: ring passes of (d-1)/d, an all-reduce two; zero 3
             * gathers before each of the m = 512/d micro-batches' forward and
             * backward */
            tri_plan_time t;
            cr_assert(tri_plan_time_step(&pl, &c, k, &t) == 0);
            double f = (d - 1) / d, mb = 512 / d;
            double wire[4] = {2 * f * 4 * n, f * (4 + 2) * n, f * (4 + 2) * n, f * (4 + 2 * mb * 2) * n};
            cr_expect(fabs(t.dp_bytes - wire[z]) <= 1e-9 * wire[z], "dp %d zero %d: %.6g bytes sent, want %.6g", ds[i],
                      z, t.dp_bytes, wire[z]);
        }
    tri_planner_free(&pl);
}

/* Offload takes the optimizer's bytes off the device, all of them, to the
 * host, where a GPU also stages the shard's fp32 gradients and parameters
 * (S (4 + P)); the CPU backend (no kind) stages nothing. A GPU's step pays
 * the PCIe copies and the host's AdamW. */
Test(plan, offload_moves_the_optimizers_bytes_to_the_host) {
    const tri_gpu_kind *h100 = tri_gpu_lookup("h100");
    for (int g = 0; g < 2; g++)
        for (int z = 0; z <= 1; z++)
            for (int bf = 0; bf <= 1; bf++) {
                const tri_gpu_kind *k = g ? h100 : NULL;
                tri_config c;
                base_cfg(&c, 4, 8, 256, 128, 1000, 16, 2);
                set_layout(&c, 1, 1, 4, 1, "none", z);
                c.train.precision = (tri_dtype)tri_precision_parse(bf ? "bf16" : "fp32");
                tri_plan_mem a, b;
                cr_assert(tri_plan_stage_mem(&pl, &c, k, 0, &a) == 0);
                c.parallel.offload = TRI_OFFLOAD_OPTIMIZER;
                cr_assert(tri_plan_stage_mem(&pl, &c, k, 0, &b) == 0);
                size_t K = bf ? 12 : 8, P = bf ? 2 : 4, S = a.optim / K;
                cr_expect_eq(a.optim % K, 0);
                cr_expect(b.params == a.params && b.grads == a.grads && b.optim == 0 &&
                          b.saved_act_alloc == a.saved_act_alloc && b.workspace == a.workspace);
                cr_expect_eq(b.total, a.total - a.optim, "the device's total drops by the optimizer's bytes");
                cr_expect_eq(b.host, a.optim + (k ? S * (4 + P) : 0), "%s zero %d %s", k ? "h100" : "cpu", z,
                             bf ? "bf16" : "fp32");
                if (k) {
                    tri_plan_time ta, tb;
                    c.parallel.offload = TRI_OFFLOAD_NONE;
                    cr_assert(tri_plan_time_step(&pl, &c, k, &ta) == 0);
                    c.parallel.offload = TRI_OFFLOAD_OPTIMIZER;
                    cr_assert(tri_plan_time_step(&pl, &c, k, &tb) == 0);
                    cr_expect_gt(tb.step_s, ta.step_s);
                    /* PCIe: 4 bytes of gradient down, the parameter up, fp32 ones down too */
                    double pcie = (double)S * (4 + (double)P + (P == 4 ? 4 : 0));
                    cr_expect(ta.pcie_bytes == 0 && fabs(tb.pcie_bytes - pcie) <= 1e-9 * pcie, "PCIe %.6g, want %.6g",
                              tb.pcie_bytes, pcie);
                }
            }
    tri_planner_free(&pl);
}

/* The offloaded optimizer's gradient copies leave during the last
 * micro-batch's backward: with the host step free (host_bw huge), a PCIe
 * link slow enough to matter but whose gradient transfer the backward
 * covers adds only the parameters' copy up (state x P bytes) to the step,
 * not the gradients' down (state x 8 bytes in fp32); a link so slow that
 * the transfer outlasts the backward adds more than the copy up and less
 * than both copies. Against the same GPU with an infinitely fast link. */
Test(plan, offload_hides_the_gradient_copies_under_the_backward) {
    tri_gpu_kind fast = *tri_gpu_lookup("h100"), slow = fast, slower = fast;
    fast.host_bw = slow.host_bw = slower.host_bw = 1e30;
    fast.pcie_bw = 1e30;
    tri_config c;
    base_cfg(&c, 4, 8, 256, 4096, 1000, 16, 16);
    set_layout(&c, 1, 1, 1, 1, "none", 0);
    c.parallel.offload = TRI_OFFLOAD_OPTIMIZER;
    const double state = (double)tri_plan_param_elems(&c, 0), pcie_eff = fast.link_eff;
    tri_plan_time a, b;
    cr_assert(tri_plan_time_step(&pl, &c, &fast, &a) == 0);
    /* the gradients' 8 bytes a parameter take a tenth of the backward's
     * forward-and-backward time: well inside the backward alone */
    slow.pcie_bw = state * 8.0 / (0.1 * a.compute_s) / pcie_eff;
    cr_assert(tri_plan_time_step(&pl, &c, &slow, &b) == 0);
    const double up = state * 4.0 / (slow.pcie_bw * pcie_eff), down = 2.0 * up;
    cr_expect(fabs((b.compute_s - a.compute_s) - up) <= 1e-9 * b.compute_s,
              "hidden: the step grows by %g s, the copy up is %g s (the gradients' %g s hidden)",
              b.compute_s - a.compute_s, up, down);
    slower.pcie_bw = state * 8.0 / (4.0 * a.compute_s) / pcie_eff;
    cr_assert(tri_plan_time_step(&pl, &c, &slower, &b) == 0);
    const double up2 = state * 4.0 / (slower.pcie_bw * pcie_eff), down2 = 2.0 * up2;
    const double grew = b.compute_s - a.compute_s;
    cr_expect(grew > up2 * 1.01 && grew < down2, "exposed: the step grows by %g s, between %g and %g", grew, up2,
              down2);
    tri_planner_free(&pl);
}

/* Context parallelism: each rank's saved activations are 1/cp of one
 * rank's, to the byte (every saved buffer is B x T/cp x something), and its
 * compute about 1/cp; the K/V ring is hidden under a long sequence's
 * attention (no exposed time at tp 1, where only the ring adds to tp_s)
 * and exposed under a short one's. */
Test(plan, cp_divides_saved_activations_and_hides_its_ring_under_long_attention) {
    const tri_gpu_kind *k = tri_gpu_lookup("h100");
    tri_config c;
    base_cfg(&c, 4, 16, 1024, 32768, 1000, 8, 1);
    c.train.precision = (tri_dtype)tri_precision_parse("bf16");
    set_layout(&c, 1, 1, 1, 1, "none", 0);
    tri_plan_mem one;
    tri_plan_time t1;
    cr_assert(tri_plan_stage_mem(&pl, &c, k, 0, &one) == 0);
    cr_assert(tri_plan_time_step(&pl, &c, k, &t1) == 0);
    for (int cp = 2; cp <= 8; cp *= 2) {
        c.parallel.cp = cp;
        char why[256];
        cr_assert_eq(tri_plan_check(&c, k, why, sizeof why), 0, "%s", why);
        tri_plan_mem m;
        tri_plan_time t;
        cr_assert(tri_plan_stage_mem(&pl, &c, k, 0, &m) == 0);
        cr_assert(tri_plan_time_step(&pl, &c, k, &t) == 0);
        cr_expect_eq(m.saved_act_alloc * (size_t)cp, one.saved_act_alloc, "cp %d: %zu x %d vs %zu", cp,
                     m.saved_act_alloc, cp, one.saved_act_alloc);
        cr_expect(t.compute_s < t1.compute_s / cp * 1.05, "cp %d: compute %g vs %g", cp, t.compute_s, t1.compute_s);
        cr_expect_eq(t.tp_s, 0.0, "cp %d: the ring is not hidden at T = 32768: %g s", cp, t.tp_s);
        /* the ring's bytes: 4 layers x 8 micro-batches x (cp - 1) passes of
         * K and V blocks of 32768/cp tokens x 1024 values, bf16 forward, bf16
         * and their fp32 gradients backward */
        double blk = 32768.0 / cp * 1024, ring = 4.0 * 8 * (cp - 1) * 2 * blk * (2 + (2 + 4));
        cr_expect(fabs(t.cp_bytes - ring) <= 1e-9 * ring, "cp %d: ring %.6g bytes, want %.6g", cp, t.cp_bytes, ring);
        cr_expect_eq(t1.cp_bytes, 0.0);
    }
    c.model.seq_len = 256; /* attention too short to hide the ring */
    c.parallel.cp = 4;
    tri_plan_time t;
    cr_assert(tri_plan_time_step(&pl, &c, k, &t) == 0);
    cr_expect_gt(t.tp_s, 0.0);
    c.parallel.cp = 3; /* 256 is no multiple of 2 x 3 */
    char why[256];
    cr_expect_neq(tri_plan_check(&c, k, why, sizeof why), 0);
    cr_expect(strstr(why, "2 x cp 3"), "%s", why);
    tri_planner_free(&pl);
}

/* The search, with tp and pp fixed at the base's (dp, cp, vpp left to it),
 * over n H100s; every proposal fits and follows `want`; returns how many fit. */
static size_t search_fixed(tri_config *c, int n, int (*want)(const tri_config *), const char *what) {
    tri_search_opts o = {.base = c, .gpu = tri_gpu_lookup("h100"), .gpus = n};
    o.limit = o.gpu->mem_bytes;
    o.fixed.tp = o.fixed.pp = 1;
    tri_search_result r;
    cr_assert_eq(tri_search_run(&pl, &o, &r), 0);
    for (size_t i = 0; i < r.n; i++) {
        const tri_config *x = &r.rows[i].cfg;
        cr_expect(r.rows[i].fits && want(x), "%s: proposed cp %d dp %d zero %d offload %d", what, x->parallel.cp,
                  x->parallel.dp, x->parallel.zero, (int)x->parallel.offload);
    }
    size_t fit = r.n;
    tri_search_result_free(&r);
    tri_planner_free(&pl);
    return fit;
}

static int cp_above_1(const tri_config *c) { return c->parallel.cp > 1; }
static int zero3(const tri_config *c) { return c->parallel.zero == 3; }
static int offloaded(const tri_config *c) { return c->parallel.offload == TRI_OFFLOAD_OPTIMIZER; }

/* A 1.3B GPT with 256K-token sequences on 8 H100s, tp and pp fixed at 1:
 * one rank cannot hold a sequence's activations (recompute full keeps each
 * layer's input, B T C, and the recompute's workspace), so every layout
 * that fits splits the sequence (cp > 1), and some do. */
Test(plan, search_proposes_cp_for_a_sequence_that_fits_only_split, .timeout = 120) {
    tri_config c;
    base_cfg(&c, 24, 16, 2048, 262144, 50257, 8, 1);
    c.train.precision = (tri_dtype)tri_precision_parse("bf16");
    set_layout(&c, 1, 1, 8, 1, "full", 1);
    tri_plan_mem m;
    cr_assert(tri_plan_stage_mem(&pl, &c, tri_gpu_lookup("h100"), 0, &m) == 0);
    cr_assert_gt((double)m.total, tri_gpu_lookup("h100")->mem_bytes, "the case must not fit at cp 1");
    cr_expect_gt(search_fixed(&c, 8, cp_above_1, "long sequence"), 0);
}

/* A 26B GPT (32 layers of C 8192) on 64 H100s, tp 1 and pp 2 fixed: a
 * stage's bf16 parameters (25.6 GiB) and its whole fp32 gradient (51.2 GiB)
 * do not fit beside anything at ZeRO 0 to 2, whatever dp and cp; ZeRO-3,
 * gathering a few layers at a time, does, and the search proposes only
 * that. */
Test(plan, search_proposes_zero3_where_replicated_parameters_do_not_fit, .timeout = 120) {
    tri_config c;
    base_cfg(&c, 32, 64, 8192, 2048, 51200, 64, 1);
    c.train.precision = (tri_dtype)tri_precision_parse("bf16");
    c.parallel.pp = 2;
    cr_expect_gt(search_fixed(&c, 64, zero3, "26B"), 0);
}

/* A 7B GPT on one H100 (tp, pp 1, nothing to shard over): bf16 parameters,
 * fp32 gradients and the 12-byte optimizer state (18 bytes a parameter,
 * 126 GB) do not fit, the device's 6 bytes a parameter do: only offload fits. */
Test(plan, search_proposes_offload_where_only_it_fits, .timeout = 120) {
    tri_config c;
    base_cfg(&c, 32, 32, 4096, 1024, 32000, 8, 1);
    c.train.precision = (tri_dtype)tri_precision_parse("bf16");
    cr_expect_gt(search_fixed(&c, 1, offloaded, "7B on one device"), 0);
}
