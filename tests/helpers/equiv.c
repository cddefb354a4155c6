#include "equiv.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/ckpt/safetensors.h"
#include "testutil.h"

char *tt_equiv_dir(void) {
    char *dir = tt_mkdtemp(), p[4200];
    snprintf(p, sizeof p, "%s/train.bin", dir);
    tt_write_llmc_random(p, 20000, 256, 11);
    snprintf(p, sizeof p, "%s/val.bin", dir);
    tt_write_llmc_random(p, 4000, 256, 12);
    return dir;
}

int tt_equiv_run(const char *dir, int tp, int dp, const char *ck, const char *sets, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 120 %s --log-dir %s/ranks_%s -- %s train %s/configs/tiny-test.json "
             "--set data.train=%s/train.bin --set data.val=%s/val.bin "
             "--set parallel.tp=%d --set parallel.dp=%d --set checkpoint.dir=%s/%s --set log.dir=%s/log_%s %s",
             dir, tt_bin("tridentrun"), dir, ck, tt_bin("trident"), TRI_SOURCE_DIR, dir, dir, tp, dp, dir, ck, dir, ck,
             sets);
    return tt_run(cmd, out);
}

int tt_equiv_losses(const char *dir, const char *ck, double **out) {
    char p[4200];
    snprintf(p, sizeof p, "%s/log_%s/metrics.jsonl", dir, ck);
    return tt_losses(p, out);
}

void tt_equiv_expect_losses(const double *a, const double *b, int n, double rtol, const char *what) {
    for (int i = 0; i < n; i++)
        cr_expect(fabs(a[i] - b[i]) <= rtol * fabs(a[i]), "%s: step %d loss %.17g vs %.17g", what, i + 1, a[i], b[i]);
}

int tt_equiv_steps(const char *dir, const char *ck, tt_step *rows, int max) {
    char p[4200];
    snprintf(p, sizeof p, "%s/log_%s/metrics.jsonl", dir, ck);
    char *text = tt_read(p);
    cr_assert(text != NULL, "no %s", p);
    for (int i = 0; i < max; i++) rows[i] = (tt_step){NAN, 0, 0};
    int last = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n'), *at;
        if (nl) *nl = '\0';
        at = strstr(line, "\"step\": ");
        int s = at ? atoi(at + strlen("\"step\": ")) : 0;
        cr_assert(s >= 1 && s <= max, "%s: step out of range in %s", p, line);
        if ((at = strstr(line, "\"loss\": ")) != NULL) rows[s - 1].loss = strtod(at + strlen("\"loss\": "), NULL);
        if (strstr(line, "\"skipped\": true")) rows[s - 1].skipped = 1;
        if ((at = strstr(line, "\"loss_scale\": ")) != NULL)
            rows[s - 1].scale = strtod(at + strlen("\"loss_scale\": "), NULL);
        if (s > last && !strstr(line, "\"val_loss\"")) last = s;
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    return last;
}

char *tt_equiv_latest_model(const char *dir, const char *ck) {
    char cmd[4400], *l = NULL;
    snprintf(cmd, sizeof cmd, "cat %s/%s/latest", dir, ck);
    cr_assert_eq(tt_run(cmd, &l), 0, "no checkpoint under %s/%s", dir, ck);
    l[strcspn(l, "\n")] = 0;
    char *p = malloc(8800);
    snprintf(p, 8800, "%s/%s/%s/model.safetensors", dir, ck, l);
    free(l);
    return p;
}

double tt_equiv_expect_params(const char *dir, const char *ck_a, const char *ck_b, double atol, const char *what) {
    char *pa = tt_equiv_latest_model(dir, ck_a), *pb = tt_equiv_latest_model(dir, ck_b);
    tri_st_file fa, fb;
    cr_assert_eq(tri_st_open(&fa, pa), 0, "%s", pa);
    cr_assert_eq(tri_st_open(&fb, pb), 0, "%s", pb);
    free(pa);
    free(pb);
    cr_assert_eq(fa.layout.n, fb.layout.n, "%s: %zu tensors vs %zu", what, fa.layout.n, fb.layout.n);
    double worst = 0;
    for (size_t e = 0; e < fa.layout.n; e++) {
        const tri_st_entry *x = &fa.layout.entries[e];
        int j = tri_st_expect(&fb, x->name, x->ndim, x->shape);
        cr_assert(j >= 0, "%s: %s missing", what, x->name);
        size_t n = tri_st_numel(x);
        float *va = malloc(n * sizeof(float)), *vb = malloc(n * sizeof(float));
        tri_st_piece pc = {0, 0, x->rows, x->cols, va, x->cols, 0};
        cr_assert_eq(tri_st_read_piece(fa.fd, &fa.layout, (int)e, &pc), 0);
        pc.buf = vb;
        cr_assert_eq(tri_st_read_piece(fb.fd, &fb.layout, j, &pc), 0);
        for (size_t k = 0; k < n; k++) {
            double d = fabs((double)va[k] - (double)vb[k]);
            if (!(d <= atol)) {
                cr_expect(0, "%s: %s[%zu] = %.9g vs %.9g", what, x->name, k, va[k], vb[k]);
                break;
            }
            if (d > worst) worst = d;
        }
        free(va);
        free(vb);
    }
    tri_st_close(&fa);
    tri_st_close(&fb);
    return worst;
}

