/* Subcommands of `trident` (src/cmd_*.c) and the small argument helpers they share. */
#ifndef TRI_CLI_H
#define TRI_CLI_H

#include <stdint.h>

int tri_cmd_train(int argc, char **argv);
int tri_cmd_sample(int argc, char **argv);
int tri_cmd_eval(int argc, char **argv);
int tri_cmd_bench(int argc, char **argv);
int tri_cmd_schedule(int argc, char **argv);
int tri_cmd_plan(int argc, char **argv);
int tri_cmd_sweep(int argc, char **argv);

/* Parses an option's value; on failure prints "trident: OPT: expected ..., got VALUE"
 * and returns -1. */
int tri_arg_int(const char *opt, const char *val, long min, long max, long *out);
int tri_arg_double(const char *opt, const char *val, double min, double max, double *out);
int tri_arg_u64(const char *opt, const char *val, uint64_t *out);

#endif
