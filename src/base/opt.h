/* Command-line options from one table per command, as the config's field
 * table does for config keys: the same rows parse argv, check each value's
 * type and range, and print `--help`, so help and parser cannot drift.
 *
 *   long batches = 20; const char *ckpt = NULL; int json = 0;
 *   const tri_opt opts[] = {
 *       {"--ckpt", TRI_OPT_STR, &ckpt, "DIR", .help = "checkpoint root or one step directory"},
 *       {"--batches", TRI_OPT_LONG, &batches, "N", 1, 1 << 30, .help = "batches to evaluate (default 20)"},
 *       {"--json", TRI_OPT_FLAG, &json, .help = "print one JSON object"},
 *   };
 *   tri_cmd_spec spec = {.cmd = "trident eval", .usage = "--ckpt DIR --data FILE [options]",
 *                        .opts = opts, .n_opts = TRI_OPT_N(opts)};
 *   int rc = tri_opt_parse(&spec, argc, argv);   (argv[0] is the command's name)
 *   if (rc != TRI_OPT_GO) return tri_opt_exit(rc);
 *
 * Both `--name value` and `--name=value` are taken; `-h` and `--help` print
 * the help to stdout. Errors print one line (base/err.h) naming the option
 * and what was expected, e.g.
 *   trident: --batches: expected an integer in [1, 1073741824], got 'x'
 *   trident: eval: unknown or incomplete option '--bach' (try `trident eval --help`)
 *   trident: eval: --batches needs a value
 * and nothing is stored for the option at fault. Values point into argv
 * (not copied). No state: a table lives on its command's stack. */
#ifndef TRI_BASE_OPT_H
#define TRI_BASE_OPT_H

#include <stdint.h>
#include <stdio.h>

typedef enum {
    TRI_OPT_FLAG,   /* int *: 1 when given                                     */
    TRI_OPT_STR,    /* const char **: the value; .choices "a|b" restricts it    */
    TRI_OPT_INT,    /* int *: an integer in [min, max]                          */
    TRI_OPT_LONG,   /* long *: an integer in [min, max]                         */
    TRI_OPT_DOUBLE, /* double *: a number in [min, max]                         */
    TRI_OPT_U64,    /* uint64_t *: a non-negative integer                       */
    TRI_OPT_LIST    /* tri_opt_list *: every occurrence, in order (e.g. --set)  */
} tri_opt_kind;

/* The values of a repeatable option, or the positional arguments. v is
 * allocated by tri_opt_parse (argc entries at most); tri_opt_list_free. */
typedef struct tri_opt_list {
    const char **v;
    int n;
} tri_opt_list;

typedef struct tri_opt {
    const char *name;    /* "--batches"                                         */
    tri_opt_kind kind;
    void *dst;           /* see tri_opt_kind                                    */
    const char *arg;     /* the value's name in --help ("N", "DIR"); flags: NULL */
    double min, max;     /* INT, LONG, DOUBLE: the accepted range               */
    const char *choices; /* STR: "cpu|cpu-guard|cuda" (NULL: any string)        */
    const char *help;    /* '\n' starts a continuation line                     */
    const char *alias;   /* a second spelling ("-n"), or NULL                   */
} tri_opt;

#define TRI_OPT_N(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct tri_cmd_spec {
    const char *cmd;     /* "trident eval": usage line and "try `... --help`"   */
    const char *who;     /* prefix of messages ("eval"); NULL: none             */
    const char *usage;   /* after "usage: <cmd> ": "--ckpt DIR [options]"       */
    const char *about;   /* lines after the usage line, before the options      */
    const char *footer;  /* lines after the options, or NULL                   */
    const tri_opt *opts;
    int n_opts;
    /* Positional arguments (anything not starting with '-', or everything
     * after "--"): collected into *pos, at most max_pos of them (0: none
     * allowed; -1: any number). pos_name names them in messages ("CONFIG"). */
    tri_opt_list *pos;
    int max_pos;
    const char *pos_name;
    /* 1: the first positional argument ends the options; it and everything
     * after it are positional, as given (tridentrun's COMMAND). */
    int pos_ends_options;
} tri_cmd_spec;

enum {
    TRI_OPT_GO = 0,    /* parsed: run the command                    */
    TRI_OPT_HELP = 1,  /* --help was printed: exit 0                  */
    TRI_OPT_ERROR = -1 /* one line was printed: exit TRI_EXIT_BAD_INPUT */
};

/* Parses argv[1..argc-1] into the table's destinations. */
int tri_opt_parse(const tri_cmd_spec *spec, int argc, char **argv);

/* The exit code for a result of tri_opt_parse other than TRI_OPT_GO:
 * TRI_EXIT_OK after help, TRI_EXIT_BAD_INPUT after an error. */
int tri_opt_exit(int parse_result);

/* Prints the help: "usage: <cmd> <usage>", the about lines, one row per
 * option (name and arg in one column, help beside), the footer. */
void tri_opt_help(const tri_cmd_spec *spec, FILE *f);

/* Frees a list's array (NULL-safe; zeroes *l). */
void tri_opt_list_free(tri_opt_list *l);

/* Parses one value as the table would, for values that arrive another way
 * (an environment variable, a second level of parsing). `what` names it in
 * the message ("--threads", "OMP_NUM_THREADS"). 0, or -1 after printing. */
int tri_arg_int(const char *what, const char *val, long min, long max, long *out);
int tri_arg_double(const char *what, const char *val, double min, double max, double *out);
int tri_arg_u64(const char *what, const char *val, uint64_t *out);

#endif