void tt_tensors_load(tt_tensors *t, const char *dir, const char *file) {
    char p[8600];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    cr_assert_eq(tri_st_open(&t->f, p), 0, "%s", p);
    t->v = calloc(t->f.layout.n, sizeof *t->v);
    for (size_t e = 0; e < t->f.layout.n; e++) {
        const tri_st_entry *en = &t->f.layout.entries[e];
        t->v[e] = malloc((tri_st_numel(en) + 1) * sizeof(float));
        tri_st_piece pc = {0, 0, en->rows, en->cols, t->v[e], en->cols, 0};
        cr_assert_eq(tri_st_read_piece(t->f.fd, &t->f.layout, (int)e, &pc), 0);
    }
}

void tt_tensors_free(tt_tensors *t) {
    for (size_t e = 0; e < t->f.layout.n; e++) free(t->v[e]);
    free(t->v);
    tri_st_close(&t->f);
}

void tt_expect_same_tensors(const char *dir_a, const char *dir_b, const char *file, const char *what) {
    tt_tensors ta, tb;
    tt_tensors_load(&ta, dir_a, file);
    tt_tensors_load(&tb, dir_b, file);
    cr_assert_eq(ta.f.layout.n, tb.f.layout.n, "%s: %s", what, file);
    int differ = 0;
    for (size_t e = 0; e < ta.f.layout.n; e++) {
        size_t n = tri_st_numel(&ta.f.layout.entries[e]);
        cr_assert_eq(n, tri_st_numel(&tb.f.layout.entries[e]));
        if (memcmp(ta.v[e], tb.v[e], n * sizeof(float)) != 0 && differ++ < 3)
            cr_expect(0, "%s: %s differs between %s and %s", what, ta.f.layout.entries[e].name, dir_a, dir_b);
    }
    cr_expect_eq(differ, 0, "%s: %d tensors of %s differ", what, differ, file);
    tt_tensors_free(&ta);
    tt_tensors_free(&tb);
}

void tt_equiv_expect_follows(const char *dir, const double *ref, const char *ref_ck, int n, const char *ck, int tp,
                             int dp, const char *sets, const char *banner, double rtol, double atol, const char *what) {
    char *out = NULL;
    cr_assert_eq(tt_equiv_run(dir, tp, dp, ck, sets, &out), 0, "%s: %s", what, out);
    cr_expect(strstr(out, banner) != NULL, "%s: no \"%s\" in the output: %s", what, banner, out);
    free(out);
    double *l;
    cr_assert_eq(tt_equiv_losses(dir, ck, &l), n, "%s", what);
    tt_equiv_expect_losses(ref, l, n, rtol, what);
    tt_equiv_expect_params(dir, ref_ck, ck, atol, what);
    free(l);
}

void tt_equiv_expect_layouts_follow(const char *dir, const double *ref, const char *ref_ck, int n, const char *prefix,
                                    const char *sets, const char *label, const tt_layout *L, size_t n_layouts,
                                    const char *banner, double rtol, double atol) {
    for (size_t i = 0; i < n_layouts; i++) {
        char ck[64], what[1400], all[4096];
        snprintf(ck, sizeof ck, "%s_%zu", prefix, i);
        snprintf(what, sizeof what, "%s tp=%d dp=%d %s%s%s", prefix, L[i].tp, L[i].dp, label, *label ? " " : "",
                 L[i].more);
        snprintf(all, sizeof all, "%s %s", sets, L[i].more);
        tt_equiv_expect_follows(dir, ref, ref_ck, n, ck, L[i].tp, L[i].dp, all, banner, rtol, atol, what);
    }
}

void tt_equiv_save_at(const char *dir, const char *ck, int tp, int dp, const char *sets, int at) {
    char all[4096], cmd[8400], *out = NULL;
    snprintf(all, sizeof all, "%s --stop-at-step %d", sets, at);
    cr_assert_eq(tt_equiv_run(dir, tp, dp, ck, all, &out), 0, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "mv %s/log_%s/metrics.jsonl %s/log_%s/first.jsonl", dir, ck, dir, ck);
    cr_assert_eq(tt_run(cmd, NULL), 0, "%s", cmd);
}

void tt_equiv_copy_run(const char *dir, const char *from, const char *to) {
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cp -r %s/%s %s/%s && mkdir -p %s/log_%s", dir, from, dir, to, dir, to);
    cr_assert_eq(tt_run(cmd, NULL), 0, "%s", cmd);
}

