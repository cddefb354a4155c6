/* src/sweep/summary.c: a run's figures from a metrics.jsonl written by hand
 * (medians worked out here), the summary line of each point state, and
 * summary.jsonl. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"
#include "model/gpt.h"
#include "sweep/sweep.h"

static void write_file(const char *dir, const char *name, const char *text) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

/* Five logged steps (the first, the warm-up, left out of the medians), three
 * validations (the last one not the best), and a line cut by a crash. */
static const char metrics[] = "{\"step\":1,\"loss\":5.0,\"ms\":100,\"tokens_per_s\":10,\"mfu\":0.1}\n"
                              "{\"step\":2,\"loss\":4.0,\"ms\":3,\"tokens_per_s\":30,\"mfu\":0.3}\n"
                              "{\"step\":3,\"loss\":3.5,\"ms\":1,\"tokens_per_s\":50,\"mfu\":0.5}\n"
                              "{\"step\":3,\"val_loss\":3.9}\n"
                              "{\"step\":4,\"loss\":3.0,\"ms\":2,\"tokens_per_s\":40,\"mfu\":0.4}\n"
                              "{\"step\":4,\"val_loss\":3.7}\n"
                              "{\"step\":5,\"loss\":2.9,\"ms\":4,\"tokens_per_s\":20,\"mfu\":0.2}\n"
                              "{\"step\":5,\"val_loss\":3.8}\n"
                              "{\"step\":6,\"lo";

Test(sweep_summary, stats_are_the_last_losses_and_the_medians_after_the_first_step) {
    char *dir = tt_mkdtemp();
    write_file(dir, "metrics.jsonl", metrics);
    tri_sweep_stats s;
    tri_sweep_read_stats(dir, &s);
    cr_expect_eq(s.last_step, 5);
    cr_expect(s.final_loss == 2.9);
    cr_expect(s.final_val == 3.8, "final val %g", s.final_val);
    cr_expect(s.best_val == 3.7, "best val %g", s.best_val);
    cr_expect(s.step_ms == 2.5, "median of 3 1 2 4: %g", s.step_ms);
    cr_expect(s.tokens_per_s == 35.0, "median of 30 50 40 20: %g", s.tokens_per_s);
    cr_expect(s.mfu == 0.5 * (0.3 + 0.4), "median of .3 .5 .4 .2: %g", s.mfu);
    tt_rmrf(dir);
    free(dir);
}

Test(sweep_summary, no_metrics_is_no_figures) {
    tri_sweep_stats s;
    tri_sweep_read_stats("/nonexistent/dir", &s);
    cr_expect_eq(s.last_step, 0);
    cr_expect(isnan(s.final_loss) && isnan(s.final_val) && isnan(s.best_val));
    cr_expect(isnan(s.step_ms) && isnan(s.tokens_per_s) && isnan(s.mfu));
}

/* A point by hand in dir, with a real config (the summary's sizes come from it). */
static void make_point(tri_sweep_point *p, const char *dir) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "lr=0.1");
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    p->values = cJSON_CreateObject();
    cJSON_AddNumberToObject(p->values, "train.lr", 0.1);
    cJSON_AddStringToObject(p->values, "data.val", "v.bin");
    cr_assert_eq(tri_config_load_string(&p->cfg,
                                        "{\"model\": {\"n_layer\": 1, \"n_head\": 2, \"n_embd\": 32, \"seq_len\": 16, "
                                        "\"vocab_size\": 256}, \"train\": {\"global_batch\": 8, \"micro_batch\": 2, "
                                        "\"steps\": 6, \"lr\": 0.1}, \"data\": {\"train\": \"t.bin\"}}",
                                        "point"),
                 0);
}

static const char *status(const cJSON *o) { return cJSON_GetObjectItem(o, "status")->valuestring; }

/* The summary line of p as a reader gets it: printed, then parsed (its
 * numbers are raw text until printed). */
static cJSON *line_of(const tri_sweep_point *p, char **text) {
    cJSON *o = tri_sweep_summary_line(p);
    char *t = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    cr_assert(t);
    cJSON *back = cJSON_Parse(t);
    cr_assert(back, "%s", t);
    if (text)
        *text = t;
    else
        free(t);
    return back;
}

