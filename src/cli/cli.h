/* Subcommands of `trident` (src/cmd_*.c) and the small argument helpers they share. */
#ifndef TRI_CLI_H
#define TRI_CLI_H

#include "base/opt.h" /* tri_arg_*, the option tables */

int tri_cmd_train(int argc, char **argv);
int tri_cmd_sample(int argc, char **argv);
int tri_cmd_eval(int argc, char **argv);
int tri_cmd_bench(int argc, char **argv);
int tri_cmd_schedule(int argc, char **argv);
int tri_cmd_plan(int argc, char **argv);
int tri_cmd_sweep(int argc, char **argv);

#endif
