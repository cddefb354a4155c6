/* src/sweep/grammar.c: the sweep file read from text (no file, no config
 * loaded). The points of a grid x zip file are compared, in order, with
 * lists written out by hand; every refused file is compared with the whole
 * line users see (stderr captured), which names the file and the key. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/testutil.h"
#include "sweep/sweep.h"

/* Parses json as the sweep file "s.json" with the given --set words; returns
 * the result and, in *err, what was printed to stderr (malloc'd). */
static int parse(tri_sweep *sw, const char *json, const char *out, int threads, int n_sets, const char *const *sets,
                 char **err) {
    tri_sweep_init(sw, "s.json", out, threads);
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/stderr", dir);
    tt_capture cap;
    tt_capture_begin(&cap, path);
    int rc = tri_sweep_parse(sw, json, strlen(json), n_sets, sets);
    *err = tt_capture_end(&cap);
    tt_rmrf(dir);
    free(dir);
    return rc;
}

/* The sets of point idx as one string "a=1 b=2 ..." (for comparing with a written list). */
static void sets_line(const tri_sweep_point *p, char *buf, size_t n) {
    buf[0] = '\0';
    for (int i = 0; i < p->n_sets; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", i ? " " : "", p->sets[i]);
    }
}

Test(sweep_grammar, grid_then_zip_expands_in_file_order_last_axis_fastest) {
    static const char json[] = "{\"base\": \"b.json\", \"out\": \"runs\", \"set\": {\"train.steps\": 20},\n"
                               " \"grid\": {\"model.n_layer\": [1, 2], \"train.lr\": [1e-3, 0.003, 1e-2]},\n"
                               " \"zip\": [{\"model.n_embd\": [32, 64], \"model.n_head\": [2, 4]}]}";
    tri_sweep sw;
    char *err;
    cr_assert_eq(parse(&sw, json, NULL, 0, 0, NULL, &err), 0, "%s", err);
    cr_expect_str_empty(err);
    free(err);
    cr_assert_eq(sw.n_axes, 3);
    cr_assert_eq(sw.n_points, 2 * 3 * 2);
    cr_expect_str_eq(sw.base, "b.json");
    cr_expect_str_eq(sw.out, "runs");
    /* n_layer slowest, then lr, then the zip group (n_embd and n_head together) */
    static const char *const names[12] = {
        "n_layer=1_lr=0.001_n_embd=32_n_head=2", "n_layer=1_lr=0.001_n_embd=64_n_head=4",
        "n_layer=1_lr=0.003_n_embd=32_n_head=2", "n_layer=1_lr=0.003_n_embd=64_n_head=4",
        "n_layer=1_lr=0.01_n_embd=32_n_head=2",  "n_layer=1_lr=0.01_n_embd=64_n_head=4",
        "n_layer=2_lr=0.001_n_embd=32_n_head=2", "n_layer=2_lr=0.001_n_embd=64_n_head=4",
        "n_layer=2_lr=0.003_n_embd=32_n_head=2", "n_layer=2_lr=0.003_n_embd=64_n_head=4",
        "n_layer=2_lr=0.01_n_embd=32_n_head=2",  "n_layer=2_lr=0.01_n_embd=64_n_head=4",
    };
    static const int layer[12] = {1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}, embd[12] = {32, 64, 32, 64, 32, 64,
                                                                                  32, 64, 32, 64, 32, 64};
    static const char *const lr[12] = {"0.001", "0.001", "0.003", "0.003", "0.01", "0.01",
                                       "0.001", "0.001", "0.003", "0.003", "0.01", "0.01"};
    for (int i = 0; i < sw.n_points; i++) {
        tri_sweep_point p;
        cr_assert_eq(tri_sweep_point_init(&sw, i, &p), 0);
        cr_expect_str_eq(p.name, names[i], "point %d", i);
        char dir[300], want[8192], got[8192];
        snprintf(dir, sizeof dir, "runs/%s", names[i]);
        cr_expect_str_eq(p.dir, dir, "point %d", i);
        /* the fixed overrides, the point's in axis order, then its directories */
        snprintf(want, sizeof want,
                 "train.steps=20 model.n_layer=%d train.lr=%s model.n_embd=%d model.n_head=%d log.dir=%s "
                 "checkpoint.dir=%s/ckpt",
                 layer[i], lr[i], embd[i], embd[i] == 32 ? 2 : 4, dir, dir);
        sets_line(&p, got, sizeof got);
        cr_expect_str_eq(got, want, "point %d", i);
        /* values: the varying keys with the file's own JSON values */
        char *v = cJSON_PrintUnformatted(p.values);
        snprintf(want, sizeof want, "{\"model.n_layer\":%d,\"train.lr\":%s,\"model.n_embd\":%d,\"model.n_head\":%d}",
                 layer[i], lr[i], embd[i], embd[i] == 32 ? 2 : 4);
        cr_expect_str_eq(v, want, "point %d", i);
        free(v);
        tri_sweep_point_free(&p);
        cr_expect_null(p.values);
    }
    tri_sweep_free(&sw);
    cr_expect_null(sw.root);
}

