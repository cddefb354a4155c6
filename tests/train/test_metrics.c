/* src/train/metrics: the metrics.jsonl lines against the fprintf formats the
 * trainer wrote them with before the sink (copied here as the reference:
 * scripts/plot.py, the sweep summary and the tests parse them), the same
 * numbers as TensorBoard scalars read back by an independent reader
 * (tests/helpers/tfevents_read.c), the tags, a resume, a bad directory, and
 * the events a launcher hands to the trainer (tri_metrics_take_events). */
#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "helpers/testutil.h"
#include "helpers/tfevents_read.h"
#include "config/config.h"
#include "train/metrics.h"

typedef struct line_vals {
    int step;
    double loss, lr, norm, ms, tps, mfu, scale, val;
} line_vals;

static const line_vals V[] = {
    {1, 5.5194865204393864, 5e-4, 2.7661031884447045, 11.0012, 11635.04, 0.0083149, 65536, 5.120323411},
    {2, 1e-7, 1.2345678e-10, 123456789.125, 0.0004, 1e9, 1.5, 0.5, 1e-9},
    {300, 10.75, 6e-4, 0.1, 2.5e3, 0.05, 0, 3.0517578125e-05, 7.25},
};

/* the four kinds of line, as loop.c wrote them with fprintf before */
static void reference(FILE *o, const line_vals *v, int fp16) {
    char scale[64] = "";
    if (fp16) snprintf(scale, sizeof scale, ", \"loss_scale\": %.17g", v->scale);
    fprintf(o,
            "{\"step\": %d, \"loss\": %.17g, \"lr\": %.6e, \"grad_norm\": %.17g, \"ms\": %.3f, "
            "\"tokens_per_s\": %.1f, \"mfu\": %.5f%s}\n",
            v->step, v->loss, v->lr, v->norm, v->ms, v->tps, v->mfu, scale);
    fprintf(o, "{\"step\": %d, \"skipped\": true, \"loss_scale\": %.17g}\n", v->step, v->scale);
    fprintf(o, "{\"step\": %d, \"val_loss\": %.6f}\n", v->step, v->val);
}

/* the same through the sink, as loop.c writes them now */
static void through_sink(tri_metrics *m, const line_vals *v, int fp16) {
    tri_metric f[] = {TRI_METRIC_NUM("loss", "%.17g", v->loss),       TRI_METRIC_NUM("lr", "%.6e", v->lr),
                      TRI_METRIC_NUM("grad_norm", "%.17g", v->norm),  TRI_METRIC_NUM("ms", "%.3f", v->ms),
                      TRI_METRIC_NUM("tokens_per_s", "%.1f", v->tps), TRI_METRIC_NUM("mfu", "%.5f", v->mfu),
                      TRI_METRIC_NUM("loss_scale", "%.17g", v->scale)};
    tri_metrics_write(m, v->step, f, fp16 ? 7 : 6);
    tri_metric s[] = {TRI_METRIC_BOOL("skipped", 1), TRI_METRIC_NUM("loss_scale", "%.17g", v->scale)};
    tri_metrics_write(m, v->step, s, 2);
    tri_metrics_write(m, v->step, &TRI_METRIC_NUM("val_loss", "%.6f", v->val), 1);
}

static char *reference_text(int with_mem) {
    char *text;
    size_t len;
    FILE *o = open_memstream(&text, &len);
    if (with_mem) fprintf(o, "{\"step\": %d, \"mem\": %s}\n", 1, "{\"params\": 136704, \"grads\": 0}");
    for (size_t i = 0; i < sizeof V / sizeof V[0]; i++) reference(o, &V[i], (int)i % 2);
    fclose(o);
    return text;
}

static void write_all(tri_metrics *m) {
    tri_metrics_write(m, 1, &TRI_METRIC_JSON("mem", "{\"params\": 136704, \"grads\": 0}"), 1);
    for (size_t i = 0; i < sizeof V / sizeof V[0]; i++) through_sink(m, &V[i], (int)i % 2);
}

static char *join(const char *dir, const char *name) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

