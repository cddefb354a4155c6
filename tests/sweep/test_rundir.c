/* src/sweep/rundir.c: every point checked before anything runs, and the run
 * directories that say what was done (point.json, done). A temporary
 * directory holds a tiny base config; nothing is trained. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers/testutil.h"
#include "sweep/sweep.h"

static char *g_dir; /* the test's directory (each Criterion test runs in its own process) */

static void write_text(const char *name, const char *text) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "w");
    cr_assert(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

static void setup(void) {
    g_dir = tt_mkdtemp();
    char text[8192];
    snprintf(text, sizeof text,
             "{\"model\": {\"n_layer\": 1, \"n_head\": 2, \"n_embd\": 32, \"seq_len\": 16, \"vocab_size\": 256},\n"
             " \"train\": {\"global_batch\": 8, \"micro_batch\": 2, \"steps\": 6},\n"
             " \"data\": {\"train\": \"%s/train.bin\", \"val\": \"\"}}\n",
             g_dir);
    write_text("base.json", text);
}

static void teardown(void) {
    tt_rmrf(g_dir);
    free(g_dir);
}

TestSuite(sweep_rundir, .init = setup, .fini = teardown);

/* A sweep over `grid` (JSON) with the base config, out = DIR/out; its
 * prepare's result and its stderr. sw->file/base/out point into static buffers. */
static int prepare(tri_sweep *sw, const char *grid, int check_data, char **err) {
    static char json[8192], out[4200];
    snprintf(out, sizeof out, "%s/out", g_dir);
    snprintf(json, sizeof json, "{\"base\": \"%s/base.json\", \"out\": \"%s\", \"grid\": %s}", g_dir, out, grid);
    tri_sweep_init(sw, "s.json", NULL, 0);
    cr_assert_eq(tri_sweep_parse(sw, json, strlen(json), 0, NULL), 0);
    char path[4300];
    snprintf(path, sizeof path, "%s/stderr", g_dir);
    tt_capture cap;
    tt_capture_begin(&cap, path);
    int rc = tri_sweep_prepare(sw, check_data);
    *err = tt_capture_end(&cap);
    return rc;
}

Test(sweep_rundir, fresh_points_are_new_and_loaded_with_their_values) {
    tri_sweep sw;
    char *err;
    cr_assert_eq(prepare(&sw, "{\"model.n_embd\": [32, 64]}", 0, &err), 0, "%s", err);
    cr_expect_str_empty(err);
    free(err);
    cr_assert_eq(sw.n_points, 2);
    for (int i = 0; i < 2; i++) {
        const tri_sweep_point *p = &sw.points[i];
        cr_expect_eq(p->state, TRI_POINT_NEW);
        cr_expect_eq(p->cfg.model.n_embd, 32 << i);
        char want[4300];
        snprintf(want, sizeof want, "%s/out/%s", g_dir, p->name);
        cr_expect_str_eq(p->cfg.log.dir, want); /* the sweep's log.dir reached the config */
    }
    struct stat st;
    char p[4300];
    snprintf(p, sizeof p, "%s/out", g_dir);
    cr_expect(stat(p, &st) != 0, "prepare wrote %s", p);
    tri_sweep_free(&sw);
}

/* point.json written by rundir_open makes the point RESUME; done makes it DONE;
 * done's wall_s reads back. */
Test(sweep_rundir, run_directories_give_the_states) {
    tri_sweep sw;
    char *err;
    cr_assert_eq(prepare(&sw, "{\"train.lr\": [0.001, 0.002, 0.003]}", 0, &err), 0, "%s", err);
    free(err);
    cr_assert_eq(tri_sweep_rundir_open(&sw, &sw.points[0]), 0);
    cr_assert_eq(tri_sweep_rundir_open(&sw, &sw.points[1]), 0);
    sw.points[1].wall_s = 12.3456;
    cr_assert_eq(tri_sweep_rundir_done(&sw.points[1]), 0);
    char path[4300];
    snprintf(path, sizeof path, "%s/done", sw.points[1].dir);
    char *text = tt_read(path);
    cr_expect_str_eq(text, "{\"wall_s\": 12.346}\n");
    free(text);
    cr_expect(tri_sweep_done_wall_s(&sw.points[1]) == 12.346);
    tri_sweep_free(&sw);

    cr_assert_eq(prepare(&sw, "{\"train.lr\": [0.001, 0.002, 0.003]}", 0, &err), 0, "%s", err);
    free(err);
    cr_expect_eq(sw.points[0].state, TRI_POINT_RESUME);
    cr_expect_eq(sw.points[1].state, TRI_POINT_DONE);
    cr_expect_eq(sw.points[2].state, TRI_POINT_NEW);
    tri_sweep_free(&sw);
}

Test(sweep_rundir, point_json_holds_the_settings) {
    tri_sweep sw;
    char *err;
    cr_assert_eq(prepare(&sw, "{\"model.n_embd\": [64]}", 0, &err), 0, "%s", err);
    free(err);
    cJSON *o = tri_sweep_point_json(&sw, &sw.points[0]);
    cr_expect_str_eq(cJSON_GetObjectItem(o, "point")->valuestring, "n_embd=64");
    cr_expect_str_eq(cJSON_GetObjectItem(o, "sweep")->valuestring, "s.json");
    const cJSON *sets = cJSON_GetObjectItem(o, "sets");
    cr_assert_eq(cJSON_GetArraySize(sets), 3);
    cr_expect_str_eq(cJSON_GetArrayItem(sets, 0)->valuestring, "model.n_embd=64");
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "values"), "model.n_embd")->valueint, 64);
    /* tokens per step: global_batch 8 x seq_len 16 */
    cr_expect_eq(cJSON_GetObjectItem(o, "tokens_per_step")->valuedouble, 128.0);
    cr_expect(cJSON_GetObjectItem(o, "params")->valuedouble > 0);
    cJSON_Delete(o);
    tri_sweep_free(&sw);
}

