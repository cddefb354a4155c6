/* base/opt: command-line options from a table. Every value is checked
 * against the number written in the test, every message against the line
 * users see (stderr captured), and the help against the table it is
 * printed from. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/opt.h"
#include "helpers/testutil.h"

typedef struct vals {
    int flag, n;
    long big;
    double lr;
    uint64_t seed;
    const char *dev, *out;
    tri_opt_list sets, pos;
} vals;

/* Parses the argument words of line (space-separated; argv[0] = "demo") into
 * v with the demo table; returns the result and the captured stderr. */
static int parse(const char *line, vals *v, int max_pos, int ends, char **err) {
    memset(v, 0, sizeof *v);
    v->n = 7;
    const tri_opt opts[] = {
        {"--flag", TRI_OPT_FLAG, &v->flag, .help = "a switch"},
        {"--n", TRI_OPT_INT, &v->n, "N", 1, 100, .help = "an int in [1, 100]\nsecond line", .alias = "-n"},
        {"--big", TRI_OPT_LONG, &v->big, "B", -5, 1L << 40, .help = "a long"},
        {"--lr", TRI_OPT_DOUBLE, &v->lr, "X", 0, 1, .help = "a number"},
        {"--seed", TRI_OPT_U64, &v->seed, "S", .help = "a u64"},
        {"--device", TRI_OPT_STR, &v->dev, "D", .choices = "cpu|cuda", .help = "a choice"},
        {"--out", TRI_OPT_STR, &v->out, "DIR", .help = "any string"},
        {"--set", TRI_OPT_LIST, &v->sets, "K=V", .help = "repeatable"},
    };
    tri_cmd_spec spec = {.cmd = "trident demo", .who = "demo", .usage = "CONFIG [options]", .opts = opts,
                         .n_opts = TRI_OPT_N(opts), .pos = &v->pos, .max_pos = max_pos, .pos_name = "CONFIG",
                         .pos_ends_options = ends};
    char *copy = strdup(line), *argv[64];
    int argc = 0;
    argv[argc++] = "demo";
    for (char *t = strtok(copy, " "); t; t = strtok(NULL, " ")) argv[argc++] = t;
    char *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/stderr", dir);
    tt_capture cap;
    tt_capture_begin(&cap, path);
    int rc = tri_opt_parse(&spec, argc, argv);
    *err = tt_capture_end(&cap);
    tt_rmrf(dir);
    free(dir);
    /* copy stays alive: the values point into it */
    return rc;
}

Test(opt, every_kind_is_stored_from_both_spellings) {
    vals v;
    char *err;
    int rc = parse("--flag -n 42 --big=1099511627776 --lr 0.25 --seed=18446744073709551615 --device cuda "
                   "--out=a=b --set x=1 --set=y=2 cfg.json",
                   &v, 1, 0, &err);
    cr_assert_eq(rc, TRI_OPT_GO, "%s", err);
    cr_assert_str_empty(err);
    cr_assert_eq(v.flag, 1);
    cr_assert_eq(v.n, 42);
    cr_assert_eq(v.big, 1099511627776L);
    cr_assert_eq(v.lr, 0.25);
    cr_assert_eq(v.seed, UINT64_MAX);
    cr_assert_str_eq(v.dev, "cuda");
    cr_assert_str_eq(v.out, "a=b"); /* only the first '=' splits */
    cr_assert_eq(v.sets.n, 2);
    cr_assert_str_eq(v.sets.v[0], "x=1");
    cr_assert_str_eq(v.sets.v[1], "y=2");
    cr_assert_eq(v.pos.n, 1);
    cr_assert_str_eq(v.pos.v[0], "cfg.json");
    tri_opt_list_free(&v.sets);
    tri_opt_list_free(&v.pos);
    cr_assert_null(v.sets.v);
}