Test(sweep_grammar, no_axes_is_one_point_named_base) {
    tri_sweep sw;
    char *err;
    cr_assert_eq(parse(&sw, "{\"base\": \"b.json\", \"out\": \"o\"}", NULL, 0, 0, NULL, &err), 0, "%s", err);
    free(err);
    cr_assert_eq(sw.n_points, 1);
    tri_sweep_point p;
    cr_assert_eq(tri_sweep_point_init(&sw, 0, &p), 0);
    cr_expect_str_eq(p.name, "base");
    cr_expect_str_eq(p.dir, "o/base");
    cr_assert_eq(p.n_sets, 2);
    cr_expect_str_eq(p.sets[0], "log.dir=o/base");
    cr_expect_str_eq(p.sets[1], "checkpoint.dir=o/base/ckpt");
    tri_sweep_point_free(&p);
    tri_sweep_free(&sw);
}

/* Values as --set takes them, and names a file system holds. */
Test(sweep_grammar, values_are_written_as_set_takes_them_and_names_are_file_safe) {
    static const char json[] = "{\"base\": \"b.json\", \"out\": \"o\",\n"
                               " \"grid\": {\"train.lr\": [3, 0.1, 1e20, 2.5e-7, \"a/b c\", true]}}";
    tri_sweep sw;
    char *err;
    cr_assert_eq(parse(&sw, json, NULL, 0, 0, NULL, &err), 0, "%s", err);
    free(err);
    static const char *const set[6] = {"train.lr=3",       "train.lr=0.1",   "train.lr=1e+20",
                                       "train.lr=2.5e-07", "train.lr=a/b c", "train.lr=true"};
    static const char *const name[6] = {"lr=3", "lr=0.1", "lr=1e+20", "lr=2.5e-07", "lr=a_b_c", "lr=true"};
    cr_assert_eq(sw.n_points, 6);
    for (int i = 0; i < 6; i++) {
        tri_sweep_point p;
        cr_assert_eq(tri_sweep_point_init(&sw, i, &p), 0);
        cr_expect_str_eq(p.sets[0], set[i]);
        cr_expect_str_eq(p.name, name[i]);
        tri_sweep_point_free(&p);
    }
    tri_sweep_free(&sw);
}

/* Two varying keys with the same last part keep their full names. */
Test(sweep_grammar, keys_sharing_a_short_name_keep_their_section) {
    static const char json[] = "{\"base\": \"b.json\", \"out\": \"o\",\n"
                               " \"zip\": [{\"log.every\": [1, 2], \"checkpoint.every\": [10, 20]}],\n"
                               " \"grid\": {\"train.seed\": [5]}}";
    tri_sweep sw;
    char *err;
    cr_assert_eq(parse(&sw, json, NULL, 0, 0, NULL, &err), 0, "%s", err);
    free(err);
    cr_assert_eq(sw.n_points, 2);
    tri_sweep_point p;
    cr_assert_eq(tri_sweep_point_init(&sw, 1, &p), 0);
    cr_expect_str_eq(p.name, "seed=5_log.every=2_checkpoint.every=20"); /* grid before zip */
    tri_sweep_point_free(&p);
    tri_sweep_free(&sw);
}

/* The command line's --set replaces the file's "set" of the same key, a new
 * key is added after them; --out and --threads win over the file's. */
