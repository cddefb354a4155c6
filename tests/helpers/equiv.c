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