Test(opt, values_out_of_range_name_the_option_and_store_nothing) {
    static const struct {
        const char *line, *msg;
    } cases[] = {
        {"--n 0", "trident: --n: expected an integer in [1, 100], got '0'\n"},
        {"--n 101", "trident: --n: expected an integer in [1, 100], got '101'\n"},
        {"--n 4x", "trident: --n: expected an integer in [1, 100], got '4x'\n"},
        {"--n=", "trident: --n: expected an integer in [1, 100], got ''\n"},
        {"--big -6", "trident: --big: expected an integer in [-5, 1099511627776], got '-6'\n"},
        {"--lr 1.5", "trident: --lr: expected a number in [0, 1], got '1.5'\n"},
        {"--lr nan", "trident: --lr: expected a number in [0, 1], got 'nan'\n"},
        {"--seed -1", "trident: --seed: expected a non-negative integer, got '-1'\n"},
        {"--seed 18446744073709551616", "trident: --seed: expected a non-negative integer, got '18446744073709551616'\n"},
        {"--device tpu", "trident: --device: expected one of cpu|cuda, got 'tpu'\n"},
        {"--bogus", "trident: demo: unknown or incomplete option '--bogus' (try `trident demo --help`)\n"},
        {"--n", "trident: demo: --n needs a value\n"},
        {"--flag=1", "trident: demo: unknown or incomplete option '--flag=1' (try `trident demo --help`)\n"},
        {"a.json b.json", "trident: demo: unexpected argument 'b.json' (one CONFIG only)\n"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        vals v;
        char *err;
        int rc = parse(cases[k].line, &v, 1, 0, &err);
        cr_assert_eq(rc, TRI_OPT_ERROR, "%s: parsed", cases[k].line);
        cr_assert_str_eq(err, cases[k].msg, "%s", cases[k].line);
        cr_assert_eq(v.n, 7, "%s: the default was overwritten", cases[k].line);
        cr_assert_eq(tri_opt_exit(rc), 2);
        free(err);
    }
}

Test(opt, positional_arguments_are_refused_where_none_are_taken) {
    vals v;
    char *err;
    cr_assert_eq(parse("x", &v, 0, 0, &err), TRI_OPT_ERROR);
    cr_assert_str_eq(err, "trident: demo: unexpected argument 'x'\n");
}

Test(opt, a_double_dash_and_pos_ends_options_pass_the_rest_verbatim) {
    vals v;
    char *err;
    /* tridentrun: the first positional word starts the command, whose own
     * options are not ours */
    cr_assert_eq(parse("--n 3 prog --n 9 --bogus", &v, -1, 1, &err), TRI_OPT_GO, "%s", err);
    cr_assert_eq(v.n, 3);
    cr_assert_eq(v.pos.n, 4);
    cr_assert_str_eq(v.pos.v[0], "prog");
    cr_assert_str_eq(v.pos.v[3], "--bogus");
    cr_assert_eq(parse("--n 4 -- --n 9", &v, -1, 0, &err), TRI_OPT_GO, "%s", err);
    cr_assert_eq(v.n, 4);
    cr_assert_eq(v.pos.n, 2);
    cr_assert_str_eq(v.pos.v[0], "--n");
}

Test(opt, help_prints_every_row_of_the_table_and_says_so) {
    vals v;
    char *err, *dir = tt_mkdtemp(), path[4200];
    snprintf(path, sizeof path, "%s/out", dir);
    FILE *saved = stdout, *f = fopen(path, "w");
    stdout = f;
    int rc = parse("--n 5 --help", &v, 1, 0, &err);
    stdout = saved;
    fclose(f);
    cr_assert_eq(rc, TRI_OPT_HELP);
    cr_assert_eq(tri_opt_exit(rc), 0);
    char *help = tt_read(path);
    /* one column as wide as the widest "name ARG" (here "--device D"), two spaces, the help */
    const char *want = "usage: trident demo CONFIG [options]\n"
                       "  --flag      a switch\n"
                       "  -n, --n N   an int in [1, 100]\n"
                       "              second line\n"
                       "  --big B     a long\n"
                       "  --lr X      a number\n"
                       "  --seed S    a u64\n"
                       "  --device D  a choice\n"
                       "  --out DIR   any string\n"
                       "  --set K=V   repeatable\n";
    cr_assert_str_eq(help, want);
    free(help);
    tt_rmrf(dir);
    free(dir);
}