/* A run directory made for other settings is refused, with the difference named. */
Test(sweep_rundir, other_settings_are_refused_with_the_reason) {
    tri_sweep sw;
    char *err, path[4300], why[512];
    cr_assert_eq(prepare(&sw, "{\"train.lr\": [0.001]}", 0, &err), 0, "%s", err);
    free(err);
    tri_sweep_point *p = &sw.points[0];
    cr_assert_eq(tri_sweep_rundir_open(&sw, p), 0);
    cr_expect(tri_sweep_same_settings(&sw, p, why, sizeof why));
    snprintf(path, sizeof path, "%s/point.json", p->dir);
    /* the same overrides in another order are the same settings */
    char text[8192];
    snprintf(text, sizeof text, "{\"base\": \"%s\", \"sets\": [\"%s\", \"%s\", \"%s\"]}", sw.base, p->sets[2],
             p->sets[0], p->sets[1]);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    cr_expect(tri_sweep_same_settings(&sw, p, why, sizeof why));
    /* one more override */
    snprintf(text, sizeof text, "{\"base\": \"%s\", \"sets\": [\"%s\", \"%s\", \"%s\", \"train.seed=3\"]}", sw.base,
             p->sets[0], p->sets[1], p->sets[2]);
    f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    cr_expect_not(tri_sweep_same_settings(&sw, p, why, sizeof why));
    cr_expect_str_eq(why, "it had 4 overrides, now 3");
    /* another base */
    f = fopen(path, "w");
    fputs("{\"base\": \"other.json\", \"sets\": []}", f);
    fclose(f);
    cr_expect_not(tri_sweep_same_settings(&sw, p, why, sizeof why));
    cr_expect_str_eq(why, "its base was other.json");
    tri_sweep_free(&sw);

    /* and prepare refuses the point, naming it and the directory */
    cr_assert_eq(prepare(&sw, "{\"train.lr\": [0.002]}", 0, &err), 0, "%s", err); /* another point: fine */
    free(err);
    tri_sweep_free(&sw);
    f = fopen(path, "w");
    fputs("{\"base\": \"other.json\", \"sets\": []}", f);
    fclose(f);
    cr_expect_eq(prepare(&sw, "{\"train.lr\": [0.001]}", 0, &err), -1);
    char want[16384];
    snprintf(want, sizeof want,
             "trident: s.json: point lr=0.001: %s/out/lr=0.001/point.json was written for other settings (its base "
             "was other.json); delete %s/out/lr=0.001 or choose another \"out\"\n",
             g_dir, g_dir);
    cr_expect_str_eq(err, want);
    free(err);
    tri_sweep_free(&sw);
}

Test(sweep_rundir, bad_points_are_refused_before_anything_runs) {
    tri_sweep sw;
    char *err;
    /* a value the config refuses: the config's line, then the point's */
    cr_expect_eq(prepare(&sw, "{\"model.n_embd\": [32, 33]}", 0, &err), -1);
    char want[8192];
    snprintf(want, sizeof want,
             "trident: s.json: point 2 (n_embd=33): not a valid config with base %s/base.json (the message above "
             "names the key)\n",
             g_dir);
    cr_expect(strstr(err, "model.n_embd") != NULL && strstr(err, want) != NULL, "%s", err);
    free(err);
    tri_sweep_free(&sw);
    /* two values with the same file name */
    cr_expect_eq(prepare(&sw, "{\"data.val\": [\"a/b\", \"a?b\"]}", 0, &err), -1);
    cr_expect_str_eq(err, "trident: s.json: points 1 and 2 get the same run directory name val=a_b (values that "
                          "differ only in characters a file name cannot hold)\n");
    free(err);
    tri_sweep_free(&sw);
    /* missing data, only when asked to check it */
    cr_expect_eq(prepare(&sw, "{\"train.lr\": [0.001]}", 0, &err), 0, "%s", err);
    free(err);
    tri_sweep_free(&sw);
    cr_expect_eq(prepare(&sw, "{\"train.lr\": [0.001]}", 1, &err), -1);
    snprintf(want, sizeof want,
             "trident: s.json: point 1 (lr=0.001): data.train = \"%s/train.bin\" cannot be read (above); nothing was "
             "run\n",
             g_dir);
    cr_expect(strstr(err, want) != NULL, "%s", err);
    free(err);
    tri_sweep_free(&sw);
}
