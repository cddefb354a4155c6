/* trident: the command-line entry point. Each subcommand returns the exit
 * code: 0 ok, 2 bad input (with a one-line message naming the culprit),
 * 1 runtime failure. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cmd_data.h"
#include "cli/cmd_tokenize.h"
#include "config/config.h"
#include "base/err.h"

static void usage(FILE *f) {
    fprintf(f, "usage: trident <command> [options]\n"
               "\n"
               "commands:\n"
               "  train CONFIG [--set section.key=value]... [--resume] [--threads N] [--device cpu]\n"
               "        train a GPT as the JSON config says (under tridentrun for several ranks)\n"
               "  sample --ckpt DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
               "        generate text from a checkpoint\n"
               "  eval --ckpt DIR --data FILE [--batches N] [--batch B] [--json]\n"
               "        mean loss of a checkpoint on a token file\n"
               "  bench CONFIG [--steps N] [--threads K] [--set ...]\n"
               "        training throughput on synthetic tokens, with the machine's sgemm speed\n"
               "  schedule --pp P --micro-batches M [--vpp V] [--schedule S] [--costs F,B,W] [--json]\n"
               "        a pipeline schedule's timeline, deadlock check, bubble and peak memory (simulated)\n"
               "  plan CONFIG --gpu h100|a100|cpu [--gpus N] [--search] [--set ...] [--json]\n"
               "        memory per rank and step time of a layout, or the best layouts of N devices\n"
               "  sweep SWEEP.json [--dry-run] [--out DIR] [--threads N] [--set ...]\n"
               "        a grid of training runs (model sizes, layouts, learning rates), resumable, with a summary\n"
               "  tokenize train|encode|decode ...\n"
               "        byte-level BPE: train a tokenizer, encode text to token files, decode\n"
               "  data info|dump PATH ...\n"
               "        inspect a token file (llm.c .bin or Megatron .bin/.idx)\n"
               "  config-help\n"
               "        every config key with its type, default, range and meaning\n"
               "\n"
               "`trident <command> --help` shows a command's options.\n");
}

int main(int argc, char **argv) {
    /* under mpirun stdout is a pipe: line-buffer it so that log lines arrive
     * as they happen and survive a crashing rank */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "train")) return tri_cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "sample")) return tri_cmd_sample(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return tri_cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return tri_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "schedule")) return tri_cmd_schedule(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return tri_cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "sweep")) return tri_cmd_sweep(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return tri_cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "data")) return tri_cmd_data(argc - 1, argv + 1);
    if (!strcmp(cmd, "config-help")) {
        tri_config_help(stdout);
        return 0;
    }
    tri_error("unknown command '%s' (try `trident --help`)", cmd);
    return 2;
}
