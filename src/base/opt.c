/* Command-line options from a table (base/opt.h). */
#include "base/opt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/str.h"

int tri_arg_int(const char *what, const char *val, long min, long max, long *out) {
    char *end = NULL;
    errno = 0;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || !*val || *end || errno || v < min || v > max)
        return tri_error("%s: expected an integer in [%ld, %ld], got '%s'", what, min, max, val ? val : "(nothing)");
    *out = v;
    return 0;
}

int tri_arg_double(const char *what, const char *val, double min, double max, double *out) {
    char *end = NULL;
    errno = 0;
    double v = val ? strtod(val, &end) : 0;
    if (!val || !*val || *end || errno || !(v >= min && v <= max))
        return tri_error("%s: expected a number in [%g, %g], got '%s'", what, min, max, val ? val : "(nothing)");
    *out = v;
    return 0;
}

int tri_arg_u64(const char *what, const char *val, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = val ? strtoull(val, &end, 10) : 0;
    if (!val || !*val || *end || errno || val[0] == '-')
        return tri_error("%s: expected a non-negative integer, got '%s'", what, val ? val : "(nothing)");
    *out = (uint64_t)v;
    return 0;
}

void tri_opt_list_free(tri_opt_list *l) {
    if (l == NULL) return;
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static void list_push(tri_opt_list *l, int argc, const char *s) {
    if (l->v == NULL) l->v = tri_xcalloc((size_t)argc + 1, sizeof *l->v);
    l->v[l->n++] = s;
}

/* Whether s is one of the '|'-separated words of choices. */
static int is_choice(const char *choices, const char *s) {
    size_t n = strlen(s);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, s, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

/* Stores val into o's destination; 0 or -1 after printing. */
static int store(const tri_opt *o, const char *val, int argc) {
    long l = 0;
    switch (o->kind) {
    case TRI_OPT_FLAG: *(int *)o->dst = 1; return 0;
    case TRI_OPT_STR:
        if (o->choices && !is_choice(o->choices, val))
            return tri_error("%s: expected one of %s, got '%s'", o->name, o->choices, val);
        *(const char **)o->dst = val;
        return 0;
    case TRI_OPT_INT:
        if (tri_arg_int(o->name, val, (long)o->min, (long)o->max, &l) != 0) return -1;
        *(int *)o->dst = (int)l;
        return 0;
    case TRI_OPT_LONG: return tri_arg_int(o->name, val, (long)o->min, (long)o->max, (long *)o->dst);
    case TRI_OPT_DOUBLE: return tri_arg_double(o->name, val, o->min, o->max, (double *)o->dst);
    case TRI_OPT_U64: return tri_arg_u64(o->name, val, (uint64_t *)o->dst);
    case TRI_OPT_LIST: list_push((tri_opt_list *)o->dst, argc, val); return 0;
    }
    TRI_FAIL("option %s: kind %d", o->name, (int)o->kind);
}

static const tri_opt *find(const tri_cmd_spec *spec, const char *a, size_t n) {
    for (int k = 0; k < spec->n_opts; k++) {
        const tri_opt *o = &spec->opts[k];
        if ((strlen(o->name) == n && strncmp(o->name, a, n) == 0) ||
            (o->alias && strlen(o->alias) == n && strncmp(o->alias, a, n) == 0))
            return o;
    }
    return NULL;
}

static int unknown(const tri_cmd_spec *spec, const char *a) {
    if (spec->who)
        return tri_error("%s: unknown or incomplete option '%s' (try `%s --help`)", spec->who, a, spec->cmd);
    return tri_error("unknown or incomplete option '%s' (try `%s --help`)", a, spec->cmd);
}

static int no_value(const tri_cmd_spec *spec, const char *a) {
    if (spec->who) return tri_error("%s: %s needs a value", spec->who, a);
    return tri_error("%s needs a value", a);
}

static int positional(const tri_cmd_spec *spec, int argc, const char *a) {
    if (spec->pos == NULL || (spec->max_pos >= 0 && spec->pos->n >= spec->max_pos)) {
        const char *what = spec->pos_name ? spec->pos_name : "argument";
        if (spec->max_pos > 0 && spec->who)
            return tri_error("%s: unexpected argument '%s' (%s %s only)", spec->who, a,
                             spec->max_pos == 1 ? "one" : "fewer", what);
        if (spec->who) return tri_error("%s: unexpected argument '%s'", spec->who, a);
        return tri_error("unexpected argument '%s'", a);
    }
    list_push(spec->pos, argc, a);
    return 0;
}

int tri_opt_parse(const tri_cmd_spec *spec, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tri_opt_help(spec, stdout);
            return TRI_OPT_HELP;
        }
        if (!strcmp(a, "--")) {
            for (i++; i < argc; i++)
                if (positional(spec, argc, argv[i]) != 0) return TRI_OPT_ERROR;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (positional(spec, argc, a) != 0) return TRI_OPT_ERROR;
            if (spec->pos_ends_options) {
                for (i++; i < argc; i++) list_push(spec->pos, argc, argv[i]);
                break;
            }
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        const tri_opt *o = find(spec, a, n);
        if (o == NULL || (o->kind == TRI_OPT_FLAG && eq)) return unknown(spec, a);
        const char *val = NULL;
        if (o->kind != TRI_OPT_FLAG) {
            if (eq)
                val = eq + 1;
            else if (i + 1 < argc)
                val = argv[++i];
            else
                return no_value(spec, a);
        }
        if (store(o, val, argc) != 0) return TRI_OPT_ERROR;
    }
    return TRI_OPT_GO;
}

int tri_opt_exit(int parse_result) { return parse_result == TRI_OPT_HELP ? TRI_EXIT_OK : TRI_EXIT_BAD_INPUT; }

/* Prints text with every line after the first indented by col spaces. */
static void put_wrapped(FILE *f, const char *text, int col) {
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        if (p != text) fprintf(f, "%*s", col, "");
        fprintf(f, "%.*s\n", len, p);
        if (!nl) break;
        p = nl + 1;
    }
}

static int head_len(const tri_opt *o) {
    int n = (int)strlen(o->name) + (o->alias ? (int)strlen(o->alias) + 2 : 0);
    return n + (o->arg ? 1 + (int)strlen(o->arg) : 0);
}

void tri_opt_help(const tri_cmd_spec *spec, FILE *f) {
    fprintf(f, "usage: %s%s%s\n", spec->cmd, spec->usage ? " " : "", spec->usage ? spec->usage : "");
    if (spec->about) fprintf(f, "%s", spec->about);
    int w = 0;
    for (int k = 0; k < spec->n_opts; k++)
        if (head_len(&spec->opts[k]) > w) w = head_len(&spec->opts[k]);
    for (int k = 0; k < spec->n_opts; k++) {
        const tri_opt *o = &spec->opts[k];
        char head[256];
        snprintf(head, sizeof head, "%s%s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "", o->name,
                 o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "  %-*s  ", w, head);
        put_wrapped(f, o->help ? o->help : "", w + 4);
    }
    if (spec->footer) fprintf(f, "%s", spec->footer);
}
