/* trident: the command-line entry point. One table names every command,
 * the function that runs it and its one-line summary; the dispatch and
 * `trident --help` are both read from it. Each command returns the exit code
 * (base/exit.h): TRI_EXIT_OK, TRI_EXIT_BAD_INPUT with a one-line message
 * naming the culprit, TRI_EXIT_FAILURE for a runtime failure. */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/exit.h"
#include "cli/cli.h"
#include "cli/cmd_data.h"
#include "cli/cmd_tokenize.h"
#include "config/config.h"
#include "kernels/blas.h"

static int cmd_config_help(int argc, char **argv) {
    (void)argc;
    (void)argv;
    tri_config_help(stdout);
    return TRI_EXIT_OK;
}

typedef struct command {
    const char *name;                  /* argv[1]                                  */
    int (*run)(int argc, char **argv); /* argv[0] is the command's name          */
    const char *synopsis;              /* the arguments, after the name ("" none)  */
    const char *summary;               /* one line: what it does                  */
} command;

static const command COMMANDS[] = {
    {"train", tri_cmd_train, "CONFIG [--set section.key=value]... [--resume] [--threads N] [--device cpu]",
     "train a GPT as the JSON config says (under tridentrun for several ranks)"},
    {"sample", tri_cmd_sample, "--ckpt DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]",
     "generate text from a checkpoint"},
    {"eval", tri_cmd_eval, "--ckpt DIR --data FILE [--batches N] [--batch B] [--json]",
     "mean loss of a checkpoint on a token file"},
    {"bench", tri_cmd_bench, "CONFIG [--steps N] [--threads K] [--set ...]",
     "training throughput on synthetic tokens, with the machine's sgemm speed"},
    {"schedule", tri_cmd_schedule, "--pp P --micro-batches M [--vpp V] [--schedule S] [--costs F,B,W] [--json]",
     "a pipeline schedule's timeline, deadlock check, bubble and peak memory (simulated)"},
    {"plan", tri_cmd_plan, "CONFIG --gpu h100|a100|cpu [--gpus N] [--search] [--set ...] [--json]",
     "memory per rank and step time of a layout, or the best layouts of N devices"},
    {"sweep", tri_cmd_sweep, "SWEEP.json [--dry-run] [--out DIR] [--threads N] [--set ...]",
     "a grid of training runs (model sizes, layouts, learning rates), resumable, with a summary"},
    {"tokenize", tri_cmd_tokenize, "train|encode|decode ...",
     "byte-level BPE: train a tokenizer, encode text to token files, decode"},
    {"data", tri_cmd_data, "info|dump PATH ...", "inspect a token file (llm.c .bin or Megatron .bin/.idx)"},
    {"config-help", cmd_config_help, "", "every config key with its type, default, range and meaning"},
};

#define N_COMMANDS ((int)(sizeof COMMANDS / sizeof COMMANDS[0]))

static void usage(FILE *f) {
    fprintf(f, "usage: trident <command> [options]\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) {
        const command *c = &COMMANDS[i];
        fprintf(f, "  %s%s%s\n        %s\n", c->name, c->synopsis[0] ? " " : "", c->synopsis, c->summary);
    }
    fprintf(f, "\n`trident <command> --help` shows a command's options.\n");
}

int main(int argc, char **argv) {
    tri_blas_pick_kernels(argv); /* may start the program again with OpenBLAS's proper kernels */
    /* under mpirun stdout is a pipe: line-buffer it so that log lines arrive
     * as they happen and survive a crashing rank */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return argc < 2 ? TRI_EXIT_BAD_INPUT : TRI_EXIT_OK;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    tri_error("unknown command '%s' (try `trident --help`)", argv[1]);
    return TRI_EXIT_BAD_INPUT;
}