Test(sweep_grammar, command_line_wins_over_the_file) {
    static const char json[] = "{\"base\": \"b.json\", \"out\": \"o\", \"threads\": 3, \"plot\": true,\n"
                               " \"set\": {\"train.steps\": 100, \"train.seed\": 1}}";
    static const char *const sets[] = {"train.steps=4", "train.lr=0.5"};
    tri_sweep sw;
    char *err;
    cr_assert_eq(parse(&sw, json, "elsewhere", 0, 2, sets, &err), 0, "%s", err);
    free(err);
    cr_expect_str_eq(sw.out, "elsewhere");
    cr_expect_eq(sw.threads, 3);
    cr_expect_eq(sw.plot, 1);
    cr_assert_eq(sw.n_fixed, 3);
    cr_expect_str_eq(sw.fixed[0], "train.steps=4");
    cr_expect_str_eq(sw.fixed[1], "train.seed=1");
    cr_expect_str_eq(sw.fixed[2], "train.lr=0.5");
    tri_sweep_free(&sw);
    cr_assert_eq(parse(&sw, json, NULL, 7, 0, NULL, &err), 0, "%s", err);
    free(err);
    cr_expect_eq(sw.threads, 7);
    cr_expect_str_eq(sw.out, "o");
    tri_sweep_free(&sw);
}