Test(metrics, jsonl_lines_are_byte_for_byte_the_old_format) {
    for (int tb = 0; tb <= 1; tb++) {
        char *dir = tt_mkdtemp();
        tri_metrics *m = tri_metrics_open(dir, 0, 0, tb);
        cr_assert_not_null(m);
        cr_assert_eq(tri_metrics_tb_path(m)[0] != '\0', tb);
        write_all(m);
        char *path = join(dir, "metrics.jsonl");
        char *mid = tt_read(path); /* flushed line by line: all there before close */
        tri_metrics_close(m);
        char *got = tt_read(path), *want = reference_text(1);
        cr_assert_str_eq(mid, want);
        cr_assert_str_eq(got, want);
        free(mid);
        free(got);
        free(want);
        free(path);
        tt_rmrf(dir);
        free(dir);
    }
}

/* tags in the order the sink gives them, for one of V's lines */
Test(metrics, every_number_is_a_tensorboard_scalar_at_its_step) {
    char *dir = tt_mkdtemp();
    tri_metrics *m = tri_metrics_open(dir, 0, 0, 1);
    cr_assert_not_null(m);
    char tb[1400];
    snprintf(tb, sizeof tb, "%s", tri_metrics_tb_path(m));
    cr_assert(strstr(tb, "/events.out.tfevents.") != NULL, "%s", tb);
    write_all(m);
    tri_metrics_close(m);

    tt_tb_file f;
    cr_assert_eq(tt_tb_read(tb, &f), 0, "%s", f.why);
    cr_assert_str_eq(f.file_version, "brain.Event:2");
    cr_assert_eq(f.n_starts, 1);
    cr_assert_eq(f.start_steps[0], 1);
    /* version, start; the mem line is no scalar (and no record); each of V: 6 or 7, 2, 1 */
    cr_assert_eq(f.records, 2 + 3 * 3);
    int k = 0;
    for (size_t i = 0; i < sizeof V / sizeof V[0]; i++) {
        const line_vals *v = &V[i];
        int fp16 = (int)i % 2;
        struct {
            const char *tag;
            double value;
        } want[] = {{"train/loss", v->loss},        {"train/lr", v->lr},
                    {"train/grad_norm", v->norm},   {"perf/step_ms", v->ms},
                    {"perf/tokens_per_s", v->tps},  {"perf/mfu", v->mfu},
                    {"train/loss_scale", v->scale}, {"train/skipped", 1},
                    {"train/loss_scale", v->scale}, {"val/loss", v->val}};
        for (int j = 0; j < 10; j++) {
            if (j == 6 && !fp16) continue;
            cr_assert_lt(k, f.n_scalars);
            const tt_tb_scalar *s = &f.scalars[k++];
            cr_assert_eq(s->step, v->step);
            cr_assert_str_eq(s->tag, want[j].tag);
            float w = (float)want[j].value;
            cr_assert_eq(memcmp(&s->value, &w, 4), 0, "step %d %s: %.9g, want %.9g", v->step, s->tag, s->value, w);
            cr_assert(fabs(s->wall_time - f.first_wall_time) < 600, "wall time %f", s->wall_time);
        }
    }
    cr_assert_eq(k, f.n_scalars);
    tt_tb_free(&f);
    tt_rmrf(dir);
    free(dir);
}

Test(metrics, numbers_beyond_a_float_are_infinities_and_nan_stays_nan) {
    char *dir = tt_mkdtemp();
    tri_metrics *m = tri_metrics_open(dir, 0, 0, 1);
    cr_assert_not_null(m);
    char tb[1400];
    snprintf(tb, sizeof tb, "%s", tri_metrics_tb_path(m));
    tri_metric f[] = {TRI_METRIC_NUM("loss_scale", "%.17g", 1e308), TRI_METRIC_NUM("loss", "%.17g", -1e300),
                      TRI_METRIC_NUM("grad_norm", "%.17g", NAN), TRI_METRIC_NUM("lr", "%.6e", 3.4028234663852886e38)};
    tri_metrics_write(m, 1, f, 4);
    tri_metrics_close(m);
    tt_tb_file r;
    cr_assert_eq(tt_tb_read(tb, &r), 0, "%s", r.why);
    cr_assert_eq(r.n_scalars, 4);
    cr_assert(isinf(r.scalars[0].value) && r.scalars[0].value > 0);
    cr_assert(isinf(r.scalars[1].value) && r.scalars[1].value < 0);
    cr_assert(isnan(r.scalars[2].value));
    cr_assert_eq(r.scalars[3].value, FLT_MAX);
    tt_tb_free(&r);
    tt_rmrf(dir);
    free(dir);
}