Test(sweep_summary, line_has_the_values_sizes_figures_and_status) {
    char *dir = tt_mkdtemp();
    write_file(dir, "metrics.jsonl", metrics);
    tri_sweep_point p;
    make_point(&p, dir);
    p.ran = 1;
    p.exit_code = 3;
    p.state = TRI_POINT_RESUME;
    p.wall_s = 1.5;
    char *text;
    cJSON *o = line_of(&p, &text);
    /* the keys in order: name, directory, the point's values as the file had them, status */
    char want[8192];
    snprintf(want, sizeof want,
             "{\"point\":\"lr=0.1\",\"run_dir\":\"%s\",\"train.lr\":0.1,\"data.val\":\"v.bin\",\"status\":\"failed\","
             "\"exit_code\":3,",
             dir);
    cr_expect(strncmp(text, want, strlen(want)) == 0, "%s", text);
    double params = (double)tri_gpt_num_params(&p.cfg.model), fpt = tri_gpt_flops_per_token(&p.cfg.model);
    cr_expect_eq(cJSON_GetObjectItem(o, "params")->valuedouble, params);
    cr_expect_eq(cJSON_GetObjectItem(o, "steps")->valueint, 5);
    cr_expect_eq(cJSON_GetObjectItem(o, "tokens")->valuedouble, 5.0 * 8 * 16);
    cr_expect_eq(cJSON_GetObjectItem(o, "flops")->valuedouble, fpt * 5 * 8 * 16);
    cr_expect_eq(cJSON_GetObjectItem(o, "final_loss")->valuedouble, 2.9);
    cr_expect_eq(cJSON_GetObjectItem(o, "step_ms")->valuedouble, 2.5);
    cr_expect_eq(cJSON_GetObjectItem(o, "ranks")->valueint, 1);
    cr_expect_eq(cJSON_GetObjectItem(o, "wall_s")->valuedouble, 1.5);
    free(text);
    cJSON_Delete(o);

    /* not run now: incomplete (started before), pending (never), ok (done, its time from the marker) */
    p.ran = 0;
    o = line_of(&p, NULL);
    cr_expect_str_eq(status(o), "incomplete");
    cr_expect_null(cJSON_GetObjectItem(o, "exit_code"));
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "wall_s")));
    cJSON_Delete(o);
    p.state = TRI_POINT_NEW;
    o = line_of(&p, NULL);
    cr_expect_str_eq(status(o), "pending");
    cJSON_Delete(o);
    write_file(dir, "done", "{\"wall_s\": 7.25}\n");
    p.state = TRI_POINT_DONE;
    o = line_of(&p, NULL);
    cr_expect_str_eq(status(o), "ok");
    cr_expect_eq(cJSON_GetObjectItem(o, "wall_s")->valuedouble, 7.25);
    cJSON_Delete(o);
    /* ran now and succeeded: ok, no exit code */
    p.ran = 1;
    p.exit_code = 0;
    o = line_of(&p, NULL);
    cr_expect_str_eq(status(o), "ok");
    cr_expect_null(cJSON_GetObjectItem(o, "exit_code"));
    cJSON_Delete(o);
    tri_sweep_point_free(&p);
    tt_rmrf(dir);
    free(dir);
}

/* Missing figures are null, and numbers are written so that they read back exactly. */
Test(sweep_summary, missing_figures_are_null_and_numbers_read_back_exactly) {
    char *dir = tt_mkdtemp();
    tri_sweep_point p;
    make_point(&p, dir);
    cJSON_Delete(p.values);
    p.values = cJSON_CreateObject();
    cJSON_AddNumberToObject(p.values, "train.lr", 0.1 + 0.2); /* 0.30000000000000004 */
    cJSON *o = tri_sweep_summary_line(&p); /* printed as written: the raw numbers' own text */
    char *text = cJSON_PrintUnformatted(o);
    cr_expect(strstr(text, "\"train.lr\":0.30000000000000004,") != NULL, "%s", text);
    cr_expect(strstr(text, "\"final_loss\":null,\"final_val_loss\":null,\"best_val_loss\":null,\"step_ms\":null,"
                           "\"tokens_per_s\":null,\"mfu\":null,") != NULL,
              "%s", text);
    cr_expect(strstr(text, "\"steps\":0,\"tokens\":0,\"flops\":0,") != NULL, "%s", text);
    free(text);
    cJSON_Delete(o);
    tri_sweep_point_free(&p);
    tt_rmrf(dir);
    free(dir);
}

/* One line per point, in order, each ending in a newline. */
Test(sweep_summary, summary_file_has_one_line_per_point) {
    char *dir = tt_mkdtemp();
    tri_sweep_point pts[2];
    make_point(&pts[0], dir);
    make_point(&pts[1], dir);
    snprintf(pts[1].name, sizeof pts[1].name, "lr=0.2");
    tri_sweep sw;
    memset(&sw, 0, sizeof sw);
    sw.out = dir;
    sw.points = pts;
    sw.n_points = 2;
    cr_assert_eq(tri_sweep_write_summary(&sw), 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.jsonl", dir);
    char *text = tt_read(path);
    cr_assert(text);
    char *nl = strchr(text, '\n');
    cr_assert(nl != NULL && strchr(nl + 1, '\n') != NULL && strchr(nl + 1, '\n')[1] == '\0', "%s", text);
    cr_expect(strncmp(text, "{\"point\":\"lr=0.1\",", 18) == 0, "%s", text);
    cr_expect(strncmp(nl + 1, "{\"point\":\"lr=0.2\",", 18) == 0, "%s", text);
    free(text);
    tri_sweep_point_free(&pts[0]);
    tri_sweep_point_free(&pts[1]);
    tt_rmrf(dir);
    free(dir);
}