/* Each refused file: -1 and exactly one line naming the file and the key. */
Test(sweep_grammar, refused_files_name_the_file_and_the_key) {
    static const struct {
        const char *json, *line;
    } cases[] = {
        {"{\"base\": \"b\", \"out\": \"o\", \"grid\": {\"model.n_embdd\": [32]}}",
         "s.json: grid: model.n_embdd: unknown config key (see `trident config-help`)"},
        {"{\"base\": \"b\", \"out\": \"o\", \"grid\": {\"model.n_embd\": 32}}",
         "s.json: grid: model.n_embd: expected a non-empty array of values, got a number"},
        {"{\"base\": \"b\", \"out\": \"o\", \"grid\": {\"model.n_embd\": []}}",
         "s.json: grid: model.n_embd: expected a non-empty array of values, got an empty array"},
        {"{\"base\": \"b\", \"out\": \"o\", \"grid\": {\"model.n_embd\": true}}",
         "s.json: grid: model.n_embd: expected a non-empty array of values, got true"},
        {"{\"base\": \"b\", \"out\": \"o\", \"grid\": {\"train.lr\": [0.001, null]}}",
         "s.json: grid: train.lr[1]: expected a number, string or boolean, got null"},
        {"{\"base\": \"b\", \"out\": \"o\", \"grid\": [1]}",
         "s.json: grid: expected an object {\"section.key\": [values]}, got an array"},
        {"{\"base\": \"b\", \"out\": \"o\", \"zip\": [{\"model.n_embd\": [32, 64], \"model.n_head\": [2]}]}",
         "s.json: zip[0]: model.n_head has 1 values but model.n_embd has 2 (keys that vary together need lists of "
         "the same length)"},
        {"{\"base\": \"b\", \"out\": \"o\", \"zip\": [{\"train.lr\": [1]}, {}]}",
         "s.json: zip[1]: expected a non-empty object {\"section.key\": [values], ...}, got an object"},
        {"{\"base\": \"b\", \"out\": \"o\", \"zip\": {}}",
         "s.json: zip: expected an array of objects {\"section.key\": [values], ...}, got an object"},
        {"{\"base\": \"b\", \"out\": \"o\", \"set\": {\"train.lr\": 0.1}, \"zip\": [{\"train.lr\": [0.1]}]}",
         "s.json: zip[0]: train.lr: given twice (in set, grid, zip or --set)"},
        {"{\"base\": \"b\", \"out\": \"o\", \"set\": {\"train.lr\": [0.1]}}",
         "s.json: set: train.lr: expected a number, string or boolean, got an array"},
        {"{\"base\": \"b\", \"out\": \"o\", \"set\": 3}",
         "s.json: set: expected an object {\"section.key\": value}, got a number"},
        {"{\"base\": \"b\", \"out\": \"o\", \"set\": {\"checkpoint.dir\": \"x\"}}",
         "s.json: set: checkpoint.dir: set by the sweep for each point (OUT/<point>), not settable"},
        {"{\"base\": \"b\", \"out\": \"o\", \"gird\": {}}",
         "s.json: gird: unknown key (expected description, base, out, set, grid, zip, threads or plot)"},
        {"{\"base\": \"b\", \"out\": \"o\", \"out\": \"p\"}", "s.json: out: given twice"},
        {"{\"out\": \"o\"}", "s.json: base: expected the path of a config file (a non-empty string), got nothing"},
        {"{\"base\": \"\", \"out\": \"o\"}",
         "s.json: base: expected the path of a config file (a non-empty string), got a string"},
        {"{\"base\": \"b\", \"out\": false}",
         "s.json: out: expected an output directory (a non-empty string), got false"},
        {"{\"base\": \"b\", \"out\": \"o\", \"plot\": 1}", "s.json: plot: expected true or false, got a number"},
        {"{\"base\": \"b\", \"out\": \"o\", \"threads\": 2.5}",
         "s.json: threads: expected an integer in [1, 1024], got a number"},
        {"{\"base\": \"b\", \"out\": \"o\", \"description\": [\"a\", true]}",
         "s.json: description: expected a string or an array of strings, got true in the array"},
        {"{\"base\": \"b\", \"out\": \"o\",\n \"grid\": [}", "s.json: JSON syntax error at line 2 (byte 36)"},
        {"[1]", "s.json: expected a JSON object at the top level, got an array"},
        {"{\"base\": \"b\", \"out\": \"o\", \"grid\": {\"train.lr\": [1, 2, 3, 4, 5, 6, 7, 8], \"train.seed\": [1, 2, 3, "
         "4, 5, 6, 7, 8], \"train.steps\": [1, 2, 3, 4, 5, 6, 7, 8], \"model.n_layer\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}}",
         "s.json: grid: more than 4096 points"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tri_sweep sw;
        char *err, want[1024];
        cr_expect_eq(parse(&sw, cases[i].json, NULL, 0, 0, NULL, &err), -1, "case %zu: accepted", i);
        snprintf(want, sizeof want, "trident: %s\n", cases[i].line);
        cr_expect_str_eq(err, want, "case %zu: %s", i, err);
        free(err);
        tri_sweep_free(&sw);
    }
}

/* The command line's --set is checked like the file's keys, and named as such. */
Test(sweep_grammar, command_line_sets_are_checked_too) {
    static const struct {
        const char *set, *line;
    } cases[] = {
        {"model.bogus=1", "trident: s.json: --set: model.bogus: unknown config key (see `trident config-help`)\n"},
        {"log.dir=x", "trident: s.json: --set: log.dir: set by the sweep for each point (OUT/<point>), not settable\n"},
        {"train.lr", "trident: sweep: --set train.lr: expected section.key=value\n"},
        {"train.seed=2", "trident: s.json: grid: train.seed: given twice (in set, grid, zip or --set)\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tri_sweep sw;
        char *err;
        const char *sets[] = {cases[i].set};
        cr_expect_eq(parse(&sw, "{\"base\": \"b\", \"out\": \"o\", \"grid\": {\"train.seed\": [1]}}", NULL, 0, 1, sets,
                           &err),
                     -1, "case %zu", i);
        cr_expect_str_eq(err, cases[i].line, "case %zu", i);
        free(err);
        tri_sweep_free(&sw);
    }
}

/* Issue 22: more than TRI_SWEEP_MAX_SETS (256) --set words overflowed a fixed
 * array of the sweep. A repeated key now replaces its earlier value and takes
 * no slot, so 1000 words over two keys parse, the last value of each winning
 * (as `trident train --set` does), and only distinct keys count towards the
 * limit (a config has fewer keys than that). */
Test(sweep_grammar, many_repeated_command_line_sets_take_one_slot_per_key) {
    enum { N = 1000 };
    static char words[N][32];
    const char *sets[N];
    for (int i = 0; i < N; i++) {
        snprintf(words[i], sizeof words[i], i % 2 ? "train.lr=%d" : "train.steps=%d", i);
        sets[i] = words[i];
    }
    tri_sweep sw;
    char *err;
    cr_assert_eq(parse(&sw, "{\"base\": \"b\", \"out\": \"o\", \"set\": {\"train.steps\": 5}}", NULL, 0, N, sets, &err),
                 0, "%s", err);
    cr_expect(err == NULL || err[0] == '\0', "%s", err);
    free(err);
    cr_assert_eq(sw.n_fixed, 2);
    cr_expect_str_eq(sw.fixed[0], "train.steps=998");
    cr_expect_str_eq(sw.fixed[1], "train.lr=999");
    cr_expect_leq(sw.n_cli_keys, 2);
    cr_assert_eq(sw.n_points, 1);
    tri_sweep_point p;
    cr_assert_eq(tri_sweep_point_init(&sw, 0, &p), 0);
    cr_expect_eq(p.n_sets, 4); /* the two keys, log.dir, checkpoint.dir */
    tri_sweep_point_free(&p);
    tri_sweep_free(&sw);
}