void tt_equiv_expect_resumed(const char *dir, const double *ref, int at, int n, const char *ck, int tp, int dp,
                             const char *sets, double rtol, const char *what) {
    char all[4096], *out = NULL;
    snprintf(all, sizeof all, "%s --resume", sets);
    cr_assert_eq(tt_equiv_run(dir, tp, dp, ck, all, &out), 0, "%s: %s", what, out);
    cr_expect(strstr(out, "resumed from") != NULL, "%s: %s", what, out);
    free(out);
    double *l;
    cr_assert_eq(tt_equiv_losses(dir, ck, &l), n - at, "%s", what);
    tt_equiv_expect_losses(ref + at, l, n - at, rtol, what);
    free(l);
}

void tt_equiv_expect_reshard(const char *dir, const double *ref, const char *sets, int tp, int dp, int zero,
                             const char *save_more, const int (*resume)[3], int n_resume, const char *resume_more,
                             double rtol) {
    char base[64], all[4096];
    snprintf(base, sizeof base, "zs_%d_%d_%d", tp, dp, zero);
    snprintf(all, sizeof all, "%s --set parallel.zero=%d %s", sets, zero, save_more);
    tt_equiv_save_at(dir, base, tp, dp, all, 5);
    for (int i = 0; i < n_resume; i++) {
        int rtp = resume[i][0], rdp = resume[i][1], rz = resume[i][2];
        char ck[96], what[4400];
        snprintf(ck, sizeof ck, "%s_to_%d_%d_%d", base, rtp, rdp, rz);
        tt_equiv_copy_run(dir, base, ck);
        snprintf(all, sizeof all, "%s --set parallel.zero=%d %s", sets, rz, resume_more);
        snprintf(what, sizeof what, "saved at tp=%d dp=%d zero=%d %s, resumed at tp=%d dp=%d zero=%d %s", tp, dp, zero,
                 save_more, rtp, rdp, rz, resume_more);
        tt_equiv_expect_resumed(dir, ref, 5, 10, ck, rtp, rdp, all, rtol, what);
    }
}

int tt_equiv_bench(const char *dir, const char *tag, const char *sets, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 120 %s --log-dir %s/ranks_%s -- %s bench %s/configs/tiny-test.json --steps 2 %s", dir,
             tt_bin("tridentrun"), dir, tag, tt_bin("trident"), TRI_SOURCE_DIR, sets);
    return tt_run(cmd, out);
}

double tt_equiv_metric(const char *dir, const char *ck, const char *key) {
    char p[4200], k[256];
    snprintf(p, sizeof p, "%s/log_%s/metrics.jsonl", dir, ck);
    snprintf(k, sizeof k, "\"%s\": ", key);
    char *text = tt_read(p);
    cr_assert_not_null(text, "%s", p);
    const char *at = strstr(text, k);
    cr_assert(at != NULL, "%s: no %s", p, key);
    double v = strtod(at + strlen(k), NULL);
    free(text);
    return v;
}

void tt_equiv_expect_diverges(const char *dir, const double *ref, int n, const char *fault, const char *ck, int tp,
                              int dp, const char *sets, double min_rel, const char *what) {
    char *out = NULL;
    cr_assert_eq(setenv(fault, "1", 1), 0);
    int rc = tt_equiv_run(dir, tp, dp, ck, sets, &out);
    unsetenv(fault);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    double *l;
    cr_assert_eq(tt_equiv_losses(dir, ck, &l), n);
    double worst = 0;
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(l[i] - ref[i]) / fabs(ref[i]));
    cr_expect(worst > min_rel, "the losses followed the reference (worst %.3g): %s is not tested", worst, what);
    free(l);
}

double *tt_equiv_reference(const char *dir, const char *ck, const char *sets, int n) {
    char *out = NULL;
    cr_assert_eq(tt_equiv_run(dir, 1, 1, ck, sets, &out), 0, "%s", out);
    free(out);
    double *ref;
    cr_assert_eq(tt_equiv_losses(dir, ck, &ref), n, "%s", ck);
    return ref;
}

size_t tt_equiv_field(const char *text, const char *key) {
    const char *at = strstr(text, key);
    cr_assert(at != NULL, "no %s in: %s", key, text);
    return (size_t)strtoull(at + strlen(key), NULL, 10);
}

void tt_equiv_expect_dp_comm(const char *dir, size_t i, const char *sets, int calls, double bytes) {
    char tag[32], all[512], *out = NULL;
    snprintf(tag, sizeof tag, "bench%zu", i);
    snprintf(all, sizeof all, "--set model.n_head=4 --set parallel.dp=2 %s", sets);
    cr_assert_eq(tt_equiv_bench(dir, tag, all, &out), 0, "%s", out);
    const char *at = strstr(out, "comm dp");
    cr_assert(at != NULL, "%s: no comm dp line: %s", sets, out);
    double mb = 0, n = 0;
    cr_assert_eq(sscanf(at, "comm dp %lf MB/step in %lf calls", &mb, &n), 2, "%s", at);
    cr_expect_eq((int)n, calls, "%s: %g calls a step, closed form %d", sets, n, calls);
    cr_expect(fabs(mb * 1e6 - bytes - 16) <= 5001, "%s: %.2f MB a step, closed form %.0f bytes", sets, mb, bytes);
    free(out);
}