Test(metrics, tags_by_table_then_by_rule) {
    static const char *cases[][2] = {
        {"loss", "train/loss"},
        {"val_loss", "val/loss"},
        {"lr", "train/lr"},
        {"grad_norm", "train/grad_norm"},
        {"tokens_per_s", "perf/tokens_per_s"},
        {"mfu", "perf/mfu"},
        {"ms", "perf/step_ms"},
        {"loss_scale", "train/loss_scale"},
        {"skipped_steps", "train/skipped_steps"},
        {"val_ppl", "val/ppl"},
        {"ckpt_block_ms", "checkpoint/block_ms"},
        {"checkpoint_bytes", "checkpoint/bytes"},
        {"perf_step_ms_max", "perf/step_ms_max"},
        {"ranks/step_ms_median", "ranks/step_ms_median"},
        {"tokens", "train/tokens"},
        {"val_", "train/val_"},
    };
    char out[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_str_eq(tri_metrics_tag(cases[i][0], out, sizeof out), cases[i][1]);
}

Test(metrics, a_resume_appends_and_starts_a_new_event_file_at_the_next_step) {
    char *dir = tt_mkdtemp();
    tri_metrics *m = tri_metrics_open(dir, 0, 0, 1);
    cr_assert_not_null(m);
    char first[1400];
    snprintf(first, sizeof first, "%s", tri_metrics_tb_path(m));
    tri_metrics_write(m, 1, &TRI_METRIC_NUM("loss", "%.17g", 3.0), 1);
    tri_metrics_close(m);
    m = tri_metrics_open(dir, 1, 4, 1);
    cr_assert_not_null(m);
    char second[1400];
    snprintf(second, sizeof second, "%s", tri_metrics_tb_path(m));
    cr_assert_str_neq(first, second);
    tri_metrics_write(m, 5, &TRI_METRIC_NUM("loss", "%.17g", 2.5), 1);
    tri_metrics_close(m);

    char *path = join(dir, "metrics.jsonl");
    char *got = tt_read(path);
    cr_assert_str_eq(got, "{\"step\": 1, \"loss\": 3}\n{\"step\": 5, \"loss\": 2.5}\n");
    free(got);
    free(path);
    tt_tb_file a, b;
    cr_assert_eq(tt_tb_read(first, &a), 0, "%s", a.why);
    cr_assert_eq(tt_tb_read(second, &b), 0, "%s", b.why);
    cr_assert_eq(a.n_starts, 1);
    cr_assert_eq(a.start_steps[0], 1);
    cr_assert_eq(a.n_scalars, 1);
    cr_assert_eq(b.n_starts, 1);
    cr_assert_eq(b.start_steps[0], 5, "TensorBoard drops the earlier files' steps >= this one");
    cr_assert_eq(b.n_scalars, 1);
    cr_assert_eq(b.scalars[0].step, 5);
    cr_assert_eq(b.scalars[0].value, 2.5f);
    tt_tb_free(&a);
    tt_tb_free(&b);
    tt_rmrf(dir);
    free(dir);
}

Test(metrics, a_directory_that_is_not_there_is_named) {
    char *dir = tt_mkdtemp();
    char *missing = join(dir, "gone");
    char err[2048];
    tt_err_capture(err, sizeof err);
    tri_metrics *m = tri_metrics_open(missing, 0, 0, 1);
    tt_err_capture(NULL, 0);
    cr_assert_null(m);
    cr_assert(strstr(err, "/gone/metrics.jsonl: cannot open: No such file or directory") != NULL, "%s", err);
    tri_metrics_close(NULL);
    tri_metrics_write(NULL, 1, &TRI_METRIC_NUM("loss", "%.17g", 1.0), 1); /* the other ranks' no-op */
    free(missing);
    tt_rmrf(dir);
    free(dir);
}

/* A full disk under the event file (a file-size limit of 300 bytes: each
 * record here is 16 + 32 bytes, metrics.jsonl's lines 28): one warning, no
 * more events, and metrics.jsonl goes on whole. */
Test(metrics, a_failing_event_file_is_warned_about_once_and_jsonl_goes_on) {
    char *dir = tt_mkdtemp();
    tri_metrics *m = tri_metrics_open(dir, 0, 0, 1);
    cr_assert_not_null(m);
    char tb[1400];
    snprintf(tb, sizeof tb, "%s", tri_metrics_tb_path(m));
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {300, 300};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    char err[2048];
    tt_err_capture(err, sizeof err);
    for (int s = 1; s <= 10; s++) {
        tri_metrics_write(m, s, &TRI_METRIC_NUM("loss", "%.17g", 0.25 * s), 1);
        if (s == 8) cr_assert_str_eq(tri_metrics_tb_path(m), "", "still writing events after 8 records");
    }
    tt_err_capture(NULL, 0);
    tri_metrics_close(m);
    cr_assert(strstr(err, "events.out.tfevents.") != NULL && strstr(err, "cannot write") != NULL, "%s", err);
    char *path = join(dir, "metrics.jsonl");
    char *got = tt_read(path);
    int lines = 0;
    for (const char *p = got; *p; p++) lines += *p == '\n';
    cr_assert_eq(lines, 10, "%s", got);
    cr_assert(strstr(got, "{\"step\": 10, \"loss\": 2.5}\n") != NULL, "%s", got);
    free(got);
    free(path);
    tt_tb_file f;
    int rc = tt_tb_read(tb, &f); /* whole records up to the failure, then at most a torn one */
    cr_assert_geq(f.n_scalars, 3, "rc %d %s", rc, f.why);
    cr_assert_lt(f.n_scalars, 10);
    for (int i = 0; i < f.n_scalars; i++) cr_assert_eq(f.scalars[i].value, 0.25f * (float)(i + 1));
    tt_tb_free(&f);
    tt_rmrf(dir);
    free(dir);
}

/* ------------------------------------------------------------------------ */
/* The launcher's events (tridentrun's elastic shrink)                       */

static void write_text(const char *dir, const char *name, const char *text) {
    char *p = join(dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
    free(p);
}

static int file_exists(const char *dir, const char *name) {
    char *p = join(dir, name);
    int yes = access(p, F_OK) == 0;
    free(p);
    return yes;
}

static char *read_in(const char *dir, const char *name) {
    char *p = join(dir, name);
    char *s = tt_read(p);
    cr_assert_not_null(s, "%s", p);
    free(p);
    return s;
}

/* Each line is written once, at the step given, its fields in order (the
 * expected text written out by hand from the launcher's lines); numbers are
 * TensorBoard scalars under the prefix rule; a line that is no object is
 * named and skipped; the file is gone after. */
Test(metrics, launcher_events_are_written_once_at_the_resume_step) {
    char *dir = tt_mkdtemp();
    write_text(dir, TRI_LOG_PENDING_EVENTS,
               "{\"event\": \"elastic_shrink\", \"elastic_attempt\": 2, \"elastic_dropped_rank\": 1, "
               "\"elastic_host\": \"node\\\"7\", \"elastic_dp_from\": 2, \"elastic_dp_to\": 1}\n"
               "not json\n"
               "{\"event\": \"other\", \"step\": 99, \"flag\": true, \"elastic_world\": 3}\n");
    tri_metrics *m = tri_metrics_open(dir, TRI_METRICS_RESUME, 4, 1);
    cr_assert_not_null(m);
    char tb[1400];
    snprintf(tb, sizeof tb, "%s", tri_metrics_tb_path(m));
    char err[2048];
    tt_err_capture(err, sizeof err);
    int n = tri_metrics_take_events(m, dir, 4, 1);
    tt_err_capture(NULL, 0);
    cr_assert_eq(n, 2);
    cr_assert(strstr(err, TRI_LOG_PENDING_EVENTS ": line 2 is not a JSON object; skipped: not json"), "%s", err);
    cr_assert(!file_exists(dir, TRI_LOG_PENDING_EVENTS), "the events are taken once");
    cr_assert_eq(tri_metrics_take_events(m, dir, 4, 1), 0, "nothing left to take");
    tri_metrics_close(m);

    char *got = read_in(dir, "metrics.jsonl");
    cr_assert_str_eq(got, "{\"step\": 4, \"event\": \"elastic_shrink\", \"elastic_attempt\": 2, "
                          "\"elastic_dropped_rank\": 1, \"elastic_host\": \"node\\\"7\", \"elastic_dp_from\": 2, "
                          "\"elastic_dp_to\": 1}\n"
                          "{\"step\": 4, \"event\": \"other\", \"flag\": true, \"elastic_world\": 3}\n");
    free(got);
    tt_tb_file f;
    cr_assert_eq(tt_tb_read(tb, &f), 0, "%s", f.why);
    const struct {
        const char *tag;
        float value;
    } want[] = {{"elastic/attempt", 2}, {"elastic/dropped_rank", 1}, {"elastic/dp_from", 2},
                {"elastic/dp_to", 1},   {"train/flag", 1},           {"elastic/world", 3}};
    cr_assert_eq(f.n_scalars, 6);
    for (int i = 0; i < 6; i++) {
        cr_assert_str_eq(f.scalars[i].tag, want[i].tag);
        cr_assert_eq(f.scalars[i].step, 4);
        cr_assert_eq(f.scalars[i].value, want[i].value, "%s", want[i].tag);
    }
    tt_tb_free(&f);
    tt_rmrf(dir);
    free(dir);
}

/* A run that does not resume is a new job: an earlier job's events are
 * removed, not written. */
Test(metrics, a_new_run_removes_an_earlier_jobs_events_unread) {
    char *dir = tt_mkdtemp();
    write_text(dir, TRI_LOG_PENDING_EVENTS, "{\"event\": \"elastic_shrink\", \"elastic_dp_to\": 1}\n");
    tri_metrics *m = tri_metrics_open(dir, TRI_METRICS_NEW, 0, 0);
    cr_assert_not_null(m);
    cr_assert_eq(tri_metrics_take_events(m, dir, 0, 0), 0);
    tri_metrics_close(m);
    cr_assert(!file_exists(dir, TRI_LOG_PENDING_EVENTS));
    char *got = read_in(dir, "metrics.jsonl");
    cr_assert_str_eq(got, "");
    free(got);
    tt_rmrf(dir);
    free(dir);
}

/* --resume with no checkpoint yet starts again at step 0: the earlier
 * attempt's losses go, the launcher's event lines stay (a second failure
 * before the first checkpoint must not lose the first shrink); a resume from
 * a checkpoint appends as before. */
Test(metrics, a_restart_from_step_0_keeps_the_launchers_event_lines) {
    char *dir = tt_mkdtemp();
    tri_metrics *m = tri_metrics_open(dir, TRI_METRICS_RESTART, 0, 0); /* no metrics.jsonl yet */
    cr_assert_not_null(m);
    write_text(dir, TRI_LOG_PENDING_EVENTS, "{\"event\": \"elastic_shrink\", \"elastic_dp_to\": 1}\n");
    cr_assert_eq(tri_metrics_take_events(m, dir, 0, 1), 1);
    tri_metrics_write(m, 1, &TRI_METRIC_NUM("loss", "%.17g", 3.0), 1);
    tri_metrics_write(m, 2, &TRI_METRIC_NUM("loss", "%.17g", 2.5), 1);
    tri_metrics_close(m);
    const char *event = "{\"step\": 0, \"event\": \"elastic_shrink\", \"elastic_dp_to\": 1}\n";

    m = tri_metrics_open(dir, TRI_METRICS_RESTART, 0, 1);
    cr_assert_not_null(m);
    char *got = read_in(dir, "metrics.jsonl");
    cr_assert_str_eq(got, event, "only the event line is kept");
    free(got);
    tri_metrics_write(m, 1, &TRI_METRIC_NUM("loss", "%.17g", 2.75), 1);
    tri_metrics_close(m);
    m = tri_metrics_open(dir, TRI_METRICS_RESUME, 1, 0);
    cr_assert_not_null(m);
    tri_metrics_write(m, 2, &TRI_METRIC_NUM("loss", "%.17g", 2.0), 1);
    tri_metrics_close(m);
    got = read_in(dir, "metrics.jsonl");
    char want[512];
    snprintf(want, sizeof want, "%s{\"step\": 1, \"loss\": 2.75}\n{\"step\": 2, \"loss\": 2}\n", event);
    cr_assert_str_eq(got, want);
    free(got);
    m = tri_metrics_open(dir, TRI_METRICS_NEW, 0, 0); /* a new job: nothing kept */
    cr_assert_not_null(m);
    tri_metrics_close(m);
    got = read_in(dir, "metrics.jsonl");
    cr_assert_str_eq(got, "");
    free(got);
    tt_rmrf(dir);
    free(dir);
}
